//! disk_setup, fs_setup, mounts.
//!
//! Partitioning (`sfdisk`) and mkfs run only with `--exec` (device paths are host paths, also
//! under `--root`); an existing partition table or filesystem is never touched unless
//! `overwrite: true` (or `replace_fs` names the filesystem found). `/etc/fstab` entries carry
//! `comment=cloudconfig` as cloud-init's do, so either tool recognises and replaces them; the
//! file is written even without `--exec`, `mount -a` runs only with `--exec` on a real node.

use super::{Ctx, Outcome, commands, files};
use crate::error::{Error, Result, Stage};
use crate::plan::{DiskSetupSpec, FileWrite, FsSetupSpec, MountsSpec};

fn err(place: &str, msg: impl std::fmt::Display) -> Error {
    Error::new(Stage::Apply, place, msg.to_string())
}

fn check_device(d: &str, place: &str) -> Result<()> {
    if d.starts_with('/') && !d.contains(|c: char| c.is_whitespace() || c.is_control()) {
        Ok(())
    } else {
        Err(err(place, format!("{d:?} is not a device path")))
    }
}

/// `blkid -p -o value -s <tag> dev`: empty when the device has no such signature.
fn probe(dev: &str, tag: &str) -> Result<String> {
    match commands::run_host(&["blkid", "-p", "-o", "value", "-s", tag, dev], None) {
        Ok(s) => Ok(s.trim().to_string()),
        // blkid exits 2 when nothing was found.
        Err(e) if e.message.contains("exit status: 2") => Ok(String::new()),
        Err(e) => Err(e),
    }
}

/// Size of a device (or disk image) in 512-byte sectors.
fn sectors(dev: &str) -> Result<u64> {
    use std::io::Seek;
    let mut f = std::fs::File::open(dev).map_err(|e| err(dev, e))?;
    let bytes = f.seek(std::io::SeekFrom::End(0)).map_err(|e| err(dev, e))?;
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
            return Err(err(
                "disk_setup.table_type",
                format!("{other:?} is not mbr or gpt"),
            ));
        }
    };
    let sum: u32 = layout.iter().map(|l| l.0).sum();
    if sum > 100 || layout.iter().any(|l| l.0 == 0) {
        return Err(err(
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
            return Err(err("disk_setup.layout", "bad partition type"));
        }
        s.push_str(&format!("{size}{t}\n"));
    }
    Ok(s)
}

pub fn disk_setup(ctx: &mut Ctx<'_>, d: &DiskSetupSpec) -> Result<Outcome> {
    if !ctx.opts.exec {
        return Ok(Outcome::Skipped);
    }
    for disk in &d.disks {
        let place = format!("disk_setup.{}", disk.device);
        check_device(&disk.device, &place)?;
        if disk.layout.is_empty() {
            continue;
        }
        let script = sfdisk_script(&disk.table_type, &disk.layout, sectors(&disk.device)?)
            .map_err(|e| e.within(&place))?;
        let existing = probe(&disk.device, "PTTYPE")?;
        let fs = probe(&disk.device, "TYPE")?;
        if (!existing.is_empty() || !fs.is_empty()) && !disk.overwrite {
            tracing::info!(device = %disk.device, "already partitioned or formatted; left alone (overwrite: false)");
            continue;
        }
        commands::run_host(
            &["sfdisk", "--quiet", "--wipe", "always", &disk.device],
            Some(script.as_bytes()),
        )
        .map_err(|e| e.within(&place))?;
    }
    Ok(Outcome::Ok)
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
    for fs in &f.filesystems {
        let dev = target_device(&fs.device, fs.partition.as_deref());
        let place = format!("fs_setup.{dev}");
        check_device(&dev, &place)?;
        if !fs.filesystem.bytes().all(|b| b.is_ascii_alphanumeric()) || fs.filesystem.is_empty() {
            return Err(err(
                &place,
                format!("filesystem {:?} is not a mkfs type", fs.filesystem),
            ));
        }
        let found = probe(&dev, "TYPE")?;
        let replace = fs.replace_fs.as_deref().is_some_and(|r| r == found);
        if !found.is_empty() && !fs.overwrite && !replace {
            tracing::info!(device = %dev, found = %found, "filesystem exists; not reformatted (overwrite: false)");
            continue;
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
        argv.push(&dev);
        commands::run_host(&argv, None).map_err(|e| e.within(&place))?;
    }
    Ok(Outcome::Ok)
}

/// New fstab: lines not written by cloud-init/nodeagent kept, ours replaced.
pub fn fstab(current: &str, entries: &[[String; 6]]) -> Result<String> {
    let mut out: String = current
        .lines()
        .filter(|l| !l.contains("comment=cloudconfig"))
        .map(|l| format!("{l}\n"))
        .collect();
    for (i, e) in entries.iter().enumerate() {
        if e.iter().any(|f| f.is_empty() || f.contains('\n')) {
            return Err(err(&format!("mounts[{i}]"), "empty or multi-line field"));
        }
        let esc: Vec<String> = e
            .iter()
            .map(|f| f.replace(' ', "\\040").replace('\t', "\\011"))
            .collect();
        out.push_str(&format!(
            "{}\t{}\t{}\t{},comment=cloudconfig\t{}\t{}\n",
            esc[0], esc[1], esc[2], esc[3], esc[4], esc[5]
        ));
    }
    Ok(out)
}

pub fn mounts(ctx: &mut Ctx<'_>, m: &MountsSpec) -> Result<Outcome> {
    let t = ctx.target().clone();
    let p = t.path("/etc/fstab")?;
    let cur = match std::fs::read_to_string(&p) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(err("/etc/fstab", e)),
    };
    let text = fstab(&cur, &m.entries)?;
    let f = FileWrite::root_owned("/etc/fstab", text.clone().into_bytes(), 0o644);
    let db = ctx.db()?.clone();
    files::write_bytes(&t, &f, text.as_bytes(), &db)?;
    if ctx.opts.exec && t.is_host() {
        for e in &m.entries {
            if e[1].starts_with('/') {
                std::fs::create_dir_all(&e[1]).map_err(|er| err(&e[1], er))?;
            }
        }
        commands::run_host(&["mount", "-a"], None)?;
    }
    Ok(Outcome::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fstab_replaces_own_lines() {
        let cur =
            "UUID=x / ext4 defaults 0 1\n/dev/old /old auto defaults,comment=cloudconfig 0 2\n";
        let e = [[
            "/dev/sdb1".to_string(),
            "/data dir".into(),
            "ext4".into(),
            "defaults,nofail".into(),
            "0".into(),
            "2".into(),
        ]];
        let out = fstab(cur, &e).unwrap();
        assert_eq!(
            out,
            "UUID=x / ext4 defaults 0 1\n/dev/sdb1\t/data\\040dir\text4\tdefaults,nofail,comment=cloudconfig\t0\t2\n"
        );
        assert_eq!(fstab(&out, &e).unwrap(), out);
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
