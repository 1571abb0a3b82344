//! Shared helpers for the kube_* tests: hand-built plans from the CABPK corpus, test PKI
//! made with rcgen, and the kubeadm stand-in binary (tests/kubeadm-standin).
#![allow(dead_code)]

use libnodeagent::plan::{Action, Content, FileWrite, Frequency, Owner, Plan, RunStage, Step};
use std::path::{Path, PathBuf};

// Test crates that also include apply_common (which holds its own copy) load it twice.
#[allow(clippy::duplicate_mod)]
#[path = "../prereq/mod.rs"]
mod prereq;

/// CABPK's control-plane init userdata in the shared corpus beside the repository (tests
/// reading it first check `prereq::corpus_present()`).
pub const CORPUS_INIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/corpus/capi/cabpk/rendered/controlplane-init-v1beta3-k8s-1.26.6.cloud-config.yaml"
);

/// `(path, content)` of every write_files entry and the runcmd strings of a CABPK userdata
/// (jinja header dropped: the corpus file uses no variables).
pub fn corpus_parts(path: &str) -> (Vec<(String, Vec<u8>)>, Vec<String>) {
    let text = std::fs::read_to_string(path).unwrap();
    let doc: serde_norway::Value =
        serde_norway::from_str(text.split_once('\n').unwrap().1).unwrap();
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
        source: None,
    })
}

/// A plan like `plan::build` makes: write_files steps, then the recognised kubeadm step.
pub fn plan_of(files: &[(String, Vec<u8>)], kubeadm_line: &str) -> Plan {
    let mut steps: Vec<Step> = files
        .iter()
        .enumerate()
        .map(|(i, (p, c))| step(&format!("write_files[{i}]:{p}"), write(p, c)))
        .collect();
    let spec = libnodeagent::kubeadm::recognise(kubeadm_line).expect("kubeadm line recognised");
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
        // A clean environment: variables cargo sets for tests would make build scripts
        // re-run and the outer build start over next time.
        let mut cmd = std::process::Command::new(env!("CARGO"));
        cmd.args(["build", "--quiet", "-p", "kubeadm-standin"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env_clear();
        for k in [
            "PATH",
            "HOME",
            "CARGO_HOME",
            "RUSTUP_HOME",
            "RUSTUP_TOOLCHAIN",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
            "TMPDIR",
        ] {
            if let Some(v) = std::env::var_os(k) {
                cmd.env(k, v);
            }
        }
        let status = cmd.status().unwrap();
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

// ---- running execute() against the stand-in ------------------------------------------

/// A transport that remembers every value set (what the platform would see, in order).
#[derive(Default)]
pub struct MemTransport(pub std::sync::Mutex<Vec<(String, Vec<u8>)>>);

impl libnodeagent::source::transport::Transport for MemTransport {
    fn name(&self) -> &'static str {
        "mem"
    }
    fn get(&self, _key: &str) -> libnodeagent::base::error::Result<Option<Vec<u8>>> {
        Ok(None)
    }
    fn set(&self, key: &str, value: &[u8]) -> libnodeagent::base::error::Result<()> {
        self.0
            .lock()
            .unwrap()
            .push((key.to_string(), value.to_vec()));
        Ok(())
    }
}

impl MemTransport {
    /// Every published `nodeagent.status`, parsed.
    pub fn statuses(&self) -> Vec<serde_json::Value> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k == "nodeagent.status")
            .map(|(_, v)| serde_json::from_slice(v).unwrap())
            .collect()
    }
    pub fn all_text(&self) -> String {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}={}\n", String::from_utf8_lossy(v)))
            .collect()
    }
}

/// A test node: a root directory, the stand-in's log, and a Runner pointing at the stand-in.
pub struct Node {
    pub dir: tempfile::TempDir,
    pub log: PathBuf,
    pub runner: libnodeagent::kubeadm::run::Runner,
}

impl Node {
    pub fn new(env: &[(&str, &str)]) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("standin.jsonl");
        // The stand-in acts on the node's files under its root (never the host's /etc).
        let mut e: Vec<(String, String)> = vec![
            ("KUBEADM_STANDIN_LOG".into(), log.display().to_string()),
            (
                "KUBEADM_STANDIN_ROOT".into(),
                dir.path().display().to_string(),
            ),
        ];
        e.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        // The library tests drive the stand-in from outside the root; `nodeagent run --root
        // --exec` runs kubeadm chrooted (see `chrooted_env`).
        let runner = libnodeagent::kubeadm::run::Runner {
            program: standin(),
            env: e,
            chroot: false,
            dir: None,
        };
        Node { dir, log, runner }
    }
    /// For `nodeagent run --root R --exec`, which runs kubeadm chrooted into R as on that
    /// node: the stand-in installed in R as `/usr/bin/kubeadm` (with its libraries), and its
    /// environment with the root `/` and the log `/standin.jsonl` (`self.log` seen from
    /// inside). `None` (the caller skips, saying why) when chroot is not permitted.
    pub fn chrooted_env(&self) -> Option<Vec<(String, String)>> {
        if !prereq::exec_root(self.root(), &[]) {
            return None;
        }
        prereq::install(self.root(), "/usr/bin/kubeadm", &standin());
        let mut env = self.runner.env.clone();
        for (k, v) in &mut env {
            match k.as_str() {
                "KUBEADM_STANDIN_LOG" => *v = "/standin.jsonl".into(),
                "KUBEADM_STANDIN_ROOT" => *v = "/".into(),
                _ => {}
            }
        }
        Some(env)
    }
    pub fn root(&self) -> &Path {
        self.dir.path()
    }
    /// Write files as apply would have before the kubeadm step.
    pub fn put(&self, files: &[(String, Vec<u8>)]) {
        for (p, c) in files {
            let full = self.root().join(p.trim_start_matches('/'));
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, c).unwrap();
        }
    }
    pub fn calls(&self) -> Vec<serde_json::Value> {
        standin_calls(&self.log)
    }
    pub fn cmds(&self) -> Vec<String> {
        self.calls()
            .iter()
            .map(|c| format!("{}:{}", c["cmd"].as_str().unwrap_or("?"), c["exit"]))
            .collect()
    }
    pub fn sentinel(&self) -> PathBuf {
        self.root()
            .join("run/cluster-api/bootstrap-success.complete")
    }
    pub fn kubeadm_log(&self) -> String {
        std::fs::read_to_string(self.root().join("var/log/nodeagent/kubeadm.log"))
            .unwrap_or_default()
    }
}

/// Fast settings for tests.
pub fn fast_settings() -> libnodeagent::source::config::KubeadmSettings {
    libnodeagent::source::config::KubeadmSettings {
        endpoint_wait_secs: 20,
        timeout_secs: 20,
        join_attempts: 5,
        join_deadline_secs: 60,
        backoff_initial_secs: 0.05,
        backoff_max_secs: 0.3,
        ..Default::default()
    }
}

/// A loopback port with nothing listening (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Listen on `port` now (bound before this returns, so no wait is needed) and accept in the
/// background for the rest of the test.
pub fn listen_now(port: u16) {
    let l = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    std::thread::spawn(move || {
        for c in l.incoming() {
            drop(c);
        }
    });
}

/// Start accepting on `port` after `delay`, in the background, for the rest of the test.
pub fn listen_later(port: u16, delay: std::time::Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        let l = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        for c in l.incoming() {
            drop(c);
        }
    });
}

// ---- end to end through `nodeagent run` ----------------------------------------------

/// A CABPK-shaped userdata: the given files (contents as literal blocks) and runcmd line.
pub fn userdata(files: &[(String, Vec<u8>)], kubeadm_line: &str) -> String {
    let mut s = String::from("## template: jinja\n#cloud-config\n\nwrite_files:\n");
    for (p, c) in files {
        s.push_str(&format!(
            "-   path: {p}\n    owner: root:root\n    permissions: '0640'\n    content: |\n"
        ));
        for l in String::from_utf8_lossy(c).split('\n') {
            s.push_str(&format!("      {l}\n"));
        }
    }
    s.push_str(&format!("runcmd:\n  - {kubeadm_line}\n"));
    s
}

pub const METADATA: &str = "instance-id: i-e2e\nlocal-hostname: node-1\n";

/// Image config with fast kubeadm timings (`extra` appended under `kubeadm:`).
pub fn image_config(extra: &str) -> String {
    format!(
        "kubeadm:\n  endpoint_wait_secs: 20\n  timeout_secs: 20\n  join_attempts: 5\n  join_deadline_secs: 60\n  backoff_initial_secs: 0.05\n  backoff_max_secs: 0.3\n{extra}"
    )
}

/// `(data dir, root)` of a node whose bootstrap data is `userdata` + METADATA.
pub struct E2e {
    pub tmp: tempfile::TempDir,
    pub node: Node,
}

impl E2e {
    pub fn new(userdata: &str, config: &str, env: &[(&str, &str)]) -> E2e {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("guestinfo.userdata"), userdata).unwrap();
        std::fs::write(tmp.path().join("guestinfo.metadata"), METADATA).unwrap();
        let node = Node::new(env);
        let cfg = node.root().join("etc/nodeagent/config.yaml");
        std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
        std::fs::write(cfg, config).unwrap();
        E2e { tmp, node }
    }
    pub fn data(&self) -> &Path {
        self.tmp.path()
    }
    /// `nodeagent run --root R --exec` with the stand-in as R's kubeadm (run chrooted into R):
    /// (exit code, stderr); `None` when chroot is not permitted (the caller skips).
    pub fn run(&self) -> Option<(i32, String)> {
        let env = self.node.chrooted_env()?;
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_nodeagent"))
            .args(["run", "--exec", "--transport"])
            .arg(format!("dir:{}", self.data().display()))
            .arg("--root")
            .arg(self.node.root())
            .envs(env)
            .output()
            .unwrap();
        Some((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }
    pub fn guestinfo_status(&self) -> serde_json::Value {
        serde_json::from_slice(
            &std::fs::read(self.data().join("guestinfo.nodeagent.status")).unwrap(),
        )
        .unwrap()
    }
    pub fn status(&self) -> libnodeagent::report::Status {
        libnodeagent::report::read_status(self.node.root()).unwrap()
    }
}
