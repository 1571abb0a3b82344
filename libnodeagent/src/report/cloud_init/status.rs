//! What `cloud-init status` answers, computed as cloud-init 25.1's `cmd/status.py` computes it
//! from the files [`super::files`] writes (so cloud-init's own reader, run on a nodeagent node,
//! reaches the same answer: tests/cloud-init-surface checks it), with nodeagent's units and
//! markers where cloud-init asks about its own. Pure: the command gathers [`Inputs`].

use serde_json::{Map, Value, json};

/// The boot's state: cloud-init's `RunningStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Running {
    NotStarted,
    Running,
    Done,
    Disabled,
}

impl Running {
    fn as_str(self) -> &'static str {
        match self {
            Running::NotStarted => "not started",
            Running::Running => "running",
            Running::Done => "done",
            Running::Disabled => "disabled",
        }
    }

    /// Still to wait for (`status --wait`).
    pub fn waiting(self) -> bool {
        matches!(self, Running::NotStarted | Running::Running)
    }
}

/// cloud-init's `ConditionStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    Error,
    Degraded,
    Healthy,
}

/// Whether the agent runs at boot, in cloud-init's `boot_status_code` words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootStatus {
    pub code: &'static str,
    pub reason: String,
}

impl BootStatus {
    pub fn disabled(&self) -> bool {
        self.code.starts_with("disabled-")
    }
}

/// What the answer is computed from.
pub struct Inputs {
    /// `/run/cloud-init/status.json`, if it exists (its text).
    pub status_json: Option<Vec<u8>>,
    /// `/run/cloud-init/result.json` exists: the boot's last stage ended.
    pub result_exists: bool,
    pub boot: BootStatus,
}

/// cloud-init's `StatusDetails`.
#[derive(Debug, Clone, PartialEq)]
pub struct Details {
    pub running: Running,
    pub condition: Condition,
    pub boot: BootStatus,
    pub description: String,
    pub errors: Vec<String>,
    /// By level name, in the order the levels first appear.
    pub recoverable_errors: Vec<(String, Vec<String>)>,
    pub last_update: String,
    /// `nocloud`, `vmware`…; `""` without status.json, `None` when it holds `null`.
    pub datasource: Option<String>,
    /// status.json's `v1` without `datasource`.
    pub v1: Map<String, Value>,
}

/// The error cloud-init adds when a boot unit failed while the boot still looks like running.
pub const UNIT_FAILURE: &str = "Failed due to systemd unit failure. Ensure all nodeagent \
    services are enabled, and check 'systemctl' or 'journalctl' for more information.";

/// cloud-init's `get_status_details`; `units_failed` is asked only while the boot looks like
/// running (cloud-init's `systemd_failed`).
pub fn details(inputs: &Inputs, units_failed: impl FnOnce() -> bool) -> Details {
    let mut v1: Map<String, Value> = inputs
        .status_json
        .as_deref()
        .and_then(|t| serde_json::from_slice::<Value>(t).ok())
        .and_then(|v| v.get("v1").and_then(Value::as_object).cloned())
        .unwrap_or_default();
    let datasource = match v1.get("datasource") {
        None => Some(String::new()),
        Some(Value::String(s)) if !s.is_empty() => {
            let first = s.split(' ').next().unwrap_or_default();
            Some(first.to_lowercase().replace("datasource", ""))
        }
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => None,
    };
    let mut description = match (v1.get("datasource"), v1.get("stage")) {
        (Some(Value::String(ds)), _) if !ds.is_empty() => ds.clone(),
        (_, Some(Value::String(stage))) if !stage.is_empty() => {
            format!("Running in stage: {stage}")
        }
        _ => inputs.boot.reason.clone(),
    };
    let latest = v1
        .values()
        .filter_map(Value::as_object)
        .flat_map(|s| [s.get("start"), s.get("finished")])
        .filter_map(|t| t.and_then(Value::as_f64))
        .fold(0.0_f64, f64::max);
    let last_update = if latest > 0.0 {
        gmtime(latest)
    } else {
        String::new()
    };
    let (mut errors, recoverable_errors) = errors(&v1);
    let mut condition = if !errors.is_empty() {
        Condition::Error
    } else if !recoverable_errors.is_empty() {
        Condition::Degraded
    } else {
        Condition::Healthy
    };
    let mut running = if inputs.boot.disabled() {
        Running::Disabled
    } else if inputs.status_json.is_some() && !inputs.result_exists {
        Running::Running
    } else if latest > 0.0 {
        Running::Done
    } else {
        Running::NotStarted
    };
    if running == Running::Running && units_failed() {
        running = Running::Done;
        condition = Condition::Error;
        description = "Failed due to systemd unit failure".into();
        errors.push(UNIT_FAILURE.into());
    }
    v1.remove("datasource");
    Details {
        running,
        condition,
        boot: inputs.boot.clone(),
        description,
        errors,
        recoverable_errors,
        last_update,
        datasource,
        v1,
    }
}

/// Every stage's errors and recoverable errors, stages in key order (cloud-init's `get_errors`).
fn errors(v1: &Map<String, Value>) -> (Vec<String>, Vec<(String, Vec<String>)>) {
    let mut keys: Vec<&String> = v1.keys().collect();
    keys.sort();
    let mut errors = Vec::new();
    let mut recoverable: Vec<(String, Vec<String>)> = Vec::new();
    for k in keys {
        let Some(stage) = v1[k.as_str()].as_object() else {
            continue;
        };
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| a.iter().map(text).collect())
                .unwrap_or_default()
        };
        errors.extend(stage.get("errors").map(strings).unwrap_or_default());
        if let Some(levels) = stage.get("recoverable_errors").and_then(Value::as_object) {
            for (level, msgs) in levels {
                let msgs = strings(msgs);
                match recoverable.iter_mut().find(|(l, _)| l == level) {
                    Some((_, list)) => list.extend(msgs),
                    None => recoverable.push((level.clone(), msgs)),
                }
            }
        }
    }
    (errors, recoverable)
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `strftime("%a, %d %b %Y %H:%M:%S %z", gmtime(t))`. cloud-init 24.2 and later time stages
/// in seconds since boot, so this reads as a time early on 1 January 1970, as there.
fn gmtime(t: f64) -> String {
    let fmt = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] +0000"
    );
    time::OffsetDateTime::from_unix_timestamp(t as i64)
        .ok()
        .and_then(|d| d.format(&fmt).ok())
        .unwrap_or_default()
}

impl Details {
    /// `status` and `extended_status` (cloud-init's `translate_status`).
    pub fn status(&self) -> (String, String) {
        let r = self.running.as_str();
        match self.condition {
            Condition::Error => ("error".into(), format!("error - {r}")),
            Condition::Degraded if matches!(self.running, Running::Done | Running::Running) => {
                (r.into(), format!("degraded {r}"))
            }
            _ => (r.into(), r.into()),
        }
    }

    /// The exit code: 1 error, 2 degraded (recoverable errors, cloud-init 23.4 and later), 0.
    pub fn exit_code(&self) -> i32 {
        match self.condition {
            Condition::Error => 1,
            Condition::Degraded => 2,
            Condition::Healthy => 0,
        }
    }

    /// The document `--format json|yaml` prints.
    pub fn document(&self) -> Value {
        let (status, extended) = self.status();
        let mut recoverable = Map::new();
        for (level, msgs) in &self.recoverable_errors {
            recoverable.insert(level.clone(), json!(msgs));
        }
        let mut doc = Map::new();
        doc.insert("datasource".into(), json!(self.datasource));
        doc.insert("boot_status_code".into(), json!(self.boot.code));
        doc.insert("status".into(), json!(status));
        doc.insert("extended_status".into(), json!(extended));
        doc.insert("detail".into(), json!(self.description));
        doc.insert("errors".into(), json!(self.errors));
        doc.insert("recoverable_errors".into(), Value::Object(recoverable));
        doc.insert("last_update".into(), json!(self.last_update));
        for (k, v) in &self.v1 {
            doc.insert(k.clone(), v.clone());
        }
        Value::Object(doc)
    }

    /// The tabular text (`status: …`, with `long` cloud-init's long template).
    pub fn tabular(&self, long: bool) -> String {
        let (status, extended) = self.status();
        let mut out = format!("status: {status}\n");
        if !long {
            return out;
        }
        let last_update = if self.last_update.is_empty() {
            String::new()
        } else {
            format!("last_update: {}\n", self.last_update)
        };
        let errors = if self.errors.is_empty() {
            " []".to_string()
        } else {
            format!("\n\t- {}", self.errors.join("\n\t- "))
        };
        let recoverable = if self.recoverable_errors.is_empty() {
            " {}".to_string()
        } else {
            let levels: Vec<String> = self
                .recoverable_errors
                .iter()
                .map(|(level, msgs)| {
                    let msgs: Vec<String> = msgs.iter().map(|m| m.replace('\n', " ")).collect();
                    format!("{level}:\n\t- {}", msgs.join("\n\t- "))
                })
                .collect();
            format!("\n{}", levels.join("\n"))
        };
        out.push_str(&format!(
            "extended_status: {extended}\nboot_status_code: {}\n{last_update}detail: {}\nerrors:{errors}\nrecoverable_errors:{recoverable}\n",
            self.boot.code, self.description
        ));
        out
    }
}

/// Parse `systemctl show --property=ActiveState,UnitFileState,SubState,MainPID UNIT` (one
/// unit) as cloud-init's `systemd_failed` reads it: `Some(true)` failed or not enabled,
/// `Some(false)` still running (stop looking), `None` exited normally (look at the next unit).
/// No answer (systemd not up yet) counts as running, as cloud-init's "may be inaccurate".
pub fn unit_verdict(show: &str) -> Option<bool> {
    if show.trim().is_empty() {
        return Some(false);
    }
    let get = |k: &str| {
        show.lines()
            .find_map(|l| l.split_once('=').filter(|(key, _)| key.trim() == k))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default()
    };
    let file_state = get("UnitFileState");
    if !(file_state.starts_with("enabled") || file_state == "static") {
        return Some(true);
    }
    let (active, sub) = (get("ActiveState"), get("SubState"));
    if active == "active" {
        if sub == "exited" {
            return None;
        }
        if sub == "running" && get("MainPID") == "0" {
            return Some(false);
        }
    } else if active == "failed" || sub == "failed" {
        return Some(true);
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enabled() -> BootStatus {
        BootStatus {
            code: "enabled-by-generator",
            reason: "nodeagent is enabled".into(),
        }
    }

    fn doc(stage: Option<&str>, final_errors: &[&str], warnings: &[&str]) -> Vec<u8> {
        let entry = |start: f64, errs: &[&str], warn: &[&str]| {
            let mut rec = Map::new();
            if !warn.is_empty() {
                rec.insert("WARNING".into(), json!(warn));
            }
            json!({"errors": errs, "finished": start + 1.0, "recoverable_errors": rec, "start": start})
        };
        serde_json::to_vec(&json!({"v1": {
            "datasource": "DataSourceNoCloud [seed=/var/lib/cloud/seed/nocloud]",
            "init-local": entry(1.0, &[], &[]),
            "init": entry(3.0, &[], &[]),
            "modules-config": entry(5.0, &[], &[]),
            "modules-final": entry(7.25, final_errors, warnings),
            "stage": stage,
        }}))
        .unwrap()
    }

    #[test]
    fn done_error_degraded_running_disabled_as_cloud_init_says_them() {
        let done = details(
            &Inputs {
                status_json: Some(doc(None, &[], &[])),
                result_exists: true,
                boot: enabled(),
            },
            || panic!("units are asked only while running"),
        );
        assert_eq!(done.status(), ("done".into(), "done".into()));
        assert_eq!(done.exit_code(), 0);
        assert_eq!(done.datasource.as_deref(), Some("nocloud"));
        assert_eq!(done.last_update, "Thu, 01 Jan 1970 00:00:08 +0000");
        let d = done.document();
        let mut keys: Vec<&String> = d.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "boot_status_code",
                "datasource",
                "detail",
                "errors",
                "extended_status",
                "init",
                "init-local",
                "last_update",
                "modules-config",
                "modules-final",
                "recoverable_errors",
                "stage",
                "status"
            ]
        );
        let error = details(
            &Inputs {
                status_json: Some(doc(None, &["runcmd[1]: exit status 3"], &[])),
                result_exists: true,
                boot: enabled(),
            },
            || false,
        );
        assert_eq!(error.status(), ("error".into(), "error - done".into()));
        assert_eq!(error.exit_code(), 1);
        assert_eq!(
            error.tabular(true),
            "status: error\nextended_status: error - done\nboot_status_code: enabled-by-generator\n\
             last_update: Thu, 01 Jan 1970 00:00:08 +0000\n\
             detail: DataSourceNoCloud [seed=/var/lib/cloud/seed/nocloud]\n\
             errors:\n\t- runcmd[1]: exit status 3\nrecoverable_errors: {}\n"
        );
        let degraded = details(
            &Inputs {
                status_json: Some(doc(None, &[], &["a\nb"])),
                result_exists: true,
                boot: enabled(),
            },
            || false,
        );
        assert_eq!(degraded.status(), ("done".into(), "degraded done".into()));
        assert_eq!(degraded.exit_code(), 2);
        assert!(
            degraded
                .tabular(true)
                .ends_with("errors: []\nrecoverable_errors:\nWARNING:\n\t- a b\n")
        );
        let running = details(
            &Inputs {
                status_json: Some(doc(Some("modules-final"), &[], &[])),
                result_exists: false,
                boot: enabled(),
            },
            || false,
        );
        assert_eq!(running.status(), ("running".into(), "running".into()));
        assert!(running.running.waiting());
        // A failed unit ends a boot that would otherwise wait for ever.
        let dead = details(
            &Inputs {
                status_json: Some(doc(Some("init"), &[], &[])),
                result_exists: false,
                boot: enabled(),
            },
            || true,
        );
        assert_eq!(dead.status(), ("error".into(), "error - done".into()));
        assert_eq!(dead.errors, [UNIT_FAILURE]);
        let not_started = details(
            &Inputs {
                status_json: None,
                result_exists: false,
                boot: enabled(),
            },
            || false,
        );
        assert_eq!(not_started.status().0, "not started");
        assert_eq!(not_started.description, "nodeagent is enabled");
        assert_eq!(not_started.document()["datasource"], "");
        let disabled = details(
            &Inputs {
                status_json: None,
                result_exists: false,
                boot: BootStatus {
                    code: "disabled-by-marker-file",
                    reason: "off".into(),
                },
            },
            || false,
        );
        assert_eq!(disabled.status(), ("disabled".into(), "disabled".into()));
        assert_eq!(disabled.exit_code(), 0);
        assert!(!disabled.running.waiting());
    }

    #[test]
    fn systemd_unit_states_read_as_cloud_init_reads_them() {
        let show = |a: &str, s: &str, f: &str, pid: &str| {
            format!("ActiveState={a}\nUnitFileState={f}\nSubState={s}\nMainPID={pid}\n")
        };
        assert_eq!(
            unit_verdict(&show("active", "exited", "enabled", "0")),
            None
        );
        assert_eq!(
            unit_verdict(&show("failed", "failed", "enabled", "0")),
            Some(true)
        );
        assert_eq!(
            unit_verdict(&show("inactive", "dead", "disabled", "0")),
            Some(true)
        );
        assert_eq!(
            unit_verdict(&show("activating", "start", "enabled", "42")),
            Some(false)
        );
        assert_eq!(
            unit_verdict(&show("inactive", "dead", "enabled", "0")),
            Some(false)
        );
        assert_eq!(unit_verdict(""), Some(false));
    }
}
