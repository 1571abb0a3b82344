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
//! Everything is done relative to the target's open directory ([`stage_in`]): a caller
//! under `--root` opens it with [`crate::base::confine::Dir`], inside the root by construction;
//! [`stage`], [`write_atomic`] and [`write_batch`] take host paths and open their parents as
//! the host resolves them.

use crate::base::confine::Dir;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Temp files a batch holds open until its commit ([`Staged::close_past`]).
pub const HELD_TEMPS: usize = 16;

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

/// For callers whose errors are `io::Error` (status and log writers): the same kind, the
/// operation and path kept in the message.
impl From<WriteError> for io::Error {
    fn from(e: WriteError) -> io::Error {
        io::Error::new(e.source.kind(), e)
    }
}

/// A temp file holding a file's final bytes, owner and mode, not yet in place. It and its
/// target are named relative to one open directory ([`Dir`]), so the temp file made, the
/// rename over the target and the directory synced are in the same directory, whatever a
/// link swapped into the path meanwhile.
#[derive(Debug)]
pub struct Staged {
    dir: Arc<Dir>,
    /// Open until [`Staged::close`]; the temp file is opened again to sync it at commit.
    file: Option<File>,
    /// Device and inode of the temp file: what is opened again must be the same file.
    id: (u64, u64),
    tmp: String,
    name: String,
    path: PathBuf,
    durable: bool,
    /// Another directory to sync at commit (one that holds newly made parents).
    also_sync: Option<Arc<Dir>>,
}

impl Staged {
    /// Whether [`commit`] syncs `dir` for this file (its directory, or the one it also syncs).
    pub fn syncs(&self, dir: &Arc<Dir>) -> bool {
        self.durable
            && (Arc::ptr_eq(&self.dir, dir)
                || self.also_sync.as_ref().is_some_and(|d| Arc::ptr_eq(d, dir)))
    }

    /// The target path this temp file will replace.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sync `dir` too when committing (it holds a directory made for this file).
    pub fn also_sync(&mut self, dir: Option<Arc<Dir>>) {
        if self.durable {
            self.also_sync = dir;
        }
    }

    /// Close the temp file now (its data written out in the background), for a writer of
    /// many files that must not hold a descriptor for each until the commit.
    pub fn close(&mut self) {
        if let Some(f) = self.file.take() {
            start_writeback(std::iter::once(&f));
        }
    }

    /// [`close`](Self::close) when it is the batch's file number `nth` (from 0) and that is
    /// past [`HELD_TEMPS`]: a batch keeps its first files open and syncs them through their
    /// descriptors (a CABPK set of ten opened each again to sync it), the rest one at a time.
    pub fn close_past(&mut self, nth: usize) {
        if nth >= HELD_TEMPS {
            self.close();
        }
    }

    /// `fsync` of the temp file: through the descriptor still open, or one opened again
    /// (`O_NOFOLLOW`, relative to the directory) and checked to be the same file.
    fn sync(&self) -> io::Result<()> {
        if let Some(f) = &self.file {
            return f.sync_all();
        }
        let f = self.dir.open_file(&self.tmp)?;
        let md = f.metadata()?;
        if (md.dev(), md.ino()) != self.id {
            return Err(io::Error::other("the temp file was replaced"));
        }
        f.sync_all()
    }
}

fn parent(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The temp file's name for the target `name`.
fn temp_name(name: &str, shared: bool) -> String {
    if shared {
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!(".{name}.{TEMP_MARK}.{}-{seq}", std::process::id())
    } else {
        format!(".{name}.{TEMP_MARK}")
    }
}

/// Create the temp file for the host path `path` with its final owner and mode and write
/// `data` to it: [`stage_in`] its parent directory, opened as the host resolves it.
pub fn stage(path: &Path, data: &[u8], opts: &Options) -> WriteResult<Staged> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| WriteError::new("temp file", path, io::ErrorKind::InvalidInput.into()))?;
    let dir = Dir::host(parent(path)).map_err(|e| WriteError::new("open directory", path, e))?;
    stage_in(&Arc::new(dir), &name, data, opts)
}

/// [`stage`], through the directory descriptor of `prev` when `path` is in the same
/// directory: the files of one directory written one after another open it once.
pub fn stage_beside(
    prev: Option<&Staged>,
    path: &Path,
    data: &[u8],
    opts: &Options,
) -> WriteResult<Staged> {
    let shared = prev.filter(|s| s.dir.path() == parent(path));
    match (shared, path.file_name()) {
        (Some(s), Some(name)) => stage_in(&s.dir, &name.to_string_lossy(), data, opts),
        _ => stage(path, data, opts),
    }
}

/// Create the temp file for the entry `name` of `dir` (`openat(O_CREAT | O_EXCL |
/// O_NOFOLLOW)`) with its final owner and mode and write `data` to it.
pub fn stage_in(dir: &Arc<Dir>, name: &str, data: &[u8], opts: &Options) -> WriteResult<Staged> {
    use nix::fcntl::OFlag;
    let path = dir.path().join(name);
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        let e = io::Error::new(io::ErrorKind::InvalidInput, "not a file name");
        return Err(WriteError::new("temp file", &path, e));
    }
    let tmp = temp_name(name, opts.shared);
    if !opts.shared {
        use nix::unistd::{UnlinkatFlags, unlinkat};
        match unlinkat(dir.as_ref(), tmp.as_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(nix::errno::Errno::ENOENT) => {}
            Err(e) => return Err(WriteError::new("stale temp file", &path, e.into())),
        }
    }
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mode = nix::sys::stat::Mode::from_bits_truncate(opts.mode & 0o777);
    let file = nix::fcntl::openat(dir.as_ref(), tmp.as_str(), flags, mode)
        .map(File::from)
        .map_err(|e| WriteError::new("create temp file", &path, e.into()))?;
    let md = file
        .metadata()
        .map_err(|e| WriteError::new("stat", &path, e))?;
    let staged = Staged {
        dir: dir.clone(),
        file: Some(file),
        id: (md.dev(), md.ino()),
        tmp,
        name: name.to_string(),
        path,
        durable: opts.durable,
        also_sync: None,
    };
    match fill(&staged, &md, data, opts) {
        Ok(()) => Ok(staged),
        Err(e) => {
            discard(vec![staged]);
            Err(e)
        }
    }
}

/// Owner, exact mode, then the bytes.
fn fill(s: &Staged, md: &std::fs::Metadata, data: &[u8], opts: &Options) -> WriteResult<()> {
    let err = |op| move |e| WriteError::new(op, &s.path, e);
    let Some(file) = &s.file else {
        return Err(err("write")(io::Error::other("closed")));
    };
    let mut chowned = false;
    if let Some((uid, gid)) = opts.owner
        && (md.uid() != uid || md.gid() != gid)
    {
        std::os::unix::fs::fchown(file, Some(uid), Some(gid)).map_err(err("chown"))?;
        chowned = true;
    }
    // The file was made now with the mode, narrowed by the umask only: set again where the
    // umask took bits, a set-id bit is asked (`openat` leaves those out), or a chown may have
    // cleared some.
    if chowned || md.mode() & 0o7777 != opts.mode & 0o7777 {
        file.set_permissions(std::fs::Permissions::from_mode(opts.mode & 0o7777))
            .map_err(err("chmod"))?;
    }
    (&*file).write_all(data).map_err(err("write"))
}

/// Put staged files in place: every durable file synced, then each renamed over its name in
/// its directory, then each directory synced once. On error the files not yet renamed are
/// removed; the ones renamed stay (each is whole).
pub fn commit(staged: Vec<Staged>) -> WriteResult<()> {
    let durable: Vec<&Staged> = staged.iter().filter(|s| s.durable).collect();
    start_writeback(durable.iter().filter_map(|s| s.file.as_ref()));
    if let Err(e) = durable
        .iter()
        .try_for_each(|s| s.sync().map_err(|e| WriteError::new("fsync", &s.path, e)))
    {
        discard(staged);
        return Err(e);
    }
    // Each directory to sync once: the same descriptor, or the same directory (device and
    // inode, looked up once per descriptor) reached by another.
    let mut dirs: Vec<(Arc<Dir>, PathBuf)> = Vec::new();
    let mut ids: Vec<(u64, u64)> = Vec::new();
    let mut rest = staged.into_iter();
    while let Some(s) = rest.next() {
        let d = s.dir.as_ref();
        if let Err(e) = nix::fcntl::renameat(d, s.tmp.as_str(), d, s.name.as_str()) {
            let path = s.path.clone();
            discard(std::iter::once(s).chain(rest).collect());
            return Err(WriteError::new("rename", &path, e.into()));
        }
        if !s.durable {
            continue;
        }
        for d in s.also_sync.iter().chain([&s.dir]) {
            if dirs.iter().any(|(x, _)| Arc::ptr_eq(x, d)) {
                continue;
            }
            match d.id() {
                Ok(id) if ids.contains(&id) => continue,
                Ok(id) => ids.push(id),
                Err(_) => {}
            }
            dirs.push((d.clone(), s.path.clone()));
        }
    }
    dirs.iter().try_for_each(|(d, path)| {
        d.sync()
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
    use nix::unistd::{UnlinkatFlags, unlinkat};
    for s in staged {
        let _ = unlinkat(s.dir.as_ref(), s.tmp.as_str(), UnlinkatFlags::NoRemoveDir);
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

/// Replace the entry `name` of `dir` with `data`: [`stage_in`], then [`commit`].
pub fn write_in(dir: &Arc<Dir>, name: &str, data: &[u8], opts: &Options) -> WriteResult<()> {
    commit(vec![stage_in(dir, name, data, opts)?])
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
    let mut staged: Vec<Staged> = Vec::new();
    for (path, data, opts) in files {
        match stage_beside(staged.last(), path, data, &opts) {
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
        let tmp = d.path().join(temp_name("f", false));
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

    /// Closed before the commit (a writer of many files), a temp file is opened again to be
    /// synced; one replaced meanwhile is refused, not synced and renamed.
    #[test]
    fn closed_temp_files_are_committed_and_a_replaced_one_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let dir = Arc::new(Dir::host(d.path()).unwrap());
        let mut staged: Vec<Staged> = (0..3)
            .map(|i| stage_in(&dir, &format!("f{i}"), b"x", &Options::new(0o640)).unwrap())
            .collect();
        staged.iter_mut().for_each(Staged::close);
        commit(staged).unwrap();
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 3);
        let mut s = stage_in(&dir, "g", b"x", &Options::new(0o640)).unwrap();
        s.close();
        let tmp = d.path().join(temp_name("g", false));
        // Kept linked elsewhere, so that the planted file cannot reuse its inode number.
        std::fs::hard_link(&tmp, d.path().join("kept")).unwrap();
        std::fs::remove_file(&tmp).unwrap();
        std::fs::write(&tmp, "planted").unwrap();
        assert!(commit(vec![s]).is_err());
        assert!(!d.path().join("g").exists());
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
