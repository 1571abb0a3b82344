//! One error type for the whole pipeline. Every error names *where* (a guestinfo
//! key, a file and line, a template line, a plan step) so an operator can fix the
//! input without reading code; messages never carry secret values (see `redact`).

use std::fmt;

/// Which stage produced the error; decides nothing but helps reports group failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    Transport,
    Decode,
    Metadata,
    Template,
    CloudConfig,
    Plan,
    Apply,
    Kubeadm,
    Report,
    State,
    Mint,
    Usage,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Error {
    pub stage: Stage,
    /// Where: `guestinfo.userdata`, `userdata line 12 column 3`, `write_files[2].permissions`, `step files:/etc/x`.
    pub place: String,
    pub message: String,
}

impl Error {
    pub fn new(stage: Stage, place: impl Into<String>, message: impl Into<String>) -> Self {
        Error {
            stage,
            place: place.into(),
            message: message.into(),
        }
    }
    /// Prefix the place with an outer location, e.g. the guestinfo key a YAML error came from.
    pub fn within(mut self, outer: &str) -> Self {
        self.place = if self.place.is_empty() {
            outer.to_string()
        } else {
            format!("{outer}: {}", self.place)
        };
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.place.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.place, self.message)
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Process exit codes (docs/formats.md N.6). Stable: scripts and units depend on them.
pub mod exit {
    pub const OK: i32 = 0;
    pub const FAILED: i32 = 1;
    pub const DEGRADED: i32 = 2;
    pub const STILL_RUNNING: i32 = 3;
    /// A command-line usage error (sysexits' EX_USAGE), so a typo never reads as `degraded`.
    pub const USAGE: i32 = 64;
}
