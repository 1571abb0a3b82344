//! The SANs kubeadm's certs phase puts in `apiserver`, `etcd-server` and `etcd-peer`.

use super::*;

/// The SANs kubeadm's certs phase gives `apiserver`, `etcd-server` and `etcd-peer` for this
/// config (kubeadm's `GetAPIServerAltNames`, `GetEtcdAltNames`, `GetEtcdPeerAltNames`); the
/// node name and advertise address only when the config names them (else kubeadm takes
/// them from the host at init time).
pub(super) fn wanted_sans(cfg: &KubeadmConfig, row: &str) -> Vec<WantSan> {
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
