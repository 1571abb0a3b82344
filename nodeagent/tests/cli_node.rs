//! The node debug CLI through the real binary: `certs` on the real CABPK PKI (checked against
//! openssl), `status` exit codes and `--wait`, `analyze` from apply's journal and the
//! reporter's events, `collect-logs` contents.

mod kubeadm_common;
mod prereq;
use kubeadm_common::*;
use libnodeagent::report::{Phase, Reporter};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn nodeagent(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn put_corpus_pki(root: &Path) -> Vec<(String, Vec<u8>)> {
    let (files, _) = corpus_parts(CORPUS_INIT);
    let pki: Vec<_> = files
        .into_iter()
        .filter(|(p, _)| p.starts_with("/etc/kubernetes/pki/"))
        .collect();
    for (p, c) in &pki {
        let full = root.join(p.trim_start_matches('/'));
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, c).unwrap();
    }
    pki
}

fn openssl(args: &[&str]) -> String {
    let o = Command::new("openssl").args(args).output().unwrap();
    assert!(o.status.success(), "openssl {args:?}");
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

#[test]
fn certs_lists_the_corpus_pki_like_openssl() {
    if !prereq::corpus_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    put_corpus_pki(dir.path());
    let root = dir.path().to_str().unwrap();
    let (code, out, err) = nodeagent(&["certs", "--root", root, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let cas = v["certificate_authorities"].as_array().unwrap();
    let names: Vec<&str> = cas.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ca", "etcd-ca", "front-proxy-ca"]);
    for r in cas {
        let crt = dir
            .path()
            .join("etc/kubernetes/pki")
            .join(r["file"].as_str().unwrap());
        let crt = crt.to_str().unwrap();
        let subject = openssl(&[
            "x509", "-in", crt, "-noout", "-subject", "-nameopt", "RFC2253",
        ]);
        assert_eq!(
            format!("subject={}", r["subject"].as_str().unwrap()),
            subject
        );
        let issuer = openssl(&[
            "x509", "-in", crt, "-noout", "-issuer", "-nameopt", "RFC2253",
        ]);
        assert_eq!(format!("issuer={}", r["issuer"].as_str().unwrap()), issuer);
        let end = openssl(&["x509", "-in", crt, "-noout", "-enddate"]);
        let end = end.strip_prefix("notAfter=").unwrap();
        let iso = Command::new("date")
            .args(["-u", "-d", end, "+%Y-%m-%dT%H:%M:%SZ"])
            .output()
            .unwrap();
        assert_eq!(
            r["expires"].as_str().unwrap(),
            String::from_utf8(iso.stdout).unwrap().trim()
        );
        let serial = openssl(&["x509", "-in", crt, "-noout", "-serial"]);
        assert_eq!(serial, "serial=00", "CAPI's serial 0");
        assert_eq!(r["serial"], "00");
        assert_eq!(r["signed_by"], "self");
        assert_eq!(r["key"], "proven");
        assert_eq!(r["externally_managed"], false);
        assert!(r["residual_secs"].as_i64().unwrap() > 0);
    }
    // CABPK ships only the CAs and sa: every leaf row is kubeadm's `!MISSING!`.
    assert!(
        v["certificates"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["missing"] == true)
    );
    let sa = &v["other"][0];
    assert_eq!(
        (sa["name"].as_str(), sa["key"].as_str()),
        (Some("sa"), Some("proven"))
    );

    let (code, table, _) = nodeagent(&[
        "certs",
        dir.path().join("etc/kubernetes/pki").to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("CERTIFICATE ") && lines[0].contains("RESIDUAL TIME"));
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("etcd-ca ") && l.trim_end().ends_with("no")),
        "{table}"
    );
}

#[test]
fn certs_flags_a_mismatched_key() {
    if !prereq::corpus_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    put_corpus_pki(dir.path());
    let pki = dir.path().join("etc/kubernetes/pki");
    std::fs::copy(pki.join("etcd/ca.key"), pki.join("front-proxy-ca.key")).unwrap();
    let (code, out, _) = nodeagent(&["certs", pki.to_str().unwrap(), "--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let fp = v["certificate_authorities"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "front-proxy-ca")
        .unwrap();
    assert_eq!(fp["key"], "mismatch");
    assert_eq!(v["problems"][0]["kind"], "key-mismatch");
    assert!(!out.contains("PRIVATE KEY"));
}

fn status_of(root: &Path, f: impl FnOnce(&mut Reporter)) {
    let mut r = Reporter::new(None, root, "i-1");
    r.phase(Phase::Reading, None);
    f(&mut r);
}

#[test]
fn status_exit_codes() {
    type Case = (&'static str, Box<dyn Fn(&mut Reporter)>, i32);
    let cases: Vec<Case> = vec![
        ("done", Box::new(|r: &mut Reporter| r.done()), 0),
        (
            "failed",
            Box::new(|r: &mut Reporter| {
                r.failed(
                    "kubeadm",
                    libnodeagent::base::error::ErrorKind::CommandFailed,
                    "join failed",
                    &["boom".into()],
                )
            }),
            1,
        ),
        (
            "degraded",
            Box::new(|r: &mut Reporter| {
                r.warning("ntp not configured");
                r.done()
            }),
            2,
        ),
        (
            "running",
            Box::new(|r: &mut Reporter| r.phase(Phase::Kubeadm, Some("kubeadm"))),
            0,
        ),
    ];
    for (name, f, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        status_of(dir.path(), f);
        let root = dir.path().to_str().unwrap();
        let (code, out, _) = nodeagent(&["status", "--root", root, "--long"]);
        assert_eq!(code, want, "{name}: {out}");
        if name == "failed" {
            assert!(
                out.contains("status: error")
                    && out.contains("error: kubeadm: join failed")
                    && out.contains("  boom"),
                "{out}"
            );
        }
        let (code, out, _) = nodeagent(&["status", "--root", root, "--json"]);
        assert_eq!(code, want);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["instance_id"], "i-1");
    }
    // Nothing there yet.
    let dir = tempfile::tempdir().unwrap();
    let (code, out, _) = nodeagent(&["status", "--root", dir.path().to_str().unwrap()]);
    assert_eq!((code, out.trim()), (0, "status: not started"));
}

#[test]
fn status_of_a_disabled_node_says_so_and_wait_returns_at_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("etc/nodeagent")).unwrap();
    std::fs::write(dir.path().join("etc/nodeagent/disabled"), "").unwrap();
    let root = dir.path().to_str().unwrap();
    let start = Instant::now();
    // Without a timeout: this waited forever before.
    let (code, out, _) = nodeagent(&["status", "--root", root, "--wait"]);
    assert_eq!((code, out.trim()), (0, "status: disabled"));
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    let (_, out, _) = nodeagent(&["status", "--root", root, "--json"]);
    assert!(out.contains("\"disabled\""), "{out}");
}

#[test]
fn status_wait_times_out_or_follows_the_run() {
    let dir = tempfile::tempdir().unwrap();
    status_of(dir.path(), |r| r.phase(Phase::Waiting, Some("kubeadm")));
    let root = dir.path().to_str().unwrap().to_string();
    let start = Instant::now();
    let (code, out, _) = nodeagent(&["status", "--root", &root, "--wait", "--timeout", "1"]);
    assert_eq!(code, 3, "{out}");
    // What it waited on, then a plain "timed out" line before the status itself.
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "phase waiting (kubeadm)", "{out}");
    assert!(lines[1].starts_with("timed out after 1s"), "{out}");
    assert_eq!(lines[2], "status: running (waiting)", "{out}");
    assert!(
        start.elapsed() >= Duration::from_millis(950) && start.elapsed() < Duration::from_secs(4)
    );
    let d = dir.path().to_path_buf();
    let finisher = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(800));
        let mut r = Reporter::new(None, &d, "i-1");
        r.done();
    });
    let (code, out, _) = nodeagent(&["status", "--root", &root, "--wait", "--timeout", "20"]);
    finisher.join().unwrap();
    // The phase change is shown as it happens, then the final status.
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["phase waiting (kubeadm)", "phase done", "status: done"],
        "{out}"
    );
}

#[test]
fn analyze_reports_steps_and_phases() {
    let dir = tempfile::tempdir().unwrap();
    let state = libnodeagent::base::state::State::open(dir.path()).unwrap();
    let mut j = state.begin_instance("i-1").unwrap();
    for (step, ms) in [
        ("write_files[0]:/etc/a", 1.5),
        ("kubeadm", 2500.0),
        ("runcmd[0]", 30.0),
    ] {
        let r = j.record(libnodeagent::base::state::Event::Done {
            step: step.into(),
            stage: libnodeagent::plan::RunStage::Main,
            frequency: libnodeagent::plan::Frequency::PerInstance,
            duration_ms: ms,
            result: libnodeagent::base::state::DoneResult::Ok,
        });
        j.append(r, false).unwrap();
    }
    let mut rep = Reporter::new(None, dir.path(), "i-1");
    rep.phase(Phase::Reading, None);
    rep.phase(Phase::Applying, None);
    std::thread::sleep(Duration::from_millis(300));
    rep.phase(Phase::Kubeadm, Some("kubeadm"));
    rep.done();
    let (code, out, err) = nodeagent(&["analyze", "--root", dir.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let steps: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("-- steps"))
        .skip(1)
        .collect();
    assert!(
        steps[0].contains("2.500s  kubeadm (ok)") && steps[2].contains("write_files[0]"),
        "{out}"
    );
    let (_, json, _) = nodeagent(&["analyze", "--root", dir.path().to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let applying = v["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == "applying")
        .unwrap();
    assert!(applying["duration_ms"].as_u64().unwrap() >= 300, "{json}");
}

/// Every file of a tar.gz as `(name, text)`.
pub fn untar(path: &Path) -> Vec<(String, String)> {
    let f = std::fs::File::open(path).unwrap();
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(f));
    a.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = e.path().unwrap().display().to_string();
            let mut s = String::new();
            std::io::Read::read_to_string(&mut e, &mut s).unwrap();
            (name, s)
        })
        .collect()
}

#[test]
fn collect_logs_has_the_pieces_and_no_secrets() {
    if !prereq::corpus_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let userdata = std::fs::read_to_string(CORPUS_INIT).unwrap();
    let state = libnodeagent::base::state::State::open(root).unwrap();
    let _j = state.begin_instance("i-1").unwrap();
    state
        .save("i-1", "userdata.txt", userdata.as_bytes(), 0o600)
        .unwrap();
    state
        .save(
            "i-1",
            "instance-data-sensitive.json",
            format!("{{\"token\":\"{TOKEN}\"}}").as_bytes(),
            0o600,
        )
        .unwrap();
    state
        .save(
            "i-1",
            "instance-data.json",
            b"{\"v1\":{\"instance_id\":\"i-1\"}}",
            0o644,
        )
        .unwrap();
    let mut rep = Reporter::new(None, root, "i-1");
    rep.failed(
        "kubeadm",
        libnodeagent::base::error::ErrorKind::CommandFailed,
        "exit status 1",
        &["x".into()],
    );
    let out = root.join("logs.tar.gz");
    let (code, _, err) = nodeagent(&[
        "collect-logs",
        "--root",
        root.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let files = untar(&out);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "status.json",
        "events.jsonl",
        "instance/journal.jsonl",
        "instance/instance-data.json",
        "instance/userdata-redacted.yaml",
        "MANIFEST.txt",
    ] {
        assert!(
            names.contains(&format!("nodeagent-logs/{want}").as_str()),
            "{want} missing: {names:?}"
        );
    }
    let all: String = files.iter().map(|(_, t)| t.as_str()).collect();
    // Not one line of any key or certificate of the corpus.
    let (pki, _) = corpus_parts(CORPUS_INIT);
    for (_, c) in &pki {
        for l in String::from_utf8_lossy(c).lines().filter(|l| l.len() >= 40) {
            assert!(!all.contains(l), "archive leaks {l}");
        }
    }
    assert!(!all.contains(TOKEN));
    let ud = &files
        .iter()
        .find(|(n, _)| n.ends_with("userdata-redacted.yaml"))
        .unwrap()
        .1;
    assert!(
        ud.contains("/etc/kubernetes/pki/ca.key") && ud.contains("<redacted:"),
        "{ud}"
    );
}
