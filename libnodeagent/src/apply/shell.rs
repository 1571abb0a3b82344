//! bootcmd and runcmd as cloud-init runs them: each list is one script, run by `sh FILE`.
//!
//! cloud-init turns a list into one script (`util.shellify`, script.rs) and runs it with
//! `/bin/sh`: what one item sets (`export`, plain variables, `cd`, `umask`, functions,
//! `set -e`, an `exec` redirection) the next one sees, and `exit` in an item ends the script,
//! so the later items (and the kubeadm line) never run. nodeagent writes the same lines to a
//! root-only file in the instance's `cmd/` directory (0700; the file 0600) and runs
//! `/bin/sh FILE` under one supervisor (commands.rs): the list's text is in no argv and no
//! environment. The unfinished items of a list, the kubeadm step among them, are one
//! program: at the kubeadm step the shell waits (`__na_wait`) while the agent runs the step
//! as a step of its own (pre-flight, retries, reset, sentinel, status), then answers with
//! its status, and the same shell goes on with the items after it.
//!
//! Between items the program records what they left (script.rs): the status (`<h>.rc`,
//! `N`, or `N exit` from the EXIT trap when the shell ended inside the item), the variables
//! (`<h>.vars`), the environment (`<h>.env`), and a marker in the program's output file
//! (`<p>.out`, read through one [`Redactor`]) where the item's output ends. Every item is
//! journaled on its own, exactly once.
//!
//! ## Crash and restart
//! A rerun takes every item with a recorded status as finished (never run again; `0` is
//! `adopted`) and starts the next one in a new shell that first sources the last `.vars`:
//! variables, directory and umask as the finished items left them (shell functions, `set`
//! options and redirections are not carried over a crash: dash cannot print a function).
//! * The agent killed: the supervisor and the shell go on; the restarted agent finds the
//!   program's lock held and waits for it, answering it if it waits at the kubeadm step.
//! * The supervisor killed (the OOM killer's pick): the shell gets SIGKILL with it
//!   (`PR_SET_PDEATHSIG`) and no program status is recorded. The item that was running has
//!   no status: it runs again, in a new program, at once (at most [`MAX_RESTARTS`] times a
//!   run; then the run fails without recording it, and the next run runs it again).
//! * The shell ended inside an item without recording it (a signal, its timeout): the
//!   supervisor's status says so; a timeout fails that item and the items after it go on
//!   from the state before it, anything else ended the list there, as cloud-init's script.
//!
//! The `.vars`/`.env` files may hold secrets (a proxy password): they stay in the 0700
//! state directory, 0600, never logged and never in the journal.

use super::commands::{self, Files};
use super::listout::{OutputReader, stem};
use super::script::{self, Part, Resume};
use super::{Ctx, Outcome};
use crate::base::error::{Error, ErrorKind, Result, Stage};
use crate::plan::{Action, CommandSpec, Frequency, Step};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often a run starts a list's program again after its supervisor was killed.
pub const MAX_RESTARTS: u32 = 2;
/// How often the agent looks whether a program waits at the kubeadm step.
const PAUSE_POLL: Duration = Duration::from_millis(50);
/// Longest wait for a program that writes its pause record to open its answer pipe.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

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
    /// No status recorded (its supervisor was killed each time): not finished, not failed
    /// for good; the run stops and the next one runs it again.
    pub interrupted: bool,
}

impl ItemEnd {
    fn new(id: &str, result: Result<Outcome>, ended: bool) -> ItemEnd {
        ItemEnd {
            id: id.to_string(),
            result,
            ended,
            interrupted: false,
        }
    }
}

/// An item's exit status as recorded, and whether the program ended inside it.
fn read_record(rc: &Path) -> Option<(i32, bool)> {
    let text = String::from_utf8_lossy(&commands::read_small(rc, 64)?).into_owned();
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
    crate::base::fsio::write_atomic(rc, text.as_bytes(), &crate::base::fsio::Options::new(0o600))
        .map_err(|e| {
            Error::caused(Stage::Apply, place, e).map_message(|_| "cannot record the status".into())
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
        // An environment is at most the kernel's ARG_MAX; more is not one `env -0` wrote.
        if let Some(bytes) = commands::read_small(&env, 4 << 20) {
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
            k if k.starts_with("__na_") => {}
            _ => vars.push((k.to_string(), v.to_string())),
        }
    }
    (vars, pwd)
}

/// A list's program: its steps (the items, and the kubeadm step it pauses at), their files,
/// and the program that runs them, alive across the main loop's steps while it waits.
pub struct Live<'p> {
    list: &'static str,
    steps: Vec<&'p Step>,
    files: Vec<Files>,
    /// The program's own files (`<p>.rc` its status, `<p>.lock`, `<p>.out` its output).
    prog: Files,
    lock: std::fs::File,
    /// Our own supervisor; `None` with `orphan` for the program of a killed agent.
    running: Option<crate::base::process::Running>,
    orphan: bool,
    /// The first step not resolved yet.
    pos: usize,
    /// From here on the items ran in this run (earlier recorded ones were a killed run's).
    ran_from: usize,
    restarts: u32,
    /// The last program ended without a status (its supervisor was killed).
    interrupted: bool,
    /// The timeout of the last program started, for a timeout's message.
    timeout: u64,
    output: OutputReader,
    /// The answer for a pause at a step of the list outside this segment (a killed run's
    /// program waiting at a kubeadm step the journal has since finished): `<h>` → status.
    answers: HashMap<String, i32>,
}

/// Run the steps of `segment` (consecutive unfinished steps of one list, the first an item)
/// as one program, resuming from what a killed run recorded. Returns what became of the
/// items up to the kubeadm step it waits at (the program then lives on in `ctx.live`), or of
/// all of them.
pub fn run_items<'p>(ctx: &mut Ctx<'p>, segment: &[&'p Step]) -> Result<Vec<ItemEnd>> {
    let Some(first) = segment.first() else {
        return Ok(Vec::new());
    };
    let list = list_of(&first.action).unwrap_or("commands");
    // The program's own status and lock, one per list (and boot, for bootcmd).
    let prog = commands::files_for_key(ctx, &format!("{list}:program"), first.frequency)?;
    let lock = commands::open_lock(&prog.lock, list)?;
    let files = segment
        .iter()
        .map(|s| commands::files_for(ctx, s))
        .collect::<Result<Vec<_>>>()?;
    let root = ctx.target().root.clone();
    let mut answers = HashMap::new();
    for s in
        ctx.plan.steps.iter().filter(|s| {
            matches!(s.action, Action::Kubeadm(_)) && !segment.iter().any(|g| g.id == s.id)
        })
    {
        if let Some(h) = stem(&commands::files_for(ctx, s)?) {
            answers.insert(h, i32::from(!ctx.journal.is_done(&s.id, false)));
        }
    }
    let mut live = Live {
        answers,
        list,
        steps: segment.to_vec(),
        output: OutputReader::new(&prog.out, root, list, segment, &files),
        files,
        prog,
        lock,
        running: None,
        orphan: false,
        pos: 0,
        ran_from: segment.len(),
        restarts: 0,
        interrupted: false,
        timeout: 0,
    };
    // Held: the program of a killed agent still runs (or waits at the kubeadm step).
    live.orphan = !commands::try_lock(&live.lock, list)?;
    if live.orphan {
        tracing::info!(
            list,
            "waiting for the {list} program a previous run started"
        );
    } else {
        clear_pause(&live.prog);
        // runcmd and a script userdata run where cloud-final does, after the runtime
        // (runtime.rs); bootcmd where cloud-init's network stage does, without waiting.
        if list != "bootcmd" {
            ctx.await_runtime();
        }
    }
    drive(ctx, live)
}

/// With `--exec`, a bootcmd/runcmd item starts its list's program (shell.rs): the steps from
/// here up to the next step that is not one of the list's, the kubeadm step included (the
/// program waits there while the loop runs it), unless an earlier item ended the program.
/// An item after the kubeadm step the program waits at answers it and goes on. `None`: not
/// such a step. Returns this step's end; the later items' go to `queued`.
pub(super) fn run_list<'p>(
    ctx: &mut Ctx<'p>,
    steps: &[&'p Step],
    order: &[usize],
    pos: usize,
    queued: &mut HashMap<String, ItemEnd>,
) -> Option<ItemEnd> {
    let step = steps[order[pos]];
    if let Some(r) = queued.remove(&step.id) {
        return Some(r);
    }
    let list = list_of(&step.action).filter(|_| ctx.opts.exec)?;
    let fail = |e: Error| ItemEnd {
        id: step.id.clone(),
        result: Err(e),
        ended: false,
        interrupted: false,
    };
    if matches!(step.action, Action::Command(_))
        && let Some(r) = resume(ctx)
    {
        return match r {
            Err(e) => Some(fail(e)),
            Ok(ends) => {
                queued.extend(ends.into_iter().map(|e| (e.id.clone(), e)));
                queued.remove(&step.id)
            }
        };
    }
    match ended_before(ctx, step) {
        Err(e) => return Some(fail(e)),
        Ok(true) => {
            tracing::info!(step = %step.id, "not run: an earlier item ended the {list} program");
            return Some(ItemEnd {
                id: step.id.clone(),
                result: Ok(Outcome::NotRun),
                ended: false,
                interrupted: false,
            });
        }
        Ok(false) if !matches!(step.action, Action::Command(_)) => return None,
        Ok(false) => {}
    }
    let segment: Vec<&Step> = order[pos..]
        .iter()
        .map(|&j| steps[j])
        .take_while(|s| {
            list_of(&s.action) == Some(list)
                && !ctx
                    .journal
                    .is_done(&s.id, s.frequency == Frequency::PerBoot)
        })
        .collect();
    match run_items(ctx, &segment) {
        Err(e) => Some(fail(e)),
        Ok(ends) => {
            queued.extend(ends.into_iter().map(|e| (e.id.clone(), e)));
            queued.remove(&step.id)
        }
    }
}

/// Answer the program waiting at the kubeadm step with the step's result (the main loop has
/// journaled it), and go on with the items after it: what became of them.
pub fn resume(ctx: &mut Ctx<'_>) -> Option<Result<Vec<ItemEnd>>> {
    let mut live = ctx.live.take()?;
    let paused = live.steps.get(live.pos)?;
    let status = i32::from(!ctx.journal.is_done(&paused.id, false));
    answer(&mut live, status);
    live.pos += 1;
    Some(drive(ctx, live))
}

/// At the end of a run: a program still waiting at the kubeadm step gets the step's result
/// and is waited for (its remaining items run; their statuses are recorded, and the next
/// run adopts them).
pub fn finish(ctx: &mut Ctx<'_>) {
    let Some(mut live) = ctx.live.take() else {
        return;
    };
    let status = live
        .steps
        .get(live.pos)
        .map_or(1, |s| i32::from(!ctx.journal.is_done(&s.id, false)));
    answer(&mut live, status);
    while let Waited::Paused(at) = wait(&mut live) {
        live.pos = at;
        answer(&mut live, 1);
    }
    live.output.read();
    live.output.finish();
    end_program(&live);
}

/// What a program did while the agent waited.
enum Waited {
    /// It waits at the step at this index.
    Paused(usize),
    Ended,
}

/// Wait for the running (or orphaned) program: its end, or its pause at a step.
fn wait(live: &mut Live<'_>) -> Waited {
    loop {
        if let Some(h) = pause_record(live) {
            if let Some(at) = live
                .files
                .iter()
                .position(|f| stem(f).as_deref() == Some(&h))
            {
                return Waited::Paused(at);
            }
            // A step before this segment (finished, or failed, in the journal).
            let status = live.answers.get(&h).copied().unwrap_or(1);
            answer(live, status);
            continue;
        }
        if let Some(r) = &mut live.running {
            match r.wait_for(PAUSE_POLL) {
                Ok(None) => continue,
                Ok(Some(status)) => {
                    tracing::debug!(list = live.list, "program's supervisor ended: {status}");
                }
                Err(e) => tracing::warn!(list = live.list, "program's supervisor: {e}"),
            }
            live.running = None;
            return Waited::Ended;
        }
        if !live.orphan {
            return Waited::Ended;
        }
        // An orphan's supervisor holds the lock until it has recorded the status.
        match commands::try_lock(&live.lock, live.list) {
            Ok(true) | Err(_) => {
                live.orphan = false;
                return Waited::Ended;
            }
            Ok(false) => std::thread::sleep(PAUSE_POLL),
        }
    }
}

/// The `<h>` of the step the program waits at (its `<p>.at` record).
fn pause_record(live: &Live<'_>) -> Option<String> {
    let text = String::from_utf8_lossy(&commands::read_small(
        &live.prog.rc.with_extension("at"),
        64,
    )?)
    .into_owned();
    Some(text.trim().to_string()).filter(|h| !h.is_empty())
}

/// Tell the waiting program `status` through its answer pipe (non-blocking: the shell holds
/// it open for reading while it waits). The pause record goes first, so the next pause is
/// never taken for this one.
fn answer(live: &mut Live<'_>, status: i32) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(live.prog.rc.with_extension("at"));
    let ack = live.prog.rc.with_extension("ack");
    let t = std::time::Instant::now();
    loop {
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&ack);
        match opened {
            Ok(mut f) => {
                let _ = writeln!(f, "{status}");
                return;
            }
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) && t.elapsed() < ANSWER_WAIT => {
                // Not reading yet (it is between its record and its read), or gone.
                if let Some(r) = &mut live.running
                    && !matches!(r.wait_for(Duration::from_millis(10)), Ok(None))
                {
                    live.running = None;
                    return;
                }
                if live.running.is_none() && !live.orphan {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                tracing::warn!(
                    list = live.list,
                    "cannot answer the {} program: {e}",
                    live.list
                );
                return;
            }
        }
    }
}

/// Remove a previous program's pause record and answer pipe (no program runs).
fn clear_pause(prog: &Files) {
    let _ = std::fs::remove_file(prog.rc.with_extension("at"));
    let _ = std::fs::remove_file(prog.rc.with_extension("ack"));
}

/// Resolve, start and wait until every step of the segment is resolved, or the program
/// waits at a step the main loop runs (then it lives on in `ctx.live`).
fn drive<'p>(ctx: &mut Ctx<'p>, mut live: Live<'p>) -> Result<Vec<ItemEnd>> {
    let mut ends = Vec::new();
    // Each round resolves a step, or starts a program, or counts a restart.
    let bound = 3 * live.steps.len() + MAX_RESTARTS as usize + 4;
    for _round in 0..bound {
        if live.running.is_some() || live.orphan {
            let waited = wait(&mut live);
            live.output.read();
            if let Waited::Paused(at) = waited {
                resolve(&mut live, &mut ends, Some(at))?;
                if live.pos == at {
                    ctx.live = Some(live);
                    return Ok(ends);
                }
                // It waits at a step before the one we are at: answer it, as `finish` does.
                answer(&mut live, 1);
                continue;
            }
            live.output.finish();
            live.interrupted = commands::read_rc(&live.prog.rc).is_none();
            if live.interrupted {
                tracing::warn!(
                    list = live.list,
                    "the {} program's supervisor was killed: its status was not recorded",
                    live.list
                );
            }
        }
        resolve(&mut live, &mut ends, None)?;
        let Some(step) = live.steps.get(live.pos).copied() else {
            break;
        };
        let Action::Command(spec) = &step.action else {
            break; // the kubeadm step, with no program waiting there: the main loop runs it
        };
        if let Some(status) = commands::read_rc(&live.prog.rc) {
            // The program ended inside this item without recording it: a signal, its
            // timeout, or an item that replaced the EXIT trap. A timeout fails the item and
            // the items after it go on from the state before it; else it ended the program.
            let ended = status != crate::base::supervise::TIMED_OUT;
            write_record(&live.files[live.pos].rc, status, ended, &step.id)?;
            let _ = std::fs::remove_file(&live.prog.rc);
            continue;
        }
        if std::mem::take(&mut live.interrupted) {
            live.restarts += 1;
            if live.restarts > MAX_RESTARTS {
                let e = Error::of(
                    ErrorKind::CommandFailed,
                    Stage::Apply,
                    &step.id,
                    format!(
                        "command `{}`: the {} program's supervisor was killed {} times while it ran; \
                         it has no recorded status and runs again on the next run",
                        commands::shown(&spec.run),
                        live.list,
                        live.restarts
                    ),
                );
                ends.push(ItemEnd {
                    interrupted: true,
                    ..ItemEnd::new(&step.id, Err(e), false)
                });
                break;
            }
            tracing::warn!(step = %step.id, "starting the {} program again from this item (restart {} of {MAX_RESTARTS})", live.list, live.restarts);
        }
        start(ctx, &mut live)?;
    }
    end_program(&live);
    Ok(ends)
}

/// Take what the records say from `live.pos` on, up to the next step without one (or up to
/// `upto`, the step the program waits at).
fn resolve(live: &mut Live<'_>, ends: &mut Vec<ItemEnd>, upto: Option<usize>) -> Result<()> {
    let stop = upto.unwrap_or(live.steps.len());
    while live.pos < stop {
        let i = live.pos;
        let step = live.steps[i];
        let Action::Command(spec) = &step.action else {
            return Ok(());
        };
        let rec = match read_record(&live.files[i].rc) {
            Some(rec) => rec,
            // Part of a unit recorded under a later item of it (script.rs), before the
            // next step that is not an item.
            None if unit_recorded_after(live, i, stop) => {
                ends.push(ItemEnd::new(&step.id, Ok(Outcome::Ok), false));
                live.pos += 1;
                continue;
            }
            None => return Ok(()),
        };
        let tail = live.output.tail_of(&live.files[i]);
        let result = recorded(step, spec, rec, i < live.ran_from, live.timeout, &tail);
        ends.push(ItemEnd::new(&step.id, result, rec.1));
        live.pos += 1;
        if rec.1 {
            for s in &live.steps[live.pos..] {
                if matches!(s.action, Action::Command(_)) {
                    tracing::info!(step = %s.id, "not run: an earlier item ended the {} program", live.list);
                    ends.push(ItemEnd::new(&s.id, Ok(Outcome::NotRun), false));
                }
            }
            live.pos = live.steps.len();
        }
    }
    Ok(())
}

/// Whether an item after `i` and before `stop` (and before any step that is not an item)
/// has a record: then item `i` belonged to its unit.
fn unit_recorded_after(live: &Live<'_>, i: usize, stop: usize) -> bool {
    (i + 1..stop)
        .take_while(|&j| matches!(live.steps[j].action, Action::Command(_)))
        .any(|j| read_record(&live.files[j].rc).is_some())
}

/// The result of an item with its status `rc` recorded (by a killed run's program when
/// `earlier`).
fn recorded(
    step: &Step,
    c: &CommandSpec,
    (rc, ended): (i32, bool),
    earlier: bool,
    timeout: u64,
    tail: &[String],
) -> Result<Outcome> {
    match rc {
        0 if earlier => {
            tracing::info!(step = %step.id, "command had finished before the previous run was killed; not run again");
            Ok(Outcome::Adopted)
        }
        0 => Ok(Outcome::Ok),
        _ => Err(item_failure(&step.id, c, rc, ended, timeout, tail)),
    }
}

/// The one timeout of a program: the sum of its items' (0 = none) and of the kubeadm
/// steps' bounds, cut to the run's deadline.
fn program_timeout(ctx: &Ctx<'_>, steps: &[&Step]) -> u64 {
    let own = |s: &Step| match &s.action {
        Action::Command(c) if c.timeout_secs == 0 => ctx.opts.config.command_timeout_secs,
        Action::Command(c) => c.timeout_secs,
        _ => {
            let k = &ctx.opts.config.kubeadm;
            k.timeout_secs.max(k.join_deadline_secs)
                + k.endpoint_wait_secs
                + crate::base::limits::KUBEADM_RESET_TIMEOUT_SECS
                + 60
        }
    };
    let total = if steps.iter().any(|s| own(s) == 0) {
        0
    } else {
        steps.iter().map(|s| own(s)).sum()
    };
    match crate::base::process::run_time_left() {
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
            Error::invalid(
                Stage::Apply,
                p.display().to_string(),
                "state outside the root",
            )
        })?)
    };
    rel.to_str()
        .map(str::to_string)
        .ok_or_else(|| Error::invalid(Stage::Apply, p.display().to_string(), "path is not UTF-8"))
}

/// Write the program for the steps from `live.pos` on (script.rs) and start it under its
/// supervisor.
fn start(ctx: &mut Ctx<'_>, live: &mut Live<'_>) -> Result<()> {
    let from = live.pos;
    let _ = std::fs::remove_file(&live.prog.rc);
    commands::reap_orphan_group(&live.prog.rc);
    clear_pause(&live.prog);
    let steps = &live.steps[from..];
    let mut prefixes = Vec::new();
    for (step, fl) in steps.iter().zip(&live.files[from..]) {
        for ext in ["rc", "vars", "env"] {
            let _ = std::fs::remove_file(fl.rc.with_extension(ext));
        }
        prefixes.push(inside(ctx, &fl.rc.with_extension(""))?);
        if let Action::Command(c) = &step.action {
            super::begin(ctx, step, None)?;
            tracing::info!(step = %step.id, command = %commands::shown(&c.run), "command queued in its list's program");
        }
    }
    // The state the recorded items before it left, and the status of the step right
    // before it (`$?` of its first item).
    let earlier: Vec<&Step> = earlier_items(ctx, live.steps[0])
        .into_iter()
        .chain(live.steps[..from].iter().copied())
        .filter(|s| matches!(s.action, Action::Command(_)))
        .collect();
    let mut resume = Resume {
        vars: None,
        status: 0,
    };
    match from.checked_sub(1).map(|i| live.steps[i]) {
        Some(k) if !matches!(k.action, Action::Command(_)) => {
            resume.status = i32::from(!ctx.journal.is_done(&k.id, false));
        }
        _ => {
            if let Some(last) = earlier.last() {
                let fl = commands::files_for(ctx, last)?;
                resume.status = read_record(&fl.rc).map_or(0, |r| r.0);
            }
        }
    }
    for s in earlier.iter().rev() {
        let vars = commands::files_for(ctx, s)?.rc.with_extension("vars");
        if vars.exists() {
            resume.vars = Some(inside(ctx, &vars)?);
            break;
        }
    }
    let parts: Vec<Part<'_>> = steps
        .iter()
        .map(|s| match &s.action {
            Action::Command(c) => Part::Item(&c.run),
            _ => Part::Pause,
        })
        .collect();
    let iid = ctx.plan.instance_id.clone();
    // cc_bootcmd runs its script with INSTANCE_ID in the environment.
    let env: Vec<(&str, &str)> = match live.list {
        "bootcmd" => vec![("INSTANCE_ID", iid.as_str())],
        _ => Vec::new(),
    };
    let program_prefix = inside(ctx, &live.prog.rc.with_extension(""))?;
    let program = script::build(&parts, &prefixes, &program_prefix, &resume, &env);
    live.output.restart();
    let script_file = live.prog.rc.with_extension("sh");
    crate::base::fsio::write_atomic(
        &script_file,
        program.text.as_bytes(),
        &crate::base::fsio::Options::new(0o600),
    )
    .map_err(|e| {
        Error::caused(Stage::Apply, live.list, e).map_message(|_| "cannot write its script".into())
    })?;
    if steps[..program.parts]
        .iter()
        .any(|s| !matches!(s.action, Action::Command(_)))
    {
        make_fifo(&live.prog.rc.with_extension("ack"), live.list)?;
    }
    live.timeout = program_timeout(ctx, &steps[..program.parts]);
    live.ran_from = live.ran_from.min(from);
    let argv = vec!["/bin/sh".into(), inside(ctx, &script_file)?.into()];
    let place = steps.first().map_or(live.list, |s| s.id.as_str());
    live.running = Some(commands::start_program(
        ctx,
        place,
        &live.prog,
        &live.lock,
        argv,
        live.timeout,
    )?);
    Ok(())
}

/// The answer pipe of a program that pauses (0600, in the 0700 state directory).
fn make_fifo(path: &Path, place: &str) -> Result<()> {
    let _ = std::fs::remove_file(path);
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(|e| Error::io(Stage::Apply, place, "answer pipe", std::io::Error::from(e)))
}

/// The program is over: its status, script, output and pause files go (the script and the
/// output may hold secrets).
fn end_program(live: &Live<'_>) {
    for ext in ["rc", "sh", "out", "at", "ack"] {
        let _ = std::fs::remove_file(live.prog.rc.with_extension(ext));
    }
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
    let why = if rc == crate::base::supervise::TIMED_OUT && !ended {
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
    let kind = if rc == crate::base::supervise::TIMED_OUT && !ended {
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
