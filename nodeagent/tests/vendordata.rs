//! Vendordata (`guestinfo.vendordata`, NoCloud `vendor-data`) is refused in the plan with a
//! clear error, before any write, unless the userdata turns it off with
//! `vendor_data: {enabled: false}` (honoured as cloud-init honours it) or it is blank.

use std::path::Path;
use std::process::Command;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(args)
        .env("NODEAGENT_LOG", "warn")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const USERDATA: &str = "#cloud-config\nwrite_files:\n- path: /etc/from-user\n  content: u\n";
const VENDOR: &str = "#cloud-config\nruncmd:\n- echo vendor\n";

fn dir(t: &Path, userdata: &str, vendordata: Option<&str>) -> String {
    let d = t.join("d");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("guestinfo.metadata"), "instance-id: i-1\n").unwrap();
    std::fs::write(d.join("guestinfo.userdata"), userdata).unwrap();
    if let Some(v) = vendordata {
        std::fs::write(d.join("guestinfo.vendordata"), v).unwrap();
    }
    format!("dir:{}", d.display())
}

#[test]
fn vendordata_is_refused_before_any_write() {
    let t = tempfile::tempdir().unwrap();
    let tr = dir(t.path(), USERDATA, Some(VENDOR));
    let r = t.path().join("r");
    std::fs::create_dir_all(&r).unwrap();
    let (code, err) = run(&["run", "--transport", &tr, "--root", &r.to_string_lossy()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("guestinfo.vendordata") && err.contains("vendor_data: {enabled: false}"),
        "{err}"
    );
    assert!(!r.join("etc/from-user").exists());
    assert!(!r.join("var/lib/nodeagent").exists());
    let (code, err) = run(&["plan", "--transport", &tr]);
    assert_eq!(code, 1, "plan says so too: {err}");
}

#[test]
fn nocloud_vendor_data_names_its_seed_file() {
    let t = tempfile::tempdir().unwrap();
    let seed = t.path().join("seed");
    std::fs::create_dir_all(&seed).unwrap();
    std::fs::write(seed.join("meta-data"), "instance-id: i-1\n").unwrap();
    std::fs::write(seed.join("user-data"), USERDATA).unwrap();
    std::fs::write(seed.join("vendor-data"), VENDOR).unwrap();
    let (code, err) = run(&[
        "plan",
        "--transport",
        &format!("nocloud:{}", seed.display()),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("vendor-data"), "{err}");
}

#[test]
fn disabled_or_blank_vendordata_is_ignored_as_cloud_init() {
    let t = tempfile::tempdir().unwrap();
    let ud = format!("{USERDATA}vendor_data:\n  enabled: false\n");
    let tr = dir(&t.path().join("a"), &ud, Some(VENDOR));
    let r = t.path().join("r");
    std::fs::create_dir_all(&r).unwrap();
    let (code, err) = run(&["run", "--transport", &tr, "--root", &r.to_string_lossy()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(r.join("etc/from-user")).unwrap(),
        "u"
    );
    let tr = dir(&t.path().join("b"), USERDATA, Some(" \n"));
    assert_eq!(run(&["plan", "--transport", &tr]).0, 0);
    // `enabled: true` (or no vendor_data) with vendordata present: refused.
    let ud = format!("{USERDATA}vendor_data: {{enabled: true}}\n");
    let tr = dir(&t.path().join("c"), &ud, Some(VENDOR));
    assert_eq!(run(&["plan", "--transport", &tr]).0, 1);
}
