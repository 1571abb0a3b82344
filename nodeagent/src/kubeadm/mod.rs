//! kubeadm step: typed kubeadm config (v1beta3/v1beta4), detection in runcmd, endpoint wait, init/join with retries. Owner: kubeadm.
//!
//! - `config`: the typed kubeadm API and its strict parser;
//! - `detect`: recognising CABPK's kubeadm runcmd line;
//! - `preflight`: config + PKI checks on a built plan, before any write.

pub mod config;
pub mod detect;
pub mod preflight;

use crate::error::Result;
use crate::plan::{KubeadmSpec, Plan};

/// Recognise Cluster API's kubeadm line in a `runcmd` string item
/// (`kubeadm init|join --config FILE [--v N] [&& echo success > SENTINEL]`).
/// Called by `plan::build`; `None` leaves the item an ordinary command.
pub fn recognise(runcmd_item: &str) -> Option<KubeadmSpec> {
    detect::recognise(runcmd_item)
}

/// Pre-flight checks on a built plan (kubeadm config typed parse, PKI checks), before any write.
/// `root` is the `--root` directory for certificates already on disk.
pub fn preflight(plan: &Plan, root: &std::path::Path) -> Result<()> {
    preflight::check(plan, root)
}

/// Execute the kubeadm step: wait for the endpoint (join), run kubeadm with a deadline,
/// retry joins with `kubeadm reset -f` in between, write the sentinel on success.
/// `root` is the `--root`; `exec` false records the step as skipped (dry apply).
pub fn execute(
    _spec: &KubeadmSpec,
    _settings: &crate::config::KubeadmSettings,
    _root: &std::path::Path,
    _reporter: &mut crate::report::Reporter<'_>,
) -> Result<()> {
    Err(crate::error::Error::new(
        crate::error::Stage::Kubeadm,
        "kubeadm",
        "not implemented yet",
    ))
}
