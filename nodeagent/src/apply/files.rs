//! write_files: a file gets its final owner and mode before its first byte, and appears at its
//! path whole or not at all.
//!
//! Each file goes through the project's one atomic writer (fsio.rs: temp file created with its
//! final owner and mode, write, `fsync`, `rename` over the final path, which replaces a
//! symlink there and never follows it, `fsync` of the directory).
//! Missing parents are created as cloud-init does (0755, chowned to the entry's owner), but
//! as one unit: built under a temp name and renamed into place, so a crash never leaves a
//! half-owned directory chain. `append` reads the current file without following a symlink
//! and replaces it with old + new bytes the same way (exactly-once via the journal, mod.rs).

use super::{Target, UserDb};
use crate::error::{Error, ErrorKind, Result, Stage};
use crate::fsio;
use crate::plan::FileWrite;
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// Read a file without following a symlink in its last component; `None` if absent.
fn read_nofollow(path: &Path, place: &str) -> Result<Option<Vec<u8>>> {
    read_regular(path, place, u64::MAX)
}

/// The content of the regular file at `path` (at most `max` bytes), `None` if it does not
/// exist. Opened without following a symlink and non-blocking, then checked with fstat: a
/// FIFO (whose open or read would block forever) or a character device (endless data) is
/// refused, not read.
fn read_regular(path: &Path, place: &str, max: u64) -> Result<Option<Vec<u8>>> {
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => {
            let meta = f
                .metadata()
                .map_err(|e| Error::io(Stage::Apply, place, "", e))?;
            if !meta.is_file() {
                return Err(Error::of(
                    ErrorKind::Unsupported,
                    Stage::Apply,
                    place,
                    "is not a regular file (a FIFO, device, socket or directory); refused",
                ));
            }
            if meta.len() > max {
                return Err(Error::of(
                    ErrorKind::Unsupported,
                    Stage::Apply,
                    place,
                    format!("existing file is over {max} bytes (MAX_APPEND_BASE_BYTES); refused"),
                ));
            }
            let mut v = Vec::new();
            f.take(max)
                .read_to_end(&mut v)
                .map_err(|e| Error::io(Stage::Apply, place, "", e))?;
            Ok(Some(v))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(Error::new(
            Stage::Apply,
            place,
            "is a symlink; not followed",
        )),
        Err(e) => Err(Error::io(Stage::Apply, place, "", e)),
    }
}

/// SHA-256 of the file at `abs`, `None` if it does not exist.
pub fn current_hash(t: &Target, abs: &str) -> Result<Option<String>> {
    let p = t.path(abs)?;
    Ok(read_nofollow(&p, abs)?.map(|b| sha256_hex(&b)))
}

/// Current content + the entry's content: what the file holds after the append.
pub fn appended(t: &Target, f: &FileWrite) -> Result<Vec<u8>> {
    let p = t.path(&f.path)?;
    let max = crate::limits::MAX_APPEND_BASE_BYTES as u64;
    let mut old = read_regular(&p, &f.path, max)?.unwrap_or_default();
    old.extend_from_slice(&f.content.0);
    Ok(old)
}

/// uid/gid for an entry: named ones from the target's database, else the existing file's,
/// else the agent's own.
fn owner_ids(
    f: &FileWrite,
    db: &UserDb,
    existing: Option<&std::fs::Metadata>,
) -> Result<(u32, u32)> {
    let uid = owner_id(f, f.owner.user.as_deref(), |u| db.uid(u), "user", "passwd")
        .transpose()?
        .or(existing.map(|m| m.uid()))
        .unwrap_or_else(|| nix::unistd::geteuid().as_raw());
    let gid = owner_id(f, f.owner.group.as_deref(), |g| db.gid(g), "group", "group")
        .transpose()?
        .or(existing.map(|m| m.gid()))
        .unwrap_or_else(|| nix::unistd::getegid().as_raw());
    Ok((uid, gid))
}

/// The id of the named owner `name` (a `what`) in the target's `/etc/<table>`: `None` when no
/// owner is named, an error when the name is unknown.
fn owner_id(
    f: &FileWrite,
    name: Option<&str>,
    lookup: impl Fn(&str) -> Option<u32>,
    what: &str,
    table: &str,
) -> Option<Result<u32>> {
    let name = name?;
    Some(lookup(name).ok_or_else(|| {
        Error::new(
            Stage::Apply,
            &f.path,
            format!("owner: unknown {what} {name:?} in the target's /etc/{table}"),
        )
    }))
}

fn chown(path: &Path, uid: u32, gid: u32, place: &str) -> Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))
        .map_err(|e| Error::io(Stage::Apply, place, "chown", e))
}

fn fsync_dir(dir: &Path, place: &str) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::new(Stage::Apply, place, format!("fsync {}: {e}", dir.display())))
}

/// Create the missing directories above `dir` as one unit owned by uid/gid (mode 0755).
pub fn ensure_parents(dir: &Path, uid: u32, gid: u32, place: &str) -> Result<()> {
    match make_parents(dir, uid, gid, place)? {
        Some(top) => fsync_dir(&top, place),
        None => Ok(()),
    }
}

/// `ensure_parents` without the final directory sync: returns the directory that holds the
/// new chain (to be synced by the caller, before anything that depends on it is journaled).
fn make_parents(dir: &Path, uid: u32, gid: u32, place: &str) -> Result<Option<PathBuf>> {
    if dir.is_dir() {
        return Ok(None);
    }
    // First missing ancestor.
    let mut missing: Vec<&std::ffi::OsStr> = Vec::new();
    let mut top = dir;
    while !top.exists() {
        missing.push(
            top.file_name()
                .ok_or_else(|| Error::new(Stage::Apply, place, "cannot create parent"))?,
        );
        top = top
            .parent()
            .ok_or_else(|| Error::new(Stage::Apply, place, "cannot create parent"))?;
    }
    if !top.is_dir() {
        return Err(Error::new(
            Stage::Apply,
            place,
            format!("{} is not a directory", top.display()),
        ));
    }
    missing.reverse();
    let tmp = top.join(format!(".{}.nodeagent-tmpd", missing[0].to_string_lossy()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| Error::io(Stage::Apply, place, "", e))?;
    }
    let mut cur = tmp.clone();
    for (i, name) in missing.iter().enumerate() {
        if i > 0 {
            cur.push(name);
        }
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(&cur)
            .map_err(|e| {
                Error::new(Stage::Apply, place, format!("mkdir {}: {e}", cur.display()))
            })?;
        std::fs::set_permissions(&cur, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::io(Stage::Apply, place, "", e))?;
        chown(&cur, uid, gid, place)?;
    }
    std::fs::rename(&tmp, top.join(missing[0]))
        .map_err(|e| Error::io(Stage::Apply, place, "", e))?;
    Ok(Some(top.to_path_buf()))
}

/// An entry's temp file (fsio.rs): final bytes, owner and mode, not yet in place.
pub struct Staged {
    file: fsio::Staged,
    place: String,
}

/// Create the temp file with its final owner and mode, then write the bytes (no fsync yet).
pub fn stage(t: &Target, f: &FileWrite, bytes: &[u8], db: &UserDb) -> Result<Staged> {
    let place = f.path.as_str();
    let path = t.path(&f.path)?;
    let existing = std::fs::symlink_metadata(&path).ok();
    if existing.as_ref().is_some_and(|m| m.is_dir()) {
        return Err(Error::new(Stage::Apply, place, "is a directory"));
    }
    let regular = existing.as_ref().filter(|m| m.file_type().is_file());
    let (uid, gid) = owner_ids(f, db, regular)?;
    let mode = match f.mode {
        Some(m) if m != 0 => m & 0o7777,
        _ => regular.map(|m| m.mode() & 0o7777).unwrap_or(0o644),
    };
    let dir = path
        .parent()
        .ok_or_else(|| Error::new(Stage::Apply, place, "no parent directory"))?
        .to_path_buf();
    // As cloud-init's write_file (ensure_dir, then chown of the file only): missing parents
    // are root's, 0755, whoever owns the file.
    let new_parent = make_parents(&dir, 0, 0, place)?;
    // Under `/run`: atomic but not synced. tmpfs on a node, gone after any reboot, so a
    // sync protects nothing; the plan makes these steps per-boot, so a reboot re-runs them.
    let mut opts = fsio::Options::new(mode).owner(uid, gid);
    if crate::plan::is_volatile(place) {
        opts = opts.volatile();
    }
    let mut file =
        fsio::stage(&path, bytes, &opts).map_err(|e| Error::caused(Stage::Apply, place, e))?;
    file.also_sync(new_parent);
    Ok(Staged {
        file,
        place: place.to_string(),
    })
}

/// Make staged files durable and put them in place (fsio.rs `commit`: every file synced,
/// then renamed, then each directory synced once). A crash before the renames leaves only
/// temp files, which the next run of the same steps removes.
pub fn commit(staged: Vec<Staged>) -> Result<()> {
    let places: Vec<(PathBuf, String)> = staged
        .iter()
        .map(|s| (s.file.path().to_path_buf(), s.place.clone()))
        .collect();
    fsio::commit(staged.into_iter().map(|s| s.file).collect()).map_err(|e| {
        let place = places
            .iter()
            .find(|(p, _)| *p == e.path)
            .map_or_else(|| e.path.display().to_string(), |(_, pl)| pl.clone());
        Error::caused(Stage::Apply, &place, e)
    })
}

/// Drop staged files that will not be committed (a later entry of the batch failed).
fn discard(staged: Vec<Staged>) {
    fsio::discard(staged.into_iter().map(|s| s.file).collect());
}

/// Write several entries, each with its own content, as one unit: all staged (none in place
/// if one fails), then committed together.
pub fn write_all(t: &Target, entries: &[&FileWrite], db: &UserDb) -> Result<()> {
    let mut staged = Vec::with_capacity(entries.len());
    for f in entries {
        match stage(t, f, &f.content.0, db) {
            Ok(s) => staged.push(s),
            Err(e) => {
                discard(staged);
                return Err(e);
            }
        }
    }
    commit(staged)
}

/// Write `bytes` as the entry's file (owner, mode, atomic; see the module doc).
pub fn write_bytes(t: &Target, f: &FileWrite, bytes: &[u8], db: &UserDb) -> Result<()> {
    let s = stage(t, f, bytes, db)?;
    commit(vec![s])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Content, Owner};

    /// `dir/name` written with `content`.
    fn file_in(dir: &Path, name: &str, content: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    fn appending(path: &str, content: &[u8], mode: Option<u32>) -> FileWrite {
        FileWrite {
            append: true,
            ..fw(path, content, mode)
        }
    }

    fn fw(path: &str, content: &[u8], mode: Option<u32>) -> FileWrite {
        FileWrite {
            path: path.into(),
            content: Content(content.to_vec()),
            owner: Owner {
                user: Some("root".into()),
                group: Some("root".into()),
            },
            mode,
            append: false,
            defer: false,
            secret: false,
        }
    }

    #[test]
    fn writes_with_mode_and_creates_parents() {
        let d = tempfile::tempdir().unwrap();
        let t = Target::new(d.path());
        let db = UserDb::default();
        let f = fw("/etc/kubernetes/pki/ca.key", b"KEY", Some(0o600));
        write_bytes(&t, &f, b"KEY", &db).unwrap();
        let p = d.path().join("etc/kubernetes/pki/ca.key");
        assert_eq!(std::fs::read(&p).unwrap(), b"KEY");
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o7777, 0o600);
        assert_eq!(
            std::fs::metadata(d.path().join("etc/kubernetes"))
                .unwrap()
                .mode()
                & 0o777,
            0o755
        );
        // No temp files left behind.
        let names: Vec<_> = std::fs::read_dir(d.path().join("etc/kubernetes/pki"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from("ca.key")]);
    }

    #[test]
    fn symlink_at_final_path_is_replaced_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let t = Target::new(d.path());
        let victim = file_in(d.path(), "victim", "orig");
        std::fs::create_dir(d.path().join("etc")).unwrap();
        std::os::unix::fs::symlink(&victim, d.path().join("etc/link")).unwrap();
        let f = appending("/etc/link", b"new", Some(0o644));
        assert!(appended(&t, &f).unwrap_err().message.contains("symlink"));
        write_bytes(&t, &f, b"new", &UserDb::default()).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "orig");
        let m = std::fs::symlink_metadata(d.path().join("etc/link")).unwrap();
        assert!(m.file_type().is_file());
    }

    #[test]
    fn unknown_owner_is_an_error_and_writes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let t = Target::new(d.path());
        let mut f = fw("/etc/x", b"x", None);
        f.owner.user = Some("nobody-here".into());
        let e = write_bytes(&t, &f, b"x", &UserDb::default()).unwrap_err();
        assert!(e.message.contains("nobody-here"), "{e}");
        assert!(!d.path().join("etc").exists());
    }

    #[test]
    fn append_onto_a_fifo_or_a_device_is_refused_at_once() {
        let d = tempfile::tempdir().unwrap();
        let t = Target::new(d.path());
        std::fs::create_dir_all(d.path().join("etc")).unwrap();
        nix::unistd::mkfifo(
            &d.path().join("etc/fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let f = appending("/etc/fifo", b"x", None);
        let start = std::time::Instant::now();
        let e = appended(&t, &f).unwrap_err();
        assert!(e.message.contains("not a regular file"), "{e}");
        assert_eq!(e.place, "/etc/fifo");
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        let dev = Target::new(Path::new("/"));
        let z = appending("/dev/zero", b"x", None);
        assert!(
            appended(&dev, &z)
                .unwrap_err()
                .message
                .contains("not a regular file")
        );
    }

    #[test]
    fn append_and_mode_none_keeps_existing_mode() {
        let d = tempfile::tempdir().unwrap();
        let t = Target::new(d.path());
        let p = file_in(d.path(), "f", "a\n");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        let f = appending("/f", b"b\n", None);
        let full = appended(&t, &f).unwrap();
        write_bytes(&t, &f, &full, &UserDb::default()).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a\nb\n");
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o7777, 0o640);
        assert_eq!(
            current_hash(&t, "/f").unwrap().unwrap(),
            sha256_hex(b"a\nb\n")
        );
    }
}
