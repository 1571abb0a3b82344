//! Waiting for the control-plane endpoint before a join: TCP connect, bounded, exponential
//! backoff with jitter (so a fleet of nodes booting together does not hammer a starting
//! API server in lockstep).

use crate::base::process::{self, Limits};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// Delay before retry `attempt` (0-based): `initial * 2^attempt`, capped at `max`, then
/// scaled by a random factor in [0.5, 1.0] ("equal jitter").
pub fn backoff(attempt: u32, initial: f64, max: f64) -> Duration {
    let base = (initial.max(0.0) * 2f64.powi(attempt.min(30) as i32)).min(max.max(0.0));
    let jitter = 0.5 + 0.5 * random_unit();
    Duration::from_secs_f64(base * jitter)
}

fn random_unit() -> f64 {
    let mut b = [0u8; 4];
    if getrandom::fill(&mut b).is_err() {
        return 1.0;
    }
    u32::from_le_bytes(b) as f64 / u32::MAX as f64
}

/// The addresses of `host:port`. An address literal is taken as it is. A name is looked up
/// by the image's own resolver, `getent ahosts` (glibc's NSS: /etc/hosts, DNS and any module
/// nsswitch.conf names), in a child process bounded by `timeout`: an in-process
/// `getaddrinfo` has no bound of ours (resolv.conf's timeouts, attempts and servers multiply
/// to half a minute or more), and a process can be killed where a library call cannot.
pub fn resolve(endpoint: &str, timeout: Duration) -> Result<Vec<SocketAddr>, String> {
    if let Ok(addr) = endpoint.parse::<SocketAddr>() {
        return Ok(vec![addr]);
    }
    let bad = |why: &str| format!("cannot resolve {endpoint}: {why}");
    // kubeadm's own HOST:PORT rule: an IP or a DNS name, so never something getent would
    // take for an option.
    let (host, port) = match super::config::split_host_port(endpoint) {
        Some((host, Some(port))) => (host, port),
        Some((_, None)) => return Err(bad("no port")),
        None => return Err(bad("not HOST:PORT with an IP address or a DNS name")),
    };
    let mut getent = Command::new("getent");
    getent.args(["ahosts", "--", &host]);
    let out = process::run(getent, &Limits::new(timeout).stdout_cap(64 * 1024), None)
        .map_err(|e| bad(&e.to_string()))?;
    if !out.status.success() {
        return Err(match out.status.code() {
            Some(2) => bad("no such name"),
            _ => bad(&format!("getent ahosts {}", process::describe(&out.status))),
        });
    }
    let addrs = stream_addresses(&out.stdout, port);
    if addrs.is_empty() {
        return Err(format!("{endpoint} resolves to no address"));
    }
    Ok(addrs)
}

/// The addresses of `getent ahosts` output (`ADDRESS STREAM|DGRAM|RAW [NAME]` lines), once
/// each, in the resolver's order.
fn stream_addresses(out: &[u8], port: u16) -> Vec<SocketAddr> {
    let mut addrs = Vec::new();
    for line in String::from_utf8_lossy(out).lines() {
        let mut fields = line.split_whitespace();
        let (Some(ip), Some("STREAM")) = (fields.next(), fields.next()) else {
            continue;
        };
        if let Ok(ip) = ip.parse::<IpAddr>() {
            let addr = SocketAddr::new(ip, port);
            if !addrs.contains(&addr) {
                addrs.push(addr);
            }
        }
    }
    addrs
}

/// One TCP connect to `host:port` (every resolved address), at most `timeout` each.
pub fn probe(endpoint: &str, timeout: Duration) -> Result<(), String> {
    let addrs = resolve(endpoint, timeout)?;
    let mut last = String::new();
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout.max(Duration::from_millis(10))) {
            Ok(_) => return Ok(()),
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(last)
}

/// Probe until the endpoint accepts a connection or `deadline` passes. `on_retry(attempt, error)`
/// is called after each failed probe (for status and logs).
pub fn wait_for(
    endpoint: &str,
    deadline: Instant,
    initial: f64,
    max: f64,
    mut on_retry: impl FnMut(u32, &str),
) -> Result<u32, String> {
    let mut attempt = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let err = match probe(
            endpoint,
            left.min(Duration::from_secs(
                crate::base::limits::ENDPOINT_CONNECT_TIMEOUT_SECS,
            )),
        ) {
            Ok(()) => return Ok(attempt),
            Err(e) => e,
        };
        attempt += 1;
        on_retry(attempt, &err);
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "{endpoint} did not accept a TCP connection in time ({attempt} attempts; last error: {err})"
            ));
        }
        std::thread::sleep(backoff(attempt - 1, initial, max).min(left));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_capped_with_jitter() {
        for a in 0..10 {
            let d = backoff(a, 1.0, 30.0).as_secs_f64();
            let base = (2f64.powi(a as i32)).min(30.0);
            assert!(d >= base * 0.5 - 1e-9 && d <= base + 1e-9, "{a}: {d}");
        }
        let samples: std::collections::BTreeSet<u128> =
            (0..20).map(|_| backoff(3, 1.0, 30.0).as_micros()).collect();
        assert!(samples.len() > 1, "jitter varies");
    }

    #[test]
    fn getent_output_gives_the_stream_addresses_once_each_in_order() {
        let out = b"10.0.0.10       STREAM kube.example\n10.0.0.10       DGRAM  \n10.0.0.10       RAW    \nfd00::a         STREAM \nnot-an-ip STREAM x\n";
        let got = stream_addresses(out, 6443);
        let want: Vec<SocketAddr> = vec![
            "10.0.0.10:6443".parse().unwrap(),
            "[fd00::a]:6443".parse().unwrap(),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn an_address_literal_is_not_looked_up_and_a_name_goes_to_the_resolver() {
        let t = Duration::from_secs(10);
        assert_eq!(
            resolve("[::1]:6443", t).unwrap(),
            vec!["[::1]:6443".parse().unwrap()]
        );
        for bad in ["no-port", "host:http", ":6443", "-n:6443", "a b:6443"] {
            let e = resolve(bad, t).unwrap_err();
            assert!(e.starts_with(&format!("cannot resolve {bad}: ")), "{e}");
        }
        // A name the host's /etc/hosts answers (so no query leaves the machine).
        let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
        let in_hosts = hosts.lines().any(|l| {
            l.split('#')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .skip(1)
                .any(|n| n == "localhost")
        });
        if !in_hosts
            || process::find_executable("getent", std::env::var_os("PATH").as_deref()).is_none()
        {
            crate::test_skip(
                "NODEAGENT_PRIVILEGED_TESTS",
                "the name lookup needs getent (libc-bin) and localhost in /etc/hosts",
            );
            return;
        }
        let local = resolve("localhost:6443", t).unwrap();
        assert!(!local.is_empty());
        assert!(
            local
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 6443),
            "{local:?}"
        );
    }

    #[test]
    fn probe_and_wait() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ep = l.local_addr().unwrap().to_string();
        probe(&ep, Duration::from_secs(1)).unwrap();
        drop(l);
        let start = Instant::now();
        let mut retries = 0;
        let e = wait_for(
            &ep,
            Instant::now() + Duration::from_millis(600),
            0.05,
            0.2,
            |_, _| retries += 1,
        )
        .unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(3));
        assert!(retries >= 2 && e.contains(&ep), "{retries} {e}");
    }
}
