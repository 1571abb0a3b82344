//! The container runtime, ready before the first runcmd item or kubeadm. The main unit is
//! not ordered after containerd: its read, network wait, plan and writes overlap the
//! runtime's start, which under emulation takes 8-15 s after the network (BENCHMARKS.md,
//! "Time to Node against a floor"). What needs a serving CRI (kubeadm, `ctr images import` in
//! preKubeadmCommands) waits here instead, as cloud-config and cloud-final do behind
//! image-builder's `After=containerd.service` drop-ins; bootcmd, which cloud-init runs in its
//! network stage without that ordering, does not wait.
//!
//! The wait is systemd's own: `systemctl start nodeagent-cri.target` returns once the target
//! is reached, and the target is ordered after `containerd.service` (Type=notify: its
//! socket serves) and `crio.service` (units/nodeagent-cri.target). An image with another
//! runtime orders the target after it in a drop-in. `systemctl` is started when the main
//! stage starts, so that its own start (1.7 s of emulated time in one benchmark boot, started
//! at the first command) is not on the way to kubeadm either; its answer is taken before the
//! first command.

use std::cell::RefCell;
use std::ffi::OsStr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::base::process::{self, Running};

/// The unit that is reached once the container runtime serves.
pub const CRI_TARGET: &str = "nodeagent-cri.target";

/// A wait for the runtime: started (or not: off the node) at the main stage's start, its
/// answer taken once, before the first command. An answer never taken is not waited for.
#[derive(Default)]
pub struct Wait(RefCell<Option<(Running, Instant)>>);

impl Wait {
    /// On the node (the host's root, where commands always run, and systemd as init): start
    /// the wait, at most `RUNTIME_WAIT_SECS`. Elsewhere nothing to wait for.
    pub fn start_on_node(target: &super::Target) -> Wait {
        if !target.is_host() || !systemd_booted() {
            return Wait::default();
        }
        Wait::start(
            Duration::from_secs(crate::base::limits::RUNTIME_WAIT_SECS),
            None,
        )
        .unwrap_or_else(|why| {
            tracing::warn!("{why}");
            Wait::default()
        })
    }

    /// Start `systemctl start nodeagent-cri.target`, bounded by `timeout` (`path`: the PATH
    /// the tests' fake `systemctl` is found on).
    fn start(timeout: Duration, path: Option<&OsStr>) -> Result<Wait, String> {
        let mut cmd = Command::new("systemctl");
        cmd.args(["start", CRI_TARGET])
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if let Some(p) = path {
            cmd.env("PATH", p);
        }
        let started = Instant::now();
        process::start_inherited(cmd, &process::Limits::new(timeout))
            .map(|running| Wait(RefCell::new(Some((running, started)))))
            .map_err(|e| format!("container runtime: {e}; the commands run without waiting for it"))
    }

    /// This wait, moved out (to the stage that runs the commands); this one is left empty.
    pub fn take(&self) -> Wait {
        Wait(RefCell::new(self.0.borrow_mut().take()))
    }

    /// The wait's end, once: `None` when the runtime is ready (or there was nothing to wait
    /// for, or it was answered before); else why not, a warning for the run.
    pub fn finish(&self) -> Option<String> {
        let (running, started) = self.0.borrow_mut().take()?;
        let why = match running.wait() {
            Ok(status) if status.success() => {
                let took = started.elapsed();
                tracing::info!(
                    waited_ms = took.as_millis() as u64,
                    "container runtime ready ({CRI_TARGET} reached {} after the wait began)",
                    process::show_duration(took)
                );
                return None;
            }
            Ok(status) => format!(
                "`systemctl start {CRI_TARGET}` failed ({}; its message is in the journal)",
                process::describe(&status)
            ),
            Err(e) => e.to_string(),
        };
        Some(format!(
            "container runtime: {why}; the commands run without waiting for it"
        ))
    }
}

impl Drop for Wait {
    /// A run without commands never asks: its `systemctl` does not outlive it.
    fn drop(&mut self) {
        if let Some((running, _)) = self.0.get_mut().take() {
            running.stop();
        }
    }
}

/// Whether this host runs systemd as init (sd_booted(3)): nothing to ask for otherwise.
pub fn systemd_booted() -> bool {
    std::path::Path::new("/run/systemd/system").is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A directory holding a fake `systemctl` with `body` (sh), first on the PATH.
    fn fake_systemctl(body: &str) -> (tempfile::TempDir, std::ffi::OsString) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("systemctl");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("{}:/usr/bin:/bin", dir.path().display()).into();
        (dir, path)
    }

    #[test]
    fn the_target_is_started_at_once_and_its_answer_waited_for_later() {
        let (dir, path) = fake_systemctl(
            r#"echo "$@" > "$(dirname "$0")/argv"; sleep 0.5; echo done >> "$(dirname "$0")/argv""#,
        );
        let wait = Wait::start(Duration::from_secs(20), Some(&path)).unwrap();
        // Started, not waited for: the caller goes on meanwhile.
        let t0 = Instant::now();
        while !dir.path().join("argv").exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "systemctl never started"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let argv = std::fs::read_to_string(dir.path().join("argv")).unwrap();
        assert_eq!(argv.trim(), "start nodeagent-cri.target");
        assert_eq!(wait.finish(), None);
        let argv = std::fs::read_to_string(dir.path().join("argv")).unwrap();
        assert!(
            argv.ends_with("done\n"),
            "answered before systemctl returned: {argv:?}"
        );
        // Answered once: a second ask waits for nothing.
        assert_eq!(wait.finish(), None);
    }

    #[test]
    fn a_missing_target_is_said_and_does_not_stop_the_commands() {
        let (_dir, path) = fake_systemctl(
            r#"echo "Failed to start nodeagent-cri.target: Unit nodeagent-cri.target not found." >&2; exit 5"#,
        );
        let why = Wait::start(Duration::from_secs(20), Some(&path))
            .unwrap()
            .finish()
            .expect("a warning");
        assert!(why.contains("exit status 5"), "{why}");
        assert!(why.contains("the commands run without waiting"), "{why}");
    }

    #[test]
    fn a_runtime_that_never_comes_up_is_waited_for_no_longer_than_the_bound() {
        let (_dir, path) = fake_systemctl("sleep 60");
        let started = Instant::now();
        let why = Wait::start(Duration::from_secs(1), Some(&path))
            .unwrap()
            .finish()
            .expect("a warning");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert!(why.contains("1 s") || why.contains("1s"), "{why}");
    }

    #[test]
    fn an_answer_never_asked_for_does_not_outlive_the_run() {
        let (dir, path) = fake_systemctl(r#"echo $$ > "$(dirname "$0")/pid"; sleep 60"#);
        let wait = Wait::start(Duration::from_secs(120), Some(&path)).unwrap();
        let pidfile = dir.path().join("pid");
        let t0 = Instant::now();
        while std::fs::read_to_string(&pidfile).map_or(true, |s| !s.ends_with('\n')) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "systemctl never started"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        drop(wait);
        // Killed and reaped: no such process any more.
        assert!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err(),
            "systemctl {pid} still runs after the wait was dropped"
        );
    }
}
