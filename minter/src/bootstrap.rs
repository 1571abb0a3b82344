//! Userdata in exactly the shape CABPK writes (docs/formats.md a.1–a.5): jinja header,
//! `write_files` in CABPK's grammar (PKI for init/control-plane only, then the kubeadm config
//! and the placeholder), `runcmd` with the kubeadm line and the success sentinel, then
//! `users`. kubeadm configs are the typed documents of `libnodeagent::kubeadm::api`, serialized as CABPK
//! does (a.4, via `libnodeagent::formats::goyaml`).

use super::pki::Pki;
use libnodeagent::base::error::{Error, ErrorKind, Result, Stage};
use libnodeagent::kubeadm::api as kapi;

pub const SENTINEL: &str = "echo success > /run/cluster-api/bootstrap-success.complete";
pub const PLACEHOLDER: &str = "This placeholder file is used to create the /run/cluster-api sub directory in a way that is compatible with both Linux and Windows (mkdir -p /run/cluster-api does not work with Windows)";
pub const INIT_CONFIG_PATH: &str = "/run/kubeadm/kubeadm.yaml";
pub const JOIN_CONFIG_PATH: &str = "/run/kubeadm/kubeadm-join-config.yaml";
pub const PKI_DIR: &str = "/etc/kubernetes/pki";
/// CAPV templates name the node after the metadata's local-hostname, rendered on the node.
pub const NODE_NAME_JINJA: &str = "{{ local_hostname }}";
pub const UNINITIALIZED_TAINT: &str = "node.cluster.x-k8s.io/uninitialized";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Init,
    ControlPlane,
    Worker,
}

impl Role {
    pub fn parse(v: &str) -> Result<Role> {
        match v {
            "init" => Ok(Role::Init),
            "control-plane" => Ok(Role::ControlPlane),
            "worker" => Ok(Role::Worker),
            _ => Err(Error::invalid(
                Stage::Usage,
                "--role",
                format!("unknown role {v:?}: use init, control-plane or worker"),
            )),
        }
    }
    pub fn ships_pki(self) -> bool {
        self != Role::Worker
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeadmApi {
    V1beta3,
    V1beta4,
}

impl KubeadmApi {
    /// CABPK's choice by the Machine's minor version: < 1.31 → v1beta3, else v1beta4.
    pub fn for_minor(minor: u32) -> KubeadmApi {
        if minor >= 31 {
            KubeadmApi::V1beta4
        } else {
            KubeadmApi::V1beta3
        }
    }
    pub fn parse(v: &str, minor: u32) -> Result<KubeadmApi> {
        let api = match v {
            "v1beta3" => KubeadmApi::V1beta3,
            "v1beta4" => KubeadmApi::V1beta4,
            _ => {
                return Err(Error::invalid(
                    Stage::Usage,
                    "--kubeadm-api",
                    format!("unknown kubeadm API {v:?}: use v1beta3 or v1beta4"),
                ));
            }
        };
        if api == KubeadmApi::V1beta4 && minor < 31 {
            return Err(Error::invalid(
                Stage::Usage,
                "--kubeadm-api",
                format!(
                    "kubeadm 1.{minor} does not accept v1beta4 without --allow-experimental-api (GA in 1.31)"
                ),
            ));
        }
        Ok(api)
    }
    pub fn api_version(self) -> &'static str {
        match self {
            KubeadmApi::V1beta3 => "kubeadm.k8s.io/v1beta3",
            KubeadmApi::V1beta4 => "kubeadm.k8s.io/v1beta4",
        }
    }
}

/// `users` entry (docs/formats.md a.6), printed raw: callers validate.
#[derive(Debug, Clone, PartialEq)]
pub struct User {
    pub name: String,
    pub sudo: Option<String>,
    pub ssh_authorized_keys: Vec<String>,
}

/// Everything one node's userdata depends on.
#[derive(Debug, Clone)]
pub struct Spec {
    pub role: Role,
    pub cluster: String,
    /// `host:port` as the Cluster's controlPlaneEndpoint.
    pub endpoint: String,
    pub kubernetes_version: String,
    pub minor: u32,
    pub api: KubeadmApi,
    /// Required for init/control-plane.
    pub pki: Option<Pki>,
    /// Discovery hashes of the cluster CA (joins).
    pub ca_cert_hashes: Vec<String>,
    /// Bootstrap token (joins).
    pub token: Option<String>,
    pub node_name: Option<String>,
    pub cri_socket: Option<String>,
    pub image_pull_policy: Option<String>,
    pub kubelet_extra_args: Vec<(String, String)>,
    pub controller_manager_extra_args: Vec<(String, String)>,
    pub pod_subnet: Option<String>,
    pub service_subnet: Option<String>,
    pub dns_domain: Option<String>,
    /// v1beta4 `encryptionAlgorithm` (kubeadm's leaf certificates follow the CA).
    pub encryption_algorithm: Option<String>,
    /// KCP's `ControlPlaneKubeletLocalMode` default for 1.31 ≤ v < 1.36.
    pub kcp_feature_gates: bool,
    /// `skipPhases` of the Init/JoinConfiguration.
    pub skip_phases: Vec<String>,
    /// `patches.directory` of the Init/JoinConfiguration.
    pub patches_dir: Option<String>,
    /// v1beta4 `timeouts` of the Init/JoinConfiguration: (field name, Go duration).
    pub timeouts: Vec<(String, String)>,
    /// Extra `files:` (path, text), root:root 0644, after the PKI as CABPK orders them.
    pub files: Vec<(String, String)>,
    pub pre_commands: Vec<String>,
    pub post_commands: Vec<String>,
    pub users: Vec<User>,
    pub verbosity: Option<u32>,
}

impl Spec {
    /// CAPV template defaults (cluster-template.yaml at CAPV main): containerd socket,
    /// `cloud-provider: external`, node name from `{{ local_hostname }}`.
    pub fn capv(
        role: Role,
        cluster: &str,
        endpoint: &str,
        kubernetes_version: &str,
        minor: u32,
        api: KubeadmApi,
    ) -> Spec {
        let external = vec![("cloud-provider".to_string(), "external".to_string())];
        Spec {
            role,
            cluster: cluster.into(),
            endpoint: endpoint.into(),
            kubernetes_version: kubernetes_version.into(),
            minor,
            api,
            pki: None,
            ca_cert_hashes: vec![],
            token: None,
            node_name: Some(NODE_NAME_JINJA.into()),
            cri_socket: Some("/var/run/containerd/containerd.sock".into()),
            image_pull_policy: Some("IfNotPresent".into()),
            kubelet_extra_args: external.clone(),
            controller_manager_extra_args: external,
            pod_subnet: Some("192.168.0.0/16".into()),
            service_subnet: None,
            dns_domain: Some("cluster.local".into()),
            encryption_algorithm: None,
            kcp_feature_gates: true,
            skip_phases: vec![],
            patches_dir: None,
            timeouts: vec![],
            files: vec![],
            pre_commands: vec![],
            post_commands: vec![],
            users: vec![],
            verbosity: None,
        }
    }
}

/// `extraArgs`: a map in v1beta3, a `name`/`value` list sorted by name in v1beta4.
fn extra_args(api: KubeadmApi, args: &[(String, String)]) -> Option<kapi::Args> {
    if args.is_empty() {
        return None;
    }
    Some(match api {
        KubeadmApi::V1beta3 => kapi::Args::Map(args.iter().cloned().collect()),
        KubeadmApi::V1beta4 => {
            let mut sorted = args.to_vec();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            kapi::Args::List(
                sorted
                    .into_iter()
                    .map(|(name, value)| kapi::Arg { name, value })
                    .collect(),
            )
        }
    })
}

/// One of the API's enum values from its name (`IfNotPresent`, `ECDSA-P256`).
fn named<T: serde::de::DeserializeOwned>(value: &str, place: &str) -> Result<T> {
    use serde::de::value::{Error as DeError, StrDeserializer};
    T::deserialize(StrDeserializer::<DeError>::new(value)).map_err(|e| {
        Error::invalid(
            Stage::Mint,
            place,
            format!("{value:?} is not a kubeadm value: {e}"),
        )
    })
}

fn node_registration(
    spec: &Spec,
    taints: Option<Vec<kapi::Taint>>,
) -> Result<kapi::NodeRegistration> {
    Ok(kapi::NodeRegistration {
        name: spec.node_name.clone(),
        cri_socket: spec.cri_socket.clone(),
        taints,
        kubelet_extra_args: extra_args(spec.api, &spec.kubelet_extra_args),
        image_pull_policy: spec
            .image_pull_policy
            .as_deref()
            .map(|p| named(p, "nodeRegistration.imagePullPolicy"))
            .transpose()?,
        ..Default::default()
    })
}

/// A document through the one YAML emitter; the API's types always serialize.
fn dump<T: serde::Serialize>(doc: &T, kind: &str) -> Result<String> {
    libnodeagent::formats::goyaml::dump(doc)
        .map_err(|e| Error::of(ErrorKind::Internal, Stage::Mint, kind, e.to_string()))
}

pub fn cluster_configuration(spec: &Spec) -> Result<String> {
    let v1beta4 = spec.api == KubeadmApi::V1beta4;
    let encryption_algorithm = match &spec.encryption_algorithm {
        Some(a) if v1beta4 => Some(named(a, "ClusterConfiguration.encryptionAlgorithm")?),
        _ => None,
    };
    let feature_gates = (spec.kcp_feature_gates && (31..36).contains(&spec.minor))
        .then(|| [("ControlPlaneKubeletLocalMode".to_string(), true)].into());
    let doc = kapi::ClusterConfiguration {
        api_version: spec.api.api_version().into(),
        kind: "ClusterConfiguration".into(),
        api_server: Some(Default::default()),
        cluster_name: Some(spec.cluster.clone()),
        control_plane_endpoint: Some(spec.endpoint.clone()),
        controller_manager: Some(kapi::ControlPlaneComponent {
            extra_args: extra_args(spec.api, &spec.controller_manager_extra_args),
            ..Default::default()
        }),
        dns: Some(Default::default()),
        etcd: Some(Default::default()),
        kubernetes_version: Some(spec.kubernetes_version.clone()),
        networking: Some(kapi::Networking {
            dns_domain: spec.dns_domain.clone(),
            pod_subnet: spec.pod_subnet.clone(),
            service_subnet: spec.service_subnet.clone(),
        }),
        scheduler: Some(Default::default()),
        proxy: v1beta4.then(Default::default),
        encryption_algorithm,
        feature_gates,
        ..Default::default()
    };
    dump(&doc, "ClusterConfiguration")
}

pub fn init_configuration(spec: &Spec) -> Result<String> {
    let doc = kapi::InitConfiguration {
        api_version: spec.api.api_version().into(),
        kind: "InitConfiguration".into(),
        local_api_endpoint: Some(Default::default()),
        node_registration: Some(node_registration(spec, None)?),
        skip_phases: skip_phases(spec),
        timeouts: timeouts(spec),
        patches: spec.patches_dir.as_ref().map(|d| kapi::Patches {
            directory: Some(d.clone()),
        }),
        ..Default::default()
    };
    dump(&doc, "InitConfiguration")
}

pub fn join_configuration(spec: &Spec) -> Result<String> {
    let token = spec.token.clone().ok_or_else(|| {
        Error::invalid(
            Stage::Mint,
            "--token",
            "join bundles need a bootstrap token",
        )
    })?;
    let hashes = &spec.ca_cert_hashes;
    let taints = (spec.role == Role::Worker).then(|| {
        vec![kapi::Taint {
            key: UNINITIALIZED_TAINT.into(),
            value: None,
            effect: kapi::TaintEffect::NoSchedule,
            time_added: None,
        }]
    });
    let doc = kapi::JoinConfiguration {
        api_version: spec.api.api_version().into(),
        kind: "JoinConfiguration".into(),
        discovery: kapi::Discovery {
            bootstrap_token: Some(kapi::BootstrapTokenDiscovery {
                token,
                api_server_endpoint: Some(spec.endpoint.clone()),
                ca_cert_hashes: (!hashes.is_empty()).then(|| hashes.clone()),
                unsafe_skip_ca_verification: hashes.is_empty().then_some(true),
            }),
            ..Default::default()
        },
        node_registration: Some(node_registration(spec, taints)?),
        skip_phases: skip_phases(spec),
        timeouts: timeouts(spec),
        patches: spec.patches_dir.as_ref().map(|d| kapi::Patches {
            directory: Some(d.clone()),
        }),
        control_plane: (spec.role == Role::ControlPlane).then(|| kapi::JoinControlPlane {
            local_api_endpoint: Some(Default::default()),
            certificate_key: None,
        }),
        ..Default::default()
    };
    dump(&doc, "JoinConfiguration")
}

fn timeouts(spec: &Spec) -> Option<kapi::Timeouts> {
    if spec.timeouts.is_empty() {
        return None;
    }
    let mut t = kapi::Timeouts::default();
    for (name, value) in &spec.timeouts {
        let slot = match name.as_str() {
            "controlPlaneComponentHealthCheck" => &mut t.control_plane_component_health_check,
            "kubeletHealthCheck" => &mut t.kubelet_health_check,
            "kubernetesAPICall" => &mut t.kubernetes_api_call,
            "etcdAPICall" => &mut t.etcd_api_call,
            "tlsBootstrap" => &mut t.tls_bootstrap,
            "discovery" => &mut t.discovery,
            _ => &mut t.upgrade_manifests,
        };
        *slot = Some(value.clone());
    }
    Some(t)
}

fn skip_phases(spec: &Spec) -> Option<Vec<String>> {
    (!spec.skip_phases.is_empty()).then(|| spec.skip_phases.clone())
}

/// CABPK's `Indent 6`: every line, including the last empty one, gets six spaces.
pub fn indent6(text: &str) -> String {
    format!("      {}", text.replace('\n', "\n      "))
}

/// Go's `%q` for runcmd items (printable ASCII kept, the rest escaped).
pub fn go_quote(v: &str) -> String {
    libnodeagent::formats::goyaml::double_quoted(v, |c| match c {
        '\r' => Some("\\r".into()),
        c if (c as u32) < 0x20 || c as u32 == 0x7f => Some(format!("\\x{:02x}", c as u32)),
        _ => None,
    })
}

fn file_entry(path: &str, owner: &str, permissions: &str, content: &str) -> String {
    format!(
        "\n-   path: {path}\n    owner: {owner}\n    permissions: '{permissions}'\n    content: |\n{}",
        indent6(content)
    )
}

/// The PKI as CABPK's `Certificates.AsFiles`: every file root:root, certs 0640, keys 0600.
pub fn pki_files(pki: &Pki) -> Vec<(String, String, &'static str)> {
    pki.files()
        .iter()
        .map(|(name, content, _)| {
            let perm = if name.ends_with(".key") {
                "0600"
            } else {
                "0640"
            };
            (format!("{PKI_DIR}/{name}"), content.to_string(), perm)
        })
        .collect()
}

/// The userdata document.
pub fn userdata(spec: &Spec) -> Result<String> {
    let mut o = String::from("## template: jinja\n#cloud-config\n\nwrite_files:");
    if spec.role.ships_pki() {
        let pki = spec.pki.as_ref().ok_or_else(|| {
            Error::invalid(
                Stage::Mint,
                "--pki",
                "init and control-plane bundles need the cluster PKI",
            )
        })?;
        for (path, content, perm) in pki_files(pki) {
            if !content.is_empty() {
                o.push_str(&file_entry(&path, "root:root", perm, &content));
            }
        }
    }
    for (path, content) in &spec.files {
        o.push_str(&file_entry(path, "root:root", "0644", content));
    }
    let v = spec
        .verbosity
        .map(|n| format!("--v {n}"))
        .unwrap_or_default();
    let kubeadm_line = match spec.role {
        Role::Init => {
            let body = format!(
                "---\n{}\n---\n{}",
                cluster_configuration(spec)?,
                init_configuration(spec)?
            );
            o.push_str(&format!("\n-   path: {INIT_CONFIG_PATH}\n    owner: root:root\n    permissions: '0640'\n    content: |\n{}", indent6(&body)));
            format!("  - 'kubeadm init --config {INIT_CONFIG_PATH} {v} && {SENTINEL}'")
        }
        Role::ControlPlane | Role::Worker => {
            let join = join_configuration(spec)?;
            let body = if spec.role == Role::Worker {
                format!("---\n{join}")
            } else {
                join
            };
            o.push_str(&format!("\n-   path: {JOIN_CONFIG_PATH}\n    owner: root:root\n    permissions: '0640'\n    content: |\n{}", indent6(&body)));
            format!("  - kubeadm join --config {JOIN_CONFIG_PATH} {v} && {SENTINEL}")
        }
    };
    o.push_str(&format!("\n-   path: /run/cluster-api/placeholder\n    owner: root:root\n    permissions: '0640'\n    content: \"{PLACEHOLDER}\"\nruncmd:"));
    for c in &spec.pre_commands {
        o.push_str(&format!("\n  - {}", go_quote(c)));
    }
    o.push('\n');
    o.push_str(&kubeadm_line);
    for c in &spec.post_commands {
        o.push_str(&format!("\n  - {}", go_quote(c)));
    }
    if !spec.users.is_empty() {
        o.push_str("\nusers:");
        for u in &spec.users {
            o.push_str(&format!("\n  - name: {}", u.name));
            if let Some(sudo) = &u.sudo {
                o.push_str(&format!("\n    sudo: {sudo}"));
            }
            if !u.ssh_authorized_keys.is_empty() {
                o.push_str("\n    ssh_authorized_keys:");
                for k in &u.ssh_authorized_keys {
                    o.push_str(&format!("\n      - {k}"));
                }
            }
        }
    }
    o.push('\n');
    Ok(o)
}
