//! Proof that a private key belongs to a certificate or public key, by arithmetic on its
//! parts rather than by a signature: the public half the key holds must be the certificate's,
//! and its private parts must be consistent with that public half, which is what a signature
//! made with them and verified with the certificate's key proved (it took two 1024-bit
//! exponentiations per RSA-2048 key, half of `plan`'s CPU on a CABPK init bundle).
//!
//! - RSA (PKCS#1, or inside PKCS#8): the key's `n` and `e` are the certificate's; `p·q = n`;
//!   `e·d ≡ 1` modulo `p−1` and `q−1` (what Go's `rsa.Validate` checks, so what kubeadm
//!   accepts), `e·dP ≡ 1 (mod p−1)`, `e·dQ ≡ 1 (mod q−1)` and `q·qInv ≡ 1 (mod p)` (the CRT
//!   parts a signer uses: with them right every signature verifies, with one wrong almost
//!   none does). Multiplications and remainders, no exponentiation: microseconds.
//! - ECDSA P-256/P-384 (SEC1, or inside PKCS#8): the private scalar times the generator is
//!   the certificate's point. One fixed-base scalar multiplication, the cheapest operation
//!   that ties the scalar to the point: comparing only the public point a key file may carry
//!   would trust a field that is redundant data and pass a damaged scalar (kubeadm then failed
//!   after the files were written). A carried point is compared with the certificate's
//!   bytes, free; when the scalar does not give the certificate's point, it tells a damaged
//!   key (a carried point the scalar does not give) from another key.
//! - Ed25519 (PKCS#8): the public key derived from the seed is the certificate's.
//!
//! Not constant-time: a one-off check of a key file at boot, not a service anyone can time.
//! Errors describe the key's structure, never its content.

use pkcs8::der::Decode;
use pkcs8::der::asn1::ObjectIdentifier;
use pkcs8::spki::SubjectPublicKeyInfoRef;
use rsa::BigUint;

const OID_ED25519: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");
use crate::pki::der::{OID_EC_PUBLIC_KEY, OID_P256, OID_P384, OID_RSA};

/// The key in `key_pem` (PKCS#1, SEC1 or PKCS#8, unencrypted) is the private half of
/// `spki_der` (a DER SubjectPublicKeyInfo). `Ok(false)`: a sound key, but not this public
/// key's. `Err`: the key cannot be used (malformed, encrypted, unsupported, or its parts
/// inconsistent: damaged).
pub fn proves(key_pem: &[u8], spki_der: &[u8]) -> Result<bool, String> {
    if key_pem.windows(9).any(|w| w == b"ENCRYPTED") {
        return Err("encrypted private key (kubeadm needs it unencrypted)".into());
    }
    let blocks = super::inspect::pem_blocks(key_pem)?;
    let (label, der) = blocks.into_iter().next().ok_or("no PEM block found")?;
    let public = SubjectPublicKeyInfoRef::from_der(spki_der)
        .map_err(|e| format!("not a valid public key: {e}"))?;
    let structure = |e: pkcs8::der::Error| format!("{label}: malformed DER: {e}");
    match label.as_str() {
        "RSA PRIVATE KEY" => rsa_proves(&der, &public).map_err(|e| prefix(&label, e)),
        "EC PRIVATE KEY" => ec_proves(&der, None, &public).map_err(|e| prefix(&label, e)),
        "PRIVATE KEY" => {
            let info = pkcs8::PrivateKeyInfo::from_der(&der).map_err(structure)?;
            let inner = info.private_key;
            let proof = if info.algorithm.oid == OID_RSA {
                rsa_proves(inner, &public)
            } else if info.algorithm.oid == OID_EC_PUBLIC_KEY {
                let curve = info.algorithm.parameters_oid().ok();
                ec_proves(inner, curve, &public)
            } else if info.algorithm.oid == OID_ED25519 {
                ed25519_proves(&der, &public)
            } else {
                Err(Bad::Unusable("unsupported private key algorithm".into()))
            };
            proof.map_err(|e| prefix(&label, e))
        }
        other => Err(format!(
            "PEM block `{other}` where a private key was expected"
        )),
    }
}

/// Why a key cannot be used: its encoding, or its parts (a damaged key).
enum Bad {
    Encoding(String),
    Unusable(String),
}

fn prefix(label: &str, bad: Bad) -> String {
    match bad {
        Bad::Encoding(m) => format!("{label}: malformed DER: {m}"),
        Bad::Unusable(m) => format!("unusable private key: {m}"),
    }
}

/// The RSA bounds the signer used before accepted (ring's): a 2048–4096-bit modulus, an odd
/// public exponent from 65537 to 2³³−1. The keys accepted are the ones accepted before.
const RSA_BITS: std::ops::RangeInclusive<usize> = 2048..=4096;

fn rsa_proves(pkcs1: &[u8], public: &SubjectPublicKeyInfoRef) -> Result<bool, Bad> {
    let k = pkcs1::RsaPrivateKey::from_der(pkcs1).map_err(|e| Bad::Encoding(e.to_string()))?;
    if k.version() != pkcs1::Version::TwoPrime {
        return Err(Bad::Unusable("multi-prime RSA key: unsupported".into()));
    }
    let int = |u: pkcs1::UintRef| BigUint::from_bytes_be(u.as_bytes());
    let (n, e, d) = (
        int(k.modulus),
        int(k.public_exponent),
        int(k.private_exponent),
    );
    let (p, q) = (int(k.prime1), int(k.prime2));
    let (dp, dq, qinv) = (int(k.exponent1), int(k.exponent2), int(k.coefficient));
    let one = BigUint::from(1u32);
    let e_ok = e >= BigUint::from(65537u32) && e.bits() <= 33 && &e % 2u32 == one;
    if !RSA_BITS.contains(&n.bits()) || !e_ok {
        let m = format!(
            "RSA key of {} bits, exponent of {} bits",
            n.bits(),
            e.bits()
        );
        return Err(Bad::Unusable(format!(
            "{m}: outside 2048–4096 bits, e ≥ 65537"
        )));
    }
    if p <= one || q <= one {
        return Err(Bad::Unusable("RSA primes missing".into()));
    }
    let (p1, q1) = (&p - &one, &q - &one);
    let ed = &e * &d;
    let consistent = &p * &q == n
        && d < n
        && &ed % &p1 == one
        && &ed % &q1 == one
        && dp < p1
        && dq < q1
        && qinv < p
        && (&e * &dp) % &p1 == one
        && (&e * &dq) % &q1 == one
        && (&q * &qinv) % &p == one;
    if !consistent {
        return Err(Bad::Unusable(
            "its private parts do not belong to its modulus and exponent (damaged)".into(),
        ));
    }
    if public.algorithm.oid != OID_RSA {
        return Ok(false);
    }
    let cert = pkcs1::RsaPublicKey::from_der(public.subject_public_key.raw_bytes())
        .map_err(|e| Bad::Unusable(format!("the public key is not an RSA key: {e}")))?;
    Ok(cert.modulus.as_bytes() == k.modulus.as_bytes()
        && cert.public_exponent.as_bytes() == k.public_exponent.as_bytes())
}

/// `curve`: the PKCS#8 algorithm's parameters, where the key is wrapped in one.
fn ec_proves(
    sec1: &[u8],
    curve: Option<ObjectIdentifier>,
    public: &SubjectPublicKeyInfoRef,
) -> Result<bool, Bad> {
    use ring::signature::{self, EcdsaKeyPair};
    let ec = sec1::EcPrivateKey::from_der(sec1).map_err(|e| Bad::Encoding(e.to_string()))?;
    let inner = ec.parameters.and_then(|p| p.named_curve());
    let curve = match (curve, inner) {
        (Some(a), Some(b)) if a != b => {
            return Err(Bad::Unusable("two different curves named".into()));
        }
        (Some(c), _) | (None, Some(c)) => c,
        (None, None) => return Err(Bad::Unusable("EC key without its curve".into())),
    };
    let alg = if curve == OID_P256 {
        &signature::ECDSA_P256_SHA256_ASN1_SIGNING
    } else if curve == OID_P384 {
        &signature::ECDSA_P384_SHA384_ASN1_SIGNING
    } else {
        return Err(Bad::Unusable("unsupported curve".into()));
    };
    let rng = ring::rand::SystemRandom::new();
    // The scalar gives `point`: `Ok(true)`; another point: `Ok(false)`; no point at all (a
    // scalar out of range): `Err`.
    let gives = |point: &[u8]| match EcdsaKeyPair::from_private_key_and_public_key(
        alg,
        ec.private_key,
        point,
        &rng,
    ) {
        Ok(_) => Ok(true),
        Err(e) if e.to_string() == "InconsistentComponents" => Ok(false),
        Err(e) => Err(Bad::Unusable(format!("invalid private scalar ({e})"))),
    };
    let theirs = (public.algorithm.oid == OID_EC_PUBLIC_KEY
        && public.algorithm.parameters_oid().ok() == Some(curve))
    .then(|| public.subject_public_key.raw_bytes());
    let damaged = || Bad::Unusable("its private scalar does not give its public key".into());
    match (theirs, ec.public_key) {
        (Some(point), carried) if gives(point)? => match carried {
            Some(c) if c != point => Err(damaged()),
            _ => Ok(true),
        },
        // Not the certificate's key; whether the key is sound at all, its own point says.
        (_, Some(carried)) if !gives(carried)? => Err(damaged()),
        _ => Ok(false),
    }
}

/// PKCS#8 Ed25519: the seed's public key (checked against the one the file carries, if any,
/// by ring) is the certificate's.
fn ed25519_proves(pkcs8: &[u8], public: &SubjectPublicKeyInfoRef) -> Result<bool, Bad> {
    use ring::signature::{Ed25519KeyPair, KeyPair};
    let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(pkcs8)
        .map_err(|e| Bad::Unusable(e.to_string()))?;
    Ok(public.algorithm.oid == OID_ED25519
        && pair.public_key().as_ref() == public.subject_public_key.raw_bytes())
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

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::PublicKeyData;
    use rsa::pkcs1::EncodeRsaPrivateKey;
    use rsa::pkcs8::EncodePublicKey;

    fn spki(pair: &rcgen::KeyPair) -> Vec<u8> {
        pair.subject_public_key_info()
    }

    fn pem(label: &str, der: &[u8]) -> Vec<u8> {
        crate::pki::der::pem_encode(label, der).into_bytes()
    }

    /// Two RSA-2048 keys, made once (generation is the slow part): (PKCS#1 DER, SPKI DER).
    fn rsa_keys() -> &'static [(Vec<u8>, Vec<u8>); 2] {
        static KEYS: std::sync::OnceLock<[(Vec<u8>, Vec<u8>); 2]> = std::sync::OnceLock::new();
        KEYS.get_or_init(|| {
            let one = || {
                let k = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).unwrap();
                let der = k.to_pkcs1_der().unwrap().as_bytes().to_vec();
                let spki = k.to_public_key().to_public_key_der().unwrap().into_vec();
                (der, spki)
            };
            [one(), one()]
        })
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
        assert_eq!(proves(c.serialize_pem().as_bytes(), &spki(&c)), Ok(true));
        // SEC1, as CAPI and mint write EC keys.
        let sec1 = crate::pki::der::pkcs8_to_sec1(a.serialized_der()).unwrap();
        let sec1_pem = pem("EC PRIVATE KEY", &sec1);
        assert_eq!(proves(&sec1_pem, &spki(&a)), Ok(true));
        assert_eq!(proves(&sec1_pem, &spki(&b)), Ok(false));
        // RSA, PKCS#1 and PKCS#8, against its own, another RSA and an EC public key.
        let [(k1, s1), (_, s2)] = rsa_keys();
        let pkcs1 = pem("RSA PRIVATE KEY", k1);
        assert_eq!(proves(&pkcs1, s1), Ok(true));
        assert_eq!(proves(&pkcs1, s2), Ok(false));
        assert_eq!(proves(&pkcs1, &spki(&a)), Ok(false));
        assert_eq!(proves(a_pem.as_bytes(), s1), Ok(false));
        let pkcs8 = crate::pki::der::pkcs1_to_pkcs8(k1).unwrap();
        assert_eq!(proves(&pem("PRIVATE KEY", &pkcs8), s1), Ok(true));
        assert_eq!(proves(&pem("PRIVATE KEY", &pkcs8), s2), Ok(false));
        // Ed25519 (PKCS#8).
        let e = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let f = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        assert_eq!(proves(e.serialize_pem().as_bytes(), &spki(&e)), Ok(true));
        assert_eq!(proves(e.serialize_pem().as_bytes(), &spki(&f)), Ok(false));
        assert_eq!(proves(e.serialize_pem().as_bytes(), s1), Ok(false));
    }

    /// Every part of an RSA key damaged in turn (one bit of its lowest byte: `e` 65537 becomes
    /// 65539, still a valid exponent): each is an unusable key, whether or not its modulus is
    /// still the certificate's, and the message holds no key material. A signature made with
    /// a damaged `p`, `q`, `dP`, `dQ` or `qInv` did not verify; `d` is what Go's `Validate`
    /// (kubeadm's) checks as well.
    #[test]
    fn a_damaged_rsa_key_is_unusable() {
        let [(k1, s1), (_, s2)] = rsa_keys();
        let key = pkcs1::RsaPrivateKey::from_der(k1).unwrap();
        let parts = [
            ("n", key.modulus),
            ("e", key.public_exponent),
            ("d", key.private_exponent),
            ("p", key.prime1),
            ("q", key.prime2),
            ("dP", key.exponent1),
            ("dQ", key.exponent2),
            ("qInv", key.coefficient),
        ];
        for (name, part) in parts {
            let bytes = part.as_bytes();
            let at = bytes.as_ptr() as usize - k1.as_ptr() as usize + bytes.len() - 1;
            let mut damaged = k1.clone();
            damaged[at] ^= 0x02;
            for spki in [s1, s2] {
                let e = proves(&pem("RSA PRIVATE KEY", &damaged), spki).unwrap_err();
                assert!(e.starts_with("unusable private key:"), "{name}: {e}");
                assert!(e.contains("damaged"), "{name}: {e}");
            }
        }
        // Multi-prime is refused, not misread.
        let mut multi = k1.clone();
        let v = multi
            .windows(3)
            .position(|w| w == [0x02, 0x01, 0x00])
            .unwrap();
        multi[v + 2] = 1;
        assert!(proves(&pem("RSA PRIVATE KEY", &multi), s1).is_err());
    }

    /// A damaged EC scalar is found whether its file carries the public point (the scalar no
    /// longer gives it) or not (it gives no certificate's point: another key); a carried
    /// point that is not the scalar's is damage too, even when the scalar is right.
    #[test]
    fn a_damaged_ec_key_is_unusable() {
        for alg in [
            &rcgen::PKCS_ECDSA_P256_SHA256,
            &rcgen::PKCS_ECDSA_P384_SHA384,
        ] {
            let a = rcgen::KeyPair::generate_for(alg).unwrap();
            let sec1 = crate::pki::der::pkcs8_to_sec1(a.serialized_der()).unwrap();
            let ec = sec1::EcPrivateKey::from_der(&sec1).unwrap();
            let offset = |b: &[u8]| b.as_ptr() as usize - sec1.as_ptr() as usize;
            let scalar = offset(ec.private_key) + 7;
            let point = offset(ec.public_key.unwrap()) + 9;
            for at in [scalar, point] {
                let mut damaged = sec1.clone();
                damaged[at] ^= 0x5a;
                let e = proves(&pem("EC PRIVATE KEY", &damaged), &spki(&a)).unwrap_err();
                assert!(e.starts_with("unusable private key:"), "{e}");
            }
            // Without the point: the right scalar proves, a damaged one is another key's.
            let bare = sec1::EcPrivateKey {
                public_key: None,
                ..ec.clone()
            };
            let bare = pkcs8::der::Encode::to_der(&bare).unwrap();
            assert_eq!(proves(&pem("EC PRIVATE KEY", &bare), &spki(&a)), Ok(true));
            let mut damaged = bare.clone();
            damaged[offset(ec.private_key) + 7] ^= 0x5a;
            assert_eq!(
                proves(&pem("EC PRIVATE KEY", &damaged), &spki(&a)),
                Ok(false)
            );
        }
    }

    #[test]
    fn unusable_keys_are_errors_without_key_material() {
        let a = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let enc =
            b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n";
        assert!(proves(enc, &spki(&a)).unwrap_err().contains("encrypted"));
        let junk = pem("EC PRIVATE KEY", &[0x30, 0x03, 0x02, 0x01, 0x01]);
        let e = proves(&junk, &spki(&a)).unwrap_err();
        assert!(e.starts_with("EC PRIVATE KEY:"), "{e}");
        assert!(proves(b"garbage", &spki(&a)).is_err());
        let rsa_junk = pem("RSA PRIVATE KEY", &[0x30, 0x03, 0x02, 0x01, 0x00]);
        let e = proves(&rsa_junk, &spki(&a)).unwrap_err();
        assert!(e.starts_with("RSA PRIVATE KEY:"), "{e}");
    }
}
