//! One call, N nodes: per-node names, MACs, tokens and metadata around a shared bootstrap
//! `Spec`. Pure: returns the bundles; the CLI writes them.

use super::bootstrap::{self, Role, Spec};
use super::emit::{Bundle, NodeBundle};
use super::metadata::{Device, Metadata};
use super::{token, validate};
use libnodeagent::base::error::{Error, ErrorKind, Result, Stage};

/// Most bundles one `--nodes` call mints.
pub use libnodeagent::base::limits::MAX_MINT_NODES as MAX_NODES;

#[derive(Debug, Clone, PartialEq)]
pub enum Network {
    Dhcp4,
    Dhcp6,
    Static {
        address: String,
        gateway: Option<String>,
        dns: Vec<String>,
    },
}

/// `dhcp` | `dhcp6` | `static:ADDR/PREFIX[,gw=IP][,dns=IP]...`
pub fn parse_network(v: &str) -> Result<Network> {
    let bad = |m: String| Error::invalid(Stage::Usage, "--network", m);
    match v {
        "dhcp" | "dhcp4" => return Ok(Network::Dhcp4),
        "dhcp6" => return Ok(Network::Dhcp6),
        _ => {}
    }
    let rest = v.strip_prefix("static:").ok_or_else(|| {
        bad(format!(
            "unknown network {v:?}: use dhcp, dhcp6 or static:ADDR/PREFIX,gw=IP,dns=IP"
        ))
    })?;
    let mut parts = rest.split(',');
    let cidr = parts.next().unwrap_or("");
    let (addr, prefix) = validate::cidr("--network", cidr)?;
    let (mut gateway, mut dns) = (None, vec![]);
    for p in parts {
        let (k, val) = p
            .split_once('=')
            .ok_or_else(|| bad(format!("bad item {p:?}: want gw=IP or dns=IP")))?;
        let ip = validate::ip("--network", val)?;
        if ip.is_ipv4() != addr.is_ipv4() && k == "gw" {
            return Err(bad(format!(
                "gateway {val} is not in the address family of {cidr}"
            )));
        }
        match k {
            "gw" => gateway = Some(ip.to_string()),
            "dns" => dns.push(ip.to_string()),
            _ => return Err(bad(format!("unknown key {k:?}: want gw or dns"))),
        }
    }
    Ok(Network::Static {
        address: format!("{addr}/{prefix}"),
        gateway,
        dns,
    })
}

/// `mac` plus `i` in the low 24 bits (the NIC-specific part); error on wrap-around.
pub fn mac_plus(mac: &str, i: u32) -> Result<String> {
    let b: Vec<u8> = mac
        .split(':')
        .map(|o| u8::from_str_radix(o, 16).unwrap_or(0))
        .collect();
    let low = u32::from_be_bytes([0, b[3], b[4], b[5]]) + i;
    if low > 0xff_ffff {
        return Err(Error::invalid(
            Stage::Usage,
            "--mac",
            format!("{mac} + {i} leaves the NIC-specific part of the address"),
        ));
    }
    let l = low.to_be_bytes();
    Ok(format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[0], b[1], b[2], l[1], l[2], l[3]
    ))
}

/// A random locally administered unicast MAC (02:xx:...).
pub fn random_mac() -> Result<String> {
    let mut b = [0u8; 6];
    getrandom::fill(&mut b)
        .map_err(|e| Error::of(ErrorKind::Io, Stage::Mint, "random", e.to_string()))?;
    b[0] = (b[0] & 0xfc) | 0x02;
    Ok(b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(":"))
}

pub struct Input {
    pub spec: Spec,
    pub node: String,
    pub nodes: u32,
    pub network: Network,
    pub mac: Option<String>,
    /// Use this token (only with one node).
    pub token: Option<String>,
}

/// The node names `build` uses.
pub fn node_names(node: &str, nodes: u32) -> Vec<String> {
    if nodes == 1 {
        vec![node.to_string()]
    } else {
        (0..nodes).map(|i| format!("{node}-{i}")).collect()
    }
}

pub fn build(input: &Input) -> Result<Vec<NodeBundle>> {
    if input.nodes == 0 || input.nodes > MAX_NODES {
        return Err(Error::invalid(
            Stage::Usage,
            "--nodes",
            format!("must be 1-{MAX_NODES}"),
        ));
    }
    if input.nodes > 1 {
        if input.spec.role != Role::Worker {
            return Err(Error::invalid(
                Stage::Usage,
                "--nodes",
                "only worker bundles come in fleets (one init node; control planes join one by one)",
            ));
        }
        if input.token.is_some() {
            return Err(Error::invalid(
                Stage::Usage,
                "--token",
                "each of --nodes N gets its own token; leave --token out",
            ));
        }
        if matches!(input.network, Network::Static { .. }) {
            return Err(Error::invalid(
                Stage::Usage,
                "--network",
                "a static address names one node; use --nodes 1",
            ));
        }
    }
    let mut out = Vec::with_capacity(input.nodes as usize);
    for (i, name) in node_names(&input.node, input.nodes).into_iter().enumerate() {
        if name.len() > 63 {
            return Err(Error::invalid(
                Stage::Usage,
                "--node",
                format!("node name {name:?} is longer than 63 characters"),
            ));
        }
        let mac = match &input.mac {
            Some(m) => mac_plus(m, i as u32)?,
            None => random_mac()?,
        };
        let token = match (input.spec.role, &input.token) {
            (Role::Init, _) => None,
            (_, Some(t)) => Some(t.clone()),
            (_, None) => Some(token::generate()?),
        };
        let mut spec = input.spec.clone();
        spec.token = token.clone();
        let userdata = bootstrap::userdata(&spec)?;
        let mut dev = Device {
            mac: mac.clone(),
            ..Default::default()
        };
        match &input.network {
            Network::Dhcp4 => dev.dhcp4 = true,
            Network::Dhcp6 => dev.dhcp6 = true,
            Network::Static {
                address,
                gateway,
                dns,
            } => {
                dev.addresses = vec![address.clone()];
                if let Some(g) = gateway {
                    if g.contains(':') {
                        dev.gateway6 = Some(g.clone());
                    } else {
                        dev.gateway4 = Some(g.clone());
                    }
                }
                dev.nameservers = dns.clone();
            }
        }
        let metadata = Metadata {
            hostname: name.clone(),
            instance_id: name.clone(),
            devices: vec![dev],
        }
        .render();
        out.push(NodeBundle {
            bundle: Bundle {
                node: name,
                metadata,
                userdata,
            },
            mac,
            token,
        });
    }
    Ok(out)
}
