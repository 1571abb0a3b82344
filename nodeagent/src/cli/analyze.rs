//! `nodeagent analyze`: where the bootstrap time went, like `cloud-init analyze blame`.
//! Steps come from apply's instance journal (`state.rs`:
//! `var/lib/nodeagent/instances/<iid>/journal.jsonl`), phases from the reporter's
//! `var/log/nodeagent/events.jsonl`.

use crate::error::exit;
use crate::report::{EVENTS, Event, Phase};
use crate::state::{Event as Ev, Record, instance_dir_name, parse_journal, state_dir};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Node root to read the journal under.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Instance to analyze (default: the current one).
    #[arg(long, value_name = "ID")]
    pub instance_id: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct StepTime {
    pub step: String,
    pub stage: Option<String>,
    pub result: String,
    pub duration_ms: f64,
    pub boot: String,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct PhaseTime {
    pub phase: Phase,
    pub duration_ms: u64,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct RunTime {
    pub stage: String,
    pub result: String,
    pub duration_ms: f64,
    pub at: String,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct Analysis {
    pub instance_id: String,
    /// Slowest first.
    pub steps: Vec<StepTime>,
    /// In the order the phases were first entered, for the latest boot that reported.
    pub phases: Vec<PhaseTime>,
    pub runs: Vec<RunTime>,
    /// From the first to the last status event of that boot.
    pub total_ms: u64,
}

pub fn run(args: Args) -> i32 {
    let iid = args.instance_id.clone().or_else(|| {
        state_dir(&args.root)
            .ok()
            .and_then(|d| std::fs::read_to_string(d.join("instance-id")).ok())
            .map(|s| s.trim_end().to_string())
    });
    let Some(iid) = iid.filter(|i| !i.is_empty()) else {
        eprintln!(
            "nodeagent analyze: no instance has run under {} yet",
            args.root.display()
        );
        return exit::FAILED;
    };
    let journal = journal_path(&args.root, &iid);
    let records = journal
        .as_ref()
        .ok()
        .and_then(|j| std::fs::read_to_string(j).ok())
        .map(|t| parse_journal(&t))
        .unwrap_or_default();
    let journal = journal.unwrap_or_else(|_| args.root.join(crate::state::DIR));
    let events = crate::confine::dir(&args.root, EVENTS)
        .map(|p| read_events(&p))
        .unwrap_or_default();
    if records.is_empty() && events.is_empty() {
        eprintln!(
            "nodeagent analyze: nothing recorded for instance {iid} ({} and {} are empty or missing)",
            journal.display(),
            EVENTS
        );
        return exit::FAILED;
    }
    let a = analyze(&iid, &records, &events);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&a).unwrap_or_default());
    } else {
        print!("{}", render(&a));
    }
    exit::OK
}

/// The journal of `iid`, under the state directory as resolved inside the root (confine.rs).
pub fn journal_path(root: &Path, iid: &str) -> crate::error::Result<PathBuf> {
    Ok(state_dir(root)?
        .join("instances")
        .join(instance_dir_name(iid))
        .join("journal.jsonl"))
}

pub fn read_events(path: &Path) -> Vec<Event> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Pure: durations per step (journal) and per phase (status events of the latest boot).
pub fn analyze(iid: &str, records: &[Record], events: &[Event]) -> Analysis {
    let mut steps: Vec<StepTime> = records
        .iter()
        .filter_map(|r| {
            let (step, stage, result, duration_ms) = match &r.event {
                Ev::Done {
                    step,
                    stage,
                    result,
                    duration_ms,
                    ..
                } => (step, stage, result.as_str(), duration_ms),
                Ev::Failed {
                    step,
                    stage,
                    duration_ms,
                    ..
                } => (step, stage, "failed", duration_ms),
                _ => return None,
            };
            Some(StepTime {
                step: step.clone(),
                stage: Some(stage.as_str().into()),
                result: result.into(),
                duration_ms: *duration_ms,
                boot: r.boot.clone(),
            })
        })
        .collect();
    steps.sort_by(|a, b| b.duration_ms.total_cmp(&a.duration_ms));
    let runs = records
        .iter()
        .filter_map(|r| match &r.event {
            Ev::RunEnd {
                stage,
                duration_ms,
                result,
            } => Some(RunTime {
                stage: stage.as_str().into(),
                result: result.as_str().into(),
                duration_ms: *duration_ms,
                at: r.at.clone(),
            }),
            _ => None,
        })
        .collect();
    let mine: Vec<&Event> = events.iter().filter(|e| e.instance_id == iid).collect();
    let last_boot = mine.last().map(|e| e.boot.clone()).unwrap_or_default();
    let evs: Vec<&Event> = mine.into_iter().filter(|e| e.boot == last_boot).collect();
    let mut phases: Vec<PhaseTime> = Vec::new();
    for w in evs.windows(2) {
        let d = w[1].ts_ms.saturating_sub(w[0].ts_ms);
        match phases.iter_mut().find(|p| p.phase == w[0].phase) {
            Some(p) => p.duration_ms += d,
            None => phases.push(PhaseTime {
                phase: w[0].phase,
                duration_ms: d,
            }),
        }
    }
    if let Some(last) = evs.last()
        && !phases.iter().any(|p| p.phase == last.phase)
    {
        phases.push(PhaseTime {
            phase: last.phase,
            duration_ms: 0,
        });
    }
    let total_ms = match (evs.first(), evs.last()) {
        (Some(a), Some(b)) => b.ts_ms.saturating_sub(a.ts_ms),
        _ => 0,
    };
    Analysis {
        instance_id: iid.to_string(),
        steps,
        phases,
        runs,
        total_ms,
    }
}

pub fn render(a: &Analysis) -> String {
    let mut out = format!("-- instance {}\n", a.instance_id);
    if !a.phases.is_empty() {
        out.push_str(&format!(
            "-- phases (latest boot, {:.3}s in all):\n",
            a.total_ms as f64 / 1000.0
        ));
        for p in &a.phases {
            let name = serde_json::to_value(p.phase)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {:>10.3}s  {name}\n",
                p.duration_ms as f64 / 1000.0
            ));
        }
    }
    if !a.runs.is_empty() {
        out.push_str("-- runs:\n");
        for r in &a.runs {
            out.push_str(&format!(
                "  {:>10.3}s  stage {} ({}) at {}\n",
                r.duration_ms / 1000.0,
                r.stage,
                r.result,
                r.at
            ));
        }
    }
    out.push_str("-- steps, slowest first:\n");
    for s in &a.steps {
        out.push_str(&format!(
            "  {:>10.3}s  {} ({})\n",
            s.duration_ms / 1000.0,
            s.step,
            s.result
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Frequency, RunStage};
    use crate::state::{DoneResult, RunResult};

    fn rec(event: Ev) -> Record {
        Record {
            v: 1,
            event,
            at: "2026-01-01T00:00:00Z".into(),
            boot: "b1".into(),
            pid: 1,
        }
    }

    fn done(step: &str, duration_ms: f64) -> Record {
        rec(Ev::Done {
            step: step.into(),
            stage: RunStage::Main,
            frequency: Frequency::PerInstance,
            duration_ms,
            result: DoneResult::Ok,
        })
    }

    fn ev(ts: u64, phase: Phase, boot: &str) -> Event {
        Event {
            ts_ms: ts,
            instance_id: "i-1".into(),
            boot: boot.into(),
            phase,
            step: None,
            detail: None,
        }
    }

    #[test]
    fn steps_sorted_and_phases_summed() {
        let records = vec![
            rec(Ev::RunStart {
                stage: RunStage::Main,
            }),
            done("write_files[0]", 2.0),
            done("kubeadm", 9000.0),
            rec(Ev::Failed {
                step: "runcmd[1]".into(),
                stage: RunStage::Main,
                duration_ms: 50.0,
                error: "exit status 1".into(),
            }),
            rec(Ev::RunEnd {
                stage: RunStage::Main,
                duration_ms: 9100.0,
                result: RunResult::Ok,
            }),
        ];
        let events = vec![
            ev(0, Phase::Reading, "b0"),
            ev(5000, Phase::Failed, "b0"),
            ev(1000, Phase::Reading, "b1"),
            ev(1100, Phase::Applying, "b1"),
            ev(1200, Phase::Waiting, "b1"),
            ev(4200, Phase::Kubeadm, "b1"),
            ev(4300, Phase::Waiting, "b1"),
            ev(4400, Phase::Kubeadm, "b1"),
            ev(10400, Phase::Done, "b1"),
        ];
        let a = analyze("i-1", &records, &events);
        let names: Vec<&str> = a.steps.iter().map(|s| s.step.as_str()).collect();
        assert_eq!(names, ["kubeadm", "runcmd[1]", "write_files[0]"]);
        assert_eq!(a.steps[1].result, "failed");
        let ph: Vec<(Phase, u64)> = a.phases.iter().map(|p| (p.phase, p.duration_ms)).collect();
        assert_eq!(
            ph,
            [
                (Phase::Reading, 100),
                (Phase::Applying, 100),
                (Phase::Waiting, 3100),
                (Phase::Kubeadm, 6100),
                (Phase::Done, 0)
            ]
        );
        assert_eq!(a.total_ms, 9400);
        assert_eq!(a.runs.len(), 1);
        assert!(render(&a).contains("kubeadm (ok)"));
    }
}
