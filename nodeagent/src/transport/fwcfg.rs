//! Transport fwcfg.
//!
//! QEMU: values come from fw_cfg files (`-fw_cfg name=opt/guestinfo.K,file=...`), exposed
//! by the `qemu_fw_cfg` driver as `/sys/firmware/qemu_fw_cfg/by_name/opt/guestinfo.K/raw`.
//! fw_cfg is read-only, so values we publish go out as one compact JSON line each on the
//! virtio-serial port `org.nodeagent.status` (docs/formats.md N.3, N.4).

use super::{Transport, check_key, read_file_capped, read_file_sized};
use crate::error::{Error, Result, Stage};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub const DEFAULT_BY_NAME: &str = "/sys/firmware/qemu_fw_cfg/by_name";
pub const DEFAULT_STATUS_PORT: &str = "/dev/virtio-ports/org.nodeagent.status";
/// The key whose value is the status JSON itself (docs/formats.md N.4).
pub const STATUS_KEY: &str = "nodeagent.status";

#[derive(Debug, Clone)]
pub struct FwCfgTransport {
    /// The `by_name` directory of the qemu_fw_cfg sysfs tree.
    pub by_name: PathBuf,
    /// The virtio-serial port (a FIFO or plain file in tests).
    pub status_port: PathBuf,
    /// How long `set` waits for the host side to read before giving up.
    pub timeout: Duration,
}

impl FwCfgTransport {
    pub fn new(by_name: impl Into<PathBuf>, status_port: impl Into<PathBuf>) -> Self {
        FwCfgTransport {
            by_name: by_name.into(),
            status_port: status_port.into(),
            timeout: Duration::from_millis(crate::limits::RPC_TIMEOUT_MS),
        }
    }
}

impl Default for FwCfgTransport {
    fn default() -> Self {
        Self::new(DEFAULT_BY_NAME, DEFAULT_STATUS_PORT)
    }
}

/// The JSON line `set(key, value)` sends: the status object itself for `nodeagent.status`
/// (re-serialised compactly, at most MAX_STATUS_BYTES), else `{"key":K,"value":V}`.
pub fn status_line(key: &str, value: &[u8]) -> Result<String> {
    let place = format!("guestinfo.{key}");
    let err = |m: String| Error::new(Stage::Report, place.clone(), m);
    let line = if key == STATUS_KEY {
        let v: serde_json::Value =
            serde_json::from_slice(value).map_err(|e| err(format!("status is not JSON: {e}")))?;
        let s = v.to_string();
        if s.len() > crate::limits::MAX_STATUS_BYTES {
            return Err(err(format!(
                "status JSON is {} bytes, over MAX_STATUS_BYTES ({})",
                s.len(),
                crate::limits::MAX_STATUS_BYTES
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
        let entry = self.by_name.join(format!("opt/guestinfo.{key}"));
        let place = format!("guestinfo.{key}");
        // A decimal count and a newline; anything longer is not the kernel's.
        let size = crate::fsio::read_capped(&entry.join("size"), 24)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| s.trim().parse::<usize>().ok());
        match size {
            Some(size) => read_file_sized(&entry.join("raw"), size, &place),
            None => read_file_capped(&entry.join("raw"), &place),
        }
    }

    /// One line, one `write` where possible. The port is opened non-blocking so an absent
    /// host reader (FIFO without reader, unconnected port) fails within RPC_TIMEOUT_MS
    /// instead of hanging the agent.
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        check_key(key)?;
        let mut line = status_line(key, value)?.into_bytes();
        line.push(b'\n');
        write_nonblocking(&self.status_port, &line, self.timeout).map_err(|e| {
            Error::io(
                Stage::Report,
                format!("guestinfo.{key}"),
                &format!("cannot write to {}", self.status_port.display()),
                e,
            )
        })
    }
}

fn write_nonblocking(
    path: &std::path::Path,
    data: &[u8],
    timeout: Duration,
) -> std::io::Result<()> {
    use std::io::ErrorKind;
    use std::os::unix::fs::OpenOptionsExt;
    let deadline = Instant::now() + timeout;
    let mut f = loop {
        match std::fs::OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
        {
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
