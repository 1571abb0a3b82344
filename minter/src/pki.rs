//! Cluster PKI as Cluster API makes it (docs/formats.md d.2): three CAs (`CN=kubernetes`,
//! PrintableString), critical KeyUsage {digitalSignature, keyEncipherment, keyCertSign},
//! critical BasicConstraints CA:TRUE pathlen:0, SHA-1 SubjectKeyIdentifier, no AKI/SAN,
//! notBefore now-5m; plus the service-account key pair. Unlike CAPI, serials are random
//! and non-zero (RFC 5280 wants positive serials). Keys are PEM in CAPI's flavours:
//! PKCS#1 `RSA PRIVATE KEY` and SEC1 `EC PRIVATE KEY`.
//!
//! rcgen (ring backend) signs, but ring cannot generate RSA keys, so RSA keys come from
//! the `rsa` crate and are handed to rcgen as PKCS#8.

use super::files;
use libnodeagent::base::error::{Error, ErrorKind, Result, Stage};
use libnodeagent::pki::der;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, DnValue, IsCa, KeyIdMethod, KeyPair,
    KeyUsagePurpose,
};
use std::path::Path;
use time::{Duration, OffsetDateTime};

/// Key algorithm for every key in the PKI (CAPI `encryptionAlgorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    EcdsaP256,
    EcdsaP384,
    Rsa2048,
    Rsa4096,
}

impl Algorithm {
    pub const ALL: [Algorithm; 4] = [
        Algorithm::EcdsaP256,
        Algorithm::EcdsaP384,
        Algorithm::Rsa2048,
        Algorithm::Rsa4096,
    ];

    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.name() == s.to_ascii_lowercase() || a.kubeadm_name() == s)
            .ok_or_else(|| {
                Error::invalid(
                    Stage::Mint,
                    "--algorithm",
                    format!(
                        "unknown algorithm {s:?}: use ecdsa-p256, ecdsa-p384, rsa-2048 or rsa-4096"
                    ),
                )
            })
    }
    /// CLI spelling.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::EcdsaP256 => "ecdsa-p256",
            Algorithm::EcdsaP384 => "ecdsa-p384",
            Algorithm::Rsa2048 => "rsa-2048",
            Algorithm::Rsa4096 => "rsa-4096",
        }
    }
    /// kubeadm v1beta4 `encryptionAlgorithm` spelling.
    pub fn kubeadm_name(self) -> &'static str {
        match self {
            Algorithm::EcdsaP256 => "ECDSA-P256",
            Algorithm::EcdsaP384 => "ECDSA-P384",
            Algorithm::Rsa2048 => "RSA-2048",
            Algorithm::Rsa4096 => "RSA-4096",
        }
    }
    fn rsa_bits(self) -> Option<usize> {
        match self {
            Algorithm::Rsa2048 => Some(2048),
            Algorithm::Rsa4096 => Some(4096),
            _ => None,
        }
    }
}

/// A private key: the PEM we write (CAPI flavour) and the rcgen signer.
pub struct Key {
    pub algorithm: Algorithm,
    pub private_pem: String,
    pair: KeyPair,
}

impl Key {
    pub fn generate(algorithm: Algorithm) -> Result<Key> {
        let gen_err = |e: String| Error::internal(Stage::Mint, "key generation", e);
        if let Some(bits) = algorithm.rsa_bits() {
            use rsa::pkcs1::EncodeRsaPrivateKey;
            use rsa::pkcs8::EncodePrivateKey;
            let key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, bits)
                .map_err(|e| gen_err(e.to_string()))?;
            let pkcs1 = key.to_pkcs1_der().map_err(|e| gen_err(e.to_string()))?;
            let pkcs8 = key.to_pkcs8_der().map_err(|e| gen_err(e.to_string()))?;
            let pair = KeyPair::try_from(pkcs8.as_bytes()).map_err(|e| gen_err(e.to_string()))?;
            return Ok(Key {
                algorithm,
                private_pem: pem_encode("RSA PRIVATE KEY", pkcs1.as_bytes()),
                pair,
            });
        }
        let alg = if algorithm == Algorithm::EcdsaP256 {
            &rcgen::PKCS_ECDSA_P256_SHA256
        } else {
            &rcgen::PKCS_ECDSA_P384_SHA384
        };
        let pair = KeyPair::generate_for(alg).map_err(|e| gen_err(e.to_string()))?;
        let sec1 = der::pkcs8_to_sec1(pair.serialized_der())?;
        Ok(Key {
            algorithm,
            private_pem: pem_encode("EC PRIVATE KEY", &sec1),
            pair,
        })
    }

    /// Load a private key PEM in any flavour CAPI reads: PKCS#1, SEC1 or PKCS#8.
    /// The PEM text is kept as given so a round trip is byte-identical.
    pub fn from_pem(pem_text: &str, place: &str) -> Result<Key> {
        let block = x509_parser::pem::Pem::iter_from_buffer(pem_text.as_bytes())
            .next()
            .ok_or_else(|| Error::invalid(Stage::Mint, place, "no PEM block"))?
            .map_err(|e| Error::invalid(Stage::Mint, place, format!("bad PEM: {e}")))?;
        let (pkcs8, algorithm) = match block.label.as_str() {
            "RSA PRIVATE KEY" => {
                let pkcs8 = der::pkcs1_to_pkcs8(&block.contents).map_err(|e| e.within(place))?;
                let alg = rsa_algorithm(&pkcs8, place)?;
                (pkcs8, alg)
            }
            "EC PRIVATE KEY" => {
                let (pkcs8, curve) =
                    der::sec1_to_pkcs8(&block.contents).map_err(|e| e.within(place))?;
                (pkcs8, curve_algorithm(Some(curve), place)?)
            }
            "PRIVATE KEY" => {
                let (alg, curve, _) =
                    der::pkcs8_parts(&block.contents).map_err(|e| e.within(place))?;
                let algorithm = if alg == der::OID_RSA {
                    rsa_algorithm(&block.contents, place)?
                } else if alg == der::OID_EC_PUBLIC_KEY {
                    curve_algorithm(curve, place)?
                } else {
                    return Err(Error::unsupported(
                        Stage::Mint,
                        place,
                        "unsupported private key algorithm",
                    ));
                };
                (block.contents.clone(), algorithm)
            }
            other => {
                return Err(Error::invalid(
                    Stage::Mint,
                    place,
                    format!("expected a private key PEM, found {other:?}"),
                ));
            }
        };
        let pair = KeyPair::try_from(pkcs8).map_err(|e| {
            Error::invalid(Stage::Mint, place, format!("unusable private key: {e}"))
        })?;
        Ok(Key {
            algorithm,
            private_pem: pem_text.to_string(),
            pair,
        })
    }

    /// PKIX `PUBLIC KEY` PEM (what `sa.pub` holds).
    pub fn public_pem(&self) -> String {
        use rcgen::PublicKeyData;
        pem_encode("PUBLIC KEY", &self.pair.subject_public_key_info())
    }

    pub fn pair(&self) -> &KeyPair {
        &self.pair
    }
}

fn rsa_algorithm(pkcs8: &[u8], place: &str) -> Result<Algorithm> {
    use rsa::pkcs8::DecodePrivateKey;
    use rsa::traits::PublicKeyParts;
    let key = rsa::RsaPrivateKey::from_pkcs8_der(pkcs8)
        .map_err(|e| Error::invalid(Stage::Mint, place, format!("bad RSA key: {e}")))?;
    match key.size() * 8 {
        2048 => Ok(Algorithm::Rsa2048),
        4096 => Ok(Algorithm::Rsa4096),
        n => Err(Error::unsupported(
            Stage::Mint,
            place,
            format!("RSA-{n} keys are not supported (use 2048 or 4096)"),
        )),
    }
}

fn curve_algorithm(curve: Option<der::ObjectIdentifier>, place: &str) -> Result<Algorithm> {
    match curve {
        Some(der::OID_P256) => Ok(Algorithm::EcdsaP256),
        Some(der::OID_P384) => Ok(Algorithm::EcdsaP384),
        _ => Err(Error::unsupported(
            Stage::Mint,
            place,
            "unsupported EC curve (use P-256 or P-384)",
        )),
    }
}

pub use libnodeagent::pki::der::pem_encode;

/// A random positive non-zero serial (16 bytes, top bit clear, first byte non-zero).
pub fn random_serial() -> Result<rcgen::SerialNumber> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b)
        .map_err(|e| Error::of(ErrorKind::Io, Stage::Mint, "random", e.to_string()))?;
    b[0] = (b[0] & 0x7f).max(1);
    Ok(rcgen::SerialNumber::from_slice(&b))
}

/// SHA-1 of the subjectPublicKey bits, as Go puts in the SubjectKeyIdentifier.
fn go_key_id(key: &KeyPair) -> Vec<u8> {
    use rcgen::PublicKeyData;
    ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, key.der_bytes())
        .as_ref()
        .to_vec()
}

/// A self-signed CA certificate with CAPI's recipe.
pub fn ca_certificate(key: &Key, now: OffsetDateTime, validity: Duration) -> Result<String> {
    let mut p = CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    let cn = "kubernetes"
        .try_into()
        .map_err(|e: rcgen::Error| Error::internal(Stage::Mint, "CA subject", e.to_string()))?;
    p.distinguished_name
        .push(DnType::CommonName, DnValue::PrintableString(cn));
    p.serial_number = Some(random_serial()?);
    p.not_before = now - Duration::minutes(5);
    p.not_after = now + validity;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::KeyCertSign,
    ];
    p.key_identifier_method = KeyIdMethod::PreSpecified(go_key_id(key.pair()));
    let cert = p
        .self_signed(key.pair())
        .map_err(|e| Error::internal(Stage::Mint, "CA certificate", e.to_string()))?;
    Ok(cert.pem())
}

/// A client certificate (kubeconfig user) signed by `ca`: CN `user`, O `group`,
/// ExtKeyUsage clientAuth, KeyUsage {digitalSignature, keyEncipherment}, notBefore = the
/// CA's notBefore, as CAPI's admin kubeconfig. Returns (cert PEM, key PEM).
pub fn client_certificate(
    ca: &CaPair,
    user: &str,
    group: Option<&str>,
    algorithm: Algorithm,
    validity: Duration,
) -> Result<(String, String)> {
    let ca_key = Key::from_pem(&ca.key_pem, "ca.key")?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key.pair()).map_err(|e| {
        Error::invalid(
            Stage::Mint,
            "ca.crt",
            format!("unusable CA certificate: {e}"),
        )
    })?;
    let ca_not_before = ca_not_before(&ca.cert_pem)?;
    let key = Key::generate(algorithm)?;
    let mut p = CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    if let Some(g) = group {
        p.distinguished_name.push(DnType::OrganizationName, g);
    }
    p.distinguished_name.push(DnType::CommonName, user);
    p.serial_number = Some(random_serial()?);
    p.not_before = ca_not_before;
    p.not_after = OffsetDateTime::now_utc() + validity;
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    p.use_authority_key_identifier_extension = true;
    let cert = p
        .signed_by(key.pair(), &issuer)
        .map_err(|e| Error::internal(Stage::Mint, "client certificate", e.to_string()))?;
    Ok((cert.pem(), key.private_pem))
}

fn ca_not_before(cert_pem: &str) -> Result<OffsetDateTime> {
    let block = x509_parser::pem::Pem::iter_from_buffer(cert_pem.as_bytes())
        .next()
        .ok_or_else(|| Error::invalid(Stage::Mint, "ca.crt", "no PEM block"))?
        .map_err(|e| Error::invalid(Stage::Mint, "ca.crt", e.to_string()))?;
    let cert = block
        .parse_x509()
        .map_err(|e| Error::invalid(Stage::Mint, "ca.crt", e.to_string()))?;
    Ok(cert.validity().not_before.to_datetime())
}

/// A CA certificate and its key, both PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaPair {
    pub cert_pem: String,
    pub key_pem: String,
}

/// The four things kubeadm needs to start a control plane, as CAPI ships them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pki {
    pub ca: CaPair,
    pub etcd: CaPair,
    pub front_proxy: CaPair,
    pub sa_pub: String,
    pub sa_key: String,
}

/// kubeadm layout file names, in CAPI's write_files order, with the modes we write them with.
pub const FILES: [(&str, u32); 8] = [
    ("ca.crt", 0o644),
    ("ca.key", 0o600),
    ("etcd/ca.crt", 0o644),
    ("etcd/ca.key", 0o600),
    ("front-proxy-ca.crt", 0o644),
    ("front-proxy-ca.key", 0o600),
    ("sa.pub", 0o644),
    ("sa.key", 0o600),
];

impl Pki {
    /// Generate the whole PKI. RSA keys are generated on parallel threads (the slow part).
    pub fn generate(algorithm: Algorithm, validity: Duration) -> Result<Pki> {
        let keys: Vec<Result<Key>> = if algorithm.rsa_bits().is_some() {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..4)
                    .map(|_| s.spawn(move || Key::generate(algorithm)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(Error::internal(
                                Stage::Mint,
                                "key generation",
                                "thread panicked",
                            ))
                        })
                    })
                    .collect()
            })
        } else {
            (0..4).map(|_| Key::generate(algorithm)).collect()
        };
        let mut keys = keys.into_iter().collect::<Result<Vec<Key>>>()?.into_iter();
        let now = OffsetDateTime::now_utc();
        let mut ca = || -> Result<CaPair> {
            let key = keys.next().expect("four keys");
            Ok(CaPair {
                cert_pem: ca_certificate(&key, now, validity)?,
                key_pem: key.private_pem,
            })
        };
        let (ca, etcd, front_proxy) = (ca()?, ca()?, ca()?);
        let sa = keys.next().expect("four keys");
        Ok(Pki {
            ca,
            etcd,
            front_proxy,
            sa_pub: sa.public_pem(),
            sa_key: sa.private_pem,
        })
    }

    /// (relative path, content, mode) in CAPI's order.
    pub fn files(&self) -> [(&'static str, &str, u32); 8] {
        let c = [
            &self.ca.cert_pem,
            &self.ca.key_pem,
            &self.etcd.cert_pem,
            &self.etcd.key_pem,
            &self.front_proxy.cert_pem,
            &self.front_proxy.key_pem,
            &self.sa_pub,
            &self.sa_key,
        ];
        std::array::from_fn(|i| (FILES[i].0, c[i].as_str(), FILES[i].1))
    }

    /// The key algorithm, read from the cluster CA key.
    pub fn algorithm(&self) -> Result<Algorithm> {
        Ok(Key::from_pem(&self.ca.key_pem, "ca.key")?.algorithm)
    }

    /// Write the kubeadm layout under `dir`. Refuses to replace any existing PKI file unless
    /// `force`; checks all eight names before writing the first.
    pub fn write(&self, dir: &Path, force: bool) -> Result<()> {
        let existing = FILES.iter().find(|(n, _)| dir.join(n).exists());
        if let (false, Some((name, _))) = (force, existing) {
            return Err(Error::conflict(
                Stage::Mint,
                dir.join(name).display().to_string(),
                "a PKI already exists here; refusing to overwrite it (use --force to replace it)",
            ));
        }
        let files: Vec<_> = self
            .files()
            .iter()
            .map(|(name, content, mode)| (dir.join(name), content.as_bytes().to_vec(), *mode))
            .collect();
        files::write_batch(&files, true)
    }

    /// Read a kubeadm-layout PKI directory (e.g. `/etc/kubernetes/pki` of a running cluster).
    pub fn read(dir: &Path) -> Result<Pki> {
        let read = |name: &str| -> Result<String> {
            let path = dir.join(name);
            let meta = std::fs::metadata(&path)
                .map_err(|e| Error::io(Stage::Mint, path.display().to_string(), "", e))?;
            if meta.len() > MAX_PEM_BYTES {
                return Err(Error::too_large(
                    Stage::Mint,
                    path.display().to_string(),
                    format!("larger than {MAX_PEM_BYTES} bytes"),
                ));
            }
            std::fs::read_to_string(&path)
                .map_err(|e| Error::io(Stage::Mint, path.display().to_string(), "", e))
        };
        let pki = Pki {
            ca: CaPair {
                cert_pem: read("ca.crt")?,
                key_pem: read("ca.key")?,
            },
            etcd: CaPair {
                cert_pem: read("etcd/ca.crt")?,
                key_pem: read("etcd/ca.key")?,
            },
            front_proxy: CaPair {
                cert_pem: read("front-proxy-ca.crt")?,
                key_pem: read("front-proxy-ca.key")?,
            },
            sa_pub: read("sa.pub")?,
            sa_key: read("sa.key")?,
        };
        pki.check()
            .map_err(|e| e.within(&dir.display().to_string()))?;
        Ok(pki)
    }

    /// Every key parses and each CA key matches its certificate.
    pub fn check(&self) -> Result<()> {
        for (name, ca) in [
            ("ca", &self.ca),
            ("etcd/ca", &self.etcd),
            ("front-proxy-ca", &self.front_proxy),
        ] {
            let key = Key::from_pem(&ca.key_pem, &format!("{name}.key"))?;
            let block = x509_parser::pem::Pem::iter_from_buffer(ca.cert_pem.as_bytes())
                .next()
                .ok_or_else(|| Error::invalid(Stage::Mint, format!("{name}.crt"), "no PEM block"))?
                .map_err(|e| Error::invalid(Stage::Mint, format!("{name}.crt"), e.to_string()))?;
            let cert = block
                .parse_x509()
                .map_err(|e| Error::invalid(Stage::Mint, format!("{name}.crt"), e.to_string()))?;
            use rcgen::PublicKeyData;
            if cert.tbs_certificate.subject_pki.raw
                != key.pair().subject_public_key_info().as_slice()
            {
                return Err(Error::conflict(
                    Stage::Mint,
                    format!("{name}.key"),
                    "does not match the certificate",
                ));
            }
        }
        Key::from_pem(&self.sa_key, "sa.key")?;
        Ok(())
    }
}

/// Largest PEM file `read` accepts (an RSA-4096 key is about 3.3 KB).
pub use libnodeagent::base::limits::MAX_PEM_BYTES;

/// `10y`, `3650d`, `87600h` → a duration (a year is 365 days, as CAPI counts), at most 100 years.
pub fn parse_validity(s: &str, flag: &str) -> Result<Duration> {
    use super::validate::DurationUnit;
    let units = [
        DurationUnit {
            suffix: "y",
            max_count: 100,
            unit: Duration::days(365),
        },
        DurationUnit {
            suffix: "d",
            max_count: 100 * 365,
            unit: Duration::days(1),
        },
        DurationUnit {
            suffix: "h",
            max_count: 100 * 365 * 24,
            unit: Duration::hours(1),
        },
    ];
    super::validate::duration(
        s,
        flag,
        Stage::Mint,
        &units,
        "use a number followed by y, d or h (e.g. 10y, 365d, 8760h)",
    )
}
