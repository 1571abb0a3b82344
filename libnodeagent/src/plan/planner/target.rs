//! The built plan against the target: everything `apply` would otherwise only find out after
//! earlier steps wrote private keys and users (issue 13) — a directory where a file goes, a
//! file where a directory must be, a symlink loop, paths over the filesystem's limits, two
//! entries one under the other, a missing tool.
//!
//! Pure: what the target holds comes in as a [`TargetView`] (read once by `pipeline::gather`)
//! and the [`Observed`] state of the paths the plan names (read by
//! `probe::observe` through the same symlink-safe resolver apply uses).

use super::*;
use crate::base::error::{Error, ErrorKind, Result, Stage};
use std::collections::{BTreeSet, HashMap};

/// Programs and services the target offers, as found by `probe::view`.
#[derive(Debug, Clone, Default)]
pub struct TargetView {
    /// False when nothing was probed (fuzzing, hand-built inputs): tool checks are skipped.
    pub probed: bool,
    /// NTP clients the image has installed.
    pub chrony: bool,
    pub timesyncd: bool,
    /// Bytes the `--root` prefix adds to every path handed to the kernel (0 on a node).
    pub root_len: usize,
}

/// What is at one planned path now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathState {
    Missing,
    File,
    Dir,
    Symlink,
    /// A FIFO, socket or device node.
    Special(&'static str),
    /// Cannot be reached: a parent is not a directory, a symlink loop, too long.
    Blocked(String),
}

/// Paths (in the target) the plan names, and the programs it runs on the agent's own PATH
/// (device tools `sfdisk`, `blkid`, `mkfs.*`, which run on the host also under `--root`, and
/// `chroot` itself), to be looked up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Wanted {
    pub paths: Vec<String>,
    pub host_tools: BTreeSet<String>,
}

/// Their state, from `probe::observe`.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub paths: HashMap<String, PathState>,
    /// The wanted host tools that are on the agent's PATH.
    pub host_tools: BTreeSet<String>,
}

/// One file a step writes, and whether it appends to what is there.
struct Written<'a> {
    step: &'a Step,
    path: String,
    append: bool,
    /// The key path of the input that names it, for errors.
    place: String,
}

/// Every file the plan's steps write, in plan order.
fn written<'a>(plan: &'a Plan, view: &TargetView) -> Vec<Written<'a>> {
    let mut out = Vec::new();
    let mut add = |step: &'a Step, path: &str, append: bool, place: String| {
        out.push(Written {
            step,
            path: path.to_string(),
            append,
            place,
        })
    };
    for s in &plan.steps {
        match &s.action {
            Action::WriteFile(f) => add(s, &f.path, f.append, write_files_place(&s.id)),
            Action::Network(n) => {
                for f in &n.files {
                    add(s, &f.path, false, "guestinfo.metadata: network".into());
                }
            }
            Action::Hostname(h) => {
                add(s, "/etc/hostname", false, "hostname".into());
                if h.etc_hosts.is_some() {
                    add(s, "/etc/hosts", false, "manage_etc_hosts".into());
                }
            }
            Action::Mounts(_) => add(s, "/etc/fstab", false, "mounts".into()),
            Action::Ntp(n) if n.enabled => {
                if let Ok((c, _)) = crate::apply::ntp::pick(&n.client, view.chrony, view.timesyncd)
                {
                    add(s, crate::apply::ntp::config_path(c), false, "ntp".into());
                }
            }
            Action::User(u) if !u.sudo.is_empty() => add(
                s,
                &crate::apply::users::sudoers_file(&u.name),
                false,
                format!("users ({}).sudo", u.name),
            ),
            _ => {}
        }
    }
    out
}

/// `write_files[3]:/etc/x` (a step id) -> `write_files[3].path`.
fn write_files_place(id: &str) -> String {
    match id.split_once(':') {
        Some((entry, _)) if entry.starts_with("write_files") => format!("{entry}.path"),
        _ => id.to_string(),
    }
}

/// What `probe::observe` must look up for `check`.
pub fn wanted(plan: &Plan, view: &TargetView) -> Wanted {
    let mut w = Wanted::default();
    let mut seen = BTreeSet::new();
    for f in written(plan, view) {
        if seen.insert(f.path.clone()) {
            w.paths.push(f.path);
        }
    }
    if view.probed {
        w.host_tools = host_tools_used(plan);
    }
    w
}

/// The programs `plan` runs from the agent's own PATH: named by [`tools_of`], not listed
/// from the PATH's directories (a full listing of /usr/bin cost more than the rest of a plan).
/// No step runs a program of the target's: users and groups are written natively.
fn host_tools_used(plan: &Plan) -> BTreeSet<String> {
    plan.steps
        .iter()
        .flat_map(|s| tools_of(&s.action))
        .map(|need| need.tool)
        .collect()
}

/// One program a step runs on the agent's PATH (also under `--root`: device tools).
struct Need {
    tool: String,
    /// The key path of the input that asks for it, for errors.
    place: String,
}

/// The programs `a` runs, in the order apply runs them: what `check_tools` checks and
/// `host_tools_used` asks `probe::observe` to look up.
fn tools_of(a: &Action) -> Vec<Need> {
    let need = |tool: &str, place: &str| Need {
        tool: tool.to_string(),
        place: place.to_string(),
    };
    let mut out = Vec::new();
    match a {
        Action::DiskSetup(d) => {
            for disk in d.disks.iter().filter(|d| !d.layout.is_empty()) {
                let place = format!("disk_setup.{}", disk.device);
                out.push(need("sfdisk", &place));
                out.push(need("blkid", &place));
            }
        }
        Action::FsSetup(f) => {
            for (i, fs) in f.filesystems.iter().enumerate() {
                // A missing device is not refused: it may still appear (apply waits for
                // udev, then warns, as cloud-init does).
                let place = format!("fs_setup[{i}]");
                let mkfs = format!("mkfs.{}", fs.filesystem);
                out.push(need(&mkfs, &format!("{place}.filesystem")));
                out.push(need("blkid", &place));
            }
        }
        _ => {}
    }
    out
}

/// Refuse a plan that `apply` could not finish in this target. Pure.
pub fn check(plan: &Plan, view: &TargetView, seen: &Observed) -> Result<()> {
    check_paths(plan, view, seen)?;
    if view.probed {
        check_tools(plan, view, &seen.host_tools)?;
    }
    Ok(())
}

fn check_paths(plan: &Plan, view: &TargetView, seen: &Observed) -> Result<()> {
    // Paths written as files so far, and every directory above them, with who needs it.
    let mut files: HashMap<&str, &str> = HashMap::new();
    let mut dirs: HashMap<String, &str> = HashMap::new();
    let entries = written(plan, view);
    for w in &entries {
        let place = w.place.as_str();
        let path = w.path.as_str();
        let full = view.root_len + path.len() + 16;
        if full > PATH_MAX {
            return Err(Error::too_large(
                Stage::Plan,
                place,
                format!(
                    "{path}: {full} bytes with the root prefix and temp suffix; the limit is {PATH_MAX}"
                ),
            ));
        }
        match seen.paths.get(path).unwrap_or(&PathState::Missing) {
            PathState::Missing | PathState::File => {}
            PathState::Dir => {
                return Err(Error::of(
                    ErrorKind::Conflict,
                    Stage::Plan,
                    place,
                    format!("{path} is a directory in the target; a file cannot replace it"),
                ));
            }
            PathState::Symlink if w.append => {
                return Err(Error::of(
                    ErrorKind::Conflict,
                    Stage::Plan,
                    place,
                    format!("{path} is a symlink; an append does not follow it"),
                ));
            }
            PathState::Symlink => {} // replaced itself, never followed (files.rs)
            PathState::Special(kind) => {
                return Err(Error::of(
                    ErrorKind::Conflict,
                    Stage::Plan,
                    place,
                    format!("{path} is a {kind} in the target, not a regular file"),
                ));
            }
            PathState::Blocked(why) => {
                return Err(Error::conflict(
                    Stage::Plan,
                    place,
                    format!("{path}: {why}"),
                ));
            }
        }
        if let Some(other) = dirs.get(path) {
            return Err(Error::invalid(
                Stage::Plan,
                place,
                format!(
                    "{path} is a directory for {other}, written earlier; it cannot also be a file"
                ),
            ));
        }
        let mut parent = path;
        while let Some((up, _)) = parent.rsplit_once('/') {
            if up.is_empty() {
                break;
            }
            if let Some(other) = files.get(up) {
                return Err(Error::invalid(
                    Stage::Plan,
                    place,
                    format!("{up} is a file ({other}); {path} cannot be under it"),
                ));
            }
            dirs.entry(up.to_string()).or_insert(w.step.id.as_str());
            parent = up;
        }
        files.entry(path).or_insert(w.step.id.as_str());
    }
    Ok(())
}

fn check_tools(plan: &Plan, view: &TargetView, host_tools: &BTreeSet<String>) -> Result<()> {
    let on_host = |tool: &str, place: &str| -> Result<()> {
        if host_tools.contains(tool) {
            Ok(())
        } else {
            Err(Error::of(
                ErrorKind::NotFound,
                Stage::Plan,
                place,
                format!("{tool} is not installed (not on PATH)"),
            ))
        }
    };
    for s in &plan.steps {
        if let Action::Ntp(n) = &s.action
            && n.enabled
        {
            // A client that is not installed is configured anyway and warned about (as
            // cloud-init, which would install it): only what apply refuses is refused.
            crate::apply::ntp::pick(&n.client, view.chrony, view.timesyncd).map_err(|e| {
                let mut e = e.map_message(|m| format!("{m} in the target"));
                e.stage = Stage::Plan;
                e
            })?;
        }
        for need in tools_of(&s.action) {
            on_host(&need.tool, &need.place)?;
        }
    }
    Ok(())
}

/// A plan error's place with its input line: an error at `users[2].gecos` gets
/// `(userdata line 7 column 5)` after its message when `doc` (the cloud-config) has that key.
pub fn with_line(e: Error, doc: Option<(&crate::formats::yaml::Node, &str)>) -> Error {
    let Some((root, source)) = doc else {
        return e;
    };
    if e.stage != Stage::Plan {
        return e;
    }
    let mut node = root;
    let mut found = false;
    let mut rest = e.place.as_str();
    loop {
        // A mapping key (the longest that fits: device paths have dots and slashes), or an index.
        let next = match &node.value {
            crate::formats::yaml::Value::Map(entries) => entries
                .iter()
                .rev()
                .map(|(k, v)| (k.key_text(), v))
                .filter(|(k, _)| {
                    !k.is_empty()
                        && rest.strip_prefix(k.as_str()).is_some_and(|after| {
                            after
                                .chars()
                                .next()
                                .is_none_or(|c| matches!(c, '.' | '[' | ':' | ' '))
                        })
                })
                .max_by_key(|(k, _)| k.len())
                .map(|(k, v)| {
                    rest = rest.strip_prefix(k.as_str()).unwrap_or(rest);
                    v
                }),
            crate::formats::yaml::Value::Seq(items) => rest
                .strip_prefix('[')
                .and_then(|t| t.split_once(']'))
                .and_then(|(index, tail)| {
                    rest = tail;
                    items.get(index.parse::<usize>().ok()?)
                }),
            _ => None,
        };
        let Some(n) = next else { break };
        node = n;
        found = true;
        match rest.strip_prefix('.') {
            Some(tail) => rest = tail,
            None if rest.starts_with('[') => {}
            None => break,
        }
    }
    if !found {
        return e;
    }
    // In the message, not the place: the place stays the key path callers match on.
    let at = node.place();
    e.map_message(|m| format!("{m} ({source} {at})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_step(id: &str, path: &str, append: bool) -> Step {
        Step {
            id: id.into(),
            stage: RunStage::Main,
            frequency: Frequency::PerInstance,
            action: Action::WriteFile(FileWrite {
                append,
                ..FileWrite::root_owned(path, vec![], 0o644)
            }),
        }
    }

    fn plan(steps: Vec<Step>) -> Plan {
        Plan {
            version: PLAN_VERSION,
            instance_id: "i".into(),
            steps,
            warnings: vec![],
        }
    }

    #[test]
    fn one_entry_under_another_is_refused_either_way() {
        let seen = Observed::default();
        let view = TargetView::default();
        let p = plan(vec![
            file_step("write_files[0]:/etc/a", "/etc/a", false),
            file_step("write_files[1]:/etc/a/b", "/etc/a/b", false),
        ]);
        let e = check(&p, &view, &seen).unwrap_err();
        assert_eq!(e.place, "write_files[1].path");
        assert!(e.message.contains("/etc/a is a file"), "{e}");
        let p = plan(vec![
            file_step("write_files[0]:/etc/a/b", "/etc/a/b", false),
            file_step("write_files[1]:/etc/a", "/etc/a", false),
        ]);
        let e = check(&p, &view, &seen).unwrap_err();
        assert_eq!(e.place, "write_files[1].path");
        // The same path twice is fine (the later entry wins, as in cloud-init).
        let p = plan(vec![
            file_step("write_files[0]:/etc/a", "/etc/a", false),
            file_step("write_files[1]:/etc/a", "/etc/a", true),
        ]);
        check(&p, &view, &seen).unwrap();
    }

    #[test]
    fn what_is_at_the_path_decides() {
        let view = TargetView::default();
        let p = plan(vec![file_step("write_files[0]:/x", "/x", true)]);
        let at = |s: PathState| Observed {
            paths: [("/x".to_string(), s)].into(),
            ..Default::default()
        };
        check(&p, &view, &at(PathState::File)).unwrap();
        for bad in [
            PathState::Dir,
            PathState::Symlink,
            PathState::Special("FIFO"),
            PathState::Blocked("loop".into()),
        ] {
            // A path the walk cannot pass (a loop, a link not followed) is the node's state too.
            let kind = check(&p, &view, &at(bad.clone())).unwrap_err().kind();
            assert_eq!(kind, ErrorKind::Conflict, "{bad:?}");
        }
        let view = TargetView {
            root_len: PATH_MAX,
            ..Default::default()
        };
        let e = check(&p, &view, &at(PathState::Missing)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TooLarge, "{e}");
        assert!(e.message.contains("limit is 4096"), "{e}");
    }

    #[test]
    fn tools_are_checked_only_when_probed() {
        let step = |id: &str, action| Step {
            id: id.into(),
            stage: RunStage::Main,
            frequency: Frequency::PerInstance,
            action,
        };
        let disk = Action::DiskSetup(DiskSetupSpec {
            disks: vec![DiskSpec {
                device: "/dev/sdb".into(),
                table_type: "mbr".into(),
                layout: vec![(100, None)],
                overwrite: false,
            }],
        });
        // Users and groups are written natively: no tool of the target is needed.
        let user = Action::User(UserSpec {
            name: "capv".into(),
            ..Default::default()
        });
        let p = plan(vec![step("disk_setup", disk), step("user:capv", user)]);
        let seen = Observed::default();
        check(&p, &TargetView::default(), &seen).unwrap();
        let view = TargetView {
            probed: true,
            ..Default::default()
        };
        let e = check(&p, &view, &seen).unwrap_err();
        assert_eq!(e.place, "disk_setup./dev/sdb");
        assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
        assert!(e.message.contains("sfdisk"), "{e}");
        let host: BTreeSet<String> = ["sfdisk", "blkid"].map(String::from).into();
        let seen = Observed {
            host_tools: host,
            ..Default::default()
        };
        check(&p, &view, &seen).unwrap();
    }

    #[test]
    fn places_get_their_line() {
        let doc = crate::formats::yaml::read(
            crate::formats::yaml::Doc::new(Stage::CloudConfig, "userdata"),
            "#cloud-config\nusers:\n- name: a\n  gecos: \"x:y\"\n",
        )
        .unwrap();
        let e = with_line(
            Error::invalid(Stage::Plan, "users[0].gecos", "bad"),
            Some((&doc, "userdata")),
        );
        assert_eq!(
            e.to_string(),
            "users[0].gecos: bad (userdata line 4 column 10)"
        );
        let e = with_line(
            Error::invalid(Stage::Plan, "write_files[3]:/x.owner", "bad"),
            Some((&doc, "userdata")),
        );
        assert_eq!(
            e.to_string(),
            "write_files[3]:/x.owner: bad",
            "no such key: unchanged"
        );
    }
}
