//! `mounts`, `disk_setup` and `fs_setup` leave cloud-init 22.4's end state (cc_mounts,
//! cc_disk_setup): NFS and tmpfs sources as given, cloud-init's default mount options,
//! `mount_default_fields`, mount points made; a disk that is not there is a warning and
//! the run carries on to the end (`degraded` with the reason), never a stop halfway.

// Test code slices output it knows to be ASCII (ids, hashes, base64).
#![allow(clippy::string_slice)]

use std::os::unix::fs::PermissionsExt;
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

/// A guestinfo dir with `userdata` and a target root with an image fstab.
fn setup(t: &Path, userdata: &str) -> (String, String) {
    let (d, r) = (t.join("d"), t.join("r"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::create_dir_all(r.join("etc")).unwrap();
    std::fs::write(r.join("etc/fstab"), "/dev/vda / ext4 rw 0 1\n").unwrap();
    std::fs::write(d.join("guestinfo.metadata"), "instance-id: i-1\n").unwrap();
    std::fs::write(d.join("guestinfo.userdata"), userdata).unwrap();
    (
        format!("dir:{}", d.display()),
        r.to_string_lossy().into_owned(),
    )
}

const MOUNTS: &str = "#cloud-config
mounts:
- [nfs.example:/export, /mnt/nfs, nfs]
- [tmpfs, /mnt/scratch, tmpfs, 'size=64m']
- [no-such-disk-xyz, /mnt/gone]
- [ephemeral0, /mnt/eph]
- [ephemeral0, null]
";

#[test]
fn fstab_as_cc_mounts_writes_it() {
    let t = tempfile::tempdir().unwrap();
    let (transport, root) = setup(t.path(), MOUNTS);
    let (code, _, err) = agent(&["run", "--transport", &transport, "--root", &root]);
    // Exit 2: the cancelled ephemeral0 entry is reported.
    assert_eq!(code, 2, "{err}");
    let opts =
        "defaults,nofail,x-systemd.after=nodeagent-local.service,_netdev,comment=cloudconfig";
    assert_eq!(
        std::fs::read_to_string(Path::new(&root).join("etc/fstab")).unwrap(),
        format!(
            "/dev/vda / ext4 rw 0 1\n\
             nfs.example:/export\t/mnt/nfs\tnfs\t{opts}\t0\t2\n\
             tmpfs\t/mnt/scratch\ttmpfs\tsize=64m,comment=cloudconfig\t0\t2\n\
             no-such-disk-xyz\t/mnt/gone\tauto\t{opts}\t0\t2\n"
        ),
        "devices as given (never /dev/host:/export), cloud-init's default options"
    );
    for d in ["mnt/nfs", "mnt/scratch", "mnt/gone"] {
        let m = std::fs::metadata(Path::new(&root).join(d)).unwrap();
        assert!(m.is_dir(), "{d}");
        assert_eq!(m.permissions().mode() & 0o7777, 0o755, "{d}");
    }
    assert!(!Path::new(&root).join("mnt/eph").exists());
}

#[test]
fn mount_default_fields_replace_the_defaults() {
    let t = tempfile::tempdir().unwrap();
    let ud = "#cloud-config
mount_default_fields: [null, null, ext4, 'defaults,noatime', '0', '0']
mounts:
- [nfs:/x, /srv/x]
- [nfs:/y, /srv/y, nfs4, null, 1]
";
    let (transport, root) = setup(t.path(), ud);
    let (code, _, err) = agent(&["run", "--transport", &transport, "--root", &root]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(Path::new(&root).join("etc/fstab")).unwrap(),
        "/dev/vda / ext4 rw 0 1\n\
         nfs:/x\t/srv/x\text4\tdefaults,noatime,comment=cloudconfig\t0\t0\n\
         nfs:/y\t/srv/y\tnfs4\tdefaults,noatime,comment=cloudconfig\t1\t0\n"
    );
    // The next instance replaces our lines and keeps the image's.
    std::fs::write(
        Path::new(&transport[4..]).join("guestinfo.metadata"),
        "instance-id: i-2\n",
    )
    .unwrap();
    std::fs::write(
        Path::new(&transport[4..]).join("guestinfo.userdata"),
        "#cloud-config\nmounts:\n- [nfs:/z, /z]\n",
    )
    .unwrap();
    let (code, _, err) = agent(&["run", "--transport", &transport, "--root", &root]);
    assert_eq!(code, 0, "{err}");
    let fstab = std::fs::read_to_string(Path::new(&root).join("etc/fstab")).unwrap();
    assert!(
        fstab.starts_with("/dev/vda / ext4 rw 0 1\nnfs:/z\t/z\tauto\t"),
        "{fstab}"
    );
    assert_eq!(fstab.lines().count(), 2, "{fstab}");
}

#[test]
fn fields_with_spaces_are_refused_before_any_write() {
    let t = tempfile::tempdir().unwrap();
    let ud = "#cloud-config\nwrite_files:\n- path: /etc/x\n  content: x\nmounts:\n- [nfs:/x, /srv/my data]\n";
    let (transport, root) = setup(t.path(), ud);
    let (code, _, err) = agent(&["run", "--transport", &transport, "--root", &root]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("mounts[0]") && err.contains("spaces"), "{err}");
    assert!(!Path::new(&root).join("etc/x").exists());
}

#[test]
fn absent_disks_warn_and_the_run_carries_on() {
    let t = tempfile::tempdir().unwrap();
    let ud = "#cloud-config
disk_setup:
  /dev/nodeagent-test-absent-disk:
    table_type: gpt
    layout: true
fs_setup:
- device: /dev/nodeagent-test-absent-disk
  partition: '1'
  filesystem: ext4
  label: data
write_files:
- path: /etc/after-disks
  content: written after the disks
  defer: true
";
    let (transport, root) = setup(t.path(), ud);
    // --exec: disk tools run (on the host's /dev, where the disk is absent).
    let (code, _, err) = agent(&["run", "--exec", "--transport", &transport, "--root", &root]);
    assert_eq!(code, 2, "degraded, not failed: {err}");
    assert!(
        err.contains("disk_setup./dev/nodeagent-test-absent-disk") && err.contains("carrying on"),
        "{err}"
    );
    assert!(
        err.contains("fs_setup./dev/nodeagent-test-absent-disk1"),
        "{err}"
    );
    // Steps after the disks ran: nothing stopped halfway.
    assert_eq!(
        std::fs::read_to_string(Path::new(&root).join("etc/after-disks")).unwrap(),
        "written after the disks"
    );
    let (_, status, _) = agent(&["status", "--json", "--root", &root]);
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    let text = v.to_string();
    assert!(
        text.contains("nodeagent-test-absent-disk"),
        "status names the reason: {text}"
    );
}
