//! `nodeagent status`: the bootstrap status from `/run/nodeagent/status.json`.
//!
//! Exit codes (docs/formats.md N.6): 0 done (or still running without `--wait`, as
//! `cloud-init status` does), 1 failed, 2 degraded (done with warnings), 3 still running
//! when `--wait --timeout` ran out.

use libnodeagent::base::error::exit;
use libnodeagent::report::{Phase, Status, read_status};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Block until the bootstrap is done or failed.
    #[arg(long)]
    pub wait: bool,
    /// With --wait: give up after S seconds (exit 3).
    #[arg(long, value_name = "S", requires = "wait")]
    pub timeout: Option<f64>,
    /// Print the status document as JSON (same as --format json).
    #[arg(long)]
    pub json: bool,
    /// Output format, as `cloud-init status --format`.
    #[arg(long, value_enum, default_value = "tabular")]
    pub format: Format,
    /// Also print times, boot id, warnings and kubeadm's last output lines.
    #[arg(long)]
    pub long: bool,
    /// Read the status under DIR instead of /.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Tabular,
    Json,
    Yaml,
}

pub fn run(mut args: Args) -> i32 {
    if args.json {
        args.format = Format::Json;
    }
    let deadline = args
        .timeout
        .map(|t| Instant::now() + Duration::from_secs_f64(t.max(0.0)));
    // The units do not start on a disabled node: nothing will ever write a status, so
    // `--wait` must not wait for one.
    if read_status(&args.root).is_err() && disabled(&args.root) {
        print_doc(&serde_json::json!({"v": 1, "phase": "disabled"}), &args)
            .unwrap_or_else(|| println!("status: disabled"));
        return exit::OK;
    }
    let started = Instant::now();
    let mut progress = libnodeagent::report::output::WaitProgress::default();
    loop {
        let status = read_status(&args.root).ok();
        let terminal = status.as_ref().is_some_and(|s| s.phase.is_terminal());
        let timed_out = deadline.is_some_and(|d| Instant::now() >= d);
        if args.wait && args.format == Format::Tabular {
            // Phase changes and the kubeadm/endpoint wait's clock, as they happen.
            let now = libnodeagent::report::now_ms();
            for line in progress.lines(status.as_ref(), now) {
                println!("{line}");
            }
        }
        if !args.wait || terminal || timed_out {
            if args.wait && timed_out && !terminal && args.format == Format::Tabular {
                println!(
                    "timed out after {:.0}s: the bootstrap is still running",
                    started.elapsed().as_secs_f64()
                );
            }
            print(status.as_ref(), &args);
            return exit_code(status.as_ref(), args.wait);
        }
        let pause = Duration::from_millis(250);
        std::thread::sleep(deadline.map_or(pause, |d| {
            pause.min(d.saturating_duration_since(Instant::now()))
        }));
    }
}

/// `/etc/nodeagent/disabled` under `root`, or (on the node itself) `nodeagent=disabled` on
/// the kernel command line: the units' own conditions.
fn disabled(root: &std::path::Path) -> bool {
    root.join("etc/nodeagent/disabled").exists()
        || (root == std::path::Path::new("/")
            && std::fs::read_to_string("/proc/cmdline")
                .is_ok_and(|c| c.split_whitespace().any(|w| w == "nodeagent=disabled")))
}

/// Exit code for a status (pure; `None` = not started yet).
pub fn exit_code(status: Option<&Status>, waited: bool) -> i32 {
    match status {
        Some(s) if s.phase == Phase::Failed => exit::FAILED,
        Some(s) if s.degraded() => exit::DEGRADED,
        Some(s) if s.phase == Phase::Done => exit::OK,
        _ if waited => exit::STILL_RUNNING,
        _ => exit::OK,
    }
}

fn print(status: Option<&Status>, args: &Args) {
    let Some(s) = status else {
        print_doc(&serde_json::json!({"v": 1, "phase": "not-started"}), args)
            .unwrap_or_else(|| println!("status: not started"));
        return;
    };
    let doc = serde_json::to_value(s).unwrap_or_default();
    print_doc(&doc, args).unwrap_or_else(|| print!("{}", render(s, args.long)));
}

/// The document as JSON or YAML; `None` for the tabular format (the caller prints text).
fn print_doc(doc: &serde_json::Value, args: &Args) -> Option<()> {
    match args.format {
        Format::Tabular => None,
        Format::Json => {
            println!("{}", serde_json::to_string_pretty(doc).unwrap_or_default());
            Some(())
        }
        Format::Yaml => {
            print!(
                "{}",
                libnodeagent::formats::goyaml::dump(doc).unwrap_or_default()
            );
            Some(())
        }
    }
}

/// Human text of a status (pure, for tests).
pub fn render(s: &Status, long: bool) -> String {
    let mut out = String::new();
    let phase = match s.phase {
        Phase::Done if s.degraded() => "degraded done".to_string(),
        Phase::Done => "done".to_string(),
        Phase::Failed => "error".to_string(),
        p => format!(
            "running ({})",
            serde_json::to_value(p)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default()
        ),
    };
    out.push_str(&format!("status: {phase}\n"));
    if let Some(step) = &s.step {
        out.push_str(&format!("step: {step}\n"));
    }
    if let Some(d) = &s.detail {
        out.push_str(&format!("detail: {d}\n"));
    }
    if let Some(e) = &s.error {
        out.push_str(&format!("error: {e}\n"));
    }
    if long {
        out.push_str(&format!(
            "instance-id: {}\nstarted: {}\nupdated: {}\nboot: {}\n",
            s.instance_id, s.started, s.updated, s.boot
        ));
        let current = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|b| b.trim().to_string())
            .unwrap_or_default();
        if !s.boot.is_empty() && !current.is_empty() && current != s.boot {
            out.push_str("note: this status is from an earlier boot\n");
        }
        for w in &s.warnings {
            out.push_str(&format!("warning: {w}\n"));
        }
        if !s.output_tail.is_empty() {
            out.push_str("last kubeadm output:\n");
            for l in &s.output_tail {
                out.push_str(&format!("  {l}\n"));
            }
        }
    }
    out
}
