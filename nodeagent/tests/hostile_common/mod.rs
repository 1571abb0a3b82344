//! Shared by the harden_* tests: run the agent as a child with a deadline, so a hostile input
//! that hangs it fails the test instead of the suite, and measure its peak memory.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus, Output};
use std::time::{Duration, Instant};

/// Peak resident memory every agent process must stay under, for any input inside the size
/// limits (README "Threat model").
pub const PEAK_RSS_BOUND_KIB: u64 = 256 * 1024;

/// Wait for `child` (stdout/stderr piped or null), killing it once `limit` has passed since
/// `start`. Returns its output and whether it had to be killed.
pub fn wait_or_kill(child: Child, start: Instant, limit: Duration) -> (Output, bool) {
    let (out, killed, _) = wait_measured(child, start, limit);
    (out, killed)
}

/// As `wait_or_kill`, plus the child's peak resident memory in KiB (`wait4` rusage: the
/// largest of the child and every descendant it waited for, e.g. the forked renderer).
pub fn wait_measured(mut child: Child, start: Instant, limit: Duration) -> (Output, bool, u64) {
    let pid = child.id() as libc::pid_t;
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .map(|pipe| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    })
    .collect();
    let mut killed = false;
    let (status, rss) = loop {
        let mut status = 0;
        // SAFETY: rusage is plain data, filled by wait4.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child, WNOHANG.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break (ExitStatus::from_raw(status), usage.ru_maxrss as u64);
        }
        assert!(r >= 0, "wait4: {}", std::io::Error::last_os_error());
        if !killed && start.elapsed() > limit {
            // SAFETY: the child is not reaped yet, so the pid is still ours.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut outs = readers.into_iter().map(|r| r.join().unwrap_or_default());
    let output = Output {
        status,
        stdout: outs.next().unwrap_or_default(),
        stderr: outs.next().unwrap_or_default(),
    };
    (output, killed, rss)
}
