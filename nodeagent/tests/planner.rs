//! The plan is a pure function of what `pipeline::gather` collects: an `Inputs` built in
//! memory (no root on disk, a clock of the test's choosing, files and journal records the
//! test hands in) plans, and kubeadm pre-flight decides on those inputs alone.

mod kubeadm_common;
use kubeadm_common::*;
use libnodeagent::pipeline::{self, Inputs};
use libnodeagent::plan::planner::preflight::{self, Disk};
use libnodeagent::source::transport::RawData;
use std::path::PathBuf;

const CA: &str = "/etc/kubernetes/pki/ca.crt";

fn inputs(userdata: &str, disk: Disk, now: i64) -> Inputs {
    let d = |t: &str| {
        Some(libnodeagent::source::decode::Decoded {
            text: t.to_string(),
            warnings: Vec::new(),
        })
    };
    Inputs {
        transport: Box::new(pipeline::Offline),
        transport_log: Vec::new(),
        raw: RawData {
            metadata: d(METADATA),
            userdata: d(userdata),
            vendordata: None,
        },
        facts: Default::default(),
        image: Default::default(),
        users: Default::default(),
        target: Default::default(),
        disk,
        now,
        compat: false,
        root: PathBuf::from("/nonexistent-nodeagent-planner-test"),
    }
}

#[test]
fn plans_from_inputs_built_in_memory() {
    let root = PathBuf::from("/nonexistent-nodeagent-planner-test");
    assert!(!root.exists());
    // A worker join: the plan writes the JoinConfiguration; the cluster CA it names
    // (caCertPath) is only "on disk", that is in the gathered `Disk`.
    let files = vec![(
        JOIN_PATH.to_string(),
        worker_join_config("10.0.0.10:6443", &[]).into_bytes(),
    )];
    let ud = userdata(&files, JOIN_LINE).replacen("## template: jinja\n", "", 1);
    let now = libnodeagent::pki::now();
    let ca = make_ca(-300, 86400, true);
    let mut disk = Disk {
        finished: Some(Default::default()),
        ..Default::default()
    };
    disk.files
        .insert(CA.into(), Some(ca.cert_pem.clone().into_bytes()));

    // What else pre-flight looks up is absent: after handing that in, nothing is unread,
    // so planning needs no read of the (missing) root.
    let plan = pipeline::prepare(&inputs(&ud, disk.clone(), now))
        .unwrap()
        .plan;
    let unread = preflight::unread(&plan, &disk, now);
    assert!(
        !unread.is_empty() && !unread.contains(&CA.to_string()),
        "{unread:?}"
    );
    for p in unread {
        disk.files.insert(p, None);
    }
    assert!(preflight::unread(&plan, &disk, now).is_empty());
    let p = pipeline::prepare(&inputs(&ud, disk.clone(), now)).unwrap();
    assert!(
        p.plan.steps.iter().any(|s| s.id == "runcmd[0]:kubeadm"),
        "{:?}",
        p.plan.steps
    );
    assert_eq!(p.plan, plan);

    // The clock is an input: ten days on, the same CA has expired.
    let later = now + 10 * 86400;
    let e = pipeline::prepare(&inputs(&ud, disk.clone(), later)).unwrap_err();
    assert_eq!(e.place, format!("step runcmd[0]:kubeadm: {CA}"), "{e}");
    assert!(e.message.contains("expired"), "{e}");

    // So is the journal: a kubeadm step this instance finished is not checked again.
    disk.finished = Some(["runcmd[0]:kubeadm".to_string()].into());
    pipeline::prepare(&inputs(&ud, disk.clone(), later)).unwrap();

    // And the files: a CA that is no CA is refused although nothing is on disk.
    disk.finished = Some(Default::default());
    let not_ca = make_ca(-300, 86400, false);
    disk.files
        .insert(CA.into(), Some(not_ca.cert_pem.into_bytes()));
    let e = pipeline::prepare(&inputs(&ud, disk, now)).unwrap_err();
    assert!(e.message.contains("not a CA"), "{e}");
}

/// A key holding a value of the wrong kind is refused, naming the kind it found.
#[test]
fn a_value_of_the_wrong_kind_is_named() {
    let refused = |body: &str| {
        let ud = format!("#cloud-config\n{body}");
        match pipeline::prepare(&inputs(&ud, Disk::default(), 0)) {
            Ok(_) => panic!("planned: {body}"),
            Err(e) => e.to_string(),
        }
    };
    assert_eq!(
        [
            refused("users:\n- name: a\n  sudo: 5\n"),
            refused("disk_setup:\n  /dev/sdb:\n    table_type: gpt\n    layout: x\n"),
            refused("write_files:\n- path: /etc/x\n  permissions: [1]\n"),
        ],
        [
            "users[0].sudo: expected a rule string or a list, found a number (userdata line 4 column 9)",
            "disk_setup./dev/sdb.layout: expected true, false or a list, found a string (userdata line 5 column 13)",
            "write_files[0].permissions: permissions must be a string or an integer, found a list (userdata line 4 column 16)",
        ]
    );
}

/// `permissions: '0000'` (no access at all) is refused; under --compat the plan keeps
/// cloud-init's result (mode 0 skipped: the creation mode, 0644) and warns that it is
/// readable by all.
#[test]
fn permissions_zero_is_refused_strict_and_warned_in_compat() {
    let ud =
        "#cloud-config\nwrite_files:\n- path: /etc/x.key\n  content: k\n  permissions: '0000'\n";
    let now = libnodeagent::pki::now();
    let e = pipeline::prepare(&inputs(ud, Disk::default(), now)).unwrap_err();
    assert_eq!(e.place, "write_files[0].permissions", "{e}");
    assert!(e.message.contains("readable by all users"), "{e}");
    let mut compat = inputs(ud, Disk::default(), now);
    compat.compat = true;
    let p = pipeline::prepare(&compat).unwrap();
    assert!(
        p.plan
            .warnings
            .iter()
            .any(|w| w.contains("write_files[0].permissions: mode 0 is ignored")),
        "{:?}",
        p.plan.warnings
    );
    let mode = p.plan.steps.iter().find_map(|s| match &s.action {
        libnodeagent::plan::Action::WriteFile(f) if f.path == "/etc/x.key" => Some(f.mode),
        _ => None,
    });
    assert_eq!(
        mode,
        Some(None),
        "mode 0 leaves the creation mode, as cloud-init"
    );
}
