//! One error type for the whole pipeline. Every error names *where* (a guestinfo
//! key, a file and line, a template line, a plan step) so an operator can fix the
//! input without reading code; messages never carry secret values (see `redact`).
//! Its [`ErrorKind`] says *what* went wrong in a stable word that the status report
//! and `--json` output carry, so scripts and tests match a kind, not message text.

use std::fmt;
use std::sync::Arc;

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

/// What went wrong, independent of the stage. The string forms ([`ErrorKind::as_str`]) are
/// a stable interface: the status report's `kind` and `--json` errors carry them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// Malformed input: syntax, a wrong type, an unknown key, a value out of its domain.
    Invalid,
    /// Well-formed input asking for something nodeagent does not do, or refuses on purpose.
    Unsupported,
    /// Input over a size, depth or count limit.
    TooLarge,
    /// The node's existing state contradicts the plan (a path of the wrong type, a key
    /// that does not match its certificate).
    Conflict,
    /// A named user, group, file, device or tool does not exist.
    NotFound,
    /// An operating-system call failed; the `io::Error` is the source.
    Io,
    /// A command ran and failed (non-zero exit, killed by a signal, output over its cap).
    /// A tool's refusal of what nodeagent gave it is this kind too, whatever the tool's reason
    /// (kubeadm's `config validate` or preflight, visudo's check of a sudo rule): the message
    /// carries the tool's words; `invalid` is only for what nodeagent's own checks reject.
    CommandFailed,
    /// A bounded wait ran out.
    Timeout,
    /// The platform channel (guestinfo, OVF environment, fw_cfg) is absent or refused (no
    /// transport has data; neither rpctool nor vmtoolsd is there, or both fail).
    Unavailable,
    /// A bug in nodeagent (a panic caught at the edge and reported), or a library failing on
    /// what nodeagent made itself (signing its own certificate, dumping its own YAML).
    Internal,
}

impl ErrorKind {
    /// The stable kebab-case name (the same as the serde form).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Invalid => "invalid",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::TooLarge => "too-large",
            ErrorKind::Conflict => "conflict",
            ErrorKind::NotFound => "not-found",
            ErrorKind::Io => "io",
            ErrorKind::CommandFailed => "command-failed",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The underlying cause, shared so `Error` stays `Clone`.
type Source = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Serialised (the template sandbox sends errors across a process boundary) as its fields,
/// the source as its text.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(into = "Wire", from = "Wire")]
pub struct Error {
    pub stage: Stage,
    /// Where: `guestinfo.userdata`, `userdata line 12 column 3`, `write_files[2].permissions`, `step files:/etc/x`.
    pub place: String,
    pub message: String,
    kind: ErrorKind,
    source: Option<Source>,
}

/// Equal when stage, kind, place and message are (the source is their cause, not identity).
impl PartialEq for Error {
    fn eq(&self, o: &Self) -> bool {
        (self.stage, self.kind, &self.place, &self.message)
            == (o.stage, o.kind, &o.place, &o.message)
    }
}
impl Eq for Error {}

impl Error {
    /// Malformed input (kind `invalid`): syntax, a wrong type, an unknown key, a value out of
    /// its domain. Not for a failed call, tool or wait: each has its constructor below.
    pub fn invalid(stage: Stage, place: impl Into<String>, message: impl Into<String>) -> Self {
        Error::of(ErrorKind::Invalid, stage, place, message)
    }
    /// An error of the given kind.
    pub fn of(
        kind: ErrorKind,
        stage: Stage,
        place: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Error {
            stage,
            place: place.into(),
            message: message.into(),
            kind,
            source: None,
        }
    }
    /// Well-formed input nodeagent does not do or refuses (kind `unsupported`).
    pub fn unsupported(stage: Stage, place: impl Into<String>, message: impl Into<String>) -> Self {
        Error::of(ErrorKind::Unsupported, stage, place, message)
    }
    /// Input over a limit (kind `too-large`).
    pub fn too_large(stage: Stage, place: impl Into<String>, message: impl Into<String>) -> Self {
        Error::of(ErrorKind::TooLarge, stage, place, message)
    }
    /// The node's existing state contradicts the plan (kind `conflict`).
    pub fn conflict(stage: Stage, place: impl Into<String>, message: impl Into<String>) -> Self {
        Error::of(ErrorKind::Conflict, stage, place, message)
    }
    /// A named user, group, file, device or tool does not exist (kind `not-found`).
    pub fn not_found(stage: Stage, place: impl Into<String>, message: impl Into<String>) -> Self {
        Error::of(ErrorKind::NotFound, stage, place, message)
    }
    /// A command ran and failed, or refused what it was given (kind `command-failed`).
    pub fn command_failed(
        stage: Stage,
        place: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Error::of(ErrorKind::CommandFailed, stage, place, message)
    }
    /// A bounded wait ran out (kind `timeout`).
    pub fn timeout(stage: Stage, place: impl Into<String>, message: impl Into<String>) -> Self {
        Error::of(ErrorKind::Timeout, stage, place, message)
    }
    /// The platform channel is absent or refused (kind `unavailable`).
    pub fn unavailable(stage: Stage, place: impl Into<String>, message: impl Into<String>) -> Self {
        Error::of(ErrorKind::Unavailable, stage, place, message)
    }
    /// A bug in nodeagent, or a library failing on what nodeagent made itself (kind `internal`).
    pub fn internal(stage: Stage, place: impl Into<String>, message: impl Into<String>) -> Self {
        Error::of(ErrorKind::Internal, stage, place, message)
    }
    /// An operating-system call failed: `what` says which (`cannot read`), the `io::Error`
    /// stays the source. The kind is `not-found` for `NotFound`, `timeout` for `TimedOut`,
    /// `io` otherwise.
    pub fn io(stage: Stage, place: impl Into<String>, what: &str, e: std::io::Error) -> Self {
        Error::of(io_kind(&e), stage, place, what).with_source(e)
    }
    /// An operation failed with `e`, an error that wraps an `io::Error` somewhere in its
    /// source chain (the atomic writer's `WriteError`, a process error): the kind as
    /// [`Error::io`] gives it for the first `io::Error` found, `io` when there is none.
    pub fn caused(
        stage: Stage,
        place: impl Into<String>,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        let mut kind = ErrorKind::Io;
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(c) = cur {
            if let Some(io) = c.downcast_ref::<std::io::Error>() {
                kind = io_kind(io);
                break;
            }
            cur = c.source();
        }
        Error::of(kind, stage, place, "").with_source(e)
    }
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    pub fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.kind = kind;
        self
    }
    /// Keep `e` as the cause: shown after the message, and returned by `source()`.
    pub fn with_source(mut self, e: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(e));
        self
    }
    /// The same error with its message replaced (redaction, added context); kind, stage and
    /// source stay.
    pub fn map_message(mut self, f: impl FnOnce(String) -> String) -> Self {
        self.message = f(std::mem::take(&mut self.message));
        self
    }
    /// The message and its source, without the place: what a caller that names the place
    /// itself shows.
    pub fn detail(&self) -> String {
        match &self.source {
            None => self.message.clone(),
            Some(s) if self.message.is_empty() => s.to_string(),
            Some(s) => format!("{}: {s}", self.message),
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

/// `Ok` when `valid`, else an invalid-input error at `place`: the one shape of the
/// `check_*` guards around a validity rule. The message is built only for the error.
pub fn ensure<M: Into<String>>(
    valid: bool,
    stage: Stage,
    place: impl Into<String>,
    message: impl FnOnce() -> M,
) -> Result<()> {
    if valid {
        Ok(())
    } else {
        Err(Error::invalid(stage, place, message()))
    }
}

fn io_kind(e: &std::io::Error) -> ErrorKind {
    match e.kind() {
        std::io::ErrorKind::NotFound => ErrorKind::NotFound,
        std::io::ErrorKind::TimedOut => ErrorKind::Timeout,
        _ => ErrorKind::Io,
    }
}

/// `place: message: source`. The source is written out too: every consumer (status report,
/// journal, log line) prints one line and none walks `source()` chains.
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.place.is_empty() {
            write!(f, "{}: ", self.place)?;
        }
        f.write_str(&self.message)?;
        if let Some(s) = &self.source {
            if self.message.is_empty() {
                write!(f, "{s}")?;
            } else {
                write!(f, ": {s}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Wire {
    stage: Stage,
    kind: ErrorKind,
    place: String,
    message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<String>,
}

/// A source that crossed a process boundary: only its text is left.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct SourceText(String);

impl From<Error> for Wire {
    fn from(e: Error) -> Wire {
        Wire {
            stage: e.stage,
            kind: e.kind,
            source: e.source.map(|s| s.to_string()),
            place: e.place,
            message: e.message,
        }
    }
}

impl From<Wire> for Error {
    fn from(w: Wire) -> Error {
        Error {
            stage: w.stage,
            kind: w.kind,
            place: w.place,
            message: w.message,
            source: w.source.map(|s| Arc::new(SourceText(s)) as Source),
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_are_the_serde_names() {
        use clap::ValueEnum;
        for &k in ErrorKind::value_variants() {
            let name = k.to_possible_value().unwrap();
            assert_eq!(name.get_name(), k.as_str());
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
            assert_eq!(k.to_string(), k.as_str());
        }
    }

    #[test]
    fn io_errors_keep_their_source_and_kind() {
        let e = Error::io(
            Stage::State,
            "/var/lib/x",
            "cannot read",
            std::io::Error::from(std::io::ErrorKind::NotFound),
        );
        assert_eq!(e.kind(), ErrorKind::NotFound);
        let src = std::error::Error::source(&e).unwrap();
        let io = src.downcast_ref::<std::io::Error>().unwrap();
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(e.to_string(), format!("/var/lib/x: cannot read: {io}"));
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert_eq!(
            Error::io(Stage::Apply, "p", "w", denied).kind(),
            ErrorKind::Io
        );
    }

    #[test]
    fn serde_round_trip_keeps_kind_and_source_text() {
        let e = Error::of(
            ErrorKind::TooLarge,
            Stage::Template,
            "userdata line 3",
            "big",
        )
        .with_source(std::io::Error::other("cause"));
        let back: Error = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert_eq!(back, e);
        assert_eq!(back.kind(), ErrorKind::TooLarge);
        assert_eq!(back.to_string(), "userdata line 3: big: cause");
    }
}
