//! ntp: chrony or systemd-timesyncd configuration, whichever the image has.
//!
//! `auto` picks chrony when the image has it (cloud-init's Debian preference order puts
//! chrony first), else systemd-timesyncd. chrony gets `/etc/chrony/chrony.conf` from
//! cloud-init's Debian template (pools/servers replace the image defaults); timesyncd gets
//! `/etc/systemd/timesyncd.conf.d/nodeagent.conf`. The service is restarted only with `--exec`
//! on a real node (never under `--root`).

use super::{Ctx, Outcome, Target, commands, files};
use crate::error::{Error, Result, Stage};
use crate::plan::{FileWrite, NtpSpec};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    Chrony,
    Timesyncd,
}

fn exists(t: &Target, p: &str) -> bool {
    t.path(p).map(|p| p.exists()).unwrap_or(false)
}

/// The client to configure, from the spec and what the image has installed.
pub fn detect(t: &Target, wanted: &str) -> Result<Client> {
    let chrony = ["/usr/sbin/chronyd", "/usr/bin/chronyd", "/etc/chrony"]
        .iter()
        .any(|p| exists(t, p));
    let timesyncd = [
        "/lib/systemd/systemd-timesyncd",
        "/usr/lib/systemd/systemd-timesyncd",
    ]
    .iter()
    .any(|p| exists(t, p));
    let missing = |c: &str| {
        Error::new(
            Stage::Apply,
            "ntp.ntp_client",
            format!("{c} is not installed in the image"),
        )
    };
    match wanted {
        "chrony" if chrony => Ok(Client::Chrony),
        "chrony" => Err(missing("chrony")),
        "systemd-timesyncd" if timesyncd => Ok(Client::Timesyncd),
        "systemd-timesyncd" => Err(missing("systemd-timesyncd")),
        "auto" | "" if chrony => Ok(Client::Chrony),
        "auto" | "" if timesyncd => Ok(Client::Timesyncd),
        "auto" | "" => Err(Error::new(
            Stage::Apply,
            "ntp",
            "the image has neither chrony nor systemd-timesyncd",
        )),
        other => Err(Error::new(
            Stage::Apply,
            "ntp.ntp_client",
            format!("{other:?} is not supported (chrony, systemd-timesyncd, auto)"),
        )),
    }
}

/// cloud-init's defaults when neither servers nor pools are given.
fn sources(n: &NtpSpec) -> (Vec<String>, Vec<String>) {
    if n.servers.is_empty() && n.pools.is_empty() {
        (
            (0..4).map(|i| format!("{i}.debian.pool.ntp.org")).collect(),
            Vec::new(),
        )
    } else {
        (n.pools.clone(), n.servers.clone())
    }
}

pub fn render(client: Client, n: &NtpSpec) -> (&'static str, String) {
    let (pools, servers) = sources(n);
    match client {
        Client::Chrony => {
            let mut s = String::from("# Written by nodeagent (ntp).\n");
            if !pools.is_empty() {
                s.push_str("# pools\n");
            }
            for p in &pools {
                s.push_str(&format!("pool {p} iburst\n"));
            }
            if !servers.is_empty() {
                s.push_str("# servers\n");
            }
            for p in &servers {
                s.push_str(&format!("server {p} iburst\n"));
            }
            s.push_str(
                "\n# Use time sources from DHCP.\nsourcedir /run/chrony-dhcp\n\n# Use NTP sources found in /etc/chrony/sources.d.\nsourcedir /etc/chrony/sources.d\n\n\
                 # This directive specify the location of the file containing ID/key pairs for\n# NTP authentication.\nkeyfile /etc/chrony/chrony.keys\n\n\
                 # This directive specify the file into which chronyd will store the rate\n# information.\ndriftfile /var/lib/chrony/chrony.drift\n\n\
                 # Save NTS keys and cookies.\nntsdumpdir /var/lib/chrony\n\n# Log files location.\nlogdir /var/log/chrony\n\n\
                 # Stop bad estimates upsetting machine clock.\nmaxupdateskew 100.0\n\n\
                 # This directive enables kernel synchronisation (every 11 minutes) of the\n# real-time clock.\nrtcsync\n\n\
                 # Step the system clock instead of slewing it if the adjustment is larger than\n# one second, but only in the first three clock updates.\nmakestep 1 3\n\n\
                 # Get TAI-UTC offset and leap seconds from the system tz database.\nleapsectz right/UTC\n",
            );
            ("/etc/chrony/chrony.conf", s)
        }
        Client::Timesyncd => {
            let all: Vec<String> = servers.into_iter().chain(pools).collect();
            (
                "/etc/systemd/timesyncd.conf.d/nodeagent.conf",
                format!(
                    "# Written by nodeagent (ntp).\n[Time]\nNTP={}\n",
                    all.join(" ")
                ),
            )
        }
    }
}

pub fn apply(ctx: &mut Ctx<'_>, n: &NtpSpec) -> Result<Outcome> {
    if !n.enabled {
        return Ok(Outcome::Skipped);
    }
    for s in n.servers.iter().chain(&n.pools) {
        if s.is_empty() || s.contains(|c: char| c.is_whitespace() || c.is_control()) {
            return Err(Error::new(
                Stage::Apply,
                "ntp",
                format!("{s:?} is not a host name"),
            ));
        }
    }
    let t = ctx.target().clone();
    let client = detect(&t, &n.client)?;
    let (path, text) = render(client, n);
    let f = FileWrite::root_owned(path, text.clone().into_bytes(), 0o644);
    let db = ctx.db()?.clone();
    files::write_bytes(&t, &f, text.as_bytes(), &db)?;
    if ctx.opts.exec && t.is_host() {
        let unit = match client {
            Client::Chrony => "chrony",
            Client::Timesyncd => "systemd-timesyncd",
        };
        commands::run_host(&["systemctl", "restart", unit], None)?;
    }
    Ok(Outcome::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detect_under_root() {
        let d = tempfile::tempdir().unwrap();
        let t = Target::new(d.path());
        assert!(detect(&t, "auto").is_err());
        std::fs::create_dir_all(d.path().join("usr/lib/systemd")).unwrap();
        std::fs::write(d.path().join("usr/lib/systemd/systemd-timesyncd"), "").unwrap();
        assert_eq!(detect(&t, "auto").unwrap(), Client::Timesyncd);
        assert!(detect(&t, "chrony").is_err());
        std::fs::create_dir_all(d.path().join("etc/chrony")).unwrap();
        assert_eq!(detect(&t, "auto").unwrap(), Client::Chrony);
    }

    #[test]
    fn renders_sources() {
        let n = NtpSpec {
            enabled: true,
            client: "auto".into(),
            servers: vec!["10.0.0.1".into()],
            pools: vec!["pool.example".into()],
        };
        let (_, c) = render(Client::Chrony, &n);
        assert!(
            c.contains("pool pool.example iburst\n# servers\nserver 10.0.0.1 iburst\n"),
            "{c}"
        );
        let (p, t) = render(Client::Timesyncd, &n);
        assert_eq!(p, "/etc/systemd/timesyncd.conf.d/nodeagent.conf");
        assert!(t.ends_with("NTP=10.0.0.1 pool.example\n"));
        let (_, d) = render(
            Client::Timesyncd,
            &NtpSpec {
                enabled: true,
                ..Default::default()
            },
        );
        assert!(d.contains("NTP=0.debian.pool.ntp.org 1.debian.pool.ntp.org"));
    }
}
