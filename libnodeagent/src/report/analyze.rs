//! Where the bootstrap time went (`nodeagent analyze`), like `cloud-init analyze`:
//! `blame` (steps slowest first, from apply's instance journal
//! `var/lib/nodeagent/instances/<iid>/journal.jsonl`, and phases from the reporter's
//! `var/log/nodeagent/events.jsonl`), `show` (every boot's events in order) and `boot`
//! (kernel → userspace → agent start → done, from systemd's timestamps).

pub mod cloud_init;

use crate::base::state::{Event as Ev, Record, instance_dir_name, parse_journal, state_dir};
use crate::report::{EVENTS, Event, Phase};
use serde::Serialize;
use std::path::{Path, PathBuf};

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

/// The journal of `iid`, under the state directory as resolved inside the root (confine.rs).
pub fn journal_path(root: &Path, iid: &str) -> crate::base::error::Result<PathBuf> {
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

/// The current instance (or `instance_id`), its journal records and the status events:
/// what every `analyze` view is computed from.
pub fn load(
    root: &Path,
    instance_id: Option<&str>,
) -> crate::base::error::Result<(String, Vec<Record>, Vec<Event>)> {
    use crate::base::error::{Error, Stage};
    let iid = instance_id.map(String::from).or_else(|| {
        crate::base::confine::read(root, &format!("{}/instance-id", crate::base::state::DIR))
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .map(|s| s.trim_end().to_string())
    });
    let Some(iid) = iid.filter(|i| !i.is_empty()) else {
        return Err(Error::of(
            crate::base::error::ErrorKind::NotFound,
            Stage::State,
            root.join(crate::base::state::DIR)
                .join("instance-id")
                .display()
                .to_string(),
            format!("no instance has run under {} yet", root.display()),
        ));
    };
    let journal = journal_path(root, &iid)?;
    let records = std::fs::read_to_string(&journal)
        .map(|t| parse_journal(&t))
        .unwrap_or_default();
    // Resolved inside the root (confine.rs), as every path the agent reads there.
    let events = crate::base::confine::dir(root, EVENTS)
        .map(|p| read_events(&p))
        .unwrap_or_default();
    if records.is_empty() && events.is_empty() {
        return Err(Error::not_found(
            Stage::State,
            journal.display().to_string(),
            format!(
                "nothing recorded for instance {iid} (the journal and {EVENTS} are empty or missing)"
            ),
        ));
    }
    Ok((iid, records, events))
}

/// One line of `analyze show`.
#[derive(Debug, Serialize, PartialEq)]
pub struct ShowEvent {
    /// Since the boot's first record or event, in seconds.
    pub at_s: f64,
    /// `run-start main`, `done write_files[0]:/etc/x`, `phase kubeadm`, …
    pub event: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

/// `analyze show`: one boot's records and phase changes in time order.
#[derive(Debug, Serialize, PartialEq)]
pub struct BootShow {
    pub boot: String,
    pub started: String,
    pub events: Vec<ShowEvent>,
}

fn rfc3339_ms(at: &str) -> Option<f64> {
    let t = time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339).ok()?;
    Some(t.unix_timestamp_nanos() as f64 / 1e6)
}

/// A journal record as `show` lists it: what happened, how long it took, its result.
fn record_line(event: &Ev) -> (String, Option<f64>, Option<String>) {
    match event {
        Ev::RunStart { stage } => (format!("run-start {}", stage.as_str()), None, None),
        Ev::Begin { step, .. } => (format!("begin {step}"), None, None),
        Ev::Done {
            step,
            duration_ms,
            result,
            ..
        } => (
            format!("done {step}"),
            Some(*duration_ms),
            Some(result.as_str().to_string()),
        ),
        Ev::Failed {
            step,
            duration_ms,
            error,
            ..
        } => (
            format!("failed {step}"),
            Some(*duration_ms),
            Some(error.clone()),
        ),
        Ev::RunEnd {
            stage,
            duration_ms,
            result,
        } => (
            format!("run-end {}", stage.as_str()),
            Some(*duration_ms),
            Some(result.as_str().to_string()),
        ),
    }
}

/// Pure: every boot of the instance (in the order they ran), its journal records and status
/// events merged by time, offsets from the boot's first entry.
pub fn show(iid: &str, records: &[Record], events: &[Event]) -> Vec<BootShow> {
    let mut boots: Vec<String> = Vec::new();
    let mut entries: Vec<(String, f64, ShowEvent)> = Vec::new();
    for r in records {
        let Some(ms) = rfc3339_ms(&r.at) else {
            continue;
        };
        let (what, duration_ms, result) = record_line(&r.event);
        entries.push((
            r.boot.clone(),
            ms,
            ShowEvent {
                at_s: 0.0,
                event: what,
                duration_s: duration_ms.map(|d| (d / 1000.0 * 1000.0).round() / 1000.0),
                result,
            },
        ));
        if !boots.contains(&r.boot) {
            boots.push(r.boot.clone());
        }
    }
    for e in events.iter().filter(|e| e.instance_id == iid) {
        let mut what = format!("phase {}", e.phase.as_str());
        if let Some(step) = &e.step {
            what.push_str(&format!(" ({step})"));
        }
        if let Some(d) = &e.detail {
            what.push_str(&format!(": {d}"));
        }
        entries.push((
            e.boot.clone(),
            e.ts_ms as f64,
            ShowEvent {
                at_s: 0.0,
                event: what,
                duration_s: None,
                result: None,
            },
        ));
        if !boots.contains(&e.boot) {
            boots.push(e.boot.clone());
        }
    }
    entries.sort_by(|a, b| a.1.total_cmp(&b.1));
    boots
        .into_iter()
        .map(|boot| {
            let mine: Vec<&(String, f64, ShowEvent)> =
                entries.iter().filter(|e| e.0 == boot).collect();
            let first = mine.first().map_or(0.0, |e| e.1);
            let started = records
                .iter()
                .find(|r| r.boot == boot)
                .map(|r| r.at.clone())
                .unwrap_or_default();
            BootShow {
                boot,
                started,
                events: mine
                    .into_iter()
                    .map(|(_, ms, e)| ShowEvent {
                        at_s: ((ms - first) / 1000.0 * 1000.0).round() / 1000.0,
                        event: e.event.clone(),
                        duration_s: e.duration_s,
                        result: e.result.clone(),
                    })
                    .collect(),
            }
        })
        .collect()
}

pub fn render_show(boots: &[BootShow]) -> String {
    let mut out = String::new();
    for (i, b) in boots.iter().enumerate() {
        out.push_str(&format!(
            "-- boot record {:02} (boot {}{}) --\n",
            i + 1,
            b.boot,
            if b.started.is_empty() {
                String::new()
            } else {
                format!(", started {}", b.started)
            }
        ));
        for e in &b.events {
            let mut line = format!("  @{:>9.3}s  {}", e.at_s, e.event);
            if let Some(d) = e.duration_s {
                line.push_str(&format!("  +{d:.3}s"));
            }
            if let Some(r) = &e.result {
                line.push_str(&format!("  ({r})"));
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// `analyze boot`: from systemd's monotonic timestamps (seconds since the kernel started).
#[derive(Debug, Serialize, PartialEq)]
pub struct BootTimes {
    /// The kernel handed over to userspace (systemd started).
    pub userspace_s: f64,
    /// nodeagent-local.service was started (activated) by systemd.
    pub local_start_s: Option<f64>,
    /// nodeagent.service (the main stage) was started.
    pub main_start_s: Option<f64>,
    /// nodeagent.service finished: the bootstrap's end.
    pub done_s: Option<f64>,
}

/// The `KEY=VALUE` blocks of `systemctl show`, one map per unit (blocks split by blank lines).
fn show_blocks(text: &str) -> Vec<std::collections::HashMap<String, String>> {
    text.split("\n\n")
        .map(|b| {
            b.lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .filter(|m: &std::collections::HashMap<String, String>| !m.is_empty())
        .collect()
}

/// Pure: `systemctl show -p UserspaceTimestampMonotonic` (the manager) and
/// `systemctl show -p Id,InactiveExitTimestampMonotonic,ActiveEnterTimestampMonotonic UNITS`.
pub fn boot_times(manager: &str, units: &str) -> crate::base::error::Result<BootTimes> {
    use crate::base::error::{Error, Stage};
    let secs = |v: Option<&String>| {
        v.and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|us| *us > 0)
            .map(|us| us as f64 / 1e6)
    };
    let m = show_blocks(manager).into_iter().next().unwrap_or_default();
    let Some(userspace_s) = secs(m.get("UserspaceTimestampMonotonic")) else {
        return Err(Error::not_found(
            Stage::State,
            "systemctl show",
            "no UserspaceTimestampMonotonic: systemd did not record the boot's timestamps",
        ));
    };
    let blocks = show_blocks(units);
    let unit = |id: &str| blocks.iter().find(|b| b.get("Id").is_some_and(|v| v == id));
    let local = unit("nodeagent-local.service");
    let main = unit("nodeagent.service");
    Ok(BootTimes {
        userspace_s,
        local_start_s: local.and_then(|b| secs(b.get("InactiveExitTimestampMonotonic"))),
        main_start_s: main.and_then(|b| secs(b.get("InactiveExitTimestampMonotonic"))),
        done_s: main.and_then(|b| secs(b.get("ActiveEnterTimestampMonotonic"))),
    })
}

/// [`boot_times`] of this machine; a clear error when it is not running systemd.
pub fn systemd_boot_times() -> crate::base::error::Result<BootTimes> {
    use crate::base::error::{Error, Stage};
    if !Path::new("/run/systemd/system").is_dir() {
        return Err(Error::unsupported(
            Stage::State,
            "/run/systemd/system",
            "analyze boot reads systemd's boot timestamps, and this system is not running systemd \
             (use `nodeagent analyze show` for the agent's own timeline)",
        ));
    }
    let run = |args: &[&str]| -> crate::base::error::Result<String> {
        let mut cmd = std::process::Command::new("systemctl");
        cmd.args(args);
        let limits = crate::base::process::Limits::new(std::time::Duration::from_secs(10))
            .stdout_cap(64 * 1024)
            .stderr_cap(16 * 1024);
        let out = crate::base::process::run(cmd, &limits, None)
            .map_err(|e| Error::of(e.kind(), Stage::State, "systemctl show", e.to_string()))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let manager = run(&["show", "-p", "UserspaceTimestampMonotonic"])?;
    let units = run(&[
        "show",
        "-p",
        "Id,InactiveExitTimestampMonotonic,ActiveEnterTimestampMonotonic",
        "nodeagent-local.service",
        "nodeagent.service",
    ])?;
    boot_times(&manager, &units)
}

pub fn render_boot(b: &BootTimes) -> String {
    let at = |v: Option<f64>| v.map_or("not started this boot".to_string(), |s| format!("{s:.3}s"));
    let between = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.3}s", b - a),
        _ => "-".to_string(),
    };
    let mut out = String::from("-- most recent boot (seconds since the kernel started) --\n");
    out.push_str("  kernel started:                      0.000s\n");
    out.push_str(&format!(
        "  kernel handed over to userspace:     {:.3}s\n",
        b.userspace_s
    ));
    out.push_str(&format!(
        "  nodeagent-local.service started:     {}\n",
        at(b.local_start_s)
    ));
    out.push_str(&format!(
        "  nodeagent.service started:           {}\n",
        at(b.main_start_s)
    ));
    out.push_str(&format!(
        "  nodeagent.service done:              {}\n",
        at(b.done_s)
    ));
    out.push_str(&format!(
        "  kernel time to boot:                 {:.3}s\n",
        b.userspace_s
    ));
    out.push_str(&format!(
        "  userspace until nodeagent started:   {}\n",
        between(Some(b.userspace_s), b.local_start_s.or(b.main_start_s))
    ));
    out.push_str(&format!(
        "  nodeagent start until done:          {}\n",
        between(b.local_start_s.or(b.main_start_s), b.done_s)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::state::{DoneResult, RunResult};
    use crate::plan::{Frequency, RunStage};

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

    #[test]
    fn show_orders_each_boot_and_boot_times_parse_systemctl() {
        let mut a = rec(Ev::RunStart {
            stage: RunStage::Main,
        });
        a.at = "2026-01-01T00:00:00.000Z".into();
        let mut b = done("write_files[0]", 2.0);
        b.at = "2026-01-01T00:00:01.500Z".into();
        let mut c = rec(Ev::RunStart {
            stage: RunStage::Main,
        });
        c.at = "2026-01-02T00:00:00.000Z".into();
        c.boot = "b2".into();
        let boots = show("i-1", &[a, b, c], &[]);
        assert_eq!(boots.len(), 2);
        assert_eq!(boots[0].events[1].event, "done write_files[0]");
        assert_eq!(boots[0].events[1].at_s, 1.5);
        assert_eq!(boots[1].boot, "b2");
        assert!(render_show(&boots).contains("-- boot record 02 (boot b2"));

        let t = boot_times(
            "UserspaceTimestampMonotonic=2500000\n",
            "Id=nodeagent-local.service\nInactiveExitTimestampMonotonic=3000000\nActiveEnterTimestampMonotonic=3100000\n\n\
             Id=nodeagent.service\nInactiveExitTimestampMonotonic=6000000\nActiveEnterTimestampMonotonic=46000000\n",
        )
        .unwrap();
        assert_eq!(
            t,
            BootTimes {
                userspace_s: 2.5,
                local_start_s: Some(3.0),
                main_start_s: Some(6.0),
                done_s: Some(46.0)
            }
        );
        assert!(render_boot(&t).contains("nodeagent start until done:          43.000s"));
        // A unit that never started this boot shows 0 in systemd: not a time.
        let t = boot_times(
            "UserspaceTimestampMonotonic=2500000\n",
            "Id=nodeagent.service\nInactiveExitTimestampMonotonic=0\nActiveEnterTimestampMonotonic=0\n",
        )
        .unwrap();
        assert_eq!(t.main_start_s, None);
        assert!(boot_times("", "").is_err());
    }
}
