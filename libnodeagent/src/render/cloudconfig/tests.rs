use super::*;

/// The error `parse` gives for `text` as userdata, without --compat.
fn strict_err(text: &str) -> Error {
    parse(text, "userdata", false).unwrap_err()
}

const CABPK: &str = "#cloud-config\nwrite_files:\n-   path: /etc/kubernetes/pki/ca.crt\n    owner: root:root\n    permissions: '0640'\n    content: |\n      hello\n      \n-   path: /run/x\n    permissions: 0644\n    append: yes\n    content: \"x\"\nruncmd:\n  - 'kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete'\n  - [echo, 1, true]\n  -\nusers:\n  - name: capv\n    sudo: ALL=(ALL) NOPASSWD:ALL\n    ssh_authorized_keys:\n      - ssh-ed25519 AAAA key\n";

#[test]
fn cabpk_shapes_parse() {
    let p = parse(CABPK, "userdata", false).unwrap();
    let c = &p.config;
    assert_eq!(c.write_files.len(), 2);
    assert_eq!(
        c.write_files[0].content.as_deref(),
        Some("hello\n"),
        "clip chomping drops the 6-space line"
    );
    assert_eq!(
        c.write_files[0].permissions,
        Some(serde_json::json!("0640"))
    );
    assert_eq!(
        c.write_files[1].permissions,
        Some(serde_json::json!(420)),
        "YAML 1.1 octal"
    );
    assert!(c.write_files[1].append.0);
    assert_eq!(c.runcmd.len(), 3);
    assert_eq!(
        c.runcmd[1],
        CmdItem::Argv(vec!["echo".into(), "1".into(), "True".into()])
    );
    assert_eq!(c.runcmd[2], CmdItem::Skip);
    let UserItem::User(u) = &c.users[0] else {
        panic!("expected a user")
    };
    assert_eq!(u.name, "capv");
}

#[test]
fn unknown_and_unsupported_keys_name_the_line() {
    let err = strict_err("#cloud-config\nruncmd: []\npackages: [curl]\n");
    assert_eq!(err.place, "userdata line 3 column 1");
    assert_eq!(
        err.kind(),
        crate::base::error::ErrorKind::Unsupported,
        "{err}"
    );
    assert!(err.message.contains("'packages'"), "{err}");
    let err = parse("#cloud-config\nwrite_file: []\n", "userdata", false).unwrap_err();
    assert!(err.message.contains("unknown key 'write_file'"), "{err}");
    let ok = parse("#cloud-config\npackages: [curl]\n", "userdata", true).unwrap();
    assert_eq!(ok.warnings.len(), 1);
}

#[test]
fn wrong_types_name_field_path_and_line() {
    let err = strict_err("#cloud-config\nwrite_files:\n- path: /a\n  owner: 5\n");
    assert!(err.place.contains("line 4"), "{err}");
    assert!(err.place.contains("write_files[0].owner"), "{err}");
    let err = strict_err("#cloud-config\nwrite_files:\n- path: /a\n  mode: '0600'\n");
    assert!(err.message.contains("unknown field `mode`"), "{err}");
}

#[test]
fn decimal_permissions_are_flagged() {
    let err = strict_err("#cloud-config\nwrite_files:\n- path: /a\n  permissions: 644\n");
    assert!(err.message.contains("decimal integer"), "{err}");
    assert!(
        parse(
            "#cloud-config\nwrite_files:\n- path: /a\n  permissions: 493\n",
            "userdata",
            false
        )
        .is_ok(),
        "493 == 0o755 is deliberate"
    );
}

#[test]
fn payload_kinds() {
    assert_eq!(payload_kind("#!/bin/sh\necho"), PayloadKind::ShellScript);
    assert_eq!(
        payload_kind("#cloud-config-archive\n"),
        PayloadKind::CloudConfigArchive
    );
    let err = parse("#include\nhttp://x\n", "userdata", false).unwrap_err();
    assert!(err.message.contains("#include"), "{err}");
}

#[test]
fn binary_content_and_groups_shapes() {
    let p = parse("#cloud-config\nwrite_files:\n- path: /b\n  content: !!binary |\n    aGk=\ngroups:\n  - admins: [a, b]\n  - plain\n", "userdata", false).unwrap();
    assert_eq!(
        p.config.write_files[0].content_binary.as_deref(),
        Some(&b"hi"[..])
    );
    assert_eq!(
        p.config.groups.0,
        vec![
            ("admins".into(), vec!["a".into(), "b".into()]),
            ("plain".into(), vec![])
        ]
    );
}

/// A members string as cloud-init 22.4's `_normalize_groups` reads it (distros/ug_util.py
/// lines 40-41 and 54, util.py `uniq_merge`): whole in a list entry, split at commas without
/// trimming in the mapping form; a list is never split; a top-level string of group names is
/// split the same way.
#[test]
fn group_members_string_as_cloud_init_normalises_it() {
    let groups = |yaml: &str| {
        parse(&format!("#cloud-config\n{yaml}\n"), "userdata", false)
            .unwrap()
            .config
            .groups
            .0
    };
    let one = |name: &str, members: &[&str]| {
        vec![(
            name.to_string(),
            members.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
        )]
    };
    // List form: the string is one member, whatever it holds.
    assert_eq!(
        groups("groups:\n  - admins: \"alice,bob\""),
        one("admins", &["alice,bob"])
    );
    assert_eq!(
        groups("groups:\n  - admins: \"alice, bob\""),
        one("admins", &["alice, bob"])
    );
    assert_eq!(
        groups("groups:\n  - admins: \"alice bob\""),
        one("admins", &["alice bob"])
    );
    assert_eq!(
        groups("groups:\n  - admins: alice"),
        one("admins", &["alice"])
    );
    assert_eq!(groups("groups:\n  - admins: \"\""), one("admins", &[""]));
    // Mapping form: `util.uniq_merge` strips the string, splits it at commas, drops empty items.
    assert_eq!(
        groups("groups: {admins: \"alice,bob\"}"),
        one("admins", &["alice", "bob"])
    );
    assert_eq!(
        groups("groups: {admins: \"alice, bob\"}"),
        one("admins", &["alice", " bob"])
    );
    assert_eq!(
        groups("groups: {admins: \" alice , bob ,\"}"),
        one("admins", &["alice ", " bob "])
    );
    assert_eq!(
        groups("groups: {admins: \"alice bob\"}"),
        one("admins", &["alice bob"])
    );
    assert_eq!(groups("groups: {admins: alice}"), one("admins", &["alice"]));
    assert_eq!(groups("groups: {admins: \"\"}"), one("admins", &[]));
    // A list is taken item by item in both forms.
    assert_eq!(
        groups("groups: {admins: [\"alice,bob\"]}"),
        one("admins", &["alice,bob"])
    );
    assert_eq!(
        groups("groups:\n  - admins: [alice, bob]"),
        one("admins", &["alice", "bob"])
    );
    // A mapping's groups in sorted order, as cloud-init reads its cloud-config.txt back.
    assert_eq!(
        groups("groups: {ops: bin, admins: [sys]}"),
        vec![
            ("admins".into(), vec!["sys".into()]),
            ("ops".into(), vec!["bin".into()])
        ]
    );
    assert_eq!(
        groups("groups:\n  - {ops: bin, admins: [sys]}\n  - devs"),
        vec![
            ("admins".into(), vec!["sys".into()]),
            ("ops".into(), vec!["bin".into()]),
            ("devs".into(), vec![])
        ]
    );
    // A string of group names: stripped, split, the names not stripped.
    assert_eq!(
        groups("groups: \"admins, ops\""),
        vec![("admins".into(), vec![]), (" ops".into(), vec![])]
    );
}

/// Fuzz find (cloudconfig target): a multi-byte char straddling byte 4096 of the head
/// made the MIME sniff slice inside it and panic.
#[test]
fn payload_kind_cuts_the_head_on_a_char_boundary() {
    for pad in 4090..4100 {
        let text = format!("x{}\u{cb5e4}mime-version: 1.0", "a".repeat(pad));
        assert_eq!(payload_kind(&text), PayloadKind::Unknown, "pad {pad}");
    }
    let mime = format!("{}\nMIME-Version: 1.0\n", "\u{e9}".repeat(1000));
    assert_eq!(payload_kind(&mime), PayloadKind::Mime);
}

/// `manage_etc_hosts` as cc_update_etc_hosts reads any value: `str()` of it, exactly
/// `localhost`, else `translate_bool` with `template`.
#[test]
fn manage_etc_hosts_any_value_as_cloud_init() {
    let read = |v: &str| {
        parse(
            &format!("#cloud-config\nmanage_etc_hosts: {v}\n"),
            "userdata",
            false,
        )
        .unwrap()
        .config
        .manage_etc_hosts
    };
    for v in [
        "true",
        "'true'",
        "'Yes'",
        "' on '",
        "1",
        "'1'",
        "template",
        "'TEMPLATE'",
    ] {
        assert_eq!(read(v), Some(ManageEtcHosts::Template), "{v}");
    }
    assert_eq!(read("localhost"), Some(ManageEtcHosts::Localhost));
    for v in [
        "false",
        "'no'",
        "'Localhost'",
        "' localhost'",
        "0",
        "2",
        "[a]",
        "'other'",
    ] {
        assert_eq!(read(v), Some(ManageEtcHosts::Off), "{v}");
    }
}
