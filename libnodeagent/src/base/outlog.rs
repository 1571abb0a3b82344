//! The agent's log files, one sink for all of them (what reaches them is redacted before, with
//! `redact::redact_text`):
//! - `/var/log/nodeagent-output.log`: every command's and kubeadm's output, each line prefixed
//!   with its step, where operators look first;
//! - `/var/log/cloud-init-output.log`: the same output as cloud-init's output log holds it (the
//!   lines as the commands printed them) with cloud-init's stage banners and final message,
//!   where log collectors (Cluster API's, CAPV's) and runbooks look;
//! - `/var/log/cloud-init.log`: the agent's status changes, warnings and errors in the line
//!   format of cloud-init's own log (`cloud_init::files` writes them).
//!
//! Bounded: a file past [`MAX_BYTES`] is rotated to `.1` (the older `.1` is dropped), so the
//! logs never fill `/var/log`. Modes and groups as cloud-init makes its logs (0640, the log
//! group `adm` where the image has it). Every file is opened relative to `/var/log` opened
//! inside the root (`confine::Dir`): a link in its place is refused, never followed. A file
//! opened stays open for the next lines until a child process has run ([`OPEN`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub const PATH: &str = "var/log/nodeagent-output.log";
pub const CLOUD_INIT_OUTPUT: &str = "var/log/cloud-init-output.log";
pub const CLOUD_INIT_LOG: &str = "var/log/cloud-init.log";
/// Size at which a log is rotated (one rotated copy is kept: at most twice this on disk).
pub const MAX_BYTES: u64 = crate::base::limits::OUTPUT_LOG_MAX_BYTES;

/// One log file: where, and the mode and group it is made with.
struct Sink {
    rel: &'static str,
    mode: u32,
    /// The group the file is made with when the image has it (cloud-init 22.4 and 25.1 leave
    /// both of theirs `root:adm`); the writer's group otherwise.
    group: Option<&'static str>,
}

const AGENT_OUTPUT: Sink = Sink {
    rel: PATH,
    mode: 0o640,
    group: None,
};
const CI_OUTPUT: Sink = Sink {
    rel: CLOUD_INIT_OUTPUT,
    mode: 0o640,
    group: Some("adm"),
};
const CI_LOG: Sink = Sink {
    rel: CLOUD_INIT_LOG,
    mode: 0o640,
    group: Some("adm"),
};

pub fn path(root: &Path) -> PathBuf {
    root.join(PATH)
}

/// Append the output `lines` (already redacted) of `step`: to nodeagent's output log with the
/// step's name, to cloud-init's as they are. Failures are logged, never fatal: the journal has
/// the same lines.
pub fn append(root: &Path, step: &str, lines: &[&str]) {
    if lines.is_empty() {
        return;
    }
    let mut prefixed = String::new();
    let mut plain = String::new();
    for l in lines {
        prefixed.push_str(&format!("[{step}] {l}\n"));
        plain.push_str(l);
        plain.push('\n');
    }
    write(root, &AGENT_OUTPUT, &prefixed);
    write(root, &CI_OUTPUT, &plain);
}

/// A line of the agent's own in cloud-init's output log (its banners and final message).
pub fn cloud_init_output(root: &Path, line: &str) {
    write(root, &CI_OUTPUT, &format!("{}\n", one_line(line)));
}

/// A line of cloud-init's log: `2026-11-28 12:00:00,123 - nodeagent[LEVEL]: message`, in UTC,
/// one line whatever the message holds.
pub fn cloud_init_log(root: &Path, level: &str, message: &str) {
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day] [hour]:[minute]:[second],[subsecond digits:3]"
    );
    let now = time::OffsetDateTime::now_utc()
        .format(&fmt)
        .unwrap_or_default();
    let text = format!("{now} - nodeagent[{level}]: {}\n", one_line(message));
    write(root, &CI_LOG, &text);
}

/// Control characters escaped: a message cannot forge a log line.
fn one_line(s: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() && c != '\t' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn write(root: &Path, sink: &Sink, text: &str) {
    if let Err(e) = try_write(root, sink, text) {
        tracing::warn!("{} not written: {e}", root.join(sink.rel).display());
    }
}

/// The log files open in this process, of the last root written to: each with its size. A log
/// gets a line per status change (a dozen per run), and each line opened `/var/log` inside the
/// root and the file again. Forgotten, like confine's resolved paths, whenever a child process
/// has run (it may have moved or replaced a log): the file is then reached afresh by name.
static OPEN: Mutex<Vec<OpenLog>> = Mutex::new(Vec::new());

struct OpenLog {
    root: PathBuf,
    rel: &'static str,
    file: std::fs::File,
    size: u64,
    epoch: u64,
}

fn try_write(root: &Path, sink: &Sink, text: &str) -> std::io::Result<()> {
    let epoch = crate::base::confine::epoch();
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    // Only this root's files, and only while no child has run: at most one per sink.
    open.retain(|o| o.epoch == epoch && o.root == root);
    let len = text.len() as u64;
    // A log this line would take past MAX_BYTES is reached by name again, and rotated.
    open.retain(|o| o.rel != sink.rel || o.size + len <= MAX_BYTES);
    let i = match open.iter().position(|o| o.rel == sink.rel) {
        Some(i) => i,
        None => {
            let (file, size) = open_sink(root, sink, len)?;
            open.push(OpenLog {
                root: root.to_path_buf(),
                rel: sink.rel,
                file,
                size,
                epoch,
            });
            open.len() - 1
        }
    };
    let written = open[i].file.write_all(text.as_bytes());
    if written.is_ok() {
        open[i].size += len;
    } else {
        // Reached afresh next time (a full disk may have been cleared meanwhile).
        open.swap_remove(i);
    }
    written
}

/// `sink` opened inside the root to append `len` more bytes (rotated first when they would
/// take it past [`MAX_BYTES`]), and its size.
fn open_sink(root: &Path, sink: &Sink, len: u64) -> std::io::Result<(std::fs::File, u64)> {
    let (dir, name) = sink.rel.rsplit_once('/').unwrap_or(("", sink.rel));
    let (uid, gid) = crate::base::confine::own_ids();
    let dir = crate::base::confine::Dir::make(root, dir, 0o755, uid, gid)?.0;
    // Rotate before writing: a link is never followed nor rotated into place.
    if let Some(st) = dir.entry(name)?
        && st.st_size as u64 + len > MAX_BYTES
    {
        dir.rename(name, &format!("{name}.1"))?;
    }
    let (f, made) = dir.open_append(name, sink.mode, uid, gid)?;
    if made && let Some(g) = sink.group.and_then(|g| group_id(root, g)) {
        std::os::unix::fs::fchown(&f, None, Some(g))?;
    }
    let size = if made { 0 } else { f.metadata()?.len() };
    Ok((f, size))
}

/// Open a log file of the agent's (this one, kubeadm.log, events.jsonl) to append to:
/// created 0640, never through a symlink at the file itself, never blocking on a FIFO put
/// there, and only a regular file with one link (a hard link planted at the path would make
/// the agent write into another file).
pub fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let m = f.metadata()?;
    if !m.is_file() || std::os::unix::fs::MetadataExt::nlink(&m) != 1 {
        return Err(std::io::Error::other(format!(
            "{}: not a regular file with one link; not written",
            path.display()
        )));
    }
    Ok(f)
}

/// The id of group `name` in the root's `/etc/group`, if it has one.
fn group_id(root: &Path, name: &str) -> Option<u32> {
    let text = crate::base::confine::read(root, "etc/group").ok()?;
    String::from_utf8_lossy(&text).lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next() == Some(name)).then(|| f.nth(1)?.parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn appends_with_step_and_rotates_when_full() {
        let d = tempfile::tempdir().unwrap();
        append(d.path(), "runcmd[0]", &["hello", "token: <redacted>"]);
        let text = std::fs::read_to_string(path(d.path())).unwrap();
        assert_eq!(text, "[runcmd[0]] hello\n[runcmd[0]] token: <redacted>\n");
        let ci = std::fs::read_to_string(d.path().join(CLOUD_INIT_OUTPUT)).unwrap();
        assert_eq!(
            ci, "hello\ntoken: <redacted>\n",
            "cloud-init's output log: lines as printed"
        );
        let big = "x".repeat(MAX_BYTES as usize / 2);
        append(d.path(), "a", &[&big]);
        append(d.path(), "b", &[&big]);
        let rotated = std::fs::read_to_string(d.path().join(format!("{PATH}.1"))).unwrap();
        assert!(
            rotated.starts_with("[runcmd[0]] hello\n"),
            "rotated copy keeps the old lines"
        );
        let now = std::fs::read_to_string(path(d.path())).unwrap();
        assert!(
            now.starts_with("[b] x"),
            "the new file starts after rotation"
        );
        assert!(std::fs::metadata(path(d.path())).unwrap().len() <= MAX_BYTES);
        let ci_rotated = std::fs::read_to_string(d.path().join(format!("{CLOUD_INIT_OUTPUT}.1")));
        assert!(
            ci_rotated.unwrap().starts_with("hello\n"),
            "cloud-init's rotates the same way"
        );
        assert!(
            std::fs::metadata(d.path().join(CLOUD_INIT_OUTPUT))
                .unwrap()
                .len()
                <= MAX_BYTES
        );
    }

    #[test]
    fn cloud_init_log_lines_are_one_line_each_with_cloud_init_modes() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("etc")).unwrap();
        let gid = nix::unistd::getegid().as_raw();
        std::fs::write(
            d.path().join("etc/group"),
            format!("root:x:0:\nadm:x:{gid}:\n"),
        )
        .unwrap();
        cloud_init_log(d.path(), "ERROR", "failed\nFORGED - nodeagent[INFO]: fine");
        let text = std::fs::read_to_string(d.path().join(CLOUD_INIT_LOG)).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.contains(" - nodeagent[ERROR]: failed\\nFORGED"),
            "{text}"
        );
        let md = std::fs::metadata(d.path().join(CLOUD_INIT_LOG)).unwrap();
        assert_eq!(md.mode() & 0o7777, 0o640);
        assert_eq!(md.gid(), gid);
        // A link where a log belongs is refused, not followed.
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path().join("x"), d.path().join(CLOUD_INIT_OUTPUT))
            .unwrap();
        cloud_init_output(d.path(), "banner");
        assert!(!outside.path().join("x").exists());
    }

    /// A log stays open between lines only until a child process runs: a link a command put in
    /// its place is then met by name, and refused.
    #[test]
    fn a_log_is_reached_afresh_after_a_child_ran() {
        let d = tempfile::tempdir().unwrap();
        cloud_init_log(d.path(), "INFO", "one");
        cloud_init_log(d.path(), "INFO", "two");
        let log = d.path().join(CLOUD_INIT_LOG);
        assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 2);
        // What a runcmd could do: the log moved away, a link left in its place.
        std::fs::rename(&log, d.path().join("moved")).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path().join("x"), &log).unwrap();
        let child = crate::base::confine::Forget::now();
        drop(child);
        cloud_init_log(d.path(), "INFO", "three");
        assert!(!outside.path().join("x").exists(), "the link was followed");
        let moved = std::fs::read_to_string(d.path().join("moved")).unwrap();
        assert_eq!(
            moved.lines().count(),
            2,
            "no line went to the moved file: {moved}"
        );
    }
}
