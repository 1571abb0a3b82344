//! The apply engine on hand-built plans, in a temp root (no VM): files, journal, run-once,
//! failures, compat, timeouts, redaction.

mod apply_common;
use apply_common::*;
use libnodeagent::base::state::read_journal;
use libnodeagent::base::state::{DoneResult, Event, RunResult};
use libnodeagent::plan::*;
use libnodeagent::plan::{Frequency, RunStage};

fn record(root: &std::path::Path) -> String {
    std::fs::read_to_string(root.join("record")).unwrap_or_default()
}

fn journal(root: &std::path::Path, iid: &str) -> Vec<libnodeagent::base::state::Record> {
    let st = libnodeagent::base::state::State::open(root).unwrap();
    read_journal(&st.instance_dir(iid).join("journal.jsonl")).unwrap()
}

fn full_plan() -> Plan {
    let mut appended = file("/etc/motd", "second\n", "root:root", 0o644);
    appended.append = true;
    let mut deferred = file(
        "/home/capv/.config/app/token",
        "T0KEN\n",
        "capv:capv",
        0o600,
    );
    deferred.defer = true;
    let net = libnodeagent::plan::network::render(
        &serde_json::json!({"version": 2, "ethernets": {"id0": {"match": {"macaddress": "00:50:56:01:02:03"},
            "set-name": "eth0", "dhcp4": true}}}),
        "networkd",
    )
    .unwrap();
    plan(
        "vm-1",
        vec![
            step(
                "hostname",
                RunStage::Local,
                Frequency::PerInstance,
                Action::Hostname(HostnameSpec {
                    hostname: "node1".into(),
                    fqdn: "node1.example".into(),
                    prefer_fqdn: false,
                    etc_hosts: Some(EtcHosts::Template(
                        "127.0.1.1 node1.example node1\n127.0.0.1 localhost\n".into(),
                    )),
                    preserve: false,
                }),
            ),
            step(
                "network",
                RunStage::Local,
                Frequency::PerInstance,
                Action::Network(NetworkSpec {
                    renderer: "networkd".into(),
                    files: net,
                }),
            ),
            sh(
                "bootcmd[0]",
                "echo bootcmd >> \"/record\"",
                Frequency::PerBoot,
            ),
            wf(file(
                "/etc/kubernetes/pki/ca.key",
                "-----BEGIN KEY-----\nabc\n-----END KEY-----\n",
                "root:root",
                0o600,
            )),
            wf(file(
                "/etc/kubernetes/pki/ca.crt",
                "CERT\n",
                "root:root",
                0o644,
            )),
            wf(deferred),
            wf(file(
                "/opt/capv/bin/tool",
                "#!/bin/sh\n",
                "capv:adm",
                0o4750,
            )),
            wf(appended),
            sh(
                "runcmd[0]",
                "echo runcmd0 >> \"/record\"",
                Frequency::PerInstance,
            ),
            step(
                "runcmd[1]",
                RunStage::Main,
                Frequency::PerInstance,
                Action::Command(CommandSpec {
                    origin: "runcmd[1]".into(),
                    run: Run::Argv(vec![
                        "sh".into(),
                        "-c".into(),
                        "echo \"runcmd1 $0\" >> \"/record\"".into(),
                        "arg".into(),
                    ]),
                    timeout_secs: 30,
                }),
            ),
        ],
    )
}

#[test]
fn full_plan_contents_owners_modes_and_journal() {
    let Some(d) = exec_dir() else {
        return;
    };
    let r = d.path();
    passwd(r);
    std::fs::write(r.join("etc/motd"), "first\n").unwrap();
    let s = run(r, &full_plan(), true, false, "boot-1").unwrap();
    assert_eq!(s.ran.len(), 10, "{:?}", s.ran);

    let key = r.join("etc/kubernetes/pki/ca.key");
    assert_eq!(
        std::fs::read_to_string(&key).unwrap(),
        "-----BEGIN KEY-----\nabc\n-----END KEY-----\n"
    );
    assert_eq!(mode(&key), 0o600);
    assert_eq!(ids(&key), (0, 0));
    assert_eq!(mode(&r.join("etc/kubernetes/pki/ca.crt")), 0o644);
    // New parents (0755) get the entry's owner, as cloud-init 23.1+'s `ensure_dir` makes
    // them (25.1 followed: docs/parity-25.md; 22.4 left them root's).
    let tok = r.join("home/capv/.config/app/token");
    assert_eq!((mode(&tok), ids(&tok)), (0o600, (1000, 1000)));
    for dir in ["home/capv", "home/capv/.config", "home/capv/.config/app"] {
        assert_eq!(
            (mode(&r.join(dir)), ids(&r.join(dir))),
            (0o755, (1000, 1000)),
            "{dir}"
        );
    }
    assert_eq!(
        ids(&r.join("home")),
        (1000, 1000),
        "the first missing ancestor too (25.1's ensure_dir makes each one with the owner)"
    );
    let tool = r.join("opt/capv/bin/tool");
    assert_eq!(
        (mode(&tool), ids(&tool)),
        (0o4750, (1000, 4)),
        "set-uid kept after chown"
    );
    assert_eq!(
        std::fs::read_to_string(r.join("etc/motd")).unwrap(),
        "first\nsecond\n"
    );
    assert_eq!(
        std::fs::read_to_string(r.join("etc/hostname")).unwrap(),
        "node1\n"
    );
    assert!(
        std::fs::read_to_string(r.join("etc/hosts"))
            .unwrap()
            .starts_with("127.0.1.1 node1.example node1\n")
    );
    let link =
        std::fs::read_to_string(r.join("etc/systemd/network/10-nodeagent-eth0.link")).unwrap();
    assert!(
        link.contains("MACAddress=00:50:56:01:02:03\n\n[Link]\nName=eth0\n"),
        "{link}"
    );
    assert!(
        r.join("etc/systemd/network/10-nodeagent-eth0.network")
            .exists()
    );
    assert_eq!(record(r), "bootcmd\nruncmd0\nruncmd1 arg\n");

    // State directory and journal.
    assert_eq!(mode(&r.join("var/lib/nodeagent")), 0o700);
    let recs = journal(r, "vm-1");
    let done: Vec<&str> = recs
        .iter()
        .filter(|x| matches!(x.event, Event::Done { .. }))
        .map(|x| x.event.step().unwrap())
        .collect();
    assert_eq!(done.len(), 10);
    assert!(recs.iter().all(|x| x.at.ends_with('Z')));
    assert!(matches!(
        recs.last().unwrap().event,
        Event::RunEnd {
            result: RunResult::Ok,
            ..
        }
    ));
    // Deferred file came after the user database steps would have (no users here: plan order).
    assert!(
        done.iter().position(|s| s.contains("token")) < done.iter().position(|s| *s == "runcmd[0]")
    );
    // No temp files anywhere.
    let snap = snapshot(r, &|_| false);
    assert!(
        snap.keys().all(|k| !k.contains("nodeagent-tmp")),
        "{snap:?}"
    );
}

#[test]
fn same_instance_skips_per_instance_runs_per_boot_and_new_instance_runs_all() {
    let Some(d) = exec_dir() else {
        return;
    };
    let r = d.path();
    passwd(r);
    let p = full_plan();
    run(r, &p, true, false, "boot-1").unwrap();
    // Same boot (a restart): nothing runs again.
    let s = run(r, &p, true, false, "boot-1").unwrap();
    assert!(s.ran.is_empty(), "{:?}", s.ran);
    // Next boot: only the per-boot step.
    let s = run(r, &p, true, false, "boot-2").unwrap();
    assert_eq!(s.ran, ["bootcmd[0]"]);
    assert_eq!(record(r), "bootcmd\nruncmd0\nruncmd1 arg\nbootcmd\n");
    assert_eq!(
        std::fs::read_to_string(r.join("etc/motd")).unwrap(),
        "second\n",
        "append ran once"
    );
    // A clone: new instance-id, everything again.
    let mut p2 = p.clone();
    p2.instance_id = "vm-2".into();
    let s = run(r, &p2, true, false, "boot-2").unwrap();
    assert_eq!(s.ran.len(), 10);
    assert_eq!(
        record(r),
        "bootcmd\nruncmd0\nruncmd1 arg\nbootcmd\nbootcmd\nruncmd0\nruncmd1 arg\n"
    );
    let st = libnodeagent::base::state::State::open(r).unwrap();
    assert_eq!(st.current_instance_id().as_deref(), Some("vm-2"));
}

#[test]
fn failing_step_stops_the_run_and_names_itself() {
    let Some(d) = exec_dir() else {
        return;
    };
    let r = d.path();
    let p = plan(
        "vm-1",
        vec![
            wf(file("/a", "a", "root:root", 0o644)),
            sh(
                "runcmd[0]",
                "echo 'kubeadm join --token abcdef.0123456789abcdef'; exit 3",
                Frequency::PerInstance,
            ),
            wf(file("/b", "b", "root:root", 0o644)),
        ],
    );
    let e = run(r, &p, true, false, "b").unwrap_err();
    assert!(e.place.starts_with("step runcmd[0]"), "{e}");
    assert_eq!(
        e.kind(),
        libnodeagent::base::error::ErrorKind::CommandFailed,
        "{e}"
    );
    assert!(e.message.contains("exit status 3"), "{e}");
    assert!(
        !e.to_string().contains("0123456789abcdef"),
        "token leaked: {e}"
    );
    assert!(r.join("a").exists());
    assert!(!r.join("b").exists(), "later steps untouched");
    let recs = journal(r, "vm-1");
    let Some(Event::Failed { step, error, .. }) = recs
        .iter()
        .map(|x| &x.event)
        .find(|e| matches!(e, Event::Failed { .. }))
    else {
        panic!("no failed record");
    };
    assert_eq!(step, "runcmd[0]");
    assert!(!error.contains("0123456789abcdef"));
    // The next run retries the failed step (it never succeeded), not the finished ones.
    let e2 = run(r, &p, true, false, "b").unwrap_err();
    assert!(e2.place.starts_with("step runcmd[0]"));
    let begins = journal(r, "vm-1")
        .iter()
        .filter(|x| {
            matches!(x.event, Event::Begin { .. }) && x.event.step() == Some("write_files:/a")
        })
        .count();
    assert_eq!(begins, 1);
}

#[test]
fn bad_owner_fails_before_writing() {
    let d = tempfile::tempdir().unwrap();
    let r = d.path();
    passwd(r);
    let p = plan(
        "vm-1",
        vec![wf(file("/etc/x/y", "y", "nobody:capv", 0o600))],
    );
    let e = run(r, &p, false, false, "b").unwrap_err();
    assert!(e.message.contains("nobody"), "{e}");
    assert!(!r.join("etc/x").exists());
}

#[test]
fn only_last_runcmd_counts_with_or_without_compat() {
    // cloud-init's one-script runcmd (tests/commands.rs): the default, not only --compat.
    let p = plan(
        "vm-1",
        vec![
            sh("runcmd[0]", "false", Frequency::PerInstance),
            sh(
                "runcmd[1]",
                "echo ok >> \"/record\"",
                Frequency::PerInstance,
            ),
        ],
    );
    for compat in [true, false] {
        let Some(d) = exec_dir() else {
            return;
        };
        let s = run(d.path(), &p, true, compat, "b").unwrap();
        assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
        assert_eq!(record(d.path()), "ok\n");
    }
    // The last item's failure still fails the run.
    let p = plan(
        "vm-1",
        vec![
            sh("runcmd[0]", "true", Frequency::PerInstance),
            sh("runcmd[1]", "(exit 4)", Frequency::PerInstance),
        ],
    );
    let Some(d) = exec_dir() else {
        return;
    };
    let e = run(d.path(), &p, true, false, "b").unwrap_err();
    assert_eq!(
        e.kind(),
        libnodeagent::base::error::ErrorKind::CommandFailed,
        "{e}"
    );
    assert!(e.message.contains("exit status 4"), "{e}");
}

#[test]
fn command_timeout_and_skip_without_exec() {
    let mut p = plan(
        "vm-1",
        vec![sh("runcmd[0]", "sleep 30", Frequency::PerInstance)],
    );
    if let Action::Command(c) = &mut p.steps[0].action {
        c.timeout_secs = 1;
    }
    let Some(d) = exec_dir() else {
        return;
    };
    let t = std::time::Instant::now();
    let e = run(d.path(), &p, true, false, "b").unwrap_err();
    assert_eq!(
        e.kind(),
        libnodeagent::base::error::ErrorKind::Timeout,
        "{e}"
    );
    assert!(e.message.contains("timed out after 1 s"), "{e}");
    assert!(t.elapsed().as_secs() < 10);

    // Without --exec: recorded as skipped, and a later --exec run does run it.
    let p = plan(
        "vm-1",
        vec![sh(
            "runcmd[0]",
            "echo x >> \"/record\"",
            Frequency::PerInstance,
        )],
    );
    let Some(d) = exec_dir() else {
        return;
    };
    run(d.path(), &p, false, false, "b").unwrap();
    assert_eq!(record(d.path()), "");
    let recs = journal(d.path(), "vm-1");
    assert!(recs.iter().any(|x| matches!(
        x.event,
        Event::Done {
            result: DoneResult::Skipped,
            ..
        }
    )));
    run(d.path(), &p, true, false, "b").unwrap();
    assert_eq!(record(d.path()), "x\n");
}

#[test]
fn finished_command_of_a_killed_run_is_adopted_not_rerun() {
    // Simulate: a previous agent started runcmd[0], the command finished (rc 0 recorded by
    // the supervisor), and the agent died before journaling `done`.
    let p = plan(
        "vm-1",
        vec![sh(
            "runcmd[0]",
            "echo ran >> \"/record\"",
            Frequency::PerInstance,
        )],
    );
    let Some(d) = exec_dir() else {
        return;
    };
    let r = d.path();
    run(r, &p, true, false, "b").unwrap();
    let st = libnodeagent::base::state::State::open(r).unwrap();
    let jp = st.instance_dir("vm-1").join("journal.jsonl");
    let text = std::fs::read_to_string(&jp).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| !l.contains("\"event\":\"done\""))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&jp, kept).unwrap();
    let s = run(r, &p, true, false, "b").unwrap();
    assert_eq!(s.ran, ["runcmd[0]"]);
    assert_eq!(record(r), "ran\n", "not run twice");
    assert!(journal(r, "vm-1").iter().any(|x| matches!(
        x.event,
        Event::Done {
            result: DoneResult::Adopted,
            ..
        }
    )));
}

#[test]
fn kubeadm_finished_before_a_kill_is_adopted_via_the_sentinel() {
    let p = plan(
        "vm-k",
        vec![step(
            "kubeadm",
            RunStage::Main,
            Frequency::PerInstance,
            Action::Kubeadm(KubeadmSpec {
                mode: KubeadmMode::Init,
                config_path: "/run/kubeadm/kubeadm.yaml".into(),
                extra_args: vec![],
                sentinel: true,
                endpoint: None,
                original: "kubeadm init --config /run/kubeadm/kubeadm.yaml".into(),
            }),
        )],
    );
    let Some(d) = exec_dir() else {
        return;
    };
    let r = d.path();
    // A previous agent journaled `begin` for the step in this boot, kubeadm wrote CAPI's
    // sentinel, and the agent was killed before `done`.
    let st = libnodeagent::base::state::State::open(r).unwrap();
    let mut j = st.begin_instance("vm-k").unwrap();
    j.boot = "b".into();
    let rec = j.record(Event::Begin {
        step: "kubeadm".into(),
        stage: RunStage::Main,
        frequency: Frequency::PerInstance,
        expect: None,
    });
    j.append(rec, true).unwrap();
    drop(j);
    std::fs::create_dir_all(r.join("run/cluster-api")).unwrap();
    std::fs::write(
        r.join("run/cluster-api/bootstrap-success.complete"),
        "success\n",
    )
    .unwrap();
    let s = run(r, &p, true, false, "b").unwrap();
    assert_eq!(s.ran, ["kubeadm"]);
    assert!(journal(r, "vm-k").iter().any(|x| matches!(
        x.event,
        Event::Done {
            result: DoneResult::Adopted,
            ..
        }
    )));
    // A sentinel alone (no begin of ours in this boot) is not trusted: kubeadm is executed
    // (here it fails: no kubeadm binary on this host, the error names the step).
    let d2 = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d2.path().join("run/cluster-api")).unwrap();
    std::fs::write(
        d2.path().join("run/cluster-api/bootstrap-success.complete"),
        "success\n",
    )
    .unwrap();
    let mut p2 = p.clone();
    p2.instance_id = "vm-k2".into();
    match run(d2.path(), &p2, true, false, "b") {
        Ok(s) => assert!(
            !journal(d2.path(), "vm-k2").iter().any(|x| matches!(
                x.event,
                Event::Done {
                    result: DoneResult::Adopted,
                    ..
                }
            )),
            "{s:?}"
        ),
        Err(e) => assert!(e.place.starts_with("step kubeadm"), "{e}"),
    }
}
