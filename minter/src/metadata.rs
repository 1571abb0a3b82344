//! `guestinfo.metadata` exactly as CAPV renders it (docs/formats.md c.2, `metadataFormat` in
//! CAPV main): a Go text template, so every byte is fixed; the document starts with an
//! empty line. Values are printed raw inside double quotes, so callers validate them first.

use std::fmt::Write;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Route {
    pub to: String,
    pub via: String,
    pub metric: Option<u32>,
}

/// One NIC (`VSphereVM.spec.network.devices[i]` plus its MAC).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Device {
    pub mac: String,
    /// `deviceName`; CAPV prints `eth<N>` when empty.
    pub set_name: Option<String>,
    pub dhcp4: bool,
    pub dhcp6: bool,
    /// Static addresses (`ipAddrs`), printed as given.
    pub addresses: Vec<String>,
    pub gateway4: Option<String>,
    pub gateway6: Option<String>,
    pub mtu: Option<u32>,
    pub routes: Vec<Route>,
    pub nameservers: Vec<String>,
    pub search: Vec<String>,
}

/// CAPV metadata: instance-id and local-hostname are both the VM name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metadata {
    pub hostname: String,
    pub instance_id: String,
    pub devices: Vec<Device>,
}

impl Metadata {
    /// wait-on-network as CAPV derives it: a family is awaited when any device uses DHCP
    /// for it or has a static address of it.
    pub fn wait_on_network(&self) -> (bool, bool) {
        let has = |d: &Device, v6: bool| d.addresses.iter().any(|a| a.contains(':') == v6);
        let v4 = self.devices.iter().any(|d| d.dhcp4 || has(d, false));
        let v6 = self.devices.iter().any(|d| d.dhcp6 || has(d, true));
        (v4, v6)
    }

    pub fn render(&self) -> String {
        let (w4, w6) = self.wait_on_network();
        let mut o = String::new();
        let _ = write!(
            o,
            "\ninstance-id: \"{}\"\nlocal-hostname: \"{}\"\nwait-on-network:\n  ipv4: {w4}\n  ipv6: {w6}\nnetwork:\n  version: 2\n  ethernets:\n",
            self.instance_id, self.hostname
        );
        for (i, d) in self.devices.iter().enumerate() {
            let set_name = d.set_name.clone().unwrap_or_else(|| format!("eth{i}"));
            let _ = write!(
                o,
                "    id{i}:\n      match:\n        macaddress: \"{}\"\n      set-name: \"{set_name}\"\n      wakeonlan: true\n      dhcp4: {}\n      dhcp6: {}\n      accept-ra: {}\n",
                d.mac, d.dhcp4, d.dhcp6, d.dhcp6
            );
            if !d.addresses.is_empty() {
                o.push_str("      addresses:\n");
                for a in &d.addresses {
                    let _ = writeln!(o, "      - \"{a}\"");
                }
            }
            if let Some(g) = &d.gateway4 {
                let _ = writeln!(o, "      gateway4: \"{g}\"");
            }
            if let Some(g) = &d.gateway6 {
                let _ = writeln!(o, "      gateway6: \"{g}\"");
            }
            if let Some(m) = d.mtu {
                let _ = writeln!(o, "      mtu: {m}");
            }
            if !d.routes.is_empty() {
                o.push_str("      routes:\n");
                for r in &d.routes {
                    let _ = write!(o, "      - to: \"{}\"\n        via: \"{}\"\n", r.to, r.via);
                    if let Some(m) = r.metric {
                        let _ = writeln!(o, "        metric: {m}");
                    }
                }
            }
            if !d.nameservers.is_empty() || !d.search.is_empty() {
                o.push_str("      nameservers:\n");
                if !d.nameservers.is_empty() {
                    o.push_str("        addresses:\n");
                    for n in &d.nameservers {
                        let _ = writeln!(o, "        - \"{n}\"");
                    }
                }
                if !d.search.is_empty() {
                    o.push_str("        search:\n");
                    for s in &d.search {
                        let _ = writeln!(o, "        - \"{s}\"");
                    }
                }
            }
        }
        o
    }
}
