//! The main unit's boot priority (units/nodeagent.service `Nice=-10`) covers the bootstrap
//! and ends with it. The agent's reading, planning and writing and every process it starts
//! for the node (bootcmd and runcmd through their supervisor, kubeadm, the image's tools)
//! run at the unit's priority, so the node's bootstrap is not queued behind the getty and the
//! other units multi-user.target starts at the same moment on a small VM. What outlives the
//! run (a daemon a runcmd left behind; `KillMode=process` keeps it in the unit's cgroup) goes
//! back to the normal priority when the run ends ([`lower_left_behind`]); after an agent that
//! was killed, such a process keeps the boot priority until it ends or the node reboots.
//!
//! Measured under TCG (BENCHMARKS.md, "Boot units"): a runcmd `true` took, with its
//! supervisor and shell reset to nice 0, 160-206 ms; 70-103 ms at the unit's priority.

use std::path::{Path, PathBuf};

/// Largest `cgroup.threads` read: a unit's cgroup lists its threads, a few lines.
const MAX_THREADS_FILE: usize = 1 << 20;

/// Whether this process runs above the normal priority (a negative nice value).
pub fn raised() -> bool {
    nice_of(0).is_some_and(|nice| nice < 0)
}

/// The nice value of process or thread `id` (0: this process); `None` when it cannot be read.
fn nice_of(id: libc::id_t) -> Option<i32> {
    // SAFETY: getpriority of one id. -1 is also a valid nice value, so errno tells a failure
    // apart.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, id);
        (*libc::__errno_location() == 0).then_some(nice)
    }
}

/// At the end of a run at a raised priority: every other thread in the agent's unit cgroup
/// that still has a raised priority gets nice 0 (a value someone set higher is kept). Nothing
/// is done outside a `.service` cgroup (a shell, a test, the root cgroup of a host), where
/// the other threads are not the run's.
pub fn lower_left_behind() {
    if !raised() {
        return;
    }
    let Some(dir) = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| unit_cgroup(&text, Path::new("/sys/fs/cgroup")))
    else {
        return;
    };
    let lowered = lower_in(&dir.join("cgroup.threads"));
    if lowered > 0 {
        tracing::info!(
            threads = lowered,
            "processes left by the run are back at the normal priority"
        );
    }
}

/// The cgroup v2 directory of the unit this process runs in, from `/proc/self/cgroup`'s
/// `0::PATH` line: under `fs` (the unified hierarchy) or `fs/unified` (hybrid hosts), and only
/// when PATH is a service's own cgroup.
fn unit_cgroup(proc_self_cgroup: &str, fs: &Path) -> Option<PathBuf> {
    let path = proc_self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))?
        .trim();
    if !path.ends_with(".service") || path.contains("/../") {
        return None;
    }
    let rel = path.trim_start_matches('/');
    [fs.to_path_buf(), fs.join("unified")]
        .into_iter()
        .map(|base| base.join(rel))
        .find(|dir| dir.join("cgroup.threads").is_file())
}

/// Give every thread listed in `threads_file` (one id a line) that is not this process's and
/// runs at a negative nice value nice 0; returns how many were changed.
fn lower_in(threads_file: &Path) -> usize {
    let Ok(text) = crate::base::fsio::read_capped(threads_file, MAX_THREADS_FILE) else {
        return 0;
    };
    let own = Path::new("/proc/self/task");
    String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|l| l.trim().parse::<libc::id_t>().ok())
        .filter(|tid| !own.join(tid.to_string()).exists())
        .filter(|&tid| {
            // SAFETY: setpriority of one thread id; an error leaves it as it is.
            nice_of(tid).is_some_and(|nice| nice < 0)
                && unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 0) } == 0
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_service_cgroup_of_the_unified_hierarchy_is_swept() {
        let fs = tempfile::tempdir().unwrap();
        let unit = fs.path().join("unified/system.slice/nodeagent.service");
        std::fs::create_dir_all(&unit).unwrap();
        std::fs::write(unit.join("cgroup.threads"), "").unwrap();
        let v1_and_v2 = "4:memory:/x\n0::/system.slice/nodeagent.service\n";
        assert_eq!(unit_cgroup(v1_and_v2, fs.path()), Some(unit));
        for (text, why) in [
            ("0::/\n", "a host's root cgroup"),
            ("0::/user.slice/session-1.scope\n", "a scope, not a service"),
            ("1:cpu:/\n", "no unified hierarchy"),
            ("0::/system.slice/other.service\n", "no such directory"),
        ] {
            assert_eq!(unit_cgroup(text, fs.path()), None, "{why}");
        }
    }

    /// A child started at a raised priority (as a runcmd's daemon is) is lowered to 0, one
    /// started lowered keeps its value, this process keeps its own. Needs CAP_SYS_NICE
    /// (root) to raise the priority; skips without it.
    #[test]
    fn left_behind_processes_go_back_to_the_normal_priority() {
        let nice_of = |pid: u32| -> i32 {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            let after_comm = stat.rsplit_once(')').unwrap().1;
            // Fields after `comm`: state is field 3, nice is field 19.
            after_comm
                .split_whitespace()
                .nth(16)
                .unwrap()
                .parse()
                .unwrap()
        };
        // SAFETY: this test's own thread (nextest runs each test in its own process).
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -5) } != 0 {
            crate::test_skip(
                "NODEAGENT_PRIVILEGED_TESTS",
                "cannot raise the priority (not root)",
            );
            return;
        }
        let mut raised_child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut lowered_child = std::process::Command::new("nice")
            .args(["-n", "12", "sleep", "30"])
            .spawn()
            .unwrap();
        // `nice` sets the value, then execs `sleep`: wait for the exec (bounded).
        let comm = format!("/proc/{}/comm", lowered_child.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read_to_string(&comm).unwrap_or_default().trim() != "sleep" {
            assert!(
                std::time::Instant::now() < deadline,
                "`nice` never ran `sleep`"
            );
            std::thread::yield_now();
        }
        assert_eq!(
            nice_of(raised_child.id()),
            -5,
            "a child inherits the priority"
        );
        assert_eq!(nice_of(lowered_child.id()), 7, "-5 + 12");
        let d = tempfile::tempdir().unwrap();
        let threads = d.path().join("cgroup.threads");
        let own = std::process::id();
        std::fs::write(
            &threads,
            format!("{own}\n{}\n{}\n", raised_child.id(), lowered_child.id()),
        )
        .unwrap();
        let changed = lower_in(&threads);
        let (raised_now, lowered_now) = (nice_of(raised_child.id()), nice_of(lowered_child.id()));
        let _ = (raised_child.kill(), lowered_child.kill());
        let _ = (raised_child.wait(), lowered_child.wait());
        assert_eq!((changed, raised_now, lowered_now), (1, 0, 7));
        assert!(raised(), "the agent's own priority is not touched");
    }
}
