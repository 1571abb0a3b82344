//! Status reporting: status.json, guestinfo.nodeagent.status, virtio-serial, sentinel. Owner: kubeadm.

//! Interface used by `apply` (fixed early so apply and reporting can be built in parallel).

use crate::transport::Transport;
use serde::Serialize;
use std::path::Path;

/// design.md section 4 phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Reading,
    Applying,
    Waiting,
    Kubeadm,
    Done,
    Failed,
}

/// Publishes status at every phase change: `/run/nodeagent/status.json`,
/// `guestinfo.nodeagent.status` via the transport, and the CAPI sentinel on success.
pub struct Reporter<'t> {
    pub transport: Option<&'t dyn Transport>,
    pub root: std::path::PathBuf,
    pub instance_id: String,
}

impl<'t> Reporter<'t> {
    pub fn new(transport: Option<&'t dyn Transport>, root: &Path, instance_id: &str) -> Self {
        Reporter {
            transport,
            root: root.to_path_buf(),
            instance_id: instance_id.to_string(),
        }
    }
    /// Phase change (and current step). Failures to publish are logged, never fatal.
    pub fn phase(&mut self, _phase: Phase, _step: Option<&str>) {}
    /// Terminal failure: the failing step, a redacted reason, the last lines of kubeadm output.
    pub fn failed(&mut self, _step: &str, _reason: &str, _output_tail: &[String]) {}
    /// Terminal success.
    pub fn done(&mut self) {}
}
