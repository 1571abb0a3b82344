//! Typed cloud-config model, one file per module group. Owner: core.
