//! Host facts: what cloud-init's VMware datasource calls "host info" (A.9) plus what the
//! plan needs to know about the image (network renderer, NTP client). Gathered in-process
//! without spawning programs or asking DNS (a boot agent must not hang on a resolver),
//! or read from `--facts FILE` so renders and plans are reproducible anywhere.

use crate::base::error::{Error, Result, Stage};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Facts {
    /// The system hostname as the kernel has it now.
    pub hostname: Option<String>,
    /// Canonical name: from /etc/hosts when it lists the hostname with a dotted name, else the hostname.
    pub fqdn: Option<String>,
    /// The single address of the IPv4 default-route interface.
    pub local_ipv4: Option<String>,
    pub local_ipv6: Option<String>,
    pub interfaces: Vec<Interface>,
    /// `/sys/class/dmi/id/product_uuid`, lower-cased: the instance-id fallback.
    pub product_uuid: Option<String>,
    pub kernel_release: Option<String>,
    pub machine: Option<String>,
    /// `/etc/os-release` ID, VERSION_ID, VERSION_CODENAME.
    pub distro: Option<String>,
    pub distro_version: Option<String>,
    pub distro_release: Option<String>,
    /// `networkd` or `netplan`: what the image reads network configuration from.
    pub network_renderer: Option<String>,
    /// `chrony`, `systemd-timesyncd` or none.
    pub ntp_client: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Interface {
    pub name: String,
    pub mac: Option<String>,
    pub ipv4: Vec<Addr4>,
    pub ipv6: Vec<Addr6>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Addr4 {
    pub addr: String,
    pub netmask: String,
    pub broadcast: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Addr6 {
    pub addr: String,
    /// As cloud-init renders it: `ffff:ffff:...::/64`.
    pub netmask: String,
}

impl Facts {
    /// Load `--facts FILE` (YAML or JSON object). It replaces detection entirely.
    pub fn from_file(path: &Path) -> Result<Facts> {
        let place = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|e| Error::io(Stage::Usage, &place, "", e))?;
        let node = crate::formats::yaml::read_from(
            crate::formats::yaml::Doc::new(Stage::Usage, &place),
            file,
        )?;
        let json = node.to_json();
        serde_path_to_error::deserialize(json).map_err(|e| {
            let at = node.locate(e.path());
            Error::invalid(
                Stage::Usage,
                format!("{place}: {} ({})", e.path(), at.place()),
                e.inner().to_string(),
            )
        })
    }

    /// Gather from the running system; file-based facts (os-release, hosts, image tools) come from `root`.
    pub fn detect(root: &Path) -> Facts {
        let mut f = Facts::default();
        // Under `--root DIR` the agent never renames the host's kernel, so the target's own
        // /etc/hostname stands for "the hostname now" (what the local stage wrote there).
        let target_name = (root != Path::new("/"))
            .then(|| read(root, "etc/hostname"))
            .flatten()
            .and_then(|s| s.lines().next().map(|l| l.trim().to_string()))
            .filter(|h| !h.is_empty());
        f.hostname = target_name.or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .filter(|h| !h.is_empty())
        });
        f.fqdn = f
            .hostname
            .as_deref()
            .map(|h| fqdn_from_hosts(&read(root, "etc/hosts").unwrap_or_default(), h));
        if let Ok(u) = nix::sys::utsname::uname() {
            f.kernel_release = u.release().to_str().map(str::to_string);
            f.machine = u.machine().to_str().map(str::to_string);
        }
        f.product_uuid = std::fs::read_to_string("/sys/class/dmi/id/product_uuid")
            .ok()
            .map(|s| s.trim_end().to_ascii_lowercase())
            .filter(|s| !s.is_empty());
        if let Some(os) = read(root, "etc/os-release") {
            let get = |k: &str| os_release_value(&os, k);
            f.distro = get("ID");
            f.distro_version = get("VERSION_ID");
            f.distro_release = get("VERSION_CODENAME");
        }
        f.network_renderer = Some(detect_renderer(root).into());
        f.ntp_client = detect_ntp_client(root).map(str::to_string);
        f.interfaces = interfaces();
        let route4 = crate::base::process::read_proc("/proc/net/route").unwrap_or_default();
        let route6 = crate::base::process::read_proc("/proc/net/ipv6_route").unwrap_or_default();
        let (v4, v6) = default_addresses(
            &f.interfaces,
            default_iface_v4(&route4),
            default_iface_v6(&route6),
        );
        f.local_ipv4 = v4;
        f.local_ipv6 = v6;
        f
    }
}

/// A file of the target, resolved inside `root` (an absolute link in the image stays in it).
fn read(root: &Path, rel: &str) -> Option<String> {
    let bytes = crate::base::confine::read(root, rel).ok()?;
    String::from_utf8(bytes).ok()
}

fn os_release_value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches(['"', '\'']).to_string())
    })
}

/// getfqdn() without DNS: the first dotted name on an /etc/hosts line that lists `hostname`.
pub fn fqdn_from_hosts(hosts: &str, hostname: &str) -> String {
    for line in hosts.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut fields = line.split_whitespace();
        let Some(_addr) = fields.next() else { continue };
        let names: Vec<&str> = fields.collect();
        if names.contains(&hostname) {
            if let Some(n) = names
                .iter()
                .find(|n| n.contains('.') && n.starts_with(hostname))
            {
                return n.to_string();
            }
            return names[0].to_string();
        }
    }
    hostname.to_string()
}

fn detect_renderer(root: &Path) -> &'static str {
    let netplan = ["usr/sbin/netplan", "usr/bin/netplan"]
        .iter()
        .any(|p| root.join(p).exists());
    if netplan && root.join("etc/netplan").is_dir() {
        "netplan"
    } else {
        "networkd"
    }
}

fn detect_ntp_client(root: &Path) -> Option<&'static str> {
    if ["usr/sbin/chronyd", "sbin/chronyd"]
        .iter()
        .any(|p| root.join(p).exists())
    {
        return Some("chrony");
    }
    if [
        "lib/systemd/systemd-timesyncd",
        "usr/lib/systemd/systemd-timesyncd",
    ]
    .iter()
    .any(|p| root.join(p).exists())
    {
        return Some("systemd-timesyncd");
    }
    None
}

/// Interface of the IPv4 default route (destination 00000000) in /proc/net/route.
pub fn default_iface_v4(route: &str) -> Option<String> {
    route.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[1] == "00000000" && f[7.min(f.len() - 1)] == "00000000")
            .then(|| f[0].to_string())
    })
}

/// Interface of the IPv6 default route (::/0) in /proc/net/ipv6_route.
pub fn default_iface_v6(route: &str) -> Option<String> {
    route.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() == 10 && f[0].chars().all(|c| c == '0') && f[1] == "00" && f[9] != "lo")
            .then(|| f[9].to_string())
    })
}

/// cloud-init's rule: the single address on the default-route interface (none if several);
/// when only one family has a default route, the other is taken from the same interface.
fn default_addresses(
    ifaces: &[Interface],
    v4: Option<String>,
    v6: Option<String>,
) -> (Option<String>, Option<String>) {
    let find = |name: &Option<String>| {
        name.as_ref()
            .and_then(|n| ifaces.iter().find(|i| &i.name == n))
    };
    let (i4, i6) = (find(&v4).or(find(&v6)), find(&v6).or(find(&v4)));
    let one4 = i4.and_then(|i| (i.ipv4.len() == 1).then(|| i.ipv4[0].addr.clone()));
    let one6 = i6.and_then(|i| (i.ipv6.len() == 1).then(|| i.ipv6[0].addr.clone()));
    (one4, one6)
}

/// A valid address for host info: not loopback, link-local or unspecified.
pub fn is_valid_ip(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => !(a.is_loopback() || a.is_link_local() || a.is_unspecified()),
        IpAddr::V6(a) => {
            !(a.is_loopback() || a.is_unspecified() || (a.segments()[0] & 0xffc0) == 0xfe80)
        }
    }
}

fn interfaces() -> Vec<Interface> {
    let mut out: Vec<Interface> = Vec::new();
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return out;
    };
    for ifa in addrs {
        let name = ifa.interface_name.clone();
        let idx = match out.iter().position(|i| i.name == name) {
            Some(i) => i,
            None => {
                out.push(Interface {
                    name: name.clone(),
                    ..Default::default()
                });
                out.len() - 1
            }
        };
        let Some(addr) = ifa.address else { continue };
        if let Some(link) = addr.as_link_addr() {
            if let Some(mac) = link.addr() {
                let mac = mac
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(":");
                if mac != "00:00:00:00:00:00" {
                    out[idx].mac = Some(mac);
                }
            }
        } else if let Some(sin) = addr.as_sockaddr_in() {
            let ip = sin.ip();
            if is_valid_ip(&IpAddr::V4(ip)) {
                let mask = ifa
                    .netmask
                    .and_then(|m| m.as_sockaddr_in().map(|s| s.ip().to_string()));
                let bcast = ifa
                    .broadcast
                    .and_then(|m| m.as_sockaddr_in().map(|s| s.ip().to_string()));
                out[idx].ipv4.push(Addr4 {
                    addr: ip.to_string(),
                    netmask: mask.unwrap_or_default(),
                    broadcast: bcast,
                });
            }
        } else if let Some(sin6) = addr.as_sockaddr_in6() {
            let ip: Ipv6Addr = sin6.ip();
            if is_valid_ip(&IpAddr::V6(ip)) {
                let prefix = ifa
                    .netmask
                    .and_then(|m| m.as_sockaddr_in6().map(|s| u128::from(s.ip()).count_ones()))
                    .unwrap_or(128);
                out[idx].ipv6.push(Addr6 {
                    addr: ip.to_string(),
                    netmask: ipv6_netmask(prefix),
                });
            }
        }
    }
    out.retain(|i| i.name != "lo");
    out
}

/// `ffff:ffff:ffff:ffff::/64`, the odd form cloud-init's netifaces-based code prints.
pub fn ipv6_netmask(prefix: u32) -> String {
    let mask: u128 = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix.min(128))
    };
    format!("{}/{}", Ipv6Addr::from(mask), prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_route_interfaces() {
        let route = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                     eth0\t00000000\t0102A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
                     eth0\t0002A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n";
        assert_eq!(default_iface_v4(route).as_deref(), Some("eth0"));
        let r6 = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003 eth1\n";
        assert_eq!(default_iface_v6(r6).as_deref(), Some("eth1"));
    }

    #[test]
    fn single_address_rule_and_cross_fill() {
        let eth0 = Interface {
            name: "eth0".into(),
            mac: Some("00:50:56:00:00:01".into()),
            ipv4: vec![Addr4 {
                addr: "10.0.0.5".into(),
                netmask: "255.255.255.0".into(),
                broadcast: None,
            }],
            ipv6: vec![Addr6 {
                addr: "fd00::5".into(),
                netmask: ipv6_netmask(64),
            }],
        };
        let (v4, v6) = default_addresses(std::slice::from_ref(&eth0), Some("eth0".into()), None);
        assert_eq!(
            (v4.as_deref(), v6.as_deref()),
            (Some("10.0.0.5"), Some("fd00::5"))
        );
        let mut two = eth0.clone();
        two.ipv4.push(Addr4 {
            addr: "10.0.0.6".into(),
            ..Default::default()
        });
        let (v4, _) = default_addresses(&[two], Some("eth0".into()), None);
        assert_eq!(
            v4, None,
            "more than one address: omitted, as cloud-init does"
        );
        assert_eq!(ipv6_netmask(64), "ffff:ffff:ffff:ffff::/64");
    }

    #[test]
    fn fqdn_comes_from_hosts_without_dns() {
        let hosts = "127.0.0.1 localhost\n127.0.1.1 node1.example.com node1\n";
        assert_eq!(fqdn_from_hosts(hosts, "node1"), "node1.example.com");
        assert_eq!(fqdn_from_hosts(hosts, "other"), "other");
    }

    #[test]
    fn facts_file_rejects_unknown_fields_with_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("facts.yaml");
        std::fs::write(&p, "hostname: n1\nlocal-ipv4: 10.0.0.2\nbogus: 1\n").unwrap();
        let err = Facts::from_file(&p).unwrap_err();
        assert!(err.message.contains("bogus"), "{err}");
        std::fs::write(&p, "hostname: n1\nlocal-ipv4: 10.0.0.2\n").unwrap();
        let f = Facts::from_file(&p).unwrap();
        assert_eq!(f.local_ipv4.as_deref(), Some("10.0.0.2"));
    }
}
