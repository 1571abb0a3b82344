//! Helpers shared by the mint_* integration tests: run the real binary and real openssl.
#![allow(dead_code)]

#[path = "../prereq/mod.rs"]
pub mod prereq;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_nodeagent"))
}

/// Run `nodeagent ARGS`, returning the output (not asserting success).
pub fn nodeagent(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .expect("run nodeagent")
}

/// Run `nodeagent ARGS` and insist it succeeds; returns stdout.
pub fn ok(args: &[&str]) -> String {
    let out = nodeagent(args);
    assert!(
        out.status.success(),
        "nodeagent {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// True when the openssl CLI is installed (`tests/setup-host` installs it); otherwise the
/// caller skips, saying why, unless `NODEAGENT_PRIVILEGED_TESTS=1` makes that a failure.
pub fn need_openssl() -> bool {
    prereq::command("openssl", &["version"])
}

/// Run openssl with ARGS; assert success; stdout.
pub fn openssl(args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256sum` pipeline.
pub fn openssl_discovery_hash(cert: &Path) -> String {
    let sh = format!(
        "openssl x509 -pubkey -noout -in '{}' | openssl pkey -pubin -outform der | sha256sum",
        cert.display()
    );
    let out = Command::new("sh").arg("-c").arg(sh).output().expect("sh");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    format!("sha256:{}", text.split_whitespace().next().unwrap())
}

pub fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}
