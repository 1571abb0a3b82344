//! What kubeadm does to the node's filesystem, under a root directory (`/` in a guest, a
//! test's temp dir on the host). Certificates and keys are real (ECDSA P-256, signed by the
//! right CA, the serving ones with kubeadm's SANs); the kubeconfigs of init and a
//! control-plane join carry real client certificates signed by ca. A worker join's
//! bootstrap-kubelet.conf and kubelet.conf have placeholder credentials that say so (no
//! cluster CA key there), and the cluster CA a worker join writes from discovery is not written.
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

use minter::pki::{Algorithm, CaPair, Key};

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
    let cert = minter::pki::ca_certificate(&k, time::OffsetDateTime::now_utc(), validity())
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

/// A leaf certificate signed by `ca` (certlist.go `GetDefaultCertList`): the serving
/// certificates with kubeadm's SANs, the others as client certificates of that CA.
fn write_leaf(node: &Node, cfg: &Config, pki: &str, leaf: &str) -> Result<(), String> {
    let ca = match leaf {
        "front-proxy-client" => "front-proxy-ca",
        l if l.starts_with("etcd/") || l == "apiserver-etcd-client" => "etcd/ca",
        _ => "ca",
    };
    let pair = read_ca(node, pki, ca)?;
    let name = node_name(cfg).unwrap_or_default();
    let (cert, key) = match leaf {
        // certlist.go KubeadmCertAPIServer: CN kube-apiserver, server auth.
        "apiserver" => serving_cert(&pair, leaf, "kube-apiserver", apiserver_sans(cfg), false)?,
        // certlist.go KubeadmCertEtcdServer / KubeadmCertEtcdPeer: CN the node name,
        // server and client auth.
        "etcd/server" | "etcd/peer" => {
            serving_cert(&pair, leaf, &name, etcd_sans(cfg, leaf), true)?
        }
        _ => minter::pki::client_certificate(&pair, leaf, None, Algorithm::EcdsaP256, validity())
            .map_err(|e| format!("certs/{leaf}: {e}"))?,
    };
    node.write(&format!("{pki}/{leaf}.crt"), 0o644, &cert)?;
    node.write(&format!("{pki}/{leaf}.key"), 0o600, &key)
}

/// `nodeRegistration.name` (kubeadm defaults it to the host name; the stand-in leaves it out).
fn node_name(cfg: &Config) -> Option<String> {
    cfg.node_registration()
        .and_then(|n| n.name.clone())
        .filter(|n| !n.is_empty())
}

/// The node's `localAPIEndpoint` (init's, or a control-plane join's): advertise address
/// (kubeadm takes the host's default address when unset; the stand-in leaves it out) and
/// bind port (default 6443, constants.go `KubeAPIServerPort`).
fn local_api_endpoint(cfg: &Config) -> (Option<String>, i32) {
    let ep = cfg
        .init()
        .and_then(|i| i.local_api_endpoint.as_ref())
        .or_else(|| {
            cfg.join()
                .and_then(|j| j.control_plane.as_ref())
                .and_then(|c| c.local_api_endpoint.as_ref())
        });
    let addr = ep
        .and_then(|e| e.advertise_address.clone())
        .filter(|a| !a.is_empty());
    (addr, ep.and_then(|e| e.bind_port).unwrap_or(6443))
}

/// `host:port` with an IPv6 host bracketed (Go's net.JoinHostPort).
fn join_host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Host of `controlPlaneEndpoint` (`host`, `host:port`, `[v6]:port`), as
/// pkiutil/pki_helpers.go `GetAPIServerAltNames` splits it (net.SplitHostPort, else the whole).
fn endpoint_host(ep: &str) -> String {
    let host = match ep.rsplit_once(':') {
        Some((h, p))
            if p.bytes().all(|b| b.is_ascii_digit())
                && (!h.contains(':') || h.starts_with('[')) =>
        {
            h
        }
        _ => ep,
    };
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_string()
}

/// First address of the first service subnet (`10.96.0.0/12` → `10.96.0.1`):
/// kubeadm's `GetAPIServerVirtualIP` (util/endpoint… `kubeadmconstants.GetAPIServerVirtualIP`).
fn first_service_ip(subnets: &str) -> Option<String> {
    let (addr, _) = subnets.split(',').next()?.trim().split_once('/')?;
    let ip: std::net::IpAddr = addr.parse().ok()?;
    Some(match ip {
        std::net::IpAddr::V4(a) => {
            std::net::Ipv4Addr::from(u32::from(a).checked_add(1)?).to_string()
        }
        std::net::IpAddr::V6(a) => {
            std::net::Ipv6Addr::from(u128::from(a).checked_add(1)?).to_string()
        }
    })
}

fn push_unique(out: &mut Vec<String>, v: &str) {
    if !v.is_empty() && !out.iter().any(|o| o == v) {
        out.push(v.to_string());
    }
}

/// kubeadm's apiserver SANs (pkiutil/pki_helpers.go `GetAPIServerAltNames`): DNS the node
/// name, `kubernetes`, `kubernetes.default`, `kubernetes.default.svc`,
/// `kubernetes.default.svc.<networking.dnsDomain>`; IPs the first service-subnet address and
/// the advertise address; the controlPlaneEndpoint host; then `apiServer.certSANs`
/// (`appendSANsToAltNames`). No 127.0.0.1: kubeadm does not add it.
pub fn apiserver_sans(cfg: &Config) -> Vec<String> {
    let net = cfg.cluster().and_then(|c| c.networking.as_ref());
    let domain = net
        .and_then(|n| n.dns_domain.clone())
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "cluster.local".into()); // DefaultServiceDNSDomain
    let subnet = net
        .and_then(|n| n.service_subnet.clone())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "10.96.0.0/12".into()); // DefaultServicesSubnet
    let mut out = Vec::new();
    if let Some(n) = node_name(cfg) {
        push_unique(&mut out, &n);
    }
    for n in ["kubernetes", "kubernetes.default", "kubernetes.default.svc"] {
        push_unique(&mut out, n);
    }
    push_unique(&mut out, &format!("kubernetes.default.svc.{domain}"));
    if let Some(ip) = first_service_ip(&subnet) {
        push_unique(&mut out, &ip);
    }
    if let Some(a) = local_api_endpoint(cfg).0 {
        push_unique(&mut out, &a);
    }
    if let Some(c) = cfg.cluster() {
        if let Some(ep) = c
            .control_plane_endpoint
            .as_deref()
            .filter(|e| !e.is_empty())
        {
            push_unique(&mut out, &endpoint_host(ep));
        }
        for s in c
            .api_server
            .as_ref()
            .and_then(|a| a.cert_sans.as_ref())
            .into_iter()
            .flatten()
        {
            push_unique(&mut out, s);
        }
    }
    out
}

/// kubeadm's etcd server and peer SANs (pkiutil/pki_helpers.go `GetEtcdAltNames`,
/// `GetEtcdPeerAltNames` → `getAltNames`): DNS the node name and `localhost`, IPs the
/// advertise address, 127.0.0.1 and ::1; then `etcd.local.serverCertSANs` /
/// `peerCertSANs`.
pub fn etcd_sans(cfg: &Config, leaf: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(n) = node_name(cfg) {
        push_unique(&mut out, &n);
    }
    push_unique(&mut out, "localhost");
    if let Some(a) = local_api_endpoint(cfg).0 {
        push_unique(&mut out, &a);
    }
    push_unique(&mut out, "127.0.0.1");
    push_unique(&mut out, "::1");
    let local = cfg.local_etcd();
    let extra = if leaf == "etcd/server" {
        local.and_then(|l| l.server_cert_sans.as_ref())
    } else {
        local.and_then(|l| l.peer_cert_sans.as_ref())
    };
    for s in extra.into_iter().flatten() {
        push_unique(&mut out, s);
    }
    out
}

/// A serving certificate signed by `ca` with these SANs (rcgen makes IP SANs of addresses,
/// DNS SANs of the rest); `client_too`: also client auth, as etcd's certificates.
fn serving_cert(
    ca: &CaPair,
    leaf: &str,
    cn: &str,
    sans: Vec<String>,
    client_too: bool,
) -> Result<(String, String), String> {
    let ca_key = Key::from_pem(&ca.key_pem, "ca.key").map_err(|e| e.to_string())?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key.pair())
        .map_err(|e| format!("failure loading certificate authority for {leaf}: {e}"))?;
    let key = new_key()?;
    let mut p = rcgen::CertificateParams::new(sans).map_err(|e| format!("certs/{leaf}: {e}"))?;
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.not_after = time::OffsetDateTime::now_utc() + validity();
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    if client_too {
        p.extended_key_usages
            .push(rcgen::ExtendedKeyUsagePurpose::ClientAuth);
    }
    let cert = p
        .signed_by(key.pair(), &issuer)
        .map_err(|e| format!("certs/{leaf}: {e}"))?;
    Ok((cert.pem(), key.private_pem))
}

/// Client identity of each kubeconfig kubeadm writes (phases/kubeconfig/kubeconfig.go
/// `getKubeConfigSpecsBase`): CN and organization. admin.conf's group is
/// `kubeadm:cluster-admins` from 1.29 (`system:masters` before, which super-admin.conf keeps).
fn kubeconfig_identity(cfg: &Config, file: &str) -> (String, Option<&'static str>) {
    match file {
        "admin.conf" if minor(cfg) >= 29 => {
            ("kubernetes-admin".into(), Some("kubeadm:cluster-admins"))
        }
        "admin.conf" => ("kubernetes-admin".into(), Some("system:masters")),
        "super-admin.conf" => ("kubernetes-super-admin".into(), Some("system:masters")),
        "kubelet.conf" => (
            format!("system:node:{}", node_name(cfg).unwrap_or_default()),
            Some("system:nodes"),
        ),
        "controller-manager.conf" => ("system:kube-controller-manager".into(), None),
        _ => ("system:kube-scheduler".into(), None),
    }
}

/// A kubeconfig as kubeadm's kubeconfig phase writes it (kubeconfig.go
/// `createKubeConfigFileIfNotExists` / `buildKubeConfigFromSpec`, kubeconfigutil
/// `CreateWithCerts`): cluster `clusterName` (default `kubernetes`) at `server` with
/// certificate-authority-data = ca.crt, a client certificate and key signed by ca embedded,
/// context `<user>@<cluster>`.
fn kubeconfig(node: &Node, cfg: &Config, server: &str, file: &str) -> Result<String, String> {
    use base64::Engine;
    let pki = cfg.cert_dir();
    let ca = read_ca(node, &pki, "ca")?;
    let (user, group) = kubeconfig_identity(cfg, file);
    let (cert, key) =
        minter::pki::client_certificate(&ca, &user, group, Algorithm::EcdsaP256, validity())
            .map_err(|e| format!("kubeconfig/{file}: {e}"))?;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let cluster = cfg
        .cluster()
        .and_then(|c| c.cluster_name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "kubernetes".into());
    Ok(format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: https://{server}\n  name: {cluster}\ncontexts:\n- context:\n    cluster: {cluster}\n    user: {user}\n  name: {user}@{cluster}\ncurrent-context: {user}@{cluster}\npreferences: {{}}\nusers:\n- name: {user}\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(&ca.cert_pem),
        b64(&cert),
        b64(&key)
    ))
}

/// A kubeconfig a worker's join writes without the cluster CA's key (the stand-in has no
/// cluster to run the TLS bootstrap against): placeholder credentials that say so.
fn placeholder_kubeconfig(server: &str, user: &str) -> String {
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
                    .flatten()
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
    cfg.cluster()
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
    endpoint: Option<&str>,
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
    // Server URLs (kubeconfig.go `getKubeConfigSpecsBase`): admin, super-admin and kubelet
    // the control-plane endpoint (`GetControlPlaneEndpoint`: controlPlaneEndpoint, else the
    // local API endpoint); controller-manager and scheduler the local API endpoint (1.22+).
    let (addr, port) = local_api_endpoint(cfg);
    let local = join_host_port(addr.as_deref().unwrap_or("127.0.0.1"), port);
    for c in confs {
        let abs = format!("{KUBERNETES_DIR}/{c}");
        let server = match c {
            "controller-manager.conf" | "scheduler.conf" => local.as_str(),
            _ => endpoint.unwrap_or(&local),
        };
        node.write(&abs, 0o600, &kubeconfig(node, cfg, server, c)?)?;
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
pub fn init(node: &Node, cfg: &Config, fail: bool) -> Result<Vec<String>, String> {
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
    // init's endpoint: controlPlaneEndpoint when set (else the local API endpoint).
    let cpe = cfg
        .cluster()
        .and_then(|c| c.control_plane_endpoint.as_deref())
        .filter(|e| !e.is_empty());
    made.extend(control_plane_files(node, cfg, cpe, true)?);
    kubelet_files(node, cfg)?;
    if fail {
        return Err("error execution phase wait-control-plane: couldn't initialize a Kubernetes cluster (failure requested by KUBEADM_STANDIN_FAIL_INIT)".into());
    }
    Ok(made)
}

/// `kubeadm join` preflight: RunJoinNodeChecks.
pub fn join_preflight(node: &Node, cfg: &Config) -> Result<(), String> {
    let join = cfg.join().ok_or("join needs a JoinConfiguration")?;
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
    let join = cfg.join().ok_or("join needs a JoinConfiguration")?;
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
    let join = cfg.join().ok_or("join needs a JoinConfiguration")?;
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
        made.extend(control_plane_files(node, cfg, Some(endpoint), false)?);
    }
    // kubelet-start also writes the cluster CA from discovery to caCertPath; the stand-in
    // has no cluster and does not fake that CA (a made-up one would fail nodeagent's
    // caCertHashes check on the next boot, where the real one passes), so it writes none.
    let boot = format!("{KUBERNETES_DIR}/bootstrap-kubelet.conf");
    node.write(
        &boot,
        0o600,
        &placeholder_kubeconfig(endpoint, "tls-bootstrap-token-user"),
    )?;
    kubelet_files(node, cfg)?;
    if fail {
        return Err(String::new()); // the caller words it (fail count)
    }
    // The kubelet's TLS bootstrap: kubelet.conf appears, the bootstrap kubeconfig goes.
    let kc = format!("{KUBERNETES_DIR}/kubelet.conf");
    node.write(&kc, 0o600, &placeholder_kubeconfig(endpoint, "system:node"))?;
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
        init(&node, &c, false).unwrap();
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
        let e = init(&node, &c, false).unwrap_err();
        assert!(
            e.contains("FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml"),
            "{e}"
        );
    }

    #[test]
    fn serving_sans_follow_kubeadms_alt_names() {
        let c = cfg(
            "apiVersion: kubeadm.k8s.io/v1beta3\nkind: InitConfiguration\nnodeRegistration:\n  name: cp-1\nlocalAPIEndpoint:\n  advertiseAddress: 192.0.2.10\n  bindPort: 6444\n---\napiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\ncontrolPlaneEndpoint: api.example.test:6443\nnetworking:\n  dnsDomain: corp.test\n  serviceSubnet: 10.100.0.0/16,fd00::/108\napiServer:\n  certSANs: [extra.example.test, 198.51.100.7]\netcd:\n  local:\n    serverCertSANs: [etcd.example.test]\n    peerCertSANs: [198.51.100.8]\n",
        );
        assert_eq!(
            apiserver_sans(&c),
            [
                "cp-1",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.corp.test",
                "10.100.0.1",
                "192.0.2.10",
                "api.example.test",
                "extra.example.test",
                "198.51.100.7",
            ]
        );
        let base = ["cp-1", "localhost", "192.0.2.10", "127.0.0.1", "::1"];
        assert_eq!(
            etcd_sans(&c, "etcd/server"),
            [&base[..], &["etcd.example.test"]].concat()
        );
        assert_eq!(
            etcd_sans(&c, "etcd/peer"),
            [&base[..], &["198.51.100.8"]].concat()
        );
        assert_eq!(endpoint_host("[fd00::1]:6443"), "fd00::1");
        assert_eq!(endpoint_host("fd00::1"), "fd00::1");
        assert_eq!(endpoint_host("api.example.test"), "api.example.test");
        assert_eq!(local_api_endpoint(&c), (Some("192.0.2.10".into()), 6444));
        assert_eq!(join_host_port("fd00::1", 6443), "[fd00::1]:6443");
        // The kubeconfigs: controller-manager at the local endpoint, admin at controlPlaneEndpoint.
        let d = tempfile::tempdir().unwrap();
        let node = Node {
            root: d.path().into(),
        };
        init(&node, &c, false).unwrap();
        let read = |f: &str| std::fs::read_to_string(node.p(f)).unwrap();
        assert!(
            read("/etc/kubernetes/admin.conf").contains("server: https://api.example.test:6443")
        );
        assert!(
            read("/etc/kubernetes/controller-manager.conf")
                .contains("server: https://192.0.2.10:6444")
        );
        assert!(!read("/etc/kubernetes/kubelet.conf").contains("c3RhbmQtaW4="));
    }
}
