//! Reads of the target the plan checks need (`planner::target`), done on the read side of a run
//! (`pipeline`), never by the plan itself: which tools and NTP clients the image has, and what
//! is at each path and device the plan names. A written path's directory is reached as apply
//! reaches it (`confine::Dir::reach`), so a symlink is followed inside the root where apply
//! follows it, and refused where apply would refuse it. Nothing here writes.

use crate::apply::Target;
use crate::plan::planner::target::{Observed, PathState, TargetView, Wanted};
use std::collections::HashMap;
use std::path::Path;

/// The agent's own PATH, or root's default when it has none.
fn host_path() -> std::ffi::OsString {
    std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into())
}

/// What the plan needs to know about the target: its NTP clients and its root's length.
pub fn view(root: &Path) -> TargetView {
    let t = Target::new(root);
    let (chrony, timesyncd) = crate::apply::ntp::installed(&t);
    TargetView {
        probed: true,
        chrony,
        timesyncd,
        root_len: if t.is_host() {
            0
        } else {
            t.root.as_os_str().len()
        },
    }
}

/// The state of one in-target path: its last component unresolved (apply replaces a symlink
/// there, never follows it), its parents reached as apply reaches them
/// (`confine::Dir::reach`: the image's own links followed inside the root, a link a user
/// other than root controls not followed).
pub fn path_state(t: &Target, abs: &str) -> PathState {
    path_state_seen(t, abs, &mut HashMap::new())
}

/// What a parent directory was found to be, when it is not there to look in: kept for the
/// next path in it (the files of one new directory share it). A directory that is there is
/// reached again for each path (a few `openat`s): holding one descriptor per directory
/// would run out of them on a plan of thousands of files.
#[derive(Clone)]
enum Parent {
    Missing,
    Blocked(String),
}

fn path_state_seen(t: &Target, abs: &str, seen: &mut HashMap<String, Parent>) -> PathState {
    if let Err(e) = Target::check(abs) {
        return PathState::Blocked(e.detail());
    }
    let Some((parent, name)) = abs.rsplit_once('/').filter(|(_, n)| !n.is_empty()) else {
        return PathState::Blocked("no file name".into());
    };
    let known = seen.get(parent).cloned();
    let dir = match known {
        Some(Parent::Missing) => return PathState::Missing,
        Some(Parent::Blocked(why)) => return PathState::Blocked(why),
        None => match crate::base::confine::Dir::reach(&t.root, parent) {
            Ok((d, missing)) if missing.is_empty() => d,
            Ok(_) => {
                seen.insert(parent.to_string(), Parent::Missing);
                return PathState::Missing;
            }
            // A root that is not there (planning from inputs alone): nothing in it exists.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                seen.insert(parent.to_string(), Parent::Missing);
                return PathState::Missing;
            }
            Err(e) => {
                let why = if e.raw_os_error() == Some(libc::ENAMETOOLONG) {
                    "the path is longer than the filesystem takes".to_string()
                } else {
                    e.to_string()
                };
                seen.insert(parent.to_string(), Parent::Blocked(why.clone()));
                return PathState::Blocked(why);
            }
        },
    };
    match dir.entry(name) {
        Ok(None) => PathState::Missing,
        Ok(Some(st)) => match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => PathState::File,
            libc::S_IFDIR => PathState::Dir,
            libc::S_IFLNK => PathState::Symlink,
            libc::S_IFIFO => PathState::Special("FIFO"),
            libc::S_IFSOCK => PathState::Special("socket"),
            _ => PathState::Special("device node"),
        },
        Err(e) if e.raw_os_error() == Some(libc::ENAMETOOLONG) => {
            PathState::Blocked("the path is longer than the filesystem takes".into())
        }
        Err(e) => PathState::Blocked(e.to_string()),
    }
}

/// Look up what `planner::target::check` needs.
pub fn observe(root: &Path, wanted: &Wanted) -> Observed {
    let t = Target::new(root);
    let path = host_path();
    let mut seen = HashMap::new();
    Observed {
        paths: wanted
            .paths
            .iter()
            .map(|p| (p.clone(), path_state_seen(&t, p, &mut seen)))
            .collect(),
        host_tools: wanted
            .host_tools
            .iter()
            .filter(|name| {
                !name.contains('/')
                    && crate::base::process::find_executable(name, Some(&path)).is_some()
            })
            .cloned()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_under_a_root() {
        let d = crate::base::confine::test_root(
            &["etc/dir"],
            &[
                ("/etc/loop2", "etc/loop1"),
                ("/etc/loop1", "etc/loop2"),
                ("/etc", "link"),
            ],
        );
        let r = d.path();
        std::fs::write(r.join("etc/file"), "x").unwrap();
        let t = Target::new(r);
        assert_eq!(path_state(&t, "/etc/file"), PathState::File);
        assert_eq!(path_state(&t, "/etc/dir"), PathState::Dir);
        assert_eq!(path_state(&t, "/etc/new/x"), PathState::Missing);
        assert_eq!(
            path_state(&t, "/link/file"),
            PathState::File,
            "parents resolved in the root"
        );
        assert!(
            matches!(path_state(&t, "/etc/file/x"), PathState::Blocked(w) if w.contains("/etc/file is not a directory")),
        );
        assert!(matches!(
            path_state(&t, "/etc/loop1/x"),
            PathState::Blocked(w) if w.contains("symlink")
        ));
        assert_eq!(path_state(&t, "/etc/loop1"), PathState::Symlink);
    }

    /// `observe` keeps the ancestors it looked up for the next path: the answers must be the
    /// ones each path gets on its own (shared ancestors that exist, are missing, or are files).
    #[test]
    fn shared_ancestors_give_the_same_states_as_one_path_at_a_time() {
        let d = crate::base::confine::test_root(&["etc/dir"], &[]);
        let r = d.path();
        std::fs::write(r.join("etc/file"), "x").unwrap();
        let paths: Vec<String> = [
            "/etc/new/a/x",
            "/etc/new/a/y",
            "/etc/new/b",
            "/etc/dir/x",
            "/etc/dir/y",
            "/etc/file/x",
            "/etc/file/y/z",
            "/etc/file",
        ]
        .map(String::from)
        .to_vec();
        let wanted = Wanted {
            paths: paths.clone(),
            host_tools: Default::default(),
        };
        let seen = observe(r, &wanted);
        let t = Target::new(r);
        for p in &paths {
            assert_eq!(seen.paths[p], path_state(&t, p), "{p}");
        }
        assert!(matches!(
            &seen.paths["/etc/file/y/z"],
            PathState::Blocked(_)
        ));
        assert_eq!(seen.paths["/etc/new/b"], PathState::Missing);
    }
}
