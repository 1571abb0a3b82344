//! What a test needs from outside the repository, checked instead of assumed: the shared
//! corpus beside the checkout, privileged host tools, real kubeadm, the cloud-init root, and
//! the seed of a randomized test.
//!
//! A test whose prerequisite (or oracle) is absent prints `SKIP <test>: <reason>`, records
//! itself in the skip ledger (`target/tmp/nodeagent-skips/`, one file per skip) and returns:
//! libtest and nextest have no run-time skip, so `tests/unit-tests` reads the ledger and counts
//! these tests as skipped, not passed. CI (`tests/run-all`) sets `NODEAGENT_REQUIRE_CORPUS=1`,
//! `NODEAGENT_PRIVILEGED_TESTS=1`, `NODEAGENT_REQUIRE_K8S=1` and `NODEAGENT_REQUIRE_CLOUD_INIT=1`
//! (`NODEAGENT_REQUIRE_ALL=1` sets them all): then a missing prerequisite fails the test, naming
//! it, and `tests/setup-host`, `tests/apply-ci`, `tests/k8s/build` and `tests/cloud-init-root`
//! provide them beforehand.
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

/// Skip (print the reason, record it in the skip ledger) unless `switch` or
/// `NODEAGENT_REQUIRE_ALL` is set to 1, in which case fail. For a prerequisite the helpers
/// above do not cover (a kernel feature, a cgroup hierarchy).
pub fn unavailable(switch: &str, why: &str) {
    missing(switch, why)
}

fn missing(switch: &str, why: &str) {
    let on = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
    if on(switch) || on("NODEAGENT_REQUIRE_ALL") {
        panic!("{switch}=1 but {why}");
    }
    let test = test_name();
    eprintln!("SKIP {test}: {why}");
    record_skip(&test, why);
}

/// One file per skipped test in `NODEAGENT_SKIP_LEDGER` (set by `tests/unit-tests`), else in
/// `target/tmp/nodeagent-skips`: `<test binary> <test>: <reason>`.
fn record_skip(test: &str, why: &str) {
    let dir = std::env::var_os("NODEAGENT_SKIP_LEDGER").map_or_else(
        || std::path::PathBuf::from(concat!(env!("CARGO_TARGET_TMPDIR"), "/nodeagent-skips")),
        std::path::PathBuf::from,
    );
    let exe = std::env::current_exe().unwrap_or_default();
    let exe = exe
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    // cargo names test binaries `<file>-<hash>`.
    let binary = exe.rsplit_once('-').map_or(&*exe, |(b, _)| b);
    let file = format!("{binary}--{}", test.replace([':', '/'], "_"));
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join(file), format!("{binary} {test}: {why}\n"));
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
            "no real `{program}` (set NODEAGENT_K8S_BIN, or run tests/k8s/build; its time: BENCHMARKS.md)"
        ),
    );
    None
}

/// The Debian root with Debian's cloud-init that `tests/cloud-init-root [SUITE]` builds and
/// caches (`bookworm`: cloud-init 22.4, `trixie`: 25.1), when it is complete and this test
/// runs as root (the oracle runs chrooted into it). `None` (the caller skips, saying why)
/// otherwise, unless `NODEAGENT_REQUIRE_CLOUD_INIT=1` (`tests/run-all` builds both first).
pub fn cloud_init_root(suite: &str) -> Option<std::path::PathBuf> {
    let why = if !is_root() {
        format!(
            "cloud-init's own code runs chrooted into its root (tests/cloud-init-root {suite}): needs root"
        )
    } else {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/cloud-init-root");
        let out = std::process::Command::new(script)
            .args(["--print", suite])
            .output()
            .ok()
            .filter(|o| o.status.success());
        if let Some(o) = out {
            return Some(String::from_utf8_lossy(&o.stdout).trim().into());
        }
        format!("no cloud-init root (run tests/cloud-init-root {suite}; a few minutes, once)")
    };
    missing("NODEAGENT_REQUIRE_CLOUD_INIT", &why);
    None
}
