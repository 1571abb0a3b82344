//! `nodeagent mint secrets` and `kubeconfig`: CAPI's names, types, labels and keys; the
//! reverse restores byte-identical PKI files; client certificates verify with openssl.

mod mint_support;
use base64::Engine;
use mint_support::*;
use std::path::Path;

const PKI_FILES: [&str; 8] = [
    "ca.crt",
    "ca.key",
    "etcd/ca.crt",
    "etcd/ca.key",
    "front-proxy-ca.crt",
    "front-proxy-ca.key",
    "sa.pub",
    "sa.key",
];

fn b64d(v: &serde_norway::Value) -> String {
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap(),
    )
    .unwrap()
}

fn docs(yaml: &str) -> Vec<serde_norway::Value> {
    serde_norway::Deserializer::from_str(yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

fn secrets_for(alg: &str) {
    if !need_openssl() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let pki = tmp.path().join("pki");
    let p = pki.to_str().unwrap();
    ok(&[
        "mint",
        "pki",
        "--cluster",
        "demo",
        "--out",
        p,
        "--algorithm",
        alg,
    ]);
    let yaml_path = tmp.path().join("secrets.yaml");
    ok(&[
        "mint",
        "secrets",
        "--cluster",
        "demo",
        "--namespace",
        "ns1",
        "--from",
        p,
        "--endpoint",
        "10.0.0.10:6443",
        "--out",
        yaml_path.to_str().unwrap(),
    ]);
    assert_eq!(mode(&yaml_path), 0o600);
    let yaml = std::fs::read_to_string(&yaml_path).unwrap();
    let docs = docs(&yaml);
    let names: Vec<&str> = docs
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "demo-ca",
            "demo-etcd",
            "demo-proxy",
            "demo-sa",
            "demo-kubeconfig"
        ]
    );
    for d in &docs {
        assert_eq!(d["apiVersion"].as_str(), Some("v1"));
        assert_eq!(d["kind"].as_str(), Some("Secret"));
        assert_eq!(d["type"].as_str(), Some("cluster.x-k8s.io/secret"));
        assert_eq!(d["metadata"]["namespace"].as_str(), Some("ns1"));
        assert_eq!(
            d["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"].as_str(),
            Some("demo")
        );
    }
    let read = |f: &str| std::fs::read_to_string(pki.join(f)).unwrap();
    assert_eq!(b64d(&docs[0]["data"]["tls.crt"]), read("ca.crt"));
    assert_eq!(b64d(&docs[0]["data"]["tls.key"]), read("ca.key"));
    assert_eq!(b64d(&docs[1]["data"]["tls.crt"]), read("etcd/ca.crt"));
    assert_eq!(
        b64d(&docs[2]["data"]["tls.key"]),
        read("front-proxy-ca.key")
    );
    assert_eq!(b64d(&docs[3]["data"]["tls.crt"]), read("sa.pub"));
    assert!(b64d(&docs[3]["data"]["tls.crt"]).starts_with("-----BEGIN PUBLIC KEY-----"));
    assert_eq!(b64d(&docs[3]["data"]["tls.key"]), read("sa.key"));

    // The admin kubeconfig, shaped as CAPI's.
    let kc: serde_norway::Value = serde_norway::from_str(&b64d(&docs[4]["data"]["value"])).unwrap();
    assert_eq!(kc["current-context"].as_str(), Some("demo-admin@demo"));
    assert_eq!(kc["clusters"][0]["name"].as_str(), Some("demo"));
    assert_eq!(
        kc["clusters"][0]["cluster"]["server"].as_str(),
        Some("https://10.0.0.10:6443")
    );
    assert_eq!(
        b64d(&kc["clusters"][0]["cluster"]["certificate-authority-data"]),
        read("ca.crt")
    );
    assert_eq!(kc["users"][0]["name"].as_str(), Some("demo-admin"));
    let cert = tmp.path().join("admin.crt");
    let key = tmp.path().join("admin.key");
    std::fs::write(
        &cert,
        b64d(&kc["users"][0]["user"]["client-certificate-data"]),
    )
    .unwrap();
    std::fs::write(&key, b64d(&kc["users"][0]["user"]["client-key-data"])).unwrap();
    check_client_cert(
        &pki,
        &cert,
        &key,
        "kubernetes-admin",
        Some("system:masters"),
    );

    // Reverse: byte-identical PKI files.
    let back = tmp.path().join("restored");
    ok(&[
        "mint",
        "secrets",
        "--from-secrets",
        yaml_path.to_str().unwrap(),
        "--out",
        back.to_str().unwrap(),
    ]);
    for f in PKI_FILES {
        assert_eq!(
            std::fs::read(pki.join(f)).unwrap(),
            std::fs::read(back.join(f)).unwrap(),
            "{f} differs after the round trip"
        );
        assert_eq!(mode(&pki.join(f)), mode(&back.join(f)), "{f} mode");
    }
    // And refuses to overwrite it.
    let again = nodeagent(&[
        "mint",
        "secrets",
        "--from-secrets",
        yaml_path.to_str().unwrap(),
        "--out",
        back.to_str().unwrap(),
    ]);
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("--force"));
}

pub fn check_client_cert(pki: &Path, cert: &Path, key: &Path, cn: &str, org: Option<&str>) {
    let (c, k, ca) = (
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
        pki.join("ca.crt"),
    );
    let v = openssl(&["verify", "-CAfile", ca.to_str().unwrap(), c]);
    assert!(v.trim_end().ends_with(": OK"), "{v}");
    let text = openssl(&["x509", "-in", c, "-noout", "-text"]);
    assert!(text.contains("TLS Web Client Authentication"), "{text}");
    assert!(
        text.contains("Digital Signature, Key Encipherment"),
        "{text}"
    );
    assert!(text.contains(&format!("CN = {cn}")), "{text}");
    if let Some(o) = org {
        assert!(text.contains(&format!("O = {o}")), "{text}");
    }
    assert!(text.contains("Authority Key Identifier"), "{text}");
    assert!(!text.contains("CA:TRUE"), "{text}");
    assert_eq!(
        openssl(&["pkey", "-in", k, "-pubout"]),
        openssl(&["x509", "-in", c, "-noout", "-pubkey"])
    );
    // notBefore equals the CA's (CAPI's recipe).
    let nb = |f: &str| openssl(&["x509", "-in", f, "-noout", "-startdate"]);
    assert_eq!(nb(c), nb(ca.to_str().unwrap()));
}

#[test]
fn ecdsa_secrets_round_trip() {
    secrets_for("ecdsa-p256");
}

#[test]
fn rsa_secrets_round_trip() {
    secrets_for("rsa-2048");
}

#[test]
fn secrets_refuse_the_terminal_without_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("pki");
    ok(&[
        "mint",
        "pki",
        "--cluster",
        "demo",
        "--out",
        p.to_str().unwrap(),
    ]);
    let args = [
        "mint",
        "secrets",
        "--cluster",
        "demo",
        "--from",
        p.to_str().unwrap(),
        "--endpoint",
        "10.0.0.10:6443",
    ];
    let out = nodeagent(&args);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--stdout"));
    let mut with = args.to_vec();
    with.push("--stdout");
    assert!(ok(&with).contains("name: demo-ca"));
}

#[test]
fn from_secrets_reads_stringdata_and_picks_the_cluster() {
    let tmp = tempfile::tempdir().unwrap();
    let mut all = String::new();
    for c in ["one", "two"] {
        let p = tmp.path().join(c);
        ok(&["mint", "pki", "--cluster", c, "--out", p.to_str().unwrap()]);
        all.push_str(&ok(&[
            "mint",
            "secrets",
            "--cluster",
            c,
            "--from",
            p.to_str().unwrap(),
            "--endpoint",
            "a.example:6443",
            "--stdout",
        ]));
    }
    let f = tmp.path().join("all.yaml");
    std::fs::write(&f, &all).unwrap();
    let out = nodeagent(&[
        "mint",
        "secrets",
        "--from-secrets",
        f.to_str().unwrap(),
        "--out",
        tmp.path().join("x").to_str().unwrap(),
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--cluster"),
        "several clusters must ask for --cluster"
    );
    let back = tmp.path().join("two-back");
    ok(&[
        "mint",
        "secrets",
        "--from-secrets",
        f.to_str().unwrap(),
        "--cluster",
        "two",
        "--out",
        back.to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::read(back.join("ca.key")).unwrap(),
        std::fs::read(tmp.path().join("two/ca.key")).unwrap()
    );

    // Hand-written stringData Secrets (kubectl style) work too; a missing key is named.
    let read = |f: &str| std::fs::read_to_string(tmp.path().join("one").join(f)).unwrap();
    let ind = |s: String| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    let pair = |n: &str, c: &str, k: &str| {
        format!(
            "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: {n}\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
            ind(read(c)),
            ind(read(k))
        )
    };
    let mut hand = pair("h-ca", "ca.crt", "ca.key")
        + &pair("h-etcd", "etcd/ca.crt", "etcd/ca.key")
        + &pair("h-sa", "sa.pub", "sa.key");
    let f2 = tmp.path().join("hand.yaml");
    std::fs::write(&f2, &hand).unwrap();
    let out = nodeagent(&[
        "mint",
        "secrets",
        "--from-secrets",
        f2.to_str().unwrap(),
        "--out",
        tmp.path().join("h").to_str().unwrap(),
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("h-proxy not found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !tmp.path().join("h").exists(),
        "a failed restore wrote files"
    );
    hand += &pair("h-proxy", "front-proxy-ca.crt", "front-proxy-ca.key");
    std::fs::write(&f2, &hand).unwrap();
    ok(&[
        "mint",
        "secrets",
        "--from-secrets",
        f2.to_str().unwrap(),
        "--out",
        tmp.path().join("h").to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("h/sa.key")).unwrap(),
        read("sa.key")
    );
}

#[test]
fn kubeconfig_for_a_user_and_group() {
    if !need_openssl() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("pki");
    ok(&[
        "mint",
        "pki",
        "--cluster",
        "demo",
        "--out",
        p.to_str().unwrap(),
        "--algorithm",
        "rsa-2048",
    ]);
    let f = tmp.path().join("alice.kubeconfig");
    let out = ok(&[
        "mint",
        "kubeconfig",
        "--pki",
        p.to_str().unwrap(),
        "--cluster",
        "demo",
        "--endpoint",
        "[fd00::10]:6443",
        "--user",
        "alice",
        "--group",
        "devs",
        "--out",
        f.to_str().unwrap(),
    ]);
    assert!(!out.contains("PRIVATE"));
    assert_eq!(mode(&f), 0o600);
    let kc: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
    assert_eq!(
        kc["clusters"][0]["cluster"]["server"].as_str(),
        Some("https://[fd00::10]:6443")
    );
    assert_eq!(kc["current-context"].as_str(), Some("alice@demo"));
    let cert = tmp.path().join("c.crt");
    let key = tmp.path().join("c.key");
    std::fs::write(
        &cert,
        b64d(&kc["users"][0]["user"]["client-certificate-data"]),
    )
    .unwrap();
    std::fs::write(&key, b64d(&kc["users"][0]["user"]["client-key-data"])).unwrap();
    assert!(
        std::fs::read_to_string(&key)
            .unwrap()
            .starts_with("-----BEGIN RSA PRIVATE KEY-----")
    );
    check_client_cert(&p, &cert, &key, "alice", Some("devs"));
    let bad = nodeagent(&[
        "mint",
        "kubeconfig",
        "--pki",
        p.to_str().unwrap(),
        "--cluster",
        "demo",
        "--endpoint",
        "10.0.0.1",
        "--user",
        "a",
        "--stdout",
    ]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--endpoint"));
}
