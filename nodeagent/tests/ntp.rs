//! `ntp` as cloud-init 25.1's cc_ntp leaves it on Debian: the client's file is exactly
//! cloud-init's template output (goldens in `ntp_data/`, rendered by Debian 13's cloud-init
//! 25.1 templater from its `chrony.conf.debian.tmpl` and `timesyncd.conf.tmpl`; 22.4's chrony
//! template differs in one comment word and has no `peer`/`allow` lines), and the image's
//! file is kept as `<file>.dist`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn golden(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/ntp_data")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A target root with the image's chrony (binary and its stock config) or timesyncd.
fn image(t: &Path, client: &str) -> PathBuf {
    let r = t.join("r");
    match client {
        "chrony" => {
            std::fs::create_dir_all(r.join("usr/sbin")).unwrap();
            std::fs::write(r.join("usr/sbin/chronyd"), "").unwrap();
            std::fs::create_dir_all(r.join("etc/chrony")).unwrap();
            std::fs::write(
                r.join("etc/chrony/chrony.conf"),
                "pool 2.debian.pool.ntp.org iburst\nsourcedir /run/chrony-dhcp\n",
            )
            .unwrap();
        }
        _ => {
            std::fs::create_dir_all(r.join("lib/systemd")).unwrap();
            std::fs::write(r.join("lib/systemd/systemd-timesyncd"), "").unwrap();
        }
    }
    r
}

fn run(t: &Path, root: &Path, ntp: &str, iid: &str) -> (i32, String) {
    let d = t.join("d");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("guestinfo.metadata"),
        format!("instance-id: {iid}\n"),
    )
    .unwrap();
    std::fs::write(
        d.join("guestinfo.userdata"),
        format!("#cloud-config\nntp:\n{ntp}"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nodeagent"))
        .args(["run", "--transport"])
        .arg(format!("dir:{}", d.display()))
        .arg("--root")
        .arg(root)
        .env("NODEAGENT_LOG", "warn")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn chrony_is_cloud_inits_template_output_and_keeps_the_dist_file() {
    let t = tempfile::tempdir().unwrap();
    let r = image(t.path(), "chrony");
    let (code, err) = run(
        t.path(),
        &r,
        "  servers: [10.0.0.1, ntp.example.com]\n",
        "i-1",
    );
    assert_eq!(code, 0, "{err}");
    let conf = std::fs::read_to_string(r.join("etc/chrony/chrony.conf")).unwrap();
    assert_eq!(conf, golden("chrony-servers.conf"));
    assert!(
        !conf.contains("sourcedir"),
        "DHCP-offered servers must not win"
    );
    assert_eq!(
        std::fs::read_to_string(r.join("etc/chrony/chrony.conf.dist")).unwrap(),
        "pool 2.debian.pool.ntp.org iburst\nsourcedir /run/chrony-dhcp\n"
    );
}

#[test]
fn chrony_defaults_and_both_lists() {
    let t = tempfile::tempdir().unwrap();
    let r = image(t.path(), "chrony");
    assert_eq!(run(t.path(), &r, "  enabled: true\n", "i-1").0, 0);
    assert_eq!(
        std::fs::read_to_string(r.join("etc/chrony/chrony.conf")).unwrap(),
        golden("chrony-default.conf")
    );
    // A new instance renders again; as cloud-init, the current file becomes the .dist.
    assert_eq!(
        run(t.path(), &r, "  servers: [s1]\n  pools: [p1]\n", "i-2").0,
        0
    );
    assert_eq!(
        std::fs::read_to_string(r.join("etc/chrony/chrony.conf")).unwrap(),
        golden("chrony-both.conf")
    );
    assert_eq!(
        std::fs::read_to_string(r.join("etc/chrony/chrony.conf.dist")).unwrap(),
        golden("chrony-default.conf")
    );
}

/// `peers` and `allow` (cloud-init 25.1's schema; 22.4 had neither): chrony's `peer` and
/// `allow` lines after the servers; a value that could start another directive is refused.
#[test]
fn chrony_peers_and_allow_as_25_1() {
    let t = tempfile::tempdir().unwrap();
    let r = image(t.path(), "chrony");
    let ntp =
        "  servers: [s1]\n  peers: [peer1.example, 10.0.0.2]\n  allow: [10.0.0.0/8, 'fd00::/8']\n";
    let (code, err) = run(t.path(), &r, ntp, "i-1");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(r.join("etc/chrony/chrony.conf")).unwrap(),
        golden("chrony-peers-allow.conf")
    );
    let r2 = image(&t.path().join("2"), "chrony");
    let (code, err) = run(
        &t.path().join("2"),
        &r2,
        "  allow: ['10.0.0.0/8 cmdallow all']\n",
        "i-1",
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("ntp.allow[0]"), "{err}");
    assert_eq!(
        std::fs::read_to_string(r2.join("etc/chrony/chrony.conf")).unwrap(),
        "pool 2.debian.pool.ntp.org iburst\nsourcedir /run/chrony-dhcp\n",
        "nothing written"
    );
}

#[test]
fn timesyncd_as_cloud_init() {
    let t = tempfile::tempdir().unwrap();
    let r = image(t.path(), "timesyncd");
    let (code, err) = run(t.path(), &r, "  servers: [s1]\n  pools: [p1]\n", "i-1");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(r.join("etc/systemd/timesyncd.conf.d/cloud-init.conf")).unwrap(),
        golden("timesyncd-both.conf")
    );
}

#[test]
fn no_client_installed_writes_chrony_conf_and_warns() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path().join("r");
    std::fs::create_dir_all(&r).unwrap();
    let (code, err) = run(t.path(), &r, "  enabled: true\n", "i-1");
    assert_eq!(code, 2, "degraded, not failed: {err}");
    assert!(err.contains("chrony is not installed"), "{err}");
    assert_eq!(
        std::fs::read_to_string(r.join("etc/chrony/chrony.conf")).unwrap(),
        golden("chrony-default.conf")
    );
}

/// CABPK writes `servers:` with nothing after it for an empty list (cluster-api.md a.6):
/// cloud-init takes it as no servers (its default pools); so does nodeagent.
#[test]
fn empty_servers_as_cabpk_writes_them_is_no_servers() {
    let text = "#cloud-config\nntp:\n  enabled: true\n  servers:\n  pools:\n";
    let parsed = libnodeagent::render::cloudconfig::parse(text, "userdata", false).unwrap();
    let ntp = parsed.config.ntp.expect("ntp kept");
    assert!(ntp.servers.is_empty() && ntp.pools.is_empty(), "{ntp:?}");
}
