//! Reading certificates and keys (PEM) into plain facts, with x509-parser and a tiny DER
//! walker for private keys. Serial number 0 (what Cluster API's CAs carry) is fine here.
//! Nothing returned or reported ever contains private key material.

// Parses untrusted input: no indexing that could panic (str slicing is denied crate-wide).
#![deny(clippy::indexing_slicing)]

use x509_parser::extensions::GeneralName;
use x509_parser::x509::SubjectPublicKeyInfo;

/// A public key in a comparable form: RSA `(n, e)` without leading zeros, EC point bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PubKey {
    Rsa {
        n: Vec<u8>,
        e: Vec<u8>,
    },
    Ec(Vec<u8>),
    /// Other algorithms (Ed25519, …): compared as the raw SPKI bit string.
    Raw(Vec<u8>),
}

impl PubKey {
    pub fn describe(&self) -> String {
        match self {
            PubKey::Rsa { n, .. } => format!("RSA-{}", n.len() * 8),
            PubKey::Ec(p) => format!("EC-P{}", (p.len().saturating_sub(1)) * 4),
            PubKey::Raw(_) => "other".to_string(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct CertInfo {
    pub subject: String,
    pub issuer: String,
    pub serial_hex: String,
    /// Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
    pub is_ca: bool,
    /// `None` when the certificate has no KeyUsage extension (then every usage is allowed).
    pub key_cert_sign: Option<bool>,
    pub dns_sans: Vec<String>,
    pub ip_sans: Vec<std::net::IpAddr>,
    pub public_key: PubKey,
    /// DER SubjectPublicKeyInfo (input of the kubeadm discovery hash).
    pub spki_der: Vec<u8>,
    /// The full DER, to verify signatures later.
    pub der: Vec<u8>,
}

/// Every PEM block in `data` as `(label, DER)`, framed by x509-parser's rules (its
/// `Pem::iter_from_buffer` did this before, and the tests keep it as the reference): lines up
/// to a `-----BEGIN LABEL-----` line are skipped (undecodable ones too), the body lines are
/// trimmed at their end and joined up to a line starting `-----END `, and the body is strict
/// base64. The decoding is the `base64` crate's: x509-parser builds a String per line and
/// decodes with `data_encoding`, which made PEM the largest part of kubeadm pre-flight's cost.
pub fn pem_blocks(data: &[u8]) -> Result<Vec<(String, Vec<u8>)>, String> {
    use base64::Engine as _;
    let mut out = Vec::new();
    let mut lines = data.split_inclusive(|&b| b == b'\n');
    'blocks: loop {
        let label = loop {
            let Some(line) = lines.next() else {
                break 'blocks;
            };
            let Ok(line) = std::str::from_utf8(line) else {
                continue;
            };
            if let Some(rest) = line.strip_prefix("-----BEGIN ") {
                // `-----BEGIN LABEL-----…`: the label up to its first `-`.
                if !line.get(11..).is_some_and(|r| r.contains("-----")) {
                    return Err("bad PEM: invalid header".into());
                }
                break rest.split('-').next().unwrap_or_default().to_string();
            }
        };
        let mut body = Vec::new();
        loop {
            let Some(line) = lines.next() else {
                return Err("bad PEM: incomplete PEM".into());
            };
            let line = std::str::from_utf8(line).map_err(|_| "bad PEM: not UTF-8".to_string())?;
            if line.starts_with("-----END ") {
                break;
            }
            body.extend_from_slice(line.trim_end().as_bytes());
        }
        let der = base64::engine::general_purpose::STANDARD
            .decode(&body)
            .map_err(|_| "bad PEM: base64 decode error".to_string())?;
        out.push((label, der));
    }
    if out.is_empty() {
        return Err("no PEM block found".into());
    }
    Ok(out)
}

/// All certificates of a PEM file (a bundle may hold several).
pub fn parse_certs(data: &[u8]) -> Result<Vec<CertInfo>, String> {
    let mut certs = Vec::new();
    for (label, der) in pem_blocks(data)? {
        if label != "CERTIFICATE" {
            return Err(format!(
                "PEM block `{label}` where a CERTIFICATE was expected"
            ));
        }
        certs.push(cert_info(&der)?);
    }
    Ok(certs)
}

pub fn cert_info(der: &[u8]) -> Result<CertInfo, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("not a valid X.509 certificate: {e}"))?;
    let key_cert_sign = cert
        .key_usage()
        .map_err(|e| format!("bad KeyUsage extension: {e}"))?
        .map(|ku| ku.value.key_cert_sign());
    let mut dns_sans = Vec::new();
    let mut ip_sans = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(d) => dns_sans.push(d.to_string()),
                GeneralName::IPAddress(b) => {
                    if let Ok(a) = <[u8; 4]>::try_from(*b) {
                        ip_sans.push(std::net::IpAddr::from(a));
                    } else if let Ok(a) = <[u8; 16]>::try_from(*b) {
                        ip_sans.push(std::net::IpAddr::from(a));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(CertInfo {
        subject: cert.subject().to_string(),
        issuer: cert.issuer().to_string(),
        serial_hex: hex::encode(cert.raw_serial()),
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
        is_ca: cert.is_ca(),
        key_cert_sign,
        dns_sans,
        ip_sans,
        public_key: spki_public(cert.public_key()),
        spki_der: cert.public_key().raw.to_vec(),
        der: der.to_vec(),
    })
}

impl CertInfo {
    /// Issued by itself and its signature checks out with its own key. Checked on demand,
    /// not at parse: a signature check is the dearest part of reading a certificate and only
    /// the PKI audit asks.
    pub fn self_signed(&self) -> bool {
        x509_parser::parse_x509_certificate(&self.der).is_ok_and(|(_, c)| {
            c.subject().as_raw() == c.issuer().as_raw() && c.verify_signature(None).is_ok()
        })
    }
}

/// Whether `child` carries a valid signature by `issuer`'s key.
pub fn signed_by(child: &CertInfo, issuer: &CertInfo) -> bool {
    let Ok((_, c)) = x509_parser::parse_x509_certificate(&child.der) else {
        return false;
    };
    let Ok((_, i)) = x509_parser::parse_x509_certificate(&issuer.der) else {
        return false;
    };
    c.verify_signature(Some(i.public_key())).is_ok()
}

fn spki_public(spki: &SubjectPublicKeyInfo) -> PubKey {
    match spki.parsed() {
        Ok(x509_parser::public_key::PublicKey::RSA(r)) => PubKey::Rsa {
            n: strip_zeros(r.modulus),
            e: strip_zeros(r.exponent),
        },
        Ok(x509_parser::public_key::PublicKey::EC(p)) => PubKey::Ec(p.data().to_vec()),
        _ => PubKey::Raw(spki.subject_public_key.data.to_vec()),
    }
}

/// A big-endian integer without its leading zero bytes (how the key proof compares them).
fn strip_zeros(b: &[u8]) -> Vec<u8> {
    let i = b.iter().position(|&x| x != 0).unwrap_or(b.len());
    b.get(i..).unwrap_or_default().to_vec()
}

/// `time`-formatted UTC timestamp (RFC 3339) for messages and tables.
pub fn fmt_time(unix: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| unix.to_string())
}

/// Human duration like kubeadm's residual time: `9y`, `364d`, `23h`, `5m`.
pub fn fmt_residual(secs: i64) -> String {
    let neg = secs < 0;
    let s = secs.unsigned_abs();
    let text = if s >= 365 * 86400 {
        format!("{}y", s / (365 * 86400))
    } else if s >= 86400 {
        format!("{}d", s / 86400)
    } else if s >= 3600 {
        format!("{}h", s / 3600)
    } else if s >= 60 {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    };
    if neg { format!("-{text}") } else { text }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::string_slice)]
mod tests {
    use super::*;

    /// x509-parser's PEM iterator, which `pem_blocks` replaced: the reference for its framing.
    fn x509_parser_blocks(data: &[u8]) -> Result<Vec<(String, Vec<u8>)>, String> {
        let mut out = Vec::new();
        for p in x509_parser::pem::Pem::iter_from_buffer(data) {
            let p = p.map_err(|e| format!("bad PEM: {e}"))?;
            out.push((p.label, p.contents));
        }
        if out.is_empty() {
            return Err("no PEM block found".into());
        }
        Ok(out)
    }

    #[test]
    fn pem_blocks_frame_as_x509_parser_does() {
        let b = "-----BEGIN CERTIFICATE-----\nTUlJQg==\n-----END CERTIFICATE-----\n";
        let cases: Vec<Vec<u8>> = vec![
            b.into(),
            format!("junk before\n{b}between\n{b}").into(),
            b.replace('\n', "\r\n").into(),
            b.replace("TUlJQg==", "TUlJ  \nQg==\t").into(),
            b.replace("-----END CERTIFICATE", "-----END OTHER").into(),
            b.replace("BEGIN CERTIFICATE", "BEGIN RSA PRIVATE KEY")
                .into(),
            b.replace("BEGIN CERTIFICATE-----", "BEGIN CERTIFICATE")
                .into(),
            b.replace("\n-----END CERTIFICATE-----\n", "\n").into(),
            b.replace("TUlJQg==", "TUlJQg").into(),
            b.replace("TUlJQg==", "TUlJQh==").into(),
            b.replace("TUlJQg==", " TUlJQg==").into(),
            b.replace("TUlJQg==", "").into(),
            [b"\xff\xfe\n".as_slice(), b.as_bytes()].concat(),
            [b.as_bytes(), b"-----BEGIN X-----\n\xff\n-----END X-----\n"].concat(),
            b"no pem here\n".to_vec(),
            Vec::new(),
            b"-----BEGIN A-B-----\nQQ==\n-----END A-B-----".to_vec(),
        ];
        for data in cases {
            let (ours, theirs) = (pem_blocks(&data), x509_parser_blocks(&data));
            match (&ours, &theirs) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{:?}", String::from_utf8_lossy(&data)),
                (Err(_), Err(_)) => {}
                _ => panic!(
                    "{ours:?} against {theirs:?} for {:?}",
                    String::from_utf8_lossy(&data)
                ),
            }
        }
    }

    #[test]
    fn residual_format() {
        assert_eq!(fmt_residual(10 * 365 * 86400), "10y");
        assert_eq!(fmt_residual(2 * 86400 + 5), "2d");
        assert_eq!(fmt_residual(-7200), "-2h");
    }
}
