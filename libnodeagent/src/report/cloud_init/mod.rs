//! cloud-init's surface on a nodeagent node (docs/cloud-init-surface.md): the files that
//! cloud-init's tools, log collectors and people read, written by the agent from its own status
//! on every boot ([`files`]), the status document they hold ([`progress`]), and what the
//! `cloud-init` compatibility command answers from them ([`status`], [`command`]; its
//! `analyze` is `analyze/cloud_init.rs`, its `collect-logs` `logbundle.rs`); the command line
//! itself is `cli/cloud_init.rs`.

pub mod command;
pub mod files;
pub mod progress;
pub mod status;

/// The cloud-init release whose files, output shapes and exit codes this surface follows
/// (Debian 13's 25.1; tests/cloud-init-surface compares it with the real one, and with 22.4).
pub const SURFACE_VERSION: &str = "25.1";

/// How the agent names itself where cloud-init names its version (`cloud-init --version`,
/// the banners of its logs, `boot-finished`): the surface's release, then nodeagent's.
pub fn version() -> String {
    format!(
        "{SURFACE_VERSION} (nodeagent {})",
        env!("CARGO_PKG_VERSION")
    )
}

/// Seconds since boot, as cloud-init's `util.uptime()` reads them (the first field of
/// `/proc/uptime`): cloud-init 24.2 and later time the stages in status.json this way. The
/// kernel computes that field from `CLOCK_BOOTTIME`, read here without a system call (vDSO)
/// instead of opening and reading the file for each of a run's dozen status updates.
pub fn uptime() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    /// The boot clock is what `/proc/uptime` shows (read before and after it).
    #[test]
    fn uptime_is_proc_uptime() {
        let proc = || -> f64 {
            let t = std::fs::read_to_string("/proc/uptime").unwrap();
            t.split_whitespace().next().unwrap().parse().unwrap()
        };
        let before = proc();
        let now = super::uptime();
        let after = proc();
        assert!(
            before - 0.01 <= now && now <= after + 0.01,
            "{before} {now} {after}"
        );
    }
}
