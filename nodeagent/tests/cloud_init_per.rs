//! `packaging/cloud-init-per` (what the nodeagent package installs as /usr/bin/cloud-init-per)
//! behaves as cloud-init 22.4's script: frequencies, semaphore names and places, exit status.
//! Paths are moved under a temporary root with CLOUD_INIT_PER_ROOT.

mod prereq;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/cloud-init-per")
}

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

fn per(root: &Path, args: &[&str]) -> Output {
    Command::new("sh")
        .arg(script())
        .args(args)
        .env("CLOUD_INIT_PER_ROOT", root)
        .output()
        .expect("run sh")
}

/// A command that appends one line to `log` each time it runs, then exits with `code`.
fn marker(log: &Path, code: i32) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!("echo ran >> '{}'; exit {code}", log.display()),
    ]
}

fn runs(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

fn call(root: &Path, freq: &str, name: &str, cmd: &[String]) -> Output {
    let mut args = vec![freq, name];
    args.extend(cmd.iter().map(String::as_str));
    per(root, &args)
}

fn sem_status(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (status, time) = text.trim_end().split_once('\t').expect("status<TAB>time");
    assert!(time.parse::<u64>().is_ok(), "epoch seconds: {text:?}");
    status.to_string()
}

#[test]
fn once_runs_once_and_names_its_semaphore_as_cloud_init() {
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("log");
    if !is_root() {
        let out = call(d.path(), "once", "x", &marker(&log, 0));
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("must be root"));
        return;
    }
    let cmd = marker(&log, 0);
    for _ in 0..3 {
        assert_eq!(
            call(d.path(), "once", "swapoff-once", &cmd).status.code(),
            Some(0)
        );
    }
    assert_eq!(runs(&log), 1, "once: ran exactly once");
    // Dashes become underscores, as cloud-init names it.
    let sem = d.path().join("var/lib/cloud/sem/bootper.swapoff_once.once");
    assert_eq!(sem_status(&sem), "0");
    // A new instance-id does not matter for `once`.
    std::fs::create_dir_all(d.path().join("var/lib/nodeagent")).unwrap();
    std::fs::write(d.path().join("var/lib/nodeagent/instance-id"), "vm-2\n").unwrap();
    call(d.path(), "once", "swapoff-once", &cmd);
    assert_eq!(runs(&log), 1);
}

#[test]
fn always_runs_every_time_and_keeps_the_exit_status() {
    if !is_root() {
        return; // covered by the non-root branch of the test above
    }
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("log");
    let out = call(d.path(), "always", "fails", &marker(&log, 3));
    assert_eq!(out.status.code(), Some(3), "the command's exit status");
    let out = call(d.path(), "always", "fails", &marker(&log, 3));
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(runs(&log), 2);
    assert_eq!(
        sem_status(&d.path().join("var/lib/cloud/sem/bootper.fails.always")),
        "3"
    );
    // A failed `once` command is recorded too, and not run again (as cloud-init).
    let out = call(d.path(), "once", "f1", &marker(&log, 5));
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(
        call(d.path(), "once", "f1", &marker(&log, 5)).status.code(),
        Some(0)
    );
    assert_eq!(runs(&log), 3);
}

#[test]
fn instance_follows_nodeagents_instance_id() {
    if !prereq::privileged(&[]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("log");
    let cmd = marker(&log, 0);
    // Before nodeagent has chosen an instance: a clear failure, the command not run.
    let out = call(d.path(), "instance", "x", &cmd);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("instance-id"));
    assert_eq!(runs(&log), 0);

    let iid = d.path().join("var/lib/nodeagent/instance-id");
    std::fs::create_dir_all(iid.parent().unwrap()).unwrap();
    std::fs::write(&iid, "vm/1\n").unwrap();
    call(d.path(), "instance", "mk-fs", &cmd);
    call(d.path(), "instance", "mk-fs", &cmd);
    assert_eq!(runs(&log), 1);
    assert_eq!(
        sem_status(
            &d.path()
                .join("var/lib/cloud/instances/vm_1/sem/bootper.mk_fs.instance")
        ),
        "0"
    );
    // A clone (new instance-id) runs it again.
    std::fs::write(&iid, "vm-2\n").unwrap();
    call(d.path(), "instance", "mk-fs", &cmd);
    assert_eq!(runs(&log), 2);
}

#[test]
fn usage_errors_as_cloud_init() {
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("log");
    let out = per(d.path(), &["once", "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("Usage: cloud-init-per"));
    assert_eq!(per(d.path(), &["--help"]).status.code(), Some(0));
    if !prereq::privileged(&[]) {
        return;
    }
    let out = call(d.path(), "weekly", "x", &marker(&log, 0));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid frequency: weekly"));
    let out = call(d.path(), "once", "a/b", &marker(&log, 0));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("name cannot contain a /"));
    assert_eq!(runs(&log), 0);
    // A legacy semaphore with dashes is adopted, not run again.
    let sem_dir = d.path().join("var/lib/cloud/sem");
    std::fs::create_dir_all(&sem_dir).unwrap();
    std::fs::write(sem_dir.join("bootper.old-name.once"), "0\t1\n").unwrap();
    call(d.path(), "once", "old-name", &marker(&log, 0));
    assert_eq!(runs(&log), 0);
    assert!(sem_dir.join("bootper.old_name.once").exists());
}

/// `plan` shows a `cloud-init-per` bootcmd as a command step like any other, saying which
/// semaphore decides whether it runs again.
#[test]
fn plan_shows_cloud_init_per_steps() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("guestinfo.metadata"), "instance-id: vm/7\n").unwrap();
    std::fs::write(
        d.path().join("guestinfo.userdata"),
        "#cloud-config\nbootcmd:\n  - \"cloud-init-per once swapoff-once swapoff -a\"\n  - [cloud-init-per, instance, mk-fs, mkfs.ext4, /dev/vdb]\n  - echo plain\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["plan", "--transport"])
        .arg(format!("dir:{}", d.path().display()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let line = |id: &str| {
        text.lines()
            .find(|l| l.contains(id))
            .unwrap_or_else(|| panic!("{id} missing:\n{text}"))
            .to_string()
    };
    let l0 = line("bootcmd[0]");
    assert!(
        l0.contains("sh -c cloud-init-per once swapoff-once swapoff -a")
            && l0.ends_with("[cloud-init-per: once per node, semaphore /var/lib/cloud/sem/bootper.swapoff_once.once]"),
        "{l0}"
    );
    assert!(
        line("bootcmd[1]").ends_with(
            "[cloud-init-per: once per instance, semaphore /var/lib/cloud/instances/vm_7/sem/bootper.mk_fs.instance]"
        ),
        "{text}"
    );
    assert!(!line("bootcmd[2]").contains("cloud-init-per"));
}
