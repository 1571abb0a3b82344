//! The one way nodeagent replaces a file (state, status, write_files, minted keys, guestinfo
//! files, command exit statuses): the reader sees the old file or the new one, never a part,
//! and never a moment with a wider mode or another owner.
//!
//! Sequence: a temp file beside the target, created `O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC`
//! with the final mode (the umask can only narrow it), `fchown` to the final owner, `fchmod`
//! to the exact mode (after the chown, which clears set-id bits), all before the first byte;
//! write; for durable files `fsync`; `rename` over the target (a symlink there is replaced,
//! never followed); for durable files `fsync` of the directory. A batch ([`commit`]) syncs
//! all its files before the first rename and each directory once.
//!
//! The temp name is fixed (`.<name>.nodeagent-tmp`) for writers that hold the agent's run lock
//! or own the file, so a temp left by a killed run is removed by the next write of the same
//! file; writers that may run side by side (status publishers, guestinfo files) use a
//! per-process name ([`Options::shared`]).
//!
//! Paths are host paths: confining an in-target path to `--root` is [`crate::confine`]'s job.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Marks every temp file of this writer (crash tests look for leftovers by it).
pub const TEMP_MARK: &str = "nodeagent-tmp";

/// How one file is written.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Permission bits, set-id and sticky bits included.
    pub mode: u32,
    /// uid and gid from the first byte; `None`: the writer's own.
    pub owner: Option<(u32, u32)>,
    /// fsync the file before the rename and its directory after.
    pub durable: bool,
    /// A per-process temp name, for files other processes may write at the same time.
    pub shared: bool,
}

impl Options {
    /// Durable, the writer's owner, fixed temp name.
    pub fn new(mode: u32) -> Options {
        Options {
            mode,
            owner: None,
            durable: true,
            shared: false,
        }
    }

    pub fn owner(mut self, uid: u32, gid: u32) -> Options {
        self.owner = Some((uid, gid));
        self
    }

    /// Atomic but not synced: regenerable output, or files under tmpfs `/run`.
    pub fn volatile(mut self) -> Options {
        self.durable = false;
        self
    }

    pub fn shared(mut self) -> Options {
        self.shared = true;
        self
    }
}

/// A failed step of a write: what was done, to which file.
#[derive(Debug, thiserror::Error)]
#[error("{op}: {source}")]
pub struct WriteError {
    pub op: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

impl WriteError {
    fn new(op: &'static str, path: &Path, source: io::Error) -> WriteError {
        WriteError {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

pub type WriteResult<T> = std::result::Result<T, WriteError>;

/// A temp file holding a file's final bytes, owner and mode, not yet in place.
#[derive(Debug)]
pub struct Staged {
    file: File,
    tmp: PathBuf,
    path: PathBuf,
    durable: bool,
    /// Another directory to sync at commit (one that holds newly made parents).
    also_sync: Option<PathBuf>,
}

impl Staged {
    /// The target path this temp file will replace.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sync `dir` too when committing (it holds a directory made for this file).
    pub fn also_sync(&mut self, dir: Option<PathBuf>) {
        if self.durable {
            self.also_sync = dir;
        }
    }
}

fn parent(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The temp file's path for `path`.
fn temp_path(path: &Path, shared: bool) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?
        .to_string_lossy();
    let tmp = if shared {
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!(".{name}.{TEMP_MARK}.{}-{seq}", std::process::id())
    } else {
        format!(".{name}.{TEMP_MARK}")
    };
    Ok(parent(path).join(tmp))
}

/// Create the temp file for `path` with its final owner and mode and write `data` to it.
pub fn stage(path: &Path, data: &[u8], opts: &Options) -> WriteResult<Staged> {
    let tmp = temp_path(path, opts.shared).map_err(|e| WriteError::new("temp file", path, e))?;
    if !opts.shared {
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(WriteError::new("stale temp file", path, e)),
        }
    }
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(opts.mode & 0o777)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(|e| WriteError::new("create temp file", path, e))?;
    let staged = Staged {
        file,
        tmp,
        path: path.to_path_buf(),
        durable: opts.durable,
        also_sync: None,
    };
    match fill(&staged, data, opts) {
        Ok(()) => Ok(staged),
        Err(e) => {
            discard(vec![staged]);
            Err(e)
        }
    }
}

/// Owner, exact mode, then the bytes.
fn fill(s: &Staged, data: &[u8], opts: &Options) -> WriteResult<()> {
    let err = |op| move |e| WriteError::new(op, &s.path, e);
    if let Some((uid, gid)) = opts.owner {
        let md = s.file.metadata().map_err(err("stat"))?;
        if md.uid() != uid || md.gid() != gid {
            std::os::unix::fs::fchown(&s.file, Some(uid), Some(gid)).map_err(err("chown"))?;
        }
    }
    s.file
        .set_permissions(std::fs::Permissions::from_mode(opts.mode & 0o7777))
        .map_err(err("chmod"))?;
    (&s.file).write_all(data).map_err(err("write"))
}

/// Put staged files in place: every durable file synced, then each renamed over its path,
/// then each directory synced once. On error the files not yet renamed are removed; the ones
/// renamed stay (each is whole).
pub fn commit(staged: Vec<Staged>) -> WriteResult<()> {
    let durable: Vec<&Staged> = staged.iter().filter(|s| s.durable).collect();
    start_writeback(durable.iter().map(|s| &s.file));
    if let Err(e) = durable.iter().try_for_each(|s| {
        s.file
            .sync_all()
            .map_err(|e| WriteError::new("fsync", &s.path, e))
    }) {
        discard(staged);
        return Err(e);
    }
    let mut dirs: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut rest = staged.into_iter();
    while let Some(s) = rest.next() {
        if let Err(e) = std::fs::rename(&s.tmp, &s.path) {
            let path = s.path.clone();
            discard(std::iter::once(s).chain(rest).collect());
            return Err(WriteError::new("rename", &path, e));
        }
        if !s.durable {
            continue;
        }
        for d in s
            .also_sync
            .iter()
            .map(PathBuf::as_path)
            .chain([parent(&s.path)])
        {
            if !dirs.iter().any(|(x, _)| x == d) {
                dirs.push((d.to_path_buf(), s.path.clone()));
            }
        }
    }
    dirs.iter().try_for_each(|(d, path)| {
        File::open(d)
            .and_then(|f| f.sync_all())
            .map_err(|e| WriteError::new("fsync directory", path, e))
    })
}

/// Start writing every file's data out before the first `fsync`, so that the syncs that
/// follow, one after the other, wait for less (git's batch mode does the same): `mint pki`'s
/// eight files 3.3–4.2 ms with it, 4.0–4.8 ms without, 4.6–5.0 ms with a thread per file
/// (BENCHMARKS.md, "Minter"). A hint only: where `sync_file_range` is not supported, each
/// `fsync` still does the whole job.
fn start_writeback<'a>(files: impl Iterator<Item = &'a File>) {
    use std::os::fd::AsRawFd;
    for f in files {
        // SAFETY: a plain syscall on a descriptor we own; its result only tunes the timing.
        unsafe {
            libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
}

/// Drop staged files that will not be committed.
pub fn discard(staged: Vec<Staged>) {
    for s in staged {
        let _ = std::fs::remove_file(&s.tmp);
    }
}

/// The first `max + 1` bytes of `path`: more than `max` says it is over the limit, without
/// reading the rest (the file may be endless: a FIFO, /dev/zero).
pub fn read_capped(path: &Path, max: usize) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    File::open(path)?
        .take(max as u64 + 1)
        .read_to_end(&mut buf)?;
    Ok(buf)
}

/// At most `len` bytes of `path`, read into a buffer made for them and never past them: where
/// every read re-reads the file from its start (fw_cfg's `raw` files), a read to find the end
/// costs a whole extra pass.
pub fn read_prefix(path: &Path, len: usize) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::with_capacity(len);
    File::open(path)?.take(len as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

/// Replace `path` with `data` (see the module doc).
pub fn write_atomic(path: &Path, data: &[u8], opts: &Options) -> WriteResult<()> {
    commit(vec![stage(path, data, opts)?])
}

/// Replace several files as one batch ([`stage`] each, then [`commit`]): on an error while
/// staging, the files staged so far are dropped and no target has been touched.
pub fn write_batch<'a>(
    files: impl IntoIterator<Item = (&'a Path, &'a [u8], Options)>,
) -> WriteResult<()> {
    let mut staged = Vec::new();
    for (path, data, opts) in files {
        match stage(path, data, &opts) {
            Ok(s) => staged.push(s),
            Err(e) => {
                discard(staged);
                return Err(e);
            }
        }
    }
    commit(staged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode_of(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn writes_with_the_exact_mode_whatever_the_umask() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        write_atomic(&p, b"one", &Options::new(0o640)).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        assert_eq!(mode_of(&p), 0o640);
        // Replacing keeps no trace of the old file's mode, and no temp file remains.
        write_atomic(&p, b"two", &Options::new(0o600).volatile().shared()).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(mode_of(&p), 0o600);
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["f"]);
    }

    /// A file holding `orig` in `dir`, which a followed link would overwrite.
    fn victim(dir: &Path) -> PathBuf {
        let v = dir.join("victim");
        std::fs::write(&v, "orig").unwrap();
        v
    }

    #[test]
    fn a_symlink_at_the_target_is_replaced_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = victim(d.path());
        let p = d.path().join("link");
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        write_atomic(&p, b"new", &Options::new(0o600)).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "orig");
        assert!(std::fs::symlink_metadata(&p).unwrap().is_file());
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
    }

    #[test]
    fn a_symlink_planted_at_the_temp_name_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = victim(d.path());
        let p = d.path().join("f");
        let tmp = temp_path(&p, false).unwrap();
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        write_atomic(&p, b"new", &Options::new(0o600)).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "orig");
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert!(!tmp.exists() && std::fs::symlink_metadata(&tmp).is_err());
    }

    #[test]
    fn a_failed_batch_leaves_no_temp_file_and_no_target() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        let s = stage(&a, b"a", &Options::new(0o600)).unwrap();
        assert!(stage(&d.path().join("missing/b"), b"b", &Options::new(0o600)).is_err());
        discard(vec![s]);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_batch_puts_every_file_in_place() {
        let d = tempfile::tempdir().unwrap();
        let staged: Vec<Staged> = (0..5)
            .map(|i| {
                let p = d.path().join(format!("f{i}"));
                stage(&p, format!("{i}").as_bytes(), &Options::new(0o644)).unwrap()
            })
            .collect();
        commit(staged).unwrap();
        for i in 0..5 {
            let p = d.path().join(format!("f{i}"));
            assert_eq!(std::fs::read_to_string(&p).unwrap(), format!("{i}"));
            assert_eq!(mode_of(&p), 0o644);
        }
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 5);
    }
}
