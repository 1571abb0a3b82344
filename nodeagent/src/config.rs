//! Image configuration, `/etc/nodeagent/config.yaml` (baked into the image, not bootstrap
//! data). Every field has a default so an image without the file behaves sensibly.
//! Documented in README.md ("Configuration reference"); keep both in step.

use crate::error::{Error, Result, Stage};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const PATH: &str = "etc/nodeagent/config.yaml";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "snake_case")]
pub struct ImageConfig {
    /// cloud-init compatibility: undefined template variables render as
    /// `CI_MISSING_JINJA_VAR/<name>`, unknown cloud-config keys warn, runcmd's exit status
    /// is only the last command's. Default: strict.
    pub compat: bool,
    /// Transport detection order; the first that has data wins. `--transport` overrides.
    pub transports: Vec<String>,
    /// Overwrite `guestinfo.userdata` with `---` after a successful bootstrap.
    pub redact_userdata: bool,
    /// Per-command timeout for bootcmd/runcmd items, seconds.
    pub command_timeout_secs: u64,
    pub kubeadm: KubeadmSettings,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "snake_case")]
pub struct KubeadmSettings {
    /// How long a join waits for the control-plane endpoint to accept TCP, seconds.
    pub endpoint_wait_secs: u64,
    /// Deadline of one kubeadm invocation, seconds.
    pub timeout_secs: u64,
    /// Join attempts (with `kubeadm reset -f` between them).
    pub join_attempts: u32,
    /// Total deadline for all join attempts, seconds.
    pub join_deadline_secs: u64,
    /// First retry delay; doubled each attempt, with jitter, seconds.
    pub backoff_initial_secs: f64,
    pub backoff_max_secs: f64,
}

impl Default for ImageConfig {
    fn default() -> Self {
        ImageConfig {
            compat: false,
            transports: vec![
                "vmware".into(),
                "ovf".into(),
                "fwcfg".into(),
                "nocloud:/var/lib/cloud/seed/nocloud".into(),
            ],
            redact_userdata: true,
            command_timeout_secs: 600,
            kubeadm: KubeadmSettings::default(),
        }
    }
}

impl Default for KubeadmSettings {
    fn default() -> Self {
        KubeadmSettings {
            endpoint_wait_secs: 600,
            timeout_secs: 600,
            join_attempts: 5,
            join_deadline_secs: 1800,
            backoff_initial_secs: 1.0,
            backoff_max_secs: 30.0,
        }
    }
}

impl ImageConfig {
    /// Load `<root>/etc/nodeagent/config.yaml`; a missing file gives the defaults.
    pub fn load(root: &Path) -> Result<ImageConfig> {
        let path = root.join(PATH);
        match std::fs::read_to_string(&path) {
            Ok(text) => Self::parse(&text).map_err(|e| e.within(&path.display().to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ImageConfig::default()),
            Err(e) => Err(Error::new(
                Stage::Usage,
                path.display().to_string(),
                e.to_string(),
            )),
        }
    }

    pub fn parse(text: &str) -> Result<ImageConfig> {
        if text.trim().is_empty() {
            return Ok(ImageConfig::default());
        }
        serde_yaml::from_str(text).map_err(|e| {
            let place = e
                .location()
                .map(|l| format!("line {} column {}", l.line(), l.column()))
                .unwrap_or_default();
            Error::new(Stage::Usage, place, e.to_string())
        })
    }
}
