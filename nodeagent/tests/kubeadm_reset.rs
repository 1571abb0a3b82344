//! Retries that cannot destroy the node: between join attempts nodeagent runs
//! `kubeadm reset -f`, which deletes the CA files a control-plane join needs; they must be
//! written again from the plan before the retry. kubeadm here is tests/kubeadm-standin, which
//! fails a join on request (real kubeadm cannot be made to); its reset deletes what real
//! kubeadm's reset deletes (`kubeadm_reset_oracle.rs` checks that against real kubeadm), and
//! its control-plane join fails "failure loading certificate authority" without the shared CAs,
//! as kubeadm does.

mod kubeadm_common;
mod prereq;
use kubeadm_common::*;
use libnodeagent::kubeadm::run::{execute_restoring, execute_with};
use libnodeagent::report::Reporter;
use std::os::unix::fs::PermissionsExt;

/// The shared CAs and keys CABPK writes for a control-plane join (no certificateKey).
fn shared_pki() -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for name in ["ca", "etcd/ca", "front-proxy-ca"] {
        let ca = make_ca(-60, 86400 * 365, true);
        files.push((
            format!("/etc/kubernetes/pki/{name}.crt"),
            ca.cert_pem.into_bytes(),
        ));
        files.push((
            format!("/etc/kubernetes/pki/{name}.key"),
            ca.key_pem.into_bytes(),
        ));
    }
    let sa = rcgen::KeyPair::generate().unwrap();
    files.push((
        "/etc/kubernetes/pki/sa.key".into(),
        sa.serialize_pem().into_bytes(),
    ));
    files.push((
        "/etc/kubernetes/pki/sa.pub".into(),
        sa.public_key_pem().into_bytes(),
    ));
    files
}

fn control_plane_join_config(endpoint: &str, ca_pem: &[u8]) -> String {
    let hash = openssl_hash(std::str::from_utf8(ca_pem).unwrap());
    format!(
        "apiVersion: kubeadm.k8s.io/v1beta3\nkind: JoinConfiguration\ncontrolPlane:\n  localAPIEndpoint:\n    advertiseAddress: 127.0.0.1\n    bindPort: 6443\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: {endpoint}\n    caCertHashes:\n    - {hash}\n    token: {TOKEN}\nnodeRegistration:\n  name: cp-2\n  kubeletExtraArgs:\n    cloud-provider: external\n"
    )
}

/// Bootstrap files of a control-plane join against a listening loopback endpoint.
fn control_plane_files() -> Vec<(String, Vec<u8>)> {
    let port = free_port();
    listen_now(port);
    let mut files = shared_pki();
    let cfg = control_plane_join_config(
        &format!("127.0.0.1:{port}"),
        file(&files, "/etc/kubernetes/pki/ca.crt"),
    );
    files.push((JOIN_PATH.to_string(), cfg.into_bytes()));
    files
}

#[test]
fn control_plane_join_that_fails_once_succeeds_with_the_cas_written_again() {
    let files = control_plane_files();
    let e = E2e::new(
        &userdata(&files, JOIN_LINE),
        &image_config(""),
        &[("KUBEADM_STANDIN_FAIL_JOINS", "1")],
    );
    let Some((code, err)) = e.run() else {
        return;
    };
    assert_eq!(code, 0, "{err}");
    assert_eq!(e.node.cmds(), ["join:1", "reset:0", "join:0"]);
    // The stand-in's reset really deleted the CA files (and what the failed join left).
    let removed: Vec<String> = e.node.calls()[1]["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    for p in [
        "/etc/kubernetes/pki/ca.key",
        "/etc/kubernetes/pki/sa.key",
        "/etc/kubernetes/pki/etcd",
        "/etc/kubernetes/bootstrap-kubelet.conf",
        "/etc/kubernetes/manifests/kube-apiserver.yaml",
    ] {
        assert!(removed.iter().any(|r| r == p), "{p} not in {removed:?}");
    }
    // …and every one is back, byte for byte, with the mode write_files asked for.
    for (path, content) in files.iter().filter(|(p, _)| p.starts_with("/etc/")) {
        let on_disk = e.node.root().join(path.trim_start_matches('/'));
        assert_eq!(&std::fs::read(&on_disk).unwrap(), content, "{path}");
        let mode = std::fs::metadata(&on_disk).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640, "{path}");
    }
    let root = e.node.root();
    assert!(root.join("etc/kubernetes/kubelet.conf").exists());
    assert!(root.join("etc/kubernetes/manifests/etcd.yaml").exists());
    assert!(e.node.sentinel().exists());
    assert_eq!(e.status().phase, libnodeagent::report::Phase::Done);
}

#[test]
fn without_the_restore_the_retry_fails_loading_the_ca() {
    // The control for the test above: the stand-in's reset leaves no CA, so a retry that
    // does not write the files again fails exactly as real kubeadm does.
    let node = Node::new(&[("KUBEADM_STANDIN_FAIL_JOINS", "1")]);
    let files = control_plane_files();
    node.put(&files);
    let mut settings = fast_settings();
    settings.join_attempts = 2;
    let mut rep = Reporter::new(None, node.root(), "i-1");
    let spec = match &plan_of(&files, JOIN_LINE).steps.last().unwrap().action {
        libnodeagent::plan::Action::Kubeadm(k) => k.clone(),
        _ => unreachable!(),
    };
    let err = execute_with(&spec, &settings, node.root(), &mut rep, &node.runner).unwrap_err();
    assert_eq!(node.cmds(), ["join:1", "reset:0", "join:1"]);
    let last = node.calls().last().unwrap()["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        last.contains("failure loading certificate authority"),
        "{last}"
    );
    assert!(err.to_string().contains("after 2 attempt"), "{err}");
}

#[test]
fn a_restore_that_fails_ends_the_retries() {
    let node = Node::new(&[("KUBEADM_STANDIN_FAIL_JOINS", "1")]);
    let files = control_plane_files();
    node.put(&files);
    let mut rep = Reporter::new(None, node.root(), "i-1");
    let spec = match &plan_of(&files, JOIN_LINE).steps.last().unwrap().action {
        libnodeagent::plan::Action::Kubeadm(k) => k.clone(),
        _ => unreachable!(),
    };
    let restore = || {
        Err(libnodeagent::base::error::Error::io(
            libnodeagent::base::error::Stage::Apply,
            "/etc/kubernetes/pki/ca.key",
            "cannot write",
            std::io::Error::from(std::io::ErrorKind::StorageFull),
        ))
    };
    let err = execute_restoring(
        &spec,
        &fast_settings(),
        node.root(),
        &mut rep,
        &node.runner,
        &restore,
    )
    .unwrap_err();
    assert_eq!(node.cmds(), ["join:1", "reset:0"]);
    assert!(err.to_string().contains("cannot restore"), "{err}");
    assert!(!node.sentinel().exists());
}

#[test]
fn a_second_init_on_a_bootstrapped_disk_fails_preflight_unless_told() {
    if !prereq::corpus_present() {
        return;
    }
    // A clone of a bootstrapped control plane (same disk, new instance-id) runs kubeadm init
    // again; the first instance's static pod manifests are still there, and kubeadm's
    // preflight refuses them (the stand-in does what kubeadm does).
    let ud = std::fs::read_to_string(CORPUS_INIT).unwrap();
    let e = E2e::new(&ud, &image_config(""), &[]);
    let Some((code, err)) = e.run() else {
        return;
    };
    assert_eq!(code, 0, "{err}");
    let again = |instance: &str, userdata: &str| {
        std::fs::write(
            e.data().join("guestinfo.metadata"),
            format!("instance-id: {instance}\nlocal-hostname: node-1\n"),
        )
        .unwrap();
        std::fs::write(e.data().join("guestinfo.userdata"), userdata).unwrap();
        std::fs::remove_file(e.data().join("guestinfo.userdata.encoding")).ok();
        // A new boot: /run (tmpfs on a node, with CAPI's sentinel) starts empty.
        std::fs::remove_dir_all(e.node.root().join("run")).unwrap();
        e.run().expect("chroot permitted: the first run ran")
    };
    let (code, err) = again("i-clone-1", &ud);
    assert_eq!(code, 1, "{err}");
    let reason = e.node.calls().last().unwrap()["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.contains("FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml"),
        "{reason} {err} {:?}",
        e.node.cmds()
    );
    // Told to ignore them (nodeRegistration.ignorePreflightErrors), the clone bootstraps.
    let told = ud.replacen(
        "      nodeRegistration:\n        imagePullPolicy: IfNotPresent\n",
        "      nodeRegistration:\n        imagePullPolicy: IfNotPresent\n        ignorePreflightErrors:\n        - all\n",
        1,
    );
    assert_ne!(told, ud);
    let (code, err) = again("i-clone-2", &told);
    assert_eq!(code, 0, "{err}");
    assert_eq!(e.node.cmds(), ["init:0", "init:1", "init:0"]);
}
