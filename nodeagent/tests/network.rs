//! Network configuration from a NoCloud seed, as cloud-init 22.4's DataSourceNoCloud takes it:
//! the seed's `network-config` file (netplan version 2 at the top), never the meta-data's
//! `network` key; a `network:`-wrapped document and meta-data `network-interfaces` are refused
//! in the plan, before any write. tests/conformance compares what both agents render.

use std::path::Path;
use std::process::Command;

fn plan(seed: &Path) -> (i32, serde_json::Value, String) {
    let facts = seed.parent().unwrap().join("facts.yaml");
    std::fs::write(&facts, "hostname: vm\nnetwork-renderer: networkd\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["plan", "--json", "--transport"])
        .arg(format!("nocloud:{}", seed.display()))
        .arg("--facts")
        .arg(&facts)
        .env("NODEAGENT_LOG", "warn")
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (
        out.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn seed(t: &Path, meta: &str, network_config: Option<&str>) -> std::path::PathBuf {
    let s = t.join("seed");
    std::fs::create_dir_all(&s).unwrap();
    std::fs::write(s.join("meta-data"), meta).unwrap();
    std::fs::write(s.join("user-data"), "#cloud-config\n").unwrap();
    if let Some(n) = network_config {
        std::fs::write(s.join("network-config"), n).unwrap();
    }
    s
}

const NET: &str = "version: 2\nethernets:\n  id0:\n    match:\n      macaddress: \"00:50:56:aa:bb:01\"\n    set-name: eth0\n    addresses: [10.0.0.5/24]\n    gateway4: 10.0.0.1\n";

fn network_files(plan: &serde_json::Value) -> Vec<String> {
    plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["id"] == "network")
        .flat_map(|s| s["action"]["files"].as_array().unwrap().iter())
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn network_config_file_is_the_network_configuration() {
    let t = tempfile::tempdir().unwrap();
    let s = seed(t.path(), "instance-id: i-1\n", Some(NET));
    let (code, p, err) = plan(&s);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        network_files(&p),
        [
            "/etc/systemd/network/10-nodeagent-eth0.link",
            "/etc/systemd/network/10-nodeagent-eth0.network"
        ]
    );
}

#[test]
fn metadata_network_key_is_not_a_network_config_for_nocloud() {
    let t = tempfile::tempdir().unwrap();
    let meta = format!("instance-id: i-1\nnetwork:\n{}", {
        NET.lines().map(|l| format!("  {l}\n")).collect::<String>()
    });
    let s = seed(t.path(), &meta, None);
    let (code, p, err) = plan(&s);
    assert_eq!(code, 0, "{err}");
    assert!(network_files(&p).is_empty(), "{p}");
}

#[test]
fn wrapped_network_config_and_eni_are_refused_in_the_plan() {
    let t = tempfile::tempdir().unwrap();
    let wrapped = format!(
        "network:\n{}",
        NET.lines().map(|l| format!("  {l}\n")).collect::<String>()
    );
    let s = seed(t.path(), "instance-id: i-1\n", Some(&wrapped));
    let (code, _, err) = plan(&s);
    assert_eq!(code, 1);
    assert!(
        err.contains("network-config") && err.contains("unwrapped"),
        "{err}"
    );

    let t = tempfile::tempdir().unwrap();
    let s = seed(
        t.path(),
        "instance-id: i-1\nnetwork-interfaces: |\n  auto eth0\n  iface eth0 inet dhcp\n",
        None,
    );
    let (code, _, err) = plan(&s);
    assert_eq!(code, 1);
    assert!(err.contains("network-interfaces"), "{err}");
}

/// A device id (a map key) with line breaks used to reach the comment line of the .network and
/// .link files and add its own `[Network]` settings; too many devices ran out of file
/// descriptors after /etc/hostname was written. Both are refused, compat mode too.
#[test]
fn device_ids_with_line_breaks_and_too_many_devices_are_refused() {
    use libnodeagent::plan::network::render_with;
    use serde_json::json;
    for id in ["id0\n[Network]\nDNS=6.6.6.6\n#", "a\rb", "x\u{85}y", ""] {
        let cfg = json!({"version": 2, "ethernets": {id: {"dhcp4": true}}});
        for compat in [false, true] {
            let e = render_with(&cfg, "networkd", compat).unwrap_err();
            assert!(e.place.starts_with("network.ethernets["), "{e}");
            assert!(!e.place.contains('\n') && !e.message.contains('\n'), "{e}");
        }
    }
    let many: serde_json::Map<String, serde_json::Value> = (0
        ..=libnodeagent::base::limits::MAX_NETWORK_DEVICES)
        .map(|i| (format!("e{i}"), json!({"dhcp4": true})))
        .collect();
    let e = render_with(&json!({"version": 2, "ethernets": many}), "networkd", true).unwrap_err();
    assert!(e.message.contains("MAX_NETWORK_DEVICES"), "{e}");
}

/// MAX_NETWORK_DEVICES devices, each a `.link` and a `.network` file: the step writes and
/// closes each file before it opens the next (the batch stays atomic: temp files, renamed
/// together), so `run` succeeds with fewer descriptors allowed than it writes files. It held
/// one open temp file per generated file until the commit, which needed over 128 here.
#[test]
fn the_network_step_holds_a_bounded_number_of_descriptors() {
    let max = libnodeagent::base::limits::MAX_NETWORK_DEVICES;
    let t = tempfile::tempdir().unwrap();
    let mut net = String::from("version: 2\nethernets:\n");
    for i in 0..max {
        net.push_str(&format!(
            "  e{i}:\n    match:\n      macaddress: \"00:50:56:aa:bb:{i:02x}\"\n    set-name: eth{i}\n    dhcp4: true\n"
        ));
    }
    let s = seed(t.path(), "instance-id: i-1\n", Some(&net));
    let facts = t.path().join("facts.yaml");
    std::fs::write(&facts, "hostname: vm\nnetwork-renderer: networkd\n").unwrap();
    let root = t.path().join("r");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
    // Fewer than the files written (2 * max): what a descriptor per file cannot fit in.
    let limit = 48;
    assert!(limit < 2 * max);
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["run", "--transport"])
        .arg(format!("nocloud:{}", s.display()))
        .arg("--root")
        .arg(&root)
        .arg("--facts")
        .arg(&facts)
        .env("NODEAGENT_LOG", "warn")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let names: Vec<String> = std::fs::read_dir(root.join("etc/systemd/network"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2 * max, "{names:?}");
    assert!(
        !names.iter().any(|n| n.contains("nodeagent-tmp")),
        "{names:?}"
    );
}
