//! Issue 12, the node's later boots: the instance's saved userdata and metadata stand in for
//! the platform's blanked copy, per-boot steps run every boot and per-instance steps once, a
//! new instance-id runs everything again; growpart/resizefs are planned in the local stage and
//! switchable off. Runs the built binary with `--root`, the `dir:` transport and `--exec`
//! (commands run chrooted into the root, which holds a shell); `NODEAGENT_BOOT_ID` stands in
//! for a reboot.

mod prereq;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const USERDATA: &str = r#"#cloud-config
bootcmd:
  - echo boot >> "/bootcount"
write_files:
  - path: /etc/once.conf
    content: "written once\n"
runcmd:
  - echo run >> "/runcount"
"#;

struct Node {
    _t: tempfile::TempDir,
    data: PathBuf,
    root: PathBuf,
    facts: PathBuf,
}

impl Node {
    /// `None` (the test skips, saying why) when commands cannot be chrooted into the root.
    fn new(iid: &str) -> Option<Node> {
        let t = tempfile::tempdir().unwrap();
        let (data, root) = (t.path().join("guestinfo"), t.path().join("root"));
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        if !prereq::exec_root(&root, &[]) {
            return None;
        }
        std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
        std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
        let facts = t.path().join("facts.yaml");
        std::fs::write(
            &facts,
            "hostname: n1\nlocal-ipv4: 10.0.0.5\nnetwork-renderer: networkd\n",
        )
        .unwrap();
        let n = Node {
            _t: t,
            data,
            root,
            facts,
        };
        n.platform(iid, USERDATA);
        Some(n)
    }

    /// What the platform (CAPV) sets: metadata and userdata.
    fn platform(&self, iid: &str, userdata: &str) {
        std::fs::write(
            self.data.join("guestinfo.metadata"),
            format!("instance-id: {iid}\nlocal-hostname: n1\n"),
        )
        .unwrap();
        std::fs::write(self.data.join("guestinfo.userdata"), userdata).unwrap();
    }

    fn cmd(&self, sub: &str, boot: &str) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_nodeagent"));
        c.arg(sub)
            .arg("--transport")
            .arg(format!("dir:{}", self.data.display()))
            .arg("--root")
            .arg(&self.root)
            .arg("--facts")
            .arg(&self.facts)
            .env("NODEAGENT_BOOT_ID", boot);
        c
    }

    /// One boot: `run --exec` (both stages), as the two units do.
    fn boot(&self, boot: &str) -> Output {
        let out = self.cmd("run", boot).arg("--exec").output().unwrap();
        assert!(
            out.status.code() == Some(0),
            "run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn lines(&self, name: &str) -> usize {
        std::fs::read_to_string(self.root.join(name))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    fn guestinfo(&self, key: &str) -> String {
        std::fs::read_to_string(self.data.join(format!("guestinfo.{key}"))).unwrap_or_default()
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_second_boot_runs_bootcmd_again_from_the_saved_userdata_and_no_per_instance_step() {
    let Some(n) = Node::new("vm-1") else {
        return;
    };
    n.boot("boot-1");
    assert_eq!((n.lines("bootcount"), n.lines("runcount")), (1, 1));
    // The agent blanked the platform's copy after success, as CAPV nodes expect.
    assert_eq!(n.guestinfo("userdata").trim(), "---");
    let idir = n.root.join("var/lib/nodeagent/instances/vm-1");
    for f in ["userdata-raw.txt", "metadata.txt"] {
        assert_eq!(mode(&idir.join(f)), 0o600, "{f} is root-only");
    }
    assert_eq!(
        std::fs::read_to_string(idir.join("userdata-raw.txt")).unwrap(),
        USERDATA.trim_end(),
        "the decoded userdata as received (guestinfo values are rstripped)"
    );
    assert_eq!(mode(&n.root.join("var/lib/nodeagent")), 0o700);

    // Reboot: the platform's userdata is `---`; bootcmd runs again from the saved copy.
    let out = n.boot("boot-2");
    assert_eq!(
        (n.lines("bootcount"), n.lines("runcount")),
        (2, 1),
        "bootcmd every boot, runcmd once: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(n.root.join("run/nodeagent/status.json")).unwrap())
            .unwrap();
    assert_eq!(status["phase"], "done", "{status}");
    assert_eq!(status["instance_id"], "vm-1");
    // The write_files step was not redone: the journal has exactly one `done` for it.
    let journal = std::fs::read_to_string(idir.join("journal.jsonl")).unwrap();
    let once = journal
        .lines()
        .filter(|l| l.contains("\"event\":\"done\"") && l.contains("/etc/once.conf"))
        .count();
    assert_eq!(once, 1, "{journal}");

    // The same boot again (the unit restarted): nothing runs twice.
    n.boot("boot-2");
    assert_eq!((n.lines("bootcount"), n.lines("runcount")), (2, 1));

    // `plan` on the booted node shows the saved userdata's steps too.
    let plan = n.cmd("plan", "boot-3").arg("--json").output().unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let ids: Vec<&str> = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"bootcmd[0]") && ids.contains(&"runcmd[0]"),
        "{ids:?}"
    );
}

#[test]
fn blanked_metadata_comes_from_the_saved_copy_of_the_current_instance() {
    let Some(n) = Node::new("vm-1") else {
        return;
    };
    n.boot("boot-1");
    // The metadata's `redact:` (or an operator) blanked the metadata too.
    std::fs::write(n.data.join("guestinfo.metadata"), "---").unwrap();
    let out = n.boot("boot-2");
    assert_eq!((n.lines("bootcount"), n.lines("runcount")), (2, 1));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("guestinfo.metadata is blank: using instance vm-1's saved copy"),
        "{log}"
    );
    assert_eq!(
        std::fs::read_to_string(n.root.join("var/lib/nodeagent/instance-id")).unwrap(),
        "vm-1\n"
    );
}

#[test]
fn a_clone_with_a_new_instance_id_runs_everything_again_and_never_replays_the_old_userdata() {
    let Some(n) = Node::new("vm-1") else {
        return;
    };
    n.boot("boot-1");
    // A clone of the VM copies its blanked guestinfo; the platform gives a new instance-id
    // but (here) no userdata: the old instance's userdata must not be replayed.
    n.platform("vm-2", "---");
    let out = n.cmd("run", "boot-2").arg("--exec").output().unwrap();
    assert_eq!(
        (n.lines("bootcount"), n.lines("runcount")),
        (1, 1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // With its own userdata the clone runs everything again, per-instance steps included.
    n.platform("vm-3", USERDATA);
    n.boot("boot-3");
    assert_eq!((n.lines("bootcount"), n.lines("runcount")), (2, 2));
    assert_eq!(
        std::fs::read_to_string(n.root.join("var/lib/nodeagent/previous-instance-id")).unwrap(),
        "vm-2\n"
    );
}

fn plan_steps(n: &Node) -> Vec<(String, String)> {
    let out = n.cmd("plan", "b").arg("--json").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_string(),
                format!(
                    "{} {}",
                    s["stage"].as_str().unwrap(),
                    s["frequency"].as_str().unwrap()
                ),
            )
        })
        .collect()
}

#[test]
fn growpart_and_resizefs_are_planned_every_boot_first_in_the_main_stage_and_switch_off() {
    let Some(n) = Node::new("vm-1") else {
        return;
    };
    let steps = plan_steps(&n);
    let grow: Vec<_> = steps
        .iter()
        .filter(|(id, _)| id == "growpart" || id == "resizefs")
        .collect();
    // Off the boot's path to multi-user (the local stage runs before network-pre.target),
    // yet before anything of the userdata: the first two steps of the main stage.
    let first_main: Vec<&str> = steps
        .iter()
        .filter(|(_, s)| s.starts_with("main "))
        .take(2)
        .map(|(id, _)| id.as_str())
        .collect();
    assert_eq!(first_main, ["growpart", "resizefs"]);
    assert_eq!(
        grow,
        [
            &("growpart".to_string(), "main per-boot".to_string()),
            &("resizefs".to_string(), "main per-boot".to_string())
        ]
    );
    // Cloud-config switches them off, as with cloud-init.
    n.platform(
        "vm-1",
        &format!("{USERDATA}growpart:\n  mode: \"off\"\nresize_rootfs: false\n"),
    );
    assert!(
        !plan_steps(&n)
            .iter()
            .any(|(id, _)| id == "growpart" || id == "resizefs")
    );
    // `mode: false` (a YAML boolean) is off too; `noblock` still resizes.
    n.platform(
        "vm-1",
        &format!("{USERDATA}growpart:\n  mode: false\nresize_rootfs: noblock\n"),
    );
    let ids: Vec<String> = plan_steps(&n).into_iter().map(|s| s.0).collect();
    assert!(!ids.contains(&"growpart".into()) && ids.contains(&"resizefs".into()));
    // So does the image config.
    n.platform("vm-1", USERDATA);
    std::fs::create_dir_all(n.root.join("etc/nodeagent")).unwrap();
    std::fs::write(
        n.root.join("etc/nodeagent/config.yaml"),
        "growpart:\n  mode: \"off\"\nresize_rootfs: false\n",
    )
    .unwrap();
    assert!(
        !plan_steps(&n)
            .iter()
            .any(|(id, _)| id == "growpart" || id == "resizefs")
    );
    // An unknown mode is an error naming the key, before anything is done.
    n.platform("vm-1", &format!("{USERDATA}growpart:\n  mode: gpart\n"));
    let out = n.cmd("plan", "b").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("growpart.mode") && err.contains("gpart"),
        "{err}"
    );
}

#[test]
fn under_root_the_disk_steps_never_touch_the_host() {
    // `run --root DIR --exec` must not grow the test host's root: the steps finish as skipped.
    let Some(n) = Node::new("vm-1") else {
        return;
    };
    let out = n
        .cmd("run", "b")
        .args(["--stage", "main", "--exec"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let journal = std::fs::read_to_string(
        n.root
            .join("var/lib/nodeagent/instances/vm-1/journal.jsonl"),
    )
    .unwrap();
    for step in ["growpart", "resizefs"] {
        assert!(
            journal
                .lines()
                .any(|l| l.contains(&format!("\"step\":\"{step}\""))
                    && l.contains("\"result\":\"skipped\"")),
            "{journal}"
        );
    }
}
