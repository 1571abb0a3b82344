//! Boundaries `proc-agent`, `proc-supervisor`, `proc-command`: the crash matrix of a
//! runcmd list. The agent (a child process), the supervisor of the list's program (or of
//! kubeadm), and the command (the shell running the item, or kubeadm) are each killed with
//! SIGKILL at each point of the protocol; the node then converges: every item that recorded
//! a status never runs again, an item without one runs again, the end state is the
//! uninterrupted run's (a killed command ends its item as cloud-init's killed script ends
//! it: failed, recorded, not run again), and a further run changes nothing.

use crate::apply_common::*;
use libnodeagent::plan::*;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A gate an item waits at: it writes `/atN` and waits for `/goN`.
fn gated(n: &str, then: &str) -> String {
    format!(": > /at{n}; while [ ! -e /go{n} ]; do sleep 0.05; done; {then}")
}

fn crash_plan(with_kubeadm: bool) -> Plan {
    let mut steps = vec![
        sh(
            "runcmd[0]",
            "export A=kept; echo item0 >> /record",
            Frequency::PerInstance,
        ),
        sh(
            "runcmd[1]",
            &gated("1", "echo \"item1 $A\" >> /record"),
            Frequency::PerInstance,
        ),
    ];
    if with_kubeadm {
        steps.push(step(
            "runcmd[2]:kubeadm",
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
        ));
        steps.push(sh(
            "runcmd[3]",
            &gated("3", "echo \"item3 $A\" >> /record"),
            Frequency::PerInstance,
        ));
    } else {
        steps.push(sh(
            "runcmd[2]",
            &gated("2", "echo \"item2 $A\" >> /record"),
            Frequency::PerInstance,
        ));
    }
    plan("vm-crash", steps)
}

/// The agent of the crash matrix: one run of the plan under `CRASH_ROOT`, exit 0 or 1.
#[test]
#[ignore = "the agent of the crash matrix, started by its tests"]
fn crash_agent_child() {
    let Ok(root) = std::env::var("CRASH_ROOT") else {
        return;
    };
    let p = crash_plan(std::env::var_os("CRASH_KUBEADM").is_some());
    let code = i32::from(run(Path::new(&root), &p, true, false, "b").is_err());
    std::process::exit(code);
}

/// A fresh root: the shell and its tools, kubeadm's stand-in (it records each start of
/// `init` and waits at its gate), and an `env` that can be held (`/pause-env`) while the
/// program records an item: the instant between an item's end and its record.
fn crash_root() -> Option<tempfile::TempDir> {
    let d = exec_dir()?;
    let r = d.path();
    let env = r.join("usr/bin/env");
    std::fs::rename(&env, r.join("usr/bin/env.real")).unwrap();
    std::fs::write(
        &env,
        "#!/bin/sh\nif [ -e /pause-env ]; then : > /in-env; while [ -e /pause-env ]; do sleep 0.05; done; fi\nexec /usr/bin/env.real \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = r.join("usr/local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(
        bin.join("kubeadm"),
        format!(
            "#!/bin/sh\ncase $1 in\ninit) echo \"kubeadm $A\" >> /record; {} ;;\nreset) echo reset >> /resets ;;\nesac\n",
            gated("k", ":")
        ),
    )
    .unwrap();
    std::fs::set_permissions(bin.join("kubeadm"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(r.join("run/kubeadm")).unwrap();
    std::fs::write(r.join("run/kubeadm/kubeadm.yaml"), "").unwrap();
    Some(d)
}

/// The processes of session `sid`: (pid, ppid, state, cmdline).
fn session(sid: i32) -> Vec<(i32, i32, char, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let f: Vec<&str> = rest.split(' ').collect();
        if f.get(3) != Some(&sid.to_string().as_str()) {
            continue;
        }
        let state = f[0].chars().next().unwrap_or('?');
        let ppid = f[1].parse().unwrap_or(0);
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        out.push((pid, ppid, state, cmd));
    }
    out
}

/// Who is killed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Who {
    Agent,
    /// The supervisor of the list's program.
    Supervisor,
    /// The supervisor of kubeadm.
    KubeadmSupervisor,
    /// The shell running the item, or kubeadm itself.
    Command,
}

/// Where in the protocol.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Point {
    /// While item 1 runs.
    DuringItem,
    /// Item 1's command has ended, its record is not written.
    BeforeRecord,
    /// Item 1 recorded, item 2 running.
    AfterRecord,
    /// The program has ended (all recorded), its supervisor has not recorded its status.
    BeforeProgramStatus,
    /// The program's status recorded, the agent has journaled nothing of it.
    BeforeJournal,
    /// The program waits at the kubeadm step, kubeadm runs.
    DuringKubeadm,
    /// kubeadm finished and recorded, the program not answered yet.
    BeforeAnswer,
    /// Answered: the item after the kubeadm step runs.
    AfterAnswer,
}

struct Case {
    point: Point,
    who: Who,
    /// The `/record` every item appends to, after the kill and the reruns.
    record: &'static str,
    /// Whether the run after the kill (the first run itself when the agent survives) ends
    /// successfully.
    ok: bool,
}

const FULL: &str = "item0\nitem1 kept\nitem2 kept\n";
const FULL_K: &str = "item0\nitem1 kept\nkubeadm kept\nitem3 kept\n";

fn wait_for(what: &str, cond: &mut dyn FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn kill(pid: i32, sig: i32) {
    // SAFETY: a signal to a pid read from /proc of our own child's session.
    unsafe { libc::kill(pid, sig) };
}

/// One case: start the agent, bring the run to the point, kill, open every gate, run the
/// agent again (twice), judge.
fn one(case: &Case, fork: bool) {
    let kubeadm = matches!(
        case.point,
        Point::DuringKubeadm | Point::BeforeAnswer | Point::AfterAnswer
    );
    let Some(d) = crash_root() else {
        return;
    };
    let r = d.path();
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        "crash::crash_agent_child",
        "--test-threads=1",
    ])
    .env("CRASH_ROOT", r)
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    if kubeadm {
        cmd.env("CRASH_KUBEADM", "1");
    }
    if fork {
        cmd.env("NODEAGENT_TEST_FORK_SUPERVISOR", "1");
    }
    // SAFETY: setsid between fork and exec: the agent's tree is one session.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let sid = child.id() as i32;
    let at = |f: &str| r.join(f).exists();
    let open = |f: &str| std::fs::write(r.join(f), "").unwrap();
    let shell = || {
        session(sid)
            .into_iter()
            .find(|p| p.3.starts_with("/bin/sh ") && p.3.trim_end().ends_with(".sh"))
    };
    let kubeadm_proc = || {
        session(sid).into_iter().find(|p| {
            p.3.contains("/kubeadm init") || p.3.starts_with("/bin/sh /usr/local/bin/kubeadm init")
        })
    };
    // Bring the run to the point.
    match case.point {
        Point::DuringItem => wait_for("item 1", &mut || at("at1")),
        Point::BeforeRecord => {
            wait_for("item 1", &mut || at("at1"));
            open("pause-env");
            open("go1");
            wait_for("item 1's record", &mut || at("in-env"));
        }
        Point::AfterRecord | Point::BeforeProgramStatus | Point::BeforeJournal => {
            open("go1");
            wait_for("item 2", &mut || at("at2"));
        }
        Point::DuringKubeadm | Point::BeforeAnswer => {
            open("go1");
            wait_for("kubeadm", &mut || at("atk"));
        }
        Point::AfterAnswer => {
            open("go1");
            open("gok");
            wait_for("item 3", &mut || at("at3"));
        }
    }
    let agent = sid;
    let sh = shell();
    let target = match (case.who, case.point) {
        (Who::Agent, Point::BeforeJournal) => {
            // Stop the agent, let the program end and its status be recorded, then kill.
            kill(agent, libc::SIGSTOP);
            open("go2");
            wait_for("the program's end", &mut || {
                crate::commands::program_file(r, "vm-crash", "rc").exists()
            });
            agent
        }
        (Who::Agent, Point::BeforeAnswer) => {
            kill(agent, libc::SIGSTOP);
            open("gok");
            let h = libnodeagent::apply::files::sha256_hex(b"runcmd[2]:kubeadm");
            let rc = crate::commands::cmd_dir(r, "vm-crash")
                .join(format!("{}.rc", h.get(..16).unwrap()));
            wait_for("kubeadm's recorded status", &mut || rc.exists());
            agent
        }
        (Who::Agent, _) => agent,
        (Who::Supervisor, Point::BeforeProgramStatus) => {
            let (shell_pid, sup, _, _) = sh.clone().expect("the list's shell");
            kill(sup, libc::SIGSTOP);
            open("go2");
            wait_for("the shell's end", &mut || {
                session(sid)
                    .iter()
                    .find(|p| p.0 == shell_pid)
                    .is_none_or(|p| p.2 == 'Z')
            });
            sup
        }
        (Who::Supervisor, _) => sh.clone().expect("the list's shell").1,
        (Who::KubeadmSupervisor, _) => kubeadm_proc().expect("kubeadm").1,
        (Who::Command, Point::DuringKubeadm) => kubeadm_proc().expect("kubeadm").0,
        (Who::Command, _) => sh.clone().expect("the list's shell").0,
    };
    kill(target, libc::SIGKILL);
    // Every gate open: what still runs can finish; the reruns never wait at one.
    let _ = std::fs::remove_file(r.join("pause-env"));
    for g in ["go1", "go2", "go3", "gok"] {
        open(g);
    }
    let p = crash_plan(kubeadm);
    let first = if case.who == Who::Agent {
        let _ = child.wait();
        None
    } else {
        let t = Instant::now();
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s.success());
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "the agent did not end"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let again = run(r, &p, true, false, "b").is_ok();
    let record = std::fs::read_to_string(r.join("record")).unwrap_or_default();
    let label = format!("{:?} killed at {:?} (fork: {fork})", case.who, case.point);
    assert_eq!(record, case.record, "{label}");
    match first {
        // The agent lived: it converged in the same run, or failed as the case says.
        Some(ok) => assert_eq!(ok, case.ok, "{label}: the run itself"),
        None => assert_eq!(again, case.ok, "{label}: the run after the kill"),
    }
    if case.ok {
        assert!(again, "{label}: a run after convergence fails");
    }
    // Converged: a further run runs nothing again and ends the same way.
    let third = run(r, &p, true, false, "b").is_ok();
    assert_eq!(third, again, "{label}: a further run ends otherwise");
    let after = std::fs::read_to_string(r.join("record")).unwrap_or_default();
    assert_eq!(
        after, case.record,
        "{label}: a further run ran something again"
    );
    // Nothing of the killed run is left running.
    wait_for("the session's end", &mut || {
        session(sid).iter().all(|p| p.2 == 'Z')
    });
}

fn cases(who: Who) -> Vec<Case> {
    use Point::*;
    let all = [
        // (point, who, record, ok)
        (DuringItem, Who::Agent, FULL, true),
        (DuringItem, Who::Supervisor, FULL, true),
        (DuringItem, Who::Command, "item0\n", false),
        (BeforeRecord, Who::Agent, FULL, true),
        // The one window no protocol closes: the item ended, its status is not recorded;
        // it runs again (cloud-init would rerun the whole module, or never).
        (
            BeforeRecord,
            Who::Supervisor,
            "item0\nitem1 kept\nitem1 kept\nitem2 kept\n",
            true,
        ),
        (BeforeRecord, Who::Command, "item0\nitem1 kept\n", false),
        (AfterRecord, Who::Agent, FULL, true),
        (AfterRecord, Who::Supervisor, FULL, true),
        (AfterRecord, Who::Command, "item0\nitem1 kept\n", false),
        (BeforeProgramStatus, Who::Supervisor, FULL, true),
        (BeforeJournal, Who::Agent, FULL, true),
        (DuringKubeadm, Who::Agent, FULL_K, true),
        (DuringKubeadm, Who::Supervisor, FULL_K, true),
        (
            DuringKubeadm,
            Who::KubeadmSupervisor,
            "item0\nitem1 kept\nkubeadm kept\nitem3 kept\nkubeadm kept\n",
            false,
        ),
        (
            DuringKubeadm,
            Who::Command,
            "item0\nitem1 kept\nkubeadm kept\nitem3 kept\nkubeadm kept\n",
            false,
        ),
        (BeforeAnswer, Who::Agent, FULL_K, true),
        (AfterAnswer, Who::Agent, FULL_K, true),
        (AfterAnswer, Who::Supervisor, FULL_K, true),
        (
            AfterAnswer,
            Who::Command,
            "item0\nitem1 kept\nkubeadm kept\n",
            false,
        ),
    ];
    all.into_iter()
        .filter(|c| c.1 == who || (who == Who::Supervisor && c.1 == Who::KubeadmSupervisor))
        .map(|(point, who, record, ok)| Case {
            point,
            who,
            record,
            ok,
        })
        .collect()
}

/// The agent killed at each point: the supervisor and the program go on; the next run
/// waits for them (answering the program at the kubeadm step) and adopts what they did.
#[test]
fn cell_kill_agent_at_each_point() {
    for (i, c) in cases(Who::Agent).iter().enumerate() {
        one(c, i % 2 == 0);
    }
}

/// A supervisor killed at each point (issue 41 class 6): its shell dies with it, no status
/// is recorded, and the agent starts the item again at once, converging in the same run;
/// kubeadm killed with its supervisor runs again on the next run (reset first).
#[test]
fn cell_kill_supervisor_at_each_point() {
    for (i, c) in cases(Who::Supervisor).iter().enumerate() {
        one(c, i % 2 == 1);
    }
}

/// The command killed at each point: its item ends failed (as cloud-init's script killed
/// there), recorded once, never run again; kubeadm killed runs again on the next run.
#[test]
fn cell_kill_command_at_each_point() {
    for (i, c) in cases(Who::Command).iter().enumerate() {
        one(c, i % 2 == 0);
    }
}

/// The supervisor of a list killed more than MAX_RESTARTS times in one run: the run fails
/// without recording the item, and the next run runs it and converges.
#[test]
fn cell_kill_supervisor_repeatedly() {
    let Some(d) = crash_root() else {
        return;
    };
    let r: PathBuf = d.path().into();
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        "crash::crash_agent_child",
        "--test-threads=1",
    ])
    .env("CRASH_ROOT", &r)
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    // SAFETY: setsid between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let sid = child.id() as i32;
    // Kill the supervisor each time item 1 is waiting, until the agent gives up.
    let t = Instant::now();
    let mut kills = 0;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the agent never gave up"
        );
        let sup = session(sid)
            .into_iter()
            .find(|p| p.3.starts_with("/bin/sh ") && p.3.trim_end().ends_with(".sh") && p.2 != 'Z')
            .map(|p| p.1);
        if let (Some(sup), true) = (sup, r.join("at1").exists()) {
            let _ = std::fs::remove_file(r.join("at1"));
            kill(sup, libc::SIGKILL);
            kills += 1;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(!status.success(), "the run ends failed after {kills} kills");
    assert_eq!(kills, libnodeagent::apply::shell::MAX_RESTARTS as usize + 1);
    assert_eq!(
        std::fs::read_to_string(r.join("record")).unwrap(),
        "item0\n"
    );
    std::fs::write(r.join("go1"), "").unwrap();
    std::fs::write(r.join("go2"), "").unwrap();
    run(&r, &crash_plan(false), true, false, "b").unwrap();
    assert_eq!(std::fs::read_to_string(r.join("record")).unwrap(), FULL);
}
