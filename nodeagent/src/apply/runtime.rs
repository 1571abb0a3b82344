//! The container runtime, ready before the first runcmd item or kubeadm. The main unit is
//! not ordered after containerd: its read, plan and writes overlap the runtime's start,
//! which under emulation takes 8-15 s after the network (BENCHMARKS.md, "Time to Node
//! against a floor"). What needs a serving CRI (kubeadm, `ctr images import` in
//! preKubeadmCommands) waits here instead, as cloud-config and cloud-final do behind
//! image-builder's `After=containerd.service` drop-ins; bootcmd, which cloud-init runs in its
//! network stage without that ordering, does not wait.
//!
//! The wait is systemd's own: `systemctl start nodeagent-cri.target` returns once the target
//! is reached, and the target is ordered after `containerd.service` (Type=notify: its
//! socket serves) and `crio.service` (units/nodeagent-cri.target). An image with another
//! runtime orders the target after it in a drop-in.

use std::time::{Duration, Instant};

use super::commands;

/// The unit that is reached once the container runtime serves.
pub const CRI_TARGET: &str = "nodeagent-cri.target";

/// What the wait for the runtime ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ready {
    /// The target was reached: the runtime started (or its start failed, which kubeadm
    /// then reports; the target only `Wants=` it, as the unit did before).
    Reached(Duration),
    /// No answer to give the commands: they run now, and the run ends degraded.
    Unknown(String),
}

/// Whether this host runs systemd as init (sd_booted(3)): nothing to ask for otherwise.
pub fn systemd_booted() -> bool {
    std::path::Path::new("/run/systemd/system").is_dir()
}

/// On the node (`--exec`, the host's root, systemd as init): wait for the runtime, at most
/// `RUNTIME_WAIT_SECS`. A warning for the run when there was no answer.
pub fn await_on_node(opts: &super::Options) -> Option<String> {
    if !opts.exec || !opts.target.is_host() || !systemd_booted() {
        return None;
    }
    match wait(Duration::from_secs(crate::limits::RUNTIME_WAIT_SECS), None) {
        Ready::Reached(took) => {
            tracing::info!(
                waited_ms = took.as_millis() as u64,
                "container runtime ready ({CRI_TARGET} reached after {})",
                crate::process::show_duration(took)
            );
            None
        }
        Ready::Unknown(why) => Some(why),
    }
}

/// Start `nodeagent-cri.target` and wait for it, at most `timeout` (`path`: the PATH the
/// tests' fake `systemctl` is found on).
pub fn wait(timeout: Duration, path: Option<&std::ffi::OsStr>) -> Ready {
    let started = Instant::now();
    let argv = ["systemctl", "start", CRI_TARGET];
    match commands::run_host_within(&argv, timeout, path) {
        Ok(run) if run.code == Some(0) => Ready::Reached(started.elapsed()),
        Ok(run) => Ready::Unknown(format!(
            "container runtime: `systemctl start {CRI_TARGET}` failed ({}): {}; the commands run without waiting for it",
            run.code
                .map_or_else(|| "killed by a signal".to_string(), |c| format!("exit {c}")),
            run.stderr.trim()
        )),
        Err(e) => Ready::Unknown(format!(
            "container runtime: {e}; the commands run without waiting for it"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A directory holding a fake `systemctl` with `body` (sh), first on the PATH.
    fn fake_systemctl(body: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("systemctl");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    fn path_with(dir: &tempfile::TempDir) -> std::ffi::OsString {
        format!("{}:/usr/bin:/bin", dir.path().display()).into()
    }

    #[test]
    fn the_target_is_started_and_waited_for() {
        let dir = fake_systemctl(r#"echo "$@" > "$(dirname "$0")/argv"; sleep 0.3"#);
        let r = wait(Duration::from_secs(20), Some(&path_with(&dir)));
        let Ready::Reached(took) = r else {
            panic!("{r:?}")
        };
        assert!(
            took >= Duration::from_millis(300),
            "returned before systemctl did: {took:?}"
        );
        let argv = std::fs::read_to_string(dir.path().join("argv")).unwrap();
        assert_eq!(argv.trim(), "start nodeagent-cri.target");
    }

    #[test]
    fn a_missing_target_is_said_and_does_not_stop_the_commands() {
        let dir = fake_systemctl(
            r#"echo "Failed to start nodeagent-cri.target: Unit nodeagent-cri.target not found." >&2; exit 5"#,
        );
        let r = wait(Duration::from_secs(20), Some(&path_with(&dir)));
        let Ready::Unknown(why) = r else {
            panic!("{r:?}")
        };
        assert!(why.contains("exit 5") && why.contains("not found"), "{why}");
    }

    #[test]
    fn a_runtime_that_never_comes_up_is_waited_for_no_longer_than_the_bound() {
        let dir = fake_systemctl("sleep 60");
        let started = Instant::now();
        let r = wait(Duration::from_secs(1), Some(&path_with(&dir)));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        let Ready::Unknown(why) = r else {
            panic!("{r:?}")
        };
        assert!(why.contains("timed out after 1 s"), "{why}");
    }
}
