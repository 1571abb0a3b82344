//! growpart and resizefs: grow the root partition and filesystem to the disk at every boot,
//! as cloud-init's cc_growpart.py and cc_resizefs.py (22.4) do on cloud images.
//!
//! Same decisions as cloud-init: a mount point becomes its device through
//! `/proc/self/mountinfo` (`/dev/root` through `root=` on the kernel command line); the
//! partition number and its disk come from sysfs; `growpart --dry-run DISK N` exiting 1 means
//! "nothing to grow"; device-mapper devices are left alone; ext2/3/4 grow with `resize2fs
//! DEV`, XFS with `xfs_growfs MOUNTPOINT`, Btrfs with `btrfs filesystem resize max MOUNTPOINT`.
//! Unlike cloud-init, every tool has a deadline, and every problem is a warning (the run ends
//! `degraded` with the reason) instead of a debug line: a node that did not grow fills up.
//! Never fatal: a bootstrap does not fail because its disk could not grow.

use super::commands::{ToolRun, run_host_within};
use super::{Ctx, Outcome};
use crate::base::error::Result;
use crate::plan::{GrowpartSpec, ResizeFsSpec};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the system's facts live: `/proc`, `/sys`, `/dev`, `/etc` on a node; a fake tree and
/// fake tools on `path` in tests.
#[derive(Debug, Clone)]
pub struct Host {
    pub proc_dir: PathBuf,
    pub sys_dir: PathBuf,
    pub dev_dir: PathBuf,
    pub etc_dir: PathBuf,
    /// `PATH` for the tools; `None` keeps the agent's.
    pub path: Option<OsString>,
    /// Require device nodes to be block (or character) devices; fakes are plain files.
    pub need_device_node: bool,
}

impl Host {
    pub fn real() -> Host {
        Host {
            proc_dir: "/proc".into(),
            sys_dir: "/sys".into(),
            dev_dir: "/dev".into(),
            etc_dir: "/etc".into(),
            path: None,
            need_device_node: true,
        }
    }

    /// The file behind a `/dev/...` path.
    fn dev(&self, p: &str) -> PathBuf {
        self.dev_dir.join(p.trim_start_matches("/dev/"))
    }

    /// `os.path.realpath` of a `/dev/...` path, as a `/dev/...` path.
    fn realdev(&self, p: &str) -> Option<String> {
        let real = std::fs::canonicalize(self.dev(p)).ok()?;
        let base = std::fs::canonicalize(&self.dev_dir).ok()?;
        let rel = real.strip_prefix(base).ok()?;
        Some(format!("/dev/{}", rel.display()))
    }

    fn run(&self, argv: &[&str], timeout: Duration) -> Result<ToolRun> {
        run_host_within(argv, timeout, self.path.as_deref())
    }
}

/// growpart's FUDGE: it grows a partition only by at least this much (cloud-utils' growpart).
const GROWPART_FUDGE: u64 = 1024 * 1024;

/// A mount as cloud-init's `parse_mount_info` returns it: (source, fstype, mount point), for
/// the mount that holds `path` (the longest mount point above it; the later of equal ones).
pub fn mount_of(mountinfo: &str, path: &str) -> Option<(String, String, String)> {
    let mut best: Option<(String, String, String)> = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(mp), Some(fstype), Some(source)) =
            (fields.get(4), fields.get(sep + 1), fields.get(sep + 2))
        else {
            continue;
        };
        let mp = mp.replace("\\040", " ");
        let under = path == mp || mp == "/" || path.starts_with(&format!("{mp}/"));
        if under && best.as_ref().is_none_or(|b| mp.len() >= b.2.len()) {
            best = Some((source.to_string(), fstype.to_string(), mp));
        }
    }
    best
}

/// The root device named by `root=` on the kernel command line (`/dev/root`'s real device).
pub fn rootdev_from_cmdline(cmdline: &str) -> Option<String> {
    let root = cmdline
        .split_whitespace()
        .filter_map(|a| a.strip_prefix("root="))
        .next_back()?;
    for (tag, dir) in [
        ("LABEL=", "by-label"),
        ("UUID=", "by-uuid"),
        ("PARTUUID=", "by-partuuid"),
    ] {
        if let Some(v) = root.strip_prefix(tag) {
            return Some(format!("/dev/disk/{dir}/{v}"));
        }
    }
    Some(if root.starts_with('/') {
        root.to_string()
    } else {
        format!("/dev/{root}")
    })
}

/// What happened to one `devices` entry (cloud-init's RESIZE actions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grown {
    Changed(String),
    NoChange(String),
    /// Not a partition, a mapped device...: nothing for growpart to do (logged, not a warning).
    Skipped(String),
    Failed(String),
}

impl Host {
    fn mountinfo(&self) -> String {
        std::fs::read_to_string(self.proc_dir.join("self/mountinfo")).unwrap_or_default()
    }

    /// cloud-init's `devent2dev`: a mount point becomes its mount source.
    fn device_of(&self, entry: &str) -> std::result::Result<String, String> {
        if entry.starts_with("/dev/") {
            return Ok(entry.to_string());
        }
        let (dev, _, _) =
            mount_of(&self.mountinfo(), entry).ok_or_else(|| format!("no mount holds {entry}"))?;
        if dev == "/dev/root" && !self.dev(&dev).exists() {
            let cmdline =
                std::fs::read_to_string(self.proc_dir.join("cmdline")).unwrap_or_default();
            return rootdev_from_cmdline(&cmdline)
                .ok_or_else(|| "unable to find device '/dev/root'".to_string());
        }
        Ok(dev)
    }

    fn is_device_node(&self, dev: &str) -> bool {
        use std::os::unix::fs::FileTypeExt;
        match std::fs::metadata(self.dev(dev)) {
            Ok(m) if !self.need_device_node => m.is_file() || m.file_type().is_block_device(),
            Ok(m) => m.file_type().is_block_device() || m.file_type().is_char_device(),
            Err(_) => false,
        }
    }

    /// cloud-init's `device_part_info`: (disk device, partition number) from sysfs.
    fn part_info(&self, dev: &str) -> std::result::Result<(String, String), String> {
        let real = self
            .realdev(dev)
            .ok_or_else(|| format!("{dev} does not exist"))?;
        let name = real.trim_start_matches("/dev/");
        let sys = self.sys_dir.join("class/block").join(name);
        if !sys.exists() {
            return Err(format!("{dev} had no syspath ({})", sys.display()));
        }
        let ptnum = std::fs::read_to_string(sys.join("partition"))
            .map_err(|_| format!("{dev} not a partition"))?
            .trim()
            .to_string();
        let disk = std::fs::canonicalize(&sys)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .ok_or_else(|| format!("{dev}: no parent disk in sysfs"))?;
        Ok((format!("/dev/{disk}"), ptnum))
    }

    fn size(&self, dev: &str) -> u64 {
        use std::io::Seek;
        std::fs::File::open(self.dev(dev))
            .and_then(|mut f| f.seek(std::io::SeekFrom::End(0)))
            .unwrap_or(0)
    }

    /// Growpart's answer without starting it, when sysfs settles it: `Some(NOCHANGE message)`
    /// when less than growpart's minimum growth (1 MiB, its FUDGE) follows partition `dev` on
    /// `disk` (sysfs `start`/`size` of the partition and `size` of the disk, 512-byte units).
    /// `None` (ask growpart) when there is more, or sysfs does not say.
    fn too_little_room(&self, dev: &str, disk: &str, ptnum: &str) -> Option<String> {
        let name = self.realdev(dev)?;
        let part = std::fs::canonicalize(
            self.sys_dir
                .join("class/block")
                .join(name.strip_prefix("/dev/")?),
        )
        .ok()?;
        let num =
            |p: PathBuf| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
        let end = num(part.join("start"))?.checked_add(num(part.join("size"))?)?;
        let room = num(part.parent()?.join("size"))?.checked_sub(end)? * 512;
        (room < GROWPART_FUDGE).then(|| {
            format!("no change necessary ({disk}, {ptnum}): {room} bytes after the partition")
        })
    }

    /// `too_little_room` for one `devices` entry: `Some` only when sysfs shows its partition
    /// cannot grow.
    fn nothing_to_grow(&self, entry: &str) -> Option<String> {
        let dev = self.device_of(entry).ok()?;
        if !self.is_device_node(&dev) {
            return None;
        }
        let (disk, ptnum) = self.part_info(&dev).ok()?;
        self.too_little_room(&dev, &disk, &ptnum)
    }

    /// Grow the partition of one `devices` entry (cloud-init's `resize_devices` for one entry).
    pub fn growpart(&self, entry: &str, timeout: Duration) -> Grown {
        let dev = match self.device_of(entry) {
            Ok(d) => d,
            Err(e) => return Grown::Skipped(format!("unable to convert to device: {e}")),
        };
        if !self.is_device_node(&dev) {
            return Grown::Skipped(format!("device '{dev}' not a block device"));
        }
        if self
            .realdev(&dev)
            .is_some_and(|r| r.starts_with("/dev/dm-"))
        {
            return Grown::Skipped(format!(
                "resizing mapped device ({dev}) skipped as it is not encrypted"
            ));
        }
        let (disk, ptnum) = match self.part_info(&dev) {
            Ok(p) => p,
            Err(e) => return Grown::Skipped(format!("device_part_info({dev}) failed: {e}")),
        };
        if let Some(m) = self.too_little_room(&dev, &disk, &ptnum) {
            return Grown::NoChange(m);
        }
        let before = self.size(&dev);
        let why = |r: &ToolRun| {
            let last = r
                .stderr
                .lines()
                .chain(r.stdout.lines())
                .last()
                .unwrap_or("");
            format!("exit status {:?}: {last}", r.code)
        };
        match self.run(&["growpart", "--dry-run", &disk, &ptnum], timeout) {
            Ok(r) if r.code == Some(1) => {
                return Grown::NoChange(format!("no change necessary ({disk}, {ptnum})"));
            }
            Ok(r) if r.code == Some(0) => {}
            Ok(r) => {
                return Grown::Failed(format!(
                    "growpart --dry-run {disk} {ptnum} failed: {}",
                    why(&r)
                ));
            }
            Err(e) => return Grown::Failed(e.detail()),
        }
        match self.run(&["growpart", &disk, &ptnum], timeout) {
            Ok(r) if r.code == Some(0) => Grown::Changed(format!(
                "changed ({disk}, {ptnum}) from {before} to {}",
                self.size(&dev)
            )),
            Ok(r) => Grown::Failed(format!(
                "failed to resize: disk={disk}, ptnum={ptnum}: {}",
                why(&r)
            )),
            Err(e) => Grown::Failed(e.detail()),
        }
    }

    /// cloud-init's resizefs for `/`: Ok(message) when resized or nothing applies, Err(warning).
    pub fn resizefs(&self, timeout: Duration) -> std::result::Result<String, String> {
        let (mut dev, fstype, mp) = mount_of(&self.mountinfo(), "/")
            .ok_or_else(|| "could not determine filesystem type of /".to_string())?;
        if dev == "/dev/root" && !self.dev(&dev).exists() {
            let cmdline =
                std::fs::read_to_string(self.proc_dir.join("cmdline")).unwrap_or_default();
            dev = rootdev_from_cmdline(&cmdline)
                .ok_or_else(|| "unable to find device '/dev/root'".to_string())?;
        }
        if dev == "overlayroot" {
            return Ok(format!("not resizing {dev}"));
        }
        if !dev.starts_with("/dev/") {
            dev = format!("/dev/{}", dev.trim_start_matches('/'));
        }
        if !self.dev(&dev).exists() {
            return Err(format!("device '{dev}' did not exist. cannot resize /"));
        }
        if !self.is_device_node(&dev) {
            return Err(format!(
                "device '{dev}' not a block device. cannot resize /"
            ));
        }
        let fs = fstype.to_ascii_lowercase();
        if fs.starts_with("ext") && ext_already_full(&self.dev(&dev)) {
            return Ok(format!(
                "/ ({fstype}) already fills {dev}: nothing for resize2fs to do"
            ));
        }
        let argv: Vec<&str> = if fs.starts_with("ext") {
            vec!["resize2fs", &dev]
        } else if fs.starts_with("xfs") {
            vec!["xfs_growfs", &mp]
        } else if fs.starts_with("btrfs") {
            vec!["btrfs", "filesystem", "resize", "max", &mp]
        } else {
            return Err(format!(
                "not resizing unknown filesystem type {fstype} for /"
            ));
        };
        match self.run(&argv, timeout) {
            Ok(r) if r.code == Some(0) => {
                Ok(format!("resized / ({fstype}) with {}", argv.join(" ")))
            }
            Ok(r) => Err(format!(
                "failed to resize filesystem (cmd={}): exit status {:?}: {}",
                argv.join(" "),
                r.code,
                r.stderr.lines().last().unwrap_or("")
            )),
            Err(e) => Err(e.detail()),
        }
    }
}

/// Whether `resize2fs DEV` (no size) would say "Nothing to do!" for the ext2/3/4 filesystem
/// on `dev`: the size it grows to (the device in whole blocks, rounded down to whole 4 KiB
/// pages, as resize2fs's main.c does) is the block count in the superblock (1024 bytes in:
/// block count at 4, log2 of the block size - 10 at 24, magic at 56, incompat features at
/// 96, high block count at 336 with the 64bit feature). False when unsure: resize2fs decides.
fn ext_already_full(dev: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let read = || -> Option<(u64, [u8; 1024])> {
        let mut f = std::fs::File::open(dev).ok()?;
        let size = f.seek(SeekFrom::End(0)).ok()?;
        let mut sb = [0u8; 1024];
        f.seek(SeekFrom::Start(1024)).ok()?;
        f.read_exact(&mut sb).ok()?;
        Some((size, sb))
    };
    let Some((size, sb)) = read() else {
        return false;
    };
    let u32_at = |o: usize| u32::from_le_bytes([sb[o], sb[o + 1], sb[o + 2], sb[o + 3]]) as u64;
    if u16::from_le_bytes([sb[56], sb[57]]) != 0xEF53 || u32_at(24) > 6 {
        return false;
    }
    let block = 1024u64 << u32_at(24);
    let hi = if u32_at(96) & 0x80 != 0 {
        u32_at(336)
    } else {
        0
    };
    let mut grown = size / block;
    if block < 4096 {
        grown &= !(4096 / block - 1);
    }
    grown == (hi << 32) | u32_at(4)
}

/// Disk tools act on the running system's devices: only with `--exec` on the node itself,
/// never under `--root DIR` (that would grow the test host's disk).
fn acts(ctx: &Ctx<'_>, what: &str) -> bool {
    if !ctx.opts.exec {
        return false;
    }
    if !ctx.target().is_host() {
        tracing::info!("{what} skipped: it acts on the running system's disks, not under --root");
        return false;
    }
    true
}

/// Results of the growpart step, for the executor and tests: (log lines, warnings).
pub fn growpart_with(host: &Host, g: &GrowpartSpec) -> (Vec<String>, Vec<String>) {
    let (mut log, mut warnings) = (Vec::new(), Vec::new());
    if !g.ignore_growroot_disabled && host.etc_dir.join("growroot-disabled").exists() {
        log.push("growpart disabled: /etc/growroot-disabled exists".into());
        return (log, warnings);
    }
    // Every partition already fills its disk (the usual boot after the first): growpart would
    // only say NOCHANGE. Its shell script is a dozen processes, seconds under emulation.
    let settled: Vec<Option<String>> = g.devices.iter().map(|e| host.nothing_to_grow(e)).collect();
    if !settled.is_empty() && settled.iter().all(Option::is_some) {
        for (entry, m) in g.devices.iter().zip(settled.into_iter().flatten()) {
            log.push(format!("growpart: '{entry}': {m}"));
        }
        return (log, warnings);
    }
    let timeout = Duration::from_secs(g.timeout_secs.max(1));
    // cloud-init's `resizer_factory("auto")`: growpart must be there and know `--update`.
    match host.run(&["growpart", "--help"], timeout) {
        Ok(r) if r.stdout.contains("--update") || r.stderr.contains("--update") => {}
        Ok(_) | Err(_) => {
            warnings.push(
                "growpart: the image has no usable `growpart` (package cloud-guest-utils); the root partition was not grown".into(),
            );
            return (log, warnings);
        }
    }
    for entry in &g.devices {
        match host.growpart(entry, timeout) {
            Grown::Changed(m) => log.push(format!("growpart: '{entry}' resized: {m}")),
            Grown::NoChange(m) | Grown::Skipped(m) => log.push(format!("growpart: '{entry}': {m}")),
            Grown::Failed(m) => warnings.push(format!("growpart: '{entry}': {m}")),
        }
    }
    (log, warnings)
}

pub fn growpart(ctx: &mut Ctx<'_>, g: &GrowpartSpec) -> Result<Outcome> {
    if !acts(ctx, "growpart") {
        return Ok(Outcome::Skipped);
    }
    let (log, warnings) = growpart_with(&Host::real(), g);
    for l in log {
        tracing::info!("{l}");
    }
    for w in warnings {
        tracing::warn!("{w}");
        ctx.warnings.push(w);
    }
    Ok(Outcome::Ok)
}

pub fn resizefs(ctx: &mut Ctx<'_>, r: &ResizeFsSpec) -> Result<Outcome> {
    if !acts(ctx, "resizefs") {
        return Ok(Outcome::Skipped);
    }
    match Host::real().resizefs(Duration::from_secs(r.timeout_secs.max(1))) {
        Ok(m) => tracing::info!("resizefs: {m}"),
        Err(w) => {
            let w = format!("resizefs: {w}");
            tracing::warn!("{w}");
            ctx.warnings.push(w);
        }
    }
    Ok(Outcome::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const MOUNTINFO: &str = "\
22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
23 22 0:21 / /proc rw,nosuid shared:12 - proc proc rw
30 22 254:16 / /var/lib/my\\040data rw shared:9 - xfs /dev/vdb rw
";

    #[test]
    fn mount_of_takes_the_deepest_mount() {
        assert_eq!(
            mount_of(MOUNTINFO, "/"),
            Some(("/dev/vda1".into(), "ext4".into(), "/".into()))
        );
        assert_eq!(mount_of(MOUNTINFO, "/proc/1").unwrap().1, "proc");
        assert_eq!(
            mount_of(MOUNTINFO, "/var/lib/my data/x").unwrap().0,
            "/dev/vdb"
        );
        assert_eq!(mount_of(MOUNTINFO, "/procx").unwrap().0, "/dev/vda1");
        assert_eq!(mount_of("", "/"), None);
    }

    #[test]
    fn root_from_cmdline() {
        let r = |c: &str| rootdev_from_cmdline(c);
        assert_eq!(r("ro root=/dev/vda1 quiet").as_deref(), Some("/dev/vda1"));
        assert_eq!(
            r("root=UUID=ab-cd").as_deref(),
            Some("/dev/disk/by-uuid/ab-cd")
        );
        assert_eq!(
            r("root=LABEL=cloudimg-rootfs").as_deref(),
            Some("/dev/disk/by-label/cloudimg-rootfs")
        );
        assert_eq!(r("root=sda2").as_deref(), Some("/dev/sda2"));
        assert_eq!(r("quiet"), None);
    }

    /// A fake node: /proc/self/mountinfo, sysfs with vda/vda1, /dev files of given sizes,
    /// and fake tools in bin/ that log their argv to calls.log.
    fn fake(root: &Path, mountinfo: &str, growpart_sh: &str, resize_sh: &str) -> Host {
        let w = |rel: &str, text: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        w("proc/self/mountinfo", mountinfo);
        w("proc/cmdline", "console=ttyS0 root=/dev/vda1 rw\n");
        w("sys/devices/virtio0/block/vda/vda1/partition", "1\n");
        w("sys/devices/virtio0/block/vda/dev", "254:0\n");
        std::fs::create_dir_all(root.join("sys/class/block")).unwrap();
        std::os::unix::fs::symlink(
            root.join("sys/devices/virtio0/block/vda/vda1"),
            root.join("sys/class/block/vda1"),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            root.join("sys/devices/virtio0/block/vda"),
            root.join("sys/class/block/vda"),
        )
        .unwrap();
        w("dev/vda", "");
        w("dev/vda1", "");
        w("etc/.keep", "");
        let log = root.join("calls.log");
        for (tool, body) in [("growpart", growpart_sh), ("resize2fs", resize_sh)] {
            let p = root.join("bin").join(tool);
            w(
                &format!("bin/{tool}"),
                &format!(
                    "#!/bin/sh\necho \"{tool} $*\" >> {}\n{body}\n",
                    log.display()
                ),
            );
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Host {
            proc_dir: root.join("proc"),
            sys_dir: root.join("sys"),
            dev_dir: root.join("dev"),
            etc_dir: root.join("etc"),
            path: Some(format!("{}:/usr/bin:/bin", root.join("bin").display()).into()),
            need_device_node: false,
        }
    }

    fn calls(root: &Path) -> Vec<String> {
        std::fs::read_to_string(root.join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// A growpart that grows: it makes the fake `dev/vda1` under `root` 2048 bytes.
    fn growpart_ok(root: &Path) -> String {
        let dev = root.join("dev/vda1");
        format!(
            "[ \"$1\" = --help ] && {{ echo '  -u|--update   R|on|off|auto'; exit 0; }}\n[ \"$1\" = --dry-run ] && exit 0\ntruncate -s 2048 \"{}\"; exit 0",
            dev.display()
        )
    }

    fn spec() -> GrowpartSpec {
        GrowpartSpec {
            devices: vec!["/".into()],
            ignore_growroot_disabled: false,
            timeout_secs: 5,
        }
    }

    /// `growpart_with` on a fake host in `root` whose growpart is `growpart_sh`.
    fn grow(root: &Path, growpart_sh: &str, g: &GrowpartSpec) -> (Vec<String>, Vec<String>) {
        growpart_with(&fake(root, MOUNTINFO, growpart_sh, "exit 0"), g)
    }

    #[test]
    fn grows_the_root_partition_found_through_mountinfo_and_sysfs() {
        let d = tempfile::tempdir().unwrap();
        let body = growpart_ok(d.path());
        let (log, warnings) = grow(d.path(), &body, &spec());
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            calls(d.path()),
            [
                "growpart --help",
                "growpart --dry-run /dev/vda 1",
                "growpart /dev/vda 1"
            ]
        );
        assert!(
            log[0].contains("resized: changed (/dev/vda, 1) from 0 to 2048"),
            "{log:?}"
        );
    }

    #[test]
    fn nothing_to_grow_is_not_a_warning_and_does_not_write() {
        let d = tempfile::tempdir().unwrap();
        let body = "[ \"$1\" = --help ] && { echo '--update'; exit 0; }\n[ \"$1\" = --dry-run ] && { echo 'NOCHANGE: partition 1 could only be grown by 0'; exit 1; }\nexit 0";
        let (log, warnings) = grow(d.path(), body, &spec());
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(calls(d.path()).len(), 2, "no growpart without --dry-run");
        assert!(
            log[0].contains("no change necessary (/dev/vda, 1)"),
            "{log:?}"
        );
    }

    #[test]
    fn a_partition_that_fills_its_disk_in_sysfs_starts_no_tool() {
        let d = tempfile::tempdir().unwrap();
        let body = growpart_ok(d.path());
        let host = fake(d.path(), MOUNTINFO, &body, "exit 0");
        let w = |rel: &str, n: u64| {
            std::fs::write(
                d.path().join("sys/devices/virtio0/block/vda").join(rel),
                format!("{n}\n"),
            )
            .unwrap()
        };
        // 1 MiB - 512 bytes after the partition: under growpart's 1 MiB, nothing to grow.
        w("vda1/start", 2048);
        w("vda1/size", 2_097_152);
        w("size", 2048 + 2_097_152 + 2047);
        let (log, warnings) = growpart_with(&host, &spec());
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(calls(d.path()), Vec::<String>::new());
        assert!(
            log[0].contains("no change necessary (/dev/vda, 1): 1048064 bytes"),
            "{log:?}"
        );
        // 1 MiB after it: growpart decides (and grows).
        w("size", 2048 + 2_097_152 + 2048);
        let (_, warnings) = growpart_with(&host, &spec());
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(calls(d.path()).last().unwrap(), "growpart /dev/vda 1");
    }

    #[test]
    fn resize2fs_is_skipped_only_when_it_would_have_nothing_to_do() {
        let d = tempfile::tempdir().unwrap();
        let dev = d.path().join("fs.img");
        // An ext superblock: 1 KiB << `log` blocks, `blocks` of them, 64bit feature off.
        let image = |blocks: u32, log: u32, size: u64| {
            let mut sb = vec![0u8; 2048];
            sb[1024 + 4..1024 + 8].copy_from_slice(&blocks.to_le_bytes());
            sb[1024 + 24..1024 + 28].copy_from_slice(&log.to_le_bytes());
            sb[1024 + 56..1024 + 58].copy_from_slice(&0xEF53u16.to_le_bytes());
            std::fs::write(&dev, &sb).unwrap();
            std::fs::OpenOptions::new()
                .write(true)
                .open(&dev)
                .unwrap()
                .set_len(size)
                .unwrap();
        };
        image(256, 2, 256 * 4096 + 4095);
        assert!(ext_already_full(&dev), "less than a block left");
        image(256, 2, 257 * 4096);
        assert!(!ext_already_full(&dev), "one block to grow");
        image(300, 2, 256 * 4096);
        assert!(
            !ext_already_full(&dev),
            "larger than its device: resize2fs says so"
        );
        std::fs::write(&dev, vec![0u8; 8192]).unwrap();
        assert!(!ext_already_full(&dev), "not ext");
        // 1 KiB blocks: resize2fs rounds down to whole 4 KiB pages.
        image(1022, 0, 1023 * 1024);
        assert!(
            !ext_already_full(&dev),
            "1020 blocks is a shrink: resize2fs decides"
        );
    }

    #[test]
    fn failures_are_warnings_naming_the_device_and_the_tool() {
        let d = tempfile::tempdir().unwrap();
        let body = "[ \"$1\" = --help ] && { echo '--update'; exit 0; }\n[ \"$1\" = --dry-run ] && exit 0\necho 'FAILED: sfdisk: bad' >&2; exit 2";
        let (_, warnings) = grow(d.path(), body, &spec());
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("'/': failed to resize: disk=/dev/vda, ptnum=1")
                && warnings[0].contains("FAILED: sfdisk: bad"),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_hanging_tool_is_killed_at_its_deadline() {
        let d = tempfile::tempdir().unwrap();
        let body = "[ \"$1\" = --help ] && { echo '--update'; exit 0; }\nexec sleep 30";
        let mut g = spec();
        g.timeout_secs = 1;
        let t = std::time::Instant::now();
        let (_, warnings) = grow(d.path(), body, &g);
        assert!(t.elapsed() < Duration::from_secs(10));
        assert!(warnings[0].contains("timed out after 1 s"), "{warnings:?}");
    }

    #[test]
    fn missing_tool_disabled_file_and_non_partitions() {
        let d = tempfile::tempdir().unwrap();
        let mut host = fake(d.path(), MOUNTINFO, "exit 0", "exit 0");
        // growpart --help without --update: not cloud-guest-utils' growpart.
        let (_, w) = growpart_with(&host, &spec());
        assert!(w[0].contains("cloud-guest-utils"), "{w:?}");
        std::fs::write(d.path().join("etc/growroot-disabled"), "").unwrap();
        let (log, w) = growpart_with(&host, &spec());
        assert!(
            w.is_empty() && log[0].contains("growroot-disabled"),
            "{log:?}"
        );
        std::fs::remove_file(d.path().join("etc/growroot-disabled")).unwrap();
        // A whole-disk filesystem: nothing to grow, nothing to warn about.
        std::fs::write(d.path().join("bin/growpart"), "#!/bin/sh\necho --update\n").unwrap();
        host.path = Some(format!("{}:/usr/bin:/bin", d.path().join("bin").display()).into());
        let g = GrowpartSpec {
            devices: vec!["/dev/vda".into()],
            ..spec()
        };
        let (log, w) = growpart_with(&host, &g);
        assert!(w.is_empty(), "{w:?}");
        assert!(log[0].contains("not a partition"), "{log:?}");
    }

    #[test]
    fn resizefs_picks_the_tool_by_filesystem_type() {
        let d = tempfile::tempdir().unwrap();
        let host = fake(d.path(), MOUNTINFO, "exit 0", "exit 0");
        let m = host.resizefs(Duration::from_secs(5)).unwrap();
        assert_eq!(calls(d.path()), ["resize2fs /dev/vda1"]);
        assert!(m.contains("ext4"));
        // /dev/root: the device comes from root= on the kernel command line.
        let d = tempfile::tempdir().unwrap();
        let host = fake(
            d.path(),
            "22 1 254:1 / / rw - ext4 /dev/root rw\n",
            "exit 0",
            "echo 'resize2fs: Bad magic number' >&2; exit 1",
        );
        let w = host.resizefs(Duration::from_secs(5)).unwrap_err();
        assert_eq!(calls(d.path()), ["resize2fs /dev/vda1"]);
        assert!(w.contains("Bad magic number"), "{w}");
        let w = Host {
            proc_dir: d.path().join("none"),
            ..host.clone()
        }
        .resizefs(Duration::from_secs(5))
        .unwrap_err();
        assert!(w.contains("could not determine filesystem type"), "{w}");
        let d = tempfile::tempdir().unwrap();
        let vfat = fake(
            d.path(),
            "22 1 254:1 / / rw - vfat /dev/vda1 rw\n",
            "exit 0",
            "exit 0",
        );
        assert!(
            vfat.resizefs(Duration::from_secs(5))
                .unwrap_err()
                .contains("unknown filesystem type vfat")
        );
    }
}
