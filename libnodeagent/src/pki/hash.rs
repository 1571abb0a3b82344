//! kubeadm discovery CA hashes (`sha256:<hex>` of each certificate's DER SubjectPublicKeyInfo),
//! as CAPI's `hashCert` and kubeadm's `pubkeypin.Hash` compute them.

// Parses untrusted input: no indexing that could panic (str slicing is denied crate-wide).
#![deny(clippy::indexing_slicing)]

use crate::base::error::{Error, ErrorKind, Result, Stage};
use sha2::{Digest, Sha256};

/// One `sha256:<lower-hex>` per certificate in `ca_pem`, in file order.
/// Non-certificate PEM blocks are skipped; no certificate at all is an error.
pub fn discovery_hashes(ca_pem: &[u8]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (i, block) in x509_parser::pem::Pem::iter_from_buffer(ca_pem).enumerate() {
        let block = block.map_err(|e| {
            Error::invalid(
                Stage::Mint,
                "CA certificate",
                format!("PEM block {}: {e}", i + 1),
            )
        })?;
        if block.label != "CERTIFICATE" {
            continue;
        }
        let (_, cert) = x509_parser::parse_x509_certificate(&block.contents).map_err(|e| {
            Error::invalid(
                Stage::Mint,
                "CA certificate",
                format!("certificate {}: {e}", i + 1),
            )
        })?;
        out.push(spki_hash(cert.tbs_certificate.subject_pki.raw));
    }
    if out.is_empty() {
        return Err(Error::of(
            ErrorKind::NotFound,
            Stage::Mint,
            "CA certificate",
            "no CERTIFICATE block found",
        ));
    }
    Ok(out)
}

/// `sha256:<hex>` of a DER SubjectPublicKeyInfo.
pub fn spki_hash(spki_der: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(spki_der)))
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::string_slice)]
mod tests {
    use super::*;

    #[test]
    fn rejects_input_without_certificate() {
        let e = discovery_hashes(b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
        assert!(discovery_hashes(b"garbage").is_err());
    }
}
