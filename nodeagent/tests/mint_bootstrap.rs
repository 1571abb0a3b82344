//! `nodeagent mint bootstrap`: CABPK-shaped userdata and CAPV-shaped metadata, in every
//! output format and encoding, for every role, and the guard rails.

// Test code slices output it knows to be ASCII (ids, hashes, base64).
#![allow(clippy::string_slice)]

mod mint_support;
use base64::Engine;
use mint_support::*;
use serde_norway::Value;
use std::io::Read;
use std::path::{Path, PathBuf};

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .unwrap()
}

/// Decode one key from a `dir` bundle, honouring its .encoding file.
fn key(dir: &Path, k: &str) -> String {
    let raw = std::fs::read_to_string(dir.join(format!("guestinfo.{k}"))).unwrap();
    let enc = std::fs::read_to_string(dir.join(format!("guestinfo.{k}.encoding"))).unwrap();
    decode(&raw, &enc)
}

fn decode(raw: &str, enc: &str) -> String {
    let bytes = b64(raw);
    match enc {
        "base64" => String::from_utf8(bytes).unwrap(),
        "gzip+base64" => {
            let mut s = String::new();
            flate2::read::GzDecoder::new(&bytes[..])
                .read_to_string(&mut s)
                .unwrap();
            s
        }
        other => panic!("encoding {other}"),
    }
}

struct Cluster {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Cluster {
    fn new(alg: &str) -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        ok(&[
            "mint",
            "pki",
            "--cluster",
            "demo",
            "--out",
            root.join("pki").to_str().unwrap(),
            "--algorithm",
            alg,
        ]);
        Cluster { _tmp: tmp, root }
    }
    fn pki(&self) -> String {
        self.root.join("pki").to_str().unwrap().to_string()
    }
    fn out(&self) -> String {
        self.root.join("out").to_str().unwrap().to_string()
    }
    fn bootstrap(&self, role: &str, node: &str, version: &str, extra: &[&str]) -> String {
        let pki = self.pki();
        let out = self.out();
        let mut args = vec![
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
        ];
        args.extend([
            "--kubernetes-version",
            version,
            "--pki",
            &pki,
            "--out",
            &out,
        ]);
        args.extend(extra);
        ok(&args)
    }
}

fn write_files(ud: &Value) -> Vec<(String, String, String)> {
    ud["write_files"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().into(),
                f["owner"].as_str().unwrap().into(),
                f["permissions"].as_str().unwrap().into(),
            )
        })
        .collect()
}

fn content<'a>(ud: &'a Value, path: &str) -> &'a str {
    ud["write_files"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str() == Some(path))
        .unwrap()["content"]
        .as_str()
        .unwrap()
}

fn kubeadm_docs(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

const PKI_PATHS: [&str; 8] = [
    "/etc/kubernetes/pki/ca.crt",
    "/etc/kubernetes/pki/ca.key",
    "/etc/kubernetes/pki/etcd/ca.crt",
    "/etc/kubernetes/pki/etcd/ca.key",
    "/etc/kubernetes/pki/front-proxy-ca.crt",
    "/etc/kubernetes/pki/front-proxy-ca.key",
    "/etc/kubernetes/pki/sa.pub",
    "/etc/kubernetes/pki/sa.key",
];

#[test]
fn init_bundle_has_cabpk_shape() {
    let c = Cluster::new("ecdsa-p256");
    c.bootstrap(
        "init",
        "cp-0",
        "v1.31.2",
        &[
            "--mac",
            "00:50:56:AA:00:01",
            "--network",
            "static:10.0.0.11/24,gw=10.0.0.1,dns=10.0.0.2",
        ],
    );
    let dir = c.root.join("out/cp-0");
    assert_eq!(mode(&dir.join("guestinfo.userdata")), 0o600);
    let text = key(&dir, "userdata");
    assert!(text.starts_with(
        "## template: jinja\n#cloud-config\n\nwrite_files:\n-   path: /etc/kubernetes/pki/ca.crt\n"
    ));
    assert!(text.ends_with("\nruncmd:\n  - 'kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete'\n"));
    // Six-space content indent, including the whitespace line after each PEM.
    assert!(text.contains("    content: |\n      -----BEGIN CERTIFICATE-----\n"));
    assert!(text.contains("-----END EC PRIVATE KEY-----\n      \n-   path:"));
    let ud: Value = serde_norway::from_str(&text).unwrap();
    let files = write_files(&ud);
    let mut want: Vec<(String, String, String)> = PKI_PATHS
        .iter()
        .map(|p| {
            (
                p.to_string(),
                "root:root".into(),
                if p.ends_with(".key") { "0600" } else { "0640" }.into(),
            )
        })
        .collect();
    want.push((
        "/run/kubeadm/kubeadm.yaml".into(),
        "root:root".into(),
        "0640".into(),
    ));
    want.push((
        "/run/cluster-api/placeholder".into(),
        "root:root".into(),
        "0640".into(),
    ));
    assert_eq!(files, want);
    // The PKI in the bundle is the PKI on disk, byte for byte.
    for (p, f) in PKI_PATHS.iter().zip([
        "ca.crt",
        "ca.key",
        "etcd/ca.crt",
        "etcd/ca.key",
        "front-proxy-ca.crt",
        "front-proxy-ca.key",
        "sa.pub",
        "sa.key",
    ]) {
        assert_eq!(
            content(&ud, p),
            std::fs::read_to_string(c.root.join("pki").join(f)).unwrap()
        );
    }
    let cfg = content(&ud, "/run/kubeadm/kubeadm.yaml");
    assert!(
        cfg.starts_with("---\napiServer: {}\napiVersion: kubeadm.k8s.io/v1beta4\n"),
        "{cfg}"
    );
    let docs = kubeadm_docs(cfg);
    assert_eq!(docs.len(), 2);
    let (cc, ic) = (&docs[0], &docs[1]);
    assert_eq!(cc["kind"].as_str(), Some("ClusterConfiguration"));
    assert_eq!(cc["controlPlaneEndpoint"].as_str(), Some("10.0.0.10:6443"));
    assert_eq!(cc["kubernetesVersion"].as_str(), Some("v1.31.2"));
    assert_eq!(cc["clusterName"].as_str(), Some("demo"));
    assert_eq!(cc["encryptionAlgorithm"].as_str(), Some("ECDSA-P256"));
    assert_eq!(
        cc["controllerManager"]["extraArgs"][0]["name"].as_str(),
        Some("cloud-provider")
    );
    assert_eq!(ic["kind"].as_str(), Some("InitConfiguration"));
    assert_eq!(
        ic["nodeRegistration"]["name"].as_str(),
        Some("{{ local_hostname }}")
    );
    assert!(ic["nodeRegistration"]["taints"].is_null());
    assert!(
        cfg.contains("\n  name: '{{ local_hostname }}'\n  taints: null\n"),
        "{cfg}"
    );
    // CAPV metadata.
    let md = key(&dir, "metadata");
    assert!(md.starts_with("\ninstance-id: \"cp-0\"\nlocal-hostname: \"cp-0\"\nwait-on-network:\n  ipv4: true\n  ipv6: false\n"), "{md}");
    let m: Value = serde_norway::from_str(&md).unwrap();
    let eth = &m["network"]["ethernets"]["id0"];
    assert_eq!(
        eth["match"]["macaddress"].as_str(),
        Some("00:50:56:aa:00:01")
    );
    assert_eq!(eth["addresses"][0].as_str(), Some("10.0.0.11/24"));
    assert_eq!(eth["gateway4"].as_str(), Some("10.0.0.1"));
    assert_eq!(
        eth["nameservers"]["addresses"][0].as_str(),
        Some("10.0.0.2")
    );
    assert_eq!(eth["dhcp4"].as_bool(), Some(false));
    // Init nodes need no token.
    assert!(!c.root.join("out/bootstrap-tokens.yaml").exists());
}

#[test]
fn kubeadm_api_follows_the_version_like_cabpk() {
    let c = Cluster::new("rsa-2048");
    c.bootstrap("init", "old", "v1.30.5", &[]);
    let ud: Value = serde_norway::from_str(&key(&c.root.join("out/old"), "userdata")).unwrap();
    let cfg = content(&ud, "/run/kubeadm/kubeadm.yaml");
    assert!(cfg.contains("apiVersion: kubeadm.k8s.io/v1beta3"));
    assert!(
        !cfg.contains("v1beta4")
            && !cfg.contains("proxy: {}")
            && !cfg.contains("encryptionAlgorithm")
    );
    // v1beta3 extraArgs are maps.
    assert!(
        cfg.contains("  kubeletExtraArgs:\n    cloud-provider: external\n"),
        "{cfg}"
    );
    assert!(
        content(&ud, "/etc/kubernetes/pki/ca.key").starts_with("-----BEGIN RSA PRIVATE KEY-----")
    );
    // RSA-2048 is kubeadm's default: no encryptionAlgorithm even on v1beta4.
    c.bootstrap("init", "new", "v1.32.0", &[]);
    let ud: Value = serde_norway::from_str(&key(&c.root.join("out/new"), "userdata")).unwrap();
    let cfg = content(&ud, "/run/kubeadm/kubeadm.yaml");
    assert!(
        cfg.contains("apiVersion: kubeadm.k8s.io/v1beta4")
            && cfg.contains("proxy: {}")
            && !cfg.contains("encryptionAlgorithm")
    );
    assert!(
        cfg.contains("  kubeletExtraArgs:\n  - name: cloud-provider\n    value: external\n"),
        "{cfg}"
    );
    // Explicit override, and a refused one.
    c.bootstrap("init", "forced", "v1.32.0", &["--kubeadm-api", "v1beta3"]);
    assert!(key(&c.root.join("out/forced"), "userdata").contains("kubeadm.k8s.io/v1beta3"));
    let bad = nodeagent(&[
        "mint",
        "bootstrap",
        "--role",
        "init",
        "--cluster",
        "demo",
        "--node",
        "x",
        "--endpoint",
        "10.0.0.10:6443",
        "--kubernetes-version",
        "v1.29.0",
        "--pki",
        &c.pki(),
        "--out",
        &c.out(),
        "--kubeadm-api",
        "v1beta4",
    ]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--kubeadm-api"));
}

#[test]
fn worker_and_control_plane_joins() {
    if !need_openssl() {
        return;
    }
    let c = Cluster::new("ecdsa-p384");
    c.bootstrap("worker", "md-0", "v1.31.2", &["--encoding", "gzip+base64"]);
    let dir = c.root.join("out/md-0");
    assert_eq!(
        std::fs::read_to_string(dir.join("guestinfo.userdata.encoding")).unwrap(),
        "gzip+base64"
    );
    let text = key(&dir, "userdata");
    assert!(text.ends_with("\nruncmd:\n  - kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete\n"));
    let ud: Value = serde_norway::from_str(&text).unwrap();
    let paths: Vec<String> = write_files(&ud).into_iter().map(|f| f.0).collect();
    assert_eq!(
        paths,
        [
            "/run/kubeadm/kubeadm-join-config.yaml",
            "/run/cluster-api/placeholder"
        ],
        "workers get no PKI"
    );
    assert!(!text.contains("PRIVATE KEY"));
    let cfg = content(&ud, "/run/kubeadm/kubeadm-join-config.yaml");
    assert!(cfg.starts_with("---\napiVersion: kubeadm.k8s.io/v1beta4\n"));
    let jc = &kubeadm_docs(cfg)[0];
    assert_eq!(jc["kind"].as_str(), Some("JoinConfiguration"));
    let bt = &jc["discovery"]["bootstrapToken"];
    assert_eq!(bt["apiServerEndpoint"].as_str(), Some("10.0.0.10:6443"));
    let want_hash = openssl_discovery_hash(&c.root.join("pki/ca.crt"));
    assert_eq!(bt["caCertHashes"][0].as_str(), Some(want_hash.as_str()));
    let token = bt["token"].as_str().unwrap();
    assert!(token.len() == 23 && token.as_bytes()[6] == b'.', "{token}");
    assert_eq!(
        jc["nodeRegistration"]["taints"][0]["key"].as_str(),
        Some("node.cluster.x-k8s.io/uninitialized")
    );
    assert_eq!(
        jc["nodeRegistration"]["taints"][0]["effect"].as_str(),
        Some("NoSchedule")
    );
    assert!(jc.get("controlPlane").is_none());
    // The token's Secret is written next to the bundles.
    let tokens = std::fs::read_to_string(c.root.join("out/bootstrap-tokens.yaml")).unwrap();
    assert_eq!(mode(&c.root.join("out/bootstrap-tokens.yaml")), 0o600);
    assert!(tokens.contains(&format!("name: bootstrap-token-{}", &token[..6])));

    // Control-plane join: the PKI, no leading ---, controlPlane, no taint.
    c.bootstrap("control-plane", "cp-1", "v1.31.2", &[]);
    let text = key(&c.root.join("out/cp-1"), "userdata");
    let ud: Value = serde_norway::from_str(&text).unwrap();
    let paths: Vec<String> = write_files(&ud).into_iter().map(|f| f.0).collect();
    assert_eq!(&paths[..8], PKI_PATHS);
    let cfg = content(&ud, "/run/kubeadm/kubeadm-join-config.yaml");
    assert!(
        cfg.starts_with("apiVersion: kubeadm.k8s.io/v1beta4\n"),
        "{cfg}"
    );
    assert!(cfg.contains("controlPlane:\n  localAPIEndpoint: {}\n"));
    assert!(cfg.contains("  taints: null\n"));
}

#[test]
fn a_fleet_of_workers_gets_distinct_names_tokens_and_instance_ids() {
    let c = Cluster::new("ecdsa-p256");
    let out = c.bootstrap(
        "worker",
        "md",
        "v1.31.2",
        &["--nodes", "25", "--mac", "00:50:56:00:00:fe"],
    );
    assert_eq!(out.lines().count(), 25);
    let mut tokens = std::collections::BTreeSet::new();
    let mut ids = std::collections::BTreeSet::new();
    let mut macs = std::collections::BTreeSet::new();
    for i in 0..25 {
        let dir = c.root.join(format!("out/md-{i}"));
        let m: Value = serde_norway::from_str(&key(&dir, "metadata")).unwrap();
        assert_eq!(
            m["local-hostname"].as_str(),
            Some(format!("md-{i}").as_str())
        );
        ids.insert(m["instance-id"].as_str().unwrap().to_string());
        macs.insert(
            m["network"]["ethernets"]["id0"]["match"]["macaddress"]
                .as_str()
                .unwrap()
                .to_string(),
        );
        let ud: Value = serde_norway::from_str(&key(&dir, "userdata")).unwrap();
        let jc = &kubeadm_docs(content(&ud, "/run/kubeadm/kubeadm-join-config.yaml"))[0];
        tokens.insert(
            jc["discovery"]["bootstrapToken"]["token"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!((tokens.len(), ids.len(), macs.len()), (25, 25, 25));
    assert!(
        macs.contains("00:50:56:00:00:fe") && macs.contains("00:50:56:00:01:16"),
        "{macs:?}"
    );
    let secrets = std::fs::read_to_string(c.root.join("out/bootstrap-tokens.yaml")).unwrap();
    let docs = kubeadm_docs(&secrets);
    assert_eq!(docs.len(), 25);
    let ids_in_secrets: std::collections::BTreeSet<String> = docs
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap()[16..].to_string())
        .collect();
    let token_ids: std::collections::BTreeSet<String> =
        tokens.iter().map(|t| t[..6].to_string()).collect();
    assert_eq!(ids_in_secrets, token_ids);
    // No stray temp files from the batch write.
    assert!(
        std::fs::read_dir(c.root.join("out/md-0"))
            .unwrap()
            .all(|e| !e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains("nodeagent-tmp"))
    );
}

#[test]
fn guestinfo_fwcfg_and_govc_formats() {
    let c = Cluster::new("ecdsa-p256");
    let pki = c.pki();
    let base = [
        "mint",
        "bootstrap",
        "--role",
        "worker",
        "--cluster",
        "demo",
        "--node",
        "w",
        "--endpoint",
        "api.example.com:6443",
        "--kubernetes-version",
        "v1.31.2",
        "--pki",
        &pki,
    ];
    let lines = ok(&[&base[..], &["--format", "guestinfo"]].concat());
    let kv: std::collections::BTreeMap<&str, &str> =
        lines.lines().map(|l| l.split_once('=').unwrap()).collect();
    assert_eq!(
        kv.keys().copied().collect::<Vec<_>>(),
        [
            "guestinfo.metadata",
            "guestinfo.metadata.encoding",
            "guestinfo.userdata",
            "guestinfo.userdata.encoding"
        ]
    );
    assert!(
        decode(kv["guestinfo.userdata"], kv["guestinfo.userdata.encoding"])
            .starts_with("## template: jinja\n#cloud-config\n")
    );
    assert!(decode(kv["guestinfo.metadata"], "base64").contains("local-hostname: \"w\""));

    let govc = ok(&[
        &base[..],
        &["--format", "govc", "--encoding", "gzip+base64"],
    ]
    .concat());
    assert!(
        govc.starts_with("govc vm.change -vm 'w' -e 'guestinfo.metadata="),
        "{govc}"
    );
    assert!(govc.contains(" -e 'guestinfo.userdata.encoding=gzip+base64'"));

    let out = c.out();
    let args = ok(&[&base[..], &["--format", "fwcfg", "--out", &out]].concat());
    let parts: Vec<&str> = args.split_whitespace().collect();
    assert_eq!(parts.len(), 8, "{args}");
    for pair in parts.chunks(2) {
        assert_eq!(pair[0], "-fw_cfg");
        let (name, file) = pair[1].split_once(",file=").unwrap();
        let k = name.strip_prefix("name=opt/guestinfo.").unwrap();
        assert!(
            Path::new(file).ends_with(format!("w/guestinfo.{k}")),
            "{file}"
        );
        assert!(Path::new(file).exists());
    }
}

#[test]
fn control_plane_bundles_are_not_printed_without_stdout() {
    let c = Cluster::new("ecdsa-p256");
    let pki = c.pki();
    let args = [
        "mint",
        "bootstrap",
        "--role",
        "init",
        "--cluster",
        "demo",
        "--node",
        "cp",
        "--endpoint",
        "10.0.0.10:6443",
        "--kubernetes-version",
        "v1.31.2",
        "--pki",
        &pki,
        "--format",
        "guestinfo",
    ];
    let out = nodeagent(&args);
    assert!(!out.status.success() && out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--stdout"));
    let printed = ok(&[&args[..], &["--stdout"]].concat());
    assert!(printed.contains("guestinfo.userdata="));
}

#[test]
fn bad_input_names_the_flag_and_writes_nothing() {
    let c = Cluster::new("ecdsa-p256");
    let pki = c.pki();
    let out = c.out();
    let cases: &[(&str, &str, &str)] = &[
        ("--endpoint", "10.0.0.10", "--endpoint"),
        ("--endpoint", "300.0.0.1:6443", "--endpoint"),
        ("--kubernetes-version", "1.31.2", "--kubernetes-version"),
        ("--kubernetes-version", "v1.20.0", "--kubernetes-version"),
        ("--mac", "00:50:56:zz:00:01", "--mac"),
        ("--mac", "01:00:5e:00:00:01", "--mac"),
        ("--network", "static:10.0.0.5/40", "--network"),
        ("--network", "static:10.0.0.5", "--network"),
        ("--network", "static:10.0.0.5/24,gw=fd00::1", "--network"),
        ("--role", "master", "--role"),
        ("--format", "iso", "--format"),
        ("--encoding", "zstd", "--encoding"),
        ("--token", "abc.def", "--token"),
        ("--node", "Bad_Name", "--node"),
        ("--skip-phases", "addon/Kube Proxy", "--skip-phases"),
        ("--skip-phases", "addon//coredns", "--skip-phases"),
        ("--file", "etc/relative=/dev/null", "--file"),
        ("--file", "/etc/../passwd=/dev/null", "--file"),
        ("--file", "/etc/no-source", "--file"),
        ("--cloud-provider", "vsphere", "--cloud-provider"),
        ("--kubeadm-timeout", "discovery", "--kubeadm-timeout"),
        ("--kubeadm-timeout", "apiServer=5m", "--kubeadm-timeout"),
        ("--kubeadm-timeout", "discovery=5", "--kubeadm-timeout"),
        ("--kubeadm-timeout", "discovery=0s", "--kubeadm-timeout"),
        ("--kubeadm-timeout", "discovery=5m3", "--kubeadm-timeout"),
        (
            "--kubeadm-patches",
            "etc/kubernetes/patches",
            "--kubeadm-patches",
        ),
        ("--kubeadm-patches", "/etc/../patches", "--kubeadm-patches"),
    ];
    for (flag, value, named) in cases {
        let mut args = vec![
            "mint",
            "bootstrap",
            "--cluster",
            "demo",
            "--pki",
            &pki,
            "--out",
            &out,
        ];
        for (f, v) in [
            ("--role", "worker"),
            ("--node", "w"),
            ("--endpoint", "10.0.0.10:6443"),
            ("--kubernetes-version", "v1.31.2"),
        ] {
            if f != *flag {
                args.extend([f, v]);
            }
        }
        args.extend([*flag, *value]);
        let r = nodeagent(&args);
        let err = String::from_utf8_lossy(&r.stderr);
        // A bad flag value is a usage error: exit 64 (EX_USAGE), whether clap or the
        // minter's own checks refuse it.
        assert_eq!(r.status.code(), Some(64), "{flag} {value}: {err}");
        assert!(
            err.contains(named),
            "{flag} {value}: error does not name {named}: {err}"
        );
        assert!(!Path::new(&out).exists(), "{flag} {value}: wrote output");
    }
    // Fleets: static addresses and a fixed token make no sense for N nodes.
    for extra in [
        ["--network", "static:10.0.0.5/24"],
        ["--token", "abcdef.0123456789abcdef"],
    ] {
        let args = [
            &[
                "mint",
                "bootstrap",
                "--role",
                "worker",
                "--cluster",
                "demo",
                "--node",
                "w",
                "--endpoint",
                "10.0.0.10:6443",
                "--kubernetes-version",
                "v1.31.2",
                "--pki",
                &pki,
                "--out",
                &out,
                "--nodes",
                "3",
            ][..],
            &extra[..],
        ]
        .concat();
        let r = nodeagent(&args);
        assert!(
            String::from_utf8_lossy(&r.stderr).contains(extra[0]),
            "{}",
            String::from_utf8_lossy(&r.stderr)
        );
    }
    // An init bundle needs the whole PKI.
    let r = nodeagent(&[
        "mint",
        "bootstrap",
        "--role",
        "init",
        "--cluster",
        "demo",
        "--node",
        "cp",
        "--endpoint",
        "10.0.0.10:6443",
        "--kubernetes-version",
        "v1.31.2",
        "--out",
        &out,
    ]);
    assert!(String::from_utf8_lossy(&r.stderr).contains("--pki"));
}

#[test]
fn ssh_key_becomes_a_capv_user() {
    let c = Cluster::new("ecdsa-p256");
    let k = c.root.join("id.pub");
    std::fs::write(&k, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMtest me@host\n").unwrap();
    c.bootstrap(
        "worker",
        "w",
        "v1.31.2",
        &["--ssh-key", k.to_str().unwrap()],
    );
    let text = key(&c.root.join("out/w"), "userdata");
    assert!(text.ends_with("\nusers:\n  - name: capv\n    sudo: ALL=(ALL) NOPASSWD:ALL\n    ssh_authorized_keys:\n      - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMtest me@host\n"), "{text}");
    let ud: Value = serde_norway::from_str(&text).unwrap();
    assert_eq!(
        ud["users"][0]["ssh_authorized_keys"][0].as_str(),
        Some("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMtest me@host")
    );
    std::fs::write(&k, "ssh-ed25519 AAAA x: y\n").unwrap();
    let r = nodeagent(&[
        "mint",
        "bootstrap",
        "--role",
        "worker",
        "--cluster",
        "demo",
        "--node",
        "w2",
        "--endpoint",
        "10.0.0.10:6443",
        "--kubernetes-version",
        "v1.31.2",
        "--pki",
        &c.pki(),
        "--out",
        &c.out(),
        "--ssh-key",
        k.to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&r.stderr).contains("--ssh-key"));
}

#[test]
fn join_bundles_from_capi_secrets() {
    let c = Cluster::new("ecdsa-p256");
    let secrets = c.root.join("secrets.yaml");
    ok(&[
        "mint",
        "secrets",
        "--cluster",
        "demo",
        "--from",
        &c.pki(),
        "--endpoint",
        "10.0.0.10:6443",
        "--out",
        secrets.to_str().unwrap(),
    ]);
    let out = c.out();
    ok(&[
        "mint",
        "bootstrap",
        "--role",
        "control-plane",
        "--cluster",
        "demo",
        "--node",
        "cp-2",
        "--endpoint",
        "10.0.0.10:6443",
        "--kubernetes-version",
        "v1.31.2",
        "--from-secrets",
        secrets.to_str().unwrap(),
        "--out",
        &out,
    ]);
    let ud: Value = serde_norway::from_str(&key(&c.root.join("out/cp-2"), "userdata")).unwrap();
    assert_eq!(
        content(&ud, "/etc/kubernetes/pki/ca.key"),
        std::fs::read_to_string(c.root.join("pki/ca.key")).unwrap()
    );
}

/// The options a cluster without a cloud controller manager needs (the QEMU cluster tier):
/// no `cloud-provider: external`, kubeadm phases skipped, extra files (a CNI conflist) after
/// the PKI and before the kubeadm config as CABPK orders `files:`, preKubeadmCommands before
/// the kubeadm line.
#[test]
fn cluster_options_reach_the_userdata() {
    let c = Cluster::new("ecdsa-p256");
    let conflist = c.root.join("cni.conflist");
    std::fs::write(&conflist, "{\"cniVersion\": \"1.0.0\"}\n").unwrap();
    let file = format!("/etc/cni/net.d/10-test.conflist={}", conflist.display());
    c.bootstrap(
        "init",
        "cp-0",
        "v1.34.4",
        &[
            "--cloud-provider",
            "none",
            "--skip-phases",
            "addon/kube-proxy,addon/coredns",
            "--file",
            &file,
            "--pre-command",
            "echo before kubeadm",
            "--kubeadm-timeout",
            "controlPlaneComponentHealthCheck=20m",
            "--kubeadm-timeout",
            "kubernetesAPICall=1h30m",
            "--kubeadm-patches",
            "/etc/kubernetes/patches",
        ],
    );
    let dir = c.root.join("out").join("cp-0");
    let ud: Value = serde_norway::from_str(&key(&dir, "userdata")).unwrap();
    let paths: Vec<String> = write_files(&ud).into_iter().map(|(p, _, _)| p).collect();
    let at = |p: &str| paths.iter().position(|x| x == p).unwrap();
    assert!(at("/etc/kubernetes/pki/sa.key") < at("/etc/cni/net.d/10-test.conflist"));
    assert!(at("/etc/cni/net.d/10-test.conflist") < at("/run/kubeadm/kubeadm.yaml"));
    assert_eq!(
        content(&ud, "/etc/cni/net.d/10-test.conflist"),
        "{\"cniVersion\": \"1.0.0\"}\n"
    );
    let (_, owner, perm) = write_files(&ud)
        .into_iter()
        .find(|(p, _, _)| p == "/etc/cni/net.d/10-test.conflist")
        .unwrap();
    assert_eq!((owner.as_str(), perm.as_str()), ("root:root", "0644"));
    let docs = kubeadm_docs(content(&ud, "/run/kubeadm/kubeadm.yaml"));
    let init = docs
        .iter()
        .find(|d| d["kind"] == "InitConfiguration")
        .unwrap();
    assert_eq!(
        init["skipPhases"],
        serde_norway::from_str::<Value>("[addon/kube-proxy, addon/coredns]").unwrap()
    );
    assert!(init["nodeRegistration"]["kubeletExtraArgs"].is_null());
    assert_eq!(init["patches"]["directory"], "/etc/kubernetes/patches");
    assert_eq!(
        init["timeouts"],
        serde_norway::from_str::<Value>(
            "{controlPlaneComponentHealthCheck: 20m, kubernetesAPICall: 1h30m}"
        )
        .unwrap()
    );
    let cluster = docs
        .iter()
        .find(|d| d["kind"] == "ClusterConfiguration")
        .unwrap();
    assert!(cluster["controllerManager"]["extraArgs"].is_null());
    let runcmd: Vec<&str> = ud["runcmd"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(runcmd[0], "echo before kubeadm");
    assert!(runcmd[1].starts_with("kubeadm init --config /run/kubeadm/kubeadm.yaml"));

    // The default stays CAPV's: a cloud controller manager sets the Nodes' addresses.
    c.bootstrap("init", "cp-1", "v1.34.4", &[]);
    let ud: Value =
        serde_norway::from_str(&key(&c.root.join("out").join("cp-1"), "userdata")).unwrap();
    let docs = kubeadm_docs(content(&ud, "/run/kubeadm/kubeadm.yaml"));
    let init = docs
        .iter()
        .find(|d| d["kind"] == "InitConfiguration")
        .unwrap();
    assert!(init["skipPhases"].is_null() && init["timeouts"].is_null());
    // kubeadm's `timeouts` are v1beta4's: a v1beta3 bundle refuses them.
    let out = nodeagent(&[
        "mint",
        "bootstrap",
        "--role",
        "init",
        "--cluster",
        "demo",
        "--node",
        "cp-2",
        "--endpoint",
        "10.0.0.10:6443",
        "--kubernetes-version",
        "v1.30.4",
        "--pki",
        &c.pki(),
        "--out",
        &c.out(),
        "--kubeadm-timeout",
        "discovery=5m",
    ]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--kubeadm-timeout"));
    assert_eq!(
        init["nodeRegistration"]["kubeletExtraArgs"][0]["name"].as_str(),
        Some("cloud-provider")
    );
}
