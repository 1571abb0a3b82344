//! The SANs kubeadm's certs phase puts in `apiserver`, `etcd-server` and `etcd-peer`.

use super::*;
use crate::kubeadm::config::ClusterConfiguration;

/// The SANs kubeadm's certs phase gives `apiserver`, `etcd-server` and `etcd-peer` for this
/// config (kubeadm's `GetAPIServerAltNames`, `GetEtcdAltNames`, `GetEtcdPeerAltNames`); the
/// node name and advertise address only when the config names them (else kubeadm takes
/// them from the host at init time).
pub(super) fn wanted_sans(cfg: &KubeadmConfig, row: &str) -> Vec<WantSan> {
    let cluster = cfg.cluster.as_ref().map(|c| &c.spec);
    let mut want = Wanted(Vec::new());
    match row {
        "apiserver" => {
            want.service_names(cluster);
            want.node(cfg);
            want.endpoint_and_extra(cluster);
        }
        "etcd-server" => {
            for n in ["localhost", "127.0.0.1", "::1"] {
                want.add(n, "kubeadm's etcd server names");
            }
            want.node(cfg);
            let local = cluster.and_then(|c| c.etcd.as_ref()?.local.as_ref());
            let extra = local.and_then(|l| l.server_cert_sans.as_ref());
            want.all(extra, "etcd.local.serverCertSANs");
        }
        "etcd-peer" => {
            want.node(cfg);
            let local = cluster.and_then(|c| c.etcd.as_ref()?.local.as_ref());
            let extra = local.and_then(|l| l.peer_cert_sans.as_ref());
            want.all(extra, "etcd.local.peerCertSANs");
        }
        _ => {}
    }
    want.0
}

/// The SANs gathered so far, each once, in kubeadm's order.
struct Wanted(Vec<WantSan>);

impl Wanted {
    fn add(&mut self, value: &str, why: &'static str) {
        if !self.0.iter().any(|w| w.value == value) {
            self.0.push(WantSan {
                value: value.to_string(),
                why,
            });
        }
    }

    fn all(&mut self, values: Option<&Vec<String>>, why: &'static str) {
        for v in values.into_iter().flatten() {
            self.add(v, why);
        }
    }

    /// The node name and advertise address, from InitConfiguration or else JoinConfiguration.
    fn node(&mut self, cfg: &KubeadmConfig) {
        let init = cfg.init.as_ref().map(|i| &i.spec);
        let join = cfg.join.as_ref().map(|j| &j.spec);
        let registration = init
            .and_then(|i| i.node_registration.as_ref())
            .or_else(|| join.and_then(|j| j.node_registration.as_ref()));
        if let Some(n) = registration.and_then(|n| n.name.as_deref()) {
            self.add_set(n, "nodeRegistration.name");
        }
        let endpoint = init
            .and_then(|i| i.local_api_endpoint.as_ref())
            .or_else(|| join.and_then(|j| j.control_plane.as_ref()?.local_api_endpoint.as_ref()));
        if let Some(a) = endpoint.and_then(|e| e.advertise_address.as_deref()) {
            self.add_set(a, "localAPIEndpoint.advertiseAddress");
        }
    }

    /// `add` unless the config leaves the value empty (kubeadm then takes it from the host).
    fn add_set(&mut self, value: &str, why: &'static str) {
        if !value.is_empty() {
            self.add(value, why);
        }
    }

    /// kubeadm's service names, the cluster domain's and the first service address.
    fn service_names(&mut self, cluster: Option<&ClusterConfiguration>) {
        let networking = cluster.and_then(|c| c.networking.as_ref());
        let domain = networking
            .and_then(|n| n.dns_domain.clone())
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| "cluster.local".into());
        for n in ["kubernetes", "kubernetes.default", "kubernetes.default.svc"] {
            self.add(n, "kubeadm's service names");
        }
        self.add(
            &format!("kubernetes.default.svc.{domain}"),
            "networking.dnsDomain",
        );
        let subnet = networking
            .and_then(|n| n.service_subnet.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "10.96.0.0/12".into());
        if let Some(ip) = first_service_ip(&subnet) {
            self.add(&ip.to_string(), "first address of networking.serviceSubnet");
        }
    }

    /// The controlPlaneEndpoint's host and `apiServer.certSANs`.
    fn endpoint_and_extra(&mut self, cluster: Option<&ClusterConfiguration>) {
        if let Some((host, _)) = cluster
            .and_then(|c| c.control_plane_endpoint.as_deref())
            .and_then(crate::kubeadm::config::split_host_port)
        {
            self.add(&host, "controlPlaneEndpoint");
        }
        let extra = cluster.and_then(|c| c.api_server.as_ref()?.cert_sans.as_ref());
        self.all(extra, "apiServer.certSANs");
    }
}

/// The first usable address of the first subnet in `subnets` (`10.96.0.0/12` → 10.96.0.1),
/// as kubeadm's `GetAPIServerVirtualIP`.
pub(super) fn first_service_ip(subnets: &str) -> Option<std::net::IpAddr> {
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
pub(super) fn has_san(cert: &CertInfo, want: &str) -> bool {
    if let Ok(ip) = want.parse::<std::net::IpAddr>() {
        return cert.ip_sans.contains(&ip);
    }
    cert.dns_sans.iter().any(|s| s.eq_ignore_ascii_case(want))
        || crate::pki::check::covers(cert, want)
}
