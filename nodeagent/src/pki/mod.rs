//! PKI inspection and checks with x509-parser (certs command, pre-flight).

pub mod check;
pub mod hash;
pub mod inspect;

use serde::Serialize;
use std::path::{Path, PathBuf};

/// One line of `nodeagent certs`: a certificate (or `sa.pub`) found under a PKI directory.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CertRow {
    /// Path relative to the scanned directory (`etcd/ca.crt`); `[n]` marks the n-th cert of a bundle.
    pub file: String,
    /// `certificate` or `public-key` (sa.pub).
    pub kind: &'static str,
    pub subject: String,
    pub issuer: String,
    pub serial: String,
    pub not_before: String,
    pub not_after: String,
    /// Seconds until notAfter (negative: expired).
    pub residual_secs: i64,
    pub residual: String,
    pub ca: bool,
    /// `yes`, `no`, `no key file`, `undecidable`.
    pub key_matches: String,
    pub key_algorithm: String,
    /// Why the file could not be read; the other fields are empty then.
    pub error: Option<String>,
}

/// Every certificate and public key under `dir` (recursively, sorted by path).
pub fn scan_dir(dir: &Path, now: i64) -> std::io::Result<Vec<CertRow>> {
    let mut files = Vec::new();
    walk(dir, &mut files)?;
    files.sort();
    let mut rows = Vec::new();
    for path in files {
        let rel = path
            .strip_prefix(dir)
            .unwrap_or(&path)
            .display()
            .to_string();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let data = std::fs::read(&path)?;
        if name.ends_with(".crt")
            || (name.ends_with(".pem") && data.windows(17).any(|w| w == b"BEGIN CERTIFICATE"))
        {
            rows.extend(cert_rows(&path, &rel, &data, now));
        } else if name.ends_with(".pub") {
            rows.push(pub_row(&path, &rel, &data));
        }
    }
    Ok(rows)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let ft = e.file_type()?;
        if ft.is_dir() {
            walk(&e.path(), out)?;
        } else if ft.is_file() {
            out.push(e.path());
        }
    }
    Ok(())
}

fn empty_row(rel: &str, kind: &'static str, error: Option<String>) -> CertRow {
    CertRow {
        file: rel.to_string(),
        kind,
        subject: String::new(),
        issuer: String::new(),
        serial: String::new(),
        not_before: String::new(),
        not_after: String::new(),
        residual_secs: 0,
        residual: String::new(),
        ca: false,
        key_matches: String::new(),
        key_algorithm: String::new(),
        error,
    }
}

/// The private key next to a certificate or public key: `x.crt` → `x.key`.
fn key_file(path: &Path) -> Option<Vec<u8>> {
    std::fs::read(path.with_extension("key")).ok()
}

fn match_text(key: Option<&[u8]>, public: &inspect::PubKey) -> String {
    let Some(key) = key else {
        return "no key file".into();
    };
    match inspect::parse_private_key(key) {
        Err(e) => format!("unreadable key: {e}"),
        Ok(k) => match inspect::key_matches(&k, public) {
            Some(true) => "yes".into(),
            Some(false) => "no".into(),
            None => "undecidable".into(),
        },
    }
}

fn cert_rows(path: &Path, rel: &str, data: &[u8], now: i64) -> Vec<CertRow> {
    let certs = match inspect::parse_certs(data) {
        Ok(c) => c,
        Err(e) => return vec![empty_row(rel, "certificate", Some(e))],
    };
    let key = key_file(path);
    let many = certs.len() > 1;
    certs
        .iter()
        .enumerate()
        .map(|(i, c)| CertRow {
            file: if many {
                format!("{rel}[{i}]")
            } else {
                rel.to_string()
            },
            kind: "certificate",
            subject: c.subject.clone(),
            issuer: c.issuer.clone(),
            serial: c.serial_hex.clone(),
            not_before: inspect::fmt_time(c.not_before),
            not_after: inspect::fmt_time(c.not_after),
            residual_secs: c.not_after - now,
            residual: inspect::fmt_residual(c.not_after - now),
            ca: c.is_ca,
            // A bundle's key belongs to its first certificate.
            key_matches: if i == 0 {
                match_text(key.as_deref(), &c.public_key)
            } else {
                "no key file".into()
            },
            key_algorithm: c.public_key.describe(),
            error: None,
        })
        .collect()
}

fn pub_row(path: &Path, rel: &str, data: &[u8]) -> CertRow {
    match inspect::parse_public_key(data) {
        Err(e) => empty_row(rel, "public-key", Some(e)),
        Ok(p) => {
            let mut row = empty_row(rel, "public-key", None);
            row.key_matches = match_text(key_file(path).as_deref(), &p);
            row.key_algorithm = p.describe();
            row
        }
    }
}

/// Now, in Unix seconds.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
