//! Real kubeadm in pre-flight: when the node has `kubeadm` on its `PATH` (a Cluster API
//! image always does), `kubeadm config validate` judges the kubeadm step's `--config` file
//! before the first write, in addition to nodeagent's own reader (`config`). Both must accept
//! it; a refusal says which of the two refused. A worker's join config is the exception: it
//! is put to kubeadm only after a failed first `kubeadm join` attempt (`worker_join`, `refusal`).
//!
//! kubeadm is found and run as the kubeadm step finds and runs it: `kubeadm` on the agent's
//! `PATH`, inside the root, and only where the step would run at all (on the node, or with
//! `--exec`). On the node the config is handed on stdin (`--config /proc/self/fd/0`): the file
//! is not written yet. Under `--root DIR` the root's kubeadm runs chrooted into DIR, as the
//! step runs it (`process::chroot_into`), so it sees the image's files and nothing of the
//! host's; the config goes into a root-only file inside DIR (`/run/nodeagent/`, 0600), removed
//! after the call, so a trial root needs neither `/proc` nor `/dev`. The call goes through the
//! one process runner with its deadline; its output is redacted and cut. A kubeadm that cannot
//! be started or overruns its deadline is a warning, not a refusal: nodeagent's reader has
//! already accepted the file.

use crate::base::error::{Error, Result, Stage};
use crate::base::process;
use crate::plan::{Action, KubeadmMode, Plan};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

/// Deadline of one `kubeadm config validate` (natively ~35 ms; a Go binary under TCG is slower).
const TIMEOUT: Duration = Duration::from_secs(crate::base::limits::KUBEADM_VALIDATE_TIMEOUT_SECS);
/// Lines of kubeadm's refusal kept in the error.
const REASON_LINES: usize = 3;
/// Longest line of kubeadm's refusal kept.
const REASON_LINE_MAX: usize = 300;

/// The configs this process has had accepted, with the kubeadm that accepted them: `run
/// --stage all` prepares the plan twice, and a config that did not change is not validated
/// again.
static ACCEPTED: Mutex<Vec<(PathBuf, Vec<u8>)>> = Mutex::new(Vec::new());

/// The same across the two units of one boot (`/run` is per boot): the fingerprints of the
/// configs kubeadm accepted (its path, size and mtime, and the bytes), one per line, so the
/// main unit does not ask again about what the local unit's kubeadm accepted.
const VERDICTS: &str = "run/nodeagent/kubeadm-accepted";

/// Under `--root`, the config handed to the chrooted kubeadm, inside the root (root-only, 0600;
/// removed after the call).
const CHROOTED_CONFIG: &str = "/run/nodeagent/kubeadm-validate.yaml";

fn fingerprint(host: &Path, bytes: &[u8]) -> Option<String> {
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(host).ok()?;
    let mut h = Sha256::new();
    h.update(host.as_os_str().as_encoded_bytes());
    h.update([0]);
    h.update(m.len().to_le_bytes());
    h.update(m.mtime().to_le_bytes());
    h.update(m.mtime_nsec().to_le_bytes());
    h.update([0]);
    h.update(bytes);
    Some(hex::encode(h.finalize()))
}

fn accepted_this_boot(root: &Path, fp: &str) -> bool {
    crate::base::confine::read(root, VERDICTS)
        .is_ok_and(|t| t.split(|b| *b == b'\n').any(|l| l == fp.as_bytes()))
}

fn remember(root: &Path, fp: &str) {
    let mut text = crate::base::confine::read(root, VERDICTS).unwrap_or_default();
    text.extend_from_slice(fp.as_bytes());
    text.push(b'\n');
    let written = crate::base::confine::file(root, VERDICTS)
        .and_then(|path| crate::report::write_run_file(&path, &text, 0o600));
    if let Err(e) = written {
        // Only a second call by the main unit is lost.
        tracing::debug!("{VERDICTS} not written: {e}");
    }
}

/// Where the kubeadm step would find kubeadm, searching `path_var` inside `root`:
/// (the host path of the program, its path on the node).
fn locate(root: &Path, path_var: &std::ffi::OsStr) -> Option<(PathBuf, PathBuf)> {
    if root == Path::new("/") {
        let p = process::find_executable("kubeadm", Some(path_var))?;
        return Some((p.clone(), p));
    }
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path_var)
        .filter(|d| d.is_absolute())
        .map(|d| d.join("kubeadm"))
        .find_map(|inside| {
            let host = crate::base::confine::dir(root, &inside.to_string_lossy()).ok()?;
            let m = std::fs::metadata(&host).ok()?;
            (m.is_file() && m.permissions().mode() & 0o111 != 0).then_some((host, inside))
        })
}

/// What the real-kubeadm check found, when it did not refuse.
#[derive(Debug, PartialEq, Eq)]
pub enum Checked {
    /// kubeadm accepted every config (how many it ran on).
    Accepted(usize),
    /// No kubeadm step to run, or no kubeadm on the PATH: nothing to do.
    NotRun,
    /// kubeadm could not give a verdict (a warning for the run).
    Warning(String),
}

/// Run `kubeadm config validate` on the config of every kubeadm step of `plan` that will run
/// (not recorded as finished in `finished`, no CAPI sentinel). `exec`: the kubeadm step would run (on the node,
/// or `--exec`); `path_var`: the agent's `PATH`, which the step's kubeadm is found on;
/// `per_boot`: keep and take verdicts in the root's `/run` for the other unit of the boot.
/// `Err` when real kubeadm refused a config.
pub fn check(
    plan: &Plan,
    root: &Path,
    exec: bool,
    path_var: Option<&std::ffi::OsStr>,
    per_boot: bool,
    finished: &dyn Fn() -> std::collections::BTreeSet<String>,
) -> Result<Checked> {
    let steps: Vec<_> = plan
        .steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match &s.action {
            Action::Kubeadm(spec) => Some((i, s, spec)),
            _ => None,
        })
        .collect();
    // The sentinel says kubeadm has succeeded: the step will not run it again (kubeadm::run).
    let bootstrapped = || crate::base::confine::metadata(root, super::detect::SENTINEL).is_ok();
    if !exec || steps.is_empty() || bootstrapped() {
        return Ok(Checked::NotRun);
    }
    let Some((host, program)) = path_var.and_then(|p| locate(root, p)) else {
        return Ok(Checked::NotRun);
    };
    let done = finished();
    let mut ran = 0;
    for (i, step, spec) in steps {
        if done.contains(&step.id) {
            continue;
        }
        let Some(bytes) = config_bytes(plan, i, root, &spec.config_path) else {
            continue; // nodeagent's pre-flight has already refused a missing config
        };
        if spec.mode == KubeadmMode::Join && worker_join(&bytes) {
            continue; // asked after a failed attempt instead (`refusal`)
        }
        if local_discovery_file_unseen(&bytes, root) {
            continue;
        }
        let seen = |a: &Vec<(PathBuf, Vec<u8>)>| a.iter().any(|(p, b)| *p == host && *b == bytes);
        if ACCEPTED.lock().is_ok_and(|a| seen(&a)) {
            continue;
        }
        let fp = fingerprint(&host, &bytes).filter(|_| per_boot);
        if fp.as_deref().is_some_and(|fp| accepted_this_boot(root, fp)) {
            continue;
        }
        let out = match run_validate(root, &host, &program, &bytes) {
            Ok(o) => o,
            Err(e) => {
                return Ok(Checked::Warning(format!(
                    "real kubeadm ({}) gave no verdict on {}: {}",
                    host.display(),
                    spec.config_path,
                    crate::base::redact::redact_text(&e.to_string())
                )));
            }
        };
        ran += 1;
        if !out.status.success() {
            return Err(Error::command_failed(
                Stage::Kubeadm,
                format!("step {}: {}", step.id, spec.config_path),
                format!(
                    "real kubeadm refused it (`{} config validate`, {}; nodeagent's reader accepted it): {}",
                    program.display(),
                    process::describe(&out.status),
                    reason(&out.stderr, &out.stdout)
                ),
            ));
        }
        if let Some(fp) = &fp {
            remember(root, fp);
        }
        if let Ok(mut a) = ACCEPTED.lock() {
            a.push((host.clone(), bytes));
        }
    }
    Ok(Checked::Accepted(ran))
}

/// A worker's join config (a JoinConfiguration without `controlPlane`) is not judged in
/// pre-flight: `kubeadm join` validates it as its first act, before it changes the node, and
/// what the plan writes for a worker (the config on `/run`, hostname, network) holds no
/// cluster key. Asking in pre-flight cost every worker's boot seconds under emulation and
/// could not change its outcome (BENCHMARKS.md, "Time to Node"); a failed join attempt asks
/// instead (`refusal`), so a config kubeadm refuses still fails at once, named as here.
fn worker_join(config: &[u8]) -> bool {
    std::str::from_utf8(config)
        .ok()
        .and_then(|t| super::config::parse(t, "config").ok())
        .and_then(|c| c.join)
        .is_some_and(|j| j.spec.control_plane.is_none())
}

/// After a failed `kubeadm join`: whether the node's kubeadm (on `PATH`, inside `root`, as
/// the step finds it) refuses the config at `config_path`, and why, so that the step stops
/// with the refusal named instead of resetting and retrying what cannot succeed. `None` when
/// kubeadm accepts it, is not found or gives no verdict.
pub fn refusal(root: &Path, config_path: &str) -> Option<String> {
    let path_var = std::env::var_os("PATH")?;
    let (host, program) = locate(root, &path_var)?;
    let bytes =
        crate::base::confine::read_bounded(root, config_path, crate::formats::yaml::MAX_YAML_BYTES)
            .ok()?;
    let out = run_validate(root, &host, &program, &bytes).ok()?;
    (!out.status.success()).then(|| {
        format!(
            "{config_path}: real kubeadm refused it (`{} config validate`, {}): {}",
            program.display(),
            process::describe(&out.status),
            reason(&out.stderr, &out.stdout)
        )
    })
}

/// `kubeadm config validate --config CONFIG` as the kubeadm step would run kubeadm: on the node
/// (`root` is `/`) the program at `host` with the config on stdin; under `--root` the program at
/// `program` chrooted into the root, the config in [`CHROOTED_CONFIG`] inside it.
fn run_validate(
    root: &Path,
    host: &Path,
    program: &Path,
    bytes: &[u8],
) -> std::io::Result<process::Output> {
    let limits = process::Limits::new(TIMEOUT)
        .stdout_cap(16 * 1024)
        .stderr_cap(16 * 1024);
    if root == Path::new("/") {
        let mut cmd = Command::new(host);
        // /proc/self/fd/0, not /dev/stdin: a minimal root (an initramfs, a busybox init) has no
        // /dev/stdin link, and every system that runs kubeadm has /proc.
        cmd.args(["config", "validate", "--config", "/proc/self/fd/0"]);
        return process::run(cmd, &limits, Some(bytes)).map_err(std::io::Error::other);
    }
    let file = crate::base::confine::file(root, CHROOTED_CONFIG)?;
    crate::report::write_run_file(&file, bytes, 0o600)?;
    let mut cmd = Command::new(program);
    cmd.args(["config", "validate", "--config", CHROOTED_CONFIG]);
    let out = process::chroot_into(&mut cmd, root, None)
        .and_then(|()| process::run(cmd, &limits, None).map_err(std::io::Error::other));
    if let Ok(dir) = crate::base::confine::Dir::open(root, "/run/nodeagent") {
        let _ = dir.remove_tree("kubeadm-validate.yaml");
    }
    out
}

/// `config validate` looks a join's `discovery.file.kubeConfigPath` up on the disk it runs on
/// (the root's, chrooted): a file the plan has not written yet would be refused for being
/// absent. Such configs are left to nodeagent's pre-flight, which checks the file the plan
/// writes.
fn local_discovery_file_unseen(config: &[u8], root: &Path) -> bool {
    let Some(path) = std::str::from_utf8(config)
        .ok()
        .and_then(|t| super::config::parse(t, "config").ok())
        .and_then(|c| c.join)
        .and_then(|j| j.spec.discovery.file)
        .map(|f| f.kube_config_path)
    else {
        return false;
    };
    !path.starts_with("https://")
        && !crate::base::confine::metadata(root, &path).is_ok_and(|m| m.is_file())
}

/// The bytes the kubeadm step at `index` will read as its config: the plan's last write of
/// it before the step, else the file already in the root.
fn config_bytes(plan: &Plan, index: usize, root: &Path, path: &str) -> Option<Vec<u8>> {
    let written = plan
        .steps
        .get(..index)?
        .iter()
        .rev()
        .find_map(|s| match &s.action {
            Action::WriteFile(f) if f.path == path && !f.append && f.source.is_none() => {
                Some(f.content.0.clone())
            }
            _ => None,
        });
    written.or_else(|| crate::base::confine::read(root, path).ok())
}

/// kubeadm's refusal, cut to a few lines, without the stack-trace hint, with quoted values
/// dropped (kubeadm quotes the offending value, which may be a token) except field names, and
/// redacted: both streams through one redactor first (stdout, then stderr), so a secret on
/// the line after its marker is gone before any line is picked.
fn reason(stderr: &[u8], stdout: &[u8]) -> String {
    let mut redactor = crate::base::redact::Redactor::new();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    redactor.push(0, stdout, &mut |l| out.push(l));
    redactor.end_line(0, &mut |l| out.push(l));
    redactor.push(1, stderr, &mut |l| err.push(l));
    redactor.finish(&mut |l| err.push(l));
    let lines: Vec<String> = if stderr.is_empty() { &out } else { &err }
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty() && !l.starts_with("To see the stack trace"))
        .take(REASON_LINES)
        .map(|l| {
            let l = scrub(l);
            match l.char_indices().nth(REASON_LINE_MAX) {
                Some((at, _)) => format!("{}…", l.get(..at).unwrap_or_default()),
                None => l,
            }
        })
        .collect();
    if lines.is_empty() {
        "(no output)".to_string()
    } else {
        lines.join(" / ")
    }
}

/// Quoted text dropped (`"…"`) unless it names a field (`unknown field "a.b"`); redacted.
fn scrub(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some((before, after)) = rest.split_once('"') {
        out.push_str(before);
        let Some((quoted, tail)) = after.split_once('"') else {
            out.push_str("\"…");
            rest = "";
            break;
        };
        let names_field = before.ends_with("field ") || before.ends_with("fields ");
        let plain = quoted
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '[' | ']'));
        if names_field && plain {
            out.push('"');
            out.push_str(quoted);
            out.push('"');
        } else {
            out.push_str("\"…\"");
        }
        rest = tail;
    }
    out.push_str(rest);
    crate::base::redact::redact_text(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_keeps_field_names_and_drops_values() {
        let e = b"error: error unmarshaling configuration schema.GroupVersionKind{Group:\"kubeadm.k8s.io\", Version:\"v1beta3\", Kind:\"InitConfiguration\"}: strict decoding error: unknown field \"nodeRegistration.bogus\"\nTo see the stack trace of this error execute with --v=5 or higher\n";
        let r = reason(e, b"");
        assert!(
            r.contains("unknown field \"nodeRegistration.bogus\""),
            "{r}"
        );
        assert!(!r.contains("stack trace"), "{r}");
        let e = b"discovery.bootstrapToken.token: Invalid value: \"ABCDEF.0123456789abcdef\": the bootstrap token is invalid\n";
        let r = reason(e, b"");
        assert!(!r.contains("0123456789abcdef"), "{r}");
        assert!(r.contains("Invalid value: \"…\""), "{r}");
        assert_eq!(reason(b"", b""), "(no output)");
        let long = "x".repeat(1000);
        assert!(reason(long.as_bytes(), b"").chars().count() <= REASON_LINE_MAX + 1);
        assert_eq!(scrub("unterminated \"abc"), "unterminated \"…");
        // A key on the line after its marker, on either stream.
        let key = "9f2c6e1d7a4b3c5d8e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d";
        let e = format!("[upload-certs] Using certificate key:\n{key}\nerror: bad\n");
        for (stderr, stdout) in [(e.as_bytes(), &b""[..]), (&b""[..], e.as_bytes())] {
            let r = reason(stderr, stdout);
            assert!(!r.contains(key) && r.contains("error: bad"), "{r}");
        }
    }
}
