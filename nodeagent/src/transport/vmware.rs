//! Transport vmware.
//!
//! guestinfo over the VMware RPC helpers, exactly as cloud-init (docs/formats.md A.4):
//! `vmware-rpctool "info-get guestinfo.K"` (the RPC string is ONE argv element), and
//! `vmtoolsd --cmd "info-get guestinfo.K"` when rpctool is missing or fails (secure RPC
//! makes rpctool fail with `Permission denied`). A non-zero exit whose stderr is exactly
//! `No value found` means the key is absent. Unlike cloud-init, every call has a timeout
//! (RPC_TIMEOUT_MS) after which the helper's whole process group is killed.
//!
//! Fallback detail: cloud-init re-runs the whole three-key read with vmtoolsd after a
//! failure; we switch to vmtoolsd at the first failing call and keep using it (sticky),
//! which reads the same values without repeating the calls that already succeeded.

use super::{MAX_RAW_VALUE_BYTES, Transport, check_key};
use crate::error::{Error, Result, Stage};
use crate::limits::RPC_MAX_STDERR_BYTES;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const RPCTOOL: &str = "vmware-rpctool";
pub const VMTOOLSD: &str = "vmtoolsd";
/// cloud-init's NOVAL: stderr of a helper when the key does not exist.
pub const NO_VALUE: &str = "No value found";
/// Most stderr bytes kept for an error message.

#[derive(Debug)]
pub struct VmwareTransport {
    pub rpctool: Option<PathBuf>,
    pub vmtoolsd: Option<PathBuf>,
    pub timeout: Duration,
    /// Set once rpctool failed and vmtoolsd took over (cloud-init's fallback).
    use_vmtoolsd: AtomicBool,
}

/// Which helper ran and how it ended.
struct Outcome {
    tool: &'static str,
    success: bool,
    status: String,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl VmwareTransport {
    /// Helpers looked up on the process `PATH`.
    pub fn from_env() -> Self {
        Self::with_search_path(std::env::var_os("PATH").as_deref())
    }

    /// Helpers looked up on `path_var` (a `PATH`-style list), without spawning `which`.
    pub fn with_search_path(path_var: Option<&OsStr>) -> Self {
        VmwareTransport {
            rpctool: find_executable(RPCTOOL, path_var),
            vmtoolsd: find_executable(VMTOOLSD, path_var),
            timeout: Duration::from_millis(crate::limits::RPC_TIMEOUT_MS),
            use_vmtoolsd: AtomicBool::new(false),
        }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn has_tool(&self) -> bool {
        self.rpctool.is_some() || self.vmtoolsd.is_some()
    }

    /// Run one RPC (`info-get ...` / `info-set ...`) with rpctool, falling back to vmtoolsd.
    fn rpc(&self, rpc: &OsStr, place: &str, absent_ok: bool) -> Result<Option<Vec<u8>>> {
        let mut failures = Vec::new();
        if let (Some(rpctool), false) = (&self.rpctool, self.use_vmtoolsd.load(Ordering::Relaxed)) {
            match self
                .run(RPCTOOL, rpctool, &[rpc])
                .and_then(|o| classify(o, absent_ok))
            {
                Ok(v) => return Ok(v),
                Err(why) if self.vmtoolsd.is_some() => {
                    tracing::warn!(
                        place,
                        "{RPCTOOL} failed ({why}); falling back to {VMTOOLSD} --cmd"
                    );
                    self.use_vmtoolsd.store(true, Ordering::Relaxed);
                    failures.push(why);
                }
                Err(why) => return Err(Error::new(Stage::Transport, place, why)),
            }
        }
        let Some(vmtoolsd) = &self.vmtoolsd else {
            return Err(Error::new(
                Stage::Transport,
                place,
                format!("neither {RPCTOOL} nor {VMTOOLSD} found on PATH"),
            ));
        };
        match self
            .run(VMTOOLSD, vmtoolsd, &[OsStr::new("--cmd"), rpc])
            .and_then(|o| classify(o, absent_ok))
        {
            Ok(v) => Ok(v),
            Err(why) => {
                failures.push(why);
                Err(Error::new(
                    Stage::Transport,
                    place,
                    failures.join("; then "),
                ))
            }
        }
    }

    /// Spawn `path args...` in its own process group, capture bounded stdout/stderr, and
    /// kill the group when it outlives the timeout. Errors are messages for `rpc`.
    fn run(
        &self,
        tool: &'static str,
        path: &Path,
        args: &[&OsStr],
    ) -> std::result::Result<Outcome, String> {
        let mut attempt = 0;
        let mut child = loop {
            let spawned = Command::new(path)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0)
                .spawn();
            match spawned {
                Ok(c) => break c,
                // ETXTBSY: the helper is being replaced (package upgrade) or another thread's
                // fork briefly holds a write fd to it; it clears within milliseconds.
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempt < 50 => {
                    attempt += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(format!("cannot run {}: {e}", path.display())),
            }
        };
        let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
        let kill_group = || {
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        };
        let (tx, rx) = mpsc::channel();
        for (idx, pipe) in [
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .enumerate()
        {
            let Some(pipe) = pipe else { continue };
            let tx = tx.clone();
            let cap = if idx == 0 {
                MAX_RAW_VALUE_BYTES
            } else {
                RPC_MAX_STDERR_BYTES
            };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let r = pipe.take(cap as u64 + 1).read_to_end(&mut buf);
                let _ = tx.send((idx, r.map(|_| buf)));
            });
        }
        drop(tx);
        let deadline = Instant::now() + self.timeout;
        let timeout_msg = || {
            format!(
                "{tool} timed out after {} ms and was killed",
                self.timeout.as_millis()
            )
        };
        let fail = |child: &mut std::process::Child, msg: String| {
            kill_group();
            let _ = child.wait();
            Err(msg)
        };
        // Output first: the pipes reach EOF as soon as the helper (and anything it started)
        // exits, so there is no polling delay. The child is not reaped yet, so its pid and
        // process-group id cannot be reused while we may still kill the group.
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((0, Ok(b))) => stdout = b,
                Ok((_, Ok(b))) => stderr = b,
                Ok((_, Err(e))) => return fail(&mut child, format!("reading {tool} output: {e}")),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => return fail(&mut child, timeout_msg()),
            }
        }
        // Then the exit status (normally immediate once the pipes are closed).
        let mut sleep = Duration::from_micros(100);
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) if Instant::now() >= deadline => return fail(&mut child, timeout_msg()),
                Ok(None) => {
                    std::thread::sleep(sleep);
                    sleep = (sleep * 2).min(Duration::from_millis(20));
                }
                Err(e) => return fail(&mut child, format!("waiting for {tool}: {e}")),
            }
        };
        if stdout.len() > MAX_RAW_VALUE_BYTES {
            return Err(format!(
                "{tool} printed more than {MAX_RAW_VALUE_BYTES} bytes (MAX_RAW_VALUE_BYTES)"
            ));
        }
        stderr.truncate(RPC_MAX_STDERR_BYTES);
        let status_text = match status.code() {
            Some(c) => format!("exit status {c}"),
            None => format!(
                "killed by signal {}",
                std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)
            ),
        };
        Ok(Outcome {
            tool,
            success: status.success(),
            status: status_text,
            stdout,
            stderr,
        })
    }
}

/// cloud-init's reading of a helper's result (A.4): success ⇒ stdout (empty ⇒ absent);
/// failure with stderr `No value found` ⇒ absent (for reads); other failures ⇒ an error
/// carrying the helper's redacted stderr.
fn classify(o: Outcome, absent_ok: bool) -> std::result::Result<Option<Vec<u8>>, String> {
    let stderr = String::from_utf8_lossy(&o.stderr);
    let stderr = stderr.trim_end_matches('\n');
    if o.success {
        return Ok(if o.stdout.is_empty() {
            None
        } else {
            Some(o.stdout)
        });
    }
    if absent_ok && stderr == NO_VALUE {
        return Ok(None);
    }
    let detail = if stderr.trim().is_empty() {
        "no error output".to_string()
    } else {
        crate::redact::redact_text(stderr.trim())
    };
    Err(format!("{} failed ({}): {detail}", o.tool, o.status))
}

/// First executable regular file named `name` in a `PATH`-style list. Empty entries
/// (meaning the current directory) are ignored on purpose.
pub fn find_executable(name: &str, path_var: Option<&OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path_var?)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

impl Transport for VmwareTransport {
    fn name(&self) -> &'static str {
        "vmware"
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        let rpc = format!("info-get guestinfo.{key}");
        self.rpc(OsStr::new(&rpc), &format!("guestinfo.{key}"), true)
    }

    /// `info-set guestinfo.K V` as one argument; an empty value becomes a single space
    /// because `info-set` cannot store an empty value (cloud-init does the same).
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        check_key(key)?;
        let place = format!("guestinfo.{key}");
        if value.contains(&0) {
            return Err(Error::new(
                Stage::Transport,
                place,
                "value contains a NUL byte, which guestinfo cannot carry",
            ));
        }
        let mut rpc = format!("info-set guestinfo.{key} ").into_bytes();
        rpc.extend_from_slice(if value.is_empty() { b" " } else { value });
        let rpc = OsString::from_vec(rpc);
        self.rpc(&rpc, &place, false).map(|_| ())
    }
}
