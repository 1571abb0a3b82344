//! Transport dir.
//!
//! Debug/test transport: one file per key, `DIR/guestinfo.K`, read and written whole through
//! the confined seed reader ([`SeedDir`]).

use super::{SeedDir, Transport, check_key};
use crate::base::error::Result;
use std::path::Path;

#[derive(Debug, Clone)]
pub struct DirTransport {
    pub dir: SeedDir,
}

impl DirTransport {
    /// The host directory `dir` (`--transport dir:PATH`).
    pub fn new(dir: impl AsRef<Path>) -> Self {
        DirTransport {
            dir: SeedDir::host(dir.as_ref()),
        }
    }

    /// The directory `rel` inside `root` (an image-config transport under `--root`).
    pub fn in_root(root: &Path, rel: &str) -> Self {
        DirTransport {
            dir: SeedDir::new(root, rel),
        }
    }

    fn file(key: &str) -> Result<String> {
        check_key(key)?;
        Ok(format!("guestinfo.{key}"))
    }
}

impl Transport for DirTransport {
    fn name(&self) -> &'static str {
        "dir"
    }

    /// `DIR/guestinfo.K`; a missing file is an absent key.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.dir
            .read(&Self::file(key)?, &format!("guestinfo.{key}"))
    }

    /// Replaces `DIR/guestinfo.K` atomically (temp file + rename).
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.dir
            .write(&Self::file(key)?, value, &format!("guestinfo.{key}"))
    }
}
