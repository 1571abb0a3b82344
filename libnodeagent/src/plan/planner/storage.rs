//! disk_setup, fs_setup, mounts, growpart/resize_rootfs: planned as cloud-init's cc_disk_setup,
//! cc_mounts, cc_growpart and cc_resizefs would act, refused in the plan where nodeagent is
//! stricter.

use super::*;
use crate::render::cloudconfig::{DiskEntry, FsEntry};

/// cloud-init's `growpart` and `resizefs` modules (both every boot, cc_growpart.py and
/// cc_resizefs.py): the first steps of the main stage, before anything of the userdata is
/// written. cloud-init runs them in its network stage too; in the local stage they would sit
/// on the boot's path to multi-user.target (that stage runs before network-pre.target), and
/// growpart alone is a shell script of a dozen processes. The image config gives the
/// defaults, cloud-config `growpart:` and `resize_rootfs:` override them as user config
/// overrides `/etc/cloud/cloud.cfg`.
pub fn disk_growth(image: &ImageConfig, cfg: &CloudConfig) -> Result<Vec<Step>> {
    let mut steps = Vec::new();
    let user = cfg.growpart.as_ref();
    let mode = user
        .and_then(|g| g.mode.as_ref())
        .map(|m| (m.0.as_str(), "growpart.mode"))
        .unwrap_or((
            image.growpart.mode.as_str(),
            "/etc/nodeagent/config.yaml: growpart.mode",
        ));
    let devices = user
        .and_then(|g| g.devices.clone())
        .unwrap_or_else(|| image.growpart.devices.clone());
    // cloud-init's `util.is_false` strings turn it off.
    let grow = match mode.0.to_ascii_lowercase().as_str() {
        "auto" | "growpart" => true,
        "off" | "false" | "0" | "no" => false,
        _ => {
            return Err(Error::invalid(
                Stage::Plan,
                mode.1,
                format!(
                    "{:?} is not auto, growpart or off (gpart is BSD's tool)",
                    mode.0
                ),
            ));
        }
    };
    for (i, d) in devices.iter().enumerate() {
        if d.is_empty() || d.contains(|c: char| c.is_control()) || !d.starts_with('/') {
            return Err(Error::invalid(
                Stage::Plan,
                format!("growpart.devices[{i}]"),
                format!("{d:?} is not a mount point or device path"),
            ));
        }
    }
    if grow && !devices.is_empty() {
        steps.push(Step {
            id: "growpart".into(),
            stage: RunStage::Main,
            frequency: Frequency::PerBoot,
            action: Action::Growpart(GrowpartSpec {
                devices,
                ignore_growroot_disabled: user
                    .and_then(|g| g.ignore_growroot_disabled)
                    .is_some_and(|f| f.0),
                timeout_secs: image.growpart.timeout_secs.max(1),
            }),
        });
    }
    let resize = cfg
        .resize_rootfs
        .map(|r| r.0)
        .unwrap_or(image.resize_rootfs);
    if resize {
        steps.push(Step {
            id: "resizefs".into(),
            stage: RunStage::Main,
            frequency: Frequency::PerBoot,
            action: Action::ResizeFs(ResizeFsSpec {
                timeout_secs: image.growpart.timeout_secs.max(1),
            }),
        });
    }
    Ok(steps)
}

pub(super) fn disks(b: &mut Builder<'_>, cfg: &CloudConfig) -> Result<()> {
    let alias = |d: &str| {
        cfg.device_aliases
            .get(d)
            .cloned()
            .unwrap_or_else(|| d.to_string())
    };
    if let Some(map) = &cfg.disk_setup {
        let disks = map
            .iter()
            .map(|(dev, entry)| disk_spec(dev, entry, &alias(dev)))
            .collect::<Result<Vec<_>>>()?;
        if !disks.is_empty() {
            per_instance(b, "disk_setup", Action::DiskSetup(DiskSetupSpec { disks }));
        }
    }
    if !cfg.fs_setup.is_empty() {
        let filesystems = cfg
            .fs_setup
            .iter()
            .enumerate()
            .map(|(i, fs)| fs_spec(&format!("fs_setup[{i}]"), fs, &alias))
            .collect::<Result<Vec<_>>>()?;
        per_instance(b, "fs_setup", Action::FsSetup(FsSetupSpec { filesystems }));
    }
    if !cfg.mounts.is_empty() {
        mounts(b, cfg)?;
    }
    Ok(())
}

/// A step of the main stage, once per instance (cc_disk_setup's and cc_mounts' frequency).
fn per_instance(b: &mut Builder<'_>, id: &str, action: Action) {
    b.push(id.into(), RunStage::Main, Frequency::PerInstance, action);
}

/// One `disk_setup` entry (`dev` as written, `device` with `device_aliases` applied): the
/// table type and layout checked as cc_disk_setup would take them.
fn disk_spec(dev: &str, entry: &DiskEntry, device: &str) -> Result<DiskSpec> {
    let place = format!("disk_setup.{dev}");
    let table_type = entry.table_type.clone().unwrap_or_else(|| "mbr".into());
    if !matches!(table_type.as_str(), "mbr" | "gpt") {
        return Err(Error::invalid(
            Stage::Plan,
            format!("{place}.table_type"),
            format!("'{table_type}' is not mbr or gpt"),
        ));
    }
    let layout = match &entry.layout {
        None | Some(Value::Bool(false)) | Some(Value::Null) => Vec::new(),
        Some(Value::Bool(true)) => vec![(100, None)],
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| layout_part(p, &place, &table_type))
            .collect::<Result<_>>()?,
        Some(other) => {
            return Err(Error::invalid(
                Stage::Plan,
                format!("{place}.layout"),
                crate::source::metadata::found("expected true, false or a list", other),
            ));
        }
    };
    check_layout(&layout, &table_type, &place)?;
    check_device(device, &place)?;
    Ok(DiskSpec {
        device: device.to_string(),
        table_type,
        layout,
        overwrite: entry.overwrite.map(|f| f.0).unwrap_or(false),
    })
}

/// One `fs_setup` entry at `place`: filesystem and device required, the partition taken as
/// a string or number as cc_disk_setup `str()`s it.
fn fs_spec(place: &str, fs: &FsEntry, alias: &dyn Fn(&str) -> String) -> Result<FsSpec> {
    let need = |v: &Option<String>, f: &str| {
        v.clone().ok_or_else(|| {
            Error::invalid(
                Stage::Plan,
                format!("{place}.{f}"),
                format!("{f} is required"),
            )
        })
    };
    let partition =
        crate::source::metadata::scalar_text(fs.partition.as_ref()).map_err(|other| {
            Error::invalid(
                Stage::Plan,
                format!("{place}.partition"),
                format!("unexpected {}", crate::source::metadata::kind(other)),
            )
        })?;
    let filesystem = need(&fs.filesystem, "filesystem")?;
    if filesystem.is_empty() || !filesystem.bytes().all(|c| c.is_ascii_alphanumeric()) {
        return Err(Error::invalid(
            Stage::Plan,
            format!("{place}.filesystem"),
            format!("{filesystem:?} is not a filesystem type mkfs knows"),
        ));
    }
    let device = alias(&need(&fs.device, "device")?);
    check_device(&device, &format!("{place}.device"))?;
    Ok(FsSpec {
        label: fs.label.clone(),
        filesystem,
        device,
        partition,
        overwrite: fs.overwrite.map(|f| f.0).unwrap_or(false),
        replace_fs: fs.replace_fs.clone(),
        extra_opts: fs.extra_opts.0.clone(),
    })
}

/// cc_mounts' handling of the `mounts` list that needs no host: fields `str()`-ed, defaults
/// filled in (`mount_default_fields` replaces them whole), and an entry whose mount point is
/// null cancels itself and every earlier entry of the same device. Which devices exist is
/// decided at apply time (`apply::disks::mounts`), as cloud-init decides it on the host.
pub(super) fn mounts(b: &mut Builder<'_>, cfg: &CloudConfig) -> Result<()> {
    let defaults: Vec<Option<String>> = match &cfg.mount_default_fields {
        Some(d) => d.iter().map(|f| f.0.clone()).collect(),
        None => vec![
            None,
            None,
            Some("auto".into()),
            Some(MOUNT_DEFAULT_OPTIONS.into()),
            Some("0".into()),
            Some("2".into()),
        ],
    };
    let mut entries: Vec<Vec<Option<String>>> = Vec::new();
    for (i, m) in cfg.mounts.iter().enumerate() {
        let place = format!("mounts[{i}]");
        if m.len() > 6 {
            return Err(Error::invalid(
                Stage::Plan,
                place,
                "an fstab entry has at most 6 fields",
            ));
        }
        let mut e: Vec<Option<String>> = m.iter().map(|f| f.0.clone()).collect();
        if e.first().cloned().flatten().is_none() {
            return Err(Error::invalid(
                Stage::Plan,
                place,
                "the first field (the device) is missing",
            ));
        }
        for (j, d) in defaults.iter().enumerate() {
            match e.get_mut(j) {
                None => e.push(d.clone()),
                Some(f) if f.is_none() => *f = d.clone(),
                Some(_) => {}
            }
        }
        if e.get(1).cloned().flatten().is_none() {
            // `mount_default_fields` may be shorter than 2: an entry can end after its device
            // (found by the structure-aware fuzzer: indexing field 1 panicked).
            for earlier in entries.iter_mut().filter(|x| x.first() == e.first()) {
                if let Some(mount_point) = earlier.get_mut(1) {
                    *mount_point = None;
                }
            }
        }
        entries.push(e);
    }
    let mut out = Vec::new();
    for (i, e) in entries.into_iter().enumerate() {
        if e.get(1).cloned().flatten().is_none() {
            b.warnings.push(format!(
                "mounts[{i}]: no mount point (or cancelled by a later entry): nothing to mount"
            ));
            continue;
        }
        let Some(fields) = e.into_iter().collect::<Option<Vec<String>>>() else {
            return Err(Error::invalid(
                Stage::Plan,
                format!("mounts[{i}]"),
                "a field is null and mount_default_fields has no value for it",
            ));
        };
        // cloud-init joins the fields with tabs unescaped: whitespace would shift the fields.
        if fields
            .iter()
            .any(|f| f.is_empty() || f.contains(char::is_whitespace))
        {
            return Err(Error::invalid(
                Stage::Plan,
                format!("mounts[{i}]"),
                "fstab fields must be non-empty and free of spaces, tabs and newlines",
            ));
        }
        out.push(fields);
    }
    if !out.is_empty() {
        let action = Action::Mounts(MountsSpec {
            entries: out,
            device_aliases: cfg.device_aliases.clone(),
        });
        per_instance(b, "mounts", action);
    }
    Ok(())
}

pub(super) fn layout_part(
    p: &Value,
    place: &str,
    table_type: &str,
) -> Result<(u32, Option<String>)> {
    let pct = |v: &Value| {
        v.as_u64()
            .filter(|n| (1..=100).contains(n))
            .map(|n| n as u32)
    };
    let bad = || {
        Error::invalid(
            Stage::Plan,
            format!("{place}.layout"),
            format!("{p} is not a percentage or [percentage, type]"),
        )
    };
    match p {
        Value::Number(_) => pct(p).map(|n| (n, None)).ok_or_else(bad),
        Value::Array(a) if a.len() == 2 => {
            let ty = match &a[1] {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return Err(bad()),
            };
            let ty = partition_type(&ty, table_type).map_err(|m| {
                Error::invalid(Stage::Plan, format!("{place}.layout"), format!("{p}: {m}"))
            })?;
            pct(&a[0]).map(|n| (n, Some(ty))).ok_or_else(bad)
        }
        _ => Err(bad()),
    }
}

pub(super) fn check_device(d: &str, place: &str) -> Result<()> {
    ensure(valid_device_path(d), Stage::Plan, place, || {
        format!("{d:?} is not a device path (absolute, or a device_aliases name)")
    })
}

/// Sizes add up to at most 100 %, and an MBR table has at most 4 (primary) partitions, as
/// cloud-init's `get_partition_mbr_layout` requires.
pub(super) fn check_layout(
    layout: &[(u32, Option<String>)],
    table_type: &str,
    place: &str,
) -> Result<()> {
    let sum: u32 = layout.iter().map(|l| l.0).sum();
    if sum > 100 {
        return Err(Error::invalid(
            Stage::Plan,
            format!("{place}.layout"),
            format!("partition sizes add up to {sum} %; at most 100"),
        ));
    }
    if table_type == "mbr" && layout.len() > 4 {
        return Err(Error::invalid(
            Stage::Plan,
            format!("{place}.layout"),
            format!("{} partitions; an mbr table takes at most 4", layout.len()),
        ));
    }
    Ok(())
}

/// sgdisk's GPT type codes (cloud-init partitions GPT disks with sgdisk) and the GUIDs sfdisk
/// takes for them (gdisk's parttypes.cc).
pub(super) const GPT_TYPES: &[(&str, &str)] = &[
    ("0700", "EBD0A0A2-B9E5-4433-87C0-68B6B72699C7"),
    ("8200", "0657FD6D-A4AB-43C4-84E5-0933C84B4F4F"),
    ("8300", "0FC63DAF-8483-4772-8E79-3D69D8477DE4"),
    ("8301", "8DA63339-0007-60C0-C436-083AC8230908"),
    ("8302", "933AC7E1-2EB4-4F13-B844-0E14E2AEF915"),
    ("8303", "44479540-F297-41B2-9AF7-D131D5F0458A"),
    ("8304", "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"),
    ("8305", "B921B045-1DF0-41C3-AF44-4C6F280D3FAE"),
    ("8306", "3B8F8425-20E0-4F3B-907F-1A25A76F98E8"),
    ("8E00", "E6D6D379-F507-44C2-A23C-238F2A3DF928"),
    ("EF00", "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"),
    ("EF02", "21686148-6449-6E6F-744E-656564454649"),
    ("FD00", "A19D880F-05FC-4D3B-A006-743F0F84911E"),
];

/// A layout's partition type as sfdisk takes it. MBR: a hex id (`83`, `0x82`) or an sfdisk
/// shortcut (`L`, `S`...), as cloud-init hands it to sfdisk. GPT: cloud-init's sgdisk code,
/// right-padded with `0` as cloud-init does (`82` -> `8200`), turned into its GUID; a GUID
/// passes as is.
pub fn partition_type(ty: &str, table_type: &str) -> std::result::Result<String, String> {
    let t = ty.trim();
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_hexdigit());
    let shortcut = t.len() == 1 && "LSEXURVH".contains(t.to_ascii_uppercase().as_str());
    if table_type == "gpt" {
        let guid = t.len() == 36
            && t.bytes().enumerate().all(|(i, c)| {
                matches!(i, 8 | 13 | 18 | 23) == (c == b'-') && (c == b'-' || c.is_ascii_hexdigit())
            });
        if guid || shortcut {
            return Ok(t.to_ascii_uppercase());
        }
        let code = format!("{t:0<4}").to_ascii_uppercase();
        return GPT_TYPES
            .iter()
            .find(|(c, _)| hex(t) && *c == code)
            .map(|(_, g)| g.to_string())
            .ok_or_else(|| {
                format!(
                    "unknown GPT partition type (an sgdisk code: {}, or a GUID)",
                    GPT_TYPES
                        .iter()
                        .map(|(c, _)| *c)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            });
    }
    let id = t.strip_prefix("0x").unwrap_or(t);
    if shortcut || (hex(id) && id.len() <= 2) {
        Ok(t.to_string())
    } else {
        Err("not an MBR partition type (a hex id such as 83, or L, S, E, X, U, R, V)".into())
    }
}
