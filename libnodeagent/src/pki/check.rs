//! PKI checks kubeadm depends on, run in pre-flight before anything is written.
//! Each error names the file; messages never contain key material.

use super::inspect::{self, CertInfo};
use crate::base::error::{Error, Result, Stage};

fn fail(place: &str, msg: impl Into<String>) -> Error {
    Error::invalid(Stage::Kubeadm, place, msg.into())
}

/// kubeadm's discovery hash of one certificate: `sha256:` + hex SHA-256 of the DER
/// SubjectPublicKeyInfo (docs/formats.md d.5), computed by mint's `pki::hash`.
pub fn discovery_hash(cert: &CertInfo) -> String {
    super::hash::spki_hash(&cert.spki_der)
}

/// A CA certificate (and optionally its key): parses, is a CA allowed to sign
/// certificates, is inside its validity window at `now`, and matches its key.
/// Returns the parsed certificates of the file (first = the CA kubeadm uses).
pub fn check_ca(
    cert_path: &str,
    cert_pem: &[u8],
    key: Option<(&str, &[u8])>,
    now: i64,
) -> Result<Vec<CertInfo>> {
    let certs = inspect::parse_certs(cert_pem).map_err(|m| fail(cert_path, m))?;
    let ca = &certs[0];
    if !ca.is_ca {
        return Err(fail(
            cert_path,
            format!(
                "`{}` is not a CA certificate (basicConstraints CA:TRUE missing)",
                ca.subject
            ),
        ));
    }
    if ca.key_cert_sign == Some(false) {
        return Err(fail(
            cert_path,
            "the CA's KeyUsage lacks keyCertSign: it cannot sign certificates",
        ));
    }
    check_validity(cert_path, ca, now)?;
    if let Some((key_path, key_pem)) = key {
        check_key_matches(key_path, key_pem, cert_path, &ca.spki_der)?;
    }
    Ok(certs)
}

/// notBefore ≤ now ≤ notAfter, with a clock diagnosis when the certificate is "from the future".
pub fn check_validity(place: &str, cert: &CertInfo, now: i64) -> Result<()> {
    if now < cert.not_before {
        return Err(fail(
            place,
            format!(
                "certificate is not valid before {} ({} from now, node clock says {}): the node clock is probably behind; check NTP / the hardware clock",
                inspect::fmt_time(cert.not_before),
                inspect::fmt_residual(cert.not_before - now),
                inspect::fmt_time(now)
            ),
        ));
    }
    if now > cert.not_after {
        return Err(fail(
            place,
            format!(
                "certificate expired at {} ({} ago)",
                inspect::fmt_time(cert.not_after),
                inspect::fmt_residual(now - cert.not_after)
            ),
        ));
    }
    Ok(())
}

/// The private key in `key_pem` is the one of `spki_der` (a DER SubjectPublicKeyInfo),
/// proved as `certs` proves it (`prove::proves`: its public half is the certificate's and its
/// private parts are consistent with it): comparing public halves alone trusted the key
/// file's stored public key, so a damaged private scalar passed and kubeadm failed after the
/// files were written.
pub fn check_key_matches(
    key_path: &str,
    key_pem: &[u8],
    other_path: &str,
    spki_der: &[u8],
) -> Result<()> {
    match super::prove::proves(key_pem, spki_der) {
        Ok(true) => Ok(()),
        Ok(false) => Err(fail(
            key_path,
            format!("private key does not match the public key of {other_path}"),
        )),
        Err(m) => Err(fail(key_path, m)),
    }
}

/// `sa.key` and `sa.pub` are one key pair.
pub fn check_sa(key_path: &str, key_pem: &[u8], pub_path: &str, pub_pem: &[u8]) -> Result<()> {
    let spki = super::prove::public_key_der(pub_pem).map_err(|m| fail(pub_path, m))?;
    check_key_matches(key_path, key_pem, pub_path, &spki)
}

/// For a join with the CA at hand: `caCertHashes` must pin it (else kubeadm's discovery
/// fails after a long wait with an unhelpful message).
pub fn check_ca_pinned(
    ca_path: &str,
    certs: &[CertInfo],
    hashes: &[String],
    place: &str,
) -> Result<()> {
    let ours: Vec<String> = certs.iter().map(discovery_hash).collect();
    let pinned = hashes
        .iter()
        .any(|h| ours.iter().any(|o| o.eq_ignore_ascii_case(h)));
    if !pinned {
        return Err(fail(
            place,
            format!(
                "none of caCertHashes matches the CA certificate {ca_path} (its hash is {})",
                ours.join(", ")
            ),
        ));
    }
    Ok(())
}

/// A serving certificate (apiserver.crt) present before kubeadm runs: signed by the CA,
/// valid now, covering the control-plane endpoint host, and proved by its key when that is
/// there too.
pub fn check_serving(
    cert_path: &str,
    cert_pem: &[u8],
    key: Option<(&str, &[u8])>,
    ca: Option<&CertInfo>,
    endpoint_host: Option<&str>,
    now: i64,
) -> Result<()> {
    let certs = inspect::parse_certs(cert_pem).map_err(|m| fail(cert_path, m))?;
    let leaf = &certs[0];
    check_validity(cert_path, leaf, now)?;
    if let Some((key_path, key_pem)) = key {
        check_key_matches(key_path, key_pem, cert_path, &leaf.spki_der)?;
    }
    if let Some(ca) = ca
        && !inspect::signed_by(leaf, ca)
    {
        return Err(fail(cert_path, "not signed by the cluster CA"));
    }
    if let Some(host) = endpoint_host
        && !covers(leaf, host)
    {
        return Err(fail(
            cert_path,
            format!("the control-plane endpoint host {host} is not among its SANs"),
        ));
    }
    Ok(())
}

/// SAN match with a single leading wildcard label, like Go's crypto/x509.
pub(crate) fn covers(cert: &CertInfo, host: &str) -> bool {
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return cert.ip_sans.contains(&ip);
    }
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    cert.dns_sans.iter().any(|san| {
        let san = san.to_ascii_lowercase();
        match san.strip_prefix("*.") {
            Some(suffix) => host.split_once('.').is_some_and(|(_, rest)| rest == suffix),
            None => san == host,
        }
    })
}
