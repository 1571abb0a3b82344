//! Image configuration, `/etc/nodeagent/config.yaml` (baked into the image, not bootstrap
//! data). Every field has a default so an image without the file behaves sensibly.
//! Documented in README.md ("Configuration reference"); keep both in step.

use crate::base::error::{Error, Result, Stage};
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
    /// Grow the root partition to fill its disk at every boot (cloud-init's `growpart`
    /// default on cloud images); cloud-config `growpart:` overrides it.
    pub growpart: GrowpartSettings,
    /// Grow the root filesystem to fill its partition at every boot (cloud-init's
    /// `resize_rootfs: true`); cloud-config `resize_rootfs:` overrides it.
    pub resize_rootfs: bool,
    /// How long the main stage waits for an address when the metadata's `wait-on-network`
    /// asks for one, seconds (cloud-init waits forever).
    pub wait_on_network_timeout_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "snake_case")]
pub struct GrowpartSettings {
    /// `auto` (use `growpart` from cloud-guest-utils) or `off`.
    pub mode: String,
    /// Mount points or device paths whose partition is grown.
    pub devices: Vec<String>,
    /// Deadline of each disk tool (`growpart`, `resize2fs`, `xfs_growfs`), seconds.
    pub timeout_secs: u64,
}

impl Default for GrowpartSettings {
    fn default() -> Self {
        GrowpartSettings {
            mode: "auto".into(),
            devices: vec!["/".into()],
            timeout_secs: 120,
        }
    }
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
    /// Ask the node's own kubeadm (`kubeadm config validate`) about the kubeadm config in
    /// pre-flight, before the first write (kubeadm::validate). Off: only nodeagent's reader
    /// judges it before the writes, and a config kubeadm refuses fails at `kubeadm init|join`.
    pub preflight_validate: bool,
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
            growpart: GrowpartSettings::default(),
            resize_rootfs: true,
            wait_on_network_timeout_secs: 300,
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
            preflight_validate: true,
        }
    }
}

impl ImageConfig {
    /// Load `<root>/etc/nodeagent/config.yaml`; a missing file gives the defaults.
    pub fn load(root: &Path) -> Result<ImageConfig> {
        let path = root.join(PATH);
        let text =
            crate::base::confine::read_bounded(root, PATH, crate::formats::yaml::MAX_YAML_BYTES)
                .and_then(|b| {
                    String::from_utf8(b).map_err(|_| {
                        let msg = "stream did not contain valid UTF-8";
                        std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
                    })
                });
        match text {
            Ok(text) => Self::parse(&text).map_err(|e| e.within(&path.display().to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ImageConfig::default()),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(Error::invalid(
                Stage::Usage,
                path.display().to_string(),
                e.to_string(),
            )),
            Err(e) => Err(Error::io(Stage::Usage, path.display().to_string(), "", e)),
        }
    }

    pub fn parse(text: &str) -> Result<ImageConfig> {
        if text.trim().is_empty() {
            return Ok(ImageConfig::default());
        }
        let cfg: ImageConfig =
            crate::formats::yaml::parse(crate::formats::yaml::Doc::new(Stage::Usage, ""), text)?;
        if !matches!(cfg.growpart.mode.as_str(), "auto" | "growpart" | "off") {
            return Err(Error::invalid(
                Stage::Usage,
                "growpart.mode",
                format!("{:?} is not auto, growpart or off", cfg.growpart.mode),
            ));
        }
        Ok(cfg)
    }
}
