//! Atomic file output for minted material, through the project's one writer (`libnodeagent::base::fsio`): the
//! temp file is created with its final mode in the target directory, written, fsynced,
//! renamed over the target, and the directory fsynced, so a crash never leaves a
//! half-written key or a key with a wider mode.

use libnodeagent::base::error::{Error, Result, Stage};
use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

/// Create `dir` and its parents (mode 0755 for new ones).
pub fn mkdir_p(dir: &Path) -> Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|e| {
            Error::io(
                Stage::Mint,
                dir.display().to_string(),
                "create directory",
                e,
            )
        })
}

/// `path: op: cause`, the `WriteError` kept as the source.
fn write_err(e: libnodeagent::base::fsio::WriteError) -> Error {
    Error::caused(Stage::Mint, e.path.display().to_string(), e)
}

/// Write `bytes` to `path` atomically with `mode` (the project's writer, `libnodeagent::base::fsio`), creating
/// parent directories.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    mkdir_p(dir)?;
    libnodeagent::base::fsio::write_atomic(
        path,
        bytes,
        &libnodeagent::base::fsio::Options::new(mode),
    )
    .map_err(write_err)
}

/// Write many files atomically at once, with `write_atomic`'s guarantees for each, as one
/// `fsio` batch: every temp file is created with its mode and written, all are fsynced
/// (after their writeback was started together) before the first rename, and each distinct
/// directory is fsynced once. On error the temp files are removed and no target has been
/// replaced unless all data was durable.
/// `durable: false` skips both fsync rounds (still atomic: create-with-mode, write, rename)
/// for regenerable output without private keys, such as worker bundle fleets.
pub fn write_batch(files: &[(std::path::PathBuf, Vec<u8>, u32)], durable: bool) -> Result<()> {
    // Files come grouped by directory: create each directory once.
    let mut made_dir: Option<&Path> = None;
    for (path, ..) in files {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if made_dir != Some(dir) {
            mkdir_p(dir)?;
            made_dir = Some(dir);
        }
    }
    let batch = files.iter().map(|(path, bytes, mode)| {
        let opts = libnodeagent::base::fsio::Options::new(*mode);
        let opts = if durable { opts } else { opts.volatile() };
        (path.as_path(), bytes.as_slice(), opts)
    });
    libnodeagent::base::fsio::write_batch(batch).map_err(write_err)
}
