//! What `useradd -m` and `CREATE_MAIL_SPOOL` make besides the account databases
//! (accounts.rs): the home from the skeleton and the mail spool, acting through directory
//! descriptors inside the root.

use super::Target;
use crate::base::confine::Dir;
use crate::base::error::{Error, Result, Stage};
use crate::base::fsio;
use std::sync::Arc;

/// `CREATE_MAIL_SPOOL=yes`'s file for a new user: `DIR/NAME`, empty, the user's, with the
/// mail group's gid and 0660 (0600 and the user's gid without a mail group); one already
/// there is left alone, as useradd leaves it (with a warning).
pub fn make_mail_spool(
    t: &Target,
    name: &str,
    uid: u32,
    (dir, gid, mode): &(String, u32, u32),
    place: &str,
) -> Result<()> {
    let io = |e| Error::io(Stage::Apply, place, dir, e);
    let (d, _) = Dir::make(&t.root, dir, 0o755, 0, 0).map_err(io)?;
    let d: crate::base::confine::UserDir = d.into();
    if d.has(name) {
        return Ok(());
    }
    d.create_new(name, b"", uid, *gid, *mode)
        .map(drop)
        .map_err(io)
}

/// `useradd -m`'s home: made under a temporary name beside it with `mode` and the user's
/// owner, filled from the skeleton (directories, files and links, the user's, with their
/// modes), synced, then renamed into place; a home already there is left alone, as useradd
/// leaves it. Missing parents are made root's, 0755.
pub fn make_home(
    t: &Target,
    home: &str,
    (uid, gid, mode): (u32, u32, u32),
    place: &str,
) -> Result<()> {
    Target::check(home)?;
    let io = |e| Error::io(Stage::Apply, place, "home directory", e);
    let Some((parent, name)) = home
        .trim_end_matches('/')
        .rsplit_once('/')
        .filter(|(_, n)| !n.is_empty())
    else {
        return Err(Error::invalid(
            Stage::Apply,
            place,
            "home directory has no parent",
        ));
    };
    let (parent, holder) = Dir::make(&t.root, parent, 0o755, 0, 0).map_err(io)?;
    if let Some(h) = holder {
        h.sync().map_err(io)?;
    }
    if parent.entry(name).map_err(io)?.is_some() {
        return Ok(());
    }
    let tmp = format!(".{name}.{}d", fsio::TEMP_MARK);
    parent.remove_tree(&tmp).map_err(io)?;
    let dir = Arc::new(parent.subdir(&tmp, mode, uid, gid).map_err(io)?);
    let mut staged = Vec::new();
    if let Ok(skel) = Dir::open(&t.root, "/etc/skel")
        && let Err(e) = copy_tree(&skel, &dir, (uid, gid), 0, &mut staged)
    {
        fsio::discard(staged);
        return Err(e.within(place));
    }
    // The home's own entries (skeleton files, directories, links) durable: the commit syncs
    // it when a file was staged in it, else it is synced here.
    let synced = staged.iter().any(|s| s.syncs(&dir));
    fsio::commit(staged).map_err(|e| Error::caused(Stage::Apply, place, e))?;
    if !synced {
        dir.sync().map_err(io)?;
    }
    parent.rename_noreplace(&tmp, &parent, name).map_err(io)?;
    parent.sync().map_err(io)
}

/// Skeleton depth followed (the image's own /etc/skel; a bound, not a limit seen in practice).
const SKEL_DEPTH: usize = 16;

/// The skeleton `from` copied into `to`, the user's: every name relative to its directory's
/// descriptor, none followed; past `fsio::HELD_TEMPS` files each temp closed once written (a
/// deep skeleton holds no descriptor per file).
fn copy_tree(
    from: &Dir,
    to: &Arc<Dir>,
    (uid, gid): (u32, u32),
    depth: usize,
    staged: &mut Vec<fsio::Staged>,
) -> Result<()> {
    let at = from.path().display().to_string();
    let err = |e: std::io::Error| Error::io(Stage::Apply, &at, "skel", e);
    if depth > SKEL_DEPTH {
        return Err(Error::too_large(
            Stage::Apply,
            &at,
            "skeleton directory nested too deep",
        ));
    }
    for name in from.names().map_err(err)? {
        let Some(st) = from.entry(&name).map_err(err)? else {
            continue;
        };
        let mode = st.st_mode & 0o7777;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                let sub = from.existing_subdir(&name).map_err(err)?;
                let dst = Arc::new(to.subdir(&name, mode, uid, gid).map_err(err)?);
                copy_tree(&sub, &dst, (uid, gid), depth + 1, staged)?;
            }
            libc::S_IFLNK => {
                let target = from.read_link(&name).map_err(err)?;
                to.symlink(&target, &name, uid, gid).map_err(err)?;
            }
            libc::S_IFREG => {
                let mut data = Vec::new();
                std::io::Read::read_to_end(&mut from.open_file(&name).map_err(err)?, &mut data)
                    .map_err(err)?;
                let opts = fsio::Options::new(mode).owner(uid, gid);
                let mut s = fsio::stage_in(to, &name, &data, &opts)
                    .map_err(|e| Error::caused(Stage::Apply, &at, e))?;
                s.close_past(staged.len());
                staged.push(s);
            }
            _ => {}
        }
    }
    Ok(())
}
