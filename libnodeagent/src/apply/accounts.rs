//! The account databases (`/etc/passwd`, `shadow`, `group`, `gshadow`, `subuid`, `subgid`)
//! written natively, as systemd-sysusers does, instead of through `useradd`/`groupadd`/
//! `usermod`/`chpasswd` processes (4 processes and ~20 syncs per user there; here one batch:
//! the changed files synced together, then `/etc` once).
//!
//! Semantics are shadow-utils 4.13's (Debian 12's, the conformance oracle): `lckpwdf`'s
//! lock, uid/gid/subordinate-id allocation, the fields of new entries, the home from the
//! skeleton, system accounts, `no_user_group`, `expiredate` and the mail spool included. It is
//! the only way users and groups are made: no shadow tool runs; a user `useradd` would refuse
//! is refused with useradd's message ([`Accounts::add_user`]).
//!
//! Crash order: every changed file is staged and synced first, then renamed in the order
//! shadow, gshadow, subuid, subgid, group, passwd. A kill between two renames leaves entries
//! in the secondary files only; a user is in `/etc/passwd` only once everything else of it
//! is in place, and the re-run replaces the leftovers (see `add_user`, `add_group`).

use super::Target;
use crate::base::error::{Error, Result, Stage};
use crate::base::fsio;
use crate::plan::UserSpec;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// glibc's `lckpwdf` waits 15 s for the lock; so does this.
const LOCK_WAIT: Duration = Duration::from_secs(15);

/// `lckpwdf` semantics: an fcntl write lock on the whole of `/etc/.pwd.lock` (created 0600),
/// the lock every shadow tool takes before touching the databases. Released when dropped.
#[derive(Debug)]
pub struct PwLock {
    _file: File,
}

fn lock(t: &Target) -> Result<PwLock> {
    const PLACE: &str = "/etc/.pwd.lock";
    let path = t.path(PLACE)?;
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| Error::io(Stage::Apply, PLACE, "open", e))?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        // SAFETY: a zeroed flock is a valid value; the fields set are the ones F_SETLK reads.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as _;
        fl.l_whence = libc::SEEK_SET as _;
        // SAFETY: fd is open for the call's duration; fl is a valid flock.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) } == 0 {
            return Ok(PwLock { _file: file });
        }
        let e = std::io::Error::last_os_error();
        let busy = matches!(
            e.raw_os_error(),
            Some(libc::EACCES | libc::EAGAIN | libc::EINTR)
        );
        if !busy {
            return Err(Error::io(Stage::Apply, PLACE, "lock", e));
        }
        if Instant::now() >= deadline {
            return Err(Error::timeout(
                Stage::Apply,
                PLACE,
                "another program holds the account database lock (waited 15 s)",
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One database file: its lines as read, and its mode and owner to keep.
#[derive(Debug)]
struct Table {
    file: &'static str,
    path: PathBuf,
    lines: Vec<String>,
    /// mode, uid, gid; `None`: the image has no such file (nothing is written to it).
    meta: Option<(u32, u32, u32)>,
    /// The lines as read: a file is written only when they changed.
    orig: Vec<String>,
}

impl Table {
    fn load(t: &Target, file: &'static str) -> Result<Table> {
        let path = t.path(file)?;
        let (lines, meta) = match std::fs::read_to_string(&path) {
            Ok(text) => {
                let m =
                    std::fs::metadata(&path).map_err(|e| Error::io(Stage::Apply, file, "", e))?;
                (
                    text.lines().map(String::from).collect(),
                    Some((m.mode() & 0o7777, m.uid(), m.gid())),
                )
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Vec::new(), None),
            Err(e) => return Err(Error::io(Stage::Apply, file, "read", e)),
        };
        Ok(Table {
            file,
            path,
            orig: lines.clone(),
            lines,
            meta,
        })
    }

    fn exists(&self) -> bool {
        self.meta.is_some()
    }

    fn changed(&self) -> bool {
        self.lines != self.orig
    }

    /// The fields of `name`'s first line (the shadow tools' lookups take the first).
    fn get(&self, name: &str) -> Option<Vec<&str>> {
        self.lines
            .iter()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f.first() == Some(&name))
    }

    fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.lines
            .iter()
            .filter_map(|l| l.split(':').nth(2).and_then(|x| x.parse().ok()))
    }

    /// Replace `name`'s first line, or append one.
    fn set(&mut self, name: &str, line: String) {
        let at = self
            .lines
            .iter()
            .position(|l| l.split(':').next() == Some(name));
        match at.and_then(|i| self.lines.get_mut(i)) {
            Some(l) => *l = line,
            None => self.lines.push(line),
        }
    }

    /// Drop every line of `name`.
    fn remove(&mut self, name: &str) {
        self.lines.retain(|l| l.split(':').next() != Some(name));
    }

    /// Add `member` to the member list (field `field`) of `name`'s line, once.
    fn add_member(&mut self, name: &str, field: usize, member: &str) {
        let Some(mut f) = self
            .get(name)
            .map(|f| f.iter().map(|s| (*s).to_string()).collect::<Vec<String>>())
        else {
            return;
        };
        f.resize(f.len().max(field + 1), String::new());
        let Some(list) = f.get_mut(field) else {
            return;
        };
        if list.split(',').any(|m| m == member) {
            return;
        }
        if !list.is_empty() {
            list.push(',');
        }
        list.push_str(member);
        self.set(name, f.join(":"));
    }
}

/// `KEY VALUE` lines of login.defs and `KEY=VALUE` lines of /etc/default/useradd.
#[derive(Debug, Default)]
struct Defs {
    login: HashMap<String, String>,
    useradd: HashMap<String, String>,
}

impl Defs {
    fn load(t: &Target) -> Defs {
        let read = |p: &str| t.path(p).ok().and_then(|p| std::fs::read_to_string(p).ok());
        let mut d = Defs::default();
        if let Some(text) = read("/etc/login.defs") {
            for l in text.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
                if let Some((k, v)) = l.split_once(char::is_whitespace) {
                    d.login.insert(k.to_string(), v.trim().to_string());
                }
            }
        }
        for l in read("/etc/default/useradd").unwrap_or_default().lines() {
            if let Some((k, v)) = l.trim().split_once('=')
                && !k.starts_with('#')
            {
                d.useradd.insert(k.trim().to_string(), v.trim().to_string());
            }
        }
        d
    }

    /// A login.defs number (shadow's getdef_long: decimal, 0x hex or 0 octal).
    fn num(&self, key: &str, default: i64) -> i64 {
        self.login
            .get(key)
            .and_then(|v| parse_c_number(v))
            .unwrap_or(default)
    }

    fn id(&self, key: &str, default: u32) -> u32 {
        u32::try_from(self.num(key, i64::from(default))).unwrap_or(default)
    }

    /// A shadow aging field: the login.defs value, empty when unset (-1).
    fn aging(&self, key: &str) -> String {
        match self.num(key, -1) {
            n if n < 0 => String::new(),
            n => n.to_string(),
        }
    }

    /// `[KIND_MIN, KIND_MAX]` (`KIND`: UID or GID) of regular accounts, or of system ones
    /// (`SYS_KIND_MIN` 101 to `SYS_KIND_MAX`, by default one below `KIND_MIN`).
    fn range(&self, kind: &str, system: bool) -> (u32, u32) {
        let min = self.id(&format!("{kind}_MIN"), 1000);
        if system {
            let max = self.id(&format!("SYS_{kind}_MAX"), min.saturating_sub(1));
            (self.id(&format!("SYS_{kind}_MIN"), 101), max)
        } else {
            (min, self.id(&format!("{kind}_MAX"), 60000))
        }
    }

    /// USERGROUPS_ENAB: a new user gets a group of its own (shadow's default without
    /// login.defs is no).
    fn user_groups(&self) -> bool {
        self.login
            .get("USERGROUPS_ENAB")
            .is_some_and(|v| v == "yes")
    }

    /// /etc/default/useradd's CREATE_MAIL_SPOOL (Debian's useradd: no when unset).
    fn mail_spool(&self) -> bool {
        self.useradd
            .get("CREATE_MAIL_SPOOL")
            .is_some_and(|v| v.eq_ignore_ascii_case("yes"))
    }

    /// useradd's home mode: HOME_MODE, else 0777 without UMASK's bits.
    fn home_mode(&self) -> u32 {
        let octal = |k: &str| {
            self.login
                .get(k)
                .and_then(|v| u32::from_str_radix(v.trim_start_matches("0o"), 8).ok())
        };
        octal("HOME_MODE").unwrap_or_else(|| 0o777 & !octal("UMASK").unwrap_or(0o022)) & 0o7777
    }
}

fn parse_c_number(v: &str) -> Option<i64> {
    let (neg, v) = match v.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, v),
    };
    let n = if let Some(h) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else if v.len() > 1 && v.starts_with('0') {
        i64::from_str_radix(v.get(1..)?, 8).ok()?
    } else {
        v.parse().ok()?
    };
    Some(if neg { -n } else { n })
}

/// shadow's find_new_uid/find_new_gid (4.13 to 4.17). A regular account: `preferred` if free
/// and in range, else one more than the highest id in `[min, max]` (at least `min`), else
/// the lowest free one. A system account counts down: `preferred` if free and at most `max`,
/// else one less than the lowest id in the range (from `max` when that is below `min`), else
/// the highest free one. 65535 is never given (16-bit `-1`). `None`: the range is full.
fn next_id(
    used: &[u32],
    (min, max): (u32, u32),
    preferred: Option<u32>,
    system: bool,
) -> Option<u32> {
    let taken = |id: u32| id == u32::from(u16::MAX) || used.contains(&id);
    let lowest_preferred = if system { 1 } else { min };
    if let Some(p) = preferred.filter(|p| (lowest_preferred..=max).contains(p) && !taken(*p)) {
        return Some(p);
    }
    let in_range = || used.iter().copied().filter(|id| (min..=max).contains(id));
    if system {
        let start = in_range().min().map_or(max, |l| l - 1);
        let start = if start < min { max } else { start };
        return (min..=start)
            .rev()
            .chain((min..=max).rev())
            .find(|id| !taken(*id));
    }
    let highest = in_range().max().map_or(min, |h| h.saturating_add(1));
    let highest = if highest > max { min } else { highest };
    (highest..=max).chain(min..=max).find(|id| !taken(*id))
}

/// shadow's find_free_range: the first `count` ids from `min` not overlapping a listed range
/// (`NAME:START:COUNT` lines), ending at most at `max`.
fn free_range(table: &Table, min: u64, max: u64, count: u64) -> Option<u64> {
    let mut ranges: Vec<(u64, u64)> = table
        .lines
        .iter()
        .filter_map(|l| {
            let mut f = l.split(':').skip(1);
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect();
    ranges.sort_unstable();
    let mut low = min;
    for (start, n) in ranges {
        if start.saturating_add(n) <= low {
            continue;
        }
        if low.saturating_add(count) <= start {
            break;
        }
        low = start.saturating_add(n);
    }
    (low.saturating_add(count).saturating_sub(1) <= max).then_some(low)
}

/// Days since 1970, as shadow stamps a password change.
fn today() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() / 86_400)
        .unwrap_or(0)
}

/// A new user's entries, for what follows the databases: its home and mail spool.
#[derive(Debug, Clone)]
pub struct NewUser {
    pub uid: u32,
    pub gid: u32,
    pub home: String,
    /// useradd's mode for the home (HOME_MODE / UMASK), from the defaults already read.
    pub home_mode: u32,
    /// `CREATE_MAIL_SPOOL=yes`: the spool file to make (directory, gid, mode).
    pub mail: Option<(String, u32, u32)>,
}

/// Why `useradd` would refuse a user, in its words; the kind says what is wrong.
pub type Refusal = (crate::base::error::ErrorKind, String);

fn refuse<T>(kind: crate::base::error::ErrorKind, msg: String) -> std::result::Result<T, Refusal> {
    Err((kind, msg))
}

/// The databases of a target, read under the lock; changes are made in memory and written
/// by [`Accounts::commit`].
#[derive(Debug)]
pub struct Accounts {
    _lock: PwLock,
    passwd: Table,
    shadow: Table,
    group: Table,
    gshadow: Table,
    subuid: Table,
    subgid: Table,
    defs: Defs,
}

impl Accounts {
    /// Lock and read. An image without /etc/passwd or /etc/group has no user database to
    /// add to (useradd fails there too); /etc/shadow, gshadow, subuid, subgid and login.defs
    /// are optional, as for the tools (without shadow the password lives in /etc/passwd,
    /// without login.defs shadow's compiled-in defaults apply).
    pub fn open(t: &Target) -> Result<Accounts> {
        for p in ["/etc/passwd", "/etc/group"] {
            if !t.path(p).is_ok_and(|p| p.is_file()) {
                return Err(Error::of(
                    crate::base::error::ErrorKind::NotFound,
                    Stage::Apply,
                    p,
                    "the image has no such user database file",
                ));
            }
        }
        let lock = lock(t)?;
        Ok(Accounts {
            _lock: lock,
            passwd: Table::load(t, "/etc/passwd")?,
            shadow: Table::load(t, "/etc/shadow")?,
            group: Table::load(t, "/etc/group")?,
            gshadow: Table::load(t, "/etc/gshadow")?,
            subuid: Table::load(t, "/etc/subuid")?,
            subgid: Table::load(t, "/etc/subgid")?,
            defs: Defs::load(t),
        })
    }

    pub fn has_user(&self, name: &str) -> bool {
        self.passwd.get(name).is_some()
    }

    pub fn has_group(&self, name: &str) -> bool {
        self.group.get(name).is_some()
    }

    /// The gid of a group given by name or number (useradd's getgr_nam_gid).
    fn group_id(&self, g: &str) -> Option<u32> {
        if let Some(f) = self.group.get(g) {
            return f.get(2)?.parse().ok();
        }
        let gid: u32 = g.parse().ok()?;
        self.group.ids().any(|id| id == gid).then_some(gid)
    }

    /// `groupadd NAME` (`--system` for a system user's own group): the next gid,
    /// `NAME:x:GID:` and `NAME:!::` in gshadow (replacing a gshadow line a killed run left
    /// without its group line). `preferred`: the gid to take when free (a user group takes
    /// the user's uid). `None`: the range is full.
    fn new_group(&mut self, name: &str, system: bool, preferred: Option<u32>) -> Option<u32> {
        let used: Vec<u32> = self.group.ids().collect();
        let gid = next_id(&used, self.defs.range("GID", system), preferred, system)?;
        if self.gshadow.exists() {
            self.gshadow.set(name, format!("{name}:!::"));
        }
        self.group.set(name, format!("{name}:x:{gid}:"));
        Some(gid)
    }

    /// `groupadd NAME`. `None`: no free gid.
    pub fn add_group(&mut self, name: &str) -> Option<u32> {
        self.new_group(name, false, None)
    }

    /// Drop a group (a user's own group that a killed run left without its user).
    pub fn remove_group(&mut self, name: &str) {
        self.group.remove(name);
        self.gshadow.remove(name);
    }

    /// `usermod -a -G GROUP MEMBER`: the member in /etc/group and, when the group has a line
    /// there, in /etc/gshadow; once.
    pub fn add_member(&mut self, group: &str, member: &str) {
        self.gshadow.add_member(group, 3, member);
        self.group.add_member(group, 3, member);
    }

    /// shadow's inactive-days field for `u`: its own, else useradd's INACTIVE default; a
    /// negative number is empty.
    fn inactive_field(&self, u: &UserSpec) -> std::result::Result<String, Refusal> {
        let v = u
            .inactive
            .as_deref()
            .or(self.defs.useradd.get("INACTIVE").map(String::as_str));
        match v.map(|v| v.trim().parse::<i64>()) {
            None => Ok(String::new()),
            Some(Ok(n)) if n < 0 => Ok(String::new()),
            Some(Ok(n)) => Ok(n.to_string()),
            Some(Err(_)) => refuse(
                crate::base::error::ErrorKind::Invalid,
                format!("invalid numeric argument '{}'", v.unwrap_or_default()),
            ),
        }
    }

    /// The primary gid of a new user: `--gid`, else `None` for a group of its own
    /// (USERGROUPS_ENAB, no `no_user_group`), else /etc/default/useradd's GROUP (100 when
    /// unset or unknown).
    fn primary_gid(&self, u: &UserSpec) -> std::result::Result<Option<u32>, Refusal> {
        use crate::base::error::ErrorKind;
        if let Some(g) = &u.primary_group {
            return match self.group_id(g) {
                Some(gid) => Ok(Some(gid)),
                None => refuse(ErrorKind::NotFound, format!("group '{g}' does not exist")),
            };
        }
        if self.defs.user_groups() && !u.no_user_group {
            if self.has_group(&u.name) {
                return refuse(
                    ErrorKind::Conflict,
                    format!(
                        "group {} exists - if you want to add this user to that group, use -g.",
                        u.name
                    ),
                );
            }
            return Ok(None);
        }
        let gid = self
            .defs
            .useradd
            .get("GROUP")
            .and_then(|g| self.group_id(g));
        Ok(Some(gid.unwrap_or(100)))
    }

    /// The shell, home, inactive-days and expiry fields of a new user, as useradd checks
    /// and defaults them.
    fn fields(
        &self,
        u: &UserSpec,
    ) -> std::result::Result<(String, String, String, String), Refusal> {
        use crate::base::error::ErrorKind;
        let d = &self.defs;
        let shell = match &u.shell {
            Some(s) if s.is_empty() || s.starts_with('/') => s.clone(),
            Some(s) => return refuse(ErrorKind::Invalid, format!("invalid shell '{s}'")),
            None => d.useradd.get("SHELL").cloned().unwrap_or_default(),
        };
        let home = match &u.homedir {
            Some(h) if h.starts_with('/') => h.clone(),
            Some(h) => return refuse(ErrorKind::Invalid, format!("invalid home directory '{h}'")),
            None => format!(
                "{}/{}",
                d.useradd.get("HOME").map_or("/home", String::as_str),
                u.name
            ),
        };
        // A system account gets no aging, inactivity or expiry (useradd's `rflg`).
        let (inactive, expire) = if u.system {
            (String::new(), String::new())
        } else {
            let expire = u
                .expiredate
                .as_deref()
                .or(d.useradd.get("EXPIRE").map(String::as_str));
            (self.inactive_field(u)?, expire_field(expire)?)
        };
        Ok((shell, home, inactive, expire))
    }

    /// `useradd` of a new user as cloud-init calls it (`-m`/`-M`, --comment, --home, --gid,
    /// --shell, --inactive, --expiredate, --uid, --groups, --system, --no-user-group; the
    /// groups it names exist or were made before), with shadow 4.13's entries; a user
    /// useradd would refuse is refused with its message.
    pub fn add_user(&mut self, u: &UserSpec) -> std::result::Result<NewUser, Refusal> {
        use crate::base::error::ErrorKind;
        let (shell, home, inactive, expire) = self.fields(u)?;
        if let Some(g) = u.groups.iter().find(|g| self.group_id(g).is_none()) {
            return refuse(ErrorKind::NotFound, format!("group '{g}' does not exist"));
        }
        let gid = self.primary_gid(u)?;
        let d = &self.defs;
        let used: Vec<u32> = self.passwd.ids().collect();
        let uid = match u.uid {
            Some(id) if used.contains(&id) => {
                return refuse(ErrorKind::Conflict, format!("UID {id} is not unique"));
            }
            Some(id) => id,
            None => match next_id(&used, d.range("UID", u.system), None, u.system) {
                Some(id) => id,
                None => {
                    return refuse(
                        ErrorKind::Conflict,
                        "Can't get unique UID (no more available UIDs)".into(),
                    );
                }
            },
        };
        let sub = self.subordinate_ids(u, uid)?;
        let d = &self.defs;
        let aging = |k: &str| if u.system { String::new() } else { d.aging(k) };
        let shadow = format!(
            "{}:!:{}:{}:{}:{}:{inactive}:{expire}:",
            u.name,
            today(),
            aging("PASS_MIN_DAYS"),
            aging("PASS_MAX_DAYS"),
            aging("PASS_WARN_AGE"),
        );
        let gid = match gid {
            Some(g) => g,
            None => match self.new_group(&u.name, u.system, Some(uid)) {
                Some(g) => g,
                None => {
                    return refuse(
                        ErrorKind::Conflict,
                        "Can't get unique GID (no more available GIDs)".into(),
                    );
                }
            },
        };
        // Without /etc/shadow the password field of /etc/passwd holds the (locked) password.
        let pw = if self.shadow.exists() { "x" } else { "!" };
        let passwd = format!(
            "{}:{pw}:{uid}:{gid}:{}:{home}:{shell}",
            u.name,
            u.gecos.as_deref().unwrap_or("")
        );
        if self.shadow.exists() {
            self.shadow.set(&u.name, shadow);
        }
        for (t, r) in [(&mut self.subuid, sub.0), (&mut self.subgid, sub.1)] {
            if let Some((start, count)) = r {
                t.set(&u.name, format!("{}:{start}:{count}", u.name));
            }
        }
        for g in &u.groups {
            self.add_member(g, &u.name);
        }
        self.passwd.set(&u.name, passwd);
        let mail = self.defs.mail_spool().then(|| {
            let dir = self
                .defs
                .login
                .get("MAIL_DIR")
                .cloned()
                .unwrap_or_else(|| "/var/mail".into());
            match self.group_id("mail") {
                Some(mail_gid) => (dir, mail_gid, 0o660),
                None => (dir, gid, 0o600),
            }
        });
        Ok(NewUser {
            uid,
            gid,
            home,
            home_mode: self.defs.home_mode(),
            mail,
        })
    }

    /// The subordinate uid and gid ranges useradd gives a regular user whose uid is in
    /// `UID_MIN..=UID_MAX` (when the image has /etc/subuid, /etc/subgid); ranges a killed run
    /// gave this not yet existing user are given again.
    #[allow(clippy::type_complexity)]
    fn subordinate_ids(
        &mut self,
        u: &UserSpec,
        uid: u32,
    ) -> std::result::Result<(Option<(u64, u64)>, Option<(u64, u64)>), Refusal> {
        self.subuid.remove(&u.name);
        self.subgid.remove(&u.name);
        let d = &self.defs;
        let (min, max) = d.range("UID", false);
        let wanted = !u.system && (min..=max).contains(&uid);
        let sub = |t: &Table, k: &str| -> std::result::Result<Option<(u64, u64)>, Refusal> {
            let count = u64::try_from(d.num(&format!("SUB_{k}_COUNT"), 65536)).unwrap_or(0);
            if !(wanted && t.exists() && count > 0) {
                return Ok(None);
            }
            let lo = u64::try_from(d.num(&format!("SUB_{k}_MIN"), 100_000)).unwrap_or(100_000);
            let hi = u64::try_from(d.num(&format!("SUB_{k}_MAX"), 600_100_000)).unwrap_or(0);
            match free_range(t, lo, hi, count) {
                Some(s) => Ok(Some((s, count))),
                None => refuse(
                    crate::base::error::ErrorKind::Conflict,
                    format!(
                        "can't create subordinate {} IDs",
                        if k == "UID" { "user" } else { "group" }
                    ),
                ),
            }
        };
        Ok((sub(&self.subuid, "UID")?, sub(&self.subgid, "GID")?))
    }

    /// The password field of `name` and where it lives: its shadow entry when /etc/passwd
    /// points there (`x`), else /etc/passwd's own field (an image without shadow).
    fn password_fields(&self, name: &str) -> Option<(bool, Vec<String>)> {
        let p = self.passwd.get(name)?;
        let (in_shadow, f) = if p.get(1) == Some(&"x") && self.shadow.exists() {
            (true, self.shadow.get(name)?)
        } else {
            (false, p)
        };
        let mut f: Vec<String> = f.iter().map(|s| (*s).into()).collect();
        f.resize(f.len().max(if in_shadow { 9 } else { 7 }), String::new());
        Some((in_shadow, f))
    }

    fn put_password_fields(&mut self, name: &str, (in_shadow, f): (bool, Vec<String>)) {
        let t = if in_shadow {
            &mut self.shadow
        } else {
            &mut self.passwd
        };
        t.set(name, f.join(":"));
    }

    /// `chpasswd -e`: the hash, and today as the last change (in shadow). `false`: no such user.
    pub fn set_password(&mut self, name: &str, hash: &str) -> bool {
        let Some((in_shadow, mut f)) = self.password_fields(name) else {
            return false;
        };
        if let Some(pw) = f.get_mut(1) {
            *pw = hash.to_string();
        }
        if in_shadow && let Some(day) = f.get_mut(2) {
            *day = today().to_string();
        }
        self.put_password_fields(name, (in_shadow, f));
        true
    }

    /// The user's password field as it is now (`None`: no such user).
    pub fn password(&self, name: &str) -> Option<String> {
        self.password_fields(name)
            .and_then(|(_, f)| f.get(1).cloned())
    }

    /// `passwd -l`: `!` before the password unless it has one. `false`: no such user.
    pub fn lock_password(&mut self, name: &str) -> bool {
        let Some((s, mut f)) = self.password_fields(name) else {
            return false;
        };
        if let Some(pw) = f.get_mut(1)
            && !pw.starts_with('!')
        {
            pw.insert(0, '!');
            self.put_password_fields(name, (s, f));
        }
        true
    }

    /// `passwd -u`: one leading `!` removed, unless that leaves the password empty (passwd
    /// refuses: "unlocking the password would result in a passwordless account").
    pub fn unlock_password(&mut self, name: &str) -> bool {
        let Some((s, mut f)) = self.password_fields(name) else {
            return false;
        };
        if let Some(pw) = f.get_mut(1)
            && pw.len() > 1
            && pw.starts_with('!')
        {
            pw.remove(0);
            self.put_password_fields(name, (s, f));
        }
        true
    }

    /// Write every changed file (see the module doc for the order) and release the lock.
    pub fn commit(self, place: &str) -> Result<()> {
        let tables = [
            &self.shadow,
            &self.gshadow,
            &self.subuid,
            &self.subgid,
            &self.group,
            &self.passwd,
        ];
        let mut staged = Vec::new();
        for t in tables.into_iter().filter(|t| t.changed()) {
            let Some((mode, uid, gid)) = t.meta else {
                continue;
            };
            let mut text = t.lines.join("\n");
            text.push('\n');
            let opts = fsio::Options::new(mode).owner(uid, gid);
            match fsio::stage_beside(staged.last(), &t.path, text.as_bytes(), &opts) {
                Ok(s) => staged.push(s),
                Err(e) => {
                    fsio::discard(staged);
                    return Err(Error::caused(
                        Stage::Apply,
                        format!("{place}: {}", t.file),
                        e,
                    ));
                }
            }
        }
        fsio::commit(staged).map_err(|e| Error::caused(Stage::Apply, place, e))
    }
}

/// useradd's expiry field: `YYYY-MM-DD` as days since 1970 (UTC), a number of days as
/// given, `-1` or empty as none.
fn expire_field(v: Option<&str>) -> std::result::Result<String, Refusal> {
    let Some(v) = v.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(String::new());
    };
    if let Ok(n) = v.parse::<i64>() {
        return Ok(if n < 0 { String::new() } else { n.to_string() });
    }
    let date = time::Date::parse(v, time::macros::format_description!("[year]-[month]-[day]"));
    match date {
        Ok(d) => Ok(
            (d.to_julian_day() - time::macros::date!(1970 - 01 - 01).to_julian_day()).to_string(),
        ),
        Err(_) => refuse(
            crate::base::error::ErrorKind::Invalid,
            format!("invalid date '{v}'"),
        ),
    }
}

/// useradd's mode for a home on `t` (HOME_MODE / UMASK of its login.defs).
pub fn home_mode(t: &Target) -> u32 {
    Defs::load(t).home_mode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_as_shadow_allocates_them() {
        let r = (1000, 60000);
        // One more than the highest in range.
        assert_eq!(next_id(&[0, 65534, 1000, 1001], r, None, false), Some(1002));
        // Nothing in range: the minimum.
        assert_eq!(next_id(&[0, 65534], r, None, false), Some(1000));
        // A free preferred id wins; a taken or out-of-range one does not.
        assert_eq!(next_id(&[1000], r, Some(1500), false), Some(1500));
        assert_eq!(next_id(&[1000, 2000], r, Some(2000), false), Some(2001));
        assert_eq!(next_id(&[], r, Some(500), false), Some(1000));
        // The top taken: the lowest gap.
        assert_eq!(
            next_id(&[1000, 1002, 1003], (1000, 1003), None, false),
            Some(1001)
        );
        assert_eq!(next_id(&[1000, 1001], (1000, 1001), None, false), None);
    }

    #[test]
    fn system_ids_count_down_as_shadow_allocates_them() {
        let r = (101, 999);
        // Debian 12's root (998 used): one below the lowest in range.
        assert_eq!(next_id(&[0, 100, 998, 65534], r, None, true), Some(997));
        // Debian 13's (101 used too): below the range, so from the top down.
        assert_eq!(next_id(&[0, 100, 101, 998], r, None, true), Some(999));
        assert_eq!(next_id(&[0, 101, 998, 999], r, None, true), Some(997));
        // The user group's gid: the uid when free, even below the range.
        assert_eq!(next_id(&[101, 998, 999], r, Some(997), true), Some(997));
        assert_eq!(
            next_id(&[101, 997, 998, 999], r, Some(997), true),
            Some(996)
        );
        assert_eq!(next_id(&[], r, Some(50), true), Some(50));
        assert_eq!(next_id(&[101, 102], (101, 102), None, true), None);
    }

    #[test]
    fn subordinate_ranges_first_fit() {
        let t = |lines: &[&str]| Table {
            file: "/etc/subuid",
            path: PathBuf::new(),
            lines: lines.iter().map(|s| s.to_string()).collect(),
            meta: Some((0o644, 0, 0)),
            orig: Vec::new(),
        };
        assert_eq!(free_range(&t(&[]), 100000, 600100000, 65536), Some(100000));
        assert_eq!(
            free_range(&t(&["a:100000:65536"]), 100000, 600100000, 65536),
            Some(165536)
        );
        assert_eq!(
            free_range(
                &t(&["b:231072:65536", "a:100000:65536"]),
                100000,
                600100000,
                65536
            ),
            Some(165536)
        );
        assert_eq!(
            free_range(&t(&["a:100000:65536"]), 100000, 165535, 65536),
            None
        );
    }

    #[test]
    fn login_defs_numbers() {
        assert_eq!(parse_c_number("1000"), Some(1000));
        assert_eq!(parse_c_number("0x10"), Some(16));
        assert_eq!(parse_c_number("010"), Some(8));
        assert_eq!(parse_c_number("-1"), Some(-1));
        assert_eq!(parse_c_number("x"), None);
        let mut d = Defs::default();
        d.login.insert("UMASK".into(), "027".into());
        assert_eq!(d.home_mode(), 0o750);
        d.login.insert("HOME_MODE".into(), "0700".into());
        assert_eq!(d.home_mode(), 0o700);
    }

    #[test]
    fn members_are_added_once_to_both_files() {
        let mut t = Table {
            file: "/etc/group",
            path: PathBuf::new(),
            lines: vec!["adm:x:4:".into(), "sudo:x:27:a".into()],
            meta: None,
            orig: Vec::new(),
        };
        t.add_member("adm", 3, "capv");
        t.add_member("adm", 3, "capv");
        t.add_member("sudo", 3, "capv");
        t.add_member("nogroup", 3, "capv");
        assert_eq!(t.lines, ["adm:x:4:capv", "sudo:x:27:a,capv"]);
        assert!(t.changed());
    }
}
