//! One symlink-safe root for every path the agent touches under `--root DIR`: its state,
//! status and event files as well as `write_files` targets.
//!
//! A path inside the target is resolved component by component against DIR, as a chroot
//! would: an absolute symlink (`/var/run -> /run`) restarts at DIR, `..` never climbs above
//! it, so a link planted in the image can only point somewhere else inside DIR. On the host
//! (`/`) paths are used as they are. The checks and the use that follows are separate system
//! calls: this holds against links present in the image, not against a process racing the
//! agent inside the root (nothing else runs there while the agent does).

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};

/// Most symlinks followed in one path (Linux's own limit).
const MAX_HOPS: usize = 40;

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
    out.extend(last);
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
    fn a_symlink_loop_is_an_error() {
        let d = test_root(&[], &[("b", "a"), ("a", "b")]);
        let e = dir(d.path(), "a/x").unwrap_err();
        assert_eq!(e.to_string(), "too many symlinks");
    }
}
