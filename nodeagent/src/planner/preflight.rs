//! Pre-flight for kubeadm steps, run at the end of planning before anything is written:
//! the config file must parse as typed kubeadm API and fit the mode (init/join), and the
//! PKI the plan writes (or finds on disk) must be usable by kubeadm.

use crate::error::{Error, Result, Stage};
use crate::kubeadm::config::{self, KubeadmConfig};
use crate::plan::{Action, KubeadmMode, KubeadmSpec, Plan};
use std::path::Path;

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
/// it before step `before`, else what is on disk under `root`.
pub fn file_at<'a>(plan: &'a Plan, before: usize, root: &Path, path: &str) -> Source<'a> {
    let written = plan.steps[..before]
        .iter()
        .rev()
        .find_map(|s| match &s.action {
            Action::WriteFile(f) if f.path == path && !f.append => Some(f.content.0.as_slice()),
            _ => None,
        });
    if let Some(b) = written {
        return Source::Plan(b);
    }
    match under_root(root, path).and_then(std::fs::read) {
        Ok(b) => Source::Disk(b),
        Err(_) => Source::Missing,
    }
}

/// Has this instance's journal (read only) a finished `done` record for `step`?
fn finished(plan: &Plan, root: &Path, step: &str) -> bool {
    let Ok(dir) = crate::state::state_dir(root) else {
        return false;
    };
    let path = dir
        .join("instances")
        .join(crate::state::instance_dir_name(&plan.instance_id))
        .join("journal.jsonl");
    crate::state::read_journal(&path).is_ok_and(|records| {
        records
            .iter()
            .any(|r| r.event.finishes_step() && r.event.step() == Some(step))
    })
}

/// `root` + absolute `path`, every symlink on the way resolved inside the root (confine.rs).
pub fn under_root(root: &Path, path: &str) -> std::io::Result<std::path::PathBuf> {
    crate::confine::dir(root, path)
}

pub fn check(plan: &Plan, root: &Path) -> Result<()> {
    for (i, step) in plan.steps.iter().enumerate() {
        if let Action::Kubeadm(spec) = &step.action {
            if finished(plan, root, &step.id) {
                // A later boot of the instance: the step will not run again, and the files on
                // disk are kubeadm's own output now, not something the plan hands it.
                continue;
            }
            check_step(plan, i, spec, root).map_err(|e| e.within(&format!("step {}", step.id)))?;
        }
    }
    Ok(())
}

fn check_step(plan: &Plan, index: usize, spec: &KubeadmSpec, root: &Path) -> Result<()> {
    let cfg = load_config(plan, index, spec, root)?;
    check_mode(&cfg, spec)?;
    check_pki(plan, index, spec, &cfg, root, crate::pki::now())
}

/// PKI checks on what the plan writes (or the disk already holds) under `certificatesDir`.
pub fn check_pki(
    plan: &Plan,
    index: usize,
    spec: &KubeadmSpec,
    cfg: &KubeadmConfig,
    root: &Path,
    now: i64,
) -> Result<()> {
    use crate::pki::check;
    let dir = cfg.certificates_dir();
    let dir = dir.trim_end_matches('/');
    let at = |p: &str| file_at(plan, index, root, p);
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
                let certs = check::check_ca(&cert_path, cb, key_bytes, now)?;
                if crt == "ca.crt" {
                    cluster_ca = Some((cert_path.clone(), certs));
                }
            }
            None => {
                if let Some((kp, _)) = key_bytes {
                    return Err(Error::new(
                        Stage::Kubeadm,
                        kp,
                        format!("private key present but its certificate {cert_path} is not"),
                    ));
                }
            }
        }
    }
    let (sa_key, sa_pub) = (format!("{dir}/sa.key"), format!("{dir}/sa.pub"));
    if let (Some(k), Some(p)) = (at(&sa_key).bytes(), at(&sa_pub).bytes()) {
        check::check_sa(&sa_key, k, &sa_pub, p)?;
    }
    if let Some(j) = &cfg.join {
        // File discovery: the kubeconfig must be there when kubeadm runs (CABPK writes it
        // with write_files; an https URL is fetched by kubeadm itself).
        if let Some(f) = &j.spec.discovery.file
            && f.kube_config_path.starts_with('/')
            && at(&f.kube_config_path).bytes().is_none()
        {
            return Err(Error::new(
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
                Some(b) => Some(check::check_ca(&ca_path, b, None, now)?),
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
    }
    let serving = format!("{dir}/apiserver.crt");
    if let Some(b) = at(&serving).bytes() {
        let host = cfg
            .cluster
            .as_ref()
            .and_then(|c| c.spec.control_plane_endpoint.as_deref())
            .and_then(config::split_host_port)
            .map(|(h, _)| h);
        check::check_serving(
            &serving,
            b,
            cluster_ca.as_ref().map(|(_, c)| &c[0]),
            host.as_deref(),
            now,
        )?;
    }
    Ok(())
}

/// Parse the step's `--config` file as the kubeadm step will see it.
pub fn load_config(
    plan: &Plan,
    index: usize,
    spec: &KubeadmSpec,
    root: &Path,
) -> Result<KubeadmConfig> {
    let src = file_at(plan, index, root, &spec.config_path);
    let bytes = src.bytes().ok_or_else(|| {
        Error::new(
            Stage::Kubeadm,
            spec.config_path.clone(),
            "kubeadm config file is neither written by write_files before the kubeadm step nor present on disk",
        )
    })?;
    let text = std::str::from_utf8(bytes).map_err(|_| {
        Error::new(
            Stage::Kubeadm,
            spec.config_path.clone(),
            "kubeadm config is not UTF-8 text",
        )
    })?;
    config::parse(text, &spec.config_path)
}

fn check_mode(cfg: &KubeadmConfig, spec: &KubeadmSpec) -> Result<()> {
    let place = spec.config_path.clone();
    match spec.mode {
        KubeadmMode::Init => {
            if cfg.init.is_none() && cfg.cluster.is_none() {
                return Err(Error::new(
                    Stage::Kubeadm,
                    place,
                    "`kubeadm init` needs an InitConfiguration or ClusterConfiguration document",
                ));
            }
            if let Some(j) = &cfg.join {
                return Err(Error::new(
                    Stage::Kubeadm,
                    format!("{place}: document {} (JoinConfiguration)", j.index),
                    "a JoinConfiguration in the config of `kubeadm init`",
                ));
            }
        }
        KubeadmMode::Join => {
            if cfg.join.is_none() {
                return Err(Error::new(
                    Stage::Kubeadm,
                    place,
                    "`kubeadm join` needs a JoinConfiguration document (with discovery)",
                ));
            }
            if let Some(i) = &cfg.init {
                return Err(Error::new(
                    Stage::Kubeadm,
                    format!("{place}: document {} (InitConfiguration)", i.index),
                    "an InitConfiguration in the config of `kubeadm join`",
                ));
            }
        }
    }
    Ok(())
}
