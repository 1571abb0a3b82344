//! Where bootstrap data comes from and where status goes back to: one small trait,
//! one module per platform (as afterburn does). Keys are logical guestinfo names
//! without the `guestinfo.` prefix: `metadata`, `userdata.encoding`, `nodeagent.status`.

use crate::error::Result;

pub trait Transport {
    /// Short name for logs and `v1.subplatform` (`vmware`, `fwcfg`, `dir`, `nocloud`).
    fn name(&self) -> &'static str;
    /// The raw value as the platform stores it, `None` when the key is absent.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>>;
    /// Publish a value (status reports, redaction, `local-ipv4`).
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;
}

pub mod dir;
pub mod fwcfg;
pub mod nocloud;
pub mod vmware;
