//! bootcmd and runcmd fail as cloud-init 22.4 lets them fail: each list is one shell script
//! without `set -e` there (`util.shellify`), so a failing item never stops the items after it;
//! a failed bootcmd module does not stop the boot; only runcmd's last item fails the run.
//! nodeagent keeps running each item supervised and journaled exactly once, and ends
//! `degraded` naming the failed item (redacted), or `failed` for the last runcmd item and for a
//! kubeadm step (after the later runcmd items ran).

mod apply_common;
use apply_common::*;
use libnodeagent::plan::*;
use std::path::Path;

fn record(root: &Path) -> String {
    std::fs::read_to_string(root.join("record")).unwrap_or_default()
}

fn append(what: &str) -> String {
    format!("echo {what} >> \"/record\"")
}

fn journal_results(root: &Path, iid: &str) -> Vec<(String, String)> {
    let st = libnodeagent::base::state::State::open(root).unwrap();
    libnodeagent::base::state::read_journal(&st.instance_dir(iid).join("journal.jsonl"))
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.event {
            libnodeagent::base::state::Event::Done { step, result, .. } => {
                Some((step, result.as_str().to_string()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_failing_runcmd_item_does_not_stop_the_later_ones_and_runs_once() {
    let p = plan(
        "vm-r",
        vec![
            sh("runcmd[0]", &append("one"), Frequency::PerInstance),
            sh(
                "runcmd[1]",
                "echo 'kubeadm join --token abcdef.0123456789abcdef' >&2; (exit 3)",
                Frequency::PerInstance,
            ),
            sh("runcmd[2]", &append("three"), Frequency::PerInstance),
        ],
    );
    let Some(d) = exec_dir() else {
        return;
    };
    let r = d.path();
    let s = run(r, &p, true, false, "b").expect("the run carries on and ends degraded");
    assert_eq!(record(r), "one\nthree\n");
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    let w = &s.warnings[0];
    assert!(
        w.contains("runcmd[1]") && w.contains("exit status 3"),
        "{w}"
    );
    assert!(!w.contains("0123456789abcdef"), "token leaked: {w}");
    assert!(
        journal_results(r, "vm-r").contains(&("runcmd[1]".into(), "failed-ignored".into())),
        "journaled as run (and failed) once"
    );
    // The next run (a reboot, or the agent started again) runs none of them again.
    let s = run(r, &p, true, false, "b2").unwrap();
    assert_eq!(record(r), "one\nthree\n");
    assert_eq!(s.already.len(), 3, "{s:?}");
}

#[test]
fn the_last_runcmd_item_failing_fails_the_run() {
    let p = plan(
        "vm-r",
        vec![
            sh("runcmd[0]", "false", Frequency::PerInstance),
            sh("runcmd[1]", &append("before-last"), Frequency::PerInstance),
            sh("runcmd[2]", "exit 4", Frequency::PerInstance),
        ],
    );
    let Some(d) = exec_dir() else {
        return;
    };
    let e = run(d.path(), &p, true, false, "b").unwrap_err();
    assert!(e.place.starts_with("step runcmd[2]"), "{e}");
    assert_eq!(
        e.kind(),
        libnodeagent::base::error::ErrorKind::CommandFailed,
        "{e}"
    );
    assert!(e.message.contains("exit status 4"), "{e}");
    assert_eq!(record(d.path()), "before-last\n");
}

#[test]
fn a_failing_bootcmd_item_carries_on_to_the_rest_of_the_boot() {
    let p = plan(
        "vm-b",
        vec![
            sh("bootcmd[0]", "false", Frequency::PerBoot),
            sh("bootcmd[1]", &append("boot-1"), Frequency::PerBoot),
            sh("bootcmd[2]", "exit 5", Frequency::PerBoot),
            wf(file("/after", "written", "root:root", 0o644)),
            sh("runcmd[0]", &append("run-0"), Frequency::PerInstance),
        ],
    );
    let Some(d) = exec_dir() else {
        return;
    };
    let r = d.path();
    let s = run(r, &p, true, false, "b").unwrap();
    assert_eq!(record(r), "boot-1\nrun-0\n");
    assert_eq!(std::fs::read_to_string(r.join("after")).unwrap(), "written");
    assert_eq!(s.warnings.len(), 2, "{:?}", s.warnings);
    assert!(s.warnings[0].contains("bootcmd[0]"), "{:?}", s.warnings);
    assert!(s.warnings[1].contains("bootcmd[2]"), "{:?}", s.warnings);
    // Per boot, as cloud-init's bootcmd: the next boot runs bootcmd again, runcmd not.
    run(r, &p, true, false, "b2").unwrap();
    assert_eq!(record(r), "boot-1\nrun-0\nboot-1\n");
}

#[test]
fn a_failed_kubeadm_step_lets_the_post_commands_run_then_fails() {
    let p = plan(
        "vm-k",
        vec![
            step(
                "runcmd[0]:kubeadm",
                RunStage::Main,
                Frequency::PerInstance,
                Action::Kubeadm(KubeadmSpec {
                    mode: KubeadmMode::Join,
                    // Not there: the step fails.
                    config_path: "/run/kubeadm/kubeadm-join-config.yaml".into(),
                    extra_args: vec![],
                    sentinel: true,
                    endpoint: None,
                    original: "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml".into(),
                }),
            ),
            sh("runcmd[1]", &append("post"), Frequency::PerInstance),
        ],
    );
    let Some(d) = exec_dir() else {
        return;
    };
    let r = d.path();
    let e = run(r, &p, true, false, "b").unwrap_err();
    assert!(e.place.starts_with("step runcmd[0]:kubeadm"), "{e}");
    assert_eq!(record(r), "post\n", "postKubeadmCommands ran");
    assert!(
        !r.join("run/cluster-api/bootstrap-success.complete")
            .exists()
    );
}

#[test]
fn a_list_is_one_shell_program_sharing_variables_functions_directory_and_umask() {
    let p = plan(
        "vm-s",
        vec![
            sh(
                "bootcmd[0]",
                "echo \"boot $INSTANCE_ID\" >> /record",
                Frequency::PerBoot,
            ),
            sh(
                "runcmd[0]",
                "export A=exported; B=plain; f() { echo \"fn $1\"; }; cd /work; umask 027",
                Frequency::PerInstance,
            ),
            sh("runcmd[1]", "false", Frequency::PerInstance),
            sh(
                "runcmd[2]",
                "echo \"$? $A $B $(pwd) $(umask) $(f x)\" >> /record",
                Frequency::PerInstance,
            ),
            sh(
                "runcmd[3]",
                "[ -n \"$A\" ] && exit 0",
                Frequency::PerInstance,
            ),
            sh("runcmd[4]", &append("never"), Frequency::PerInstance),
        ],
    );
    let Some(d) = exec_dir() else {
        return;
    };
    let r = d.path();
    std::fs::create_dir_all(r.join("work")).unwrap();
    let s = run(r, &p, true, false, "b").expect("`exit 0` ends the list as a success");
    assert_eq!(record(r), "boot vm-s\n1 exported plain /work 0027 fn x\n");
    let results = journal_results(r, "vm-s");
    assert!(
        results.contains(&("runcmd[3]".into(), "ok".into())),
        "{results:?}"
    );
    assert!(
        results.contains(&("runcmd[4]".into(), "not-run".into())),
        "{results:?}"
    );
    assert_eq!(s.warnings.len(), 1, "runcmd[1] failed: {:?}", s.warnings);
    // Journaled: nothing runs again.
    run(r, &p, true, false, "b").unwrap();
    assert_eq!(record(r), "boot vm-s\n1 exported plain /work 0027 fn x\n");
}

#[test]
fn exit_ends_the_list_before_the_kubeadm_step_and_a_failing_exit_fails_the_run() {
    let p = plan(
        "vm-e",
        vec![
            sh("runcmd[0]", "exit 7", Frequency::PerInstance),
            step(
                "runcmd[1]:kubeadm",
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
            ),
            sh("runcmd[2]", &append("after"), Frequency::PerInstance),
        ],
    );
    let Some(d) = exec_dir() else {
        return;
    };
    let e = run(d.path(), &p, true, false, "b").unwrap_err();
    assert!(e.place.starts_with("step runcmd[0]"), "{e}");
    assert!(e.message.contains("exit status 7"), "{e}");
    assert_eq!(record(d.path()), "");
    // A later run (a reboot) does not run the items after the `exit` either.
    let _ = run(d.path(), &p, true, false, "b2");
    assert_eq!(record(d.path()), "");
    let results = journal_results(d.path(), "vm-e");
    assert!(
        results.contains(&("runcmd[1]:kubeadm".into(), "not-run".into())),
        "{results:?}"
    );
}

/// The agent of `killed_after_the_first_item_the_rerun_restores_the_shell_state`.
#[test]
#[ignore = "child process of a test"]
fn shell_state_child() {
    let Ok(root) = std::env::var("SHELL_STATE_ROOT") else {
        return;
    };
    let _ = run(Path::new(&root), &shell_state_plan(), true, false, "b");
}

fn shell_state_plan() -> Plan {
    plan(
        "vm-k",
        vec![
            sh(
                "runcmd[0]",
                "export A=1; X=plain; cd /d; umask 077; echo item0 >> /record",
                Frequency::PerInstance,
            ),
            sh(
                "runcmd[1]",
                "echo > /item1-started; sleep 3; echo \"item1 $A $X $(pwd) $(umask)\" >> /record",
                Frequency::PerInstance,
            ),
            sh(
                "runcmd[2]",
                "echo \"item2 $A\" >> /record",
                Frequency::PerInstance,
            ),
        ],
    )
}

#[test]
fn killed_after_the_first_item_the_rerun_restores_the_shell_state() {
    use std::os::unix::process::CommandExt;
    let Some(d) = exec_dir() else {
        return;
    };
    let r = d.path();
    std::fs::create_dir_all(r.join("d")).unwrap();
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        "shell_state_child",
        "--test-threads=1",
    ])
    .env("SHELL_STATE_ROOT", r)
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    // SAFETY: setsid between fork and exec: the agent's tree is one session.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let t = std::time::Instant::now();
    // Item 1 has started: item 0 and its record are finished (a kill between an item's end
    // and its record would run it again, as the supervisor's protocol says).
    while !r.join("item1-started").exists() {
        assert!(t.elapsed().as_secs() < 60, "item 1 never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The whole tree (agent, supervisor, shell) dies during item 1, as in a power cut.
    kill_session(child.id());
    let _ = child.wait();
    assert_eq!(record(r), "item0\n");
    run(r, &shell_state_plan(), true, false, "b").unwrap();
    assert_eq!(record(r), "item0\nitem1 1 plain /d 0077\nitem2 1\n");
    let results = journal_results(r, "vm-k");
    assert_eq!(
        results[0],
        ("runcmd[0]".into(), "adopted".into()),
        "{results:?}"
    );
}

/// SIGKILL every process of session `sid`, bounded.
fn kill_session(sid: u32) {
    for _ in 0..100 {
        let mut found = false;
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
                continue;
            };
            let f: Vec<&str> = rest.split(' ').collect();
            if f.get(3) == Some(&sid.to_string().as_str()) && f.first() != Some(&"Z") {
                found = true;
                // SAFETY: kill with a pid read from /proc.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        if !found {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("session {sid} survives SIGKILL");
}

#[test]
fn the_kubeadm_step_sees_what_the_items_before_it_exported_and_their_directory() {
    let kubeadm = step(
        "runcmd[1]:kubeadm",
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
    );
    let p = plan(
        "vm-kenv",
        vec![
            sh(
                "runcmd[0]",
                "export KUBECONFIG=/etc/kubernetes/admin.conf; cd /work",
                Frequency::PerInstance,
            ),
            kubeadm,
            sh(
                "runcmd[2]",
                "echo \"post $KUBECONFIG $(pwd)\" >> /record",
                Frequency::PerInstance,
            ),
        ],
    );
    let Some(d) = exec_dir() else {
        return;
    };
    let r = d.path();
    std::fs::create_dir_all(r.join("work")).unwrap();
    std::fs::create_dir_all(r.join("run/kubeadm")).unwrap();
    std::fs::write(r.join("run/kubeadm/kubeadm.yaml"), "").unwrap();
    // A stand-in that records what it saw (the chrooted step finds it on PATH in the root).
    let bin = r.join("usr/local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(
        bin.join("kubeadm"),
        "#!/bin/sh\necho \"kubeadm $1 $KUBECONFIG $(pwd)\" >> /record\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("kubeadm"), std::fs::Permissions::from_mode(0o755)).unwrap();
    run(r, &p, true, false, "b").unwrap();
    assert_eq!(
        record(r),
        "kubeadm init /etc/kubernetes/admin.conf /work\npost /etc/kubernetes/admin.conf /work\n"
    );
}
