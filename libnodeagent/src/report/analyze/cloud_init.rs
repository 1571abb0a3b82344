//! `cloud-init analyze show|blame` in cloud-init's layout (`cloudinit/analyze/show.py`), from
//! nodeagent's instance journal (what `nodeagent analyze` reads): one boot record per boot of
//! the instance, its steps grouped into cloud-init's stages (`init-local`, `init-network`,
//! `modules-config`, `modules-final`, as [`Stage::of_step`] places them), each step an event
//! named `STAGE/STEP` with its duration.

use crate::base::state::{Event as Ev, Record};
use crate::report::cloud_init::progress::Stage;

/// One finished step: its stage, name, start (s since the boot's first step) and duration.
struct Step {
    stage: &'static str,
    name: String,
    start_s: f64,
    delta_s: f64,
}

/// Analyze's name of the stage a journal step ran in.
fn stage_name(step: &str, run_stage: crate::plan::RunStage) -> &'static str {
    if run_stage == crate::plan::RunStage::Local {
        return "init-local";
    }
    match Stage::of_step(step) {
        Stage::InitLocal | Stage::Init => "init-network",
        Stage::ModulesConfig => "modules-config",
        Stage::ModulesFinal => "modules-final",
    }
}

fn unix_s(at: &str) -> Option<f64> {
    let t = time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339).ok()?;
    Some(t.unix_timestamp_nanos() as f64 / 1e9)
}

/// The finished steps of each boot, boots in the order they ran.
fn boots(records: &[Record]) -> Vec<Vec<Step>> {
    let mut order: Vec<&str> = Vec::new();
    for r in records {
        if !order.contains(&r.boot.as_str()) {
            order.push(&r.boot);
        }
    }
    order
        .into_iter()
        .map(|boot| {
            let mine: Vec<&Record> = records.iter().filter(|r| r.boot == boot).collect();
            let mut steps: Vec<(f64, Step)> = mine
                .iter()
                .filter_map(|r| {
                    let (step, stage, ms) = match &r.event {
                        Ev::Done {
                            step,
                            stage,
                            duration_ms,
                            ..
                        }
                        | Ev::Failed {
                            step,
                            stage,
                            duration_ms,
                            ..
                        } => (step, *stage, *duration_ms),
                        _ => return None,
                    };
                    let end = unix_s(&r.at)?;
                    let start = end - ms / 1000.0;
                    Some((
                        start,
                        Step {
                            stage: stage_name(step, stage),
                            name: step.clone(),
                            start_s: start,
                            delta_s: ms / 1000.0,
                        },
                    ))
                })
                .collect();
            steps.sort_by(|a, b| a.0.total_cmp(&b.0));
            let first = steps.first().map_or(0.0, |s| s.0);
            steps
                .into_iter()
                .map(|(_, mut s)| {
                    s.start_s -= first;
                    s
                })
                .collect()
        })
        .filter(|b: &Vec<Step>| !b.is_empty())
        .collect()
}

/// `cloud-init analyze show`.
pub fn show(records: &[Record]) -> String {
    let boots = boots(records);
    let mut out = String::new();
    for (i, steps) in boots.iter().enumerate() {
        out.push_str(&format!("-- Boot Record {:02} --\n", i + 1));
        out.push_str(
            "The total time elapsed since completing an event is printed after the \"@\" character.\n\
             The time the event takes is printed after the \"+\" character.\n\n",
        );
        let mut lines: Vec<String> = Vec::new();
        let mut total = 0.0;
        let mut k = 0;
        while k < steps.len() {
            let stage = steps[k].stage;
            let group: Vec<&Step> = steps[k..].iter().take_while(|s| s.stage == stage).collect();
            k += group.len();
            lines.push(format!("Starting stage: {stage}"));
            for s in &group {
                lines.push(format!(
                    "|`->running {} @{:08.5}s +{:08.5}s",
                    s.name, s.start_s, s.delta_s
                ));
            }
            let begin = group.first().map_or(0.0, |s| s.start_s);
            let end = group
                .iter()
                .map(|s| s.start_s + s.delta_s)
                .fold(begin, f64::max);
            total += end - begin;
            lines.push(format!(
                "Finished stage: ({stage}) {:08.5} seconds\n",
                end - begin
            ));
        }
        lines.push(format!("Total Time: {total:3.5} seconds\n"));
        out.push_str(&lines.join("\n"));
        out.push('\n');
    }
    out.push_str(&format!("{} boot records analyzed\n", boots.len().max(1)));
    out
}

/// `cloud-init analyze blame`: each boot's steps, slowest first.
pub fn blame(records: &[Record]) -> String {
    let boots = boots(records);
    let mut out = String::new();
    for (i, steps) in boots.iter().enumerate() {
        let mut sorted: Vec<&Step> = steps.iter().collect();
        sorted.sort_by(|a, b| b.delta_s.total_cmp(&a.delta_s));
        out.push_str(&format!("-- Boot Record {:02} --\n", i + 1));
        let lines: Vec<String> = sorted
            .iter()
            .map(|s| format!("     {:08.5}s ({}/{})", s.delta_s, s.stage, s.name))
            .collect();
        out.push_str(&lines.join("\n"));
        out.push_str("\n\n");
    }
    out.push_str(&format!("{} boot records analyzed\n", boots.len().max(1)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOURNAL: &str = r#"{"v":1,"event":"run-start","at":"2026-11-20T10:00:00.000Z","boot":"b1","pid":7,"stage":"local"}
{"v":1,"event":"done","at":"2026-11-20T10:00:00.250Z","boot":"b1","pid":7,"step":"network","stage":"local","frequency":"per-instance","duration_ms":250.0,"result":"ok"}
{"v":1,"event":"done","at":"2026-11-20T10:00:02.000Z","boot":"b1","pid":8,"step":"write_files[0]:/etc/a","stage":"main","frequency":"per-instance","duration_ms":500.0,"result":"ok"}
{"v":1,"event":"failed","at":"2026-11-20T10:00:05.000Z","boot":"b1","pid":8,"step":"runcmd[0]","stage":"main","duration_ms":2000.0,"error":"exit status 3"}
{"v":1,"event":"done","at":"2026-11-20T11:00:00.100Z","boot":"b2","pid":9,"step":"bootcmd[0]","stage":"main","frequency":"per-boot","duration_ms":100.0,"result":"ok"}
"#;

    #[test]
    fn show_and_blame_in_cloud_init_layout() {
        let records = crate::base::state::parse_journal(JOURNAL);
        let show = show(&records);
        assert!(
            show.starts_with("-- Boot Record 01 --\nThe total time elapsed"),
            "{show}"
        );
        assert!(show.contains("Starting stage: init-local\n|`->running network @00.00000s +00.25000s\nFinished stage: (init-local) 00.25000 seconds\n"), "{show}");
        assert!(
            show.contains(
                "Starting stage: modules-final\n|`->running runcmd[0] @03.00000s +02.00000s\n"
            ),
            "{show}"
        );
        assert!(show.contains("-- Boot Record 02 --"), "{show}");
        assert!(
            show.ends_with("Total Time: 0.10000 seconds\n\n2 boot records analyzed\n"),
            "{show}"
        );
        let blame = blame(&records);
        assert!(blame.starts_with(
            "-- Boot Record 01 --\n     02.00000s (modules-final/runcmd[0])\n     00.50000s (init-network/write_files[0]:/etc/a)\n     00.25000s (init-local/network)\n\n"
        ), "{blame}");
        assert!(blame.ends_with("2 boot records analyzed\n"));
    }
}
