//! `nodeagent run`: read, plan, apply (stage local, main or all), journaled.

use libnodeagent::apply::{self, Options, Target};
use libnodeagent::base::error::{Error, ErrorKind, Result, Stage, exit};
use libnodeagent::base::state::State;
use libnodeagent::plan::RunStage;
use libnodeagent::report::{self, Phase, Reporter};
use libnodeagent::{pipeline, render::instance};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// `local`: hostname and network (before the network is up); `main`: everything else.
    #[arg(long, value_enum, default_value = "all")]
    pub stage: RunStage,
    /// With --root: also run commands, disk tools and kubeadm (always on when the root is /).
    #[arg(long)]
    pub exec: bool,
    /// --transport, --facts, --compat, --root DIR (every path under DIR; users and groups
    /// from DIR/etc; commands only with --exec).
    #[command(flatten)]
    pub data: super::common::DataArgs,
    /// Print the run's outcome as JSON on stdout (errors as JSON too); logs stay on stderr.
    #[arg(long)]
    pub json: bool,
    /// `nodeagent single`: only this module's steps (libnodeagent::plan::single).
    #[arg(skip)]
    pub only: Option<libnodeagent::plan::single::Selection>,
}

/// Where `run` logs: the journal on a real node (the root is `/` and journald is up), so the
/// boot's record is in `journalctl -u nodeagent`; stderr for `--root` trial runs.
pub fn logs_to_journal(data: &super::common::DataArgs) -> bool {
    Target::new(&data.root).is_host()
        && std::path::Path::new("/run/systemd/journal/socket").exists()
}

pub fn run(args: Args) -> i32 {
    let target = Target::new(&args.data.root);
    let on_host = target.is_host();
    let code = match run_inner(&args, target) {
        Ok(code) => code,
        // Any error of a run is a failure (1), whatever its stage: the units and the platform
        // know 0, 1 and 2 only.
        Err(e) => {
            super::common::fail("run", &e, args.json);
            exit::FAILED
        }
    };
    // The boot priority ends with the run, for what its commands left running too.
    if on_host && args.stage != RunStage::Local {
        libnodeagent::base::priority::lower_left_behind();
    }
    code
}

fn run_inner(args: &Args, target: Target) -> Result<i32> {
    // No external program of this run outlives RUN_DEADLINE_SECS (TimeoutStartSec=infinity).
    libnodeagent::base::process::set_run_deadline(std::time::Duration::from_secs(
        libnodeagent::base::limits::RUN_DEADLINE_SECS,
    ));
    let stage = args.stage;
    let publish = args.only.is_none();
    // The local unit's sandbox, before any platform data is read (libnodeagent::source::writeguard); a
    // `--root` run writes into a tree that is not a node, and is not confined.
    if stage == RunStage::Local && publish && target.is_host() {
        libnodeagent::source::writeguard::confine_local_stage(args.data.transport.as_deref());
    }
    // The root and the host's `/` (transport directories) opened once for the run, not for
    // each path (libnodeagent::base::confine::hold); without them each path opens its root again.
    let mut _held = vec![libnodeagent::base::confine::hold(&target.root).ok()];
    if !target.is_host() {
        _held.push(libnodeagent::base::confine::hold(std::path::Path::new("/")).ok());
    }
    // The container runtime is asked for now: systemctl's start runs beside the read, the
    // network wait, the plan and the writes; the first command takes its answer.
    let runtime = if stage != RunStage::Local && publish {
        apply::runtime::Wait::start_on_node(&target)
    } else {
        apply::runtime::Wait::default()
    };
    let mut inputs = gather(args, &target)?;
    // The run's plans share what did not change between them (pipeline::Memo).
    let memo = pipeline::Memo::default();
    // The main unit waits for the network before host facts feed the templates; `--stage
    // all` waits after its local half (below), once the network configuration is written.
    let net_warning = if stage == RunStage::Main && args.data.facts.is_none() && publish {
        let (facts, warning) = wait_on_network(&inputs, &target, &memo);
        inputs.facts = facts;
        warning
    } else {
        None
    };
    if stage == RunStage::All {
        return run_all(args, &mut inputs, target, &memo, &runtime);
    }
    // From here a panic on this thread also reaches the platform (report::install_panic_hook).
    let _panic_channel = report::arm_panic_channel(inputs.transport.as_ref());
    // A document the main stage will refuse is refused by the local stage too, so that a
    // refusal changes nothing on disk with the two units as with `--stage all` (no hostname,
    // no network written). Before the network is up the host has no address yet, which the
    // main stage's facts will have: the check stands a placeholder in for it.
    let prepared = if stage == RunStage::Local {
        let real = inputs.facts.clone();
        inputs
            .facts
            .local_ipv4
            .get_or_insert_with(|| "192.0.2.1".into());
        inputs
            .facts
            .local_ipv6
            .get_or_insert_with(|| "2001:db8::1".into());
        let checked = pipeline::prepare_with(&inputs, &memo)
            .and_then(|full| real_kubeadm(&full.plan, &inputs, args, &target));
        inputs.facts = real;
        checked.and_then(|w| Ok((pipeline::prepare_local_with(&inputs, &memo)?, w)))
    } else {
        pipeline::prepare_with(&inputs, &memo).and_then(|p| {
            let w = real_kubeadm(&p.plan, &inputs, args, &target)?;
            Ok((p, w))
        })
    };
    let (prepared, kubeadm_warning) =
        prepared.map_err(|e| report_bad_input(&inputs, &target, e, publish, stage))?;
    let earlier = Earlier {
        ran: 0,
        skipped: 0,
        already: 0,
        warnings: net_warning.into_iter().chain(kubeadm_warning).collect(),
        reporter: None,
    };
    let job = Job {
        args,
        inputs: &inputs,
        prepared: &prepared,
        stage,
        runtime: &runtime,
    };
    execute(&job, target, Some(earlier)).map(|e| e.code)
}

/// Read the data the run works on. Undecodable data (a gzip bomb, bad base64, oversize) or
/// an invalid image config: status.json, the events journal and the platform (when a
/// transport can be opened, with the default detection order if the config is what failed)
/// all hear why. (`single` leaves the status and the platform alone.)
fn gather(args: &Args, target: &Target) -> Result<pipeline::Inputs> {
    // The two units read the platform once between them (libnodeagent::source::handoff).
    let gather = match args.stage {
        RunStage::Local if args.only.is_none() => pipeline::gather_local,
        RunStage::Main if args.only.is_none() => pipeline::gather_main,
        _ => pipeline::gather,
    };
    gather(&args.data.options()).inspect_err(|e| {
        if args.only.is_none() {
            let transport = pipeline::fallback_transport(&args.data.options());
            let mut reporter = Reporter::new(transport.as_deref(), &target.root, "");
            if args.stage == RunStage::Local {
                reporter = reporter.in_local_stage();
            }
            reporter.failed(
                "read",
                e.kind(),
                &libnodeagent::base::redact::redact_text(&e.to_string()),
                &[],
            );
        }
    })
}

/// `--stage all` runs the two units' work in one process, in their order: cloud-init sets
/// the hostname in init-local, and the network stage gathers host facts after that, so
/// `{{ ds.meta_data.hostname }}` and friends see the new name. The whole plan is validated
/// first with the first facts: bad input still stops before any write.
fn run_all(
    args: &Args,
    inputs: &mut pipeline::Inputs,
    target: Target,
    memo: &pipeline::Memo,
    runtime: &apply::runtime::Wait,
) -> Result<i32> {
    let publish = args.only.is_none();
    // From here a panic on this thread also reaches the platform (report::install_panic_hook).
    let _panic_channel = report::arm_panic_channel(inputs.transport.as_ref());
    let prepared = pipeline::prepare_with(inputs, memo)
        .map_err(|e| report_bad_input(inputs, &target, e, publish, RunStage::All))?;
    let mut kubeadm_warnings: Vec<String> = real_kubeadm(&prepared.plan, inputs, args, &target)
        .map_err(|e| report_bad_input(inputs, &target, e, publish, RunStage::All))?
        .into_iter()
        .collect();
    if args.exec && !target.is_host() {
        refuse_without_shell(&prepared.plan, &target.root)
            .map_err(|e| report_bad_input(inputs, &target, e, publish, RunStage::All))?;
    }
    let local = pipeline::prepare_local_of_all(inputs, memo)
        .map_err(|e| report_bad_input(inputs, &target, e, publish, RunStage::All))?;
    let job = Job {
        args,
        inputs,
        prepared: &local,
        stage: RunStage::Local,
        runtime: &apply::runtime::Wait::default(),
    };
    let mut earlier = execute(&job, target.clone(), None)?.earlier;
    earlier.warnings.append(&mut kubeadm_warnings);
    let prepared = if args.data.facts.is_none() {
        let first = std::mem::replace(
            &mut inputs.facts,
            libnodeagent::source::facts::Facts::detect(&inputs.root),
        );
        if publish {
            let (facts, warning) = wait_on_network(inputs, &target, memo);
            inputs.facts = facts;
            earlier.warnings.extend(warning);
        }
        if inputs.facts == first {
            // Nothing the templates see has changed (e.g. `--root`, where the hostname is
            // not set on this host): the plan made from the first facts stands.
            prepared
        } else {
            let again = pipeline::prepare_after(inputs, memo, Some(&prepared.plan))
                .map_err(|e| report_bad_input(inputs, &target, e, publish, RunStage::All))?;
            // The facts feed the templates: a config that changed with them is judged again.
            let warning = real_kubeadm(&again.plan, inputs, args, &target)
                .map_err(|e| report_bad_input(inputs, &target, e, publish, RunStage::All))?;
            earlier.warnings.extend(warning);
            again
        }
    } else {
        // `--facts FILE` stands for the host as it is; it is not detected again.
        prepared
    };
    let job = Job {
        args,
        inputs,
        prepared: &prepared,
        stage: RunStage::Main,
        runtime,
    };
    execute(&job, target, Some(earlier)).map(|e| e.code)
}

/// Real kubeadm's judgement of the plan's kubeadm config (`kubeadm::validate`), before
/// anything is written: only where the kubeadm step would run (on the node, or `--exec`) and
/// kubeadm is on the PATH, unless the image config turns it off (`kubeadm.preflight_validate`).
/// A refusal is an error; a kubeadm that gave no verdict, a warning.
fn real_kubeadm(
    plan: &libnodeagent::plan::Plan,
    inputs: &pipeline::Inputs,
    args: &Args,
    target: &Target,
) -> Result<Option<String>> {
    use libnodeagent::kubeadm::validate::{self, Checked};
    if !inputs.image.kubeadm.preflight_validate {
        return Ok(None);
    }
    let exec = args.exec || target.is_host();
    let finished = || pipeline::finished_steps(&inputs.root, &plan.instance_id);
    let path = std::env::var_os("PATH");
    Ok(
        match validate::check(plan, &inputs.root, exec, path.as_deref(), true, &finished)? {
            Checked::Warning(w) => Some(w),
            Checked::Accepted(_) | Checked::NotRun => None,
        },
    )
}

/// What the local half of `--stage all` hands to the main half, which reports for both.
struct Earlier {
    ran: usize,
    skipped: usize,
    already: usize,
    warnings: Vec<String>,
    /// The local half's reporter, for the main half to go on from.
    reporter: Option<report::Carried>,
}

impl Earlier {
    /// This stage's summary added to the earlier half's counts; the earlier warnings first,
    /// then this stage's new ones.
    fn combine(summary: apply::Summary, earlier: Option<Earlier>) -> Earlier {
        let mut all = Earlier {
            ran: summary.ran.len(),
            skipped: summary.skipped.len(),
            already: summary.already.len(),
            warnings: summary.warnings,
            reporter: None,
        };
        if let Some(e) = earlier {
            all.ran += e.ran;
            all.skipped += e.skipped;
            all.already += e.already;
            let mine = std::mem::replace(&mut all.warnings, e.warnings);
            for w in mine {
                if !all.warnings.contains(&w) {
                    all.warnings.push(w);
                }
            }
        }
        all
    }
}

/// Bad input changes nothing on disk, but the platform still hears why. The metadata may be
/// fine when the userdata is not: name the instance if we can.
fn report_bad_input(
    inputs: &pipeline::Inputs,
    target: &Target,
    e: libnodeagent::base::error::Error,
    publish: bool,
    stage: RunStage,
) -> libnodeagent::base::error::Error {
    if !publish {
        return e;
    }
    let iid = pipeline::instance_id(inputs).unwrap_or_default();
    let mut reporter = Reporter::new(Some(inputs.transport.as_ref()), &target.root, &iid);
    if stage == RunStage::Local {
        reporter = reporter.in_local_stage();
    }
    reporter.failed(
        "read",
        e.kind(),
        &libnodeagent::base::redact::redact_text(&e.to_string()),
        &[],
    );
    e
}

/// One stage of a prepared plan to apply.
struct Job<'a> {
    args: &'a Args,
    inputs: &'a pipeline::Inputs,
    prepared: &'a pipeline::Prepared,
    stage: RunStage,
    /// The wait for the container runtime, for the stage that runs commands.
    runtime: &'a apply::runtime::Wait,
}

/// Apply one stage of a prepared plan: state, journal, reports. With `earlier` (the local
/// half of `--stage all`), its counts and warnings are reported together with this stage's.
fn execute(job: &Job, target: Target, earlier: Option<Earlier>) -> Result<Executed> {
    if job.args.exec && !target.is_host() {
        refuse_without_shell(&job.prepared.plan, &target.root)?;
    }
    // One run at a time from here on: instance data, journal and apply (apply/commands.rs).
    apply::commands::hold_run_lock(&libnodeagent::base::state::state_dir(&target.root)?)?;
    let res = execute_locked(job, target, earlier);
    apply::commands::release_run_lock();
    res
}

/// Under `--root R --exec` commands and kubeadm run chrooted into R through its `/bin/sh`:
/// a root without one (a bare directory) is refused before anything is written, not after
/// the steps before the first command were applied.
fn refuse_without_shell(plan: &libnodeagent::plan::Plan, root: &std::path::Path) -> Result<()> {
    use libnodeagent::plan::Action;
    let Some(step) = plan
        .steps
        .iter()
        .find(|s| matches!(s.action, Action::Command(_) | Action::Kubeadm(_)))
    else {
        return Ok(());
    };
    let shell = libnodeagent::base::confine::dir(root, "bin/sh").ok();
    if shell.is_some_and(|p| p.is_file()) {
        return Ok(());
    }
    Err(Error::not_found(
        Stage::Plan,
        &step.id,
        "--exec under --root: the root has no /bin/sh to run this step chrooted; nothing \
         was applied",
    )
    .with_kind(ErrorKind::Unsupported))
}

fn execute_locked(job: &Job, target: Target, mut earlier: Option<Earlier>) -> Result<Executed> {
    let Job {
        args,
        inputs,
        prepared,
        stage,
        ..
    } = *job;
    // kubeadm pre-flight already ran inside planner::build, before anything was written.
    let selected;
    let plan = match &args.only {
        Some(sel) => {
            selected = libnodeagent::plan::single::select(
                &prepared.plan,
                sel,
                &libnodeagent::report::now_ms().to_string(),
            );
            &selected
        }
        None => &prepared.plan,
    };
    let state = State::open(&target.root)?;
    let mut journal = state.begin_instance(&plan.instance_id)?;
    let iid = &plan.instance_id;
    // What cloud-init keeps in /run/cloud-init and /var/lib/cloud/instance, for query/render.
    // The main stage (or the main half of `--stage all`) writes it with the facts of the
    // network it waited for: the local stage, on the boot's path to multi-user, leaves it.
    let exec = args.exec || target.is_host();
    if stage != RunStage::Local {
        save_instance(&state, iid, prepared, inputs, blanks_platform(job, exec))?;
    }

    let opts = options(job, target, exec);
    // `single` leaves the bootstrap's status and the platform alone, as `cloud-init single`
    // does: its reporter writes to a private scratch directory, removed on return.
    let scratch = match &args.only {
        Some(_) => Some(Scratch::new()?),
        None => None,
    };
    let carried = earlier.as_mut().and_then(|e| e.reporter.take());
    let mut reporter = reporter_for(inputs, &opts, iid, scratch.as_ref(), carried);
    // As cloud-init's VMware datasource does once the network is up: vm-operator takes the
    // VM's primary IP from these keys. Only to a platform that keeps them.
    if stage != RunStage::Local
        && opts.exec
        && scratch.is_none()
        && matches!(inputs.transport.name(), "vmware" | "fwcfg")
    {
        report::publish_local_addresses(inputs.transport.as_ref(), &inputs.facts);
    }
    let mut plan_run = plan.clone();
    plan_run.warnings = prepared.warnings.clone();
    let summary = apply::apply(&plan_run, &opts, &mut journal, &mut reporter)?;
    if stage == RunStage::Local && args.stage == RunStage::All {
        // The main half reports for both.
        let mut earlier = Earlier::combine(summary, None);
        earlier.reporter = Some(reporter.carry());
        return Ok(Executed {
            code: exit::OK,
            earlier,
        });
    }
    let mut all = Earlier::combine(summary, earlier);
    for w in &all.warnings {
        eprintln!("warning: {}", libnodeagent::base::redact::redact_text(w));
        reporter.warning(w);
    }
    let outcome = libnodeagent::apply::RunCounts {
        ran: all.ran,
        skipped: all.skipped,
        already: all.already,
    };
    eprintln!("nodeagent run: {} (instance {iid})", outcome.summary());
    if stage != RunStage::Local {
        // Only with --exec (always on a real node): a --root dry run leaves the platform's
        // data alone.
        if opts.exec && scratch.is_none() {
            for w in redact_platform(job, opts.config.redact_userdata) {
                reporter.warning(&w);
                all.warnings.push(w);
            }
        }
        reporter.done_noting(outcome.nothing_executed().as_deref());
    }
    let code = if all.warnings.is_empty() {
        exit::OK
    } else {
        exit::DEGRADED
    };
    if args.json {
        print_json(args, iid, &all, code);
    }
    Ok(Executed { code, earlier: all })
}

/// How a stage applies: on the node (or `--exec`) commands run; the main stage (or the main
/// half of `--stage all`) ends the run and takes the wait for the container runtime.
fn options(job: &Job, target: Target, exec: bool) -> Options {
    let (args, inputs, stage) = (job.args, job.inputs, job.stage);
    Options {
        exec,
        target,
        stage,
        compat: inputs.compat,
        config: inputs.image.clone(),
        // This very binary, even if the file was replaced since it started.
        supervisor: "/proc/self/exe".into(),
        fork_supervisor: libnodeagent::base::process::single_threaded(),
        ends_run: !(stage == RunStage::Local && args.stage == RunStage::All),
        runtime: job.runtime.take(),
    }
}

/// Whether this run blanks the platform's copies of the data after success
/// ([`redact_platform`]): then the saved ones later boots read instead are made durable first.
fn blanks_platform(job: &Job, exec: bool) -> bool {
    job.stage != RunStage::Local
        && exec
        && job.args.only.is_none()
        && !keys_to_blank(job, job.inputs.image.redact_userdata).is_empty()
}

/// The platform keys [`redact_platform`] blanks: none where publishing does not reach what
/// the platform reads (a NoCloud seed; cloud-init does not redact NoCloud either).
fn keys_to_blank(job: &Job, redact_userdata: bool) -> Vec<String> {
    if !job.inputs.transport.publishes_guestinfo() {
        return Vec::new();
    }
    report::keys_to_redact(redact_userdata, &job.prepared.metadata.redact)
}

/// The run's reporter: into `scratch` for `single`; the local half's, carried on, for the main
/// half of `--stage all` (it goes on applying: no second `reading`); else a new one, `reading`.
fn reporter_for<'t>(
    inputs: &'t pipeline::Inputs,
    opts: &Options,
    iid: &str,
    scratch: Option<&Scratch>,
    carried: Option<report::Carried>,
) -> Reporter<'t> {
    let (root, local) = (&opts.target.root, opts.stage == RunStage::Local);
    let transport = Some(inputs.transport.as_ref());
    let mut reporter = match (scratch, carried) {
        (Some(dir), _) => Reporter::new(None, &dir.0, iid),
        (None, Some(c)) => Reporter::resume(transport, root, c),
        (None, None) if local => Reporter::new(transport, root, iid).in_local_stage(),
        (None, None) => Reporter::new(transport, root, iid),
    };
    if reporter.status().phase == Phase::Reading {
        reporter.phase(Phase::Reading, None);
    }
    reporter
}

/// `--json`: the run's outcome on stdout, warnings redacted.
fn print_json(args: &Args, iid: &str, all: &Earlier, code: i32) {
    super::common::print_json(&serde_json::json!({
        "instance_id": iid,
        "stage": args.stage.as_str(),
        "ran": all.ran,
        "skipped": all.skipped,
        "already": all.already,
        "warnings": all.warnings.iter().map(|w| libnodeagent::base::redact::redact_text(w)).collect::<Vec<_>>(),
        "exit": code,
    }));
}

/// After success: the image config's `redact_userdata` and the metadata's `redact:` keys are
/// overwritten with `---` (cloud-init does the latter right after reading; the main stage
/// here reads the platform again, so both wait for success). Later boots read the copies
/// `save_instance` made durable before anything was applied. Returns a warning for each key
/// left readable: a secret left on the platform is a degraded run (exit 2), with why.
fn redact_platform(job: &Job, redact_userdata: bool) -> Vec<String> {
    let keys = keys_to_blank(job, redact_userdata);
    let mut warnings = Vec::new();
    for (failed, why) in report::redact_guestinfo(job.inputs.transport.as_ref(), &keys) {
        let key = failed.strip_prefix("guestinfo.").unwrap_or(&failed);
        let w = format!("guestinfo.{key} could not be redacted: {why}");
        eprintln!("warning: {}", libnodeagent::base::redact::redact_text(&w));
        warnings.push(w);
    }
    warnings
}

/// Instance data, the rendered userdata and the saved platform copies of this run; the
/// saved copies durable when the platform's are to be blanked.
fn save_instance(
    state: &State,
    iid: &str,
    prepared: &pipeline::Prepared,
    inputs: &pipeline::Inputs,
    durable_copies: bool,
) -> Result<()> {
    let tree = &prepared.instance_data;
    let sensitive = instance::to_python_json(tree);
    let redacted = instance::to_python_json(&instance::redacted(tree));
    let mut keep: Vec<(&str, &[u8], u32)> = vec![
        ("instance-data-sensitive.json", sensitive.as_bytes(), 0o600),
        ("instance-data.json", redacted.as_bytes(), 0o644),
    ];
    if let Some(text) = prepared.rendered.as_ref().or(prepared.userdata.as_ref()) {
        keep.push(("userdata.txt", text.as_bytes(), 0o600));
    }
    // What later boots read when the platform's copy has been blanked (pipeline::restore_saved).
    if let Some(text) = prepared.userdata.as_ref() {
        keep.push((pipeline::SAVED_USERDATA, text.as_bytes(), 0o600));
    }
    if let Some(md) = inputs.raw.metadata.as_ref() {
        keep.push((pipeline::SAVED_METADATA, md.text.as_bytes(), 0o600));
    }
    let durable: &[&str] = if durable_copies {
        &[pipeline::SAVED_USERDATA, pipeline::SAVED_METADATA]
    } else {
        &[]
    };
    state.save_all(iid, &keep, durable)?;
    // Where cloud-init keeps them, for its tools (`cloud-init query` without root reads the
    // redacted one).
    libnodeagent::report::cloud_init::files::write_instance_data(
        &inputs.root,
        &sensitive,
        &redacted,
    );
    Ok(())
}

/// A fresh 0700 directory under the temp dir for `single`'s reporter (created, never an
/// existing path, so no planted symlink is followed), removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new() -> Result<Scratch> {
        use std::os::unix::fs::DirBuilderExt;
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).map_err(|e| {
            libnodeagent::base::error::Error::of(
                libnodeagent::base::error::ErrorKind::Io,
                libnodeagent::base::error::Stage::State,
                "random",
                e.to_string(),
            )
        })?;
        let dir = std::env::temp_dir().join(format!("nodeagent-single-{}", hex::encode(b)));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| {
                libnodeagent::base::error::Error::io(
                    libnodeagent::base::error::Stage::State,
                    dir.display().to_string(),
                    "cannot create",
                    e,
                )
            })?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The exit code of one stage, and what the next stage of `--stage all` carries on with.
struct Executed {
    code: i32,
    earlier: Earlier,
}

/// Whether the metadata's `wait-on-network` applies on this transport: as cloud-init, which
/// honours it only in its VMware datasource (guestinfo keys), never from a NoCloud seed or
/// the OVF environment. fw_cfg and dir carry guestinfo keys as VMware does (tests, QEMU).
fn honours_wait_on_network(transport: &str) -> bool {
    matches!(transport, "vmware" | "fwcfg" | "dir")
}

/// The metadata's `wait-on-network`: wait (bounded, phase `waiting` with a detail) for the
/// address before host facts feed templates and `guestinfo.local-ipv4`. Returns the warning
/// when the deadline passed. Metadata that does not parse is reported by `prepare`.
/// The host facts once the metadata's `wait-on-network` is met (or its deadline passed, with
/// the warning); the facts as gathered when nothing is asked. Takes `inputs` shared: the
/// panic channel borrows its transport for the whole run.
fn wait_on_network(
    inputs: &pipeline::Inputs,
    target: &Target,
    memo: &pipeline::Memo,
) -> (libnodeagent::source::facts::Facts, Option<String>) {
    let want = inputs
        .raw
        .metadata
        .as_ref()
        .and_then(|d| memo.metadata(&d.text).ok())
        .map(|md| md.wait_on_network)
        .filter(|w| (w.ipv4 || w.ipv6) && honours_wait_on_network(inputs.transport.name()));
    let Some(want) = want else {
        return (inputs.facts.clone(), None);
    };
    let timeout = std::time::Duration::from_secs(inputs.image.wait_on_network_timeout_secs);
    let root = inputs.root.clone();
    let first = inputs.facts.clone();
    // Made when the wait is first reported: a network already up reports nothing.
    let mut reporter: Option<Reporter> = None;
    let (facts, warning) = libnodeagent::source::netwait::wait(
        &want,
        first,
        timeout,
        std::time::Duration::from_secs(1),
        || libnodeagent::source::facts::Facts::detect(&root),
        |detail| {
            tracing::info!("{detail}");
            let reporter = reporter.get_or_insert_with(|| {
                let iid = pipeline::instance_id_with(inputs, memo).unwrap_or_default();
                Reporter::new(Some(inputs.transport.as_ref()), &target.root, &iid)
            });
            if reporter.status().phase != Phase::Waiting {
                reporter.phase(Phase::Waiting, Some("wait-on-network"));
            }
            reporter.detail(detail);
        },
    );
    if let Some(w) = &warning {
        tracing::warn!("{w}");
    }
    (facts, warning)
}

#[cfg(test)]
mod wait_tests {
    #[test]
    fn wait_on_network_only_where_cloud_init_honours_it() {
        for t in ["vmware", "fwcfg", "dir"] {
            assert!(super::honours_wait_on_network(t), "{t}");
        }
        for t in ["nocloud", "ovf"] {
            assert!(!super::honours_wait_on_network(t), "{t}");
        }
    }
}
