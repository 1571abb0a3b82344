//! One symlink-safe root for every path the agent touches under `--root DIR`: its state,
//! status and event files as well as `write_files` targets.
//!
//! A path inside the target is resolved component by component against DIR, as a chroot
//! would: an absolute symlink (`/var/run -> /run`) restarts at DIR, `..` never climbs above
//! it, so a link planted in the image can only point somewhere else inside DIR. On the host
//! (`/`) paths are used as they are. For [`file`] and [`dir`] the checks and the use that
//! follows are separate system calls: this holds against links present in the image, not
//! against a process racing the agent inside the root. [`read`] has no such window: the
//! kernel resolves the path inside the root in the call that opens it (`openat2` with
//! `RESOLVE_IN_ROOT`), and neither has [`Dir`], through which the steps' writer
//! (apply/files.rs over fsio.rs), the home and sudoers.d steps make, write, chmod, chown and
//! rename relative to a descriptor. [`file`] and [`dir`] remain for the agent's own state,
//! status and log files (root's, 0700/0755) and for readers.

mod at;
mod reach;
pub use at::Dir;
pub use reach::is_untrusted_link;

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Most symlinks followed in one path (Linux's own limit).
pub(crate) const MAX_HOPS: usize = 40;

/// Directories already resolved by [`resolve`], `(root, in-target components) -> host path`.
/// The agent itself makes only directories and files under a root, never links, so a
/// resolution holds until another process runs: `process.rs` empties this ([`Forget`]) when
/// a child starts and again when it has ended. Saves a `statx` per component of every path
/// after the first (a CABPK apply resolved some 200 components, mostly `/etc` again).
static RESOLVED: Mutex<Option<HashMap<(PathBuf, String), PathBuf>>> = Mutex::new(None);

/// This process's effective uid and gid: the owner of what the agent makes for itself.
pub fn own_ids() -> (u32, u32) {
    (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    )
}

/// The agent's own in-root directory `rel`, made 0755 and owned by this process where it or
/// the directories above it are missing ([`Dir::make`]), opened.
pub fn own_dir(root: &Path, rel: &str) -> io::Result<Dir> {
    let (uid, gid) = own_ids();
    Ok(Dir::make(root, rel, 0o755, uid, gid)?.0)
}

/// The roots held open for a run ([`hold`]): path and descriptor. Every [`Dir`] and every
/// in-root read starts from the root's descriptor; a run opened it afresh for each (some
/// hundred `open` + `close` pairs in a CABPK apply).
static HELD: Mutex<Vec<(PathBuf, Arc<OwnedFd>)>> = Mutex::new(Vec::new());

/// A root held open by [`hold`] until this is dropped.
pub struct Held(Arc<OwnedFd>);

/// Open `root` once for the life of the returned guard: every path resolved inside it
/// meanwhile starts from this descriptor, not from the path opened again. The run acts on the
/// directory it opened at its start; a process renaming the root's path meanwhile cannot
/// redirect it. Links inside the root are resolved as before, at each use.
pub fn hold(root: &Path) -> io::Result<Held> {
    let fd = Arc::new(nix::fcntl::open(
        root,
        at::dir_flags(),
        nix::sys::stat::Mode::empty(),
    )?);
    if let Ok(mut held) = HELD.lock() {
        held.push((root.to_path_buf(), fd.clone()));
    }
    Ok(Held(fd))
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Ok(mut held) = HELD.lock() {
            held.retain(|(_, fd)| !Arc::ptr_eq(fd, &self.0));
        }
    }
}

/// The open directory `root`: the held descriptor, or one opened now.
pub(crate) enum RootFd {
    Held(Arc<OwnedFd>),
    Opened(OwnedFd),
}

impl AsFd for RootFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            RootFd::Held(fd) => fd.as_fd(),
            RootFd::Opened(fd) => fd.as_fd(),
        }
    }
}

pub(crate) fn root_fd(root: &Path) -> io::Result<RootFd> {
    let held = HELD
        .lock()
        .ok()
        .and_then(|h| h.iter().find(|(p, _)| p == root).map(|(_, fd)| fd.clone()));
    match held {
        Some(fd) => Ok(RootFd::Held(fd)),
        None => Ok(RootFd::Opened(nix::fcntl::open(
            root,
            at::dir_flags(),
            nix::sys::stat::Mode::empty(),
        )?)),
    }
}

/// Forget [`RESOLVED`] now and again when dropped: held across the life of a child process,
/// which may make or swap links inside a root.
pub struct Forget(());

impl Forget {
    pub fn now() -> Forget {
        forget();
        Forget(())
    }
}

impl Drop for Forget {
    fn drop(&mut self) {
        forget();
    }
}

fn forget() {
    if let Ok(mut m) = RESOLVED.lock() {
        *m = None;
    }
    EPOCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Counts [`forget`]s: what a caller keeps open or resolved inside a root holds only while
/// this is unchanged (no child process ran meanwhile).
static EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The current count of [`forget`]s ([`EPOCH`]).
pub fn epoch() -> u64 {
    EPOCH.load(std::sync::atomic::Ordering::Relaxed)
}

/// Host path of the in-target path `rel` (`/`-separated, leading `/` optional) for a file:
/// the parent directories are resolved inside `root`, the final component is returned
/// unresolved, for a writer that replaces or opens it without following it.
pub fn file(root: &Path, rel: &str) -> io::Result<PathBuf> {
    resolve(root, rel, false)
}

/// Host path of the in-target directory `rel`: every component resolved inside `root`.
pub fn dir(root: &Path, rel: &str) -> io::Result<PathBuf> {
    resolve(root, rel, true)
}

/// Metadata of the in-target path `rel`, every symlink on the way (the last one too) resolved
/// inside `root` by the kernel, as [`read`] opens: one `openat2(O_PATH)` and an `fstat`
/// instead of a `statx` for each component of each path (the plan probes some forty).
pub fn metadata(root: &Path, rel: &str) -> io::Result<std::fs::Metadata> {
    use nix::fcntl::OFlag;
    if root == Path::new("/") {
        return std::fs::metadata(Path::new("/").join(rel.trim_start_matches('/')));
    }
    match open_in_root(root, rel, OFlag::O_PATH | OFlag::O_CLOEXEC)? {
        Some(fd) => std::fs::File::from(fd).metadata(),
        None => std::fs::metadata(dir(root, rel)?),
    }
}

/// Contents of the in-target file `rel`, every symlink on the way (the last one too) resolved
/// inside `root` by the kernel in the same call that opens it (`openat2(2)` with
/// `RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS`), so a link swapped in after any check cannot lead
/// out of the root. Opened non-blocking: a FIFO planted there cannot stall the reader. Kernels
/// without openat2 (before 5.6, `ENOSYS`) fall back to the walk of [`dir`].
pub fn read(root: &Path, rel: &str) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    open_read(root, rel)?.read_to_end(&mut out)?;
    Ok(out)
}

/// The in-target file `rel` opened for reading as [`read`] opens it (for a reader that
/// bounds what it reads).
pub fn open_read(root: &Path, rel: &str) -> io::Result<std::fs::File> {
    use nix::fcntl::OFlag;
    let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK;
    match open_in_root(root, rel, flags)? {
        Some(fd) => Ok(std::fs::File::from(fd)),
        None => std::fs::File::open(dir(root, rel)?),
    }
}

/// The one reader of bootstrap data (seed files, `dir:` and fw_cfg values, the agent's own
/// state): the regular file `rel`, at most `max` bytes of it. Resolved inside `root` by the
/// kernel as [`read`] resolves it; what the name leads to is `fstat`ed through an `O_PATH`
/// descriptor before it is opened for reading, so a FIFO, device or socket there is refused
/// without being opened (no hang, no device side effect), and so is a file with another hard
/// link (its other name may be outside the root). The file opened is checked to be the one
/// examined. More than `max` bytes is refused (`FileTooLarge`) after reading `max + 1`.
pub fn read_bounded(root: &Path, rel: &str, max: usize) -> io::Result<Vec<u8>> {
    let (file, size) = open_regular(root, rel)?;
    // Room for the size it had (and the byte that tells a longer file): read in one call,
    // not in reads doubling from 32 bytes.
    let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(max).min(max) + 1);
    file.take(max as u64 + 1).read_to_end(&mut buf)?;
    if buf.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("more than {max} bytes"),
        ));
    }
    Ok(buf)
}

/// [`read_bounded`] of the first `len` bytes only, into a buffer made for them, never reading
/// past them: where each read restarts the file (fw_cfg's `raw`), a read to find the end costs
/// a whole extra pass.
pub fn read_prefix(root: &Path, rel: &str, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(len);
    open_regular(root, rel)?
        .0
        .take(len as u64)
        .read_to_end(&mut buf)?;
    Ok(buf)
}

/// `rel` opened for reading once it is known to be a regular file with one link (see
/// [`read_bounded`]), and its size when opened.
fn open_regular(root: &Path, rel: &str) -> io::Result<(std::fs::File, u64)> {
    use nix::fcntl::OFlag;
    let probe = match open_in_root(root, rel, OFlag::O_PATH | OFlag::O_CLOEXEC)? {
        Some(fd) => std::fs::File::from(fd),
        None => {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH)
                .open(dir(root, rel)?)?
        }
    };
    let seen = nix::sys::stat::fstat(&probe)?;
    refuse_unless_regular(&seen)?;
    let file = open_read(root, rel)?;
    let opened = nix::sys::stat::fstat(&file)?;
    if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino) {
        return Err(io::Error::other("replaced while it was opened"));
    }
    Ok((file, u64::try_from(opened.st_size).unwrap_or(0)))
}

/// The port `rel` (a virtio-serial device, a FIFO or file in tests) opened inside `root` for
/// appending, non-blocking (no reader yet is `ENXIO`, a full port `EAGAIN`, never a hang), every
/// link on the way resolved inside the root by the kernel.
pub fn open_port(root: &Path, rel: &str) -> io::Result<std::fs::File> {
    use nix::fcntl::OFlag;
    let flags =
        OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
    match open_in_root(root, rel, flags)? {
        Some(fd) => Ok(std::fs::File::from(fd)),
        None => {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .append(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
                .open(dir(root, rel)?)
        }
    }
}

/// `InvalidInput` unless the open `file` is a regular file with one link: for a writer that
/// opened a name itself (non-blocking, never through a final link) and must not append to a
/// FIFO, a device, or a file whose other name is outside the root. Its size when it is.
pub fn ensure_regular(file: &std::fs::File) -> io::Result<u64> {
    let st = nix::sys::stat::fstat(file)?;
    refuse_unless_regular(&st)?;
    Ok(u64::try_from(st.st_size).unwrap_or(0))
}

/// `InvalidInput` unless `st` is a regular file with one link.
fn refuse_unless_regular(st: &nix::sys::stat::FileStat) -> io::Result<()> {
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG if st.st_nlink <= 1 => return Ok(()),
        libc::S_IFREG => "a file with another hard link",
        libc::S_IFDIR => "a directory",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFCHR | libc::S_IFBLK => "a device",
        libc::S_IFSOCK => "a socket",
        _ => "not a regular file",
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{kind}, not a regular file: refused"),
    ))
}

/// Contents of the regular file `rel` as [`read`] reads it, except that a symlink as its last
/// component is refused (`O_NOFOLLOW`, ELOOP), on the host too: for what is copied into a
/// place others can read (the collect-logs archive), where a link in a log directory would
/// pull in whatever file it names.
pub fn read_regular_nofollow(root: &Path, rel: &str) -> io::Result<Vec<u8>> {
    use nix::fcntl::OFlag;
    let flags = OFlag::O_RDONLY
        | OFlag::O_CLOEXEC
        | OFlag::O_NOCTTY
        | OFlag::O_NONBLOCK
        | OFlag::O_NOFOLLOW;
    let f = match open_in_root(root, rel, flags)? {
        Some(fd) => std::fs::File::from(fd),
        None => {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
                .open(file(root, rel)?)?
        }
    };
    if !f.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let mut out = Vec::new();
    (&f).read_to_end(&mut out)?;
    Ok(out)
}

/// An open directory that a user other than root may own (a home, its `.ssh`): every name
/// in it is used relative to this descriptor, never followed if it is a link (`O_NOFOLLOW`,
/// `AT_SYMLINK_NOFOLLOW`), and what is opened is `fstat`ed, not the path checked before. The
/// owner may rename, swap (`renameat2(RENAME_EXCHANGE)`) or replace any name at any instant:
/// the agent still acts on the directory it opened, which the owner could write anyway, and
/// reads only a regular file with one link.
pub struct UserDir {
    fd: std::os::fd::OwnedFd,
}

/// A home opened inside the root by [`Dir`] (only root can change the names above it).
impl From<Dir> for UserDir {
    fn from(d: Dir) -> UserDir {
        UserDir { fd: d.fd }
    }
}

/// Flags of every open below: no link followed, no controlling tty, no exec leak.
pub(crate) fn at_flags() -> nix::fcntl::OFlag {
    use nix::fcntl::OFlag;
    OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NOCTTY
}

impl UserDir {
    /// The directory at `path` (a host path its caller resolved inside the root, whose
    /// parents only root can change). Its last component is followed only with `follow`
    /// (on the host, where a home may be a link the image made in a root-owned directory).
    pub fn open(path: &Path, follow: bool) -> io::Result<UserDir> {
        use nix::fcntl::OFlag;
        let mut flags = at_flags() | OFlag::O_DIRECTORY | OFlag::O_RDONLY;
        if follow {
            flags.remove(OFlag::O_NOFOLLOW);
        }
        let fd = nix::fcntl::open(path, flags, nix::sys::stat::Mode::empty())?;
        Ok(UserDir { fd })
    }

    /// The subdirectory `name`, made with `mode` if it is missing. `Err` (ELOOP, ENOTDIR)
    /// when `name` is a link or not a directory.
    pub fn subdir(&self, name: &str, mode: u32) -> io::Result<UserDir> {
        let m = nix::sys::stat::Mode::from_bits_truncate(mode);
        match nix::sys::stat::mkdirat(&self.fd, name, m) {
            Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
            Err(e) => return Err(e.into()),
        }
        self.open_subdir(name).map_err(io::Error::from)
    }

    /// The subdirectory `name` if it is there as a directory, not a link.
    pub fn existing_subdir(&self, name: &str) -> io::Result<Option<UserDir>> {
        match self.open_subdir(name) {
            Ok(d) => Ok(Some(d)),
            Err(nix::errno::Errno::ENOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// `openat(O_DIRECTORY | O_NOFOLLOW)`; a link is ELOOP (the kernel says ENOTDIR).
    fn open_subdir(&self, name: &str) -> nix::Result<UserDir> {
        use nix::fcntl::OFlag;
        let flags = at_flags() | OFlag::O_DIRECTORY | OFlag::O_RDONLY;
        match nix::fcntl::openat(&self.fd, name, flags, nix::sys::stat::Mode::empty()) {
            Ok(fd) => Ok(UserDir { fd }),
            Err(nix::errno::Errno::ENOTDIR) if self.is_link(name) => Err(nix::errno::Errno::ELOOP),
            Err(e) => Err(e),
        }
    }

    fn is_link(&self, name: &str) -> bool {
        nix::sys::stat::fstatat(&self.fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
            .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFLNK)
    }

    /// Owner and mode of the directory itself, through its descriptor.
    pub fn set_owner_mode(&self, uid: u32, gid: u32, mode: u32) -> io::Result<()> {
        std::os::unix::fs::fchown(&self.fd, Some(uid), Some(gid))?;
        nix::sys::stat::fchmod(&self.fd, nix::sys::stat::Mode::from_bits_truncate(mode))?;
        Ok(())
    }

    /// What the descriptor is (`fstat`): the directory opened, not the name looked up.
    pub fn stat(&self) -> io::Result<nix::sys::stat::FileStat> {
        Ok(nix::sys::stat::fstat(&self.fd)?)
    }

    /// Whether `name` exists (a link counts, and is not followed).
    pub fn has(&self, name: &str) -> bool {
        nix::sys::stat::fstatat(&self.fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).is_ok()
    }

    /// Contents of `name` if it is a regular file with a single link, at most `max` bytes:
    /// never a link, FIFO or device, nor a hard link the owner made to another file.
    pub fn read_regular(&self, name: &str, max: u64) -> io::Result<Option<Vec<u8>>> {
        use nix::fcntl::OFlag;
        let fd = match nix::fcntl::openat(
            &self.fd,
            name,
            at_flags() | OFlag::O_RDONLY | OFlag::O_NONBLOCK,
            nix::sys::stat::Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ELOOP) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let st = nix::sys::stat::fstat(&fd)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_nlink != 1 {
            return Ok(None);
        }
        // Room for its size and one byte more: one read, not reads doubling from 32 bytes.
        let room = u64::try_from(st.st_size).unwrap_or(max).min(max);
        let mut out = Vec::with_capacity(usize::try_from(room).unwrap_or(0) + 1);
        std::fs::File::from(fd).take(max).read_to_end(&mut out)?;
        Ok(Some(out))
    }

    /// A new file `name` (`O_CREAT | O_EXCL`, never through a link) with its final owner
    /// and mode before its first byte, synced. `Ok(false)`: `name` already exists.
    pub fn create_new(
        &self,
        name: &str,
        bytes: &[u8],
        uid: u32,
        gid: u32,
        mode: u32,
    ) -> io::Result<bool> {
        use nix::fcntl::OFlag;
        let fd = match nix::fcntl::openat(
            &self.fd,
            name,
            at_flags() | OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
            nix::sys::stat::Mode::from_bits_truncate(mode),
        ) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::EEXIST) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let mut f = std::fs::File::from(fd);
        std::os::unix::fs::fchown(&f, Some(uid), Some(gid))?;
        nix::sys::stat::fchmod(&f, nix::sys::stat::Mode::from_bits_truncate(mode))?;
        std::io::Write::write_all(&mut f, bytes)?;
        f.sync_all()?;
        Ok(true)
    }

    /// Replace `name` with `bytes` atomically: a temporary file made in this directory with
    /// its final owner and mode, written, synced, renamed over `name` (a link there is
    /// replaced, never followed), then the directory synced.
    pub fn replace(
        &self,
        name: &str,
        bytes: &[u8],
        uid: u32,
        gid: u32,
        mode: u32,
    ) -> io::Result<()> {
        let tmp = format!(".{name}.nodeagent-tmp");
        self.remove(&tmp);
        if !self.create_new(&tmp, bytes, uid, gid, mode)? {
            return Err(io::Error::other(format!("{tmp} is in the way")));
        }
        nix::fcntl::renameat(&self.fd, tmp.as_str(), &self.fd, name)?;
        nix::unistd::fsync(&self.fd)?;
        Ok(())
    }

    /// Move the entry `from` to `to` in this directory unless `to` exists
    /// (`RENAME_NOREPLACE`). `Ok(false)`: `to` was there.
    pub fn rename_noreplace(&self, from: &str, to: &str) -> io::Result<bool> {
        use nix::fcntl::RenameFlags;
        match nix::fcntl::renameat2(&self.fd, from, &self.fd, to, RenameFlags::RENAME_NOREPLACE) {
            Ok(()) => Ok(true),
            Err(nix::errno::Errno::EEXIST) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Remove the entry `name` (a file, a link, an empty directory) if it is there; a
    /// leftover of a run killed half-way. Errors are ignored: what cannot be removed makes
    /// the next step fail with its own error.
    pub fn remove(&self, name: &str) {
        use nix::unistd::UnlinkatFlags;
        if nix::unistd::unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir).is_err() {
            let _ = nix::unistd::unlinkat(&self.fd, name, UnlinkatFlags::RemoveDir);
        }
    }
}

/// `rel` opened with `flags`, resolved inside `root` by the kernel (on the host, as it is);
/// `None` on a kernel without `openat2`.
fn open_in_root(
    root: &Path,
    rel: &str,
    flags: nix::fcntl::OFlag,
) -> io::Result<Option<std::os::fd::OwnedFd>> {
    use nix::fcntl::{OpenHow, ResolveFlag};
    let rel = rel.trim_start_matches('/');
    let none = nix::sys::stat::Mode::empty();
    if root == Path::new("/") {
        return Ok(Some(nix::fcntl::open(
            &Path::new("/").join(rel),
            flags,
            none,
        )?));
    }
    let dirfd = root_fd(root)?;
    let how = OpenHow::new()
        .flags(flags)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    match nix::fcntl::openat2(&dirfd, rel, how) {
        Err(nix::errno::Errno::ENOSYS) => Ok(None),
        r => Ok(Some(r?)),
    }
}

fn resolve(root: &Path, rel: &str, follow_last: bool) -> io::Result<PathBuf> {
    if root == Path::new("/") {
        return Ok(Path::new("/").join(rel.trim_start_matches('/')));
    }
    let comps: Vec<&str> = rel
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let (last, parents) = match comps.split_last() {
        Some((last, parents)) if !follow_last => (Some(*last), parents),
        _ => (None, comps.as_slice()),
    };
    let key = (root.to_path_buf(), parents.join("/"));
    let known = RESOLVED
        .lock()
        .ok()
        .and_then(|m| m.as_ref().and_then(|m| m.get(&key).cloned()));
    let mut out = match known {
        Some(dir) => dir,
        None => {
            let dir = walk(root, parents)?;
            if let Ok(mut m) = RESOLVED.lock() {
                m.get_or_insert_with(HashMap::new).insert(key, dir.clone());
            }
            dir
        }
    };
    out.extend(last);
    Ok(out)
}

/// Host path of the in-target directory `parents`, each component resolved inside `root`.
fn walk(root: &Path, parents: &[&str]) -> io::Result<PathBuf> {
    let mut cur: Vec<String> = Vec::new();
    let mut todo: VecDeque<String> = parents.iter().map(|s| s.to_string()).collect();
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        if c == ".." {
            cur.pop();
            continue;
        }
        if c.is_empty() || c == "." {
            continue;
        }
        let p = root.join(cur.join("/")).join(&c);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_HOPS {
                    return Err(io::Error::other("too many symlinks"));
                }
                let t = std::fs::read_link(&p)?;
                let ts = t.to_string_lossy().into_owned();
                if ts.starts_with('/') {
                    cur.clear();
                }
                for (i, tc) in ts.split('/').filter(|s| !s.is_empty()).enumerate() {
                    todo.insert(i, tc.to_string());
                }
            }
            _ => cur.push(c),
        }
    }
    let mut out = root.to_path_buf();
    out.extend(cur);
    Ok(out)
}

/// A root for tests: a temporary directory holding `dirs` and the symlinks `links`
/// (target, link), both relative to it.
#[cfg(test)]
pub(crate) fn test_root(dirs: &[&str], links: &[(&str, &str)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for dir in dirs {
        std::fs::create_dir_all(d.path().join(dir)).unwrap();
    }
    for (target, link) in links {
        std::os::unix::fs::symlink(target, d.path().join(link)).unwrap();
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_a_child_process_made_is_followed_by_the_next_resolution() {
        let d = test_root(&["b"], &[]);
        let root = d.path();
        assert_eq!(file(root, "/a/x").unwrap(), root.join("a/x"));
        // The agent's own resolutions are remembered; a process may change the tree.
        let mut ln = std::process::Command::new("ln");
        ln.args(["-s", "/b"]).arg(root.join("a"));
        let limits = crate::base::process::Limits::new(std::time::Duration::from_secs(10));
        assert!(
            crate::base::process::run(ln, &limits, None)
                .unwrap()
                .status
                .success()
        );
        assert_eq!(file(root, "/a/x").unwrap(), root.join("b/x"));
        assert_eq!(dir(root, "/a").unwrap(), root.join("b"));
    }

    #[test]
    fn links_resolve_inside_the_root() {
        let d = test_root(
            &["real/x"],
            &[
                ("/real", "abs"),
                ("../../../../real", "up"),
                ("/etc/passwd", "real/x/last"),
            ],
        );
        let r = d.path();
        assert_eq!(file(r, "/abs/x/f").unwrap(), r.join("real/x/f"));
        assert_eq!(dir(r, "up/x").unwrap(), r.join("real/x"));
        // A file's final component stays as it is; a directory's is resolved in the root.
        assert_eq!(file(r, "/real/x/last").unwrap(), r.join("real/x/last"));
        assert_eq!(dir(r, "/real/x/last").unwrap(), r.join("etc/passwd"));
        assert_eq!(file(Path::new("/"), "run/x").unwrap(), Path::new("/run/x"));
    }

    #[test]
    fn metadata_follows_links_inside_the_root_only() {
        // `sbin/tool` points at the host's /etc/passwd: inside the root nothing is there.
        let d = test_root(&["usr/sbin", "sbin"], &[("/etc/passwd", "sbin/tool")]);
        let r = d.path();
        assert!(
            metadata(r, "/sbin/tool").is_err(),
            "followed out of the root"
        );
        std::fs::create_dir_all(r.join("etc")).unwrap();
        std::fs::write(r.join("etc/passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
        let m = metadata(r, "/sbin/tool").unwrap();
        assert!(m.is_file());
        assert_eq!(m.len(), 26, "the root's file, not the host's");
        assert!(metadata(r, "/usr/sbin").unwrap().is_dir());
        assert!(metadata(Path::new("/"), "/proc/self").unwrap().is_dir());
    }

    /// A link planted between check and use: another thread keeps swapping `a` between a
    /// directory inside the root and an absolute link to a directory outside it while `read`
    /// reads `a/f`. Every read sees the inside file or fails (the link resolves inside the
    /// root, where nothing is); none reads the outside one. Both states must have been seen,
    /// or the race did not happen and the test says nothing.
    #[test]
    fn a_link_swapped_in_while_reading_never_leads_out() {
        let d = tempfile::tempdir().unwrap();
        let (root, outside) = (d.path().join("r"), d.path().join("out"));
        for dir in [root.join("in"), outside.clone()] {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(root.join("in/f"), "inside").unwrap();
        std::fs::write(outside.join("f"), "outside").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        std::fs::rename(root.join("in"), root.join("a")).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (root, stop) = (root.clone(), stop.clone());
            std::thread::spawn(move || {
                // RENAME_EXCHANGE: `a` is always there, the directory or the link.
                use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
                let (a, link) = (root.join("a"), root.join("link"));
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    renameat2(AT_FDCWD, &a, AT_FDCWD, &link, RenameFlags::RENAME_EXCHANGE).unwrap();
                }
            })
        };
        let (mut inside, mut missed) = (0, 0);
        let t = std::time::Instant::now();
        while (inside == 0 || missed == 0) && t.elapsed() < std::time::Duration::from_secs(20)
            || inside + missed < 2000
        {
            match read(&root, "/a/f") {
                Ok(b) => {
                    assert_eq!(b, b"inside", "read a file outside the root");
                    inside += 1;
                }
                Err(_) => missed += 1,
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        swapper.join().unwrap();
        assert!(inside > 0 && missed > 0, "no race seen: {inside} {missed}");
    }

    /// A last-component link is refused, wherever it points (collect-logs copied the file a
    /// link in the log directory named into the archive); a regular file is read.
    #[test]
    fn read_regular_nofollow_refuses_a_final_link() {
        let d = test_root(&["var/log", "etc"], &[("/etc/shadow", "var/log/x.log")]);
        let r = d.path();
        std::fs::write(r.join("etc/shadow"), "root:$6$hash:::").unwrap();
        assert!(
            read(r, "var/log/x.log").is_ok(),
            "read follows links in the root"
        );
        let e = read_regular_nofollow(r, "var/log/x.log").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        std::fs::write(r.join("var/log/y.log"), "ok").unwrap();
        assert_eq!(read_regular_nofollow(r, "var/log/y.log").unwrap(), b"ok");
        assert!(read_regular_nofollow(r, "var/log").is_err(), "a directory");
    }

    /// What a user may plant in their own `.ssh`: a link or a hard link to a file they cannot
    /// read is never read, a link in place of `.ssh` is not entered, and replacing a name
    /// that is a link replaces the link, leaving its target alone.
    #[test]
    fn user_dir_never_follows_nor_reads_what_the_owner_planted() {
        let d = test_root(&["home/u/.ssh", "secret"], &[]);
        let (r, secret) = (d.path(), d.path().join("secret/f"));
        std::fs::write(&secret, "root only").unwrap();
        let ssh = r.join("home/u/.ssh");
        std::os::unix::fs::symlink(&secret, ssh.join("soft")).unwrap();
        std::fs::hard_link(&secret, ssh.join("hard")).unwrap();
        std::fs::write(ssh.join("mine"), "key").unwrap();
        std::os::unix::fs::symlink(r.join("secret"), r.join("home/u/.link")).unwrap();
        let home = UserDir::open(&r.join("home/u"), false).unwrap();
        let e = home.subdir(".link", 0o700).err().unwrap();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        assert!(home.existing_subdir(".link").is_err());
        let dir = home.subdir(".ssh", 0o700).unwrap();
        assert!(dir.stat().unwrap().st_mode & libc::S_IFMT == libc::S_IFDIR);
        assert_eq!(dir.read_regular("soft", 1024).unwrap(), None);
        assert_eq!(dir.read_regular("hard", 1024).unwrap(), None);
        assert_eq!(
            dir.read_regular("mine", 1024).unwrap(),
            Some(b"key".to_vec())
        );
        let me = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        dir.replace("soft", b"new", me.0, me.1, 0o600).unwrap();
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root only");
        assert!(
            std::fs::symlink_metadata(ssh.join("soft"))
                .unwrap()
                .is_file()
        );
        assert!(!dir.create_new("mine", b"x", me.0, me.1, 0o600).unwrap());
    }

    /// A held root is the directory opened when it was held: its path renamed and made again
    /// meanwhile, reads and directories still come from the one opened; released, the path
    /// is opened again.
    #[test]
    fn a_held_root_is_the_directory_opened_at_its_start() {
        let d = tempfile::tempdir().unwrap();
        let (root, old) = (d.path().join("r"), d.path().join("old"));
        std::fs::create_dir_all(root.join("etc")).unwrap();
        let held = hold(&root).unwrap();
        std::fs::rename(&root, &old).unwrap();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(old.join("etc/f"), "opened").unwrap();
        assert_eq!(read(&root, "etc/f").unwrap(), b"opened");
        let id = |p: &Path| {
            let m = std::fs::metadata(p).unwrap();
            (
                std::os::unix::fs::MetadataExt::dev(&m),
                std::os::unix::fs::MetadataExt::ino(&m),
            )
        };
        assert_eq!(
            Dir::open(&root, "/etc").unwrap().id().unwrap(),
            id(&old.join("etc"))
        );
        let (made, _) = Dir::reach_or_make(&root, "/etc/new", 0o755, 0, 0).unwrap();
        assert_eq!(made.id().unwrap(), id(&old.join("etc/new")));
        drop(held);
        assert!(
            read(&root, "etc/f").is_err(),
            "released: the path is opened again"
        );
        assert_eq!(
            Dir::open(&root, "/etc").unwrap().id().unwrap(),
            id(&root.join("etc"))
        );
    }

    #[test]
    fn a_symlink_loop_is_an_error() {
        let d = test_root(&[], &[("b", "a"), ("a", "b")]);
        let e = dir(d.path(), "a/x").unwrap_err();
        assert_eq!(e.to_string(), "too many symlinks");
    }
}
