//! hostname, fqdn, /etc/hostname, kernel hostname, /etc/hosts.

use super::{Ctx, Outcome, files};
use crate::base::error::{Error, Result, Stage, ensure};
use crate::plan::{EtcHosts, FileWrite, HostnameSpec};

fn root_file(path: &str, content: Vec<u8>, mode: u32) -> FileWrite {
    FileWrite::root_owned(path, content, mode)
}

/// Python's `str.splitlines()`: the lines without their ends, split at every line boundary
/// Python knows (`\n`, `\r\n`, `\r`, `\v`, `\f`, `\x1c`-`\x1e`, `\x85`, U+2028, U+2029).
fn py_splitlines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let Some((at, c)) = rest.char_indices().find(|(_, c)| {
            matches!(
                c,
                '\n' | '\r'
                    | '\u{0b}'
                    | '\u{0c}'
                    | '\u{1c}'
                    | '\u{1d}'
                    | '\u{1e}'
                    | '\u{85}'
                    | '\u{2028}'
                    | '\u{2029}'
            )
        }) else {
            out.push(rest);
            break;
        };
        out.push(rest.get(..at).unwrap_or_default());
        let mut next = at + c.len_utf8();
        if c == '\r' && rest.get(next..).is_some_and(|r| r.starts_with('\n')) {
            next += 1;
        }
        rest = rest.get(next..).unwrap_or_default();
    }
    out
}

/// One line of /etc/hosts as cloud-init's `HostsConf` holds it: kept as it is (blank, or a
/// comment only), or an entry's fields and the comment that followed them.
enum HostsLine<'a> {
    Kept(&'a str),
    Entry(Vec<&'a str>, &'a str),
}

impl HostsLine<'_> {
    /// As `HostsConf.__str__` writes it: an entry's fields tab-separated, its comment right
    /// after the last one.
    fn write(&self, out: &mut String) {
        match self {
            HostsLine::Kept(l) => out.push_str(l),
            HostsLine::Entry(fields, tail) => {
                out.push_str(&fields.join("\t"));
                out.push_str(tail);
            }
        }
        out.push('\n');
    }
}

/// `HostsConf._parse`: a line blank after `strip()` is kept, else it is cut at its first
/// `#` (`chop_comment`); nothing before it is a comment line, kept; else an entry.
fn parse_hosts(text: &str) -> Vec<HostsLine<'_>> {
    py_splitlines(text)
        .into_iter()
        .map(|line| {
            let stripped = line.trim_matches(crate::source::decode::py_isspace);
            if stripped.is_empty() {
                return HostsLine::Kept(line);
            }
            let (head, tail) = stripped.split_at(stripped.find('#').unwrap_or(stripped.len()));
            let fields: Vec<&str> = head
                .split(crate::source::decode::py_isspace)
                .filter(|f| !f.is_empty())
                .collect();
            if fields.is_empty() {
                HostsLine::Kept(line)
            } else {
                HostsLine::Entry(fields, tail)
            }
        })
        .collect()
}

/// cloud-init's `Distro.update_etc_hosts` (`manage_etc_hosts: localhost`, the same in 22.4 and
/// 25.1) on the file's text: `None` when an entry for `address` already names `fqdn` first
/// and `hostname` after it (the file is left as it is). Else every entry for `address` is
/// moved to the end, followed by `address fqdn hostname`, and the whole file is written back
/// as `HostsConf` writes it: entries tab-separated, blank and comment lines as they were, and
/// one more newline at the end.
pub fn update_hosts(current: &str, address: &str, fqdn: &str, hostname: &str) -> Option<String> {
    let mut lines = parse_hosts(current);
    let prev: Vec<Vec<&str>> = lines
        .iter()
        .filter_map(|l| match l {
            HostsLine::Entry(f, _) if f.first() == Some(&address) => {
                Some(f.get(1..).unwrap_or_default().to_vec())
            }
            _ => None,
        })
        .collect();
    let present = prev
        .iter()
        .any(|e| e.first() == Some(&fqdn) && e.get(1..).is_some_and(|a| a.contains(&hostname)));
    if present {
        return None;
    }
    lines.retain(|l| !matches!(l, HostsLine::Entry(f, _) if f.first() == Some(&address)));
    for names in prev.iter().filter(|n| !n.is_empty()) {
        let fields = std::iter::once(address)
            .chain(names.iter().copied())
            .collect();
        lines.push(HostsLine::Entry(fields, ""));
    }
    lines.push(HostsLine::Entry(vec![address, fqdn, hostname], ""));
    let mut out = String::new();
    for l in &lines {
        l.write(&mut out);
    }
    out.push('\n');
    Some(out)
}

/// The header cloud-init puts on an /etc/hosts it creates (`util.make_header(base="added")`),
/// naming nodeagent.
fn added_header() -> String {
    let fmt = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] +0000"
    );
    let when = time::OffsetDateTime::now_utc()
        .format(&fmt)
        .unwrap_or_default();
    format!(
        "# Added by nodeagent v. {} on {when}",
        env!("CARGO_PKG_VERSION")
    )
}

/// Most of an image's /etc/hosts read to update it.
const MAX_HOSTS_BYTES: u64 = 1 << 20;

/// The new /etc/hosts for `manage_etc_hosts: localhost`, `None` when it needs no change.
fn localhost_hosts(t: &super::Target, address: &str, h: &HostnameSpec) -> Result<Option<String>> {
    let current = match files::locate(t, "/etc/hosts")? {
        (Some(dir), name) => files::read_regular(&dir, name, "/etc/hosts", MAX_HOSTS_BYTES)?,
        (None, _) => None,
    };
    Ok(match current {
        Some(bytes) => {
            let text = String::from_utf8(bytes).map_err(|e| {
                Error::invalid(
                    Stage::Apply,
                    "/etc/hosts",
                    format!(
                        "is not UTF-8 (invalid byte at offset {})",
                        e.utf8_error().valid_up_to()
                    ),
                )
            })?;
            update_hosts(&text, address, &h.fqdn, &h.hostname)
        }
        None => update_hosts("", address, &h.fqdn, &h.hostname)
            .map(|body| format!("{}\n{body}", added_header())),
    })
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
    let hostname_file =
        (!h.preserve).then(|| root_file("/etc/hostname", format!("{name}\n").into_bytes(), 0o644));
    let hosts_file = match &h.etc_hosts {
        None => None,
        Some(EtcHosts::Template(text)) => {
            Some(root_file("/etc/hosts", text.clone().into_bytes(), 0o644))
        }
        // Written 0644 (`util.write_file(..., mode=0o644)`) when it changes.
        Some(EtcHosts::Localhost { address }) => localhost_hosts(&t, address, h)?
            .map(|text| root_file("/etc/hosts", text.into_bytes(), 0o644)),
    };
    let entries: Vec<&FileWrite> = hostname_file.iter().chain(hosts_file.as_ref()).collect();
    if !entries.is_empty() {
        files::write_all(&t, &entries, &db)?;
    }
    if t.is_host() && ctx.opts.exec && !h.preserve {
        nix::unistd::sethostname(name)
            .map_err(|e| Error::io(Stage::Apply, "hostname", "sethostname", e.into()))?;
    }
    Ok(Outcome::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cloud-init's HostsConf output for the same inputs (run by hand through 25.1's
    /// `distros/parsers/hosts.py` and `Distro.update_etc_hosts`).
    #[test]
    fn hosts_updated_as_cloud_init_writes_it_back() {
        let cur = "127.0.0.1 localhost   # loop\n\n# a comment\n127.0.1.1 old.example old\n::1     localhost ip6-localhost\n";
        assert_eq!(
            update_hosts(cur, "127.0.1.1", "n1.example", "n1").unwrap(),
            "127.0.0.1\tlocalhost# loop\n\n# a comment\n::1\tlocalhost\tip6-localhost\n127.0.1.1\told.example\told\n127.0.1.1\tn1.example\tn1\n\n"
        );
        // Already there (the fqdn first, the name among the aliases): left alone.
        assert_eq!(
            update_hosts(
                "127.0.1.1 n1.example x n1\n",
                "127.0.1.1",
                "n1.example",
                "n1"
            ),
            None
        );
        // The same name twice, as cloud-init writes it when the fqdn is the name.
        assert_eq!(
            update_hosts("", "127.0.1.1", "n1", "n1").unwrap(),
            "127.0.1.1\tn1\tn1\n\n"
        );
        // A bare address line is dropped, blank lines with spaces kept as they were.
        assert_eq!(
            update_hosts("127.0.1.1\n  \r\n10.0.0.1 a\r\n", "127.0.1.1", "f.x", "f").unwrap(),
            "  \n10.0.0.1\ta\n127.0.1.1\tf.x\tf\n\n"
        );
        // Applied to its own output, nothing changes.
        let once = update_hosts(cur, "127.0.1.1", "n1.example", "n1").unwrap();
        assert_eq!(update_hosts(&once, "127.0.1.1", "n1.example", "n1"), None);
    }
}
