//! The local stage's write sandbox: before it reads any platform data, `run --stage local`
//! on a node restricts its own filesystem writes with Landlock to the trees that stage writes
//! (`/etc`: hostname and network configuration; `/run` and `/var`: state, status, the NoCloud
//! seed's write-back; `/dev`: the status port). Reads stay open (host facts, `/sys`, the
//! image's tools).
//!
//! This takes the place of the unit's mount-namespace options (`ProtectSystem=yes`,
//! `ProtectHome=read-only`, `ProtectKernelLogs`, `ProtectControlGroups`): they cost systemd
//! a mount namespace per start, under TCG 0.22 s of the local unit's 1.12 s (BENCHMARKS.md,
//! "Measured decisions"), while a ruleset is three system calls. It is
//! also narrower: `/usr`, `/boot`, `/home`, `/root`, `/opt`, `/srv` and all of `/sys` become
//! unwritable, where the unit's options protected `/usr`, `/boot`, `/home`, `/root` and the
//! cgroup tree. A restricted process can no longer mount or unmount anything, and whatever it
//! starts inherits the restriction.
//!
//! Best effort by design: a kernel without Landlock (before 5.13, or with the LSM not enabled)
//! runs the stage unrestricted and says so once in the log; the stage itself never depends on
//! the sandbox.

use landlock::{
    ABI, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, path_beneath_rules,
};
use std::path::PathBuf;

/// The Landlock ABI whose write rights are handled: v2 adds `Refer` (renames and links
/// between directories), which the atomic writer needs; later ABIs' rights (truncate, device
/// ioctls) are left unhandled so that the stage behaves the same on every kernel.
const ABI_HANDLED: ABI = ABI::V2;

/// The trees the local stage writes on a node.
pub const LOCAL_STAGE_TREES: [&str; 4] = ["/etc", "/run", "/var", "/dev"];

/// How the sandbox came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Writes are confined to the given trees.
    Enforced,
    /// The kernel enforces part of the rights (an older Landlock ABI).
    Partial,
    /// No Landlock here: the stage runs unrestricted.
    Unavailable,
}

/// The trees a local stage may write: [`LOCAL_STAGE_TREES`] plus the directory of a
/// `dir:`/`nocloud:` transport named on the command line (its write-back goes there).
pub fn local_stage_trees(transport_spec: Option<&str>) -> Vec<PathBuf> {
    let mut trees: Vec<PathBuf> = LOCAL_STAGE_TREES.iter().map(PathBuf::from).collect();
    trees.extend(transport_spec.and_then(crate::source::transport::spec_dir));
    trees
}

/// Confine this process's (and its future children's) writes to `trees`. A tree that does not
/// exist is skipped: nothing can be written under it then, as nothing could create it.
pub fn confine_writes(trees: &[PathBuf]) -> std::io::Result<Outcome> {
    let write = AccessFs::from_write(ABI_HANDLED);
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(write)
        .and_then(|r| r.create())
        .and_then(|r| {
            r.add_rules(path_beneath_rules(
                trees.iter().map(PathBuf::as_path),
                write,
            ))
        })
        .and_then(|r| r.restrict_self())
        .map_err(std::io::Error::other)?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => Outcome::Enforced,
        RulesetStatus::PartiallyEnforced => Outcome::Partial,
        RulesetStatus::NotEnforced => Outcome::Unavailable,
    })
}

/// [`confine_writes`] for `run --stage local` on the node, logged. Not for `--root` runs:
/// they write into the given tree, which is not a node.
pub fn confine_local_stage(transport_spec: Option<&str>) {
    let trees = local_stage_trees(transport_spec);
    match confine_writes(&trees) {
        Ok(Outcome::Enforced) => tracing::info!("writes confined to {}", shown(&trees)),
        Ok(Outcome::Partial) => tracing::info!(
            "writes confined to {} (partly: this kernel's Landlock is older than ABI 2)",
            shown(&trees)
        ),
        Ok(Outcome::Unavailable) => {
            tracing::info!("no Landlock in this kernel: the local stage's writes are not confined")
        }
        Err(e) => tracing::warn!("the local stage's writes are not confined: {e}"),
    }
}

fn shown(trees: &[PathBuf]) -> String {
    trees
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_seed_directory_is_writable_too() {
        let t = local_stage_trees(Some("nocloud:/srv/seed"));
        assert_eq!(t.last(), Some(&PathBuf::from("/srv/seed")));
        assert_eq!(local_stage_trees(Some("dir:/x")).len(), 5);
        assert_eq!(local_stage_trees(Some("fwcfg")).len(), 4);
        assert_eq!(local_stage_trees(Some("dir:")).len(), 4);
        assert_eq!(local_stage_trees(None).len(), 4);
    }

    /// In a forked child (the restriction is for the whole process and cannot be undone):
    /// writes inside the allowed tree work, renames inside it too, writes beside it fail with
    /// EACCES, and a child process inherits the restriction. Skips where the kernel has no
    /// Landlock (the child reports which).
    #[test]
    fn writes_outside_the_allowed_trees_fail_after_confining() {
        let dir = tempfile::tempdir().unwrap();
        let inside = dir.path().join("inside");
        let outside = dir.path().join("outside");
        std::fs::create_dir(&inside).unwrap();
        std::fs::create_dir(&outside).unwrap();
        let outcome = crate::base::sandbox::run(1 << 30, 30, 64, || -> u8 {
            match confine_writes(std::slice::from_ref(&inside)) {
                Ok(Outcome::Unavailable) => return 77,
                Ok(_) => {}
                Err(_) => return 2,
            }
            let ok_inside = std::fs::write(inside.join("a"), b"x").is_ok()
                && std::fs::rename(inside.join("a"), inside.join("b")).is_ok()
                && std::fs::create_dir(inside.join("d")).is_ok();
            let denied =
                |r: std::io::Result<()>| matches!(r, Err(e) if e.raw_os_error() == Some(libc::EACCES));
            let denied_outside = denied(std::fs::write(outside.join("a"), b"x"))
                && denied(std::fs::create_dir(outside.join("d")));
            let child_denied = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("echo x > {}/c", outside.display()))
                .status()
                .map(|s| !s.success())
                .unwrap_or(false);
            match (ok_inside, denied_outside, child_denied) {
                (true, true, true) => 0,
                (false, _, _) => 3,
                (_, false, _) => 4,
                _ => 5,
            }
        })
        .unwrap();
        match outcome {
            crate::base::sandbox::Outcome::Done(77) => {
                crate::test_skip("NODEAGENT_PRIVILEGED_TESTS", "this kernel has no Landlock");
                return;
            }
            other => assert_eq!(
                other,
                crate::base::sandbox::Outcome::Done(0),
                "2: no ruleset, 3: inside denied, 4: outside allowed, 5: child not confined"
            ),
        }
        assert!(!outside.join("a").exists() && !outside.join("c").exists());
        assert!(inside.join("b").exists());
    }
}
