//! What kubeadm does to the node's filesystem, under a root directory (`/` in a guest, a
//! test's temp dir on the host). Certificates and keys are real (ECDSA P-256, signed by the
//! right CA, the API server's with kubeadm's SANs); kubeconfig credentials are placeholders
//! that say so, and the cluster CA a worker join writes from discovery is not written.
//!
//! Sources (kubernetes/kubernetes, cmd/kubeadm/app/…):
//! - file names: `constants/constants.go` (CACertAndKeyBaseName "ca", APIServer…,
//!   FrontProxyCA…, EtcdCA… "etcd/ca", ServiceAccountKeyBaseName "sa", AdminKubeConfigFileName
//!   "admin.conf", SuperAdminKubeConfigFileName "super-admin.conf" (1.29+),
//!   KubeletKubeConfigFileName, KubeletBootstrapKubeConfigFileName, ControllerManager…,
//!   Scheduler…, KubeletConfigurationFileName "config.yaml", KubeletEnvFileName
//!   "kubeadm-flags.env", ManifestsSubDirName "manifests", KubeletRunDirectory "/var/lib/kubelet");
//! - init: `phases/certs/certlist.go` (`GetDefaultCertList`: the CAs and leaf certs),
//!   `phases/kubeconfig/kubeconfig.go` (`CreateInitKubeConfigFiles`),
//!   `phases/controlplane/manifests.go` (`CreateInitStaticPodManifestFiles`),
//!   `phases/etcd/local.go` (`CreateLocalEtcdStaticPodManifestFile`: data dir 0700),
//!   `phases/kubelet/config.go` + `flags.go` (`WriteConfigToDisk`, `WriteKubeletDynamicEnvFile`);
//! - join: `cmd/phases/join/controlplaneprepare.go` (certs from the shared CAs, kubeconfigs
//!   `CreateJoinControlPlaneKubeConfigFiles`: admin, controller-manager, scheduler; manifests),
//!   `cmd/phases/join/kubelet.go` (`runKubeletStartJoinPhase`: bootstrap-kubelet.conf, the CA
//!   at caCertPath, kubelet config and flags; after the TLS bootstrap kubelet.conf, and the
//!   bootstrap kubeconfig is removed), `cmd/phases/join/preflight.go` +
//!   `preflight/checks.go` (`RunJoinNodeChecks`, `RunInitNodeChecks`),
//!   `phases/certs/certs.go` (`SharedCertificateExists`: "failure loading certificate authority");
//! - reset: `cmd/phases/reset/cleanupnode.go` (`runCleanupNode`, `resetConfigDir`: contents of
//!   /etc/kubernetes/manifests, /var/lib/kubelet and the certificates dir, and the six
//!   kubeconfigs; /etc/cni/net.d, iptables and $HOME/.kube/config are left alone),
//!   `cmd/phases/reset/removeetcdmember.go` (`runRemoveETCDMemberPhase`, `getEtcdDataDir`:
//!   the etcd data dir's contents, default /var/lib/etcd).

use crate::config::Config;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub const KUBERNETES_DIR: &str = "/etc/kubernetes";
pub const MANIFESTS_DIR: &str = "/etc/kubernetes/manifests";
pub const KUBELET_DIR: &str = "/var/lib/kubelet";
/// Static pods of a control plane (manifests.go; etcd.yaml only with local etcd).
pub const CONTROL_PLANE_PODS: [&str; 3] = [
    "kube-apiserver.yaml",
    "kube-controller-manager.yaml",
    "kube-scheduler.yaml",
];
/// The kubeconfigs reset deletes (cleanupnode.go `resetConfigDir` filesToClean).
pub const RESET_KUBECONFIGS: [&str; 6] = [
    "admin.conf",
    "super-admin.conf",
    "kubelet.conf",
    "bootstrap-kubelet.conf",
    "controller-manager.conf",
    "scheduler.conf",
];
/// CAs and keys a control-plane join needs when no certificateKey downloads them
/// (certs.go `SharedCertificateExists`; etcd/ca only with local etcd).
pub const SHARED_CERTS: [&str; 6] = [
    "ca.crt",
    "ca.key",
    "sa.key",
    "sa.pub",
    "front-proxy-ca.crt",
    "front-proxy-ca.key",
];
pub const SHARED_ETCD_CERTS: [&str; 2] = ["etcd/ca.crt", "etcd/ca.key"];
/// Leaf certificates init and a control-plane join generate from the CAs (certlist.go).
pub const LEAF_CERTS: [&str; 3] = [
    "apiserver",
    "apiserver-kubelet-client",
    "front-proxy-client",
];
pub const ETCD_LEAF_CERTS: [&str; 4] = [
    "etcd/server",
    "etcd/peer",
    "etcd/healthcheck-client",
    "apiserver-etcd-client",
];

pub struct Node {
    pub root: PathBuf,
}

impl Node {
    /// Host path of an absolute node path.
    pub fn p(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    fn write(&self, abs: &str, mode: u32, text: &str) -> Result<(), String> {
        let path = self.p(abs);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{abs}: {e}"))?;
        }
        let _ = std::fs::remove_file(&path);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .map_err(|e| format!("{abs}: {e}"))?;
        std::io::Write::write_all(&mut f, text.as_bytes()).map_err(|e| format!("{abs}: {e}"))
    }

    fn exists(&self, abs: &str) -> bool {
        self.p(abs).exists()
    }

    /// Like kubeadm's CleanDir: remove everything in a directory, keep the directory.
    fn clean_dir(&self, abs: &str, removed: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(self.p(abs)) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let r = if e.file_type().is_ok_and(|t| t.is_dir()) {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            if r.is_ok() {
                removed.push(format!("{abs}/{}", e.file_name().to_string_lossy()));
            }
        }
    }

    fn dir_nonempty(&self, abs: &str) -> bool {
        std::fs::read_dir(self.p(abs)).is_ok_and(|mut d| d.next().is_some())
    }
}

use nodeagent::mint::pki::{Algorithm, CaPair, Key};

/// Real key material, as kubeadm makes it (ECDSA P-256 here, for speed): nodeagent checks
/// what it finds on disk (apiserver.crt against the CA and controlPlaneEndpoint), so the
/// files must be usable certificates, not markers.
fn new_key() -> Result<Key, String> {
    Key::generate(Algorithm::EcdsaP256).map_err(|e| e.to_string())
}

fn validity() -> time::Duration {
    time::Duration::days(365)
}

/// A self-signed CA (`certs/<ca>` phase), written as `<ca>.crt` and `<ca>.key`.
fn write_ca(node: &Node, crt: &str, key: &str) -> Result<(), String> {
    let k = new_key()?;
    let cert =
        nodeagent::mint::pki::ca_certificate(&k, time::OffsetDateTime::now_utc(), validity())
            .map_err(|e| e.to_string())?;
    node.write(crt, 0o644, &cert)?;
    node.write(key, 0o600, &k.private_pem)
}

fn read_ca(node: &Node, pki: &str, ca: &str) -> Result<CaPair, String> {
    let read = |f: String| {
        std::fs::read_to_string(node.p(&f))
            .map_err(|e| format!("failure loading {ca} certificate authority: {f}: {e}"))
    };
    Ok(CaPair {
        cert_pem: read(format!("{pki}/{ca}.crt"))?,
        key_pem: read(format!("{pki}/{ca}.key"))?,
    })
}

/// A leaf certificate signed by `ca`: the API server's serving certificate with kubeadm's
/// SANs (`certs/apiserver`), the others as client certificates of that CA.
fn write_leaf(node: &Node, cfg: &Config, pki: &str, leaf: &str) -> Result<(), String> {
    let ca = match leaf {
        "front-proxy-client" => "front-proxy-ca",
        l if l.starts_with("etcd/") || l == "apiserver-etcd-client" => "etcd/ca",
        _ => "ca",
    };
    let pair = read_ca(node, pki, ca)?;
    let (cert, key) = if leaf == "apiserver" {
        serving_cert(&pair, cfg)?
    } else {
        nodeagent::mint::pki::client_certificate(
            &pair,
            leaf,
            None,
            Algorithm::EcdsaP256,
            validity(),
        )
        .map_err(|e| format!("certs/{leaf}: {e}"))?
    };
    node.write(&format!("{pki}/{leaf}.crt"), 0o644, &cert)?;
    node.write(&format!("{pki}/{leaf}.key"), 0o600, &key)
}

/// kubeadm's apiserver SANs (certlist.go `GetAPIServerAltNames`): the node name, the
/// kubernetes service names, the first service IP, the advertise address, the
/// controlPlaneEndpoint host and `certSANs`.
fn serving_cert(ca: &CaPair, cfg: &Config) -> Result<(String, String), String> {
    let mut sans: Vec<String> = [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "10.96.0.1",
        "127.0.0.1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(n) = cfg.node_registration().and_then(|n| n.name.clone()) {
        sans.push(n);
    }
    if let Some(c) = &cfg.cluster {
        if let Some(ep) = &c.control_plane_endpoint {
            let host = match ep.rsplit_once(':') {
                Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
                _ => ep.as_str(),
            };
            sans.push(
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string(),
            );
        }
        sans.extend(c.api_server.cert_sans.clone().unwrap_or_default());
    }
    let ca_key = Key::from_pem(&ca.key_pem, "ca.key").map_err(|e| e.to_string())?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key.pair())
        .map_err(|e| format!("failure loading ca certificate authority: {e}"))?;
    let key = new_key()?;
    let mut p = rcgen::CertificateParams::new(sans).map_err(|e| format!("certs/apiserver: {e}"))?;
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "kube-apiserver");
    p.not_after = time::OffsetDateTime::now_utc() + validity();
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = p
        .signed_by(key.pair(), &issuer)
        .map_err(|e| format!("certs/apiserver: {e}"))?;
    Ok((cert.pem(), key.private_pem))
}

fn kubeconfig(server: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: c3RhbmQtaW4=\n    server: https://{server}\n  name: kubernetes\ncontexts:\n- context:\n    cluster: kubernetes\n    user: {user}\n  name: {user}@kubernetes\ncurrent-context: {user}@kubernetes\nusers:\n- name: {user}\n  user:\n    client-certificate-data: c3RhbmQtaW4=\n    client-key-data: c3RhbmQtaW4=\n# written by kubeadm-standin (placeholder credentials)\n"
    )
}

fn static_pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: kube-system\n  labels:\n    component: {name}\n    tier: control-plane\nspec:\n  hostNetwork: true\n  containers:\n  - name: {name}\n    image: registry.k8s.io/{name}:stand-in\n# written by kubeadm-standin\n"
    )
}

/// Name of a preflight check as kubeadm forms it: `FileAvailable--etc-kubernetes-kubelet.conf`.
fn check_name(kind: &str, abs: &str) -> String {
    format!("{kind}-{}", abs.replace('/', "-"))
}

/// Preflight errors not in `ignorePreflightErrors` (case-insensitive, `all` ignores all).
pub struct Preflight<'a> {
    ignored: Vec<String>,
    pub errors: Vec<String>,
    node: &'a Node,
}

impl<'a> Preflight<'a> {
    pub fn new(node: &'a Node, cfg: &Config) -> Self {
        let ignored = cfg
            .node_registration()
            .map(|n| {
                n.ignore_preflight_errors
                    .iter()
                    .map(|s| s.to_lowercase())
                    .collect()
            })
            .unwrap_or_default();
        Preflight {
            ignored,
            errors: Vec::new(),
            node,
        }
    }
    fn fail(&mut self, name: String, msg: String) {
        if !self
            .ignored
            .iter()
            .any(|i| i == "all" || *i == name.to_lowercase())
        {
            self.errors.push(format!("[ERROR {name}]: {msg}"));
        }
    }
    /// FileAvailableCheck: the file must not exist.
    pub fn file_available(&mut self, abs: &str) {
        if self.node.exists(abs) {
            self.fail(
                check_name("FileAvailable", abs),
                format!("{abs} already exists"),
            );
        }
    }
    /// DirAvailableCheck: the directory must be absent or empty.
    pub fn dir_available(&mut self, abs: &str) {
        if self.node.dir_nonempty(abs) {
            self.fail(
                check_name("DirAvailable", abs),
                format!("{abs} is not empty"),
            );
        }
    }
    pub fn result(self) -> Result<(), String> {
        if self.errors.is_empty() {
            return Ok(());
        }
        Err(format!(
            "error execution phase preflight: [preflight] Some fatal errors occurred: {}",
            self.errors.join(" ")
        ))
    }
}

/// Minor version of `kubernetesVersion` (`v1.29.3` → 29); a stand-in without one acts as 1.30.
fn minor(cfg: &Config) -> u32 {
    cfg.cluster
        .as_ref()
        .and_then(|c| c.kubernetes_version.as_deref())
        .and_then(|v| v.trim_start_matches('v').split('.').nth(1)?.parse().ok())
        .unwrap_or(30)
}

fn kubelet_files(node: &Node, cfg: &Config) -> Result<(), String> {
    // kubelet.go / config.go WriteConfigToDisk, flags.go WriteKubeletDynamicEnvFile.
    node.write(
        &format!("{KUBELET_DIR}/config.yaml"),
        0o644,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n# written by kubeadm-standin\n",
    )?;
    let name = cfg
        .node_registration()
        .and_then(|n| n.name.clone())
        .unwrap_or_default();
    node.write(
        &format!("{KUBELET_DIR}/kubeadm-flags.env"),
        0o644,
        &format!("KUBELET_KUBEADM_ARGS=\"--hostname-override={name}\"\n"),
    )
}

/// Control-plane files of init and of a control-plane join: missing leaf certificates from
/// the CAs, the control-plane kubeconfigs, the static pod manifests, the etcd data dir.
fn control_plane_files(
    node: &Node,
    cfg: &Config,
    endpoint: &str,
    init: bool,
) -> Result<Vec<String>, String> {
    let pki = cfg.cert_dir();
    let etcd = cfg.local_etcd_dir();
    let mut made = Vec::new();
    let leaves = LEAF_CERTS.iter().chain(if etcd.is_some() {
        &ETCD_LEAF_CERTS[..]
    } else {
        &[]
    });
    for leaf in leaves {
        let crt = format!("{pki}/{leaf}.crt");
        if !node.exists(&crt) {
            write_leaf(node, cfg, &pki, leaf)?;
            made.extend([crt, format!("{pki}/{leaf}.key")]);
        }
    }
    let mut confs = vec!["admin.conf", "controller-manager.conf", "scheduler.conf"];
    if init {
        confs.push("kubelet.conf");
        if minor(cfg) >= 29 {
            confs.push("super-admin.conf");
        }
    }
    for c in confs {
        let abs = format!("{KUBERNETES_DIR}/{c}");
        node.write(
            &abs,
            0o600,
            &kubeconfig(endpoint, c.trim_end_matches(".conf")),
        )?;
        made.push(abs);
    }
    let mut pods: Vec<&str> = CONTROL_PLANE_PODS.to_vec();
    if let Some(dir) = &etcd {
        pods.push("etcd.yaml");
        std::fs::create_dir_all(node.p(dir)).map_err(|e| format!("{dir}: {e}"))?;
        std::fs::set_permissions(node.p(dir), std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("{dir}: {e}"))?;
    }
    for pod in pods {
        let abs = format!("{MANIFESTS_DIR}/{pod}");
        node.write(&abs, 0o600, &static_pod(pod.trim_end_matches(".yaml")))?;
        made.push(abs);
    }
    Ok(made)
}

/// `kubeadm init` up to and including its wait for the control plane; `fail` stops there
/// (as a kubelet that never starts the static pods would), leaving what was written.
pub fn init(node: &Node, cfg: &Config, endpoint: &str, fail: bool) -> Result<Vec<String>, String> {
    // preflight/checks.go RunInitNodeChecks.
    let mut pf = Preflight::new(node, cfg);
    for pod in CONTROL_PLANE_PODS.iter().chain(["etcd.yaml"].iter()) {
        pf.file_available(&format!("{MANIFESTS_DIR}/{pod}"));
    }
    if let Some(dir) = cfg.local_etcd_dir() {
        pf.dir_available(&dir);
    }
    pf.result()?;
    // certs phase: CAs and the service-account key pair are generated when absent; a
    // certificate without its key is an error, as kubeadm's "failure loading … certificate authority".
    let pki = cfg.cert_dir();
    let mut made = Vec::new();
    let mut cas = vec!["ca", "front-proxy-ca"];
    if cfg.local_etcd_dir().is_some() {
        cas.push("etcd/ca");
    }
    for ca in cas {
        let (crt, key) = (format!("{pki}/{ca}.crt"), format!("{pki}/{ca}.key"));
        match (node.exists(&crt), node.exists(&key)) {
            (true, false) => {
                return Err(format!(
                    "error execution phase certs/{ca}: failure loading {ca} certificate authority: couldn't load the private key file {key}"
                ));
            }
            (false, _) => {
                write_ca(node, &crt, &key)?;
                made.extend([crt, key]);
            }
            (true, true) => {}
        }
    }
    if !node.exists(&format!("{pki}/sa.key")) {
        let k = new_key()?;
        node.write(&format!("{pki}/sa.key"), 0o600, &k.private_pem)?;
        node.write(&format!("{pki}/sa.pub"), 0o644, &k.public_pem())?;
        made.extend([format!("{pki}/sa.key"), format!("{pki}/sa.pub")]);
    }
    made.extend(control_plane_files(node, cfg, endpoint, true)?);
    kubelet_files(node, cfg)?;
    if fail {
        return Err("error execution phase wait-control-plane: couldn't initialize a Kubernetes cluster (failure requested by KUBEADM_STANDIN_FAIL_INIT)".into());
    }
    Ok(made)
}

/// `kubeadm join` preflight: RunJoinNodeChecks.
pub fn join_preflight(node: &Node, cfg: &Config) -> Result<(), String> {
    let join = cfg.join.as_ref().ok_or("join needs a JoinConfiguration")?;
    let mut pf = Preflight::new(node, cfg);
    pf.dir_available(MANIFESTS_DIR);
    pf.file_available(&format!("{KUBERNETES_DIR}/kubelet.conf"));
    pf.file_available(&format!("{KUBERNETES_DIR}/bootstrap-kubelet.conf"));
    let ca = join
        .ca_cert_path
        .clone()
        .unwrap_or_else(|| "/etc/kubernetes/pki/ca.crt".into());
    if join.control_plane.is_none() {
        pf.file_available(&ca);
    }
    pf.result()
}

/// A control-plane join without certificateKey must find the shared CAs on disk
/// (join/preflight.go `checkIfReadyForAdditionalControlPlane`, after discovery).
pub fn control_plane_ready(node: &Node, cfg: &Config) -> Result<(), String> {
    let join = cfg.join.as_ref().ok_or("join needs a JoinConfiguration")?;
    if let Some(cp) = &join.control_plane
        && cp.certificate_key.as_deref().unwrap_or_default().is_empty()
    {
        let pki = cfg.cert_dir();
        let mut need: Vec<&str> = SHARED_CERTS.to_vec();
        if cfg.local_etcd_dir().is_some() {
            need.extend(SHARED_ETCD_CERTS);
        }
        if let Some(missing) = need
            .iter()
            .map(|f| format!("{pki}/{f}"))
            .find(|p| !node.exists(p))
        {
            return Err(format!(
                "error execution phase preflight: One or more conditions for hosting a new control plane instance is not satisfied. failure loading certificate authority: {missing}: no such file or directory"
            ));
        }
    }
    Ok(())
}

/// `kubeadm join` after discovery: control-plane-prepare (control planes), then kubelet-start,
/// which fails while waiting for the TLS bootstrap when `fail` is set.
pub fn join(node: &Node, cfg: &Config, endpoint: &str, fail: bool) -> Result<Vec<String>, String> {
    let join = cfg.join.as_ref().ok_or("join needs a JoinConfiguration")?;
    let mut made = Vec::new();
    if let Some(cp) = &join.control_plane {
        if !cp.certificate_key.as_deref().unwrap_or_default().is_empty() {
            // download-certs (controlplaneprepare.go): the shared CAs from the kubeadm-certs Secret.
            let pki = cfg.cert_dir();
            let mut cas = vec!["ca", "front-proxy-ca"];
            if cfg.local_etcd_dir().is_some() {
                cas.push("etcd/ca");
            }
            for ca in cas {
                let (crt, key) = (format!("{pki}/{ca}.crt"), format!("{pki}/{ca}.key"));
                if !node.exists(&crt) {
                    write_ca(node, &crt, &key)?;
                    made.extend([crt, key]);
                }
            }
            if !node.exists(&format!("{pki}/sa.key")) {
                let k = new_key()?;
                node.write(&format!("{pki}/sa.key"), 0o600, &k.private_pem)?;
                node.write(&format!("{pki}/sa.pub"), 0o644, &k.public_pem())?;
                made.extend([format!("{pki}/sa.key"), format!("{pki}/sa.pub")]);
            }
        }
        made.extend(control_plane_files(node, cfg, endpoint, false)?);
    }
    // kubelet-start also writes the cluster CA from discovery to caCertPath; the stand-in
    // has no cluster and does not fake that CA (a made-up one would fail nodeagent's
    // caCertHashes check on the next boot, where the real one passes), so it writes none.
    let boot = format!("{KUBERNETES_DIR}/bootstrap-kubelet.conf");
    node.write(
        &boot,
        0o600,
        &kubeconfig(endpoint, "tls-bootstrap-token-user"),
    )?;
    kubelet_files(node, cfg)?;
    if fail {
        return Err(String::new()); // the caller words it (fail count)
    }
    // The kubelet's TLS bootstrap: kubelet.conf appears, the bootstrap kubeconfig goes.
    let kc = format!("{KUBERNETES_DIR}/kubelet.conf");
    node.write(&kc, 0o600, &kubeconfig(endpoint, "system:node"))?;
    let _ = std::fs::remove_file(node.p(&boot));
    made.push(kc);
    Ok(made)
}

/// `kubeadm reset -f`: what cleanupnode.go and removeetcdmember.go delete. `cfg_cert_dir` is
/// the certificates dir (reset takes it from the cluster's config; the default otherwise).
pub fn reset(node: &Node, cert_dir: &str) -> Vec<String> {
    let mut removed = Vec::new();
    // remove-etcd-member: no etcd.yaml → the default data dir; its contents go.
    node.clean_dir("/var/lib/etcd", &mut removed);
    // cleanup-node: contents of manifests, the kubelet run dir and the certificates dir.
    for dir in [MANIFESTS_DIR, KUBELET_DIR, cert_dir] {
        node.clean_dir(dir, &mut removed);
    }
    for f in RESET_KUBECONFIGS {
        let abs = format!("{KUBERNETES_DIR}/{f}");
        if std::fs::remove_file(node.p(&abs)).is_ok() {
            removed.push(abs);
        }
    }
    removed
}

/// Marks a test guest's image: there, and only there, the stand-in is the node's kubeadm and
/// acts on `/` without being told (tests/qemu writes it into both tiers' images).
pub const GUEST_MARKER: &str = "/etc/kubeadm-standin.guest";

/// The node's root: `KUBEADM_STANDIN_ROOT`, else `/` inside a test guest. Anywhere else an
/// unset root is refused: the stand-in must never write a development machine's
/// /etc/kubernetes or empty its /var/lib/kubelet.
pub fn root_from_env() -> Result<PathBuf, String> {
    match std::env::var_os("KUBEADM_STANDIN_ROOT") {
        Some(r) => Ok(PathBuf::from(r)),
        None if Path::new(GUEST_MARKER).exists() => Ok(Path::new("/").to_path_buf()),
        None => Err(format!(
            "KUBEADM_STANDIN_ROOT is not set and this is no test guest ({GUEST_MARKER} is absent): \
             refusing to act on this machine's /"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Config {
        crate::config::parse(text, "t").unwrap()
    }
    const CP_JOIN: &str = "apiVersion: kubeadm.k8s.io/v1beta3\nkind: JoinConfiguration\ncontrolPlane:\n  localAPIEndpoint:\n    advertiseAddress: 10.0.0.2\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: 10.0.0.1:6443\n    token: abcdef.0123456789abcdef\n    unsafeSkipCAVerification: true\n";

    #[test]
    fn control_plane_join_needs_the_shared_cas_and_reset_removes_them() {
        let d = tempfile::tempdir().unwrap();
        let node = Node {
            root: d.path().into(),
        };
        let c = cfg(CP_JOIN);
        join_preflight(&node, &c).unwrap();
        let e = control_plane_ready(&node, &c).unwrap_err();
        assert!(e.contains("failure loading certificate authority"), "{e}");
        for ca in ["ca", "front-proxy-ca", "etcd/ca"] {
            let pki = "/etc/kubernetes/pki";
            write_ca(
                &node,
                &format!("{pki}/{ca}.crt"),
                &format!("{pki}/{ca}.key"),
            )
            .unwrap();
        }
        let sa = new_key().unwrap();
        node.write("/etc/kubernetes/pki/sa.key", 0o600, &sa.private_pem)
            .unwrap();
        node.write("/etc/kubernetes/pki/sa.pub", 0o644, &sa.public_pem())
            .unwrap();
        control_plane_ready(&node, &c).unwrap();
        // A failed attempt leaves bootstrap-kubelet.conf: the next preflight fails.
        join(&node, &c, "10.0.0.1:6443", true).unwrap_err();
        assert!(
            join_preflight(&node, &c)
                .unwrap_err()
                .contains("bootstrap-kubelet.conf already exists")
        );
        let removed = reset(&node, "/etc/kubernetes/pki");
        assert!(
            removed.contains(&"/etc/kubernetes/pki/ca.key".to_string()),
            "{removed:?}"
        );
        assert!(!node.exists("/etc/kubernetes/pki/ca.crt"));
        assert!(
            node.exists("/etc/kubernetes/pki"),
            "reset keeps the directory itself"
        );
        join_preflight(&node, &c).unwrap();
        assert!(
            control_plane_ready(&node, &c)
                .unwrap_err()
                .contains("certificate authority")
        );
    }

    #[test]
    fn init_writes_what_kubeadm_writes() {
        let d = tempfile::tempdir().unwrap();
        let node = Node {
            root: d.path().into(),
        };
        let c = cfg(
            "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\nkubernetesVersion: v1.29.1\n",
        );
        init(&node, &c, "10.0.0.1:6443", false).unwrap();
        for f in [
            "/etc/kubernetes/super-admin.conf",
            "/etc/kubernetes/admin.conf",
            "/etc/kubernetes/kubelet.conf",
            "/etc/kubernetes/manifests/etcd.yaml",
            "/etc/kubernetes/pki/etcd/peer.key",
            "/var/lib/kubelet/kubeadm-flags.env",
        ] {
            assert!(node.exists(f), "{f}");
        }
        // Same node again: the manifests are there, so init's preflight fails.
        let e = init(&node, &c, "10.0.0.1:6443", false).unwrap_err();
        assert!(
            e.contains("FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml"),
            "{e}"
        );
    }
}
