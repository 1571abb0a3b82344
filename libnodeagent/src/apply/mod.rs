//! Executes a Plan step by step with the journal.
//!
//! One loop (`apply`) walks the plan's steps of the chosen stage in order, skips what the
//! instance journal says is finished, runs the rest through one executor per `Action`, and
//! records each finished step. The first failing step stops the run with an error naming it;
//! earlier steps stay finished, later ones untouched.
//!
//! Crash safety: every step is either idempotent (atomic file replacement, user/group steps
//! that check the user database first, hostname, network) or guarded:
//! * appends record the expected result hash before replacing the file (`files.rs`);
//! * per-instance commands are supervised so their exit status survives the agent
//!   (`commands.rs`): a command that succeeded is never started again.

pub mod accounts;
pub mod authkeys;
pub mod commands;
pub mod disks;
pub mod files;
pub mod grow;
pub mod homes;
pub mod hostname;
mod listout;
pub mod ntp;
pub mod password;
pub mod runtime;
pub mod script;
pub mod shell;
pub mod users;

use crate::base::error::{Error, Result, Stage};
use crate::base::state::{DoneResult, Event, Journal, RunResult};
use crate::plan::{Action, FileWrite, Frequency, KubeadmSpec, Plan, RunStage, Step};
use crate::report::{Phase, Reporter};
use crate::source::config::ImageConfig;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

// Cluster API's success sentinel (written by the kubeadm step).
use crate::kubeadm::detect::SENTINEL;

/// Where the agent acts: `/` on a node, `--root DIR` in tests and dry runs.
#[derive(Debug, Clone)]
pub struct Target {
    pub root: PathBuf,
}

impl Target {
    /// A relative root is made absolute: commands run with the root as their working
    /// directory, so every path handed to them must not depend on the agent's own.
    pub fn new(root: &Path) -> Target {
        let root = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
        Target { root }
    }

    pub fn is_host(&self) -> bool {
        self.root == Path::new("/")
    }

    /// Host path of the absolute in-target path `abs` (confine.rs): under `--root`, symlinks in
    /// the parent directories are resolved inside the root (an absolute link `/var/run -> /run`
    /// stays in DIR, as in a chroot); the final component is returned unresolved, never followed.
    pub fn path(&self, abs: &str) -> Result<PathBuf> {
        Target::check(abs)?;
        crate::base::confine::file(&self.root, abs).map_err(|e| Error::io(Stage::Apply, abs, "", e))
    }

    /// `abs` is an absolute in-target path without `..` or NUL.
    pub fn check(abs: &str) -> Result<()> {
        if !abs.starts_with('/') || abs.contains('\0') {
            return Err(Error::invalid(Stage::Apply, abs, "not an absolute path"));
        }
        if abs.split('/').any(|c| c == "..") {
            return Err(Error::invalid(Stage::Apply, abs, "path contains `..`"));
        }
        Ok(())
    }
}

/// Users and groups of the target (`DIR/etc/passwd`, `DIR/etc/group`), parsed directly so
/// `--root` never consults the host's database.
#[derive(Debug, Clone, Default)]
pub struct UserDb {
    /// name -> (uid, gid, home)
    pub users: HashMap<String, (u32, u32, String)>,
    pub groups: HashMap<String, (u32, Vec<String>)>,
}

impl UserDb {
    pub fn load(t: &Target) -> Result<UserDb> {
        let mut db = UserDb::default();
        let read = |p: &str| -> Result<String> {
            let path = t.path(p)?;
            match std::fs::read_to_string(&path) {
                Ok(s) => Ok(s),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
                Err(e) => Err(Error::io(Stage::Apply, path.display().to_string(), "", e)),
            }
        };
        for line in read("/etc/passwd")?.lines() {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() >= 7
                && let (Ok(uid), Ok(gid)) = (f[2].parse(), f[3].parse())
            {
                db.users
                    .insert(f[0].to_string(), (uid, gid, f[5].to_string()));
            }
        }
        for line in read("/etc/group")?.lines() {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() >= 4
                && let Ok(gid) = f[2].parse()
            {
                let members = f[3]
                    .split(',')
                    .filter(|m| !m.is_empty())
                    .map(String::from)
                    .collect();
                db.groups.insert(f[0].to_string(), (gid, members));
            }
        }
        Ok(db)
    }

    /// uid of a user name; `root` is 0 even in a root without /etc/passwd.
    pub fn uid(&self, name: &str) -> Option<u32> {
        self.users
            .get(name)
            .map(|u| u.0)
            .or((name == "root").then_some(0))
    }

    pub fn gid(&self, name: &str) -> Option<u32> {
        self.groups
            .get(name)
            .map(|g| g.0)
            .or((name == "root").then_some(0))
    }

    pub fn home(&self, name: &str) -> Option<&str> {
        self.users.get(name).map(|u| u.2.as_str())
    }
}

pub struct Options {
    pub target: Target,
    /// Which steps `run --stage` executes.
    pub stage: RunStage,
    /// Run commands, disk tools, kubeadm and service restarts (always on a real node).
    pub exec: bool,
    pub compat: bool,
    pub config: ImageConfig,
    /// The nodeagent binary that supervises commands (`__supervise`): `/proc/self/exe` for the
    /// CLI; tests that apply in-process name the built binary.
    pub supervisor: PathBuf,
    /// Supervise commands in a forked child of this process instead (no exec of the binary):
    /// only where no other thread can hold a lock the child needs (`process::run_forked`);
    /// the CLI sets it when it runs single-threaded.
    pub fork_supervisor: bool,
    /// The run's end is this apply's end: its `run-end` record is synced. False for the local
    /// half of `--stage all`, whose records the main half's syncs cover.
    pub ends_run: bool,
    /// The container runtime's readiness, asked for when the stage started (runtime.rs).
    pub runtime: runtime::Wait,
}

/// What happened to each step of one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Steps executed in this run.
    pub ran: Vec<String>,
    /// Steps recorded `skipped`: commands, disk tools, kubeadm without `--exec`.
    pub skipped: Vec<String>,
    /// Steps the journal already had as finished.
    pub already: Vec<String>,
    pub warnings: Vec<String>,
}

/// How many steps a run executed, recorded as skipped (no `--exec`) and found finished
/// earlier: what `run`'s closing line and the final status say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunCounts {
    pub ran: usize,
    pub skipped: usize,
    pub already: usize,
}

impl RunCounts {
    /// `12 steps done, 3 skipped (commands and disk tools run only on the node itself or with --exec), 0 already
    /// finished earlier`.
    pub fn summary(&self) -> String {
        let mut s = format!("{} steps done", self.ran);
        if self.skipped > 0 {
            s.push_str(&format!(
                ", {} skipped (commands and disk tools run only on the node itself or with --exec)",
                self.skipped
            ));
        }
        s.push_str(&format!(", {} already finished earlier", self.already));
        s
    }

    /// The status note of a run that executed nothing, so `done` does not read as "it all
    /// ran"; `None` when something ran.
    pub fn nothing_executed(&self) -> Option<String> {
        if self.ran > 0 {
            return None;
        }
        Some(match (self.skipped, self.already) {
            (0, 0) => "nothing to do: the plan has no steps for this stage".into(),
            (0, a) => format!("nothing executed: all {a} steps had finished earlier"),
            (k, a) => {
                format!(
                    "nothing executed: {k} steps skipped (not on the node itself, no --exec), {a} finished earlier"
                )
            }
        })
    }
}

/// Execution context shared by the executors.
pub struct Ctx<'a> {
    pub opts: &'a Options,
    /// The whole plan: the kubeadm step writes its files again after a `kubeadm reset`.
    plan: &'a Plan,
    pub journal: &'a mut Journal,
    db: Option<UserDb>,
    /// Non-fatal findings of steps that never fail the run (growpart, resizefs), and what a
    /// step let fail the way cloud-init lets a module fail (warn, carry on): the run ends
    /// `degraded` with these reasons.
    pub warnings: Vec<String>,
    /// A list's program waiting at the kubeadm step the loop runs meanwhile (shell.rs).
    live: Option<shell::Live<'a>>,
}

impl Ctx<'_> {
    pub fn target(&self) -> &Target {
        &self.opts.target
    }
    /// The target's user database, re-read after user and group steps changed it.
    pub fn db(&mut self) -> Result<&UserDb> {
        if self.db.is_none() {
            self.db = Some(UserDb::load(&self.opts.target)?);
        }
        Ok(self.db.as_ref().expect("just loaded"))
    }
    pub fn invalidate_db(&mut self) {
        self.db = None;
    }
    /// Before the first runcmd item or kubeadm: the container runtime (runtime.rs).
    pub fn await_runtime(&mut self) {
        if let Some(why) = self.opts.runtime.finish() {
            self.warn(why);
        }
    }
    /// A problem cloud-init only warns about: logged now, reported as `degraded` at the end.
    pub fn warn(&mut self, msg: String) {
        tracing::warn!("{msg}");
        self.warnings.push(msg);
    }
}

/// Result of one executor: done, or done without doing anything (no `--exec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Skipped,
    /// A supervised command had already finished successfully before a crash.
    Adopted,
    /// Not run: an earlier item of its list ended the list's program (`exit`), as in
    /// cloud-init's one script (shell.rs).
    NotRun,
}

impl Outcome {
    fn result(self) -> DoneResult {
        match self {
            Outcome::Ok => DoneResult::Ok,
            Outcome::Skipped => DoneResult::Skipped,
            Outcome::Adopted => DoneResult::Adopted,
            Outcome::NotRun => DoneResult::NotRun,
        }
    }
}

/// Order of execution: plan order, except that `defer: true` files move right after the last
/// user/group step (cloud-init's `write_files_deferred` runs after `users_groups`).
pub fn order(steps: &[&Step]) -> Vec<usize> {
    let last_user = steps
        .iter()
        .rposition(|s| matches!(s.action, Action::User(_) | Action::Group(_)));
    let deferred = |s: &Step| matches!(&s.action, Action::WriteFile(f) if f.defer);
    let mut out = Vec::with_capacity(steps.len());
    for (i, s) in steps.iter().enumerate() {
        match last_user {
            Some(lu) if deferred(s) && i < lu => {}
            _ => out.push(i),
        }
        if Some(i) == last_user {
            out.extend((0..i).filter(|&j| deferred(steps[j])));
        }
    }
    out
}

/// Steps whose effect is not simply "make the target look like X": their `begin` is fsynced.
fn needs_durable_begin(a: &Action) -> bool {
    !matches!(
        a,
        Action::WriteFile(_) | Action::Hostname(_) | Action::Network(_)
    )
}

/// Whether a finished step's `done` is synced at once. A `skipped` record (no --exec)
/// finishes nothing; an idempotent write is done again if its record is lost; the record of
/// the run's last step is synced with the run's end, appended right after it.
fn durable_done(step: &Step, outcome: Outcome, ends_the_run: bool) -> bool {
    needs_durable_begin(&step.action) && outcome != Outcome::Skipped && !ends_the_run
}

fn is_runcmd_like(a: &Action) -> bool {
    match a {
        Action::Command(c) => c.origin.starts_with("runcmd"),
        Action::Kubeadm(_) => true,
        _ => false,
    }
}

/// Execute the plan's steps of `opts.stage`, journaled. The instance journal must belong to
/// `plan.instance_id`.
pub fn apply(
    plan: &Plan,
    opts: &Options,
    journal: &mut Journal,
    reporter: &mut Reporter<'_>,
) -> Result<Summary> {
    let steps: Vec<&Step> = plan
        .steps
        .iter()
        .filter(|s| opts.stage.includes(s.stage))
        .collect();
    let mut summary = Summary {
        warnings: plan.warnings.clone(),
        ..Default::default()
    };
    let run_started = Instant::now();
    let took_lock = commands::hold_run_lock(&crate::base::state::state_dir(&opts.target.root)?)?;
    let release = || {
        if took_lock {
            commands::release_run_lock();
        }
    };
    // A run that held the lock before us may have finished steps (an append!) since our
    // journal was read: read it again under the lock. A caller that held the lock already
    // (`run`) opened the journal under it.
    if took_lock && let Err(e) = journal.reopen() {
        release();
        return Err(e);
    }
    let res = apply_locked(
        plan,
        opts,
        journal,
        reporter,
        steps,
        &mut summary,
        run_started,
    );
    release();
    // The local stage is over (the local unit, or the local half of `--stage all`).
    if opts.stage == RunStage::Local && res.is_ok() {
        reporter.end_local_stage();
    }
    res.map(|()| summary)
}

fn record_done(
    ctx: &mut Ctx<'_>,
    step: &Step,
    ms: f64,
    result: DoneResult,
    durable: bool,
) -> Result<()> {
    let r = ctx.journal.record(Event::Done {
        step: step.id.clone(),
        stage: step.stage,
        frequency: step.frequency,
        duration_ms: (ms * 1000.0).round() / 1000.0,
        result,
    });
    ctx.journal.append(r, durable)?;
    // Plain values, rounded to 0.1 ms: a log line, not Debug forms or 15-digit measurements.
    tracing::info!(step = %step.id, result = %result.as_str(), duration_ms = (ms * 10.0).round() / 10.0, "step done");
    Ok(())
}

/// A plain (not append) file write the journal has not finished: can join a batch.
fn batchable(ctx: &Ctx<'_>, s: &Step) -> bool {
    matches!(&s.action, Action::WriteFile(f) if !f.append && f.source.is_none())
        && !ctx
            .journal
            .is_done(&s.id, s.frequency == Frequency::PerBoot)
}

const MAX_BATCH: usize = 64;

/// Consecutive plain file writes are staged one by one (owner and mode before the first byte,
/// as always) and committed together: one data sync and one sync per directory instead of two
/// fsyncs per file. Returns how many steps finished, and the error of the one that failed.
fn file_batch(ctx: &mut Ctx<'_>, batch: &[&Step]) -> (usize, Option<Error>) {
    let t = ctx.target().clone();
    let db = match ctx.db() {
        Ok(db) => db.clone(),
        Err(e) => return (0, Some(e)),
    };
    let mut staged = Vec::new();
    let mut failure = None;
    // One set of directories for the batch: nothing but the batch's own writes runs in
    // between, and they make only directories and files, never links.
    let mut dirs = files::Dirs::default();
    for step in batch {
        let Action::WriteFile(f) = &step.action else {
            unreachable!("batchable")
        };
        if let Err(e) = begin(ctx, step, None) {
            failure = Some(e);
            break;
        }
        tracing::info!(step = %step.id, phase = "applying", "step start");
        match files::stage_in(&t, f, &f.content.0, &db, &mut dirs) {
            Ok(s) => staged.push(s),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let n = staged.len();
    if let Err(e) = files::commit(staged) {
        // Which file's rename failed is in the error's place; none of the batch is recorded.
        return (0, Some(e));
    }
    (n, failure)
}

fn apply_locked(
    plan: &Plan,
    opts: &Options,
    journal: &mut Journal,
    reporter: &mut Reporter<'_>,
    steps: Vec<&Step>,
    summary: &mut Summary,
    run_started: Instant,
) -> Result<()> {
    journal.append(journal.record(Event::RunStart { stage: opts.stage }), false)?;
    reporter.phase(Phase::Applying, None);
    let mut ctx = Ctx {
        opts,
        plan,
        journal,
        db: None,
        warnings: Vec::new(),
        live: None,
    };
    let res = run_steps(&mut ctx, reporter, &steps, summary, run_started);
    // A program still waiting at the kubeadm step gets its answer and is waited for.
    shell::finish(&mut ctx);
    res
}

fn run_steps<'p>(
    ctx: &mut Ctx<'p>,
    reporter: &mut Reporter<'_>,
    steps: &[&'p Step],
    summary: &mut Summary,
    run_started: Instant,
) -> Result<()> {
    let opts = ctx.opts;
    let stage = opts.stage;
    let plan = ctx.plan;
    let order = order(steps);
    let mut pos = 0;
    // A failed kubeadm step that later runcmd items still follow (see `carry_on`).
    let mut deferred: Option<(&Step, Error, f64)> = None;
    // What the items of a list's program ended with (`run_list`), taken as the loop gets there.
    let mut queued: HashMap<String, shell::ItemEnd> = HashMap::new();
    while pos < order.len() {
        let step = steps[order[pos]];
        if !starts(ctx, step, summary, reporter) {
            pos += 1;
            continue;
        }
        let started = Instant::now();
        let mut interrupted = false;
        let (res, batch_len, ended) = if batchable(ctx, step) {
            let batch = batch_at(ctx, steps, &order, pos);
            let (ok, failure) = file_batch(ctx, &batch);
            let ms = started.elapsed().as_secs_f64() * 1000.0 / batch.len() as f64;
            for s in &batch[..ok] {
                record_done(ctx, s, ms, DoneResult::Ok, false)?;
                summary.ran.push(s.id.clone());
            }
            pos += ok;
            let Some(e) = failure else { continue };
            (Err(e), 1, false)
        } else if let Some(end) = shell::run_list(ctx, steps, &order, pos, &mut queued) {
            interrupted = end.interrupted;
            (end.result, 1, end.ended)
        } else {
            tracing::info!(step = %step.id, instance_id = %plan.instance_id, phase = "applying", "step start");
            (run_step(step, ctx, reporter), 1, false)
        };
        let step = steps[order[pos]];
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        summary.warnings.append(&mut ctx.warnings);
        match res {
            Ok(outcome) => {
                let last = pos + batch_len == order.len() && deferred.is_none();
                let durable = durable_done(step, outcome, last && opts.ends_run);
                record_done(ctx, step, ms, outcome.result(), durable)?;
                let counted = match outcome {
                    Outcome::Skipped => &mut summary.skipped,
                    _ => &mut summary.ran,
                };
                counted.push(step.id.clone());
                pos += batch_len;
            }
            Err(e) => {
                let later_runcmd = !ended
                    && order[pos + 1..]
                        .iter()
                        .any(|&j| is_runcmd_like(&steps[j].action));
                // An item without a recorded status (its supervisor killed each time) is
                // not carried on: the run stops, and the next one runs it again.
                let how = match interrupted {
                    true => CarryOn::No,
                    false => carry_on(&step.action, later_runcmd),
                };
                match how {
                    CarryOn::No => {
                        not_run_after(ctx, steps, &order, pos, ended)?;
                        return Err(fail(ctx, reporter, stage, run_started, step, e, ms));
                    }
                    CarryOn::Warn => carried_on(ctx, summary, (steps, &order, pos), &e, ms)?,
                    CarryOn::FailAtEnd => {
                        // The later runcmd items run first, as in cloud-init's one script;
                        // the run still ends `failed` with this step's error.
                        let reason = crate::base::redact::redact_text(&e.to_string());
                        tracing::error!(step = %step.id, "{reason} (the later runcmd items run first)");
                        deferred.get_or_insert((step, e, ms));
                    }
                }
                pos += 1;
            }
        }
    }
    if let Some((step, e, ms)) = deferred {
        summary.warnings.append(&mut ctx.warnings);
        return Err(fail(ctx, reporter, stage, run_started, step, e, ms));
    }
    summary.warnings.append(&mut ctx.warnings);
    let r = ctx.journal.record(Event::RunEnd {
        stage,
        duration_ms: run_started.elapsed().as_secs_f64() * 1000.0,
        result: RunResult::Ok,
    });
    ctx.journal.append(r, opts.ends_run)?;
    Ok(())
}

/// Whether `step` runs now (the journal does not have it as finished); then cloud-init's
/// status moves on to the stage whose modules it belongs to.
fn starts(ctx: &Ctx<'_>, step: &Step, summary: &mut Summary, reporter: &mut Reporter<'_>) -> bool {
    if already_done(ctx, step, summary) {
        return false;
    }
    reporter.cloud_init_step(&step.id);
    true
}

/// Whether the journal has `step` as finished (counted as such in `summary`).
fn already_done(ctx: &Ctx<'_>, step: &Step, summary: &mut Summary) -> bool {
    let done = ctx
        .journal
        .is_done(&step.id, step.frequency == Frequency::PerBoot);
    if done {
        summary.already.push(step.id.clone());
    }
    done
}

/// When `exit N` in the item at `order[pos]` ended its list (`ended`): what follows in the
/// list is journaled as done, not run (the run fails right after; a later run would not run
/// them either).
fn not_run_after(
    ctx: &mut Ctx<'_>,
    steps: &[&Step],
    order: &[usize],
    pos: usize,
    ended: bool,
) -> Result<()> {
    if !ended {
        return Ok(());
    }
    let list = shell::list_of(&steps[order[pos]].action);
    for &j in &order[pos + 1..] {
        let s = steps[j];
        let per_boot = s.frequency == Frequency::PerBoot;
        if shell::list_of(&s.action) == list && !ctx.journal.is_done(&s.id, per_boot) {
            record_done(ctx, s, 0.0, DoneResult::NotRun, false)?;
        }
    }
    Ok(())
}

/// The plain file writes that run as one batch from `order[pos]` (itself one): the following
/// ones up to MAX_BATCH, stopping at another kind of step or a second write of the same path.
fn batch_at<'s>(ctx: &Ctx<'_>, steps: &[&'s Step], order: &[usize], pos: usize) -> Vec<&'s Step> {
    let step = steps[order[pos]];
    let mut batch: Vec<&Step> = vec![step];
    let mut seen = vec![match &step.action {
        Action::WriteFile(f) => f.path.as_str(),
        _ => "",
    }];
    while let Some(&j) = order.get(pos + batch.len()) {
        let s = steps[j];
        let Action::WriteFile(f) = &s.action else {
            break;
        };
        if batch.len() >= MAX_BATCH || !batchable(ctx, s) || seen.contains(&f.path.as_str()) {
            break;
        }
        seen.push(f.path.as_str());
        batch.push(s);
    }
    batch
}

/// A failed step the run carries on after (`CarryOn::Warn`), `steps[order[pos]]`: warned,
/// journaled `failed-ignored`, counted as run; a user or group ends the users_groups module.
fn carried_on(
    ctx: &mut Ctx<'_>,
    summary: &mut Summary,
    (steps, order, pos): (&[&Step], &[usize], usize),
    e: &Error,
    ms: f64,
) -> Result<()> {
    let step = steps[order[pos]];
    let msg = format!("step {}: {} ({})", step.id, e, carry_on_reason(step));
    tracing::warn!(step = %step.id, "{msg}");
    summary
        .warnings
        .push(crate::base::redact::redact_text(&msg));
    record_done(ctx, step, ms, DoneResult::FailedIgnored, true)?;
    summary.ran.push(step.id.clone());
    users::module_ended(ctx, steps, order, pos)
}

/// What a failed step means for the rest of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CarryOn {
    /// The run stops here, `failed`.
    No,
    /// Logged; the run carries on and ends `degraded` with the error.
    Warn,
    /// The run carries on, then ends `failed` with this error.
    FailAtEnd,
}

/// A failed user, group or root-keys step carries on (`degraded`), as cloud-init carries on
/// after its users_groups or ssh module fails (`users_module_ended`).
/// cloud-init runs `bootcmd` and `runcmd` each as one shell script without `set -e`: a failing
/// item does not stop the items after it; only the script's last status fails the module, and
/// a failed module does not stop the boot (bootcmd's later modules, runcmd's later items, all
/// still run). So: a failing bootcmd item, or a runcmd item that later runcmd items follow,
/// carries on, the run ending `degraded` (the item named); a failed kubeadm step that later
/// runcmd items (postKubeadmCommands) follow lets them run, then ends the run `failed`. The
/// last runcmd item failing ends the run `failed`, as cloud-init's status says `error`.
fn carry_on(a: &Action, later_runcmd: bool) -> CarryOn {
    match a {
        Action::User(_) | Action::Group(_) | Action::SshKeys(_) => CarryOn::Warn,
        Action::Command(c) if c.origin.starts_with("bootcmd") => CarryOn::Warn,
        Action::Command(c) if c.origin.starts_with("runcmd") && later_runcmd => CarryOn::Warn,
        Action::Kubeadm(_) if later_runcmd => CarryOn::FailAtEnd,
        _ => CarryOn::No,
    }
}

fn carry_on_reason(step: &Step) -> &'static str {
    match &step.action {
        Action::User(_) | Action::Group(_) => {
            "carried on: cloud-init logs a failed user or group, skips the rest of users_groups and boots on"
        }
        Action::SshKeys(_) => {
            "carried on: cloud-init logs a failure to write the keys and boots on"
        }
        Action::Command(c) if c.origin.starts_with("bootcmd") => {
            "carried on: cloud-init runs bootcmd as one script and boots on when it fails"
        }
        _ => "carried on: cloud-init runs runcmd as one script, the later items still run",
    }
}

/// Journal and report a step's failure and end the run `failed`: the error to return.
fn fail(
    ctx: &mut Ctx<'_>,
    reporter: &mut Reporter<'_>,
    stage: RunStage,
    run_started: Instant,
    step: &Step,
    e: Error,
    ms: f64,
) -> Error {
    let reason = crate::base::redact::redact_text(&e.to_string());
    let r = ctx.journal.record(Event::Failed {
        step: step.id.clone(),
        stage: step.stage,
        duration_ms: ms,
        error: reason.clone(),
    });
    let _ = ctx.journal.append(r, true);
    tracing::error!(step = %step.id, phase = "failed", "{reason}");
    reporter.failed(&step.id, e.kind(), &reason, &[]);
    let r = ctx.journal.record(Event::RunEnd {
        stage,
        duration_ms: run_started.elapsed().as_secs_f64() * 1000.0,
        result: RunResult::Failed,
    });
    let _ = ctx.journal.append(r, true);
    let place = format!("step {}", step.id);
    let mut e = e.map_message(|m| crate::base::redact::redact_text(&m));
    e.place = if e.place.is_empty() || e.place == place {
        place
    } else {
        format!("{place}: {}", e.place)
    };
    e
}

fn begin(ctx: &mut Ctx<'_>, step: &Step, expect: Option<String>) -> Result<()> {
    let durable = needs_durable_begin(&step.action) || expect.is_some();
    let r = ctx.journal.record(Event::Begin {
        step: step.id.clone(),
        stage: step.stage,
        frequency: step.frequency,
        expect,
    });
    ctx.journal.append(r, durable)
}

fn run_step(step: &Step, ctx: &mut Ctx<'_>, reporter: &mut Reporter<'_>) -> Result<Outcome> {
    match &step.action {
        Action::WriteFile(f) if f.append => append_file(ctx, step, f),
        Action::WriteFile(f) => begun(ctx, step, |ctx| {
            let t = ctx.target().clone();
            let db = ctx.db()?.clone();
            let (content, warning) = files::content_now(&t, f);
            if let Some(w) = warning {
                ctx.warn(format!("{}: {w}", step.id));
            }
            let Some(content) = content else {
                return Ok(Outcome::Skipped);
            };
            files::write_bytes(&t, f, &content, &db)?;
            Ok(Outcome::Ok)
        }),
        Action::Network(n) => begun(ctx, step, |ctx| {
            let t = ctx.target().clone();
            let db = ctx.db()?.clone();
            files::write_all(&t, &n.files.iter().collect::<Vec<_>>(), &db)?;
            if ctx.opts.exec && n.renderer == "netplan" && t.is_host() {
                commands::run_tool(&t, &["netplan", "generate"], None)?;
            }
            Ok(Outcome::Ok)
        }),
        Action::Hostname(h) => begun(ctx, step, |ctx| hostname::apply(ctx, h)),
        Action::Group(g) => begun(ctx, step, |ctx| {
            let r = users::group(ctx, g);
            ctx.invalidate_db();
            r
        }),
        Action::User(u) => users::step(ctx, step, u),
        Action::SshKeys(k) => begun(ctx, step, |ctx| users::root_keys(ctx, k)),
        Action::Ntp(n) => begun(ctx, step, |ctx| ntp::apply(ctx, n)),
        Action::DiskSetup(d) => begun(ctx, step, |ctx| disks::disk_setup(ctx, d)),
        Action::FsSetup(f) => begun(ctx, step, |ctx| disks::fs_setup(ctx, f)),
        Action::Mounts(m) => begun(ctx, step, |ctx| disks::mounts(ctx, m)),
        Action::Growpart(g) => begun(ctx, step, |ctx| grow::growpart(ctx, g)),
        Action::ResizeFs(r) => begun(ctx, step, |ctx| grow::resizefs(ctx, r)),
        Action::Command(c) => Ok(commands::skip(step, c)),
        Action::Kubeadm(k) => kubeadm_step(ctx, step, k, reporter),
    }
}

/// Journal the step's `begin` (nothing expected of it), then apply it.
fn begun(
    ctx: &mut Ctx<'_>,
    step: &Step,
    apply: impl FnOnce(&mut Ctx<'_>) -> Result<Outcome>,
) -> Result<Outcome> {
    begin(ctx, step, None)?;
    apply(ctx)
}

/// An appended file: adopted when a run killed before recording it had already appended (its
/// `begin` holds the hash the file has once the append is done), else appended.
fn append_file(ctx: &mut Ctx<'_>, step: &Step, f: &FileWrite) -> Result<Outcome> {
    let t = ctx.target().clone();
    let boot = ctx.journal.boot.clone();
    let prior = ctx
        .journal
        .last_begin(&step.id)
        .filter(|r| step.frequency == Frequency::PerInstance || r.boot == boot)
        .and_then(|r| r.event.expect().map(str::to_string));
    // What an append of ours leaves is at most the base's limit plus the entry.
    let max = crate::base::limits::MAX_APPEND_BASE_BYTES as u64
        + f.content
            .0
            .len()
            .max(crate::base::limits::MAX_WRITE_FILES_SOURCE_BYTES) as u64;
    if prior.is_some() && files::current_hash(&t, &f.path, max)? == prior {
        return Ok(Outcome::Adopted);
    }
    let (content, warning) = files::content_now(&t, f);
    if let Some(w) = warning {
        ctx.warn(format!("{}: {w}", step.id));
    }
    let Some(content) = content else {
        return Ok(Outcome::Skipped);
    };
    let full = files::appended(&t, f, &content)?;
    let expect = files::sha256_hex(&full);
    begin(ctx, step, Some(expect))?;
    let db = ctx.db()?.clone();
    files::write_bytes(&t, f, &full, &db)?;
    Ok(Outcome::Ok)
}

/// kubeadm, exactly once: adopted when a killed run's kubeadm had finished, else run under
/// the supervisor with the step's lock.
fn kubeadm_step(
    ctx: &mut Ctx<'_>,
    step: &Step,
    k: &KubeadmSpec,
    reporter: &mut Reporter<'_>,
) -> Result<Outcome> {
    if !ctx.opts.exec {
        tracing::info!(step = %step.id, "kubeadm skipped (no --exec)");
        return Ok(Outcome::Skipped);
    }
    // Killed after kubeadm succeeded but before `done` was journaled: CAPI's sentinel
    // (in /run, so from this boot) written after a `begin` of ours says it finished.
    let sentinel = ctx.target().path(SENTINEL)?;
    let begun_this_boot = ctx
        .journal
        .last_begin(&step.id)
        .is_some_and(|r| r.boot == ctx.journal.boot);
    if k.sentinel && begun_this_boot && sentinel.exists() {
        tracing::info!(step = %step.id, "kubeadm had finished before the previous run was killed (sentinel present); not run again");
        return Ok(Outcome::Adopted);
    }
    // Exactly once, as commands (commands.rs): the step's lock is held by the
    // supervisor of a kubeadm a killed agent started; wait for it, then adopt its
    // success instead of starting kubeadm a second time.
    let fl = commands::files_for(ctx, step)?;
    let lock = commands::lock_step(&fl.lock, &step.id)?;
    let root = ctx.target().root.clone();
    if commands::read_rc(&fl.rc) == Some(0) {
        if k.sentinel && !sentinel.exists() {
            crate::kubeadm::run::write_sentinel(&root)
                .map_err(|e| Error::io(Stage::Kubeadm, SENTINEL, "", e))?;
        }
        tracing::info!(step = %step.id, "kubeadm had finished before the previous run was killed; not run again");
        return Ok(Outcome::Adopted);
    }
    // Started by an earlier run and never finished (no status recorded): killed midway,
    // with the agent or on its own. What it wrote fails a new init's preflight.
    let interrupted = commands::read_rc(&fl.rc).is_none()
        && ctx.journal.last_begin(&step.id).is_some()
        && k.mode == crate::plan::KubeadmMode::Init;
    let _ = std::fs::remove_file(&fl.rc);
    // A supervisor killed alone took kubeadm with it; kill what kubeadm left running.
    commands::reap_orphan_group(&fl.rc);
    ctx.await_runtime();
    begin(ctx, step, None)?;
    reporter.phase(Phase::Kubeadm, Some(&step.id));
    // What `kubeadm reset -f` deletes between join attempts, written again from the plan.
    let restore_files = crate::kubeadm::reset::restore_set(ctx.plan, k);
    let t = ctx.target().clone();
    let db = ctx.db()?.clone();
    let restore = || files::write_all(&t, &restore_files, &db);
    let sup = crate::kubeadm::run::Supervise {
        exe: ctx.opts.supervisor.clone(),
        rc: fl.rc.clone(),
        lock_fd: std::os::fd::AsRawFd::as_raw_fd(&lock),
    };
    let settings = &ctx.opts.config.kubeadm;
    // What the runcmd items before it exported, and where they left the working directory.
    let state = shell::state_before(ctx, step)?;
    crate::kubeadm::run::supervised(sup, || {
        if interrupted {
            crate::kubeadm::run::reset_interrupted(&root, &restore)?;
        }
        crate::kubeadm::execute(k, settings, &root, reporter, &restore, state)
    })?;
    drop(lock);
    Ok(Outcome::Ok)
}

#[cfg(test)]
mod counts_tests {
    use super::RunCounts;

    #[test]
    fn skipped_steps_are_not_counted_as_done() {
        let c = RunCounts {
            ran: 0,
            skipped: 3,
            already: 12,
        };
        assert_eq!(
            c.summary(),
            "0 steps done, 3 skipped (commands and disk tools run only on the node itself or with --exec), 12 already finished earlier"
        );
        assert_eq!(
            c.nothing_executed().unwrap(),
            "nothing executed: 3 steps skipped (not on the node itself, no --exec), 12 finished earlier"
        );
        let c = RunCounts { ran: 1, ..c };
        assert_eq!(c.nothing_executed(), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::*;

    fn step(id: &str, action: Action) -> Step {
        Step {
            id: id.into(),
            stage: RunStage::Main,
            frequency: Frequency::PerInstance,
            action,
        }
    }
    fn wf(path: &str, defer: bool) -> Action {
        Action::WriteFile(FileWrite {
            path: path.into(),
            content: Content(vec![]),
            owner: Owner::default(),
            mode: None,
            append: false,
            defer,
            secret: false,
            source: None,
        })
    }

    #[test]
    fn deferred_files_follow_users() {
        let s = [
            step("a", wf("/a", false)),
            step("d", wf("/d", true)),
            step(
                "u",
                Action::User(UserSpec {
                    name: "x".into(),
                    ..Default::default()
                }),
            ),
            step("c", wf("/c", false)),
        ];
        let refs: Vec<&Step> = s.iter().collect();
        let o: Vec<&str> = order(&refs).into_iter().map(|i| s[i].id.as_str()).collect();
        assert_eq!(o, ["a", "u", "d", "c"]);
        // Without user steps, plan order is kept.
        let refs: Vec<&Step> = vec![&s[0], &s[1], &s[3]];
        assert_eq!(order(&refs), [0, 1, 2]);
    }

    #[test]
    fn target_resolves_symlinks_inside_root() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("run")).unwrap();
        std::fs::create_dir_all(d.path().join("var")).unwrap();
        std::os::unix::fs::symlink("/run", d.path().join("var/run")).unwrap();
        std::os::unix::fs::symlink("../run", d.path().join("var/rel")).unwrap();
        let t = Target::new(d.path());
        assert_eq!(t.path("/var/run/x").unwrap(), d.path().join("run/x"));
        assert_eq!(t.path("/var/rel/y").unwrap(), d.path().join("run/y"));
        // The final component is never resolved.
        assert_eq!(t.path("/var/run").unwrap(), d.path().join("var/run"));
        assert!(t.path("/a/../b").is_err());
        assert!(t.path("rel").is_err());
    }
}
