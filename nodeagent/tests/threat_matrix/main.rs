//! The threat matrix (issue 41): every boundary against every attack class, one module per
//! area, each cell a `cell_*` test named in the area's `matrix-<area>.tsv`
//! (helpers/THREAT-MATRIX.md).

mod homes;
