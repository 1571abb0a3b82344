//! Transport dir.
//!
//! Debug/test transport: one file per key, `DIR/guestinfo.K`, read and written whole.

use super::{Transport, check_key, read_file_capped, write_file_atomic};
use crate::error::Result;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct DirTransport {
    pub dir: PathBuf,
}

impl DirTransport {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DirTransport { dir: dir.into() }
    }

    fn file(&self, key: &str) -> Result<PathBuf> {
        check_key(key)?;
        Ok(self.dir.join(format!("guestinfo.{key}")))
    }
}

impl Transport for DirTransport {
    fn name(&self) -> &'static str {
        "dir"
    }

    /// `DIR/guestinfo.K`; a missing file is an absent key.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        read_file_capped(&self.file(key)?, &format!("guestinfo.{key}"))
    }

    /// Replaces `DIR/guestinfo.K` atomically (temp file + rename).
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        write_file_atomic(&self.file(key)?, value, &format!("guestinfo.{key}"))
    }
}
