//! What `kubeadm reset -f` deletes, asked of real kubeadm (v1.34.4, `tests/k8s/build`), not
//! of a reading of its source: nodeagent's lists (`kubeadm::reset::removed_by_reset`, which
//! decides what is written again before a join is retried) and the stand-in's reset
//! (tests/kubeadm-standin, used where a join must fail on cue) must name exactly the paths
//! real kubeadm deletes.
//!
//! The node: a throw-away root with real kubeadm's own files, made by real kubeadm (`init
//! phase certs all`, `kubeconfig all`, `control-plane all`, `etcd local`, `kubelet-start`),
//! plus what a node also has (the userdata's files: a kube-vip manifest, /run/kubeadm, a
//! cloud provider file beside the kubeconfigs, CNI configuration, the kubelet's rotated
//! certificates, etcd's data, a user's kubeconfig). Real kubeadm then runs a real
//! `kubeadm reset -f` chrooted into it, in a private mount namespace (its dry run does not
//! list the etcd data and kubelet directories it empties, so it cannot be the oracle): what
//! is gone is the answer. Needs root (chroot) and real kubeadm; skipped (counted by
//! tests/unit-tests) without them, a failure under tests/run-all.

mod kubeadm_common;
mod prereq;

use libnodeagent::kubeadm::reset::removed_by_reset;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The kubeadm configuration the node was made from; `certificatesDir` and the etcd data dir
/// vary per layout.
fn config(cert_dir: &str, etcd_dir: &str) -> String {
    format!(
        "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nnodeRegistration:\n  name: cp-0\n\
         localAPIEndpoint:\n  advertiseAddress: 10.0.0.10\n---\n\
         apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.34.4\n\
         controlPlaneEndpoint: 10.0.0.10:6443\ncertificatesDir: {cert_dir}\netcd:\n  local:\n    dataDir: {etcd_dir}\n"
    )
}

/// Files a node has besides kubeadm's own (`/` paths); the etcd data dir's are added per layout.
const NODE_FILES: &[&str] = &[
    "/etc/kubernetes/manifests/kube-vip.yaml",
    "/etc/kubernetes/azure.json",
    "/etc/kubernetes/bootstrap-kubelet.conf",
    "/etc/kubernetes/audit/policy.yaml",
    "/run/kubeadm/kubeadm.yaml",
    "/run/cluster-api/placeholder",
    "/etc/cni/net.d/10-calico.conflist",
    "/root/.kube/config",
    "/var/lib/kubelet/pki/kubelet-client-current.pem",
    "/var/lib/kubelet/pods/x/volumes/secret",
    "/opt/cni/bin/loopback",
];

/// Run real kubeadm (copied into `root` as /kubeadm) chrooted into `root`, with its own /proc,
/// in a private mount namespace (nothing it mounts or unmounts reaches the host). Bounded.
fn kubeadm_in(root: &Path, args: &[&str]) -> std::process::Output {
    Command::new("timeout")
        .args([
            "120",
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
        ])
        .arg(r#"r=$1; shift; mount -t proc proc "$r/proc" && exec chroot "$r" /kubeadm "$@""#)
        .arg("sh")
        .arg(root)
        .args(args)
        .output()
        .expect("unshare")
}

fn put(root: &Path, path: &str) {
    let p = root.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, format!("{path}\n")).unwrap();
}

/// A node's root made by real kubeadm from `config(cert_dir, etcd_dir)`, plus NODE_FILES and
/// etcd data in `etcd_dir`.
fn node(kubeadm: &Path, cert_dir: &str, etcd_dir: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    std::fs::create_dir_all(root.join("proc")).unwrap();
    std::fs::copy(kubeadm, root.join("kubeadm")).unwrap();
    std::fs::write(root.join("cfg.yaml"), config(cert_dir, etcd_dir)).unwrap();
    for phase in [
        &["certs", "all"][..],
        &["kubeconfig", "all"],
        &["control-plane", "all"],
        &["etcd", "local"],
        &["kubelet-start"],
    ] {
        let mut args = vec!["init", "phase"];
        args.extend_from_slice(phase);
        args.extend_from_slice(&["--config", "/cfg.yaml"]);
        let out = kubeadm_in(root, &args);
        assert!(
            out.status.success(),
            "kubeadm {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for f in NODE_FILES {
        put(root, f);
    }
    put(root, &format!("{etcd_dir}/member/snap/db"));
    put(root, &format!("{etcd_dir}/member/wal/0.wal"));
    d
}

/// Every path of the node (files, directories, links), as the node sees it; not the test's
/// plumbing (/kubeadm, /cfg.yaml, /proc) nor the stand-in's state.
fn paths(root: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = format!("/{}", p.strip_prefix(root).unwrap().display());
            if [
                "/kubeadm",
                "/cfg.yaml",
                "/proc",
                "/standin.state",
                "/standin.jsonl",
            ]
            .contains(&rel.as_str())
            {
                continue;
            }
            out.insert(rel);
            if p.is_dir() && !p.is_symlink() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}

/// `cp -a` of a root (the stand-in's copy of the same node).
fn copy(root: &Path) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", root.display()))
        .arg(d.path())
        .status()
        .unwrap();
    assert!(st.success());
    d
}

struct Verdicts {
    real: BTreeSet<String>,
    nodeagent: BTreeSet<String>,
    standin: BTreeSet<String>,
}

/// What real kubeadm's reset deleted, what nodeagent says it deletes, what the stand-in's
/// reset deleted, on the same node. `cert_flag`: pass `--cert-dir` to real kubeadm (reset
/// takes the certificates dir from the cluster, which this node has not, or from the flag).
fn reset_on(kubeadm: &Path, cert_dir: &str, etcd_dir: &str) -> Verdicts {
    let n = node(kubeadm, cert_dir, etcd_dir);
    let before = paths(n.path());
    let standin_root = copy(n.path());

    let mut args = vec!["reset", "-f"];
    if cert_dir != "/etc/kubernetes/pki" {
        args.extend_from_slice(&["--cert-dir", cert_dir]);
    }
    let out = kubeadm_in(n.path(), &args);
    assert!(
        out.status.success(),
        "real kubeadm reset: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = paths(n.path());
    assert!(
        after.is_subset(&before),
        "reset made {:?}",
        after.difference(&before).collect::<Vec<_>>()
    );
    let real: BTreeSet<String> = before.difference(&after).cloned().collect();

    let nodeagent = before
        .iter()
        .filter(|p| removed_by_reset(p, cert_dir))
        .cloned()
        .collect();

    // The stand-in learns the certificates dir from the last init/join config it ran.
    let state = standin_root.path().join("standin.state");
    std::fs::write(&state, format!(r#"{{"cert_dir":"{cert_dir}"}}"#)).unwrap();
    let out = Command::new(kubeadm_common::standin())
        .args(["reset", "-f"])
        .env("KUBEADM_STANDIN_ROOT", standin_root.path())
        .env("KUBEADM_STANDIN_STATE", &state)
        .env(
            "KUBEADM_STANDIN_LOG",
            standin_root.path().join("standin.jsonl"),
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "stand-in reset: {out:?}");
    let standin = before
        .difference(&paths(standin_root.path()))
        .cloned()
        .collect();
    Verdicts {
        real,
        nodeagent,
        standin,
    }
}

fn show(what: &str, a: &BTreeSet<String>, b: &BTreeSet<String>) -> String {
    format!(
        "{what}: real kubeadm only {:?}; {what} only {:?}",
        a.difference(b).collect::<Vec<_>>(),
        b.difference(a).collect::<Vec<_>>()
    )
}

fn kubeadm() -> Option<PathBuf> {
    if !prereq::privileged(&["/usr/bin/unshare", "/usr/sbin/chroot"]) {
        return None;
    }
    prereq::k8s_bin("kubeadm").map(|d| d.join("kubeadm"))
}

/// A control-plane node with kubeadm's defaults: nodeagent and the stand-in delete exactly
/// what real kubeadm deletes.
#[test]
fn reset_deletes_what_real_kubeadm_deletes() {
    let Some(kubeadm) = kubeadm() else {
        return;
    };
    let v = reset_on(&kubeadm, "/etc/kubernetes/pki", "/var/lib/etcd");
    // The oracle did something: the PKI, the manifests, the kubeconfigs, etcd's and the
    // kubelet's data are gone; the node's other files are not.
    for p in [
        "/etc/kubernetes/pki/ca.key",
        "/etc/kubernetes/manifests/kube-vip.yaml",
        "/etc/kubernetes/admin.conf",
        "/etc/kubernetes/bootstrap-kubelet.conf",
        "/var/lib/etcd/member/snap/db",
        "/var/lib/kubelet/pki/kubelet-client-current.pem",
    ] {
        assert!(v.real.contains(p), "real kubeadm kept {p}");
    }
    for p in [
        "/etc/kubernetes/pki",
        "/etc/kubernetes/azure.json",
        "/run/kubeadm/kubeadm.yaml",
        "/etc/cni/net.d/10-calico.conflist",
        "/root/.kube/config",
    ] {
        assert!(!v.real.contains(p), "real kubeadm deleted {p}");
    }
    assert_eq!(
        v.nodeagent,
        v.real,
        "{}",
        show("nodeagent", &v.real, &v.nodeagent)
    );
    assert_eq!(
        v.standin,
        v.real,
        "{}",
        show("the stand-in", &v.real, &v.standin)
    );
    eprintln!(
        "real kubeadm reset deleted {} paths; nodeagent and the stand-in name the same",
        v.real.len()
    );
}

/// A certificates dir of its own (`certificatesDir`, given to reset as the cluster would):
/// its contents go, the default one's would not exist.
#[test]
fn reset_with_another_certificates_dir_deletes_what_real_kubeadm_deletes() {
    let Some(kubeadm) = kubeadm() else {
        return;
    };
    let v = reset_on(&kubeadm, "/etc/kubernetes/custom-pki", "/var/lib/etcd");
    assert!(v.real.contains("/etc/kubernetes/custom-pki/ca.key"));
    assert_eq!(
        v.nodeagent,
        v.real,
        "{}",
        show("nodeagent", &v.real, &v.nodeagent)
    );
    assert_eq!(
        v.standin,
        v.real,
        "{}",
        show("the stand-in", &v.real, &v.standin)
    );
}

/// etcd's data in a directory of its own (`etcd.local.dataDir`): real kubeadm reads it from
/// the etcd manifest and empties it. nodeagent and the stand-in take /var/lib/etcd: pinned
/// here, so that the day either learns the manifest's data dir this test says so. It matters
/// only to a retried control-plane join whose userdata writes into etcd's data dir.
#[test]
fn reset_with_another_etcd_data_dir_is_a_known_difference() {
    let Some(kubeadm) = kubeadm() else {
        return;
    };
    let v = reset_on(&kubeadm, "/etc/kubernetes/pki", "/var/lib/etcd-data");
    let etcd: BTreeSet<String> = v
        .real
        .iter()
        .filter(|p| p.starts_with("/var/lib/etcd-data/"))
        .cloned()
        .collect();
    assert!(
        !etcd.is_empty(),
        "real kubeadm kept the etcd data dir's contents"
    );
    let rest: BTreeSet<String> = v.real.difference(&etcd).cloned().collect();
    assert_eq!(
        v.nodeagent,
        rest,
        "{}",
        show("nodeagent", &rest, &v.nodeagent)
    );
    assert_eq!(
        v.standin,
        rest,
        "{}",
        show("the stand-in", &rest, &v.standin)
    );
}
