//! Round trip: bundles from `nodeagent mint bootstrap` go through the agent's own `render`,
//! `plan` and `run --root` via the `dir:` transport with `--facts FILE`. `run` is given no
//! `--exec`, so no command and no kubeadm runs; what this checks is
//! that the agent accepts the bundle unmodified and lays down the PKI and kubeadm config.

// Test code slices output it knows to be ASCII (ids, hashes, base64).
#![allow(clippy::string_slice)]

mod mint_support;
use mint_support::*;
use std::path::Path;
use std::process::Command;

const MAC: &str = "00:50:56:aa:00:10";

fn facts(dir: &Path, host: &str) -> String {
    let f = dir.join("facts.yaml");
    std::fs::write(
        &f,
        format!(
            "hostname: {host}\nfqdn: {host}\nlocal-ipv4: 10.0.0.21\ninterfaces:\n- name: eth0\n  mac: \"{MAC}\"\n  ipv4:\n  - addr: 10.0.0.21\n    netmask: 255.255.255.0\nproduct-uuid: 4211d2b5-0000-0000-0000-000000000001\ndistro: debian\ndistro-version: \"12\"\nnetwork-renderer: networkd\n"
        ),
    )
    .unwrap();
    f.to_str().unwrap().to_string()
}

fn agent(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin())
        .args(args)
        .env("NODEAGENT_LOG", "warn")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn round_trip(role: &str, node: &str, alg: &str, version: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let pki = t.join("pki");
    ok(&[
        "mint",
        "pki",
        "--cluster",
        "demo",
        "--out",
        pki.to_str().unwrap(),
        "--algorithm",
        alg,
    ]);
    let out = t.join("out");
    ok(&[
        "mint",
        "bootstrap",
        "--role",
        role,
        "--cluster",
        "demo",
        "--node",
        node,
        "--endpoint",
        "10.0.0.10:6443",
        "--kubernetes-version",
        version,
        "--pki",
        pki.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--mac",
        MAC,
        "--network",
        "static:10.0.0.21/24,gw=10.0.0.1,dns=10.0.0.2",
        "--encoding",
        "gzip+base64",
    ]);
    let transport = format!("dir:{}", out.join(node).display());
    let facts = facts(t, "localhost");
    let root = t.join("root");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    let r = root.to_str().unwrap();

    // render: the jinja node name is bound from the metadata's local-hostname.
    let (okr, rendered, err) = agent(&[
        "render",
        "--transport",
        &transport,
        "--facts",
        &facts,
        "--root",
        r,
    ]);
    assert!(okr, "render failed: {err}");
    assert!(
        rendered.starts_with("#cloud-config\n"),
        "{}",
        &rendered[..60.min(rendered.len())]
    );
    assert!(
        rendered.contains(&format!("name: '{node}'")),
        "node name not rendered"
    );
    assert!(!rendered.contains("{{") && !rendered.contains("CI_MISSING_JINJA_VAR"));

    // plan: no error, and it would write the PKI and the kubeadm config.
    let (okp, plan, err) = agent(&[
        "plan",
        "--transport",
        &transport,
        "--facts",
        &facts,
        "--root",
        r,
    ]);
    assert!(okp, "plan failed: {err}");
    let config_path = if role == "init" {
        "/run/kubeadm/kubeadm.yaml"
    } else {
        "/run/kubeadm/kubeadm-join-config.yaml"
    };
    assert!(plan.contains(config_path), "{plan}");
    assert!(!plan.contains("PRIVATE KEY"), "plan printed a key");

    // run --root: files on disk, byte-identical PKI with CABPK's modes.
    let (okrun, _, err) = agent(&[
        "run",
        "--root",
        r,
        "--transport",
        &transport,
        "--facts",
        &facts,
    ]);
    assert!(okrun, "run failed: {err}");
    let on_disk = |p: &str| root.join(p.trim_start_matches('/'));
    if role != "worker" {
        for (f, m) in [
            ("ca.crt", 0o640),
            ("ca.key", 0o600),
            ("etcd/ca.key", 0o600),
            ("front-proxy-ca.crt", 0o640),
            ("sa.key", 0o600),
            ("sa.pub", 0o640),
        ] {
            let p = on_disk(&format!("/etc/kubernetes/pki/{f}"));
            assert_eq!(
                std::fs::read(&p).unwrap_or_else(|e| panic!("{f}: {e}")),
                std::fs::read(pki.join(f)).unwrap(),
                "{f}"
            );
            assert_eq!(mode(&p), m, "{f} mode");
        }
    } else {
        assert!(!on_disk("/etc/kubernetes/pki/ca.key").exists());
    }
    let cfg = std::fs::read_to_string(on_disk(config_path)).unwrap();
    let typed = libnodeagent::kubeadm::config::parse(&cfg, config_path).unwrap();
    let nr = if role == "init" {
        typed.init.unwrap().spec.node_registration
    } else {
        typed.join.unwrap().spec.node_registration
    };
    assert_eq!(
        nr.unwrap().name.as_deref(),
        Some(node),
        "kubeadm node name on disk"
    );
    assert!(on_disk("/run/cluster-api/placeholder").exists());
}

#[test]
fn init_bundle_round_trips_through_the_agent() {
    round_trip("init", "cp-0", "ecdsa-p256", "v1.31.2");
}

#[test]
fn control_plane_bundle_round_trips_through_the_agent() {
    round_trip("control-plane", "cp-1", "rsa-2048", "v1.30.4");
}

#[test]
fn worker_bundle_round_trips_through_the_agent() {
    round_trip("worker", "md-0", "ecdsa-p256", "v1.31.2");
}
