//! `nodeagent certs` on a kubeadm-layout PKI through the real binary. The CAs come from
//! `nodeagent mint pki` (all three `CN=kubernetes`, as Cluster API makes them); the leaf
//! certificates and kubeconfigs are made here with rcgen the way kubeadm's certs and
//! kubeconfig phases make them (same files, names, CAs, SANs); real kubeadm's own files are
//! read by `kubeadm_oracle.rs`, which compares `certs` with `kubeadm certs check-expiration`.
//! Expected dates come from openssl and date(1), not from nodeagent.

use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use time::{Duration, OffsetDateTime};

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

/// A CA usable for signing: its PEM and key.
struct Ca {
    pem: String,
    key: KeyPair,
}

impl Ca {
    fn load(pki: &Path, base: &str) -> Ca {
        let pem = std::fs::read_to_string(pki.join(format!("{base}.crt"))).unwrap();
        let key_pem = std::fs::read_to_string(pki.join(format!("{base}.key"))).unwrap();
        let key = minter::pki::Key::from_pem(&key_pem, base).unwrap();
        let key = KeyPair::try_from(key.pair().serialized_der()).unwrap();
        Ca { pem, key }
    }

    /// A CA that is not on the node, also `CN=kubernetes`.
    fn foreign() -> Ca {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut p = CertificateParams::default();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, "kubernetes");
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = p.self_signed(&key).unwrap().pem();
        Ca { pem, key }
    }
}

/// A leaf as kubeadm makes it: CN, O, SANs, `days` of validity from now (negative: expired).
/// Returns (certificate PEM, SEC1 key PEM as kubeadm writes it).
fn leaf(ca: &Ca, cn: &str, org: Option<&str>, sans: &[&str], days: i64) -> (String, String) {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut p =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    if let Some(o) = org {
        p.distinguished_name.push(DnType::OrganizationName, o);
    }
    p.distinguished_name.push(DnType::CommonName, cn);
    let now = OffsetDateTime::now_utc();
    p.not_before = now - Duration::days(days.abs() + 1);
    p.not_after = now + Duration::days(days);
    p.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    p.use_authority_key_identifier_extension = true;
    let issuer = Issuer::from_ca_cert_pem(&ca.pem, &ca.key).unwrap();
    let cert = p.signed_by(&key, &issuer).unwrap();
    let sec1 = libnodeagent::pki::der::pkcs8_to_sec1(key.serialized_der()).unwrap();
    (cert.pem(), minter::pki::pem_encode("EC PRIVATE KEY", &sec1))
}

const APISERVER_SANS: &[&str] = &[
    "cp-0",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "api.example.com",
    "extra.example.com",
    "10.96.0.1",
    "10.0.0.10",
];
const ETCD_SERVER_SANS: &[&str] = &["cp-0", "localhost", "10.0.0.10", "127.0.0.1", "::1"];
const ETCD_PEER_SANS: &[&str] = &["cp-0", "10.0.0.10"];

/// The kubeadm config CABPK writes for this node (init), with the SANs above.
const KUBEADM_YAML: &str = "\
apiVersion: kubeadm.k8s.io/v1beta3
kind: ClusterConfiguration
controlPlaneEndpoint: api.example.com:6443
apiServer:
  certSANs:
  - extra.example.com
networking:
  serviceSubnet: 10.96.0.0/12
---
apiVersion: kubeadm.k8s.io/v1beta3
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: 10.0.0.10
nodeRegistration:
  name: cp-0
";

/// kubeadm's certificate rows: name, file under pki/ (or the kubeconfig), CA base name,
/// CN, O, SANs.
type Row = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static [&'static str],
);
const ROWS: &[Row] = &[
    (
        "admin.conf",
        "admin.conf",
        "ca",
        "kubernetes-admin",
        Some("kubeadm:cluster-admins"),
        &[],
    ),
    (
        "apiserver",
        "apiserver",
        "ca",
        "kube-apiserver",
        None,
        APISERVER_SANS,
    ),
    (
        "apiserver-etcd-client",
        "apiserver-etcd-client",
        "etcd/ca",
        "kube-apiserver-etcd-client",
        None,
        &[],
    ),
    (
        "apiserver-kubelet-client",
        "apiserver-kubelet-client",
        "ca",
        "kube-apiserver-kubelet-client",
        Some("kubeadm:cluster-admins"),
        &[],
    ),
    (
        "controller-manager.conf",
        "controller-manager.conf",
        "ca",
        "system:kube-controller-manager",
        None,
        &[],
    ),
    (
        "etcd-healthcheck-client",
        "etcd/healthcheck-client",
        "etcd/ca",
        "kube-etcd-healthcheck-client",
        None,
        &[],
    ),
    (
        "etcd-peer",
        "etcd/peer",
        "etcd/ca",
        "cp-0",
        None,
        ETCD_PEER_SANS,
    ),
    (
        "etcd-server",
        "etcd/server",
        "etcd/ca",
        "cp-0",
        None,
        ETCD_SERVER_SANS,
    ),
    (
        "front-proxy-client",
        "front-proxy-client",
        "front-proxy-ca",
        "front-proxy-client",
        None,
        &[],
    ),
    (
        "scheduler.conf",
        "scheduler.conf",
        "ca",
        "system:kube-scheduler",
        None,
        &[],
    ),
    (
        "super-admin.conf",
        "super-admin.conf",
        "ca",
        "kubernetes-super-admin",
        Some("system:masters"),
        &[],
    ),
];

struct Node {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Node {
    fn pki(&self) -> PathBuf {
        self.root.join("etc/kubernetes/pki")
    }
    fn root(&self) -> &str {
        self.root.to_str().unwrap()
    }
    fn ca(&self, base: &str) -> Ca {
        Ca::load(&self.pki(), base)
    }
    /// Write a leaf (cert + key) or a kubeconfig for `name`.
    fn put(&self, name: &str, cert: &str, key: &str) {
        let (_, file, ..) =
            ROWS.iter()
                .find(|r| r.0 == name)
                .copied()
                .unwrap_or((name, name, "ca", "", None, &[]));
        if file.ends_with(".conf") {
            let ca = std::fs::read_to_string(self.pki().join("ca.crt")).unwrap();
            let kc = minter::kubeconfig::render(
                "kubernetes",
                "https://api.example.com:6443",
                &ca,
                name,
                cert,
                key,
            );
            std::fs::write(self.root.join("etc/kubernetes").join(file), kc).unwrap();
        } else {
            std::fs::write(self.pki().join(format!("{file}.crt")), cert).unwrap();
            std::fs::write(self.pki().join(format!("{file}.key")), key).unwrap();
        }
    }
    fn certs(&self, extra: &[&str]) -> (i32, String, String) {
        let mut args = vec!["certs", "--root", self.root()];
        args.extend_from_slice(extra);
        nodeagent(&args)
    }
    fn json(&self, extra: &[&str]) -> (i32, Value) {
        let mut args = vec!["--json"];
        args.extend_from_slice(extra);
        let (code, out, err) = self.certs(&args);
        (
            code,
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}")),
        )
    }
}

/// A control-plane node as kubeadm init leaves it: three CAs from `mint pki`, every leaf,
/// every kubeconfig (plus kubelet.conf), and CABPK's kubeadm config.
fn control_plane() -> Node {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let pki = root.join("etc/kubernetes/pki");
    let (code, _, err) = nodeagent(&[
        "mint",
        "pki",
        "--cluster",
        "c1",
        "--out",
        pki.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    std::fs::create_dir_all(pki.join("etcd")).unwrap();
    std::fs::create_dir_all(root.join("run/kubeadm")).unwrap();
    std::fs::write(root.join("run/kubeadm/kubeadm.yaml"), KUBEADM_YAML).unwrap();
    let node = Node { _dir: dir, root };
    for (name, _, ca, cn, org, sans) in ROWS {
        let (c, k) = leaf(&node.ca(ca), cn, *org, sans, 365);
        node.put(name, &c, &k);
    }
    let (c, k) = leaf(
        &node.ca("ca"),
        "system:node:cp-0",
        Some("system:nodes"),
        &[],
        365,
    );
    node.put("kubelet.conf", &c, &k);
    node
}

/// notAfter of a PEM certificate as kubeadm prints it, through openssl and date(1).
fn kubeadm_date_of(pem: &str) -> String {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), pem).unwrap();
    let o = Command::new("openssl")
        .args(["x509", "-noout", "-enddate", "-in"])
        .arg(f.path())
        .output()
        .unwrap();
    assert!(o.status.success());
    let end = String::from_utf8(o.stdout).unwrap();
    let end = end.trim().strip_prefix("notAfter=").unwrap().to_string();
    let o = Command::new("date")
        .args(["-u", "-d", &end, "+%b %d, %Y %H:%M UTC"])
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// The PEM of row `name` as it is on disk (kubeconfigs: the embedded client certificate).
fn pem_of(node: &Node, name: &str) -> String {
    let (_, file, ..) = ROWS.iter().find(|r| r.0 == name).unwrap();
    if file.ends_with(".conf") {
        let kc: serde_norway::Value = serde_norway::from_str(
            &std::fs::read_to_string(node.root.join("etc/kubernetes").join(file)).unwrap(),
        )
        .unwrap();
        let b64 = kc["users"][0]["user"]["client-certificate-data"]
            .as_str()
            .unwrap();
        use base64::Engine;
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap(),
        )
        .unwrap()
    } else {
        std::fs::read_to_string(node.pki().join(format!("{file}.crt"))).unwrap()
    }
}

#[test]
fn kubeadm_layout_same_rows_and_expiry_as_check_expiration() {
    let node = control_plane();
    let (code, out, err) = node.certs(&[]);
    assert_eq!(code, 0, "{out}{err}");
    // kubeadm's text printer: tabwriter(minwidth 10, padding 3), `%-8v` for the last
    // column; widths follow the longest cell ("apiserver-kubelet-client", a date).
    let mut want = vec![format!(
        "{:<27}{:<25}{:<16}{:<24}{}",
        "CERTIFICATE", "EXPIRES", "RESIDUAL TIME", "CERTIFICATE AUTHORITY", "EXTERNALLY MANAGED"
    )];
    for (name, _, ca, ..) in ROWS {
        let ca = if *ca == "etcd/ca" { "etcd-ca" } else { *ca };
        want.push(format!(
            "{:<27}{:<25}{:<16}{:<24}{:<8}",
            name,
            kubeadm_date_of(&pem_of(&node, name)),
            "364d",
            ca,
            "no"
        ));
    }
    want.push(String::new());
    want.push(format!(
        "{:<24}{:<25}{:<16}{}",
        "CERTIFICATE AUTHORITY", "EXPIRES", "RESIDUAL TIME", "EXTERNALLY MANAGED"
    ));
    for (name, base) in [
        ("ca", "ca"),
        ("etcd-ca", "etcd/ca"),
        ("front-proxy-ca", "front-proxy-ca"),
    ] {
        let pem = std::fs::read_to_string(node.pki().join(format!("{base}.crt"))).unwrap();
        // mint's CAs: 3650 days; a moment later kubeadm's truncation shows 9y, as for a
        // fresh kubeadm CA.
        want.push(format!(
            "{:<24}{:<25}{:<16}{:<8}",
            name,
            kubeadm_date_of(&pem),
            "9y",
            "no"
        ));
    }
    let got: Vec<&str> = out.lines().take(want.len()).collect();
    assert_eq!(got, want, "\n{out}");
    // Beyond kubeadm: kubelet.conf and sa are checked too, and the SANs against the config.
    assert!(out.contains("SANs checked against"), "{out}");
    assert!(out.contains("no problems found"), "{out}");
    let kubelet = out.lines().find(|l| l.starts_with("kubelet.conf")).unwrap();
    assert!(
        kubelet
            .split_whitespace()
            .take(5)
            .eq(["kubelet.conf", "ca", "proven", "ok", "-"]),
        "{kubelet}"
    );

    let (code, v) = node.json(&[]);
    assert_eq!(code, 0);
    let names: Vec<&str> = v["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ROWS.iter().map(|r| r.0).collect::<Vec<_>>());
    for e in v["certificates"].as_array().unwrap() {
        assert_eq!(e["key"], "proven", "{e}");
        assert_eq!(e["chain"], "ok", "{e}");
        assert_eq!(e["signed_by"], e["certificate_authority"], "{e}");
        let days = e["residual_secs"].as_i64().unwrap() / 86400;
        assert_eq!(days, 364, "{e}");
    }
    for name in ["apiserver", "etcd-server", "etcd-peer"] {
        let e = v["certificates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap();
        assert_eq!(e["sans"], "ok", "{e}");
    }
    assert!(!v.to_string().contains("PRIVATE KEY"));
}

#[test]
fn three_cas_all_named_kubernetes_are_told_apart_by_signature() {
    let node = control_plane();
    let (_, v) = node.json(&[]);
    let cas = v["certificate_authorities"].as_array().unwrap();
    assert!(
        cas.iter().all(|c| c["subject"] == "CN=kubernetes"),
        "{cas:?}"
    );
    let signer = |v: &Value, name: &str| {
        v["certificates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .unwrap()["signed_by"]
            .clone()
    };
    assert_eq!(signer(&v, "etcd-peer"), "etcd-ca");
    assert_eq!(signer(&v, "front-proxy-client"), "front-proxy-ca");
    assert_eq!(signer(&v, "apiserver"), "ca");
    // The same issuer name, the wrong CA: front-proxy-client signed by the cluster CA.
    let (c, k) = leaf(&node.ca("ca"), "front-proxy-client", None, &[], 365);
    node.put("front-proxy-client", &c, &k);
    let (code, v) = node.json(&[]);
    assert_eq!(code, 1);
    assert_eq!(signer(&v, "front-proxy-client"), "ca");
    let p = &v["problems"][0];
    assert_eq!(p["kind"], "chain");
    assert_eq!(p["place"], "front-proxy-client (front-proxy-client.crt)");
    assert!(
        p["message"]
            .as_str()
            .unwrap()
            .contains("signed by ca, but kubeadm uses front-proxy-ca"),
        "{p}"
    );
    let (_, out, _) = node.certs(&[]);
    assert!(
        out.lines()
            .any(|l| l.starts_with("front-proxy-client") && l.contains(" wrong CA ")),
        "{out}"
    );
}

#[test]
fn a_wrong_key_is_caught_by_signing() {
    let node = control_plane();
    let pki = node.pki();
    std::fs::copy(
        pki.join("apiserver-kubelet-client.key"),
        pki.join("apiserver.key"),
    )
    .unwrap();
    // A kubeconfig whose client key is another certificate's.
    let (c, _) = leaf(
        &node.ca("ca"),
        "system:node:cp-0",
        Some("system:nodes"),
        &[],
        365,
    );
    let (_, other_key) = leaf(&node.ca("ca"), "x", None, &[], 365);
    node.put("kubelet.conf", &c, &other_key);
    let (code, v) = node.json(&[]);
    assert_eq!(code, 1);
    let kinds: Vec<(&str, &str)> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["place"].as_str().unwrap(), p["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("apiserver (apiserver.crt)", "key-mismatch"),
            ("kubelet.conf", "key-mismatch")
        ]
    );
    let (code, out, _) = node.certs(&[]);
    assert_eq!(code, 1);
    assert!(
        out.lines()
            .any(|l| l.starts_with("apiserver ") && l.contains(" mismatch ")),
        "{out}"
    );
    assert!(
        out.contains(
            "problem: apiserver (apiserver.crt): the private key is not this certificate's"
        ),
        "{out}"
    );
    assert!(!out.contains("PRIVATE KEY") && !v.to_string().contains("PRIVATE KEY"));
}

#[test]
fn a_broken_chain_is_reported() {
    let node = control_plane();
    let (c, k) = leaf(&Ca::foreign(), "cp-0", None, ETCD_PEER_SANS, 365);
    node.put("etcd-peer", &c, &k);
    let (code, v) = node.json(&[]);
    assert_eq!(code, 1);
    let e = v["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "etcd-peer")
        .unwrap();
    assert_eq!(
        (
            e["chain"].as_str(),
            e["signed_by"].is_null(),
            e["key"].as_str()
        ),
        (Some("broken"), true, Some("proven"))
    );
    let p = &v["problems"][0];
    assert_eq!(
        (p["kind"].as_str(), p["place"].as_str()),
        (Some("chain"), Some("etcd-peer (etcd/peer.crt)"))
    );
    assert!(
        p["message"]
            .as_str()
            .unwrap()
            .contains("no CA here verifies its signature (issuer CN=kubernetes), not even etcd-ca"),
        "{p}"
    );
    // A kubeconfig trusting another CA than ca.crt.
    let kc = node.root.join("etc/kubernetes/scheduler.conf");
    let text = std::fs::read_to_string(&kc).unwrap();
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let ca = std::fs::read_to_string(node.pki().join("ca.crt")).unwrap();
    std::fs::write(&kc, text.replace(&b64(&ca), &b64(&Ca::foreign().pem))).unwrap();
    let (_, v) = node.json(&[]);
    assert!(
        v["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["place"] == "scheduler.conf"
                && p["message"]
                    .as_str()
                    .unwrap()
                    .contains("certificate-authority-data is not ca.crt")),
        "{v}"
    );
}

#[test]
fn a_missing_san_names_the_config_field() {
    let node = control_plane();
    let sans: Vec<&str> = APISERVER_SANS
        .iter()
        .copied()
        .filter(|s| *s != "extra.example.com")
        .collect();
    let (c, k) = leaf(&node.ca("ca"), "kube-apiserver", None, &sans, 365);
    node.put("apiserver", &c, &k);
    let (code, v) = node.json(&[]);
    assert_eq!(code, 1);
    let p = &v["problems"][0];
    assert_eq!(p["kind"], "san-missing");
    assert_eq!(
        p["message"],
        "SAN extra.example.com (apiServer.certSANs in the kubeadm config) is not in the certificate"
    );
    assert!(
        v["kubeadm_config"]
            .as_str()
            .unwrap()
            .ends_with("run/kubeadm/kubeadm.yaml")
    );
    let e = v["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "apiserver")
        .unwrap();
    assert_eq!(e["sans"], "missing: extra.example.com");
    // Without a kubeadm config nothing is asked: no SAN problem.
    std::fs::remove_file(node.root.join("run/kubeadm/kubeadm.yaml")).unwrap();
    let (code, v) = node.json(&[]);
    assert_eq!((code, v["kubeadm_config"].is_null()), (0, true), "{v}");
}

#[test]
fn warn_within_has_its_own_exit_code_and_expired_is_a_failure() {
    let node = control_plane();
    let (c, k) = leaf(
        &node.ca("front-proxy-ca"),
        "front-proxy-client",
        None,
        &[],
        10,
    );
    node.put("front-proxy-client", &c, &k);
    let (code, v) = node.json(&["--warn-within", "30d"]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["problems"].as_array().unwrap().len(), 0);
    let w = &v["warnings"][0];
    assert_eq!(
        (w["kind"].as_str(), w["place"].as_str()),
        (
            Some("expiring"),
            Some("front-proxy-client (front-proxy-client.crt)")
        )
    );
    let (code, _) = node.json(&["--warn-within", "5d"]);
    assert_eq!(code, 0);
    let (code, _, _) = node.certs(&[]);
    assert_eq!(code, 0);
    // Expired: kubeadm shows `<invalid>`; a failure, whatever --warn-within says.
    let (c, k) = leaf(
        &node.ca("front-proxy-ca"),
        "front-proxy-client",
        None,
        &[],
        -2,
    );
    node.put("front-proxy-client", &c, &k);
    let (code, out, _) = node.certs(&["--warn-within", "30d"]);
    assert_eq!(code, 1);
    let row = out
        .lines()
        .find(|l| l.starts_with("front-proxy-client"))
        .unwrap();
    assert!(row.contains("   <invalid>   "), "{row}");
    assert!(
        out.contains("problem: front-proxy-client (front-proxy-client.crt): expired on"),
        "{out}"
    );
}

#[test]
fn a_worker_shows_kubeadms_missing_rows_and_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("etc/kubernetes/pki");
    std::fs::create_dir_all(&pki).unwrap();
    let ca = Ca::foreign();
    std::fs::write(pki.join("ca.crt"), &ca.pem).unwrap();
    let (code, out, err) = nodeagent(&["certs", pki.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    // A worker: only ca.crt (no key: externally managed, as kubeadm says).
    assert!(
        out.lines().any(|l| l.trim_end() == "!MISSING! apiserver"),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("ca ") && l.trim_end().ends_with("yes")),
        "{out}"
    );

    let gone = dir.path().join("nope");
    let (code, out, err) = nodeagent(&["certs", gone.to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.contains("nope") && err.contains("cannot read the PKI directory"),
        "{err}"
    );
    let (code, out, _) = nodeagent(&["certs", gone.to_str().unwrap(), "--json"]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["error"]["place"].as_str().unwrap().ends_with("nope"),
        "{v}"
    );
    assert_eq!(v["error"]["kind"], "not-found", "{v}");
    let (code, _, err) = nodeagent(&["certs", "--warn-within", "soon", pki.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("--warn-within"), "{err}");
}

#[test]
fn the_pki_directory_comes_from_the_kubeadm_config_as_kubeadm_takes_it() {
    let node = control_plane();
    // certificatesDir moves the PKI; the kubeconfigs stay in /etc/kubernetes.
    let moved = node.root.join("etc/kubernetes/custom-pki");
    std::fs::rename(node.pki(), &moved).unwrap();
    let (code, v) = node.json(&[]);
    assert_eq!(code, 1, "the default directory is gone: {v}");
    std::fs::write(
        node.root.join("run/kubeadm/kubeadm.yaml"),
        KUBEADM_YAML.replace(
            "kind: ClusterConfiguration\n",
            "kind: ClusterConfiguration\ncertificatesDir: /etc/kubernetes/custom-pki\n",
        ),
    )
    .unwrap();
    let (code, v) = node.json(&[]);
    assert_eq!(code, 0, "{v}");
    assert!(
        v["pki_dir"]
            .as_str()
            .unwrap()
            .ends_with("etc/kubernetes/custom-pki")
    );
    assert!(
        v["certificates"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["missing"] == false && e["key"] == "proven"),
        "{v}"
    );
}
