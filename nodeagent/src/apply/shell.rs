//! bootcmd and runcmd as cloud-init runs them: each list is one `/bin/sh` program.
//!
//! cloud-init 22.4 turns a list into one script (`util.shellify`: a string item is a line, a
//! list item its words in single quotes) and runs it with `/bin/sh`: what one item sets
//! (`export`, plain variables, `cd`, `umask`, functions, `set -e`) the next one sees, and
//! `exit` in an item ends the script, so the later items (and the kubeadm line) never run.
//!
//! nodeagent runs the unfinished items of a list, up to the next step that is not an item of
//! it (the kubeadm step), as one shell program under one supervisor (commands.rs), and still
//! journals every item on its own, exactly once. Around each item the program
//! * before: sends the item's output to its own file (`cmd/<h>.out`, logged with the item's
//!   step name) and gives the item the previous item's `$?`;
//! * after: records what the item left (variables as `set` and `export -p` print them, the
//!   working directory and umask: `<h>.vars`; the environment a program started now would
//!   get: `<h>.env`, by `env -0`), then its exit status (`<h>.rc`, last; one short write: a
//!   record cut by a crash reads as none, synced when `sync` is there), and a
//!   shell that ends inside an item (`exit`, `set -e`) records `N exit` from its EXIT trap.
//!
//! A rerun after a crash takes every item with a recorded status as finished (it is never run
//! again) and starts the next one in a new shell that first sources the last `.vars`: the
//! variables, directory and umask are as the finished items left them. Shell functions are
//! not carried over there (dash cannot print them); they are within one program. The kubeadm
//! step starts with the last item's `.env` and directory (`state_before`), as cloud-init's
//! kubeadm line, further down the same script, would. The `.vars`/`.env` files may hold
//! secrets (a proxy password): they stay in the 0700 state directory, 0600, never logged and
//! never in the journal.

use super::commands::{self, Files};
use super::{Ctx, Outcome};
use crate::error::{Error, ErrorKind, Result, Stage};
use crate::plan::{Action, CommandSpec, Run, Step};
use std::path::{Path, PathBuf};

/// The list an item belongs to: `bootcmd` or `runcmd` (the kubeadm step is runcmd's).
pub fn list_of(a: &Action) -> Option<&'static str> {
    match a {
        Action::Command(c) if c.origin.starts_with("bootcmd") => Some("bootcmd"),
        Action::Command(c) if c.origin.starts_with("runcmd") => Some("runcmd"),
        // A shell-script userdata: its own one-item list (planner::scripts_user).
        Action::Command(c) if c.origin.starts_with("scripts-user") => Some("scripts-user"),
        Action::Kubeadm(_) => Some("runcmd"),
        _ => None,
    }
}

/// What became of one item.
pub struct ItemEnd {
    pub id: String,
    pub result: Result<Outcome>,
    /// The item ended the list's program (`exit`, `set -e`, a signal): no later item runs.
    pub ended: bool,
}

/// An item's exit status as recorded, and whether the program ended inside it.
fn read_record(rc: &Path) -> Option<(i32, bool)> {
    let text = std::fs::read_to_string(rc).ok()?;
    let mut words = text.split_whitespace();
    let status = words.next()?.parse().ok()?;
    Some((status, words.next() == Some("exit")))
}

fn write_record(rc: &Path, status: i32, ended: bool, place: &str) -> Result<()> {
    let text = if ended {
        format!("{status} exit\n")
    } else {
        format!("{status}\n")
    };
    crate::fsio::write_atomic(rc, text.as_bytes(), &crate::fsio::Options::new(0o600)).map_err(|e| {
        Error::new(
            Stage::Apply,
            place,
            format!("cannot record the status: {e}"),
        )
    })
}

/// Did an earlier item of `step`'s list end the list's program? Then `step` does not run.
pub fn ended_before(ctx: &Ctx<'_>, step: &Step) -> Result<bool> {
    for s in earlier_items(ctx, step) {
        if let Some((_, true)) = read_record(&commands::files_for(ctx, s)?.rc) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The command items of `step`'s list before it, in plan order.
fn earlier_items<'p>(ctx: &Ctx<'p>, step: &Step) -> Vec<&'p Step> {
    let list = list_of(&step.action);
    let plan = ctx.plan;
    plan.steps
        .iter()
        .take_while(|s| s.id != step.id)
        .filter(|s| matches!(s.action, Action::Command(_)) && list_of(&s.action) == list)
        .collect()
}

/// What a list's items left for a program started after them: its environment, and the
/// working directory (inside the target).
pub type Left = (Vec<(String, String)>, Option<String>);

/// The state the list's items before `step` left: the environment and working directory
/// of the last one that recorded it (for the kubeadm step).
pub fn state_before(ctx: &Ctx<'_>, step: &Step) -> Result<Left> {
    for s in earlier_items(ctx, step).into_iter().rev() {
        let env = commands::files_for(ctx, s)?.rc.with_extension("env");
        if let Ok(bytes) = std::fs::read(&env) {
            return Ok(parse_env(&bytes));
        }
    }
    Ok((Vec::new(), None))
}

/// `env -0` output: the variables, and the directory the program recorded as `__na_pwd`.
fn parse_env(bytes: &[u8]) -> Left {
    let mut vars = Vec::new();
    let mut pwd = None;
    for entry in bytes.split(|&b| b == 0) {
        let entry = String::from_utf8_lossy(entry);
        let Some((k, v)) = entry.split_once('=') else {
            continue;
        };
        match k {
            "__na_pwd" => pwd = Some(v.to_string()),
            "__na_umask" => {}
            _ => vars.push((k.to_string(), v.to_string())),
        }
    }
    (vars, pwd)
}

/// `s` in single quotes for the shell, as `util.shellify` quotes list items.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// An item as a line of cloud-init's script (`util.shellify`).
pub fn shellify(run: &Run) -> String {
    match run {
        Run::Shell(s) => s.clone(),
        Run::Argv(a) => a.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" "),
    }
}

/// The helpers every list program starts with (see the module doc). `__na_cur` is the
/// running item's file prefix, empty between items.
const PROLOGUE: &str = r#"__na_pre() { __na_cur=$1; exec >"$1.out" 2>&1; return "${__na_rc:-0}"; }
__na_done() {
	__na_rc=$1; __na_cur=; __na_pwd=$PWD; __na_umask=$(umask)
	{ set; export -p; } >"$2.vars" 2>&- || :
	env -0 __na_pwd="$PWD" __na_umask="$__na_umask" >"$2.env" 2>&- || :
	printf '%s\n' "$__na_rc" >"$2.rc" 2>&- || :
	sync "$2.vars" "$2.env" "$2.rc" "${2%/*}" 2>&- || :
	return "$__na_rc"
}
__na_end() {
	__na_rc=$?
	if [ -n "${__na_cur:-}" ]; then
		printf '%s exit\n' "$__na_rc" >"$__na_cur.rc" 2>&-
		sync "$__na_cur.rc" "${__na_cur%/*}" 2>&-
	fi
}
trap __na_end EXIT
"#;

/// The program for `items` (each with its file prefix inside the target), started from the
/// state `restore` (the `.vars` of the item before, inside the target), with `env` set first.
fn program(
    items: &[(String, &CommandSpec)],
    restore: Option<&str>,
    env: &[(&str, &str)],
) -> String {
    let mut s = String::from(PROLOGUE);
    for (k, v) in env {
        s.push_str(&format!("{k}={}; export {k}\n", quote(v)));
    }
    if let Some(vars) = restore {
        // The old shell's PPID is not ours.
        s.push_str(&format!(
            "__na_ppid=$PPID; . {}; PPID=$__na_ppid\ncd -- \"$__na_pwd\" 2>&-; umask \"$__na_umask\"\n",
            quote(vars)
        ));
    }
    for (prefix, c) in items {
        let p = quote(prefix);
        s.push_str(&format!(
            "__na_pre {p}\n{}\n__na_done $? {p}\n",
            shellify(&c.run)
        ));
    }
    s
}

/// The one timeout of a program: the sum of its items' (0 = none), cut to the run's deadline.
fn program_timeout(ctx: &Ctx<'_>, items: &[&CommandSpec]) -> u64 {
    let own = |c: &CommandSpec| match c.timeout_secs {
        0 => ctx.opts.config.command_timeout_secs,
        t => t,
    };
    let total = if items.iter().any(|c| own(c) == 0) {
        0
    } else {
        items.iter().map(|c| own(c)).sum()
    };
    match crate::process::run_time_left() {
        Some(left) if total == 0 || left.as_secs() < total => left.as_secs().max(1),
        _ => total,
    }
}

/// A host path under the target as the program sees it (chrooted under `--root`).
fn inside(ctx: &Ctx<'_>, p: &Path) -> Result<String> {
    let t = ctx.target();
    let rel: PathBuf = if t.is_host() {
        p.to_path_buf()
    } else {
        Path::new("/").join(p.strip_prefix(&t.root).map_err(|_| {
            Error::new(
                Stage::Apply,
                p.display().to_string(),
                "state outside the root",
            )
        })?)
    };
    rel.to_str()
        .map(str::to_string)
        .ok_or_else(|| Error::new(Stage::Apply, p.display().to_string(), "path is not UTF-8"))
}

fn prefix_of(ctx: &Ctx<'_>, f: &Files) -> Result<String> {
    inside(ctx, &f.rc.with_extension(""))
}

/// Run `items` (consecutive unfinished items of one list, in order) as one program, resuming
/// from what a killed run recorded. Returns what became of each item, and `NotRun` for the
/// items after one that ended the program.
pub fn run_items(ctx: &mut Ctx<'_>, items: &[&Step]) -> Result<Vec<ItemEnd>> {
    let Some(first) = items.first() else {
        return Ok(Vec::new());
    };
    let list = list_of(&first.action).unwrap_or("commands");
    // The program's own status and lock, one per list (and boot, for bootcmd).
    let lf = commands::files_for_key(ctx, &format!("{list}:program"), first.frequency)?;
    let lock = commands::lock_step(&lf.lock, list)?;
    let specs: Vec<&CommandSpec> = items
        .iter()
        .map(|s| match &s.action {
            Action::Command(c) => Ok(c),
            _ => Err(Error::new(Stage::Apply, &s.id, "not a command")),
        })
        .collect::<Result<_>>()?;
    let files: Vec<Files> = items
        .iter()
        .map(|s| commands::files_for(ctx, s))
        .collect::<Result<_>>()?;
    let mut restore = earlier_items(ctx, first)
        .into_iter()
        .rev()
        .map(|s| commands::files_for(ctx, s).map(|f| f.rc.with_extension("vars")))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .find(|v| v.exists());
    let mut out: Vec<ItemEnd> = Vec::new();
    let mut ran_from = items.len();
    let mut timeout = 0;
    // Every second round finishes at least one item (recorded by the program, or from its
    // status).
    for _round in 0..=2 * items.len() {
        let i = out.len();
        let Some(step) = items.get(i) else { break };
        let fl = &files[i];
        if let Some((rc, ended)) = read_record(&fl.rc) {
            let result = recorded(ctx, step, specs[i], fl, (rc, ended), i < ran_from, timeout);
            if fl.rc.with_extension("vars").exists() {
                restore = Some(fl.rc.with_extension("vars"));
            }
            out.push(ItemEnd {
                id: step.id.clone(),
                result,
                ended,
            });
            if ended {
                for s in &items[i + 1..] {
                    tracing::info!(step = %s.id, "not run: an earlier item ended the {list} program");
                    out.push(ItemEnd {
                        id: s.id.clone(),
                        result: Ok(Outcome::NotRun),
                        ended: false,
                    });
                }
                break;
            }
            continue;
        }
        if let Some(status) = commands::read_rc(&lf.rc) {
            // The program ended inside this item without recording it: a signal, its
            // timeout, or an item that replaced the EXIT trap. A timeout fails the item and
            // the items after it go on from the state before it; else it ended the program.
            let ended = status != crate::supervise::TIMED_OUT;
            write_record(&fl.rc, status, ended, &step.id)?;
            let _ = std::fs::remove_file(&lf.rc);
            continue;
        }
        ran_from = ran_from.min(i);
        timeout = program_timeout(ctx, &specs[i..]);
        start(
            ctx,
            (&lf, &lock),
            &items[i..],
            &specs[i..],
            &files[i..],
            restore.as_deref(),
            timeout,
        )?;
        if commands::read_rc(&lf.rc).is_none() {
            write_record(&lf.rc, 1, false, list)?;
        }
    }
    // Every item is resolved: the program's status is spent (a later program of the list,
    // after the kubeadm step, must not take it for its own).
    let _ = std::fs::remove_file(&lf.rc);
    // Not reached while the rounds suffice; never report an item as finished that is not.
    for s in &items[out.len()..] {
        let e = Error::new(
            Stage::Apply,
            &s.id,
            "the list's program left no status for it",
        );
        out.push(ItemEnd {
            id: s.id.clone(),
            result: Err(e),
            ended: false,
        });
    }
    Ok(out)
}

/// The result of an item with its status `rc` recorded (by a killed run's program when
/// `earlier`); its output logged.
fn recorded(
    ctx: &Ctx<'_>,
    step: &Step,
    c: &CommandSpec,
    fl: &Files,
    (rc, ended): (i32, bool),
    earlier: bool,
    timeout: u64,
) -> Result<Outcome> {
    let tail = commands::log_output(&ctx.target().root, &fl.out, &step.id);
    match rc {
        0 if earlier => {
            tracing::info!(step = %step.id, "command had finished before the previous run was killed; not run again");
            Ok(Outcome::Adopted)
        }
        0 => Ok(Outcome::Ok),
        _ => Err(item_failure(&step.id, c, rc, ended, timeout, &tail)),
    }
}

/// Start the program for `items` and wait for it (its supervisor records its status in
/// `lf.rc`).
#[allow(clippy::too_many_arguments)]
fn start(
    ctx: &mut Ctx<'_>,
    (lf, lock): (&Files, &std::fs::File),
    items: &[&Step],
    specs: &[&CommandSpec],
    files: &[Files],
    restore: Option<&Path>,
    timeout: u64,
) -> Result<()> {
    let _ = std::fs::remove_file(&lf.rc);
    commands::reap_orphan_group(&lf.rc);
    let mut lines = Vec::new();
    for ((step, c), fl) in items.iter().zip(specs).zip(files) {
        for ext in ["rc", "vars", "env"] {
            let _ = std::fs::remove_file(fl.rc.with_extension(ext));
        }
        lines.push((prefix_of(ctx, fl)?, *c));
        super::begin(ctx, step, None)?;
        tracing::info!(step = %step.id, command = %commands::shown(&c.run), "command queued in its list's program");
    }
    let restore = restore.map(|p| inside(ctx, p)).transpose()?;
    let iid = ctx.plan.instance_id.clone();
    // cc_bootcmd runs its script with INSTANCE_ID in the environment.
    let env: Vec<(&str, &str)> = match items.first().map(|s| list_of(&s.action)) {
        Some(Some("bootcmd")) => vec![("INSTANCE_ID", iid.as_str())],
        _ => Vec::new(),
    };
    let script = program(&lines, restore.as_deref(), &env);
    let place = items.first().map_or("", |s| s.id.as_str());
    commands::supervise_program(ctx, place, lf, lock, script, timeout)
}

/// The error of an item that ended with status `rc`.
fn item_failure(
    place: &str,
    c: &CommandSpec,
    rc: i32,
    ended: bool,
    timeout: u64,
    tail: &[String],
) -> Error {
    let why = if rc == crate::supervise::TIMED_OUT && !ended {
        format!("timed out after {timeout} s (the timeout of its list's program)")
    } else if ended {
        format!("exit status {rc}; it ended the list's program, the later items do not run")
    } else {
        format!("exit status {rc}")
    };
    let last = tail
        .last()
        .map(|l| format!(" (last output: {l})"))
        .unwrap_or_default();
    let kind = if rc == crate::supervise::TIMED_OUT && !ended {
        ErrorKind::Timeout
    } else {
        ErrorKind::CommandFailed
    };
    Error::of(
        kind,
        Stage::Apply,
        place,
        format!("command `{}` failed: {why}{last}", commands::shown(&c.run)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_items_are_quoted_as_shellify_does() {
        let argv = Run::Argv(vec!["echo".into(), "it's".into(), "$HOME".into()]);
        assert_eq!(shellify(&argv), r#"'echo' 'it'\''s' '$HOME'"#);
        assert_eq!(shellify(&Run::Shell("cd /tmp".into())), "cd /tmp");
    }

    #[test]
    fn records_and_environments_parse() {
        let d = tempfile::tempdir().unwrap();
        let rc = d.path().join("x.rc");
        std::fs::write(&rc, "3 exit\n").unwrap();
        assert_eq!(read_record(&rc), Some((3, true)));
        std::fs::write(&rc, "0\n").unwrap();
        assert_eq!(read_record(&rc), Some((0, false)));
        std::fs::write(&rc, "").unwrap();
        assert_eq!(read_record(&rc), None);
        let (vars, pwd) = parse_env(b"A=1\0B=x=y\0__na_pwd=/tmp/d\0__na_umask=0027\0junk\0");
        assert_eq!(vars, [("A".into(), "1".into()), ("B".into(), "x=y".into())]);
        assert_eq!(pwd.as_deref(), Some("/tmp/d"));
    }
}
