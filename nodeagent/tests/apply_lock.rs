//! Two `nodeagent run` started together on one target: the run lock covers the whole apply,
//! and the second run reads the journal again once it holds the lock, so an `append` is
//! applied once, not twice (issue 13).

use std::path::Path;
use std::process::{Command, Stdio};

fn run(d: &Path, r: &Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["run", "--transport"])
        .arg(format!("dir:{}", d.display()))
        .arg("--root")
        .arg(r)
        .env("NODEAGENT_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn two_runs_at_once_append_once() {
    let mut files = String::new();
    for i in 0..40 {
        files.push_str(&format!("- path: /etc/f{i}\n  content: \"{i}\\n\"\n"));
    }
    let userdata = format!(
        "#cloud-config\nwrite_files:\n{files}- path: /etc/motd\n  append: true\n  content: \"added\\n\"\n"
    );
    for round in 0..8 {
        let t = tempfile::tempdir().unwrap();
        let (d, r) = (t.path().join("d"), t.path().join("r"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::create_dir_all(r.join("etc")).unwrap();
        std::fs::write(r.join("etc/motd"), "welcome\n").unwrap();
        std::fs::write(
            d.join("guestinfo.metadata"),
            "instance-id: i-lock\nlocal-hostname: node1\n",
        )
        .unwrap();
        std::fs::write(d.join("guestinfo.userdata"), &userdata).unwrap();
        let (a, b) = (run(&d, &r), run(&d, &r));
        for c in [a, b] {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(
            std::fs::read_to_string(r.join("etc/motd")).unwrap(),
            "welcome\nadded\n",
            "round {round}: the append was applied twice"
        );
    }
}
