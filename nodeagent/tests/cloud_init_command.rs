//! The `cloud-init` command (the binary run by that name, as the package's /usr/bin/cloud-init
//! link runs it) on a `--root` tree where nodeagent ran: what it answers for each outcome (done,
//! running, error, degraded, disabled), with cloud-init 25.1's keys and exit codes, and the files
//! nodeagent left in cloud-init's places. tests/cloud-init-surface compares the same with the real
//! cloud-init 22.4 and 25.1 in chroots; this test runs without root.

// Test code slices output it knows to be ASCII.
#![allow(clippy::string_slice)]

mod prereq;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// A node: platform data in `d` (dir transport), facts, a root `r`, and a `cloud-init` link to
/// the binary under test.
struct Node {
    _t: tempfile::TempDir,
    d: PathBuf,
    r: PathBuf,
    facts: PathBuf,
    cloud_init: PathBuf,
}

const OK: &str = "#cloud-config\nwrite_files:\n- path: /etc/demo.txt\n  content: hi\nruncmd:\n- echo hi from runcmd\n";
const FAILS: &str = "#cloud-config\nruncmd:\n- echo before the failure\n- exit 3\n";

/// cloud-init 25.1's `status --format json` keys (measured by tests/cloud-init-surface).
const JSON_KEYS: [&str; 13] = [
    "boot_status_code",
    "datasource",
    "detail",
    "errors",
    "extended_status",
    "init",
    "init-local",
    "last_update",
    "modules-config",
    "modules-final",
    "recoverable_errors",
    "stage",
    "status",
];

impl Node {
    fn new(userdata: &str) -> Node {
        let t = tempfile::tempdir().unwrap();
        let (d, r) = (t.path().join("d"), t.path().join("r"));
        for dir in [d.clone(), r.join("etc"), r.join("run/systemd/system")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(r.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
        let gid = nix::unistd::getegid().as_raw();
        std::fs::write(r.join("etc/group"), format!("root:x:0:\nadm:x:{gid}:\n")).unwrap();
        std::fs::write(d.join("guestinfo.userdata"), userdata).unwrap();
        std::fs::write(
            d.join("guestinfo.metadata"),
            "instance-id: vm-1\nlocal-hostname: cp-0\n",
        )
        .unwrap();
        let facts = t.path().join("facts.yaml");
        std::fs::write(&facts, "hostname: cp-0\nlocal-ipv4: 10.0.0.10\n").unwrap();
        let bin = t.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let cloud_init = bin.join("cloud-init");
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_nodeagent"), &cloud_init).unwrap();
        Node {
            _t: t,
            d,
            r,
            facts,
            cloud_init,
        }
    }

    /// `nodeagent run --stage STAGE --exec` on the dir transport, under the root.
    fn run(&self, stage: &str) -> Out {
        let o = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
            .args(["run", "--stage", stage, "--exec", "--transport"])
            .arg(format!("dir:{}", self.d.display()))
            .arg("--facts")
            .arg(&self.facts)
            .arg("--root")
            .arg(&self.r)
            .output()
            .unwrap();
        out(o)
    }

    fn cloud_init(&self, args: &[&str]) -> Out {
        out(self.ci_command(args).output().unwrap())
    }

    fn ci_command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.cloud_init);
        c.args(args).env("NODEAGENT_CLOUD_INIT_ROOT", &self.r);
        c
    }

    fn json(&self) -> (i32, Value) {
        let o = self.cloud_init(&["status", "--format", "json"]);
        let v = serde_json::from_str(&o.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", o.stdout, o.stderr));
        (o.code, v)
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.r.join(rel)).unwrap_or_default()
    }
}

fn out(o: std::process::Output) -> Out {
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

/// The two units' runs, with `cloud-init status --wait` started between them: it waits while
/// the main stage has not ended, and returns with `done` once it has.
#[test]
fn done_and_running_as_cloud_init_25_1_says_them() {
    let n = Node::new(OK);
    if !prereq::exec_root(&n.r, &[]) {
        return;
    }
    let o = n.cloud_init(&["status"]);
    assert_eq!((o.code, o.stdout.as_str()), (0, "status: not started\n"));
    let o = n.run("local");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let (code, v) = n.json();
    assert_eq!(code, 0);
    assert_eq!(v["status"], "running", "{v}");
    assert!(v["init-local"]["finished"].is_number(), "{v}");
    assert!(v["init"]["start"].is_null(), "{v}");
    let mut waiter = n
        .ci_command(&["status", "--wait"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert!(
        waiter.try_wait().unwrap().is_none(),
        "--wait returned while the boot runs"
    );
    let o = n.run("main");
    assert_eq!(o.code, 0, "{}", o.stderr);
    let w = waiter.wait_with_output().unwrap();
    assert_eq!(w.status.code(), Some(0));
    let text = String::from_utf8_lossy(&w.stdout);
    assert!(
        text.starts_with('.') && text.ends_with("status: done\n"),
        "{text:?}"
    );
    let (code, v) = n.json();
    assert_eq!(code, 0);
    assert_eq!(keys(&v), JSON_KEYS);
    assert_eq!(
        (
            &v["status"],
            &v["extended_status"],
            &v["datasource"],
            &v["stage"]
        ),
        (
            &Value::from("done"),
            &Value::from("done"),
            &Value::from("nodeagent"),
            &Value::Null
        )
    );
    assert_eq!(v["boot_status_code"], "enabled-by-generator");
    for stage in ["init-local", "init", "modules-config", "modules-final"] {
        assert!(v[stage]["finished"].is_number(), "{stage}: {v}");
    }
    let o = n.cloud_init(&["status", "--long"]);
    let long_keys: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| !l.starts_with('\t'))
        .map(|l| l.split(':').next().unwrap())
        .collect();
    assert_eq!(
        long_keys,
        [
            "status",
            "extended_status",
            "boot_status_code",
            "last_update",
            "detail",
            "errors",
            "recoverable_errors"
        ],
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains(
            "detail: DataSourceNodeagent [seed=dir]\nerrors: []\nrecoverable_errors: {}\n"
        ),
        "{}",
        o.stdout
    );
    // YAML: cloud-init's document start and end markers, the same data.
    let o = n.cloud_init(&["status", "--format", "yaml"]);
    assert!(
        o.stdout.starts_with("---\n") && o.stdout.ends_with("...\n\n"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("\nstatus: done\n"), "{}", o.stdout);

    // The files, where cloud-init keeps them.
    let link = |p: &str| std::fs::read_link(n.r.join(p)).unwrap();
    assert_eq!(
        link("run/cloud-init/status.json"),
        Path::new("../../var/lib/cloud/data/status.json")
    );
    assert_eq!(
        link("run/cloud-init/result.json"),
        Path::new("../../var/lib/cloud/data/result.json")
    );
    assert_eq!(
        link("var/lib/cloud/instance"),
        Path::new("/var/lib/cloud/instances/vm-1")
    );
    let result: Value = serde_json::from_str(&n.read("var/lib/cloud/data/result.json")).unwrap();
    assert_eq!(
        result,
        serde_json::json!({"v1": {"datasource": "DataSourceNodeagent [seed=dir]", "errors": []}})
    );
    assert!(
        n.read("var/lib/cloud/instances/vm-1/boot-finished")
            .contains(" - v. 25.1 (nodeagent ")
    );
    use std::os::unix::fs::MetadataExt;
    let mode = |p: &str| std::fs::metadata(n.r.join(p)).unwrap().mode() & 0o7777;
    assert_eq!(mode("run/cloud-init/instance-data.json"), 0o644);
    assert_eq!(mode("run/cloud-init/instance-data-sensitive.json"), 0o600);
    assert_eq!(mode("var/log/cloud-init.log"), 0o640);
    assert_eq!(mode("var/log/cloud-init-output.log"), 0o640);
    let output = n.read("var/log/cloud-init-output.log");
    assert!(output.contains("\nhi from runcmd\n"), "{output}");
    assert!(
        output.contains("running 'init-local' at ")
            && output.contains("running 'modules:final' at "),
        "{output}"
    );
    assert!(
        output.contains(" finished at ")
            && output.contains("Datasource DataSourceNodeagent [seed=dir]."),
        "{output}"
    );
    let log = n.read("var/log/cloud-init.log");
    assert!(log.lines().all(|l| l.contains(" - nodeagent[")), "{log}");

    // The rest of the command line.
    let o = n.cloud_init(&["query", "v1.instance_id"]);
    assert_eq!((o.code, o.stdout.as_str()), (0, "vm-1\n"));
    let o = n.cloud_init(&["query"]);
    assert_eq!(o.code, 1);
    assert!(
        o.stderr.contains("Expected one of the options"),
        "{}",
        o.stderr
    );
    let o = n.cloud_init(&["analyze", "blame"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout.starts_with("-- Boot Record 01 --\n")
            && o.stdout.contains("(modules-final/runcmd[0])"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.ends_with("1 boot records analyzed\n"));
    let o = n.cloud_init(&["--version"]);
    assert_eq!(o.code, 0);
    assert!(
        o.stdout.ends_with(&format!(
            "cloud-init 25.1 (nodeagent {})\n",
            env!("CARGO_PKG_VERSION")
        )),
        "{}",
        o.stdout
    );
    for args in [
        &["init", "--local"][..],
        &["devel", "render"],
        &["analyze", "dump"],
        &[],
    ] {
        let o = n.cloud_init(args);
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
    }
    let o = n.cloud_init(&["modules", "--mode=final"]);
    assert!(
        o.stderr.contains("'modules' is not provided on this node"),
        "{}",
        o.stderr
    );
    let tar = n.d.join("logs.tgz");
    let o = n.cloud_init(&["collect-logs", "-t", tar.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let f = std::fs::File::open(&tar).unwrap();
    let names: Vec<String> = tar::Archive::new(flate2::read::GzDecoder::new(f))
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    for want in [
        "var/log/cloud-init.log",
        "var/log/cloud-init-output.log",
        "run/cloud-init/status.json",
    ] {
        assert!(
            names
                .iter()
                .any(|n| n.starts_with("cloud-init-logs-") && n.ends_with(want)),
            "{want}: {names:?}"
        );
    }
    // clean: nodeagent's state, cloud-init's files but the seed, and with -l the logs.
    std::fs::create_dir_all(n.r.join("var/lib/cloud/seed/nocloud")).unwrap();
    let o = n.cloud_init(&["clean", "--logs"]);
    assert_eq!((o.code, o.stdout.as_str()), (0, ""), "{}", o.stderr);
    let left: Vec<String> = std::fs::read_dir(n.r.join("var/lib/cloud"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["seed"]);
    assert!(!n.r.join("var/log/cloud-init.log").exists());
    assert!(!n.r.join("var/lib/nodeagent/instance-id").exists());
}

/// The last runcmd item fails: `error`, exit 1, the error in the stage that ran it.
#[test]
fn a_failed_run_is_an_error_and_ends_the_wait() {
    let n = Node::new(FAILS);
    if !prereq::exec_root(&n.r, &[]) {
        return;
    }
    assert_eq!(n.run("local").code, 0);
    assert_eq!(n.run("main").code, 1);
    let (code, v) = n.json();
    assert_eq!(code, 1);
    assert_eq!(
        (&v["status"], &v["extended_status"]),
        (&Value::from("error"), &Value::from("error - done"))
    );
    let errors = v["modules-final"]["errors"].as_array().unwrap();
    assert!(
        errors.len() == 1 && errors[0].as_str().unwrap().starts_with("runcmd[1]"),
        "{v}"
    );
    assert_eq!(v["errors"], v["modules-final"]["errors"]);
    let o = n.cloud_init(&["status", "--wait", "--long"]);
    assert_eq!(o.code, 1);
    assert!(
        o.stdout
            .starts_with("status: error\nextended_status: error - done\n"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("errors:\n\t- runcmd[1]"), "{}", o.stdout);
    assert!(
        n.read("var/log/cloud-init-output.log")
            .contains("before the failure\n")
    );
    assert!(
        n.read("var/log/cloud-init.log")
            .contains("nodeagent[ERROR]: runcmd[1]")
    );
    assert!(
        n.read("var/lib/cloud/data/result.json")
            .contains("runcmd[1]")
    );
}

/// Refused userdata writes nothing but the report: cloud-init's status says error too.
#[test]
fn refused_userdata_is_an_error_in_cloud_init_status() {
    let n = Node::new("#cloud-config\nno_such_key: 1\n");
    let o = n.run("main");
    assert_eq!(o.code, 1, "{}", o.stderr);
    let (code, v) = n.json();
    assert_eq!(code, 1);
    assert_eq!(v["status"], "error");
    assert!(
        v["init"]["errors"][0]
            .as_str()
            .unwrap()
            .contains("no_such_key"),
        "{v}"
    );
    // With `compat: true` the same key is a warning: degraded, exit 2 (cloud-init 25.1's
    // schema warning is a recoverable error too).
    std::fs::create_dir_all(n.r.join("etc/nodeagent")).unwrap();
    std::fs::write(n.r.join("etc/nodeagent/config.yaml"), "compat: true\n").unwrap();
    assert_eq!(n.run("main").code, 2);
    let (code, v) = n.json();
    assert_eq!(code, 2, "{v}");
    assert_eq!(
        (&v["status"], &v["extended_status"]),
        (&Value::from("done"), &Value::from("degraded done"))
    );
    assert_eq!(v["errors"], serde_json::json!([]));
    assert!(
        v["recoverable_errors"]["WARNING"][0]
            .as_str()
            .unwrap()
            .contains("no_such_key"),
        "{v}"
    );
    let o = n.cloud_init(&["status"]);
    assert_eq!((o.code, o.stdout.as_str()), (2, "status: done\n"));
}

#[test]
fn disabled_and_schema() {
    let n = Node::new(OK);
    std::fs::create_dir_all(n.r.join("etc/nodeagent")).unwrap();
    std::fs::write(n.r.join("etc/nodeagent/disabled"), "").unwrap();
    let (code, v) = n.json();
    assert_eq!(code, 0);
    assert_eq!(
        (&v["status"], &v["boot_status_code"]),
        (
            &Value::from("disabled"),
            &Value::from("disabled-by-marker-file")
        )
    );
    assert_eq!(v["detail"], "nodeagent disabled by /etc/nodeagent/disabled");
    // --wait does not wait for a boot that will not come.
    let o = n.cloud_init(&["status", "--wait"]);
    assert_eq!((o.code, o.stdout.as_str()), (0, "status: disabled\n"));
    let good = n.d.join("good.yaml");
    std::fs::write(&good, OK).unwrap();
    let o = n.cloud_init(&["schema", "--config-file", good.to_str().unwrap()]);
    assert_eq!(
        (o.code, o.stdout.trim_end()),
        (0, format!("Valid schema {}", good.display()).as_str())
    );
    let bad = n.d.join("bad.yaml");
    std::fs::write(&bad, "#cloud-config\nruncmd: 3\n").unwrap();
    let o = n.cloud_init(&["schema", "--config-file", bad.to_str().unwrap()]);
    assert_eq!(o.code, 1);
    assert_eq!(o.stdout, format!("Invalid user-data {}\n", bad.display()));
    assert!(
        o.stderr.ends_with("Error: Invalid schema: user-data\n\n"),
        "{}",
        o.stderr
    );
    let o = n.cloud_init(&["schema", "--system"]);
    assert_eq!(o.code, 2);
}
