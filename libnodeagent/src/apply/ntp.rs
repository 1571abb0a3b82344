//! ntp: chrony or systemd-timesyncd configuration, whichever the image has.
//!
//! As cloud-init's cc_ntp on Debian (22.4 and 25.1 alike): `auto` picks chrony when
//! `chronyd` is installed, else systemd-timesyncd (else chrony, which cloud-init would
//! install). The file is the output of cloud-init 25.1's template (`/etc/chrony/chrony.conf`
//! with its `peer` and `allow` lines, which 22.4 lacks, and its comment spelled `usable`,
//! 22.4's `usuable`; `/etc/systemd/timesyncd.conf.d/cloud-init.conf`), the previous one kept
//! as `.dist`. The service is reloaded only with `--exec` on a real node (never under
//! `--root`).

use super::{Ctx, Outcome, Target, commands, files};
use crate::base::error::{Error, Result, Stage};
use crate::plan::{FileWrite, NtpSpec};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    Chrony,
    Timesyncd,
}

/// Whether `p` exists in the target, its symlinks (the last one too) followed inside it.
fn exists(t: &Target, p: &str) -> bool {
    crate::base::confine::metadata(&t.root, p).is_ok()
}

/// Which clients the image has installed, as cloud-init's check_exe finds them: (chrony,
/// systemd-timesyncd). The plan's target probe reads the same paths.
pub fn installed(t: &Target) -> (bool, bool) {
    // cloud-init's check_exe: `chronyd` on the PATH, the timesyncd binary.
    let chrony = [
        "/usr/sbin/chronyd",
        "/usr/bin/chronyd",
        "/sbin/chronyd",
        "/bin/chronyd",
    ]
    .iter()
    .any(|p| exists(t, p));
    let timesyncd = [
        "/lib/systemd/systemd-timesyncd",
        "/usr/lib/systemd/systemd-timesyncd",
    ]
    .iter()
    .any(|p| exists(t, p));
    (chrony, timesyncd)
}

/// The client to configure, from the spec and what the image has installed.
pub fn detect(t: &Target, wanted: &str) -> Result<Client> {
    let (chrony, timesyncd) = installed(t);
    choose(wanted, chrony, timesyncd)
}

/// `detect` without the probe: an error when the wanted client is not installed.
pub fn choose(wanted: &str, chrony: bool, timesyncd: bool) -> Result<Client> {
    let missing = |c: &str| {
        Error::not_found(
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
        "auto" | "" => Err(Error::not_found(
            Stage::Apply,
            "ntp",
            "the image has neither chrony nor systemd-timesyncd",
        )),
        other => Err(Error::unsupported(
            Stage::Apply,
            "ntp.ntp_client",
            format!("{other:?} is not supported (chrony, systemd-timesyncd, auto)"),
        )),
    }
}

/// The client whose file `apply` writes and whether it is installed: a client that is not
/// installed is still configured (cloud-init would install it; `apply` warns), so only an
/// unsupported name is an error. The plan's target check uses the same choice.
pub fn pick(wanted: &str, chrony: bool, timesyncd: bool) -> Result<(Client, bool)> {
    match choose(wanted, chrony, timesyncd) {
        Ok(c) => Ok((c, true)),
        // auto with nothing installed: cloud-init picks its first preference, chrony.
        Err(_) if matches!(wanted, "auto" | "" | "chrony") => Ok((Client::Chrony, false)),
        Err(_) if wanted == "systemd-timesyncd" => Ok((Client::Timesyncd, false)),
        Err(e) => Err(e),
    }
}

/// The file `render` writes for a client (cloud-init's paths on Debian).
pub fn config_path(client: Client) -> &'static str {
    match client {
        Client::Chrony => "/etc/chrony/chrony.conf",
        Client::Timesyncd => "/etc/systemd/timesyncd.conf.d/cloud-init.conf",
    }
}

/// cloud-init's defaults when neither servers nor pools are given: Debian's pool names.
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

/// `templates/chrony.conf.debian.tmpl` of cloud-init 25.1 after the source lists: only the
/// servers and pools given (no `sourcedir`, so DHCP-offered servers do not win over them).
const CHRONY_TAIL: &str = "\n\
# This directive specify the location of the file containing ID/key pairs for\n\
# NTP authentication.\n\
keyfile /etc/chrony/chrony.keys\n\
\n\
# This directive specify the file into which chronyd will store the rate\n\
# information.\n\
driftfile /var/lib/chrony/chrony.drift\n\
\n\
# Uncomment the following line to turn logging on.\n\
#log tracking measurements statistics\n\
\n\
# Log files location.\n\
logdir /var/log/chrony\n\
\n\
# Stop bad estimates upsetting machine clock.\n\
maxupdateskew 100.0\n\
\n\
# This directive enables kernel synchronisation (every 11 minutes) of the\n\
# real-time clock. Note that it can’t be used along with the 'rtcfile' directive.\n\
rtcsync\n\
\n\
# Step the system clock instead of slewing it if the adjustment is larger than\n\
# one second, but only in the first three clock updates.\n\
makestep 1 3\n\
\n\
";

/// The file cloud-init's cc_ntp renders for `client`, byte for byte (its Debian templates).
pub fn render(client: Client, n: &NtpSpec) -> (&'static str, String) {
    let (pools, servers) = sources(n);
    match client {
        Client::Chrony => {
            let mut s = String::from(
                "# Welcome to the chrony configuration file. See chrony.conf(5) for more\n\
                 # information about usable directives.\n",
            );
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
            for p in &n.peers {
                s.push_str(&format!("peer {p}\n"));
            }
            for a in &n.allow {
                s.push_str(&format!("allow {a}\n"));
            }
            s.push_str(CHRONY_TAIL);
            (config_path(client), s)
        }
        Client::Timesyncd => {
            // timesyncd.conf.tmpl: servers first, each followed by a space.
            let hosts: String = servers
                .iter()
                .chain(&pools)
                .map(|h| format!("{h} "))
                .collect();
            (
                config_path(client),
                format!(
                    "# cloud-init generated file\n# See timesyncd.conf(5) for details.\n\n[Time]\nNTP={hosts}\n"
                ),
            )
        }
    }
}

/// cc_ntp: the image's file is kept as `<file>.dist`, the template output written, the
/// service reloaded (`systemctl reload-or-restart`, with `--exec` on a real node). A client
/// that is not installed (cloud-init would try to install it) or a failing reload is a
/// warning: cloud-init lets the module fail and carries on.
pub fn apply(ctx: &mut Ctx<'_>, n: &NtpSpec) -> Result<Outcome> {
    if !n.enabled {
        return Ok(Outcome::Skipped);
    }
    for s in n.servers.iter().chain(&n.pools) {
        if s.is_empty() || s.contains(|c: char| c.is_whitespace() || c.is_control()) {
            return Err(Error::invalid(
                Stage::Apply,
                "ntp",
                format!("{s:?} is not a host name"),
            ));
        }
    }
    let t = ctx.target().clone();
    let (chrony, timesyncd) = installed(&t);
    let (client, installed) = pick(&n.client, chrony, timesyncd)?;
    let (path, text) = render(client, n);
    let host = t.path(path)?;
    if host.exists() {
        let dist = t.path(&format!("{path}.dist"))?;
        std::fs::rename(&host, &dist).map_err(|e| Error::io(Stage::Apply, path, "", e))?;
    }
    let f = FileWrite::root_owned(path, text.clone().into_bytes(), 0o644);
    let db = ctx.db()?.clone();
    files::write_bytes(&t, &f, text.as_bytes(), &db)?;
    let unit = match client {
        Client::Chrony => "chrony",
        Client::Timesyncd => "systemd-timesyncd",
    };
    if !installed {
        ctx.warn(format!(
            "ntp: {unit} is not installed in the image (cloud-init would try to install it); {path} is written"
        ));
        return Ok(Outcome::Ok);
    }
    if ctx.opts.exec
        && t.is_host()
        && let Err(e) = commands::run_host(&["systemctl", "reload-or-restart", unit], None)
    {
        ctx.warn(format!("ntp: reloading {unit} failed: {}", e.detail()));
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
        assert_eq!(
            detect(&t, "auto").unwrap(),
            Client::Timesyncd,
            "a leftover /etc/chrony is not chrony"
        );
        std::fs::create_dir_all(d.path().join("usr/sbin")).unwrap();
        std::fs::write(d.path().join("usr/sbin/chronyd"), "").unwrap();
        assert_eq!(detect(&t, "auto").unwrap(), Client::Chrony);
    }

    #[test]
    fn renders_sources() {
        let n = NtpSpec {
            enabled: true,
            client: "auto".into(),
            servers: vec!["10.0.0.1".into()],
            pools: vec!["pool.example".into()],
            peers: vec!["peer.example".into()],
            allow: vec!["10.0.0.0/8".into()],
        };
        let (_, c) = render(Client::Chrony, &n);
        // As cloud-init 25.1's templater renders the template for the same lists.
        assert!(
            c.contains("# information about usable directives.\n# pools\npool pool.example iburst\n# servers\nserver 10.0.0.1 iburst\npeer peer.example\nallow 10.0.0.0/8\n\n# This directive"),
            "{c}"
        );
        let (p, t) = render(Client::Timesyncd, &n);
        assert_eq!(p, "/etc/systemd/timesyncd.conf.d/cloud-init.conf");
        assert!(t.ends_with("NTP=10.0.0.1 pool.example \n"));
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
