//! The threat model as a matrix (issue 41): every boundary the agent reads or writes against
//! every attack class, one `cell_*` test per cell or a reason why it cannot apply, listed in
//! `matrix-*.tsv` beside this file (`check.rs` checks the lists). Tests judge outcomes: exit
//! status, time and memory of a bounded child, files outside the root unchanged.

#[allow(clippy::duplicate_mod)]
#[path = "../hostile_common/mod.rs"]
mod hostile_common;

mod check;
mod harness;
mod seeds;
mod state;
mod yaml;
