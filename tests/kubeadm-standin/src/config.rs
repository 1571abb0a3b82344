//! The kubeadm config as the stand-in reads it: with nodeagent's own reader and schema
//! (`libnodeagent::kubeadm::config::parse`, the documents of `libnodeagent::kubeadm::api`), for the
//! values it needs to do on disk what kubeadm does (node name, certificates dir, endpoints,
//! token, certificate key, SANs, preflight errors to ignore).
//!
//! The stand-in judges no config of its own: a file nodeagent's reader refuses is one it
//! cannot read (exit 3). Whether kubeadm accepts a config is real kubeadm's to say:
//! `nodeagent/tests/kubeadm_oracle.rs` runs kubeadm v1.34's `config validate` on a corpus of
//! valid documents and their mutations and holds nodeagent's reader to its verdicts.

use libnodeagent::kubeadm::api::{ClusterConfiguration, InitConfiguration, JoinConfiguration};
use libnodeagent::kubeadm::api::{LocalEtcd, NodeRegistration};
use libnodeagent::kubeadm::config::KubeadmConfig;

/// One config file, read.
pub struct Config(KubeadmConfig);

impl Config {
    pub fn init(&self) -> Option<&InitConfiguration> {
        self.0.init.as_ref().map(|d| &d.spec)
    }
    pub fn cluster(&self) -> Option<&ClusterConfiguration> {
        self.0.cluster.as_ref().map(|d| &d.spec)
    }
    pub fn join(&self) -> Option<&JoinConfiguration> {
        self.0.join.as_ref().map(|d| &d.spec)
    }
    /// InitConfiguration's, else JoinConfiguration's.
    pub fn node_registration(&self) -> Option<&NodeRegistration> {
        self.init()
            .and_then(|i| i.node_registration.as_ref())
            .or_else(|| self.join().and_then(|j| j.node_registration.as_ref()))
    }
    /// `certificatesDir`, default `/etc/kubernetes/pki` (kubeadm's DefaultCertificatesDir).
    pub fn cert_dir(&self) -> String {
        self.0.certificates_dir()
    }
    /// `etcd.local`, when set.
    pub fn local_etcd(&self) -> Option<&LocalEtcd> {
        self.cluster()?.etcd.as_ref()?.local.as_ref()
    }
    /// Local (stacked) etcd unless `etcd.external` is set; its data dir (default /var/lib/etcd).
    pub fn local_etcd_dir(&self) -> Option<String> {
        let etcd = self.cluster().and_then(|c| c.etcd.as_ref());
        if etcd.is_some_and(|e| e.external.is_some()) {
            return None;
        }
        Some(
            self.local_etcd()
                .and_then(|l| l.data_dir.clone())
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| "/var/lib/etcd".into()),
        )
    }
}

/// Read a kubeadm config file with nodeagent's reader; its error when it cannot.
pub fn parse(text: &str, file: &str) -> Result<Config, String> {
    libnodeagent::kubeadm::config::parse(text, file)
        .map(Config)
        .map_err(|e| format!("cannot read the config with nodeagent's kubeadm schema: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_values_with_nodeagents_schema() {
        let c = parse(
            "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\ncertificatesDir: /pki\netcd:\n  local:\n    dataDir: /data/etcd\n---\napiVersion: kubeadm.k8s.io/v1beta3\nkind: InitConfiguration\nnodeRegistration:\n  name: cp-1\n",
            "f",
        )
        .unwrap();
        assert_eq!(c.cert_dir(), "/pki");
        assert_eq!(c.local_etcd_dir().as_deref(), Some("/data/etcd"));
        assert_eq!(
            c.node_registration().and_then(|n| n.name.as_deref()),
            Some("cp-1")
        );
        assert!(c.join().is_none());
    }
}
