//! `wait-on-network` (CAPV / VM Operator metadata): before the main stage reads host facts
//! (the addresses templates and `guestinfo.local-ipv4` use), wait until an address of each
//! asked family exists, as cloud-init's DataSourceVMware `wait_on_network` does: polled once a
//! second, loopback and link-local addresses do not count. cloud-init waits forever; nodeagent
//! stops at the image config's `wait_on_network_timeout_secs` and goes on with a warning.

use crate::source::facts::Facts;
use crate::source::metadata::WaitOnNetwork;
use std::time::{Duration, Instant};

/// Does `facts` have what `want` asks for? (`by-ipv4` / `by-ipv6` non-empty.)
pub fn ready(want: &WaitOnNetwork, facts: &Facts) -> bool {
    let has4 = facts.interfaces.iter().any(|i| !i.ipv4.is_empty());
    let has6 = facts.interfaces.iter().any(|i| !i.ipv6.is_empty());
    (!want.ipv4 || has4) && (!want.ipv6 || has6)
}

/// What is still missing, for the status detail: `an IPv4 address`, `IPv4 and IPv6 addresses`.
pub fn missing(want: &WaitOnNetwork, facts: &Facts) -> String {
    let need4 = want.ipv4 && !facts.interfaces.iter().any(|i| !i.ipv4.is_empty());
    let need6 = want.ipv6 && !facts.interfaces.iter().any(|i| !i.ipv6.is_empty());
    match (need4, need6) {
        (true, true) => "IPv4 and IPv6 addresses".into(),
        (true, false) => "an IPv4 address".into(),
        (false, true) => "an IPv6 address".into(),
        (false, false) => "nothing".into(),
    }
}

/// Wait until `detect()` returns facts that are `ready`, polling every `poll`, for at most
/// `timeout`. `waiting(detail)` is called when the wait starts and about every 10 s after.
/// Returns the last facts and, when the deadline passed first, the warning to report.
pub fn wait(
    want: &WaitOnNetwork,
    first: Facts,
    timeout: Duration,
    poll: Duration,
    mut detect: impl FnMut() -> Facts,
    mut waiting: impl FnMut(&str),
) -> (Facts, Option<String>) {
    let mut facts = first;
    if ready(want, &facts) {
        return (facts, None);
    }
    let start = Instant::now();
    let mut told: Option<Instant> = None;
    loop {
        let elapsed = start.elapsed();
        if elapsed >= timeout {
            let w = format!(
                "wait-on-network: no {} after {} s (wait_on_network_timeout_secs); going on without",
                missing(want, &facts).trim_start_matches("an "),
                timeout.as_secs()
            );
            return (facts, Some(w));
        }
        if told.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
            waiting(&format!(
                "wait-on-network: waiting for {} ({} s of {} s)",
                missing(want, &facts),
                elapsed.as_secs(),
                timeout.as_secs()
            ));
            told = Some(Instant::now());
        }
        std::thread::sleep(poll.min(timeout - elapsed));
        facts = detect();
        if ready(want, &facts) {
            return (facts, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::facts::{Addr4, Addr6, Interface};

    fn with(v4: bool, v6: bool) -> Facts {
        Facts {
            interfaces: vec![Interface {
                name: "eth0".into(),
                ipv4: v4
                    .then(|| Addr4 {
                        addr: "10.0.0.5".into(),
                        ..Default::default()
                    })
                    .into_iter()
                    .collect(),
                ipv6: v6
                    .then(|| Addr6 {
                        addr: "2001:db8::5".into(),
                        ..Default::default()
                    })
                    .into_iter()
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    const V4: WaitOnNetwork = WaitOnNetwork {
        ipv4: true,
        ipv6: false,
    };

    #[test]
    fn ready_follows_the_asked_families() {
        assert!(ready(&WaitOnNetwork::default(), &Facts::default()));
        assert!(!ready(&V4, &with(false, true)));
        assert!(ready(&V4, &with(true, false)));
        let both = WaitOnNetwork {
            ipv4: true,
            ipv6: true,
        };
        assert!(!ready(&both, &with(true, false)));
        assert_eq!(missing(&both, &with(true, false)), "an IPv6 address");
        assert!(ready(&both, &with(true, true)));
    }

    #[test]
    fn waits_until_the_address_comes_and_reports_while_waiting() {
        let mut polls = 0;
        let mut details = Vec::new();
        let (facts, warning) = wait(
            &V4,
            with(false, false),
            Duration::from_secs(30),
            Duration::from_millis(5),
            || {
                polls += 1;
                with(polls >= 3, false)
            },
            |d| details.push(d.to_string()),
        );
        assert_eq!(warning, None);
        assert_eq!(polls, 3);
        assert!(ready(&V4, &facts));
        assert_eq!(details.len(), 1);
        assert!(
            details[0].starts_with("wait-on-network: waiting for an IPv4 address (0 s of 30 s)"),
            "{details:?}"
        );
    }

    #[test]
    fn never_forever_the_deadline_ends_it_with_a_warning() {
        let t = Instant::now();
        let mut details = 0;
        let (_, warning) = wait(
            &V4,
            with(false, true),
            Duration::from_millis(200),
            Duration::from_millis(20),
            || with(false, true),
            |_| details += 1,
        );
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(details, 1);
        let w = warning.expect("a warning");
        assert!(w.contains("no IPv4 address after 0 s"), "{w}");
    }

    #[test]
    fn nothing_asked_or_already_there_means_no_wait() {
        let (_, w) = wait(
            &V4,
            with(true, false),
            Duration::from_secs(30),
            Duration::from_secs(30),
            || unreachable!("no poll needed"),
            |_| unreachable!("no waiting"),
        );
        assert_eq!(w, None);
    }
}
