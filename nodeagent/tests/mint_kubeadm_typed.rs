//! The kubeadm configs inside minted userdata parse as the typed kubeadm API (the kubeadm
//! owner's `kubeadm::config::parse`, which denies unknown fields), for every role and API.

use libnodeagent::kubeadm::config::{self, ApiVersion, EncryptionAlgorithm, TaintEffect};
use minter::bootstrap::{self, KubeadmApi, Role, Spec};
use minter::pki::{Algorithm, Pki};

fn spec(role: Role, minor: u32) -> Spec {
    let version = format!("v1.{minor}.3");
    let mut s = Spec::capv(
        role,
        "demo",
        "10.0.0.10:6443",
        &version,
        minor,
        KubeadmApi::for_minor(minor),
    );
    let p = Pki::generate(Algorithm::EcdsaP256, time::Duration::days(3650)).unwrap();
    s.ca_cert_hashes = libnodeagent::pki::hash::discovery_hashes(p.ca.cert_pem.as_bytes()).unwrap();
    s.token = Some("abcdef.0123456789abcdef".into());
    if minor >= 31 {
        s.encryption_algorithm = Some("ECDSA-P256".into());
    }
    s.pki = Some(p);
    s
}

/// The kubeadm file as the node will see it after YAML parsing of the userdata.
fn kubeadm_file(s: &Spec) -> String {
    let ud: serde_norway::Value = serde_norway::from_str(&bootstrap::userdata(s).unwrap()).unwrap();
    let path = if s.role == Role::Init {
        bootstrap::INIT_CONFIG_PATH
    } else {
        bootstrap::JOIN_CONFIG_PATH
    };
    ud["write_files"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str() == Some(path))
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn init_configs_parse_typed() {
    for (minor, api) in [
        (30, ApiVersion::V1beta3),
        (31, ApiVersion::V1beta4),
        (34, ApiVersion::V1beta4),
    ] {
        let s = spec(Role::Init, minor);
        let cfg = config::parse(&kubeadm_file(&s), "kubeadm.yaml")
            .unwrap_or_else(|e| panic!("1.{minor}: {e}"));
        assert_eq!(cfg.certificates_dir(), "/etc/kubernetes/pki");
        assert!(cfg.join.is_none());
        let cc = cfg.cluster.expect("ClusterConfiguration");
        let ic = cfg.init.expect("InitConfiguration");
        assert_eq!((cc.version, ic.version), (api, api));
        assert_eq!(
            cc.spec.control_plane_endpoint.as_deref(),
            Some("10.0.0.10:6443")
        );
        assert_eq!(
            cc.spec.kubernetes_version.as_deref(),
            Some(format!("v1.{minor}.3").as_str())
        );
        assert_eq!(cc.spec.cluster_name.as_deref(), Some("demo"));
        if minor >= 31 {
            assert_eq!(
                cc.spec.encryption_algorithm,
                Some(EncryptionAlgorithm::EcdsaP256)
            );
        }
        let nr = ic.spec.node_registration.expect("nodeRegistration");
        assert_eq!(nr.name.as_deref(), Some("{{ local_hostname }}"));
        assert!(
            nr.taints.is_none(),
            "init keeps kubeadm's default control-plane taint"
        );
    }
}

#[test]
fn join_configs_parse_typed() {
    for role in [Role::Worker, Role::ControlPlane] {
        for minor in [29, 31] {
            let s = spec(role, minor);
            let cfg = config::parse(&kubeadm_file(&s), "kubeadm-join-config.yaml")
                .unwrap_or_else(|e| panic!("{role:?} 1.{minor}: {e}"));
            let jc = cfg.join.expect("JoinConfiguration");
            assert!(cfg.init.is_none() && cfg.cluster.is_none());
            let bt = jc
                .spec
                .discovery
                .bootstrap_token
                .as_ref()
                .expect("bootstrapToken");
            assert_eq!(bt.token, "abcdef.0123456789abcdef");
            assert_eq!(bt.ca_cert_hashes.as_ref().unwrap(), &s.ca_cert_hashes);
            assert!(
                bt.ca_cert_hashes
                    .as_ref()
                    .unwrap()
                    .iter()
                    .all(|h| config::is_ca_cert_hash(h))
            );
            assert_eq!(cfg_endpoint(&jc.spec), Some("10.0.0.10:6443".to_string()));
            let taints = jc.spec.node_registration.as_ref().unwrap().taints.clone();
            match role {
                Role::Worker => {
                    let t = taints.expect("worker taint");
                    assert_eq!(
                        (t[0].key.as_str(), t[0].effect),
                        (bootstrap::UNINITIALIZED_TAINT, TaintEffect::NoSchedule)
                    );
                    assert!(jc.spec.control_plane.is_none());
                }
                _ => {
                    assert!(taints.is_none());
                    assert!(jc.spec.control_plane.is_some());
                }
            }
        }
    }
}

fn cfg_endpoint(j: &config::JoinConfiguration) -> Option<String> {
    j.discovery
        .bootstrap_token
        .as_ref()?
        .api_server_endpoint
        .clone()
}
