//! The human report: kubeadm's `check-expiration` tables (its date, residual-time and
//! tabwriter formats), then nodeagent's own checks.

use super::*;

/// Go's `text/tabwriter` as kubeadm configures it (minwidth 10, padding 3, spaces): every
/// tab-terminated cell padded to its column's width; the last cell of a line as is.
/// A line without tabs ends the column block, as in Go.
pub(super) fn tabwrite(lines: &[String]) -> String {
    let mut out = String::new();
    let mut block: Vec<Vec<&str>> = Vec::new();
    let flush = |block: &mut Vec<Vec<&str>>, out: &mut String| {
        let cols = block
            .iter()
            .map(|c| c.len().saturating_sub(1))
            .max()
            .unwrap_or(0);
        let mut widths = vec![0usize; cols];
        for cells in block.iter() {
            for (w, cell) in widths
                .iter_mut()
                .zip(cells.iter().take(cells.len().saturating_sub(1)))
            {
                *w = (*w).max((cell.chars().count() + 3).max(10));
            }
        }
        for cells in block.iter() {
            let last = cells.len().saturating_sub(1);
            for (i, cell) in cells.iter().enumerate() {
                if i < last {
                    let w = widths.get(i).copied().unwrap_or(0);
                    out.push_str(&format!("{cell:<w$}"));
                } else {
                    out.push_str(cell);
                }
            }
            out.push('\n');
        }
        block.clear();
    };
    for line in lines {
        let cells: Vec<&str> = line.split('\t').collect();
        if cells.len() == 1 {
            flush(&mut block, &mut out);
            out.push_str(line);
            out.push('\n');
        } else {
            block.push(cells);
        }
    }
    flush(&mut block, &mut out);
    out
}

pub(super) fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// A row of kubeadm's certificate table (`with_ca`: its CERTIFICATE AUTHORITY column) or CA
/// table: name, expiry, residual time, externally managed; `!MISSING!` and empty cells for
/// an absent file.
fn kubeadm_row(e: &Entry, with_ca: bool) -> String {
    let ca = e.certificate_authority.as_deref().unwrap_or("");
    let Some(not_after) = e.not_after else {
        let empty = if with_ca { "\t\t\t\t" } else { "\t\t\t" };
        return format!("!MISSING! {}{empty}", e.name);
    };
    let mut cells = vec![e.name.clone(), kubeadm_date(not_after), e.residual.clone()];
    if with_ca {
        cells.push(ca.to_string());
    }
    cells.push(format!("{:<8}", yes_no(e.externally_managed)));
    cells.join("\t")
}

/// The human report: kubeadm's two tables exactly as `kubeadm certs check-expiration`
/// prints them, then nodeagent's checks of every certificate and the problems found.
pub fn render_text(r: &Report) -> String {
    let date = |e: &Entry| e.not_after.map(kubeadm_date).unwrap_or_default();
    let mut lines = vec![
        "CERTIFICATE\tEXPIRES\tRESIDUAL TIME\tCERTIFICATE AUTHORITY\tEXTERNALLY MANAGED"
            .to_string(),
    ];
    lines.extend(r.certificates.iter().map(|e| kubeadm_row(e, true)));
    lines.push(String::new());
    lines.push("CERTIFICATE AUTHORITY\tEXPIRES\tRESIDUAL TIME\tEXTERNALLY MANAGED".into());
    lines.extend(
        r.certificate_authorities
            .iter()
            .map(|e| kubeadm_row(e, false)),
    );
    // Beyond kubeadm: every certificate present, with what nodeagent verified.
    lines.push(String::new());
    lines.push("CHECKED\tSIGNED BY (SIGNATURE)\tKEY\tCHAIN\tSANS\tEXPIRES\tRESIDUAL TIME".into());
    let present = r
        .certificates
        .iter()
        .chain(&r.certificate_authorities)
        .chain(&r.other)
        .filter(|e| !e.missing);
    for e in present {
        lines.push(format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            e.name,
            e.signed_by.as_deref().unwrap_or(if e.not_after.is_some() {
                "unknown CA"
            } else {
                "-"
            }),
            e.key,
            e.chain,
            e.sans,
            if e.not_after.is_some() {
                date(e)
            } else {
                "-".into()
            },
            if e.not_after.is_some() {
                e.residual.as_str()
            } else {
                "-"
            },
        ));
    }
    lines.push(String::new());
    match &r.kubeadm_config {
        Some(p) => lines.push(format!("SANs checked against {p}")),
        None => lines.push(
            "SANs not checked: no kubeadm config (run/kubeadm/kubeadm*.yaml, etc/kubernetes/kubeadm*.yaml, --kubeadm-config)".into(),
        ),
    }
    for (what, list) in [("problem", &r.problems), ("warning", &r.warnings)] {
        for p in list.iter() {
            lines.push(format!("{what}: {}: {} [{}]", p.place, p.message, p.kind));
        }
    }
    if r.problems.is_empty() && r.warnings.is_empty() {
        lines.push("no problems found".into());
    }
    tabwrite(&lines)
}

/// Now in Unix seconds rounded up: kubeadm's residual time is `time.Until(notAfter)`
/// truncated to seconds, so a certificate valid for 365 days from a moment ago shows `364d`.
pub fn now_ceil() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64 + i64::from(d.subsec_nanos() > 0))
        .unwrap_or(0)
}

/// kubeadm's `duration.ShortHumanDuration`: `<invalid>` below -1 s, then s, m, h, d, y.
pub fn short_human_duration(secs: i64) -> String {
    if secs < -1 {
        "<invalid>".into()
    } else if secs < 0 {
        "0s".into()
    } else if secs < 60 {
        format!("{secs}s")
    } else if secs < 3600 {
        format!("{}m", secs / 60)
    } else if secs < 86400 {
        format!("{}h", secs / 3600)
    } else if secs < 365 * 86400 {
        format!("{}d", secs / 86400)
    } else {
        format!("{}y", secs / (365 * 86400))
    }
}

/// kubeadm's date format, Go's `Jan 02, 2006 15:04 MST` in UTC.
pub fn kubeadm_date(unix: i64) -> String {
    let fmt =
        time::macros::format_description!("[month repr:short] [day], [year] [hour]:[minute] UTC");
    time::OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| t.format(&fmt).ok())
        .unwrap_or_else(|| unix.to_string())
}
