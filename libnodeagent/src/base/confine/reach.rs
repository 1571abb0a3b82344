//! [`Dir::reach`]: the one resolver for the directory of a file the agent writes, or reads in
//! order to write (`write_files` and its `append` base and `source`, the generated files),
//! wherever a user other than root may control part of the way: a home, its `~/.ssh` or
//! `~/.kube`, any directory such a user can write.
//!
//! The path is walked from the root's descriptor one component at a time, each opened
//! `O_PATH | O_NOFOLLOW` relative to its parent's descriptor and `fstat`ed (what was opened,
//! not a name looked up again). A symlink is followed only when root controls it: the link is
//! root's and it sits in a directory that no user other than root can change, nor any
//! directory on the way to it. So the image's own links (`/lib -> usr/lib`, `/bin`,
//! `/var/run -> /run`: root's, in root's 0755 directories) are followed as the node follows
//! them, inside the root; a link a user planted in their home, or any link below a
//! directory such a user can write, is never followed, whatever that user swaps at any
//! instant: the error names it. Missing directories are made as one unit with the file's
//! owner (cloud-init 23.1+ `ensure_dir` gives them to it), built under a temp name and renamed
//! into place. The directory reached says whether such a user could change it or a directory
//! above it ([`Dir::user_writable`]): a file read there must be a regular file with one link
//! (not a hard link to a file that user cannot read).

use super::MAX_HOPS;
use super::at::{Dir, dir_flags, make_one, remove_tree, user_can_change, writable_by_others};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// The error of a walk that met a symlink it does not follow: `shown` is the link's path in
/// the target. Callers tell it from other errors by [`is_untrusted_link`].
#[derive(Debug)]
struct UntrustedLink(String);

impl std::fmt::Display for UntrustedLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is a symlink in a directory a user other than root can change; not followed",
            self.0
        )
    }
}

impl std::error::Error for UntrustedLink {}

/// Whether `e` is a walk's refusal to follow a link a user other than root controls.
pub fn is_untrusted_link(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.downcast_ref::<UntrustedLink>().is_some())
}

/// Where a walk ended: the deepest directory there (opened read-only), the components still
/// missing below it, whether a user other than root can change it or a directory above it,
/// and its path in the target (for messages).
struct Walked {
    fd: OwnedFd,
    missing: Vec<String>,
    user_writable: bool,
    shown: String,
}

/// One directory of the walk: its descriptor (`O_PATH`), its name, and whether a user other
/// than root can change it or a directory above it.
struct Step {
    fd: OwnedFd,
    name: String,
    user_writable: bool,
}

fn shown(stack: &[Step], last: Option<&str>) -> String {
    let names = stack.iter().skip(1).map(|s| s.name.as_str()).chain(last);
    let p: Vec<&str> = names.collect();
    format!("/{}", p.join("/"))
}

/// The walk of `rel` from the root's descriptor `top` (see the module doc).
fn walk(top: &impl AsFd, rel: &str) -> io::Result<Walked> {
    use nix::fcntl::OFlag;
    let none = nix::sys::stat::Mode::empty();
    let mut stack = vec![Step {
        fd: top.as_fd().try_clone_to_owned()?,
        name: String::new(),
        user_writable: user_can_change(top)?,
    }];
    let mut todo: VecDeque<String> = rel.split('/').map(str::to_string).collect();
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        let cur = stack.last().ok_or_else(|| io::Error::other("empty walk"))?;
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
        let fd = match nix::fcntl::openat(&cur.fd, c.as_str(), flags, none) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ENOENT) => {
                let rest = std::iter::once(c).chain(todo);
                return Ok(Walked {
                    fd: nix::fcntl::openat(&cur.fd, ".", dir_flags(), none)?,
                    missing: rest.filter(|c| !c.is_empty() && c != ".").collect(),
                    user_writable: cur.user_writable,
                    shown: shown(&stack, None),
                });
            }
            Err(e) => return Err(e.into()),
        };
        let st = nix::sys::stat::fstat(&fd)?;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                let user_writable = cur.user_writable || writable_by_others(&st);
                stack.push(Step {
                    fd,
                    name: c,
                    user_writable,
                });
            }
            libc::S_IFLNK => {
                if cur.user_writable || st.st_uid != 0 {
                    let at = shown(&stack, Some(&c));
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        UntrustedLink(at),
                    ));
                }
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
            _ => {
                let at = shown(&stack, Some(&c));
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("{at} is not a directory in the target"),
                ));
            }
        }
    }
    let cur = stack.last().ok_or_else(|| io::Error::other("empty walk"))?;
    Ok(Walked {
        fd: nix::fcntl::openat(&cur.fd, ".", dir_flags(), none)?,
        missing: Vec::new(),
        user_writable: cur.user_writable,
        shown: shown(&stack, None),
    })
}

impl Dir {
    /// The in-target directory `rel`, or the deepest one there and the components missing
    /// below it; links followed only where root controls them (the module doc). An
    /// [`is_untrusted_link`] error names a link that was not followed.
    pub fn reach(root: &Path, rel: &str) -> io::Result<(Dir, Vec<String>)> {
        let top = super::root_fd(root)?;
        let w = walk(&top, rel)?;
        let path = root.join(w.shown.trim_start_matches('/'));
        Ok((
            Dir {
                fd: w.fd,
                path,
                user_writable: w.user_writable,
            },
            w.missing,
        ))
    }

    /// [`Dir::reach`], the missing directories made first with `mode` and owner, as one unit
    /// (built under a temporary name in the deepest directory there, each `mkdirat`, `fchown`
    /// and `fchmod` through its own descriptor, then renamed into place with
    /// `RENAME_NOREPLACE`: a crash never leaves half a chain). Also returns the directory
    /// that got the chain, which the caller syncs before it depends on it.
    pub fn reach_or_make(
        root: &Path,
        rel: &str,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> io::Result<(Dir, Option<Dir>)> {
        let (at, missing) = Dir::reach(root, rel)?;
        at.make_missing(&missing, mode, uid, gid)
    }

    /// The `missing` directories of a [`Dir::reach`] made below `self`, the directory it
    /// reached, as [`Dir::reach_or_make`] makes them.
    pub fn make_missing(
        self,
        missing: &[String],
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> io::Result<(Dir, Option<Dir>)> {
        let at = self;
        let Some(first) = missing.first() else {
            return Ok((at, None));
        };
        if missing.iter().any(|c| c == "..") {
            return Err(io::Error::other(
                "a link leads through `..` to a missing directory",
            ));
        }
        let tmp = format!(".{first}.nodeagent-tmpd");
        remove_tree(&at.fd, tmp.as_ref())?;
        let mut cur = make_one(&at.fd, &tmp, mode, uid, gid)?;
        for name in missing.iter().skip(1) {
            cur = make_one(&cur, name, mode, uid, gid)?;
        }
        nix::fcntl::renameat2(
            &at.fd,
            tmp.as_str(),
            &at.fd,
            first.as_str(),
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        )?;
        let made = Dir {
            fd: cur,
            path: at.path.join(missing.join("/")),
            user_writable: at.user_writable || uid != 0,
        };
        Ok((made, Some(at)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn id(p: &Path) -> (u64, u64) {
        let m = std::fs::metadata(p).unwrap();
        (m.dev(), m.ino())
    }

    fn chown(p: &Path, uid: u32) {
        std::os::unix::fs::lchown(p, Some(uid), Some(uid)).unwrap();
    }

    /// The image's links (root's, in root's directories) are followed inside the root,
    /// absolute and relative, and the walk says what is missing below the last directory.
    #[test]
    fn the_images_own_links_are_followed_inside_the_root() {
        let d = crate::base::confine::test_root(
            &["usr/lib/modules-load.d", "run"],
            &[("usr/lib", "lib"), ("/run", "var-run")],
        );
        let r = d.path();
        let (dir, missing) = Dir::reach(r, "/lib/modules-load.d").unwrap();
        assert_eq!(dir.id().unwrap(), id(&r.join("usr/lib/modules-load.d")));
        assert!(missing.is_empty());
        assert!(!dir.user_writable());
        let (dir, missing) = Dir::reach(r, "/var-run/kubeadm/x").unwrap();
        assert_eq!(dir.id().unwrap(), id(&r.join("run")));
        assert_eq!(missing, ["kubeadm", "x"]);
        let (made, holder) = Dir::reach_or_make(r, "/lib/new/deeper", 0o755, 0, 0).unwrap();
        assert_eq!(made.id().unwrap(), id(&r.join("usr/lib/new/deeper")));
        assert_eq!(holder.unwrap().id().unwrap(), id(&r.join("usr/lib")));
    }

    /// Not followed: a link that is not root's, and any link in (or below) a directory a user
    /// other than root can change, whoever owns the link; the error names the link.
    #[test]
    fn a_link_a_user_controls_is_never_followed() {
        let d = crate::base::confine::test_root(
            &["home/u/sub", "etc/kubernetes", "tmp", "var/local"],
            &[
                ("/etc/kubernetes", "home/u/.kube"),
                ("/etc", "home/u/sub/etc"),
                ("/etc", "etc-by-user"),
                ("/etc", "tmp/by-root"),
                ("/etc", "var/local/by-root"),
            ],
        );
        let r = d.path();
        chown(&r.join("home/u"), 1000);
        chown(&r.join("etc-by-user"), 1000);
        std::fs::set_permissions(r.join("tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
        std::fs::set_permissions(r.join("var/local"), std::fs::Permissions::from_mode(0o2775))
            .unwrap();
        std::os::unix::fs::chown(r.join("var/local"), Some(0), Some(50)).unwrap();
        for (rel, link) in [
            ("/home/u/.kube", "/home/u/.kube"),
            ("/home/u/sub/etc/x", "/home/u/sub/etc"),
            ("/etc-by-user", "/etc-by-user"),
            ("/var/local/by-root/x", "/var/local/by-root"),
        ] {
            let e = Dir::reach(r, rel).err().unwrap();
            assert!(is_untrusted_link(&e), "{rel}: {e}");
            assert_eq!(
                e.to_string(),
                format!(
                    "{link} is a symlink in a directory a user other than root can change; not followed"
                )
            );
            assert!(Dir::reach_or_make(r, &format!("{rel}/y"), 0o755, 0, 0).is_err());
        }
        assert!(!r.join("etc/kubernetes/y").exists() && !r.join("etc/y").exists());
        // Root's link in a sticky directory: others cannot replace it.
        let (dir, _) = Dir::reach(r, "/tmp/by-root").unwrap();
        assert_eq!(dir.id().unwrap(), id(&r.join("etc")));
        // The home itself and what is below it: reached, and marked.
        let (dir, _) = Dir::reach(r, "/home/u/sub").unwrap();
        assert!(dir.user_writable());
        let (dir, _) = Dir::reach(r, "/etc").unwrap();
        assert!(!dir.user_writable());
    }

    /// A missing chain gets the owner it is made with, and is marked as the user's.
    #[test]
    fn the_missing_chain_is_made_with_the_files_owner() {
        let d = crate::base::confine::test_root(&["home/u"], &[]);
        let r = d.path();
        chown(&r.join("home/u"), 1000);
        let (made, holder) =
            Dir::reach_or_make(r, "/home/u/.config/app", 0o755, 1000, 1000).unwrap();
        assert!(made.user_writable());
        assert_eq!(holder.unwrap().id().unwrap(), id(&r.join("home/u")));
        for p in ["home/u/.config", "home/u/.config/app"] {
            let m = std::fs::metadata(r.join(p)).unwrap();
            assert_eq!(
                (m.uid(), m.gid(), m.mode() & 0o7777),
                (1000, 1000, 0o755),
                "{p}"
            );
        }
        let names: Vec<_> = std::fs::read_dir(r.join("home/u")).unwrap().collect();
        assert_eq!(names.len(), 1, "no temp left");
    }
}
