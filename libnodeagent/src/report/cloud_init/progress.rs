//! The document of cloud-init's `status.json` (`{"v1": {...}}`, docs/formats.md E.4) and how
//! nodeagent's run moves through it. Pure: [`super::files`] reads and writes it.
//!
//! cloud-init runs four stages; nodeagent runs two units. The local unit is cloud-init's
//! `init-local`; the main unit goes through `init`, `modules-config` and `modules-final` as its
//! steps belong to the modules cloud-init runs in each (runcmd and kubeadm in final, ntp in
//! config, the rest in init): a stage nodeagent has no step for starts and finishes at the
//! moment the next one starts, as cloud-init runs every stage. Times are seconds since boot
//! (cloud-init 24.2 and later). A run that fails records its error in the stage it was in and
//! stops there: the later stages stay `null` (they never ran), and `result.json` is written, so
//! `cloud-init status` says `error` and `--wait` returns.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// cloud-init's four boot stages, in the order they run.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Stage {
    InitLocal,
    Init,
    ModulesConfig,
    ModulesFinal,
}

impl Stage {
    pub const ALL: [Stage; 4] = [
        Stage::InitLocal,
        Stage::Init,
        Stage::ModulesConfig,
        Stage::ModulesFinal,
    ];

    /// Its key in status.json's `v1`.
    pub fn key(self) -> &'static str {
        match self {
            Stage::InitLocal => "init-local",
            Stage::Init => "init",
            Stage::ModulesConfig => "modules-config",
            Stage::ModulesFinal => "modules-final",
        }
    }

    /// Its name in cloud-init's banner (`Cloud-init v. V running 'modules:final' at ...`).
    pub fn banner(self) -> &'static str {
        match self {
            Stage::InitLocal => "init-local",
            Stage::Init => "init",
            Stage::ModulesConfig => "modules:config",
            Stage::ModulesFinal => "modules:final",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The stage whose module list holds a main-stage step of nodeagent's plan (docs/formats.md
    /// E.1: runcmd runs in final through scripts_user, and so does CABPK's kubeadm line; ntp is
    /// a config module; bootcmd, write_files, disks, hostname, users are init modules).
    pub fn of_step(step: &str) -> Stage {
        let module = step.split(['[', ':']).next().unwrap_or(step);
        match module {
            "runcmd" | "kubeadm" => Stage::ModulesFinal,
            "ntp" => Stage::ModulesConfig,
            _ => Stage::Init,
        }
    }
}

/// One stage's entry of status.json.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageEntry {
    #[serde(default)]
    pub errors: Vec<String>,
    #[serde(default)]
    pub finished: Option<f64>,
    /// Log records of level WARNING and above, by level name (cloud-init 23.4 and later).
    #[serde(default)]
    pub recoverable_errors: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub start: Option<f64>,
}

/// status.json's `v1`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// `str(datasource)` in cloud-init's words (`DataSourceVMware [seed=guestinfo]`).
    pub datasource: Option<String>,
    pub stages: [StageEntry; 4],
    /// The stage running now; `None` between stages and after the last.
    pub stage: Option<Stage>,
}

impl Progress {
    pub fn entry(&self, s: Stage) -> &StageEntry {
        &self.stages[s.index()]
    }

    fn entry_mut(&mut self, s: Stage) -> &mut StageEntry {
        &mut self.stages[s.index()]
    }

    /// The latest stage that has started.
    pub fn latest(&self) -> Option<Stage> {
        Stage::ALL
            .into_iter()
            .rev()
            .find(|s| self.entry(*s).start.is_some())
    }

    /// Go on in `stage` at `now`: a stage before it that started and did not finish finishes
    /// now, one that never started starts and finishes now (cloud-init runs every stage). Never
    /// back: a step of an earlier stage's module met later (a deferred file) stays in the stage
    /// the run is in. Returns the stages entered, for their banners.
    pub fn enter(&mut self, stage: Stage, now: f64) -> Vec<Stage> {
        let from = self.latest();
        if from.is_some_and(|f| f >= stage) {
            return Vec::new();
        }
        let mut entered = Vec::new();
        for s in Stage::ALL.into_iter().filter(|s| *s <= stage) {
            let e = self.entry_mut(s);
            if e.start.is_none() {
                e.start = Some(now);
                entered.push(s);
            }
            if s < stage && e.finished.is_none() {
                e.finished = Some(now);
            }
        }
        self.stage = Some(stage);
        entered
    }

    /// The stage running now finishes at `now` (cloud-init's `finally:` of each stage).
    pub fn finish(&mut self, now: f64) {
        if let Some(s) = self.stage.take() {
            self.entry_mut(s).finished = Some(now);
        }
    }

    /// A fatal error of the stage running now (or of the latest, between stages).
    pub fn error(&mut self, message: &str) {
        if let Some(s) = self.stage.or(self.latest()) {
            self.entry_mut(s).errors.push(message.to_string());
        }
    }

    /// Warnings of the run, under cloud-init's level name, in the stage running now.
    pub fn warnings(&mut self, warnings: &[String]) {
        if warnings.is_empty() {
            return;
        }
        if let Some(s) = self.stage.or(self.latest()) {
            let list = self
                .entry_mut(s)
                .recoverable_errors
                .entry("WARNING".into())
                .or_default();
            for w in warnings {
                if !list.contains(w) {
                    list.push(w.clone());
                }
            }
        }
    }

    /// Every stage's errors in the order cloud-init gathers them (stage keys sorted:
    /// `init`, `init-local`, `modules-config`, `modules-final`).
    pub fn all_errors(&self) -> Vec<String> {
        let mut by_key: Vec<&StageEntry> = Vec::new();
        let mut keys: Vec<Stage> = Stage::ALL.to_vec();
        keys.sort_by_key(|s| s.key());
        for s in keys {
            by_key.push(self.entry(s));
        }
        by_key.iter().flat_map(|e| e.errors.clone()).collect()
    }

    /// status.json as cloud-init writes it.
    pub fn to_json(&self) -> Value {
        let mut v1 = serde_json::Map::new();
        v1.insert("datasource".into(), json!(self.datasource));
        for s in Stage::ALL {
            v1.insert(
                s.key().into(),
                serde_json::to_value(self.entry(s)).unwrap_or_default(),
            );
        }
        v1.insert("stage".into(), json!(self.stage.map(Stage::key)));
        json!({ "v1": v1 })
    }

    /// result.json: written at the end of the boot's last stage.
    pub fn result_json(&self) -> Value {
        json!({"v1": {"datasource": self.datasource, "errors": self.all_errors()}})
    }

    /// A status.json read back; what does not parse as a stage entry is left empty.
    pub fn from_json(doc: &Value) -> Progress {
        let v1 = &doc["v1"];
        let mut p = Progress {
            datasource: v1["datasource"].as_str().map(String::from),
            ..Progress::default()
        };
        for s in Stage::ALL {
            if let Ok(e) = serde_json::from_value::<StageEntry>(v1[s.key()].clone()) {
                p.stages[s.index()] = e;
            }
        }
        p.stage = Stage::ALL
            .into_iter()
            .find(|s| v1["stage"].as_str() == Some(s.key()));
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_belong_to_the_stage_of_their_module() {
        assert_eq!(Stage::of_step("runcmd[3]"), Stage::ModulesFinal);
        assert_eq!(Stage::of_step("runcmd[1]:kubeadm"), Stage::ModulesFinal);
        assert_eq!(Stage::of_step("ntp"), Stage::ModulesConfig);
        assert_eq!(Stage::of_step("write_files[0]:/etc/x"), Stage::Init);
        assert_eq!(Stage::of_step("bootcmd[0]"), Stage::Init);
        assert_eq!(Stage::of_step("user:capv"), Stage::Init);
    }

    #[test]
    fn entering_a_later_stage_closes_the_earlier_ones_and_never_goes_back() {
        let mut p = Progress::default();
        assert_eq!(p.enter(Stage::InitLocal, 1.0), [Stage::InitLocal]);
        p.finish(2.0);
        assert_eq!(p.stage, None);
        assert_eq!(p.enter(Stage::Init, 5.0), [Stage::Init]);
        // No ntp step: modules-config starts and finishes when final starts.
        assert_eq!(
            p.enter(Stage::ModulesFinal, 9.0),
            [Stage::ModulesConfig, Stage::ModulesFinal]
        );
        assert!(p.enter(Stage::Init, 9.5).is_empty(), "never back");
        assert_eq!(p.stage, Some(Stage::ModulesFinal));
        let e = |s| {
            let e: &StageEntry = p.entry(s);
            (e.start, e.finished)
        };
        assert_eq!(e(Stage::InitLocal), (Some(1.0), Some(2.0)));
        assert_eq!(e(Stage::Init), (Some(5.0), Some(9.0)));
        assert_eq!(e(Stage::ModulesConfig), (Some(9.0), Some(9.0)));
        assert_eq!(e(Stage::ModulesFinal), (Some(9.0), None));
        p.warnings(&["w1".into(), "w1".into()]);
        p.finish(10.0);
        assert_eq!(p.entry(Stage::ModulesFinal).finished, Some(10.0));
        assert_eq!(
            p.entry(Stage::ModulesFinal).recoverable_errors["WARNING"],
            ["w1"]
        );
        // Read back from the JSON it writes.
        assert_eq!(Progress::from_json(&p.to_json()), p);
    }

    #[test]
    fn a_failure_stays_in_its_stage_and_the_later_stages_never_ran() {
        let mut p = Progress {
            datasource: Some("DataSourceNoCloud [seed=/var/lib/cloud/seed/nocloud]".into()),
            ..Progress::default()
        };
        p.enter(Stage::Init, 3.0);
        p.error("read: userdata line 3: bad");
        p.finish(4.0);
        let doc = p.to_json();
        assert_eq!(doc["v1"]["init"]["errors"][0], "read: userdata line 3: bad");
        assert_eq!(doc["v1"]["init-local"]["start"], 3.0);
        assert!(doc["v1"]["modules-final"]["start"].is_null());
        assert!(doc["v1"]["stage"].is_null());
        let mut keys: Vec<&String> = doc["v1"].as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "datasource",
                "init",
                "init-local",
                "modules-config",
                "modules-final",
                "stage"
            ]
        );
        assert_eq!(
            p.result_json(),
            json!({"v1": {"datasource": "DataSourceNoCloud [seed=/var/lib/cloud/seed/nocloud]",
                          "errors": ["read: userdata line 3: bad"]}})
        );
    }
}
