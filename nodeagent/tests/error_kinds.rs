//! The status report's `kind` is a stable interface (docs/status.md): one case per class of
//! failure, each driven through `nodeagent run` to a failed report, asserting the exit code
//! (1, failed) and the `kind` in both the status file under the root and the one published
//! through the transport. The kind is what failed (the input, a call, a tool, a wait, the
//! platform channel), not where, so each case fails in a different way on purpose.

mod kubeadm_common;
mod prereq;

use kubeadm_common::*;
use std::path::Path;
use std::process::Command;

const FACTS: &str = "hostname: n1\nlocal-ipv4: 10.0.0.5\nnetwork-renderer: networkd\n";
const METADATA: &str = "instance-id: i-kinds\nlocal-hostname: n1\n";

/// How a case prepares its data directory and target root.
struct Setup {
    /// `(file name in the data dir, content)`; the metadata is added unless given. None:
    /// the run gets no `--transport` (the image config's `transports:` are detected).
    data: &'static [(&'static str, &'static str)],
    /// Directories to make under the root (paths relative to it).
    root_dirs: &'static [&'static str],
    /// `(path relative to the root, content)`.
    root_files: &'static [(&'static str, &'static str)],
}

/// `nodeagent run` (no --exec: nothing is run chrooted) through the dir transport:
/// (exit code, stderr, the root's status.json, the published status if any).
fn run(s: &Setup) -> (i32, String, serde_json::Value, Option<serde_json::Value>) {
    let t = tempfile::tempdir().unwrap();
    let (d, r) = (t.path().join("d"), t.path().join("r"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::create_dir_all(&r).unwrap();
    if !s.data.iter().any(|(n, _)| *n == "guestinfo.metadata") && !s.data.is_empty() {
        std::fs::write(d.join("guestinfo.metadata"), METADATA).unwrap();
    }
    for (name, content) in s.data {
        std::fs::write(d.join(name), content).unwrap();
    }
    for dir in s.root_dirs {
        std::fs::create_dir_all(r.join(dir)).unwrap();
    }
    for (path, content) in s.root_files {
        let p = r.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    let facts = t.path().join("facts.yaml");
    std::fs::write(&facts, FACTS).unwrap();
    // No data at all: no --transport either, the image config's detection list decides.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nodeagent"));
    cmd.arg("run");
    if !s.data.is_empty() {
        cmd.args(["--transport", &format!("dir:{}", d.display())]);
    }
    let out = cmd
        .arg("--root")
        .arg(&r)
        .arg("--facts")
        .arg(&facts)
        .env("NODEAGENT_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let status = read_json(&r.join("run/nodeagent/status.json"))
        .unwrap_or_else(|| panic!("no status.json; stderr: {stderr}"));
    let published = read_json(&d.join("guestinfo.nodeagent.status"));
    (out.status.code().unwrap_or(-1), stderr, status, published)
}

fn read_json(p: &Path) -> Option<serde_json::Value> {
    let bytes = std::fs::read(p).ok()?;
    Some(serde_json::from_slice(&bytes).unwrap())
}

/// YAML nested past the depth limit (limits::MAX_YAML_DEPTH).
const DEEP: &str = concat!(
    "#cloud-config\nbootcmd: ",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
    "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n"
);

#[test]
fn each_failure_class_reports_its_kind() {
    let cases: &[(&str, &str, Setup)] = &[
        (
            "bad input: userdata that no base64 decoder accepts",
            "invalid",
            Setup {
                data: &[
                    ("guestinfo.userdata", "I2Nsb3VkLWNvbmZpZwo"),
                    ("guestinfo.userdata.encoding", "base64"),
                ],
                root_dirs: &[],
                root_files: &[],
            },
        ),
        (
            "unsupported input: a write_files source fetched from the network",
            "unsupported",
            Setup {
                data: &[(
                    "guestinfo.userdata",
                    "#cloud-config\nwrite_files:\n- path: /etc/x\n  source:\n    uri: https://example.com/x\n",
                )],
                root_dirs: &[],
                root_files: &[],
            },
        ),
        (
            "input over a limit: YAML nested too deep",
            "too-large",
            Setup {
                data: &[("guestinfo.userdata", DEEP)],
                root_dirs: &[],
                root_files: &[],
            },
        ),
        (
            "the node contradicts the plan: a file where the target has a directory",
            "conflict",
            Setup {
                data: &[(
                    "guestinfo.userdata",
                    "#cloud-config\nwrite_files:\n- path: /etc/x\n  content: x\n",
                )],
                root_dirs: &["etc/x"],
                root_files: &[],
            },
        ),
        (
            "a named user that does not exist: write_files owner",
            "not-found",
            Setup {
                data: &[(
                    "guestinfo.userdata",
                    "#cloud-config\nwrite_files:\n- path: /etc/x\n  content: x\n  owner: nosuchuser:root\n",
                )],
                root_dirs: &[],
                root_files: &[
                    ("etc/passwd", "root:x:0:0:root:/root:/bin/bash\n"),
                    ("etc/group", "root:x:0:\n"),
                ],
            },
        ),
        (
            "an OS call fails: the image config is a directory, not a file",
            "io",
            Setup {
                data: &[("guestinfo.userdata", "#cloud-config\n{}\n")],
                root_dirs: &["etc/nodeagent/config.yaml"],
                root_files: &[],
            },
        ),
        (
            "no platform channel has data: fw_cfg detected and absent",
            "unavailable",
            Setup {
                data: &[],
                root_dirs: &[],
                root_files: &[("etc/nodeagent/config.yaml", "transports: [fwcfg]\n")],
            },
        ),
    ];
    let mut wrong = Vec::new();
    for (what, want, setup) in cases {
        let (code, stderr, status, published) = run(setup);
        let got = status["kind"].as_str().unwrap_or("(none)");
        if code != 1 || status["phase"] != "failed" || got != *want {
            wrong.push(format!(
                "{what}: want exit 1, failed, {want}; got exit {code}, {}, {got}\n  status: {status}\n  stderr: {stderr}",
                status["phase"]
            ));
            continue;
        }
        if let Some(p) = published
            && p["kind"] != *want
        {
            wrong.push(format!("{what}: published kind differs: {p}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

fn join_userdata(port: u16) -> String {
    let cfg = worker_join_config(&format!("127.0.0.1:{port}"), &[]);
    userdata(&[(JOIN_PATH.to_string(), cfg.into_bytes())], JOIN_LINE)
}

/// The status file and the published status both say `want`, with exit 1.
fn assert_failed_with(e: &E2e, code: i32, err: &str, want: &str) {
    assert_eq!(code, 1, "{err}");
    let status = e.status();
    assert_eq!(status.phase, libnodeagent::report::Phase::Failed, "{err}");
    assert_eq!(status.kind.map(|k| k.as_str()), Some(want), "{status:?}");
    let g = e.guestinfo_status();
    assert_eq!(g["kind"], want, "{g}");
}

#[test]
fn a_tool_that_fails_is_command_failed() {
    // kubeadm (the stand-in) runs and exits non-zero at every join.
    let port = free_port();
    listen_now(port);
    let e = E2e::new(
        &join_userdata(port),
        &image_config("").replace("join_attempts: 5", "join_attempts: 1"),
        &[("KUBEADM_STANDIN_FAIL_JOINS", "99")],
    );
    let Some((code, err)) = e.run() else {
        return;
    };
    assert_failed_with(&e, code, &err, "command-failed");
}

#[test]
fn a_bounded_wait_that_runs_out_is_timeout() {
    // Nothing ever listens at the control-plane endpoint; the wait is 1 s.
    let port = free_port();
    let e = E2e::new(
        &join_userdata(port),
        &image_config("").replace("endpoint_wait_secs: 20", "endpoint_wait_secs: 1"),
        &[],
    );
    let Some((code, err)) = e.run() else {
        return;
    };
    assert_failed_with(&e, code, &err, "timeout");
    assert!(e.node.calls().is_empty(), "kubeadm never ran");
}
