//! Checks for operator input; each error names the flag it came from.

use libnodeagent::base::error::{Error, Result, Stage};
use std::net::IpAddr;

fn bad(flag: &str, message: String) -> Error {
    Error::invalid(Stage::Usage, flag, message)
}

/// `HOST:PORT` with HOST an IPv4 address, `[IPv6]` or a DNS name; returns it normalized.
pub fn endpoint(flag: &str, v: &str) -> Result<(String, u16)> {
    let e = |why: &str| {
        bad(
            flag,
            format!(
                "bad endpoint {v:?}: {why} (want HOST:PORT, e.g. 10.0.0.10:6443 or [fd00::10]:6443)"
            ),
        )
    };
    let (host, port) = if let Some(rest) = v.strip_prefix('[') {
        let (h, p) = rest
            .split_once("]:")
            .ok_or_else(|| e("IPv6 host needs [ADDR]:PORT"))?;
        h.parse::<std::net::Ipv6Addr>()
            .map_err(|_| e("not an IPv6 address"))?;
        (format!("[{h}]"), p)
    } else {
        let (h, p) = v.rsplit_once(':').ok_or_else(|| e("missing :PORT"))?;
        if h.contains(':') {
            return Err(e("IPv6 hosts must be bracketed"));
        }
        let looks_numeric = h
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if looks_numeric {
            h.parse::<std::net::Ipv4Addr>()
                .map_err(|_| e("not an IPv4 address"))?;
        } else if !dns_name(h) {
            return Err(e("host is neither an IP address nor a DNS name"));
        }
        (h.to_string(), p)
    };
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| e("port must be 1-65535"))?;
    Ok((host, port))
}

/// A DNS name (RFC 1123): stricter than the plan's host name, no `_` and no label ending in `-`.
fn dns_name(h: &str) -> bool {
    libnodeagent::plan::dotted_name(h, |l| {
        !l.ends_with('-') && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    })
}

/// `vMAJOR.MINOR.PATCH[-pre]` → (minor, the version as given). Major must be 1.
pub fn kubernetes_version(flag: &str, v: &str) -> Result<(u32, String)> {
    let e = |why: &str| {
        bad(
            flag,
            format!("bad Kubernetes version {v:?}: {why} (want e.g. v1.31.2)"),
        )
    };
    let core = v
        .strip_prefix('v')
        .ok_or_else(|| e("missing leading 'v'"))?;
    let core = core.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() != 3
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(e("not MAJOR.MINOR.PATCH"));
    }
    if parts[0] != "1" {
        return Err(e("only Kubernetes 1.x exists"));
    }
    let minor: u32 = parts[1].parse().map_err(|_| e("minor out of range"))?;
    if minor < 22 {
        return Err(e("Cluster API supports Kubernetes 1.22 or newer"));
    }
    Ok((minor, v.to_string()))
}

/// A unicast Ethernet MAC in colon form; returned lower-case (as CAPV writes it).
pub fn mac(flag: &str, v: &str) -> Result<String> {
    let octets: Vec<&str> = v.split([':', '-']).collect();
    let ok = octets.len() == 6
        && octets
            .iter()
            .all(|o| o.len() == 2 && o.bytes().all(|b| b.is_ascii_hexdigit()));
    if !ok {
        return Err(bad(
            flag,
            format!("bad MAC address {v:?}: want six hex octets like 00:50:56:aa:bb:cc"),
        ));
    }
    let first = u8::from_str_radix(octets[0], 16).expect("checked hex");
    if first & 1 == 1 {
        return Err(bad(
            flag,
            format!("bad MAC address {v:?}: multicast addresses cannot name a NIC"),
        ));
    }
    Ok(octets.join(":").to_ascii_lowercase())
}

/// `ADDR/PREFIX` → (address, prefix). The address must not be the network or a broadcast.
pub fn cidr(flag: &str, v: &str) -> Result<(IpAddr, u8)> {
    let e = |why: &str| {
        bad(
            flag,
            format!("bad CIDR {v:?}: {why} (want e.g. 10.0.0.21/24)"),
        )
    };
    let (a, p) = v.split_once('/').ok_or_else(|| e("missing /PREFIX"))?;
    let addr: IpAddr = a.parse().map_err(|_| e("not an IP address"))?;
    let prefix: u8 = p.parse().map_err(|_| e("prefix is not a number"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if prefix == 0 || prefix > max {
        return Err(e(&format!("prefix must be 1-{max}")));
    }
    if addr.is_unspecified() || addr.is_multicast() {
        return Err(e("not a host address"));
    }
    Ok((addr, prefix))
}

/// A plain IP address.
pub fn ip(flag: &str, v: &str) -> Result<IpAddr> {
    v.parse()
        .map_err(|_| bad(flag, format!("bad IP address {v:?}")))
}

/// One duration unit a flag accepts: its suffix, the largest count allowed with it, and the
/// length of one unit.
pub struct DurationUnit {
    pub suffix: &'static str,
    pub max_count: i64,
    pub unit: time::Duration,
}

/// A positive count followed by one of `units` (`10y`, `15m`): the one duration syntax of the
/// mint flags. Errors name `flag` and say `hint` (the accepted forms); `stage` is the
/// reporting stage the caller's errors belong to.
pub fn duration(
    s: &str,
    flag: &str,
    stage: Stage,
    units: &[DurationUnit],
    hint: &str,
) -> Result<time::Duration> {
    let bad = || Error::invalid(stage, flag, format!("bad duration {s:?}: {hint}"));
    let split = s.len().saturating_sub(1);
    let (num, suffix) = (
        s.get(..split).ok_or_else(bad)?,
        s.get(split..).ok_or_else(bad)?,
    );
    let n: i64 = num.parse().map_err(|_| bad())?;
    let unit = units.iter().find(|u| u.suffix == suffix).ok_or_else(bad)?;
    if n <= 0 || n > unit.max_count {
        return Err(bad());
    }
    i32::try_from(n)
        .ok()
        .and_then(|n| unit.unit.checked_mul(n))
        .ok_or_else(bad)
}

/// A kubeadm phase name as `skipPhases` takes it (`addon/kube-proxy`, `preflight`): lower-case
/// words joined by `-` and `/`. kubeadm itself refuses a phase it does not know.
pub fn kubeadm_phase(flag: &str, v: &str) -> Result<String> {
    let ok = !v.is_empty()
        && v.len() <= 64
        && v.split('/').all(|w| {
            !w.is_empty()
                && w.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        });
    if ok {
        Ok(v.to_string())
    } else {
        Err(Error::invalid(
            Stage::Usage,
            flag,
            format!("{v:?} is not a kubeadm phase name (e.g. addon/kube-proxy)"),
        ))
    }
}

/// The names of kubeadm v1beta4's `timeouts` fields.
pub const KUBEADM_TIMEOUTS: [&str; 7] = [
    "controlPlaneComponentHealthCheck",
    "kubeletHealthCheck",
    "kubernetesAPICall",
    "etcdAPICall",
    "tlsBootstrap",
    "discovery",
    "upgradeManifests",
];

pub fn kubeadm_timeout_name(flag: &str, v: &str) -> Result<String> {
    if KUBEADM_TIMEOUTS.contains(&v) {
        Ok(v.to_string())
    } else {
        Err(Error::invalid(
            Stage::Usage,
            flag,
            format!(
                "{v:?} is not a kubeadm timeout (one of {})",
                KUBEADM_TIMEOUTS.join(", ")
            ),
        ))
    }
}

/// A duration as Go's `time.ParseDuration` reads kubeadm's: digits and a unit, one or more
/// (`90s`, `15m`, `1h30m`), positive.
pub fn go_duration(flag: &str, v: &str) -> Result<String> {
    let mut rest = v;
    let mut parts = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let Some((num, tail)) = rest.split_at_checked(digits) else {
            break;
        };
        let unit = ["ms", "h", "m", "s"]
            .into_iter()
            .find(|u| tail.starts_with(u));
        match (num.is_empty(), unit) {
            (false, Some(u)) => {
                rest = tail.strip_prefix(u).unwrap_or_default();
                parts += 1;
            }
            _ => {
                parts = 0;
                break;
            }
        }
    }
    if parts > 0 && v.bytes().any(|b| (b'1'..=b'9').contains(&b)) {
        Ok(v.to_string())
    } else {
        Err(Error::invalid(
            Stage::Usage,
            flag,
            format!("{v:?} is not a duration such as 90s, 15m or 1h30m"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            endpoint("--endpoint", "10.0.0.1:6443").unwrap(),
            ("10.0.0.1".into(), 6443)
        );
        assert_eq!(
            endpoint("--endpoint", "[fd00::1]:6443").unwrap(),
            ("[fd00::1]".into(), 6443)
        );
        assert_eq!(
            endpoint("--endpoint", "api.example.com:443").unwrap().0,
            "api.example.com"
        );
        for b in [
            "10.0.0.1",
            "10.0.0.300:6443",
            "host:0",
            "host:70000",
            "fd00::1:6443",
            "bad_host:6443",
            ":6443",
        ] {
            let e = endpoint("--endpoint", b).unwrap_err();
            assert_eq!(e.place, "--endpoint", "{b}");
        }
    }

    /// The two dotted-name rules share their frame and differ only inside a label.
    #[test]
    fn dns_names_are_host_names_without_underscores_or_trailing_dashes() {
        let long_label = "a".repeat(64);
        let long_name = vec!["a".repeat(63); 4].join(".");
        for (n, dns, host) in [
            ("api.example.com", true, true),
            ("a-1.b", true, true),
            ("under_score", false, true),
            ("trailing-", false, true),
            ("-leading", false, false),
            ("", false, false),
            ("a..b", false, false),
            ("a b", false, false),
            (long_label.as_str(), false, false),
            (&long_name[..253], true, true),
            (&format!("{}a", &long_name[..253]), false, false),
        ] {
            assert_eq!(dns_name(n), dns, "dns {n:?}");
            assert_eq!(libnodeagent::plan::valid_host_name(n), host, "host {n:?}");
        }
    }

    #[test]
    fn versions_macs_cidrs() {
        assert_eq!(
            kubernetes_version("--kubernetes-version", "v1.31.2")
                .unwrap()
                .0,
            31
        );
        assert_eq!(
            kubernetes_version("--kubernetes-version", "v1.30.0-rc.1")
                .unwrap()
                .0,
            30
        );
        for b in ["1.31.2", "v1.31", "v2.0.0", "v1.21.9", "v1.x.0"] {
            assert!(
                kubernetes_version("--kubernetes-version", b).is_err(),
                "{b}"
            );
        }
        assert_eq!(
            mac("--mac", "00:50:56:AA:bb:01").unwrap(),
            "00:50:56:aa:bb:01"
        );
        for b in ["00:50:56:aa:bb", "01:00:5e:00:00:01", "zz:50:56:aa:bb:01"] {
            assert!(mac("--mac", b).is_err(), "{b}");
        }
        assert!(cidr("--network", "10.0.0.5/24").is_ok());
        for b in [
            "10.0.0.5",
            "10.0.0.5/33",
            "10.0.0.5/x",
            "nope/24",
            "0.0.0.0/8",
        ] {
            assert!(cidr("--network", b).is_err(), "{b}");
        }
    }
}
