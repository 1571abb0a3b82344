//! Users and groups against a real user database: a debootstrap'd Debian 12 rootfs, the
//! image's own shadow tools and visudo run via chroot (not a mock).

mod apply_common;
use apply_common::*;
use libnodeagent::plan::*;

const HASH: &str = "$6$rounds=4096$saltsalt$Zp9mB1bHYmJ0i8qz0r3VzUqK9cKQh9A0Xq9b1sB3oL0YpD1b8m7m1Yc2zK1tQk0a3r6Rk5w1pI2y8u0cN9v1.";

fn users_plan(sudo: &str) -> Plan {
    let mut deferred = file(
        "/home/capv/.kube/config",
        "apiVersion: v1\n",
        "capv:capv",
        0o600,
    );
    deferred.defer = true;
    plan(
        "vm-users",
        vec![
            wf(deferred),
            step(
                "groups:ops",
                RunStage::Main,
                Frequency::PerInstance,
                Action::Group(GroupSpec {
                    name: "ops".into(),
                    members: vec!["root".into(), "ghost".into()],
                }),
            ),
            step(
                "users:capv",
                RunStage::Main,
                Frequency::PerInstance,
                Action::User(UserSpec {
                    name: "capv".into(),
                    gecos: Some("Cluster API".into()),
                    shell: Some("/bin/bash".into()),
                    groups: vec!["ops".into(), "netdev2".into()],
                    passwd: Some(HASH.into()),
                    lock_passwd: true,
                    sudo: vec![sudo.into()],
                    ssh_authorized_keys: vec![
                        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK0 capv@test".into(),
                    ],
                    ..Default::default()
                }),
            ),
        ],
    )
}

fn line<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(&format!("{name}:")))
        .unwrap_or_else(|| panic!("{name} missing"))
}

#[test]
fn users_groups_sudo_keys_with_real_tools() {
    let Some(fs) = rootfs() else {
        return;
    };
    let ov = Overlay::new(&fs);
    let r = &ov.root;
    let s = run(r, &users_plan("ALL=(ALL) NOPASSWD:ALL"), false, false, "b").unwrap();
    assert_eq!(s.ran.len(), 3);

    let passwd = std::fs::read_to_string(r.join("etc/passwd")).unwrap();
    let capv = line(&passwd, "capv");
    let f: Vec<&str> = capv.split(':').collect();
    assert_eq!(
        (f[4], f[5], f[6]),
        ("Cluster API", "/home/capv", "/bin/bash")
    );
    let uid: u32 = f[2].parse().unwrap();
    let gid: u32 = f[3].parse().unwrap();
    let shadow = std::fs::read_to_string(r.join("etc/shadow")).unwrap();
    assert_eq!(
        line(&shadow, "capv").split(':').nth(1).unwrap(),
        format!("!{HASH}"),
        "hash set, then locked"
    );
    let group = std::fs::read_to_string(r.join("etc/group")).unwrap();
    assert!(
        line(&group, "ops").ends_with(":root,capv"),
        "{}",
        line(&group, "ops")
    );
    assert!(
        line(&group, "netdev2").ends_with(":capv"),
        "missing group created"
    );
    // sudo rule validated by the image's visudo and installed 0440.
    let sudoers = r.join("etc/sudoers.d/90-nodeagent-capv");
    assert_eq!(
        std::fs::read_to_string(&sudoers).unwrap(),
        "# Written by nodeagent for user capv\ncapv ALL=(ALL) NOPASSWD:ALL\n"
    );
    assert_eq!(mode(&sudoers), 0o440);
    let out = std::process::Command::new("chroot")
        .arg(r)
        .args(["visudo", "-c"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Keys: owner and modes.
    let ssh = r.join("home/capv/.ssh");
    assert_eq!((mode(&ssh), ids(&ssh)), (0o700, (uid, gid)));
    let ak = ssh.join("authorized_keys");
    assert_eq!((mode(&ak), ids(&ak)), (0o600, (uid, gid)));
    assert_eq!(
        std::fs::read_to_string(&ak).unwrap(),
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK0 capv@test\n"
    );
    // The deferred file came after the user existed: owned by the new uid, in the home useradd made.
    let kc = r.join("home/capv/.kube/config");
    assert_eq!((mode(&kc), ids(&kc)), (0o600, (uid, gid)));
    assert_eq!(ids(&r.join("home/capv")), (uid, gid));

    // Running the steps again (as after a crash) changes nothing.
    let skip = |p: &str| {
        p.starts_with("var/lib/nodeagent")
            || p.starts_with("run/nodeagent")
            || p.starts_with("var/log/nodeagent")
            || p.starts_with("run/cloud-init")
            || p.starts_with("var/lib/cloud")
            || p.starts_with("var/log/cloud-init")
            || p.ends_with('-')
            || p.starts_with("etc/.pwd.lock")
    };
    let before = snapshot(&ov.upper, &skip);
    let st = libnodeagent::base::state::State::open(r).unwrap();
    let _ = std::fs::remove_file(st.instance_dir("vm-users").join("journal.jsonl"));
    run(r, &users_plan("ALL=(ALL) NOPASSWD:ALL"), false, false, "b").unwrap();
    assert_eq!(snapshot(&ov.upper, &skip), before);
}

#[test]
fn bad_sudo_rule_is_rejected_by_visudo() {
    let Some(fs) = rootfs() else {
        return;
    };
    let ov = Overlay::new(&fs);
    // A failed user step carries on (degraded), as cloud-init's users_groups module failing
    // does not stop the boot; the rule never takes effect.
    let s = run(
        &ov.root,
        &users_plan("ALL=(ALL) NOPASSWD ALL ((("),
        false,
        false,
        "b",
    )
    .unwrap();
    let e = s.warnings.join("\n");
    assert!(e.contains("users:capv"), "{e}");
    assert!(e.contains("visudo"), "{e}");
    let leftovers: Vec<_> = std::fs::read_dir(ov.root.join("etc/sudoers.d"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        leftovers
            .iter()
            .all(|n| !n.to_string_lossy().contains("nodeagent")),
        "{leftovers:?}"
    );
}

#[test]
fn unknown_group_owner_names_the_file() {
    let Some(fs) = rootfs() else {
        return;
    };
    let ov = Overlay::new(&fs);
    let p = plan(
        "vm",
        vec![wf(file("/etc/x.conf", "x", "root:nosuchgroup", 0o640))],
    );
    let e = run(&ov.root, &p, false, false, "b").unwrap_err();
    assert!(
        e.place.contains("/etc/x.conf") && e.message.contains("nosuchgroup"),
        "{e}"
    );
}

/// A shadow tool killed while holding the user database leaves `DB.lock` with its pid as
/// shadow writes it ("PID\0"); until that pid is reaped, shadow's own check (`kill(pid, 0)`)
/// takes the lock for a live one and refuses ("lock /etc/passwd.lock already used by PID").
/// The agent recognises the dead holder and the run goes through (the kubeadm crash test's
/// stuck iterations: the killed tools were zombies nobody had reaped yet).
#[test]
fn a_lock_left_by_a_killed_tool_not_yet_reaped_is_recovered() {
    let Some(fs) = rootfs() else {
        return;
    };
    let ov = Overlay::new(&fs);
    let r = &ov.root;
    // A dead, unreaped process: our own child, not waited for yet.
    let mut zombie = std::process::Command::new("true").spawn().unwrap();
    let pid = zombie.id();
    let stat = format!("/proc/{pid}/stat");
    let t = std::time::Instant::now();
    while !std::fs::read_to_string(&stat)
        .unwrap()
        .rsplit_once(") ")
        .unwrap()
        .1
        .starts_with('Z')
    {
        assert!(t.elapsed() < std::time::Duration::from_secs(10));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    for db in ["passwd", "shadow", "group", "gshadow"] {
        std::fs::write(r.join(format!("etc/{db}.lock")), format!("{pid}\0")).unwrap();
    }
    let s = run(r, &users_plan("ALL=(ALL) NOPASSWD:ALL"), false, false, "b");
    zombie.wait().unwrap();
    let s = s.unwrap();
    assert_eq!(s.ran.len(), 3);
    let passwd = std::fs::read_to_string(r.join("etc/passwd")).unwrap();
    line(&passwd, "capv");
    assert!(!r.join("etc/passwd.lock").exists());
}
