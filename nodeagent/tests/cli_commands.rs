//! The operator's CLI through the real binary, one test per command: human and `--json`
//! output, errors (as JSON with `--json`) and exit codes (0 ok, 1 failure, 2 degraded,
//! 3 still running, 64 usage). Everything runs on a `dir:` transport and a `--root` tree in a
//! temporary directory; commands run only where a test says `--exec` (an `echo`, chrooted into the root).

// Test code slices output it knows to be ASCII (ids, hashes, base64).
#![allow(clippy::string_slice)]

mod prereq;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n{}", self.stdout, self.stderr))
    }
}

fn nodeagent(args: &[&str]) -> Out {
    nodeagent_env(args, &[])
}

fn nodeagent_env(args: &[&str], env: &[(&str, &str)]) -> Out {
    let o = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(args)
        .envs(env.iter().copied())
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

const USERDATA: &str = "## template: jinja\n#cloud-config\nwrite_files:\n- path: /etc/demo.txt\n  content: 'hello {{ v1.local_hostname }}'\n  permissions: '0640'\nruncmd:\n- echo hi from runcmd\n";

/// A node: platform data in `d` (dir transport), host facts, and an empty root `r`.
struct Node {
    _t: tempfile::TempDir,
    d: PathBuf,
    r: PathBuf,
    facts: PathBuf,
}

impl Node {
    fn new(userdata: &str) -> Node {
        let t = tempfile::tempdir().unwrap();
        let (d, r) = (t.path().join("d"), t.path().join("r"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::create_dir_all(r.join("etc")).unwrap();
        std::fs::write(r.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
        std::fs::write(r.join("etc/group"), "root:x:0:\n").unwrap();
        std::fs::write(d.join("guestinfo.userdata"), userdata).unwrap();
        std::fs::write(
            d.join("guestinfo.metadata"),
            "instance-id: vm-1\nlocal-hostname: cp-0\n",
        )
        .unwrap();
        let facts = t.path().join("facts.yaml");
        std::fs::write(&facts, "hostname: cp-0\nlocal-ipv4: 10.0.0.10\n").unwrap();
        Node { _t: t, d, r, facts }
    }

    fn transport(&self) -> String {
        format!("dir:{}", self.d.display())
    }

    /// `CMD --transport dir:D --facts F --root R ARGS…`
    fn cmd(&self, cmd: &str, args: &[&str]) -> Out {
        let (t, f, r) = (
            self.transport(),
            self.facts.display().to_string(),
            self.root(),
        );
        let mut all = vec![cmd, "--transport", &t, "--facts", &f, "--root", &r];
        all.extend(args);
        nodeagent(&all)
    }

    fn root(&self) -> String {
        self.r.display().to_string()
    }

    /// For `--exec`: commands run chrooted into the root, so it gets a shell. False (the
    /// test skips, saying why) when chroot is not permitted.
    fn exec_ready(&self) -> bool {
        prereq::exec_root(&self.r, &[])
    }
}

/// A JSON array of strings.
fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

fn is_error_json(v: &Value) -> bool {
    ["kind", "place", "message"]
        .iter()
        .all(|k| v["error"][k].is_string())
}

#[test]
fn usage_errors_exit_64_and_are_json_with_json() {
    for args in [
        &["bogus"][..],
        &["status", "--timeout", "5"],
        &["plan", "--no-such-flag"],
        &["query"],
        &[
            "mint",
            "pki",
            "--cluster",
            "c",
            "--out",
            "x",
            "--algorithm",
            "dsa",
        ],
        &["single"],
    ] {
        let o = nodeagent(args);
        assert_eq!(o.code, 64, "{args:?}: {}{}", o.stdout, o.stderr);
        assert!(!o.stderr.is_empty(), "{args:?}: no message");
        let mut with_json = args.to_vec();
        with_json.push("--json");
        let o = nodeagent(&with_json);
        assert_eq!(o.code, 64, "{with_json:?}");
        let v = o.json();
        assert!(is_error_json(&v), "{with_json:?}: {v}");
        assert_eq!(v["error"]["kind"], "usage");
    }
    // `--timeout` without `--wait` names the missing flag.
    let v = nodeagent(&["status", "--timeout", "5", "--json"]).json();
    assert!(
        v["error"]["message"].as_str().unwrap().contains("--wait"),
        "{v}"
    );
    // Help and version are not errors.
    assert_eq!(nodeagent(&["--help"]).code, 0);
}

#[test]
fn version_names_commit_date_and_target() {
    let o = nodeagent(&["--version"]);
    assert_eq!(o.code, 0);
    let line = o.stdout.trim();
    // `nodeagent 0.1.0 (commit abc123, built 2026-11-25, x86_64-unknown-linux-gnu)`:
    // packaging/build-deb reads the second word.
    assert_eq!(
        line.split_whitespace().nth(1),
        Some(env!("CARGO_PKG_VERSION")),
        "{line}"
    );
    assert!(line.contains("(commit "), "{line}");
    let date = line.split("built ").nth(1).unwrap_or_default();
    assert!(
        date.len() > 10 && date.as_bytes()[4] == b'-' && date.as_bytes()[7] == b'-',
        "{line}"
    );
    assert!(line.contains("-linux-"), "{line}");
}

#[test]
fn plan_json_modes_are_octal_and_warnings_are_shown() {
    let n = Node::new(USERDATA);
    // An encoding nodeagent does not know: plain text, and a warning on plan and render too.
    std::fs::write(n.d.join("guestinfo.userdata.encoding"), "rot13").unwrap();
    let o = n.cmd("plan", &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("write /etc/demo.txt"), "{}", o.stdout);
    assert!(
        o.stdout.contains("warning: ") && o.stdout.contains("rot13"),
        "{}",
        o.stdout
    );
    let v = n.cmd("plan", &["--json"]).json();
    let file = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["action"]["kind"] == "write-file")
        .unwrap();
    assert_eq!(file["action"]["mode"], "0640");
    assert!(v["warnings"][0].as_str().unwrap().contains("rot13"), "{v}");
    let o = n.cmd("render", &[]);
    assert_eq!(o.code, 0);
    assert!(
        o.stderr.contains("warning: ") && o.stderr.contains("rot13"),
        "{}",
        o.stderr
    );
    assert!(o.stdout.contains("content: 'hello cp-0'"), "{}", o.stdout);
    let v = n.cmd("render", &["--json"]).json();
    assert!(v["userdata"].as_str().unwrap().contains("hello cp-0"));
    assert!(v["warnings"][0].as_str().unwrap().contains("rot13"));
    // A bad template is a failure (1), as JSON with --json.
    std::fs::remove_file(n.d.join("guestinfo.userdata.encoding")).unwrap();
    std::fs::write(
        n.d.join("guestinfo.userdata"),
        "## template: jinja\n#cloud-config\nruncmd: ['{{ nope }}']\n",
    )
    .unwrap();
    for cmd in ["plan", "render"] {
        let o = n.cmd(cmd, &[]);
        assert_eq!(o.code, 1, "{cmd}");
        assert!(o.stderr.contains("nope"), "{cmd}: {}", o.stderr);
        let o = n.cmd(cmd, &["--json"]);
        assert_eq!(o.code, 1, "{cmd}");
        let v = o.json();
        assert!(is_error_json(&v), "{v}");
        assert!(
            v["error"]["place"].as_str().unwrap().contains("line 3"),
            "{v}"
        );
    }
}

#[test]
fn validate_reports_every_error_and_cannot_read() {
    let t = tempfile::tempdir().unwrap();
    let f = t.path().join("ud.yaml");
    std::fs::write(
        &f,
        "#cloud-config\npackages: [vim]\nwrite_files:\n- path: /etc/x\n  permissions: 644\nbogus: 1\nruncmd: 5\n",
    )
    .unwrap();
    let file = f.display().to_string();
    let o = nodeagent(&["validate", &file]);
    assert_eq!(o.code, 1, "{}", o.stdout);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert!(lines.len() >= 3, "all errors, one a line:\n{}", o.stdout);
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with(&format!("{file}: invalid: ")))
    );
    for want in ["packages", "bogus", "runcmd"] {
        assert!(o.stdout.contains(want), "{want}:\n{}", o.stdout);
    }
    let v = nodeagent(&["validate", &file, "--json"]).json();
    assert_eq!(v["valid"], false);
    assert_eq!(v["errors"].as_array().unwrap().len(), lines.len());
    // Valid: exit 0, step count (runcmd plus the default growpart and resizefs).
    std::fs::write(&f, "#cloud-config\nruncmd: [date]\n").unwrap();
    let o = nodeagent(&["validate", &file]);
    assert_eq!(
        (o.code, o.stdout.trim()),
        (0, format!("{file}: valid (3 steps)").as_str())
    );
    assert_eq!(nodeagent(&["validate", &file, "--json"]).json()["steps"], 3);
    // A missing file cannot be read; it is not "invalid".
    let missing = t.path().join("nope.yaml").display().to_string();
    let o = nodeagent(&["validate", &missing]);
    assert_eq!(o.code, 1);
    assert!(
        o.stdout.starts_with(&format!("{missing}: cannot read: ")),
        "{}",
        o.stdout
    );
    let v = nodeagent(&["validate", &missing, "--json"]).json();
    assert_eq!(v["errors"][0]["kind"], "not-found", "{v}");
}

#[test]
fn run_counts_skipped_steps_apart_and_status_says_what_happened() {
    let n = Node::new(USERDATA);
    if !n.exec_ready() {
        return;
    }
    let o = n.cmd("run", &[]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // hostname:metadata and the file ran; runcmd, growpart and resizefs wait for --exec.
    assert!(
        o.stderr
            .contains("nodeagent run: 2 steps done, 3 skipped (commands and disk tools"),
        "{}",
        o.stderr
    );
    assert_eq!(
        std::fs::read_to_string(n.r.join("etc/demo.txt")).unwrap(),
        "hello cp-0"
    );
    // Again: nothing executed, and the status says so instead of a bare "done".
    let o = n.cmd("run", &["--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v = o.json();
    assert_eq!(
        (
            v["ran"].as_u64(),
            v["skipped"].as_u64(),
            v["already"].as_u64()
        ),
        (Some(0), Some(3), Some(2)),
        "{v}"
    );
    let o = nodeagent(&["status", "--root", &n.root()]);
    assert_eq!(o.code, 0);
    assert!(
        o.stdout.contains("status: done\n")
            && o.stdout.contains(
                "detail: nothing executed: 3 steps skipped (not on the node itself, no --exec), 2 finished earlier"
            ),
        "{}",
        o.stdout
    );
    // With --exec the command runs, and its output lands in nodeagent-output.log.
    let o = n.cmd("run", &["--exec"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stderr.contains("nodeagent run: 1 steps done"),
        "{}",
        o.stderr
    );
    let log = std::fs::read_to_string(n.r.join("var/log/nodeagent-output.log")).unwrap();
    assert!(log.contains("[runcmd[0]] hi from runcmd"), "{log}");
    // A run that fails: exit 1, the error as JSON with --json.
    std::fs::write(n.d.join("guestinfo.metadata"), "instance-id: [unclosed\n").unwrap();
    let o = n.cmd("run", &["--json"]);
    assert_eq!(o.code, 1);
    let v = o.json();
    assert!(is_error_json(&v), "{v}");
    assert!(
        v["error"]["place"]
            .as_str()
            .unwrap()
            .contains("guestinfo.metadata"),
        "{v}"
    );
}

#[test]
fn status_formats_and_exit_codes() {
    let n = Node::new(USERDATA);
    let root = n.root();
    let o = nodeagent(&["status", "--root", &root]);
    assert_eq!((o.code, o.stdout.trim()), (0, "status: not started"));
    assert_eq!(
        nodeagent(&["status", "--root", &root, "--json"]).json()["phase"],
        "not-started"
    );
    assert_eq!(n.cmd("run", &[]).code, 0);
    for (fmt, check) in [
        ("json", "\"phase\": \"done\""),
        ("yaml", "phase: done"),
        ("tabular", "status: done"),
    ] {
        let o = nodeagent(&["status", "--root", &root, "--format", fmt]);
        assert_eq!(o.code, 0, "{fmt}");
        assert!(o.stdout.contains(check), "{fmt}: {}", o.stdout);
    }
    let o = nodeagent(&["status", "--root", &root, "--format", "xml"]);
    assert_eq!(o.code, 64);
    // --wait on a finished run returns at once with its code.
    let o = nodeagent(&["status", "--root", &root, "--wait", "--timeout", "5"]);
    assert_eq!(o.code, 0, "{}", o.stdout);
    assert!(o.stdout.ends_with("status: done\n"), "{}", o.stdout);
}

#[test]
fn status_wait_shows_the_kubeadm_waits_clock_and_times_out() {
    use libnodeagent::report::{Phase, Reporter};
    let d = tempfile::tempdir().unwrap();
    let mut r = Reporter::new(None, d.path(), "vm-1");
    r.phase(Phase::Waiting, Some("runcmd[0]:kubeadm"));
    r.detail_until("waiting for the control-plane endpoint 10.0.0.10:6443", 600);
    let root = d.path().to_str().unwrap();
    // 11 s: one tick of the wait's clock (every 10 s) before the timeout.
    let o = nodeagent(&["status", "--root", root, "--wait", "--timeout", "11"]);
    assert_eq!(o.code, 3, "{}", o.stdout);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(
        lines[0],
        "phase waiting (runcmd[0]:kubeadm): waiting for the control-plane endpoint 10.0.0.10:6443"
    );
    let tick = lines[1];
    assert!(
        tick.starts_with("  waiting: 1") && tick.contains(" s elapsed, gives up in 5"),
        "{tick}"
    );
    assert!(lines[2].starts_with("timed out after 11s"), "{}", o.stdout);
    assert_eq!(lines[3], "status: running (waiting)");
    // The status document carries the clock for scripts.
    let v = nodeagent(&["status", "--root", root, "--json"]).json();
    assert!(v["deadline_ms"].as_u64().unwrap() > v["since_ms"].as_u64().unwrap());
}

#[test]
fn query_reads_the_boots_saved_data_and_formats() {
    let n = Node::new(USERDATA);
    let root = n.root();
    // Before any run there is nothing saved: a clear failure.
    let o = nodeagent(&["query", "--root", &root, "v1.local_hostname"]);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("has not run on this node yet"),
        "{}",
        o.stderr
    );
    let v = nodeagent(&["query", "--root", &root, "v1", "--json"]).json();
    assert_eq!(v["error"]["kind"], "not-found", "{v}");
    assert_eq!(n.cmd("run", &[]).code, 0);
    // The platform changes afterwards: query still answers from what the boot saved.
    std::fs::write(
        n.d.join("guestinfo.metadata"),
        "instance-id: vm-2\nlocal-hostname: other\n",
    )
    .unwrap();
    let o = nodeagent(&["query", "--root", &root, "v1.local_hostname"]);
    assert_eq!((o.code, o.stdout.trim()), (0, "cp-0"), "{}", o.stderr);
    let o = nodeagent(&[
        "query",
        "--root",
        &root,
        "--format",
        "{{ v1.local_hostname }}/{{ ds.meta_data['instance-id'] }}",
    ]);
    assert_eq!((o.code, o.stdout.trim()), (0, "cp-0/vm-1"), "{}", o.stderr);
    let o = nodeagent(&["query", "--root", &root, "--list-keys"]);
    assert_eq!(o.code, 0);
    for k in ["ds", "userdata", "v1", "vendordata"] {
        assert!(o.stdout.lines().any(|l| l == k), "{k}: {}", o.stdout);
    }
    assert!(
        nodeagent(&["query", "--root", &root, "--list-keys", "--json"])
            .json()
            .is_array()
    );
    // userdata: the data as received for root, a placeholder otherwise (cloud-init's rule).
    let o = nodeagent(&["query", "--root", &root, "userdata"]);
    if nix_is_root() {
        // A string value prints as is (with print()'s newline when it has none).
        // The userdata as received (a string prints with one newline, as cloud-init's print()).
        assert_eq!(o.stdout.trim_end(), USERDATA.trim_end());
    } else {
        assert!(
            o.stdout.starts_with("<redacted for non-root user>"),
            "{}",
            o.stdout
        );
    }
    // The live platform only when asked, through --transport.
    let o = n.cmd("query", &["v1.local_hostname"]);
    assert_eq!((o.code, o.stdout.trim()), (0, "other"));
    // Undefined key / variable: usage errors naming them.
    let o = nodeagent(&["query", "--root", &root, "v1.nope"]);
    assert_eq!(o.code, 64);
    let v = nodeagent(&["query", "--root", &root, "--format", "{{ nope }}", "--json"]).json();
    assert_eq!(v["error"]["place"], "--format", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("nope"),
        "{v}"
    );
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false)
}

#[test]
fn single_runs_one_module_and_always_runs_again() {
    let n = Node::new(USERDATA);
    // Nothing has run: write_files alone writes the file and leaves runcmd and the status.
    let o = n.cmd("single", &["--name", "write_files"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(n.r.join("etc/demo.txt").exists());
    assert!(o.stderr.contains("1 steps done"), "{}", o.stderr);
    assert!(
        !n.r.join("run/nodeagent/status.json").exists(),
        "single publishes no status"
    );
    // The journal knows it: the module's own frequency does not write it again.
    std::fs::write(n.r.join("etc/demo.txt"), "changed").unwrap();
    let v = n
        .cmd("single", &["--name", "cc_write_files", "--json"])
        .json();
    assert_eq!(
        (v["ran"].as_u64(), v["already"].as_u64()),
        (Some(0), Some(1)),
        "{v}"
    );
    assert_eq!(
        std::fs::read_to_string(n.r.join("etc/demo.txt")).unwrap(),
        "changed"
    );
    // --frequency always does; the scratch directory of its reporter is gone afterwards.
    let tmp = tempfile::tempdir().unwrap();
    let o = nodeagent_env(
        &[
            "single",
            "--name",
            "write-files",
            "--frequency",
            "always",
            "--transport",
            &n.transport(),
            "--facts",
            n.facts.to_str().unwrap(),
            "--root",
            &n.root(),
        ],
        &[("TMPDIR", tmp.path().to_str().unwrap())],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "scratch left"
    );
    assert_eq!(
        std::fs::read_to_string(n.r.join("etc/demo.txt")).unwrap(),
        "hello cp-0"
    );
    // An unknown module is a usage error listing the known ones.
    let o = n.cmd("single", &["--name", "apt_configure"]);
    assert_eq!(o.code, 64);
    assert!(o.stderr.contains("runcmd"), "{}", o.stderr);
    let o = n.cmd("single", &["--name", "apt_configure", "--json"]);
    assert_eq!(o.json()["error"]["place"], "--name");
    // Bad input fails the command, and still publishes no status.
    std::fs::write(
        n.d.join("guestinfo.userdata"),
        "#cloud-config
bogus: 1
",
    )
    .unwrap();
    let o = n.cmd("single", &["--name", "runcmd"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("bogus"), "{}", o.stderr);
    assert!(!n.r.join("run/nodeagent/status.json").exists());
}

#[test]
fn clean_removes_logs_seed_and_refuses_reboot_under_root() {
    let n = Node::new(USERDATA);
    assert_eq!(n.cmd("run", &[]).code, 0);
    let root = n.root();
    std::fs::write(n.r.join("var/log/nodeagent-output.log"), "x\n").unwrap();
    std::fs::create_dir_all(n.r.join("var/lib/cloud/seed/nocloud")).unwrap();
    assert!(n.r.join("var/log/nodeagent/events.jsonl").exists());
    let o = nodeagent(&["clean", "--root", &root, "--reboot"]);
    assert_eq!(
        o.code, 64,
        "--reboot would reboot this machine, not the tree"
    );
    assert!(
        n.r.join("var/lib/nodeagent/instance-id").exists(),
        "nothing removed"
    );
    let o = nodeagent(&["clean", "--root", &root, "--logs", "--seed", "--json"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let removed = strings(&o.json()["removed"]);
    for gone in [
        "var/log/nodeagent",
        "var/log/nodeagent-output.log",
        "run/nodeagent",
        "var/lib/cloud/seed/nocloud",
    ] {
        assert!(!n.r.join(gone).exists(), "{gone} left");
        assert!(
            removed.iter().any(|p| p.ends_with(gone)),
            "{gone} not listed: {removed:?}"
        );
    }
    let o = nodeagent(&["clean", "--root", &root]);
    assert_eq!(
        (o.code, o.stdout.as_str()),
        (0, ""),
        "nothing left to remove"
    );
}

#[test]
fn analyze_blame_show_and_boot() {
    let n = Node::new(USERDATA);
    if !n.exec_ready() {
        return;
    }
    let root = n.root();
    let o = nodeagent(&["analyze", "--root", &root]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("no instance has run"), "{}", o.stderr);
    assert!(is_error_json(
        &nodeagent(&["analyze", "show", "--root", &root, "--json"]).json()
    ));
    assert_eq!(n.cmd("run", &[]).code, 0);
    assert_eq!(n.cmd("run", &["--exec"]).code, 0);
    let o = nodeagent(&["analyze", "--root", &root]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.contains("write_files[0]:/etc/demo.txt (ok)"),
        "{}",
        o.stdout
    );
    let o = nodeagent(&["analyze", "show", "--root", &root]);
    assert_eq!(o.code, 0);
    assert!(o.stdout.starts_with("-- boot record 01"), "{}", o.stdout);
    assert!(o.stdout.contains("done runcmd[0]"), "{}", o.stdout);
    let boots = nodeagent(&["analyze", "show", "--root", &root, "--json"]).json();
    let events = boots[0]["events"].as_array().unwrap();
    let at: Vec<f64> = events.iter().map(|e| e["at_s"].as_f64().unwrap()).collect();
    assert!(at.windows(2).all(|w| w[0] <= w[1]), "in time order: {at:?}");
    // `boot` needs systemd: either its timeline or a clear error.
    let o = nodeagent(&["analyze", "boot"]);
    if Path::new("/run/systemd/system").is_dir() {
        assert!(o.code == 0 || o.code == 1, "{}{}", o.stdout, o.stderr);
    } else {
        assert_eq!(o.code, 1);
        assert!(o.stderr.contains("not running systemd"), "{}", o.stderr);
    }
}

#[test]
fn collect_logs_has_version_and_output_log() {
    let n = Node::new(USERDATA);
    if !n.exec_ready() {
        return;
    }
    assert_eq!(n.cmd("run", &["--exec"]).code, 0);
    let out = n.r.join("logs.tar.gz");
    let o = nodeagent(&[
        "collect-logs",
        "--root",
        &n.root(),
        "-o",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let files = strings(&o.json()["files"]);
    for want in [
        "version.txt",
        "nodeagent-output.log",
        "status.json",
        "MANIFEST.txt",
    ] {
        assert!(files.iter().any(|f| f == want), "{want}: {files:?}");
    }
    let list = Command::new("tar")
        .arg("-xzOf")
        .arg(&out)
        .arg("nodeagent-logs/version.txt")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&list.stdout).contains("(commit "));
    let o = nodeagent(&[
        "collect-logs",
        "--root",
        &n.root(),
        "-o",
        "/nonexistent-dir/x.tgz",
        "--json",
    ]);
    assert_eq!(o.code, 1);
    assert!(is_error_json(&o.json()));
}

#[test]
fn mint_token_and_hash_json_and_errors() {
    let o = nodeagent(&["mint", "token"]);
    assert_eq!(o.code, 0);
    let t = o.stdout.trim().to_string();
    assert_eq!(t.len(), 23, "{t}");
    let v = nodeagent(&["mint", "token", "--json"]).json();
    assert_eq!(v["token"].as_str().unwrap().len(), 23);
    let d = tempfile::tempdir().unwrap();
    let pki = d.path().join("pki");
    let o = nodeagent(&[
        "mint",
        "pki",
        "--cluster",
        "c",
        "--out",
        pki.to_str().unwrap(),
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let ca = pki.join("ca.crt");
    let o = nodeagent(&["mint", "hash", "--ca", ca.to_str().unwrap()]);
    let v = nodeagent(&["mint", "hash", "--ca", ca.to_str().unwrap(), "--json"]).json();
    assert_eq!(v["hashes"][0].as_str().unwrap(), o.stdout.trim());
    // A failure (an existing PKI without --force) is 1, and JSON with --json.
    let o = nodeagent(&[
        "mint",
        "pki",
        "--cluster",
        "c",
        "--out",
        pki.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.code, 1);
    assert!(
        o.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--force")
    );
    // A bad value of a flag the minter checks itself is a usage error.
    let o = nodeagent(&["mint", "token", "--token", "nope", "--json"]);
    assert_eq!(o.code, 64);
    assert_eq!(o.json()["error"]["place"], "--token");
}

#[test]
fn certs_errors_are_json_with_json() {
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("none").display().to_string();
    let o = nodeagent(&["certs", &missing, "--json"]);
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(is_error_json(&o.json()));
}

#[test]
fn completions_offer_choices_not_file_names() {
    let o = nodeagent(&["generate", "completions", "zsh"]);
    assert_eq!(o.code, 0);
    let line = |flag: &str| {
        o.stdout
            .lines()
            .find(|l| l.contains(&format!("'--{flag}=")))
            .unwrap_or_else(|| panic!("--{flag} not in the zsh completion"))
            .to_string()
    };
    for (flag, choice) in [
        ("role", "control-plane"),
        ("encoding", "gzip+base64"),
        ("algorithm", "rsa-4096"),
        ("kubeadm-api", "v1beta4"),
    ] {
        let l = line(flag);
        assert!(l.contains(choice) && !l.contains("_files"), "--{flag}: {l}");
    }
    for flag in ["transport", "format"] {
        let l = line(flag);
        assert!(!l.contains("_files"), "--{flag} completes file names: {l}");
    }
}

#[test]
fn man_pages_link_only_pages_that_exist_and_document_64() {
    let d = tempfile::tempdir().unwrap();
    let o = nodeagent(&["generate", "man", "--dir", d.path().to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for e in std::fs::read_dir(d.path()).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        for (i, _) in text.match_indices("nodeagent\\-") {
            let name: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '\\')
                .collect::<String>()
                .replace('\\', "");
            if text[i..].contains('(') && text[i + name.len()..].starts_with("(1)") {
                assert!(
                    d.path().join(format!("{name}.1")).exists(),
                    "{name}(1) linked, not written"
                );
            }
        }
    }
    let top = std::fs::read_to_string(d.path().join("nodeagent.1")).unwrap();
    assert!(!top.contains("help(1)"), "a link to nodeagent-help(1)");
    assert!(top.contains("\\fB64\\fR"), "exit 64 undocumented");
}

#[test]
fn no_colour_without_a_tty_or_with_no_color() {
    let n = Node::new("#cloud-config\nbogus: 1\n");
    let o = n.cmd("run", &["--compat"]);
    assert!(
        !o.stderr.contains('\u{1b}'),
        "escape codes on a pipe: {}",
        o.stderr
    );
    // Log lines carry plain values, not Rust's Debug forms.
    let o = nodeagent_env(
        &[
            "run",
            "--transport",
            &n.transport(),
            "--facts",
            n.facts.to_str().unwrap(),
            "--root",
            &n.root(),
            "--compat",
        ],
        &[("NODEAGENT_LOG", "info"), ("NO_COLOR", "1")],
    );
    assert!(o.stderr.contains("status"), "{}", o.stderr);
    for debug in ["Some(", "None", "step=None"] {
        assert!(
            !o.stderr.contains(debug),
            "{debug} in the log:\n{}",
            o.stderr
        );
    }
    assert!(
        !o.stderr.lines().any(|l| l.contains("duration_ms=")
            && l.split("duration_ms=").nth(1).is_some_and(|v| v
                .split_whitespace()
                .next()
                .unwrap_or("")
                .len()
                > 10)),
        "long floats:\n{}",
        o.stderr
    );
}
