//! How every command presents results and errors to an operator or a script: the one
//! Error → JSON mapping, the exit code of an error, and whether to colour.

use crate::base::error::{Error, Stage, exit};
use serde_json::{Value, json};

/// The error's kind as scripts match on it (`invalid`, `not-found`, `io`, `timeout`, …;
/// error::ErrorKind), or `usage` for a command-line usage error (exit 64).
pub fn error_kind(err: &Error) -> &'static str {
    if err.stage == Stage::Usage {
        "usage"
    } else {
        err.kind().as_str()
    }
}

/// `{"error": {"kind", "place", "message"}}`, redacted (a template or YAML error may quote
/// the userdata line it is about). The only place an error becomes JSON.
pub fn error_json(err: &Error) -> Value {
    // The message with its cause (an io::Error source), without the place in front.
    let text = err.to_string();
    let message = text
        .strip_prefix(&format!("{}: ", err.place))
        .unwrap_or(&text);
    json!({"error": {
        "kind": error_kind(err),
        "place": crate::base::redact::redact_text(&err.place),
        "message": crate::base::redact::redact_text(message),
    }})
}

/// The exit code of a command that ended in `err`: 64 for a usage error, else 1.
pub fn error_exit(err: &Error) -> i32 {
    if err.stage == Stage::Usage {
        exit::USAGE
    } else {
        exit::FAILED
    }
}

/// A usage error naming the flag or argument at fault.
pub fn usage(place: &str, message: impl Into<String>) -> Error {
    Error::invalid(Stage::Usage, place, message)
}

/// Colour only on a terminal and never when `NO_COLOR` is set to anything non-empty
/// (no-color.org).
pub fn colour(is_tty: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_tty && no_color.is_none_or(|v| v.is_empty())
}

/// [`colour`] for stderr of this process.
pub fn colour_stderr() -> bool {
    colour(
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

/// A file mode as operators write it: `0644`.
pub fn octal_mode(mode: u32) -> String {
    format!("{mode:04o}")
}

/// What `status --wait` prints while it waits: a line per phase change, and every
/// [`TICK_MS`] in a wait (the control-plane endpoint, kubeadm) its elapsed time and deadline.
#[derive(Debug, Default)]
pub struct WaitProgress {
    last: Option<(String, Option<String>, Option<String>)>,
    last_tick_ms: u64,
    said_not_started: bool,
}

pub const TICK_MS: u64 = 10_000;

impl WaitProgress {
    /// The lines for this poll of the status (pure: `now_ms` is given).
    pub fn lines(&mut self, status: Option<&crate::report::Status>, now_ms: u64) -> Vec<String> {
        use crate::report::Phase;
        let mut out = Vec::new();
        let Some(s) = status else {
            if !self.said_not_started {
                out.push("waiting: the bootstrap has not started yet".into());
                self.said_not_started = true;
            }
            return out;
        };
        let key = (
            s.phase.as_str().to_string(),
            s.step.clone(),
            s.detail.clone(),
        );
        if self.last.as_ref() != Some(&key) {
            let mut line = format!("phase {}", s.phase.as_str());
            if let Some(step) = &s.step {
                line.push_str(&format!(" ({step})"));
            }
            if let Some(d) = &s.detail {
                line.push_str(&format!(": {d}"));
            }
            out.push(line);
            self.last = Some(key);
            self.last_tick_ms = now_ms;
        } else if matches!(s.phase, Phase::Waiting | Phase::Kubeadm)
            && now_ms.saturating_sub(self.last_tick_ms) >= TICK_MS
        {
            self.last_tick_ms = now_ms;
            let elapsed = s.since_ms.map(|t| now_ms.saturating_sub(t) / 1000);
            let mut line = format!("  {}", s.phase.as_str());
            if let Some(e) = elapsed {
                line.push_str(&format!(": {e} s elapsed"));
            }
            if let Some(d) = s.deadline_ms {
                let left = d.saturating_sub(now_ms) / 1000;
                line.push_str(&format!(", gives up in {left} s"));
            }
            out.push(line);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_json_has_kind_place_message_redacted() {
        let e = Error::invalid(
            Stage::Kubeadm,
            "step runcmd[0]:kubeadm",
            "kubeadm join --token abcdef.0123456789abcdef failed",
        );
        let j = error_json(&e);
        assert_eq!(j["error"]["kind"], e.kind().as_str());
        assert_eq!(j["error"]["place"], "step runcmd[0]:kubeadm");
        let m = j["error"]["message"].as_str().unwrap();
        assert!(!m.contains("0123456789abcdef"), "{m}");
        assert_eq!(error_exit(&e), exit::FAILED);
        assert_eq!(error_exit(&usage("--timeout", "needs --wait")), exit::USAGE);
    }

    #[test]
    fn colour_needs_a_tty_and_no_no_color() {
        use std::ffi::OsStr;
        assert!(colour(true, None));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None));
    }

    #[test]
    fn wait_progress_prints_changes_and_ticks() {
        use crate::report::{Phase, Status};
        let mut p = WaitProgress::default();
        assert_eq!(p.lines(None, 0).len(), 1);
        assert!(p.lines(None, 1).is_empty());
        let mut s: Status = serde_json::from_value(serde_json::json!({
            "v": 1, "instance_id": "i", "phase": "kubeadm", "step": "runcmd[0]:kubeadm",
            "error": null, "started": "", "updated": "", "boot": "",
            "detail": "kubeadm join, attempt 1 of 5", "since_ms": 1_000, "deadline_ms": 601_000
        }))
        .unwrap();
        assert_eq!(
            p.lines(Some(&s), 2_000),
            ["phase kubeadm (runcmd[0]:kubeadm): kubeadm join, attempt 1 of 5"]
        );
        assert!(p.lines(Some(&s), 5_000).is_empty());
        assert_eq!(
            p.lines(Some(&s), 41_000),
            ["  kubeadm: 40 s elapsed, gives up in 560 s"]
        );
        s.phase = Phase::Done;
        s.step = None;
        s.detail = None;
        assert_eq!(p.lines(Some(&s), 42_000), ["phase done"]);
    }
}
