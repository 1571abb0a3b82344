//! Atomic file output for minted material: the temp file is created with its final mode in
//! the target directory, written, fsynced, renamed over the target, and the directory fsynced,
//! so a crash never leaves a half-written key or a key with a wider mode.

use crate::error::{Error, Result, Stage};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

fn io_err(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::new(
        Stage::Mint,
        path.display().to_string(),
        format!("{what}: {e}"),
    )
}

/// Create `dir` and its parents (mode 0755 for new ones).
pub fn mkdir_p(dir: &Path) -> Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|e| io_err(dir, "create directory", e))
}

/// Write `bytes` to `path` atomically with `mode`, creating parent directories.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    mkdir_p(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut suffix = [0u8; 6];
    getrandom::fill(&mut suffix).map_err(|e| Error::new(Stage::Mint, "random", e.to_string()))?;
    let tmp = dir.join(format!(".{name}.{}.tmp", hex::encode(suffix)));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .map_err(|e| io_err(&tmp, "create", e))?;
        // The umask may have narrowed the mode; set it exactly before the first byte.
        f.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|e| io_err(&tmp, "chmod", e))?;
        f.write_all(bytes).map_err(|e| io_err(&tmp, "write", e))?;
        f.sync_all().map_err(|e| io_err(&tmp, "fsync", e))?;
        fs::rename(&tmp, path).map_err(|e| io_err(path, "rename", e))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err(dir, "fsync directory", e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Write many files atomically at once (fleet bundles): every temp file is created with its
/// mode and written, one `syncfs` makes the data durable, then each is renamed into place and
/// a second `syncfs` makes the renames durable. Same guarantees as `write_atomic` per file,
/// with two filesystem flushes instead of two per file.
pub fn write_batch(files: &[(std::path::PathBuf, Vec<u8>, u32)]) -> Result<()> {
    let mut staged: Vec<(std::path::PathBuf, &Path)> = Vec::with_capacity(files.len());
    let cleanup = |staged: &[(std::path::PathBuf, &Path)]| {
        for (tmp, _) in staged {
            let _ = fs::remove_file(tmp);
        }
    };
    let mut last: Option<File> = None;
    for (path, bytes, mode) in files {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if let Err(e) = mkdir_p(dir) {
            cleanup(&staged);
            return Err(e);
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".{name}.batch.tmp"));
        let written = (|| {
            let _ = fs::remove_file(&tmp);
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(*mode)
                .open(&tmp)
                .map_err(|e| io_err(&tmp, "create", e))?;
            f.set_permissions(fs::Permissions::from_mode(*mode))
                .map_err(|e| io_err(&tmp, "chmod", e))?;
            f.write_all(bytes).map_err(|e| io_err(&tmp, "write", e))?;
            Ok::<File, Error>(f)
        })();
        match written {
            Ok(f) => {
                last = Some(f);
                staged.push((tmp, path.as_path()));
            }
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                cleanup(&staged);
                return Err(e);
            }
        }
    }
    let Some(anchor) = last else { return Ok(()) };
    let syncfs = |f: &File, what: &str| -> Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: syncfs only reads the descriptor, which `f` keeps open.
        if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
            return Err(io_err(
                Path::new("."),
                what,
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    };
    if let Err(e) = syncfs(&anchor, "syncfs (data)") {
        cleanup(&staged);
        return Err(e);
    }
    for (tmp, path) in &staged {
        fs::rename(tmp, path).map_err(|e| io_err(path, "rename", e))?;
    }
    syncfs(&anchor, "syncfs (renames)")
}
