use super::*;
use std::cell::RefCell;
use std::collections::BTreeMap;

/// A platform channel in memory: every value set, per key. With `.1` every set fails
/// once recorded (a dead channel: a hung `info-set` after its timeout).
#[derive(Default)]
struct Mem(RefCell<BTreeMap<String, Vec<Vec<u8>>>>, bool);
impl Transport for Mem {
    fn name(&self) -> &'static str {
        "mem"
    }
    fn get(&self, _k: &str) -> crate::base::error::Result<Option<Vec<u8>>> {
        Ok(None)
    }
    fn set(&self, k: &str, v: &[u8]) -> crate::base::error::Result<()> {
        self.0
            .borrow_mut()
            .entry(k.to_string())
            .or_default()
            .push(v.to_vec());
        if self.1 {
            return Err(crate::base::error::Error::of(
                crate::base::error::ErrorKind::Timeout,
                crate::base::error::Stage::Report,
                k,
                "timed out",
            ));
        }
        Ok(())
    }
}

/// The phase of every status sent on the platform channel, in order.
fn sent_phases(t: &Mem) -> Vec<String> {
    t.0.borrow()["nodeagent.status"]
        .iter()
        .map(|j| {
            serde_json::from_slice::<serde_json::Value>(j).unwrap()["phase"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn a_dead_platform_channel_is_tried_once_for_progress_and_once_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let t = Mem(RefCell::default(), true);
    let mut r = Reporter::new(Some(&t), dir.path(), "i-1");
    r.phase(Phase::Reading, None);
    for i in 0..50 {
        r.phase(Phase::Applying, Some(&format!("step{i}")));
    }
    r.done();
    assert_eq!(t.0.borrow().values().map(Vec::len).sum::<usize>(), 2);
    // The local status file still follows every phase.
    let st = read_status(dir.path()).unwrap();
    assert_eq!(st.phase, Phase::Done);
}

#[test]
fn a_panic_publishes_failed_to_status_json_and_the_platform() {
    let dir = tempfile::tempdir().unwrap();
    let t = Mem::default();
    install_panic_hook();
    let mut r = Reporter::new(Some(&t), dir.path(), "i-1");
    r.phase(Phase::Applying, Some("write_files[0]:/etc/x"));
    let guard = arm_panic_channel(&t);
    let secret = "sha256:é0123 --token abcdef.0123456789abcdef";
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = &secret[..8]; // byte 8 is inside 'é': the std message quotes the input
    }));
    drop(guard);
    assert!(caught.is_err());
    let st = read_status(dir.path()).unwrap();
    assert_eq!(st.phase, Phase::Failed);
    let error = st.error.unwrap();
    assert!(error.starts_with("internal error at "), "{error}");
    assert!(
        !error.contains("0123456789abcdef") && !error.contains('é'),
        "{error}"
    );
    let sent = t.0.borrow()["nodeagent.status"].clone();
    let last: serde_json::Value = serde_json::from_slice(sent.last().unwrap()).unwrap();
    assert_eq!(last["phase"], "failed");
    assert_eq!(last["step"], "write_files[0]:/etc/x");
}

#[test]
fn every_phase_change_is_published_and_written() {
    let dir = tempfile::tempdir().unwrap();
    let t = Mem::default();
    let mut r = Reporter::new(Some(&t), dir.path(), "i-1");
    r.phase(Phase::Reading, None);
    r.phase(Phase::Applying, Some("write_files[0]:/etc/x"));
    r.phase(Phase::Waiting, Some("kubeadm"));
    r.detail("waiting for 10.0.0.1:6443");
    r.failed(
        "kubeadm",
        ErrorKind::CommandFailed,
        "join failed --token abcdef.0123456789abcdef",
        &["out --certificate-key 00ff".into()],
    );
    assert_eq!(
        sent_phases(&t),
        ["reading", "applying", "waiting", "waiting", "failed"]
    );
    let sent = t.0.borrow()["nodeagent.status"].clone();
    let last: serde_json::Value = serde_json::from_slice(sent.last().unwrap()).unwrap();
    let keys: Vec<&str> = last
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    assert_eq!(
        keys,
        [
            "v",
            "instance_id",
            "phase",
            "step",
            "error",
            "kind",
            "started",
            "updated",
            "boot"
        ]
    );
    assert_eq!(last["kind"], "command-failed");
    let err = last["error"].as_str().unwrap();
    assert!(
        err.starts_with("kubeadm: join failed") && err.contains("last output"),
        "{err}"
    );
    assert!(
        !err.contains("0123456789abcdef") && !err.contains("00ff"),
        "{err}"
    );
    let st = read_status(dir.path()).unwrap();
    assert_eq!(st.phase, Phase::Failed);
    assert_eq!(st.output_tail, vec!["out --certificate-key <redacted>"]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(status_path(dir.path()))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o644);
    // A second failure report (the run loop after kubeadm's executor) changes nothing:
    // one terminal report, with kubeadm's reason and tail.
    r.failed("runcmd[0]", ErrorKind::Invalid, "step failed", &[]);
    r.phase(Phase::Failed, None);
    let st = read_status(dir.path()).unwrap();
    assert_eq!(st.output_tail.len(), 1);
    assert!(st.error.unwrap().contains("join failed"));
    assert_eq!(t.0.borrow()["nodeagent.status"].len(), 5);
    let events = std::fs::read_to_string(dir.path().join(EVENTS)).unwrap();
    assert_eq!(events.lines().count(), 5);
}

#[test]
fn compact_status_fits_whatever_the_fields_and_always_ends() {
    let dir = tempfile::tempdir().unwrap();
    // A very long instance id, a step naming a write_files path over 4 KiB, and an
    // error of control characters (each escapes to six bytes): this looped forever.
    let iid = "i".repeat(10_000);
    let mut r = Reporter::new(None, dir.path(), &iid);
    let step = format!("write_files[0]:/{}", "p".repeat(5000));
    r.failed(
        &step,
        ErrorKind::Io,
        &"\u{1}\u{2}é".repeat(5000),
        &["\u{7}".repeat(3000)],
    );
    let t = std::time::Instant::now();
    let json = r.status().compact_json();
    assert!(t.elapsed() < std::time::Duration::from_secs(2));
    assert!(
        json.len() <= crate::base::limits::MAX_STATUS_BYTES,
        "{}",
        json.len()
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["phase"], "failed");
    assert!(
        v["step"]
            .as_str()
            .unwrap()
            .starts_with("write_files[0]:/ppp")
    );
    assert!(v["error"].as_str().unwrap().ends_with('…'));
}

#[test]
fn compact_status_fits_4k() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = Reporter::new(None, dir.path(), "i-1");
    let tail: Vec<String> = (0..200)
        .map(|i| format!("line {i} {}", "x".repeat(100)))
        .collect();
    r.failed(
        "kubeadm",
        ErrorKind::Timeout,
        &"reason ".repeat(2000),
        &tail,
    );
    let json = r.status().compact_json();
    assert!(
        json.len() <= crate::base::limits::MAX_STATUS_BYTES,
        "{}",
        json.len()
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v["error"].as_str().unwrap().starts_with("kubeadm: reason"));
    assert_eq!(r.status().output_tail.len(), TAIL_LINES);
}

#[test]
fn redaction_keys() {
    assert_eq!(
        keys_to_redact(true, &["guestinfo.vendordata".into(), "userdata".into()]),
        ["userdata", "vendordata"]
    );
    assert!(keys_to_redact(false, &[]).is_empty());
    let t = Mem::default();
    assert!(redact_guestinfo(&t, &["userdata".into()]).is_empty());
    assert_eq!(t.0.borrow()["userdata"], vec![b"---".to_vec()]);
    assert_eq!(t.0.borrow()["userdata.encoding"].len(), 1);
}

#[test]
fn local_addresses_come_from_the_facts() {
    let t = Mem::default();
    let facts = crate::source::facts::Facts {
        local_ipv4: Some("10.0.0.7".into()),
        ..Default::default()
    };
    publish_local_addresses(&t, &facts);
    let set = t.0.borrow();
    assert_eq!(set["local-ipv4"], vec![b"10.0.0.7".to_vec()]);
    assert!(
        !set.contains_key("local-ipv6"),
        "an absent family is not written"
    );
}

#[test]
fn the_main_half_goes_on_from_the_local_half_without_repeating_itself() {
    let dir = tempfile::tempdir().unwrap();
    let t = Mem::default();
    let mut local = Reporter::new(Some(&t), dir.path(), "i-1");
    local.phase(Phase::Reading, None);
    local.phase(Phase::Applying, None);
    local.phase(Phase::Applying, None); // nothing a reader sees changes: not sent again
    let mut main = Reporter::resume(Some(&t), dir.path(), local.carry());
    assert_eq!(main.status().phase, Phase::Applying);
    assert_eq!(main.instance_id, "i-1");
    main.phase(Phase::Applying, None);
    main.phase(Phase::Applying, Some("write_files[0]:/etc/x")); // a new step is news
    main.done();
    assert_eq!(sent_phases(&t), ["reading", "applying", "applying", "done"]);
    let sent = t.0.borrow();
    // The readiness key changed once (false, then true), and was sent once per value.
    assert_eq!(
        sent["nodeagent.ready"],
        [b"false".to_vec(), b"true".to_vec()]
    );
}
