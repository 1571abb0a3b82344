//! write_files: a file gets its final owner and mode before its first byte, and appears at its
//! path whole or not at all.
//!
//! Each file goes through the project's one atomic writer (fsio.rs: temp file created with its
//! final owner and mode, write, `fsync`, `rename` over the final path, which replaces a
//! symlink there and never follows it, `fsync` of the directory).
//! Every entry's directory is found by the one resolver for paths a user other than root may
//! control part of (`confine::Dir::reach`): the image's own links (`/lib -> usr/lib`,
//! `/var/run -> /run`) are followed inside the root, a link in a directory such a user can
//! change (their home, `~/.ssh`) never is, at any instant. Missing parents are created as
//! cloud-init 23.1+ does (0755, owned by the entry's owner), but as one unit: built under a
//! temp name and renamed into place, so a crash never leaves a half-owned directory chain.
//! `append` reads the current file without following a symlink (and, where such a user could
//! have put it, only a regular file with one link) and replaces it with old + new bytes the
//! same way (exactly-once via the journal, mod.rs).

use super::{Target, UserDb};
use crate::base::confine::Dir;
use crate::base::error::{Error, ErrorKind, Result, Stage};
use crate::base::fsio;
use crate::plan::FileWrite;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

pub fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// The content of the regular file `name` in `dir` (at most `max` bytes), `None` if it does
/// not exist. Opened relative to the directory, without following a symlink and
/// non-blocking, then checked with fstat: a FIFO (whose open or read would block forever) or
/// a character device (endless data) is refused, not read; so is a file with more than one
/// link in a directory a user other than root can change (a hard link that user made to a
/// file they cannot read would be copied into a file they can).
pub fn read_regular(dir: &Dir, name: &str, place: &str, max: u64) -> Result<Option<Vec<u8>>> {
    match dir.open_file(name) {
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
            if dir.user_writable() && std::os::unix::fs::MetadataExt::nlink(&meta) != 1 {
                return Err(Error::of(
                    ErrorKind::Unsupported,
                    Stage::Apply,
                    place,
                    "has more than one link in a directory a user other than root can change; not read",
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
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(Error::conflict(
            Stage::Apply,
            place,
            "is a symlink; not followed",
        )),
        Err(e) => Err(Error::io(Stage::Apply, place, "", e)),
    }
}

/// The in-target directory of `abs` and its file name: the directory open inside the root,
/// reached by `confine::Dir::reach`; `None` while it does not exist.
pub fn locate<'a>(t: &Target, abs: &'a str) -> Result<(Option<Dir>, &'a str)> {
    let (d, missing, name) = walk_to(t, abs)?;
    Ok((missing.is_empty().then_some(d), name))
}

/// The directory of `abs` as far as it is there (`confine::Dir::reach`), the components
/// missing below it, and the file name.
fn walk_to<'a>(t: &Target, abs: &'a str) -> Result<(Dir, Vec<String>, &'a str)> {
    Target::check(abs)?;
    let (parent, name) = abs
        .rsplit_once('/')
        .filter(|(_, n)| !n.is_empty() && *n != ".")
        .ok_or_else(|| Error::invalid(Stage::Apply, abs, "no file name"))?;
    let (d, missing) = Dir::reach(&t.root, parent).map_err(|e| reach_error(abs, e))?;
    Ok((d, missing, name))
}

/// A walk's error at `place`: a link not followed says so, others are I/O errors.
fn reach_error(place: &str, e: std::io::Error) -> Error {
    if crate::base::confine::is_untrusted_link(&e) {
        Error::conflict(Stage::Apply, place, e.to_string())
    } else {
        Error::io(Stage::Apply, place, "", e)
    }
}

/// SHA-256 of the file at `abs`, `None` if it does not exist or is longer than `max` bytes
/// (then it cannot be what the caller looks for).
pub fn current_hash(t: &Target, abs: &str, max: u64) -> Result<Option<String>> {
    let (Some(dir), name) = locate(t, abs)? else {
        return Ok(None);
    };
    match read_regular(&dir, name, abs, max) {
        Err(e) if e.kind() == ErrorKind::Unsupported => Ok(None),
        r => Ok(r?.map(|b| sha256_hex(&b))),
    }
}

/// Current content + `content` (the entry's): what the file holds after the append.
pub fn appended(t: &Target, f: &FileWrite, content: &[u8]) -> Result<Vec<u8>> {
    let max = crate::base::limits::MAX_APPEND_BASE_BYTES as u64;
    let mut old = match locate(t, &f.path)? {
        (Some(dir), name) => read_regular(&dir, name, &f.path, max)?.unwrap_or_default(),
        (None, _) => Vec::new(),
    };
    old.extend_from_slice(content);
    Ok(old)
}

/// What the entry writes now: its content, or with a `source` the bytes of the file it names
/// (reached as every written path is, read as a regular file within
/// `MAX_WRITE_FILES_SOURCE_BYTES`), as cloud-init 25.1's `read_url_or_decode` takes them.
/// When that file cannot be read, a warning, and the content if the entry gave one, else
/// `None`: the entry is skipped (cloud-init: "No content could be loaded ...; skipping").
pub fn content_now(t: &Target, f: &FileWrite) -> (Option<Vec<u8>>, Option<String>) {
    let Some(src) = &f.source else {
        return (Some(f.content.0.clone()), None);
    };
    let max = crate::base::limits::MAX_WRITE_FILES_SOURCE_BYTES as u64;
    let read = match locate(t, &src.path) {
        Ok((Some(dir), name)) => read_regular(&dir, name, &src.path, max),
        Ok((None, _)) => Ok(None),
        Err(e) => Err(e),
    };
    let why = match read {
        Ok(Some(bytes)) => return (Some(bytes), None),
        Ok(None) => "no such file".to_string(),
        Err(e) => e.message.clone(),
    };
    let place = format!("{}: source {}", f.path, src.path);
    if src.fallback {
        let w = format!("{place}: {why}; the entry's content is written instead");
        (Some(f.content.0.clone()), Some(w))
    } else {
        let w = format!("{place}: {why}; no content given, the entry is skipped");
        (None, Some(w))
    }
}

/// uid/gid for an entry: named ones from the target's database, else the existing file's,
/// else the agent's own.
fn owner_ids(f: &FileWrite, db: &UserDb, existing: Option<(u32, u32)>) -> Result<(u32, u32)> {
    let uid = owner_id(f, f.owner.user.as_deref(), |u| db.uid(u), "user", "passwd")
        .transpose()?
        .or(existing.map(|(uid, _)| uid))
        .unwrap_or_else(|| nix::unistd::geteuid().as_raw());
    let gid = owner_id(f, f.owner.group.as_deref(), |g| db.gid(g), "group", "group")
        .transpose()?
        .or(existing.map(|(_, gid)| gid))
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
        Error::not_found(
            Stage::Apply,
            &f.path,
            format!("owner: unknown {what} {name:?} in the target's /etc/{table}"),
        )
    }))
}

/// The directories of a set of entries, each opened (or made) once: the entries' temp files
/// share its descriptor, so a set holds one per directory however many files it writes.
#[derive(Default)]
pub struct Dirs {
    open: Vec<(String, Arc<Dir>)>,
    /// The last walk that ended short of its directory: where it ended and what is missing
    /// below, for the `make` that follows it to go on from (any `make` uses it up).
    short: Option<(String, Dir, Vec<String>)>,
}

impl Dirs {
    fn get(&self, parent: &str) -> Option<Arc<Dir>> {
        self.open
            .iter()
            .find(|(p, _)| p == parent)
            .map(|(_, d)| d.clone())
    }

    /// The entry `abs`'s directory if it is there, and the entry's name.
    fn locate<'a>(&mut self, t: &Target, abs: &'a str) -> Result<(Option<Arc<Dir>>, &'a str)> {
        let (parent, name) = abs.rsplit_once('/').unwrap_or(("", abs));
        if let Some(d) = self.get(parent) {
            Target::check(abs)?;
            return Ok((Some(d), name));
        }
        let (d, missing, name) = walk_to(t, abs)?;
        if !missing.is_empty() {
            self.short = Some((parent.to_string(), d, missing));
            return Ok((None, name));
        }
        let d = Arc::new(d);
        self.open.push((parent.to_string(), d.clone()));
        Ok((Some(d), name))
    }

    /// The directory `parent`, its missing part made as cloud-init 23.1+'s write_file makes
    /// it (`ensure_dir(..., user, group)`: 0755, every new directory chowned to the entry's
    /// owner), and the directory that got the new chain.
    fn make(
        &mut self,
        t: &Target,
        parent: &str,
        place: &str,
        (uid, gid): (u32, u32),
    ) -> Result<(Arc<Dir>, Option<Arc<Dir>>)> {
        if let Some(d) = self.get(parent) {
            return Ok((d, None));
        }
        // Only a walk to this very directory, with nothing made since.
        let made = match self.short.take().filter(|(p, ..)| p == parent) {
            Some((_, at, missing)) => at.make_missing(&missing, 0o755, uid, gid),
            None => Dir::reach_or_make(&t.root, parent, 0o755, uid, gid),
        };
        let (dir, holder) = made.map_err(|e| {
            if crate::base::confine::is_untrusted_link(&e) {
                Error::conflict(Stage::Apply, place, e.to_string())
            } else {
                Error::io(Stage::Apply, place, &format!("mkdir {parent}"), e)
            }
        })?;
        let dir = Arc::new(dir);
        self.open.push((parent.to_string(), dir.clone()));
        Ok((dir, holder.map(Arc::new)))
    }
}

/// What an entry is written with, all found before anything is written: its directory (if
/// it is there), file name, owner and mode.
struct Prepared<'a> {
    dir: Option<Arc<Dir>>,
    name: &'a str,
    uid: u32,
    gid: u32,
    mode: u32,
    /// Owner of the directories made for it: the named user and group, the agent's own
    /// where a side is not named (cloud-init's `chownbyname` leaves that side as created).
    dir_owner: (u32, u32),
}

fn prepare<'a>(t: &Target, f: &'a FileWrite, db: &UserDb, dirs: &mut Dirs) -> Result<Prepared<'a>> {
    let place = f.path.as_str();
    let (dir, name) = dirs.locate(t, place)?;
    let existing = match &dir {
        Some(d) => d
            .entry(name)
            .map_err(|e| Error::io(Stage::Apply, place, "", e))?,
        None => None,
    };
    let kind = existing.map(|st| st.st_mode & libc::S_IFMT);
    if kind == Some(libc::S_IFDIR) {
        return Err(Error::conflict(Stage::Apply, place, "is a directory"));
    }
    let regular = existing.filter(|_| kind == Some(libc::S_IFREG));
    let (uid, gid) = owner_ids(f, db, regular.map(|st| (st.st_uid, st.st_gid)))?;
    let mode = match f.mode {
        Some(m) if m != 0 => m & 0o7777,
        _ => regular.map(|st| st.st_mode & 0o7777).unwrap_or(0o644),
    };
    let me = crate::base::confine::own_ids();
    let dir_owner = owner_ids(f, db, Some(me))?;
    Ok(Prepared {
        dir,
        name,
        uid,
        gid,
        mode,
        dir_owner,
    })
}

/// An entry's temp file (fsio.rs): final bytes, owner and mode, not yet in place.
pub struct Staged {
    file: fsio::Staged,
    place: String,
}

/// Create the temp file with its final owner and mode, then write the bytes (no fsync yet).
pub fn stage(t: &Target, f: &FileWrite, bytes: &[u8], db: &UserDb) -> Result<Staged> {
    stage_in(t, f, bytes, db, &mut Dirs::default())
}

/// [`stage`] with the directories a batch has already opened: the files of one directory
/// share its descriptor instead of each walking from the root again.
pub fn stage_in(
    t: &Target,
    f: &FileWrite,
    bytes: &[u8],
    db: &UserDb,
    dirs: &mut Dirs,
) -> Result<Staged> {
    let p = prepare(t, f, db, dirs)?;
    stage_prepared(t, f, p, bytes, dirs)
}

/// Stage `bytes` as the prepared entry, making its missing parents first.
fn stage_prepared(
    t: &Target,
    f: &FileWrite,
    p: Prepared<'_>,
    bytes: &[u8],
    dirs: &mut Dirs,
) -> Result<Staged> {
    let place = f.path.as_str();
    let (dir, new_parent) = match p.dir {
        Some(d) => (d, None),
        None => {
            let parent = place.rsplit_once('/').map_or("", |(parent, _)| parent);
            dirs.make(t, parent, place, p.dir_owner)?
        }
    };
    // Under `/run`: atomic but not synced. tmpfs on a node, gone after any reboot, so a
    // sync protects nothing; the plan makes these steps per-boot, so a reboot re-runs them.
    let mut opts = fsio::Options::new(p.mode).owner(p.uid, p.gid);
    if crate::plan::is_volatile(place) {
        opts = opts.volatile();
    }
    let mut file = fsio::stage_in(&dir, p.name, bytes, &opts)
        .map_err(|e| Error::caused(Stage::Apply, place, e))?;
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

/// Write several entries, each with its own content, as one unit: every entry checked (owner,
/// mode, what is at its path) before the first is written, then each staged (past
/// `fsio::HELD_TEMPS` open ones, its temp file closed before the next is opened: a big set
/// holds one descriptor per directory, not one per file), then all committed together; none
/// is in place if one fails.
pub fn write_all(t: &Target, entries: &[&FileWrite], db: &UserDb) -> Result<()> {
    let mut dirs = Dirs::default();
    let prepared = entries
        .iter()
        .map(|f| prepare(t, f, db, &mut dirs))
        .collect::<Result<Vec<_>>>()?;
    let mut staged = Vec::with_capacity(entries.len());
    for (f, p) in entries.iter().zip(prepared) {
        match stage_prepared(t, f, p, &f.content.0, &mut dirs) {
            Ok(mut s) => {
                s.file.close_past(staged.len());
                staged.push(s);
            }
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
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::Path;

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
            source: None,
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
        assert!(
            appended(&t, &f, b"new")
                .unwrap_err()
                .message
                .contains("symlink")
        );
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
        let e = appended(&t, &f, b"x").unwrap_err();
        assert!(e.message.contains("not a regular file"), "{e}");
        assert_eq!(e.place, "/etc/fifo");
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        let dev = Target::new(Path::new("/"));
        let z = appending("/dev/zero", b"x", None);
        assert!(
            appended(&dev, &z, b"x")
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
        let full = appended(&t, &f, b"b\n").unwrap();
        write_bytes(&t, &f, &full, &UserDb::default()).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "a\nb\n");
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o7777, 0o640);
        assert_eq!(
            current_hash(&t, "/f", 1024).unwrap().unwrap(),
            sha256_hex(b"a\nb\n")
        );
    }
}
