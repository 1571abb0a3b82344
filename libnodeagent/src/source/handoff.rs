//! The local stage's platform read, handed to the main stage of the same boot through the
//! run directory (`/run/nodeagent/local-read.json`, 0600), so that the main stage does not
//! read the userdata and vendordata from the platform a second time (on vSphere four of the
//! seven `vmware-rpctool` calls; cloud-init's network stage likewise trusts the datasource its
//! local stage cached, `init.fetch(existing="trust")`).
//!
//! The main stage still reads the metadata, and takes the saved values only when it is
//! unchanged, the transport is the same and the boot is the same: a new instance (its
//! metadata names another instance-id) or anything the platform changed in its metadata
//! is read afresh. The file is taken once (removed when read), so a main stage run again by
//! hand reads the platform again.
//! Facts are not handed over: the main stage runs after the network is up, and the
//! addresses it has then are what the templates see. The plan is not either: it is made
//! again from those facts (pure, milliseconds).

use crate::base::error::Result;
use crate::source::decode::Decoded;
use crate::source::transport::{self, RawData, Transport};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Where the local stage leaves its read, under the root.
pub const LOCAL_READ: &str = "run/nodeagent/local-read.json";

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct Value {
    text: String,
    warnings: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Saved {
    boot_id: String,
    transport: String,
    metadata: Option<Value>,
    userdata: Option<Value>,
    vendordata: Option<Value>,
}

fn to_value(d: &Option<Decoded>) -> Option<Value> {
    d.as_ref().map(|d| Value {
        text: d.text.clone(),
        warnings: d.warnings.clone(),
    })
}

fn from_value(v: Option<Value>) -> Option<Decoded> {
    v.map(|v| Decoded {
        text: v.text,
        warnings: v.warnings,
    })
}

/// The local stage's read: everything from the platform, kept for the main stage.
pub fn read_and_keep(t: &dyn Transport, root: &Path) -> Result<(RawData, Option<String>)> {
    let raw = transport::read_all(t)?;
    save(root, t.name(), &raw);
    Ok((raw, None))
}

/// Keep what the local stage read (as the platform has it, before saved copies replace a
/// blanked value) for the main stage. A failure to write only costs the main stage a second
/// read: it is logged, not fatal.
pub fn save(root: &Path, transport: &str, raw: &RawData) {
    let saved = Saved {
        boot_id: crate::base::state::boot_id(),
        transport: transport.to_string(),
        metadata: to_value(&raw.metadata),
        userdata: to_value(&raw.userdata),
        vendordata: to_value(&raw.vendordata),
    };
    let written = serde_json::to_vec(&saved)
        .map_err(std::io::Error::other)
        .and_then(|json| {
            crate::report::write_run_file(
                &crate::base::confine::file(root, LOCAL_READ)?,
                &json,
                0o600,
            )
        });
    if let Err(e) = written {
        tracing::warn!("cannot keep the local stage's read for the main stage: {e}");
    }
}

/// The main stage's read: the saved userdata and vendordata when the metadata read now is
/// the one the local stage read (same transport, same boot); otherwise everything from the
/// platform. Returns the data and a log line saying which.
pub fn read(t: &dyn Transport, root: &Path) -> Result<(RawData, Option<String>)> {
    let Some(saved) = take(root) else {
        return Ok((transport::read_all(t)?, None));
    };
    if saved.boot_id != crate::base::state::boot_id() || saved.transport != t.name() {
        return Ok((
            transport::read_all(t)?,
            Some("local stage's read is from another boot or transport: read again".into()),
        ));
    }
    let metadata = transport::read_value(t, "metadata")?;
    if to_value(&metadata) != saved.metadata {
        return Ok((
            RawData {
                metadata,
                userdata: transport::read_value(t, "userdata")?,
                vendordata: transport::read_value(t, "vendordata")?,
            },
            Some(
                "metadata changed since the local stage: userdata and vendordata read again".into(),
            ),
        ));
    }
    Ok((
        RawData {
            metadata,
            userdata: from_value(saved.userdata),
            vendordata: from_value(saved.vendordata),
        },
        Some(
            "metadata unchanged since the local stage: its userdata and vendordata read reused"
                .into(),
        ),
    ))
}

/// The saved read, removed as it is taken. Absent, unreadable or oversized: `None`.
fn take(root: &Path) -> Option<Saved> {
    use std::io::Read;
    let path = crate::base::confine::file(root, LOCAL_READ).ok()?;
    let file = std::fs::File::open(&path).ok()?;
    let _ = std::fs::remove_file(&path);
    let mut bytes = Vec::new();
    // Three decoded values at most, JSON-escaped (at most 6 bytes per byte), and their warnings.
    let limit = 3 * 6 * crate::base::limits::MAX_DECODED_BYTES as u64 + 65536;
    file.take(limit + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 > limit {
        return None;
    }
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::transport::dir::DirTransport;
    use std::path::PathBuf;

    fn seed(dir: &Path, metadata: &str, userdata: &str) {
        std::fs::write(dir.join("guestinfo.metadata"), metadata).unwrap();
        std::fs::write(dir.join("guestinfo.userdata"), userdata).unwrap();
    }

    /// A dir: platform with instance `a` and userdata `one`, and an empty root.
    fn platform() -> (tempfile::TempDir, PathBuf, PathBuf, DirTransport) {
        let t = tempfile::tempdir().unwrap();
        let (data, root) = (t.path().join("d"), t.path().join("root"));
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        let tr = DirTransport::new(data.clone());
        seed(&data, "instance-id: a\n", "#cloud-config\nhostname: one\n");
        (t, data, root, tr)
    }

    #[test]
    fn the_main_stage_reuses_the_local_read_only_while_the_metadata_is_the_same() {
        let (_t, data, root, tr) = platform();
        save(&root, tr.name(), &transport::read_all(&tr).unwrap());
        assert_eq!(
            std::fs::metadata(root.join(LOCAL_READ))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
        // The platform's userdata changes, its metadata does not: the local read stands.
        seed(&data, "instance-id: a\n", "#cloud-config\nhostname: two\n");
        let (raw, line) = read(&tr, &root).unwrap();
        assert!(raw.userdata.unwrap().text.contains("one"));
        assert!(line.unwrap().contains("reused"));
        // Taken once: a second main run reads the platform.
        assert!(!root.join(LOCAL_READ).exists());
        let (raw, line) = read(&tr, &root).unwrap();
        assert!(raw.userdata.unwrap().text.contains("two"));
        assert_eq!(line, None);
        // Another instance (new metadata): everything is read again.
        save(&root, tr.name(), &transport::read_all(&tr).unwrap());
        seed(
            &data,
            "instance-id: b\n",
            "#cloud-config\nhostname: three\n",
        );
        let (raw, line) = read(&tr, &root).unwrap();
        assert!(raw.userdata.unwrap().text.contains("three"));
        assert!(raw.metadata.unwrap().text.contains("instance-id: b"));
        assert!(line.unwrap().contains("read again"));
    }

    #[test]
    fn a_read_from_another_transport_or_a_damaged_file_is_not_used() {
        let (_t, data, root, tr) = platform();
        save(&root, "fwcfg", &transport::read_all(&tr).unwrap());
        seed(&data, "instance-id: a\n", "#cloud-config\nhostname: two\n");
        let (raw, _) = read(&tr, &root).unwrap();
        assert!(raw.userdata.unwrap().text.contains("two"));
        std::fs::write(root.join(LOCAL_READ), b"{not json").unwrap();
        let (raw, line) = read(&tr, &root).unwrap();
        assert!(raw.userdata.unwrap().text.contains("two"));
        assert_eq!(line, None);
    }

    use std::os::unix::fs::PermissionsExt;
}
