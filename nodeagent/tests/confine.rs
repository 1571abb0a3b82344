//! One symlink-safe root (confine.rs, issue 13 item 8): under `--root DIR`, a symlink planted
//! in DIR at any path the agent writes its own files to (state, status, events) or removes
//! (`clean`) leads somewhere inside DIR, never out of it. Each case plants one link to an
//! absolute host path (a directory beside DIR holding a canary) and runs the real binary;
//! that directory must be byte-identical afterwards.

mod prereq;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every file, directory and link under `dir` with its content.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let v = if m.is_dir() {
                todo.push(p.clone());
                "dir".to_string()
            } else if m.file_type().is_symlink() {
                format!("-> {}", std::fs::read_link(&p).unwrap().display())
            } else {
                String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned()
            };
            out.insert(p.strip_prefix(dir).unwrap().to_path_buf(), v);
        }
    }
    out
}

struct Case {
    _t: tempfile::TempDir,
    data: PathBuf,
    root: PathBuf,
    outside: PathBuf,
}

/// A root with `etc/`, a transport directory with metadata and a small userdata, and an
/// outside directory with canaries at the names the agent would write.
fn case() -> Case {
    let t = tempfile::tempdir().unwrap();
    let (data, root, outside) = (t.path().join("d"), t.path().join("r"), t.path().join("out"));
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(
        data.join("guestinfo.metadata"),
        "instance-id: i-confine\nlocal-hostname: node1\n",
    )
    .unwrap();
    std::fs::write(
        data.join("guestinfo.userdata"),
        "#cloud-config\nwrite_files:\n- path: /etc/hello\n  content: hi\n",
    )
    .unwrap();
    std::fs::create_dir_all(outside.join("nodeagent/instances")).unwrap();
    for f in ["canary", "status.json", "events.jsonl", "nodeagent/canary"] {
        std::fs::write(outside.join(f), "outside\n").unwrap();
    }
    Case {
        _t: t,
        data,
        root,
        outside,
    }
}

impl Case {
    /// Plant `rel` (in the root) as a symlink to `target` (a path under the outside dir).
    fn plant(&self, rel: &str, target: &str) {
        let link = self.root.join(rel);
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(self.outside.join(target), link).unwrap();
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_nodeagent"))
            .args(args)
            .arg("--root")
            .arg(&self.root)
            .env("NODEAGENT_LOG", "warn")
            .output()
            .unwrap()
    }

    fn agent(&self) -> std::process::Output {
        let transport = format!("dir:{}", self.data.display());
        self.run(&["run", "--transport", &transport])
    }

    /// Where the outside directory lands when resolved inside the root.
    fn inside(&self, rel: &str) -> PathBuf {
        self.root
            .join(self.outside.strip_prefix("/").unwrap())
            .join(rel)
    }
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn links_at_the_agents_own_paths_stay_inside_the_root() {
    // (link in the root, its target under the outside dir, a file the run must have made
    // inside the root where the link resolves to).
    let cases = [
        ("var/lib/nodeagent", "nodeagent", "instance-id"),
        ("var/lib", "", "nodeagent/instance-id"),
        ("run", "", "nodeagent/status.json"),
        ("run/nodeagent", "", "status.json"),
        ("var/log/nodeagent", "", "events.jsonl"),
        ("var", "", "lib/nodeagent/instance-id"),
    ];
    for (link, target, made) in cases {
        let c = case();
        c.plant(link, target);
        let before = snapshot(&c.outside);
        let out = c.agent();
        assert!(out.status.success(), "{link}: {}", stderr(&out));
        assert_eq!(
            snapshot(&c.outside),
            before,
            "{link}: the outside dir changed"
        );
        assert!(
            c.inside(target).join(made).is_file(),
            "{link}: {} was not written inside the root",
            c.inside(target).join(made).display()
        );
        assert_eq!(
            std::fs::read_to_string(c.root.join("etc/hello")).unwrap(),
            "hi"
        );
    }
}

#[test]
fn a_link_at_a_status_or_event_file_is_not_followed() {
    let c = case();
    c.plant("run/nodeagent/status.json", "status.json");
    c.plant("var/log/nodeagent/events.jsonl", "events.jsonl");
    let before = snapshot(&c.outside);
    let out = c.agent();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(snapshot(&c.outside), before);
    // The status file replaced the link (atomic rename); the event log refused to follow it.
    let status = c.root.join("run/nodeagent/status.json");
    assert!(std::fs::symlink_metadata(&status).unwrap().is_file());
    assert!(
        std::fs::read_to_string(&status)
            .unwrap()
            .contains("\"phase\"")
    );
}

#[test]
fn a_link_inside_the_state_directory_is_refused() {
    let c = case();
    c.plant("var/lib/nodeagent/instances", "nodeagent/instances");
    let before = snapshot(&c.outside);
    let out = c.agent();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("is a symlink in the agent's state directory; refused"),
        "{}",
        stderr(&out)
    );
    assert_eq!(snapshot(&c.outside), before);
}

#[test]
fn clean_removes_nothing_outside_the_root() {
    let c = case();
    assert!(c.agent().status.success());
    // Replace the root's /run with a link to a host directory holding a `nodeagent` dir.
    std::fs::remove_dir_all(c.root.join("run")).unwrap();
    c.plant("run", "");
    std::fs::remove_dir_all(c.root.join("var/log")).unwrap();
    c.plant("var/log", "");
    std::fs::write(c.outside.join("nodeagent-x.log"), "outside\n").unwrap();
    let before = snapshot(&c.outside);
    let out = c.run(&["clean", "--logs", "--machine-id"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(snapshot(&c.outside), before);
    assert_eq!(
        std::fs::read_to_string(c.root.join("etc/machine-id")).unwrap(),
        "uninitialized\n"
    );
    assert!(!c.root.join("var/lib/nodeagent/instance-id").exists());
}

#[test]
fn the_command_output_log_stays_inside_the_root() {
    let c = case();
    std::fs::write(
        c.data.join("guestinfo.userdata"),
        "#cloud-config\nruncmd:\n- echo confined-output\n",
    )
    .unwrap();
    c.plant("var/log", "");
    if !prereq::exec_root(&c.root, &[]) {
        return;
    }
    let before = snapshot(&c.outside);
    let transport = format!("dir:{}", c.data.display());
    let out = c.run(&["run", "--exec", "--transport", &transport]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(snapshot(&c.outside), before, "the outside dir changed");
    let log = std::fs::read_to_string(c.inside("nodeagent-output.log")).unwrap();
    assert!(log.contains("confined-output"), "{log}");
}

#[test]
fn clean_seed_removes_nothing_outside_the_root() {
    let c = case();
    // The default transports name the NoCloud seed /var/lib/cloud/seed/nocloud; the image's
    // var/lib/cloud is a link to a host directory holding such a seed.
    std::fs::create_dir_all(c.outside.join("seed/nocloud")).unwrap();
    std::fs::write(c.outside.join("seed/nocloud/user-data"), "outside\n").unwrap();
    c.plant("var/lib/cloud", "");
    let before = snapshot(&c.outside);
    let out = c.run(&["clean", "--seed"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(snapshot(&c.outside), before, "the outside dir changed");
}

/// Under `--root DIR --exec` a userdata command runs chrooted into DIR, as cloud-init would on
/// that node: it reads DIR's `/etc` (the file write_files put there), writes into DIR's `/etc`,
/// starts in `/`, and the host's `/etc` never sees its write.
#[test]
fn commands_under_root_exec_run_chrooted_into_the_root() {
    let c = case();
    if !prereq::exec_root(&c.root, &[]) {
        return;
    }
    let probe = format!("nodeagent-chroot-probe-{}", std::process::id());
    std::fs::write(
        c.data.join("guestinfo.userdata"),
        format!(
            "#cloud-config\nwrite_files:\n- path: /etc/hello\n  content: hi\nruncmd:\n\
             - read v < /etc/hello; echo \"$v seen from $(pwd)\" > /etc/{probe}\n"
        ),
    )
    .unwrap();
    let transport = format!("dir:{}", c.data.display());
    let out = c.run(&["run", "--exec", "--transport", &transport]);
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = std::fs::read_to_string(c.root.join("etc").join(&probe)).unwrap();
    assert_eq!(seen, "hi seen from /\n");
    assert!(
        !Path::new("/etc").join(&probe).exists(),
        "wrote the host's /etc"
    );
}

/// `--root R --exec` with a command but no `/bin/sh` in R: refused before any write (the
/// write_files entry before it is not applied, no state), not a runcmd failing with exit 127
/// after the earlier steps were done.
#[test]
fn root_exec_without_a_shell_is_refused_before_any_write() {
    let c = case();
    std::fs::write(
        c.data.join("guestinfo.userdata"),
        "#cloud-config\nwrite_files:\n- path: /etc/hello\n  content: hi\nruncmd:\n- echo hi\n",
    )
    .unwrap();
    let transport = format!("dir:{}", c.data.display());
    let out = c.run(&["run", "--exec", "--transport", &transport]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("runcmd[0]: --exec under --root: the root has no /bin/sh"),
        "{}",
        stderr(&out)
    );
    assert!(!c.root.join("etc/hello").exists(), "write_files applied");
    assert!(!c.root.join("var/lib/nodeagent").exists(), "state written");
}
