//! Where bootstrap data comes from and where status goes back to: one small trait,
//! one module per platform (as afterburn does). Keys are logical guestinfo names
//! without the `guestinfo.` prefix: `metadata`, `userdata.encoding`, `nodeagent.status`.

use crate::base::error::Result;

pub trait Transport {
    /// Short name for logs and `v1.subplatform` (`vmware`, `fwcfg`, `dir`, `nocloud`).
    fn name(&self) -> &'static str;
    /// The raw value as the platform stores it, `None` when the key is absent.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>>;
    /// Publish a value (status reports, redaction, `local-ipv4`).
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;
    /// The seed directory of a NoCloud transport: its instance data follows cloud-init's
    /// NoCloud datasource, not the VMware one.
    fn nocloud_seed(&self) -> Option<&SeedDir> {
        None
    }
    /// Whether `set` publishes into guestinfo (or a stand-in for it: the `dir:` files, fw_cfg's
    /// status port): where VM Operator reads its keys, and where a blanked `userdata` replaces
    /// what `get` reads. A NoCloud seed's `nodeagent.KEY` side files are neither.
    fn publishes_guestinfo(&self) -> bool {
        true
    }
}

pub mod dir;
pub mod fwcfg;
pub mod nocloud;
pub mod ovf;
pub mod vmware;

// ---- Detection, spec parsing and whole-read helpers ----

use crate::base::error::{Error, Stage};
use crate::source::decode::{self, Decoded};
use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};

pub use crate::base::limits::MAX_RAW_VALUE_BYTES;

const VALID_SPECS: &str = "valid forms: `vmware`, `ovf`, `fwcfg`, `dir:PATH`, `nocloud:PATH`";

/// Parse a `--transport` / image-config transport spec (an OVF `seedfrom` on the host).
pub fn from_spec(spec: &str) -> Result<Box<dyn Transport>> {
    from_spec_in(spec, Path::new("/"))
}

/// [`from_spec`] for a run under `--root root`: an OVF `seedfrom` is bootstrap data of that
/// root, looked up inside it; `dir:`/`nocloud:` name host directories (the operator's).
pub fn from_spec_in(spec: &str, root: &Path) -> Result<Box<dyn Transport>> {
    Ok(match parse_spec(spec)? {
        Spec::Vmware => Box::new(vmware::VmwareTransport::from_env()),
        Spec::Ovf => Box::new(ovf::OvfTransport::new(
            Box::new(vmware::VmwareTransport::from_env()),
            root,
        )),
        Spec::FwCfg => Box::new(fwcfg::FwCfgTransport::default()),
        Spec::Dir(p) => Box::new(dir::DirTransport::new(p)),
        Spec::NoCloud(p) => Box::new(nocloud::NoCloudTransport::new(p)),
    })
}

enum Spec {
    Vmware,
    /// The OVF environment in `guestinfo.ovfEnv`, read through the vmware helpers.
    Ovf,
    FwCfg,
    Dir(PathBuf),
    NoCloud(PathBuf),
}

fn parse_spec(spec: &str) -> Result<Spec> {
    let bad = |why: &str| {
        Error::invalid(
            Stage::Usage,
            "transport",
            format!("{why} {spec:?}; {VALID_SPECS}"),
        )
    };
    match spec.split_once(':') {
        None if spec == "vmware" => Ok(Spec::Vmware),
        None if spec == "ovf" => Ok(Spec::Ovf),
        None if spec == "fwcfg" => Ok(Spec::FwCfg),
        Some(("dir", p)) if !p.is_empty() => Ok(Spec::Dir(PathBuf::from(p))),
        Some(("nocloud", p)) if !p.is_empty() => Ok(Spec::NoCloud(PathBuf::from(p))),
        Some(("dir" | "nocloud", _)) => Err(bad("missing PATH in transport")),
        _ => Err(bad("unknown transport")),
    }
}

/// The directory a `dir:`/`nocloud:` spec names (its write-back goes there); `None` for the
/// other transports and for a spec that does not parse.
pub fn spec_dir(spec: &str) -> Option<PathBuf> {
    match parse_spec(spec).ok()? {
        Spec::Dir(p) | Spec::NoCloud(p) => Some(p),
        Spec::Vmware | Spec::Ovf | Spec::FwCfg => None,
    }
}

/// The three values cloud-init reads, decoded (absent keys are `None`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RawData {
    pub metadata: Option<Decoded>,
    pub userdata: Option<Decoded>,
    pub vendordata: Option<Decoded>,
}

impl RawData {
    /// Every decode warning, in read order.
    pub fn warnings(&self) -> Vec<String> {
        [&self.metadata, &self.userdata, &self.vendordata]
            .iter()
            .filter_map(|d| d.as_ref())
            .flat_map(|d| d.warnings.clone())
            .collect()
    }
}

/// Read and decode metadata, userdata and vendordata in cloud-init's RPC order (A.3):
/// each value, then its `.encoding` only if the value was present. NoCloud seed files are
/// taken verbatim (cloud-init's NoCloud does not rstrip them).
pub fn read_all(t: &dyn Transport) -> Result<RawData> {
    Ok(RawData {
        metadata: read_value(t, "metadata")?,
        userdata: read_value(t, "userdata")?,
        vendordata: read_value(t, "vendordata")?,
    })
}

/// One value of `read_all`: the value, then its `.encoding` only if the value was present.
/// Userdata and vendordata that are gzip data once decoded are decompressed, as cloud-init's
/// user-data processing does whatever the datasource (`decode::decode_userdata`).
pub fn read_value(t: &dyn Transport, key: &str) -> Result<Option<Decoded>> {
    let Some(raw) = t.get(key)? else {
        return Ok(None);
    };
    // NoCloud seed files and OVF properties (decoded by the ovf transport itself) are
    // taken verbatim: neither cloud-init datasource rstrips them.
    let verbatim = matches!(t.name(), "nocloud" | "ovf");
    let payload = matches!(key, "userdata" | "vendordata");
    if verbatim && !payload {
        return decode::decode_plain(key, &raw).map(Some);
    }
    if !verbatim && !decode::is_present(&raw) {
        return Ok(None);
    }
    let enc = if verbatim {
        None
    } else {
        t.get(&format!("{key}.encoding"))?
    };
    if payload {
        return decode::decode_userdata(key, &raw, enc.as_deref(), verbatim);
    }
    decode::decode_value(key, &raw, enc.as_deref())
}

/// Try the transports in `order` (image config; default `vmware`, `fwcfg`,
/// `nocloud:/var/lib/cloud/seed/nocloud`) and return the first with `metadata` or
/// `userdata`, plus one log line per transport tried. System files and `dir:`/`nocloud:`
/// paths are looked up under `root`; tools on the process `PATH`.
pub fn detect(order: &[String], root: &Path) -> Result<(Box<dyn Transport>, Vec<String>)> {
    detect_with_path(order, root, std::env::var_os("PATH").as_deref())
}

/// `detect` with an explicit tool search path (tests use fake tools).
pub fn detect_with_path(
    order: &[String],
    root: &Path,
    path_var: Option<&OsStr>,
) -> Result<(Box<dyn Transport>, Vec<String>)> {
    let mut log = Vec::new();
    for spec in order {
        let t: Box<dyn Transport> = match parse_spec(spec)? {
            Spec::Vmware | Spec::Ovf => {
                let product = read_dmi_product(root);
                let v = vmware::VmwareTransport::with_search_path(path_var);
                // A.2: the datasource requires VMware in DMI; ds-identify requires a tool.
                if !product
                    .as_deref()
                    .is_some_and(|p| p.to_lowercase().contains("vmware"))
                {
                    log.push(format!(
                        "{spec}: skipped: DMI product_name is {product:?}, not VMware"
                    ));
                    continue;
                }
                if !v.has_tool() {
                    log.push(format!(
                        "{spec}: skipped: neither vmware-rpctool nor vmtoolsd on PATH"
                    ));
                    continue;
                }
                if spec == "ovf" {
                    Box::new(ovf::OvfTransport::new(Box::new(v), root))
                } else {
                    Box::new(v)
                }
            }
            Spec::FwCfg => {
                let t = fwcfg::FwCfgTransport::in_root(root);
                if !t.by_name.exists() {
                    log.push(format!(
                        "fwcfg: skipped: {} does not exist",
                        t.by_name.path().display()
                    ));
                    continue;
                }
                Box::new(t)
            }
            Spec::Dir(p) => Box::new(dir::DirTransport::in_root(root, &p.to_string_lossy())),
            Spec::NoCloud(p) => Box::new(nocloud::NoCloudTransport::in_root(
                root,
                &p.to_string_lossy(),
            )),
        };
        let mut read = Vec::new();
        match has_data(t.as_ref(), &mut read) {
            Ok(Some(key)) => {
                log.push(format!("{spec}: selected: guestinfo.{key} present"));
                let primed = Primed {
                    inner: t,
                    read: std::cell::RefCell::new(read),
                };
                return Ok((Box::new(primed), log));
            }
            Ok(None) => log.push(format!("{spec}: skipped: no metadata or userdata")),
            Err(e) => log.push(format!("{spec}: skipped: {e}")),
        }
    }
    Err(Error::unavailable(
        Stage::Transport,
        "transport detection",
        format!(
            "no transport has bootstrap data (tried: {})",
            if log.is_empty() {
                "none".into()
            } else {
                log.join("; ")
            }
        ),
    ))
}

/// Which of metadata/userdata is present (ds-identify rule: `---` and blank are absent);
/// the values it read are added to `read`.
fn has_data(
    t: &dyn Transport,
    read: &mut Vec<(String, Option<Vec<u8>>)>,
) -> Result<Option<&'static str>> {
    for key in ["metadata", "userdata"] {
        let raw = t.get(key)?;
        let present = raw
            .as_deref()
            .is_some_and(|raw| matches!(t.name(), "nocloud" | "ovf") || decode::is_present(raw));
        read.push((key.to_string(), raw));
        if present {
            return Ok(Some(key));
        }
    }
    Ok(None)
}

/// The detected transport, holding the values detection read: the run reads them again at
/// once, and on vSphere each read is a `vmware-rpctool` process. Each is handed out once (a
/// later read goes to the platform) and dropped when the key is set.
struct Primed {
    inner: Box<dyn Transport>,
    read: std::cell::RefCell<Vec<(String, Option<Vec<u8>>)>>,
}

impl Transport for Primed {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let kept = {
            let mut read = self.read.borrow_mut();
            let at = read.iter().position(|(k, _)| k == key);
            at.map(|i| read.swap_remove(i).1)
        };
        match kept {
            Some(value) => Ok(value),
            None => self.inner.get(key),
        }
    }

    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.read.borrow_mut().retain(|(k, _)| k != key);
        self.inner.set(key, value)
    }

    fn nocloud_seed(&self) -> Option<&SeedDir> {
        self.inner.nocloud_seed()
    }

    fn publishes_guestinfo(&self) -> bool {
        self.inner.publishes_guestinfo()
    }
}

fn read_dmi_product(root: &Path) -> Option<String> {
    let mut s = String::new();
    crate::base::confine::open_read(root, "sys/class/dmi/id/product_name")
        .ok()?
        .take(crate::base::limits::MAX_DMI_FIELD_BYTES)
        .read_to_string(&mut s)
        .ok()?;
    Some(s.trim_end().to_string())
}

/// Keys become file names and RPC arguments: allow only `[A-Za-z0-9._-]`, not starting
/// with `.`, so no key can traverse paths or inject RPC syntax.
pub(crate) fn check_key(key: &str) -> Result<()> {
    let ok = !key.is_empty()
        && key.len() <= crate::base::limits::MAX_GUESTINFO_KEY_LEN
        && !key.starts_with('.')
        && !key.contains("..")
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            Stage::Transport,
            format!("guestinfo.{key}"),
            "invalid key (allowed: letters, digits, '.', '_', '-')",
        ))
    }
}

/// A directory of bootstrap-data files inside a root (a NoCloud seed, an OVF `seedfrom`, the
/// `dir:` transport's files, fw_cfg's `by_name` tree): every file in it is read through
/// [`crate::base::confine::read_bounded`] (resolved inside the root in the call that opens it, a
/// FIFO, device, socket or hard-linked file refused before it is opened, the size bounded),
/// and written back only by an atomic replace relative to the directory opened inside the
/// root (a link in the name is replaced, never followed). No path is joined onto the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedDir {
    root: PathBuf,
    /// The directory inside `root` (`/`-separated).
    rel: String,
}

impl SeedDir {
    /// The directory `rel` inside `root` (an absolute `rel` is taken from the root).
    pub fn new(root: &Path, rel: &str) -> SeedDir {
        SeedDir {
            root: root.to_path_buf(),
            rel: rel.to_string(),
        }
    }

    /// A host directory named on the command line (`--transport dir:PATH`): the host is its
    /// root; a relative path is taken from the working directory.
    pub fn host(path: &Path) -> SeedDir {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        SeedDir::new(Path::new("/"), &path.to_string_lossy())
    }

    /// The host path of the directory, for messages and instance data (never acted on).
    pub fn path(&self) -> PathBuf {
        let path = self.root.join(self.rel.trim_start_matches('/'));
        std::path::absolute(&path).unwrap_or(path)
    }

    /// `name` inside the directory (a path below it, `/`-separated).
    fn member(&self, name: &str) -> String {
        format!("{}/{name}", self.rel.trim_end_matches('/'))
    }

    /// The host path of `name`, for messages (never acted on).
    fn shown(&self, name: &str) -> String {
        let path = self.root.join(self.member(name).trim_start_matches('/'));
        std::path::absolute(&path)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// Whether the directory exists inside the root.
    pub fn exists(&self) -> bool {
        crate::base::confine::metadata(&self.root, &self.rel).is_ok_and(|m| m.is_dir())
    }

    /// The whole file `name`, `None` if it does not exist; more than MAX_RAW_VALUE_BYTES, or
    /// anything but a regular file, is refused.
    pub fn read(&self, name: &str, place: &str) -> Result<Option<Vec<u8>>> {
        self.read_capped(name, MAX_RAW_VALUE_BYTES, place)
    }

    /// [`SeedDir::read`] with a smaller bound `max` (fw_cfg's `size` files).
    pub fn read_capped(&self, name: &str, max: usize, place: &str) -> Result<Option<Vec<u8>>> {
        let rel = self.member(name);
        let read =
            crate::base::confine::read_bounded(&self.root, &rel, max.min(MAX_RAW_VALUE_BYTES));
        self.checked(name, place, read)
    }

    /// The first `size` bytes of `name` (a file whose length the caller knows from elsewhere),
    /// `None` if it does not exist; no read past `size` (see `confine::read_prefix`).
    pub fn read_sized(&self, name: &str, size: usize, place: &str) -> Result<Option<Vec<u8>>> {
        if size > MAX_RAW_VALUE_BYTES {
            return Err(self.over_limit(name, place));
        }
        let rel = self.member(name);
        self.checked(
            name,
            place,
            crate::base::confine::read_prefix(&self.root, &rel, size),
        )
    }

    /// A read as the agent reports it: absent is `None`, over the limit is `too-large`, a
    /// file of the wrong type is refused (`invalid`), any other failure is an `io` error.
    fn checked(
        &self,
        name: &str,
        place: &str,
        read: std::io::Result<Vec<u8>>,
    ) -> Result<Option<Vec<u8>>> {
        let shown = || self.shown(name);
        match read {
            Ok(buf) => Ok(Some(buf)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
                Err(self.over_limit(name, place))
            }
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Err(Error::invalid(
                Stage::Transport,
                place,
                format!("{}: {e}", shown()),
            )),
            Err(e) => Err(Error::io(
                Stage::Transport,
                place,
                &format!("cannot read {}", shown()),
                e,
            )),
        }
    }

    fn over_limit(&self, name: &str, place: &str) -> Error {
        Error::too_large(
            Stage::Transport,
            place,
            format!(
                "{} is over the limit of {MAX_RAW_VALUE_BYTES} bytes (MAX_RAW_VALUE_BYTES)",
                self.shown(name)
            ),
        )
    }

    /// Replace the file `name` in the directory atomically (fsio.rs, 0600, per-process temp
    /// name), relative to the directory opened inside the root: a link at `name` is replaced,
    /// never written through. Not fsynced: `set` is a report channel (guestinfo itself lives in
    /// the VMX's memory), the agent re-publishes at every phase, and durable progress is the
    /// state journal's job.
    pub fn write(&self, name: &str, data: &[u8], place: &str) -> Result<()> {
        let fail = |e: std::io::Error| {
            Error::io(
                Stage::Transport,
                place,
                &format!("cannot write {}", self.shown(name)),
                e,
            )
        };
        let dir = std::sync::Arc::new(
            crate::base::confine::Dir::open(&self.root, &self.rel).map_err(fail)?,
        );
        let opts = crate::base::fsio::Options::new(0o600).volatile().shared();
        crate::base::fsio::write_in(&dir, name, data, &opts).map_err(|e| {
            Error::caused(Stage::Transport, place, e)
                .map_message(|_| format!("cannot write {}", self.shown(name)))
        })
    }
}

/// cloud-init's redaction (A.7) for each logical key K, in order: `set(K, "---")`, then
/// `set(K.encoding, "")` (the vmware transport turns the empty value into one space).
/// Failures do not stop the others (cloud-init logs them and boots on); they are returned
/// so the caller can log or report them. cloud-init only does this on VMware guestinfo.
pub fn redact_keys(t: &dyn Transport, keys: &[String]) -> Vec<Error> {
    let mut errors = Vec::new();
    for key in keys {
        for (k, v) in [
            (key.clone(), &b"---"[..]),
            (format!("{key}.encoding"), &b""[..]),
        ] {
            if let Err(e) = t.set(&k, v) {
                tracing::error!(place = %e.place, "failed to clear guestinfo.{k}: {}", e.detail());
                errors.push(e);
            }
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::error::ErrorKind;

    /// A directory or FIFO in place of a file is refused as input (`invalid`), an absent
    /// file is `None`.
    #[test]
    fn a_missing_file_is_absent_and_a_special_one_refused() {
        let d = tempfile::tempdir().unwrap();
        let seed = SeedDir::new(d.path(), "/");
        assert_eq!(seed.read("absent", "p").unwrap(), None);
        std::fs::create_dir(d.path().join("sub")).unwrap();
        let e = seed.read("sub", "p").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
        nix::unistd::mkfifo(
            &d.path().join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let e = seed.read("fifo", "p").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    }
}
