//! The threat matrix (issue 41): every boundary against every attack class, each cell a
//! test that judges outcomes (exit status, time, memory, files outside the root unchanged,
//! no secret anywhere) or a reason why it cannot apply. One module per area, each with its
//! own rows file `matrix-<area>.tsv` (boundary, attack, test or `n/a: reason`).

#[path = "../apply_common/mod.rs"]
mod apply_common;

mod commands;
mod crash;
mod redaction;
