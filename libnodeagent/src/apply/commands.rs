//! bootcmd/runcmd programs' supervision and the system tools other steps call.
//!
//! The items of a bootcmd or runcmd list run as one shell program (shell.rs, script.rs),
//! supervised here. Without `--exec` an item is recorded as `skipped` (and runs on a later
//! `--exec` run). Under `--root DIR` the program runs chrooted into DIR (working directory
//! `/`), as cloud-init would run it on that node: the root must hold `/bin/sh` and the
//! programs the items call.
//!
//! ## Exactly once, even when the agent is killed
//! cloud-init writes its semaphore *before* running a module, so a crash mid-module means the
//! module never runs again, finished or not. nodeagent instead supervises each program so
//! that its items' statuses outlive the agent:
//! * the agent takes an exclusive `flock` on `cmd/<h>.lock` (in the instance state dir) and
//!   starts the supervisor (`supervise.rs`) in its own process group, holding the lock: a
//!   forked child of the agent (no exec) when the agent runs single-threaded, as `nodeagent
//!   run` does, else its own binary started anew with the lock as fd 9; the supervisor keeps
//!   the lock, the program itself does not get it (a daemon it starts cannot hold it);
//! * the supervisor runs `/bin/sh FILE` (the list's script, 0600 in the 0700 `cmd/`
//!   directory: its text is in no argv) with the program's timeout (which keeps working if
//!   the agent is gone); the program records each item's status itself (shell.rs); the
//!   supervisor then writes the program's exit status to `cmd/<h>.rc` atomically and durably
//!   (temp, fsync, rename, fsync dir), and exits, releasing the lock;
//! * stdout/stderr go to `cmd/<h>.out` (0600, append mode), not to a pipe: a dead agent
//!   cannot SIGPIPE the program. The agent reads it as it grows through one redactor and
//!   deletes it when the program is over.
//!
//! On the next run a step without a `done` record first looks at its status record; if the
//! lock is still held, the orphaned program of the killed agent is still running and the agent
//! waits for it (answering it at the kubeadm step). A recorded status: the item finished
//! (0: `adopted`), it is not run again. No status and no lock holder (the item never
//! finished: a power loss, or its supervisor killed): it runs again, in a new program
//! started from the state the items before it recorded (shell.rs).
//! `<h>` is derived from the step id (and the boot id for per-boot steps).

use super::{Ctx, Outcome, Target};
use crate::base::error::{Error, ErrorKind, Result, Stage};
use crate::base::limits::{COMMAND_SHOWN_CHARS, TOOL_TIMEOUT_SECS};
use crate::base::process;
use crate::plan::{CommandSpec, Frequency, Run, Step};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How much longer than a command's own timeout (plus the supervisor's SIGTERM grace) the
/// agent waits for the supervisor before killing it.
const SUPERVISOR_SLACK: Duration = Duration::from_secs(30);

/// The command as it may be shown: redacted, shortened.
pub fn shown(run: &Run) -> String {
    let s = match run {
        Run::Shell(s) => crate::base::redact::redact_text(s),
        Run::Argv(a) => a
            .iter()
            .map(|x| crate::base::redact::redact_text(x))
            .collect::<Vec<_>>()
            .join(" "),
    };
    let one_line = s.replace('\n', "\\n");
    if one_line.chars().count() > COMMAND_SHOWN_CHARS {
        let cut: String = one_line.chars().take(COMMAND_SHOWN_CHARS).collect();
        format!("{cut}…")
    } else {
        one_line
    }
}

/// A supervised step's files in the instance's `cmd/` directory.
pub(super) struct Files {
    pub rc: PathBuf,
    pub lock: PathBuf,
    pub out: PathBuf,
}

pub(super) fn files_for(ctx: &Ctx<'_>, step: &Step) -> Result<Files> {
    files_for_key(ctx, &step.id, step.frequency)
}

pub(super) fn files_for_key(ctx: &Ctx<'_>, id: &str, frequency: Frequency) -> Result<Files> {
    let dir = ctx
        .journal
        .path
        .parent()
        .ok_or_else(|| {
            Error::of(
                ErrorKind::NotFound,
                Stage::Apply,
                id,
                "journal has no directory",
            )
        })?
        .join("cmd");
    crate::base::state::ensure_private_dir(&dir, 0o700)?;
    let key = match frequency {
        Frequency::PerBoot => format!("{id}\0{}", ctx.journal.boot),
        Frequency::PerInstance => id.to_string(),
    };
    let digest = super::files::sha256_hex(key.as_bytes());
    let h = digest.get(..16).unwrap_or(&digest);
    Ok(Files {
        rc: dir.join(format!("{h}.rc")),
        lock: dir.join(format!("{h}.lock")),
        out: dir.join(format!("{h}.out")),
    })
}

pub(super) fn read_rc(p: &Path) -> Option<i32> {
    String::from_utf8_lossy(&read_small(p, 64)?)
        .trim()
        .parse()
        .ok()
}

/// A record of the `cmd/` directory, at most `max` bytes: never through a link, never
/// blocking (a FIFO or device put there is not read), only a regular file.
pub(super) fn read_small(p: &Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(p)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    f.take(max).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

fn flock(f: &File, nonblocking: bool) -> std::io::Result<bool> {
    let op = libc::LOCK_EX | if nonblocking { libc::LOCK_NB } else { 0 };
    loop {
        // SAFETY: flock on an owned, open descriptor.
        let r = unsafe { libc::flock(f.as_raw_fd(), op) };
        if r == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) if nonblocking => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// How the agent's own lock and output files are opened: created 0600, never through a
/// symlink at the file itself, closed on exec (the caller adds the access mode).
fn private_file() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    o
}

/// Open a step's lock file (not taking the lock).
pub(super) fn open_lock(path: &Path, place: &str) -> Result<File> {
    private_file()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| Error::io(Stage::Apply, place, "lock", e))
}

/// Take `lock` if no one holds it: false while the supervisor of a killed run holds it.
pub(super) fn try_lock(lock: &File, place: &str) -> Result<bool> {
    flock(lock, true).map_err(|e| Error::io(Stage::Apply, place, "lock", e))
}

/// Open and take a step's lock, waiting while the supervisor of a run that was killed still
/// holds it (its program is still running; the supervisor's own timeout bounds the wait).
pub(super) fn lock_step(path: &Path, place: &str) -> Result<File> {
    let lock = open_lock(path, place)?;
    if !try_lock(&lock, place)? {
        tracing::info!(step = %place, "waiting for what a previous run started to finish");
        flock(&lock, false).map_err(|e| Error::io(Stage::Apply, place, "lock", e))?;
    }
    Ok(lock)
}

/// A bootcmd/runcmd item without `--exec`: recorded as `skipped`, it runs on a later `--exec`
/// run. With `--exec` the items run as their list's one program (shell.rs).
pub fn skip(step: &Step, c: &CommandSpec) -> Outcome {
    tracing::info!(step = %step.id, command = %shown(&c.run), "command skipped (no --exec)");
    Outcome::Skipped
}

/// Start `argv` (`/bin/sh FILE`: a list's program, shell.rs) under a supervisor holding
/// `lock`, the caller's lock of `fl`, which records the program's exit status in `fl.rc`;
/// its output goes to `fl.out`. The caller waits for it (and for its pauses).
pub(super) fn start_program(
    ctx: &Ctx<'_>,
    place: &str,
    fl: &Files,
    lock: &File,
    argv: Vec<std::ffi::OsString>,
    timeout: u64,
) -> Result<process::Running> {
    let sup = supervision(ctx, place, fl, argv, timeout)?;
    // The supervisor enforces `timeout` itself (and keeps doing so if the agent dies); this
    // bound is the backstop should the supervisor itself hang.
    let backstop =
        Duration::from_secs(timeout) + crate::base::supervise::KILL_AFTER + SUPERVISOR_SLACK;
    let limits = process::Limits::new(backstop);
    // A forked child of this process supervises (no exec of this binary) when that is safe;
    // else (tests in a threaded harness) the binary started anew.
    let started = if ctx.opts.fork_supervisor {
        supervise_forked(sup, lock.as_raw_fd(), &limits)
    } else {
        let mut cmd = supervisor_command(ctx, &sup)?;
        crate::base::supervise::pass_lock(&mut cmd, lock.as_raw_fd());
        // Its own process group comes from process::start_inherited.
        process::start_inherited(cmd, &limits)
    };
    started.map_err(|e| match e {
        process::ProcessError::Spawn { source, .. } => {
            Error::io(Stage::Apply, place, "/bin/sh: cannot start", source)
        }
        e => Error::caused(Stage::Apply, place, e),
    })
}

/// What the supervisor of one command is given: the program and its arguments, where its
/// status goes, its timeout, its output file (opened here), the root it runs chrooted into.
struct Supervision {
    argv: Vec<std::ffi::OsString>,
    rc: PathBuf,
    timeout: u64,
    out: File,
    chroot: Option<PathBuf>,
}

fn supervision(
    ctx: &Ctx<'_>,
    place: &str,
    fl: &Files,
    argv: Vec<std::ffi::OsString>,
    timeout: u64,
) -> Result<Supervision> {
    // Append mode: the program's records of where an item's output ends are appended to
    // the same file by name (script.rs) and must land after what came before them.
    // Made anew: whatever was at the path (a link, a FIFO, a hard link) is not written to.
    let _ = std::fs::remove_file(&fl.out);
    let out = private_file()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_APPEND)
        .open(&fl.out)
        .map_err(|e| Error::io(Stage::Apply, place, "output file", e))?;
    Ok(Supervision {
        argv,
        rc: fl.rc.clone(),
        timeout,
        out,
        // As cloud-init on that node: the command sees the root's /etc, /bin/sh and PATH.
        chroot: (!ctx.target().is_host()).then(|| ctx.target().root.clone()),
    })
}

/// `nodeagent __supervise [--chroot R] RC TIMEOUT ARGV...`, its output into the step's
/// output file.
fn supervisor_command(ctx: &Ctx<'_>, sup: &Supervision) -> Result<Command> {
    let io = |e| Error::io(Stage::Apply, "supervisor", "output file", e);
    let mut cmd = Command::new(&ctx.opts.supervisor);
    cmd.arg0("nodeagent").arg(crate::base::supervise::ARG);
    if let Some(root) = &sup.chroot {
        cmd.arg(crate::base::supervise::CHROOT).arg(root);
    }
    cmd.arg(&sup.rc)
        .arg(sup.timeout.to_string())
        .args(&sup.argv)
        .stdin(Stdio::null())
        .stdout(sup.out.try_clone().map_err(io)?)
        .stderr(sup.out.try_clone().map_err(io)?)
        .current_dir("/");
    Ok(cmd)
}

/// The supervisor as a forked child: the same stdio, working directory and lock as
/// [`supervisor_command`]'s, none of the agent's other descriptors, then `supervise.rs`.
fn supervise_forked(
    sup: Supervision,
    lock_fd: std::os::fd::RawFd,
    limits: &process::Limits,
) -> std::result::Result<process::Running, process::ProcessError> {
    let null = File::open("/dev/null").map_err(|source| process::ProcessError::Spawn {
        program: "/dev/null".into(),
        source,
    })?;
    let (null_fd, out_fd) = (null.as_raw_fd(), sup.out.as_raw_fd());
    process::start_forked(crate::base::supervise::ARG, limits, move || {
        // SAFETY: descriptor calls on the child's own table. The step's lock stays open (as
        // the exec'd supervisor's fd 9) and close-on-exec: the command never gets it.
        unsafe {
            if libc::dup2(null_fd, 0) < 0
                || libc::dup2(out_fd, 1) < 0
                || libc::dup2(out_fd, 2) < 0
                || libc::chdir(c"/".as_ptr()) != 0
            {
                return 127;
            }
            close_from(3, lock_fd);
        }
        let Some((program, args)) = sup.argv.split_first() else {
            return 127; // refused by `supervision`
        };
        crate::base::supervise::supervise(
            &sup.rc,
            Duration::from_secs(sup.timeout),
            program,
            args,
            false,
            (sup.chroot.as_deref(), None),
        )
    })
}

/// Close every descriptor from `first` on but `keep` (the agent's journal, run lock and
/// platform channels are not the supervisor's to hold).
///
/// # Safety
/// Only in a forked child that will not use the closed descriptors again.
unsafe fn close_from(first: libc::c_uint, keep: std::os::fd::RawFd) {
    let keep = keep as libc::c_uint;
    // SAFETY: close_range(2) on this process's own table (Linux 5.9; older kernels: ENOSYS,
    // and the descriptors stay open as they are).
    unsafe {
        if keep < first {
            libc::close_range(first, libc::c_uint::MAX, 0);
        } else {
            if keep > first {
                libc::close_range(first, keep - 1, 0);
            }
            libc::close_range(keep + 1, libc::c_uint::MAX, 0);
        }
    }
}

/// Longest wait for an orphaned command's process group to die after SIGKILL.
const REAP_ORPHAN_WAIT: Duration = Duration::from_secs(10);

/// A supervisor killed alone (its command got SIGKILL with it, `supervise::run`) leaves the
/// command's process group id in `<h>.pgid`: whatever is left of that group (children of the
/// command) is killed before the command starts again, so two copies never run at once. The
/// caller holds the step's lock and found no status: no live supervisor owns the group.
pub(super) fn reap_orphan_group(rc: &Path) {
    let file = rc.with_extension("pgid");
    // A record from an earlier boot names a pid of that boot: never signal it.
    let this_boot = std::fs::metadata(&file)
        .and_then(|m| m.modified())
        .ok()
        .zip(boot_time())
        .is_some_and(|(written, booted)| written >= booted);
    let pgid = std::fs::read_to_string(&file)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .filter(|&p| p > 1 && this_boot);
    if let Some(pgid) = pgid {
        use nix::sys::signal::{Signal, killpg};
        let group = nix::unistd::Pid::from_raw(pgid);
        if killpg(group, Signal::SIGKILL).is_ok() {
            tracing::warn!(
                pgid,
                "killed what was left of a command whose supervisor was killed"
            );
            let t = std::time::Instant::now();
            // Signal 0: does any process of the group still exist (zombies count until reaped
            // by init, so the wait is bounded).
            while killpg(group, None).is_ok() && t.elapsed() < REAP_ORPHAN_WAIT {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    let _ = std::fs::remove_file(&file);
}

/// When the system booted (`btime` of /proc/stat).
fn boot_time() -> Option<std::time::SystemTime> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let secs = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(secs))
}

/// Run a system tool of the target: directly on a node, via `chroot DIR` under `--root`.
/// Returns stdout; a failure names the tool, its status and (redacted) stderr.
pub fn run_tool(t: &Target, argv: &[&str], stdin: Option<&[u8]>) -> Result<String> {
    let mut full: Vec<&str> = Vec::new();
    let root = t.root.to_string_lossy().into_owned();
    if !t.is_host() {
        full.extend(["chroot", root.as_str()]);
    }
    full.extend_from_slice(argv);
    run_host(&full, stdin)
}

thread_local! {
    /// The agent's run lock (see `hold_run_lock`), handed to every system tool it starts.
    static RUN_LOCK: std::cell::RefCell<Option<File>> = const { std::cell::RefCell::new(None) };
}

/// Take `<state>/run.lock` for this run, waiting while another agent, or a system tool
/// (`useradd`, `mkfs`...) orphaned by a killed agent, still holds it. Tools inherit the lock,
/// so a restarted agent never races a half-finished tool of its predecessor. Returns false
/// when this thread holds it already (`run` takes it before the state is written; `apply`
/// then leaves it to `run` to release).
pub fn hold_run_lock(state_dir: &Path) -> Result<bool> {
    if RUN_LOCK.with(|l| l.borrow().is_some()) {
        return Ok(false);
    }
    crate::base::state::ensure_private_dir(state_dir, 0o700)?;
    let p = state_dir.join("run.lock");
    let f = private_file()
        .read(true)
        .write(true)
        .open(&p)
        .map_err(|e| Error::io(Stage::Apply, "run.lock", "", e))?;
    if !flock(&f, true).map_err(|e| Error::io(Stage::Apply, "run.lock", "", e))? {
        tracing::info!("waiting for a previous run (or a tool it started) to finish");
        flock(&f, false).map_err(|e| Error::io(Stage::Apply, "run.lock", "", e))?;
    }
    RUN_LOCK.with(|l| *l.borrow_mut() = Some(f));
    Ok(true)
}

/// Release the run lock (end of `apply`).
pub fn release_run_lock() {
    RUN_LOCK.with(|l| *l.borrow_mut() = None);
}

/// Run a tool of the host (device tools under `--root`, chroot itself).
pub fn run_host(argv: &[&str], stdin: Option<&[u8]>) -> Result<String> {
    let name = argv.first().copied().unwrap_or("");
    let mut cmd = Command::new(name);
    // Only short-lived tools that change the user database or disks get the run lock; a
    // helper that may leave a daemon behind (`mount -a`, `systemctl`) must not hold it.
    let tool = if name == "chroot" {
        argv.get(2).copied().unwrap_or("")
    } else {
        name
    };
    let locked = matches!(
        tool,
        "useradd"
            | "usermod"
            | "userdel"
            | "groupadd"
            | "groupdel"
            | "chpasswd"
            | "visudo"
            | "sfdisk"
    ) || tool.starts_with("mkfs.");
    let lock_fd = RUN_LOCK.with(|l| l.borrow().as_ref().map(|f| f.as_raw_fd()));
    if let Some(fd) = lock_fd.filter(|_| locked) {
        // SAFETY: only fcntl between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
                Ok(())
            });
        }
    }
    cmd.args(argv.get(1..).unwrap_or_default())
        .env("LC_ALL", "C");
    let limits = process::Limits::new(Duration::from_secs(TOOL_TIMEOUT_SECS));
    let shown_argv = || {
        argv.iter()
            .map(|a| crate::base::redact::redact_text(a))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let out = process::run(cmd, &limits, stdin).map_err(|e| match e {
        process::ProcessError::Spawn { source, .. } => {
            Error::io(Stage::Apply, name, "cannot run", source)
        }
        e => Error::caused(Stage::Apply, name, e).map_message(|_| format!("`{}`", shown_argv())),
    })?;
    if !out.status.success() {
        let stderr = crate::base::redact::redact_text(String::from_utf8_lossy(&out.stderr).trim());
        return Err(Error::of(
            ErrorKind::CommandFailed,
            Stage::Apply,
            name,
            format!("`{}` failed ({}): {stderr}", shown_argv(), out.status),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What a bounded tool run ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRun {
    /// Exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Most bytes kept of a bounded tool's stdout and of its stderr each.
const TOOL_OUTPUT_BYTES: usize = 64 * 1024;

/// Run a host tool with a deadline (disk growth at boot) through process.rs: its own process
/// group, killed as a whole when `timeout` passes; output kept up to 64 KiB per stream. `path`
/// replaces `PATH` (tests put fake tools first). Err: it cannot start, or it timed out.
pub fn run_host_within(
    argv: &[&str],
    timeout: std::time::Duration,
    path: Option<&std::ffi::OsStr>,
) -> Result<ToolRun> {
    let name = argv.first().copied().unwrap_or("");
    let mut cmd = Command::new(name);
    cmd.args(argv.get(1..).unwrap_or_default())
        .env("LANG", "C")
        .env("LC_ALL", "C");
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    let limits = process::Limits::new(timeout)
        .stdout_cap(TOOL_OUTPUT_BYTES)
        .stderr_cap(TOOL_OUTPUT_BYTES);
    let out = process::run(cmd, &limits, None).map_err(|e| match e {
        process::ProcessError::Spawn { source, .. } => {
            Error::io(Stage::Apply, name, "cannot run", source)
        }
        process::ProcessError::TimedOut { .. } => Error::of(
            ErrorKind::Timeout,
            Stage::Apply,
            name,
            format!(
                "`{}` timed out after {} s",
                argv.iter()
                    .map(|a| crate::base::redact::redact_text(a))
                    .collect::<Vec<_>>()
                    .join(" "),
                timeout.as_secs()
            ),
        ),
        e => Error::caused(Stage::Apply, name, e),
    })?;
    Ok(ToolRun {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: crate::base::redact::redact_text(&String::from_utf8_lossy(&out.stderr)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_commands_are_redacted_and_bounded() {
        let long = Run::Shell(format!(
            "kubeadm join --token abcdef.0123456789abcdef {}",
            "x".repeat(500)
        ));
        let s = shown(&long);
        assert!(!s.contains("0123456789abcdef"), "{s}");
        assert_eq!(s.chars().count(), COMMAND_SHOWN_CHARS + 1);
    }
}
