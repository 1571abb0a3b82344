//! Just enough DER to move private keys between the PEM flavours CAPI writes
//! (PKCS#1 `RSA PRIVATE KEY`, SEC1 `EC PRIVATE KEY`) and the PKCS#8 that ring signs with.

use crate::error::{Error, Result, Stage};

pub const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
pub const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
pub const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
pub const OID_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const OCTET_STRING: u8 = 0x04;
const OID: u8 = 0x06;
const NULL: u8 = 0x05;
const CTX0: u8 = 0xa0;

/// Encode one TLV.
pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .iter()
            .copied()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// Split the first TLV off `input`: (tag, content, rest).
pub fn read(input: &[u8]) -> Result<(u8, &[u8], &[u8])> {
    let bad = || Error::new(Stage::Mint, "private key", "malformed DER");
    let (&tag, rest) = input.split_first().ok_or_else(bad)?;
    let (&first, rest) = rest.split_first().ok_or_else(bad)?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let k = (first & 0x7f) as usize;
        if k == 0 || k > 4 || rest.len() < k {
            return Err(bad());
        }
        let len = rest[..k]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (len, &rest[k..])
    };
    if rest.len() < len {
        return Err(bad());
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

fn expect(input: &[u8], want: u8) -> Result<(&[u8], &[u8])> {
    let (tag, content, rest) = read(input)?;
    if tag != want {
        return Err(Error::new(
            Stage::Mint,
            "private key",
            format!("unexpected DER tag {tag:#04x}, wanted {want:#04x}"),
        ));
    }
    Ok((content, rest))
}

/// (algorithm OID, curve OID for EC keys, inner private key).
pub type Pkcs8Parts = (Vec<u8>, Option<Vec<u8>>, Vec<u8>);

/// The key algorithm OID and, for EC keys, the curve OID of a PKCS#8 PrivateKeyInfo,
/// plus the inner private key bytes (PKCS#1 or SEC1).
pub fn pkcs8_parts(pkcs8: &[u8]) -> Result<Pkcs8Parts> {
    let (info, _) = expect(pkcs8, SEQUENCE)?;
    let (_version, rest) = expect(info, INTEGER)?;
    let (alg_id, rest) = expect(rest, SEQUENCE)?;
    let (alg, params) = expect(alg_id, OID)?;
    let curve = match read(params) {
        Ok((OID, c, _)) => Some(c.to_vec()),
        _ => None,
    };
    let (inner, _) = expect(rest, OCTET_STRING)?;
    Ok((alg.to_vec(), curve, inner.to_vec()))
}

/// PKCS#8 (as ring generates it, without curve parameters inside) → SEC1 ECPrivateKey
/// with the named-curve parameters, which is what `EC PRIVATE KEY` PEM files carry.
pub fn pkcs8_to_sec1(pkcs8: &[u8]) -> Result<Vec<u8>> {
    let (_alg, curve, inner) = pkcs8_parts(pkcs8)?;
    let curve =
        curve.ok_or_else(|| Error::new(Stage::Mint, "private key", "EC key without curve"))?;
    let (ec, _) = expect(&inner, SEQUENCE)?;
    let (version, rest) = expect(ec, INTEGER)?;
    let (private, rest) = expect(rest, OCTET_STRING)?;
    // Drop any [0] parameters already present, then re-add ours before [1] publicKey.
    let rest = match read(rest) {
        Ok((CTX0, _, after)) => after,
        _ => rest,
    };
    let mut body = tlv(INTEGER, version);
    body.extend(tlv(OCTET_STRING, private));
    body.extend(tlv(CTX0, &tlv(OID, &curve)));
    body.extend_from_slice(rest);
    Ok(tlv(SEQUENCE, &body))
}

/// SEC1 ECPrivateKey (with named-curve parameters) → PKCS#8, plus the curve OID.
pub fn sec1_to_pkcs8(sec1: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
    let (ec, _) = expect(sec1, SEQUENCE)?;
    let (_version, rest) = expect(ec, INTEGER)?;
    let (_private, rest) = expect(rest, OCTET_STRING)?;
    let (params, _) = expect(rest, CTX0).map_err(|_| {
        Error::new(
            Stage::Mint,
            "private key",
            "EC PRIVATE KEY without named-curve parameters",
        )
    })?;
    let (curve, _) = expect(params, OID)?;
    let mut alg = tlv(OID, OID_EC_PUBLIC_KEY);
    alg.extend(tlv(OID, curve));
    let mut body = tlv(INTEGER, &[0]);
    body.extend(tlv(SEQUENCE, &alg));
    body.extend(tlv(OCTET_STRING, sec1));
    Ok((tlv(SEQUENCE, &body), curve.to_vec()))
}

/// PKCS#1 RSAPrivateKey → PKCS#8.
pub fn pkcs1_to_pkcs8(pkcs1: &[u8]) -> Vec<u8> {
    let mut alg = tlv(OID, OID_RSA);
    alg.extend(tlv(NULL, &[]));
    let mut body = tlv(INTEGER, &[0]);
    body.extend(tlv(SEQUENCE, &alg));
    body.extend(tlv(OCTET_STRING, pkcs1));
    tlv(SEQUENCE, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lengths_round_trip() {
        let content = vec![7u8; 300];
        let enc = tlv(OCTET_STRING, &content);
        assert_eq!(&enc[..4], &[0x04, 0x82, 0x01, 0x2c]);
        let (tag, c, rest) = read(&enc).unwrap();
        assert_eq!((tag, c.len(), rest.len()), (OCTET_STRING, 300, 0));
        assert!(read(&enc[..100]).is_err());
    }
}
