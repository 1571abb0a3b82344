//! The OVF environment transport (`guestinfo.ovfEnv`), read as cloud-init's DataSourceOVF
//! reads it. Documents in transport_data/ovf/: cloud-init's own published example (cited in its
//! header) and a vSphere-layout document with VM Operator-style properties.

use libnodeagent::source::transport::dir::DirTransport;
use libnodeagent::source::transport::ovf::{OvfTransport, properties, read_environment};
use libnodeagent::source::transport::{Transport, detect_with_path, read_all};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn data(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/transport_data/ovf")
            .join(name),
    )
    .unwrap()
}

const PUBLIC: &str = "cloud-init-doc-example.ovf-env.xml";
const VSPHERE: &str = "vsphere-vapp.ovf-env.xml";

/// An OvfTransport over a dir transport holding `guestinfo.ovfEnv` = `xml`.
fn ovf_over_dir(xml: &[u8], root: &Path) -> (tempfile::TempDir, OvfTransport) {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("guestinfo.ovfEnv"), xml).unwrap();
    let t = OvfTransport::new(Box::new(DirTransport::new(d.path())), root);
    (d, t)
}

fn metadata(t: &dyn Transport) -> libnodeagent::source::metadata::Metadata {
    let raw = read_all(t).unwrap();
    let md = raw.metadata.unwrap();
    libnodeagent::source::metadata::parse(&md.text, "ovf").unwrap()
}

#[test]
fn the_public_example_gives_every_property_cloud_init_reads() {
    let props = properties(&data(PUBLIC)).unwrap();
    let keys: Vec<&str> = props.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "instance-id",
            "seedfrom",
            "public-keys",
            "hostname",
            "user-data",
            "password",
            "network-config"
        ]
    );
    // Its seedfrom is an http URL: cloud-init's OVF datasource only seeds from / and
    // file://, and gives up on the datasource; so do we, naming the property.
    let e = read_environment(&data(PUBLIC), Path::new("/")).unwrap_err();
    assert!(e.to_string().contains("seedfrom"), "{e}");
    assert!(e.to_string().contains("http://tinyurl.com/sm-"), "{e}");
}

#[test]
fn the_public_example_without_its_http_seed_reads_as_cloud_init_would() {
    let xml = String::from_utf8(data(PUBLIC)).unwrap().replace(
        r#"<Property oe:key="seedfrom" oe:value="http://tinyurl.com/sm-"/>"#,
        "",
    );
    let root = tempfile::tempdir().unwrap();
    let (_d, t) = ovf_over_dir(xml.as_bytes(), root.path());
    let raw = read_all(&t).unwrap();
    assert_eq!(raw.userdata.unwrap().text, "#!/bin/sh\necho \"hi world\"\n");
    assert!(raw.vendordata.is_none());
    let md = metadata(&t);
    assert_eq!(md.instance_id.as_deref(), Some("i-abcdefg"));
    assert_eq!(md.local_hostname.as_deref(), Some("ubuntuhost"));
    assert_eq!(md.public_keys.len(), 1);
    assert!(md.public_keys[0].ends_with("smoser@brickies"));
    // network-config: base64 YAML whose `network` becomes the metadata's network.
    let net = md.network.unwrap();
    assert_eq!(net["ethernets"]["nics"]["match"]["name"], "eth*");
}

#[test]
fn a_vsphere_environment_carries_the_cabpk_userdata() {
    let root = tempfile::tempdir().unwrap();
    let (_d, t) = ovf_over_dir(&data(VSPHERE), root.path());
    assert_eq!(t.name(), "ovf");
    let raw = read_all(&t).unwrap();
    let ud = raw.userdata.unwrap().text;
    assert!(
        ud.starts_with("## template: jinja\n#cloud-config\n"),
        "{ud}"
    );
    let md = metadata(&t);
    assert_eq!(
        md.instance_id.as_deref(),
        Some("4216f3a1-1f63-9d5e-2c5b-8d0e3f1a7b21")
    );
    assert_eq!(md.local_hostname.as_deref(), Some("tkc-workers-7x2bq"));
    assert!(md.public_keys[0].starts_with("ssh-ed25519 "));
    // The decoded values have no .encoding: nothing to decode twice.
    assert_eq!(t.get("userdata.encoding").unwrap(), None);
}

#[test]
fn a_file_seed_supplies_userdata_and_the_properties_win_over_its_metadata() {
    let root = tempfile::tempdir().unwrap();
    let seed = root.path().join("var/lib/ovf-seed");
    std::fs::create_dir_all(&seed).unwrap();
    std::fs::write(
        seed.join("meta-data"),
        "instance-id: from-seed\nlocal-hostname: seed-host\n",
    )
    .unwrap();
    std::fs::write(seed.join("user-data"), "#cloud-config\nhostname: seeded\n").unwrap();
    let xml = String::from_utf8(data(VSPHERE)).unwrap().replace(
        r#"<Property oe:key="hostname" oe:value="tkc-workers-7x2bq"/>"#,
        r#"<Property oe:key="seedfrom" oe:value="file:///var/lib/ovf-seed/"/>"#,
    );
    let (_d, t) = ovf_over_dir(xml.as_bytes(), root.path());
    let raw = read_all(&t).unwrap();
    // The seed's user-data replaces the property's (util.read_seeded in cloud-init).
    assert_eq!(
        raw.userdata.unwrap().text,
        "#cloud-config\nhostname: seeded\n"
    );
    let md = metadata(&t);
    assert_eq!(
        md.instance_id.as_deref(),
        Some("4216f3a1-1f63-9d5e-2c5b-8d0e3f1a7b21"),
        "the OVF property wins"
    );
    assert_eq!(
        md.local_hostname.as_deref(),
        Some("seed-host"),
        "the seed fills in"
    );
}

#[test]
fn defaults_and_malformed_documents() {
    let root = tempfile::tempdir().unwrap();
    // No instance-id: cloud-init's default iid-dsovf.
    let xml = br#"<?xml version="1.0"?><Environment xmlns="http://schemas.dmtf.org/ovf/environment/1" xmlns:oe="http://schemas.dmtf.org/ovf/environment/1"><PropertySection><Property oe:key="hostname" oe:value="h1"/></PropertySection></Environment>"#;
    let (_d, t) = ovf_over_dir(xml, root.path());
    assert_eq!(metadata(&t).instance_id.as_deref(), Some("iid-dsovf"));
    // Errors name the place; nothing panics.
    let cases: [(&[u8], &str); 5] = [
        (b"<Envelope/>", "no Environment node"),
        (
            b"<Environment xmlns='http://schemas.dmtf.org/ovf/environment/1'/>",
            "no PropertySection",
        ),
        (
            b"<Environment xmlns:oe='http://schemas.dmtf.org/ovf/environment/1'><PropertySection><Property oe:value='x'/></PropertySection></Environment>",
            "no oe:key",
        ),
        (b"<Environment><unclosed></Environment>", "not an XML document"),
        (
            b"<!DOCTYPE e [<!ENTITY a 'aaaa'>]><Environment>&a;</Environment>",
            "not an XML document",
        ),
    ];
    for (xml, want) in cases {
        let (_d, t) = ovf_over_dir(xml, root.path());
        let e = t.get("metadata").unwrap_err().to_string();
        assert!(e.contains("guestinfo.ovfEnv") && e.contains(want), "{e}");
    }
    // Absent or redacted ovfEnv: no data, not an error.
    let (_d, t) = ovf_over_dir(b"---", root.path());
    assert_eq!(t.get("metadata").unwrap(), None);
}

/// A fake vmware-rpctool serving guestinfo keys from files in `DIR/guestinfo` (there are
/// no real VMware Tools here); `info-set` succeeds and is recorded in `DIR/sets`.
fn fake_rpctool() -> (tempfile::TempDir, std::path::PathBuf) {
    let tools = tempfile::tempdir().unwrap();
    let store = tools.path().join("guestinfo");
    std::fs::create_dir_all(&store).unwrap();
    let rpctool = tools.path().join("vmware-rpctool");
    std::fs::write(
        &rpctool,
        format!(
            "#!/bin/sh\ncase \"$1\" in\n  \"info-get guestinfo.\"*) k=\"${{1#info-get guestinfo.}}\"; if [ -f '{s}'/\"$k\" ]; then cat '{s}'/\"$k\"; else echo 'No value found' >&2; exit 1; fi ;;\n  *) echo \"$1\" >> '{t}/sets' ;;\nesac\n",
            s = store.display(),
            t = tools.path().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&rpctool, std::fs::Permissions::from_mode(0o755)).unwrap();
    (tools, store)
}

#[test]
fn nodeagent_run_bootstraps_from_the_ovf_environment() {
    let (tools, store) = fake_rpctool();
    std::fs::write(store.join("ovfEnv"), data(VSPHERE)).unwrap();
    let root = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["run", "--transport", "ovf", "--root"])
        .arg(root.path())
        .env("PATH", format!("{}:/usr/bin:/bin", tools.path().display()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        std::fs::read_to_string(root.path().join("etc/ovf-test")).unwrap(),
        "from the OVF environment"
    );
    let status = libnodeagent::report::read_status(root.path()).unwrap();
    assert_eq!(status.instance_id, "4216f3a1-1f63-9d5e-2c5b-8d0e3f1a7b21");
    // The status goes back through guestinfo.
    let sets = std::fs::read_to_string(tools.path().join("sets")).unwrap();
    assert!(
        sets.contains("info-set guestinfo.nodeagent.status"),
        "{sets}"
    );
}

#[test]
fn detection_tries_ovf_after_vmware_guestinfo() {
    let (tools, store) = fake_rpctool();
    std::fs::write(store.join("ovfEnv"), data(VSPHERE)).unwrap();
    let root = tempfile::tempdir().unwrap();
    let dmi = root.path().join("sys/class/dmi/id/product_name");
    std::fs::create_dir_all(dmi.parent().unwrap()).unwrap();
    std::fs::write(&dmi, "VMware7,1\n").unwrap();
    let order: Vec<String> = libnodeagent::source::config::ImageConfig::default().transports;
    assert_eq!(order[..2], ["vmware".to_string(), "ovf".to_string()]);
    let (t, log) = detect_with_path(&order, root.path(), Some(tools.path().as_os_str())).unwrap();
    assert_eq!(t.name(), "ovf", "{log:?}");
    assert_eq!(log[0], "vmware: skipped: no metadata or userdata");
    assert_eq!(log[1], "ovf: selected: guestinfo.metadata present");
    // With guestinfo.userdata set too, vmware wins.
    std::fs::write(store.join("userdata"), "#cloud-config\n").unwrap();
    let (t, _) = detect_with_path(&order, root.path(), Some(tools.path().as_os_str())).unwrap();
    assert_eq!(t.name(), "vmware");
}
