//! The output of a list's program (shell.rs): one file the program's stdout and stderr go
//! to (append mode), read as it grows through one [`Redactor`], split into the items' output
//! at the markers the program writes where an item ends (script.rs). Each item's lines are
//! logged under its step (the last COMMAND_OUTPUT_LOG_BYTES of them), its last lines kept for
//! its error message.

use super::commands::Files;
use crate::base::limits::{COMMAND_OUTPUT_LOG_BYTES, COMMAND_TAIL_LINES};
use crate::base::redact::Redactor;
use crate::plan::Step;
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

/// Start of the marker a program writes into its output where an item's output ends
/// (script.rs): `\x1enodeagent-item:<h>\x1e`, `<h>` the 16 hex digits of the item's files.
const MARK: &[u8] = b"\x1enodeagent-item:";
const MARK_LEN: usize = MARK.len() + 16 + 1;

/// A list program's output file, read as it grows through one [`Redactor`]: each item's
/// lines logged under its step (the last COMMAND_OUTPUT_LOG_BYTES of them), its last lines
/// kept for its error message.
pub(super) struct OutputReader {
    path: PathBuf,
    root: PathBuf,
    list: &'static str,
    offset: u64,
    carry: Vec<u8>,
    redactor: Redactor,
    /// Lines since the last marker, with their size and how many were dropped.
    lines: VecDeque<String>,
    bytes: usize,
    dropped: usize,
    /// Record file stem (`<h>`) of each step, and the step id to log a unit's lines under.
    step_of: HashMap<String, String>,
    tails: HashMap<String, Vec<String>>,
}

impl OutputReader {
    pub(super) fn new(
        path: &Path,
        root: PathBuf,
        list: &'static str,
        steps: &[&Step],
        files: &[Files],
    ) -> OutputReader {
        let step_of = steps
            .iter()
            .zip(files)
            .filter_map(|(s, f)| Some((stem(f)?, s.id.clone())))
            .collect();
        OutputReader {
            path: path.to_path_buf(),
            root,
            list,
            offset: 0,
            carry: Vec::new(),
            redactor: Redactor::new(),
            lines: VecDeque::new(),
            bytes: 0,
            dropped: 0,
            step_of,
            tails: HashMap::new(),
        }
    }

    /// A new program writes its output afresh (the supervisor truncates the file).
    pub(super) fn restart(&mut self) {
        self.offset = 0;
        self.carry.clear();
    }

    /// What the program wrote since the last read, up to the file's current end.
    pub(super) fn read(&mut self) {
        use std::io::{Read, Seek, SeekFrom};
        use std::os::unix::fs::OpenOptionsExt;
        let Ok(mut f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&self.path)
        else {
            return;
        };
        if !f.metadata().is_ok_and(|m| m.is_file()) {
            return;
        }
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match f.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    self.offset += n as u64;
                    self.scan(&buf[..n]);
                }
            }
        }
    }

    /// Feed `data` to the redactor, acting on the markers in it; a marker cut by the end of
    /// `data` waits in `carry`.
    pub(super) fn scan(&mut self, chunk: &[u8]) {
        let joined;
        let mut data = if self.carry.is_empty() {
            chunk
        } else {
            let mut c = std::mem::take(&mut self.carry);
            c.extend_from_slice(chunk);
            joined = c;
            &joined[..]
        };
        while let Some(i) = data.iter().position(|&b| b == 0x1e) {
            let (before, at) = data.split_at(i);
            self.feed(before);
            if at.len() < MARK_LEN && MARK.starts_with(&at[..at.len().min(MARK.len())]) {
                self.carry = at.to_vec();
                return;
            }
            let hash = at
                .get(MARK.len()..MARK_LEN - 1)
                .filter(|_| at.starts_with(MARK) && at.get(MARK_LEN - 1) == Some(&0x1e))
                .and_then(|h| std::str::from_utf8(h).ok())
                .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
            match hash {
                Some(h) => {
                    let h = h.to_string();
                    self.unit_end(&h);
                    data = &at[MARK_LEN..];
                }
                None => {
                    self.feed(&at[..1]);
                    data = &at[1..];
                }
            }
        }
        self.feed(data);
    }

    fn feed(&mut self, bytes: &[u8]) {
        let (lines, size, dropped) = (&mut self.lines, &mut self.bytes, &mut self.dropped);
        self.redactor
            .push(0, bytes, &mut |l| keep(lines, size, dropped, l));
    }

    /// The output of the unit recorded under `h` ends here: log it under its step.
    fn unit_end(&mut self, h: &str) {
        let (lines, size, dropped) = (&mut self.lines, &mut self.bytes, &mut self.dropped);
        if self.redactor.pending(0) {
            self.redactor
                .end_line(0, &mut |l| keep(lines, size, dropped, l));
        }
        let step = self
            .step_of
            .get(h)
            .cloned()
            .unwrap_or_else(|| self.list.to_string());
        let tail = self.flush(&step);
        self.tails.insert(h.to_string(), tail);
    }

    /// The end of the output: what follows the last marker is logged under the list.
    pub(super) fn finish(&mut self) {
        let (lines, size, dropped) = (&mut self.lines, &mut self.bytes, &mut self.dropped);
        self.redactor.finish(&mut |l| keep(lines, size, dropped, l));
        let list = self.list;
        self.flush(list);
    }

    /// Log the lines gathered under `step`; returns their last COMMAND_TAIL_LINES.
    fn flush(&mut self, step: &str) -> Vec<String> {
        let mut lines: Vec<String> = self.lines.drain(..).collect();
        if self.dropped > 0 {
            lines.insert(
                0,
                format!(
                    "[output cut: {} earlier lines not logged, the last {} bytes are]",
                    self.dropped, self.bytes
                ),
            );
        }
        self.bytes = 0;
        self.dropped = 0;
        if lines.is_empty() {
            return Vec::new();
        }
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        crate::base::outlog::append(&self.root, step, &refs);
        for line in &lines {
            tracing::info!(step = %step, "output: {line}");
        }
        let from = lines.len().saturating_sub(COMMAND_TAIL_LINES);
        lines.split_off(from)
    }

    pub(super) fn tail_of(&self, f: &Files) -> Vec<String> {
        stem(f)
            .and_then(|h| self.tails.get(&h).cloned())
            .unwrap_or_default()
    }
}

/// Keep `line`, dropping the oldest lines past COMMAND_OUTPUT_LOG_BYTES.
fn keep(lines: &mut VecDeque<String>, size: &mut usize, dropped: &mut usize, line: String) {
    *size += line.len() + 1;
    lines.push_back(line);
    while *size > COMMAND_OUTPUT_LOG_BYTES as usize
        && let Some(old) = lines.pop_front()
    {
        *size -= old.len() + 1;
        *dropped += 1;
    }
}

/// The `<h>` of a step's files.
pub(super) fn stem(f: &Files) -> Option<String> {
    Some(f.rc.file_stem()?.to_str()?.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The output file read in pieces of every size: markers cut anywhere, a secret on the
    /// line after its marker, the lines of each unit under its own step.
    #[test]
    fn output_is_split_at_markers_and_redacted_across_reads() {
        let key = "9f2c6e1d7a4b3c5d8e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d";
        let h0 = "00000000000000aa";
        let h1 = "00000000000000bb";
        let text = format!(
            "one\nUsing certificate key:\x1enodeagent-item:{h0}\x1e{key}\ntwo\x1enodeagent-item:{h1}\x1etail\n"
        );
        for size in [1, 2, 5, 17, text.len()] {
            let d = tempfile::tempdir().unwrap();
            let mut r =
                OutputReader::new(&d.path().join("out"), d.path().into(), "runcmd", &[], &[]);
            for chunk in text.as_bytes().chunks(size) {
                r.scan(chunk);
            }
            r.finish();
            let t0 = r.tails.get(h0).cloned().unwrap_or_default();
            let t1 = r.tails.get(h1).cloned().unwrap_or_default();
            assert_eq!(t0, ["one", "Using certificate key:"], "chunks of {size}");
            assert_eq!(t1, ["<redacted>", "two"], "chunks of {size}");
            let log = std::fs::read_to_string(crate::base::outlog::path(d.path())).unwrap();
            assert!(!log.contains(key) && log.contains("[runcmd] tail"), "{log}");
        }
    }
}
