//! The agent's own state (`/var/lib/nodeagent`: instance-id, per-instance journal) and status
//! (`/run/nodeagent/status.json`, `/var/log/nodeagent/events.jsonl`) under `--root R`: a link
//! or `..` out of R, a FIFO or device, a hard link to a file outside, an oversized file, the
//! agent killed mid-run. Nothing outside R changes, no run hangs or leaves a torn file, and
//! a run after a kill converges.

use crate::harness::{INSIDE_MD, INSIDE_UD, Node, Outcome};
use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

const STATE: &str = "var/lib/nodeagent";
const JOURNAL: &str = "var/lib/nodeagent/instances/i-inside/journal.jsonl";
const STATUS: &str = "run/nodeagent/status.json";
const EVENTS: &str = "var/log/nodeagent/events.jsonl";

/// A node with the inside seed through `dir:/gi`.
fn seeded() -> Node {
    let node = Node::new();
    node.transports(&["dir:/gi"]);
    node.put("gi/guestinfo.metadata", INSIDE_MD.as_bytes());
    node.put("gi/guestinfo.userdata", INSIDE_UD.as_bytes());
    node
}

/// Run and check nothing outside R changed.
fn run_confined(node: &Node) -> Outcome {
    let before = node.outside_now();
    let out = node.run(&[]);
    out.bounded();
    assert_eq!(
        before,
        node.outside_now(),
        "outside the root changed\n{}",
        out.stderr
    );
    out
}

/// A file outside R with known content, for links to point at.
fn victim(node: &Node, name: &str) -> std::path::PathBuf {
    let p = node.outside.join(name);
    std::fs::write(&p, "untouched\n").unwrap();
    p
}

#[test]
fn cell_state_dir_link() {
    for relative in [false, true] {
        let node = seeded();
        let target = node.outside.join("state");
        std::fs::create_dir_all(&target).unwrap();
        let target = if relative {
            Path::new("../../../outside/state").to_path_buf()
        } else {
            target
        };
        node.link(STATE, &target);
        run_confined(&node).succeeded();
        assert!(node.inside_applied());
    }
}

#[test]
fn cell_state_dir_special() {
    // The previous instance-id a FIFO (or /dev/zero): not waited on, not read forever; the
    // run takes it as no previous instance and replaces it.
    let node = seeded();
    node.fifo(&format!("{STATE}/instance-id"));
    run_confined(&node).succeeded();
    let node = seeded();
    if node.zero_device(&format!("{STATE}/instance-id")) {
        run_confined(&node).succeeded();
    }
    // The journal a FIFO: refused, not waited on.
    let node = seeded();
    node.fifo(JOURNAL);
    run_confined(&node).refused();
}

#[test]
fn cell_state_dir_hardlink() {
    // The journal hard-linked to a file outside: refused, the outside file not appended to.
    let node = seeded();
    let v = victim(&node, "journal");
    node.hard_link(JOURNAL, &v);
    run_confined(&node).refused();
    // The instance-id hard-linked outside: replaced by name, the outside file untouched.
    let node = seeded();
    let v = victim(&node, "instance-id");
    node.hard_link(&format!("{STATE}/instance-id"), &v);
    run_confined(&node).succeeded();
}

#[test]
fn cell_state_dir_bomb() {
    // A journal past MAX_JOURNAL_BYTES (sparse): refused, not read into memory.
    let node = seeded();
    node.put(JOURNAL, b"");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(node.root.join(JOURNAL))
        .unwrap();
    f.set_len(libnodeagent::base::limits::MAX_JOURNAL_BYTES as u64 + 1)
        .unwrap();
    run_confined(&node).refused();
    // A gigabyte instance-id: read no further than an id can be.
    let node = seeded();
    node.put(&format!("{STATE}/instance-id"), b"");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(node.root.join(STATE).join("instance-id"))
        .unwrap();
    f.set_len(1 << 30).unwrap();
    run_confined(&node).succeeded();
}

/// The agent killed at a spread of instants: every state and status file is whole (JSON, or
/// JSON lines but a torn last one the journal tolerates) and a run after the kills converges.
#[test]
fn cell_state_dir_kill() {
    let node = seeded();
    kill_spread(&node);
    for l in std::fs::read_to_string(node.root.join(JOURNAL))
        .unwrap_or_default()
        .lines()
    {
        // A torn line is only ever the last one, and the next open terminates it.
        if l.ends_with('}') {
            let v: Result<serde_json::Value, _> = serde_json::from_str(l);
            assert!(v.is_ok(), "journal line {l:?}");
        }
    }
    run_confined(&node).succeeded();
    assert!(node.inside_applied());
}

/// `nodeagent run` on `node`, SIGKILLed after 0, 8, 16 … 112 ms; status.json checked whole
/// after each.
fn kill_spread(node: &Node) {
    let before = node.outside_now();
    let args: Vec<&OsStr> = vec![
        "run".as_ref(),
        "--root".as_ref(),
        node.root.as_os_str(),
        "--facts".as_ref(),
        node.facts.as_os_str(),
    ];
    for delay_ms in (0..120).step_by(8) {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nodeagent"))
            .args(&args)
            .env("NODEAGENT_LOG", "error")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        if let Ok(text) = std::fs::read(node.root.join(STATUS)) {
            let v: Result<serde_json::Value, _> = serde_json::from_slice(&text);
            assert!(v.is_ok(), "torn status.json after a kill at {delay_ms} ms");
        }
    }
    assert_eq!(before, node.outside_now());
}

#[test]
fn cell_status_file_link() {
    // The files themselves links out of R (absolute and `..`).
    for relative in [false, true] {
        let node = seeded();
        let (s, e) = (victim(&node, "status"), victim(&node, "events"));
        let (s, e) = if relative {
            (
                Path::new("../../../outside/status").to_path_buf(),
                Path::new("../../../../outside/events").to_path_buf(),
            )
        } else {
            (s, e)
        };
        node.link(STATUS, s);
        node.link(EVENTS, e);
        run_confined(&node);
    }
    // Their directory a link out of R: written inside R.
    let node = seeded();
    std::fs::create_dir_all(node.outside.join("run")).unwrap();
    node.link("run/nodeagent", node.outside.join("run"));
    run_confined(&node).succeeded();
}

#[test]
fn cell_status_file_special() {
    let node = seeded();
    node.fifo(STATUS);
    node.fifo(EVENTS);
    run_confined(&node);
    let node = seeded();
    if node.zero_device(EVENTS) {
        run_confined(&node);
    }
}

#[test]
fn cell_status_file_hardlink() {
    let node = seeded();
    node.hard_link(STATUS, &victim(&node, "status"));
    node.hard_link(EVENTS, &victim(&node, "events"));
    run_confined(&node);
}

/// `nodeagent status --root R` on a status.json of two GiB (sparse): ends within the bounds.
#[test]
fn cell_status_file_bomb() {
    let node = seeded();
    node.put(STATUS, b"");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(node.root.join(STATUS))
        .unwrap();
    f.set_len(2 << 30).unwrap();
    let out = crate::harness::agent(
        &["status".as_ref(), "--root".as_ref(), node.root.as_os_str()],
        &[],
    );
    // Not read past the bound (it was read whole before: 2 GiB against a 1 GiB address
    // space); an unreadable status is no status, as for a node that never booted.
    out.bounded();
}

#[test]
fn cell_status_file_kill() {
    let node = seeded();
    kill_spread(&node);
    run_confined(&node).succeeded();
    let text = std::fs::read(node.root.join(STATUS)).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(v["phase"], "done", "{v}");
}
