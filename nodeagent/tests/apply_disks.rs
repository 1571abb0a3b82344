//! disk_setup / fs_setup / mounts with the real tools (sfdisk, mkfs.ext4, blkid) on
//! file-backed disk images: partitions made, filesystems never reformatted without
//! `overwrite: true`, fstab entries replaced not duplicated, nothing done without --exec.

mod apply_common;
use apply_common::*;
use libnodeagent::plan::*;

fn image(path: &std::path::Path, mib: u64) {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(mib * 1024 * 1024).unwrap();
}

fn blkid(dev: &std::path::Path, tag: &str) -> String {
    let out = std::process::Command::new("blkid")
        .args(["-p", "-o", "value", "-s", tag])
        .arg(dev)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn fs_plan(dev: &str, label: &str, overwrite: bool) -> Plan {
    plan(
        "vm-disk",
        vec![step(
            &format!("fs_setup:{label}"),
            RunStage::Main,
            Frequency::PerInstance,
            Action::FsSetup(FsSetupSpec {
                filesystems: vec![FsSpec {
                    label: Some(label.into()),
                    filesystem: "ext4".into(),
                    device: dev.into(),
                    partition: Some("none".into()),
                    overwrite,
                    replace_fs: None,
                    extra_opts: vec!["-q".into()],
                }],
            }),
        )],
    )
}

#[test]
fn partition_format_never_reformat_and_fstab() {
    if !prereq::privileged(&["/usr/sbin/sfdisk", "/usr/sbin/mkfs.ext4", "/usr/sbin/blkid"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let r = d.path().join("root");
    std::fs::create_dir(&r).unwrap();
    let disk = d.path().join("disk.img");
    image(&disk, 64);
    let dev = disk.to_str().unwrap();

    // Partitioning: without --exec nothing happens; with it, a GPT with two partitions.
    let part = plan(
        "vm-disk",
        vec![step(
            "disk_setup",
            RunStage::Main,
            Frequency::PerInstance,
            Action::DiskSetup(DiskSetupSpec {
                disks: vec![DiskSpec {
                    device: dev.into(),
                    table_type: "gpt".into(),
                    layout: vec![(50, None), (50, None)],
                    overwrite: false,
                }],
            }),
        )],
    );
    run(&r, &part, false, false, "b").unwrap();
    assert_eq!(blkid(&disk, "PTTYPE"), "");
    run(&r, &part, true, false, "b").unwrap();
    assert_eq!(blkid(&disk, "PTTYPE"), "gpt");
    let dump = std::process::Command::new("sfdisk")
        .arg("-d")
        .arg(&disk)
        .output()
        .unwrap();
    let dump = String::from_utf8_lossy(&dump.stdout);
    assert_eq!(
        dump.lines().filter(|l| l.contains("start=")).count(),
        2,
        "{dump}"
    );

    // Filesystem on a second image; a second plan (new instance) must not reformat it.
    let fsimg = d.path().join("fs.img");
    image(&fsimg, 32);
    let fdev = fsimg.to_str().unwrap();
    run(&r, &fs_plan(fdev, "first", false), true, false, "b").unwrap();
    assert_eq!(
        (
            blkid(&fsimg, "TYPE").as_str(),
            blkid(&fsimg, "LABEL").as_str()
        ),
        ("ext4", "first")
    );
    let mut p = fs_plan(fdev, "second", false);
    p.instance_id = "vm-disk-2".into();
    run(&r, &p, true, false, "b").unwrap();
    assert_eq!(blkid(&fsimg, "LABEL"), "first", "existing filesystem kept");
    let mut p = fs_plan(fdev, "third", true);
    p.instance_id = "vm-disk-3".into();
    run(&r, &p, true, false, "b").unwrap();
    assert_eq!(blkid(&fsimg, "LABEL"), "third", "overwrite: true reformats");

    // mounts: fstab written under the root, own lines replaced on the next instance.
    std::fs::create_dir_all(r.join("etc")).unwrap();
    std::fs::write(r.join("etc/fstab"), "UUID=abc / ext4 defaults 0 1\n").unwrap();
    let m = |iid: &str, dir: &str| {
        plan(
            iid,
            vec![step(
                "mounts",
                RunStage::Main,
                Frequency::PerInstance,
                Action::Mounts(MountsSpec {
                    entries: vec![vec![
                        "LABEL=third".into(),
                        dir.into(),
                        "ext4".into(),
                        "defaults,nofail".into(),
                        "0".into(),
                        "2".into(),
                    ]],
                    device_aliases: Default::default(),
                }),
            )],
        )
    };
    run(&r, &m("i1", "/data"), false, false, "b").unwrap();
    run(&r, &m("i2", "/srv/data"), false, false, "b").unwrap();
    assert_eq!(
        std::fs::read_to_string(r.join("etc/fstab")).unwrap(),
        "UUID=abc / ext4 defaults 0 1\nLABEL=third\t/srv/data\text4\tdefaults,nofail,comment=cloudconfig\t0\t2\n"
    );
}
