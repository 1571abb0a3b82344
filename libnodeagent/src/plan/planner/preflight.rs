//! Pre-flight for kubeadm steps, run at the end of planning before anything is written:
//! the config file must parse as typed kubeadm API and fit the mode (init/join), and the
//! PKI the plan writes (or finds on disk) must be usable by kubeadm.
//!
//! Pure: what is on disk comes in as a [`Disk`] (read by `pipeline::gather`), the clock as
//! `now`. A file the checks look up that the [`Disk`] does not hold counts as absent and is
//! listed by [`unread`], so the reading side can fetch it and check again.

use crate::base::error::{Error, Result, Stage, ensure};
use crate::kubeadm::config::{self, KubeadmConfig};
use crate::pki::check;
use crate::plan::{Action, KubeadmMode, KubeadmSpec, Plan};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

/// What the target root holds that pre-flight checks: read by `pipeline::gather`.
#[derive(Debug, Clone, Default)]
pub struct Disk {
    /// Files by absolute path: `Some(bytes)`, or `None` when absent (or unreadable).
    pub files: BTreeMap<String, Option<Vec<u8>>>,
    /// Steps this instance's journal records as finished: a later boot, not checked again.
    /// `None` until read (`pipeline` reads the journal when the plan has a kubeadm step).
    pub finished: Option<BTreeSet<String>>,
}

/// The cluster CA's certificate path and chain, when there is one.
type ClusterCa = Option<(String, Vec<crate::pki::inspect::CertInfo>)>;

/// The [`Disk`] as the checks see it, noting the paths it was asked for and does not hold.
struct View<'a> {
    disk: &'a Disk,
    unread: RefCell<BTreeSet<String>>,
    memo: &'a Memo,
}

/// A CA check's inputs: certificate path and bytes, key path and bytes, the clock.
type CaInputs = (String, Vec<u8>, Option<(String, Vec<u8>)>, i64);
/// A config file's path and bytes.
type ConfigInputs = (String, Vec<u8>);

/// What pre-flight parsed, by its inputs. The reading side checks again once it has read
/// what a pass looked up, over the same config and PKI, and `run --stage all` plans twice:
/// each is parsed and checked once.
#[derive(Default)]
pub struct Memo {
    configs: RefCell<Vec<(ConfigInputs, Result<KubeadmConfig>)>>,
    cas: RefCell<Vec<(CaInputs, Result<Vec<crate::pki::inspect::CertInfo>>)>>,
}

impl Memo {
    fn config(
        &self,
        path: &str,
        bytes: &[u8],
        parse: impl FnOnce() -> Result<KubeadmConfig>,
    ) -> Result<KubeadmConfig> {
        let found = self
            .configs
            .borrow()
            .iter()
            .find_map(|((p, b), r)| (p == path && b.as_slice() == bytes).then(|| r.clone()));
        found.unwrap_or_else(|| {
            let r = parse();
            let key = (path.to_string(), bytes.to_vec());
            self.configs.borrow_mut().push((key, r.clone()));
            r
        })
    }

    /// [`check::check_ca`], once per certificate and key.
    fn check_ca(
        &self,
        cert_path: &str,
        cert: &[u8],
        key: Option<(&str, &[u8])>,
        now: i64,
    ) -> Result<Vec<crate::pki::inspect::CertInfo>> {
        let same = |(p, c, k, t): &CaInputs| {
            p == cert_path
                && c.as_slice() == cert
                && k.as_ref().map(|(kp, kb)| (kp.as_str(), kb.as_slice())) == key
                && *t == now
        };
        let found = self
            .cas
            .borrow()
            .iter()
            .find_map(|(i, r)| same(i).then(|| r.clone()));
        found.unwrap_or_else(|| {
            let r = check::check_ca(cert_path, cert, key, now);
            let inputs = (
                cert_path.to_string(),
                cert.to_vec(),
                key.map(|(p, b)| (p.to_string(), b.to_vec())),
                now,
            );
            self.cas.borrow_mut().push((inputs, r.clone()));
            r
        })
    }
}

/// Where a file the kubeadm step needs comes from.
pub enum Source<'a> {
    /// Written by a `write_files` step of the plan (the last write wins).
    Plan(&'a [u8]),
    /// Already on disk under the root.
    Disk(Vec<u8>),
    Missing,
}

impl Source<'_> {
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Source::Plan(b) => Some(b),
            Source::Disk(b) => Some(b),
            Source::Missing => None,
        }
    }
}

/// The content a path will have when the kubeadm step runs: the plan's last write of
/// it before step `before`, else what is on disk. A write from a `source` file has what that
/// file has then (its `content` where the file is missing and the entry gives one).
fn file_at<'a>(plan: &'a Plan, before: usize, disk: &View<'_>, path: &str) -> Source<'a> {
    let (mut before, mut path, mut fallback) = (before, path.to_string(), None);
    loop {
        let written = plan.steps[..before]
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, s)| match &s.action {
                Action::WriteFile(f) if f.path == path && !f.append => Some((i, f)),
                _ => None,
            });
        match written {
            Some((i, f)) => match &f.source {
                None => return Source::Plan(f.content.0.as_slice()),
                Some(src) => {
                    fallback = src.fallback.then_some(f.content.0.as_slice());
                    (before, path) = (i, src.path.clone());
                }
            },
            None => break,
        }
    }
    let found = file_on_disk(disk, &path);
    match (found, fallback) {
        (Source::Missing, Some(b)) => Source::Plan(b),
        (found, _) => found,
    }
}

/// What is on disk at `path`, as pre-flight read it (a path not read yet is asked for).
fn file_on_disk<'a>(disk: &View<'_>, path: &str) -> Source<'a> {
    match disk.disk.files.get(path) {
        Some(Some(b)) => Source::Disk(b.clone()),
        Some(None) => Source::Missing,
        None => {
            disk.unread.borrow_mut().insert(path.to_string());
            Source::Missing
        }
    }
}

/// Check every kubeadm step of `plan` against what it writes and what `disk` holds, at
/// time `now` (seconds since the epoch).
pub fn check(plan: &Plan, disk: &Disk, now: i64) -> Result<()> {
    check_in(plan, &view(disk, &Memo::default()), now)
}

/// The paths [`check`] looks up that `disk` does not hold: what the reading side fetches
/// before checking again (a config or certificate already on disk, a `certificatesDir` of
/// its own). Empty when `disk` has all the checks need.
pub fn unread(plan: &Plan, disk: &Disk, now: i64) -> Vec<String> {
    let memo = Memo::default();
    let v = view(disk, &memo);
    let _ = check_in(plan, &v, now);
    v.unread.into_inner().into_iter().collect()
}

/// [`check`] and [`unread`] in one pass: the result, and what it looked up that `disk` does
/// not hold (when that is empty, the result is final). Passes over the same plan share `memo`.
pub fn check_and_unread(
    plan: &Plan,
    disk: &Disk,
    now: i64,
    memo: &Memo,
) -> (Result<()>, Vec<String>) {
    let v = view(disk, memo);
    let result = check_in(plan, &v, now);
    (result, v.unread.into_inner().into_iter().collect())
}

fn view<'a>(disk: &'a Disk, memo: &'a Memo) -> View<'a> {
    View {
        disk,
        unread: RefCell::new(BTreeSet::new()),
        memo,
    }
}

fn check_in(plan: &Plan, disk: &View<'_>, now: i64) -> Result<()> {
    for (i, step) in plan.steps.iter().enumerate() {
        if let Action::Kubeadm(spec) = &step.action {
            if disk
                .disk
                .finished
                .as_ref()
                .is_some_and(|f| f.contains(&step.id))
            {
                // A later boot of the instance: the step will not run again, and the files on
                // disk are kubeadm's own output now, not something the plan hands it.
                continue;
            }
            check_step(plan, i, spec, disk, now)
                .map_err(|e| e.within(&format!("step {}", step.id)))?;
        }
    }
    Ok(())
}

fn check_step(
    plan: &Plan,
    index: usize,
    spec: &KubeadmSpec,
    disk: &View<'_>,
    now: i64,
) -> Result<()> {
    let cfg = load_config(plan, index, spec, disk)?;
    check_mode(&cfg, spec)?;
    check_pki(plan, index, spec, &cfg, disk, now)
}

/// PKI checks on what the plan writes (or the disk already holds) under `certificatesDir`.
fn check_pki(
    plan: &Plan,
    index: usize,
    spec: &KubeadmSpec,
    cfg: &KubeadmConfig,
    disk: &View<'_>,
    now: i64,
) -> Result<()> {
    let dir = cfg.certificates_dir();
    let dir = dir.trim_end_matches('/');
    let at = |p: &str| file_at(plan, index, disk, p);
    let cluster_ca = check_cas(cfg, dir, &at, disk.memo, now)?;
    let (sa_key, sa_pub) = (format!("{dir}/sa.key"), format!("{dir}/sa.pub"));
    if let (Some(k), Some(p)) = (at(&sa_key).bytes(), at(&sa_pub).bytes()) {
        check::check_sa(&sa_key, k, &sa_pub, p)?;
    }
    if let Some(j) = &cfg.join {
        check_join(j, spec, dir, &cluster_ca, &at, disk.memo, now)?;
    }
    let serving = format!("{dir}/apiserver.crt");
    if let Some(b) = at(&serving).bytes() {
        let host = cfg
            .cluster
            .as_ref()
            .and_then(|c| c.spec.control_plane_endpoint.as_deref())
            .and_then(config::split_host_port)
            .map(|(h, _)| h);
        let key = format!("{dir}/apiserver.key");
        let key_source = at(&key);
        let key_bytes = key_source.bytes();
        check::check_serving(
            &serving,
            b,
            key_bytes.map(|k| (key.as_str(), k)),
            cluster_ca.as_ref().map(|(_, c)| &c[0]),
            host.as_deref(),
            now,
        )?;
    }
    Ok(())
}

/// The cluster's CAs (cluster, etcd, front-proxy; an external etcd's CA certificate alone):
/// each certificate with its key. Returns the cluster CA, path and chain.
fn check_cas<'a>(
    cfg: &KubeadmConfig,
    dir: &str,
    at: &dyn Fn(&str) -> Source<'a>,
    memo: &Memo,
    now: i64,
) -> Result<ClusterCa> {
    let external_ca = cfg
        .cluster
        .as_ref()
        .and_then(|c| c.spec.etcd.as_ref())
        .and_then(|e| e.external.as_ref())
        .map(|x| x.ca_file.clone());
    let mut cluster_ca = None;
    for (crt, key) in [
        ("ca.crt", "ca.key"),
        ("etcd/ca.crt", "etcd/ca.key"),
        ("front-proxy-ca.crt", "front-proxy-ca.key"),
    ] {
        let (cert_path, key_path) = match (&external_ca, crt) {
            // External etcd: only its CA certificate, at etcd.external.caFile.
            (Some(Some(ca_file)), "etcd/ca.crt") => (ca_file.clone(), None),
            (Some(None), "etcd/ca.crt") => continue,
            _ => (format!("{dir}/{crt}"), Some(format!("{dir}/{key}"))),
        };
        let cert = at(&cert_path);
        let key = key_path.as_ref().map(|k| (k.as_str(), at(k)));
        let key_bytes = key.as_ref().and_then(|(p, s)| s.bytes().map(|b| (*p, b)));
        match cert.bytes() {
            Some(cb) => {
                let certs = memo.check_ca(&cert_path, cb, key_bytes, now)?;
                if crt == "ca.crt" {
                    cluster_ca = Some((cert_path.clone(), certs));
                }
            }
            None => {
                if let Some((kp, _)) = key_bytes {
                    return Err(Error::not_found(
                        Stage::Kubeadm,
                        kp,
                        format!("private key present but its certificate {cert_path} is not"),
                    ));
                }
            }
        }
    }
    Ok(cluster_ca)
}

/// A join's discovery: a file kubeconfig that will be there, the CA matching its pinned
/// hashes.
fn check_join<'a>(
    j: &config::Doc<crate::kubeadm::api::JoinConfiguration>,
    spec: &KubeadmSpec,
    dir: &str,
    cluster_ca: &ClusterCa,
    at: &dyn Fn(&str) -> Source<'a>,
    memo: &Memo,
    now: i64,
) -> Result<()> {
    // File discovery: the kubeconfig must be there when kubeadm runs (CABPK writes it
    // with write_files; an https URL is fetched by kubeadm itself).
    if let Some(f) = &j.spec.discovery.file
        && f.kube_config_path.starts_with('/')
        && at(&f.kube_config_path).bytes().is_none()
    {
        return Err(Error::not_found(
            Stage::Kubeadm,
            format!(
                "{}: document {} (JoinConfiguration): discovery.file.kubeConfigPath",
                spec.config_path, j.index
            ),
            format!(
                "{} is neither written by write_files before the kubeadm step nor present on disk",
                f.kube_config_path
            ),
        ));
    }
    let ca_path = j
        .spec
        .ca_cert_path
        .clone()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| format!("{dir}/ca.crt"));
    let ca = match &cluster_ca {
        Some((p, certs)) if *p == ca_path => Some(certs.clone()),
        _ => match at(&ca_path).bytes() {
            Some(b) => Some(memo.check_ca(&ca_path, b, None, now)?),
            None => None,
        },
    };
    let hashes = j
        .spec
        .discovery
        .bootstrap_token
        .as_ref()
        .and_then(|b| b.ca_cert_hashes.clone())
        .unwrap_or_default();
    if let Some(certs) = ca
        && !hashes.is_empty()
    {
        let place = format!(
            "{}: document {} (JoinConfiguration): discovery.bootstrapToken.caCertHashes",
            spec.config_path, j.index
        );
        check::check_ca_pinned(&ca_path, &certs, &hashes, &place)?;
    }
    Ok(())
}

/// Parse the step's `--config` file as the kubeadm step will see it.
fn load_config(
    plan: &Plan,
    index: usize,
    spec: &KubeadmSpec,
    disk: &View<'_>,
) -> Result<KubeadmConfig> {
    let src = file_at(plan, index, disk, &spec.config_path);
    let bytes = src.bytes().ok_or_else(|| {
        Error::not_found(
            Stage::Kubeadm,
            spec.config_path.clone(),
            "kubeadm config file is neither written by write_files before the kubeadm step nor present on disk",
        )
    })?;
    let text = std::str::from_utf8(bytes).map_err(|_| {
        Error::invalid(
            Stage::Kubeadm,
            spec.config_path.clone(),
            "kubeadm config is not UTF-8 text",
        )
    })?;
    disk.memo.config(&spec.config_path, bytes, || {
        // Said so, since real kubeadm may judge the file too (kubeadm::validate).
        config::parse(text, &spec.config_path).map_err(|mut e| {
            e.message = format!("nodeagent's kubeadm reader refused it: {}", e.message);
            e
        })
    })
}

/// The config holds the documents its mode needs, and not the other mode's.
fn check_mode(cfg: &KubeadmConfig, spec: &KubeadmSpec) -> Result<()> {
    let place = &spec.config_path;
    // (has what it needs, the error if not, the other mode's document: (index, kind, error))
    let (has_own, missing, other) = match spec.mode {
        KubeadmMode::Init => (
            cfg.init.is_some() || cfg.cluster.is_some(),
            "`kubeadm init` needs an InitConfiguration or ClusterConfiguration document",
            cfg.join.as_ref().map(|j| {
                let why = "a JoinConfiguration in the config of `kubeadm init`";
                (j.index, "JoinConfiguration", why)
            }),
        ),
        KubeadmMode::Join => (
            cfg.join.is_some(),
            "`kubeadm join` needs a JoinConfiguration document (with discovery)",
            cfg.init.as_ref().map(|i| {
                let why = "an InitConfiguration in the config of `kubeadm join`";
                (i.index, "InitConfiguration", why)
            }),
        ),
    };
    ensure(has_own, Stage::Kubeadm, place, || missing)?;
    if let Some((index, kind, why)) = other {
        return Err(Error::invalid(
            Stage::Kubeadm,
            format!("{place}: document {index} ({kind})"),
            why,
        ));
    }
    Ok(())
}
