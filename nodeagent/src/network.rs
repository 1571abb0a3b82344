//! netplan-v2 metadata -> systemd-networkd / netplan files (pure rendering). Owner: apply.

use crate::error::Result;
use crate::plan::FileWrite;

/// Render the metadata's netplan-v2 network config (`ds.meta_data.network.config`) into the
/// files the image's renderer reads: `networkd` (.link/.network) or `netplan` (one YAML file).
/// Pure; called by `plan::build`.
pub fn render(_config: &serde_json::Value, _renderer: &str) -> Result<Vec<FileWrite>> {
    Ok(Vec::new())
}
