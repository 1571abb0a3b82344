//! Hostname facts and NoCloud metadata as cloud-init has them (issue 11, item 6):
//! * `run --stage all` gathers host facts after its own hostname step, as cloud-init's
//!   network stage gathers host info after init-local set the hostname; so it renders the
//!   same userdata as the two units (`--stage local`, then `--stage main`);
//! * the NoCloud transport's `ds.meta_data` is the seed's meta-data plus NoCloud's defaults,
//!   with no host info merged in (only cloud-init's VMware datasource merges it).

use std::path::Path;
use std::process::Command;

fn agent(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(args)
        .env("NODEAGENT_LOG", "warn")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const USERDATA: &str = "## template: jinja\n#cloud-config\nwrite_files:\n- path: /etc/seen\n  content: |\n    {{ ds.meta_data.hostname }} {{ ds.meta_data.local_hostname }} {{ v1.local_hostname }}\n";

/// A guestinfo dir and a target root whose image is still called `vm`.
fn setup(t: &Path) -> (String, String) {
    let (d, r) = (t.join("d"), t.join("r"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::create_dir_all(r.join("etc")).unwrap();
    std::fs::write(r.join("etc/hostname"), "vm\n").unwrap();
    std::fs::write(
        d.join("guestinfo.metadata"),
        "instance-id: i-1\nlocal-hostname: node-1\n",
    )
    .unwrap();
    std::fs::write(d.join("guestinfo.userdata"), USERDATA).unwrap();
    (
        format!("dir:{}", d.display()),
        r.to_string_lossy().into_owned(),
    )
}

#[test]
fn stage_all_renders_with_the_hostname_it_set() {
    let t = tempfile::tempdir().unwrap();
    let (transport, root) = setup(t.path());
    let (code, _, err) = agent(&["run", "--transport", &transport, "--root", &root]);
    assert_eq!(code, 0, "{err}");
    let seen = std::fs::read_to_string(Path::new(&root).join("etc/seen")).unwrap();
    assert_eq!(
        seen, "node-1 node-1 node-1\n",
        "host info gathered after the local stage renamed the node"
    );
    assert_eq!(
        std::fs::read_to_string(Path::new(&root).join("etc/hostname")).unwrap(),
        "node-1\n"
    );
}

#[test]
fn stage_all_equals_local_then_main() {
    let t = tempfile::tempdir().unwrap();
    let (all_tr, all_root) = setup(&t.path().join("all"));
    let (two_tr, two_root) = setup(&t.path().join("two"));
    assert_eq!(
        agent(&["run", "--transport", &all_tr, "--root", &all_root]).0,
        0
    );
    for stage in ["local", "main"] {
        let (code, _, err) = agent(&[
            "run",
            "--stage",
            stage,
            "--transport",
            &two_tr,
            "--root",
            &two_root,
        ]);
        assert_eq!(code, 0, "{stage}: {err}");
    }
    for f in ["etc/seen", "etc/hostname"] {
        assert_eq!(
            std::fs::read(Path::new(&all_root).join(f)).unwrap(),
            std::fs::read(Path::new(&two_root).join(f)).unwrap(),
            "{f}"
        );
    }
}

#[test]
fn bad_userdata_with_stage_all_writes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let (transport, root) = setup(t.path());
    let d = t.path().join("d");
    std::fs::write(
        d.join("guestinfo.userdata"),
        "#cloud-config\nwrite_files: [unclosed\n",
    )
    .unwrap();
    let (code, _, err) = agent(&["run", "--transport", &transport, "--root", &root]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("userdata"), "{err}");
    // Not even the local stage's hostname: the whole plan is checked before any write.
    assert_eq!(
        std::fs::read_to_string(Path::new(&root).join("etc/hostname")).unwrap(),
        "vm\n"
    );
    assert!(!Path::new(&root).join("var/lib/nodeagent").exists());
}

fn query(seed: &Path, facts: &Path, key: &str) -> (i32, serde_json::Value, String) {
    let (code, out, err) = agent(&[
        "query",
        "--transport",
        &format!("nocloud:{}", seed.display()),
        "--facts",
        &facts.to_string_lossy(),
        key,
    ]);
    let v = serde_json::from_str(&out).unwrap_or(serde_json::Value::String(out.trim().into()));
    (code, v, err)
}

#[test]
fn nocloud_metadata_has_no_host_info() {
    let t = tempfile::tempdir().unwrap();
    let seed = t.path().join("seed");
    std::fs::create_dir_all(&seed).unwrap();
    std::fs::write(
        seed.join("meta-data"),
        "instance-id: iid-7\nlocal-hostname: seed-host\n",
    )
    .unwrap();
    let facts = t.path().join("facts.yaml");
    std::fs::write(
        &facts,
        "hostname: vm\nfqdn: vm.example\nlocal-ipv4: 10.0.0.9\nproduct-uuid: 4211-abcd\n",
    )
    .unwrap();
    let (code, md, err) = query(&seed, &facts, "ds.meta_data");
    assert_eq!(code, 0, "{err}");
    // As DataSourceNoCloud: the seed plus its defaults (instance-id, dsmode), aliases as
    // cloud-init's jinja view adds them; no hostname/local-ipv4/network from the host.
    assert_eq!(
        md,
        serde_json::json!({
            "dsmode": "net",
            "instance-id": "iid-7", "instance_id": "iid-7",
            "local-hostname": "seed-host", "local_hostname": "seed-host",
        })
    );
    let (_, v1, _) = query(&seed, &facts, "v1");
    assert_eq!(v1["platform"], "nocloud");
    assert_eq!(v1["cloud_name"], "unknown");
    assert_eq!(v1["cloud_id"], "nocloud");
    assert_eq!(v1["local_hostname"], "seed-host");
    let sub = v1["subplatform"].as_str().unwrap();
    assert!(
        sub.starts_with("seed-dir (/") && sub.ends_with("/seed)"),
        "{sub}"
    );

    // No instance-id in the seed: NoCloud's default, not the DMI product UUID.
    std::fs::write(seed.join("meta-data"), "local-hostname: seed-host\n").unwrap();
    let (_, iid, _) = query(&seed, &facts, "v1.instance_id");
    assert_eq!(iid, "nocloud");
}

#[test]
fn vmware_transports_still_merge_host_info() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("d");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("guestinfo.metadata"), "local-hostname: md-host\n").unwrap();
    let facts = t.path().join("facts.yaml");
    std::fs::write(
        &facts,
        "hostname: vm\nlocal-ipv4: 10.0.0.9\nproduct-uuid: 4211-abcd\n",
    )
    .unwrap();
    let (code, out, err) = agent(&[
        "query",
        "--transport",
        &format!("dir:{}", d.display()),
        "--facts",
        &facts.to_string_lossy(),
        "ds.meta_data.local-ipv4",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "10.0.0.9");
}

#[test]
fn local_stage_refuses_what_the_main_stage_refuses() {
    let t = tempfile::tempdir().unwrap();
    let (transport, root) = setup(t.path());
    std::fs::write(
        t.path().join("d/guestinfo.userdata"),
        "#cloud-config\nusers:\n- name: a\n  ssh_authorized_keys: 42\n",
    )
    .unwrap();
    let (code, _, err) = agent(&[
        "run",
        "--stage",
        "local",
        "--transport",
        &transport,
        "--root",
        &root,
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("users[0]"), "{err}");
    assert_eq!(
        std::fs::read_to_string(Path::new(&root).join("etc/hostname")).unwrap(),
        "vm\n",
        "a refused document changes nothing with the two units either"
    );
    // An undefined template variable is refused too.
    std::fs::write(
        t.path().join("d/guestinfo.userdata"),
        "## template: jinja\n#cloud-config\nruncmd:\n- echo {{ no_such_variable }}\n",
    )
    .unwrap();
    let (code, _, err) = agent(&[
        "run",
        "--stage",
        "local",
        "--transport",
        &transport,
        "--root",
        &root,
    ]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        std::fs::read_to_string(Path::new(&root).join("etc/hostname")).unwrap(),
        "vm\n"
    );
    // A template that needs the address the host gets only once the network is up is not.
    std::fs::write(
        t.path().join("d/guestinfo.userdata"),
        "## template: jinja\n#cloud-config\nruncmd:\n- echo {{ ds.meta_data.local_ipv4 }}\n",
    )
    .unwrap();
    let (code, _, err) = agent(&[
        "run",
        "--stage",
        "local",
        "--transport",
        &transport,
        "--root",
        &root,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(Path::new(&root).join("etc/hostname")).unwrap(),
        "node-1\n"
    );
}
