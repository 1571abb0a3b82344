//! `nodeagent mint pki|hash|token|kubeconfig` checked with the real openssl CLI.

mod mint_support;
use mint_support::*;
use std::path::Path;

const CAS: [&str; 3] = ["ca", "etcd/ca", "front-proxy-ca"];

fn check_pki(dir: &Path, key_label: &str) {
    for ca in CAS {
        let crt = dir.join(format!("{ca}.crt"));
        let key = dir.join(format!("{ca}.key"));
        let crt_s = crt.to_str().unwrap();
        // The chain (a self-signed root) verifies.
        let v = openssl(&["verify", "-CAfile", crt_s, crt_s]);
        assert!(v.trim_end().ends_with(": OK"), "{v}");
        // Extensions as CAPI makes them.
        let text = openssl(&["x509", "-in", crt_s, "-noout", "-text"]);
        for want in [
            "Issuer: CN = kubernetes",
            "Subject: CN = kubernetes",
            "X509v3 Key Usage: critical",
            "Digital Signature, Key Encipherment, Certificate Sign",
            "X509v3 Basic Constraints: critical",
            "CA:TRUE, pathlen:0",
            "X509v3 Subject Key Identifier",
        ] {
            assert!(text.contains(want), "{ca}.crt lacks {want:?}:\n{text}");
        }
        assert!(
            !text.contains("Authority Key Identifier")
                && !text.contains("Subject Alternative Name"),
            "{text}"
        );
        // CN is a PrintableString, as Go writes it.
        assert!(openssl(&["asn1parse", "-in", crt_s]).contains("PRINTABLESTRING   :kubernetes"));
        // Serial is random and non-zero.
        let serial = openssl(&["x509", "-in", crt_s, "-noout", "-serial"]);
        assert!(
            serial
                .trim()
                .trim_start_matches("serial=")
                .trim_start_matches('0')
                .len()
                > 8,
            "{serial}"
        );
        // Ten years, notBefore five minutes back.
        let dates = openssl(&[
            "x509",
            "-in",
            crt_s,
            "-noout",
            "-checkend",
            &(3649 * 86400).to_string(),
        ]);
        assert!(dates.contains("will not expire"), "{dates}");
        let st = std::process::Command::new("openssl")
            .args([
                "x509",
                "-in",
                crt_s,
                "-noout",
                "-checkend",
                &(3651 * 86400).to_string(),
            ])
            .output()
            .unwrap();
        assert!(
            !st.status.success(),
            "{ca}.crt valid for more than 3651 days"
        );
        // The key matches the certificate, and is in CAPI's PEM flavour with mode 0600.
        let from_key = openssl(&["pkey", "-in", key.to_str().unwrap(), "-pubout"]);
        let from_crt = openssl(&["x509", "-in", crt_s, "-noout", "-pubkey"]);
        assert_eq!(from_key, from_crt, "{ca}.key does not match {ca}.crt");
        assert!(
            std::fs::read_to_string(&key)
                .unwrap()
                .starts_with(&format!("-----BEGIN {key_label}-----\n"))
        );
        assert_eq!(mode(&key), 0o600);
        assert_eq!(mode(&crt), 0o644);
        // Our discovery hash equals openssl's pipeline.
        assert_eq!(
            ok(&["mint", "hash", "--ca", crt_s]).trim(),
            openssl_discovery_hash(&crt)
        );
    }
    let sa_pub = openssl(&[
        "pkey",
        "-in",
        dir.join("sa.key").to_str().unwrap(),
        "-pubout",
    ]);
    assert_eq!(sa_pub, std::fs::read_to_string(dir.join("sa.pub")).unwrap());
    assert_eq!(mode(&dir.join("sa.key")), 0o600);
    // No stray temp files from the atomic writes.
    let names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        names.iter().all(|n| !n.contains("nodeagent-tmp")),
        "{names:?}"
    );
}

fn mint(alg: &str, label: &str) {
    if !need_openssl() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    let out = ok(&[
        "mint",
        "pki",
        "--cluster",
        "c1",
        "--out",
        dir.to_str().unwrap(),
        "--algorithm",
        alg,
    ]);
    assert!(
        !out.contains("PRIVATE KEY"),
        "pki printed key material: {out}"
    );
    check_pki(&dir, label);
    // The three CAs have distinct keys.
    let a = std::fs::read(dir.join("ca.key")).unwrap();
    assert_ne!(a, std::fs::read(dir.join("etcd/ca.key")).unwrap());
    assert_ne!(a, std::fs::read(dir.join("front-proxy-ca.key")).unwrap());
}

#[test]
fn ecdsa_p256_pki_passes_openssl() {
    mint("ecdsa-p256", "EC PRIVATE KEY");
}

#[test]
fn ecdsa_p384_pki_passes_openssl() {
    mint("ecdsa-p384", "EC PRIVATE KEY");
}

#[test]
fn rsa_2048_pki_passes_openssl() {
    mint("rsa-2048", "RSA PRIVATE KEY");
}

#[test]
fn rsa_4096_pki_passes_openssl() {
    mint("rsa-4096", "RSA PRIVATE KEY");
}

#[test]
fn existing_pki_is_not_overwritten_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    let d = dir.to_str().unwrap();
    ok(&["mint", "pki", "--cluster", "c1", "--out", d]);
    let before = std::fs::read(dir.join("ca.key")).unwrap();
    let out = nodeagent(&["mint", "pki", "--cluster", "c1", "--out", d]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
    assert_eq!(
        before,
        std::fs::read(dir.join("ca.key")).unwrap(),
        "refused run changed ca.key"
    );
    ok(&["mint", "pki", "--cluster", "c1", "--out", d, "--force"]);
    assert_ne!(before, std::fs::read(dir.join("ca.key")).unwrap());
}

#[test]
fn bad_algorithm_and_validity_name_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("p");
    let out = nodeagent(&[
        "mint",
        "pki",
        "--cluster",
        "c1",
        "--out",
        d.to_str().unwrap(),
        "--algorithm",
        "dsa",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--algorithm"));
    let out = nodeagent(&[
        "mint",
        "pki",
        "--cluster",
        "c1",
        "--out",
        d.to_str().unwrap(),
        "--validity",
        "ten",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--validity"));
    assert!(!d.exists(), "a failed run created the output directory");
}

#[test]
fn hash_of_a_real_capi_ca_matches_openssl() {
    if !prereq::corpus_present() {
        return;
    }
    // The CA inside real CABPK output: RSA, serial 0 (which strict parsers reject).
    if !need_openssl() {
        return;
    }
    let golden = std::fs::read_to_string(format!(
        "{}/capi/cabpk/rendered/controlplane-init-v1beta3-k8s-1.26.6.cloud-config.yaml",
        prereq::CORPUS
    ))
    .unwrap();
    let doc: serde_norway::Value = serde_norway::from_str(&golden).unwrap();
    let ca = doc["write_files"][0]["content"].as_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("ca.crt");
    std::fs::write(&f, ca).unwrap();
    let ours = ok(&["mint", "hash", "--ca", f.to_str().unwrap()]);
    assert_eq!(ours.trim(), openssl_discovery_hash(&f));
    // A bundle of two certificates gives two hashes, in order.
    let tmp2 = tempfile::tempdir().unwrap();
    ok(&[
        "mint",
        "pki",
        "--cluster",
        "c2",
        "--out",
        tmp2.path().to_str().unwrap(),
    ]);
    let other = tmp2.path().join("ca.crt");
    let both = tmp.path().join("both.crt");
    std::fs::write(
        &both,
        format!("{ca}{}", std::fs::read_to_string(&other).unwrap()),
    )
    .unwrap();
    let lines: Vec<String> = ok(&["mint", "hash", "--ca", both.to_str().unwrap()])
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(
        lines,
        [openssl_discovery_hash(&f), openssl_discovery_hash(&other)]
    );
}

#[test]
fn token_and_its_secret() {
    let t = ok(&["mint", "token"]);
    let t = t.trim();
    let (id, secret) = t.split_once('.').unwrap();
    assert!(
        id.len() == 6
            && secret.len() == 16
            && t.bytes()
                .all(|b| b == b'.' || b.is_ascii_lowercase() || b.is_ascii_digit()),
        "{t}"
    );
    assert_ne!(t, ok(&["mint", "token"]).trim());
    let y = ok(&["mint", "token", "--secret", "--token", t, "--ttl", "15m"]);
    let v: serde_norway::Value = serde_norway::from_str(&y).unwrap();
    assert_eq!(v["type"].as_str(), Some("bootstrap.kubernetes.io/token"));
    assert_eq!(
        v["metadata"]["name"].as_str(),
        Some(format!("bootstrap-token-{id}").as_str())
    );
    assert_eq!(v["metadata"]["namespace"].as_str(), Some("kube-system"));
    use base64::Engine;
    let d = |k: &str| {
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(v["data"][k].as_str().unwrap())
                .unwrap(),
        )
        .unwrap()
    };
    assert_eq!(d("token-id"), id);
    assert_eq!(d("token-secret"), secret);
    assert_eq!(d("usage-bootstrap-authentication"), "true");
    assert_eq!(d("usage-bootstrap-signing"), "true");
    assert_eq!(
        d("auth-extra-groups"),
        "system:bootstrappers:kubeadm:default-node-token"
    );
    let exp = time::OffsetDateTime::parse(
        &d("expiration"),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let left = exp - time::OffsetDateTime::now_utc();
    assert!(
        left > time::Duration::minutes(14) && left <= time::Duration::minutes(15),
        "{left}"
    );
    let bad = nodeagent(&["mint", "token", "--secret", "--token", "NOTATOKEN.x"]);
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("--token"));
    assert!(!String::from_utf8_lossy(&bad.stderr).contains("NOTATOKEN"));
}
