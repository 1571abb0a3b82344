//! What a test needs from outside the repository, checked instead of assumed: the shared
//! corpus beside the checkout, privileged host tools, and the seed of a randomized test.
//!
//! A test whose prerequisite is absent prints `SKIP <test>: <reason>` and returns, so
//! `cargo test` passes from a clone anywhere. CI sets `NODEAGENT_REQUIRE_CORPUS=1` and
//! `NODEAGENT_PRIVILEGED_TESTS=1` (`tests/run-all`): then a missing prerequisite fails the
//! test loudly instead, and `tests/setup-host` / `tests/apply-ci` install them beforehand.
#![allow(dead_code)]

use std::path::Path;

/// The shared corpus of real data: `../shared/corpus` beside the repository.
pub const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/corpus");

/// True when the shared corpus is there; otherwise says why the caller skips.
pub fn corpus_present() -> bool {
    if Path::new(CORPUS).join("capi").is_dir() {
        return true;
    }
    missing(
        "NODEAGENT_REQUIRE_CORPUS",
        &format!("the shared corpus is absent (expected at {CORPUS}, beside the repository)"),
    );
    false
}

/// True when the privileged, host-changing tests may run: running as root and every
/// `tools` path present. Otherwise says why the caller skips (or panics under CI's switch).
pub fn privileged(tools: &[&str]) -> bool {
    let root = is_root();
    let absent: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| !Path::new(t).exists())
        .collect();
    if root && absent.is_empty() {
        return true;
    }
    let why = if root {
        format!(
            "missing {} (tests/apply-ci installs them)",
            absent.join(", ")
        )
    } else {
        "needs root (mounts and host tools)".to_string()
    };
    missing("NODEAGENT_PRIVILEGED_TESTS", &why);
    false
}

/// True when the `name` command runs (e.g. `openssl version`); otherwise says why the caller
/// skips (or panics under `NODEAGENT_PRIVILEGED_TESTS=1`; `tests/setup-host` installs it).
pub fn command(name: &str, probe: &[&str]) -> bool {
    let ok = std::process::Command::new(name)
        .args(probe)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        missing(
            "NODEAGENT_PRIVILEGED_TESTS",
            &format!("`{name}` not installed (tests/setup-host installs it)"),
        );
    }
    ok
}

/// The seed of a randomized test: `NODEAGENT_TEST_SEED` if set, else a fresh random one.
/// Printed either way, so a failure can be replayed.
pub fn seed() -> u64 {
    let seed = match std::env::var("NODEAGENT_TEST_SEED") {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("NODEAGENT_TEST_SEED={s:?} is not a u64")),
        Err(_) => getrandom::u64().expect("getrandom"),
    };
    eprintln!(
        "seed {seed} (replay: NODEAGENT_TEST_SEED={seed} cargo test -- {})",
        test_name()
    );
    seed
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn test_name() -> String {
    std::thread::current().name().unwrap_or("?").to_string()
}

/// Skip (print the reason) unless `switch` is set to 1, in which case fail.
fn missing(switch: &str, why: &str) {
    if std::env::var(switch).is_ok_and(|v| v == "1") {
        panic!("{switch}=1 but {why}");
    }
    eprintln!("SKIP {}: {why}", test_name());
}

/// Make `root` a root that commands can be chrooted into (`--root DIR --exec` runs them
/// chrooted, as cloud-init would on that node): `/bin/sh` and each of `programs` (`/bin/sleep`,
/// or a `(path in root, host file)` pair via [`install`]) copied from the host with the shared
/// libraries `ldd` lists. False (the caller skips, saying why) when not root: chroot(2) needs it.
pub fn exec_root(root: &Path, programs: &[&str]) -> bool {
    if !is_root() {
        missing(
            "NODEAGENT_PRIVILEGED_TESTS",
            "needs root (commands under --root --exec run chrooted)",
        );
        return false;
    }
    for p in std::iter::once("/bin/sh").chain(programs.iter().copied()) {
        install(root, p, Path::new(p));
    }
    true
}

/// Copy the host executable `host` to `at` (absolute, inside `root`), with its libraries.
pub fn install(root: &Path, at: &str, host: &Path) {
    copy_in(root, at, host);
    let ldd = std::process::Command::new("ldd")
        .arg(host)
        .output()
        .unwrap();
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)` or `/lib64/ld-linux….so.2 (0x…)`
        let lib = line
            .split("=>")
            .last()
            .and_then(|r| r.split_whitespace().next())
            .filter(|l| l.starts_with('/'));
        if let Some(lib) = lib {
            copy_in(root, lib, Path::new(lib));
        }
    }
}

fn copy_in(root: &Path, at: &str, host: &Path) {
    let dest = root.join(at.trim_start_matches('/'));
    if dest.exists() {
        return;
    }
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(host, &dest).unwrap_or_else(|e| panic!("copy {}: {e}", host.display()));
}

/// The directory holding the real Kubernetes binaries `tests/k8s/build` makes (kubeadm, …):
/// `NODEAGENT_K8S_BIN` if set, else what `tests/k8s/build --print` prints (a complete build
/// only). `None` (the caller skips, saying why) when `program` is not there, unless
/// `NODEAGENT_REQUIRE_K8S=1` (`tests/run-all` builds them first) makes that a failure.
pub fn k8s_bin(program: &str) -> Option<std::path::PathBuf> {
    let dir = match std::env::var_os("NODEAGENT_K8S_BIN") {
        Some(d) => Some(std::path::PathBuf::from(d)),
        None => {
            let build = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/k8s/build");
            std::process::Command::new(build)
                .arg("--print")
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| {
                    std::path::PathBuf::from(String::from_utf8_lossy(&o.stdout).trim().to_string())
                })
        }
    };
    if let Some(d) = dir.filter(|d| d.join(program).is_file()) {
        return Some(d);
    }
    missing(
        "NODEAGENT_REQUIRE_K8S",
        &format!(
            "no real `{program}` (set NODEAGENT_K8S_BIN, or run tests/k8s/build: ~30-40 min cold)"
        ),
    );
    None
}
