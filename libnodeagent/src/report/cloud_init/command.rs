//! The work of the `cloud-init` compatibility command (`cli/cloud_init.rs` parses and
//! dispatches): `status` from the files [`super::files`] writes, with nodeagent's own enable
//! markers and units; `clean` of what cloud-init's clean removes; and where the real
//! cloud-init is, when the image has it too.

use super::status::{BootStatus, Details, Inputs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the package puts cloud-init's own command when the image has cloud-init installed too
/// (`dpkg-divert` in the package's preinst; docs/cloud-init-surface.md).
pub const DIVERTED: &str = "/usr/bin/cloud-init.cloud-init";
/// The longest `status --wait` waits: a boot that is still running after the agent's own run
/// deadline will not end by itself (cloud-init's waits for ever).
pub const WAIT_BOUND: Duration = Duration::from_secs(crate::base::limits::RUN_DEADLINE_SECS + 60);
/// How often `status --wait` asks systemd whether a unit failed (cloud-init: five
/// `systemctl show` every poll). Two per check cost seconds in a QEMU guest under TCG while
/// the boot runs (the systemd tier's cloud-init-surface scenario polled 4 times in 31 s at 2 s).
const UNIT_CHECK_EVERY: Duration = Duration::from_secs(5);
/// Deadline of one `systemctl show`.
const SYSTEMCTL_SECS: u64 = 10;
/// nodeagent's boot units, the later stage first (as cloud-init asks about its own).
const UNITS: [&str; 2] = ["nodeagent.service", "nodeagent-local.service"];

/// cloud-init's own command on this image (the diverted copy), when there is one: only on the
/// node itself.
pub fn real_cloud_init(root: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let p = PathBuf::from(DIVERTED);
    (root == Path::new("/")
        && std::fs::metadata(&p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
    .then_some(p)
}

/// Whether nodeagent runs at boot, in cloud-init's `boot_status_code` words: its units run
/// unless `/etc/nodeagent/disabled` exists or the kernel command line says `nodeagent=disabled`
/// (the units' own conditions); on systemd that is cloud-init's "enabled by the generator".
/// The markers are asked first (cloud-init asks about sysvinit first): they disable nodeagent
/// whatever the init system, and decide whether cloud-init's own command answers instead.
pub fn boot_status(root: &Path) -> BootStatus {
    let host = root == Path::new("/");
    let cmdline = if host {
        std::fs::read_to_string("/proc/cmdline").unwrap_or_default()
    } else {
        String::new()
    };
    let words: Vec<&str> = cmdline.split_whitespace().collect();
    if crate::base::confine::metadata(root, "etc/nodeagent/disabled").is_ok() {
        BootStatus {
            code: "disabled-by-marker-file",
            reason: "nodeagent disabled by /etc/nodeagent/disabled".into(),
        }
    } else if words.contains(&"nodeagent=disabled") {
        BootStatus {
            code: "disabled-by-kernel-command-line",
            reason: "nodeagent disabled by kernel parameter nodeagent=disabled".into(),
        }
    } else if !uses_systemd(root) {
        BootStatus {
            code: "enabled-by-sysvinit",
            reason: "nodeagent enabled on sysvinit".into(),
        }
    } else {
        BootStatus {
            code: "enabled-by-generator",
            reason: "nodeagent enabled by its systemd units".into(),
        }
    }
}

/// cloud-init's `uses_systemd`: `/run/systemd/system` is a directory.
fn uses_systemd(root: &Path) -> bool {
    crate::base::confine::metadata(root, "run/systemd/system").is_ok_and(|m| m.is_dir())
}

/// What `status` is computed from, read now.
pub fn inputs(root: &Path) -> Inputs {
    use super::files::{RESULT, RUN_DIR, STATUS, read_capped};
    Inputs {
        status_json: read_capped(root, &format!("{RUN_DIR}/{STATUS}")),
        result_exists: crate::base::confine::metadata(root, &format!("{RUN_DIR}/{RESULT}")).is_ok(),
        boot: boot_status(root),
    }
}

/// Whether a boot unit of nodeagent failed (or was disabled), as cloud-init's `systemd_failed`
/// asks about its own: only on the node itself, each `systemctl show` bounded.
pub fn units_failed(root: &Path) -> bool {
    if root != Path::new("/") || !uses_systemd(root) {
        return false;
    }
    for unit in UNITS {
        let mut cmd = std::process::Command::new("systemctl");
        cmd.args([
            "show",
            "--property=ActiveState,UnitFileState,SubState,MainPID",
            unit,
        ]);
        let limits = crate::base::process::Limits::new(Duration::from_secs(SYSTEMCTL_SECS))
            .stdout_cap(64 * 1024)
            .stderr_cap(64 * 1024);
        let Ok(out) = crate::base::process::run(cmd, &limits, None) else {
            return false;
        };
        if !out.status.success() {
            return false;
        }
        match super::status::unit_verdict(&String::from_utf8_lossy(&out.stdout)) {
            None => continue,
            Some(failed) => return failed,
        }
    }
    false
}

/// Output format of `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Tabular,
    Json,
    Yaml,
}

/// `cloud-init status [--long] [--wait] [--format F]`: prints, returns the exit code.
pub fn status(root: &Path, format: Format, long: bool, wait: bool) -> i32 {
    use std::io::Write;
    let started = Instant::now();
    let mut checked = Instant::now();
    let mut details = super::status::details(&inputs(root), || units_failed(root));
    while wait && details.running.waiting() {
        if started.elapsed() >= WAIT_BOUND {
            eprintln!(
                "cloud-init status: gave up waiting after {} s: nodeagent's run has a deadline of {} s",
                WAIT_BOUND.as_secs(),
                crate::base::limits::RUN_DEADLINE_SECS
            );
            details = timed_out(details);
            break;
        }
        if format == Format::Tabular {
            print!(".");
            let _ = std::io::stdout().flush();
        }
        std::thread::sleep(Duration::from_millis(250));
        let ask_units = checked.elapsed() >= UNIT_CHECK_EVERY;
        if ask_units {
            checked = Instant::now();
        }
        details = super::status::details(&inputs(root), || ask_units && units_failed(root));
    }
    print!("{}", render(&details, format, long));
    details.exit_code()
}

/// A wait given up: an error, so the waiting script does not go on as if the boot were over.
fn timed_out(mut d: Details) -> Details {
    d.condition = super::status::Condition::Error;
    d.errors.push(format!(
        "nodeagent did not finish within {} s",
        WAIT_BOUND.as_secs()
    ));
    d
}

/// The text `status` prints in `format`.
pub fn render(d: &Details, format: Format, long: bool) -> String {
    match format {
        Format::Tabular => d.tabular(long),
        Format::Json => crate::formats::pyjson::to_python_json_indented(&d.document(), 2),
        // PyYAML's explicit document start and end (cloud-init's `safeyaml.dumps`).
        Format::Yaml => format!(
            "---\n{}...\n\n",
            crate::formats::goyaml::dump(&d.document()).unwrap_or_default()
        ),
    }
}

/// `cloud-init clean`'s part beyond nodeagent's own state: everything under `/var/lib/cloud`
/// but the seed (with `seed`, that too: cloud-init-per's semaphores, the instance link, the
/// status files), and with `logs` cloud-init's log files (rotated copies too). Returns what
/// was removed. Each removal is made relative to its directory opened inside the root.
pub fn clean(root: &Path, logs: bool, seed: bool) -> std::io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    if let Ok(dir) = crate::base::confine::Dir::open(root, super::files::CLOUD_DIR) {
        for name in dir.names()? {
            if name == "seed" && !seed {
                continue;
            }
            dir.remove_tree(&name)?;
            removed.push(dir.path().join(&name));
        }
    }
    if logs && let Ok(dir) = crate::base::confine::Dir::open(root, "var/log") {
        for name in dir.names()? {
            if name.starts_with("cloud-init.log") || name.starts_with("cloud-init-output.log") {
                dir.remove_tree(&name)?;
                removed.push(dir.path().join(&name));
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_disables_nodeagent_whatever_the_init_system() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        assert_eq!(boot_status(r).code, "enabled-by-sysvinit");
        std::fs::create_dir_all(r.join("run/systemd/system")).unwrap();
        assert_eq!(boot_status(r).code, "enabled-by-generator");
        std::fs::remove_dir_all(r.join("run")).unwrap();
        std::fs::create_dir_all(r.join("etc/nodeagent")).unwrap();
        std::fs::write(r.join("etc/nodeagent/disabled"), "").unwrap();
        let b = boot_status(r);
        assert_eq!(b.code, "disabled-by-marker-file");
        assert!(b.disabled());
    }

    #[test]
    fn clean_keeps_the_seed_unless_asked_and_removes_only_cloud_init_logs() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        for p in ["var/lib/cloud/seed/nocloud", "var/lib/cloud/sem", "var/log"] {
            std::fs::create_dir_all(r.join(p)).unwrap();
        }
        for f in [
            "var/log/cloud-init.log",
            "var/log/cloud-init-output.log.1",
            "var/log/syslog",
        ] {
            std::fs::write(r.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink(
            "/var/lib/cloud/instances/i",
            r.join("var/lib/cloud/instance"),
        )
        .unwrap();
        clean(r, false, false).unwrap();
        let left: Vec<_> = std::fs::read_dir(r.join("var/lib/cloud"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["seed"]);
        assert!(
            r.join("var/log/cloud-init.log").exists(),
            "logs only with -l"
        );
        clean(r, true, true).unwrap();
        assert_eq!(
            std::fs::read_dir(r.join("var/lib/cloud")).unwrap().count(),
            0
        );
        assert!(
            !r.join("var/log/cloud-init.log").exists()
                && !r.join("var/log/cloud-init-output.log.1").exists()
        );
        assert!(r.join("var/log/syslog").exists());
    }
}
