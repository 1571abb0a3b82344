//! The one way the agent runs an external program: a deadline, an output cap, the whole
//! process group killed when the deadline passes, and a run-wide deadline no call outlives.
//!
//! Every program (guestinfo RPC helpers, kubeadm, system tools, the command supervisor's
//! child) goes through [`run`], [`run_streaming`] or [`run_inherited`]. One thread per call:
//! `poll(2)` on the output pipes, stdin and a pidfd, so there is no reader thread to leak and
//! no polling delay. Plain `poll` rather than tokio: measured in BENCHMARKS.md ("Process
//! runner"), a tokio runtime costs start-up time and resident memory for nothing the agent
//! needs (it runs one program at a time).
//!
//! Each start is logged (debug) and each kill at the deadline (warn) with the command line
//! redacted and cut ([`shown`]): arguments carry tokens and passwords.
//!
//! The child is reaped only after any kill, so its pid and process-group id cannot be reused
//! while we may still signal the group.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// First executable regular file named `name` in a `PATH`-style list. Empty entries
/// (meaning the current directory) are ignored on purpose.
pub fn find_executable(
    name: &str,
    path_var: Option<&std::ffi::OsStr>,
) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path_var?)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Bounds for one program run.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// From spawn to exit; `None` means only the run-wide deadline applies.
    pub deadline: Option<Duration>,
    /// Stdout bytes kept by [`run`]; the rest is read and dropped (`Output::stdout_cut`).
    pub stdout_cap: usize,
    /// Stderr bytes kept by [`run`].
    pub stderr_cap: usize,
    /// SIGTERM to the group first and this long before SIGKILL; zero: SIGKILL at once.
    pub kill_grace: Duration,
}

impl Limits {
    /// A deadline and the default output caps (`limits::PROCESS_OUTPUT_CAP_BYTES`).
    pub fn new(deadline: Duration) -> Limits {
        Limits {
            deadline: Some(deadline),
            stdout_cap: crate::base::limits::PROCESS_OUTPUT_CAP_BYTES,
            stderr_cap: crate::base::limits::PROCESS_OUTPUT_CAP_BYTES,
            kill_grace: Duration::ZERO,
        }
    }

    pub fn stdout_cap(mut self, bytes: usize) -> Limits {
        self.stdout_cap = bytes;
        self
    }

    pub fn stderr_cap(mut self, bytes: usize) -> Limits {
        self.stderr_cap = bytes;
        self
    }

    pub fn kill_grace(mut self, grace: Duration) -> Limits {
        self.kill_grace = grace;
        self
    }
}

/// What a finished program left.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Stdout was longer than `Limits::stdout_cap` (only the first bytes are kept).
    pub stdout_cut: bool,
}

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("cannot start {program}: {source}")]
    Spawn { program: String, source: io::Error },
    #[error("{program} timed out after {} and was killed", show_duration(*after))]
    TimedOut { program: String, after: Duration },
    #[error("not started: {program} would outlive the run's deadline (RUN_DEADLINE_SECS)")]
    RunDeadline { program: String },
    #[error("{program}: {source}")]
    Io { program: String, source: io::Error },
}

impl ProcessError {
    /// The error kind it reports as: a wait that ran out is `timeout`; a failed start or
    /// pipe is the kind of its `io::Error`.
    pub fn kind(&self) -> crate::base::error::ErrorKind {
        use crate::base::error::ErrorKind;
        match self {
            ProcessError::TimedOut { .. } | ProcessError::RunDeadline { .. } => ErrorKind::Timeout,
            ProcessError::Spawn { source, .. } | ProcessError::Io { source, .. } => {
                match source.kind() {
                    io::ErrorKind::NotFound => ErrorKind::NotFound,
                    _ => ErrorKind::Io,
                }
            }
        }
    }
}

/// `600s`, or `400 ms` when not a whole number of seconds.
pub fn show_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// The run-wide deadline (set once by `nodeagent run`); every program's deadline is cut to it.
static RUN_DEADLINE: Mutex<Option<Instant>> = Mutex::new(None);

/// Start the run's total deadline: no program started afterwards outlives `now + total`.
pub fn set_run_deadline(total: Duration) {
    let at = Instant::now().checked_add(total);
    if let Ok(mut d) = RUN_DEADLINE.lock() {
        *d = at;
    }
}

/// Time left before the run's deadline (`None`: no run deadline is set).
pub fn run_time_left() -> Option<Duration> {
    let d = *RUN_DEADLINE.lock().ok()?;
    d.map(|d| d.saturating_duration_since(Instant::now()))
}

/// The effective deadline of one call: its own, cut to the run's.
fn deadline_of(limits: &Limits, program: &str) -> Result<Option<Instant>, ProcessError> {
    let own = limits.deadline.and_then(|d| Instant::now().checked_add(d));
    match run_time_left() {
        Some(left) if left.is_zero() => Err(ProcessError::RunDeadline {
            program: program.to_string(),
        }),
        Some(left) => {
            let run = Instant::now() + left;
            Ok(Some(own.map_or(run, |o| o.min(run))))
        }
        None => Ok(own),
    }
}

/// The effective deadline of one call and, for the timeout message, the bound it gives,
/// to the millisecond.
fn bounds(limits: &Limits, program: &str) -> Result<(Option<Instant>, Duration), ProcessError> {
    let t0 = Instant::now();
    let deadline = deadline_of(limits, program)?;
    let budget = deadline.map_or(Duration::ZERO, |d| {
        Duration::from_millis(d.saturating_duration_since(t0).as_millis() as u64)
    });
    Ok((deadline, budget))
}

/// The command line as it may be logged: arguments joined, then redacted (tokens, passwords,
/// key material), and cut to `limits::COMMAND_SHOWN_CHARS`.
fn shown(cmd: &Command) -> String {
    let mut line = program_name(cmd);
    for a in cmd.get_args() {
        line.push(' ');
        line.push_str(&a.to_string_lossy());
    }
    crate::base::redact::redact_text(&line)
        .chars()
        .take(crate::base::limits::COMMAND_SHOWN_CHARS)
        .collect()
}

fn program_name(cmd: &Command) -> String {
    cmd.get_program().to_string_lossy().into_owned()
}

/// Spawn in a new process group, retrying a short while on ETXTBSY (the program is being
/// replaced by a package upgrade, or another thread's fork briefly holds a write fd to it).
fn spawn(cmd: &mut Command, program: &str) -> Result<Child, ProcessError> {
    // The child keeps the agent's priority: the main unit's boot priority covers the whole
    // bootstrap, its commands included, and ends with the run (crate::base::priority).
    cmd.process_group(0);
    tracing::debug!(command = %shown(cmd), "start");
    let mut attempt = 0;
    loop {
        match cmd.spawn() {
            Ok(c) => return Ok(c),
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempt < 50 => {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(source) => {
                return Err(ProcessError::Spawn {
                    program: program.to_string(),
                    source,
                });
            }
        }
    }
}

/// Run `cmd` with piped output, keeping at most the caps of each stream.
pub fn run(cmd: Command, limits: &Limits, stdin: Option<&[u8]>) -> Result<Output, ProcessError> {
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let mut stdout_cut = false;
    let status = run_streaming(cmd, limits, stdin, &mut |stream, chunk| {
        let (buf, cap) = match stream {
            Stream::Stdout => (&mut stdout, limits.stdout_cap),
            Stream::Stderr => (&mut stderr, limits.stderr_cap),
        };
        let room = cap.saturating_sub(buf.len());
        if chunk.len() > room && stream == Stream::Stdout {
            stdout_cut = true;
        }
        buf.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
    })?;
    Ok(Output {
        status,
        stdout,
        stderr,
        stdout_cut,
    })
}

/// After the program exits, how long its output is still drained (a daemon it left behind
/// may hold the pipes open; we stop reading rather than wait for it).
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);
/// How long a killed group's leader is waited for before it is left as a zombie.
const REAP_AFTER_KILL: Duration = Duration::from_secs(5);

/// Run `cmd` with piped output, handing every chunk read to `sink` as it arrives.
pub fn run_streaming(
    mut cmd: Command,
    limits: &Limits,
    stdin: Option<&[u8]>,
    sink: &mut dyn FnMut(Stream, &[u8]),
) -> Result<ExitStatus, ProcessError> {
    let program = program_name(&cmd);
    let (deadline, budget) = bounds(limits, &program)?;
    // The child may change the tree under a `--root` (confine.rs).
    let _forget = crate::base::confine::Forget::now();
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = spawn(&mut cmd, &program)?;
    let io_err = |source| ProcessError::Io {
        program: program.clone(),
        source,
    };
    let pidfd = pidfd_open(child.id() as i32);
    let (mut pipes, mut input) = take_pipes(&mut child, stdin).map_err(io_err)?;
    let mut exited: Option<ExitStatus> = None;
    let mut drain_until: Option<Instant> = None;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if input.as_ref().is_some_and(|(_, rest)| rest.is_empty()) {
            input = None; // closes the pipe: EOF for the program
        }
        if exited.is_none() {
            exited = child.try_wait().map_err(io_err)?;
            if exited.is_some() {
                drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
            }
        }
        if exited.is_some() && pipes.is_empty() {
            break;
        }
        let now = Instant::now();
        let limit = match (deadline, drain_until) {
            (_, Some(d)) => Some(d),
            (Some(d), None) => Some(d),
            (None, None) => None,
        };
        if limit.is_some_and(|l| now >= l) {
            if exited.is_some() {
                break; // output still held open by something the program left behind
            }
            kill_group(&mut child, pidfd.as_ref(), limits.kill_grace);
            tracing::warn!(command = %shown(&cmd), "killed at its deadline");
            return Err(ProcessError::TimedOut {
                program,
                after: budget,
            });
        }
        let mut fds: Vec<libc::pollfd> = pipes
            .iter()
            .map(|(_, f)| pollfd(f.as_raw_fd(), libc::POLLIN))
            .collect();
        if let Some((f, _)) = &input {
            fds.push(pollfd(f.as_raw_fd(), libc::POLLOUT));
        }
        // The pidfd only wakes the loop; try_wait above reads the status.
        if let (Some(p), None) = (&pidfd, exited) {
            fds.push(pollfd(p.as_raw_fd(), libc::POLLIN));
        }
        // Without a pidfd (kernel < 5.3) the exit is noticed by polling try_wait.
        let step = if pidfd.is_none() && exited.is_none() {
            Some(Duration::from_millis(10))
        } else {
            None
        };
        let wait = match (limit.map(|l| l.saturating_duration_since(now)), step) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let ms = poll_ms(wait);
        // SAFETY: `fds` is a valid array of pollfd of the given length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            kill_group(&mut child, pidfd.as_ref(), Duration::ZERO);
            return Err(io_err(e));
        }
        read_ready(&mut pipes, &fds, &mut buf, sink);
        feed(&mut input);
    }
    match exited {
        Some(s) => Ok(s),
        None => child.wait().map_err(io_err),
    }
}

/// Start `cmd` chrooted into `root` with `/` as its working directory, as cloud-init would
/// run it on that node: under `--root DIR --exec` userdata commands and kubeadm see DIR's
/// `/etc`, `/bin/sh` and PATH, never the host's. The program name is looked up after the
/// chroot (an absolute one inside DIR, a bare one on PATH inside DIR).
pub fn chroot_into(cmd: &mut Command, root: &std::path::Path, cwd: Option<&str>) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let dir = std::ffi::CString::new(root.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "root path contains NUL"))?;
    // The working directory inside the root (the one bootcmd/runcmd items left, for kubeadm);
    // `/` when it is gone, as a shell that cannot `cd` stays where it is.
    let cwd = std::ffi::CString::new(cwd.unwrap_or("/"))
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "directory contains NUL"))?;
    // SAFETY: only chroot(2) and chdir(2), async-signal-safe, between fork and exec; the paths
    // were made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::chroot(dir.as_ptr()) != 0
                || (libc::chdir(cwd.as_ptr()) != 0 && libc::chdir(c"/".as_ptr()) != 0)
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

/// The child's output pipes and its input (with what is still to be written), all made
/// non-blocking for the poll loop.
#[allow(clippy::type_complexity)]
fn take_pipes<'a>(
    child: &mut Child,
    stdin: Option<&'a [u8]>,
) -> io::Result<(Vec<(Stream, OwnedFd)>, Option<(OwnedFd, &'a [u8])>)> {
    let mut pipes: Vec<(Stream, OwnedFd)> = Vec::new();
    if let Some(o) = child.stdout.take() {
        pipes.push((Stream::Stdout, OwnedFd::from(o)));
    }
    if let Some(e) = child.stderr.take() {
        pipes.push((Stream::Stderr, OwnedFd::from(e)));
    }
    let input = child
        .stdin
        .take()
        .map(|w| (OwnedFd::from(w), stdin.unwrap_or_default()));
    for fd in pipes
        .iter()
        .map(|(_, f)| f)
        .chain(input.iter().map(|(f, _)| f))
    {
        set_nonblocking(fd.as_raw_fd())?;
    }
    Ok((pipes, input))
}

/// Hand what the pipes that `poll` marked ready hold to `sink`; drop the pipes that closed.
/// `fds` starts with one entry per pipe, in order.
fn read_ready(
    pipes: &mut Vec<(Stream, OwnedFd)>,
    fds: &[libc::pollfd],
    buf: &mut [u8],
    sink: &mut dyn FnMut(Stream, &[u8]),
) {
    let mut closed = Vec::new();
    for (i, (stream, fd)) in pipes.iter().enumerate() {
        let revents = fds.get(i).map_or(0, |p| p.revents);
        if revents == 0 {
            continue;
        }
        match read_some(fd.as_raw_fd(), buf) {
            Ok(0) => closed.push(i),
            Ok(n) => sink(*stream, buf.get(..n).unwrap_or_default()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => closed.push(i),
        }
    }
    for i in closed.into_iter().rev() {
        pipes.remove(i);
    }
}

/// Write what the input pipe takes now; drop the input once the program stops reading it.
fn feed(input: &mut Option<(OwnedFd, &[u8])>) {
    if let Some((f, rest)) = input {
        match write_some(f.as_raw_fd(), rest) {
            Ok(n) => *rest = rest.get(n..).unwrap_or_default(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // EPIPE: the program does not read its input; not our failure.
            Err(_) => *input = None,
        }
    }
}

/// `poll`'s timeout for a wait: rounded up to the next millisecond, -1 for none.
fn poll_ms(wait: Option<Duration>) -> i32 {
    wait.map_or(-1, |w| w.as_millis().min(i32::MAX as u128 - 1) as i32 + 1)
}

/// Run `cmd` with the stdio the caller set up (the supervisor's output file), bounded by
/// `limits.deadline` and the run deadline; the group is killed when it passes.
pub fn run_inherited(cmd: Command, limits: &Limits) -> Result<ExitStatus, ProcessError> {
    start_inherited(cmd, limits)?.wait()
}

/// A program started by [`start_inherited`] or [`start_forked`], running until its deadline:
/// the caller waits for it in slices and does other work between them (a list's program
/// pauses at the kubeadm step, which the agent runs meanwhile).
pub struct Running {
    leader: Box<dyn Leader>,
    pidfd: Option<OwnedFd>,
    deadline: Option<Instant>,
    budget: Duration,
    grace: Duration,
    program: String,
    /// The child may change the tree under a `--root` (confine.rs).
    _forget: crate::base::confine::Forget,
}

impl Running {
    /// Wait at most `slice` for the program to exit: its status once it has, `None` while it
    /// runs. At its deadline its whole group is killed: `TimedOut`.
    pub fn wait_for(&mut self, slice: Duration) -> Result<Option<ExitStatus>, ProcessError> {
        let until = Instant::now() + slice;
        let stop = self.deadline.map_or(until, |d| d.min(until));
        if !exits_by(self.leader.as_mut(), self.pidfd.as_ref(), stop) {
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                kill_group(self.leader.as_mut(), self.pidfd.as_ref(), self.grace);
                tracing::warn!(program = %self.program, "killed at its deadline");
                return Err(ProcessError::TimedOut {
                    program: self.program.clone(),
                    after: self.budget,
                });
            }
            return Ok(None);
        }
        loop {
            match self.leader.wait() {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(ProcessError::Io {
                        program: self.program.clone(),
                        source,
                    });
                }
                Ok(s) => return Ok(Some(s)),
            }
        }
    }

    /// End it now if it still runs (its whole group killed), and reap it: for a program
    /// whose answer is no longer wanted.
    pub fn stop(mut self) {
        if exits_by(self.leader.as_mut(), self.pidfd.as_ref(), Instant::now()) {
            let _ = self.leader.wait();
        } else {
            kill_group(self.leader.as_mut(), self.pidfd.as_ref(), Duration::ZERO);
        }
    }

    /// Wait for the exit (or the deadline).
    pub fn wait(mut self) -> Result<ExitStatus, ProcessError> {
        loop {
            // A day per slice: the deadline (or none) bounds the whole wait.
            if let Some(s) = self.wait_for(Duration::from_secs(86_400))? {
                return Ok(s);
            }
        }
    }
}

/// Start `cmd` with the stdio the caller set up, in its own process group, bounded by
/// `limits.deadline` and the run deadline (enforced while the caller waits).
pub fn start_inherited(mut cmd: Command, limits: &Limits) -> Result<Running, ProcessError> {
    let _forget = crate::base::confine::Forget::now();
    let program = program_name(&cmd);
    let (deadline, budget) = bounds(limits, &program)?;
    let child = spawn(&mut cmd, &program)?;
    let pidfd = pidfd_open(child.id() as i32);
    tracing::debug!(command = %shown(&cmd), "started, waited for in slices");
    Ok(Running {
        leader: Box::new(child),
        pidfd,
        deadline,
        budget,
        grace: limits.kill_grace,
        program,
        _forget,
    })
}

/// A started program this module may signal: its pid leads its own process group.
trait Leader {
    fn pid(&self) -> i32;
    /// Whether it has exited, without blocking (reaping it if so: `wait` then answers at once).
    fn exited(&mut self) -> bool;
    fn wait(&mut self) -> io::Result<ExitStatus>;
}

impl Leader for Child {
    fn pid(&self) -> i32 {
        self.id() as i32
    }
    fn exited(&mut self) -> bool {
        !matches!(self.try_wait(), Ok(None))
    }
    fn wait(&mut self) -> io::Result<ExitStatus> {
        Child::wait(self)
    }
}

/// A child made by `fork` without exec ([`run_forked`]).
struct Forked {
    pid: libc::pid_t,
    status: Option<ExitStatus>,
}

impl Forked {
    fn waitpid(&mut self, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
        use std::os::unix::process::ExitStatusExt;
        if self.status.is_none() {
            let mut raw = 0;
            // SAFETY: waitpid on our own child, writing into a local int.
            match unsafe { libc::waitpid(self.pid, &mut raw, flags) } {
                0 => {}
                n if n == self.pid => self.status = Some(ExitStatus::from_raw(raw)),
                _ => return Err(io::Error::last_os_error()),
            }
        }
        Ok(self.status)
    }
}

impl Leader for Forked {
    fn pid(&self) -> i32 {
        self.pid
    }
    fn exited(&mut self) -> bool {
        !matches!(self.waitpid(libc::WNOHANG), Ok(None))
    }
    fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            match self.waitpid(0) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
                Ok(Some(s)) => return Ok(s),
                Ok(None) => {}
            }
        }
    }
}

/// SIGTERM (when `grace` is not zero), then SIGKILL to the child's process group; reap the
/// leader within REAP_AFTER_KILL.
fn kill_group(child: &mut dyn Leader, pidfd: Option<&OwnedFd>, grace: Duration) {
    let pgid = nix::unistd::Pid::from_raw(child.pid());
    use nix::sys::signal::{Signal, killpg};
    if !grace.is_zero() {
        let _ = killpg(pgid, Signal::SIGTERM);
        if exits_by(child, pidfd, Instant::now() + grace) {
            let _ = killpg(pgid, Signal::SIGKILL); // what the leader left behind
            let _ = child.wait();
            return;
        }
    }
    let _ = killpg(pgid, Signal::SIGKILL);
    if exits_by(child, pidfd, Instant::now() + REAP_AFTER_KILL) {
        let _ = child.wait();
    }
}

/// Whether the child exits before `deadline`, without reaping it.
fn exits_by(child: &mut dyn Leader, pidfd: Option<&OwnedFd>, deadline: Instant) -> bool {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match pidfd {
            Some(fd) => {
                let mut p = [pollfd(fd.as_raw_fd(), libc::POLLIN)];
                let ms = poll_ms(Some(left));
                // SAFETY: one valid pollfd.
                match unsafe { libc::poll(p.as_mut_ptr(), 1, ms) } {
                    n if n > 0 => return true,
                    0 if Instant::now() >= deadline => return false,
                    0 => {}
                    _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
                    _ => return true,
                }
            }
            None => {
                // No pidfd: poll the status (this reaps it; `wait` then returns it again).
                if child.exited() {
                    return true;
                }
                if left.is_zero() {
                    return false;
                }
                std::thread::sleep(left.min(Duration::from_millis(10)));
            }
        }
    }
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    // SAFETY: a fresh descriptor we own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Whether this process runs one thread only: [`run_forked`]'s condition (`/proc/self/stat`
/// field 20; false when it cannot be read).
pub fn single_threaded() -> bool {
    read_proc("/proc/self/stat").is_ok_and(|stat| threads_in_stat(&stat) == Some(1))
}

/// A `/proc` text file. Its size reads as 0, so a plain read starts at 32 bytes and doubles
/// (six to nine reads for `/proc/self/stat` or a routing table): a page is room at once.
pub fn read_proc(path: &str) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::with_capacity(4096);
    std::fs::File::open(path)?.read_to_string(&mut text)?;
    Ok(text)
}

/// The kernel's boot id, read once: it cannot change while this process lives.
pub fn kernel_boot_id() -> Option<&'static str> {
    static KERNEL: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    KERNEL
        .get_or_init(|| {
            read_proc("/proc/sys/kernel/random/boot_id")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .as_deref()
}

/// Field 20 (`num_threads`) of a `/proc/PID/stat` line.
fn threads_in_stat(stat: &str) -> Option<u64> {
    // The fields after the command name, which is in parentheses and may hold anything.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(17)?.parse().ok()
}

/// Run `f` in a forked child of this process, without exec: the child starts with a copy of
/// the caller's memory and descriptors (what it keeps of them is `f`'s business) in a
/// process group of its own, and exits with `f`'s value; a panic in it ends it with 101.
/// Bounded as [`run_inherited`]: at the deadline the group is killed. Far cheaper than
/// starting a program (no exec, no loading), for work this binary does itself.
///
/// Only when [`single_threaded`]: in the child only the calling thread exists, and a lock
/// another thread held at the fork (the allocator's aside, which glibc resets) would never
/// be released there. The child logs nothing (tracing is silenced in it).
pub fn run_forked(
    name: &str,
    limits: &Limits,
    f: impl FnOnce() -> i32,
) -> Result<ExitStatus, ProcessError> {
    start_forked(name, limits, f)?.wait()
}

/// [`run_forked`]'s start: the child runs `f`; the caller waits for it ([`Running`]).
pub fn start_forked(
    name: &str,
    limits: &Limits,
    f: impl FnOnce() -> i32,
) -> Result<Running, ProcessError> {
    let (deadline, budget) = bounds(limits, name)?;
    // The child may change the tree under a `--root` (confine.rs).
    let _forget = crate::base::confine::Forget::now();
    tracing::debug!(name, "fork");
    // SAFETY: single-threaded (the caller checked), so the child can run ordinary code.
    let pid = match unsafe { libc::fork() } {
        -1 => {
            return Err(ProcessError::Spawn {
                program: name.to_string(),
                source: io::Error::last_os_error(),
            });
        }
        0 => {
            // SAFETY: the child's own process group, before anything else runs in it.
            unsafe { libc::setpgid(0, 0) };
            let _quiet =
                tracing::subscriber::set_default(tracing::subscriber::NoSubscriber::default());
            std::panic::set_hook(Box::new(|info| eprintln!("{info}")));
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(101);
            // SAFETY: ends the child without the parent's atexit handlers or destructors.
            unsafe { libc::_exit(code) }
        }
        pid => pid,
    };
    // Also from here, so that a kill at the deadline never finds the group not yet made
    // (EACCES once the child has set it itself: harmless).
    // SAFETY: setpgid on our own child.
    unsafe { libc::setpgid(pid, pid) };
    Ok(Running {
        leader: Box::new(Forked { pid, status: None }),
        pidfd: pidfd_open(pid),
        deadline,
        budget,
        grace: limits.kill_grace,
        program: name.to_string(),
        _forget,
    })
}

fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn read_some(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the File does not own the descriptor (ManuallyDrop), it only borrows it.
    let mut f = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
    f.read(buf)
}

fn write_some(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: as in read_some.
    let mut f = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
    f.write(data)
}

/// How a program ended, as a shell would say it: `exit status 3`, `killed by signal 9`.
pub fn describe(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        (None, None) => "ended without a status".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    }

    /// `script` run with a generous deadline and no input.
    fn sh_output(script: &str) -> Output {
        run(sh(script), &Limits::new(Duration::from_secs(20)), None).unwrap()
    }

    #[test]
    fn output_and_status_are_returned() {
        let out = sh_output("echo out; echo err >&2; exit 3");
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
        assert_eq!(out.status.code(), Some(3));
        assert!(!out.stdout_cut);
    }

    #[test]
    fn stdin_is_fed_and_closed() {
        let data = vec![b'x'; 300_000]; // more than a pipe buffer
        let out = run(
            sh("wc -c"),
            &Limits::new(Duration::from_secs(20)),
            Some(&data),
        )
        .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "300000");
    }

    #[test]
    fn output_over_the_cap_is_cut_not_buffered() {
        let out = run(
            sh("head -c 1000000 /dev/zero"),
            &Limits::new(Duration::from_secs(20)).stdout_cap(1000),
            None,
        )
        .unwrap();
        assert_eq!(out.stdout.len(), 1000);
        assert!(out.stdout_cut);
        assert!(out.status.success());
    }

    #[test]
    fn logged_command_lines_are_redacted_and_bounded() {
        let mut cmd = Command::new("kubeadm");
        cmd.args(["join", "--token", "abcdef.0123456789abcdef"]);
        cmd.arg("x".repeat(500));
        let line = shown(&cmd);
        assert!(line.starts_with("kubeadm join --token "), "{line}");
        assert!(!line.contains("0123456789abcdef"), "{line}");
        assert_eq!(
            line.chars().count(),
            crate::base::limits::COMMAND_SHOWN_CHARS
        );
    }

    #[test]
    fn the_whole_group_is_killed_at_the_deadline() {
        let d = tempfile::tempdir().unwrap();
        let pidfile = d.path().join("pid");
        let script = format!("sleep 60 & echo $! > {}; wait", pidfile.display());
        let t = Instant::now();
        let e = run(sh(&script), &Limits::new(Duration::from_millis(500)), None).unwrap_err();
        assert!(matches!(e, ProcessError::TimedOut { .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The grandchild is gone too (or a zombie awaiting init: not running `sleep`). SIGKILL
        // is delivered at once but the dying task can still show `R` for a moment on a loaded
        // machine: wait for its exit, bounded.
        let gone = || {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            (state.is_empty() || state.contains(") Z"), state)
        };
        let until = Instant::now() + Duration::from_secs(5);
        while !gone().0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        let (dead, state) = gone();
        assert!(dead, "{state}");
    }

    #[test]
    fn a_daemon_holding_the_pipe_does_not_hold_the_caller() {
        let t = Instant::now();
        let out = sh_output("(sleep 30 &) ; echo started");
        assert_eq!(out.stdout, b"started\n");
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }

    #[test]
    fn a_missing_program_is_a_spawn_error_naming_it() {
        let e = run(
            Command::new("/nonexistent/tool"),
            &Limits::new(Duration::from_secs(5)),
            None,
        )
        .unwrap_err();
        assert!(matches!(e, ProcessError::Spawn { .. }));
        assert!(e.to_string().contains("/nonexistent/tool"), "{e}");
    }

    #[test]
    fn inherited_runs_are_bounded_too() {
        let t = Instant::now();
        let e =
            run_inherited(sh("sleep 60"), &Limits::new(Duration::from_millis(300))).unwrap_err();
        assert!(matches!(e, ProcessError::TimedOut { .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(8));
        let s = run_inherited(sh("exit 4"), &Limits::new(Duration::from_secs(20))).unwrap();
        assert_eq!(s.code(), Some(4));
    }

    #[test]
    fn forked_children_exit_with_their_value_and_die_with_their_group_at_the_deadline() {
        // This harness runs other threads (run_forked's callers check single_threaded); the
        // children here only start a shell, which no other thread of a test touches.
        let limits = Limits::new(Duration::from_secs(20));
        assert_eq!(run_forked("t", &limits, || 7).unwrap().code(), Some(7));
        assert_eq!(
            run_forked("t", &limits, || panic!("boom")).unwrap().code(),
            Some(101)
        );
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let shell = format!("echo $$ > {}; exec sleep 60", pid_file.display());
        let t = Instant::now();
        let e = run_forked("t", &Limits::new(Duration::from_secs(1)), move || {
            sh(&shell).status().map_or(2, |s| s.code().unwrap_or(1))
        })
        .unwrap_err();
        assert!(matches!(e, ProcessError::TimedOut { .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(8));
        // The grandchild (`sleep`, in the child's process group) was killed with it.
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let gone = (0..500).any(|_| {
            // SAFETY: signal 0 only checks whether the pid exists.
            let dead = unsafe { libc::kill(pid, 0) } != 0;
            if !dead {
                std::thread::sleep(Duration::from_millis(10));
            }
            dead
        });
        assert!(gone, "sleep {pid} outlived its group's kill");
    }

    #[test]
    fn the_thread_count_is_read_after_any_command_name() {
        let line = |comm: &str, threads: &str| {
            format!(
                "4242 ({comm}) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 {threads} 0 99 1 2"
            )
        };
        assert_eq!(threads_in_stat(&line("nodeagent", "1")), Some(1));
        assert_eq!(threads_in_stat(&line("a) (b 7 8", "3")), Some(3));
        assert_eq!(threads_in_stat(&line("x", "many")), None);
        assert_eq!(threads_in_stat("4242 (cut"), None);
    }

    #[test]
    fn single_threaded_counts_this_process_s_threads() {
        // The test harness runs this test on a thread of its own.
        assert!(!single_threaded());
    }

    #[test]
    fn nothing_starts_after_the_run_deadline() {
        set_run_deadline(Duration::ZERO);
        let e = run(sh("true"), &Limits::new(Duration::from_secs(5)), None).unwrap_err();
        *RUN_DEADLINE.lock().unwrap() = None;
        assert!(matches!(e, ProcessError::RunDeadline { .. }), "{e}");
    }
}
