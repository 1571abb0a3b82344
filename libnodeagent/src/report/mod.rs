//! Status reporting: status.json, guestinfo.nodeagent.status, virtio-serial, sentinel.
//!
//! Interface used by `apply` (fixed early so apply and reporting can be built in parallel).
//! docs/formats.md N.4: at every phase change the reporter
//! - rewrites `/run/nodeagent/status.json` (0644, redacted; what `nodeagent status` reads),
//! - publishes the compact JSON (≤ 4 KiB) as `guestinfo.nodeagent.status` through the
//!   transport (the fwcfg transport turns it into a line on virtio-serial),
//! - appends an event to `/var/log/nodeagent/events.jsonl` (what `nodeagent analyze` reads).
//!
//! Publishing never fails the run: a broken channel is logged and the run goes on.
//! Every text that enters a status passes through `redact::redact_text` first.

use crate::base::confine::Dir;
use crate::base::error::ErrorKind;
use crate::base::redact::redact_text;
use crate::source::transport::Transport;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// docs/formats.md N.4 phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Reading,
    Applying,
    Waiting,
    Kubeadm,
    Done,
    Failed,
}

impl Phase {
    /// The lower-case name, as in status.json.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Reading => "reading",
            Phase::Applying => "applying",
            Phase::Waiting => "waiting",
            Phase::Kubeadm => "kubeadm",
            Phase::Done => "done",
            Phase::Failed => "failed",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Done | Phase::Failed)
    }
}

pub const STATUS_JSON: &str = "run/nodeagent/status.json";
pub const EVENTS: &str = "var/log/nodeagent/events.jsonl";
pub const STATUS_KEY: &str = "nodeagent.status";
/// VM Operator turns this guestinfo key into the VirtualMachine's `GuestBootstrap` condition
/// (vm-operator `pkg/util/bootstrap_condition.go` `GetBootstrapConditionValues`: the value is
/// split at the first two commas into `<bool>,<reason>,<message>`, each trimmed, the bool read
/// with Go's `strconv.ParseBool`; true sets the condition True with the reason, false sets it
/// False with reason and message).
pub const BOOTSTRAP_CONDITION_KEY: &str = "vmservice.bootstrap.condition";
/// `true` once the node is bootstrapped, `false` before and on failure: for a VM Operator
/// readiness probe `readinessProbe: {guestInfo: [{key: nodeagent.ready, value: "^true$"}]}`
/// (VM Operator prefixes the key with `guestinfo.` and matches the value as an RE2 regex).
pub const READY_KEY: &str = "nodeagent.ready";
/// Longest condition message published (the rest is cut).
const MAX_CONDITION_MESSAGE: usize = 1024;
/// Most kubeadm output lines kept for a failure report.
pub const TAIL_LINES: usize = crate::base::limits::KUBEADM_TAIL_LINES;

/// The status document. The first eight fields are the compact form published through
/// guestinfo; `detail`, `warnings` and `output_tail` only go to status.json (`detail` also
/// to guestinfo while waiting, so the platform sees which endpoint the node waits for).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub v: u32,
    pub instance_id: String,
    pub phase: Phase,
    pub step: Option<String>,
    pub error: Option<String>,
    /// What kind of failure (`ErrorKind::as_str`) when `phase` is `failed` for a known
    /// reason: a stable word the platform can act on where `error` is prose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ErrorKind>,
    /// RFC 3339 UTC.
    pub started: String,
    pub updated: String,
    /// Kernel boot id: tells a status of this boot from one of an earlier boot.
    pub boot: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_tail: Vec<String>,
    /// When the current phase began (Unix ms): `status --wait` shows the time in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// When the current wait (control-plane endpoint, kubeadm invocation) gives up (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
}

impl Status {
    /// `guestinfo.nodeagent.status`: compact JSON of at most `limits::MAX_STATUS_BYTES`;
    /// the error is shortened (and kubeadm's last lines appended while they fit).
    pub fn compact_json(&self) -> String {
        #[derive(Serialize)]
        struct Compact<'a> {
            v: u32,
            instance_id: &'a str,
            phase: Phase,
            step: Option<&'a str>,
            error: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            kind: Option<ErrorKind>,
            started: &'a str,
            updated: &'a str,
            boot: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            detail: Option<&'a str>,
        }
        let max = crate::base::limits::MAX_STATUS_BYTES;
        let mut error = self.error.clone();
        if let Some(e) = &mut error
            && !self.output_tail.is_empty()
        {
            e.push_str(" | last output: ");
            e.push_str(&self.output_tail.join(" / "));
        }
        // Every field but the error is cut to a fixed share first, so the error always gets
        // room; then the error is cut to what is left. A fixed number of passes: JSON
        // escaping can make the serialised text longer than the cut (a control character
        // becomes six bytes), so each pass cuts by what is still over, at least by half.
        let instance_id = cut_chars(&self.instance_id, STATUS_FIELD_CHARS);
        let step = self
            .step
            .as_deref()
            .map(|s| cut_chars(s, STATUS_FIELD_CHARS));
        let detail = self
            .detail
            .as_deref()
            .map(|s| cut_chars(s, STATUS_FIELD_CHARS));
        let mut error = error.map(|e| cut_chars(&e, max));
        for _ in 0..STATUS_FIT_PASSES {
            let json = serde_json::to_string(&Compact {
                v: self.v,
                instance_id: &instance_id,
                phase: self.phase,
                step: step.as_deref(),
                error: error.as_deref(),
                kind: self.kind,
                started: &self.started,
                updated: &self.updated,
                boot: &self.boot,
                detail: detail.as_deref(),
            })
            .unwrap_or_default();
            if json.len() <= max {
                return json;
            }
            let over = json.len() - max;
            error = match error {
                Some(e) if e.chars().count() > 1 => {
                    let len = e.chars().count();
                    Some(cut_chars(&e, len.saturating_sub(over.max(len / 2)).max(1)))
                }
                _ => break,
            };
        }
        json_min(self)
    }

    /// The value of `guestinfo.vmservice.bootstrap.condition`: `<bool>,<reason>,<message>`.
    /// The reason is one CamelCase word per phase (a valid Kubernetes condition reason, no
    /// comma); the message is one line, redacted, at most `MAX_CONDITION_MESSAGE` bytes.
    pub fn bootstrap_condition(&self) -> String {
        let step = self.step.as_deref().unwrap_or("");
        let with_step = |what: &str| {
            if step.is_empty() {
                what.to_string()
            } else {
                format!("{what}: {step}")
            }
        };
        let (ok, reason, mut message) = match self.phase {
            Phase::Reading => (false, "Reading", "reading the bootstrap data".to_string()),
            Phase::Applying => (false, "Applying", with_step("applying")),
            Phase::Waiting => (
                false,
                "Waiting",
                self.detail.clone().unwrap_or_else(|| with_step("waiting")),
            ),
            Phase::Kubeadm => (
                false,
                "Kubeadm",
                self.detail
                    .clone()
                    .unwrap_or_else(|| with_step("running kubeadm")),
            ),
            Phase::Done if self.degraded() => (
                true,
                "DoneWithWarnings",
                format!(
                    "bootstrapped with {} warning(s): {}",
                    self.warnings.len(),
                    self.warnings[0]
                ),
            ),
            Phase::Done => (true, "Done", "bootstrapped".to_string()),
            Phase::Failed => (
                false,
                "Failed",
                self.error.clone().unwrap_or_else(|| with_step("failed")),
            ),
        };
        message = redact_text(&message).replace(['\n', '\r'], " ");
        cut_bytes(&mut message, MAX_CONDITION_MESSAGE);
        format!("{ok},{reason},{message}")
    }

    /// What cloud-init's status files follow of this status (cloud_init/files.rs).
    pub fn cloud_init_view(&self) -> crate::report::cloud_init::files::Seen<'_> {
        crate::report::cloud_init::files::Seen {
            phase: self.phase.as_str(),
            step: self.step.as_deref(),
            detail: self.detail.as_deref(),
            error: self.error.as_deref(),
            warnings: &self.warnings,
            instance_id: &self.instance_id,
        }
    }

    /// The value of `guestinfo.nodeagent.ready`.
    pub fn ready(&self) -> &'static str {
        if self.phase == Phase::Done {
            "true"
        } else {
            "false"
        }
    }

    /// `done` with warnings is "degraded" (exit 2 of `nodeagent status`).
    pub fn degraded(&self) -> bool {
        self.phase == Phase::Done && !self.warnings.is_empty()
    }
}

/// Longest instance id, step and detail in the compact status, in characters: together
/// well under MAX_STATUS_BYTES even when every character escapes to six bytes.
const STATUS_FIELD_CHARS: usize = 160;
/// Passes that cut the error until the compact status fits; then only the phase is sent.
const STATUS_FIT_PASSES: usize = 12;

// Cutting a line is the redactor's (it cuts every output line it emits).
pub(crate) use crate::base::redact::cut_bytes;

/// `s` cut to `max` characters, with `…` when cut.
fn cut_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", s.get(..i).unwrap_or_default()),
        None => s.to_string(),
    }
}

/// Last resort when even the fixed fields overflow (absurd instance ids): phase only.
fn json_min(s: &Status) -> String {
    serde_json::json!({"v": s.v, "phase": s.phase}).to_string()
}

/// Read `/run/nodeagent/status.json` under `root`.
pub fn read_status(root: &Path) -> std::io::Result<Status> {
    let text = crate::base::confine::read_bounded(root, STATUS_JSON, MAX_STATUS_FILE_BYTES)?;
    serde_json::from_slice(&text)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Largest `status.json` read back (`nodeagent status`): the agent writes a few KiB.
const MAX_STATUS_FILE_BYTES: usize = 1024 * 1024;

/// One line of `events.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Unix time, milliseconds.
    pub ts_ms: u64,
    pub instance_id: String,
    pub boot: String,
    pub phase: Phase,
    pub step: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A [`Reporter`]'s state between the two halves of `--stage all`.
pub struct Carried {
    status: Status,
    platform_unreachable: bool,
    published_condition: Option<String>,
    published_ready: Option<&'static str>,
    cloud_init: crate::report::cloud_init::files::Tracker,
    outbox: Outbox,
}

/// What the reporter writes to on the node, opened at its first publish and held for the run
/// (both halves of `--stage all`): `/run/nodeagent` and the events log, each reached inside
/// the root by descriptor, so a status costs its own write and no walk of the path again.
#[derive(Default)]
struct Outbox {
    status_dir: Option<Arc<Dir>>,
    events: Option<std::fs::File>,
}

/// Publishes status at every phase change: `/run/nodeagent/status.json`,
/// `guestinfo.nodeagent.status` via the transport, and the events journal.
pub struct Reporter<'t> {
    pub transport: Option<&'t dyn Transport>,
    pub root: std::path::PathBuf,
    pub instance_id: String,
    status: Status,
    /// The last publish through the transport failed (a hung `info-set`, a serial port
    /// nobody reads): progress is no longer sent there, only terminal phases, so a dead
    /// platform channel costs at most two RPC_TIMEOUT_MS per run instead of one per phase.
    platform_unreachable: bool,
    /// Last values of the VM Operator keys, published again only when they change.
    published_condition: Option<String>,
    published_ready: Option<&'static str>,
    /// cloud-init's status files, moved on with every status (cloud_init/files.rs).
    cloud_init: crate::report::cloud_init::files::Tracker,
    outbox: Outbox,
}

impl<'t> Reporter<'t> {
    pub fn new(transport: Option<&'t dyn Transport>, root: &Path, instance_id: &str) -> Self {
        let now = now_rfc3339();
        let status = Status {
            v: 1,
            instance_id: instance_id.to_string(),
            phase: Phase::Reading,
            step: None,
            error: None,
            kind: None,
            started: now.clone(),
            updated: now,
            boot: boot_id(),
            detail: None,
            warnings: Vec::new(),
            output_tail: Vec::new(),
            since_ms: None,
            deadline_ms: None,
        };
        Reporter {
            transport,
            root: root.to_path_buf(),
            instance_id: instance_id.to_string(),
            status,
            platform_unreachable: false,
            published_condition: None,
            published_ready: None,
            cloud_init: crate::report::cloud_init::files::Tracker::new(
                root,
                false,
                cloud_init_datasource(transport, root),
            ),
            outbox: Outbox::default(),
        }
    }

    /// This reporter reports the local stage (cloud-init's `init-local`, which starts the
    /// boot's cloud-init status afresh).
    pub fn in_local_stage(mut self) -> Self {
        self.cloud_init = crate::report::cloud_init::files::Tracker::new(
            &self.root,
            true,
            cloud_init_datasource(self.transport, &self.root),
        );
        self
    }

    /// A step starts: cloud-init's status moves to the stage whose modules it belongs to (no
    /// status of nodeagent's own is published for it).
    pub fn cloud_init_step(&mut self, step: &str) {
        self.cloud_init.step(step);
    }

    /// The local stage is over: cloud-init's `init-local` finishes (the main stage goes on
    /// from it).
    pub fn end_local_stage(&mut self) {
        self.cloud_init.end_stage();
    }

    /// The local half of `--stage all` hands its reporter's state to the main half, which
    /// goes on from it: no second `reading`, and unchanged platform keys are not sent again.
    pub fn carry(self) -> Carried {
        Carried {
            status: self.status,
            platform_unreachable: self.platform_unreachable,
            published_condition: self.published_condition,
            published_ready: self.published_ready,
            cloud_init: self.cloud_init,
            outbox: self.outbox,
        }
    }

    /// A reporter that goes on from a [`carry`](Self::carry) of the same instance's run.
    pub fn resume(transport: Option<&'t dyn Transport>, root: &Path, carried: Carried) -> Self {
        Reporter {
            transport,
            root: root.to_path_buf(),
            instance_id: carried.status.instance_id.clone(),
            status: carried.status,
            platform_unreachable: carried.platform_unreachable,
            published_condition: carried.published_condition,
            published_ready: carried.published_ready,
            cloud_init: carried.cloud_init.into_main(),
            outbox: carried.outbox,
        }
    }

    /// The current status (what was last published).
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// Phase change (and current step). Failures to publish are logged, never fatal.
    /// A terminal phase is published once: repeating it is a no-op (the platform counts
    /// terminal reports).
    pub fn phase(&mut self, phase: Phase, step: Option<&str>) {
        if phase.is_terminal() && self.status.phase == phase {
            return;
        }
        let step = step.map(redact_text);
        if self.status.phase == phase
            && self.status.since_ms.is_some()
            && self.status.step == step
            && self.status.detail.is_none()
            && self.status.deadline_ms.is_none()
            && self.status.error.is_none()
        {
            return; // nothing a reader sees would change
        }
        if self.status.phase != phase || self.status.since_ms.is_none() {
            self.status.since_ms = Some(now_ms());
        }
        self.status.phase = phase;
        self.status.step = step;
        self.status.detail = None;
        self.status.deadline_ms = None;
        if !phase.is_terminal() {
            self.status.error = None;
        }
        self.publish();
    }

    /// What the current step is doing (e.g. `waiting for 10.0.0.10:6443 (attempt 3)`); published.
    pub fn detail(&mut self, detail: &str) {
        self.status.detail = Some(redact_text(detail));
        self.publish();
    }

    /// [`detail`](Self::detail) of a bounded wait that gives up after `secs`: `status --wait`
    /// shows its elapsed time against that deadline.
    pub fn detail_until(&mut self, detail: &str, secs: u64) {
        self.status.deadline_ms = Some(now_ms().saturating_add(secs.saturating_mul(1000)));
        self.detail(detail);
    }

    /// A non-fatal finding; a run that ends `done` with warnings is "degraded".
    pub fn warning(&mut self, message: &str) {
        self.status.warnings.push(redact_text(message));
    }

    /// Terminal failure: the failing step, a redacted reason, the last lines of kubeadm output.
    /// Published once: a second call (the run loop reporting the step's error after kubeadm's
    /// executor already reported it with its output) is logged and otherwise ignored.
    pub fn failed(&mut self, step: &str, kind: ErrorKind, reason: &str, output_tail: &[String]) {
        if self.status.phase == Phase::Failed {
            tracing::debug!(
                "failure already reported; not reporting again: {}",
                redact_text(reason)
            );
            return;
        }
        let from = output_tail.len().saturating_sub(TAIL_LINES);
        self.status.output_tail = output_tail[from..].iter().map(|l| redact_text(l)).collect();
        self.status.phase = Phase::Failed;
        self.status.step = Some(redact_text(step));
        self.status.detail = None;
        self.status.error = Some(redact_text(&format!("{step}: {reason}")));
        self.status.kind = Some(kind);
        self.publish();
    }

    /// Terminal success (published once, like `failed`).
    pub fn done(&mut self) {
        self.done_noting(None);
    }

    /// `done`, saying what happened when that is not "everything ran" (e.g. nothing was
    /// executed: every step was skipped without `--exec` or already finished).
    pub fn done_noting(&mut self, note: Option<&str>) {
        if self.status.phase == Phase::Done {
            return;
        }
        self.status.phase = Phase::Done;
        self.status.since_ms = Some(now_ms());
        self.status.step = None;
        self.status.detail = note.map(String::from);
        self.status.deadline_ms = None;
        self.status.error = None;
        self.status.kind = None;
        self.status.output_tail.clear();
        self.publish();
    }

    fn publish(&mut self) {
        self.status.updated = now_rfc3339();
        remember_for_panic(&self.root, &self.status);
        if let Err(e) = self.write_status_json() {
            tracing::warn!("status.json not written: {e}");
        }
        if let Err(e) = self.append_event() {
            tracing::warn!("status event not recorded: {e}");
        }
        self.cloud_init.publish(&self.status.cloud_init_view());
        if let Some(t) = self.transport {
            if self.platform_unreachable && !self.status.phase.is_terminal() {
                tracing::debug!("guestinfo.{STATUS_KEY} unreachable; progress not sent");
            } else {
                let json = self.status.compact_json();
                match t.set(STATUS_KEY, json.as_bytes()) {
                    Ok(()) => {
                        self.platform_unreachable = false;
                        // Only through a channel that answers: a dead one costs no more RPCs.
                        if t.publishes_guestinfo() {
                            self.publish_vm_operator(t);
                        }
                    }
                    Err(e) => {
                        self.platform_unreachable = true;
                        tracing::warn!(
                            "guestinfo.{STATUS_KEY} not published through {}: {e}",
                            t.name()
                        );
                    }
                }
            }
        }
        // Plain values: no `Some(..)`/`None` in the journal.
        tracing::info!(
            phase = %self.status.phase.as_str(),
            step = %self.status.step.as_deref().unwrap_or("-"),
            detail = %self.status.detail.as_deref().unwrap_or("-"),
            "status"
        );
    }

    /// VM Operator's condition key and the readiness key, when their value changed.
    fn publish_vm_operator(&mut self, t: &dyn Transport) {
        let condition = self.status.bootstrap_condition();
        if self.published_condition.as_ref() != Some(&condition) {
            match t.set(BOOTSTRAP_CONDITION_KEY, condition.as_bytes()) {
                Ok(()) => self.published_condition = Some(condition),
                Err(e) => tracing::warn!(
                    "guestinfo.{BOOTSTRAP_CONDITION_KEY} not published through {}: {e}",
                    t.name()
                ),
            }
        }
        let ready = self.status.ready();
        if self.published_ready != Some(ready) {
            match t.set(READY_KEY, ready.as_bytes()) {
                Ok(()) => self.published_ready = Some(ready),
                Err(e) => tracing::warn!(
                    "guestinfo.{READY_KEY} not published through {}: {e}",
                    t.name()
                ),
            }
        }
    }

    fn write_status_json(&mut self) -> std::io::Result<()> {
        let json = serde_json::to_string_pretty(&self.status).map_err(std::io::Error::other)?;
        let (parent, name) = STATUS_JSON.rsplit_once('/').unwrap_or(("", STATUS_JSON));
        let dir = match &self.outbox.status_dir {
            Some(dir) => dir.clone(),
            None => {
                let dir = Arc::new(crate::base::confine::own_dir(&self.root, parent)?);
                self.outbox.status_dir.insert(dir).clone()
            }
        };
        let opts = crate::base::fsio::Options::new(0o644).volatile().shared();
        Ok(crate::base::fsio::write_in(
            &dir,
            name,
            json.as_bytes(),
            &opts,
        )?)
    }

    fn append_event(&mut self) -> std::io::Result<()> {
        use std::io::Write;
        let ev = Event {
            ts_ms: now_ms(),
            instance_id: self.status.instance_id.clone(),
            boot: self.status.boot.clone(),
            phase: self.status.phase,
            step: self.status.step.clone(),
            detail: self.status.detail.clone(),
        };
        let mut line = serde_json::to_string(&ev).map_err(std::io::Error::other)?;
        line.push('\n');
        // Made 0640 inside the root; a link, FIFO or second hard link at the name refused.
        let file = match self.outbox.events.take() {
            Some(file) => file,
            None => {
                let (uid, gid) = crate::base::confine::own_ids();
                let (parent, name) = EVENTS.rsplit_once('/').unwrap_or(("", EVENTS));
                Dir::make(&self.root, parent, 0o755, uid, gid)?
                    .0
                    .open_append(name, 0o640, uid, gid)?
                    .0
            }
        };
        let written = (&file).write_all(line.as_bytes());
        self.outbox.events = Some(file);
        written
    }
}

/// `str(datasource)` for cloud-init's status.json: the transport read, in cloud-init's words;
/// a NoCloud seed named as the node sees it (inside the root).
fn cloud_init_datasource(transport: Option<&dyn Transport>, root: &Path) -> Option<String> {
    let t = transport?;
    let seed = t.nocloud_seed().map(|d| {
        let p = d.path();
        let inside = p.strip_prefix(root).unwrap_or(&p);
        format!("/{}", inside.display().to_string().trim_start_matches('/'))
    });
    Some(crate::report::cloud_init::files::datasource(
        t.name(),
        seed.as_deref(),
    ))
}

/// A file under `/run` (status, sentinel): create-temp, write, rename, so readers never see
/// a half-written file. No fsync: `/run` is tmpfs on a node and gone after any reboot, so a
/// sync would protect nothing (and costs a journal commit when `--root` is on disk).
/// Written through fsio.rs with a per-process temp name: `status` and the agent may publish
/// at the same time.
pub fn write_run_file(path: &Path, data: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("no parent directory"))?;
    std::fs::create_dir_all(dir)?;
    let opts = crate::base::fsio::Options::new(mode).volatile().shared();
    Ok(crate::base::fsio::write_atomic(path, data, &opts)?)
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// The kernel's boot id as status shows it ("" when unreadable; no test override).
fn boot_id() -> String {
    crate::base::process::kernel_boot_id()
        .unwrap_or_default()
        .to_string()
}

// ---- guestinfo helpers ---------------------------------------------------------------

/// Keys to blank after a successful bootstrap (cloud-init's VMware datasource behaviour):
/// `userdata` when the image config says so (default on), plus what metadata `redact:` names
/// (with or without the `guestinfo.` prefix).
pub fn keys_to_redact(redact_userdata: bool, metadata_redact: &[String]) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    if redact_userdata {
        keys.push("userdata".into());
    }
    for k in metadata_redact {
        let k = k.trim().trim_start_matches("guestinfo.").to_string();
        if !k.is_empty() && !k.ends_with(".encoding") && !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
}

/// Overwrite each key with `---` and its `.encoding` with a blank, as cloud-init does, so
/// the bootstrap secrets no longer sit in the VM's ExtraConfig (delegates to the transport
/// layer's `redact_keys`). Returns the keys that could not be cleared.
pub fn redact_guestinfo(transport: &dyn Transport, keys: &[String]) -> Vec<(String, String)> {
    crate::source::transport::redact_keys(transport, keys)
        .into_iter()
        .map(|e| (e.place, e.message))
        .collect()
}

/// Publish `guestinfo.local-ipv4` / `local-ipv6` (absent families are not written).
pub fn publish_local_addresses(transport: &dyn Transport, facts: &crate::source::facts::Facts) {
    // The addresses come from the host facts, chosen by cloud-init's rule (the single
    // address of the default-route interface), so `--facts` runs publish what they render.
    for (key, addr) in [
        ("local-ipv4", &facts.local_ipv4),
        ("local-ipv6", &facts.local_ipv6),
    ] {
        if let Some(a) = addr
            && let Err(e) = transport.set(key, a.as_bytes())
        {
            tracing::warn!("guestinfo.{key} not published: {e}");
        }
    }
}

/// Where `nodeagent status` and the tests find files under a root.
pub fn status_path(root: &Path) -> PathBuf {
    root.join(STATUS_JSON)
}

// ---- a panic is reported, not silent ---------------------------------------------------

/// The last published status and its root: what the panic hook turns into `failed`.
static LAST_STATUS: std::sync::Mutex<Option<(PathBuf, Status)>> = std::sync::Mutex::new(None);

thread_local! {
    /// The run's platform channel, only on the thread that armed it (transports are not
    /// `Sync`); see [`arm_panic_channel`].
    static PANIC_TRANSPORT: std::cell::Cell<Option<*const (dyn Transport + 'static)>> =
        const { std::cell::Cell::new(None) };
}

fn remember_for_panic(root: &Path, status: &Status) {
    if let Ok(mut last) = LAST_STATUS.try_lock() {
        *last = Some((root.to_path_buf(), status.clone()));
    }
}

/// While this guard lives, a panic on this thread also publishes `failed` through `t`.
pub struct PanicChannel<'t> {
    _transport: std::marker::PhantomData<&'t dyn Transport>,
}

/// Let the panic hook publish through `t` until the returned guard is dropped.
pub fn arm_panic_channel(t: &dyn Transport) -> PanicChannel<'_> {
    let p: *const (dyn Transport + '_) = t;
    // SAFETY: only the lifetime is erased. The pointer is cleared when the guard, which
    // borrows `t`, is dropped; it is read only by the panic hook on this same thread, while
    // the guard (and so `t`) is alive: the hook runs before any unwinding, and under
    // panic=abort nothing is ever unwound.
    let p: *const (dyn Transport + 'static) = unsafe { std::mem::transmute(p) };
    PANIC_TRANSPORT.with(|c| c.set(Some(p)));
    PanicChannel {
        _transport: std::marker::PhantomData,
    }
}

impl Drop for PanicChannel<'_> {
    fn drop(&mut self) {
        PANIC_TRANSPORT.with(|c| c.set(None));
    }
}

/// Longest panic text kept in a report (after the cut at the first quoted input).
const PANIC_TEXT_CHARS: usize = 120;

/// Install the hook that reports a panic as `failed` (status.json, guestinfo status, the
/// serial port through the armed transport) before the process ends, and prints one
/// redacted line instead of Rust's default message (which may quote input).
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let reason = panic_reason(info);
        eprintln!("nodeagent: {reason}");
        publish_panic(&reason);
    }));
}

/// `internal error at FILE:LINE: TEXT`, where TEXT stops before the first quoted value
/// (std's slicing messages quote the string) and is redacted.
fn panic_reason(info: &std::panic::PanicHookInfo<'_>) -> String {
    let payload = info
        .payload()
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| info.payload().downcast_ref::<String>().cloned())
        .unwrap_or_default();
    let text: String = payload
        .split(['`', '"', '\''])
        .next()
        .unwrap_or_default()
        .chars()
        .take(PANIC_TEXT_CHARS)
        .collect();
    let place = info
        .location()
        .map(|l| format!("{}:{}", l.file(), l.line()))
        .unwrap_or_else(|| "unknown place".into());
    redact_text(&format!("internal error at {place}: {}", text.trim_end()))
}

/// Turn the last published status into `failed` with `reason`, everywhere it goes.
fn publish_panic(reason: &str) {
    // try_lock: a panic while the lock is held must not deadlock the hook.
    let Ok(mut last) = LAST_STATUS.try_lock() else {
        return;
    };
    let Some((root, status)) = last.as_mut() else {
        return;
    };
    status.phase = Phase::Failed;
    status.detail = None;
    status.error = Some(reason.to_string());
    status.kind = Some(ErrorKind::Internal);
    status.updated = now_rfc3339();
    if let Ok(json) = serde_json::to_string_pretty(status)
        && let Ok(path) = crate::base::confine::file(root, STATUS_JSON)
    {
        let _ = write_run_file(&path, json.as_bytes(), 0o644);
    }
    // cloud-init's status ends too: `cloud-init status --wait` returns with the error.
    crate::report::cloud_init::files::Tracker::new(root, false, None)
        .publish(&status.cloud_init_view());
    let compact = status.compact_json();
    PANIC_TRANSPORT.with(|c| {
        if let Some(p) = c.get() {
            // SAFETY: see arm_panic_channel: set only while the transport is borrowed by the
            // live guard, read only on its own thread.
            let t = unsafe { &*p };
            let _ = t.set(STATUS_KEY, compact.as_bytes());
        }
    });
}

pub mod analyze;
pub mod cloud_init;
pub mod logbundle;
pub mod output;
pub mod query;

#[cfg(test)]
mod tests;
