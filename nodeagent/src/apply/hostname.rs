//! hostname, fqdn, /etc/hostname, kernel hostname, /etc/hosts.

use super::{Ctx, Outcome, files};
use crate::error::{Error, Result, Stage, ensure};
use crate::plan::{EtcHosts, FileWrite, HostnameSpec};

fn root_file(path: &str, content: Vec<u8>, mode: u32) -> FileWrite {
    FileWrite::root_owned(path, content, mode)
}

/// `/etc/hosts` with exactly one `<address> <fqdn> <hostname>` line for `address`
/// (cloud-init's `manage_etc_hosts: localhost`): an existing line for the address is replaced.
pub fn ensure_hosts_line(current: &str, address: &str, fqdn: &str, hostname: &str) -> String {
    let want = if fqdn == hostname || fqdn.is_empty() {
        format!("{address} {hostname}")
    } else {
        format!("{address} {fqdn} {hostname}")
    };
    let mut out = String::new();
    let mut placed = false;
    for line in current.lines() {
        let first = line.split_whitespace().next();
        if first == Some(address) && !line.trim_start().starts_with('#') {
            if !placed {
                out.push_str(&want);
                out.push('\n');
                placed = true;
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    if !placed {
        out.push_str(&want);
        out.push('\n');
    }
    out
}

/// A new /etc/hosts for `manage_etc_hosts: localhost`, as cloud-init's `update_etc_hosts`
/// writes one: a header line (`util.make_header(base="added")`, naming nodeagent), the entry
/// with tab-separated fields (`HostsConf`), a blank line.
fn created_hosts(address: &str, fqdn: &str, hostname: &str) -> String {
    let fmt = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] +0000"
    );
    let when = time::OffsetDateTime::now_utc()
        .format(&fmt)
        .unwrap_or_default();
    let names = if fqdn.is_empty() || fqdn == hostname {
        hostname.to_string()
    } else {
        format!("{fqdn}\t{hostname}")
    };
    format!(
        "# Added by nodeagent v. {} on {when}\n{address}\t{names}\n\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// Whether `current` is what `created_hosts` makes (its header line aside, which names the
/// time it was written).
fn created_by_us(current: &str, address: &str, fqdn: &str, hostname: &str) -> bool {
    let created = created_hosts(address, fqdn, hostname);
    current.starts_with("# Added by nodeagent v. ")
        && current.split_once('\n').map(|(_, rest)| rest)
            == created.split_once('\n').map(|(_, rest)| rest)
}

pub fn apply(ctx: &mut Ctx<'_>, h: &HostnameSpec) -> Result<Outcome> {
    let name = if h.prefer_fqdn && !h.fqdn.is_empty() {
        &h.fqdn
    } else {
        &h.hostname
    };
    // The plan's one rule (plans built elsewhere, e.g. by tests, are checked here too).
    ensure(
        crate::plan::valid_host_name(name),
        Stage::Apply,
        "hostname",
        || format!("{name:?} is not a valid host name"),
    )?;
    let t = ctx.target().clone();
    let db = ctx.db()?.clone();
    // /etc/hostname and /etc/hosts are committed together (one directory sync).
    let hostname_file = root_file("/etc/hostname", format!("{name}\n").into_bytes(), 0o644);
    let hosts_file = match &h.etc_hosts {
        None => None,
        Some(EtcHosts::Template(text)) => {
            Some(root_file("/etc/hosts", text.clone().into_bytes(), 0o644))
        }
        Some(EtcHosts::Localhost { address }) => {
            let p = t.path("/etc/hosts")?;
            let (cur, new) = match std::fs::read_to_string(&p) {
                // What this step creates, from a run cut short before it was journaled: kept
                // as it is, so a rerun ends as the uninterrupted run did.
                Ok(s) if created_by_us(&s, address, &h.fqdn, &h.hostname) => (s.clone(), s),
                Ok(s) => {
                    let new = ensure_hosts_line(&s, address, &h.fqdn, &h.hostname);
                    (s, new)
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    (String::new(), created_hosts(address, &h.fqdn, &h.hostname))
                }
                Err(e) => return Err(Error::io(Stage::Apply, "/etc/hosts", "", e)),
            };
            (new != cur).then(|| {
                let mut f = root_file("/etc/hosts", new.into_bytes(), 0o644);
                f.mode = None; // keep the file's mode, as an in-place edit would
                f
            })
        }
    };
    let entries: Vec<&FileWrite> = std::iter::once(&hostname_file)
        .chain(hosts_file.as_ref())
        .collect();
    files::write_all(&t, &entries, &db)?;
    if t.is_host() && ctx.opts.exec {
        nix::unistd::sethostname(name)
            .map_err(|e| Error::io(Stage::Apply, "hostname", "sethostname", e.into()))?;
    }
    Ok(Outcome::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_line_replaced_once() {
        let cur =
            "127.0.0.1 localhost\n127.0.1.1 old.example old\n# 127.0.1.1 comment\n127.0.1.1 dup\n";
        let new = ensure_hosts_line(cur, "127.0.1.1", "n1.example", "n1");
        assert_eq!(
            new,
            "127.0.0.1 localhost\n127.0.1.1 n1.example n1\n# 127.0.1.1 comment\n"
        );
        assert_eq!(
            ensure_hosts_line(&new, "127.0.1.1", "n1.example", "n1"),
            new
        );
        assert_eq!(
            ensure_hosts_line("", "127.0.1.1", "n1", "n1"),
            "127.0.1.1 n1\n"
        );
    }
    #[test]
    fn a_hosts_file_this_step_created_is_recognised_whatever_its_time() {
        let made = created_hosts("127.0.1.1", "n1.example", "n1");
        assert!(created_by_us(&made, "127.0.1.1", "n1.example", "n1"));
        let other_time = made.replacen(
            made.lines().next().unwrap_or(""),
            "# Added by nodeagent v. 0.1.0 on Mon, 01 Jan 2001 00:00:00 +0000",
            1,
        );
        assert!(created_by_us(&other_time, "127.0.1.1", "n1.example", "n1"));
        assert!(!created_by_us(&made, "127.0.1.1", "n2.example", "n2"));
        assert!(!created_by_us(
            "127.0.1.1\tn1.example\tn1\n\n",
            "127.0.1.1",
            "n1.example",
            "n1"
        ));
    }
}
