//! users, groups, sudo rules, ssh authorized keys.
//!
//! The image's own shadow tools do the work (`groupadd`, `useradd`, `usermod`, `chpasswd`),
//! run via `chroot DIR` under `--root`. Every step first reads the target's user database, so
//! running it again (after a crash) changes nothing more. As cloud-init does, an existing user
//! only gets the password, lock, sudo and key settings. The password hash goes to `chpasswd -e`
//! on stdin: never on a command line, never logged.

use super::accounts::{self, Accounts};
use super::{Ctx, Outcome, UserDb, commands, files};
use crate::error::{Error, ErrorKind, Result, Stage, ensure};
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
    // No free gid: groupadd below says so in its own words.
    if let Some(mut acc) = Accounts::open(&t)?
        && (acc.has_group(&g.name) || acc.add_group(&g.name).is_some())
    {
        for m in &g.members {
            if acc.has_user(m) {
                acc.add_member(&g.name, m);
            } else {
                tracing::warn!(group = %g.name, member = %m, "group member does not exist; skipped (as cloud-init)");
            }
        }
        acc.commit(&place)?;
        return Ok(Outcome::Ok);
    }
    let db = ctx.db()?.clone();
    if !db.groups.contains_key(&g.name) {
        commands::run_tool(&t, &["groupadd", &g.name], None).map_err(|e| e.within(&place))?;
    }
    let current = UserDb::load(&t)?;
    for m in &g.members {
        if !current.users.contains_key(m) {
            tracing::warn!(group = %g.name, member = %m, "group member does not exist; skipped (as cloud-init)");
            continue;
        }
        let has = current
            .groups
            .get(&g.name)
            .is_some_and(|(_, ms)| ms.contains(m))
            && gshadow_has(&t, &g.name, m);
        if !has {
            commands::run_tool(&t, &["usermod", "-a", "-G", &g.name, m], None)
                .map_err(|e| e.within(&place))?;
        }
    }
    Ok(Outcome::Ok)
}

/// Whether `/etc/gshadow` lists `member` in `group` (true when the target has no gshadow or
/// no entry for the group: usermod would not add one). A `usermod -a -G` killed between
/// writing /etc/group and /etc/gshadow leaves the member in the first only (seen in the
/// kubeadm crash test); checking both makes the rerun finish the job.
fn gshadow_has(t: &super::Target, group: &str, member: &str) -> bool {
    account_entry(t, "/etc/gshadow", group)
        .flatten()
        .is_none_or(|f| {
            f.get(3)
                .is_some_and(|ms| ms.split(',').any(|x| x == member))
        })
}

/// The fields of `name`'s first line in an account database of the target (`/etc/shadow`,
/// `/etc/gshadow`, `/etc/subuid`…), as the shadow tools' lookups take the first. `None`: the
/// database cannot be read (the image has none); `Some(None)`: no line for `name`.
fn account_entry(t: &super::Target, file: &str, name: &str) -> Option<Option<Vec<String>>> {
    let text = std::fs::read_to_string(t.path(file).ok()?).ok()?;
    Some(
        text.lines()
            .map(|l| l.split(':').map(String::from).collect::<Vec<_>>())
            .find(|f| f.first().map(String::as_str) == Some(name)),
    )
}

/// `useradd` arguments for a new user (cloud-init's option mapping; password set separately).
pub fn useradd_args(u: &UserSpec) -> Vec<String> {
    let mut a: Vec<String> = vec!["useradd".into()];
    let mut opt = |k: &str, v: &Option<String>| {
        if let Some(v) = v {
            a.push(k.into());
            a.push(v.clone());
        }
    };
    opt("--comment", &u.gecos);
    opt("--home", &u.homedir);
    opt("--gid", &u.primary_group);
    opt("--shell", &u.shell);
    opt("--inactive", &u.inactive);
    opt("--expiredate", &u.expiredate);
    if let Some(uid) = u.uid {
        a.push("--uid".into());
        a.push(uid.to_string());
    }
    if !u.groups.is_empty() {
        a.push("--groups".into());
        a.push(u.groups.join(","));
    }
    if u.system {
        a.push("--system".into());
    }
    if u.no_user_group {
        a.push("--no-user-group".into());
    }
    // cloud-init: system users and no_create_home get -M, everyone else -m.
    a.push(if u.no_create_home || u.system {
        "-M".into()
    } else {
        "-m".into()
    });
    a.push(u.name.clone());
    a
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

/// The account entries `useradd` makes for this user are there (after a kill they may not be).
fn entries_complete(t: &super::Target, db: &UserDb, u: &UserSpec) -> bool {
    // No such database in the image: nothing to check.
    let has_line = |file: &str| account_entry(t, file, &u.name).is_none_or(|l| l.is_some());
    let group_ok = u.no_user_group || u.primary_group.is_some() || db.groups.contains_key(&u.name);
    has_line("/etc/shadow") && (u.system || has_line("/etc/subuid")) && group_ok
}

/// useradd makes this user a home (`-m`: not system, not no_create_home).
fn makes_home(u: &UserSpec) -> bool {
    !(u.no_create_home || u.system)
}

/// The home `useradd -m` makes is there.
fn home_complete(t: &super::Target, db: &UserDb, u: &UserSpec) -> bool {
    !makes_home(u)
        || db
            .home(&u.name)
            .and_then(|h| t.path(h).ok())
            .is_some_and(|p| p.is_dir())
}

/// Undo or finish what an interrupted creation of this user left, so that it ends as one
/// uninterrupted run would have: the native writer puts a user in /etc/passwd after every
/// other entry of it, so a user there with no home gets it now; a killed `useradd` may have
/// left any part, so that user is removed and made again.
fn repair(ctx: &mut Ctx<'_>, u: &UserSpec, note: &str, place: &str) -> Result<()> {
    let t = ctx.target().clone();
    let db = ctx.db()?.clone();
    if db.users.contains_key(&u.name) {
        let entries = entries_complete(&t, &db, u);
        if entries && home_complete(&t, &db, u) {
            return Ok(());
        }
        if let (true, Some((uid, gid, home))) = (entries, db.users.get(&u.name)) {
            tracing::warn!(user = %u.name, "home directory of a user made by a killed run; made now");
            let owner_mode = (*uid, *gid, accounts::home_mode(&t));
            return accounts::make_home(&t, home, owner_mode, place);
        }
        tracing::warn!(user = %u.name, "user left incomplete by a killed useradd; made again");
        let home = db.home(&u.name).map(str::to_string);
        commands::run_tool(&t, &["userdel", &u.name], None).map_err(|e| e.within(place))?;
        if let Some(h) = home.filter(|h| h.starts_with('/') && h.len() > 1) {
            let p = t.path(&h)?;
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
                std::fs::remove_dir_all(&p).map_err(|e| Error::io(Stage::Apply, place, "", e))?;
            }
        }
    } else if note.ends_with("group-existed=false")
        && !u.no_user_group
        && u.primary_group.is_none()
        && db.groups.get(&u.name).is_some_and(|(_, m)| m.is_empty())
    {
        // The user's own group was written but the user was not (killed in between).
        tracing::warn!(user = %u.name, "group left by a killed run; made again");
        match Accounts::open(&t)? {
            Some(mut acc) => {
                acc.remove_group(&u.name);
                acc.commit(place)?;
            }
            None => {
                commands::run_tool(&t, &["groupdel", &u.name], None)
                    .map_err(|e| e.within(place))?;
            }
        }
    }
    ctx.invalidate_db();
    Ok(())
}

/// Create the user natively (its missing groups, the user, its password and lock in one
/// write of the databases, then its home). `false`: nothing written, the tools do it.
fn create_native(t: &super::Target, u: &UserSpec, groups: &[&str], place: &str) -> Result<bool> {
    let Some(mut acc) = Accounts::open(t)? else {
        return Ok(false);
    };
    for g in groups {
        if acc.add_group(g).is_none() {
            return Ok(false);
        }
    }
    let Some(new) = acc.add_user(u) else {
        return Ok(false);
    };
    if !secrets_native(&mut acc, u) {
        return Ok(false);
    }
    acc.commit(place)?;
    if makes_home(u) {
        accounts::make_home(t, &new.home, (new.uid, new.gid, new.home_mode), place)?;
    }
    Ok(true)
}

/// The password hash and the lock of `u`, as `chpasswd -e` and `usermod --lock` set them.
/// `false`: not possible natively here (no shadow entry to hold them).
fn secrets_native(acc: &mut Accounts, u: &UserSpec) -> bool {
    u.passwd
        .as_deref()
        .is_none_or(|h| acc.set_password(&u.name, h))
        && (!u.lock_passwd || acc.lock_password(&u.name))
}

/// `new_user`: this step's `begin` note when it creates the user (see `NEW_USER`).
pub fn user(ctx: &mut Ctx<'_>, u: &UserSpec, new_user: Option<&str>) -> Result<Outcome> {
    let place = format!("users.{}", u.name);
    check_name(&u.name, &place)?;
    for g in u.groups.iter().chain(&u.primary_group) {
        check_name(g, &place)?;
    }
    if (u.no_create_home || u.system) && !u.ssh_authorized_keys.is_empty() {
        return Err(Error::new(
            Stage::Apply,
            &place,
            "ssh_authorized_keys need a home directory (no_create_home/system set)",
        ));
    }
    if u.passwd.as_ref().is_some_and(|h| h.contains(['\n', ':'])) {
        return Err(Error::new(
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
    let db = ctx.db()?.clone();
    // The image's own user keeps its password unless `hashed_passwd` says otherwise
    // (cloud-init: "already exists, skipping" useradd, the only place `passwd` is used).
    let kept;
    let u = if u.passwd_new_only && new_user.is_none() && db.users.contains_key(&u.name) {
        kept = UserSpec {
            passwd: None,
            ..u.clone()
        };
        &kept
    } else {
        u
    };
    let mut secrets_done = false;
    if !db.users.contains_key(&u.name) {
        // Missing groups are created first, in cloud-init's order: the supplementary groups,
        // then the primary group, which add_user creates only when `groups` is given too.
        let primary = u.primary_group.iter().filter(|_| !u.groups.is_empty());
        let mut missing: Vec<&str> = Vec::new();
        for g in u.groups.iter().chain(primary) {
            if !db.groups.contains_key(g) && !missing.contains(&g.as_str()) {
                missing.push(g);
            }
        }
        secrets_done = create_native(&t, u, &missing, &place)?;
        if !secrets_done {
            for g in &missing {
                commands::run_tool(&t, &["groupadd", g], None).map_err(|e| e.within(&place))?;
            }
            let args = useradd_args(u);
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            commands::run_tool(&t, &argv, None).map_err(|e| e.within(&place))?;
        }
    }
    if !secrets_done && (u.passwd.is_some() || u.lock_passwd) {
        secrets(&t, u, &place)?;
    }
    ctx.invalidate_db();
    let db = ctx.db()?.clone();
    if !u.sudo.is_empty() {
        sudo(ctx, u, &db, &place)?;
    }
    if !u.ssh_authorized_keys.is_empty() {
        keys(ctx, u, &db, &place)?;
    } else if makes_home(u) {
        ssh_files(ctx, u, &db, &place)?;
    }
    Ok(Outcome::Ok)
}

/// Password and lock of an existing user (or one the tools made): natively when its shadow
/// entry holds them, else `chpasswd -e` (the hash on stdin) and `usermod --lock`.
fn secrets(t: &super::Target, u: &UserSpec, place: &str) -> Result<()> {
    if let Some(mut acc) = Accounts::open(t)?
        && secrets_native(&mut acc, u)
    {
        return acc.commit(place);
    }
    if let Some(hash) = &u.passwd {
        let line = format!("{}:{}\n", u.name, hash);
        commands::run_tool(t, &["chpasswd", "-e"], Some(line.as_bytes()))
            .map_err(|_| Error::new(Stage::Apply, place, "chpasswd -e failed (hash not shown)"))?;
    }
    if u.lock_passwd && !already_locked(t, &u.name) {
        commands::run_tool(t, &["usermod", "--lock", &u.name], None)
            .map_err(|e| e.within(place))?;
    }
    Ok(())
}

/// The user's password in /etc/shadow is already locked (starts with `!`, as `useradd` leaves
/// a new user's): `usermod --lock` would change nothing then (shadow's `new_pw_passwd` only
/// prepends `!` to an unlocked hash), so its process is not started. No shadow file or no
/// line: not known to be locked, usermod decides.
fn already_locked(t: &super::Target, name: &str) -> bool {
    account_entry(t, "/etc/shadow", name)
        .flatten()
        .is_some_and(|f| f.get(1).is_some_and(|p| p.starts_with('!')))
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
            Error::new(
                Stage::Apply,
                place,
                format!("{ssh_dir}/authorized_keys: {e}"),
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
) -> Result<Option<crate::confine::UserDir>> {
    super::Target::check(home)?; // a relative home or one with `..`, as every target path
    let (uid, gid) = owner.unwrap_or((0, 0));
    match crate::confine::Dir::make(&t.root, home, 0o755, uid, gid) {
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
            return Err(Error::new(
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
    let (dir, _) = crate::confine::Dir::make(&t.root, "/etc/sudoers.d", 0o750, 0, 0)
        .map_err(|e| Error::new(Stage::Apply, place, format!("mkdir /etc/sudoers.d: {e}")))?;
    dir.set_mode(0o750)
        .map_err(|e| Error::new(Stage::Apply, place, format!("chmod /etc/sudoers.d: {e}")))?;
    // Validate before it can take effect: a broken sudoers.d file disables sudo entirely.
    // Rules of the forms sudo is known to accept (CAPV's among them) need no visudo process.
    let known_good = u.sudo.iter().all(|r| KNOWN_GOOD_SUDO.contains(&r.as_str()));
    if !known_good && crate::confine::metadata(&t.root, "/usr/sbin/visudo").is_ok() {
        let check = format!("{path}.nodeagent-check");
        let cf = file(&check, text.as_bytes(), 0o440, None);
        files::write_bytes(&t, &cf, text.as_bytes(), db)?;
        let res = commands::run_tool(&t, &["visudo", "-cf", &check], None);
        let _ = dir.remove_tree(check.trim_start_matches("/etc/sudoers.d/"));
        res.map_err(|e| {
            Error::new(
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

/// Existing keys are kept; new ones appended once (cloud-init merges the same way).
pub fn merge_keys(existing: &str, new: &[String]) -> String {
    let mut lines: Vec<String> = existing.lines().map(String::from).collect();
    for k in new {
        let k = k.trim();
        if !k.is_empty() && !lines.iter().any(|l| l.trim() == k) {
            lines.push(k.to_string());
        }
    }
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

fn keys(ctx: &mut Ctx<'_>, u: &UserSpec, db: &UserDb, place: &str) -> Result<()> {
    let t = ctx.target().clone();
    let (uid, gid, home) = db.users.get(&u.name).cloned().ok_or_else(|| {
        Error::of(
            ErrorKind::NotFound,
            Stage::Apply,
            place,
            "user not in /etc/passwd after useradd",
        )
    })?;
    if !home.starts_with('/') {
        return Err(Error::new(
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
        return Err(Error::new(
            Stage::Apply,
            place,
            format!("home directory {home} is not a directory; not followed"),
        ));
    };
    let ssh = home_dir.subdir(".ssh", 0o700).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::ELOOP) => "is a symlink; not followed".to_string(),
            Some(libc::ENOTDIR) => "is not a directory".to_string(),
            _ => e.to_string(),
        };
        Error::new(Stage::Apply, place, format!("{ssh_dir} {why}"))
    })?;
    let io = |e| Error::io(Stage::Apply, place, &ssh_dir, e);
    ssh.set_owner_mode(uid, gid, 0o700).map_err(io)?;
    let existing = ssh
        .read_regular("authorized_keys", MAX_AUTHORIZED_KEYS_BYTES)
        .map_err(io)?
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let text = merge_keys(&existing, &u.ssh_authorized_keys);
    ssh.replace("authorized_keys", text.as_bytes(), uid, gid, 0o600)
        .map_err(io)
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
    fn useradd_mapping() {
        let u = UserSpec {
            name: "capv".into(),
            gecos: Some("CAPV".into()),
            shell: Some("/bin/bash".into()),
            groups: vec!["sudo".into(), "adm".into()],
            passwd: Some("$6$secret".into()),
            ..Default::default()
        };
        let a = useradd_args(&u);
        assert_eq!(
            a,
            [
                "useradd",
                "--comment",
                "CAPV",
                "--shell",
                "/bin/bash",
                "--groups",
                "sudo,adm",
                "-m",
                "capv"
            ]
        );
        assert!(!a.iter().any(|x| x.contains("secret")));
    }

    #[test]
    fn names_and_keys() {
        assert!(valid_name("capv"));
        assert!(!valid_name("-rf"));
        assert!(!valid_name("a b"));
        assert!(!valid_name("../x"));
        assert_eq!(
            merge_keys("ssh-rsa A\n", &["ssh-rsa A".into(), "ssh-ed25519 B".into()]),
            "ssh-rsa A\nssh-ed25519 B\n"
        );
        assert_eq!(sudoers_file("a.b"), "/etc/sudoers.d/90-nodeagent-a_b");
    }
}
