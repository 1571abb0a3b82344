//! The account databases (`/etc/passwd`, `shadow`, `group`, `gshadow`, `subuid`, `subgid`)
//! written natively, as systemd-sysusers does, instead of through `useradd`/`groupadd`/
//! `usermod`/`chpasswd` processes (4 processes and ~20 syncs per user there; here one batch:
//! the changed files synced together, then `/etc` once).
//!
//! Semantics are shadow-utils 4.13's (Debian 12's, the conformance oracle): `lckpwdf`'s
//! lock, uid/gid/subordinate-id allocation, the fields of new entries, the home from the
//! skeleton. What this does not do is left to the tools: [`Accounts::add_user`] answers
//! `None` for an account it would not make exactly as `useradd` does (system users,
//! `no_user_group`, `expiredate`, a mail spool, a name or id the tool would refuse).
//!
//! Crash order: every changed file is staged and synced first, then renamed in the order
//! shadow, gshadow, subuid, subgid, group, passwd. A kill between two renames leaves entries
//! in the secondary files only; a user is in `/etc/passwd` only once everything else of it
//! is in place, and the re-run replaces the leftovers (see `add_user`, `add_group`).

use super::Target;
use crate::confine::Dir;
use crate::error::{Error, Result, Stage};
use crate::fsio;
use crate::plan::UserSpec;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;
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
            return Err(Error::new(
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
    /// The image has a login.defs (without it the tools' compiled-in defaults apply).
    has_login_defs: bool,
}

impl Defs {
    fn load(t: &Target) -> Defs {
        let read = |p: &str| t.path(p).ok().and_then(|p| std::fs::read_to_string(p).ok());
        let mut d = Defs::default();
        if let Some(text) = read("/etc/login.defs") {
            d.has_login_defs = true;
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

/// shadow's find_new_uid/find_new_gid for a non-system account: `preferred` if free and in
/// range, else one more than the highest id in `[min, max]` (at least `min`), else the
/// lowest free one. `None`: the range is full.
fn next_id(used: &[u32], min: u32, max: u32, preferred: Option<u32>) -> Option<u32> {
    let taken = |id: u32| used.contains(&id);
    if let Some(p) = preferred.filter(|p| (min..=max).contains(p) && !taken(*p)) {
        return Some(p);
    }
    let highest = used
        .iter()
        .filter(|id| (min..=max).contains(*id))
        .map(|id| id.saturating_add(1))
        .max()
        .unwrap_or(min)
        .max(min);
    (highest..=max)
        .chain(min..highest.min(max.saturating_add(1)))
        .find(|id| !taken(*id))
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

/// A new user's entries, for the home directory after the databases are written.
#[derive(Debug, Clone)]
pub struct NewUser {
    pub uid: u32,
    pub gid: u32,
    pub home: String,
    /// useradd's mode for the home (HOME_MODE / UMASK), from the defaults already read.
    pub home_mode: u32,
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
    /// Lock and read. `None`: the image has no /etc/passwd, /etc/group or /etc/shadow, or no
    /// login.defs: the tools decide what such an image gets.
    pub fn open(t: &Target) -> Result<Option<Accounts>> {
        let present = |p: &str| t.path(p).is_ok_and(|p| p.is_file());
        if ![
            "/etc/passwd",
            "/etc/group",
            "/etc/shadow",
            "/etc/login.defs",
        ]
        .iter()
        .all(|p| present(p))
        {
            return Ok(None);
        }
        let lock = lock(t)?;
        Ok(Some(Accounts {
            _lock: lock,
            passwd: Table::load(t, "/etc/passwd")?,
            shadow: Table::load(t, "/etc/shadow")?,
            group: Table::load(t, "/etc/group")?,
            gshadow: Table::load(t, "/etc/gshadow")?,
            subuid: Table::load(t, "/etc/subuid")?,
            subgid: Table::load(t, "/etc/subgid")?,
            defs: Defs::load(t),
        }))
    }

    pub fn has_user(&self, name: &str) -> bool {
        self.passwd.get(name).is_some()
    }

    pub fn has_group(&self, name: &str) -> bool {
        self.group.get(name).is_some()
    }

    /// `groupadd NAME`: the next gid, `NAME:x:GID:` and `NAME:!::` in gshadow (replacing a
    /// gshadow line a killed run left without its group line).
    pub fn add_group(&mut self, name: &str) -> Option<u32> {
        let used: Vec<u32> = self.group.ids().collect();
        let gid = next_id(
            &used,
            self.defs.id("GID_MIN", 1000),
            self.defs.id("GID_MAX", 60000),
            None,
        )?;
        self.put_group(name, gid);
        Some(gid)
    }

    fn put_group(&mut self, name: &str, gid: u32) {
        if self.gshadow.exists() {
            self.gshadow.set(name, format!("{name}:!::"));
        }
        self.group.set(name, format!("{name}:x:{gid}:"));
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

    /// Members of a group in /etc/group and (when it has a line there) /etc/gshadow.
    pub fn is_member(&self, group: &str, member: &str) -> bool {
        let has = |t: &Table, must: bool| {
            t.get(group).map_or(!must, |f| {
                f.get(3)
                    .is_some_and(|ms| ms.split(',').any(|m| m == member))
            })
        };
        has(&self.group, true) && has(&self.gshadow, false)
    }

    /// Whether `u` is a new user whose entries this writer makes exactly as useradd would:
    /// no system user, user group on, no mail spool or expiry defaults, clean fields.
    fn made_as_useradd_would(&self, u: &UserSpec) -> bool {
        let d = &self.defs;
        let clean = |v: &Option<String>| v.as_ref().is_none_or(|v| !v.contains([':', '\n']));
        let mail = d
            .useradd
            .get("CREATE_MAIL_SPOOL")
            .map(|v| v.to_ascii_lowercase());
        !(u.system
            || u.no_user_group
            || u.expiredate.is_some()
            || !d.has_login_defs
            || d.login.get("USERGROUPS_ENAB").map(String::as_str) != Some("yes")
            || mail.as_deref() == Some("yes")
            || d.useradd.get("EXPIRE").is_some_and(|v| !v.is_empty())
            || !(clean(&u.gecos) && clean(&u.homedir) && clean(&u.shell))
            || u.homedir.as_ref().is_some_and(|h| !h.starts_with('/'))
            || self.has_user(&u.name))
    }

    /// shadow's inactive-days field for `u`: its own, else useradd's INACTIVE default; a
    /// negative number is empty. `None`: not a number (useradd refuses it).
    fn inactive_field(&self, u: &UserSpec) -> Option<String> {
        let v = u
            .inactive
            .as_deref()
            .or(self.defs.useradd.get("INACTIVE").map(String::as_str));
        match v {
            None => Some(String::new()),
            Some(v) => match v.parse::<i64>().ok()? {
                n if n < 0 => Some(String::new()),
                n => Some(n.to_string()),
            },
        }
    }

    /// `useradd` of a new user as cloud-init calls it (`-m`/`-M`, --comment, --home, --gid,
    /// --shell, --inactive, --uid, --groups; the groups exist). `None`: not one this writer
    /// makes as useradd would; the caller runs useradd.
    pub fn add_user(&mut self, u: &UserSpec) -> Option<NewUser> {
        if !self.made_as_useradd_would(u) {
            return None;
        }
        let d = &self.defs;
        let shell = match &u.shell {
            Some(s) if s.is_empty() || s.starts_with('/') => s.clone(),
            Some(_) => return None,
            None => d.useradd.get("SHELL")?.clone(),
        };
        let inactive = self.inactive_field(u)?;
        let home = match &u.homedir {
            Some(h) => h.clone(),
            None => format!(
                "{}/{}",
                d.useradd.get("HOME").map_or("/home", String::as_str),
                u.name
            ),
        };
        let (uid_min, uid_max) = (d.id("UID_MIN", 1000), d.id("UID_MAX", 60000));
        let used: Vec<u32> = self.passwd.ids().collect();
        let uid = match u.uid {
            Some(id) if used.contains(&id) => return None,
            Some(id) => id,
            None => next_id(&used, uid_min, uid_max, None)?,
        };
        let gid = match &u.primary_group {
            Some(g) => self.group.get(g)?.get(2)?.parse().ok()?,
            None if self.has_group(&u.name) => return None,
            None => {
                let used: Vec<u32> = self.group.ids().collect();
                next_id(
                    &used,
                    d.id("GID_MIN", 1000),
                    d.id("GID_MAX", 60000),
                    Some(uid),
                )?
            }
        };
        if u.groups.iter().any(|g| !self.has_group(g)) {
            return None;
        }
        // Ranges a killed run gave this (not yet existing) user are given again.
        self.subuid.remove(&u.name);
        self.subgid.remove(&u.name);
        let subids = (uid_min..=uid_max).contains(&uid);
        let sub = |t: &Table, k: &str, min: u64, max: u64| {
            let count = u64::try_from(d.num(&format!("SUB_{k}_COUNT"), 65536)).unwrap_or(0);
            let min = u64::try_from(d.num(&format!("SUB_{k}_MIN"), min as i64)).ok()?;
            let max = u64::try_from(d.num(&format!("SUB_{k}_MAX"), max as i64)).ok()?;
            (subids && t.exists() && count > 0)
                .then(|| free_range(t, min, max, count).map(|s| (s, count)))
        };
        let subuid = sub(&self.subuid, "UID", 100_000, 600_100_000);
        let subgid = sub(&self.subgid, "GID", 100_000, 600_100_000);
        if matches!(subuid, Some(None)) || matches!(subgid, Some(None)) {
            return None;
        }
        let shadow = format!(
            "{}:!:{}:{}:{}:{}:{}::",
            u.name,
            today(),
            d.aging("PASS_MIN_DAYS"),
            d.aging("PASS_MAX_DAYS"),
            d.aging("PASS_WARN_AGE"),
            inactive
        );
        let passwd = format!(
            "{}:x:{uid}:{gid}:{}:{home}:{shell}",
            u.name,
            u.gecos.as_deref().unwrap_or("")
        );
        self.shadow.set(&u.name, shadow);
        for (t, r) in [(&mut self.subuid, subuid), (&mut self.subgid, subgid)] {
            if let Some(Some((start, count))) = r {
                t.set(&u.name, format!("{}:{start}:{count}", u.name));
            }
        }
        if u.primary_group.is_none() {
            self.put_group(&u.name, gid);
        }
        for g in &u.groups {
            self.add_member(g, &u.name);
        }
        self.passwd.set(&u.name, passwd);
        let home_mode = self.defs.home_mode();
        Some(NewUser {
            uid,
            gid,
            home,
            home_mode,
        })
    }

    /// The user's shadow entry, when its passwd entry points there (`x`): the entry
    /// `chpasswd -e` and `usermod --lock` change. `None`: leave it to the tools.
    fn shadow_fields(&self, name: &str) -> Option<Vec<String>> {
        if self.passwd.get(name)?.get(1) != Some(&"x") {
            return None;
        }
        let mut f: Vec<String> = self.shadow.get(name)?.iter().map(|s| (*s).into()).collect();
        f.resize(f.len().max(9), String::new());
        Some(f)
    }

    /// `chpasswd -e`: the hash, and today as the last change. `false`: not done here.
    pub fn set_password(&mut self, name: &str, hash: &str) -> bool {
        let Some(mut f) = self.shadow_fields(name) else {
            return false;
        };
        if let [_, pw, lstchg, ..] = f.as_mut_slice() {
            *pw = hash.to_string();
            *lstchg = today().to_string();
        }
        self.shadow.set(name, f.join(":"));
        true
    }

    /// `usermod --lock`: `!` before the password unless it has one. `false`: not done here.
    pub fn lock_password(&mut self, name: &str) -> bool {
        let Some(mut f) = self.shadow_fields(name) else {
            return false;
        };
        if let Some(pw) = f.get_mut(1)
            && !pw.starts_with('!')
        {
            pw.insert(0, '!');
            self.shadow.set(name, f.join(":"));
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
            match fsio::stage(&t.path, text.as_bytes(), &opts) {
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

/// useradd's mode for a home on `t` (HOME_MODE / UMASK of its login.defs).
pub fn home_mode(t: &Target) -> u32 {
    Defs::load(t).home_mode()
}

/// `useradd -m`'s home: made under a temporary name beside it with `mode` and the user's
/// owner, filled from the skeleton (directories, files and links, the user's, with their
/// modes), synced, then renamed into place; a home already there is left alone, as useradd
/// leaves it. Missing parents are made root's, 0755.
pub fn make_home(
    t: &Target,
    home: &str,
    (uid, gid, mode): (u32, u32, u32),
    place: &str,
) -> Result<()> {
    Target::check(home)?;
    let io = |e| Error::io(Stage::Apply, place, "home directory", e);
    let Some((parent, name)) = home
        .trim_end_matches('/')
        .rsplit_once('/')
        .filter(|(_, n)| !n.is_empty())
    else {
        return Err(Error::new(
            Stage::Apply,
            place,
            "home directory has no parent",
        ));
    };
    let (parent, holder) = Dir::make(&t.root, parent, 0o755, 0, 0).map_err(io)?;
    if let Some(h) = holder {
        h.sync().map_err(io)?;
    }
    if parent.entry(name).map_err(io)?.is_some() {
        return Ok(());
    }
    let tmp = format!(".{name}.{}d", fsio::TEMP_MARK);
    parent.remove_tree(&tmp).map_err(io)?;
    let dir = Arc::new(parent.subdir(&tmp, mode, uid, gid).map_err(io)?);
    let mut staged = Vec::new();
    if let Ok(skel) = Dir::open(&t.root, "/etc/skel")
        && let Err(e) = copy_tree(&skel, &dir, (uid, gid), 0, &mut staged)
    {
        fsio::discard(staged);
        return Err(e.within(place));
    }
    fsio::commit(staged).map_err(|e| Error::caused(Stage::Apply, place, e))?;
    dir.sync().map_err(io)?;
    parent.rename_noreplace(&tmp, &parent, name).map_err(io)?;
    parent.sync().map_err(io)
}

/// Skeleton depth followed (the image's own /etc/skel; a bound, not a limit seen in practice).
const SKEL_DEPTH: usize = 16;

/// The skeleton `from` copied into `to`, the user's: every name relative to its directory's
/// descriptor, none followed; each file's temp closed once written (a deep skeleton holds no
/// descriptor per file).
fn copy_tree(
    from: &Dir,
    to: &Arc<Dir>,
    (uid, gid): (u32, u32),
    depth: usize,
    staged: &mut Vec<fsio::Staged>,
) -> Result<()> {
    let at = from.path().display().to_string();
    let err = |e: std::io::Error| Error::io(Stage::Apply, &at, "skel", e);
    if depth > SKEL_DEPTH {
        return Err(Error::new(
            Stage::Apply,
            &at,
            "skeleton directory nested too deep",
        ));
    }
    for name in from.names().map_err(err)? {
        let Some(st) = from.entry(&name).map_err(err)? else {
            continue;
        };
        let mode = st.st_mode & 0o7777;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                let sub = from.existing_subdir(&name).map_err(err)?;
                let dst = Arc::new(to.subdir(&name, mode, uid, gid).map_err(err)?);
                copy_tree(&sub, &dst, (uid, gid), depth + 1, staged)?;
            }
            libc::S_IFLNK => {
                let target = from.read_link(&name).map_err(err)?;
                to.symlink(&target, &name, uid, gid).map_err(err)?;
            }
            libc::S_IFREG => {
                let mut data = Vec::new();
                std::io::Read::read_to_end(&mut from.open_file(&name).map_err(err)?, &mut data)
                    .map_err(err)?;
                let opts = fsio::Options::new(mode).owner(uid, gid);
                let mut s = fsio::stage_in(to, &name, &data, &opts)
                    .map_err(|e| Error::caused(Stage::Apply, &at, e))?;
                s.close();
                staged.push(s);
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_as_shadow_allocates_them() {
        // One more than the highest in range.
        assert_eq!(
            next_id(&[0, 65534, 1000, 1001], 1000, 60000, None),
            Some(1002)
        );
        // Nothing in range: the minimum.
        assert_eq!(next_id(&[0, 65534], 1000, 60000, None), Some(1000));
        // A free preferred id wins; a taken or out-of-range one does not.
        assert_eq!(next_id(&[1000], 1000, 60000, Some(1500)), Some(1500));
        assert_eq!(next_id(&[1000, 2000], 1000, 60000, Some(2000)), Some(2001));
        assert_eq!(next_id(&[], 1000, 60000, Some(500)), Some(1000));
        // The top taken: the lowest gap.
        assert_eq!(next_id(&[1000, 1002, 1003], 1000, 1003, None), Some(1001));
        assert_eq!(next_id(&[1000, 1001], 1000, 1001, None), None);
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
