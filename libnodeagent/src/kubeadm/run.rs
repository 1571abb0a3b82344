//! Running kubeadm: endpoint wait before a join, a deadline per invocation, output into
//! the journal and `/var/log/nodeagent/kubeadm.log` with secrets redacted, `kubeadm reset -f`
//! between join attempts followed by a restore of the bootstrap files it deleted, the CAPI
//! sentinel only after success.

use super::detect::SENTINEL;
use super::endpoint;
use crate::base::error::{Error, ErrorKind, Result, Stage};
use crate::base::process;
use crate::base::redact::{self, Redactor};
use crate::base::supervise;
use crate::plan::{KubeadmMode, KubeadmSpec};
use crate::report::{Phase, Reporter, TAIL_LINES};
use crate::source::config::KubeadmSettings;
use std::collections::VecDeque;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub const OUTPUT_LOG: &str = "var/log/nodeagent/kubeadm.log";
/// Step name used in status and errors.
pub const STEP: &str = "kubeadm";
/// How much longer than the supervisor's kill grace the agent waits for a supervisor whose
/// kubeadm overran its deadline (it records the status and exits right after the kill).
const SUPERVISOR_SLACK: Duration = Duration::from_secs(5);
/// Deadline of one `kubeadm reset -f`.
const RESET_TIMEOUT: Duration =
    Duration::from_secs(crate::base::limits::KUBEADM_RESET_TIMEOUT_SECS);

/// How kubeadm is started: `kubeadm` from PATH in production; tests point it at the stand-in.
#[derive(Debug, Clone)]
pub struct Runner {
    pub program: PathBuf,
    pub env: Vec<(String, String)>,
    /// Under `--root DIR` (a root other than `/`), run kubeadm chrooted into DIR, as on that
    /// node: `program` and `--config` are paths inside DIR. Off only in tests that drive the
    /// stand-in from outside the root (`KUBEADM_STANDIN_ROOT`).
    pub chroot: bool,
    /// The working directory (inside the root): where the runcmd items before the kubeadm
    /// line left it, as in cloud-init's one runcmd script.
    pub dir: Option<String>,
}

impl Default for Runner {
    fn default() -> Self {
        Runner {
            program: PathBuf::from("kubeadm"),
            env: Vec::new(),
            chroot: true,
            dir: None,
        }
    }
}

impl Runner {
    /// The directory kubeadm is chrooted into: the root, unless it is `/` or `chroot` is off.
    fn chroot_dir<'a>(&self, root: &'a Path) -> Option<&'a Path> {
        (self.chroot && root != Path::new("/")).then_some(root)
    }
}

/// How `kubeadm init|join` runs under the agent's exactly-once protocol (apply/mod.rs): through
/// the supervisor (`nodeagent __supervise-piped RC TIMEOUT kubeadm ARGS`), which keeps the
/// step's lock as fd 9 while kubeadm runs and records its exit status in `rc`, so that a
/// restarted agent waits for an orphaned kubeadm instead of starting a second one.
#[derive(Debug)]
pub struct Supervise {
    /// The nodeagent binary.
    pub exe: PathBuf,
    pub rc: PathBuf,
    /// The step's lock, held by the agent; handed to the supervisor.
    pub lock_fd: std::os::fd::RawFd,
}

thread_local! {
    /// Set by `supervised` for the kubeadm step: a scoped extra argument of `run_kubeadm`, so
    /// the runner and the retry loop stay as they are.
    static SUPERVISE: std::cell::RefCell<Option<Supervise>> = const { std::cell::RefCell::new(None) };
}

/// Run `f` (the kubeadm step) with its init/join invocations supervised by `sup`.
pub fn supervised<T>(sup: Supervise, f: impl FnOnce() -> T) -> T {
    SUPERVISE.with(|s| *s.borrow_mut() = Some(sup));
    let out = f();
    SUPERVISE.with(|s| *s.borrow_mut() = None);
    out
}

/// Result of one kubeadm invocation.
#[derive(Debug)]
pub struct Outcome {
    pub success: bool,
    /// Why it failed: `exit status 1`, `timed out after 600s`, `cannot start kubeadm: …`.
    pub reason: String,
    /// What kind of failure (`command-failed` or `timeout`) when it failed.
    pub kind: ErrorKind,
    /// Last lines of output, redacted.
    pub tail: Vec<String>,
}

pub fn execute_with(
    spec: &KubeadmSpec,
    settings: &KubeadmSettings,
    root: &Path,
    reporter: &mut Reporter<'_>,
    runner: &Runner,
) -> Result<()> {
    execute_restoring(spec, settings, root, reporter, runner, &|| Ok(()))
}

/// Before an init whose earlier start was killed midway (a `begin` of the step and no
/// recorded status): what it wrote (manifests, the etcd dir, kubeconfigs) fails the new
/// init's preflight (`FileAvailable`, `DirAvailable`) and the node would never come up. As
/// between join attempts: `kubeadm reset -f`, then the plan's files reset deleted (the CAs,
/// the config) written again. A failed reset is logged; the init's preflight then says why.
pub fn reset_interrupted(root: &Path, restore: &dyn Fn() -> Result<()>) -> Result<()> {
    tracing::warn!("kubeadm init was killed midway by an earlier run: kubeadm reset -f first");
    let mut log = OutputLog::open(root);
    let reset = run_kubeadm(
        &Runner::default(),
        &["reset".into(), "-f".into()],
        RESET_TIMEOUT,
        &mut log,
    );
    if !reset.success {
        tracing::warn!("kubeadm reset -f failed: {}", reset.reason);
    }
    restore().map_err(|e| e.within("kubeadm reset"))
}

/// `execute_with`, calling `restore` after each `kubeadm reset -f` and before the next join
/// attempt: it writes again the bootstrap files reset deleted (see `reset.rs`). A failed
/// restore ends the retries: an attempt without the node's CA cannot succeed.
pub fn execute_restoring(
    spec: &KubeadmSpec,
    settings: &KubeadmSettings,
    root: &Path,
    reporter: &mut Reporter<'_>,
    runner: &Runner,
    restore: &dyn Fn() -> Result<()>,
) -> Result<()> {
    let in_root = |path: &str| {
        crate::base::confine::dir(root, path).map_err(|e| Error::io(Stage::Kubeadm, path, "", e))
    };
    let sentinel = in_root(SENTINEL)?;
    if sentinel.exists() {
        tracing::info!(
            "{} exists: kubeadm already succeeded for this instance, not running it again",
            sentinel.display()
        );
        return Ok(());
    }
    let config_file = in_root(&spec.config_path)?.display().to_string();
    // Chrooted, kubeadm finds its config at the path inside the root.
    let config_arg = match runner.chroot_dir(root) {
        Some(_) => spec.config_path.clone(),
        None => config_file.clone(),
    };
    let mut args = vec![
        match spec.mode {
            KubeadmMode::Init => "init",
            KubeadmMode::Join => "join",
        }
        .to_string(),
        "--config".into(),
        config_arg,
    ];
    args.extend(spec.extra_args.iter().cloned());
    let settings = &widened_to_kubeadm(settings, root, &spec.config_path);
    let mut run = StepRun {
        settings,
        runner,
        args,
        log: OutputLog::open(root),
        // The plan's step id when the run loop announced it, else `kubeadm`.
        step: reporter
            .status()
            .step
            .clone()
            .unwrap_or_else(|| STEP.to_string()),
        reporter,
    };
    let done = match spec.mode {
        KubeadmMode::Init => run.init(),
        KubeadmMode::Join => run.join(
            || {
                spec.endpoint
                    .clone()
                    .or_else(|| join_endpoint(root, &spec.config_path))
            },
            restore,
            &|| super::validate::refusal(root, &spec.config_path),
        ),
    };
    if let Err(f) = done {
        run.reporter.failed(&run.step, f.kind, &f.reason, &f.tail);
        return Err(Error::of(
            f.kind,
            Stage::Kubeadm,
            STEP,
            redact::redact_text(&f.reason),
        ));
    }
    write_sentinel(root).map_err(|e| {
        Error::io(
            Stage::Kubeadm,
            sentinel.display().to_string(),
            "cannot write the sentinel",
            e,
        )
    })?;
    Ok(())
}

/// Beyond kubeadm's own waits, what one invocation needs for the rest of its work (certificates,
/// manifests, uploads) on a slow machine.
const KUBEADM_WORK_MARGIN_SECS: u64 = 120;

/// The settings with the per-invocation deadline (and the join deadline) raised to kubeadm's
/// own waits plus a margin, where the config's v1beta4 `timeouts` make them longer: a user
/// who gives kubeadm 20 minutes for the control plane to come up must not see the agent stop
/// kubeadm after 10. An unreadable config changes nothing (kubeadm then says what is wrong).
fn widened_to_kubeadm(
    settings: &KubeadmSettings,
    root: &Path,
    config_path: &str,
) -> KubeadmSettings {
    let mut out = settings.clone();
    let waits = crate::base::confine::open_read(root, config_path)
        .ok()
        .and_then(|f| {
            use std::io::Read;
            let mut text = String::new();
            f.take(crate::base::limits::MAX_DECODED_BYTES as u64)
                .read_to_string(&mut text)
                .ok()
                .map(|_| text)
        })
        .and_then(|text| super::config::parse(&text, config_path).ok())
        .and_then(|c| c.own_waits_secs());
    if let Some(w) = waits {
        let need = w.saturating_add(KUBEADM_WORK_MARGIN_SECS);
        if need > out.timeout_secs {
            tracing::info!(
                "kubeadm's own timeouts in {config_path} add up to {w}s: its deadline is {need}s, not {}s",
                out.timeout_secs
            );
            out.timeout_secs = need;
            out.join_deadline_secs = out.join_deadline_secs.max(need);
        }
    }
    out
}

/// Why the kubeadm step failed: what its status report and its error are made of.
struct Failed {
    kind: ErrorKind,
    reason: String,
    /// Last lines of kubeadm's output, redacted.
    tail: Vec<String>,
}

/// One kubeadm step: its invocations share the runner, the arguments, the output log and
/// the status reporter.
struct StepRun<'a, 'r> {
    settings: &'a KubeadmSettings,
    runner: &'a Runner,
    args: Vec<String>,
    log: OutputLog,
    step: String,
    reporter: &'a mut Reporter<'r>,
}

impl StepRun<'_, '_> {
    /// `kubeadm init`, once, bounded by the step timeout.
    fn init(&mut self) -> std::result::Result<(), Failed> {
        let timeout = self.settings.timeout_secs.max(1);
        self.reporter.phase(Phase::Kubeadm, Some(&self.step));
        self.reporter.detail_until("kubeadm init", timeout);
        let out = run_kubeadm(
            self.runner,
            &self.args,
            Duration::from_secs(timeout),
            &mut self.log,
        );
        if out.success {
            return Ok(());
        }
        Err(Failed {
            kind: out.kind,
            reason: format!("kubeadm init failed: {}", out.reason),
            tail: out.tail,
        })
    }

    /// `kubeadm join`, up to `join_attempts` times within the join deadline: each attempt
    /// after the control-plane endpoint (from `endpoint`) answers, a `kubeadm reset -f` and
    /// `restore` between attempts, with backoff. After a failed first attempt, `refusal` asks
    /// whether the node's kubeadm refuses the config itself: then no retry can succeed.
    fn join(
        &mut self,
        endpoint: impl FnOnce() -> Option<String>,
        restore: &dyn Fn() -> Result<()>,
        refusal: &dyn Fn() -> Option<String>,
    ) -> std::result::Result<(), Failed> {
        let settings = self.settings;
        let start = Instant::now();
        let deadline = start + Duration::from_secs(settings.join_deadline_secs.max(1));
        let endpoint = endpoint();
        let attempts = settings.join_attempts.max(1);
        let mut last: Option<Outcome> = None;
        let mut tried = 0;
        for attempt in 1..=attempts {
            if let Some(ep) = &endpoint
                && let Err(e) = self.wait_for_endpoint(ep, deadline)
            {
                let waited = start.elapsed().as_secs();
                return Err(Failed {
                    kind: ErrorKind::Timeout,
                    reason: format!(
                        "control-plane endpoint {ep} not reachable after {waited}s: {e}"
                    ),
                    tail: last.map(|o| o.tail).unwrap_or_default(),
                });
            }
            self.reporter.phase(Phase::Kubeadm, Some(&self.step));
            let left = deadline.saturating_duration_since(Instant::now());
            self.reporter.detail_until(
                &format!("kubeadm join, attempt {attempt} of {attempts}"),
                settings.timeout_secs.max(1).min(left.as_secs()),
            );
            let out = run_kubeadm(
                self.runner,
                &self.args,
                Duration::from_secs(settings.timeout_secs.max(1)).min(left),
                &mut self.log,
            );
            tried = attempt;
            if out.success {
                last = None;
                break;
            }
            tracing::warn!(
                "kubeadm join attempt {attempt} of {attempts} failed: {}",
                out.reason
            );
            if attempt == 1
                && let Some(why) = refusal()
            {
                return Err(Failed {
                    kind: ErrorKind::CommandFailed,
                    reason: format!("kubeadm join failed: {why}"),
                    tail: out.tail,
                });
            }
            last = Some(out);
            if attempt == attempts || Instant::now() >= deadline {
                break;
            }
            if let Err(e) = self.reset(deadline, restore) {
                return Err(Failed {
                    kind: ErrorKind::Io,
                    reason: format!("cannot restore the bootstrap files after kubeadm reset: {e}"),
                    tail: last.map(|o| o.tail).unwrap_or_default(),
                });
            }
            let pause = endpoint::backoff(
                attempt - 1,
                settings.backoff_initial_secs,
                settings.backoff_max_secs,
            );
            std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
        }
        match last {
            None => Ok(()),
            Some(out) => Err(Failed {
                kind: out.kind,
                reason: format!(
                    "kubeadm join failed after {tried} attempt(s) in {}s: {}",
                    start.elapsed().as_secs(),
                    out.reason
                ),
                tail: out.tail,
            }),
        }
    }

    /// Wait for the control-plane endpoint, at most `endpoint_wait_secs` and never past the
    /// join deadline.
    fn wait_for_endpoint(
        &mut self,
        ep: &str,
        deadline: Instant,
    ) -> std::result::Result<u32, String> {
        let settings = self.settings;
        self.reporter.phase(Phase::Waiting, Some(&self.step));
        let wait_deadline =
            (Instant::now() + Duration::from_secs(settings.endpoint_wait_secs)).min(deadline);
        self.reporter.detail_until(
            &format!("waiting for the control-plane endpoint {ep}"),
            wait_deadline
                .saturating_duration_since(Instant::now())
                .as_secs(),
        );
        endpoint::wait_for(
            ep,
            wait_deadline,
            settings.backoff_initial_secs,
            settings.backoff_max_secs,
            |n, e| {
                tracing::info!("control-plane endpoint {ep} not reachable yet (probe {n}): {e}");
            },
        )
    }

    /// Between join attempts: a failed join leaves files (kubelet.conf, manifests) that make
    /// the next one fail, so `kubeadm reset -f`, then `restore` the bootstrap files it deleted.
    fn reset(&mut self, deadline: Instant, restore: &dyn Fn() -> Result<()>) -> Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        let reset = run_kubeadm(
            self.runner,
            &["reset".into(), "-f".into()],
            RESET_TIMEOUT.min(left),
            &mut self.log,
        );
        if !reset.success {
            tracing::warn!("kubeadm reset -f failed: {}", reset.reason);
        }
        restore()
    }
}

/// `/run/cluster-api/bootstrap-success.complete` with `success`, as CABPK's `echo success >` would.
pub fn write_sentinel(root: &Path) -> std::io::Result<()> {
    crate::report::write_run_file(
        &crate::base::confine::file(root, SENTINEL)?,
        b"success\n",
        0o644,
    )
}

/// The endpoint a join must reach: `discovery.bootstrapToken.apiServerEndpoint`, or the
/// server of the discovery kubeconfig (`discovery.file.kubeConfigPath`). `config_path` is the
/// config's path inside `root`; both files are read inside the root, bounded.
pub fn join_endpoint(root: &Path, config_path: &str) -> Option<String> {
    let text =
        crate::base::confine::read_bounded(root, config_path, crate::formats::yaml::MAX_YAML_BYTES)
            .ok()?;
    let cfg = super::config::parse(std::str::from_utf8(&text).ok()?, config_path).ok()?;
    if let Some(ep) = cfg.join_endpoint() {
        return Some(ep);
    }
    let path = cfg
        .join
        .as_ref()?
        .spec
        .discovery
        .file
        .as_ref()?
        .kube_config_path
        .clone();
    if !path.starts_with('/') {
        return None; // https URL: fetched by kubeadm itself
    }
    let text =
        crate::base::confine::read_bounded(root, &path, crate::formats::yaml::MAX_YAML_BYTES)
            .ok()?;
    let doc = crate::formats::yaml::Doc::new(crate::base::error::Stage::Kubeadm, &path)
        .duplicate_keys(true);
    let kc = crate::formats::yaml::read_bytes(doc, &text).ok()?.to_json();
    let server = kc["clusters"][0]["cluster"]["server"].as_str()?;
    let hostport = server.strip_prefix("https://")?.split('/').next()?;
    match super::config::split_host_port(hostport)? {
        (h, Some(p)) if h.contains(':') => Some(format!("[{h}]:{p}")),
        (h, Some(p)) => Some(format!("{h}:{p}")),
        (h, None) if h.contains(':') => Some(format!("[{h}]:443")),
        (h, None) => Some(format!("{h}:443")),
    }
}

/// Redacted kubeadm output, appended to `/var/log/nodeagent/kubeadm.log` (0640; at
/// `outlog::MAX_BYTES` it is rotated to `kubeadm.log.1`, so a kubeadm printing without end
/// never fills `/var/log`).
pub struct OutputLog {
    file: Option<std::fs::File>,
    /// Bytes in the file.
    size: u64,
    /// Also copied to `/var/log/nodeagent-output.log` (outlog.rs) under this root.
    root: std::path::PathBuf,
}

impl OutputLog {
    pub fn open(root: &Path) -> OutputLog {
        // Parents resolved inside the root (confine.rs); a link, a FIFO or a hard link at the
        // file itself refused (outlog::open_append).
        let file = Self::open_file(root);
        if file.is_none() {
            tracing::warn!(
                "{} cannot be opened; kubeadm output goes to the journal only",
                root.join(OUTPUT_LOG).display()
            );
        }
        OutputLog {
            size: file
                .as_ref()
                .and_then(|f| f.metadata().ok())
                .map_or(0, |m| m.len()),
            file,
            root: root.to_path_buf(),
        }
    }

    fn open_file(root: &Path) -> Option<std::fs::File> {
        crate::base::confine::file(root, OUTPUT_LOG)
            .ok()
            .filter(|p| {
                p.parent()
                    .map(std::fs::create_dir_all)
                    .is_some_and(|r| r.is_ok())
            })
            .and_then(|p| crate::base::outlog::open_append(&p).ok())
    }

    fn line(&mut self, text: &str) {
        tracing::info!(target: "kubeadm", "{text}");
        let len = text.len() as u64 + 1;
        if self.file.is_some() && self.size + len > crate::base::outlog::MAX_BYTES {
            if let Ok(p) = crate::base::confine::file(&self.root, OUTPUT_LOG) {
                let mut rotated = p.clone().into_os_string();
                rotated.push(".1");
                let _ = std::fs::rename(&p, rotated);
            }
            self.file = Self::open_file(&self.root);
            self.size = 0;
        }
        if let Some(f) = &mut self.file
            && writeln!(f, "{text}").is_ok()
        {
            self.size += len;
        }
        crate::base::outlog::append(&self.root, "kubeadm", &[text]);
    }
}

/// Run `runner.program args…` with a deadline (process.rs: the whole group is killed when it
/// passes), streaming redacted output lines to `log`.
pub fn run_kubeadm(
    runner: &Runner,
    args: &[String],
    timeout: Duration,
    log: &mut OutputLog,
) -> Outcome {
    let shown = redact::redact_text(&format!("{} {}", runner.program.display(), args.join(" ")));
    log.line(&format!("$ {shown}"));
    // init and join are supervised (exactly once); `reset -f` is not: its status must never
    // be taken for the join's.
    let main_call = matches!(args.first().map(String::as_str), Some("init" | "join"));
    let sup = SUPERVISE.with(|s| {
        s.borrow()
            .as_ref()
            .filter(|_| main_call)
            .map(|s| (s.exe.clone(), s.rc.clone(), s.lock_fd))
    });
    // Supervised, kubeadm's own deadline is the supervisor's (it kills kubeadm's group and
    // records the timeout); the agent's bound on the supervisor is that plus the kill grace,
    // so it only fires if the supervisor itself hangs. Both are cut to the run's deadline.
    let margin = supervise::KILL_AFTER + SUPERVISOR_SLACK;
    let own = match process::run_time_left() {
        Some(left) if sup.is_some() => timeout.min(left.saturating_sub(margin)),
        Some(left) => timeout.min(left),
        None => timeout,
    };
    // Inside the kubeadm step (`supervised`), an unsupervised call (`reset -f`) holds the
    // step's lock too: should the agent be killed while it runs, the next run waits for it
    // instead of starting a reset or init beside it (the crash test saw such overlaps).
    let step_lock = SUPERVISE.with(|s| s.borrow().as_ref().map(|s| s.lock_fd));
    let chroot = runner.chroot_dir(&log.root);
    let (mut cmd, limits) = match &sup {
        None => {
            let mut c = Command::new(&runner.program);
            if let Some(fd) = step_lock {
                supervise::pass_lock(&mut c, fd);
            }
            // Unsupervised calls are `reset -f`: the directory does not matter to them.
            if let Some(dir) = chroot
                && let Err(e) = process::chroot_into(&mut c, dir, None)
            {
                return Outcome {
                    success: false,
                    reason: format!("cannot run kubeadm in {}: {e}", dir.display()),
                    kind: ErrorKind::CommandFailed,
                    tail: Vec::new(),
                };
            }
            (c, process::Limits::new(timeout))
        }
        Some((exe, rc, lock_fd)) => {
            let mut c = Command::new(exe);
            c.arg0("nodeagent").arg(supervise::ARG_PIPED);
            if let Some(dir) = chroot {
                c.arg(supervise::CHROOT).arg(dir);
            }
            if let Some(d) = &runner.dir {
                c.arg(supervise::CWD).arg(d);
            }
            c.arg(rc)
                .arg(own.as_secs().max(1).to_string())
                .arg(&runner.program);
            supervise::pass_lock(&mut c, *lock_fd);
            (
                c,
                process::Limits::new(own.max(Duration::from_secs(1)) + margin),
            )
        }
    };
    cmd.args(args).envs(runner.env.iter().map(|(k, v)| (k, v)));
    // One redactor for both streams: a marker on one covers the secret on the other.
    let mut redactor = Redactor::new();
    let mut tail: VecDeque<String> = VecDeque::with_capacity(TAIL_LINES + 1);
    let mut keep = |line: String, log: &mut OutputLog| {
        log.line(&line);
        tail.push_back(line);
        if tail.len() > TAIL_LINES {
            tail.pop_front();
        }
    };
    let result = process::run_streaming(cmd, &limits, None, &mut |stream, chunk| {
        redactor.push(stream as usize, chunk, &mut |l| keep(l, log));
    });
    redactor.finish(&mut |l| keep(l, log));
    let (success, kind, reason) = judge(result, sup.is_some(), own);
    log.line(&format!(
        "# {} {}",
        args.first().map(String::as_str).unwrap_or(""),
        if success { "succeeded" } else { &reason }
    ));
    Outcome {
        success,
        kind,
        reason,
        tail: tail.into(),
    }
}

/// Whether one invocation succeeded and, if not, what kind of failure and why. `own` is
/// kubeadm's deadline when `supervised` (the supervisor reports its timeout as an exit status).
fn judge(
    result: std::result::Result<std::process::ExitStatus, process::ProcessError>,
    supervised: bool,
    own: Duration,
) -> (bool, ErrorKind, String) {
    match result {
        Ok(s) if s.success() => (true, ErrorKind::CommandFailed, String::new()),
        // The supervisor stopped kubeadm at its deadline (as coreutils `timeout` says it).
        Ok(s) if supervised && s.code() == Some(supervise::TIMED_OUT) => (
            false,
            ErrorKind::Timeout,
            format!(
                "timed out after {}",
                process::show_duration(own.max(Duration::from_secs(1)))
            ),
        ),
        Ok(s) => (false, ErrorKind::CommandFailed, s.to_string()),
        Err(process::ProcessError::TimedOut { after, .. }) => (
            false,
            ErrorKind::Timeout,
            format!("timed out after {}", process::show_duration(after)),
        ),
        Err(e) => (false, ErrorKind::CommandFailed, e.to_string()),
    }
}
