//! `nodeagent certs`: a node's kubeadm PKI as `kubeadm certs check-expiration` lists it (the
//! same rows, names, expiry, residual time, CA and externally-managed columns, the CA table),
//! plus what kubeadm does not check: which CA signed each certificate, found by verifying
//! signatures (Cluster API names every CA `CN=kubernetes`, so names cannot tell), a proof
//! that each private key is the certificate's (a signature made with it verifies), the
//! chain, the SANs kubeadm's config asks for, the kubelet's client certificate, and
//! certificates close to expiry. Pure apart from reading files; nothing is written.
//! Reports never contain key material.

// Reads untrusted files: no byte-index slicing or indexing that could panic.
#![deny(clippy::string_slice, clippy::indexing_slicing)]

use super::inspect::{self, CertInfo};
use crate::error::{Error, Result, Stage};
use crate::kubeadm::config::KubeadmConfig;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// kubeadm's leaf certificates: row name, file under the PKI directory, signing CA.
const LEAVES: &[(&str, &str, &str)] = &[
    ("apiserver", "apiserver.crt", "ca"),
    (
        "apiserver-etcd-client",
        "apiserver-etcd-client.crt",
        "etcd-ca",
    ),
    (
        "apiserver-kubelet-client",
        "apiserver-kubelet-client.crt",
        "ca",
    ),
    (
        "etcd-healthcheck-client",
        "etcd/healthcheck-client.crt",
        "etcd-ca",
    ),
    ("etcd-peer", "etcd/peer.crt", "etcd-ca"),
    ("etcd-server", "etcd/server.crt", "etcd-ca"),
    (
        "front-proxy-client",
        "front-proxy-client.crt",
        "front-proxy-ca",
    ),
];
/// kubeconfigs whose embedded client certificate kubeadm lists (all signed by `ca`).
const KUBECONFIGS: &[&str] = &[
    "admin.conf",
    "controller-manager.conf",
    "scheduler.conf",
    "super-admin.conf",
];
/// kubeadm's CAs: name and file.
const CAS: &[(&str, &str)] = &[
    ("ca", "ca.crt"),
    ("etcd-ca", "etcd/ca.crt"),
    ("front-proxy-ca", "front-proxy-ca.crt"),
];
/// Rows kubeadm leaves out when etcd is external.
const ETCD_ROWS: &[&str] = &[
    "apiserver-etcd-client",
    "etcd-healthcheck-client",
    "etcd-peer",
    "etcd-server",
    "etcd-ca",
];
/// Where kubeadm's config is looked for (under the root), in order: CABPK's files, then
/// a copy kept in /etc/kubernetes.
pub const CONFIG_GLOBS: &[(&str, &str)] =
    &[("run/kubeadm", "kubeadm"), ("etc/kubernetes", "kubeadm")];
/// Largest file read (a kubeconfig with embedded certificates is a few KiB).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// What to look at.
pub struct Input<'a> {
    /// Node root: absolute paths inside kubeconfigs and the kubeadm config search are under it.
    pub root: &'a Path,
    pub pki_dir: &'a Path,
    pub kubeconfig_dir: &'a Path,
    /// An explicit kubeadm config; otherwise [`CONFIG_GLOBS`] are searched.
    pub kubeadm_config: Option<&'a Path>,
    /// Unix seconds.
    pub now: i64,
    /// Warn about certificates expiring within this many seconds.
    pub warn_within: Option<i64>,
}

/// One certificate (a row of kubeadm's tables, or one kubeadm does not list).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Entry {
    /// kubeadm's row name (`apiserver`, `admin.conf`, `etcd-ca`), or the file for others.
    pub name: String,
    /// The file, relative to the PKI or kubeconfig directory it was found in.
    pub file: String,
    /// kubeadm prints `!MISSING!` for these; not a problem (a worker has no leaf certificates).
    pub missing: bool,
    /// notAfter, RFC 3339.
    pub expires: Option<String>,
    pub residual_secs: Option<i64>,
    /// notAfter, Unix seconds.
    #[serde(skip)]
    pub not_after: Option<i64>,
    /// kubeadm's short form (`364d`, `9y`, `<invalid>` once expired).
    pub residual: String,
    /// The CA kubeadm uses for this certificate (kubeadm's CERTIFICATE AUTHORITY column).
    pub certificate_authority: Option<String>,
    /// The CA whose signature verifies: a kubeadm CA name, `self`, or the file of another CA
    /// in the PKI directory; `None` when no CA here verifies it.
    pub signed_by: Option<String>,
    /// kubeadm's meaning: the CA's private key is not on the node.
    pub externally_managed: bool,
    pub subject: String,
    pub issuer: String,
    pub serial: String,
    /// `RSA-2048`, `EC-P256`, …
    pub key_algorithm: String,
    /// `proven`, `mismatch`, `missing`, `unreadable`, or `-` (no key expected).
    pub key: String,
    /// `ok`, `wrong CA`, `broken`, or `-`.
    pub chain: String,
    /// `ok`, `missing: …`, or `-` (not checked: no kubeadm config, or nothing asked).
    pub sans: String,
}

/// Something wrong (exit 1) or, for `kind == "expiring"`, a warning (exit 2).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Problem {
    /// The row name and file: `apiserver (apiserver.crt)`.
    pub place: String,
    /// `expired`, `not-yet-valid`, `key-mismatch`, `key-missing`, `key-unreadable`, `chain`,
    /// `san-missing`, `unreadable`, `kubeadm-config`, `expiring`.
    pub kind: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    pub pki_dir: String,
    pub kubeconfig_dir: String,
    /// The kubeadm config the SANs were checked against (path under the root).
    pub kubeadm_config: Option<String>,
    /// kubeadm's first table, in its order.
    pub certificates: Vec<Entry>,
    /// kubeadm's CA table.
    pub certificate_authorities: Vec<Entry>,
    /// What kubeadm does not list: kubelet.conf's client certificate, `sa`, other files.
    pub other: Vec<Entry>,
    pub problems: Vec<Problem>,
    pub warnings: Vec<Problem>,
}

impl Report {
    /// 1 on a problem, 2 when only warnings (expiring soon), 0 otherwise.
    pub fn exit_code(&self) -> i32 {
        use crate::error::exit;
        if !self.problems.is_empty() {
            exit::FAILED
        } else if !self.warnings.is_empty() {
            exit::DEGRADED
        } else {
            exit::OK
        }
    }
}

/// A loaded certificate and where its key is.
struct Loaded {
    cert: CertInfo,
    key: KeyState,
}

enum KeyState {
    Pem(Vec<u8>),
    Missing,
    Unreadable(String),
}

/// A CA usable to identify signers: its display name and certificate.
struct Candidate {
    name: String,
    cert: CertInfo,
}

fn read_capped(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut data = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut data)?;
    if data.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_FILE_BYTES} bytes"
        )));
    }
    Ok(data)
}

fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// `x.crt` → its certificate and `x.key`. `Ok(None)`: the certificate file is absent.
fn load_pair(path: &Path) -> std::result::Result<Option<Loaded>, String> {
    if !exists(path) {
        return Ok(None);
    }
    let data = read_capped(path).map_err(|e| e.to_string())?;
    let cert = first_cert(&data)?;
    let key_path = path.with_extension("key");
    let key = if !exists(&key_path) {
        KeyState::Missing
    } else {
        match read_capped(&key_path) {
            Ok(k) => KeyState::Pem(k),
            Err(e) => KeyState::Unreadable(e.to_string()),
        }
    };
    Ok(Some(Loaded { cert, key }))
}

fn first_cert(data: &[u8]) -> std::result::Result<CertInfo, String> {
    inspect::parse_certs(data)?
        .into_iter()
        .next()
        .ok_or_else(|| "no certificate".to_string())
}

/// A kubeconfig's client credentials and the cluster CA it trusts.
struct Kubeconfig {
    loaded: Loaded,
    ca_data: Option<CertInfo>,
}

/// The current context's user (else the first user): `client-certificate-data` or the
/// `client-certificate` file (absolute paths under `root`, relative ones beside the file),
/// and the key likewise.
fn load_kubeconfig(path: &Path, root: &Path) -> std::result::Result<Option<Kubeconfig>, String> {
    if !exists(path) {
        return Ok(None);
    }
    let text = read_capped(path).map_err(|e| e.to_string())?;
    let doc: serde_yaml::Value =
        serde_yaml::from_slice(&text).map_err(|e| format!("not a valid kubeconfig: {e}"))?;
    let named = |list: &str, name: Option<&str>| -> Option<serde_yaml::Value> {
        let items = doc.get(list)?.as_sequence()?;
        let found = match name {
            Some(n) => items
                .iter()
                .find(|i| i.get("name").and_then(|v| v.as_str()) == Some(n)),
            None => items.first(),
        };
        found.cloned()
    };
    let context = doc
        .get("current-context")
        .and_then(|c| c.as_str())
        .and_then(|c| named("contexts", Some(c)))
        .and_then(|c| c.get("context").cloned());
    let user_name = context
        .as_ref()
        .and_then(|c| c.get("user"))
        .and_then(|u| u.as_str());
    let cluster_name = context
        .as_ref()
        .and_then(|c| c.get("cluster"))
        .and_then(|u| u.as_str());
    let user = named("users", user_name)
        .and_then(|u| u.get("user").cloned())
        .ok_or("no user entry")?;
    let cluster = named("clusters", cluster_name).and_then(|c| c.get("cluster").cloned());
    let dir = path.parent().unwrap_or(Path::new("."));
    let field = |v: &serde_yaml::Value,
                 data: &str,
                 file: &str|
     -> std::result::Result<Option<Vec<u8>>, String> {
        if let Some(b64) = v.get(data).and_then(|d| d.as_str()) {
            use base64::Engine;
            return base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .map(Some)
                .map_err(|_| format!("{data} is not base64"));
        }
        if let Some(f) = v.get(file).and_then(|d| d.as_str()) {
            let p = Path::new(f);
            let p = match p.strip_prefix("/") {
                Ok(rel) => root.join(rel),
                Err(_) => dir.join(p),
            };
            return read_capped(&p)
                .map(Some)
                .map_err(|e| format!("{file} {f}: {e}"));
        }
        Ok(None)
    };
    let cert_pem = field(&user, "client-certificate-data", "client-certificate")?
        .ok_or("the user has no client certificate")?;
    let cert = first_cert(&cert_pem)?;
    let key = match field(&user, "client-key-data", "client-key") {
        Ok(Some(k)) => KeyState::Pem(k),
        Ok(None) => KeyState::Missing,
        Err(e) => KeyState::Unreadable(e),
    };
    let ca_data = match cluster.as_ref() {
        Some(c) => match field(c, "certificate-authority-data", "certificate-authority") {
            Ok(Some(pem)) => Some(first_cert(&pem).map_err(|e| format!("cluster CA: {e}"))?),
            _ => None,
        },
        None => None,
    };
    Ok(Some(Kubeconfig {
        loaded: Loaded { cert, key },
        ca_data,
    }))
}

/// kubeadm's config on the node: the explicit file, else the first `kubeadm*.yaml` of
/// [`CONFIG_GLOBS`]. `Ok(None)`: none there.
fn find_config(
    root: &Path,
    explicit: Option<&Path>,
) -> std::result::Result<Option<(String, KubeadmConfig)>, Problem> {
    let candidates: Vec<PathBuf> = match explicit {
        Some(p) => vec![p.to_path_buf()],
        None => {
            let mut out = Vec::new();
            for (dir, prefix) in CONFIG_GLOBS {
                let mut here: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                            n.starts_with(prefix) && (n.ends_with(".yaml") || n.ends_with(".yml"))
                        })
                    })
                    .collect();
                here.sort();
                out.extend(here);
            }
            out
        }
    };
    let Some(path) = candidates.into_iter().next() else {
        return Ok(None);
    };
    let shown = path.display().to_string();
    let problem = |message: String| Problem {
        place: shown.clone(),
        kind: "kubeadm-config",
        message,
    };
    let text = read_capped(&path).map_err(|e| problem(e.to_string()))?;
    let text = String::from_utf8(text).map_err(|_| problem("not UTF-8".into()))?;
    match crate::kubeadm::config::parse(&text, &shown) {
        Ok(cfg) => Ok(Some((shown, cfg))),
        Err(e) => Err(problem(e.to_string())),
    }
}

/// The PKI directory kubeadm uses on this node: the kubeadm config's `certificatesDir`
/// (under `root`) when a config is found and parses, else `/etc/kubernetes/pki`.
pub fn default_pki_dir(root: &Path, explicit_config: Option<&Path>) -> PathBuf {
    let dir = find_config(root, explicit_config)
        .ok()
        .flatten()
        .map(|(_, c)| c.certificates_dir())
        .unwrap_or_else(|| "/etc/kubernetes/pki".into());
    root.join(dir.trim_start_matches('/'))
}

/// One SAN kubeadm puts in a certificate, and why.
struct WantSan {
    value: String,
    why: &'static str,
}

/// The SANs kubeadm's certs phase gives `apiserver`, `etcd-server` and `etcd-peer` for this
/// config (kubeadm's `GetAPIServerAltNames`, `GetEtcdAltNames`, `GetEtcdPeerAltNames`); the
/// node name and advertise address only when the config names them (else kubeadm takes
/// them from the host at init time).
fn wanted_sans(cfg: &KubeadmConfig, row: &str) -> Vec<WantSan> {
    let cluster = cfg.cluster.as_ref().map(|c| &c.spec);
    let node_name = cfg
        .init
        .as_ref()
        .and_then(|i| i.spec.node_registration.as_ref())
        .or_else(|| {
            cfg.join
                .as_ref()
                .and_then(|j| j.spec.node_registration.as_ref())
        })
        .and_then(|n| n.name.clone())
        .filter(|n| !n.is_empty());
    let advertise = cfg
        .init
        .as_ref()
        .and_then(|i| i.spec.local_api_endpoint.as_ref())
        .or_else(|| {
            cfg.join
                .as_ref()
                .and_then(|j| j.spec.control_plane.as_ref())
                .and_then(|c| c.local_api_endpoint.as_ref())
        })
        .and_then(|e| e.advertise_address.clone())
        .filter(|a| !a.is_empty());
    let mut out = Vec::new();
    let mut add = |value: &str, why: &'static str| {
        if !out.iter().any(|w: &WantSan| w.value == value) {
            out.push(WantSan {
                value: value.to_string(),
                why,
            });
        }
    };
    let node_and_address = |add: &mut dyn FnMut(&str, &'static str)| {
        if let Some(n) = &node_name {
            add(n, "nodeRegistration.name");
        }
        if let Some(a) = &advertise {
            add(a, "localAPIEndpoint.advertiseAddress");
        }
    };
    match row {
        "apiserver" => {
            let domain = cluster
                .and_then(|c| c.networking.as_ref())
                .and_then(|n| n.dns_domain.clone())
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| "cluster.local".into());
            for n in ["kubernetes", "kubernetes.default", "kubernetes.default.svc"] {
                add(n, "kubeadm's service names");
            }
            add(
                &format!("kubernetes.default.svc.{domain}"),
                "networking.dnsDomain",
            );
            let subnet = cluster
                .and_then(|c| c.networking.as_ref())
                .and_then(|n| n.service_subnet.clone())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "10.96.0.0/12".into());
            if let Some(ip) = first_service_ip(&subnet) {
                add(&ip.to_string(), "first address of networking.serviceSubnet");
            }
            node_and_address(&mut add);
            if let Some(host) = cluster
                .and_then(|c| c.control_plane_endpoint.as_deref())
                .and_then(crate::kubeadm::config::split_host_port)
                .map(|(h, _)| h)
            {
                add(&host, "controlPlaneEndpoint");
            }
            for s in cluster
                .and_then(|c| c.api_server.as_ref())
                .and_then(|a| a.cert_sans.as_ref())
                .into_iter()
                .flatten()
            {
                add(s, "apiServer.certSANs");
            }
        }
        "etcd-server" | "etcd-peer" => {
            let local = cluster
                .and_then(|c| c.etcd.as_ref())
                .and_then(|e| e.local.as_ref());
            if row == "etcd-server" {
                add("localhost", "kubeadm's etcd server names");
                add("127.0.0.1", "kubeadm's etcd server names");
                add("::1", "kubeadm's etcd server names");
            }
            node_and_address(&mut add);
            let extra = if row == "etcd-server" {
                local.and_then(|l| l.server_cert_sans.as_ref())
            } else {
                local.and_then(|l| l.peer_cert_sans.as_ref())
            };
            let why = if row == "etcd-server" {
                "etcd.local.serverCertSANs"
            } else {
                "etcd.local.peerCertSANs"
            };
            for s in extra.into_iter().flatten() {
                add(s, why);
            }
        }
        _ => {}
    }
    out
}

/// The first usable address of the first subnet in `subnets` (`10.96.0.0/12` → 10.96.0.1),
/// as kubeadm's `GetAPIServerVirtualIP`.
fn first_service_ip(subnets: &str) -> Option<std::net::IpAddr> {
    let first = subnets.split(',').next()?.trim();
    let (addr, _) = first.split_once('/')?;
    match addr.parse::<std::net::IpAddr>().ok()? {
        std::net::IpAddr::V4(a) => {
            Some(std::net::Ipv4Addr::from(u32::from(a).checked_add(1)?).into())
        }
        std::net::IpAddr::V6(a) => {
            Some(std::net::Ipv6Addr::from(u128::from(a).checked_add(1)?).into())
        }
    }
}

/// A SAN wanted by the config is in the certificate: the same IP, or a DNS name equal
/// (case-insensitively) or covered by a wildcard.
fn has_san(cert: &CertInfo, want: &str) -> bool {
    if let Ok(ip) = want.parse::<std::net::IpAddr>() {
        return cert.ip_sans.contains(&ip);
    }
    cert.dns_sans.iter().any(|s| s.eq_ignore_ascii_case(want)) || super::check::covers(cert, want)
}

/// Now in Unix seconds rounded up: kubeadm's residual time is `time.Until(notAfter)`
/// truncated to seconds, so a certificate valid for 365 days from a moment ago shows `364d`.
pub fn now_ceil() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64 + i64::from(d.subsec_nanos() > 0))
        .unwrap_or(0)
}

/// kubeadm's `duration.ShortHumanDuration`: `<invalid>` below -1 s, then s, m, h, d, y.
pub fn short_human_duration(secs: i64) -> String {
    if secs < -1 {
        "<invalid>".into()
    } else if secs < 0 {
        "0s".into()
    } else if secs < 60 {
        format!("{secs}s")
    } else if secs < 3600 {
        format!("{}m", secs / 60)
    } else if secs < 86400 {
        format!("{}h", secs / 3600)
    } else if secs < 365 * 86400 {
        format!("{}d", secs / 86400)
    } else {
        format!("{}y", secs / (365 * 86400))
    }
}

/// kubeadm's date format, Go's `Jan 02, 2006 15:04 MST` in UTC.
pub fn kubeadm_date(unix: i64) -> String {
    let fmt =
        time::macros::format_description!("[month repr:short] [day], [year] [hour]:[minute] UTC");
    time::OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| t.format(&fmt).ok())
        .unwrap_or_else(|| unix.to_string())
}

/// The audit. Errors only when the PKI directory cannot be read at all; everything else is
/// a problem in the report.
pub fn audit(input: &Input) -> Result<Report> {
    let unreadable_dir = |e| {
        Error::io(
            Stage::Kubeadm,
            input.pki_dir.display().to_string(),
            "cannot read the PKI directory",
            e,
        )
    };
    std::fs::read_dir(input.pki_dir).map_err(unreadable_dir)?;
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let config = match find_config(input.root, input.kubeadm_config) {
        Ok(c) => c,
        Err(p) => {
            problems.push(p);
            None
        }
    };
    let external_etcd = config
        .as_ref()
        .and_then(|(_, c)| c.cluster.as_ref())
        .and_then(|c| c.spec.etcd.as_ref())
        .is_some_and(|e| e.external.is_some());
    let listed = |name: &str| !(external_etcd && ETCD_ROWS.contains(&name));

    // CAs first: every leaf's signer is looked for among them.
    let mut cas: Vec<(&str, &str, Option<Loaded>)> = Vec::new();
    for (name, file) in CAS.iter().filter(|(n, _)| listed(n)) {
        let loaded = match load_pair(&input.pki_dir.join(file)) {
            Ok(l) => l,
            Err(e) => {
                problems.push(unreadable(name, file, e));
                None
            }
        };
        cas.push((name, file, loaded));
    }
    let mut candidates: Vec<Candidate> = cas
        .iter()
        .filter_map(|(n, _, l)| {
            l.as_ref().map(|l| Candidate {
                name: n.to_string(),
                cert: l.cert.clone(),
            })
        })
        .collect();
    // Other files of the PKI directory: further CAs to identify signers by, or certificates
    // kubeadm does not list.
    let known: Vec<&str> = CAS
        .iter()
        .map(|(_, f)| *f)
        .chain(LEAVES.iter().map(|(_, f, _)| *f))
        .collect();
    let mut extra_files = Vec::new();
    walk(input.pki_dir, &mut extra_files).map_err(unreadable_dir)?;
    extra_files.sort();
    let mut others: Vec<(String, Option<Loaded>)> = Vec::new();
    for path in extra_files {
        let rel = rel_name(&path, input.pki_dir);
        let is_cert = rel.ends_with(".crt")
            || (rel.ends_with(".pem")
                && read_capped(&path)
                    .is_ok_and(|d| d.windows(17).any(|w| w == b"BEGIN CERTIFICATE")));
        if known.contains(&rel.as_str()) || !is_cert {
            continue;
        }
        match load_pair(&path) {
            Ok(Some(l)) => {
                if l.cert.is_ca {
                    candidates.push(Candidate {
                        name: rel.clone(),
                        cert: l.cert.clone(),
                    });
                }
                others.push((rel, Some(l)));
            }
            Ok(None) => {}
            Err(e) => {
                problems.push(unreadable(&rel, &rel, e));
                others.push((rel, None));
            }
        }
    }
    let ca_external = |ca: &str| {
        cas.iter().any(|(n, _, l)| {
            *n == ca
                && l.as_ref()
                    .is_some_and(|l| matches!(l.key, KeyState::Missing))
        })
    };
    let ca_cert = |ca: &str| {
        cas.iter()
            .find(|(n, _, _)| *n == ca)
            .and_then(|(_, _, l)| l.as_ref().map(|l| &l.cert))
    };
    let ctx = Ctx {
        input,
        candidates: &candidates,
        config: config.as_ref().map(|(_, c)| c),
    };

    // kubeadm's certificate table: leaves and kubeconfigs, sorted by name as kubeadm does.
    let mut rows: Vec<(&str, String, &str, bool)> = LEAVES
        .iter()
        .filter(|(n, _, _)| listed(n))
        .map(|(n, f, ca)| (*n, input.pki_dir.join(f).display().to_string(), *ca, false))
        .chain(KUBECONFIGS.iter().map(|n| {
            (
                *n,
                input.kubeconfig_dir.join(n).display().to_string(),
                "ca",
                true,
            )
        }))
        .collect();
    rows.sort_by(|a, b| a.0.cmp(b.0));
    let mut certificates = Vec::new();
    for (name, path, ca, is_kubeconfig) in rows {
        let file = if is_kubeconfig {
            name.to_string()
        } else {
            rel_name(Path::new(&path), input.pki_dir)
        };
        let loaded = if is_kubeconfig {
            load_kubeconfig(Path::new(&path), input.root).map(|k| {
                k.map(|k| {
                    trusts_ca(name, &k, ca_cert("ca"), &mut problems);
                    k.loaded
                })
            })
        } else {
            load_pair(Path::new(&path))
        };
        let entry = match loaded {
            Ok(None) => missing_entry(name, &file, Some(ca)),
            Ok(Some(l)) => {
                let mut e = ctx.check(name, &file, &l, Some(ca), &mut problems, &mut warnings);
                e.externally_managed = ca_external(ca);
                e
            }
            Err(msg) => {
                problems.push(unreadable(name, &file, msg));
                let mut e = missing_entry(name, &file, Some(ca));
                e.missing = false;
                e
            }
        };
        certificates.push(entry);
    }

    let mut certificate_authorities = Vec::new();
    for (name, file, loaded) in &cas {
        let entry = match loaded {
            None => missing_entry(name, file, None),
            Some(l) => {
                let mut e = ctx.check(name, file, l, None, &mut problems, &mut warnings);
                e.externally_managed = matches!(l.key, KeyState::Missing);
                e
            }
        };
        certificate_authorities.push(entry);
    }

    // Beyond kubeadm: the kubelet's client certificate, the service-account key pair and
    // every other certificate of the PKI directory.
    let mut other = Vec::new();
    let kubelet = input.kubeconfig_dir.join("kubelet.conf");
    match load_kubeconfig(&kubelet, input.root) {
        Ok(Some(k)) => {
            trusts_ca("kubelet.conf", &k, ca_cert("ca"), &mut problems);
            other.push(ctx.check(
                "kubelet.conf",
                "kubelet.conf",
                &k.loaded,
                Some("ca"),
                &mut problems,
                &mut warnings,
            ))
        }
        Ok(None) => {}
        Err(e) => problems.push(unreadable("kubelet.conf", "kubelet.conf", e)),
    }
    if let Some(sa) = sa_entry(input.pki_dir, &mut problems) {
        other.push(sa);
    }
    for (rel, loaded) in others {
        if let Some(l) = loaded {
            let e = ctx.check(&rel, &rel, &l, None, &mut problems, &mut warnings);
            other.push(e);
        }
    }

    Ok(Report {
        pki_dir: input.pki_dir.display().to_string(),
        kubeconfig_dir: input.kubeconfig_dir.display().to_string(),
        kubeadm_config: config.map(|(p, _)| p),
        certificates,
        certificate_authorities,
        other,
        problems,
        warnings,
    })
}

struct Ctx<'a> {
    input: &'a Input<'a>,
    candidates: &'a [Candidate],
    config: Option<&'a KubeadmConfig>,
}

impl Ctx<'_> {
    /// Expiry, signer, key proof, chain and SANs of one certificate. `expected_ca`: the CA
    /// kubeadm uses for it (`None` for CAs and certificates kubeadm does not list).
    fn check(
        &self,
        name: &str,
        file: &str,
        l: &Loaded,
        expected_ca: Option<&str>,
        problems: &mut Vec<Problem>,
        warnings: &mut Vec<Problem>,
    ) -> Entry {
        let c = &l.cert;
        let now = self.input.now;
        let place = if name == file {
            name.to_string()
        } else {
            format!("{name} ({file})")
        };
        let mut problem = |kind: &'static str, message: String| {
            problems.push(Problem {
                place: place.clone(),
                kind,
                message,
            })
        };
        let residual = c.not_after - now;
        if residual < 0 {
            problem(
                "expired",
                format!(
                    "expired on {} ({} ago)",
                    kubeadm_date(c.not_after),
                    inspect::fmt_residual(-residual)
                ),
            );
        } else if now < c.not_before {
            problem(
                "not-yet-valid",
                format!(
                    "not valid before {} ({} from now): is the node clock behind?",
                    kubeadm_date(c.not_before),
                    inspect::fmt_residual(c.not_before - now)
                ),
            );
        } else if let Some(w) = self.input.warn_within
            && residual < w
        {
            warnings.push(Problem {
                place: place.clone(),
                kind: "expiring",
                message: format!(
                    "expires on {}, in {} (within --warn-within {})",
                    kubeadm_date(c.not_after),
                    inspect::fmt_residual(residual),
                    inspect::fmt_residual(w)
                ),
            });
        }

        // The signer, by signature: the first CA whose key verifies this certificate.
        let signed_by = if c.self_signed {
            Some("self".to_string())
        } else {
            self.candidates
                .iter()
                .find(|ca| ca.cert.der != c.der && inspect::signed_by(c, &ca.cert))
                .map(|ca| ca.name.clone())
        };
        let chain = match (expected_ca, &signed_by) {
            // A CA: self-signed, or signed by another CA here.
            (None, Some(_)) if c.is_ca => "ok".to_string(),
            (None, None) if c.is_ca => {
                problem(
                    "chain",
                    format!(
                        "a CA that is not self-signed, and no CA here signed it (issuer {})",
                        c.issuer
                    ),
                );
                "broken".into()
            }
            // Not listed by kubeadm: no expectation, its signer is information.
            (None, _) => "-".into(),
            (Some(want), None) => {
                let why = if self.candidates.iter().any(|ca| ca.name == want) {
                    format!(
                        "no CA here verifies its signature (issuer {}), not even {want}",
                        c.issuer
                    )
                } else {
                    format!("its CA {want} is missing, and no other CA here verifies it")
                };
                problem("chain", why);
                "broken".into()
            }
            (Some(want), Some(got)) if got != want => {
                problem(
                    "chain",
                    format!(
                        "signed by {got}, but kubeadm uses {want} for it: its peers, which trust {want}, reject it"
                    ),
                );
                "wrong CA".into()
            }
            (Some(want), Some(_)) => {
                let ca = self.candidates.iter().find(|ca| ca.name == want);
                match ca.map(|ca| chain_flaw(c, &ca.cert, now)) {
                    Some(Some(flaw)) => {
                        problem("chain", flaw);
                        "broken".into()
                    }
                    _ => "ok".into(),
                }
            }
        };

        let key = match &l.key {
            KeyState::Missing if expected_ca.is_none() => "missing".to_string(),
            KeyState::Missing => {
                problem(
                    "key-missing",
                    "no private key beside it: the component cannot use it".into(),
                );
                "missing".into()
            }
            KeyState::Unreadable(e) => {
                problem("key-unreadable", format!("private key: {e}"));
                "unreadable".into()
            }
            KeyState::Pem(pem) => match super::prove::proves(pem, &c.spki_der) {
                Ok(true) => "proven".into(),
                Ok(false) => {
                    problem(
                        "key-mismatch",
                        "the private key is not this certificate's: a signature made with it does not verify with the certificate's public key".into(),
                    );
                    "mismatch".into()
                }
                Err(e) => {
                    problem("key-unreadable", format!("private key: {e}"));
                    "unreadable".into()
                }
            },
        };

        let sans = match self.config {
            Some(cfg) => {
                let want = wanted_sans(cfg, name);
                let absent: Vec<&WantSan> = want.iter().filter(|w| !has_san(c, &w.value)).collect();
                for w in &absent {
                    problem(
                        "san-missing",
                        format!(
                            "SAN {} ({} in the kubeadm config) is not in the certificate",
                            w.value, w.why
                        ),
                    );
                }
                if want.is_empty() {
                    "-".to_string()
                } else if absent.is_empty() {
                    "ok".into()
                } else {
                    format!(
                        "missing: {}",
                        absent
                            .iter()
                            .map(|w| w.value.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            }
            None => "-".into(),
        };

        Entry {
            name: name.to_string(),
            file: file.to_string(),
            missing: false,
            expires: Some(inspect::fmt_time(c.not_after)),
            residual_secs: Some(residual),
            not_after: Some(c.not_after),
            residual: short_human_duration(residual),
            certificate_authority: expected_ca.map(str::to_string),
            signed_by,
            externally_managed: false,
            subject: c.subject.clone(),
            issuer: c.issuer.clone(),
            serial: c.serial_hex.clone(),
            key_algorithm: c.public_key.describe(),
            key,
            chain,
            sans,
        }
    }
}

/// A kubeconfig's `certificate-authority-data` is the cluster CA on disk.
fn trusts_ca(name: &str, k: &Kubeconfig, ca: Option<&CertInfo>, problems: &mut Vec<Problem>) {
    if let (Some(data), Some(ca)) = (&k.ca_data, ca)
        && data.der != ca.der
    {
        problems.push(Problem {
            place: name.to_string(),
            kind: "chain",
            message: "its certificate-authority-data is not ca.crt: clients using it do not trust this cluster's API server".into(),
        });
    }
}

/// What breaks a leaf → CA link that a signature check alone does not see: the issuer
/// name (Go's verifier chains by name first), the CA's right to sign, its validity.
fn chain_flaw(leaf: &CertInfo, ca: &CertInfo, now: i64) -> Option<String> {
    if leaf.issuer != ca.subject {
        return Some(format!(
            "its issuer name {} is not the CA's subject {}",
            leaf.issuer, ca.subject
        ));
    }
    if !ca.is_ca || ca.key_cert_sign == Some(false) {
        return Some("its CA certificate may not sign certificates (CA:TRUE / keyCertSign)".into());
    }
    if ca.not_after < now {
        return Some(format!("its CA expired on {}", kubeadm_date(ca.not_after)));
    }
    None
}

fn missing_entry(name: &str, file: &str, ca: Option<&str>) -> Entry {
    Entry {
        name: name.to_string(),
        file: file.to_string(),
        missing: true,
        expires: None,
        residual_secs: None,
        not_after: None,
        residual: String::new(),
        certificate_authority: ca.map(str::to_string),
        signed_by: None,
        externally_managed: false,
        subject: String::new(),
        issuer: String::new(),
        serial: String::new(),
        key_algorithm: String::new(),
        key: "-".into(),
        chain: "-".into(),
        sans: "-".into(),
    }
}

fn unreadable(name: &str, file: &str, message: String) -> Problem {
    Problem {
        place: if name == file {
            name.to_string()
        } else {
            format!("{name} ({file})")
        },
        kind: "unreadable",
        message,
    }
}

/// The service-account key pair: `sa.key` proven against `sa.pub`.
fn sa_entry(pki: &Path, problems: &mut Vec<Problem>) -> Option<Entry> {
    let pub_path = pki.join("sa.pub");
    let key_path = pki.join("sa.key");
    if !exists(&pub_path) && !exists(&key_path) {
        return None;
    }
    let mut e = missing_entry("sa", "sa.pub", None);
    e.missing = false;
    let place = "sa (sa.key, sa.pub)".to_string();
    let spki = read_capped(&pub_path)
        .map_err(|e| e.to_string())
        .and_then(|d| super::prove::public_key_der(&d));
    let key = read_capped(&key_path).map_err(|e| e.to_string());
    e.key = match (spki, key) {
        (Err(m), _) => {
            problems.push(Problem {
                place,
                kind: "unreadable",
                message: format!("sa.pub: {m}"),
            });
            "-".into()
        }
        (Ok(_), Err(m)) => {
            problems.push(Problem {
                place,
                kind: "key-unreadable",
                message: format!("sa.key: {m}"),
            });
            "unreadable".into()
        }
        (Ok(spki), Ok(key)) => match super::prove::proves(&key, &spki) {
            Ok(true) => "proven".into(),
            Ok(false) => {
                problems.push(Problem {
                    place,
                    kind: "key-mismatch",
                    message: "sa.key is not the private key of sa.pub: tokens the controller-manager signs would not verify".into(),
                });
                "mismatch".into()
            }
            Err(m) => {
                problems.push(Problem {
                    place,
                    kind: "key-unreadable",
                    message: format!("sa.key: {m}"),
                });
                "unreadable".into()
            }
        },
    };
    Some(e)
}

fn rel_name(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .unwrap_or(path)
        .display()
        .to_string()
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let ft = e.file_type()?;
        if ft.is_dir() {
            walk(&e.path(), out)?;
        } else if ft.is_file() {
            out.push(e.path());
        }
    }
    Ok(())
}

// ---- text output ---------------------------------------------------------------------

/// Go's `text/tabwriter` as kubeadm configures it (minwidth 10, padding 3, spaces): every
/// tab-terminated cell padded to its column's width; the last cell of a line as is.
/// A line without tabs ends the column block, as in Go.
fn tabwrite(lines: &[String]) -> String {
    let mut out = String::new();
    let mut block: Vec<Vec<&str>> = Vec::new();
    let flush = |block: &mut Vec<Vec<&str>>, out: &mut String| {
        let cols = block
            .iter()
            .map(|c| c.len().saturating_sub(1))
            .max()
            .unwrap_or(0);
        let mut widths = vec![0usize; cols];
        for cells in block.iter() {
            for (w, cell) in widths
                .iter_mut()
                .zip(cells.iter().take(cells.len().saturating_sub(1)))
            {
                *w = (*w).max((cell.chars().count() + 3).max(10));
            }
        }
        for cells in block.iter() {
            let last = cells.len().saturating_sub(1);
            for (i, cell) in cells.iter().enumerate() {
                if i < last {
                    let w = widths.get(i).copied().unwrap_or(0);
                    out.push_str(&format!("{cell:<w$}"));
                } else {
                    out.push_str(cell);
                }
            }
            out.push('\n');
        }
        block.clear();
    };
    for line in lines {
        let cells: Vec<&str> = line.split('\t').collect();
        if cells.len() == 1 {
            flush(&mut block, &mut out);
            out.push_str(line);
            out.push('\n');
        } else {
            block.push(cells);
        }
    }
    flush(&mut block, &mut out);
    out
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// The human report: kubeadm's two tables exactly as `kubeadm certs check-expiration`
/// prints them, then nodeagent's checks of every certificate and the problems found.
pub fn render_text(r: &Report) -> String {
    let date = |e: &Entry| e.not_after.map(kubeadm_date).unwrap_or_default();
    let mut lines = vec![
        "CERTIFICATE\tEXPIRES\tRESIDUAL TIME\tCERTIFICATE AUTHORITY\tEXTERNALLY MANAGED"
            .to_string(),
    ];
    for e in &r.certificates {
        lines.push(if e.not_after.is_some() {
            format!(
                "{}\t{}\t{}\t{}\t{:<8}",
                e.name,
                date(e),
                e.residual,
                e.certificate_authority.as_deref().unwrap_or(""),
                yes_no(e.externally_managed)
            )
        } else {
            format!("!MISSING! {}\t\t\t\t", e.name)
        });
    }
    lines.push(String::new());
    lines.push("CERTIFICATE AUTHORITY\tEXPIRES\tRESIDUAL TIME\tEXTERNALLY MANAGED".into());
    for e in &r.certificate_authorities {
        lines.push(if e.not_after.is_some() {
            format!(
                "{}\t{}\t{}\t{:<8}",
                e.name,
                date(e),
                e.residual,
                yes_no(e.externally_managed)
            )
        } else {
            format!("!MISSING! {}\t\t\t", e.name)
        });
    }
    // Beyond kubeadm: every certificate present, with what nodeagent verified.
    lines.push(String::new());
    lines.push("CHECKED\tSIGNED BY (SIGNATURE)\tKEY\tCHAIN\tSANS\tEXPIRES\tRESIDUAL TIME".into());
    let present = r
        .certificates
        .iter()
        .chain(&r.certificate_authorities)
        .chain(&r.other)
        .filter(|e| !e.missing);
    for e in present {
        lines.push(format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            e.name,
            e.signed_by.as_deref().unwrap_or(if e.not_after.is_some() {
                "unknown CA"
            } else {
                "-"
            }),
            e.key,
            e.chain,
            e.sans,
            if e.not_after.is_some() {
                date(e)
            } else {
                "-".into()
            },
            if e.not_after.is_some() {
                e.residual.as_str()
            } else {
                "-"
            },
        ));
    }
    lines.push(String::new());
    match &r.kubeadm_config {
        Some(p) => lines.push(format!("SANs checked against {p}")),
        None => lines.push(
            "SANs not checked: no kubeadm config (run/kubeadm/kubeadm*.yaml, etc/kubernetes/kubeadm*.yaml, --kubeadm-config)".into(),
        ),
    }
    for (what, list) in [("problem", &r.problems), ("warning", &r.warnings)] {
        for p in list.iter() {
            lines.push(format!("{what}: {}: {} [{}]", p.place, p.message, p.kind));
        }
    }
    if r.problems.is_empty() && r.warnings.is_empty() {
        lines.push("no problems found".into());
    }
    tabwrite(&lines)
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn residual_time_as_kubeadm_prints_it() {
        for (secs, want) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (59, "59s"),
            (3599, "59m"),
            (86399, "23h"),
            (365 * 86400 - 1, "364d"),
            (365 * 86400, "1y"),
            (10 * 365 * 86400 - 1, "9y"),
        ] {
            assert_eq!(short_human_duration(secs), want, "{secs}");
        }
        assert_eq!(kubeadm_date(1712654220), "Apr 09, 2024 09:17 UTC");
    }

    #[test]
    fn tabwriter_like_go() {
        // Go's tabwriter(minwidth 10, padding 3): cells padded to the widest + 3, at least
        // 10; the last cell as is; an empty line ends the column block.
        let out = tabwrite(&[
            "A\tBB\tlast".into(),
            "!MISSING! long-name\t\t".into(),
            String::new(),
            "CA\tX".into(),
        ]);
        assert_eq!(
            out,
            "A                     BB        last\n!MISSING! long-name             \n\nCA        X\n"
        );
    }

    #[test]
    fn first_service_ip_and_wanted_sans() {
        assert_eq!(
            first_service_ip("10.96.0.0/12").unwrap().to_string(),
            "10.96.0.1"
        );
        assert_eq!(
            first_service_ip("fd00::/108,10.0.0.0/16")
                .unwrap()
                .to_string(),
            "fd00::1"
        );
        assert_eq!(first_service_ip("junk"), None);
        let cfg = crate::kubeadm::config::parse(
            "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\nnetworking:\n  dnsDomain: corp\n",
            "t",
        )
        .unwrap();
        let got: Vec<String> = wanted_sans(&cfg, "apiserver")
            .into_iter()
            .map(|w| w.value)
            .collect();
        assert_eq!(
            got,
            [
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.corp",
                "10.96.0.1"
            ]
        );
        assert!(wanted_sans(&cfg, "front-proxy-client").is_empty());
    }
}
