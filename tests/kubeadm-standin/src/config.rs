//! The stand-in's own strict reader of kubeadm config files, written from kubeadm's API
//! reference (kubeadm.k8s.io/v1beta3, https://kubernetes.io/docs/reference/config-api/kubeadm-config.v1beta3/,
//! and v1beta4, .../kubeadm-config.v1beta4/), independent of nodeagent's parser so the two
//! cannot share a mistake.
//!
//! Strictness: every field kubeadm does not know is an error here (kubeadm itself prints a
//! "strict decoding error" warning and goes on: stricter on purpose, so tests catch typos).
//! Fields that exist only in one version are refused in the other; the shape of `extraArgs`
//! (a map in v1beta3, a list of `{name, value}` in v1beta4) must fit the version. Documents
//! of the component-config groups (KubeletConfiguration, KubeProxyConfiguration) are accepted
//! unread, as kubeadm hands them to those components. Tokens and CA hashes are checked as
//! kubeadm's `cmd/kubeadm/app/apis/kubeadm/validation/validation.go` does
//! (`ValidateToken`, `ValidateDiscoveryBootstrapToken`, `ValidateDiscovery`).

// Many fields are only read by serde: they exist so a config using them is accepted.
#![allow(dead_code)]

use serde::Deserialize;
use serde_norway::Value;
use std::collections::BTreeMap;

pub const V1BETA3: &str = "kubeadm.k8s.io/v1beta3";
pub const V1BETA4: &str = "kubeadm.k8s.io/v1beta4";

/// `extraArgs`: map in v1beta3, list of `{name, value}` in v1beta4.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ExtraArgs {
    Map(BTreeMap<String, String>),
    List(Vec<Arg>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arg {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeRegistration {
    pub name: Option<String>,
    pub cri_socket: Option<String>,
    pub taints: Option<Vec<Taint>>,
    pub kubelet_extra_args: Option<ExtraArgs>,
    #[serde(default)]
    pub ignore_preflight_errors: Vec<String>,
    pub image_pull_policy: Option<String>,
    /// v1beta4 only.
    pub image_pull_serial: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
    pub time_added: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApiEndpoint {
    pub advertise_address: Option<String>,
    pub bind_port: Option<i32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BootstrapToken {
    pub token: String,
    pub description: Option<String>,
    pub ttl: Option<String>,
    pub expires: Option<String>,
    pub usages: Option<Vec<String>>,
    pub groups: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Patches {
    pub directory: Option<String>,
}

/// v1beta4 only.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Timeouts {
    pub control_plane_component_health_check: Option<String>,
    pub kubelet_health_check: Option<String>,
    #[serde(rename = "kubernetesAPICall")]
    pub kubernetes_api_call: Option<String>,
    #[serde(rename = "etcdAPICall")]
    pub etcd_api_call: Option<String>,
    pub tls_bootstrap: Option<String>,
    pub discovery: Option<String>,
    pub upgrade_manifests: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InitConfiguration {
    pub api_version: String,
    pub kind: String,
    pub bootstrap_tokens: Option<Vec<BootstrapToken>>,
    #[serde(default)]
    pub node_registration: NodeRegistration,
    #[serde(rename = "localAPIEndpoint")]
    pub local_api_endpoint: Option<ApiEndpoint>,
    pub certificate_key: Option<String>,
    pub skip_phases: Option<Vec<String>>,
    pub patches: Option<Patches>,
    pub dry_run: Option<bool>,
    pub timeouts: Option<Timeouts>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HostPathMount {
    pub name: String,
    pub host_path: String,
    pub mount_path: String,
    pub read_only: Option<bool>,
    pub path_type: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ControlPlaneComponent {
    pub extra_args: Option<ExtraArgs>,
    pub extra_volumes: Option<Vec<HostPathMount>>,
    /// v1beta4 only.
    pub extra_envs: Option<Vec<Value>>,
    /// apiServer only.
    #[serde(rename = "certSANs")]
    pub cert_sans: Option<Vec<String>>,
    /// apiServer, v1beta3 only.
    pub timeout_for_control_plane: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LocalEtcd {
    pub image_repository: Option<String>,
    pub image_tag: Option<String>,
    pub data_dir: Option<String>,
    pub extra_args: Option<ExtraArgs>,
    pub extra_envs: Option<Vec<Value>>,
    #[serde(rename = "serverCertSANs")]
    pub server_cert_sans: Option<Vec<String>>,
    #[serde(rename = "peerCertSANs")]
    pub peer_cert_sans: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExternalEtcd {
    pub endpoints: Vec<String>,
    pub ca_file: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Etcd {
    pub local: Option<LocalEtcd>,
    pub external: Option<ExternalEtcd>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Networking {
    pub service_subnet: Option<String>,
    pub pod_subnet: Option<String>,
    pub dns_domain: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Dns {
    pub image_repository: Option<String>,
    pub image_tag: Option<String>,
    /// v1beta4 only.
    pub disabled: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Proxy {
    pub disabled: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterConfiguration {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub etcd: Etcd,
    pub networking: Option<Networking>,
    pub kubernetes_version: Option<String>,
    pub control_plane_endpoint: Option<String>,
    #[serde(default)]
    pub api_server: ControlPlaneComponent,
    pub controller_manager: Option<ControlPlaneComponent>,
    pub scheduler: Option<ControlPlaneComponent>,
    #[serde(rename = "dns")]
    pub dns: Option<Dns>,
    /// v1beta4 only.
    pub proxy: Option<Proxy>,
    pub certificates_dir: Option<String>,
    pub image_repository: Option<String>,
    pub feature_gates: Option<BTreeMap<String, bool>>,
    pub cluster_name: Option<String>,
    /// v1beta4 only.
    pub encryption_algorithm: Option<String>,
    /// v1beta4 only.
    pub certificate_validity_period: Option<String>,
    /// v1beta4 only.
    pub ca_certificate_validity_period: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BootstrapTokenDiscovery {
    pub token: String,
    pub api_server_endpoint: Option<String>,
    pub ca_cert_hashes: Option<Vec<String>>,
    #[serde(rename = "unsafeSkipCAVerification")]
    pub unsafe_skip_ca_verification: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FileDiscovery {
    pub kube_config_path: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Discovery {
    pub bootstrap_token: Option<BootstrapTokenDiscovery>,
    pub file: Option<FileDiscovery>,
    pub tls_bootstrap_token: Option<String>,
    /// v1beta3 only (v1beta4 moved it to `timeouts.discovery`).
    pub timeout: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JoinControlPlane {
    #[serde(rename = "localAPIEndpoint")]
    pub local_api_endpoint: Option<ApiEndpoint>,
    pub certificate_key: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JoinConfiguration {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub node_registration: NodeRegistration,
    pub ca_cert_path: Option<String>,
    pub discovery: Discovery,
    pub control_plane: Option<JoinControlPlane>,
    pub skip_phases: Option<Vec<String>>,
    pub patches: Option<Patches>,
    pub dry_run: Option<bool>,
    pub timeouts: Option<Timeouts>,
}

/// Everything one config file holds.
#[derive(Debug, Default)]
pub struct Config {
    pub init: Option<InitConfiguration>,
    pub cluster: Option<ClusterConfiguration>,
    pub join: Option<JoinConfiguration>,
    /// Documents accepted unread (component configs, ResetConfiguration, …): their kinds.
    pub other: Vec<String>,
}

impl Config {
    pub fn node_registration(&self) -> Option<&NodeRegistration> {
        self.init
            .as_ref()
            .map(|i| &i.node_registration)
            .or(self.join.as_ref().map(|j| &j.node_registration))
    }
    /// `certificatesDir`, default `/etc/kubernetes/pki` (kubeadm's DefaultCertificatesDir).
    pub fn cert_dir(&self) -> String {
        self.cluster
            .as_ref()
            .and_then(|c| c.certificates_dir.clone())
            .unwrap_or_else(|| "/etc/kubernetes/pki".into())
    }
    /// Local (stacked) etcd unless `etcd.external` is set; its data dir (default /var/lib/etcd).
    pub fn local_etcd_dir(&self) -> Option<String> {
        let etcd = self.cluster.as_ref().map(|c| &c.etcd);
        if etcd.is_some_and(|e| e.external.is_some()) {
            return None;
        }
        Some(
            etcd.and_then(|e| e.local.as_ref())
                .and_then(|l| l.data_dir.clone())
                .unwrap_or_else(|| "/var/lib/etcd".into()),
        )
    }
}

/// Read a kubeadm config file (multi-document YAML). Errors name the document and field.
pub fn parse(text: &str, file: &str) -> Result<Config, String> {
    let mut cfg = Config::default();
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let n = i + 1;
        let value = Value::deserialize(doc).map_err(|e| format!("{file}: document {n}: {e}"))?;
        if value.is_null() {
            continue;
        }
        let api = value["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = value["kind"].as_str().unwrap_or_default().to_string();
        let place = format!("{file}: document {n} ({api}, {kind})");
        if api.is_empty() || kind.is_empty() {
            return Err(format!("{place}: apiVersion and kind are required"));
        }
        let group = api.split('/').next().unwrap_or_default();
        if group != "kubeadm.k8s.io" {
            // Component configs go to their components, each under its one apiVersion;
            // kubeadm refuses any other API ("unknown configuration APIs").
            let known = matches!(
                (api.as_str(), kind.as_str()),
                ("kubelet.config.k8s.io/v1beta1", "KubeletConfiguration")
                    | ("kubeproxy.config.k8s.io/v1alpha1", "KubeProxyConfiguration")
            );
            if !known {
                return Err(format!("{place}: unknown configuration API"));
            }
            cfg.other.push(kind);
            continue;
        }
        if api != V1BETA3 && api != V1BETA4 {
            return Err(format!(
                "{place}: no kind {kind:?} is registered for version {api:?} (supported: {V1BETA3}, {V1BETA4})"
            ));
        }
        fn typed<T: serde::de::DeserializeOwned>(v: Value, place: &str) -> Result<T, String> {
            serde_path_to_error::deserialize(v)
                .map_err(|e| format!("{place}: {}: {}", e.path(), e.inner()))
        }
        let dup = |what: &str| format!("{place}: a second {what}");
        match kind.as_str() {
            "InitConfiguration" => {
                let c: InitConfiguration = typed(value, &place)?;
                check_init(&c, &place)?;
                if cfg.init.replace(c).is_some() {
                    return Err(dup("InitConfiguration"));
                }
            }
            "ClusterConfiguration" => {
                let c: ClusterConfiguration = typed(value, &place)?;
                check_cluster(&c, &place)?;
                if cfg.cluster.replace(c).is_some() {
                    return Err(dup("ClusterConfiguration"));
                }
            }
            "JoinConfiguration" => {
                let c: JoinConfiguration = typed(value, &place)?;
                check_join(&c, &place)?;
                if cfg.join.replace(c).is_some() {
                    return Err(dup("JoinConfiguration"));
                }
            }
            "ResetConfiguration" | "UpgradeConfiguration" if api == V1BETA4 => {
                check_fields(&value, &kind, &place)?;
                cfg.other.push(kind)
            }
            _ => {
                return Err(format!(
                    "{place}: no kind {kind:?} is registered for version {api:?}"
                ));
            }
        }
    }
    Ok(cfg)
}

/// The fields of v1beta4's ResetConfiguration and UpgradeConfiguration (kubeadm's
/// `apis/kubeadm/v1beta4/types.go`), checked by name: init and join ignore these documents.
fn check_fields(v: &Value, kind: &str, place: &str) -> Result<(), String> {
    const TIMEOUTS: &[&str] = &[
        "controlPlaneComponentHealthCheck",
        "kubeletHealthCheck",
        "kubernetesAPICall",
        "etcdAPICall",
        "tlsBootstrap",
        "discovery",
        "upgradeManifests",
    ];
    let top: &[&str] = if kind == "ResetConfiguration" {
        &[
            "apiVersion",
            "kind",
            "cleanupTmpDir",
            "certificatesDir",
            "criSocket",
            "dryRun",
            "force",
            "ignorePreflightErrors",
            "skipPhases",
            "unmountFlags",
            "timeouts",
        ]
    } else {
        &[
            "apiVersion",
            "kind",
            "apply",
            "diff",
            "node",
            "plan",
            "timeouts",
        ]
    };
    let section = |name: &str| -> &[&str] {
        match name {
            "apply" => &[
                "kubernetesVersion",
                "allowExperimentalUpgrades",
                "allowRCUpgrades",
                "certificateRenewal",
                "dryRun",
                "etcdUpgrade",
                "forceUpgrade",
                "ignorePreflightErrors",
                "patches",
                "printConfig",
                "skipPhases",
                "imagePullPolicy",
                "imagePullSerial",
            ],
            "diff" => &["kubernetesVersion", "contextLines"],
            "node" => &[
                "certificateRenewal",
                "dryRun",
                "etcdUpgrade",
                "ignorePreflightErrors",
                "skipPhases",
                "patches",
                "imagePullPolicy",
                "imagePullSerial",
            ],
            "plan" => &[
                "kubernetesVersion",
                "allowExperimentalUpgrades",
                "allowRCUpgrades",
                "dryRun",
                "etcdUpgrade",
                "ignorePreflightErrors",
                "printConfig",
            ],
            _ => TIMEOUTS,
        }
    };
    let map = v.as_mapping().ok_or(format!("{place}: not a mapping"))?;
    for (k, val) in map {
        let k = k.as_str().unwrap_or_default();
        if !top.contains(&k) {
            return Err(format!("{place}: unknown field {k:?}"));
        }
        if let Some(inner) = val
            .as_mapping()
            .filter(|_| k != "apiVersion" && k != "kind")
        {
            for (ik, iv) in inner {
                let ik = ik.as_str().unwrap_or_default();
                if !section(k).contains(&ik) {
                    return Err(format!("{place}: unknown field \"{k}.{ik}\""));
                }
                if k == "timeouts" && !iv.as_str().is_some_and(go_duration) {
                    return Err(format!("{place}: {k}.{ik}: not a duration"));
                }
            }
        }
    }
    Ok(())
}

/// Go's `time.ParseDuration`: `[-+]?` then `0`, or numbers (`1`, `1.5`, `.5`) each with a
/// unit `ns us µs μs ms s m h`.
pub fn go_duration(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    if s.is_empty() {
        return false;
    }
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(digits);
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return false;
        }
        let Some(unit) = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"]
            .into_iter()
            .filter(|u| tail.starts_with(u))
            .max_by_key(|u| u.len())
        else {
            return false;
        };
        rest = tail.strip_prefix(unit).unwrap_or_default();
    }
    true
}

fn check_duration(d: &Option<String>, field: &str, place: &str) -> Result<(), String> {
    match d {
        Some(v) if !go_duration(v) => Err(format!("{place}: {field}: invalid duration")),
        _ => Ok(()),
    }
}

/// A lowercase RFC 1123 subdomain (`IsDNS1123Subdomain`).
fn dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// Go's `net.SplitHostPort`: `host:port` or `[v6]:port`; the port is not checked.
fn split_host_port(s: &str) -> Option<(&str, &str)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return Some((host, after.strip_prefix(':')?));
    }
    let (host, port) = s.rsplit_once(':')?;
    (!host.contains(':')).then_some((host, port))
}

/// kubeadm's `ParseHostPort` for controlPlaneEndpoint: a host (IP or DNS subdomain) with an
/// optional port in 1..65535.
fn check_control_plane_endpoint(ep: &str, place: &str) -> Result<(), String> {
    let (host, port) = match split_host_port(ep) {
        Some((h, p)) => (h, Some(p)),
        None => (ep, None),
    };
    if host.parse::<std::net::IpAddr>().is_err() && !dns1123_subdomain(host) {
        return Err(format!("{place}: controlPlaneEndpoint: invalid host"));
    }
    if let Some(p) = port
        && !p.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p))
    {
        return Err(format!("{place}: controlPlaneEndpoint: invalid port"));
    }
    Ok(())
}

fn check_local_endpoint(e: &Option<ApiEndpoint>, field: &str, place: &str) -> Result<(), String> {
    let Some(e) = e else { return Ok(()) };
    if let Some(a) = e.advertise_address.as_deref().filter(|a| !a.is_empty())
        && a.parse::<std::net::IpAddr>().is_err()
    {
        return Err(format!(
            "{place}: {field}.advertiseAddress: not an IP address"
        ));
    }
    if let Some(p) = e.bind_port
        && !(0..=65535).contains(&p)
    {
        return Err(format!(
            "{place}: {field}.bindPort: port number is not valid"
        ));
    }
    Ok(())
}

fn check_timeouts(t: &Option<Timeouts>, place: &str) -> Result<(), String> {
    let Some(t) = t else { return Ok(()) };
    for (v, name) in [
        (
            &t.control_plane_component_health_check,
            "controlPlaneComponentHealthCheck",
        ),
        (&t.kubelet_health_check, "kubeletHealthCheck"),
        (&t.kubernetes_api_call, "kubernetesAPICall"),
        (&t.etcd_api_call, "etcdAPICall"),
        (&t.tls_bootstrap, "tlsBootstrap"),
        (&t.discovery, "discovery"),
        (&t.upgrade_manifests, "upgradeManifests"),
    ] {
        check_duration(v, &format!("timeouts.{name}"), place)?;
    }
    Ok(())
}

fn check_certificate_key(k: &Option<String>, field: &str, place: &str) -> Result<(), String> {
    // Empty: unset. Else the hex of a 32-byte AES key.
    let hex32 = |k: &str| k.len() == 64 && k.bytes().all(|b| b.is_ascii_hexdigit());
    match k {
        Some(k) if !k.is_empty() && !hex32(k) => {
            Err(format!("{place}: {field}: certificate key decoding error"))
        }
        _ => Ok(()),
    }
}

fn only_v4(api: &str, present: bool, field: &str, place: &str) -> Result<(), String> {
    if present && api != V1BETA4 {
        return Err(format!("{place}: unknown field {field:?} (v1beta4 only)"));
    }
    Ok(())
}

fn only_v3(api: &str, present: bool, field: &str, place: &str) -> Result<(), String> {
    if present && api != V1BETA3 {
        return Err(format!(
            "{place}: unknown field {field:?} (removed in v1beta4)"
        ));
    }
    Ok(())
}

fn check_args(api: &str, args: &Option<ExtraArgs>, field: &str, place: &str) -> Result<(), String> {
    match (args, api) {
        (Some(ExtraArgs::List(_)), V1BETA3) => Err(format!(
            "{place}: {field}: v1beta3 wants a map of flag: value, got a list"
        )),
        (Some(ExtraArgs::Map(m)), V1BETA4) if !m.is_empty() => Err(format!(
            "{place}: {field}: v1beta4 wants a list of {{name, value}}, got a map"
        )),
        _ => Ok(()),
    }
}

fn check_node_registration(api: &str, n: &NodeRegistration, place: &str) -> Result<(), String> {
    only_v4(
        api,
        n.image_pull_serial.is_some(),
        "nodeRegistration.imagePullSerial",
        place,
    )?;
    check_args(
        api,
        &n.kubelet_extra_args,
        "nodeRegistration.kubeletExtraArgs",
        place,
    )?;
    if let Some(p) = &n.image_pull_policy
        && !["Always", "IfNotPresent", "Never"].contains(&p.as_str())
    {
        return Err(format!(
            "{place}: nodeRegistration.imagePullPolicy: invalid value {p:?}"
        ));
    }
    for t in n.taints.iter().flatten() {
        if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&t.effect.as_str()) {
            return Err(format!(
                "{place}: nodeRegistration.taints: invalid effect {:?}",
                t.effect
            ));
        }
    }
    Ok(())
}

/// kubeadm's bootstrap token format: `[a-z0-9]{6}.[a-z0-9]{16}` (ValidateToken).
pub fn valid_token(t: &str) -> bool {
    let ok = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    matches!(t.split_once('.'), Some((id, secret)) if ok(id, 6) && ok(secret, 16))
}

fn check_init(c: &InitConfiguration, place: &str) -> Result<(), String> {
    let api = c.api_version.as_str();
    only_v4(api, c.dry_run.is_some(), "dryRun", place)?;
    only_v4(api, c.timeouts.is_some(), "timeouts", place)?;
    check_node_registration(api, &c.node_registration, place)?;
    for (i, t) in c.bootstrap_tokens.iter().flatten().enumerate() {
        if !valid_token(&t.token) {
            return Err(format!(
                "{place}: bootstrapTokens[{i}].token: the bootstrap token is invalid (want [a-z0-9]{{6}}.[a-z0-9]{{16}})"
            ));
        }
        check_duration(&t.ttl, &format!("bootstrapTokens[{i}].ttl"), place)?;
    }
    check_timeouts(&c.timeouts, place)?;
    check_local_endpoint(&c.local_api_endpoint, "localAPIEndpoint", place)?;
    check_certificate_key(&c.certificate_key, "certificateKey", place)
}

fn check_cluster(c: &ClusterConfiguration, place: &str) -> Result<(), String> {
    let api = c.api_version.as_str();
    only_v4(api, c.proxy.is_some(), "proxy", place)?;
    only_v4(
        api,
        c.encryption_algorithm.is_some(),
        "encryptionAlgorithm",
        place,
    )?;
    only_v4(
        api,
        c.certificate_validity_period.is_some(),
        "certificateValidityPeriod",
        place,
    )?;
    only_v4(
        api,
        c.ca_certificate_validity_period.is_some(),
        "caCertificateValidityPeriod",
        place,
    )?;
    only_v4(
        api,
        c.dns.as_ref().is_some_and(|d| d.disabled.is_some()),
        "dns.disabled",
        place,
    )?;
    only_v3(
        api,
        c.api_server.timeout_for_control_plane.is_some(),
        "apiServer.timeoutForControlPlane",
        place,
    )?;
    let comps = [
        ("apiServer", Some(&c.api_server)),
        ("controllerManager", c.controller_manager.as_ref()),
        ("scheduler", c.scheduler.as_ref()),
    ];
    for (name, comp) in comps {
        let Some(comp) = comp else { continue };
        check_args(api, &comp.extra_args, &format!("{name}.extraArgs"), place)?;
        only_v4(
            api,
            comp.extra_envs.is_some(),
            &format!("{name}.extraEnvs"),
            place,
        )?;
        if name != "apiServer" {
            if comp.cert_sans.is_some() {
                return Err(format!("{place}: unknown field \"{name}.certSANs\""));
            }
            if comp.timeout_for_control_plane.is_some() {
                return Err(format!(
                    "{place}: unknown field \"{name}.timeoutForControlPlane\""
                ));
            }
        }
    }
    if let Some(l) = &c.etcd.local {
        check_args(api, &l.extra_args, "etcd.local.extraArgs", place)?;
        only_v4(api, l.extra_envs.is_some(), "etcd.local.extraEnvs", place)?;
    }
    if c.etcd.local.is_some() && c.etcd.external.is_some() {
        return Err(format!(
            "{place}: etcd: local and external are mutually exclusive"
        ));
    }
    check_duration(
        &c.api_server.timeout_for_control_plane,
        "apiServer.timeoutForControlPlane",
        place,
    )?;
    check_duration(
        &c.certificate_validity_period,
        "certificateValidityPeriod",
        place,
    )?;
    check_duration(
        &c.ca_certificate_validity_period,
        "caCertificateValidityPeriod",
        place,
    )?;
    if let Some(ep) = c
        .control_plane_endpoint
        .as_deref()
        .filter(|e| !e.is_empty())
    {
        check_control_plane_endpoint(ep, place)?;
    }
    for san in c.api_server.cert_sans.iter().flatten() {
        let name = san.strip_prefix("*.").unwrap_or(san);
        if san.parse::<std::net::IpAddr>().is_err() && !dns1123_subdomain(name) {
            return Err(format!(
                "{place}: apiServer.certSANs: not a valid IP address, DNS name or wildcard"
            ));
        }
    }
    if let Some(a) = &c.encryption_algorithm
        && ![
            "ECDSA-P256",
            "ECDSA-P384",
            "RSA-2048",
            "RSA-3072",
            "RSA-4096",
        ]
        .contains(&a.as_str())
    {
        return Err(format!("{place}: encryptionAlgorithm: invalid value"));
    }
    Ok(())
}

fn check_join(c: &JoinConfiguration, place: &str) -> Result<(), String> {
    let api = c.api_version.as_str();
    only_v4(api, c.dry_run.is_some(), "dryRun", place)?;
    only_v4(api, c.timeouts.is_some(), "timeouts", place)?;
    only_v3(
        api,
        c.discovery.timeout.is_some(),
        "discovery.timeout",
        place,
    )?;
    check_node_registration(api, &c.node_registration, place)?;
    let d = &c.discovery;
    match (&d.bootstrap_token, &d.file) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "{place}: discovery: bootstrapToken and file are mutually exclusive"
            ));
        }
        (None, None) => {
            return Err(format!(
                "{place}: discovery: bootstrapToken or file must be set"
            ));
        }
        _ => {}
    }
    if let Some(bt) = &d.bootstrap_token {
        if !valid_token(&bt.token) {
            return Err(format!(
                "{place}: discovery.bootstrapToken.token: the bootstrap token is invalid"
            ));
        }
        let ep = bt.api_server_endpoint.as_deref().unwrap_or_default();
        if ep.is_empty() {
            return Err(format!(
                "{place}: discovery.bootstrapToken.apiServerEndpoint: required"
            ));
        }
        if split_host_port(ep).is_none() {
            return Err(format!(
                "{place}: discovery.bootstrapToken.apiServerEndpoint: missing port in address"
            ));
        }
        let hashes = bt.ca_cert_hashes.as_deref().unwrap_or_default();
        if hashes.is_empty() && bt.unsafe_skip_ca_verification != Some(true) {
            return Err(format!(
                "{place}: discovery.bootstrapToken: using token-based discovery without caCertHashes can be unsafe; set unsafeSkipCAVerification to continue"
            ));
        }
        for h in hashes {
            // pubkeypin.Set.Allow lower-cases the format and the value.
            let ok = h.split_once(':').is_some_and(|(f, x)| {
                f.eq_ignore_ascii_case("sha256")
                    && x.len() == 64
                    && x.bytes().all(|b| b.is_ascii_hexdigit())
            });
            if !ok {
                return Err(format!(
                    "{place}: discovery.bootstrapToken.caCertHashes: invalid hash {h:?} (want sha256:<64 hex>)"
                ));
            }
        }
    }
    // Empty means unset: kubeadm defaults it to the discovery token.
    if let Some(t) = &d.tls_bootstrap_token
        && !t.is_empty()
        && !valid_token(t)
    {
        return Err(format!(
            "{place}: discovery.tlsBootstrapToken: the bootstrap token is invalid"
        ));
    }
    if let Some(f) = &d.file {
        // ValidateDiscoveryFile: an https URL, or a file that is there (under the node's root).
        let path = &f.kube_config_path;
        if !path.starts_with("https://") {
            let root = std::env::var("KUBEADM_STANDIN_ROOT").unwrap_or_else(|_| "/".into());
            let on_disk = path.starts_with('/')
                && std::path::Path::new(&root)
                    .join(path.trim_start_matches('/'))
                    .is_file();
            if !on_disk {
                return Err(format!(
                    "{place}: discovery.file.kubeConfigPath: not a valid HTTPS URL or a file on disk"
                ));
            }
        }
    }
    check_duration(&d.timeout, "discovery.timeout", place)?;
    check_timeouts(&c.timeouts, place)?;
    if let Some(cp) = &c.control_plane {
        check_local_endpoint(
            &cp.local_api_endpoint,
            "controlPlane.localAPIEndpoint",
            place,
        )?;
        check_certificate_key(&cp.certificate_key, "controlPlane.certificateKey", place)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOIN3: &str = "apiVersion: kubeadm.k8s.io/v1beta3\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: 10.0.0.1:6443\n    token: abcdef.0123456789abcdef\n    unsafeSkipCAVerification: true\nnodeRegistration:\n  kubeletExtraArgs:\n    cloud-provider: external\n";

    #[test]
    fn reads_a_v1beta3_join() {
        let c = parse(JOIN3, "f").unwrap();
        assert!(c.join.is_some() && c.init.is_none());
    }

    #[test]
    fn refuses_unknown_fields_wrong_shapes_and_versions() {
        let e = parse(&JOIN3.replace("token: abc", "tokn: abc"), "f").unwrap_err();
        assert!(e.contains("discovery.bootstrapToken"), "{e}");
        // v1beta4 wants a list of {name, value}.
        let e = parse(&JOIN3.replace("v1beta3", "v1beta4"), "f").unwrap_err();
        assert!(e.contains("kubeletExtraArgs"), "{e}");
        let e = parse(&JOIN3.replace("v1beta3", "v1beta2"), "f").unwrap_err();
        assert!(e.contains("v1beta2"), "{e}");
        let e = parse(&JOIN3.replace("0123456789abcdef", "short"), "f").unwrap_err();
        assert!(e.contains("token is invalid"), "{e}");
        let e = parse(&format!("{JOIN3}dryRun: true\n"), "f").unwrap_err();
        assert!(e.contains("v1beta4 only"), "{e}");
    }

    #[test]
    fn component_configs_pass_unread() {
        let text = format!(
            "{JOIN3}---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nanything: 1\n"
        );
        assert_eq!(parse(&text, "f").unwrap().other, ["KubeletConfiguration"]);
    }
}
