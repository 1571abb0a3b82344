//! Transport nocloud.
//!
//! A NoCloud seed directory (`meta-data`, `user-data`, `vendor-data`), as cloud-init's
//! NoCloud datasource reads it. Seeds are plain: every `*.encoding` key is absent.
//! Values we publish (`set`) go to `DIR/nodeagent.K`, never over the seed files.

use super::{Transport, check_key, read_file_capped, write_file_atomic};
use crate::error::Result;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct NoCloudTransport {
    pub dir: PathBuf,
}

impl NoCloudTransport {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        NoCloudTransport { dir: dir.into() }
    }
}

/// The seed file holding a logical key, if it is one of the three seed keys.
fn seed_file(key: &str) -> Option<&'static str> {
    match key {
        "metadata" => Some("meta-data"),
        "userdata" => Some("user-data"),
        "vendordata" => Some("vendor-data"),
        _ => None,
    }
}

impl Transport for NoCloudTransport {
    fn name(&self) -> &'static str {
        "nocloud"
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        let place = format!("guestinfo.{key}");
        if key.ends_with(".encoding") {
            return Ok(None);
        }
        let file = match seed_file(key) {
            Some(f) => self.dir.join(f),
            None => self.dir.join(format!("nodeagent.{key}")),
        };
        read_file_capped(&file, &place)
    }

    fn nocloud_seed(&self) -> Option<&std::path::Path> {
        Some(&self.dir)
    }

    fn publishes_guestinfo(&self) -> bool {
        false
    }

    /// Writes `DIR/nodeagent.K` atomically (so `get` of a non-seed key reads it back).
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        check_key(key)?;
        write_file_atomic(
            &self.dir.join(format!("nodeagent.{key}")),
            value,
            &format!("guestinfo.{key}"),
        )
    }
}
