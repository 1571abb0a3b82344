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
use crate::base::error::{Error, Result, Stage};
use crate::base::limits::RPC_MAX_STDERR_BYTES;
use crate::base::process;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub const RPCTOOL: &str = "vmware-rpctool";
pub const VMTOOLSD: &str = "vmtoolsd";
/// cloud-init's NOVAL: stderr of a helper when the key does not exist.
pub const NO_VALUE: &str = "No value found";
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
            rpctool: crate::base::process::find_executable(RPCTOOL, path_var),
            vmtoolsd: crate::base::process::find_executable(VMTOOLSD, path_var),
            timeout: Duration::from_millis(crate::base::limits::RPC_TIMEOUT_MS),
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
                Err(why) => return Err(Error::unavailable(Stage::Transport, place, why)),
            }
        }
        let Some(vmtoolsd) = &self.vmtoolsd else {
            return Err(Error::unavailable(
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
                Err(Error::unavailable(
                    Stage::Transport,
                    place,
                    failures.join("; then "),
                ))
            }
        }
    }

    /// Run `path args...` through the bounded runner (process.rs): output capped, the
    /// helper's whole process group killed when it outlives the timeout.
    fn run(
        &self,
        tool: &'static str,
        path: &Path,
        args: &[&OsStr],
    ) -> std::result::Result<Outcome, String> {
        let mut cmd = Command::new(path);
        cmd.args(args);
        let limits = process::Limits::new(self.timeout)
            .stdout_cap(MAX_RAW_VALUE_BYTES)
            .stderr_cap(RPC_MAX_STDERR_BYTES);
        let out = process::run(cmd, &limits, None).map_err(|e| match e {
            process::ProcessError::Spawn { source, .. } => {
                format!("cannot run {}: {source}", path.display())
            }
            process::ProcessError::TimedOut { after, .. } => format!(
                "{tool} timed out after {} and was killed",
                process::show_duration(after)
            ),
            other => other.to_string(),
        })?;
        if out.stdout_cut {
            return Err(format!(
                "{tool} printed more than {MAX_RAW_VALUE_BYTES} bytes (MAX_RAW_VALUE_BYTES)"
            ));
        }
        Ok(Outcome {
            tool,
            success: out.status.success(),
            status: process::describe(&out.status),
            stdout: out.stdout,
            stderr: out.stderr,
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
        crate::base::redact::redact_text(stderr.trim())
    };
    Err(format!("{} failed ({}): {detail}", o.tool, o.status))
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
            return Err(Error::invalid(
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
