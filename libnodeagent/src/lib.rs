//! libnodeagent: the node side of nodeagent, the Kubernetes node bootstrap agent that replaces
//! cloud-init on Cluster API nodes. The `nodeagent` binary is a thin CLI over it; the minter
//! (`minter`, the cluster PKI and per-node bootstrap data) is a crate of its own that this one
//! does not depend on.
//!
//! The folders follow the data (docs/formats.md N.2):
//! [`source`] (transports, decoding, metadata, host facts) -> [`render`] (instance data,
//! templates, typed cloud-config) -> [`plan`] (the pure plan and its checks) -> [`apply`]
//! -> [`kubeadm`] -> [`report`] (status, cloud-init's files, `query`, `analyze`, logs);
//! [`pipeline`] ties the read side together. Beside them: [`base`] (errors, limits,
//! redaction, confinement, the one writer, processes, the journal), [`formats`] (the one YAML
//! reader, the one YAML emitter, Python's JSON) and [`pki`] (certificate checks).

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

pub mod apply;
pub mod base;
pub mod formats;
pub mod kubeadm;
pub mod pipeline;
pub mod pki;
pub mod plan;
pub mod render;
pub mod report;
pub mod source;

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
        let file = format!("libnodeagent--{}", test.replace([':', '/'], "_"));
        let _ = std::fs::write(dir.join(file), format!("libnodeagent {test}: {why}\n"));
    }
}
