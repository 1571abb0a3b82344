//! `nodeagent single --name MODULE`: the plan cut down to one cloud-init module's steps, as
//! `cloud-init single` runs one module. By default the journal decides as for `run` (a step
//! finished earlier is not done again); `--frequency always` runs the steps again under
//! fresh journal ids, so neither the journal nor a recorded command status skips them.

use crate::base::error::{Error, Result, Stage};
use crate::plan::{Action, Frequency, Plan, Step};

/// The module names `single` accepts (cloud-init's, plus `network`), and what they cover.
pub const MODULES: &[(&str, &str)] = &[
    ("bootcmd", "bootcmd[N]"),
    ("write_files", "write_files[N] (with write_files_deferred)"),
    ("users_groups", "user:NAME, group:NAME"),
    (
        "ssh",
        "ssh:root (top-level ssh_authorized_keys, the platform's public keys)",
    ),
    (
        "set_hostname",
        "hostname (also update_hostname, update_etc_hosts)",
    ),
    ("network", "network (the metadata's network configuration)"),
    ("ntp", "ntp"),
    ("disk_setup", "disk_setup, fs_setup"),
    ("mounts", "mounts"),
    ("growpart", "growpart"),
    ("resizefs", "resizefs"),
    (
        "runcmd",
        "runcmd[N], with its kubeadm step (cloud-init's scripts_user runs them)",
    ),
];

/// What to run: a module, and whether to run it again whatever the journal says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub module: String,
    pub always: bool,
}

/// cloud-init spells modules `cc_write_files`, `write-files`, `write_files`.
fn canonical(name: &str) -> String {
    let n = name.trim().to_ascii_lowercase().replace('-', "_");
    let n = n.strip_prefix("cc_").unwrap_or(&n).to_string();
    match n.as_str() {
        "write_files_deferred" => "write_files".into(),
        "update_hostname" | "update_etc_hosts" => "set_hostname".into(),
        "users" | "groups" => "users_groups".into(),
        "fs_setup" => "disk_setup".into(),
        "scripts_user" => "runcmd".into(),
        _ => n,
    }
}

/// A module name `single` knows, canonical; a usage error listing the known ones otherwise.
pub fn module(name: &str) -> Result<String> {
    let n = canonical(name);
    if MODULES.iter().any(|(m, _)| *m == n) {
        Ok(n)
    } else {
        let known: Vec<&str> = MODULES.iter().map(|(m, _)| *m).collect();
        Err(Error::invalid(
            Stage::Usage,
            "--name",
            format!(
                "unknown module {name:?}; nodeagent runs: {}",
                known.join(", ")
            ),
        ))
    }
}

fn belongs(step: &Step, module: &str) -> bool {
    let id = step.id.as_str();
    match module {
        "bootcmd" => id.starts_with("bootcmd"),
        "write_files" => id.starts_with("write_files"),
        "users_groups" => matches!(step.action, Action::User(_) | Action::Group(_)),
        "ssh" => matches!(step.action, Action::SshKeys(_)),
        "set_hostname" => matches!(step.action, Action::Hostname(_)),
        "network" => matches!(step.action, Action::Network(_)),
        "ntp" => matches!(step.action, Action::Ntp(_)),
        "disk_setup" => matches!(step.action, Action::DiskSetup(_) | Action::FsSetup(_)),
        "mounts" => matches!(step.action, Action::Mounts(_)),
        "growpart" => matches!(step.action, Action::Growpart(_)),
        "resizefs" => matches!(step.action, Action::ResizeFs(_)),
        "runcmd" => id.starts_with("runcmd") || matches!(step.action, Action::Kubeadm(_)),
        _ => false,
    }
}

/// Pure: the plan with only `sel`'s steps; with `always`, each id gets the suffix
/// `@single-<run>` (a new journal entry and command record per run) and runs once.
pub fn select(plan: &Plan, sel: &Selection, run: &str) -> Plan {
    let mut out = plan.clone();
    out.steps.retain(|s| belongs(s, &sel.module));
    if sel.always {
        for s in &mut out.steps {
            s.id = format!("{}@single-{run}", s.id);
            s.frequency = Frequency::PerInstance;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{CommandSpec, RunStage};

    fn step(id: &str) -> Step {
        Step {
            id: id.into(),
            stage: RunStage::Main,
            frequency: Frequency::PerBoot,
            action: Action::Command(CommandSpec {
                origin: id.into(),
                run: crate::plan::Run::Shell("true".into()),
                timeout_secs: 1,
            }),
        }
    }

    #[test]
    fn selects_one_module_and_renames_for_always() {
        let plan = Plan {
            version: 1,
            instance_id: "i".into(),
            steps: vec![step("bootcmd[0]"), step("runcmd[0]"), step("runcmd[1]")],
            warnings: Vec::new(),
        };
        assert_eq!(module("cc_runcmd").unwrap(), "runcmd");
        assert_eq!(module("write-files-deferred").unwrap(), "write_files");
        let e = module("apt_configure").unwrap_err();
        assert_eq!(e.stage, Stage::Usage);
        assert!(e.message.contains("runcmd"), "{e}");
        let sel = Selection {
            module: "runcmd".into(),
            always: false,
        };
        let p = select(&plan, &sel, "1");
        let ids: Vec<&str> = p.steps.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["runcmd[0]", "runcmd[1]"]);
        let p = select(
            &plan,
            &Selection {
                always: true,
                ..sel
            },
            "7",
        );
        assert_eq!(p.steps[0].id, "runcmd[0]@single-7");
        assert_eq!(p.steps[0].frequency, Frequency::PerInstance);
    }
}
