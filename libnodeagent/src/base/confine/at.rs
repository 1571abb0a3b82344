//! [`Dir`]: a directory inside the root opened by descriptor, and what is done relative to it
//! (`mkdirat`, `openat`, `fchmod`, `fchown`, `renameat`, `unlinkat`): confinement by
//! construction for the writers, where [`super::file`] and [`super::dir`] hand back a path
//! that is used after the check.

use super::{MAX_HOPS, at_flags};
use std::collections::VecDeque;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// An open directory inside the root, reached without a link leading out of it. What is made,
/// replaced, chmodded or chowned in it is named relative to this descriptor (`mkdirat`,
/// `openat(O_CREAT | O_EXCL | O_NOFOLLOW)`, `fchmod`, `fchown`, `renameat`): a component
/// swapped for a link after the directory was opened changes nothing the agent acts on. The
/// directories above it are root's; a directory a user owns is a [`UserDir`].
#[derive(Debug)]
pub struct Dir {
    pub(super) fd: std::os::fd::OwnedFd,
    /// The host path it was reached by: for messages only, never acted on.
    pub(super) path: PathBuf,
    /// Reached through a directory a user other than root can change (only [`Dir::reach`]
    /// finds out; the other constructors are for directories root controls): what is read
    /// in it is what that user may have put there (super::reach).
    pub(super) user_writable: bool,
}

impl std::os::fd::AsFd for Dir {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Dir {
    /// The host directory `path`, links followed as the host's own resolution follows them:
    /// for paths that are not under `--root` (`/run` on a node, an output directory the
    /// operator names, a path its caller resolved with [`file`]).
    pub fn host(path: &Path) -> io::Result<Dir> {
        let fd = nix::fcntl::open(path, dir_flags(), nix::sys::stat::Mode::empty())?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
            user_writable: false,
        })
    }

    /// The in-target directory `rel`, every link on the way resolved inside `root` (an
    /// absolute link restarts at the root, `..` stops there) in the call that opens it:
    /// `openat2(RESOLVE_IN_ROOT)`, or on kernels before 5.6 a walk of `openat(O_NOFOLLOW)`
    /// from the root's descriptor that reads each link itself ([`walk_at`]).
    pub fn open(root: &Path, rel: &str) -> io::Result<Dir> {
        let top = super::root_fd(root)?;
        let fd = match openat2_dir(&top, rel) {
            Some(r) => r?,
            None => match walk_at(top.as_fd(), rel)? {
                (fd, missing) if missing.is_empty() => fd,
                _ => return Err(io::Error::from(io::ErrorKind::NotFound)),
            },
        };
        Ok(Dir {
            fd,
            path: root.join(rel.trim_start_matches('/')),
            user_writable: false,
        })
    }

    /// [`Dir::open`], the missing directories made first as one unit: built under a temporary
    /// name in the deepest directory there (each `mkdirat`, then `fchown` and `fchmod`
    /// through its own descriptor), then renamed into place (`RENAME_NOREPLACE`), so a crash
    /// never leaves half a chain. Also returns the directory that got the chain, which the
    /// caller syncs before it depends on it.
    pub fn make(
        root: &Path,
        rel: &str,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> io::Result<(Dir, Option<Dir>)> {
        match Dir::open(root, rel) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            r => return r.map(|d| (d, None)),
        }
        let top = super::root_fd(root)?;
        let (at, missing) = walk_at(top.as_fd(), rel)?;
        let path = root.join(rel.trim_start_matches('/'));
        let Some(first) = missing.first() else {
            return Ok((Dir::at(at, path), None));
        };
        if missing.iter().any(|c| c == "..") {
            return Err(io::Error::other(
                "a link leads through `..` to a missing directory",
            ));
        }
        let tmp = format!(".{first}.nodeagent-tmpd");
        remove_tree(&at, tmp.as_ref())?;
        let mut cur = make_one(&at, &tmp, mode, uid, gid)?;
        for name in &missing[1..] {
            cur = make_one(&cur, name, mode, uid, gid)?;
        }
        use nix::fcntl::RenameFlags;
        nix::fcntl::renameat2(
            &at,
            tmp.as_str(),
            &at,
            first.as_str(),
            RenameFlags::RENAME_NOREPLACE,
        )?;
        let holder = Dir::at(
            at,
            path.ancestors()
                .nth(missing.len())
                .unwrap_or(root)
                .to_path_buf(),
        );
        Ok((Dir::at(cur, path), Some(holder)))
    }

    /// A directory root controls, opened as `fd`, reached by `path`.
    pub(super) fn at(fd: std::os::fd::OwnedFd, path: PathBuf) -> Dir {
        Dir {
            fd,
            path,
            user_writable: false,
        }
    }

    /// Whether a user other than root can change names in this directory or in one it was
    /// reached through ([`Dir::reach`]): a file read here may be a hard link that user made.
    pub fn user_writable(&self) -> bool {
        self.user_writable
    }

    /// The host path this directory was reached by (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Device and inode of the directory: which one it is, whatever path reached it.
    pub fn id(&self) -> io::Result<(u64, u64)> {
        let st = nix::sys::stat::fstat(&self.fd)?;
        Ok((st.st_dev, st.st_ino))
    }

    /// `fsync` of the directory: its entries made or renamed so far are durable.
    pub fn sync(&self) -> io::Result<()> {
        Ok(nix::unistd::fsync(&self.fd)?)
    }

    /// `lstat` of the entry `name` (a link is not followed); `None` if there is none.
    pub fn entry(&self, name: &str) -> io::Result<Option<nix::sys::stat::FileStat>> {
        use nix::fcntl::AtFlags;
        match nix::sys::stat::fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(nix::errno::Errno::ENOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The entry `name` opened read-only, never through a link (ELOOP), non-blocking (a FIFO
    /// cannot stall the reader); what it is, the caller learns by `fstat`.
    pub fn open_file(&self, name: &str) -> io::Result<std::fs::File> {
        use nix::fcntl::OFlag;
        let flags = at_flags() | OFlag::O_RDONLY | OFlag::O_NONBLOCK;
        let fd = nix::fcntl::openat(&self.fd, name, flags, nix::sys::stat::Mode::empty())?;
        Ok(std::fs::File::from(fd))
    }

    /// The subdirectory `name`, made with `mode` and owner if missing; never a link.
    pub fn subdir(&self, name: &str, mode: u32, uid: u32, gid: u32) -> io::Result<Dir> {
        let fd = make_one(&self.fd, name, mode, uid, gid)?;
        Ok(Dir {
            fd,
            path: self.path.join(name),
            user_writable: self.user_writable || uid != 0,
        })
    }

    /// The existing subdirectory `name`, not followed if it is a link.
    pub fn existing_subdir(&self, name: &str) -> io::Result<Dir> {
        use nix::fcntl::OFlag;
        let flags = at_flags() | OFlag::O_RDONLY | OFlag::O_DIRECTORY;
        let fd = nix::fcntl::openat(&self.fd, name, flags, nix::sys::stat::Mode::empty())?;
        let user_writable = self.user_writable || user_can_change(&fd)?;
        Ok(Dir {
            fd,
            path: self.path.join(name),
            user_writable,
        })
    }

    /// Remove the entry `name`, a directory with all it holds (never through a link); none
    /// there is not an error.
    pub fn remove_tree(&self, name: &str) -> io::Result<()> {
        remove_tree(&self.fd, name.as_ref())
    }

    /// Exactly `mode` on the directory itself, through its descriptor.
    pub fn set_mode(&self, mode: u32) -> io::Result<()> {
        Ok(nix::sys::stat::fchmod(
            &self.fd,
            nix::sys::stat::Mode::from_bits_truncate(mode),
        )?)
    }

    /// The names in the directory (not `.` and `..`; a name that is not UTF-8 is left out).
    pub fn names(&self) -> io::Result<Vec<String>> {
        let mut list = nix::dir::Dir::from_fd(self.fd.try_clone()?)?;
        let names = list
            .iter()
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
            .filter(|n| n != "." && n != "..");
        Ok(names.collect())
    }

    /// The target of the link `name`.
    pub fn read_link(&self, name: &str) -> io::Result<std::ffi::OsString> {
        Ok(nix::fcntl::readlinkat(&self.fd, name)?)
    }

    /// A new link `name` to `target`, owned by uid/gid (the link itself).
    pub fn symlink(
        &self,
        target: &std::ffi::OsStr,
        name: &str,
        uid: u32,
        gid: u32,
    ) -> io::Result<()> {
        use nix::unistd::{Gid, Uid};
        nix::unistd::symlinkat(target, &self.fd, name)?;
        let (u, g) = (Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)));
        let flags = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
        Ok(nix::unistd::fchownat(&self.fd, name, u, g, flags)?)
    }

    /// The regular file `name` opened for appending, never through a link (ELOOP), never a
    /// FIFO or device and never a file with a second hard link (refused); made with exactly `mode` and owner when missing. Returns it and
    /// whether it was made now. For the agent's log files.
    pub fn open_append(
        &self,
        name: &str,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> io::Result<(std::fs::File, bool)> {
        use nix::fcntl::OFlag;
        use nix::sys::stat::Mode;
        let flags = at_flags() | OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_NONBLOCK;
        // The file that is there is opened first (a log gets many lines, made once); only a
        // missing one is made, `O_EXCL`, and one made meanwhile by another is opened.
        let existing = || nix::fcntl::openat(&self.fd, name, flags, Mode::empty());
        let (fd, made) = match existing() {
            Ok(fd) => (fd, false),
            Err(nix::errno::Errno::ENOENT) => match nix::fcntl::openat(
                &self.fd,
                name,
                flags | OFlag::O_CREAT | OFlag::O_EXCL,
                Mode::from_bits_truncate(mode & 0o777),
            ) {
                Ok(fd) => (fd, true),
                Err(nix::errno::Errno::EEXIST) => (existing()?, false),
                Err(e) => return Err(e.into()),
            },
            Err(e) => return Err(e.into()),
        };
        let file = std::fs::File::from(fd);
        if made {
            std::os::unix::fs::fchown(&file, Some(uid), Some(gid))?;
            nix::sys::stat::fchmod(&file, Mode::from_bits_truncate(mode))?;
        } else {
            // A hard link planted at the name would have the agent append to another file.
            let m = file.metadata()?;
            if !m.is_file() || std::os::unix::fs::MetadataExt::nlink(&m) != 1 {
                return Err(io::Error::other("not a regular file with one link"));
            }
        }
        Ok((file, made))
    }

    /// Rename the entry `from` to `to` in this directory, replacing what `to` names (a link
    /// there is replaced, never followed).
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        Ok(nix::fcntl::renameat(&self.fd, from, &self.fd, to)?)
    }

    /// Make `name` a link to `target`, replacing whatever entry had that name (a link is made
    /// under a temporary name, then renamed over it): readers see the old entry or the new
    /// link, never none. A directory at `name` is refused (EISDIR), not replaced.
    pub fn replace_symlink(&self, target: &str, name: &str) -> io::Result<()> {
        if self.read_link(name).ok().is_some_and(|t| t == target) {
            return Ok(());
        }
        if self
            .entry(name)?
            .is_some_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
        {
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        }
        // fsio.rs's temp mark, so crash tests find a leftover link as they find temp files.
        let tmp = format!(".{name}.nodeagent-tmp-{}", std::process::id());
        self.remove_tree(&tmp)?;
        nix::unistd::symlinkat(target, &self.fd, tmp.as_str())?;
        self.rename(&tmp, name).inspect_err(|_| {
            let _ = self.remove_tree(&tmp);
        })
    }

    /// Move the entry `from` here to `to` in `dest`, unless `to` exists (EEXIST).
    pub fn rename_noreplace(&self, from: &str, dest: &Dir, to: &str) -> io::Result<()> {
        use nix::fcntl::RenameFlags;
        Ok(nix::fcntl::renameat2(
            &self.fd,
            from,
            &dest.fd,
            to,
            RenameFlags::RENAME_NOREPLACE,
        )?)
    }
}

/// How every directory is opened: read-only (to `fsync` and list it), no exec leak.
pub(super) fn dir_flags() -> nix::fcntl::OFlag {
    use nix::fcntl::OFlag;
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC
}

/// `rel` opened as a directory below `root`'s descriptor by the kernel, resolved inside it;
/// `None` where `openat2` is missing (ENOSYS). EAGAIN (a rename elsewhere raced a `..`) is
/// retried a few times, then left to the walk.
fn openat2_dir(root: &impl AsFd, rel: &str) -> Option<io::Result<std::os::fd::OwnedFd>> {
    use nix::fcntl::{OpenHow, ResolveFlag};
    let rel = match rel.trim_start_matches('/') {
        "" => ".",
        r => r,
    };
    for _ in 0..8 {
        let how = OpenHow::new()
            .flags(dir_flags())
            .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        match nix::fcntl::openat2(root, rel, how) {
            Err(nix::errno::Errno::ENOSYS) => return None,
            Err(nix::errno::Errno::EAGAIN) => continue,
            r => return Some(r.map_err(io::Error::from)),
        }
    }
    None
}

/// The walk of `rel` from the descriptor `root` in user space, each component opened
/// `O_PATH | O_NOFOLLOW` relative to its parent's descriptor: a link is read through the
/// descriptor that opened it and its target walked from the root (absolute) or from where it
/// is, `..` goes back to the parent's descriptor and never above `root`. So no path leaves the
/// root whatever is swapped meanwhile. Returns the deepest directory reached, opened
/// read-only, and the components left when one was missing (none: `rel` is that directory).
fn walk_at(
    root: std::os::fd::BorrowedFd<'_>,
    rel: &str,
) -> io::Result<(std::os::fd::OwnedFd, Vec<String>)> {
    use nix::fcntl::OFlag;
    let none = nix::sys::stat::Mode::empty();
    let mut stack = vec![root.try_clone_to_owned()?];
    let mut todo: VecDeque<String> = rel.split('/').map(str::to_string).collect();
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        let top = stack.last().ok_or_else(|| io::Error::other("empty walk"))?;
        if c == ".." {
            if stack.len() > 1 {
                stack.pop();
            }
            continue;
        }
        if c.is_empty() || c == "." {
            continue;
        }
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = match nix::fcntl::openat(top, c.as_str(), flags, none) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ENOENT) => {
                let rest = std::iter::once(c).chain(todo);
                let rest = rest.filter(|c| !c.is_empty() && c != ".").collect();
                return Ok((nix::fcntl::openat(top, ".", dir_flags(), none)?, rest));
            }
            Err(e) => return Err(e.into()),
        };
        match nix::sys::stat::fstat(&fd)?.st_mode & libc::S_IFMT {
            libc::S_IFDIR => stack.push(fd),
            libc::S_IFLNK => {
                hops += 1;
                if hops > MAX_HOPS {
                    return Err(io::Error::other("too many symlinks"));
                }
                let target = nix::fcntl::readlinkat(&fd, "")?;
                let target = target.to_string_lossy();
                if target.starts_with('/') {
                    stack.truncate(1);
                }
                for (i, tc) in target.split('/').enumerate() {
                    todo.insert(i, tc.to_string());
                }
            }
            _ => return Err(nix::errno::Errno::ENOTDIR.into()),
        }
    }
    let top = stack.last().ok_or_else(|| io::Error::other("empty walk"))?;
    Ok((nix::fcntl::openat(top, ".", dir_flags(), none)?, Vec::new()))
}

/// The new directory `name` in `parent` with exactly `mode` and owner, set through its own
/// descriptor (the chown before the chmod, which it would clear set-id bits of).
pub(super) fn make_one(
    parent: &impl std::os::fd::AsFd,
    name: &str,
    mode: u32,
    uid: u32,
    gid: u32,
) -> io::Result<std::os::fd::OwnedFd> {
    use nix::sys::stat::Mode;
    nix::sys::stat::mkdirat(parent, name, Mode::from_bits_truncate(mode & 0o777))?;
    let fd = nix::fcntl::openat(parent, name, dir_flags() | at_flags(), Mode::empty())?;
    std::os::unix::fs::fchown(&fd, Some(uid), Some(gid))?;
    nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(mode))?;
    Ok(fd)
}

/// Deepest tree [`remove_tree`] removes: what it removes is a leftover of the agent's own
/// (a temp chain), a few levels deep; a deeper one was made by someone else (in a home, its
/// owner), and is refused rather than walked with a descriptor per level.
const MAX_REMOVE_DEPTH: usize = 64;

/// Remove `name` in `dir` and, if it is a directory, all it holds, every name relative to its
/// directory's descriptor and none followed; a missing `name` is fine.
pub(super) fn remove_tree(dir: &impl std::os::fd::AsFd, name: &std::ffi::OsStr) -> io::Result<()> {
    remove_tree_at(dir, name, 0)
}

fn remove_tree_at(
    dir: &impl std::os::fd::AsFd,
    name: &std::ffi::OsStr,
    depth: usize,
) -> io::Result<()> {
    use nix::errno::Errno;
    if depth > MAX_REMOVE_DEPTH {
        return Err(io::Error::other(format!(
            "a directory tree more than {MAX_REMOVE_DEPTH} levels deep is in the way; not removed"
        )));
    }
    use nix::unistd::{UnlinkatFlags, unlinkat};
    use std::os::unix::ffi::OsStrExt;
    match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => return Ok(()),
        Err(Errno::EISDIR) => {}
        Err(e) => return Err(e.into()),
    }
    let fd = nix::fcntl::openat(
        dir,
        name,
        dir_flags() | at_flags(),
        nix::sys::stat::Mode::empty(),
    )?;
    let mut list = nix::dir::Dir::from_fd(fd.try_clone()?)?;
    let names: Vec<std::ffi::OsString> = list
        .iter()
        .filter_map(Result::ok)
        .map(|e| std::ffi::OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
        .filter(|n| n != "." && n != "..")
        .collect();
    drop(list);
    for n in names {
        remove_tree_at(&fd, &n, depth + 1)?;
    }
    Ok(unlinkat(dir, name, UnlinkatFlags::RemoveDir)?)
}

/// Whether a user other than root can add, remove or rename names in the directory `st`: it
/// is not root's, or it is writable by a group other than root's or by everyone without the
/// sticky bit (which keeps them from replacing names root made there, as in `/tmp`).
pub(super) fn writable_by_others(st: &nix::sys::stat::FileStat) -> bool {
    let m = st.st_mode;
    let sticky = m & libc::S_ISVTX != 0;
    st.st_uid != 0 || (!sticky && ((m & 0o020 != 0 && st.st_gid != 0) || m & 0o002 != 0))
}

/// [`writable_by_others`] of the open directory `fd`.
pub(super) fn user_can_change(fd: &impl AsFd) -> io::Result<bool> {
    Ok(writable_by_others(&nix::sys::stat::fstat(fd)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// The kernel's resolution and the fallback walk agree: links inside the root are
    /// followed, an absolute one restarts at the root, `..` stops there, a file on the way is
    /// ENOTDIR, and the walk says which components are missing.
    #[test]
    fn open_and_the_fallback_walk_stay_inside_the_root() {
        let d = crate::base::confine::test_root(
            &["real/x", "outside-name"],
            &[
                ("/real", "abs"),
                ("../../../../real", "up"),
                ("/nowhere/deep", "dangling"),
            ],
        );
        let r = d.path();
        std::fs::write(r.join("real/file"), "").unwrap();
        let id = |p: &Path| {
            let m = std::fs::metadata(p).unwrap();
            (m.dev(), m.ino())
        };
        for rel in ["abs/x", "/up/x", "real/../../../real/x"] {
            assert_eq!(
                Dir::open(r, rel).unwrap().id().unwrap(),
                id(&r.join("real/x")),
                "{rel}"
            );
            let (fd, missing) = walk_at(Dir::host(r).unwrap().fd.as_fd(), rel).unwrap();
            let st = nix::sys::stat::fstat(&fd).unwrap();
            assert_eq!((st.st_dev, st.st_ino), id(&r.join("real/x")), "{rel}");
            assert!(missing.is_empty());
        }
        let e = Dir::open(r, "real/file/x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR));
        assert!(Dir::open(r, "dangling").is_err());
        let (fd, missing) = walk_at(Dir::host(r).unwrap().fd.as_fd(), "dangling/more").unwrap();
        let st = nix::sys::stat::fstat(&fd).unwrap();
        assert_eq!((st.st_dev, st.st_ino), id(r));
        assert_eq!(missing, ["nowhere", "deep", "more"]);
    }

    /// A missing chain is made inside the root, with its mode and owner, as one rename; a
    /// dangling absolute link on the way leads to the root's own copy of its target.
    #[test]
    fn make_builds_the_missing_chain_inside_the_root() {
        let d = crate::base::confine::test_root(&["etc"], &[("/elsewhere", "etc/link")]);
        let r = d.path();
        let me = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        let (dir, holder) = Dir::make(r, "/etc/a/b/c", 0o750, me.0, me.1).unwrap();
        assert_eq!(
            holder.unwrap().id().unwrap(),
            Dir::open(r, "etc").unwrap().id().unwrap()
        );
        assert_eq!(
            dir.id().unwrap(),
            Dir::open(r, "etc/a/b/c").unwrap().id().unwrap()
        );
        for p in ["etc/a", "etc/a/b", "etc/a/b/c"] {
            assert_eq!(std::fs::metadata(r.join(p)).unwrap().mode() & 0o7777, 0o750);
        }
        let names: Vec<_> = std::fs::read_dir(r.join("etc"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "no temp left: {names:?}");
        let (_, holder) = Dir::make(r, "/etc/a/b/c", 0o750, me.0, me.1).unwrap();
        assert!(holder.is_none(), "nothing made the second time");
        Dir::make(r, "etc/link/x", 0o755, me.0, me.1).unwrap();
        assert!(r.join("elsewhere/x").is_dir());
        assert!(!Path::new("/elsewhere").exists());
    }

    /// A directory component swapped again and again with an absolute link to a directory
    /// outside the root: every open lands on the directory inside or on the root's copy of
    /// the link's target, never outside. The fallback walk is raced the same way.
    #[test]
    fn a_directory_swapped_for_a_link_is_never_left_by_open_or_the_walk() {
        use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
        use std::sync::atomic::{AtomicBool, Ordering};
        let t = tempfile::tempdir().unwrap();
        let (root, outside) = (t.path().join("r"), t.path().join("out"));
        std::fs::create_dir_all(root.join("a/sub")).unwrap();
        std::fs::create_dir_all(outside.join("sub")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let out_id = {
            let m = std::fs::metadata(outside.join("sub")).unwrap();
            (m.dev(), m.ino())
        };
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let swapper = {
            let (root, stop) = (root.clone(), stop.clone());
            std::thread::spawn(move || {
                let (a, link) = (root.join("a"), root.join("link"));
                while !stop.load(Ordering::Relaxed) {
                    renameat2(AT_FDCWD, &a, AT_FDCWD, &link, RenameFlags::RENAME_EXCHANGE).unwrap();
                }
            })
        };
        let (mut opened, mut missed) = (0, 0);
        let top = Dir::host(&root).unwrap();
        for i in 0..20_000 {
            let fd = if i % 2 == 0 {
                Dir::open(&root, "a/sub").map(|d| d.fd)
            } else {
                walk_at(top.fd.as_fd(), "a/sub").and_then(|(fd, m)| {
                    if m.is_empty() {
                        Ok(fd)
                    } else {
                        Err(io::ErrorKind::NotFound.into())
                    }
                })
            };
            match fd {
                Ok(fd) => {
                    let st = nix::sys::stat::fstat(&fd).unwrap();
                    assert_ne!((st.st_dev, st.st_ino), out_id, "left the root");
                    opened += 1;
                }
                Err(_) => missed += 1,
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        assert!(opened > 0 && missed > 0, "no race seen: {opened} {missed}");
    }

    #[test]
    fn remove_tree_removes_a_tree_and_never_follows_a_link() {
        let d = crate::base::confine::test_root(&["t/a/b", "keep"], &[]);
        let r = d.path();
        std::fs::write(r.join("keep/f"), "").unwrap();
        std::fs::write(r.join("t/a/b/f"), "").unwrap();
        std::os::unix::fs::symlink(r.join("keep"), r.join("t/a/l")).unwrap();
        let top = Dir::host(r).unwrap();
        top.remove_tree("t").unwrap();
        assert!(!r.join("t").exists());
        assert!(r.join("keep/f").exists());
        top.remove_tree("t").unwrap();
    }
}
