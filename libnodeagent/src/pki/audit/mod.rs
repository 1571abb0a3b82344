//! `nodeagent certs`: a node's kubeadm PKI as `kubeadm certs check-expiration` lists it (the
//! same rows, names, expiry, residual time, CA and externally-managed columns, the CA table),
//! plus what kubeadm does not check: which CA signed each certificate, found by verifying
//! signatures (Cluster API names every CA `CN=kubernetes`, so names cannot tell), a proof
//! that each private key is the certificate's (a signature made with it verifies), the
//! chain, the SANs kubeadm's config asks for, the kubelet's client certificate, and
//! certificates close to expiry. Pure apart from reading files; nothing is written.
//! Reports never contain key material.

// Reads untrusted files: no indexing that could panic (str slicing is denied crate-wide).
#![deny(clippy::indexing_slicing)]

use super::inspect::{self, CertInfo};
use crate::base::error::{Error, Result, Stage};
use crate::kubeadm::config::KubeadmConfig;
use serde::Serialize;
use std::path::{Path, PathBuf};

mod load;
mod sans;
mod table;

pub use load::default_pki_dir;
use load::*;
use sans::*;
#[cfg(test)]
use table::tabwrite;
pub use table::{kubeadm_date, now_ceil, render_text, short_human_duration};

/// kubeadm's leaf certificates: row name, file under the PKI directory, signing CA.
const LEAVES: &[(&str, &str, &str)] = &[
    ("apiserver", "apiserver.crt", "ca"),
    (
        "apiserver-etcd-client",
        "apiserver-etcd-client.crt",
        "etcd-ca",
    ),
    (
        "apiserver-kubelet-client",
        "apiserver-kubelet-client.crt",
        "ca",
    ),
    (
        "etcd-healthcheck-client",
        "etcd/healthcheck-client.crt",
        "etcd-ca",
    ),
    ("etcd-peer", "etcd/peer.crt", "etcd-ca"),
    ("etcd-server", "etcd/server.crt", "etcd-ca"),
    (
        "front-proxy-client",
        "front-proxy-client.crt",
        "front-proxy-ca",
    ),
];
/// kubeconfigs whose embedded client certificate kubeadm lists (all signed by `ca`).
const KUBECONFIGS: &[&str] = &[
    "admin.conf",
    "controller-manager.conf",
    "scheduler.conf",
    "super-admin.conf",
];
/// kubeadm's CAs: name and file.
const CAS: &[(&str, &str)] = &[
    ("ca", "ca.crt"),
    ("etcd-ca", "etcd/ca.crt"),
    ("front-proxy-ca", "front-proxy-ca.crt"),
];
/// Rows kubeadm leaves out when etcd is external.
const ETCD_ROWS: &[&str] = &[
    "apiserver-etcd-client",
    "etcd-healthcheck-client",
    "etcd-peer",
    "etcd-server",
    "etcd-ca",
];
/// Where kubeadm's config is looked for (under the root), in order: CABPK's files, then
/// a copy kept in /etc/kubernetes.
pub const CONFIG_GLOBS: &[(&str, &str)] =
    &[("run/kubeadm", "kubeadm"), ("etc/kubernetes", "kubeadm")];
/// Largest file read (a kubeconfig with embedded certificates is a few KiB).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// What to look at.
pub struct Input<'a> {
    /// Node root: absolute paths inside kubeconfigs and the kubeadm config search are under it.
    pub root: &'a Path,
    pub pki_dir: &'a Path,
    pub kubeconfig_dir: &'a Path,
    /// An explicit kubeadm config; otherwise [`CONFIG_GLOBS`] are searched.
    pub kubeadm_config: Option<&'a Path>,
    /// Unix seconds.
    pub now: i64,
    /// Warn about certificates expiring within this many seconds.
    pub warn_within: Option<i64>,
}

/// One certificate (a row of kubeadm's tables, or one kubeadm does not list).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Entry {
    /// kubeadm's row name (`apiserver`, `admin.conf`, `etcd-ca`), or the file for others.
    pub name: String,
    /// The file, relative to the PKI or kubeconfig directory it was found in.
    pub file: String,
    /// kubeadm prints `!MISSING!` for these; not a problem (a worker has no leaf certificates).
    pub missing: bool,
    /// notAfter, RFC 3339.
    pub expires: Option<String>,
    pub residual_secs: Option<i64>,
    /// notAfter, Unix seconds.
    #[serde(skip)]
    pub not_after: Option<i64>,
    /// kubeadm's short form (`364d`, `9y`, `<invalid>` once expired).
    pub residual: String,
    /// The CA kubeadm uses for this certificate (kubeadm's CERTIFICATE AUTHORITY column).
    pub certificate_authority: Option<String>,
    /// The CA whose signature verifies: a kubeadm CA name, `self`, or the file of another CA
    /// in the PKI directory; `None` when no CA here verifies it.
    pub signed_by: Option<String>,
    /// kubeadm's meaning: the CA's private key is not on the node.
    pub externally_managed: bool,
    pub subject: String,
    pub issuer: String,
    pub serial: String,
    /// `RSA-2048`, `EC-P256`, …
    pub key_algorithm: String,
    /// `proven`, `mismatch`, `missing`, `unreadable`, or `-` (no key expected).
    pub key: String,
    /// `ok`, `wrong CA`, `broken`, or `-`.
    pub chain: String,
    /// `ok`, `missing: …`, or `-` (not checked: no kubeadm config, or nothing asked).
    pub sans: String,
}

/// Something wrong (exit 1) or, for `kind == "expiring"`, a warning (exit 2).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Problem {
    /// The row name and file: `apiserver (apiserver.crt)`.
    pub place: String,
    /// `expired`, `not-yet-valid`, `key-mismatch`, `key-missing`, `key-unreadable`, `chain`,
    /// `san-missing`, `unreadable`, `kubeadm-config`, `expiring`.
    pub kind: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    pub pki_dir: String,
    pub kubeconfig_dir: String,
    /// The kubeadm config the SANs were checked against (path under the root).
    pub kubeadm_config: Option<String>,
    /// kubeadm's first table, in its order.
    pub certificates: Vec<Entry>,
    /// kubeadm's CA table.
    pub certificate_authorities: Vec<Entry>,
    /// What kubeadm does not list: kubelet.conf's client certificate, `sa`, other files.
    pub other: Vec<Entry>,
    pub problems: Vec<Problem>,
    pub warnings: Vec<Problem>,
}

impl Report {
    /// 1 on a problem, 2 when only warnings (expiring soon), 0 otherwise.
    pub fn exit_code(&self) -> i32 {
        use crate::base::error::exit;
        if !self.problems.is_empty() {
            exit::FAILED
        } else if !self.warnings.is_empty() {
            exit::DEGRADED
        } else {
            exit::OK
        }
    }
}

/// A loaded certificate and where its key is.
struct Loaded {
    cert: CertInfo,
    key: KeyState,
}

enum KeyState {
    Pem(Vec<u8>),
    Missing,
    Unreadable(String),
}

/// A CA usable to identify signers: its display name and certificate.
struct Candidate {
    name: String,
    cert: CertInfo,
}

/// A kubeconfig's client credentials and the cluster CA it trusts.
struct Kubeconfig {
    loaded: Loaded,
    ca_data: Option<CertInfo>,
}

/// One SAN kubeadm puts in a certificate, and why.
struct WantSan {
    value: String,
    why: &'static str,
}

/// What the audit found wrong so far: problems (exit 1) and warnings (exit 2).
#[derive(Default)]
struct Findings {
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
}

/// One of kubeadm's CAs: row name, file, and the certificate when it could be read.
type CaRow = (&'static str, &'static str, Option<Loaded>);

/// The audit. Errors only when the PKI directory cannot be read at all; everything else is
/// a problem in the report.
pub fn audit(input: &Input) -> Result<Report> {
    let unreadable_dir = |e| {
        Error::io(
            Stage::Kubeadm,
            input.pki_dir.display().to_string(),
            "cannot read the PKI directory",
            e,
        )
    };
    std::fs::read_dir(input.pki_dir).map_err(unreadable_dir)?;
    let mut found = Findings::default();
    let config = find_config(input.root, input.kubeadm_config).unwrap_or_else(|p| {
        found.problems.push(p);
        None
    });
    let external_etcd = config
        .as_ref()
        .and_then(|(_, c)| c.cluster.as_ref())
        .and_then(|c| c.spec.etcd.as_ref())
        .is_some_and(|e| e.external.is_some());
    let listed = |name: &str| !(external_etcd && ETCD_ROWS.contains(&name));

    // CAs first: every leaf's signer is looked for among them.
    let cas = load_cas(input.pki_dir, &listed, &mut found.problems);
    let mut candidates: Vec<Candidate> = cas
        .iter()
        .filter_map(|(n, _, l)| {
            l.as_ref().map(|l| Candidate {
                name: n.to_string(),
                cert: l.cert.clone(),
            })
        })
        .collect();
    let others =
        load_others(input.pki_dir, &mut candidates, &mut found.problems).map_err(unreadable_dir)?;
    let ctx = Ctx {
        input,
        candidates: &candidates,
        config: config.as_ref().map(|(_, c)| c),
    };
    let certificates = ctx.certificate_table(&cas, &listed, &mut found);
    let certificate_authorities = cas
        .iter()
        .map(|(name, file, loaded)| match loaded {
            None => missing_entry(name, file, None),
            Some(l) => {
                let mut e = ctx.check(name, file, l, None, &mut found);
                e.externally_managed = matches!(l.key, KeyState::Missing);
                e
            }
        })
        .collect();
    let other = ctx.other_entries(&cas, others, &mut found);
    Ok(Report {
        pki_dir: input.pki_dir.display().to_string(),
        kubeconfig_dir: input.kubeconfig_dir.display().to_string(),
        kubeadm_config: config.map(|(p, _)| p),
        certificates,
        certificate_authorities,
        other,
        problems: found.problems,
        warnings: found.warnings,
    })
}

/// kubeadm's CAs that are listed, each loaded (a read failure is a problem and `None`).
fn load_cas(pki: &Path, listed: &dyn Fn(&str) -> bool, problems: &mut Vec<Problem>) -> Vec<CaRow> {
    let mut cas = Vec::new();
    for (name, file) in CAS.iter().filter(|(n, _)| listed(n)) {
        let loaded = load_pair(&pki.join(file)).unwrap_or_else(|e| {
            problems.push(unreadable(name, file, e));
            None
        });
        cas.push((*name, *file, loaded));
    }
    cas
}

/// Other files of the PKI directory: further CAs to identify signers by (added to
/// `candidates`), or certificates kubeadm does not list. Sorted by name.
fn load_others(
    pki: &Path,
    candidates: &mut Vec<Candidate>,
    problems: &mut Vec<Problem>,
) -> std::io::Result<Vec<(String, Option<Loaded>)>> {
    let known: Vec<&str> = CAS
        .iter()
        .map(|(_, f)| *f)
        .chain(LEAVES.iter().map(|(_, f, _)| *f))
        .collect();
    let mut extra_files = Vec::new();
    walk(pki, &mut extra_files)?;
    extra_files.sort();
    let mut others = Vec::new();
    for path in extra_files {
        let rel = rel_name(&path, pki);
        let is_cert = rel.ends_with(".crt")
            || (rel.ends_with(".pem")
                && read_capped(&path)
                    .is_ok_and(|d| d.windows(17).any(|w| w == b"BEGIN CERTIFICATE")));
        if known.contains(&rel.as_str()) || !is_cert {
            continue;
        }
        match load_pair(&path) {
            Ok(Some(l)) => {
                if l.cert.is_ca {
                    candidates.push(Candidate {
                        name: rel.clone(),
                        cert: l.cert.clone(),
                    });
                }
                others.push((rel, Some(l)));
            }
            Ok(None) => {}
            Err(e) => {
                problems.push(unreadable(&rel, &rel, e));
                others.push((rel, None));
            }
        }
    }
    Ok(others)
}

/// The certificate of kubeadm's CA `ca`, when it could be read.
fn ca_cert<'a>(cas: &'a [CaRow], ca: &str) -> Option<&'a CertInfo> {
    cas.iter()
        .find(|(n, _, _)| *n == ca)
        .and_then(|(_, _, l)| l.as_ref().map(|l| &l.cert))
}

struct Ctx<'a> {
    input: &'a Input<'a>,
    candidates: &'a [Candidate],
    config: Option<&'a KubeadmConfig>,
}

impl Ctx<'_> {
    /// kubeadm's certificate table: leaves and kubeconfigs, sorted by name as kubeadm does.
    fn certificate_table(
        &self,
        cas: &[CaRow],
        listed: &dyn Fn(&str) -> bool,
        found: &mut Findings,
    ) -> Vec<Entry> {
        let input = self.input;
        let mut rows: Vec<(&str, String, &str, bool)> = LEAVES
            .iter()
            .filter(|(n, _, _)| listed(n))
            .map(|(n, f, ca)| (*n, input.pki_dir.join(f).display().to_string(), *ca, false))
            .chain(KUBECONFIGS.iter().map(|n| {
                (
                    *n,
                    input.kubeconfig_dir.join(n).display().to_string(),
                    "ca",
                    true,
                )
            }))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(b.0));
        let ca_external = |ca: &str| {
            cas.iter().any(|(n, _, l)| {
                *n == ca
                    && l.as_ref()
                        .is_some_and(|l| matches!(l.key, KeyState::Missing))
            })
        };
        let mut certificates = Vec::new();
        for (name, path, ca, is_kubeconfig) in rows {
            let file = if is_kubeconfig {
                name.to_string()
            } else {
                rel_name(Path::new(&path), input.pki_dir)
            };
            let loaded = if is_kubeconfig {
                load_kubeconfig(Path::new(&path), input.root).map(|k| {
                    k.map(|k| {
                        trusts_ca(name, &k, ca_cert(cas, "ca"), &mut found.problems);
                        k.loaded
                    })
                })
            } else {
                load_pair(Path::new(&path))
            };
            let entry = match loaded {
                Ok(None) => missing_entry(name, &file, Some(ca)),
                Ok(Some(l)) => {
                    let mut e = self.check(name, &file, &l, Some(ca), found);
                    e.externally_managed = ca_external(ca);
                    e
                }
                Err(msg) => {
                    found.problems.push(unreadable(name, &file, msg));
                    let mut e = missing_entry(name, &file, Some(ca));
                    e.missing = false;
                    e
                }
            };
            certificates.push(entry);
        }
        certificates
    }

    /// Beyond kubeadm: the kubelet's client certificate, the service-account key pair and
    /// every other certificate of the PKI directory.
    fn other_entries(
        &self,
        cas: &[CaRow],
        others: Vec<(String, Option<Loaded>)>,
        found: &mut Findings,
    ) -> Vec<Entry> {
        let mut other = Vec::new();
        let kubelet = self.input.kubeconfig_dir.join("kubelet.conf");
        match load_kubeconfig(&kubelet, self.input.root) {
            Ok(Some(k)) => {
                trusts_ca("kubelet.conf", &k, ca_cert(cas, "ca"), &mut found.problems);
                let name = "kubelet.conf";
                other.push(self.check(name, name, &k.loaded, Some("ca"), found))
            }
            Ok(None) => {}
            Err(e) => found
                .problems
                .push(unreadable("kubelet.conf", "kubelet.conf", e)),
        }
        if let Some(sa) = sa_entry(self.input.pki_dir, &mut found.problems) {
            other.push(sa);
        }
        for (rel, loaded) in others {
            if let Some(l) = loaded {
                other.push(self.check(&rel, &rel, &l, None, found));
            }
        }
        other
    }

    /// Expiry, signer, key proof, chain and SANs of one certificate. `expected_ca`: the CA
    /// kubeadm uses for it (`None` for CAs and certificates kubeadm does not list).
    fn check(
        &self,
        name: &str,
        file: &str,
        l: &Loaded,
        expected_ca: Option<&str>,
        found: &mut Findings,
    ) -> Entry {
        let c = &l.cert;
        let mut problems = Place {
            place: if name == file {
                name.to_string()
            } else {
                format!("{name} ({file})")
            },
            problems: &mut found.problems,
        };
        let residual = c.not_after - self.input.now;
        self.expiry(c, &mut problems, &mut found.warnings);
        // The signer, by signature: the first CA whose key verifies this certificate.
        let signed_by = if c.self_signed() {
            Some("self".to_string())
        } else {
            self.candidates
                .iter()
                .find(|ca| ca.cert.der != c.der && inspect::signed_by(c, &ca.cert))
                .map(|ca| ca.name.clone())
        };
        let chain = self.chain(c, expected_ca, signed_by.as_deref(), &mut problems);
        let key = key_state(l, expected_ca, &mut problems);
        let sans = match self.config {
            Some(cfg) => sans_state(c, &wanted_sans(cfg, name), &mut problems),
            None => "-".into(),
        };
        Entry {
            name: name.to_string(),
            file: file.to_string(),
            missing: false,
            expires: Some(inspect::fmt_time(c.not_after)),
            residual_secs: Some(residual),
            not_after: Some(c.not_after),
            residual: short_human_duration(residual),
            certificate_authority: expected_ca.map(str::to_string),
            signed_by,
            externally_managed: false,
            subject: c.subject.clone(),
            issuer: c.issuer.clone(),
            serial: c.serial_hex.clone(),
            key_algorithm: c.public_key.describe(),
            key,
            chain,
            sans,
        }
    }

    /// Expired or not yet valid (problems), or expiring within `--warn-within` (a warning).
    fn expiry(&self, c: &CertInfo, problems: &mut Place, warnings: &mut Vec<Problem>) {
        let now = self.input.now;
        let residual = c.not_after - now;
        if residual < 0 {
            problems.push(
                "expired",
                format!(
                    "expired on {} ({} ago)",
                    kubeadm_date(c.not_after),
                    inspect::fmt_residual(-residual)
                ),
            );
        } else if now < c.not_before {
            problems.push(
                "not-yet-valid",
                format!(
                    "not valid before {} ({} from now): is the node clock behind?",
                    kubeadm_date(c.not_before),
                    inspect::fmt_residual(c.not_before - now)
                ),
            );
        } else if let Some(w) = self.input.warn_within
            && residual < w
        {
            warnings.push(Problem {
                place: problems.place.clone(),
                kind: "expiring",
                message: format!(
                    "expires on {}, in {} (within --warn-within {})",
                    kubeadm_date(c.not_after),
                    inspect::fmt_residual(residual),
                    inspect::fmt_residual(w)
                ),
            });
        }
    }

    /// The chain column: the signer found against the CA kubeadm expects.
    fn chain(
        &self,
        c: &CertInfo,
        expected_ca: Option<&str>,
        signed_by: Option<&str>,
        problems: &mut Place,
    ) -> String {
        match (expected_ca, signed_by) {
            // A CA: self-signed, or signed by another CA here.
            (None, Some(_)) if c.is_ca => "ok".to_string(),
            (None, None) if c.is_ca => {
                problems.push(
                    "chain",
                    format!(
                        "a CA that is not self-signed, and no CA here signed it (issuer {})",
                        c.issuer
                    ),
                );
                "broken".into()
            }
            // Not listed by kubeadm: no expectation, its signer is information.
            (None, _) => "-".into(),
            (Some(want), None) => {
                let why = if self.candidates.iter().any(|ca| ca.name == want) {
                    format!(
                        "no CA here verifies its signature (issuer {}), not even {want}",
                        c.issuer
                    )
                } else {
                    format!("its CA {want} is missing, and no other CA here verifies it")
                };
                problems.push("chain", why);
                "broken".into()
            }
            (Some(want), Some(got)) if got != want => {
                problems.push(
                    "chain",
                    format!(
                        "signed by {got}, but kubeadm uses {want} for it: its peers, which trust {want}, reject it"
                    ),
                );
                "wrong CA".into()
            }
            (Some(want), Some(_)) => {
                let ca = self.candidates.iter().find(|ca| ca.name == want);
                match ca.map(|ca| chain_flaw(c, &ca.cert, self.input.now)) {
                    Some(Some(flaw)) => {
                        problems.push("chain", flaw);
                        "broken".into()
                    }
                    _ => "ok".into(),
                }
            }
        }
    }
}

/// Problems of one certificate, all at the same place.
struct Place<'a> {
    place: String,
    problems: &'a mut Vec<Problem>,
}

impl Place<'_> {
    fn push(&mut self, kind: &'static str, message: String) {
        self.problems.push(Problem {
            place: self.place.clone(),
            kind,
            message,
        })
    }
}

/// The key column: the private key beside the certificate proven to be its own.
fn key_state(l: &Loaded, expected_ca: Option<&str>, problems: &mut Place) -> String {
    match &l.key {
        KeyState::Missing if expected_ca.is_none() => "missing".to_string(),
        KeyState::Missing => {
            problems.push(
                "key-missing",
                "no private key beside it: the component cannot use it".into(),
            );
            "missing".into()
        }
        KeyState::Unreadable(e) => {
            problems.push("key-unreadable", format!("private key: {e}"));
            "unreadable".into()
        }
        KeyState::Pem(pem) => match super::prove::proves(pem, &l.cert.spki_der) {
            Ok(true) => "proven".into(),
            Ok(false) => {
                problems.push(
                    "key-mismatch",
                    "the private key is not this certificate's: a signature made with it does not verify with the certificate's public key".into(),
                );
                "mismatch".into()
            }
            Err(e) => {
                problems.push("key-unreadable", format!("private key: {e}"));
                "unreadable".into()
            }
        },
    }
}

/// The sans column: each SAN the kubeadm config asks for that the certificate lacks.
fn sans_state(c: &CertInfo, want: &[WantSan], problems: &mut Place) -> String {
    let absent: Vec<&WantSan> = want.iter().filter(|w| !has_san(c, &w.value)).collect();
    for w in &absent {
        problems.push(
            "san-missing",
            format!(
                "SAN {} ({} in the kubeadm config) is not in the certificate",
                w.value, w.why
            ),
        );
    }
    if want.is_empty() {
        "-".to_string()
    } else if absent.is_empty() {
        "ok".into()
    } else {
        format!(
            "missing: {}",
            absent
                .iter()
                .map(|w| w.value.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// A kubeconfig's `certificate-authority-data` is the cluster CA on disk.
fn trusts_ca(name: &str, k: &Kubeconfig, ca: Option<&CertInfo>, problems: &mut Vec<Problem>) {
    if let (Some(data), Some(ca)) = (&k.ca_data, ca)
        && data.der != ca.der
    {
        problems.push(Problem {
            place: name.to_string(),
            kind: "chain",
            message: "its certificate-authority-data is not ca.crt: clients using it do not trust this cluster's API server".into(),
        });
    }
}

/// What breaks a leaf → CA link that a signature check alone does not see: the issuer
/// name (Go's verifier chains by name first), the CA's right to sign, its validity.
fn chain_flaw(leaf: &CertInfo, ca: &CertInfo, now: i64) -> Option<String> {
    if leaf.issuer != ca.subject {
        return Some(format!(
            "its issuer name {} is not the CA's subject {}",
            leaf.issuer, ca.subject
        ));
    }
    if !ca.is_ca || ca.key_cert_sign == Some(false) {
        return Some("its CA certificate may not sign certificates (CA:TRUE / keyCertSign)".into());
    }
    if ca.not_after < now {
        return Some(format!("its CA expired on {}", kubeadm_date(ca.not_after)));
    }
    None
}

fn missing_entry(name: &str, file: &str, ca: Option<&str>) -> Entry {
    Entry {
        name: name.to_string(),
        file: file.to_string(),
        missing: true,
        expires: None,
        residual_secs: None,
        not_after: None,
        residual: String::new(),
        certificate_authority: ca.map(str::to_string),
        signed_by: None,
        externally_managed: false,
        subject: String::new(),
        issuer: String::new(),
        serial: String::new(),
        key_algorithm: String::new(),
        key: "-".into(),
        chain: "-".into(),
        sans: "-".into(),
    }
}

fn unreadable(name: &str, file: &str, message: String) -> Problem {
    Problem {
        place: if name == file {
            name.to_string()
        } else {
            format!("{name} ({file})")
        },
        kind: "unreadable",
        message,
    }
}

/// The service-account key pair: `sa.key` proven against `sa.pub`.
fn sa_entry(pki: &Path, problems: &mut Vec<Problem>) -> Option<Entry> {
    let pub_path = pki.join("sa.pub");
    let key_path = pki.join("sa.key");
    if !exists(&pub_path) && !exists(&key_path) {
        return None;
    }
    let mut e = missing_entry("sa", "sa.pub", None);
    e.missing = false;
    let place = "sa (sa.key, sa.pub)".to_string();
    let spki = read_capped(&pub_path)
        .map_err(|e| e.to_string())
        .and_then(|d| super::prove::public_key_der(&d));
    let key = read_capped(&key_path).map_err(|e| e.to_string());
    e.key = match (spki, key) {
        (Err(m), _) => {
            problems.push(Problem {
                place,
                kind: "unreadable",
                message: format!("sa.pub: {m}"),
            });
            "-".into()
        }
        (Ok(_), Err(m)) => {
            problems.push(Problem {
                place,
                kind: "key-unreadable",
                message: format!("sa.key: {m}"),
            });
            "unreadable".into()
        }
        (Ok(spki), Ok(key)) => match super::prove::proves(&key, &spki) {
            Ok(true) => "proven".into(),
            Ok(false) => {
                problems.push(Problem {
                    place,
                    kind: "key-mismatch",
                    message: "sa.key is not the private key of sa.pub: tokens the controller-manager signs would not verify".into(),
                });
                "mismatch".into()
            }
            Err(m) => {
                problems.push(Problem {
                    place,
                    kind: "key-unreadable",
                    message: format!("sa.key: {m}"),
                });
                "unreadable".into()
            }
        },
    };
    Some(e)
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn residual_time_as_kubeadm_prints_it() {
        for (secs, want) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (59, "59s"),
            (3599, "59m"),
            (86399, "23h"),
            (365 * 86400 - 1, "364d"),
            (365 * 86400, "1y"),
            (10 * 365 * 86400 - 1, "9y"),
        ] {
            assert_eq!(short_human_duration(secs), want, "{secs}");
        }
        assert_eq!(kubeadm_date(1712654220), "Apr 09, 2024 09:17 UTC");
    }

    #[test]
    fn tabwriter_like_go() {
        // Go's tabwriter(minwidth 10, padding 3): cells padded to the widest + 3, at least
        // 10; the last cell as is; an empty line ends the column block.
        let out = tabwrite(&[
            "A\tBB\tlast".into(),
            "!MISSING! long-name\t\t".into(),
            String::new(),
            "CA\tX".into(),
        ]);
        assert_eq!(
            out,
            "A                     BB        last\n!MISSING! long-name             \n\nCA        X\n"
        );
    }

    #[test]
    fn first_service_ip_and_wanted_sans() {
        assert_eq!(
            first_service_ip("10.96.0.0/12").unwrap().to_string(),
            "10.96.0.1"
        );
        assert_eq!(
            first_service_ip("fd00::/108,10.0.0.0/16")
                .unwrap()
                .to_string(),
            "fd00::1"
        );
        assert_eq!(first_service_ip("junk"), None);
        let cfg = crate::kubeadm::config::parse(
            "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\nnetworking:\n  dnsDomain: corp\n",
            "t",
        )
        .unwrap();
        let got: Vec<String> = wanted_sans(&cfg, "apiserver")
            .into_iter()
            .map(|w| w.value)
            .collect();
        assert_eq!(
            got,
            [
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.corp",
                "10.96.0.1"
            ]
        );
        assert!(wanted_sans(&cfg, "front-proxy-client").is_empty());
    }
}
