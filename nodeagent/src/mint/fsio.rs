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

/// Write many files atomically at once, with `write_atomic`'s guarantees for each: every
/// temp file is created with its mode in the target directory and written; the temp files are
/// fsynced in parallel (so the filesystem can commit them together instead of one journal
/// commit per file), renamed into place, and each distinct directory is fsynced. On error the
/// temp files are removed and no target has been replaced unless all data was durable.
/// `durable: false` skips both fsync rounds (still atomic: create-with-mode, write, rename)
/// for regenerable output without private keys, such as worker bundle fleets.
pub fn write_batch(files: &[(std::path::PathBuf, Vec<u8>, u32)], durable: bool) -> Result<()> {
    let mut staged: Vec<(std::path::PathBuf, File, &Path)> = Vec::with_capacity(files.len());
    let cleanup = |staged: &[(std::path::PathBuf, File, &Path)]| {
        for (tmp, _, _) in staged {
            let _ = fs::remove_file(tmp);
        }
    };
    // Files come grouped by directory: create each directory once.
    let mut made_dirs: Vec<&Path> = Vec::new();
    for (path, bytes, mode) in files {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".{name}.batch.tmp"));
        let made = if made_dirs.last() == Some(&dir) {
            Ok(())
        } else {
            mkdir_p(dir)
        };
        made_dirs.push(dir);
        let written = made.and_then(|()| {
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
            Ok(f)
        });
        match written {
            Ok(f) => staged.push((tmp, f, path.as_path())),
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                cleanup(&staged);
                return Err(e);
            }
        }
    }
    let synced = if !durable {
        Ok(())
    } else {
        parallel(&staged, |(tmp, f, _)| {
            f.sync_all().map_err(|e| io_err(tmp, "fsync", e))
        })
    };
    if let Err(e) = synced {
        cleanup(&staged);
        return Err(e);
    }
    let mut dirs: Vec<&Path> = Vec::new();
    for (tmp, _, path) in &staged {
        fs::rename(tmp, path).map_err(|e| io_err(path, "rename", e))?;
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    if !durable {
        return Ok(());
    }
    parallel(&dirs, |d| {
        File::open(d)
            .and_then(|f| f.sync_all())
            .map_err(|e| io_err(d, "fsync directory", e))
    })
}

/// Run `f` over `items` on up to 32 threads; the first error wins.
fn parallel<T: Sync>(items: &[T], f: impl Fn(&T) -> Result<()> + Sync) -> Result<()> {
    let threads = items.len().clamp(1, 32);
    let chunk = items.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|c| s.spawn(|| c.iter().try_for_each(&f)))
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err(Error::new(Stage::Mint, "write", "writer thread panicked")))
        })
    })
}
