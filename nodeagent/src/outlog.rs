//! `/var/log/nodeagent-output.log`: every command's and kubeadm's output in one file, where
//! operators look first (the counterpart of `/var/log/cloud-init-output.log`). Lines arrive
//! redacted (`redact::redact_text`) and are prefixed with the step. Bounded: past
//! [`MAX_BYTES`] the file is rotated to `.1` (the older `.1` is dropped), so it never
//! fills `/var/log`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub const PATH: &str = "var/log/nodeagent-output.log";
/// Size at which the log is rotated (one rotated copy is kept: at most twice this on disk).
pub const MAX_BYTES: u64 = crate::limits::OUTPUT_LOG_MAX_BYTES;

pub fn path(root: &Path) -> PathBuf {
    root.join(PATH)
}

/// Append `lines` (already redacted) of `step`, rotating first when the log is full.
/// Failures are logged, never fatal: the journal has the same lines.
pub fn append(root: &Path, step: &str, lines: &[&str]) {
    if lines.is_empty() {
        return;
    }
    if let Err(e) = try_append(root, step, lines) {
        tracing::warn!("{} not written: {e}", path(root).display());
    }
}

fn try_append(root: &Path, step: &str, lines: &[&str]) -> std::io::Result<()> {
    // Resolved inside the root like the agent's other files: a `var/log` link in the image
    // cannot send the log (or its rotation) outside it.
    let p = crate::confine::file(root, PATH)?;
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut text = String::new();
    for l in lines {
        text.push_str(&format!("[{step}] {l}\n"));
    }
    // Rotate before writing: a symlink is never followed (O_NOFOLLOW) nor rotated into place.
    if let Ok(md) = std::fs::symlink_metadata(&p)
        && md.len() + text.len() as u64 > MAX_BYTES
    {
        let mut rotated = p.clone().into_os_string();
        rotated.push(".1");
        std::fs::rename(&p, rotated)?;
    }
    open_append(&p)?.write_all(text.as_bytes())
}

/// Open a log file of the agent's (this one, kubeadm.log, events.jsonl) to append to:
/// created 0640, never through a symlink at the file itself, never blocking on a FIFO put
/// there, and only a regular file with one link (a hard link planted at the path would make
/// the agent write into another file).
pub fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let m = f.metadata()?;
    if !m.is_file() || std::os::unix::fs::MetadataExt::nlink(&m) != 1 {
        return Err(std::io::Error::other(format!(
            "{}: not a regular file with one link; not written",
            path.display()
        )));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_with_step_and_rotates_when_full() {
        let d = tempfile::tempdir().unwrap();
        append(d.path(), "runcmd[0]", &["hello", "token: <redacted>"]);
        let text = std::fs::read_to_string(path(d.path())).unwrap();
        assert_eq!(text, "[runcmd[0]] hello\n[runcmd[0]] token: <redacted>\n");
        let big = "x".repeat(MAX_BYTES as usize / 2);
        append(d.path(), "a", &[&big]);
        append(d.path(), "b", &[&big]);
        let rotated = std::fs::read_to_string(d.path().join(format!("{PATH}.1"))).unwrap();
        assert!(
            rotated.starts_with("[runcmd[0]] hello\n"),
            "rotated copy keeps the old lines"
        );
        let now = std::fs::read_to_string(path(d.path())).unwrap();
        assert!(
            now.starts_with("[b] x"),
            "the new file starts after rotation"
        );
        assert!(std::fs::metadata(path(d.path())).unwrap().len() <= MAX_BYTES);
    }
}
