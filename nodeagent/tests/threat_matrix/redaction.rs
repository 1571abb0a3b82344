//! The output sinks: stderr (the journal), status.json, `guestinfo.nodeagent.status`, the
//! VM Operator condition, kubeadm.log, nodeagent-output.log, the collect-logs archive. A
//! runcmd item and kubeadm (a stand-in) print secrets split across lines, across their two
//! streams and across reads (writes apart in time): kubeadm's `Using certificate key:` with
//! the key on the next line, written in pieces, a PEM body, a bootstrap token in two writes.
//! No sink ever holds one, and each sink holds the redacted lines around it (the test can
//! fail). Planted links, FIFOs and hard links at the sink files are never written through
//! nor wait forever; an output bomb leaves every sink and the agent's memory bounded.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const CERT_KEY: &str = "9f2c6e1d7a4b3c5d8e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d";
const TOKEN: &str = "abcdef.0123456789abcdef";
const PEM_LINES: [&str; 2] = ["MIIEsecretpemline1", "AAAAsecretpemline2=="];

fn secrets() -> Vec<&'static str> {
    vec![
        CERT_KEY,
        TOKEN,
        PEM_LINES[0],
        PEM_LINES[1],
        "0123456789abcdef",
    ]
}

/// Prints `Using certificate key:` and the key in pieces (the marker on `$1`'s stream, the
/// key on stdout), a token in two writes, a PEM body over two writes.
fn printer(marker_fd: &str) -> String {
    let (k1, k2) = CERT_KEY.split_at(24);
    let (p1, p2) = (PEM_LINES[0], PEM_LINES[1]);
    format!(
        "printf 'Using certi' >&{marker_fd}; sleep 0.2; printf 'ficate key:\\n' >&{marker_fd}; sleep 0.2; \
         printf '%s' {k1}; sleep 0.2; printf '%s\\n' {k2}; \
         printf 'token: abcdef.0123'; sleep 0.2; printf '456789abcdef\\n'; \
         printf -- '-----BEGIN RSA PRIVATE KEY-----\\n{p1}\\n'; sleep 0.2; \
         printf '{p2}\\n-----END RSA PRIVATE KEY-----\\n'"
    )
}

/// A node run through the CLI (`run --transport dir:D --root R --exec`) whose runcmd item
/// and kubeadm print the secrets; kubeadm fails, so the status carries its last lines.
pub struct Scenario {
    pub dir: tempfile::TempDir,
    pub stderr: String,
    pub exit: Option<i32>,
}

impl Scenario {
    pub fn d(&self) -> PathBuf {
        self.dir.path().join("d")
    }
    pub fn r(&self) -> PathBuf {
        self.dir.path().join("r")
    }
}

/// A root and platform directory ready for the CLI; `None` when not root.
pub fn node() -> Option<tempfile::TempDir> {
    let t = tempfile::tempdir().unwrap();
    let (d, r) = (t.path().join("d"), t.path().join("r"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::create_dir_all(&r).unwrap();
    if !crate::apply_common::prereq::exec_root(&r, &["/bin/sleep"]) {
        return None;
    }
    std::fs::write(
        d.join("guestinfo.metadata"),
        "instance-id: vm-sinks\nlocal-hostname: node1\n",
    )
    .unwrap();
    let bin = r.join("usr/local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(
        bin.join("kubeadm"),
        format!(
            "#!/bin/sh\ncase \"$1\" in\ninit) {}; exit 1 ;;\nesac\nexit 0\n",
            printer("2")
        ),
    )
    .unwrap();
    std::fs::set_permissions(bin.join("kubeadm"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        bin.join("printer"),
        format!("#!/bin/sh\n{}\n", printer("1")),
    )
    .unwrap();
    std::fs::set_permissions(bin.join("printer"), std::fs::Permissions::from_mode(0o755)).unwrap();
    Some(t)
}

/// runcmd: the printer, then CABPK's kubeadm line.
const RUNCMD: &str = "- printer\n- kubeadm init --config /run/kubeadm/kubeadm.yaml && echo success > /run/cluster-api/bootstrap-success.complete\n";

pub fn userdata(runcmd: &str) -> String {
    format!(
        "#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm.yaml\n  content: |\n    apiVersion: kubeadm.k8s.io/v1beta3\n    kind: InitConfiguration\n    ---\n    apiVersion: kubeadm.k8s.io/v1beta3\n    kind: ClusterConfiguration\nruncmd:\n{runcmd}"
    )
}

/// Run the CLI on `t`, stderr captured.
pub fn run_cli(t: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .current_dir(t)
        .args(["run", "--transport", "dir:d", "--root", "r", "--exec"])
        .env("NODEAGENT_LOG", "info")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn scenario() -> Option<Scenario> {
    let t = node()?;
    std::fs::write(t.path().join("d/guestinfo.userdata"), userdata(RUNCMD)).unwrap();
    let (exit, stderr) = run_cli(t.path());
    Some(Scenario {
        dir: t,
        stderr,
        exit,
    })
}

/// `text` holds no secret, and holds `shown` (what proves the sink saw the output).
fn clean(sink: &str, text: &str, shown: &str) {
    for s in secrets() {
        assert!(!text.contains(s), "{s} in {sink}:\n{text}");
    }
    assert!(text.contains(shown), "{sink} lacks {shown:?}:\n{text}");
}

#[test]
fn cell_sink_journal_split_secret() {
    let Some(s) = scenario() else {
        return;
    };
    assert_eq!(s.exit, Some(1), "{}", s.stderr);
    clean("stderr", &s.stderr, "ficate key:");
    clean("stderr", &s.stderr, "<redacted>");
}

#[test]
fn cell_sink_status_json_split_secret() {
    let Some(s) = scenario() else {
        return;
    };
    let text = std::fs::read_to_string(s.r().join("run/nodeagent/status.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["phase"], "failed", "{text}");
    clean("status.json", &text, "ficate key:");
    clean("status.json", &text, "<redacted>");
}

#[test]
fn cell_sink_guestinfo_status_split_secret() {
    let Some(s) = scenario() else {
        return;
    };
    let text = std::fs::read_to_string(s.d().join("guestinfo.nodeagent.status")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["phase"], "failed", "{text}");
    clean("guestinfo.nodeagent.status", &text, "kubeadm");
}

#[test]
fn cell_sink_vmop_condition_split_secret() {
    let Some(s) = scenario() else {
        return;
    };
    let text =
        std::fs::read_to_string(s.d().join("guestinfo.vmservice.bootstrap.condition")).unwrap();
    clean("the VM Operator condition", &text, "false,Failed,");
}

#[test]
fn cell_sink_kubeadm_log_split_secret() {
    let Some(s) = scenario() else {
        return;
    };
    let text = std::fs::read_to_string(s.r().join("var/log/nodeagent/kubeadm.log")).unwrap();
    clean("kubeadm.log", &text, "ficate key:");
    clean("kubeadm.log", &text, "-----END RSA PRIVATE KEY-----");
    let out = std::fs::read_to_string(s.r().join("var/log/nodeagent-output.log")).unwrap();
    // The runcmd item's lines, and kubeadm's.
    clean(
        "nodeagent-output.log",
        &out,
        "[runcmd[0]] Using certificate key:",
    );
    clean("nodeagent-output.log", &out, "[kubeadm] ");
}

/// The files of a collect-logs archive: name → text.
pub fn archive(root: &Path) -> Vec<(String, String)> {
    let out = root.parent().unwrap().join("logs.tar.gz");
    let st = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["collect-logs", "--root"])
        .arg(root)
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let gz = flate2::read::GzDecoder::new(std::fs::File::open(&out).unwrap());
    let mut tar = tar::Archive::new(gz);
    let mut files = Vec::new();
    for e in tar.entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().to_string_lossy().into_owned();
        let mut text = String::new();
        let _ = e.read_to_string(&mut text);
        files.push((name, text));
    }
    files
}

#[test]
fn cell_sink_collect_logs_split_secret() {
    let Some(s) = scenario() else {
        return;
    };
    let files = archive(&s.r());
    let all: String = files
        .iter()
        .map(|(n, t)| format!("== {n}\n{t}\n"))
        .collect();
    clean(
        "the collect-logs archive",
        &all,
        "nodeagent-logs/kubeadm.log",
    );
    clean("the collect-logs archive", &all, "ficate key:");
}

/// The sink files of a node with `make(path, outside)` planted at each: the run ends (in
/// time), the file outside the root is untouched.
fn planted(make: &dyn Fn(&Path, &Path)) {
    let Some(t) = node() else {
        return;
    };
    let r = t.path().join("r");
    let outside = t.path().join("victim");
    std::fs::write(&outside, "untouched\n").unwrap();
    std::fs::create_dir_all(r.join("var/log/nodeagent")).unwrap();
    std::fs::create_dir_all(r.join("run/nodeagent")).unwrap();
    for f in [
        "var/log/nodeagent/kubeadm.log",
        "var/log/nodeagent/events.jsonl",
        "var/log/nodeagent-output.log",
        "run/nodeagent/status.json",
    ] {
        make(&r.join(f), &outside);
    }
    std::fs::write(
        t.path().join("d/guestinfo.userdata"),
        userdata("- echo hello\n- kubeadm init --config /run/kubeadm/kubeadm.yaml && echo success > /run/cluster-api/bootstrap-success.complete\n"),
    )
    .unwrap();
    let start = Instant::now();
    let (exit, stderr) = run_cli(t.path());
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(exit, Some(1), "kubeadm's stand-in fails: {stderr}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "untouched\n");
    // The status still reached the platform.
    let status = std::fs::read_to_string(t.path().join("d/guestinfo.nodeagent.status")).unwrap();
    assert!(status.contains("\"failed\""), "{status}");
}

#[test]
fn cell_sink_files_link() {
    planted(&|at, outside| std::os::unix::fs::symlink(outside, at).unwrap());
}

#[test]
fn cell_sink_files_hardlink() {
    planted(&|at, outside| std::fs::hard_link(outside, at).unwrap());
}

#[test]
fn cell_sink_files_special() {
    planted(&|at, _| {
        nix::unistd::mkfifo(at, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
    });
}

/// A runcmd item and kubeadm printing 28 MiB (lines, and one 8 MiB line): the agent's
/// peak memory, the run's time and every sink stay bounded.
#[test]
// The child is reaped by wait4 (its peak memory comes with it), not by Child::wait.
#[allow(clippy::zombie_processes)]
fn cell_sink_output_bomb() {
    let Some(t) = node() else {
        return;
    };
    let r = t.path().join("r");
    crate::apply_common::prereq::install(&r, "/usr/bin/head", Path::new("/usr/bin/head"));
    crate::apply_common::prereq::install(&r, "/usr/bin/yes", Path::new("/usr/bin/yes"));
    crate::apply_common::prereq::install(&r, "/usr/bin/tr", Path::new("/usr/bin/tr"));
    std::fs::write(
        r.join("usr/local/bin/kubeadm"),
        "#!/bin/sh\ncase \"$1\" in\ninit) yes 'kubeadm line' | head -c 4194304; head -c 8388608 /dev/zero | tr '\\0' x; exit 1 ;;\nesac\nexit 0\n",
    )
    .unwrap();
    std::fs::create_dir_all(r.join("dev")).unwrap();
    let zero = r.join("dev/zero");
    // SAFETY: mknod of the zero device in the test's own root (major 1, minor 5).
    let made = unsafe {
        libc::mknod(
            std::ffi::CString::new(zero.to_str().unwrap())
                .unwrap()
                .as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(1, 5),
        )
    };
    assert_eq!(made, 0, "mknod /dev/zero");
    std::fs::write(
        t.path().join("d/guestinfo.userdata"),
        userdata("- yes 'runcmd line' | head -c 16777216\n- kubeadm init --config /run/kubeadm/kubeadm.yaml && echo success > /run/cluster-api/bootstrap-success.complete\n"),
    )
    .unwrap();
    let start = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .current_dir(t.path())
        .args(["run", "--transport", "dir:d", "--root", "r", "--exec"])
        .env("NODEAGENT_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (status, maxrss_kib) = wait_rusage(child.id() as i32);
    assert!(
        start.elapsed() < Duration::from_secs(240),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(status, 1);
    // The agent reads the output in 64 KiB pieces, keeps a bounded window of a line and the
    // last MiB of an item's lines: far below what was printed.
    assert!(maxrss_kib < 128 * 1024, "peak RSS {maxrss_kib} KiB");
    let max = libnodeagent::base::outlog::MAX_BYTES;
    for f in [
        "var/log/nodeagent-output.log",
        "var/log/nodeagent-output.log.1",
        "var/log/nodeagent/kubeadm.log",
        "var/log/nodeagent/kubeadm.log.1",
    ] {
        let len = std::fs::metadata(r.join(f)).map_or(0, |m| m.len());
        assert!(len <= max + 64 * 1024, "{f}: {len} bytes");
    }
    let status = std::fs::read_to_string(r.join("run/nodeagent/status.json")).unwrap();
    assert!(
        status.len() < 256 * 1024,
        "status.json: {} bytes",
        status.len()
    );
    let g = std::fs::read_to_string(t.path().join("d/guestinfo.nodeagent.status")).unwrap();
    assert!(
        g.len() <= libnodeagent::base::limits::MAX_STATUS_BYTES,
        "{}",
        g.len()
    );
    let c = std::fs::read_to_string(t.path().join("d/guestinfo.vmservice.bootstrap.condition"))
        .unwrap();
    assert!(
        c.starts_with("false,Failed,") && c.len() <= 1100,
        "{}",
        c.len()
    );
}

/// Wait for child `pid`: its exit status and peak resident memory (KiB).
fn wait_rusage(pid: i32) -> (i32, i64) {
    let mut status = 0;
    // SAFETY: zeroed rusage filled by wait4 on our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, writing into locals.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid);
    (libc::WEXITSTATUS(status), ru.ru_maxrss)
}

/// The agent killed at several instants of a run that publishes statuses: status.json and
/// the platform's status are whole JSON every time (written by rename, never in place), and
/// hold no secret.
#[test]
fn cell_sink_status_kill() {
    let Some(t) = node() else {
        return;
    };
    std::fs::write(t.path().join("d/guestinfo.userdata"), userdata(RUNCMD)).unwrap();
    for delay_ms in [50u64, 300, 700, 1200] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
            .current_dir(t.path())
            .args(["run", "--transport", "dir:d", "--root", "r", "--exec"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        for f in [
            t.path().join("r/run/nodeagent/status.json"),
            t.path().join("d/guestinfo.nodeagent.status"),
        ] {
            if let Ok(text) = std::fs::read_to_string(&f) {
                serde_json::from_str::<serde_json::Value>(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}: {text}", f.display()));
                for s in secrets() {
                    assert!(!text.contains(s), "{s} in {}", f.display());
                }
            }
        }
    }
    // And the run converges once it is left alone.
    let (exit, stderr) = run_cli(t.path());
    assert_eq!(exit, Some(1), "kubeadm's stand-in fails: {stderr}");
    for s in secrets() {
        assert!(!stderr.contains(s), "{s} in stderr");
    }
}

/// collect-logs with a link to a file outside the root, and a FIFO, planted at its sources:
/// neither is read (the link's target never reaches the archive), and it ends in time.
fn collect_planted(make: &dyn Fn(&Path, &Path)) {
    let t = tempfile::tempdir().unwrap();
    let r = t.path().join("r");
    let outside = t.path().join("outside");
    std::fs::write(&outside, "OUTSIDE-CONTENT\n").unwrap();
    std::fs::create_dir_all(r.join("var/log/nodeagent")).unwrap();
    std::fs::create_dir_all(r.join("run/nodeagent")).unwrap();
    std::fs::write(
        r.join("var/log/nodeagent/events.jsonl"),
        "{\"phase\":\"done\"}\n",
    )
    .unwrap();
    for f in ["var/log/nodeagent/kubeadm.log", "run/nodeagent/status.json"] {
        make(&r.join(f), &outside);
    }
    let start = Instant::now();
    let files = archive(&r);
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
    let all: String = files
        .iter()
        .map(|(n, t)| format!("== {n}\n{t}\n"))
        .collect();
    assert!(!all.contains("OUTSIDE-CONTENT"), "{all}");
    assert!(all.contains("nodeagent-logs/events.jsonl"), "{all}");
}

#[test]
fn cell_sink_collect_logs_link() {
    collect_planted(&|at, outside| std::os::unix::fs::symlink(outside, at).unwrap());
}

#[test]
fn cell_sink_collect_logs_special() {
    collect_planted(&|at, _| {
        nix::unistd::mkfifo(at, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
    });
}
