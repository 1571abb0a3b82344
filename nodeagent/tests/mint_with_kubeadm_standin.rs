//! `nodeagent mint`'s PKI and bootstrap data with the kubeadm **stand-in**
//! (tests/kubeadm-standin), not real kubeadm: the init / control-plane / worker data pass
//! pre-flight and bootstrap through `nodeagent run --exec` with the stand-in as `kubeadm`, and
//! `nodeagent certs` reads mint's PKI and the files the stand-in's init writes. Real kubeadm
//! judges the same minted data in `kubeadm_oracle.rs` (config validate, certs and kubeconfig
//! phases, check-expiration) and `tests/k8s/controlplane-test` (a real join dry run).

mod kubeadm_common;
use kubeadm_common::*;
use std::path::Path;
use std::process::Command;

fn nodeagent(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(args)
        .output()
        .unwrap()
}

fn mint_pki(dir: &Path, algorithm: &str) {
    let o = nodeagent(&[
        "mint",
        "pki",
        "--cluster",
        "c1",
        "--out",
        dir.to_str().unwrap(),
        "--algorithm",
        algorithm,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn certs_reads_mint_pki() {
    for alg in ["ecdsa-p256", "rsa-2048"] {
        let t = tempfile::tempdir().unwrap();
        mint_pki(t.path(), alg);
        let o = nodeagent(&["certs", t.path().to_str().unwrap(), "--json"]);
        assert!(o.status.success(), "{alg}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let cas = v["certificate_authorities"].as_array().unwrap();
        assert_eq!(cas.len(), 3, "{alg}");
        for r in cas.iter().chain(v["other"].as_array().unwrap()) {
            assert_eq!(r["key"], "proven", "{alg}: {r}");
        }
        assert_eq!(v["other"][0]["name"], "sa", "{alg}");
        let want = if alg == "rsa-2048" {
            "RSA-2048"
        } else {
            "EC-P256"
        };
        assert_eq!(cas[0]["key_algorithm"], want);
    }
}

/// `nodeagent mint bootstrap` for node n1 of cluster c1 at `127.0.0.1:port` into `dir/b-<role>`,
/// then `nodeagent run --exec` of it on a fresh node with the kubeadm stand-in on PATH.
/// `None` when chroot is not permitted (the caller skips; see `Node::chrooted_env`).
fn mint_and_run(dir: &Path, role: &str, version: &str, port: u16) -> Option<Node> {
    let out = dir.join(format!("b-{role}"));
    let o = nodeagent(&[
        "mint",
        "bootstrap",
        "--role",
        role,
        "--cluster",
        "c1",
        "--node",
        "n1",
        "--endpoint",
        &format!("127.0.0.1:{port}"),
        "--kubernetes-version",
        version,
        "--pki",
        dir.join("pki").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        o.status.success(),
        "{role}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let node = Node::new(&[]);
    let env = node.chrooted_env()?;
    let run = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["run", "--exec", "--transport"])
        .arg(format!("dir:{}", out.join("n1").display()))
        .arg("--root")
        .arg(node.root())
        .envs(env)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{role}: {err}");
    Some(node)
}

#[test]
fn mint_bootstrap_data_bootstraps_every_role() {
    let t = tempfile::tempdir().unwrap();
    let pki = t.path().join("pki");
    mint_pki(&pki, "ecdsa-p256");
    let port = free_port();
    listen_now(port);
    for (role, version, cmd) in [
        ("init", "v1.31.2", "init:0"),
        ("control-plane", "v1.31.2", "join:0"),
        ("worker", "v1.30.4", "join:0"),
    ] {
        let Some(node) = mint_and_run(t.path(), role, version, port) else {
            return;
        };
        assert_eq!(node.cmds(), [cmd], "{role}");
        assert!(node.sentinel().exists(), "{role}");
        if role == "worker" {
            assert_eq!(node.calls()[0]["endpoint"], format!("127.0.0.1:{port}"));
        }
    }
}

/// SANs of a PEM certificate file under the node root: DNS names, then IPs.
fn sans_of(path: &Path) -> Vec<String> {
    let c = &libnodeagent::pki::inspect::parse_certs(&std::fs::read(path).unwrap()).unwrap()[0];
    c.dns_sans
        .iter()
        .cloned()
        .chain(c.ip_sans.iter().map(|i| i.to_string()))
        .collect()
}

/// The stand-in's `init` on a minted init bundle writes the
/// PKI and kubeconfigs as kubeadm does: `nodeagent certs` on that root finds no problem,
/// every kubeconfig's client certificate is signed by ca and proven, and the serving
/// certificates carry kubeadm's SANs (pkiutil `GetAPIServerAltNames`, `GetEtcdAltNames`).
#[test]
fn standin_init_passes_certs_audit() {
    let t = tempfile::tempdir().unwrap();
    let pki = t.path().join("pki");
    mint_pki(&pki, "ecdsa-p256");
    let port = free_port();
    listen_now(port);
    let Some(node) = mint_and_run(t.path(), "init", "v1.31.2", port) else {
        return;
    };
    assert_eq!(node.cmds(), ["init:0"]);
    let o = nodeagent(&["certs", "--root", node.root().to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["problems"], serde_json::json!([]), "{v:#}");
    assert_eq!(v["warnings"], serde_json::json!([]), "{v:#}");
    assert_eq!(o.status.code(), Some(0), "{v:#}");
    assert!(v["kubeadm_config"].is_string(), "SANs checked: {v:#}");
    let rows: Vec<&serde_json::Value> = v["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .chain(v["other"].as_array().unwrap())
        .collect();
    for name in [
        "admin.conf",
        "super-admin.conf",
        "controller-manager.conf",
        "scheduler.conf",
        "kubelet.conf",
        "apiserver",
        "etcd-server",
        "etcd-peer",
    ] {
        let r = rows
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {v:#}"));
        assert_eq!(r["missing"], false, "{name}");
        assert_eq!(r["key"], "proven", "{name}");
        assert_eq!(r["chain"], "ok", "{name}");
        if !name.ends_with(".conf") {
            assert_eq!(r["sans"], "ok", "{name}");
        }
    }
    let pki = node.root().join("etc/kubernetes/pki");
    let mut api = sans_of(&pki.join("apiserver.crt"));
    api.sort();
    assert_eq!(
        api,
        [
            "10.96.0.1",
            "127.0.0.1",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "n1",
        ],
        "apiserver: node name, service names, first service IP, controlPlaneEndpoint host"
    );
    for leaf in ["etcd/server.crt", "etcd/peer.crt"] {
        let mut s = sans_of(&pki.join(leaf));
        s.sort();
        assert_eq!(s, ["127.0.0.1", "::1", "localhost", "n1"], "{leaf}");
    }
}
