//! Waiting for the control-plane endpoint before a join: TCP connect, bounded, exponential
//! backoff with jitter (so a fleet of nodes booting together does not hammer a starting
//! API server in lockstep).

use std::net::{TcpStream, ToSocketAddrs};
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

/// One TCP connect to `host:port` (every resolved address), at most `timeout` each.
pub fn probe(endpoint: &str, timeout: Duration) -> Result<(), String> {
    let addrs: Vec<_> = endpoint
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {endpoint}: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("{endpoint} resolves to no address"));
    }
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
                crate::limits::ENDPOINT_CONNECT_TIMEOUT_SECS,
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
