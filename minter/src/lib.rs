//! nodeagent mint: cluster PKI, CAPI Secrets, tokens, hashes, bootstrap bundles.
//!
//! Pure builders (values in, strings out) live in `pki`, `secrets`, `token`, `kubeconfig`,
//! `bootstrap`, `metadata` and `emit`; only `files` and `commands` (each subcommand's work,
//! given its flags) touch the disk.

// Tests slice the output they made themselves; the library's own code may not (Cargo.toml).
#![cfg_attr(test, allow(clippy::string_slice))]

pub mod bootstrap;
pub mod commands;
pub mod emit;
pub mod files;
pub mod fleet;
pub mod kubeconfig;
pub mod metadata;
pub mod pki;
pub mod secrets;
pub mod token;
pub mod validate;
