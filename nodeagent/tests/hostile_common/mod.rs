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

/// What `wait_measured` saw of a finished child.
pub struct Measured {
    pub output: Output,
    /// Killed at the limit: the child hung or ran far past every documented bound.
    pub killed: bool,
    /// Peak resident memory, KiB (`wait4` rusage: the largest of the child and every
    /// descendant it waited for, e.g. the forked renderer).
    pub max_rss_kib: u64,
    /// CPU time (user + system) of the child and the descendants it waited for. The "fails
    /// fast" bounds are checked on this, not on wall time: on a loaded two-core machine wall
    /// time measures the neighbours; a hang (no CPU) is what the kill limit catches.
    pub cpu: Duration,
}

/// Wait for `child` (stdout/stderr piped or null), killing it once `limit` has passed since
/// `start`; its output, whether it had to be killed, its peak memory and CPU time.
pub fn wait_measured(mut child: Child, start: Instant, limit: Duration) -> Measured {
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
    let (status, rss, cpu) = loop {
        let mut status = 0;
        // SAFETY: rusage is plain data, filled by wait4.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child, WNOHANG.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            let tv = |t: libc::timeval| {
                Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
            };
            break (
                ExitStatus::from_raw(status),
                usage.ru_maxrss as u64,
                tv(usage.ru_utime) + tv(usage.ru_stime),
            );
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
    Measured {
        output,
        killed,
        max_rss_kib: rss,
        cpu,
    }
}

/// What a run left in the places a secret could leak to (issue 13), as one text: the
/// per-instance journals, the status files under `run/nodeagent`, every log under `var/log`
/// (events, kubeadm, command output), the keys the run published through the `dir:`
/// transport stand-in (`data/guestinfo.nodeagent.*`: what vSphere would show), and every
/// file of the `nodeagent collect-logs --root` archive made afterwards. The agent's own
/// stderr/stdout are the caller's. Panics when collect-logs fails (it must always work).
pub fn leak_sinks(root: &std::path::Path, data: &std::path::Path) -> String {
    use std::path::Path;
    fn files_under(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => files_under(&p, out),
                Ok(m) if m.is_file() => out.push(p),
                _ => {}
            }
        }
    }
    let mut paths = Vec::new();
    for d in ["run/nodeagent", "var/log"] {
        files_under(&root.join(d), &mut paths);
    }
    let mut state = Vec::new();
    files_under(&root.join("var/lib/nodeagent/instances"), &mut state);
    paths.extend(state.into_iter().filter(|p| p.ends_with("journal.jsonl")));
    for e in std::fs::read_dir(data).unwrap().flatten() {
        if e.file_name()
            .to_string_lossy()
            .starts_with("guestinfo.nodeagent")
        {
            paths.push(e.path());
        }
    }
    let mut all = String::new();
    for p in &paths {
        all.push_str(&format!("== {}\n", p.display()));
        all.push_str(&String::from_utf8_lossy(
            &std::fs::read(p).unwrap_or_default(),
        ));
    }
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("logs.tar.gz");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .arg("collect-logs")
        .arg("--root")
        .arg(root)
        .arg("--output")
        .arg(&archive)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "collect-logs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gz = flate2::read::GzDecoder::new(std::fs::File::open(&archive).unwrap());
    let mut tar = tar::Archive::new(gz);
    for entry in tar.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().display().to_string();
        let mut text = Vec::new();
        entry.read_to_end(&mut text).unwrap();
        all.push_str(&format!("== collect-logs:{name}\n"));
        all.push_str(&String::from_utf8_lossy(&text));
    }
    all
}

/// Assert that none of `secrets` is in `stderr` or any sink of [`leak_sinks`], and that the
/// sinks hold nothing the redactor would still change (no token, password, key material or
/// `NAME=secret` left in them); the failure names the secret and shows the text.
pub fn assert_no_secret(
    root: &std::path::Path,
    data: &std::path::Path,
    stderr: &str,
    secrets: &[&str],
) {
    let everything = format!("== stderr\n{stderr}\n{}", leak_sinks(root, data));
    for s in secrets {
        assert!(!everything.contains(s), "{s} leaked:\n{everything}");
    }
    let redacted = nodeagent::redact::redact_text(&everything);
    if redacted != everything {
        let (a, b): (Vec<_>, Vec<_>) = everything
            .lines()
            .zip(redacted.lines())
            .filter(|(a, b)| a != b)
            .unzip();
        panic!("the redactor still finds secrets in what the run left:\n{a:#?}\nredacted: {b:#?}");
    }
}
