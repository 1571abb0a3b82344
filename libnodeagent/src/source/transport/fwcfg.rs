//! Transport fwcfg.
//!
//! QEMU: values come from fw_cfg files (`-fw_cfg name=opt/guestinfo.K,file=...`), exposed
//! by the `qemu_fw_cfg` driver as `/sys/firmware/qemu_fw_cfg/by_name/opt/guestinfo.K/raw`.
//! fw_cfg is read-only, so values we publish go out as one compact JSON line each on the
//! virtio-serial port `org.nodeagent.status` (docs/formats.md N.3, N.4).

use super::{SeedDir, Transport, check_key};
use crate::base::error::{Error, Result, Stage};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const DEFAULT_BY_NAME: &str = "/sys/firmware/qemu_fw_cfg/by_name";
pub const DEFAULT_STATUS_PORT: &str = "/dev/virtio-ports/org.nodeagent.status";
/// The key whose value is the status JSON itself (docs/formats.md N.4).
pub const STATUS_KEY: &str = "nodeagent.status";

#[derive(Debug, Clone)]
pub struct FwCfgTransport {
    /// The `by_name` directory of the qemu_fw_cfg sysfs tree.
    pub by_name: SeedDir,
    /// The root the virtio-serial port is opened in, and its path there (a FIFO or plain
    /// file in tests).
    pub port_root: PathBuf,
    pub status_port: String,
    /// How long `set` waits for the host side to read before giving up.
    pub timeout: Duration,
}

impl FwCfgTransport {
    /// Host paths of the `by_name` directory and the port.
    pub fn new(by_name: impl AsRef<Path>, status_port: impl AsRef<Path>) -> Self {
        let port = std::path::absolute(status_port.as_ref())
            .unwrap_or_else(|_| status_port.as_ref().to_path_buf());
        FwCfgTransport {
            by_name: SeedDir::host(by_name.as_ref()),
            port_root: PathBuf::from("/"),
            status_port: port.to_string_lossy().into_owned(),
            timeout: Duration::from_millis(crate::base::limits::RPC_TIMEOUT_MS),
        }
    }

    /// The node's fw_cfg tree and port inside `root`.
    pub fn in_root(root: &Path) -> Self {
        FwCfgTransport {
            by_name: SeedDir::new(root, DEFAULT_BY_NAME),
            port_root: root.to_path_buf(),
            status_port: DEFAULT_STATUS_PORT.to_string(),
            timeout: Duration::from_millis(crate::base::limits::RPC_TIMEOUT_MS),
        }
    }

    /// The port's host path, for messages.
    fn port_path(&self) -> PathBuf {
        self.port_root
            .join(self.status_port.trim_start_matches('/'))
    }
}

impl Default for FwCfgTransport {
    fn default() -> Self {
        Self::in_root(Path::new("/"))
    }
}

/// The JSON line `set(key, value)` sends: the status object itself for `nodeagent.status`
/// (re-serialised compactly, at most MAX_STATUS_BYTES), else `{"key":K,"value":V}`.
pub fn status_line(key: &str, value: &[u8]) -> Result<String> {
    let place = format!("guestinfo.{key}");
    let err = |m: String| Error::invalid(Stage::Report, place.clone(), m);
    let line = if key == STATUS_KEY {
        let v: serde_json::Value =
            serde_json::from_slice(value).map_err(|e| err(format!("status is not JSON: {e}")))?;
        let s = v.to_string();
        if s.len() > crate::base::limits::MAX_STATUS_BYTES {
            return Err(err(format!(
                "status JSON is {} bytes, over MAX_STATUS_BYTES ({})",
                s.len(),
                crate::base::limits::MAX_STATUS_BYTES
            )));
        }
        s
    } else {
        let v = std::str::from_utf8(value).map_err(|e| {
            err(format!(
                "value is not UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ))
        })?;
        serde_json::json!({ "key": key, "value": v }).to_string()
    };
    Ok(line)
}

impl Transport for FwCfgTransport {
    fn name(&self) -> &'static str {
        "fwcfg"
    }

    /// fw_cfg has no seek: for a read at offset N the kernel driver reads and drops the
    /// entry's first N bytes through the I/O port again (`fw_cfg_read_blob`), and sysfs gives
    /// at most a page per read. A read to the end therefore costs a whole extra pass, and
    /// small first reads (`read_to_end` starts at 32 bytes) cost more passes. The entry's
    /// `size` file (the kernel's count, beside `raw`) says how much to ask for: a 13 KiB
    /// userdata takes 38k port reads instead of 55k (counted from the driver's code), each
    /// one a trap into QEMU.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        let entry = format!("opt/guestinfo.{key}");
        let place = format!("guestinfo.{key}");
        // A decimal count and a newline; anything longer is not the kernel's.
        let size = self
            .by_name
            .read_capped(&format!("{entry}/size"), 24, &place)
            .ok()
            .flatten()
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| s.trim().parse::<usize>().ok());
        let raw = format!("{entry}/raw");
        match size {
            Some(size) => self.by_name.read_sized(&raw, size, &place),
            None => self.by_name.read(&raw, &place),
        }
    }

    /// One line, one `write` where possible. The port is opened non-blocking so an absent
    /// host reader (FIFO without reader, unconnected port) fails within RPC_TIMEOUT_MS
    /// instead of hanging the agent.
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        check_key(key)?;
        let mut line = status_line(key, value)?.into_bytes();
        line.push(b'\n');
        write_nonblocking(&self.port_root, &self.status_port, &line, self.timeout).map_err(|e| {
            Error::io(
                Stage::Report,
                format!("guestinfo.{key}"),
                &format!("cannot write to {}", self.port_path().display()),
                e,
            )
        })
    }
}

/// `data` written to the port `rel` inside `root`, opened there as `confine::open_port` opens
/// it (no link followed out of the root).
fn write_nonblocking(
    root: &Path,
    rel: &str,
    data: &[u8],
    timeout: Duration,
) -> std::io::Result<()> {
    use std::io::ErrorKind;
    let deadline = Instant::now() + timeout;
    let mut f = loop {
        match crate::base::confine::open_port(root, rel) {
            Ok(f) => break f,
            // FIFO without a reader yet.
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => return Err(e),
        }
    };
    let mut rest = data;
    while !rest.is_empty() {
        match f.write(rest) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                return Err(std::io::Error::new(
                    ErrorKind::TimedOut,
                    "timed out: nobody is reading the port",
                ));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
