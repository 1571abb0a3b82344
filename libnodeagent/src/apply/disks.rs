//! disk_setup, fs_setup, mounts.
//!
//! Partitioning (`sfdisk`) and mkfs run only with `--exec` (device paths are host paths, also
//! under `--root`); an existing partition table or filesystem is never touched unless
//! `overwrite: true` (or `replace_fs` names the filesystem found). `/etc/fstab` entries carry
//! `comment=cloudconfig` as cloud-init's do, so either tool recognises and replaces them; the
//! file is written even without `--exec`, `mount -a` runs only with `--exec` on a real node.

use super::{Ctx, Outcome, commands, files};
use crate::base::error::{Error, ErrorKind, Result, Stage, ensure};
use crate::plan::{DiskSetupSpec, FileWrite, FsSetupSpec, MountsSpec};

/// The plan's rule (plan.rs), checked again here as a last guard.
fn check_device(d: &str, place: &str) -> Result<()> {
    ensure(
        crate::plan::valid_device_path(d),
        Stage::Apply,
        place,
        || format!("{d:?} is not a device path"),
    )
}

/// `blkid -p -o value -s <tag> dev`: empty when the device has no such signature.
fn probe(dev: &str, tag: &str) -> Result<String> {
    let argv = ["blkid", "-p", "-o", "value", "-s", tag, dev];
    let timeout = std::time::Duration::from_secs(crate::base::limits::TOOL_TIMEOUT_SECS);
    let run = commands::run_host_within(&argv, timeout, None)?;
    match run.code {
        Some(0) => Ok(run.stdout.trim().to_string()),
        // blkid exits 2 when nothing was found.
        Some(2) => Ok(String::new()),
        code => Err(Error::of(
            ErrorKind::CommandFailed,
            Stage::Apply,
            "blkid",
            format!(
                "`{}` failed ({}): {}",
                argv.join(" "),
                code.map_or("killed by a signal".into(), |c| format!("exit status: {c}")),
                run.stderr.trim()
            ),
        )),
    }
}

/// Size of a device (or disk image) in 512-byte sectors.
fn sectors(dev: &str) -> Result<u64> {
    use std::io::Seek;
    let mut f = std::fs::File::open(dev).map_err(|e| Error::io(Stage::Apply, dev, "", e))?;
    let bytes = f
        .seek(std::io::SeekFrom::End(0))
        .map_err(|e| Error::io(Stage::Apply, dev, "", e))?;
    Ok(bytes / 512)
}

/// sfdisk script for a layout in percent of the disk (cloud-init's `layout`); sfdisk takes
/// sizes in sectors, so percentages are converted for a disk of `total` sectors.
pub fn sfdisk_script(
    table_type: &str,
    layout: &[(u32, Option<String>)],
    total: u64,
) -> Result<String> {
    let label = match table_type {
        "mbr" | "dos" | "" => "dos",
        "gpt" => "gpt",
        other => {
            return Err(Error::invalid(
                Stage::Apply,
                "disk_setup.table_type",
                format!("{other:?} is not mbr or gpt"),
            ));
        }
    };
    let sum: u32 = layout.iter().map(|l| l.0).sum();
    if sum > 100 || layout.iter().any(|l| l.0 == 0) {
        return Err(Error::invalid(
            Stage::Apply,
            "disk_setup.layout",
            "partition sizes must be 1..100 percent and sum to at most 100",
        ));
    }
    let mut s = format!("label: {label}\n");
    for (i, (pct, ty)) in layout.iter().enumerate() {
        let last = i + 1 == layout.len();
        // 1 MiB alignment at the start, room for the GPT backup at the end.
        let usable = total.saturating_sub(2048 + 34);
        let size = if last && sum == 100 {
            String::new()
        } else {
            format!("size={}, ", usable * u64::from(*pct) / 100 / 2048 * 2048)
        };
        let t = ty
            .as_deref()
            .map(|t| format!("type={t}"))
            .unwrap_or_else(|| "type=L".into());
        if t.contains(['\n', ',']) {
            return Err(Error::invalid(
                Stage::Apply,
                "disk_setup.layout",
                "bad partition type",
            ));
        }
        s.push_str(&format!("{size}{t}\n"));
    }
    Ok(s)
}

/// cc_disk_setup's `assert_and_settle_device`: a device that is not there yet gets one
/// `udevadm settle` (bounded: 120 s, udevadm's own default) to appear.
fn settle_device(dev: &str) -> Result<()> {
    if std::path::Path::new(dev).exists() {
        return Ok(());
    }
    // No udevadm (a udev-less image) is cloud-init's "skip the settle" too.
    let _ = commands::run_host(
        &[
            "udevadm",
            "settle",
            "--timeout=120",
            &format!("--exit-if-exists={dev}"),
        ],
        None,
    );
    if std::path::Path::new(dev).exists() {
        return Ok(());
    }
    Err(Error::not_found(
        Stage::Apply,
        dev,
        "device did not exist and did not appear after udevadm settle",
    ))
}

pub fn disk_setup(ctx: &mut Ctx<'_>, d: &DiskSetupSpec) -> Result<Outcome> {
    if !ctx.opts.exec {
        return Ok(Outcome::Skipped);
    }
    // As cc_disk_setup: a disk that fails is a warning ("Failed partitioning operation") and
    // the next disk, and the rest of the boot, carry on.
    for disk in &d.disks {
        let place = format!("disk_setup.{}", disk.device);
        if let Err(e) = partition_disk(disk, &place) {
            ctx.warn(format!(
                "{place}: partitioning failed, carrying on as cloud-init does: {}",
                e.detail()
            ));
        }
    }
    Ok(Outcome::Ok)
}

fn partition_disk(disk: &crate::plan::DiskSpec, place: &str) -> Result<()> {
    check_device(&disk.device, place)?;
    if disk.layout.is_empty() {
        return Ok(());
    }
    settle_device(&disk.device)?;
    let script = sfdisk_script(&disk.table_type, &disk.layout, sectors(&disk.device)?)
        .map_err(|e| e.within(place))?;
    let existing = probe(&disk.device, "PTTYPE")?;
    let fs = probe(&disk.device, "TYPE")?;
    if (!existing.is_empty() || !fs.is_empty()) && !disk.overwrite {
        tracing::info!(device = %disk.device, "already partitioned or formatted; left alone (overwrite: false)");
        return Ok(());
    }
    commands::run_host(
        &["sfdisk", "--quiet", "--wipe", "always", &disk.device],
        Some(script.as_bytes()),
    )
    .map_err(|e| e.within(place))?;
    Ok(())
}

/// The device mkfs targets: `partition` `none`/`auto`/`any` use the device, a number its partition.
fn target_device(dev: &str, partition: Option<&str>) -> String {
    match partition {
        Some(p) if p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty() => {
            if dev.ends_with(|c: char| c.is_ascii_digit()) {
                format!("{dev}p{p}")
            } else {
                format!("{dev}{p}")
            }
        }
        _ => dev.to_string(),
    }
}

pub fn fs_setup(ctx: &mut Ctx<'_>, f: &FsSetupSpec) -> Result<Outcome> {
    if !ctx.opts.exec {
        return Ok(Outcome::Skipped);
    }
    // As cc_disk_setup: "Failed during filesystem operation" is a warning, then the next one.
    for fs in &f.filesystems {
        let dev = target_device(&fs.device, fs.partition.as_deref());
        let place = format!("fs_setup.{dev}");
        if let Err(e) = make_fs(fs, &dev, &place) {
            ctx.warn(format!(
                "{place}: making the filesystem failed, carrying on as cloud-init does: {}",
                e.detail()
            ));
        }
    }
    Ok(Outcome::Ok)
}

fn make_fs(fs: &crate::plan::FsSpec, dev: &str, place: &str) -> Result<()> {
    check_device(dev, place)?;
    if !fs.filesystem.bytes().all(|b| b.is_ascii_alphanumeric()) || fs.filesystem.is_empty() {
        return Err(Error::invalid(
            Stage::Apply,
            place,
            format!("filesystem {:?} is not a mkfs type", fs.filesystem),
        ));
    }
    settle_device(dev)?;
    let found = probe(dev, "TYPE")?;
    let replace = fs.replace_fs.as_deref().is_some_and(|r| r == found);
    if !found.is_empty() && !fs.overwrite && !replace {
        tracing::info!(device = %dev, found = %found, "filesystem exists; not reformatted (overwrite: false)");
        return Ok(());
    }
    let mkfs = format!("mkfs.{}", fs.filesystem);
    let mut argv: Vec<&str> = vec![&mkfs];
    if let Some(l) = &fs.label {
        argv.extend([
            if fs.filesystem == "vfat" { "-n" } else { "-L" },
            l.as_str(),
        ]);
    }
    if !found.is_empty() && matches!(fs.filesystem.as_str(), "ext2" | "ext3" | "ext4") {
        argv.push("-F");
    }
    if !found.is_empty() && matches!(fs.filesystem.as_str(), "xfs" | "btrfs") {
        argv.push("-f");
    }
    argv.extend(fs.extra_opts.iter().map(String::as_str));
    argv.push(dev);
    commands::run_host(&argv, None).map_err(|e| e.within(place))?;
    Ok(())
}

/// cc_mounts' `MNT_COMMENT`: marks the fstab lines cloud-init (and nodeagent) own.
const MNT_COMMENT: &str = "comment=cloudconfig";

/// What `sanitize_devname` needs to know about the host's devices.
pub trait HostDevices {
    /// `os.path.exists` of a device path.
    fn exists(&self, path: &str) -> bool;
    /// `os.path.realpath` of a device path.
    fn realpath(&self, path: &str) -> String;
    /// `os.path.exists("/sys/block/" + rel)`.
    fn sys_block(&self, rel: &str) -> bool;
}

/// The real host: `/dev` and `/sys/block` (device paths are host paths, also under `--root`).
pub struct Host;

impl HostDevices for Host {
    fn exists(&self, path: &str) -> bool {
        std::path::Path::new(path).exists()
    }
    fn realpath(&self, path: &str) -> String {
        std::fs::canonicalize(path)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| path.to_string())
    }
    fn sys_block(&self, rel: &str) -> bool {
        std::path::Path::new("/sys/block").join(rel).exists()
    }
}

/// cloud-init 22.4's `sanitize_devname`: `host:/export` as given; names of metadata devices
/// (`ephemeral0`, `swap`, `ami`, `root`, `ebsN`) resolve to nothing on the VMware and NoCloud
/// datasources; `sdb`, `xvdc1`, `sr0` get `/dev/`; `DEV.N` is partition N; a disk with a first
/// partition names that partition; the result must be a block device in /sys/block.
pub fn sanitize_devname(
    start: &str,
    aliases: &std::collections::BTreeMap<String, String>,
    host: &dyn HostDevices,
) -> Option<String> {
    let devname = if start == "ephemeral" {
        "ephemeral0"
    } else {
        start
    };
    // NETWORK_NAME_FILTER `^.+:.*`
    if start.find(':').is_some_and(|i| i > 0) {
        return Some(start.to_string());
    }
    let (device, partition) = match devname.rsplit_once('.') {
        Some((d, p)) => (d.to_string(), Some(p.to_string())),
        None => (devname.to_string(), None),
    };
    let mut device = aliases.get(&device).cloned().unwrap_or(device);
    let meta = ["ami", "root", "swap"].contains(&device.as_str())
        || (["ephemeral", "ebs"].iter().any(|p| device.starts_with(p)) && !device.contains(':'));
    if meta {
        return None; // DataSource.device_name_to_device: None for our datasources
    }
    if is_kernel_disk_name(start) {
        device = format!("/dev/{device}");
    }
    let nth = |n: &str| {
        [n.to_string(), format!("p{n}"), format!("-part{n}")]
            .into_iter()
            .map(|suffix| format!("{device}{suffix}"))
            .find(|p| host.exists(p))
    };
    let partition_path = match &partition {
        None => nth("1"),
        Some(n) => Some(nth(n)?),
    };
    let base = |p: &str| {
        host.realpath(p)
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let sys = match &partition_path {
        Some(pp) => format!("{}/{}", base(&device), base(pp)),
        None => base(&device),
    };
    host.sys_block(&sys)
        .then(|| partition_path.unwrap_or(device))
}

/// DEVICE_NAME_FILTER `^([x]{0,1}[shv]d[a-z][0-9]*|sr[0-9]+)$`.
fn is_kernel_disk_name(n: &str) -> bool {
    let b = n.as_bytes();
    if let Some(d) = n.strip_prefix("sr") {
        return !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit());
    }
    let rest = match b.first() {
        Some(b'x') => &b[1..],
        _ => b,
    };
    rest.len() >= 3
        && b"shv".contains(&rest[0])
        && rest[1] == b'd'
        && rest[2].is_ascii_lowercase()
        && rest[3..].iter().all(u8::is_ascii_digit)
}

/// The fstab lines cc_mounts writes, and whether fstab's own lines changed (its `sops`).
#[derive(Debug, Clone, PartialEq)]
pub struct FstabUpdate {
    pub text: String,
    pub changed: bool,
    /// Mount points (absolute paths) to create.
    pub dirs: Vec<String>,
    pub swap: bool,
}

/// New fstab as cc_mounts makes it: lines without `comment=cloudconfig` kept, ours replaced.
/// An entry whose device is missing, or already listed in fstab, keeps the device as given
/// (cloud-init only logs that), so the result is cloud-init's byte for byte.
pub fn fstab(
    current: &str,
    entries: &[Vec<String>],
    aliases: &std::collections::BTreeMap<String, String>,
    host: &dyn HostDevices,
) -> FstabUpdate {
    let mut kept = Vec::new();
    let mut removed = Vec::new();
    let mut devs = Vec::new();
    for line in current.lines() {
        if line.contains(MNT_COMMENT) {
            removed.push(line);
            continue;
        }
        devs.push(line.split_whitespace().next().unwrap_or(""));
        kept.push(line);
    }
    let mut ours = Vec::new();
    let (mut dirs, mut swap) = (Vec::new(), false);
    for e in entries {
        let mut e = e.clone();
        match sanitize_devname(&e[0], aliases, host) {
            None => {
                tracing::info!(device = %e[0], "mounts: no such block device; entry written as given (as cloud-init)")
            }
            Some(d) if devs.contains(&d.as_str()) => {
                tracing::info!(device = %d, "mounts: device already in fstab")
            }
            Some(d) => e[0] = d,
        }
        if let Some(opts) = e.get_mut(3) {
            *opts = format!("{opts},{MNT_COMMENT}");
        }
        swap |= e.get(2).is_some_and(|t| t == "swap");
        if e[1].starts_with('/') {
            dirs.push(e[1].clone());
        }
        ours.push(e.join("\t"));
    }
    let norm = |l: &str| l.split_whitespace().collect::<Vec<_>>().join(" ");
    let adds: Vec<String> = ours.iter().map(|l| norm(l)).collect();
    let drops: Vec<String> = removed.iter().map(|l| norm(l)).collect();
    let changed =
        drops.iter().any(|d| !adds.contains(d)) || adds.iter().any(|a| !drops.contains(a));
    let mut lines: Vec<String> = kept.iter().map(|l| l.to_string()).collect();
    lines.extend(ours);
    FstabUpdate {
        text: format!("{}\n", lines.join("\n")),
        changed,
        dirs,
        swap,
    }
}

/// Mount points listed in /proc/self/mountinfo (field 5, octal escapes undone).
fn mount_points() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| {
            m.replace("\\040", " ")
                .replace("\\011", "\t")
                .replace("\\012", "\n")
                .replace("\\134", "\\")
        })
        .collect()
}

/// cc_mounts: fstab written, mount points made; then (with `--exec` on a real node)
/// `swapon -a`, `mount -a` and `systemctl daemon-reload` as cloud-init runs them. A failing
/// activation is a warning (the run ends `degraded`), not a failure: cloud-init carries on.
pub fn mounts(ctx: &mut Ctx<'_>, m: &MountsSpec) -> Result<Outcome> {
    let t = ctx.target().clone();
    let p = t.path("/etc/fstab")?;
    let cur = match std::fs::read_to_string(&p) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(Error::io(Stage::Apply, "/etc/fstab", "", e)),
    };
    let up = fstab(&cur, &m.entries, &m.device_aliases, &Host);
    let f = FileWrite::root_owned("/etc/fstab", up.text.clone().into_bytes(), 0o644);
    let db = ctx.db()?.clone();
    files::write_bytes(&t, &f, up.text.as_bytes(), &db)?;
    for d in &up.dirs {
        let path = t.path(d)?;
        use std::os::unix::fs::DirBuilderExt;
        if let Err(e) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&path)
        {
            // util.ensure_dir failing is logged by cloud-init, and the module goes on.
            ctx.warn(format!("mounts: could not make mount point {d}: {e}"));
        }
    }
    if !(ctx.opts.exec && t.is_host()) {
        return Ok(Outcome::Ok);
    }
    let mounted = mount_points();
    let need_mount_all = up.changed || up.dirs.iter().any(|d| !mounted.contains(d));
    let mut activate: Vec<&[&str]> = Vec::new();
    if up.swap {
        activate.push(&["swapon", "-a"]);
    }
    if need_mount_all {
        activate.push(&["mount", "-a"]);
        activate.push(&["systemctl", "daemon-reload"]);
    }
    for argv in activate {
        if let Err(e) = commands::run_host(argv, None) {
            ctx.warn(format!(
                "mounts: `{}` failed ({}); /etc/fstab is written, carrying on as cloud-init does",
                argv.join(" "),
                e.detail()
            ));
        }
    }
    Ok(Outcome::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host with /dev/sdb (partition sdb1), /dev/vdc (no partitions) and nothing else.
    struct Fake;
    impl HostDevices for Fake {
        fn exists(&self, p: &str) -> bool {
            ["/dev/sdb", "/dev/sdb1", "/dev/vdc"].contains(&p)
        }
        fn realpath(&self, p: &str) -> String {
            p.to_string()
        }
        fn sys_block(&self, rel: &str) -> bool {
            ["sdb", "sdb/sdb1", "vdc"].contains(&rel)
        }
    }

    fn e(f: &[&str]) -> Vec<String> {
        f.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn devices_resolve_as_cloud_init() {
        let none = std::collections::BTreeMap::new();
        let s = |n: &str| sanitize_devname(n, &none, &Fake);
        assert_eq!(
            s("nfs.example:/export").as_deref(),
            Some("nfs.example:/export")
        );
        assert_eq!(s("sdb").as_deref(), Some("/dev/sdb1"), "first partition");
        assert_eq!(s("/dev/sdb").as_deref(), Some("/dev/sdb1"));
        assert_eq!(s("/dev/sdb.1").as_deref(), Some("/dev/sdb1"));
        assert_eq!(s("/dev/sdb.2"), None);
        // `sdb.1` does not match DEVICE_NAME_FILTER, so it gets no /dev/ and resolves to nothing.
        assert_eq!(s("sdb.1"), None);
        assert_eq!(s("vdc").as_deref(), Some("/dev/vdc"));
        assert_eq!(s("tmpfs"), None, "not a block device");
        assert_eq!(s("sdz"), None);
        assert_eq!(s("ephemeral0"), None);
        assert_eq!(s("swap"), None);
        let aliases = [("data".to_string(), "/dev/vdc".to_string())].into();
        assert_eq!(
            sanitize_devname("data", &aliases, &Fake).as_deref(),
            Some("/dev/vdc")
        );
        assert!(is_kernel_disk_name("xvdb1") && is_kernel_disk_name("sr0"));
        assert!(!is_kernel_disk_name("nvme0n1") && !is_kernel_disk_name("sd"));
    }

    #[test]
    fn fstab_as_cc_mounts_writes_it() {
        let none = std::collections::BTreeMap::new();
        let cur =
            "UUID=x / ext4 defaults 0 1\n/dev/old /old auto defaults,comment=cloudconfig 0 2\n";
        let entries = [
            e(&["sdb", "/data", "ext4", "defaults,nofail", "0", "2"]),
            e(&["nfs:/export", "/nfs", "nfs", "defaults,_netdev", "0", "0"]),
            e(&["tmpfs", "/scratch", "tmpfs", "defaults", "0", "0"]),
            e(&["sdz", "/gone", "auto", "defaults", "0", "2"]),
        ];
        let up = fstab(cur, &entries, &none, &Fake);
        assert_eq!(
            up.text,
            "UUID=x / ext4 defaults 0 1\n\
             /dev/sdb1\t/data\text4\tdefaults,nofail,comment=cloudconfig\t0\t2\n\
             nfs:/export\t/nfs\tnfs\tdefaults,_netdev,comment=cloudconfig\t0\t0\n\
             tmpfs\t/scratch\ttmpfs\tdefaults,comment=cloudconfig\t0\t0\n\
             sdz\t/gone\tauto\tdefaults,comment=cloudconfig\t0\t2\n"
        );
        assert!(up.changed && !up.swap);
        assert_eq!(up.dirs, ["/data", "/nfs", "/scratch", "/gone"]);
        // The same entries again: nothing changed, the text is stable.
        let again = fstab(&up.text, &entries, &none, &Fake);
        assert_eq!(again.text, up.text);
        assert!(!again.changed);
        // A device the image's fstab already lists keeps the name as given.
        let up = fstab(
            "/dev/sdb1 /srv ext4 defaults 0 2\n",
            &[e(&["sdb", "/data", "ext4", "defaults", "0", "2"])],
            &none,
            &Fake,
        );
        assert_eq!(
            up.text,
            "/dev/sdb1 /srv ext4 defaults 0 2\nsdb\t/data\text4\tdefaults,comment=cloudconfig\t0\t2\n"
        );
        let swap = fstab(
            "",
            &[e(&["vdc", "none", "swap", "sw", "0", "0"])],
            &none,
            &Fake,
        );
        assert!(swap.swap && swap.dirs.is_empty());
    }

    #[test]
    fn sfdisk_layouts() {
        assert_eq!(
            sfdisk_script("gpt", &[(100, None)], 1 << 20).unwrap(),
            "label: gpt\ntype=L\n"
        );
        assert_eq!(
            sfdisk_script("mbr", &[(33, None), (67, Some("82".into()))], 1 << 20).unwrap(),
            "label: dos\nsize=344064, type=L\ntype=82\n"
        );
        assert!(sfdisk_script("gpt", &[(80, None), (30, None)], 1 << 20).is_err());
        assert_eq!(target_device("/dev/sdb", Some("1")), "/dev/sdb1");
        assert_eq!(target_device("/dev/nvme0n1", Some("2")), "/dev/nvme0n1p2");
        assert_eq!(target_device("/dev/sdb", Some("auto")), "/dev/sdb");
    }
}
