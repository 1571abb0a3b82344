//! /var/lib/nodeagent: per-instance journal of finished steps, crash-safe.
//!
//! Layout (every path under `--root DIR` when given):
//! ```text
//! var/lib/nodeagent/                        0700
//!   instance-id                             0600  current instance-id + "\n"
//!   previous-instance-id                    0600  the one before (a clone changed it)
//!   instances/<iid>/                        0700  <iid>: [A-Za-z0-9._-] kept, others "_"
//!     journal.jsonl                         0600  one JSON object per line (below)
//!     userdata.txt                          0600  rendered userdata (core provides it)
//!     instance-data-sensitive.json          0600
//!     instance-data.json                    0644  redacted
//!     cmd/<h>.rc  cmd/<h>.lock  cmd/<h>.out 0600  command supervision (apply/commands.rs)
//! ```
//!
//! ## Journal format (read by `nodeagent analyze`)
//! Append-only JSON Lines; every record has `v` (1), `event`, `at` (RFC 3339 UTC, ms),
//! `boot` (kernel boot_id) and `pid`. Events:
//! * `run-start`  `{stage}`: a `nodeagent run --stage` began (`stage`: local, main or all).
//! * `begin`      `{step, stage, frequency}`: a step started; `expect` (sha256 hex) for appends.
//! * `done`       `{step, stage, frequency, duration_ms, result}`: finished; `result` is `ok`,
//!   `skipped` (commands without `--exec`) or `adopted` (a command that had finished while the
//!   previous agent was killed: its recorded exit status 0 was taken, it was not run again) or
//!   `failed-ignored` (a runcmd item that failed under `--compat`, not the last one).
//! * `failed`     `{step, stage, duration_ms, error}`: the step failed (error redacted).
//! * `run-end`    `{stage, duration_ms, result}`: `ok` or `failed`.
//!
//! A step counts as finished when a `done` record (not `skipped`) exists for it; for `per-boot`
//! steps only a `done` with the current `boot`. A line cut short by a power loss does not parse and is
//! ignored (the writer first terminates such a line), so the journal never blocks a run.
//!
//! Durability: records are `write(2)`n in one call; the file is fsynced after every step that
//! is not an idempotent write (commands, users, kubeadm, appends' `begin`) and at run end. A
//! lost `done` of an idempotent step only means the step is done again, with the same result.

use crate::base::error::{Error, ErrorKind, Result, Stage};
use crate::plan::{Frequency, RunStage};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub const DIR: &str = "var/lib/nodeagent";

/// One journal line: the envelope every record has, and its event (`event` names the variant;
/// the event's fields sit beside the envelope's, as the format above lists them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub v: u32,
    #[serde(flatten)]
    pub event: Event,
    pub at: String,
    pub boot: String,
    pub pid: u32,
}

/// The events of the journal format (module docs). Reading is strict per line: a line that is
/// not one of these (a torn line) is skipped, as before the records were typed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    RunStart {
        stage: RunStage,
    },
    Begin {
        step: String,
        stage: RunStage,
        frequency: Frequency,
        /// sha256 hex of the file an append expects to find (files.rs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect: Option<String>,
    },
    Done {
        step: String,
        stage: RunStage,
        frequency: Frequency,
        duration_ms: f64,
        result: DoneResult,
    },
    Failed {
        step: String,
        stage: RunStage,
        duration_ms: f64,
        error: String,
    },
    RunEnd {
        stage: RunStage,
        duration_ms: f64,
        result: RunResult,
    },
}

/// How a step finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DoneResult {
    Ok,
    /// A command not run (no `--exec`): not finished, it runs when allowed.
    Skipped,
    /// A command that had finished while the previous agent was killed: its recorded exit
    /// status 0 was taken, it was not run again.
    Adopted,
    /// A failed runcmd item that `--compat` carries on past (not the last one).
    FailedIgnored,
    /// Not run: an earlier item of its list ended the list's program with `exit`.
    NotRun,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunResult {
    Ok,
    Failed,
}

impl DoneResult {
    /// The journal name.
    pub fn as_str(self) -> &'static str {
        match self {
            DoneResult::Ok => "ok",
            DoneResult::Skipped => "skipped",
            DoneResult::Adopted => "adopted",
            DoneResult::FailedIgnored => "failed-ignored",
            DoneResult::NotRun => "not-run",
        }
    }
}

impl RunResult {
    /// The journal name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunResult::Ok => "ok",
            RunResult::Failed => "failed",
        }
    }
}

impl Event {
    /// The step a step event is about.
    pub fn step(&self) -> Option<&str> {
        match self {
            Event::Begin { step, .. } | Event::Done { step, .. } | Event::Failed { step, .. } => {
                Some(step)
            }
            Event::RunStart { .. } | Event::RunEnd { .. } => None,
        }
    }
    /// The hash a `begin` of an append expects the file to have once it is done.
    pub fn expect(&self) -> Option<&str> {
        match self {
            Event::Begin { expect, .. } => expect.as_deref(),
            _ => None,
        }
    }
    /// A `done` that counts as finished (not `skipped`).
    pub fn finishes_step(&self) -> bool {
        matches!(self, Event::Done { result, .. } if *result != DoneResult::Skipped)
    }
}

/// `<root>/var/lib/nodeagent`, every symlink on the way resolved inside the root (confine.rs).
pub fn state_dir(root: &Path) -> Result<PathBuf> {
    crate::base::confine::dir(root, DIR)
        .map_err(|e| Error::io(Stage::State, root.join(DIR).display().to_string(), "", e))
}

/// `<root>/REL` for a file, its parent directories resolved inside the root (confine.rs).
pub fn in_root(root: &Path, rel: &str) -> Result<PathBuf> {
    crate::base::confine::file(root, rel).map_err(|e| {
        Error::io(
            Stage::State,
            root.join(rel.trim_start_matches('/')).display().to_string(),
            "",
            e,
        )
    })
}

/// Directory name for an instance-id: safe as one path component.
pub fn instance_dir_name(iid: &str) -> String {
    let mut s: String = iid
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        s.insert(0, '_');
    }
    s
}

/// The kernel's boot id; `NODEAGENT_BOOT_ID` overrides it (tests simulate reboots with it).
pub fn boot_id() -> String {
    if let Ok(b) = std::env::var("NODEAGENT_BOOT_ID") {
        return b;
    }
    crate::base::process::kernel_boot_id()
        .unwrap_or("unknown")
        .to_string()
}

pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    now.format(&fmt).unwrap_or_default()
}

/// Create `path` (and missing parents) with `mode`, chmod an existing one to `mode`.
/// The agent's state tree holds no symlink (`state_dir` resolves the links above it inside
/// the root): one found at `path` or its parent, which would lead the agent's files out of
/// the root, is refused.
pub fn ensure_private_dir(path: &Path, mode: u32) -> Result<()> {
    // Made sure of once while no child process runs (the lock, the state, the journal and the
    // command records of one run each asked for the same directories, every half again).
    static ENSURED: std::sync::Mutex<Vec<(PathBuf, u32, u64)>> = std::sync::Mutex::new(Vec::new());
    let epoch = crate::base::confine::epoch();
    let mut ensured = ENSURED.lock().unwrap_or_else(|e| e.into_inner());
    ensured.retain(|(_, _, e)| *e == epoch);
    if ensured.iter().any(|(p, m, _)| p == path && *m == mode) {
        return Ok(());
    }
    make_private_dir(path, mode)?;
    ensured.push((path.to_path_buf(), mode, epoch));
    Ok(())
}

/// [`ensure_private_dir`]'s work: made with `mode` where missing, no symlink at it or its parent.
fn make_private_dir(path: &Path, mode: u32) -> Result<()> {
    let place = || path.display().to_string();
    let no_link = |p: &Path| match std::fs::symlink_metadata(p) {
        Ok(m) if m.file_type().is_symlink() => Err(Error::of(
            ErrorKind::Unsupported,
            Stage::State,
            p.display().to_string(),
            "is a symlink in the agent's state directory; refused",
        )),
        _ => Ok(()),
    };
    no_link(path.parent().unwrap_or(path))?;
    no_link(path)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .map_err(|e| Error::io(Stage::State, place(), "", e))?;
    no_link(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io(Stage::State, place(), "", e))
}

/// Replace `path` atomically with `data` at `mode` (temp file, fsync, rename, fsync dir).
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    replace(path, data, mode, true)
}

/// Replace `path` atomically through fsio.rs; `durable` adds the fsync of the file before
/// the rename and of the directory after it.
fn replace(path: &Path, data: &[u8], mode: u32, durable: bool) -> Result<()> {
    let opts = crate::base::fsio::Options::new(mode);
    let opts = if durable { opts } else { opts.volatile() };
    crate::base::fsio::write_atomic(path, data, &opts)
        .map_err(|e| Error::caused(Stage::State, path.display().to_string(), e))
}

/// The state directory of one root.
pub struct State {
    pub dir: PathBuf,
}

impl State {
    /// Open (create 0700) `<root>/var/lib/nodeagent`.
    pub fn open(root: &Path) -> Result<State> {
        let dir = state_dir(root)?;
        ensure_private_dir(&dir, 0o700)?;
        Ok(State { dir })
    }

    pub fn instance_dir(&self, iid: &str) -> PathBuf {
        self.dir.join("instances").join(instance_dir_name(iid))
    }

    /// The instance-id of the previous run, if any.
    pub fn current_instance_id(&self) -> Option<String> {
        let path = self.dir.join("instance-id");
        // The state dir is resolved inside the root already: read its file as the host path it
        // is, never a FIFO or an endless device (an instance-id is a line).
        crate::base::confine::read_bounded(Path::new("/"), &path.to_string_lossy(), 4096)
            .ok()
            .map(|s| {
                String::from_utf8_lossy(&s)
                    .trim_end_matches('\n')
                    .to_string()
            })
    }

    /// Switch to `iid` (a new one moves the old id to `previous-instance-id`) and open its journal.
    /// A different instance-id gets a fresh directory, so everything runs again. The two id
    /// files are pointers for `analyze` and `collect-logs`, not synced: what runs is decided by
    /// the journal in the instance's own directory, and a pointer lost to a power cut is
    /// rewritten by the next run.
    pub fn begin_instance(&self, iid: &str) -> Result<Journal> {
        if iid.is_empty() || iid.contains('\n') {
            return Err(Error::invalid(
                Stage::State,
                "instance-id",
                "empty or multi-line instance-id",
            ));
        }
        let prev = self.current_instance_id();
        if prev.as_deref() != Some(iid) {
            // One id on one line, root-only.
            let write_id = |name: &str, id: &str| {
                replace(
                    &self.dir.join(name),
                    format!("{id}\n").as_bytes(),
                    0o600,
                    false,
                )
            };
            if let Some(p) = prev.as_deref().filter(|p| !p.is_empty()) {
                write_id("previous-instance-id", p)?;
            }
            ensure_private_dir(&self.instance_dir(iid), 0o700)?;
            write_id("instance-id", iid)?;
        }
        let idir = self.instance_dir(iid);
        ensure_private_dir(&idir, 0o700)?;
        Journal::open(&idir.join("journal.jsonl"), boot_id())
    }

    /// Several files of the instance directory, each atomic (temp, rename), committed as one
    /// batch. Not fsynced, but for the names in `durable`: the others are copies every run
    /// writes afresh before it applies anything (cloud-init keeps them in /run), so after a
    /// power loss the next run replaces whatever survived.
    pub fn save_all(
        &self,
        iid: &str,
        items: &[(&str, &[u8], u32)],
        durable: &[&str],
    ) -> Result<()> {
        let idir = self.instance_dir(iid);
        ensure_private_dir(&idir, 0o700)?;
        let paths: Vec<PathBuf> = items.iter().map(|(name, ..)| idir.join(name)).collect();
        let files = items.iter().zip(&paths).map(|((name, data, mode), path)| {
            let opts = crate::base::fsio::Options::new(*mode);
            let opts = if durable.contains(name) {
                opts
            } else {
                opts.volatile()
            };
            (path.as_path(), *data, opts)
        });
        crate::base::fsio::write_batch(files).map_err(|e| {
            let place = e.path.display().to_string();
            Error::caused(Stage::State, place, e)
        })
    }

    /// Keep a copy of rendered userdata / instance data for `query`, `render`, `collect-logs`.
    pub fn save(&self, iid: &str, name: &str, data: &[u8], mode: u32) -> Result<()> {
        let idir = self.instance_dir(iid);
        ensure_private_dir(&idir, 0o700)?;
        write_atomic(&idir.join(name), data, mode)
    }
}

/// Open journal of one instance: what is finished, and an append handle.
pub struct Journal {
    pub path: PathBuf,
    file: File,
    pub boot: String,
    /// Last `done` record per step.
    done: HashMap<String, Record>,
    /// Last `begin` record per step.
    begun: HashMap<String, Record>,
    dirty: bool,
    /// Its directory entry is synced with the first sync of a record, once per process: a
    /// journal another process (or the local half of `--stage all`) created and appended to
    /// without a sync may have no durable entry yet, and this process cannot tell.
    entry_unsynced: bool,
}

/// Parse journal text; unparsable (torn) lines are skipped.
pub fn parse_journal(text: &str) -> Vec<Record> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Record>(l).ok())
        .collect()
}

/// Every record of a journal file (for `analyze`).
pub fn read_journal(path: &Path) -> Result<Vec<Record>> {
    let max = crate::base::limits::MAX_JOURNAL_BYTES;
    let bytes = crate::base::confine::read_bounded(Path::new("/"), &path.to_string_lossy(), max)
        .map_err(|e| Error::io(Stage::State, path.display().to_string(), "", e))?;
    Ok(parse_journal(&String::from_utf8_lossy(&bytes)))
}

impl Journal {
    pub fn open(path: &Path, boot: String) -> Result<Journal> {
        let place = path.display().to_string();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            // Not through a final link; a FIFO there must not stall the open or the read.
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| Error::io(Stage::State, &place, "", e))?;
        let size = crate::base::confine::ensure_regular(&file)
            .map_err(|e| Error::io(Stage::State, &place, "", e))?;
        let mut text = String::new();
        let max = crate::base::limits::MAX_JOURNAL_BYTES;
        // Room for what is there: one read, not reads doubling from 32 bytes.
        let mut raw = Vec::with_capacity(usize::try_from(size).unwrap_or(max).min(max) + 1);
        (&mut file)
            .take(max as u64 + 1)
            .read_to_end(&mut raw)
            .map_err(|e| Error::io(Stage::State, &place, "", e))?;
        if raw.len() > max {
            return Err(Error::too_large(
                Stage::State,
                &place,
                format!("journal over {max} bytes (MAX_JOURNAL_BYTES)"),
            ));
        }
        text.push_str(&String::from_utf8_lossy(&raw));
        if !raw.is_empty() && !raw.ends_with(b"\n") {
            // A torn last line: terminate it so the next record starts clean.
            file.write_all(b"\n")
                .map_err(|e| Error::io(Stage::State, &place, "", e))?;
        }
        let mut done = HashMap::new();
        let mut begun = HashMap::new();
        for r in parse_journal(&text) {
            Journal::track(&mut done, &mut begun, r);
        }
        Ok(Journal {
            path: path.to_path_buf(),
            file,
            boot,
            done,
            begun,
            dirty: false,
            entry_unsynced: true,
        })
    }

    /// Read the journal again: another run may have finished steps since it was opened
    /// (`apply` does this once it holds the run lock).
    pub fn reopen(&mut self) -> Result<()> {
        let path = self.path.clone();
        let entry_unsynced = self.entry_unsynced;
        *self = Journal::open(&path, self.boot.clone())?;
        // This process's knowledge of the entry stands: synced once is enough.
        self.entry_unsynced = entry_unsynced;
        Ok(())
    }

    /// Finished already? Per-instance: any `done`; per-boot: a `done` in this boot.
    pub fn is_done(&self, step: &str, per_boot: bool) -> bool {
        match self.done.get(step) {
            Some(r) => !per_boot || r.boot == self.boot,
            None => false,
        }
    }

    pub fn last_begin(&self, step: &str) -> Option<&Record> {
        self.begun.get(step)
    }

    /// `event` in this run's envelope (now, this boot, this process).
    pub fn record(&self, event: Event) -> Record {
        Record {
            v: 1,
            event,
            at: now_rfc3339(),
            boot: self.boot.clone(),
            pid: std::process::id(),
        }
    }

    /// Remember the last finishing `done` and the last `begin` of each step.
    fn track(done: &mut HashMap<String, Record>, begun: &mut HashMap<String, Record>, r: Record) {
        let map = match &r.event {
            e if e.finishes_step() => done,
            Event::Begin { .. } => begun,
            _ => return,
        };
        if let Some(step) = r.event.step() {
            map.insert(step.to_string(), r);
        }
    }

    /// Append one record (one write call); `durable` fsyncs it now.
    pub fn append(&mut self, r: Record, durable: bool) -> Result<()> {
        let mut line = serde_json::to_vec(&r)
            .map_err(|e| Error::caused(Stage::State, self.path.display().to_string(), e))?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .map_err(|e| Error::io(Stage::State, self.path.display().to_string(), "", e))?;
        Journal::track(&mut self.done, &mut self.begun, r);
        self.dirty = true;
        if durable {
            self.sync()?;
        }
        Ok(())
    }

    /// The records appended so far made durable; for a journal this process created, its
    /// directory entry too, before any record relies on it.
    pub fn sync(&mut self) -> Result<()> {
        if self.dirty {
            self.file
                .sync_data()
                .map_err(|e| Error::io(Stage::State, self.path.display().to_string(), "", e))?;
            self.dirty = false;
        }
        if self.entry_unsynced {
            let dir = self.path.parent().unwrap_or(Path::new("."));
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| Error::io(Stage::State, dir.display().to_string(), "", e))?;
            self.entry_unsynced = false;
        }
        Ok(())
    }
}

/// `nodeagent clean`: what `cloud-init clean` does, for nodeagent's own files.
#[derive(Debug, Default, Clone, Copy)]
pub struct CleanOpts {
    /// Also delete nodeagent's logs (`/var/log/nodeagent/`, `/var/log/nodeagent*.log*`) and
    /// `/run/nodeagent`.
    pub logs: bool,
    /// Also delete the NoCloud seed directories of the image config's transports (as
    /// `cloud-init clean --seed` deletes `/var/lib/cloud/seed`).
    pub seed: bool,
    /// Reset `/etc/machine-id` to `uninitialized\n` (0444) so systemd makes a new one.
    pub machine_id: bool,
}

/// Returns the paths removed or reset, for the command to print.
pub fn clean(root: &Path, opts: CleanOpts) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let dir = state_dir(root)?;
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd {
            let e = e.map_err(|e| Error::io(Stage::State, dir.display().to_string(), "", e))?;
            let p = e.path();
            let ft = e
                .file_type()
                .map_err(|e| Error::io(Stage::State, p.display().to_string(), "", e))?;
            let r = if ft.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            r.map_err(|e| Error::io(Stage::State, p.display().to_string(), "", e))?;
            out.push(p);
        }
    }
    if opts.logs {
        let logdir = crate::base::confine::dir(root, "var/log").map_err(|e| {
            Error::io(
                Stage::State,
                root.join("var/log").display().to_string(),
                "",
                e,
            )
        })?;
        if let Ok(rd) = std::fs::read_dir(&logdir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let p = e.path();
                // `nodeagent/` (events, kubeadm.log) and `nodeagent-output.log` with its
                // rotated copies; a symlink is removed, never followed.
                let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                let r = if name == "nodeagent" && is_dir {
                    std::fs::remove_dir_all(&p)
                } else if name.starts_with("nodeagent") && name.contains(".log") {
                    std::fs::remove_file(&p)
                } else {
                    continue;
                };
                r.map_err(|er| Error::io(Stage::State, p.display().to_string(), "", er))?;
                out.push(p);
            }
        }
        let run = in_root(root, "run/nodeagent")?;
        if run.exists() {
            std::fs::remove_dir_all(&run)
                .map_err(|e| Error::io(Stage::State, run.display().to_string(), "", e))?;
            out.push(run);
        }
    }
    if opts.seed {
        let cfg = crate::source::config::ImageConfig::load(root)?;
        for t in &cfg.transports {
            let Some(seed) = t.strip_prefix("nocloud:") else {
                continue;
            };
            // Resolved inside the root like the paths above: a link in the image's
            // var/lib/cloud cannot point the removal at the host.
            let p = in_root(root, seed)?;
            if p.symlink_metadata().is_ok() {
                std::fs::remove_dir_all(&p)
                    .map_err(|e| Error::io(Stage::State, p.display().to_string(), "", e))?;
                out.push(p);
            }
        }
    }
    if opts.machine_id {
        let p = in_root(root, "etc/machine-id")?;
        let _ = std::fs::remove_file(&p);
        write_atomic(&p, b"uninitialized\n", 0o444)?;
        out.push(p);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(step: &str) -> Event {
        Event::Done {
            step: step.into(),
            stage: RunStage::Main,
            frequency: Frequency::PerInstance,
            duration_ms: 1.0,
            result: DoneResult::Ok,
        }
    }

    /// Lines as the untyped `Record` (before the tagged enum) wrote them, field order and
    /// all: a node upgraded mid-life reads its journal the same way.
    const OLD_JOURNAL: &str = r#"{"v":1,"event":"run-start","at":"2026-11-20T10:00:00.000Z","boot":"b1","pid":7,"stage":"all"}
{"v":1,"event":"begin","at":"2026-11-20T10:00:00.001Z","boot":"b1","pid":7,"step":"write_files[0]:/etc/a","stage":"main","frequency":"per-instance","expect":"ab12"}
{"v":1,"event":"done","at":"2026-11-20T10:00:00.002Z","boot":"b1","pid":7,"step":"write_files[0]:/etc/a","stage":"main","frequency":"per-instance","duration_ms":0.5,"result":"ok"}
{"v":1,"event":"done","at":"2026-11-20T10:00:00.003Z","boot":"b1","pid":7,"step":"bootcmd[0]","stage":"local","frequency":"per-boot","duration_ms":3.25,"result":"adopted"}
{"v":1,"event":"done","at":"2026-11-20T10:00:00.004Z","boot":"b1","pid":7,"step":"runcmd[0]","stage":"main","frequency":"per-instance","duration_ms":1.0,"result":"skipped"}
{"v":1,"event":"done","at":"2026-11-20T10:00:00.005Z","boot":"b1","pid":7,"step":"runcmd[1]","stage":"main","frequency":"per-instance","duration_ms":1.0,"result":"failed-ignored"}
{"v":1,"event":"failed","at":"2026-11-20T10:00:00.006Z","boot":"b1","pid":7,"step":"runcmd[2]","stage":"main","duration_ms":2.0,"error":"step runcmd[2]: exit status 1"}
{"v":1,"event":"run-end","at":"2026-11-20T10:00:00.007Z","boot":"b1","pid":7,"stage":"all","duration_ms":9.0,"result":"failed"}
{"v":1,"event":"done","at":"2026-11-20T10:0"#;

    #[test]
    fn a_journal_written_before_typed_records_reads_the_same() {
        let recs = parse_journal(OLD_JOURNAL);
        assert_eq!(
            recs.len(),
            8,
            "every whole line parses, the torn one is skipped"
        );
        assert_eq!(
            recs[1].event,
            Event::Begin {
                step: "write_files[0]:/etc/a".into(),
                stage: RunStage::Main,
                frequency: Frequency::PerInstance,
                expect: Some("ab12".into()),
            }
        );
        assert_eq!(
            recs[7].event,
            Event::RunEnd {
                stage: RunStage::All,
                duration_ms: 9.0,
                result: RunResult::Failed,
            }
        );
        assert_eq!((recs[3].boot.as_str(), recs[3].pid), ("b1", 7));
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("journal.jsonl");
        std::fs::write(&path, OLD_JOURNAL).unwrap();
        let j = Journal::open(&path, "b1".into()).unwrap();
        for (step, finished) in [
            ("write_files[0]:/etc/a", true),
            ("bootcmd[0]", true),
            ("runcmd[0]", false),
            ("runcmd[1]", true),
            ("runcmd[2]", false),
        ] {
            assert_eq!(j.is_done(step, false), finished, "{step}");
        }
        assert_eq!(
            j.last_begin("write_files[0]:/etc/a")
                .and_then(|r| r.event.expect()),
            Some("ab12")
        );
        // A record written now has the same fields and values as an old one.
        let mut now: serde_json::Value = serde_json::to_value(&recs[2]).unwrap();
        let old: serde_json::Value =
            serde_json::from_str(OLD_JOURNAL.lines().nth(2).unwrap()).unwrap();
        assert_eq!(now, old);
        now["event"] = "bogus".into();
        assert!(serde_json::from_value::<Record>(now).is_err());
    }

    #[test]
    fn journal_survives_torn_line_and_tracks_boots() {
        let d = tempfile::tempdir().unwrap();
        let st = State::open(d.path()).unwrap();
        let mode = std::fs::metadata(&st.dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let mut j = st.begin_instance("vm-1").unwrap();
        j.append(j.record(done("a")), true).unwrap();
        assert!(j.is_done("a", false));
        drop(j);
        // Tear a record in half, as a power loss could.
        let path = st.instance_dir("vm-1").join("journal.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"v\":1,\"event\":\"done\",\"st").unwrap();
        drop(f);
        let mut j = Journal::open(&path, "other-boot".into()).unwrap();
        assert!(j.is_done("a", false));
        assert!(
            !j.is_done("a", true),
            "per-boot step runs again in a new boot"
        );
        j.append(j.record(done("b")), true).unwrap();
        let recs = read_journal(&path).unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].event.step(), Some("b"));
    }

    #[test]
    fn new_instance_id_starts_fresh() {
        let d = tempfile::tempdir().unwrap();
        let st = State::open(d.path()).unwrap();
        let mut j = st.begin_instance("vm-1").unwrap();
        j.append(j.record(done("a")), true).unwrap();
        let j2 = st.begin_instance("vm-2").unwrap();
        assert!(!j2.is_done("a", false));
        assert_eq!(st.current_instance_id().as_deref(), Some("vm-2"));
        let prev = std::fs::read_to_string(st.dir.join("previous-instance-id")).unwrap();
        assert_eq!(prev, "vm-1\n");
        assert_eq!(instance_dir_name("../x/y"), "_.._x_y");
        assert_eq!(instance_dir_name(".."), "_..");
    }

    #[test]
    fn clean_removes_state_and_resets_machine_id() {
        let d = tempfile::tempdir().unwrap();
        let st = State::open(d.path()).unwrap();
        st.begin_instance("vm-1").unwrap();
        std::fs::create_dir_all(d.path().join("etc")).unwrap();
        std::fs::write(d.path().join("etc/machine-id"), "abc\n").unwrap();
        // Logs: the directory of events and kubeadm.log, and the output log with its rotation.
        std::fs::create_dir_all(d.path().join("var/log/nodeagent")).unwrap();
        std::fs::write(d.path().join("var/log/nodeagent/events.jsonl"), "{}\n").unwrap();
        std::fs::write(d.path().join("var/log/nodeagent-output.log.1"), "x\n").unwrap();
        std::fs::write(d.path().join("var/log/syslog"), "x\n").unwrap();
        // The default transports name the NoCloud seed /var/lib/cloud/seed/nocloud.
        std::fs::create_dir_all(d.path().join("var/lib/cloud/seed/nocloud")).unwrap();
        std::fs::write(d.path().join("var/lib/cloud/seed/nocloud/user-data"), "x").unwrap();
        let removed = clean(
            d.path(),
            CleanOpts {
                logs: true,
                seed: true,
                machine_id: true,
            },
        )
        .unwrap();
        assert!(!removed.is_empty());
        assert!(!d.path().join("var/log/nodeagent").exists());
        assert!(!d.path().join("var/log/nodeagent-output.log.1").exists());
        assert!(d.path().join("var/log/syslog").exists());
        assert!(!d.path().join("var/lib/cloud/seed/nocloud").exists());
        assert!(st.dir.exists(), "the directory itself stays");
        assert_eq!(std::fs::read_dir(&st.dir).unwrap().count(), 0);
        assert_eq!(
            std::fs::read_to_string(d.path().join("etc/machine-id")).unwrap(),
            "uninitialized\n"
        );
    }
}
