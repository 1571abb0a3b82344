//! Reporting to VM Operator: `guestinfo.vmservice.bootstrap.condition` read back exactly as
//! VM Operator reads it (vm-operator pkg/util/bootstrap_condition.go
//! `GetBootstrapConditionValues`, re-implemented below), at every phase and with the failure
//! reason, and `guestinfo.nodeagent.ready` for a guestInfo readiness probe. kubeadm is the
//! stand-in (tests/kubeadm-standin), which fails on request: the failure report needs it.

mod kubeadm_common;
mod prereq;
use kubeadm_common::*;
use libnodeagent::report::{BOOTSTRAP_CONDITION_KEY, Phase, READY_KEY, Reporter};

/// VM Operator's parse: split at the first two commas, trim, Go's strconv.ParseBool.
fn vm_operator_parse(v: &str) -> (bool, String, String) {
    let parts: Vec<&str> = v.splitn(3, ',').collect();
    let status = matches!(parts[0].trim(), "1" | "t" | "T" | "TRUE" | "true" | "True");
    let field = |i: usize| {
        parts
            .get(i)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    (status, field(1), field(2))
}

/// metav1.Condition's reason pattern: `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, and our
/// own rule on top: no comma (it would move the split).
fn valid_reason(r: &str) -> bool {
    let b = r.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphabetic()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b':')
        && b[b.len() - 1] != b':'
}

fn values(t: &MemTransport, key: &str) -> Vec<String> {
    t.0.lock()
        .unwrap()
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| String::from_utf8(v.clone()).unwrap())
        .collect()
}

#[test]
fn every_phase_is_published_as_vm_operator_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let t = MemTransport::default();
    let mut r = Reporter::new(Some(&t), dir.path(), "i-1");
    r.phase(Phase::Reading, None);
    r.phase(
        Phase::Applying,
        Some("write_files[0]:/etc/kubernetes/pki/ca.crt"),
    );
    r.phase(Phase::Waiting, Some("kubeadm"));
    r.detail("waiting for the control-plane endpoint 10.0.0.10:6443");
    r.phase(Phase::Kubeadm, Some("kubeadm"));
    r.done();
    let got: Vec<(bool, String, String)> = values(&t, BOOTSTRAP_CONDITION_KEY)
        .iter()
        .map(|v| vm_operator_parse(v))
        .collect();
    let reasons: Vec<&str> = got.iter().map(|g| g.1.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "Reading", "Applying", "Waiting", "Waiting", "Kubeadm", "Done"
        ]
    );
    assert!(got.iter().all(|g| valid_reason(&g.1)), "{got:?}");
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        [false, false, false, false, false, true]
    );
    assert!(got[1].2.contains("/etc/kubernetes/pki/ca.crt"), "{got:?}");
    assert_eq!(
        got[3].2,
        "waiting for the control-plane endpoint 10.0.0.10:6443"
    );
    // The readiness key changes once: false from the start, true at done.
    assert_eq!(values(&t, READY_KEY), ["false", "true"]);
}

#[test]
fn a_failure_carries_its_reason_redacted_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let t = MemTransport::default();
    let mut r = Reporter::new(Some(&t), dir.path(), "i-1");
    r.phase(Phase::Kubeadm, Some("kubeadm"));
    r.failed(
        "kubeadm",
        libnodeagent::base::error::ErrorKind::CommandFailed,
        "kubeadm join failed, exit status 1:\nkubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef",
        &[],
    );
    let last = values(&t, BOOTSTRAP_CONDITION_KEY).pop().unwrap();
    let (ok, reason, message) = vm_operator_parse(&last);
    assert!(!ok);
    assert_eq!(reason, "Failed");
    // The message keeps its own commas (VM Operator splits only twice) and the step.
    assert!(
        message.starts_with("kubeadm: kubeadm join failed, exit status 1"),
        "{message}"
    );
    assert!(!message.contains('\n'), "{message}");
    assert!(
        !message.contains("0123456789abcdef"),
        "token leaked: {message}"
    );
    assert_eq!(values(&t, READY_KEY), ["false"]);
}

#[test]
fn warnings_make_done_with_warnings_and_long_messages_are_cut() {
    let dir = tempfile::tempdir().unwrap();
    let t = MemTransport::default();
    let mut r = Reporter::new(Some(&t), dir.path(), "i-1");
    r.warning(&"x".repeat(5000));
    r.done();
    let last = values(&t, BOOTSTRAP_CONDITION_KEY).pop().unwrap();
    let (ok, reason, message) = vm_operator_parse(&last);
    assert!(ok);
    assert_eq!(reason, "DoneWithWarnings");
    assert!(message.len() <= 1024 + '…'.len_utf8(), "{}", message.len());
}

#[test]
fn a_node_run_publishes_the_condition_and_readiness_keys() {
    if !prereq::corpus_present() {
        return;
    }
    // Success: `nodeagent run` through the dir transport (files named guestinfo.KEY).
    let ud = std::fs::read_to_string(CORPUS_INIT).unwrap();
    let e = E2e::new(&ud, &image_config(""), &[]);
    let Some((code, err)) = e.run() else {
        return;
    };
    assert_eq!(code, 0, "{err}");
    let read = |k: &str| std::fs::read_to_string(e.data().join(format!("guestinfo.{k}"))).unwrap();
    let (ok, reason, _) = vm_operator_parse(&read(BOOTSTRAP_CONDITION_KEY));
    assert!(ok && reason == "Done", "{}", read(BOOTSTRAP_CONDITION_KEY));
    assert_eq!(read(READY_KEY), "true");

    // Failure: kubeadm init fails; the condition names the step and kubeadm's reason.
    let e = E2e::new(
        &ud,
        &image_config(""),
        &[("KUBEADM_STANDIN_FAIL_INIT", "1")],
    );
    let Some((code, err)) = e.run() else {
        return;
    };
    assert_eq!(code, 1, "{err}");
    let read = |k: &str| std::fs::read_to_string(e.data().join(format!("guestinfo.{k}"))).unwrap();
    let (ok, reason, message) = vm_operator_parse(&read(BOOTSTRAP_CONDITION_KEY));
    assert!(!ok);
    assert_eq!(reason, "Failed");
    assert!(message.contains("kubeadm init failed"), "{message}");
    assert_eq!(read(READY_KEY), "false");
}

#[test]
fn a_nocloud_run_publishes_its_status_but_no_vm_operator_keys_and_blanks_nothing() {
    // NoCloud's write-back is `nodeagent.KEY` files beside the seed: the status goes there,
    // VM Operator's keys (read from guestinfo only) and a "blanked" userdata (which would
    // leave the seed's own user-data as it is) do not.
    let t = tempfile::tempdir().unwrap();
    let seed = t.path().join("seed");
    let root = t.path().join("root");
    std::fs::create_dir_all(&seed).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(seed.join("meta-data"), "instance-id: i-nc\n").unwrap();
    let userdata = "#cloud-config\nwrite_files:\n- path: /etc/from-seed\n  content: s\n";
    std::fs::write(seed.join("user-data"), userdata).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["run", "--exec", "--transport"])
        .arg(format!("nocloud:{}", seed.display()))
        .arg("--root")
        .arg(&root)
        .env("NODEAGENT_LOG", "warn")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        std::fs::read_to_string(root.join("etc/from-seed")).unwrap(),
        "s"
    );
    let status = std::fs::read_to_string(seed.join("nodeagent.nodeagent.status")).unwrap();
    assert!(status.contains(r#""phase":"done""#), "{status}");
    let mut files: Vec<String> = std::fs::read_dir(&seed)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        ["meta-data", "nodeagent.nodeagent.status", "user-data"]
    );
    assert_eq!(
        std::fs::read_to_string(seed.join("user-data")).unwrap(),
        userdata
    );
}
