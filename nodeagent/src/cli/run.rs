//! `nodeagent run`: read, plan, apply (stage local, main or all), journaled. Owner: apply.

use crate::apply::{self, Options, StageSel, Target};
use crate::config::ImageConfig;
use crate::error::{Error, Result, exit};
use crate::report::{Phase, Reporter};
use crate::state::State;
use std::path::PathBuf;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageArg {
    Local,
    Main,
    All,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// `local`: hostname and network (before the network is up); `main`: everything else.
    #[arg(long, value_enum, default_value = "all")]
    pub stage: StageArg,
    /// Put every path the agent touches under DIR; users and groups come from DIR/etc.
    /// Commands, disk tools and kubeadm run only with --exec.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Under --root: run commands, disk tools and kubeadm too (always on with root /).
    #[arg(long)]
    pub exec: bool,
    /// Read bootstrap data from this transport only (vmware, fwcfg, dir:DIR, nocloud:DIR).
    #[arg(long, value_name = "T")]
    pub transport: Option<String>,
    /// Host facts from a JSON file instead of the running system.
    #[arg(long, value_name = "FILE")]
    pub facts: Option<PathBuf>,
    /// cloud-init compatibility (see the configuration reference).
    #[arg(long)]
    pub compat: bool,
}

/// Logging: journald on a real node, stderr otherwise (or when journald is absent).
pub fn init_logging(root_is_host: bool) {
    use tracing_subscriber::prelude::*;
    let filter = tracing_subscriber::EnvFilter::try_from_env("NODEAGENT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if root_is_host
        && std::path::Path::new("/run/systemd/journal/socket").exists()
        && let Ok(j) = tracing_journald::layer()
    {
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(j.with_syslog_identifier("nodeagent".into()))
            .try_init();
        return;
    }
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false),
        )
        .try_init();
}

pub fn run(args: Args) -> i32 {
    let target = Target::new(&args.root);
    init_logging(target.is_host());
    match run_inner(&args, target) {
        Ok(code) => code,
        Err(e) => {
            eprintln!(
                "nodeagent run: {}",
                crate::redact::redact_text(&e.to_string())
            );
            exit::FAILED
        }
    }
}

fn run_inner(args: &Args, target: Target) -> Result<i32> {
    let config = ImageConfig::load(&target.root)?;
    let compat = args.compat || config.compat;
    let prepared = prepare(args, &config, compat)?;
    let plan = &prepared.plan;
    crate::kubeadm::preflight(plan, &target.root)?;

    let state = State::open(&target.root)?;
    let mut journal = state.begin_instance(&plan.instance_id)?;
    for (name, data, mode) in &prepared.keep {
        state.save(&plan.instance_id, name, data, *mode)?;
    }
    let stage = match args.stage {
        StageArg::Local => StageSel::Local,
        StageArg::Main => StageSel::Main,
        StageArg::All => StageSel::All,
    };
    let opts = Options {
        exec: args.exec || target.is_host(),
        target,
        stage,
        compat,
        config,
    };
    let transport = prepared.transport.as_deref();
    let mut reporter = Reporter::new(transport, &opts.target.root, &plan.instance_id);
    reporter.phase(Phase::Reading, None);
    let summary = apply::apply(plan, &opts, &mut journal, &mut reporter)?;
    for w in &summary.warnings {
        eprintln!("warning: {w}");
        reporter.warning(w);
    }
    eprintln!(
        "nodeagent run: {} steps done, {} already finished earlier (instance {})",
        summary.ran.len(),
        summary.already.len(),
        plan.instance_id
    );
    if stage != StageSel::Local {
        reporter.phase(Phase::Done, None);
        reporter.done();
    }
    Ok(if summary.warnings.is_empty() {
        exit::OK
    } else {
        exit::DEGRADED
    })
}

/// What the pipeline hands to apply.
pub struct Prepared {
    pub plan: crate::plan::Plan,
    /// Files kept in the instance state dir: (name, bytes, mode).
    pub keep: Vec<(String, Vec<u8>, u32)>,
    pub transport: Option<Box<dyn crate::transport::Transport>>,
}

fn prepare(_args: &Args, _config: &ImageConfig, _compat: bool) -> Result<Prepared> {
    Err(Error::new(
        crate::error::Stage::Usage,
        "run",
        "the read/plan pipeline is not available in this build yet",
    ))
}
