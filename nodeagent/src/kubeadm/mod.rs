//! kubeadm step: typed kubeadm config (v1beta3/v1beta4), detection in runcmd, endpoint wait, init/join with retries. Owner: kubeadm.

use crate::error::Result;
use crate::plan::{KubeadmSpec, Plan};

/// Recognise Cluster API's kubeadm line in a `runcmd` string item
/// (`kubeadm init|join --config FILE [--v N] [&& echo success > SENTINEL]`).
/// Called by `plan::build`; `None` leaves the item an ordinary command.
pub fn recognise(_runcmd_item: &str) -> Option<KubeadmSpec> {
    None
}

/// Pre-flight checks on a built plan (kubeadm config typed parse, PKI checks), before any write.
/// `root` is the `--root` directory for certificates already on disk.
pub fn preflight(_plan: &Plan, _root: &std::path::Path) -> Result<()> {
    Ok(())
}
