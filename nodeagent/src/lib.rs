//! nodeagent: a Kubernetes node bootstrap agent that replaces cloud-init on Cluster API
//! nodes, and `mint`, which makes the cluster PKI and per-node bootstrap data.
//!
//! Pipeline (docs/formats.md N.2), one module per stage:
//! transport -> decode -> metadata/facts/instance -> template -> cloudconfig -> plan -> apply -> report.

// Tests slice the output they made themselves; the library's own code may not (Cargo.toml).
#![cfg_attr(test, allow(clippy::string_slice))]

/// `nodeagent --version`: version, commit, build date and target (build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("NODEAGENT_COMMIT"),
    ", built ",
    env!("NODEAGENT_BUILD_DATE"),
    ", ",
    env!("NODEAGENT_TARGET"),
    ")"
);

pub mod analyze;
pub mod apply;
pub mod cli;
pub mod cloud_init;
pub mod cloudconfig;
pub mod config;
pub mod confine;
pub mod decode;
pub mod error;
pub mod facts;
pub mod fsio;
pub mod goyaml;
pub mod handoff;
pub mod instance;
pub mod kubeadm;
pub mod kubeadm_api;
pub mod limits;
pub mod logbundle;
pub mod metadata;
pub mod mint;
pub mod netwait;
pub mod network;
pub mod outlog;
pub mod output;
pub mod pipeline;
pub mod pki;
pub mod plan;
pub mod planner;
pub mod priority;
pub mod probe;
pub mod process;
pub mod pyjson;
pub mod query;
pub mod redact;
pub mod report;
pub mod sandbox;
pub mod single;
pub mod state;
pub mod supervise;
pub mod template;
pub mod transport;
pub mod writeguard;
pub mod yaml;

/// A unit test whose prerequisite is absent: fails under `switch=1` or
/// `NODEAGENT_REQUIRE_ALL=1` (tests/run-all), otherwise prints `SKIP` and records the test in
/// `NODEAGENT_SKIP_LEDGER` (set by tests/unit-tests), so the skip is counted, not taken as a
/// pass. The integration tests' twin is `tests/prereq/mod.rs`.
#[cfg(test)]
pub(crate) fn test_skip(switch: &str, why: &str) {
    let on = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
    if on(switch) || on("NODEAGENT_REQUIRE_ALL") {
        panic!("{switch}=1 but {why}");
    }
    let test = std::thread::current().name().unwrap_or("?").to_string();
    eprintln!("SKIP {test}: {why}");
    if let Some(dir) = std::env::var_os("NODEAGENT_SKIP_LEDGER") {
        let dir = std::path::PathBuf::from(dir);
        let _ = std::fs::create_dir_all(&dir);
        let file = format!("nodeagent--{}", test.replace([':', '/'], "_"));
        let _ = std::fs::write(dir.join(file), format!("nodeagent {test}: {why}\n"));
    }
}
