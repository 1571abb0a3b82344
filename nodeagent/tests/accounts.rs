//! The native account-database writer (`apply/accounts.rs`) against the shadow tools it
//! replaces: the same users and groups made by nodeagent in one overlay of the debootstrap'd
//! Debian 12 rootfs and by the image's own `groupadd`/`useradd`/`chpasswd`/`usermod` (run
//! here via chroot, with the arguments cloud-init gives them) in another; the databases must
//! be equal line for line and the homes file for file. Also: the lock `useradd` takes
//! (`lckpwdf`'s fcntl lock on /etc/.pwd.lock) is honoured.

mod apply_common;
use apply_common::*;
use libnodeagent::plan::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const HASH: &str = "$6$rounds=4096$saltsalt$Zp9mB1bHYmJ0i8qz0r3VzUqK9cKQh9A0Xq9b1sB3oL0YpD1b8m7m1Yc2zK1tQk0a3r6Rk5w1pI2y8u0cN9v1.";

fn user_step(u: UserSpec) -> Step {
    step(
        &format!("users:{}", u.name),
        RunStage::Main,
        Frequency::PerInstance,
        Action::User(u),
    )
}

/// Users covering what cloud-init passes to useradd, and a group step adding members.
fn accounts_plan() -> Plan {
    plan(
        "vm-accounts",
        vec![
            user_step(UserSpec {
                name: "capv".into(),
                gecos: Some("Cluster API".into()),
                shell: Some("/bin/bash".into()),
                groups: vec!["sudo".into(), "adm".into()],
                lock_passwd: true,
                ..Default::default()
            }),
            user_step(UserSpec {
                name: "ops".into(),
                homedir: Some("/srv/a/b/ops".into()),
                primary_group: Some("users".into()),
                groups: vec!["newgrp".into()],
                passwd: Some(HASH.into()),
                inactive: Some("5".into()),
                uid: Some(2500),
                ..Default::default()
            }),
            user_step(UserSpec {
                name: "low".into(),
                uid: Some(500),
                lock_passwd: true,
                ..Default::default()
            }),
            user_step(UserSpec {
                name: "dev".into(),
                no_create_home: true,
                passwd: Some(HASH.into()),
                lock_passwd: true,
                ..Default::default()
            }),
            user_step(UserSpec {
                name: "svc".into(),
                system: true,
                inactive: Some("5".into()),
                ..Default::default()
            }),
            user_step(UserSpec {
                name: "nog".into(),
                no_user_group: true,
                lock_passwd: true,
                ..Default::default()
            }),
            user_step(UserSpec {
                name: "exp".into(),
                expiredate: Some("2030-01-31".into()),
                inactive: Some("7".into()),
                ..Default::default()
            }),
            user_step(UserSpec {
                name: "sysgrp".into(),
                system: true,
                groups: vec!["adm".into()],
                ..Default::default()
            }),
            step(
                "groups:team",
                RunStage::Main,
                Frequency::PerInstance,
                Action::Group(GroupSpec {
                    name: "team".into(),
                    members: vec!["capv".into(), "ghost".into(), "ops".into()],
                }),
            ),
        ],
    )
}

/// The same through the image's tools, as cloud-init runs them.
fn with_tools(root: &Path) {
    let sh = |cmd: &str, stdin: Option<&str>| {
        use std::io::Write;
        let mut c = Command::new("chroot")
            .arg(root)
            .args(["sh", "-c", cmd])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin
            .take()
            .unwrap()
            .write_all(stdin.unwrap_or("").as_bytes())
            .unwrap();
        assert!(c.wait().unwrap().success(), "{cmd}");
    };
    sh(
        "useradd --comment 'Cluster API' --shell /bin/bash --groups sudo,adm -m capv",
        None,
    );
    sh("usermod --lock capv", None);
    sh("groupadd newgrp", None);
    sh(
        "useradd --home /srv/a/b/ops --gid users --inactive 5 --uid 2500 --groups newgrp -m ops",
        None,
    );
    sh("chpasswd -e", Some(&format!("ops:{HASH}\n")));
    sh("useradd --uid 500 -m low && usermod --lock low", None);
    sh("useradd -M dev", None);
    sh("chpasswd -e", Some(&format!("dev:{HASH}\n")));
    sh("usermod --lock dev", None);
    sh("useradd --inactive 5 --system -M svc", None);
    sh("useradd --no-user-group -m nog && passwd -l nog", None);
    sh("useradd --expiredate 2030-01-31 --inactive 7 -m exp", None);
    sh("useradd --groups adm --system -M sysgrp", None);
    sh(
        "groupadd team && usermod -a -G team capv && usermod -a -G team ops",
        None,
    );
}

fn day() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 86_400
}

/// The homes and what they hold, minus ~/.ssh (nodeagent makes it as cloud-init's
/// ssh_authkey_fingerprints does; the tools alone do not).
fn homes(root: &Path) -> Vec<(String, String)> {
    ["home", "srv"]
        .iter()
        .flat_map(|d| snapshot(&root.join(d), &|p: &str| p.split('/').any(|c| c == ".ssh")))
        .collect()
}

#[test]
fn native_writer_matches_the_shadow_tools() {
    let Some(fs) = rootfs() else {
        return;
    };
    let native = Overlay::new(&fs);
    let tools = Overlay::new(&fs);
    let day0 = day();
    run(&native.root, &accounts_plan(), false, false, "b").unwrap();
    with_tools(&tools.root);
    // Both stamp today as the last password change: compared unless midnight passed.
    let same_day = day() == day0;
    for db in ["passwd", "shadow", "group", "gshadow", "subuid", "subgid"] {
        let read = |r: &Path| std::fs::read_to_string(r.join("etc").join(db)).unwrap();
        if db == "shadow" && !same_day {
            continue;
        }
        assert_eq!(
            read(&native.root),
            read(&tools.root),
            "/etc/{db}: nodeagent vs the shadow tools"
        );
        let meta = |r: &Path| {
            let p = r.join("etc").join(db);
            (mode(&p), ids(&p))
        };
        assert_eq!(
            meta(&native.root),
            meta(&tools.root),
            "/etc/{db} mode and owner"
        );
    }
    assert_eq!(homes(&native.root), homes(&tools.root));
    assert!(
        !native.root.join("home/svc").exists(),
        "system users get no home"
    );
}

/// The failures useradd reports are warned about in its words, nothing of the user written:
/// a name that is a group already, a uid taken, a group that does not exist
/// (`create_groups: false`); the groups made before useradd (cloud-init's groupadd) stay.
#[test]
fn what_useradd_refuses_is_refused_with_its_words() {
    let Some(fs) = rootfs() else {
        return;
    };
    let ov = Overlay::new(&fs);
    let cases = [
        (
            UserSpec {
                name: "adm".into(),
                groups: vec!["newgrp".into()],
                ..Default::default()
            },
            "group adm exists - if you want to add this user to that group, use -g.",
        ),
        (
            UserSpec {
                name: "dup".into(),
                uid: Some(0),
                ..Default::default()
            },
            "UID 0 is not unique",
        ),
        (
            UserSpec {
                name: "nocreate".into(),
                groups: vec!["nosuchgroup".into()],
                no_create_groups: true,
                ..Default::default()
            },
            "group 'nosuchgroup' does not exist",
        ),
    ];
    for (u, words) in cases {
        let name = u.name.clone();
        // The run carries on, degraded (cloud-init logs the failure and boots on).
        let s = run(
            &ov.root,
            &plan("vm-refused", vec![user_step(u)]),
            false,
            false,
            "b",
        )
        .unwrap();
        let warnings = s.warnings.join("\n");
        assert!(warnings.contains(words), "{name}: {warnings}");
        let passwd = std::fs::read_to_string(ov.root.join("etc/passwd")).unwrap();
        assert!(
            !passwd.lines().any(|l| l.starts_with(&format!("{name}:"))),
            "{name}"
        );
    }
    let group = std::fs::read_to_string(ov.root.join("etc/group")).unwrap();
    assert!(
        group.lines().any(|l| l.starts_with("newgrp:x:")),
        "groups made before useradd stay"
    );
    assert!(!group.lines().any(|l| l.starts_with("nosuchgroup:")));
}

/// `plain_text_passwd` ends as a hash the host's libcrypt verifies (Debian's chpasswd
/// makes yescrypt ones: `$y$j9T$`), never as the text.
#[test]
fn a_plain_text_password_is_hashed_as_chpasswd_hashes_it() {
    let Some(fs) = rootfs() else {
        return;
    };
    let ov = Overlay::new(&fs);
    let p = plan(
        "vm-plain",
        vec![user_step(UserSpec {
            name: "plain".into(),
            plain_text_passwd: Some("correct horse".into()),
            lock_passwd: true,
            ..Default::default()
        })],
    );
    run(&ov.root, &p, false, false, "b").unwrap();
    let shadow = std::fs::read_to_string(ov.root.join("etc/shadow")).unwrap();
    let field = shadow
        .lines()
        .find_map(|l| l.strip_prefix("plain:"))
        .and_then(|r| r.split(':').next())
        .unwrap()
        .to_string();
    assert!(
        field.starts_with("!$y$j9T$"),
        "locked yescrypt hash: {field}"
    );
    assert!(!shadow.contains("correct horse"));
    let hash = field.trim_start_matches('!');
    let check = Command::new("python3")
        .args([
            "-c",
            "import ctypes,sys\nl=ctypes.CDLL('libcrypt.so.1')\nl.crypt.restype=ctypes.c_char_p\nh=sys.argv[2].encode()\nsys.exit(0 if l.crypt(sys.argv[1].encode(),h)==h else 1)",
            "correct horse",
            hash,
        ])
        .status()
        .unwrap();
    assert!(check.success(), "libcrypt does not verify {hash}");
    let wrong = Command::new("python3")
        .args([
            "-c",
            "import ctypes,sys\nl=ctypes.CDLL('libcrypt.so.1')\nl.crypt.restype=ctypes.c_char_p\nh=sys.argv[2].encode()\nsys.exit(0 if l.crypt(sys.argv[1].encode(),h)==h else 1)",
            "wrong horse",
            hash,
        ])
        .status()
        .unwrap();
    assert!(!wrong.success());
}

#[test]
fn a_held_account_lock_is_waited_for() {
    let Some(fs) = rootfs() else {
        return;
    };
    let ov = Overlay::new(&fs);
    let lock = ov.root.join("etc/.pwd.lock");
    // Another process holds lckpwdf's lock (as a running useradd or passwd would) for 2 s.
    let mut holder = Command::new("python3")
        .args([
            "-c",
            "import fcntl,sys,time\nf=open(sys.argv[1],'w')\nfcntl.lockf(f,fcntl.LOCK_EX)\nprint('locked',flush=True)\ntime.sleep(2)",
        ])
        .arg(&lock)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "locked");
    let t0 = Instant::now();
    let p = plan(
        "vm-lock",
        vec![user_step(UserSpec {
            name: "waiter".into(),
            lock_passwd: true,
            ..Default::default()
        })],
    );
    run(&ov.root, &p, false, false, "b").unwrap();
    let waited = t0.elapsed();
    holder.wait().unwrap();
    assert!(
        waited >= Duration::from_millis(1500),
        "wrote while another process held /etc/.pwd.lock (after {waited:?})"
    );
    let passwd = std::fs::read_to_string(ov.root.join("etc/passwd")).unwrap();
    assert!(passwd.lines().any(|l| l.starts_with("waiter:x:")));
}
