//! netplan-v2 metadata -> systemd-networkd / netplan files (pure rendering).
//!
//! Input: the metadata's `network` document as CAPV writes it (`version: 2`, `ethernets:` keyed by
//! `id<N>`, each with `match.macaddress`, `set-name`, `wakeonlan`, `dhcp4`, `dhcp6`, `accept-ra`,
//! `dhcp4-overrides`/`dhcp6-overrides`, `addresses`, `gateway4`, `gateway6`, `mtu`, `routes`,
//! `nameservers`). A top-level `routes:` list (CAPV <= v1.16 VM-wide routes, not valid netplan) is
//! refused, naming it: cloud-init 22.4 fails its local stage on it ("No handler found for
//! command 'routes'") and configures no network at all; CAPV main puts them under each device.
//! compat appends them to every device, with a warning.
//!
//! Output for `networkd`: per device `/etc/systemd/network/10-nodeagent-<name>.link` (match by MAC,
//! rename, MTU, wake-on-LAN; udev applies it) and `10-nodeagent-<name>.network` (match by MAC,
//! DHCP, addresses, gateways, routes, DNS). For `netplan`: the validated document, normalised, in
//! `/etc/netplan/50-nodeagent.yaml` (0600, as netplan wants).
//!
//! Decisions on CAPV's own test goldens (`metadata-golden-*`), which use 5-octet MACs
//! (`00:00:00:00:00`), prefix-less addresses (`192.168.4.21`) and `use-routes: "route"`:
//! * strict (default): each is an error naming the field
//!   (`network.ethernets.id0.match.macaddress: ...`). Real CAPV takes MACs from vCenter (always
//!   6 octets) and addresses in CIDR form, so only a broken input fails.
//! * compat (`render_with(.., compat = true)`): a prefix-less address gets the host prefix
//!   (`/32`, `/128`: what systemd-networkd assumes for `Address=` without one), a non-boolean
//!   override is dropped, and a malformed MAC is written verbatim as cloud-init passes it on; each
//!   with a warning. A device whose MAC cannot match is still rendered, so a typo shows up in
//!   `networkctl`, never as a silently different match.

// Parses untrusted input: no indexing that could panic (str slicing is denied crate-wide).
#![deny(clippy::indexing_slicing)]

use crate::base::error::{Error, ErrorKind, Result, Stage};
use crate::formats::goyaml::{Y, map, s, to_string};
use crate::plan::FileWrite;
use serde_json::{Map, Value};
use std::fmt::Write as _;

pub const NETWORKD_DIR: &str = "/etc/systemd/network";
pub const NETPLAN_PATH: &str = "/etc/netplan/50-nodeagent.yaml";

/// Render the metadata's netplan-v2 network config (`ds.meta_data.network.config`) into the
/// files the image's renderer reads: `networkd` (.link/.network) or `netplan` (one YAML file).
/// Pure; called by `planner::build`. Strict: malformed values are errors naming the field.
pub fn render(config: &Value, renderer: &str) -> Result<Vec<FileWrite>> {
    render_with(config, renderer, false).map(|r| r.files)
}

/// Files plus warnings (compat mode repairs instead of failing; see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub files: Vec<FileWrite>,
    pub warnings: Vec<String>,
}

/// A route as netplan describes it.
#[derive(Debug, Clone, PartialEq)]
struct Route {
    to: String,
    via: Option<String>,
    metric: Option<u64>,
}

/// One ethernet device after validation.
#[derive(Debug, Clone, PartialEq, Default)]
struct Device {
    id: String,
    mac: Option<String>,
    name: String,
    wakeonlan: bool,
    dhcp4: bool,
    dhcp6: bool,
    accept_ra: Option<bool>,
    addresses: Vec<String>,
    gateway4: Option<String>,
    gateway6: Option<String>,
    mtu: Option<u64>,
    routes: Vec<Route>,
    dns: Vec<String>,
    search: Vec<String>,
    dhcp4_overrides: Vec<(String, String)>,
    dhcp6_overrides: Vec<(String, String)>,
}

struct Ctx {
    compat: bool,
    warnings: Vec<String>,
}

impl Ctx {
    /// Strict: error. Compat: warning, and the caller repairs.
    fn bad(&mut self, place: &str, msg: String) -> Result<()> {
        if self.compat {
            self.warnings.push(format!("{place}: {msg}"));
            Ok(())
        } else {
            Err(Error::invalid(Stage::Metadata, place, msg))
        }
    }
}

pub fn render_with(config: &Value, renderer: &str, compat: bool) -> Result<Rendered> {
    let mut ctx = Ctx {
        compat,
        warnings: Vec::new(),
    };
    let devices = parse(config, &mut ctx)?;
    let files = match renderer {
        "networkd" => devices.iter().flat_map(networkd_files).collect(),
        "netplan" => vec![netplan_file(&devices)],
        other => {
            return Err(Error::invalid(
                Stage::Metadata,
                "network renderer",
                format!("unknown renderer {other:?} (want networkd or netplan)"),
            ));
        }
    };
    Ok(Rendered {
        files,
        warnings: ctx.warnings,
    })
}

fn parse(config: &Value, ctx: &mut Ctx) -> Result<Vec<Device>> {
    let top = match config {
        Value::Null => return Ok(Vec::new()),
        Value::Object(m) => m,
        _ => {
            return Err(Error::invalid(
                Stage::Metadata,
                "network",
                "must be a mapping (netplan version 2)",
            ));
        }
    };
    // `network: {network: {...}}` is accepted by cloud-init too.
    let top = match top.get("network") {
        Some(Value::Object(inner)) if !top.contains_key("version") => inner,
        _ => top,
    };
    match top.get("version") {
        Some(v) if v.as_u64() == Some(2) || v.as_str() == Some("2") => {}
        Some(v) => {
            return Err(Error::unsupported(
                Stage::Metadata,
                "network.version",
                format!("{v} is not supported (only netplan version 2)"),
            ));
        }
        None => {
            return Err(Error::invalid(
                Stage::Metadata,
                "network.version",
                "missing (only netplan version 2 is supported)",
            ));
        }
    }
    for key in top.keys() {
        if !matches!(
            key.as_str(),
            "version" | "ethernets" | "routes" | "renderer"
        ) {
            return Err(Error::unsupported(
                Stage::Metadata,
                format!("network.{key}"),
                "not supported (only ethernets are)",
            ));
        }
    }
    let mut out = Vec::new();
    let eths = match top.get("ethernets") {
        None | Some(Value::Null) => return Ok(out),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(Error::invalid(
                Stage::Metadata,
                "network.ethernets",
                "must be a mapping",
            ));
        }
    };
    check_devices(eths)?;
    for (id, dev) in eths {
        let place = format!("network.ethernets.{id}");
        out.push(device(id, mapping(dev, &place)?, &place, ctx)?);
    }
    if let Some(v) = top.get("routes") {
        // Checked after the devices, so a device's own error is reported first.
        let global = routes(v, "network.routes")?;
        ctx.bad(
            "network.routes",
            "a top-level routes list (CAPV <= v1.16) is not netplan: cloud-init 22.4 fails on it \
             and configures no network; put the routes under each ethernets entry (--compat \
             adds them to every device)"
                .into(),
        )?;
        for d in &mut out {
            d.routes.extend(global.iter().cloned());
        }
    }
    let mut names: Vec<&str> = out.iter().map(|d| d.name.as_str()).collect();
    names.sort_unstable();
    if let Some([first, _]) = names
        .windows(2)
        .find_map(|w| <&[_; 2]>::try_from(w).ok().filter(|[a, b]| a == b))
    {
        return Err(Error::invalid(
            Stage::Metadata,
            "network.ethernets",
            format!("two devices are named {:?}", first),
        ));
    }
    Ok(out)
}

fn device(id: &str, d: &Map<String, Value>, place: &str, ctx: &mut Ctx) -> Result<Device> {
    let mut dev = Device {
        id: id.to_string(),
        ..Default::default()
    };
    for (k, v) in d {
        let p = format!("{place}.{k}");
        match k.as_str() {
            // A mapping has one `match` key, so `mac` is unset before it.
            "match" => dev.mac = match_mac(v, &p, ctx)?,
            "set-name" => dev.name = iface_name(v, &p)?,
            "wakeonlan" => dev.wakeonlan = boolean(v, &p)?,
            "dhcp4" => dev.dhcp4 = boolean(v, &p)?,
            "dhcp6" => dev.dhcp6 = boolean(v, &p)?,
            "accept-ra" => dev.accept_ra = Some(boolean(v, &p)?),
            "addresses" => {
                for (i, a) in list(v, &p)?.iter().enumerate() {
                    let ap = format!("{p}[{i}]");
                    dev.addresses.push(address(a, &ap, ctx)?);
                }
            }
            "gateway4" => dev.gateway4 = Some(ip(v, &p, Some(false))?),
            "gateway6" => dev.gateway6 = Some(ip(v, &p, Some(true))?),
            "mtu" => dev.mtu = Some(number(v, &p, 68, 65535)?),
            "routes" => dev.routes = routes(v, &p)?,
            "nameservers" => nameservers(v, &p, &mut dev)?,
            "dhcp4-overrides" => dev.dhcp4_overrides = overrides(v, &p, ctx, false)?,
            "dhcp6-overrides" => dev.dhcp6_overrides = overrides(v, &p, ctx, true)?,
            _ => {
                return Err(Error::unsupported(
                    Stage::Metadata,
                    &p,
                    "not supported by nodeagent's network renderer",
                ));
            }
        }
    }
    if dev.name.is_empty() {
        if dev.mac.is_some() {
            return Err(Error::invalid(
                Stage::Metadata,
                format!("{place}.set-name"),
                "missing (a device matched by MAC needs set-name)",
            ));
        }
        dev.name = iface_name(&Value::String(id.to_string()), place)?;
    }
    Ok(dev)
}

/// At most MAX_NETWORK_DEVICES devices (each is up to two files; the step closes each before
/// it writes the next, so the bound is on work, not on descriptors). An `ethernets` key reaches the generated files (their comment line, the netplan
/// YAML): 1 to 255 bytes without a control character, also in compat mode, as a newline in
/// it would add `[Network]` settings of the sender's choice.
fn check_devices(eths: &Map<String, Value>) -> Result<()> {
    let max = crate::base::limits::MAX_NETWORK_DEVICES;
    let bad = |id: &&String| id.is_empty() || id.len() > 255 || id.chars().any(char::is_control);
    let (place, msg) = if eths.len() > max {
        let n = eths.len();
        let msg = format!("{n} devices, more than MAX_NETWORK_DEVICES ({max})");
        ("network.ethernets".to_string(), msg)
    } else if let Some(id) = eths.keys().find(bad) {
        let msg =
            "a device id must be 1 to 255 bytes without a line break or another control character";
        (
            format!("network.ethernets[{}]", id.escape_debug()),
            msg.to_string(),
        )
    } else {
        return Ok(());
    };
    Err(Error::invalid(Stage::Metadata, place, msg))
}

/// `match:` of an ethernets entry: only `macaddress` is supported.
fn match_mac(v: &Value, p: &str, ctx: &mut Ctx) -> Result<Option<String>> {
    let mut mac = None;
    for (mk, mv) in mapping(v, p)? {
        let mp = format!("{p}.{mk}");
        if mk != "macaddress" {
            return Err(Error::unsupported(
                Stage::Metadata,
                &mp,
                "not supported (only match.macaddress)",
            ));
        }
        let s = string(mv, &mp)?.to_ascii_lowercase();
        // Written verbatim into `[Match]` (and netplan): a newline or
        // space would add directives, so it is refused even in compat
        // mode, where other malformed MACs are only warned about.
        if s.contains(|c: char| c.is_whitespace() || c.is_control()) {
            return Err(Error::unsupported(
                Stage::Metadata,
                &mp,
                "contains a space or control character (a newline would inject networkd directives); refused",
            ));
        }
        if !is_mac(&s) {
            ctx.bad(
                &mp,
                format!("{s:?} is not a MAC address (six hex octets, colon separated)"),
            )?;
        }
        mac = Some(s);
    }
    Ok(mac)
}

/// `nameservers:` of an ethernets entry: DNS server addresses and search domains.
fn nameservers(v: &Value, p: &str, dev: &mut Device) -> Result<()> {
    for (nk, nv) in mapping(v, p)? {
        let np = format!("{p}.{nk}");
        match nk.as_str() {
            "addresses" => {
                for (i, a) in list(nv, &np)?.iter().enumerate() {
                    dev.dns.push(ip(a, &format!("{np}[{i}]"), None)?);
                }
            }
            "search" => {
                for (i, a) in list(nv, &np)?.iter().enumerate() {
                    let s = string(a, &format!("{np}[{i}]"))?;
                    if s.is_empty() || s.contains(|c: char| c.is_whitespace() || c.is_control()) {
                        return Err(Error::invalid(
                            Stage::Metadata,
                            format!("{np}[{i}]"),
                            format!("{s:?} is not a domain"),
                        ));
                    }
                    dev.search.push(s);
                }
            }
            _ => {
                return Err(Error::unsupported(Stage::Metadata, &np, "not supported"));
            }
        }
    }
    Ok(())
}

fn overrides(v: &Value, p: &str, ctx: &mut Ctx, v6: bool) -> Result<Vec<(String, String)>> {
    let m = mapping(v, p)?;
    let mut out = Vec::new();
    for (k, val) in m {
        let kp = format!("{p}.{k}");
        let key = match k.as_str() {
            "use-dns" => "UseDNS",
            "use-ntp" => "UseNTP",
            "use-hostname" => "UseHostname",
            "use-domains" => "UseDomains",
            "use-mtu" if !v6 => "UseMTU",
            "use-routes" if !v6 => "UseRoutes",
            "send-hostname" => "SendHostname",
            "hostname" => {
                let s = string(val, &kp)?;
                if s.is_empty() || s.contains(|c: char| c.is_whitespace() || c.is_control()) {
                    return Err(Error::invalid(
                        Stage::Metadata,
                        &kp,
                        format!("{s:?} is not a host name"),
                    ));
                }
                out.push(("Hostname".to_string(), s));
                continue;
            }
            "route-metric" => {
                out.push((
                    "RouteMetric".to_string(),
                    number(val, &kp, 0, u32::MAX as u64)?.to_string(),
                ));
                continue;
            }
            "use-mtu" | "use-routes" => {
                ctx.bad(
                    &kp,
                    "not available for DHCPv6 in systemd-networkd; ignored".to_string(),
                )?;
                continue;
            }
            _ => {
                return Err(Error::unsupported(Stage::Metadata, &kp, "not supported"));
            }
        };
        match val {
            Value::Bool(b) => out.push((key.to_string(), yes_no(*b).to_string())),
            other => {
                ctx.bad(&kp, format!("{other} is not a boolean; ignored"))?;
            }
        }
    }
    Ok(out)
}

fn routes(v: &Value, p: &str) -> Result<Vec<Route>> {
    let mut out = Vec::new();
    for (i, r) in list(v, p)?.iter().enumerate() {
        let rp = format!("{p}[{i}]");
        let m = mapping(r, &rp)?;
        let mut route = Route {
            to: String::new(),
            via: None,
            metric: None,
        };
        for (k, val) in m {
            let kp = format!("{rp}.{k}");
            match k.as_str() {
                "to" => {
                    let s = string(val, &kp)?;
                    route.to = if s == "default" {
                        "0.0.0.0/0".into()
                    } else {
                        cidr(&s, &kp)?
                    };
                }
                "via" => route.via = Some(ip(val, &kp, None)?),
                "metric" => route.metric = Some(number(val, &kp, 0, u32::MAX as u64)?),
                _ => {
                    return Err(Error::unsupported(Stage::Metadata, &kp, "not supported"));
                }
            }
        }
        if route.to.is_empty() {
            return Err(Error::invalid(
                Stage::Metadata,
                format!("{rp}.to"),
                "missing",
            ));
        }
        out.push(route);
    }
    Ok(out)
}

fn mapping<'a>(v: &'a Value, p: &str) -> Result<&'a Map<String, Value>> {
    match v {
        Value::Object(m) => Ok(m),
        _ => Err(Error::invalid(Stage::Metadata, p, "must be a mapping")),
    }
}

fn list<'a>(v: &'a Value, p: &str) -> Result<&'a Vec<Value>> {
    match v {
        Value::Array(a) => Ok(a),
        _ => Err(Error::invalid(Stage::Metadata, p, "must be a list")),
    }
}

fn string(v: &Value, p: &str) -> Result<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        _ => Err(Error::invalid(Stage::Metadata, p, "must be a string")),
    }
}

fn boolean(v: &Value, p: &str) -> Result<bool> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" => Ok(true),
            "false" | "no" | "off" => Ok(false),
            _ => Err(Error::invalid(
                Stage::Metadata,
                p,
                format!("{s:?} is not a boolean"),
            )),
        },
        _ => Err(Error::invalid(Stage::Metadata, p, "must be a boolean")),
    }
}

fn number(v: &Value, p: &str, min: u64, max: u64) -> Result<u64> {
    let n = match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    };
    match n {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(Error::invalid(
            Stage::Metadata,
            p,
            format!("{v} is not a number in {min}..={max}"),
        )),
    }
}

fn iface_name(v: &Value, p: &str) -> Result<String> {
    let s = string(v, p)?;
    let ok = !s.is_empty()
        && s.len() <= 15
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:@".contains(&b));
    if ok {
        Ok(s)
    } else {
        Err(Error::invalid(
            Stage::Metadata,
            p,
            format!("{s:?} is not a valid interface name"),
        ))
    }
}

fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|o| o.len() == 2 && o.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `want_v6`: `Some(true)` only IPv6, `Some(false)` only IPv4, `None` either.
fn ip(v: &Value, p: &str, want_v6: Option<bool>) -> Result<String> {
    let s = string(v, p)?;
    match s.parse::<std::net::IpAddr>() {
        Ok(a) if want_v6.is_none_or(|w| w == a.is_ipv6()) => Ok(a.to_string()),
        Ok(_) => Err(Error::invalid(
            Stage::Metadata,
            p,
            format!("{s:?} is the wrong address family"),
        )),
        Err(_) => Err(Error::invalid(
            Stage::Metadata,
            p,
            format!("{s:?} is not an IP address"),
        )),
    }
}

fn cidr(s: &str, p: &str) -> Result<String> {
    let Some((a, len)) = s.split_once('/') else {
        return Err(Error::of(
            ErrorKind::NotFound,
            Stage::Metadata,
            p,
            format!("{s:?} has no /prefix length"),
        ));
    };
    let addr: std::net::IpAddr = a
        .parse()
        .map_err(|_| Error::invalid(Stage::Metadata, p, format!("{s:?} is not an IP address")))?;
    let max = if addr.is_ipv6() { 128 } else { 32 };
    match len.parse::<u8>() {
        Ok(l) if l <= max => Ok(format!("{addr}/{l}")),
        _ => Err(Error::invalid(
            Stage::Metadata,
            p,
            format!("{s:?} has a bad prefix length"),
        )),
    }
}

fn address(v: &Value, p: &str, ctx: &mut Ctx) -> Result<String> {
    let s = string(v, p)?;
    if s.contains('/') {
        return cidr(&s, p);
    }
    let addr: std::net::IpAddr = s
        .parse()
        .map_err(|_| Error::invalid(Stage::Metadata, p, format!("{s:?} is not an IP address")))?;
    let host = if addr.is_ipv6() { 128 } else { 32 };
    ctx.bad(p, format!("{s:?} has no /prefix length; using /{host}"))?;
    Ok(format!("{addr}/{host}"))
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn file(path: String, text: String, mode: u32) -> FileWrite {
    FileWrite::root_owned(path, text.into_bytes(), mode)
}

/// First line of a generated file; the id escaped, so nothing in it can start a line.
fn header(id: &str) -> String {
    format!(
        "# Written by nodeagent from network.ethernets.{}\n",
        id.escape_debug()
    )
}

fn networkd_files(d: &Device) -> Vec<FileWrite> {
    let mut files = Vec::new();
    let base = format!("{NETWORKD_DIR}/10-nodeagent-{}", d.name);
    let match_section = match &d.mac {
        Some(mac) => format!("[Match]\nMACAddress={mac}\n"),
        None => format!("[Match]\nOriginalName={}\n", d.name),
    };
    // `wakeonlan` is not rendered: cloud-init 22.4's networkd renderer ignores it (a VM is
    // not woken by magic packets either).
    if d.mac.is_some() || d.mtu.is_some() {
        let mut link = header(&d.id);
        link.push_str(&match_section);
        link.push_str("\n[Link]\n");
        if d.mac.is_some() {
            let _ = writeln!(link, "Name={}", d.name);
        }
        if let Some(mtu) = d.mtu {
            let _ = writeln!(link, "MTUBytes={mtu}");
        }
        files.push(file(format!("{base}.link"), link, 0o644));
    }

    let mut net = header(&d.id);
    match &d.mac {
        // MAC only: on first boot udev has already named the NIC (ens4…) before the local
        // stage writes the .link that renames it, so matching the new name too would
        // configure nothing until the next boot.
        Some(mac) => {
            let _ = writeln!(net, "[Match]\nMACAddress={mac}");
        }
        None => {
            let _ = writeln!(net, "[Match]\nName={}", d.name);
        }
    }
    if let Some(mtu) = d.mtu {
        let _ = write!(net, "\n[Link]\nMTUBytes={mtu}\n");
    }
    let dhcp = match (d.dhcp4, d.dhcp6) {
        (true, true) => "yes",
        (true, false) => "ipv4",
        (false, true) => "ipv6",
        (false, false) => "no",
    };
    let _ = write!(net, "\n[Network]\nDHCP={dhcp}\n");
    // As cloud-init 22.4's networkd renderer: `accept-ra` only with DHCPv6, else networkd's
    // default (router advertisements accepted unless the node forwards IPv6).
    if let (true, Some(ra)) = (d.dhcp6, d.accept_ra) {
        let _ = writeln!(net, "IPv6AcceptRA={}", yes_no(ra));
    }
    for a in &d.addresses {
        let _ = writeln!(net, "Address={a}");
    }
    for g in d.gateway4.iter().chain(&d.gateway6) {
        let _ = writeln!(net, "Gateway={g}");
    }
    for s in &d.dns {
        let _ = writeln!(net, "DNS={s}");
    }
    if !d.search.is_empty() {
        let _ = writeln!(net, "Domains={}", d.search.join(" "));
    }
    for (section, ov) in [
        ("DHCPv4", &d.dhcp4_overrides),
        ("DHCPv6", &d.dhcp6_overrides),
    ] {
        if !ov.is_empty() {
            let _ = write!(net, "\n[{section}]\n");
            for (k, v) in ov {
                let _ = writeln!(net, "{k}={v}");
            }
        }
    }
    for r in &d.routes {
        let _ = write!(net, "\n[Route]\nDestination={}\n", r.to);
        if let Some(via) = &r.via {
            let _ = writeln!(net, "Gateway={via}");
        }
        // As cloud-init 25.1's networkd renderer (`parse_routes`: `metric` -> `Metric=`);
        // 22.4 lost a netplan route's `metric` in its version 2 conversion
        // (network_state.py `_v2_to_v1_ipcfg` kept `to` and `via`), leaving networkd's default.
        if let Some(m) = r.metric {
            let _ = writeln!(net, "Metric={m}");
        }
    }
    files.push(file(format!("{base}.network"), net, 0o644));
    files
}

/// netplan's name for a networkd `[DHCPv4]`/`[DHCPv6]` key, and the value in its YAML type.
fn netplan_override(key: &str, value: &str) -> (&'static str, Y) {
    let flag = |k| (k, Y::Bool(value == "yes"));
    match key {
        "Hostname" => ("hostname", s(value)),
        // A number when it is one (it was validated as one); never an unquoted raw string.
        "RouteMetric" => (
            "route-metric",
            value.parse().map_or_else(|_| s(value), Y::Int),
        ),
        "UseDNS" => flag("use-dns"),
        "UseNTP" => flag("use-ntp"),
        "UseHostname" => flag("use-hostname"),
        "UseDomains" => flag("use-domains"),
        "UseMTU" => flag("use-mtu"),
        "UseRoutes" => flag("use-routes"),
        _ => flag("send-hostname"),
    }
}

/// A YAML integer from a validated unsigned value (saturating: netplan refuses it anyway).
fn int(v: u64) -> Y {
    Y::Int(i64::try_from(v).unwrap_or(i64::MAX))
}

fn strings(v: &[String]) -> Y {
    Y::Seq(v.iter().map(s).collect())
}

/// One ethernet device as netplan YAML (keys only when set, as cloud-init writes them).
fn netplan_device(d: &Device) -> Y {
    let mut m: Vec<(&str, Y)> = Vec::new();
    if let Some(mac) = &d.mac {
        m.push(("match", map([("macaddress", s(mac))])));
        m.push(("set-name", s(&d.name)));
    }
    m.push(("wakeonlan", Y::Bool(d.wakeonlan)));
    m.push(("dhcp4", Y::Bool(d.dhcp4)));
    m.push(("dhcp6", Y::Bool(d.dhcp6)));
    if let Some(ra) = d.accept_ra {
        m.push(("accept-ra", Y::Bool(ra)));
    }
    for (key, ov) in [
        ("dhcp4-overrides", &d.dhcp4_overrides),
        ("dhcp6-overrides", &d.dhcp6_overrides),
    ] {
        if !ov.is_empty() {
            m.push((key, map(ov.iter().map(|(k, v)| netplan_override(k, v)))));
        }
    }
    if !d.addresses.is_empty() {
        m.push(("addresses", strings(&d.addresses)));
    }
    if let Some(g) = &d.gateway4 {
        m.push(("gateway4", s(g)));
    }
    if let Some(g) = &d.gateway6 {
        m.push(("gateway6", s(g)));
    }
    if let Some(mtu) = d.mtu {
        m.push(("mtu", int(mtu)));
    }
    if !d.routes.is_empty() {
        let routes = d.routes.iter().map(|r| {
            let mut route = vec![("to", s(&r.to))];
            route.extend(r.via.as_ref().map(|v| ("via", s(v))));
            route.extend(r.metric.map(|m| ("metric", int(m))));
            map(route)
        });
        m.push(("routes", Y::Seq(routes.collect())));
    }
    if !d.dns.is_empty() || !d.search.is_empty() {
        let mut ns = Vec::new();
        if !d.dns.is_empty() {
            ns.push(("addresses", strings(&d.dns)));
        }
        if !d.search.is_empty() {
            ns.push(("search", strings(&d.search)));
        }
        m.push(("nameservers", map(ns)));
    }
    map(m)
}

/// The netplan file, through the project's YAML emitter (goyaml.rs), which quotes and
/// escapes every value: no value can add a key or a line.
fn netplan_file(devices: &[Device]) -> FileWrite {
    let mut network = vec![("version", Y::Int(2)), ("renderer", s("networkd"))];
    if !devices.is_empty() {
        network.push((
            "ethernets",
            map(devices.iter().map(|d| (d.id.clone(), netplan_device(d)))),
        ));
    }
    let y = format!(
        "# Written by nodeagent from the metadata's network config\n{}",
        to_string(&map([("network", map(network))]))
    );
    file(NETPLAN_PATH.to_string(), y, 0o600)
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::string_slice)]
mod tests;
