//! The threat matrix (issue 41): every boundary the agent reads or writes against every
//! attack class, one `cell_*` test per cell or a reason why it cannot apply, listed in
//! `matrix-<area>.tsv` beside this file (`check.rs` checks the lists). Tests judge outcomes:
//! exit status, time and memory of a bounded child, files outside the root unchanged, no
//! secret anywhere.

#[path = "../apply_common/mod.rs"]
mod apply_common;
#[allow(clippy::duplicate_mod)]
#[path = "../hostile_common/mod.rs"]
mod hostile_common;

mod check;
mod commands;
mod crash;
mod harness;
mod homes;
mod redaction;
mod seeds;
mod state;
mod yaml;
