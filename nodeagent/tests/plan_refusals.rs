//! Never half-apply (issue 13, part B): every input class that used to pass `plan` and fail in
//! `apply` after earlier steps had written private keys and users is now refused by the plan,
//! checked against the target root. One test per class, each asserting:
//! * `nodeagent plan` refuses it (exit 1) with the place: key path and userdata line;
//! * `nodeagent run` refuses it the same way, within a bound, and
//! * the target root is byte-identical afterwards (the status report a refused run publishes
//!   in `/run/nodeagent` and `/var/log/nodeagent` is not part of the comparison).
//!
//! Every userdata starts with `write_files[0]: /etc/kubernetes/pki/ca.key`: the private key an
//! apply that fails late would already have written.

mod hostile_common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FACTS: &str = "hostname: node1\nlocal-ipv4: 10.0.0.5\nnetwork-renderer: networkd\n";
const KILL_AFTER: Duration = Duration::from_secs(60);
/// Wall time a refusal may take (it is a plan-time check: milliseconds in practice).
const REFUSED_WITHIN: Duration = Duration::from_secs(20);
const HEAD: &str = "#cloud-config\nwrite_files:\n- path: /etc/kubernetes/pki/ca.key\n  permissions: '0600'\n  content: |\n    -----BEGIN PRIVATE KEY-----\n    c2VjcmV0\n    -----END PRIVATE KEY-----\n";

struct Case {
    dir: tempfile::TempDir,
    root: PathBuf,
    data: PathBuf,
    path_env: Option<String>,
}

/// A target root with a user database (capv is uid 1000) and the shadow tools (as empty
/// stand-ins: a refused plan never runs them).
fn case(userdata: &str) -> Case {
    let dir = tempfile::tempdir().unwrap();
    let (data, root) = (dir.path().join("d"), dir.path().join("r"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/bash\ncapv:x:1000:1000::/home/capv:/bin/bash\n",
    )
    .unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\ncapv:x:1000:\n").unwrap();
    std::fs::create_dir_all(root.join("usr/sbin")).unwrap();
    for tool in ["useradd", "usermod", "groupadd", "chpasswd"] {
        std::fs::write(root.join("usr/sbin").join(tool), "").unwrap();
    }
    std::fs::write(
        data.join("guestinfo.metadata"),
        "instance-id: i-refuse\nlocal-hostname: node1\n",
    )
    .unwrap();
    std::fs::write(data.join("guestinfo.userdata"), userdata).unwrap();
    std::fs::write(dir.path().join("facts.yaml"), FACTS).unwrap();
    Case {
        dir,
        root,
        data,
        path_env: None,
    }
}

#[derive(Debug)]
struct Out {
    code: i32,
    stderr: String,
    elapsed: Duration,
    /// CPU time of the agent and what it waited for: what the time bound is checked on
    /// (hostile_common::Measured says why not wall time).
    cpu: Duration,
}

fn agent(c: &Case, cmd: &str) -> Out {
    let start = Instant::now();
    let mut agent = hostile_common::measured(env!("CARGO_BIN_EXE_nodeagent"));
    agent
        .command
        .arg(cmd)
        .arg("--transport")
        .arg(format!("dir:{}", c.data.display()))
        .arg("--root")
        .arg(&c.root)
        .arg("--facts")
        .arg(c.dir.path().join("facts.yaml"))
        .env("NODEAGENT_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(p) = &c.path_env {
        agent.command.env("PATH", p);
    }
    let m = agent.run(KILL_AFTER);
    let out = m.output;
    assert!(
        !m.killed,
        "nodeagent {cmd} did not finish in {KILL_AFTER:?}"
    );
    Out {
        code: out.status.code().unwrap_or(-1),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: start.elapsed(),
        cpu: m.cpu,
    }
}

/// Type, mode, owner and content of everything under `root` but the run's own reports.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            let report = |r: &str| rel.starts_with(r) || Path::new(r).starts_with(&rel);
            // nodeagent's status and events, and the same report in cloud-init's layout.
            if [
                "run/nodeagent",
                "var/log/nodeagent",
                "run/cloud-init",
                "var/lib/cloud",
                "var/log/cloud-init.log",
                "var/log/cloud-init-output.log",
            ]
            .iter()
            .any(|r| report(r))
            {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_file() {
                format!("file {:?}", std::fs::read(&p).unwrap())
            } else {
                String::from("dir/other")
            };
            out.insert(
                rel,
                format!("{:o} {}:{} {what}", m.mode(), m.uid(), m.gid()),
            );
            if m.is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// 1-based line of the first userdata line containing `marker`.
fn line_of(userdata: &str, marker: &str) -> usize {
    userdata
        .lines()
        .position(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("{marker:?} not in the userdata"))
        + 1
}

/// `plan` and `run` both refuse with `place` (and the userdata line of `marker`, when given),
/// and the target root is unchanged. Returns run's stderr.
fn refused_case(c: &Case, userdata: &str, place: &str, marker: Option<&str>, says: &str) -> String {
    let before = snapshot(&c.root);
    let want_place = match marker {
        Some(m) => format!("line {} column", line_of(userdata, m)),
        None => String::new(),
    };
    let mut last = String::new();
    for cmd in ["plan", "run"] {
        let out = agent(c, cmd);
        assert_eq!(out.code, 1, "nodeagent {cmd}: want exit 1\n{}", out.stderr);
        let line = out
            .stderr
            .lines()
            .find(|l| l.starts_with(&format!("nodeagent {cmd}: ")))
            .unwrap_or_else(|| panic!("no error line from {cmd}:\n{}", out.stderr));
        assert!(
            line.contains(place),
            "{cmd}: want place {place:?} in\n{line}"
        );
        assert!(
            line.contains(&want_place),
            "{cmd}: want {want_place:?} in\n{line}"
        );
        assert!(line.contains(says), "{cmd}: want {says:?} in\n{line}");
        assert!(
            out.cpu < REFUSED_WITHIN,
            "{cmd} took {:?} CPU ({:?} wall)",
            out.cpu,
            out.elapsed
        );
        last = out.stderr;
    }
    assert_eq!(before, snapshot(&c.root), "the target root changed");
    assert!(
        !c.root.join("etc/kubernetes").exists(),
        "the private key was written"
    );
    last
}

fn refused(extra: &str, place: &str, marker: Option<&str>, says: &str) -> String {
    let userdata = format!("{HEAD}{extra}");
    let c = case(&userdata);
    refused_case(&c, &userdata, place, marker, says)
}

// ---- users ----

#[test]
fn uid_collision() {
    refused(
        "users:\n- name: bob\n  uid: 1000\n",
        "users[0].uid",
        Some("uid: 1000"),
        "uid 1000 already belongs to user 'capv'",
    );
}

#[test]
fn missing_primary_group() {
    refused(
        "users:\n- name: bob\n  primary_group: nosuchgroup\n",
        "users[0].primary_group",
        Some("primary_group"),
        "group 'nosuchgroup' does not exist",
    );
}

#[test]
fn colon_in_gecos() {
    refused(
        "users:\n- name: bob\n  gecos: \"Bob:0:0\"\n",
        "users[0].gecos",
        Some("gecos"),
        "must not contain ':'",
    );
}

#[test]
fn newline_in_gecos() {
    refused(
        "users:\n- name: bob\n  gecos: \"Bob\\nevil::0:0::/:/bin/sh\"\n",
        "users[0].gecos",
        Some("gecos"),
        "line break",
    );
}

#[test]
fn colon_in_passwd_is_refused_without_showing_it() {
    let err = refused(
        "users:\n- name: bob\n  passwd: \"$6$salt$hash:with:colons\"\n",
        "users[0].passwd",
        Some("passwd:"),
        "value not shown",
    );
    assert!(!err.contains("with:colons"), "{err}");
}

#[test]
fn newline_in_sudo_rule() {
    refused(
        "users:\n- name: bob\n  sudo: \"ALL=(ALL) ALL\\nALL ALL=(ALL) NOPASSWD:ALL\"\n",
        "users[0].sudo[0]",
        Some("sudo:"),
        "one non-empty line",
    );
}

#[test]
fn newline_in_ssh_key() {
    refused(
        "users:\n- name: bob\n  ssh_authorized_keys:\n  - \"ssh-ed25519 AAAA bob\\nssh-ed25519 BBBB evil\"\n",
        "users[0].ssh_authorized_keys[0]",
        Some("ssh-ed25519"),
        "one line",
    );
}

#[test]
fn relative_home_directory() {
    refused(
        "users:\n- name: bob\n  homedir: home/bob\n",
        "users[0].homedir",
        Some("homedir"),
        "absolute",
    );
}

/// Users are written natively (apply/accounts.rs), so an image without the shadow tools is
/// no longer refused: here one without useradd, /etc/shadow and login.defs gets its user as
/// useradd makes it there (password field in /etc/passwd, shadow's compiled-in defaults:
/// no user group, GROUP 100).
#[test]
fn image_without_shadow_tools_gets_its_users_natively() {
    let userdata = format!("{HEAD}users:\n- name: bob\n");
    let c = case(&userdata);
    std::fs::remove_file(c.root.join("usr/sbin/useradd")).unwrap();
    let plan = agent(&c, "plan");
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let run = agent(&c, "run");
    assert!(matches!(run.code, 0 | 2), "{}", run.stderr);
    let passwd = std::fs::read_to_string(c.root.join("etc/passwd")).unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with("bob:!:1001:100::/home/bob:")),
        "{passwd}"
    );
}

// ---- NTP ----

#[test]
fn unsupported_ntp_client() {
    // An image without any NTP client is not refused since main's parity work: cloud-init
    // configures chrony anyway (it would install it) and nodeagent writes the file and warns
    // (ntp `no_client_installed_writes_chrony_conf_and_warns`), so apply cannot fail
    // there. A client apply cannot configure is refused before any write.
    refused(
        "ntp:\n  ntp_client: ntpd\n",
        "ntp.ntp_client",
        Some("ntp_client: ntpd"),
        "is not supported",
    );
}

#[test]
fn ntp_server_with_a_newline() {
    let userdata = format!("{HEAD}ntp:\n  servers:\n  - \"10.0.0.1\\nmakestep 1000 -1\"\n");
    let c = case(&userdata);
    std::fs::create_dir_all(c.root.join("etc/chrony")).unwrap();
    refused_case(
        &c,
        &userdata,
        "ntp.servers[0]",
        Some("10.0.0.1"),
        "not a host name",
    );
}

// ---- disks ----

fn disk_image(c: &Case) -> String {
    let p = c.dir.path().join("disk.img");
    std::fs::File::create(&p).unwrap().set_len(8 << 20).unwrap();
    p.display().to_string()
}

#[test]
fn disk_layout_over_100_percent() {
    refused(
        "disk_setup:\n  /dev/sdb:\n    table_type: gpt\n    layout: [60, 50]\n",
        "disk_setup./dev/sdb.layout",
        Some("layout:"),
        "add up to 110 %",
    );
}

#[test]
fn five_mbr_partitions() {
    refused(
        "disk_setup:\n  /dev/sdb:\n    layout: [20, 20, 20, 20, 20]\n",
        "disk_setup./dev/sdb.layout",
        Some("layout:"),
        "at most 4",
    );
}

#[test]
fn unknown_sgdisk_type_code() {
    refused(
        "disk_setup:\n  /dev/sdb:\n    table_type: gpt\n    layout: [[50, 8300], [50, 'ZZ00']]\n",
        "disk_setup./dev/sdb.layout",
        Some("layout:"),
        "unknown GPT partition type",
    );
}

#[test]
fn sgdisk_type_codes_become_guids_in_the_plan() {
    let userdata = format!(
        "{HEAD}disk_setup:\n  /dev/sdb:\n    table_type: gpt\n    layout: [[50, 82], [50, '8e00']]\n"
    );
    let c = case(&userdata);
    let dev = disk_image(&c);
    let userdata = userdata.replace("/dev/sdb", &dev);
    std::fs::write(c.data.join("guestinfo.userdata"), &userdata).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["plan", "--json", "--transport"])
        .arg(format!("dir:{}", c.data.display()))
        .arg("--root")
        .arg(&c.root)
        .arg("--facts")
        .arg(c.dir.path().join("facts.yaml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // cloud-init pads 82 to sgdisk's 8200 (Linux swap); 8e00 is Linux LVM.
    assert!(
        text.contains("0657FD6D-A4AB-43C4-84E5-0933C84B4F4F"),
        "{text}"
    );
    assert!(
        text.contains("E6D6D379-F507-44C2-A23C-238F2A3DF928"),
        "{text}"
    );
}

#[test]
fn missing_sfdisk() {
    let userdata = format!("{HEAD}disk_setup:\n  DEV:\n    layout: true\n");
    let c = case(&userdata);
    let dev = disk_image(&c);
    let userdata = userdata.replace("DEV", &dev);
    std::fs::write(c.data.join("guestinfo.userdata"), &userdata).unwrap();
    // A PATH with nothing on it: no sfdisk, no blkid.
    let empty = c.dir.path().join("empty-bin");
    std::fs::create_dir(&empty).unwrap();
    let c = Case {
        path_env: Some(empty.display().to_string()),
        ..c
    };
    refused_case(
        &c,
        &userdata,
        &format!("disk_setup.{dev}"),
        Some("layout: true"),
        "sfdisk is not installed",
    );
}

#[test]
fn missing_mkfs() {
    let userdata = format!("{HEAD}fs_setup:\n- device: DEV\n  filesystem: nosuchfs\n");
    let c = case(&userdata);
    let dev = disk_image(&c);
    let userdata = userdata.replace("DEV", &dev);
    std::fs::write(c.data.join("guestinfo.userdata"), &userdata).unwrap();
    refused_case(
        &c,
        &userdata,
        "fs_setup[0].filesystem",
        Some("nosuchfs"),
        "mkfs.nosuchfs is not installed",
    );
}

// ---- paths ----

#[test]
fn path_component_over_name_max() {
    let long = "x".repeat(256);
    refused(
        &format!("- path: /etc/{long}\n  content: hi\n"),
        "write_files[1].path",
        Some(&long),
        "the filesystem limit is 255",
    );
}

#[test]
fn path_over_path_max() {
    let long = vec!["y".repeat(200); 21].join("/");
    refused(
        &format!("- path: /{long}\n  content: hi\n"),
        "write_files[1].path",
        Some(&long),
        "the limit is",
    );
}

#[test]
fn target_is_a_directory() {
    let userdata = format!("{HEAD}- path: /etc/x\n  content: hi\n");
    let c = case(&userdata);
    std::fs::create_dir(c.root.join("etc/x")).unwrap();
    refused_case(
        &c,
        &userdata,
        "write_files[1].path",
        Some("/etc/x"),
        "is a directory",
    );
}

#[test]
fn parent_is_a_file() {
    let userdata = format!("{HEAD}- path: /etc/x/y/z\n  content: hi\n");
    let c = case(&userdata);
    std::fs::write(c.root.join("etc/x"), "a file").unwrap();
    refused_case(
        &c,
        &userdata,
        "write_files[1].path",
        Some("/etc/x"),
        "/etc/x is not a directory",
    );
}

#[test]
fn one_entry_under_another() {
    refused(
        "- path: /etc/a\n  content: file\n- path: /etc/a/b\n  content: under it\n",
        "write_files[2].path",
        Some("/etc/a/b"),
        "/etc/a is a file",
    );
}

#[test]
fn symlink_loop_in_a_parent() {
    let userdata = format!("{HEAD}- path: /etc/l1/x\n  content: hi\n");
    let c = case(&userdata);
    std::os::unix::fs::symlink("/etc/l2", c.root.join("etc/l1")).unwrap();
    std::os::unix::fs::symlink("/etc/l1", c.root.join("etc/l2")).unwrap();
    refused_case(
        &c,
        &userdata,
        "write_files[1].path",
        Some("/etc/l1/x"),
        "too many symlinks",
    );
}

#[test]
fn append_onto_a_fifo() {
    let userdata = format!("{HEAD}- path: /etc/fifo\n  append: true\n  content: hi\n");
    let c = case(&userdata);
    nix::unistd::mkfifo(
        &c.root.join("etc/fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    refused_case(
        &c,
        &userdata,
        "write_files[1].path",
        Some("/etc/fifo"),
        "is a FIFO",
    );
}

#[test]
fn unknown_owner_in_a_root_without_passwd() {
    let userdata = format!("{HEAD}- path: /etc/x\n  owner: capv:capv\n  content: hi\n");
    let c = case(&userdata);
    std::fs::remove_file(c.root.join("etc/passwd")).unwrap();
    std::fs::remove_file(c.root.join("etc/group")).unwrap();
    refused_case(
        &c,
        &userdata,
        "write_files[1]:/etc/x.owner",
        Some("/etc/x"),
        "user 'capv' does not exist",
    );
}

/// Not a refusal: the same userdata with the problem fixed applies, so the cases above
/// fail for their one problem and not for something in the common head.
#[test]
fn the_common_head_applies() {
    let c = case(HEAD);
    let out = agent(&c, "run");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(c.root.join("etc/kubernetes/pki/ca.key").is_file());
}
