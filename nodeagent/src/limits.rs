//! Every resource bound the agent enforces on untrusted input, in one place.
//! Documented in README.md ("Configuration reference" / "Limits"); change both together.

/// Largest decoded value of one guestinfo key (after base64, before gunzip).
pub const MAX_DECODED_BYTES: usize = 16 * 1024 * 1024;
/// Largest output of a gunzip of one value (bomb guard).
pub const MAX_GUNZIP_BYTES: usize = 64 * 1024 * 1024;
/// Deepest YAML/JSON nesting accepted.
pub const MAX_YAML_DEPTH: usize = 64;
/// Most alias expansions (`*ref`) in one YAML document ("billion laughs" guard).
pub const MAX_YAML_ALIAS_EXPANSIONS: usize = 10_000;
/// Most YAML nodes in one document after alias expansion.
pub const MAX_YAML_NODES: usize = 1_000_000;
/// Template fuel (minijinja instructions) for one render.
pub const TEMPLATE_FUEL: u64 = 50_000_000;
/// Largest rendered template output.
pub const MAX_RENDERED_BYTES: usize = 64 * 1024 * 1024;
/// Most `write_files` entries in one cloud-config.
pub const MAX_WRITE_FILES: usize = 10_000;
/// Timeout of one guestinfo RPC helper call (vmware-rpctool / vmtoolsd), in milliseconds.
pub const RPC_TIMEOUT_MS: u64 = 10_000;
/// Largest status JSON published through `guestinfo.nodeagent.status` (design.md section 4).
pub const MAX_STATUS_BYTES: usize = 4096;
