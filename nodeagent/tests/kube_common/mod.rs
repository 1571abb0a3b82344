//! Shared helpers for the kube_* tests: hand-built plans from the CABPK corpus, test PKI
//! made with rcgen, and the kubeadm stand-in binary (tests/kubeadm-standin).
#![allow(dead_code)]

use nodeagent::plan::{Action, Content, FileWrite, Frequency, Owner, Plan, RunStage, Step};
use std::path::{Path, PathBuf};

pub const CORPUS_INIT: &str = "/work/shared/corpus/capi/cabpk/rendered/controlplane-init-v1beta3-k8s-1.26.6.cloud-config.yaml";

/// `(path, content)` of every write_files entry and the runcmd strings of a CABPK userdata
/// (jinja header dropped: the corpus file uses no variables).
pub fn corpus_parts(path: &str) -> (Vec<(String, Vec<u8>)>, Vec<String>) {
    let text = std::fs::read_to_string(path).unwrap();
    let doc: serde_yaml::Value = serde_yaml::from_str(text.split_once('\n').unwrap().1).unwrap();
    let files = doc["write_files"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["content"].as_str().unwrap().as_bytes().to_vec(),
            )
        })
        .collect();
    let runcmd = doc["runcmd"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    (files, runcmd)
}

pub fn step(id: &str, action: Action) -> Step {
    Step {
        id: id.to_string(),
        stage: RunStage::Main,
        frequency: Frequency::PerInstance,
        action,
    }
}

pub fn write(path: &str, content: &[u8]) -> Action {
    Action::WriteFile(FileWrite {
        path: path.to_string(),
        content: Content(content.to_vec()),
        owner: Owner::default(),
        mode: Some(0o600),
        append: false,
        defer: false,
        secret: true,
    })
}

/// A plan like `plan::build` makes: write_files steps, then the recognised kubeadm step.
pub fn plan_of(files: &[(String, Vec<u8>)], kubeadm_line: &str) -> Plan {
    let mut steps: Vec<Step> = files
        .iter()
        .enumerate()
        .map(|(i, (p, c))| step(&format!("write_files[{i}]:{p}"), write(p, c)))
        .collect();
    let spec = nodeagent::kubeadm::recognise(kubeadm_line).expect("kubeadm line recognised");
    steps.push(step("kubeadm", Action::Kubeadm(spec)));
    Plan {
        version: 1,
        instance_id: "i-test".into(),
        steps,
        warnings: vec![],
    }
}

pub fn corpus_plan() -> Plan {
    let (files, runcmd) = corpus_parts(CORPUS_INIT);
    plan_of(&files, &runcmd[0])
}

pub fn replace_file(files: &mut [(String, Vec<u8>)], path: &str, content: Vec<u8>) {
    files
        .iter_mut()
        .find(|(p, _)| p == path)
        .unwrap_or_else(|| panic!("{path} not in files"))
        .1 = content;
}

pub fn file<'a>(files: &'a [(String, Vec<u8>)], path: &str) -> &'a [u8] {
    &files.iter().find(|(p, _)| p == path).unwrap().1
}

// ---- test PKI ----------------------------------------------------------------------

pub struct Ca {
    pub cert_pem: String,
    pub key_pem: String,
    pub issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

/// A CA like CAPI makes (serial 0, CA:TRUE, keyCertSign), valid from `from` to `to` (offsets from now, seconds).
pub fn make_ca(from: i64, to: i64, is_ca: bool) -> Ca {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::new(vec![]).unwrap();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "kubernetes");
    p.serial_number = Some(rcgen::SerialNumber::from_slice(&[0]));
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now + time::Duration::seconds(from);
    p.not_after = now + time::Duration::seconds(to);
    if is_ca {
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        p.key_usages = vec![
            rcgen::KeyUsagePurpose::DigitalSignature,
            rcgen::KeyUsagePurpose::KeyEncipherment,
            rcgen::KeyUsagePurpose::KeyCertSign,
        ];
    }
    let cert = p.self_signed(&key).unwrap();
    let key_pem = key.serialize_pem();
    Ca {
        cert_pem: cert.pem(),
        key_pem,
        issuer: rcgen::Issuer::new(p, key),
    }
}

/// A serving certificate for `sans`, signed by `ca`.
pub fn make_leaf(ca: &Ca, sans: &[&str]) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let p = rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .unwrap();
    let cert = p.signed_by(&key, &ca.issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// kubeadm's discovery hash of a PEM certificate, computed independently with openssl.
pub fn openssl_hash(cert_pem: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.pem");
    std::fs::write(&p, cert_pem).unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl x509 -pubkey -noout -in {} | openssl pkey -pubin -outform der | sha256sum",
            p.display()
        ))
        .output()
        .unwrap();
    assert!(out.status.success());
    format!(
        "sha256:{}",
        String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
    )
}

// ---- join configs ------------------------------------------------------------------

pub const TOKEN: &str = "abcdef.0123456789abcdef";
pub const CERT_KEY: &str = "3a8f1e2d4c5b6a7988f0e1d2c3b4a5968778695a4b3c2d1e0f1a2b3c4d5e6f70";

/// A worker JoinConfiguration (v1beta4, as CABPK writes it for k8s ≥ 1.31).
pub fn worker_join_config(endpoint: &str, hashes: &[String]) -> String {
    let mut s = format!(
        "---\napiVersion: kubeadm.k8s.io/v1beta4\ncaCertPath: /etc/kubernetes/pki/ca.crt\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: {endpoint}\n"
    );
    if hashes.is_empty() {
        s.push_str("    unsafeSkipCAVerification: true\n");
    } else {
        s.push_str("    caCertHashes:\n");
        for h in hashes {
            s.push_str(&format!("    - {h}\n"));
        }
    }
    s.push_str(&format!("    token: {TOKEN}\nkind: JoinConfiguration\nnodeRegistration:\n  imagePullPolicy: IfNotPresent\n  kubeletExtraArgs:\n  - name: cloud-provider\n    value: external\n  name: node-1\n  taints:\n  - effect: NoSchedule\n    key: node.cluster.x-k8s.io/uninitialized\n"));
    s
}

pub const JOIN_LINE: &str = "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete";
pub const JOIN_PATH: &str = "/run/kubeadm/kubeadm-join-config.yaml";

// ---- the kubeadm stand-in ----------------------------------------------------------

/// Path of the `kubeadm-standin` binary (workspace member tests/kubeadm-standin), built on demand.
pub fn standin() -> PathBuf {
    static ONCE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let exe = PathBuf::from(env!("CARGO_BIN_EXE_nodeagent"));
        let bin = exe.parent().unwrap().join("kubeadm-standin");
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "kubeadm-standin"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(status.success(), "building kubeadm-standin failed");
        assert!(bin.exists(), "{} missing", bin.display());
        bin
    })
    .clone()
}

/// A directory with `kubeadm` → the stand-in, to put first on PATH.
pub fn standin_path_dir(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let link = bin.join("kubeadm");
    if !link.exists() {
        std::os::unix::fs::symlink(standin(), &link).unwrap();
    }
    bin
}

/// The stand-in's JSON-lines record.
pub fn standin_calls(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
