//! Strict parsing and validation of the kubeadm configuration API, v1beta3 and v1beta4
//! (InitConfiguration, ClusterConfiguration, JoinConfiguration), as CABPK writes it to
//! `/run/kubeadm/*.yaml`. Strict like kubeadm's own decoder: unknown fields, wrong kinds or
//! apiVersions and missing required fields are errors naming the document and field path.
//! Field list: docs/formats.md (e.2). Error messages never carry field values.

// Parses untrusted input: no indexing that could panic (str slicing is denied crate-wide).
#![deny(clippy::indexing_slicing)]

use crate::base::error::{Error, ErrorKind, Result, Stage};
use crate::formats::yaml;

pub const GROUP: &str = "kubeadm.k8s.io";

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ApiVersion {
    V1beta3,
    V1beta4,
}

impl ApiVersion {
    fn parse(s: &str) -> Option<ApiVersion> {
        match s {
            "kubeadm.k8s.io/v1beta3" => Some(ApiVersion::V1beta3),
            "kubeadm.k8s.io/v1beta4" => Some(ApiVersion::V1beta4),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            ApiVersion::V1beta3 => "kubeadm.k8s.io/v1beta3",
            ApiVersion::V1beta4 => "kubeadm.k8s.io/v1beta4",
        }
    }
}

/// One parsed kubeadm config file (all its documents).
#[derive(Debug, Clone, Default)]
pub struct KubeadmConfig {
    pub init: Option<Doc<InitConfiguration>>,
    pub cluster: Option<Doc<ClusterConfiguration>>,
    pub join: Option<Doc<JoinConfiguration>>,
    /// Other documents kubeadm also accepts in the file: the component configs
    /// (KubeletConfiguration, KubeProxyConfiguration; their apiVersion checked, their fields
    /// left to the node's kubeadm) and v1beta4's ResetConfiguration and UpgradeConfiguration
    /// (checked, then ignored as `kubeadm init`/`join` ignore them): `(document index, kind)`.
    pub component_configs: Vec<(usize, String)>,
}

/// A typed document with its 1-based index in the file and its API version.
#[derive(Debug, Clone)]
pub struct Doc<T> {
    pub index: usize,
    pub version: ApiVersion,
    pub spec: T,
}

impl KubeadmConfig {
    /// `certificatesDir` (default `/etc/kubernetes/pki`).
    pub fn certificates_dir(&self) -> String {
        self.cluster
            .as_ref()
            .and_then(|c| c.spec.certificates_dir.clone())
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| "/etc/kubernetes/pki".to_string())
    }

    /// The control-plane endpoint a join must reach first (`host:port`), from
    /// `discovery.bootstrapToken.apiServerEndpoint`.
    pub fn join_endpoint(&self) -> Option<String> {
        let j = self.join.as_ref()?;
        j.spec
            .discovery
            .bootstrap_token
            .as_ref()?
            .api_server_endpoint
            .clone()
            .filter(|e| !e.is_empty())
    }
}

// The documents' types live in `api`; re-exported so `config::InitConfiguration` etc. keep working.
pub use crate::kubeadm::api::*;

// ---- parsing -------------------------------------------------------------------------

/// Parse a kubeadm config file (one or more YAML documents). `source` names the file in errors.
pub fn parse(text: &str, source: &str) -> Result<KubeadmConfig> {
    let mut cfg = KubeadmConfig::default();
    for (i, node) in crate::formats::yaml::read_all(yaml::Doc::new(Stage::Kubeadm, source), text)?
        .iter()
        .enumerate()
    {
        let index = i + 1;
        let place = |what: &str| format!("{source}: document {index}{what}");
        if matches!(node.value, yaml::Value::Null) {
            continue; // empty document (e.g. a trailing `---`)
        }
        if !matches!(node.value, yaml::Value::Map(_)) {
            return Err(Error::invalid(
                Stage::Kubeadm,
                place(""),
                "a document must be a mapping",
            ));
        }
        let field = |k: &str| node.get(k).and_then(yaml::Node::as_str).map(str::to_string);
        let kind = field("kind").ok_or_else(|| {
            Error::invalid(Stage::Kubeadm, place(""), "missing required field `kind`")
        })?;
        let api = field("apiVersion").ok_or_else(|| {
            Error::invalid(
                Stage::Kubeadm,
                place(&format!(" ({kind})")),
                "missing required field `apiVersion`",
            )
        })?;
        let value = node;
        let here = place(&format!(" ({kind})"));
        if let Some(group) = component_config_api(&kind) {
            // kubeadm refuses a component config under any other apiVersion.
            if api != group {
                return Err(Error::invalid(
                    Stage::Kubeadm,
                    format!("{here}: apiVersion"),
                    format!("a {kind} is `{group}`, not `{api}`"),
                ));
            }
            cfg.component_configs.push((index, kind));
            continue;
        }
        let version = ApiVersion::parse(&api).ok_or_else(|| {
            let (kind, message) = if api.starts_with(&format!("{GROUP}/")) {
                (
                    ErrorKind::Unsupported,
                    format!(
                        "unsupported kubeadm API version `{api}` (supported: kubeadm.k8s.io/v1beta3, kubeadm.k8s.io/v1beta4)"
                    ),
                )
            } else {
                (
                    ErrorKind::Invalid,
                    format!(
                        "`{api}` is not a kubeadm API version (expected kubeadm.k8s.io/v1beta3 or v1beta4)"
                    ),
                )
            };
            Error::of(kind, Stage::Kubeadm, format!("{here}: apiVersion"), message)
        })?;
        match kind.as_str() {
            "InitConfiguration" => {
                set_once(&mut cfg.init, typed(value, &here, index, version)?, &here)?
            }
            "ClusterConfiguration" => set_once(
                &mut cfg.cluster,
                typed(value, &here, index, version)?,
                &here,
            )?,
            "JoinConfiguration" => {
                set_once(&mut cfg.join, typed(value, &here, index, version)?, &here)?
            }
            "ResetConfiguration" | "UpgradeConfiguration" if version == ApiVersion::V1beta4 => {
                check_ignored(value, &kind, &here, index)?;
                cfg.component_configs.push((index, kind));
            }
            other => {
                return Err(Error::unsupported(
                    Stage::Kubeadm,
                    format!("{here}: kind"),
                    format!(
                        "unsupported kind `{other}` (expected InitConfiguration, ClusterConfiguration or JoinConfiguration)"
                    ),
                ));
            }
        }
    }
    validate(&cfg, source)?;
    Ok(cfg)
}

/// v1beta4's ResetConfiguration and UpgradeConfiguration: read strictly (as kubeadm does),
/// then ignored, as `kubeadm init` and `join` ignore them.
fn check_ignored(value: &yaml::Node, kind: &str, here: &str, index: usize) -> Result<()> {
    let version = ApiVersion::V1beta4;
    let timeouts = if kind == "ResetConfiguration" {
        typed::<ResetConfiguration>(value, here, index, version)?
            .spec
            .timeouts
    } else {
        typed::<UpgradeConfiguration>(value, here, index, version)?
            .spec
            .timeouts
    };
    let c = Check {
        place: here.to_string(),
        version,
        _p: std::marker::PhantomData,
    };
    c.timeouts(&timeouts)
}

/// The one apiVersion kubeadm reads a component config of this kind under.
fn component_config_api(kind: &str) -> Option<&'static str> {
    match kind {
        "KubeletConfiguration" => Some("kubelet.config.k8s.io/v1beta1"),
        "KubeProxyConfiguration" => Some("kubeproxy.config.k8s.io/v1alpha1"),
        _ => None,
    }
}

fn set_once<T>(slot: &mut Option<Doc<T>>, doc: Doc<T>, place: &str) -> Result<()> {
    if slot.is_some() {
        return Err(Error::invalid(
            Stage::Kubeadm,
            place,
            "the same kind appears twice in the file",
        ));
    }
    *slot = Some(doc);
    Ok(())
}

fn typed<T: serde::de::DeserializeOwned>(
    value: &yaml::Node,
    place: &str,
    index: usize,
    version: ApiVersion,
) -> Result<Doc<T>> {
    let spec: T = yaml::deserialize(value).map_err(|e| {
        let at = if e.path == "." {
            place.to_string()
        } else {
            format!("{place}: {}", e.path)
        };
        Error::invalid(Stage::Kubeadm, at, sanitize(&e.message))
    })?;
    Ok(Doc {
        index,
        version,
        spec,
    })
}

/// Drop quoted values from a serde message (`invalid type: string "…"`): they may be secrets.
fn sanitize(msg: &str) -> String {
    let mut out = String::new();
    let mut in_quote = false;
    for c in msg.chars() {
        if c == '"' {
            if in_quote {
                out.push_str("…\"");
            } else {
                out.push('"');
            }
            in_quote = !in_quote;
        } else if !in_quote {
            out.push(c);
        }
    }
    crate::base::redact::redact_text(&out)
}

// ---- semantic validation (what kubeadm's validation would reject) ----------------------

struct Check<'a> {
    place: String,
    version: ApiVersion,
    _p: std::marker::PhantomData<&'a ()>,
}

impl Check<'_> {
    fn fail(&self, path: &str, msg: impl Into<String>) -> Error {
        Error::invalid(
            Stage::Kubeadm,
            format!("{}: {path}", self.place),
            msg.into(),
        )
    }
    fn only_v1beta4<T>(&self, v: &Option<T>, path: &str) -> Result<()> {
        self.only_in(ApiVersion::V1beta4, v, path)
    }
    fn only_v1beta3<T>(&self, v: &Option<T>, path: &str) -> Result<()> {
        self.only_in(ApiVersion::V1beta3, v, path)
    }
    /// A field set that only `version` has.
    fn only_in<T>(&self, version: ApiVersion, v: &Option<T>, path: &str) -> Result<()> {
        if v.is_none() || self.version == version {
            return Ok(());
        }
        Err(self.fail(
            path,
            match version {
                ApiVersion::V1beta4 => {
                    "unknown field in kubeadm.k8s.io/v1beta3 (it exists only in v1beta4)"
                }
                ApiVersion::V1beta3 => {
                    "unknown field in kubeadm.k8s.io/v1beta4 (removed after v1beta3; see `timeouts`)"
                }
            },
        ))
    }
    fn args(&self, a: &Option<Args>, path: &str) -> Result<()> {
        match (a, self.version) {
            (Some(Args::List(_)), ApiVersion::V1beta3) => {
                Err(self.fail(path, "v1beta3 expects a map of strings, not a list"))
            }
            (Some(Args::Map(_)), ApiVersion::V1beta4) => {
                Err(self.fail(path, "v1beta4 expects a list of {name, value}, not a map"))
            }
            _ => Ok(()),
        }
    }
    fn duration(&self, d: &Option<String>, path: &str) -> Result<()> {
        match d {
            Some(s) if !is_go_duration(s) => {
                Err(self.fail(path, "not a duration (Go syntax, e.g. 4m0s)"))
            }
            _ => Ok(()),
        }
    }
    /// A duration field that only `version` has.
    fn duration_only_in(&self, version: ApiVersion, d: &Option<String>, path: &str) -> Result<()> {
        self.only_in(version, d, path)?;
        self.duration(d, path)
    }
    fn node_registration(&self, n: &Option<NodeRegistration>) -> Result<()> {
        let Some(n) = n else { return Ok(()) };
        self.args(&n.kubelet_extra_args, "nodeRegistration.kubeletExtraArgs")?;
        self.only_v1beta4(&n.image_pull_serial, "nodeRegistration.imagePullSerial")
    }
    fn timeouts(&self, t: &Option<Timeouts>) -> Result<()> {
        self.only_v1beta4(t, "timeouts")?;
        if let Some(t) = t {
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
                self.duration(v, &format!("timeouts.{name}"))?;
            }
        }
        Ok(())
    }
    fn component(&self, c: &Option<ControlPlaneComponent>, name: &str) -> Result<()> {
        if let Some(c) = c {
            self.args(&c.extra_args, &format!("{name}.extraArgs"))?;
            self.only_v1beta4(&c.extra_envs, &format!("{name}.extraEnvs"))?;
        }
        Ok(())
    }
    fn endpoint(&self, e: &Option<ApiEndpoint>, path: &str) -> Result<()> {
        if let Some(ApiEndpoint {
            advertise_address: Some(a),
            ..
        }) = e
            && !a.is_empty()
            && a.parse::<std::net::IpAddr>().is_err()
        {
            return Err(self.fail(&format!("{path}.advertiseAddress"), "not an IP address"));
        }
        if let Some(ApiEndpoint {
            bind_port: Some(p), ..
        }) = e
            && !(0..=65535).contains(p)
        {
            return Err(self.fail(&format!("{path}.bindPort"), "port out of range"));
        }
        Ok(())
    }
}

fn validate(cfg: &KubeadmConfig, source: &str) -> Result<()> {
    let check = |index: usize, kind: &str, version: ApiVersion| Check {
        place: format!("{source}: document {index} ({kind})"),
        version,
        _p: std::marker::PhantomData,
    };
    if let Some(d) = &cfg.init {
        validate_init(&check(d.index, "InitConfiguration", d.version), &d.spec)?;
    }
    if let Some(d) = &cfg.cluster {
        validate_cluster(&check(d.index, "ClusterConfiguration", d.version), &d.spec)?;
    }
    if let Some(d) = &cfg.join {
        validate_join(&check(d.index, "JoinConfiguration", d.version), &d.spec)?;
    }
    Ok(())
}

/// What kubeadm rejects in an InitConfiguration.
fn validate_init(c: &Check<'_>, s: &InitConfiguration) -> Result<()> {
    c.only_v1beta4(&s.dry_run, "dryRun")?;
    c.timeouts(&s.timeouts)?;
    c.node_registration(&s.node_registration)?;
    c.endpoint(&s.local_api_endpoint, "localAPIEndpoint")?;
    for (i, t) in s.bootstrap_tokens.iter().flatten().enumerate() {
        if !crate::base::redact::is_bootstrap_token(&t.token) {
            return Err(c.fail(
                &format!("bootstrapTokens[{i}].token"),
                "not a bootstrap token ([a-z0-9]{6}.[a-z0-9]{16})",
            ));
        }
        c.duration(&t.ttl, &format!("bootstrapTokens[{i}].ttl"))?;
    }
    if let Some(k) = &s.certificate_key
        && !is_certificate_key(k)
    {
        return Err(c.fail(
            "certificateKey",
            "must be 64 hex characters (a 32-byte AES key)",
        ));
    }
    Ok(())
}

/// What kubeadm rejects in a ClusterConfiguration.
fn validate_cluster(c: &Check<'_>, s: &ClusterConfiguration) -> Result<()> {
    if let Some(ep) = &s.control_plane_endpoint
        && !ep.is_empty()
        && split_host_port(ep).is_none()
    {
        return Err(c.fail(
            "controlPlaneEndpoint",
            "expected host or host:port with a port in 1..65535",
        ));
    }
    if let Some(a) = &s.api_server {
        c.args(&a.extra_args, "apiServer.extraArgs")?;
        c.only_v1beta4(&a.extra_envs, "apiServer.extraEnvs")?;
        c.duration_only_in(
            ApiVersion::V1beta3,
            &a.timeout_for_control_plane,
            "apiServer.timeoutForControlPlane",
        )?;
        for (i, san) in a.cert_sans.iter().flatten().enumerate() {
            if !is_ip_or_dns(san) {
                return Err(c.fail(
                    &format!("apiServer.certSANs[{i}]"),
                    "not an IP address or DNS name",
                ));
            }
        }
    }
    c.component(&s.controller_manager, "controllerManager")?;
    c.component(&s.scheduler, "scheduler")?;
    if let Some(e) = &s.etcd {
        if e.local.is_some() && e.external.is_some() {
            return Err(c.fail("etcd", "local and external are mutually exclusive"));
        }
        if let Some(l) = &e.local {
            c.args(&l.extra_args, "etcd.local.extraArgs")?;
            c.only_v1beta4(&l.extra_envs, "etcd.local.extraEnvs")?;
        }
    }
    if let Some(dns) = &s.dns {
        c.only_v1beta4(&dns.disabled, "dns.disabled")?;
    }
    c.only_v1beta4(&s.proxy, "proxy")?;
    c.only_v1beta4(&s.encryption_algorithm, "encryptionAlgorithm")?;
    for (v, path) in [
        (&s.certificate_validity_period, "certificateValidityPeriod"),
        (
            &s.ca_certificate_validity_period,
            "caCertificateValidityPeriod",
        ),
    ] {
        c.duration_only_in(ApiVersion::V1beta4, v, path)?;
    }
    Ok(())
}

/// What kubeadm rejects in a JoinConfiguration (discovery above all).
fn validate_join(c: &Check<'_>, s: &JoinConfiguration) -> Result<()> {
    c.only_v1beta4(&s.dry_run, "dryRun")?;
    c.timeouts(&s.timeouts)?;
    c.node_registration(&s.node_registration)?;
    let disc = &s.discovery;
    c.only_v1beta3(&disc.timeout, "discovery.timeout")?;
    c.duration(&disc.timeout, "discovery.timeout")?;
    match (&disc.bootstrap_token, &disc.file) {
        (None, None) => {
            return Err(c.fail(
                "discovery",
                "a join needs discovery.bootstrapToken or discovery.file (none given)",
            ));
        }
        (Some(_), Some(_)) => {
            return Err(c.fail(
                "discovery",
                "bootstrapToken and file are mutually exclusive",
            ));
        }
        (Some(bt), None) => {
            if !crate::base::redact::is_bootstrap_token(&bt.token) {
                return Err(c.fail(
                    "discovery.bootstrapToken.token",
                    "not a bootstrap token ([a-z0-9]{6}.[a-z0-9]{16})",
                ));
            }
            match bt.api_server_endpoint.as_deref() {
                None | Some("") => {
                    return Err(c.fail(
                        "discovery.bootstrapToken.apiServerEndpoint",
                        "missing required field",
                    ));
                }
                Some(ep) if split_host_port(ep).is_none_or(|(_, p)| p.is_none()) => {
                    return Err(c.fail(
                        "discovery.bootstrapToken.apiServerEndpoint",
                        "expected host:port",
                    ));
                }
                _ => {}
            }
            let hashes = bt.ca_cert_hashes.as_deref().unwrap_or_default();
            for (i, h) in hashes.iter().enumerate() {
                if !is_ca_cert_hash(h) {
                    return Err(c.fail(
                        &format!("discovery.bootstrapToken.caCertHashes[{i}]"),
                        "expected sha256:<64 hex digits>",
                    ));
                }
            }
            if hashes.is_empty() && bt.unsafe_skip_ca_verification != Some(true) {
                return Err(c.fail(
                    "discovery.bootstrapToken",
                    "caCertHashes is empty and unsafeSkipCAVerification is not true: kubeadm would refuse to join",
                ));
            }
        }
        (None, Some(f)) => {
            if !f.kube_config_path.starts_with('/') && !f.kube_config_path.starts_with("https://") {
                return Err(c.fail(
                    "discovery.file.kubeConfigPath",
                    "must be an absolute path or an https URL",
                ));
            }
        }
    }
    // Empty is kubeadm's "unset": it defaults to the discovery token.
    if let Some(tls) = &disc.tls_bootstrap_token
        && !tls.is_empty()
        && !crate::base::redact::is_bootstrap_token(tls)
    {
        return Err(c.fail(
            "discovery.tlsBootstrapToken",
            "not a bootstrap token ([a-z0-9]{6}.[a-z0-9]{16})",
        ));
    }
    if let Some(cp) = &s.control_plane {
        c.endpoint(&cp.local_api_endpoint, "controlPlane.localAPIEndpoint")?;
        if let Some(k) = &cp.certificate_key
            && !k.is_empty()
            && !is_certificate_key(k)
        {
            return Err(c.fail(
                "controlPlane.certificateKey",
                "must be 64 hex characters (a 32-byte AES key)",
            ));
        }
    }
    Ok(())
}

/// `sha256:` + 64 hex digits; kubeadm accepts the prefix and the hex in any case.
pub fn is_ca_cert_hash(h: &str) -> bool {
    // `get`, not `[..7]`: a multi-byte character across byte 7 must not panic.
    h.len() == 71
        && h.get(..7)
            .is_some_and(|p| p.eq_ignore_ascii_case("sha256:"))
        && h.get(7..)
            .is_some_and(|x| x.bytes().all(|c| c.is_ascii_hexdigit()))
}

fn is_certificate_key(k: &str) -> bool {
    k.len() == 64 && k.bytes().all(|c| c.is_ascii_hexdigit())
}

/// `host[:port]` (IPv6 in brackets); `None` if malformed.
pub fn split_host_port(s: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        match after {
            "" => (h, None),
            p => (h, Some(p.strip_prefix(':')?)),
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => (s, None), // bare IPv6
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    if host.is_empty() || !is_ip_or_dns(host) {
        return None;
    }
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p > 0)?),
        None => None,
    };
    Some((host.to_string(), port))
}

fn is_ip_or_dns(s: &str) -> bool {
    if s.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let s = s.strip_prefix("*.").unwrap_or(s);
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// A Go duration as whole seconds, rounded up (`1m30s` → 90, `500ms` → 1); None for a
/// negative or unparsable one.
pub fn go_duration_secs(s: &str) -> Option<u64> {
    if !is_go_duration(s) || s.starts_with('-') {
        return None;
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() && rest != "0" {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, after) = rest.split_at_checked(num_len)?;
        let (unit, scale) = [
            ("ns", 1.0),
            ("us", 1e3),
            ("µs", 1e3),
            ("ms", 1e6),
            ("h", 3.6e12),
            ("m", 6e10),
            ("s", 1e9),
        ]
        .into_iter()
        .find(|(u, _)| after.starts_with(u))?;
        nanos += num.parse::<f64>().ok()? * scale;
        rest = after.strip_prefix(unit)?;
    }
    Some((nanos / 1e9).ceil().min(u64::MAX as f64) as u64)
}

impl KubeadmConfig {
    /// How long kubeadm itself may wait in one `init` or `join`, by the v1beta4 `timeouts`
    /// the config sets (the waits it makes one after another, summed); None when it sets
    /// none. The agent never stops kubeadm before kubeadm's own deadlines would.
    pub fn own_waits_secs(&self) -> Option<u64> {
        let t = match (&self.init, &self.join) {
            (Some(i), _) => i.spec.timeouts.as_ref(),
            (None, Some(j)) => j.spec.timeouts.as_ref(),
            _ => None,
        }?;
        let waits = [
            &t.discovery,
            &t.tls_bootstrap,
            &t.kubelet_health_check,
            &t.control_plane_component_health_check,
            &t.etcd_api_call,
            &t.kubernetes_api_call,
        ];
        let secs: Vec<u64> = waits
            .iter()
            .filter_map(|w| w.as_deref().and_then(go_duration_secs))
            .collect();
        (!secs.is_empty()).then(|| secs.iter().fold(0u64, |a, b| a.saturating_add(*b)))
    }
}

/// Go `time.ParseDuration` syntax: `[-+]?(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+` or `0`.
pub fn is_go_duration(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, after) = rest.split_at_checked(num_len).unwrap_or((rest, ""));
        if num.is_empty() || num.starts_with('.') && num.len() == 1 || num.matches('.').count() > 1
        {
            return false;
        }
        let unit = ["ns", "us", "µs", "ms", "s", "m", "h"]
            .iter()
            .find(|u| after.starts_with(**u) && !(**u == "m" && after.starts_with("ms")));
        match unit.and_then(|u| after.strip_prefix(*u)) {
            Some(r) => rest = r,
            None => return false,
        }
    }
    true
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::string_slice)]
mod tests {
    #[test]
    fn go_durations_in_seconds() {
        for (text, secs) in [
            ("90s", Some(90)),
            ("1m30s", Some(90)),
            ("1h", Some(3600)),
            ("500ms", Some(1)),
            ("1.5m", Some(90)),
            ("0", Some(0)),
            ("-5s", None),
            ("5", None),
            ("5x", None),
        ] {
            assert_eq!(super::go_duration_secs(text), secs, "{text}");
        }
    }

    #[test]
    fn own_waits_add_up_the_timeouts_the_config_sets() {
        let init = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\ntimeouts:\n  controlPlaneComponentHealthCheck: 20m\n  kubeletHealthCheck: 10m\n";
        assert_eq!(
            super::parse(init, "t").unwrap().own_waits_secs(),
            Some(1800)
        );
        let join = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: 10.0.0.1:6443\n    token: abcdef.0123456789abcdef\n    unsafeSkipCAVerification: true\ntimeouts:\n  discovery: 2m\n";
        assert_eq!(super::parse(join, "t").unwrap().own_waits_secs(), Some(120));
        let none = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n";
        assert_eq!(super::parse(none, "t").unwrap().own_waits_secs(), None);
    }

    #[test]
    fn a_ca_cert_hash_with_a_multi_byte_character_is_refused_not_a_panic() {
        // 71 bytes with 'é' across byte 7, and one across the hex part.
        let across_prefix = format!("sha256é{}", "0".repeat(63));
        assert_eq!(across_prefix.len(), 71);
        assert!(!is_ca_cert_hash(&across_prefix));
        let in_hex = format!("sha256:é{}", "0".repeat(62));
        assert_eq!(in_hex.len(), 71);
        assert!(!is_ca_cert_hash(&in_hex));
        assert!(is_ca_cert_hash(&format!("SHA256:{}", "aB".repeat(32))));
        assert!(!is_go_duration("1é"));
        assert!(is_go_duration("1h30m"));
    }

    use super::*;

    const CORPUS_INIT: &str = "---\napiServer: {}\napiVersion: kubeadm.k8s.io/v1beta3\nclusterName: test\ncontrolPlaneEndpoint: 127.0.0.1:6443\ncontrollerManager: {}\ndns: {}\netcd: {}\nkind: ClusterConfiguration\nkubernetesVersion: v1.26.6\nnetworking:\n  dnsDomain: cluster.local\n  podSubnet: 192.168.0.0/16\nscheduler: {}\n\n---\napiVersion: kubeadm.k8s.io/v1beta3\nkind: InitConfiguration\nlocalAPIEndpoint: {}\nnodeRegistration:\n  imagePullPolicy: IfNotPresent\n  taints: null\n";

    const WORKER_V1BETA4: &str = "---\napiVersion: kubeadm.k8s.io/v1beta4\ncaCertPath: /etc/kubernetes/pki/ca.crt\ndiscovery:\n  bootstrapToken:\n    apiServerEndpoint: 10.0.0.10:6443\n    caCertHashes:\n    - sha256:4b0f6e0c8b1b36c1d77a9b5a4e6a5bb86bb3f0f3b1b2f8a7e2b5f6b0f4e2f8aa\n    token: abcdef.0123456789abcdef\nkind: JoinConfiguration\nnodeRegistration:\n  kubeletExtraArgs:\n  - name: cloud-provider\n    value: external\n  name: '{{ local_hostname }}'\n  taints:\n  - effect: NoSchedule\n    key: node.cluster.x-k8s.io/uninitialized\ntimeouts:\n  discovery: 5m0s\n";

    #[test]
    fn corpus_init_parses() {
        let c = parse(CORPUS_INIT, "kubeadm.yaml").unwrap();
        let cl = c.cluster.as_ref().unwrap();
        assert_eq!(cl.index, 1);
        assert_eq!(cl.version, ApiVersion::V1beta3);
        assert_eq!(
            cl.spec.control_plane_endpoint.as_deref(),
            Some("127.0.0.1:6443")
        );
        let init = c.init.as_ref().unwrap();
        assert_eq!(init.index, 2);
        assert_eq!(
            init.spec
                .node_registration
                .as_ref()
                .unwrap()
                .image_pull_policy,
            Some(PullPolicy::IfNotPresent)
        );
        assert!(c.join.is_none());
        assert_eq!(c.certificates_dir(), "/etc/kubernetes/pki");
    }

    #[test]
    fn worker_join_v1beta4_parses() {
        let c = parse(WORKER_V1BETA4, "join.yaml").unwrap();
        assert_eq!(c.join_endpoint().as_deref(), Some("10.0.0.10:6443"));
        let j = c.join.unwrap().spec;
        assert!(
            matches!(j.node_registration.unwrap().kubelet_extra_args, Some(Args::List(ref l)) if l[0].name == "cloud-provider")
        );
    }

    fn error_of(text: &str) -> Error {
        parse(text, "f.yaml").unwrap_err()
    }

    #[test]
    fn unknown_field_names_document_and_path() {
        let bad = CORPUS_INIT.replace("  taints: null", "  taints: null\n  bogus: 1");
        let e = error_of(&bad);
        assert_eq!(
            e.place,
            "f.yaml: document 2 (InitConfiguration): nodeRegistration.bogus"
        );
        assert!(e.message.contains("unknown field `bogus`"), "{e}");
    }

    #[test]
    fn wrong_api_version_and_kind() {
        let e = error_of(&CORPUS_INIT.replace(
            "v1beta3\nkind: InitConfiguration",
            "v1beta2\nkind: InitConfiguration",
        ));
        assert_eq!(
            e.place,
            "f.yaml: document 2 (InitConfiguration): apiVersion"
        );
        assert_eq!(e.kind(), crate::base::error::ErrorKind::Unsupported, "{e}");
        let e =
            error_of(&CORPUS_INIT.replace("kind: InitConfiguration", "kind: ResetConfigurationX"));
        assert_eq!(e.place, "f.yaml: document 2 (ResetConfigurationX): kind");
        let e = error_of("apiVersion: v1\nkind: Pod\n");
        assert_eq!(e.kind(), crate::base::error::ErrorKind::Invalid, "{e}");
        assert!(e.message.contains("not a kubeadm API version"), "{e}");
        let e = error_of("apiVersion: kubeadm.k8s.io/v1beta3\n");
        assert!(e.message.contains("`kind`"), "{e}");
    }

    #[test]
    fn version_specific_fields() {
        // v1beta4 list-style args in a v1beta3 document.
        let e = error_of(&WORKER_V1BETA4.replace("v1beta4", "v1beta3"));
        assert!(
            e.place.ends_with("nodeRegistration.kubeletExtraArgs") || e.place.ends_with("timeouts"),
            "{e}"
        );
        // v1beta3-only apiServer.timeoutForControlPlane in v1beta4.
        let e = error_of(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\napiServer:\n  timeoutForControlPlane: 4m0s\n",
        );
        assert_eq!(
            e.place,
            "f.yaml: document 1 (ClusterConfiguration): apiServer.timeoutForControlPlane"
        );
        // Map-style args in v1beta4.
        let e = error_of(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\napiServer:\n  extraArgs:\n    cloud-provider: external\n",
        );
        assert!(e.message.contains("list"), "{e}");
    }

    #[test]
    fn missing_required_fields() {
        let e = error_of(
            "apiVersion: kubeadm.k8s.io/v1beta3\nkind: JoinConfiguration\nnodeRegistration: {}\n",
        );
        assert!(e.message.contains("missing field `discovery`"), "{e}");
        let e = error_of(
            "apiVersion: kubeadm.k8s.io/v1beta3\nkind: JoinConfiguration\ndiscovery: {}\n",
        );
        assert!(
            e.place.ends_with(": discovery")
                && e.message.contains("bootstrapToken or discovery.file"),
            "{e}"
        );
        let e = error_of(
            &WORKER_V1BETA4
                .replace("    - effect: NoSchedule\n", "    - value: x\n")
                .replace("  - effect: NoSchedule\n", "  - value: x\n"),
        );
        assert!(
            e.place.ends_with("nodeRegistration.taints[0]") && e.message.contains("missing field"),
            "{e}"
        );
    }

    #[test]
    fn discovery_rules_and_no_secret_in_errors() {
        let e = error_of(&WORKER_V1BETA4.replace("    caCertHashes:\n    - sha256:4b0f6e0c8b1b36c1d77a9b5a4e6a5bb86bb3f0f3b1b2f8a7e2b5f6b0f4e2f8aa\n", ""));
        assert!(e.message.contains("unsafeSkipCAVerification"), "{e}");
        let e =
            error_of(&WORKER_V1BETA4.replace("abcdef.0123456789abcdef", "ABCDEF-secretvalue-XYZ"));
        assert!(e.place.ends_with("discovery.bootstrapToken.token"));
        assert!(!e.to_string().contains("secretvalue"));
        // A token in a field of the wrong type: the serde message must not echo it.
        let e = error_of(&WORKER_V1BETA4.replace(
            "timeouts:\n  discovery: 5m0s",
            "dryRun: \"abcdef.0123456789abcdef-leak\"",
        ));
        assert!(!e.to_string().contains("0123456789abcdef"), "{e}");
        let e = error_of(&WORKER_V1BETA4.replace("10.0.0.10:6443", "10.0.0.10"));
        assert!(e.place.ends_with("apiServerEndpoint"), "{e}");
    }

    #[test]
    fn duplicates_and_empty_docs() {
        let twice = format!(
            "{CORPUS_INIT}---\napiVersion: kubeadm.k8s.io/v1beta3\nkind: InitConfiguration\n"
        );
        assert!(error_of(&twice).message.contains("twice"));
        let trailing = format!("{CORPUS_INIT}---\n");
        parse(&trailing, "x").unwrap();
        let kubelet = format!(
            "{CORPUS_INIT}---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
        );
        assert_eq!(
            parse(&kubelet, "x").unwrap().component_configs,
            vec![(3, "KubeletConfiguration".to_string())]
        );
    }

    #[test]
    fn go_durations_and_host_ports() {
        for d in ["4m0s", "50s", "1h30m", "0", "1.5h", "300ms"] {
            assert!(is_go_duration(d), "{d}");
        }
        for d in ["", "4", "m", "5 m", "1x"] {
            assert!(!is_go_duration(d), "{d}");
        }
        assert_eq!(
            split_host_port("10.0.0.1:6443"),
            Some(("10.0.0.1".into(), Some(6443)))
        );
        assert_eq!(
            split_host_port("[fd00::1]:6443"),
            Some(("fd00::1".into(), Some(6443)))
        );
        assert_eq!(
            split_host_port("api.example.com"),
            Some(("api.example.com".into(), None))
        );
        assert_eq!(split_host_port("host:0"), None);
        assert_eq!(split_host_port("bad_host:1"), None);
    }
}
