//! users, groups, sudo rules, ssh authorized keys: cloud-init's users_groups and ssh modules.
//!
//! One implementation: the account databases are written by `accounts.rs` (useradd's,
//! groupadd's, chpasswd's and passwd's semantics, no process), under lckpwdf's lock. Every
//! step first reads the target's user database, so running it again (after a crash) changes
//! nothing more. As cloud-init does, an existing user only gets the password, lock, sudo and
//! key settings. Passwords are never on a command line, never logged.

use super::accounts::{self, Accounts};
use super::{Ctx, Outcome, UserDb, authkeys, begin, commands, files, homes, password, record_done};
use crate::base::error::{Error, ErrorKind, Result, Stage, ensure};
use crate::base::state::DoneResult;
use crate::plan::{Action, Frequency, Step};
use crate::plan::{Content, FileWrite, GroupSpec, Owner, UserSpec};

/// Names the shadow tools accept: the plan's rule, checked again here as a last guard.
pub fn valid_name(n: &str) -> bool {
    crate::plan::valid_account_name(n)
}

fn check_name(n: &str, place: &str) -> Result<()> {
    ensure(valid_name(n), Stage::Apply, place, || {
        format!("{n:?} is not a valid user or group name")
    })
}

pub fn group(ctx: &mut Ctx<'_>, g: &GroupSpec) -> Result<Outcome> {
    let place = format!("groups.{}", g.name);
    check_name(&g.name, &place)?;
    for m in &g.members {
        check_name(m, &place)?;
    }
    let t = ctx.target().clone();
    clean_shadow_leftovers(&t)?;
    let mut acc = Accounts::open(&t)?;
    if !acc.has_group(&g.name) && acc.add_group(&g.name).is_none() {
        return Err(no_free_id(&place, "GID"));
    }
    for m in &g.members {
        if acc.has_user(m) {
            acc.add_member(&g.name, m);
        } else {
            tracing::warn!(group = %g.name, member = %m, "group member does not exist; skipped (as cloud-init)");
        }
    }
    acc.commit(&place)?;
    Ok(Outcome::Ok)
}

/// groupadd's and useradd's "Can't get unique GID/UID": the id range is full.
fn no_free_id(place: &str, what: &str) -> Error {
    Error::of(
        ErrorKind::Conflict,
        Stage::Apply,
        place,
        format!("Can't get unique {what} (no more available {what}s)"),
    )
}

/// The sudoers.d file of a user's rules.
pub fn sudoers_file(name: &str) -> String {
    // sudo's includedir skips names containing `.` or ending in `~`.
    format!("/etc/sudoers.d/90-nodeagent-{}", name.replace('.', "_"))
}

/// The `begin` note of a user step that creates the user (`new-user group-existed=BOOL`).
pub const NEW_USER: &str = "new-user";

/// The shadow databases `useradd` locks and rewrites.
const SHADOW_DBS: &[&str] = &["passwd", "shadow", "group", "gshadow", "subuid", "subgid"];

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0
        && (unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH))
        && !zombie(pid)
}

/// Programs that take shadow's locks. A live pid running anything else is a reused number
/// (pids wrap quickly on a busy machine, and the start-time test has a second of slack).
fn shadow_tool(pid: i32) -> bool {
    const TOOLS: &[&str] = &[
        "useradd",
        "usermod",
        "userdel",
        "groupadd",
        "groupmod",
        "groupdel",
        "groupmems",
        "chpasswd",
        "chgpasswd",
        "passwd",
        "gpasswd",
        "newusers",
        "vipw",
        "vigr",
        "chage",
        "chsh",
        "chfn",
        "pwconv",
        "pwunconv",
        "grpconv",
        "grpunconv",
        "pwck",
        "grpck",
    ];
    proc_file(pid, "comm").is_some_and(|c| TOOLS.contains(&c.trim()))
}

/// `/proc/PID/NAME` of the host (the kernel's process table, never a path under `--root`).
fn proc_file(pid: i32, name: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/{name}")).ok()
}

/// A killed tool nobody reaped yet (its parent, the agent, died too, and the reaper is slow or
/// absent, as in some containers) still answers signal 0, but holds nothing.
fn zombie(pid: i32) -> bool {
    proc_file(pid, "stat")
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.starts_with(['Z', 'X'])))
        .unwrap_or(false)
}

/// Whether process `pid` started after `written` (with a second of slack for clock
/// granularity): then it is not the process that wrote a file at `written`. From
/// /proc/PID/stat's start time (clock ticks after boot) and /proc/stat's boot time.
fn started_after(pid: i32, written: Option<std::time::SystemTime>) -> bool {
    let Some(written) = written else {
        return false;
    };
    let start = (|| {
        let stat = proc_file(pid, "stat")?;
        // Fields after `(comm) `: state is field 3, starttime field 22.
        let rest = stat.rsplit_once(") ")?.1;
        let ticks: u64 = rest.split(' ').nth(19)?.parse().ok()?;
        let btime: u64 = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()?;
        // SAFETY: sysconf has no preconditions.
        let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
            .ok()?
            .max(1);
        Some(
            std::time::UNIX_EPOCH
                + std::time::Duration::from_secs(btime)
                + std::time::Duration::from_millis(ticks * 1000 / hz),
        )
    })();
    start.is_some_and(|s| s > written + std::time::Duration::from_secs(1))
}

/// What a killed shadow tool leaves in /etc: its `DB.PID` temp link and `DB.lock` naming a
/// dead pid, or a pid reused by a later process or by a program that is not a shadow tool
/// (shadow then refuses: "cannot lock /etc/passwd"). shadow removes a stale lock itself but never the temp file; both go here
/// (the agent holds the run lock, so no tool of ours is running).
fn clean_shadow_leftovers(t: &super::Target) -> Result<()> {
    let etc = t.path("/etc/passwd")?;
    let Some(etc) = etc.parent() else {
        return Ok(());
    };
    let Ok(rd) = std::fs::read_dir(etc) else {
        return Ok(());
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((db, suffix)) = name.split_once('.') else {
            continue;
        };
        if !SHADOW_DBS.contains(&db) {
            continue;
        }
        let pid = if suffix == "lock" {
            std::fs::read_to_string(e.path())
                .ok()
                .and_then(|s| lock_pid(&s))
        } else if !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()) {
            suffix.parse::<i32>().ok()
        } else {
            continue;
        };
        // A live pid may be a new process that got the dead tool's number: it started after
        // the file was written, so it cannot be the tool that wrote it.
        let written = e.metadata().and_then(|m| m.modified()).ok();
        if pid.is_some_and(|p| !pid_alive(p) || started_after(p, written) || !shadow_tool(p)) {
            tracing::warn!(file = %name, "removing what a killed shadow tool left behind");
            std::fs::remove_file(e.path()).map_err(|er| Error::io(Stage::Apply, &name, "", er))?;
        }
    }
    Ok(())
}

/// The pid in a shadow lock file. shadow writes it with its terminating NUL (`do_lock_file`
/// writes `strlen + 1` bytes) and reads up to it; a parse of the whole text never succeeded,
/// so every killed tool's lock was left to shadow, which refuses it while the pid exists
/// (a zombie not yet reaped: the rerun failed, "lock ... already used by PID").
fn lock_pid(text: &str) -> Option<i32> {
    text.split('\0').next()?.trim().parse().ok()
}

/// useradd makes this user a home (`-m`: not system, not no_create_home).
fn makes_home(u: &UserSpec) -> bool {
    !(u.no_create_home || u.system)
}

/// Finish or undo what an interrupted creation of this user left, so that it ends as one
/// uninterrupted run would have. The databases are written with /etc/passwd last, so a user
/// there is complete but for its home (made after the write): that is made now. A user group
/// written by a killed run without its user (`group-existed=false` in the note) is removed,
/// to be made again with the user.
fn repair(ctx: &mut Ctx<'_>, u: &UserSpec, note: &str, place: &str) -> Result<()> {
    let t = ctx.target().clone();
    let db = ctx.db()?.clone();
    if let Some((uid, gid, home)) = db.users.get(&u.name) {
        let home_there = db
            .home(&u.name)
            .and_then(|h| t.path(h).ok())
            .is_some_and(|p| p.is_dir());
        if makes_home(u) && !home_there {
            tracing::warn!(user = %u.name, "home directory of a user made by a killed run; made now");
            let owner_mode = (*uid, *gid, accounts::home_mode(&t));
            homes::make_home(&t, home, owner_mode, place)?;
        }
    } else if note.ends_with("group-existed=false")
        && !u.no_user_group
        && u.primary_group.is_none()
        && db.groups.get(&u.name).is_some_and(|(_, m)| m.is_empty())
    {
        tracing::warn!(user = %u.name, "group left by a killed run; made again");
        let mut acc = Accounts::open(&t)?;
        acc.remove_group(&u.name);
        acc.commit(place)?;
    }
    ctx.invalidate_db();
    Ok(())
}

/// cloud-init's add_user for a user that does not exist: the missing groups of `groups` and
/// a missing primary group given with them are made first (each its own `groupadd`, so they
/// stay when useradd then fails), unless `create_groups: false`; then the user, as useradd
/// makes it. A user useradd refuses is an error in useradd's words, the groups made.
fn create(acc: &mut Accounts, u: &UserSpec, place: &str) -> Result<Option<accounts::NewUser>> {
    if !u.no_create_groups {
        let primary = u.primary_group.iter().filter(|_| !u.groups.is_empty());
        for g in u.groups.iter().chain(primary) {
            if !acc.has_group(g) && acc.add_group(g).is_none() {
                return Err(no_free_id(place, "GID"));
            }
        }
    }
    match acc.add_user(u) {
        Ok(new) => Ok(Some(new)),
        Err((kind, msg)) => Err(Error::of(
            kind,
            Stage::Apply,
            place,
            format!("useradd: {msg}"),
        )),
    }
}

/// cloud-init's password and lock for `u` (created now when `new`): `passwd` (new users
/// only, useradd's --password), then `plain_text_passwd` hashed as the image's chpasswd
/// would, then `hashed_passwd`; then `lock_passwd` locks (`passwd -l`), or, false, unlocks
/// (`passwd -u`, cloud-init 24.3 and later) when a password was given or the user already
/// had one. Warnings where cloud-init 25.1 warns.
fn secrets(
    ctx: &mut Ctx<'_>,
    acc: &mut Accounts,
    u: &UserSpec,
    new: bool,
    place: &str,
) -> Result<()> {
    let hashed = u.passwd.as_ref().filter(|_| !u.passwd_new_only);
    let at_useradd = u.passwd.as_ref().filter(|_| u.passwd_new_only && new);
    if !new && u.passwd_new_only && u.passwd.is_some() && u.plain_text_passwd.is_none() {
        ctx.warn(format!(
            "{place}: 'passwd' is ignored for an existing user (cloud-init 24.3 and later warn the same)"
        ));
    }
    let plain = match &u.plain_text_passwd {
        Some(p) if !p.is_empty() && hashed.is_none() => {
            Some(password::hash(ctx.target(), p, place)?)
        }
        _ => None,
    };
    if let Some(h) = hashed.cloned().or(plain).or(at_useradd.cloned()) {
        acc.set_password(&u.name, &h);
    }
    let given = hashed.is_some() || at_useradd.is_some() || u.plain_text_passwd.is_some();
    if u.lock_passwd {
        acc.lock_password(&u.name);
    } else if given
        || (!new
            && acc
                .password(&u.name)
                .is_some_and(|p| !p.is_empty() && p != "!"))
    {
        acc.unlock_password(&u.name);
    } else {
        ctx.warn(format!(
            "{place}: lock_passwd: false without a password (none given, none set): the password stays locked, as cloud-init 24.3 and later leave it"
        ));
    }
    Ok(())
}

/// A user: a `begin` that says this step was creating the user marks a `useradd` a kill may
/// have cut short, which `user` repairs (`NEW_USER`).
pub(super) fn step(ctx: &mut Ctx<'_>, step: &Step, u: &UserSpec) -> Result<Outcome> {
    let prior = ctx
        .journal
        .last_begin(&step.id)
        .and_then(|r| r.event.expect().map(str::to_string))
        .filter(|e| e.starts_with(NEW_USER));
    let db = ctx.db()?;
    let expect = match prior {
        Some(p) => Some(p),
        None if !db.users.contains_key(&u.name) => Some(format!(
            "{} group-existed={}",
            NEW_USER,
            db.groups.contains_key(&u.name)
        )),
        None => None,
    };
    begin(ctx, step, expect.clone())?;
    let r = user(ctx, u, expect.as_deref());
    ctx.invalidate_db();
    r
}

/// cloud-init's users_groups module stops at its first failure (a useradd that fails raises
/// out of the loop): after a failed user or group step, the later ones are journaled as
/// done, not run (a later run would not run them either: the module is per instance).
pub(super) fn module_ended(
    ctx: &mut Ctx<'_>,
    steps: &[&Step],
    order: &[usize],
    pos: usize,
) -> Result<()> {
    let accounts = |a: &Action| matches!(a, Action::User(_) | Action::Group(_));
    if !accounts(&steps[order[pos]].action) {
        return Ok(());
    }
    for &j in &order[pos + 1..] {
        let s = steps[j];
        if accounts(&s.action)
            && !ctx
                .journal
                .is_done(&s.id, s.frequency == Frequency::PerBoot)
        {
            tracing::warn!(step = %s.id, "not run: an earlier user or group failed, and cloud-init's users_groups module stops there");
            record_done(ctx, s, 0.0, DoneResult::NotRun, false)?;
        }
    }
    Ok(())
}

/// `new_user`: this step's `begin` note when it creates the user (see `NEW_USER`).
pub fn user(ctx: &mut Ctx<'_>, u: &UserSpec, new_user: Option<&str>) -> Result<Outcome> {
    let place = format!("users.{}", u.name);
    check_name(&u.name, &place)?;
    for g in u.groups.iter().chain(&u.primary_group) {
        check_name(g, &place)?;
    }
    if (u.no_create_home || u.system) && !u.ssh_authorized_keys.is_empty() {
        return Err(Error::invalid(
            Stage::Apply,
            &place,
            "ssh_authorized_keys need a home directory (no_create_home/system set)",
        ));
    }
    if u.passwd.as_ref().is_some_and(|h| h.contains(['\n', ':'])) {
        return Err(Error::invalid(
            Stage::Apply,
            &place,
            "the passwd value is not a password hash",
        ));
    }
    let t = ctx.target().clone();
    clean_shadow_leftovers(&t)?;
    if let Some(note) = new_user {
        repair(ctx, u, note, &place)?;
    }
    let mut acc = Accounts::open(&t)?;
    let created = if acc.has_user(&u.name) {
        None
    } else {
        match create(&mut acc, u, &place) {
            Ok(new) => new,
            Err(e) => {
                acc.commit(&place)?;
                return Err(e);
            }
        }
    };
    secrets(ctx, &mut acc, u, created.is_some(), &place)?;
    acc.commit(&place)?;
    if let Some(new) = &created {
        if makes_home(u) {
            homes::make_home(&t, &new.home, (new.uid, new.gid, new.home_mode), &place)?;
        }
        if let Some(mail) = &new.mail {
            homes::make_mail_spool(&t, &u.name, new.uid, mail, &place)?;
        }
    }
    ctx.invalidate_db();
    let db = ctx.db()?.clone();
    if !u.sudo.is_empty() {
        sudo(ctx, u, &db, &place)?;
    }
    if !u.ssh_authorized_keys.is_empty() {
        keys(ctx, &u.name, &u.ssh_authorized_keys, None, &db, &place)?;
    } else if makes_home(u) {
        ssh_files(ctx, u, &db, &place)?;
    }
    if !u.ssh_import_id.is_empty() {
        import_ids(ctx, u, &place);
    }
    Ok(Outcome::Ok)
}

/// Sudo rules accepted by every sudo as written: CAPV's template rule and the usual
/// cloud-init examples. The user name before them is a `valid_name`.
const KNOWN_GOOD_SUDO: &[&str] = &[
    "ALL=(ALL) NOPASSWD:ALL",
    "ALL=(ALL:ALL) NOPASSWD:ALL",
    "ALL=(ALL) ALL",
    "ALL=(ALL:ALL) ALL",
];

/// cloud-init's `ssh_authkey_fingerprints` module reads every `users` entry's authorized_keys
/// through `ssh_util.extract_authorized_keys`, whose `check_create_path` makes a missing
/// `~/.ssh` (0700) and an empty `~/.ssh/authorized_keys` (0600), both the user's (uid and
/// primary gid), for new and existing users alike, keys or not (`no_create_home`/`system`
/// users are skipped). Nothing present is changed; a symlink or a non-directory in the way
/// is left alone, as there.
fn ssh_files(ctx: &mut Ctx<'_>, u: &UserSpec, db: &UserDb, place: &str) -> Result<()> {
    let t = ctx.target().clone();
    let Some((uid, gid, home)) = db.users.get(&u.name).cloned() else {
        return Err(Error::of(
            ErrorKind::NotFound,
            Stage::Apply,
            place,
            "user not in /etc/passwd after useradd",
        ));
    };
    if !home.starts_with('/') {
        return Ok(());
    }
    let ssh_dir = format!("{}/.ssh", home.trim_end_matches('/'));
    let io = |e| Error::io(Stage::Apply, place, &ssh_dir, e);
    // The home is the user's: everything in it is done through descriptors (UserDir), so
    // a `.ssh` swapped for a link at any instant is never followed.
    let Some(home_dir) = open_home(&t, &home, None, place)? else {
        return Ok(());
    };
    let ssh = match home_dir.existing_subdir(".ssh") {
        Ok(Some(d)) => d,
        // A symlink or a non-directory in the way is left alone, as cloud-init does.
        Err(_) => return Ok(()),
        Ok(None) => {
            // Made under a temp name, owner and mode set, then moved in only if `.ssh` is
            // still missing: a run killed half-way never leaves a root-owned ~/.ssh that
            // the next run would keep.
            const TMP: &str = ".ssh.nodeagent-tmpd";
            home_dir.remove(TMP);
            let tmp = home_dir.subdir(TMP, 0o700).map_err(io)?;
            tmp.set_owner_mode(uid, gid, 0o700).map_err(io)?;
            if !home_dir.rename_noreplace(TMP, ".ssh").map_err(io)? {
                home_dir.remove(TMP);
            }
            match home_dir.existing_subdir(".ssh") {
                Ok(Some(d)) => d,
                _ => return Ok(()),
            }
        }
    };
    if ssh.has("authorized_keys") {
        return Ok(());
    }
    ssh.create_new("authorized_keys", b"", uid, gid, 0o600)
        .map(drop)
        .map_err(|e| {
            Error::io(
                Stage::Apply,
                place,
                &format!("{ssh_dir}/authorized_keys"),
                e,
            )
        })
}

/// The user's home, resolved inside the root (only root can change the path above it, and
/// so the home's own name), and opened; under `--root` every link was resolved inside R, on
/// the host a home that is a link the image made is followed. A missing home is made first: with
/// `owner` the user's (the keys step, as before), else root's 0755 as os.makedirs does
/// (cloud-init's check_create_path). `None`: the home is not a directory.
fn open_home(
    t: &super::Target,
    home: &str,
    owner: Option<(u32, u32)>,
    place: &str,
) -> Result<Option<crate::base::confine::UserDir>> {
    super::Target::check(home)?; // a relative home or one with `..`, as every target path
    let (uid, gid) = owner.unwrap_or((0, 0));
    match crate::base::confine::Dir::make(&t.root, home, 0o755, uid, gid) {
        Ok((d, holder)) => {
            if let Some(h) = holder {
                h.sync()
                    .map_err(|e| Error::io(Stage::Apply, place, home, e))?;
            }
            Ok(Some(d.into()))
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => Ok(None),
        Err(e) => Err(Error::io(Stage::Apply, place, home, e)),
    }
}

fn sudo(ctx: &mut Ctx<'_>, u: &UserSpec, db: &UserDb, place: &str) -> Result<()> {
    let t = ctx.target().clone();
    let mut text = format!("# Written by nodeagent for user {}\n", u.name);
    for rule in &u.sudo {
        if rule.contains('\n') {
            return Err(Error::invalid(
                Stage::Apply,
                place,
                "sudo: a rule must be one line",
            ));
        }
        text.push_str(&format!("{} {}\n", u.name, rule));
    }
    let path = sudoers_file(&u.name);
    // cloud-init's ensure_sudo_dir: util.ensure_dir("/etc/sudoers.d", 0o750), which also
    // chmods a directory that is already there (Debian's sudo ships it 0755).
    // Every link on the way, the last one too, resolved inside the root (an absolute
    // `/etc/sudoers.d` link in the image chmodded a directory of the host), then changed
    // through a descriptor of what was resolved, opened without following a link.
    let (dir, _) = crate::base::confine::Dir::make(&t.root, "/etc/sudoers.d", 0o750, 0, 0)
        .map_err(|e| Error::io(Stage::Apply, place, "mkdir /etc/sudoers.d", e))?;
    dir.set_mode(0o750)
        .map_err(|e| Error::io(Stage::Apply, place, "chmod /etc/sudoers.d", e))?;
    // Validate before it can take effect: a broken sudoers.d file disables sudo entirely.
    // Rules of the forms sudo is known to accept (CAPV's among them) need no visudo process.
    let known_good = u.sudo.iter().all(|r| KNOWN_GOOD_SUDO.contains(&r.as_str()));
    if !known_good && crate::base::confine::metadata(&t.root, "/usr/sbin/visudo").is_ok() {
        let check = format!("{path}.nodeagent-check");
        let cf = file(&check, text.as_bytes(), 0o440, None);
        files::write_bytes(&t, &cf, text.as_bytes(), db)?;
        let res = commands::run_tool(&t, &["visudo", "-cf", &check], None);
        let _ = dir.remove_tree(check.trim_start_matches("/etc/sudoers.d/"));
        res.map_err(|e| {
            Error::of(
                e.kind(),
                Stage::Apply,
                place,
                format!("sudo rule rejected by visudo: {}", e.detail()),
            )
        })?;
    }
    let f = file(&path, text.as_bytes(), 0o440, None);
    files::write_bytes(&t, &f, text.as_bytes(), db)?;
    Ok(())
}

fn file(path: &str, content: &[u8], mode: u32, owner: Option<&str>) -> FileWrite {
    let o = owner.unwrap_or("root").to_string();
    FileWrite {
        path: path.into(),
        content: Content(content.to_vec()),
        owner: Owner {
            user: Some(o),
            group: None,
        },
        mode: Some(mode),
        append: false,
        defer: false,
        secret: false,
        source: None,
    }
}

/// `keys` into `name`'s authorized_keys as cloud-init's `setup_user_keys` writes them
/// (authkeys.rs), each with `options` when given (root's `disable_root` prefix).
fn keys(
    ctx: &mut Ctx<'_>,
    name: &str,
    keys: &[String],
    options: Option<&str>,
    db: &UserDb,
    place: &str,
) -> Result<()> {
    let t = ctx.target().clone();
    let root = (name == "root").then(|| (0, 0, "/root".to_string()));
    let (uid, gid, home) = db.users.get(name).cloned().or(root).ok_or_else(|| {
        Error::of(
            ErrorKind::NotFound,
            Stage::Apply,
            place,
            "user not in /etc/passwd after useradd",
        )
    })?;
    if !home.starts_with('/') {
        return Err(Error::conflict(
            Stage::Apply,
            place,
            format!("home directory {home:?} is not absolute"),
        ));
    }
    let ssh_dir = format!("{}/.ssh", home.trim_end_matches('/'));
    // The home and its `.ssh` are the user's, who may swap any name in them at any instant:
    // every step below acts through descriptors opened without following links (UserDir),
    // so `.ssh` swapped for a link to /root/.ssh, or authorized_keys for a link to a
    // root-only file, is never followed.
    let Some(home_dir) = open_home(&t, &home, Some((uid, gid)), place)? else {
        return Err(Error::conflict(
            Stage::Apply,
            place,
            format!("home directory {home} is not a directory; not followed"),
        ));
    };
    let ssh = home_dir.subdir(".ssh", 0o700).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::ELOOP) => "is a symlink; not followed",
            Some(libc::ENOTDIR) => "is not a directory",
            _ => return Error::io(Stage::Apply, place, &ssh_dir, e),
        };
        Error::conflict(Stage::Apply, place, format!("{ssh_dir} {why}"))
    })?;
    let io = |e| Error::io(Stage::Apply, place, &ssh_dir, e);
    ssh.set_owner_mode(uid, gid, 0o700).map_err(io)?;
    let existing = ssh
        .read_regular("authorized_keys", MAX_AUTHORIZED_KEYS_BYTES)
        .map_err(io)?
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    for k in keys.iter().filter(|k| !authkeys::parse(k, None).is_key()) {
        tracing::info!(user = %name, "not a key (a comment, empty or an unknown key type); left out as cloud-init leaves it: {:?}", k.chars().take(40).collect::<String>());
    }
    let text = authkeys::update(&existing, keys, options);
    ssh.replace("authorized_keys", text.as_bytes(), uid, gid, 0o600)
        .map_err(io)
}

/// Top-level `ssh_authorized_keys` and the platform's public keys into root's
/// authorized_keys (cloud-init's `ssh` module; nodeagent images have no default user, so
/// root is the only one to get them), with `disable_root`'s options.
pub fn root_keys(ctx: &mut Ctx<'_>, k: &crate::plan::SshKeysSpec) -> Result<Outcome> {
    let place = format!("ssh_authorized_keys ({})", k.user);
    let db = ctx.db()?.clone();
    keys(ctx, &k.user, &k.keys, Some(&k.options), &db, &place)?;
    Ok(Outcome::Ok)
}

/// `ssh_import_id` (cloud-init's ssh_import_id module): `sudo -Hu USER ssh-import-id IDS`
/// when the image has the tool, on the node itself; without it, a warning, as cloud-init
/// skips the module ("ssh-import-id is not installed"). A failure is a warning too: the
/// keys are fetched from the network, the run goes on.
fn import_ids(ctx: &mut Ctx<'_>, u: &UserSpec, place: &str) {
    let t = ctx.target().clone();
    let has = |p: &str| crate::base::confine::metadata(&t.root, p).is_ok();
    if ![
        "/usr/bin/ssh-import-id",
        "/bin/ssh-import-id",
        "/usr/local/bin/ssh-import-id",
    ]
    .iter()
    .any(|p| has(p))
    {
        ctx.warn(format!(
            "{place}.ssh_import_id: ssh-import-id is not installed; skipped, as cloud-init skips it"
        ));
        return;
    }
    if !ctx.opts.exec {
        tracing::info!(user = %u.name, "ssh-import-id skipped (not on the node itself, no --exec)");
        return;
    }
    let mut argv = vec![
        "sudo",
        "--preserve-env=https_proxy",
        "-Hu",
        &u.name,
        "ssh-import-id",
    ];
    argv.extend(u.ssh_import_id.iter().map(String::as_str));
    if let Err(e) = commands::run_tool(&t, &argv, None) {
        ctx.warn(format!("{place}.ssh_import_id: {e}"));
    }
}

/// Most of an existing authorized_keys read to merge into (the user's own file).
const MAX_AUTHORIZED_KEYS_BYTES: u64 = 16 * 1024 * 1024;

#[cfg(test)]
mod tests {
    #[test]
    fn a_lock_older_than_its_pid_is_stale() {
        use std::time::{Duration, SystemTime};
        let me = std::process::id() as i32;
        // This process started after 1970: a lock written then is not ours.
        assert!(super::started_after(me, Some(SystemTime::UNIX_EPOCH)));
        // A lock written now or later may be ours.
        assert!(!super::started_after(me, Some(SystemTime::now())));
        assert!(!super::started_after(
            me,
            Some(SystemTime::now() + Duration::from_secs(3600))
        ));
        assert!(!super::started_after(me, None));
    }

    #[test]
    fn the_pid_of_a_shadow_lock_is_read_up_to_its_nul() {
        assert_eq!(super::lock_pid("7696\0"), Some(7696));
        assert_eq!(super::lock_pid("7696"), Some(7696));
        assert_eq!(super::lock_pid("x\0"), None);
    }

    use super::*;

    #[test]
    fn names_and_keys() {
        assert!(valid_name("capv"));
        assert!(!valid_name("-rf"));
        assert!(!valid_name("a b"));
        assert!(!valid_name("../x"));
        assert_eq!(
            authkeys::update(
                "ssh-rsa A\n",
                &["ssh-rsa A".into(), "ssh-ed25519 B".into()],
                None
            ),
            "ssh-rsa A\nssh-ed25519 B\n"
        );
        assert_eq!(sudoers_file("a.b"), "/etc/sudoers.d/90-nodeagent-a_b");
    }
}
