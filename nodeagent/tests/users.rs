//! `users` as cloud-init 22.4's `create_user`/`add_user` make them: a new `primary_group`
//! given with `groups` is created first (after the supplementary groups), `ssh_authorized_keys`
//! may be one string; a new `primary_group` alone (useradd would fail in cloud-init) is refused
//! in the plan, before any write.

mod apply_common;
use apply_common::*;
use libnodeagent::plan::*;
use std::path::Path;
use std::process::Command;

fn group_line<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(&format!("{name}:")))
}

#[test]
fn new_primary_group_with_groups_is_created_first() {
    let Some(fs) = rootfs() else {
        return;
    };
    let ov = Overlay::new(&fs);
    let r = &ov.root;
    let p = plan(
        "vm-pg",
        vec![step(
            "user:kdev",
            RunStage::Main,
            Frequency::PerInstance,
            Action::User(UserSpec {
                name: "kdev".into(),
                primary_group: Some("kdevs".into()),
                groups: vec!["kops".into()],
                lock_passwd: true,
                sudo: vec!["ALL=(ALL) NOPASSWD:ALL".into()],
                ssh_authorized_keys: vec!["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK0 k@test".into()],
                ..Default::default()
            }),
        )],
    );
    run(r, &p, false, false, "b").unwrap();
    let group = std::fs::read_to_string(r.join("etc/group")).unwrap();
    let kops = group_line(&group, "kops").expect("kops created");
    let kdevs = group_line(&group, "kdevs").expect("primary group created");
    let gid = |l: &str| l.split(':').nth(2).unwrap().parse::<u32>().unwrap();
    assert!(
        gid(kops) < gid(kdevs),
        "cloud-init's order: groups, then the primary group"
    );
    assert!(
        kops.ends_with(":kdev"),
        "member of its supplementary group: {kops}"
    );
    assert!(
        group_line(&group, "kdev").is_none(),
        "no user group with --gid"
    );
    let passwd = std::fs::read_to_string(r.join("etc/passwd")).unwrap();
    let kdev = passwd.lines().find(|l| l.starts_with("kdev:")).unwrap();
    assert_eq!(
        kdev.split(':').nth(3).unwrap().parse::<u32>().unwrap(),
        gid(kdevs)
    );
    // cloud-init's ensure_sudo_dir chmods /etc/sudoers.d to 0750 (Debian's sudo ships 0755).
    use std::os::unix::fs::PermissionsExt;
    let m = std::fs::metadata(r.join("etc/sudoers.d")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o750);
    assert_eq!(
        std::fs::read_to_string(r.join("home/kdev/.ssh/authorized_keys")).unwrap(),
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK0 k@test\n"
    );
}

#[test]
fn ssh_authorized_keys_as_one_string_or_a_mapping() {
    let text = "#cloud-config\nusers:\n- name: a\n  ssh_authorized_keys: ssh-ed25519 AAAA a@x, with a comma\n- name: b\n  ssh_authorized_keys: {k1: ssh-rsa BBBB b@x}\n";
    let parsed = libnodeagent::render::cloudconfig::parse(text, "userdata", false).unwrap();
    let keys: Vec<Vec<String>> = parsed
        .config
        .users
        .iter()
        .map(|u| match u {
            libnodeagent::render::cloudconfig::UserItem::User(u) => u.ssh_authorized_keys.0.clone(),
            _ => panic!("not a user"),
        })
        .collect();
    assert_eq!(
        keys,
        [
            vec!["ssh-ed25519 AAAA a@x, with a comma".to_string()],
            vec!["ssh-rsa BBBB b@x".to_string()]
        ]
    );
    let bad = "#cloud-config\nusers:\n- name: a\n  ssh_authorized_keys: 42\n";
    let e = libnodeagent::render::cloudconfig::parse(bad, "userdata", false).unwrap_err();
    assert!(
        e.to_string().contains("users[0]") && e.to_string().contains("a key"),
        "{e}"
    );
}

fn plan_cli(root: &Path, userdata: &str) -> (i32, String) {
    let d = root.join("gi");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("guestinfo.metadata"), "instance-id: i-1\n").unwrap();
    std::fs::write(d.join("guestinfo.userdata"), userdata).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["plan", "--transport"])
        .arg(format!("dir:{}", d.display()))
        .arg("--root")
        .arg(root)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn new_primary_group_alone_is_refused_in_the_plan() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::create_dir_all(r.join("etc")).unwrap();
    std::fs::write(r.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(r.join("etc/group"), "root:x:0:\nadm:x:4:\n").unwrap();
    // The image's user tools (the plan refuses users for a target without them).
    std::fs::create_dir_all(r.join("usr/sbin")).unwrap();
    for tool in ["useradd", "usermod", "groupadd"] {
        std::fs::write(r.join("usr/sbin").join(tool), "").unwrap();
    }
    let (code, out) = plan_cli(
        r,
        "#cloud-config\nusers:\n- name: u1\n  primary_group: devs\n",
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("users[0].primary_group") && out.contains("'devs'"),
        "{out}"
    );
    // Existing group, a group made by `groups:` first, or together with `groups`: fine.
    for ud in [
        "#cloud-config\nusers:\n- name: u1\n  primary_group: adm\n",
        "#cloud-config\ngroups: [devs]\nusers:\n- name: u1\n  primary_group: devs\n",
        "#cloud-config\nusers:\n- name: u1\n  primary_group: devs\n  groups: [adm]\n",
    ] {
        let (code, out) = plan_cli(r, ud);
        assert_eq!(code, 0, "{ud}\n{out}");
    }
}

/// cloud-init's `ssh_authkey_fingerprints` (final stage) makes every `users` entry's missing
/// `~/.ssh` (0700) and empty `authorized_keys` (0600), the user's, keys or not; present ones
/// are left as they are; `no_create_home` users are skipped.
#[test]
fn every_user_gets_ssh_dir_and_empty_authorized_keys_as_cloud_init_makes_them() {
    let Some(fs) = rootfs() else {
        return;
    };
    let ov = Overlay::new(&fs);
    let r = &ov.root;
    // An existing user whose ~/.ssh is already there, 0755, with a key: kept as it is.
    std::fs::create_dir_all(r.join("root/.ssh")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(r.join("root/.ssh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        r.join("root/.ssh/authorized_keys"),
        "ssh-ed25519 AAAA r@x\n",
    )
    .unwrap();
    let user = |name: &str, no_home: bool| {
        step(
            &format!("user:{name}"),
            RunStage::Main,
            Frequency::PerInstance,
            Action::User(UserSpec {
                name: name.into(),
                lock_passwd: true,
                no_create_home: no_home,
                ..Default::default()
            }),
        )
    };
    let p = plan(
        "vm-ssh",
        vec![
            user("plain", false),
            user("root", false),
            user("nohome", true),
        ],
    );
    run(r, &p, false, false, "b").unwrap();
    let (dir, keys) = (
        r.join("home/plain/.ssh"),
        r.join("home/plain/.ssh/authorized_keys"),
    );
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&keys), 0o600);
    let passwd = std::fs::read_to_string(r.join("etc/passwd")).unwrap();
    let plain: Vec<&str> = passwd
        .lines()
        .find(|l| l.starts_with("plain:"))
        .unwrap()
        .split(':')
        .collect();
    let want = (plain[2].parse().unwrap(), plain[3].parse().unwrap());
    assert_eq!(ids(&dir), want);
    assert_eq!(ids(&keys), want);
    assert_eq!(std::fs::read(&keys).unwrap(), b"");
    assert_eq!(mode(&r.join("root/.ssh")), 0o755, "present: not changed");
    assert_eq!(
        std::fs::read_to_string(r.join("root/.ssh/authorized_keys")).unwrap(),
        "ssh-ed25519 AAAA r@x\n"
    );
    assert!(!r.join("home/nohome").exists());
}
