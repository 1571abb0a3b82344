//! The command supervisor: `nodeagent __supervise RC_FILE TIMEOUT_SECS ARGV...`, started by
//! the agent for every bootcmd/runcmd item (see commands.rs for the exactly-once protocol).
//! It holds the step's lock (fd 9) while the command runs, enforces the timeout, then records
//! the exit status in RC_FILE durably, so the status outlives a killed agent.
//!
//! It is the agent's own code: a forked child of the agent for commands ([`supervise`], from
//! `commands.rs`, when the agent is single-threaded), else the agent's binary entered before
//! argument parsing. Either replaces the shell + `timeout` + `sync` + `mv` + `sync` of old
//! (about 20 ms a command here) with no dependency on coreutils in the image; the fork also
//! spares the exec and loading of the binary (under TCG emulation ~80 ms, `nodeagent
//! --version` against `/bin/true` in the guest).

use crate::base::process;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The first argument that selects the supervisor (not a user-facing subcommand).
pub const ARG: &str = "__supervise";
/// The same for kubeadm (`kubeadm/run.rs`): the program's output is relayed to the
/// supervisor's own stdout/stderr (the agent's pipes, read live) and kept flowing when the
/// agent is gone (write errors are ignored, never a SIGPIPE for kubeadm). The supervisor
/// enforces kubeadm's deadline (process.rs, kubeadm's own process group); the agent bounds
/// the supervisor by that deadline plus the kill grace.
pub const ARG_PIPED: &str = "__supervise-piped";
/// Option before RC_FILE: run the program chrooted into the directory that follows.
pub const CHROOT: &str = "--chroot";
/// Option before RC_FILE (after `--chroot`): the program's working directory (inside the
/// root), `/` if it is gone: the kubeadm step starts where the runcmd items before it left.
pub const CWD: &str = "--cwd";
/// Exit status of a command stopped by its timeout (as coreutils `timeout`).
pub const TIMED_OUT: i32 = 124;
/// Between SIGTERM and SIGKILL of a command that overran its timeout.
pub const KILL_AFTER: Duration = Duration::from_secs(10);
/// The lock descriptor the agent passes in.
const LOCK_FD: i32 = 9;

/// Have the supervisor that `cmd` starts hold the step's lock `lock_fd` as [`LOCK_FD`], open
/// across exec, so that a restarted agent sees the step still running.
pub fn pass_lock(cmd: &mut Command, lock_fd: std::os::fd::RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 clears close-on-exec; the same number needs it cleared by hand.
            if lock_fd == LOCK_FD {
                let flags = libc::fcntl(LOCK_FD, libc::F_GETFD);
                libc::fcntl(LOCK_FD, libc::F_SETFD, flags & !libc::FD_CLOEXEC);
            } else if libc::dup2(lock_fd, LOCK_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Entry point; `args` are the arguments after [`ARG`]. Returns the process exit status.
pub fn main(args: &[OsString]) -> i32 {
    main_with(args, false)
}

/// Entry point of [`ARG_PIPED`].
pub fn main_piped(args: &[OsString]) -> i32 {
    main_with(args, true)
}

fn main_with(args: &[OsString], piped: bool) -> i32 {
    // `--chroot DIR` (under `--root DIR --exec`): the program runs chrooted into DIR; the
    // supervisor itself stays outside, where its RC_FILE and lock are.
    let (chroot, args) = match args {
        [flag, dir, rest @ ..] if flag == CHROOT => (Some(Path::new(dir)), rest),
        _ => (None, args),
    };
    let (cwd, args) = match args {
        [flag, dir, rest @ ..] if flag == CWD => (dir.to_str(), rest),
        _ => (None, args),
    };
    let (Some(rc_file), Some(timeout), Some(program)) = (args.first(), args.get(1), args.get(2))
    else {
        eprintln!("nodeagent {ARG}: usage: {ARG} [{CHROOT} DIR] RC_FILE TIMEOUT_SECS ARGV...");
        return 2;
    };
    let Some(timeout) = timeout.to_str().and_then(|t| t.parse::<u64>().ok()) else {
        eprintln!("nodeagent {ARG}: bad timeout {timeout:?}");
        return 2;
    };
    // Keep the lock for ourselves: the command (and any daemon it starts) must not hold it.
    // SAFETY: fcntl on a descriptor number; harmless if it is not open.
    unsafe {
        let flags = libc::fcntl(LOCK_FD, libc::F_GETFD);
        if flags >= 0 {
            libc::fcntl(LOCK_FD, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
    supervise(
        Path::new(rc_file),
        Duration::from_secs(timeout),
        program,
        &args[3..],
        piped,
        (chroot, cwd),
    )
}

/// What the supervisor does once started: run the program, then record its status in
/// `rc_file`. Entered from [`main`] in a process of its own, or, for commands, straight in a
/// forked child of the agent (`commands.rs`: no exec of this binary, which costs more than
/// the rest of a short command's supervision), its stdio and the step's lock set up alike.
pub fn supervise(
    rc_file: &Path,
    timeout: Duration,
    program: &OsString,
    args: &[OsString],
    piped: bool,
    (chroot, cwd): (Option<&Path>, Option<&str>),
) -> i32 {
    let pgid_file = rc_file.with_extension("pgid");
    let rc = run(program, args, timeout, piped, (chroot, cwd), &pgid_file);
    let _ = std::fs::remove_file(&pgid_file);
    if let Err(e) = record(rc_file, rc) {
        eprintln!(
            "nodeagent {ARG}: cannot record exit status in {}: {e}",
            rc_file.display()
        );
        return if rc == 0 { 1 } else { rc };
    }
    rc
}

/// Run the command in its own process group (process.rs); its exit status as a shell reports
/// it. Over the timeout: SIGTERM to the group, SIGKILL KILL_AFTER later, status TIMED_OUT.
/// The program's group is its own in both modes, so the deadline kills what it started.
/// Piped ([`ARG_PIPED`]): the output is read through process.rs and copied to ours as it
/// arrives; once our reader is gone (the agent was killed) it is still read and dropped, so
/// the program never blocks on a full pipe or gets a SIGPIPE.
///
/// Should the supervisor itself be killed while the program runs, the program gets SIGKILL
/// (`PR_SET_PDEATHSIG`) and its process group id is in `pgid_file`: the next run kills what
/// is left of the group (`commands::reap_orphan_group`) before it starts the command again,
/// so a command never runs twice at once and never finishes without its status recorded.
/// With `chroot` the program runs chrooted into that directory (process::chroot_into).
fn run(
    program: &OsString,
    args: &[OsString],
    timeout: Duration,
    piped: bool,
    (chroot, cwd): (Option<&Path>, Option<&str>),
    pgid_file: &Path,
) -> i32 {
    let mut cmd = Command::new(program);
    cmd.args(args);
    if let Some(dir) = chroot {
        if let Err(e) = process::chroot_into(&mut cmd, dir, cwd) {
            eprintln!("nodeagent {ARG}: {}: {e}", dir.display());
            return 127;
        }
    } else if let Some(d) = cwd.filter(|d| Path::new(d).is_dir()) {
        cmd.current_dir(d);
    }
    let pgid_out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(pgid_file)
        .ok();
    let pgid_fd = pgid_out.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
    // Our pid, so the child notices when we died before its prctl took effect.
    let parent = std::process::id() as libc::pid_t;
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls (prctl, getppid, getpid, write, _exit) between
    // fork and exec; the number is formatted into a stack buffer.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                // The supervisor died before the prctl: do not run unsupervised.
                libc::_exit(137);
            }
            if let Some(fd) = pgid_fd {
                // The program leads its own process group (process.rs): its pid is the group.
                let mut buf = [0u8; 24];
                let mut n = libc::getpid() as u64;
                let mut i = buf.len();
                loop {
                    i -= 1;
                    buf[i] = b'0' + (n % 10) as u8;
                    n /= 10;
                    if n == 0 {
                        break;
                    }
                }
                libc::write(fd, buf[i..].as_ptr().cast(), buf.len() - i);
            }
            Ok(())
        });
    }
    // 0 = no timeout, as for coreutils `timeout` (the agent always passes one).
    let limits = process::Limits {
        deadline: (!timeout.is_zero()).then_some(timeout),
        ..process::Limits::new(timeout).kill_grace(KILL_AFTER)
    };
    let result = if piped {
        let (mut out, mut err) = (Some(std::io::stdout()), Some(std::io::stderr()));
        process::run_streaming(cmd, &limits, None, &mut |stream, chunk| match stream {
            process::Stream::Stdout => relay(&mut out, chunk),
            process::Stream::Stderr => relay(&mut err, chunk),
        })
    } else {
        process::run_inherited(cmd, &limits)
    };
    match result {
        Ok(s) => s.code().or(s.signal().map(|sig| 128 + sig)).unwrap_or(1),
        Err(process::ProcessError::TimedOut { .. }) => TIMED_OUT,
        Err(process::ProcessError::Spawn { source, .. }) => {
            eprintln!("{}: {source}", program.to_string_lossy());
            match source.kind() {
                std::io::ErrorKind::PermissionDenied => 126,
                _ => 127,
            }
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// Copy `chunk` to `sink`; after the first write error (the agent's end is closed) the
/// sink is dropped and the rest is discarded.
fn relay<W: Write>(sink: &mut Option<W>, chunk: &[u8]) {
    if let Some(w) = sink
        && w.write_all(chunk).and_then(|()| w.flush()).is_err()
    {
        *sink = None;
    }
}

/// Write `rc` to `path` atomically and durably (fsio.rs: mode 0600 from the first byte, a
/// symlink at the path replaced, not followed).
fn record(path: &Path, rc: i32) -> Result<(), crate::base::fsio::WriteError> {
    let opts = crate::base::fsio::Options::new(0o600);
    crate::base::fsio::write_atomic(path, format!("{rc}\n").as_bytes(), &opts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn records_the_exit_status() {
        let d = tempfile::tempdir().unwrap();
        let rc = d.path().join("x.rc");
        let p = rc.to_str().unwrap();
        assert_eq!(main(&os(&[p, "5", "/bin/sh", "-c", "exit 3"])), 3);
        assert_eq!(std::fs::read_to_string(&rc).unwrap(), "3\n");
        assert_eq!(
            main(&os(&[p, "5", "/bin/sh", "-c", "kill -TERM $$"])),
            128 + 15
        );
        assert_eq!(main(&os(&[p, "5", "/nonexistent/cmd"])), 127);
        assert_eq!(std::fs::read_to_string(&rc).unwrap(), "127\n");
        assert_eq!(main(&os(&[p, "5", "true"])), 0);
        assert_eq!(std::fs::read_to_string(&rc).unwrap(), "0\n");
    }

    #[test]
    fn the_command_runs_at_the_supervisor_s_priority() {
        let d = tempfile::tempdir().unwrap();
        let rc = d.path().join("x.rc");
        let out = d.path().join("nice");
        // Field 19 of /proc/PID/stat is the nice value (`comm` here is `(sh)`, no blanks).
        let script = format!(
            "read -r s < /proc/$$/stat; set -- $s; echo ${{19}} > {}",
            out.display()
        );
        let nice_of_command = |nice: i32| {
            // SAFETY: this test's own thread (nextest runs each test in its own process).
            if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } != 0 {
                return None;
            }
            assert_eq!(
                main(&os(&[rc.to_str().unwrap(), "5", "/bin/sh", "-c", &script])),
                0
            );
            Some(std::fs::read_to_string(&out).unwrap().trim().to_string())
        };
        match nice_of_command(-5) {
            Some(n) => assert_eq!(n, "-5", "the bootstrap's commands keep its priority"),
            None => crate::test_skip(
                "NODEAGENT_PRIVILEGED_TESTS",
                "the raised case: cannot raise the priority (not root)",
            ),
        }
        assert_eq!(nice_of_command(7).as_deref(), Some("7"));
    }

    #[test]
    fn a_command_over_its_timeout_is_stopped_with_124() {
        let d = tempfile::tempdir().unwrap();
        let rc = d.path().join("x.rc");
        let t = Instant::now();
        let code = main(&os(&[
            rc.to_str().unwrap(),
            "1",
            "/bin/sh",
            "-c",
            "sleep 30",
        ]));
        assert_eq!(code, TIMED_OUT);
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert_eq!(std::fs::read_to_string(&rc).unwrap(), "124\n");
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert_eq!(main(&os(&["rc"])), 2);
        assert_eq!(main(&os(&["rc", "soon", "true"])), 2);
    }
}
