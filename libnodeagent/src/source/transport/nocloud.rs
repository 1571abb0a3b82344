//! Transport nocloud.
//!
//! A NoCloud seed directory (`meta-data`, `user-data`, `vendor-data`), as cloud-init's
//! NoCloud datasource reads it. Seeds are plain: every `*.encoding` key is absent.
//! Values we publish (`set`) go to `DIR/nodeagent.K`, never over the seed files.

use super::{SeedDir, Transport, check_key};
use crate::base::error::Result;
use std::path::Path;

#[derive(Debug, Clone)]
pub struct NoCloudTransport {
    pub dir: SeedDir,
}

impl NoCloudTransport {
    /// The host directory `dir` (`--transport nocloud:PATH`).
    pub fn new(dir: impl AsRef<Path>) -> Self {
        NoCloudTransport {
            dir: SeedDir::host(dir.as_ref()),
        }
    }

    /// The seed `rel` inside `root` (the image config's `nocloud:/var/lib/cloud/seed/nocloud`).
    pub fn in_root(root: &Path, rel: &str) -> Self {
        NoCloudTransport {
            dir: SeedDir::new(root, rel),
        }
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
            Some(f) => f.to_string(),
            None => format!("nodeagent.{key}"),
        };
        self.dir.read(&file, &place)
    }

    fn nocloud_seed(&self) -> Option<&SeedDir> {
        Some(&self.dir)
    }

    fn publishes_guestinfo(&self) -> bool {
        false
    }

    /// Writes `DIR/nodeagent.K` atomically (so `get` of a non-seed key reads it back).
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        check_key(key)?;
        self.dir.write(
            &format!("nodeagent.{key}"),
            value,
            &format!("guestinfo.{key}"),
        )
    }
}
