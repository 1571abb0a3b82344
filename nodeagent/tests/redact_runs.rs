//! Known secrets (private key PEMs, bootstrap token, certificate key) go through full runs
//! of `nodeagent run --exec`, with failures, and must not appear in any output: the agent's
//! log output, status.json, the guestinfo status, events, kubeadm.log, the instance journal,
//! `nodeagent status`, error messages, the collect-logs archive, or cloud-init's files
//! (cloud-init-output.log, cloud-init.log, status.json, result.json, instance-data.json). The kubeadm stand-in is
//! asked to print the token and certificate key (as kubeadm at high verbosity can).

// Test code slices output it knows to be ASCII (ids, hashes, base64).
#![allow(clippy::string_slice)]

mod kubeadm_common;
mod prereq;
use kubeadm_common::*;
use std::path::Path;

/// Every secret value the runs are fed.
fn secrets() -> Vec<String> {
    let (files, _) = corpus_parts(CORPUS_INIT);
    let mut s = vec![
        TOKEN.to_string(),
        TOKEN[7..].to_string(),
        CERT_KEY.to_string(),
    ];
    for (p, c) in &files {
        if p.ends_with(".key") {
            let text = String::from_utf8(c.clone()).unwrap();
            s.extend(
                text.lines()
                    .filter(|l| !l.starts_with("-----") && l.len() >= 16)
                    .map(String::from),
            );
        }
    }
    assert!(s.len() > 50);
    s
}

/// A control-plane join carrying the CA keys, the token and a certificate key.
fn cp_join_files(port: u16) -> Vec<(String, Vec<u8>)> {
    let (files, _) = corpus_parts(CORPUS_INIT);
    let mut out: Vec<(String, Vec<u8>)> = files
        .into_iter()
        .filter(|(p, _)| p.starts_with("/etc/kubernetes/pki/"))
        .collect();
    let ca = String::from_utf8(file(&out, "/etc/kubernetes/pki/ca.crt").to_vec()).unwrap();
    let mut cfg = worker_join_config(&format!("127.0.0.1:{port}"), &[openssl_hash(&ca)]);
    cfg.push_str(&format!(
        "controlPlane:\n  certificateKey: {CERT_KEY}\n  localAPIEndpoint: {{}}\n"
    ));
    out.push((JOIN_PATH.to_string(), cfg.into_bytes()));
    out
}

fn text_of_dir(dir: &Path, skip: &[&str]) -> String {
    let mut all = String::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if p.is_file() && !skip.contains(&name.as_str()) {
            all.push_str(&String::from_utf8_lossy(&std::fs::read(&p).unwrap()));
        }
    }
    all
}

/// Everything the agent left for humans and the platform after a run.
fn outputs(e: &E2e, stderr: &str) -> Vec<(String, String)> {
    let root = e.node.root();
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_default();
    let mut v = vec![
        ("agent log output (stderr)".to_string(), stderr.to_string()),
        ("status.json".into(), read("run/nodeagent/status.json")),
        (
            "events.jsonl".into(),
            read("var/log/nodeagent/events.jsonl"),
        ),
        ("kubeadm.log".into(), read("var/log/nodeagent/kubeadm.log")),
        // cloud-init's surface (docs/cloud-init-surface.md): its logs, status, result and the
        // world-readable instance data.
        (
            "cloud-init-output.log".into(),
            read("var/log/cloud-init-output.log"),
        ),
        ("cloud-init.log".into(), read("var/log/cloud-init.log")),
        (
            "cloud-init status.json".into(),
            read("var/lib/cloud/data/status.json"),
        ),
        (
            "cloud-init result.json".into(),
            read("var/lib/cloud/data/result.json"),
        ),
        (
            "cloud-init instance-data.json".into(),
            read("run/cloud-init/instance-data.json"),
        ),
        (
            "guestinfo (all keys set)".into(),
            text_of_dir(e.data(), &["guestinfo.userdata", "guestinfo.metadata"]),
        ),
    ];
    let journal = root.join("var/lib/nodeagent/instances/i-e2e/journal.jsonl");
    v.push((
        "instance journal".into(),
        std::fs::read_to_string(journal).unwrap_or_default(),
    ));
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["status", "--long", "--root"])
        .arg(root)
        .output()
        .unwrap();
    v.push((
        "nodeagent status --long".into(),
        String::from_utf8_lossy(&status.stdout).into(),
    ));
    let archive = e.data().join("logs.tar.gz");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["collect-logs", "--root"])
        .arg(root)
        .arg("-o")
        .arg(&archive)
        .output()
        .unwrap();
    assert!(out.status.success());
    let f = std::fs::File::open(&archive).unwrap();
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(f));
    let mut n = 0;
    for entry in a.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().display().to_string();
        let mut s = String::new();
        std::io::Read::read_to_string(&mut entry, &mut s).unwrap();
        v.push((format!("collect-logs {name}"), s));
        n += 1;
    }
    assert!(n >= 2, "archive has at least status.json and MANIFEST.txt");
    v
}

fn assert_clean(what: &str, outs: &[(String, String)]) {
    let secrets = secrets();
    for (name, text) in outs {
        for s in &secrets {
            assert!(
                !text.contains(s.as_str()),
                "{what}: {name} contains a secret ({}…)",
                &s[..8]
            );
        }
    }
}

#[test]
fn no_secret_leaks_through_successful_failing_and_rejected_runs() {
    if !prereq::corpus_present() {
        return;
    }
    // 1. Control-plane join: fails once (printing token and certificate key), reset, succeeds.
    let port = free_port();
    listen_now(port);
    let e = E2e::new(
        &userdata(&cp_join_files(port), JOIN_LINE),
        &image_config(""),
        &[
            ("KUBEADM_STANDIN_FAIL_JOINS", "1"),
            ("KUBEADM_STANDIN_ECHO_SECRETS", "1"),
        ],
    );
    let Some((code, err)) = e.run() else {
        return;
    };
    assert_eq!(code, 0, "{err}");
    assert_eq!(e.node.cmds(), ["join:1", "reset:0", "join:0"]);
    let log = e.node.kubeadm_log();
    assert!(
        log.contains("Using token: <redacted>") && log.contains("Using certificate key:"),
        "the stand-in did print them: {log}"
    );
    assert_clean("join retried", &outputs(&e, &err));

    // 2. The same join failing for good: the failure report carries kubeadm's last lines.
    let e = E2e::new(
        &userdata(&cp_join_files(port), JOIN_LINE),
        &image_config("").replace("join_attempts: 5", "join_attempts: 2"),
        &[
            ("KUBEADM_STANDIN_FAIL_JOINS", "99"),
            ("KUBEADM_STANDIN_ECHO_SECRETS", "1"),
        ],
    );
    let Some((code, err)) = e.run() else {
        return;
    };
    assert_eq!(code, 1, "{err}");
    let st = e.status();
    assert!(
        st.output_tail.iter().any(|l| l.contains("<redacted>")),
        "{:?}",
        st.output_tail
    );
    assert_clean("join failed", &outputs(&e, &err));

    // 3. Rejected in pre-flight (key mismatch): error messages only.
    let mut files = cp_join_files(port);
    let other = file(&files, "/etc/kubernetes/pki/sa.key").to_vec();
    replace_file(&mut files, "/etc/kubernetes/pki/ca.key", other);
    let e = E2e::new(
        &userdata(&files, JOIN_LINE),
        &image_config(""),
        &[("KUBEADM_STANDIN_ECHO_SECRETS", "1")],
    );
    let Some((code, err)) = e.run() else {
        return;
    };
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("ca.key"), "{err}");
    assert_clean("pre-flight rejection", &outputs(&e, &err));

    // 4. Init whose kubeadm prints the join command with the init's bootstrap token.
    let (mut files, runcmd) = corpus_parts(CORPUS_INIT);
    let cfg = String::from_utf8(file(&files, "/run/kubeadm/kubeadm.yaml").to_vec()).unwrap();
    let cfg = cfg.replace(
        "kind: InitConfiguration\n",
        &format!("kind: InitConfiguration\nbootstrapTokens:\n- token: {TOKEN}\n"),
    );
    replace_file(&mut files, "/run/kubeadm/kubeadm.yaml", cfg.into_bytes());
    let e = E2e::new(&userdata(&files, &runcmd[0]), &image_config(""), &[]);
    let Some((code, err)) = e.run() else {
        return;
    };
    assert_eq!(code, 0, "{err}");
    assert!(e.node.kubeadm_log().contains("--token <redacted>"));
    assert_clean("init", &outputs(&e, &err));
}
