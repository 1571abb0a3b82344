//! The kubeadm configuration documents, `kubeadm.k8s.io/v1beta3` and `v1beta4`
//! (InitConfiguration, ClusterConfiguration, JoinConfiguration), as typed structs: read by the
//! agent (`kubeadm::config`, rejecting unknown fields like kubeadm's strict decoder) and built
//! by the minter (`minter::bootstrap`, written through `crate::formats::goyaml` as CABPK writes them).
//! Field list: docs/formats.md e.2.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The document structs: strict when read (unknown fields are errors), camelCase names, and
/// when written a `None` field is left out, as Go's `omitempty` does (`crate::formats::goyaml`).
macro_rules! documents {
    ($($(#[$m:meta])* pub struct $name:ident $body:tt)*) => {$(
        #[derive(Debug, Clone, Default, Deserialize, Serialize)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        $(#[$m])*
        pub struct $name $body
    )*};
}

documents! {
pub struct InitConfiguration {
    pub api_version: String,
    pub kind: String,
    pub bootstrap_tokens: Option<Vec<BootstrapToken>>,
    pub dry_run: Option<bool>,
    pub node_registration: Option<NodeRegistration>,
    #[serde(rename = "localAPIEndpoint")]
    pub local_api_endpoint: Option<ApiEndpoint>,
    pub certificate_key: Option<String>,
    pub skip_phases: Option<Vec<String>>,
    pub patches: Option<Patches>,
    pub timeouts: Option<Timeouts>,
}

pub struct BootstrapToken {
    pub token: String,
    pub description: Option<String>,
    pub ttl: Option<String>,
    pub expires: Option<String>,
    pub usages: Option<Vec<String>>,
    pub groups: Option<Vec<String>>,
}

pub struct NodeRegistration {
    pub name: Option<String>,
    pub cri_socket: Option<String>,
    /// Written even when `None`: Go's field has no `omitempty`, so CABPK writes `taints: null`
    /// (kubeadm's default control-plane taint), which differs from `[]` (no taints).
    #[serde(serialize_with = "null_when_none")]
    pub taints: Option<Vec<Taint>>,
    pub kubelet_extra_args: Option<Args>,
    pub ignore_preflight_errors: Option<Vec<String>>,
    pub image_pull_policy: Option<PullPolicy>,
    pub image_pull_serial: Option<bool>,
}

pub struct ApiEndpoint {
    pub advertise_address: Option<String>,
    pub bind_port: Option<i32>,
}

pub struct Patches {
    pub directory: Option<String>,
}

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

pub struct EnvVar {
    pub name: String,
    pub value: Option<String>,
    pub value_from: Option<serde_json::Value>,
}

pub struct ClusterConfiguration {
    pub api_version: String,
    pub kind: String,
    pub etcd: Option<Etcd>,
    pub networking: Option<Networking>,
    pub kubernetes_version: Option<String>,
    pub control_plane_endpoint: Option<String>,
    pub api_server: Option<ApiServer>,
    pub controller_manager: Option<ControlPlaneComponent>,
    pub scheduler: Option<ControlPlaneComponent>,
    pub dns: Option<Dns>,
    pub proxy: Option<Proxy>,
    pub certificates_dir: Option<String>,
    pub image_repository: Option<String>,
    pub feature_gates: Option<BTreeMap<String, bool>>,
    pub cluster_name: Option<String>,
    pub encryption_algorithm: Option<EncryptionAlgorithm>,
    pub certificate_validity_period: Option<String>,
    pub ca_certificate_validity_period: Option<String>,
}

pub struct Etcd {
    pub local: Option<LocalEtcd>,
    pub external: Option<ExternalEtcd>,
}

pub struct LocalEtcd {
    pub image_repository: Option<String>,
    pub image_tag: Option<String>,
    pub data_dir: Option<String>,
    pub extra_args: Option<Args>,
    pub extra_envs: Option<Vec<EnvVar>>,
    #[serde(rename = "serverCertSANs")]
    pub server_cert_sans: Option<Vec<String>>,
    #[serde(rename = "peerCertSANs")]
    pub peer_cert_sans: Option<Vec<String>>,
}

pub struct ExternalEtcd {
    pub endpoints: Vec<String>,
    pub ca_file: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
}

pub struct Networking {
    pub service_subnet: Option<String>,
    pub pod_subnet: Option<String>,
    pub dns_domain: Option<String>,
}

pub struct ApiServer {
    pub extra_args: Option<Args>,
    pub extra_volumes: Option<Vec<HostPathMount>>,
    pub extra_envs: Option<Vec<EnvVar>>,
    #[serde(rename = "certSANs")]
    pub cert_sans: Option<Vec<String>>,
    pub timeout_for_control_plane: Option<String>,
}

pub struct ControlPlaneComponent {
    pub extra_args: Option<Args>,
    pub extra_volumes: Option<Vec<HostPathMount>>,
    pub extra_envs: Option<Vec<EnvVar>>,
}

pub struct HostPathMount {
    pub name: String,
    pub host_path: String,
    pub mount_path: String,
    pub read_only: Option<bool>,
    pub path_type: Option<String>,
}

pub struct Dns {
    pub image_repository: Option<String>,
    pub image_tag: Option<String>,
    pub disabled: Option<bool>,
}

pub struct Proxy {
    pub disabled: Option<bool>,
}

pub struct JoinConfiguration {
    pub api_version: String,
    pub kind: String,
    pub dry_run: Option<bool>,
    pub node_registration: Option<NodeRegistration>,
    pub ca_cert_path: Option<String>,
    /// Required: a join without discovery cannot find the cluster.
    pub discovery: Discovery,
    pub control_plane: Option<JoinControlPlane>,
    pub skip_phases: Option<Vec<String>>,
    pub patches: Option<Patches>,
    pub timeouts: Option<Timeouts>,
}

pub struct Discovery {
    pub bootstrap_token: Option<BootstrapTokenDiscovery>,
    pub file: Option<FileDiscovery>,
    pub tls_bootstrap_token: Option<String>,
    pub timeout: Option<String>,
}

pub struct BootstrapTokenDiscovery {
    pub token: String,
    pub api_server_endpoint: Option<String>,
    pub ca_cert_hashes: Option<Vec<String>>,
    #[serde(rename = "unsafeSkipCAVerification")]
    pub unsafe_skip_ca_verification: Option<bool>,
}

pub struct FileDiscovery {
    pub kube_config_path: String,
}

/// v1beta4 only; `kubeadm init`/`join` ignore it (read so that its fields are checked).
pub struct ResetConfiguration {
    pub api_version: String,
    pub kind: String,
    pub cleanup_tmp_dir: Option<bool>,
    pub certificates_dir: Option<String>,
    pub cri_socket: Option<String>,
    pub dry_run: Option<bool>,
    pub force: Option<bool>,
    pub ignore_preflight_errors: Option<Vec<String>>,
    pub skip_phases: Option<Vec<String>>,
    pub unmount_flags: Option<Vec<String>>,
    pub timeouts: Option<Timeouts>,
}

/// v1beta4 only; `kubeadm init`/`join` ignore it. Its sections' field names are checked;
/// their values are `kubeadm upgrade`'s.
pub struct UpgradeConfiguration {
    pub api_version: String,
    pub kind: String,
    pub apply: Option<UpgradeApply>,
    pub diff: Option<UpgradeDiff>,
    pub node: Option<UpgradeNode>,
    pub plan: Option<UpgradePlan>,
    pub timeouts: Option<Timeouts>,
}

pub struct UpgradeApply {
    pub kubernetes_version: Option<serde_json::Value>,
    pub allow_experimental_upgrades: Option<serde_json::Value>,
    #[serde(rename = "allowRCUpgrades")]
    pub allow_rc_upgrades: Option<serde_json::Value>,
    pub certificate_renewal: Option<serde_json::Value>,
    pub dry_run: Option<serde_json::Value>,
    pub etcd_upgrade: Option<serde_json::Value>,
    pub force_upgrade: Option<serde_json::Value>,
    pub ignore_preflight_errors: Option<serde_json::Value>,
    pub patches: Option<serde_json::Value>,
    pub print_config: Option<serde_json::Value>,
    pub skip_phases: Option<serde_json::Value>,
    pub image_pull_policy: Option<serde_json::Value>,
    pub image_pull_serial: Option<serde_json::Value>,
}

pub struct UpgradeDiff {
    pub kubernetes_version: Option<serde_json::Value>,
    pub context_lines: Option<serde_json::Value>,
}

pub struct UpgradeNode {
    pub certificate_renewal: Option<serde_json::Value>,
    pub dry_run: Option<serde_json::Value>,
    pub etcd_upgrade: Option<serde_json::Value>,
    pub ignore_preflight_errors: Option<serde_json::Value>,
    pub skip_phases: Option<serde_json::Value>,
    pub patches: Option<serde_json::Value>,
    pub image_pull_policy: Option<serde_json::Value>,
    pub image_pull_serial: Option<serde_json::Value>,
}

pub struct UpgradePlan {
    pub kubernetes_version: Option<serde_json::Value>,
    pub allow_experimental_upgrades: Option<serde_json::Value>,
    #[serde(rename = "allowRCUpgrades")]
    pub allow_rc_upgrades: Option<serde_json::Value>,
    pub dry_run: Option<serde_json::Value>,
    pub etcd_upgrade: Option<serde_json::Value>,
    pub ignore_preflight_errors: Option<serde_json::Value>,
    pub print_config: Option<serde_json::Value>,
}

pub struct JoinControlPlane {
    #[serde(rename = "localAPIEndpoint")]
    pub local_api_endpoint: Option<ApiEndpoint>,
    pub certificate_key: Option<String>,
}
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    pub effect: TaintEffect,
    pub time_added: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

/// `extraArgs`: a map in v1beta3, an ordered `{name, value}` list in v1beta4.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(
    untagged,
    expecting = "a map of strings (v1beta3) or a list of {name, value} (v1beta4)"
)]
pub enum Args {
    Map(BTreeMap<String, String>),
    List(Vec<Arg>),
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Arg {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
pub enum EncryptionAlgorithm {
    #[serde(rename = "RSA-2048")]
    Rsa2048,
    #[serde(rename = "RSA-3072")]
    Rsa3072,
    #[serde(rename = "RSA-4096")]
    Rsa4096,
    #[serde(rename = "ECDSA-P256")]
    EcdsaP256,
    #[serde(rename = "ECDSA-P384")]
    EcdsaP384,
}

fn null_when_none<S: serde::Serializer>(v: &Option<Vec<Taint>>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => v.serialize(s),
        None => s.serialize_unit(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOIN: &str = "apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: 10.0.0.1:6443
    token: abcdef.0123456789abcdef
    caCertHashes:
    - sha256:00
nodeRegistration:
  kubeletExtraArgs:
  - {name: cloud-provider, value: external}
  taints: []
  imagePullPolicy: IfNotPresent
timeouts:
  discovery: 5m0s
";

    /// One model both ways: what the agent reads, the minter's emitter writes back the way
    /// Go would, and that reads again as the same document.
    #[test]
    fn a_document_read_is_written_back_in_go_form() {
        let read = |text: &str| -> JoinConfiguration {
            let doc = crate::formats::yaml::Doc::new(crate::base::error::Stage::Kubeadm, "join");
            crate::formats::yaml::parse(doc, text).unwrap()
        };
        let doc = read(JOIN);
        let out = crate::formats::goyaml::dump(&doc).unwrap();
        assert_eq!(
            out,
            "apiVersion: kubeadm.k8s.io/v1beta4
discovery:
  bootstrapToken:
    apiServerEndpoint: 10.0.0.1:6443
    caCertHashes:
    - sha256:00
    token: abcdef.0123456789abcdef
kind: JoinConfiguration
nodeRegistration:
  imagePullPolicy: IfNotPresent
  kubeletExtraArgs:
  - name: cloud-provider
    value: external
  taints: []
timeouts:
  discovery: 5m0s
"
        );
        let again = read(&out);
        assert_eq!(crate::formats::goyaml::dump(&again).unwrap(), out);
    }

    /// `taints` left unset is written `null` (kubeadm's default taint), never dropped.
    #[test]
    fn unset_taints_are_written_null() {
        let nr = NodeRegistration::default();
        assert_eq!(crate::formats::goyaml::dump(&nr).unwrap(), "taints: null\n");
    }
}
