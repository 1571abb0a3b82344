//! Proof that a private key belongs to a certificate or public key: sign a fresh random
//! challenge with the private key and verify the signature with the public key. Comparing
//! public halves (what `inspect::key_matches` does) trusts the key file's optional public
//! field; a signature proves the private scalar itself is the right one.
//! Errors describe the key's structure, never its content.

use x509_parser::prelude::FromDer;
use x509_parser::x509::SubjectPublicKeyInfo;

/// The key pair in `key_pem` (PKCS#1, SEC1 or PKCS#8, unencrypted) signs a random challenge
/// that verifies with `spki_der` (a DER SubjectPublicKeyInfo). `Ok(false)`: a valid key, but
/// not this public key's. `Err`: the key cannot be used (malformed, encrypted, unsupported).
pub fn proves(key_pem: &[u8], spki_der: &[u8]) -> Result<bool, String> {
    use rcgen::SigningKey;
    let pair = key_pair(key_pem)?;
    let mut challenge = [0u8; 32];
    getrandom::fill(&mut challenge).map_err(|e| format!("no random challenge: {e}"))?;
    let sig = pair
        .sign(&challenge)
        .map_err(|e| format!("the key cannot sign: {e}"))?;
    let (_, spki) = SubjectPublicKeyInfo::from_der(spki_der)
        .map_err(|e| format!("not a valid public key: {e}"))?;
    let alg = pair.algorithm();
    let verify: &dyn ring::signature::VerificationAlgorithm =
        if alg == &rcgen::PKCS_ECDSA_P256_SHA256 {
            &ring::signature::ECDSA_P256_SHA256_ASN1
        } else if alg == &rcgen::PKCS_ECDSA_P384_SHA384 {
            &ring::signature::ECDSA_P384_SHA384_ASN1
        } else if alg == &rcgen::PKCS_RSA_SHA256 {
            &ring::signature::RSA_PKCS1_2048_8192_SHA256
        } else if alg == &rcgen::PKCS_ED25519 {
            &ring::signature::ED25519
        } else {
            return Err("unsupported private key algorithm".into());
        };
    // A public key of another type or curve simply fails to verify.
    Ok(
        ring::signature::UnparsedPublicKey::new(verify, spki.subject_public_key.data.as_ref())
            .verify(&challenge, &sig)
            .is_ok(),
    )
}

/// The DER SubjectPublicKeyInfo of a `PUBLIC KEY` PEM (`sa.pub`).
pub fn public_key_der(pem: &[u8]) -> Result<Vec<u8>, String> {
    let blocks = super::inspect::pem_blocks(pem)?;
    match blocks.into_iter().next() {
        Some((label, der)) if label == "PUBLIC KEY" => Ok(der),
        Some((label, _)) => Err(format!(
            "PEM block `{label}` where a PUBLIC KEY was expected"
        )),
        None => Err("no PEM block found".into()),
    }
}

fn key_pair(key_pem: &[u8]) -> Result<rcgen::KeyPair, String> {
    if key_pem.windows(9).any(|w| w == b"ENCRYPTED") {
        return Err("encrypted private key (kubeadm needs it unencrypted)".into());
    }
    let blocks = super::inspect::pem_blocks(key_pem)?;
    let (label, der) = blocks.into_iter().next().ok_or("no PEM block found")?;
    let structure = |e: crate::error::Error| format!("{label}: {}", e.message);
    let pkcs8 = match label.as_str() {
        "RSA PRIVATE KEY" => crate::mint::der::pkcs1_to_pkcs8(&der).map_err(structure)?,
        "EC PRIVATE KEY" => crate::mint::der::sec1_to_pkcs8(&der).map_err(structure)?.0,
        "PRIVATE KEY" => der,
        other => {
            return Err(format!(
                "PEM block `{other}` where a private key was expected"
            ));
        }
    };
    // ring's own error text names the rejection ("InvalidEncoding"), not the key.
    rcgen::KeyPair::try_from(pkcs8.as_slice()).map_err(|e| format!("unusable private key: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::PublicKeyData;

    fn spki(pair: &rcgen::KeyPair) -> Vec<u8> {
        pair.subject_public_key_info()
    }

    #[test]
    fn own_key_proves_other_key_does_not() {
        let a = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let b = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let c = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
        let a_pem = a.serialize_pem();
        assert_eq!(proves(a_pem.as_bytes(), &spki(&a)), Ok(true));
        assert_eq!(proves(a_pem.as_bytes(), &spki(&b)), Ok(false));
        assert_eq!(proves(a_pem.as_bytes(), &spki(&c)), Ok(false));
        // SEC1, as CAPI and mint write EC keys.
        let sec1 = crate::mint::der::pkcs8_to_sec1(a.serialized_der()).unwrap();
        let sec1_pem = crate::mint::pki::pem_encode("EC PRIVATE KEY", &sec1);
        assert_eq!(proves(sec1_pem.as_bytes(), &spki(&a)), Ok(true));
        assert_eq!(proves(sec1_pem.as_bytes(), &spki(&b)), Ok(false));
    }

    #[test]
    fn unusable_keys_are_errors_without_key_material() {
        let a = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let enc =
            b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n";
        assert!(proves(enc, &spki(&a)).unwrap_err().contains("encrypted"));
        let junk = crate::mint::pki::pem_encode("EC PRIVATE KEY", &[0x30, 0x03, 0x02, 0x01, 0x01]);
        let e = proves(junk.as_bytes(), &spki(&a)).unwrap_err();
        assert!(e.starts_with("EC PRIVATE KEY:"), "{e}");
        assert!(proves(b"garbage", &spki(&a)).is_err());
    }
}
