//! kubeadm step: typed kubeadm config (v1beta3/v1beta4), detection in runcmd, endpoint wait, init/join with retries.
//!
//! - `api`: the kubeadm configuration documents as typed structs;
//! - `config`: their strict parser and kubeadm's validation rules;
//! - `detect`: recognising CABPK's kubeadm runcmd line;
//! - `endpoint`: bounded TCP wait with backoff and jitter;
//! - `reset`: what `kubeadm reset -f` deletes and what to write again before a retry;
//! - `run`: kubeadm invocation, retries, output capture, sentinel;
//! - `validate`: real kubeadm's `config validate` in pre-flight, when the node has kubeadm
//!   (a worker's join config: after a failed first join attempt instead).

/// The documents' types: the one schema, read here and built by the minter.
pub mod api;
pub mod config;
pub mod detect;
pub mod endpoint;
pub mod reset;
pub mod run;
pub mod validate;

use crate::base::error::Result;
use crate::plan::KubeadmSpec;

/// Recognise Cluster API's kubeadm line in a `runcmd` string item
/// (`kubeadm init|join --config FILE [--v N] [&& echo success > SENTINEL]`).
/// Called by `planner::build`; `None` leaves the item an ordinary command.
pub fn recognise(runcmd_item: &str) -> Option<KubeadmSpec> {
    detect::recognise(runcmd_item)
}

/// Execute the kubeadm step: wait for the endpoint (join), run kubeadm (from PATH) with a
/// deadline, retry joins with `kubeadm reset -f` in between (then `restore` writes again the
/// bootstrap files reset deleted), write the sentinel on success.
/// On failure it reports `failed` with kubeadm's last output lines before returning the error.
/// `root` is the `--root`; `(env, dir)` what the runcmd items before the line exported and
/// the directory they left (cloud-init runs the line in the same script).
pub fn execute(
    spec: &KubeadmSpec,
    settings: &crate::source::config::KubeadmSettings,
    root: &std::path::Path,
    reporter: &mut crate::report::Reporter<'_>,
    restore: &dyn Fn() -> Result<()>,
    (env, dir): (Vec<(String, String)>, Option<String>),
) -> Result<()> {
    let runner = run::Runner {
        env,
        dir,
        ..run::Runner::default()
    };
    run::execute_restoring(spec, settings, root, reporter, &runner, restore)
}
