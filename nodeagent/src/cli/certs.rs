//! `nodeagent certs`: the certificates of a PKI directory, like `kubeadm certs
//! check-expiration` plus whether each key matches.
//! Exit 1 when a certificate is expired or not yet valid, a key does not match, or a file is unreadable.

use crate::error::exit;
use crate::pki::{CertRow, scan_dir};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// PKI directory (default: /etc/kubernetes/pki under --root).
    pub dir: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Node root the default directory is taken from.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
}

pub fn run(args: Args) -> i32 {
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| args.root.join("etc/kubernetes/pki"));
    let now = crate::pki::now();
    let rows = match scan_dir(&dir, now) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nodeagent certs: {}: {e}", dir.display());
            return exit::FAILED;
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
    } else {
        print!("{}", table(&rows));
    }
    if rows.iter().any(|r| problem(r, now)) {
        exit::FAILED
    } else {
        exit::OK
    }
}

fn problem(r: &CertRow, _now: i64) -> bool {
    r.error.is_some()
        || r.key_matches == "no"
        || r.key_matches.starts_with("unreadable")
        || (r.kind == "certificate" && r.residual_secs < 0)
}

/// The text table (pure).
pub fn table(rows: &[CertRow]) -> String {
    let head = [
        "FILE",
        "SUBJECT",
        "ISSUER",
        "EXPIRES",
        "RESIDUAL TIME",
        "CA",
        "KEY MATCHES",
        "KEY",
    ];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|r| match &r.error {
            Some(e) => [
                r.file.clone(),
                format!("error: {e}"),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ],
            None => [
                r.file.clone(),
                if r.kind == "public-key" {
                    "(public key)".into()
                } else {
                    r.subject.clone()
                },
                r.issuer.clone(),
                r.not_after.clone(),
                if r.kind == "public-key" {
                    String::new()
                } else if r.residual_secs < 0 {
                    "EXPIRED".into()
                } else {
                    r.residual.clone()
                },
                if r.kind == "public-key" {
                    String::new()
                } else if r.ca {
                    "yes".into()
                } else {
                    "no".into()
                },
                r.key_matches.clone(),
                r.key_algorithm.clone(),
            ],
        })
        .collect();
    let mut widths = head.map(|h| h.len());
    for c in &cells {
        for (w, v) in widths.iter_mut().zip(c.iter()) {
            *w = (*w).max(v.chars().count());
        }
    }
    let line = |vals: Vec<&str>| {
        let mut s = String::new();
        for (i, v) in vals.iter().enumerate() {
            if i + 1 == vals.len() {
                s.push_str(v);
            } else {
                s.push_str(&format!("{v:<w$}  ", w = widths[i]));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(head.to_vec());
    for c in &cells {
        out.push_str(&line(c.iter().map(String::as_str).collect()));
    }
    out
}
