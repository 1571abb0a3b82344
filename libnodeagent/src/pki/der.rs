//! Moves private keys between the PEM flavours CAPI writes (PKCS#1 `RSA PRIVATE KEY`, SEC1
//! `EC PRIVATE KEY`) and the PKCS#8 that ring signs with, through the RustCrypto `pkcs1`,
//! `pkcs8` and `sec1` crates.

use crate::base::error::{Error, Result, Stage};
use pkcs8::der::asn1::AnyRef;
pub use pkcs8::der::asn1::ObjectIdentifier;
use pkcs8::der::{Decode, Encode};
use pkcs8::{AlgorithmIdentifierRef, PrivateKeyInfo};
use sec1::{EcParameters, EcPrivateKey};

pub const OID_EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
pub const OID_P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
pub const OID_P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
pub const OID_RSA: ObjectIdentifier = pkcs1::ALGORITHM_OID;

fn bad(why: impl std::fmt::Display) -> Error {
    Error::invalid(Stage::Mint, "private key", format!("malformed DER: {why}"))
}

/// (algorithm OID, curve OID for EC keys, inner private key).
pub type Pkcs8Parts = (ObjectIdentifier, Option<ObjectIdentifier>, Vec<u8>);

/// The key algorithm OID and, for EC keys, the curve OID of a PKCS#8 PrivateKeyInfo,
/// plus the inner private key bytes (PKCS#1 or SEC1).
pub fn pkcs8_parts(pkcs8: &[u8]) -> Result<Pkcs8Parts> {
    let info = PrivateKeyInfo::from_der(pkcs8).map_err(bad)?;
    let curve = info.algorithm.parameters_oid().ok();
    Ok((info.algorithm.oid, curve, info.private_key.to_vec()))
}

/// PKCS#8 (as ring generates it, without curve parameters inside) → SEC1 ECPrivateKey
/// with the named-curve parameters, which is what `EC PRIVATE KEY` PEM files carry.
pub fn pkcs8_to_sec1(pkcs8: &[u8]) -> Result<Vec<u8>> {
    let info = PrivateKeyInfo::from_der(pkcs8).map_err(bad)?;
    let curve = info
        .algorithm
        .parameters_oid()
        .map_err(|_| Error::invalid(Stage::Mint, "private key", "EC key without curve"))?;
    let mut ec = EcPrivateKey::from_der(info.private_key).map_err(bad)?;
    ec.parameters = Some(EcParameters::NamedCurve(curve));
    ec.to_der().map_err(bad)
}

/// SEC1 ECPrivateKey (with named-curve parameters) → PKCS#8, plus the curve OID.
pub fn sec1_to_pkcs8(sec1: &[u8]) -> Result<(Vec<u8>, ObjectIdentifier)> {
    let ec = EcPrivateKey::from_der(sec1).map_err(bad)?;
    let curve = ec.parameters.and_then(|p| p.named_curve()).ok_or_else(|| {
        Error::invalid(
            Stage::Mint,
            "private key",
            "EC PRIVATE KEY without named-curve parameters",
        )
    })?;
    let info = PrivateKeyInfo::new(
        AlgorithmIdentifierRef {
            oid: OID_EC_PUBLIC_KEY,
            parameters: Some(AnyRef::from(&curve)),
        },
        sec1,
    );
    Ok((info.to_der().map_err(bad)?, curve))
}

/// PKCS#1 RSAPrivateKey → PKCS#8.
pub fn pkcs1_to_pkcs8(pkcs1: &[u8]) -> Result<Vec<u8>> {
    PrivateKeyInfo::new(pkcs1::ALGORITHM_ID, pkcs1)
        .to_der()
        .map_err(bad)
}

/// PEM with 64-column lines and a trailing newline, as Go's encoding/pem writes it.
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A P-256 key as ring generates it (PKCS#8 v1, no curve inside the SEC1 part), the
    /// same key as SEC1 with the named curve, and the PKCS#8 that SEC1 wraps into.
    #[test]
    fn ec_key_round_trips_between_pkcs8_and_sec1() {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let sec1 = pkcs8_to_sec1(pair.serialized_der()).unwrap();
        let ec = EcPrivateKey::from_der(&sec1).unwrap();
        assert_eq!(ec.parameters.unwrap().named_curve(), Some(OID_P256));
        assert!(ec.public_key.is_some());
        let (pkcs8, curve) = sec1_to_pkcs8(&sec1).unwrap();
        assert_eq!(curve, OID_P256);
        let (alg, curve, inner) = pkcs8_parts(&pkcs8).unwrap();
        assert_eq!((alg, curve), (OID_EC_PUBLIC_KEY, Some(OID_P256)));
        assert_eq!(inner, sec1);
        rcgen::KeyPair::try_from(pkcs8.as_slice()).expect("ring accepts the PKCS#8");
    }

    #[test]
    fn malformed_der_is_an_error_naming_the_key() {
        for junk in [&[][..], &[0x30, 0x82, 0x01], &[0x04, 0x01, 0x00]] {
            let e = pkcs8_parts(junk).unwrap_err();
            assert_eq!(e.place, "private key");
            assert!(sec1_to_pkcs8(junk).is_err());
            assert!(pkcs8_to_sec1(junk).is_err());
        }
    }
}
