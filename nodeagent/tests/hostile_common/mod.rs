//! Shared by the harden_* tests: run the agent as a child with a deadline, so a hostile input
//! that hangs it fails the test instead of the suite, and measure its peak memory.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Peak resident memory every agent process must stay under, for any input inside the size
/// limits (README "Threat model").
pub const PEAK_RSS_BOUND_KIB: u64 = 256 * 1024;

/// What `MeasuredCommand::run` saw of a finished child.
pub struct Measured {
    pub output: Output,
    /// Killed at the limit: the child hung or ran far past every documented bound.
    pub killed: bool,
    /// Peak resident memory, KiB: the largest of the program and every descendant it waited
    /// for (e.g. the forked renderer), from `wait4` in the measuring parent.
    pub max_rss_kib: u64,
    /// CPU time (user + system) of the program and the descendants it waited for. The "fails
    /// fast" bounds are checked on this, not on wall time: on a loaded two-core machine wall
    /// time measures the neighbours; a hang (no CPU) is what the kill limit catches.
    pub cpu: Duration,
}

/// The measuring parent: forks, execs the program, `wait4`s it, writes `maxrss utime stime`
/// to the report file and exits as the program did (same code, same signal).
///
/// Why not `wait4` on a child of the test itself: Rust spawns with `vfork`/`posix_spawn`, and
/// Linux folds the peak of the memory a process had *before* `execve` into its `ru_maxrss`.
/// For a child of the test binary that is the test binary's own resident set, which under
/// `cargo test` (all tests as threads of one process, some holding 16 MiB inputs) passes the
/// bound by itself. A child forked from this small parent starts from its few MiB instead.
const MEASURING_PARENT: &str = r#"
import os, signal, sys
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
with open(sys.argv[1], "w") as report:
    report.write(f"{ru.ru_maxrss} {ru.ru_utime} {ru.ru_stime}\n")
if os.WIFSIGNALED(status):
    try:
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    except (OSError, ValueError):
        pass  # SIGKILL and SIGSTOP cannot be caught: their default already applies
    os.kill(os.getpid(), os.WTERMSIG(status))
os._exit(os.WEXITSTATUS(status))
"#;

/// A command for `program` under the measuring parent: set its arguments, environment and
/// stdio on `command` as for the program itself (stdout/stderr piped or null), then `run`.
pub struct MeasuredCommand {
    pub command: Command,
    report: tempfile::TempPath,
}

pub fn measured(program: impl AsRef<OsStr>) -> MeasuredCommand {
    let report = tempfile::NamedTempFile::new()
        .expect("a report file for the measuring parent")
        .into_temp_path();
    // The interpreter itself, not a launcher script on PATH (pyenv's shims run bash through
    // `env`): a caller may give the program a PATH without either.
    static PYTHON: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let python = PYTHON.get_or_init(|| {
        let out = Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 (the measuring parent) on PATH");
        std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    });
    let mut command = Command::new(python);
    command
        .arg("-c")
        .arg(MEASURING_PARENT)
        .arg(&report)
        .arg(program)
        // Its own process group, so the kill at the limit reaches the program too.
        .process_group(0);
    MeasuredCommand { command, report }
}

impl MeasuredCommand {
    /// Spawn and wait, killing the process group once `limit` has passed; the output,
    /// whether it had to be killed, the program's peak memory and CPU time.
    pub fn run(mut self, limit: Duration) -> Measured {
        let start = Instant::now();
        let mut child = self.command.spawn().expect("spawning the measuring parent");
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
        let status = loop {
            if let Some(status) = child.try_wait().expect("waiting for the measuring parent") {
                break status;
            }
            if !killed && start.elapsed() > limit {
                // SAFETY: the group is the parent's (not reaped yet, so its pid is still ours).
                unsafe { libc::killpg(pid, libc::SIGKILL) };
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
        // Absent when the parent was killed: no figure, and `killed` says why.
        let report = std::fs::read_to_string(&self.report).unwrap_or_default();
        let mut figures = report.split_whitespace();
        let max_rss_kib = figures.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut seconds = || {
            figures
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .map_or(Duration::ZERO, Duration::from_secs_f64)
        };
        let cpu = seconds() + seconds();
        Measured {
            output,
            killed,
            max_rss_kib,
            cpu,
        }
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
        // What is JSON on the node is JSON in the archive (redaction once ate a backslash).
        if name.ends_with(".json") {
            let v: Result<serde_json::Value, _> = serde_json::from_slice(&text);
            assert!(v.is_ok(), "collect-logs {name} is not JSON: {v:?}");
        } else if name.ends_with(".jsonl") {
            for l in String::from_utf8_lossy(&text).lines() {
                let v: Result<serde_json::Value, _> = serde_json::from_str(l);
                assert!(v.is_ok(), "collect-logs {name}: a line is not JSON: {l}");
            }
        }
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
    let redacted = libnodeagent::base::redact::redact_text(&everything);
    if redacted != everything {
        let (a, b): (Vec<_>, Vec<_>) = everything
            .lines()
            .zip(redacted.lines())
            .filter(|(a, b)| a != b)
            .unzip();
        panic!("the redactor still finds secrets in what the run left:\n{a:#?}\nredacted: {b:#?}");
    }
}
