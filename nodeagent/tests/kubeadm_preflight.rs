//! kubeadm pre-flight on hand-built plans: the real CABPK corpus passes; bad PKI and bad
//! kubeadm configs fail with the file / field named and without secret values.

mod kubeadm_common;
mod prereq;
use kubeadm_common::*;

/// Pre-flight as a run does it: the plan's files, then what the root holds (read by the
/// pipeline, checked by the pure `planner::preflight`), at the current time.
fn preflight(
    plan: &libnodeagent::plan::Plan,
    root: &std::path::Path,
) -> libnodeagent::base::error::Result<()> {
    libnodeagent::pipeline::kubeadm_preflight(
        plan,
        &Default::default(),
        root,
        libnodeagent::pki::now(),
    )
}

fn root() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn corpus_init_passes() {
    if !prereq::corpus_present() {
        return;
    }
    let r = root();
    preflight(&corpus_plan(), r.path()).unwrap();
}

fn corpus_files() -> Vec<(String, Vec<u8>)> {
    corpus_parts(CORPUS_INIT).0
}

fn init_line() -> String {
    corpus_parts(CORPUS_INIT).1[0].clone()
}

fn fails(files: &[(String, Vec<u8>)], line: &str) -> libnodeagent::base::error::Error {
    let r = root();
    let e = preflight(&plan_of(files, line), r.path()).unwrap_err();
    // No key material or token ever reaches an error.
    let text = e.to_string();
    assert!(
        !text.contains("PRIVATE KEY") && !text.contains(TOKEN) && !text.contains(CERT_KEY),
        "{text}"
    );
    for (_, c) in files {
        if let Ok(s) = std::str::from_utf8(c) {
            for l in s.lines().filter(|l| l.len() > 40 && !l.starts_with("---")) {
                assert!(!text.contains(l), "error leaks file content: {text}");
            }
        }
    }
    e
}

#[test]
fn swapped_ca_key_is_a_mismatch() {
    if !prereq::corpus_present() {
        return;
    }
    let mut f = corpus_files();
    let etcd_key = file(&f, "/etc/kubernetes/pki/etcd/ca.key").to_vec();
    replace_file(&mut f, "/etc/kubernetes/pki/ca.key", etcd_key);
    let e = fails(&f, &init_line());
    assert!(e.place.ends_with("/etc/kubernetes/pki/ca.key"), "{e}");
    assert!(
        e.message.contains("does not match") && e.message.contains("/etc/kubernetes/pki/ca.crt"),
        "{e}"
    );
}

#[test]
fn sa_pair_mismatch() {
    if !prereq::corpus_present() {
        return;
    }
    let mut f = corpus_files();
    let other = file(&f, "/etc/kubernetes/pki/front-proxy-ca.key").to_vec();
    replace_file(&mut f, "/etc/kubernetes/pki/sa.key", other);
    let e = fails(&f, &init_line());
    assert!(
        e.place.ends_with("/etc/kubernetes/pki/sa.key") && e.message.contains("sa.pub"),
        "{e}"
    );
}

#[test]
fn ca_checks_with_generated_certs() {
    if !prereq::corpus_present() {
        return;
    }
    // Valid EC CA with serial 0 and PKCS#8 key: accepted.
    let ok = make_ca(-300, 86400, true);
    let mut f = corpus_files();
    replace_file(
        &mut f,
        "/etc/kubernetes/pki/front-proxy-ca.crt",
        ok.cert_pem.clone().into_bytes(),
    );
    replace_file(
        &mut f,
        "/etc/kubernetes/pki/front-proxy-ca.key",
        ok.key_pem.clone().into_bytes(),
    );
    preflight(&plan_of(&f, &init_line()), root().path()).unwrap();

    let cases: [(Ca, &str); 3] = [
        (make_ca(-86400 * 10, -86400, true), "expired"),
        (
            make_ca(3 * 3600, 86400 * 10, true),
            "clock is probably behind",
        ),
        (make_ca(-300, 86400, false), "not a CA"),
    ];
    for (ca, want) in cases {
        let mut f = corpus_files();
        replace_file(
            &mut f,
            "/etc/kubernetes/pki/etcd/ca.crt",
            ca.cert_pem.into_bytes(),
        );
        replace_file(
            &mut f,
            "/etc/kubernetes/pki/etcd/ca.key",
            ca.key_pem.into_bytes(),
        );
        let e = fails(&f, &init_line());
        assert_eq!(
            e.place, "step kubeadm: /etc/kubernetes/pki/etcd/ca.crt",
            "{e}"
        );
        assert!(e.message.contains(want), "{want}: {e}");
    }
}

#[test]
fn ca_on_disk_is_checked_too() {
    if !prereq::corpus_present() {
        return;
    }
    // The plan writes no PKI; the disk under root holds a mismatched pair.
    let r = root();
    let a = make_ca(-300, 86400, true);
    let b = make_ca(-300, 86400, true);
    let pki = r.path().join("etc/kubernetes/pki");
    std::fs::create_dir_all(&pki).unwrap();
    std::fs::write(pki.join("ca.crt"), &a.cert_pem).unwrap();
    std::fs::write(pki.join("ca.key"), &b.key_pem).unwrap();
    let f: Vec<(String, Vec<u8>)> = corpus_files()
        .into_iter()
        .filter(|(p, _)| !p.starts_with("/etc/kubernetes/pki"))
        .collect();
    let e = preflight(&plan_of(&f, &init_line()), r.path()).unwrap_err();
    assert!(e.place.ends_with("/etc/kubernetes/pki/ca.key"), "{e}");
}

#[test]
fn join_ca_hash_pinning() {
    let ca = make_ca(-300, 86400, true);
    let good = openssl_hash(&ca.cert_pem);
    let other = openssl_hash(&make_ca(-300, 86400, true).cert_pem);
    let files = |hashes: &[String]| {
        vec![
            (
                "/etc/kubernetes/pki/ca.crt".to_string(),
                ca.cert_pem.clone().into_bytes(),
            ),
            (
                "/etc/kubernetes/pki/ca.key".to_string(),
                ca.key_pem.clone().into_bytes(),
            ),
            (
                JOIN_PATH.to_string(),
                worker_join_config("10.0.0.10:6443", hashes).into_bytes(),
            ),
        ]
    };
    // The right hash (computed by openssl), also in upper case, passes.
    preflight(
        &plan_of(&files(std::slice::from_ref(&good)), JOIN_LINE),
        root().path(),
    )
    .unwrap();
    preflight(
        &plan_of(
            &files(&[
                other.clone(),
                good.to_uppercase().replace("SHA256:", "sha256:"),
            ]),
            JOIN_LINE,
        ),
        root().path(),
    )
    .unwrap();
    // A wrong one fails in the plan, naming the field.
    let e = fails(&files(&[other]), JOIN_LINE);
    assert!(
        e.place
            .ends_with("document 1 (JoinConfiguration): discovery.bootstrapToken.caCertHashes"),
        "{e}"
    );
    assert!(
        e.message.contains(&good),
        "message gives the CA's real hash: {e}"
    );
}

#[test]
fn join_without_discovery_and_bad_configs() {
    if !prereq::corpus_present() {
        return;
    }
    let mut cfg = worker_join_config("10.0.0.10:6443", &[]);
    cfg = cfg.replace("discovery:\n  bootstrapToken:\n    apiServerEndpoint: 10.0.0.10:6443\n    unsafeSkipCAVerification: true\n", "");
    cfg = cfg.replace(&format!("    token: {TOKEN}\n"), "");
    let e = fails(&[(JOIN_PATH.into(), cfg.into_bytes())], JOIN_LINE);
    assert!(e.message.contains("discovery"), "{e}");

    let unknown = worker_join_config("10.0.0.10:6443", &[])
        .replace("  name: node-1\n", "  name: node-1\n  nmae: typo\n");
    let e = fails(&[(JOIN_PATH.into(), unknown.into_bytes())], JOIN_LINE);
    assert_eq!(
        e.place,
        format!("step kubeadm: {JOIN_PATH}: document 1 (JoinConfiguration): nodeRegistration.nmae")
    );

    let wrong_version = worker_join_config("10.0.0.10:6443", &[]).replace("v1beta4", "v1beta5");
    let e = fails(&[(JOIN_PATH.into(), wrong_version.into_bytes())], JOIN_LINE);
    assert!(
        e.place.ends_with("apiVersion") && e.message.contains("v1beta5"),
        "{e}"
    );

    // init config given to a join.
    let init_cfg = file(&corpus_files(), "/run/kubeadm/kubeadm.yaml").to_vec();
    let e = fails(&[(JOIN_PATH.into(), init_cfg)], JOIN_LINE);
    assert!(e.message.contains("JoinConfiguration"), "{e}");

    // Config file missing altogether.
    let e = fails(&[], JOIN_LINE);
    assert!(
        e.place.ends_with(JOIN_PATH) && e.message.contains("neither written"),
        "{e}"
    );
}

/// Each mode needs its own documents and refuses the other mode's, naming the document.
#[test]
fn init_and_join_each_refuse_the_other_modes_config() {
    if !prereq::corpus_present() {
        return;
    }
    const INIT_PATH: &str = "/run/kubeadm/kubeadm.yaml";
    let init_cfg = String::from_utf8(file(&corpus_files(), INIT_PATH).to_vec()).unwrap();
    let join_cfg = worker_join_config("10.0.0.10:6443", &[]);
    // The corpus config's ClusterConfiguration (1) and InitConfiguration (2), then the join (3).
    let both = format!("{init_cfg}\n{join_cfg}");
    let e = fails(
        &[(INIT_PATH.into(), join_cfg.clone().into_bytes())],
        &init_line(),
    );
    assert_eq!(
        (e.place.as_str(), e.message.as_str()),
        (
            "step kubeadm: /run/kubeadm/kubeadm.yaml",
            "`kubeadm init` needs an InitConfiguration or ClusterConfiguration document"
        )
    );
    let e = fails(
        &[(INIT_PATH.into(), both.clone().into_bytes())],
        &init_line(),
    );
    assert_eq!(
        (e.place, e.message),
        (
            format!("step kubeadm: {INIT_PATH}: document 3 (JoinConfiguration)"),
            "a JoinConfiguration in the config of `kubeadm init`".to_string()
        )
    );
    let e = fails(&[(JOIN_PATH.into(), init_cfg.into_bytes())], JOIN_LINE);
    assert_eq!(
        (e.place, e.message),
        (
            format!("step kubeadm: {JOIN_PATH}"),
            "`kubeadm join` needs a JoinConfiguration document (with discovery)".to_string()
        )
    );
    let e = fails(&[(JOIN_PATH.into(), both.into_bytes())], JOIN_LINE);
    assert_eq!(
        (e.place, e.message),
        (
            format!("step kubeadm: {JOIN_PATH}: document 2 (InitConfiguration)"),
            "an InitConfiguration in the config of `kubeadm join`".to_string()
        )
    );
}

#[test]
fn serving_cert_must_cover_the_endpoint() {
    if !prereq::corpus_present() {
        return;
    }
    let mut f = corpus_files();
    // A generated CA, so the test can sign a serving certificate with it.
    let ca = make_ca(-300, 86400, true);
    replace_file(
        &mut f,
        "/etc/kubernetes/pki/ca.crt",
        ca.cert_pem.clone().into_bytes(),
    );
    replace_file(
        &mut f,
        "/etc/kubernetes/pki/ca.key",
        ca.key_pem.clone().into_bytes(),
    );
    let (good, _) = make_leaf(&ca, &["127.0.0.1", "kubernetes"]);
    let (bad, _) = make_leaf(&ca, &["10.9.9.9"]);
    let with = |leaf: String| {
        let mut g = f.clone();
        g.insert(
            0,
            (
                "/etc/kubernetes/pki/apiserver.crt".into(),
                leaf.into_bytes(),
            ),
        );
        g
    };
    preflight(&plan_of(&with(good.clone()), &init_line()), root().path()).unwrap();
    let e = fails(&with(bad), &init_line());
    assert!(
        e.place.ends_with("apiserver.crt") && e.message.contains("127.0.0.1"),
        "{e}"
    );
    // Its key, when the plan writes it too, is proved (signed with, verified by the cert).
    let (_, other_key) = make_leaf(&ca, &["kubernetes"]);
    let mut g = with(good);
    g.insert(
        0,
        (
            "/etc/kubernetes/pki/apiserver.key".into(),
            other_key.into_bytes(),
        ),
    );
    let e = fails(&g, &init_line());
    assert!(
        e.place.ends_with("apiserver.key") && e.message.contains("does not match"),
        "{e}"
    );
}

/// Timing figures for BENCHMARKS.md (`cargo test -p nodeagent --test kubeadm_preflight -- --ignored --nocapture bench`).
#[test]
#[ignore]
fn bench_preflight_redact_status() {
    if !prereq::corpus_present() {
        return;
    }
    use std::time::Instant;
    let plan = corpus_plan();
    let r = root();
    let n = 200;
    let t = Instant::now();
    for _ in 0..n {
        preflight(&plan, r.path()).unwrap();
    }
    println!(
        "preflight (corpus init: 3 CA pairs + sa + config): {:?} per plan",
        t.elapsed() / n
    );
    let text = std::fs::read_to_string(CORPUS_INIT).unwrap();
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(libnodeagent::base::redact::redact_text(&text));
    }
    let per = t.elapsed() / n;
    println!(
        "redact_text (corpus userdata, {} bytes): {per:?} per call, {:.1} MB/s",
        text.len(),
        text.len() as f64 / per.as_secs_f64() / 1e6
    );
    let mut rep = libnodeagent::report::Reporter::new(None, r.path(), "i-1");
    let t = Instant::now();
    for _ in 0..n {
        rep.phase(
            libnodeagent::report::Phase::Applying,
            Some("write_files[0]:/etc/x"),
        );
    }
    println!(
        "Reporter::phase (status.json atomic write + fsync + event): {:?} per call",
        t.elapsed() / n
    );
}

#[test]
fn file_discovery_needs_its_kubeconfig() {
    let cfg = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  file:\n    kubeConfigPath: /etc/kubernetes/discovery.conf\n";
    let e = fails(&[(JOIN_PATH.into(), cfg.as_bytes().to_vec())], JOIN_LINE);
    assert!(
        e.place.ends_with("discovery.file.kubeConfigPath")
            && e.message.contains("/etc/kubernetes/discovery.conf"),
        "{e}"
    );
    let kc = b"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://10.0.0.1:6443\n".to_vec();
    let files = vec![
        ("/etc/kubernetes/discovery.conf".to_string(), kc),
        (JOIN_PATH.into(), cfg.as_bytes().to_vec()),
    ];
    preflight(&plan_of(&files, JOIN_LINE), root().path()).unwrap();
}

/// A CA key whose private scalar is damaged but whose stored public key is intact (what
/// `openssl ec -check` calls invalid and `certs` an unusable private key) passed pre-flight,
/// which compared the stored public key; `run` wrote it and exited 0. Pre-flight proves the
/// key as `certs` does: the scalar must give the certificate's point.
#[test]
fn ca_key_with_a_damaged_private_scalar_is_refused() {
    if !prereq::corpus_present() {
        return;
    }
    let ca = make_ca(-300, 86400, true);
    let der = libnodeagent::pki::inspect::pem_blocks(ca.key_pem.as_bytes())
        .unwrap()
        .remove(0)
        .1;
    // PKCS#8 wrapping SEC1: `02 01 01 04 20` then the 32-byte scalar, the public key after.
    let at = der
        .windows(5)
        .position(|w| w == [0x02, 0x01, 0x01, 0x04, 0x20])
        .unwrap()
        + 5;
    let mut damaged = der.clone();
    damaged[at + 7] ^= 0x5a;
    let damaged_pem = minter::pki::pem_encode("PRIVATE KEY", &damaged);
    for (key, want) in [
        (damaged_pem, "unusable private key"),
        (make_ca(-300, 86400, true).key_pem, "does not match"),
    ] {
        let mut f = corpus_files();
        replace_file(
            &mut f,
            "/etc/kubernetes/pki/front-proxy-ca.crt",
            ca.cert_pem.clone().into_bytes(),
        );
        replace_file(
            &mut f,
            "/etc/kubernetes/pki/front-proxy-ca.key",
            key.into_bytes(),
        );
        let e = fails(&f, &init_line());
        assert_eq!(
            e.place, "step kubeadm: /etc/kubernetes/pki/front-proxy-ca.key",
            "{e}"
        );
        assert!(e.message.contains(want), "{want}: {e}");
    }
}

/// The real CABPK cluster CA key (RSA-2048, PKCS#1) with one private part damaged, its
/// modulus and exponent still the certificate's: refused as unusable, not proved by its
/// public half. dP and qInv are what a CRT signer uses (a signature made with them no longer
/// verified), d what Go's `rsa.Validate` (kubeadm's) checks; p also breaks p·q = n.
#[test]
fn rsa_ca_key_with_a_damaged_private_part_is_refused() {
    use pkcs1::der::Decode;
    if !prereq::corpus_present() {
        return;
    }
    let pem = file(&corpus_files(), "/etc/kubernetes/pki/ca.key").to_vec();
    let (label, der) = libnodeagent::pki::inspect::pem_blocks(&pem)
        .unwrap()
        .remove(0);
    assert_eq!(label, "RSA PRIVATE KEY");
    let key = pkcs1::RsaPrivateKey::from_der(&der).unwrap();
    for part in [
        key.private_exponent,
        key.prime1,
        key.exponent1,
        key.coefficient,
    ] {
        let bytes = part.as_bytes();
        let at = bytes.as_ptr() as usize - der.as_ptr() as usize + bytes.len() / 2;
        let mut damaged = der.clone();
        damaged[at] ^= 0x10;
        let mut f = corpus_files();
        let damaged_pem = minter::pki::pem_encode("RSA PRIVATE KEY", &damaged);
        replace_file(
            &mut f,
            "/etc/kubernetes/pki/ca.key",
            damaged_pem.into_bytes(),
        );
        let e = fails(&f, &init_line());
        assert_eq!(e.place, "step kubeadm: /etc/kubernetes/pki/ca.key", "{e}");
        assert!(e.message.contains("unusable private key"), "{e}");
    }
}
