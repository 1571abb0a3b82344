//! Building the plan: cloud-init's module order and semantics, as a pure function.
//!
//! Order follows cloud-init's stages (docs/formats.md E.1, a.10):
//! local: hostname, network; main: bootcmd, write_files, disks, mounts, hostname/hosts,
//! groups, users, ntp, deferred write_files, runcmd (with the kubeadm step).

use super::*;
use crate::cloudconfig::{CloudConfig, CmdItem, ManageEtcHosts, UserItem};
use crate::config::ImageConfig;
use crate::error::{Error, Result, Stage};
use crate::facts::Facts;
use crate::metadata::Metadata;
use serde_json::Value;

/// Users and groups that already exist in the target root (from its /etc/passwd, /etc/group).
#[derive(Debug, Clone, Default)]
pub struct UserDb {
    pub users: Vec<String>,
    pub groups: Vec<String>,
    /// uid of each user and gid of each group, where the field is a number (uid collisions,
    /// numeric primary groups).
    pub uids: std::collections::BTreeMap<String, u32>,
    pub gids: std::collections::BTreeMap<String, u32>,
    /// False when the target has no user database to check against (e.g. an empty `--root`):
    /// then only `root` exists, as apply resolves names.
    pub known: bool,
}

impl UserDb {
    /// Read `<root>/etc/passwd` and `<root>/etc/group` (names and ids).
    pub fn read(root: &std::path::Path) -> UserDb {
        type Entries = Vec<(String, Option<u32>)>;
        let entries = |rel: &str| -> Option<Entries> {
            let text = std::fs::read_to_string(root.join(rel)).ok()?;
            Some(
                text.lines()
                    .filter_map(|l| {
                        let mut f = l.split(':');
                        let name = f.next().filter(|n| !n.is_empty())?;
                        Some((name.to_string(), f.nth(1).and_then(|id| id.parse().ok())))
                    })
                    .collect(),
            )
        };
        let split = |e: Entries| {
            let ids = e
                .iter()
                .filter_map(|(n, id)| Some((n.clone(), (*id)?)))
                .collect();
            (e.into_iter().map(|(n, _)| n).collect(), ids)
        };
        match (entries("etc/passwd"), entries("etc/group")) {
            (Some(users), Some(groups)) => {
                let ((users, uids), (groups, gids)) = (split(users), split(groups));
                UserDb {
                    users,
                    groups,
                    uids,
                    gids,
                    known: true,
                }
            }
            _ => UserDb::default(),
        }
    }
}

pub struct PlanInput<'a> {
    pub instance_id: &'a str,
    pub metadata: &'a Metadata,
    pub facts: &'a Facts,
    pub config: &'a CloudConfig,
    pub users: &'a UserDb,
    pub image: &'a ImageConfig,
    pub compat: bool,
    /// Target root, for kubeadm pre-flight checks of certificates already on disk.
    pub root: &'a std::path::Path,
}

struct Builder<'a> {
    input: &'a PlanInput<'a>,
    steps: Vec<Step>,
    warnings: Vec<String>,
}

impl Builder<'_> {
    fn push(&mut self, id: String, stage: RunStage, frequency: Frequency, action: Action) {
        self.steps.push(Step {
            id,
            stage,
            frequency,
            action,
        });
    }

    /// A problem that is an error in strict mode and a warning with `--compat`.
    fn lenient(&mut self, place: String, msg: String) -> Result<()> {
        if self.input.compat {
            self.warnings.push(format!("{place}: {msg}"));
            Ok(())
        } else {
            Err(Error::new(Stage::Plan, place, msg))
        }
    }
}

/// The local-stage plan, from metadata only (the network is not up, userdata is not rendered).
pub fn build_local(instance_id: &str, md: &Metadata, facts: &Facts, compat: bool) -> Result<Plan> {
    let mut steps = Vec::new();
    let mut warnings = Vec::new();
    if let Some(name) = &md.local_hostname {
        check_host_name(name, "guestinfo.metadata: local-hostname")?;
        let (hostname, fqdn) = split_name(name);
        steps.push(Step {
            id: "hostname:metadata".into(),
            stage: RunStage::Local,
            frequency: Frequency::PerBoot,
            action: Action::Hostname(HostnameSpec {
                hostname,
                fqdn,
                prefer_fqdn: false,
                etc_hosts: None,
            }),
        });
    }
    if let Some(net) = &md.network {
        let renderer = facts
            .network_renderer
            .clone()
            .unwrap_or_else(|| "networkd".into());
        let rendered = crate::network::render_with(net, &renderer, compat)
            .map_err(|e| e.within("guestinfo.metadata: network"))?;
        warnings.extend(rendered.warnings);
        steps.push(Step {
            id: "network".into(),
            stage: RunStage::Local,
            frequency: Frequency::PerInstance,
            action: Action::Network(NetworkSpec {
                renderer,
                files: rendered.files,
            }),
        });
    }
    Ok(Plan {
        version: PLAN_VERSION,
        instance_id: instance_id.to_string(),
        steps,
        warnings,
    })
}

/// cloud-init's `growpart` and `resizefs` modules (both every boot, cc_growpart.py and
/// cc_resizefs.py), in the local stage so the root has its full size before anything is
/// written to it: the image config gives the defaults, cloud-config `growpart:` and
/// `resize_rootfs:` override them as user config overrides `/etc/cloud/cloud.cfg`.
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
            return Err(Error::new(
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
            return Err(Error::new(
                Stage::Plan,
                format!("growpart.devices[{i}]"),
                format!("{d:?} is not a mount point or device path"),
            ));
        }
    }
    if grow && !devices.is_empty() {
        steps.push(Step {
            id: "growpart".into(),
            stage: RunStage::Local,
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
            stage: RunStage::Local,
            frequency: Frequency::PerBoot,
            action: Action::ResizeFs(ResizeFsSpec {
                timeout_secs: image.growpart.timeout_secs.max(1),
            }),
        });
    }
    Ok(steps)
}

/// The whole plan (local and main steps). Pure: reads nothing, writes nothing.
pub fn build(input: &PlanInput<'_>) -> Result<Plan> {
    let mut local = build_local(input.instance_id, input.metadata, input.facts, input.compat)?;
    local.steps.extend(disk_growth(input.image, input.config)?);
    let mut b = Builder {
        input,
        steps: local.steps,
        warnings: local.warnings,
    };
    let cfg = input.config;
    let timeout = input.image.command_timeout_secs;

    for (i, item) in cfg.bootcmd.iter().enumerate() {
        if let Some(run) = command(item) {
            let spec = CommandSpec {
                origin: format!("bootcmd[{i}]"),
                run,
                timeout_secs: timeout,
            };
            b.push(
                format!("bootcmd[{i}]"),
                RunStage::Main,
                Frequency::PerBoot,
                Action::Command(spec),
            );
        }
    }

    let mut deferred = Vec::new();
    let mut total = 0usize;
    for (i, wf) in cfg.write_files.iter().enumerate() {
        let Some(file) = write_file(&mut b, i, wf)? else {
            continue;
        };
        total += file.content.0.len();
        if total > crate::limits::MAX_WRITE_FILES_TOTAL_BYTES {
            return Err(Error::of(
                crate::error::ErrorKind::TooLarge,
                Stage::Plan,
                format!("write_files[{i}]"),
                format!(
                    "decoded contents so far total {total} bytes; the limit for all files is {}",
                    crate::limits::MAX_WRITE_FILES_TOTAL_BYTES
                ),
            ));
        }
        let id = format!("write_files[{i}]:{}", file.path);
        // /run is tmpfs: a reboot (or power cut) before the instance finished, e.g. during
        // kubeadm, would leave the journal saying files exist that are gone. Rewrite them
        // every boot; everything else is written once per instance.
        let frequency = if is_volatile(&file.path) {
            Frequency::PerBoot
        } else {
            Frequency::PerInstance
        };
        if file.defer {
            deferred.push((id, file, frequency));
        } else {
            b.push(id, RunStage::Main, frequency, Action::WriteFile(file));
        }
    }

    disks(&mut b, cfg)?;
    hostname(&mut b, cfg)?;

    for (i, (name, members)) in cfg.groups.0.iter().enumerate() {
        check_name(name, format!("groups[{i}]"))?;
        for m in members {
            check_name(m, format!("groups[{i}].{name}"))?;
        }
        let spec = GroupSpec {
            name: name.clone(),
            members: members.clone(),
        };
        b.push(
            format!("group:{name}"),
            RunStage::Main,
            Frequency::PerInstance,
            Action::Group(spec),
        );
    }
    for (i, item) in cfg.users.iter().enumerate() {
        match item {
            UserItem::Default => b.warnings.push(format!(
                "users[{i}]: 'default' user skipped: nodeagent images define no default user"
            )),
            UserItem::User(u) => {
                let spec = user(&mut b, i, u)?;
                b.push(
                    format!("user:{}", spec.name),
                    RunStage::Main,
                    Frequency::PerInstance,
                    Action::User(spec),
                );
            }
        }
    }
    if !cfg.ssh_authorized_keys.is_empty() {
        b.lenient(
            "ssh_authorized_keys".into(),
            "top-level keys belong to the image's default user, and nodeagent images have none; put them under users[].ssh_authorized_keys".into(),
        )?;
    }

    if let Some(ntp) = &cfg.ntp {
        check_ntp(ntp)?;
        let spec = NtpSpec {
            enabled: ntp.enabled.map(|f| f.0).unwrap_or(true),
            client: ntp.ntp_client.clone().unwrap_or_else(|| "auto".into()),
            servers: ntp.servers.clone(),
            pools: ntp.pools.clone(),
        };
        b.push(
            "ntp".into(),
            RunStage::Main,
            Frequency::PerInstance,
            Action::Ntp(spec),
        );
    }

    for (id, file, frequency) in deferred {
        b.push(id, RunStage::Main, frequency, Action::WriteFile(file));
    }

    for (i, item) in cfg.runcmd.iter().enumerate() {
        if let CmdItem::Shell(s) = item
            && let Some(spec) = crate::kubeadm::recognise(s)
        {
            b.push(
                format!("runcmd[{i}]:kubeadm"),
                RunStage::Main,
                Frequency::PerInstance,
                Action::Kubeadm(spec),
            );
            continue;
        }
        if let Some(run) = command(item) {
            let spec = CommandSpec {
                origin: format!("runcmd[{i}]"),
                run,
                timeout_secs: timeout,
            };
            b.push(
                format!("runcmd[{i}]"),
                RunStage::Main,
                Frequency::PerInstance,
                Action::Command(spec),
            );
        }
    }

    check_owners(&b)?;
    let plan = Plan {
        version: PLAN_VERSION,
        instance_id: input.instance_id.to_string(),
        steps: b.steps,
        warnings: b.warnings,
    };
    crate::kubeadm::preflight(&plan, input.root)?;
    Ok(plan)
}

fn command(item: &CmdItem) -> Option<Run> {
    match item {
        CmdItem::Shell(s) => Some(Run::Shell(s.clone())),
        CmdItem::Argv(a) if !a.is_empty() => Some(Run::Argv(a.clone())),
        _ => None,
    }
}

fn split_name(name: &str) -> (String, String) {
    let short = name.split('.').next().unwrap_or(name).to_string();
    (short, name.to_string())
}

/// User and group names the shadow tools accept, and nothing a shell, an option parser or
/// /etc/group could misread (apply refuses the same set; checking here keeps bad input from
/// causing a partial apply).
pub fn valid_account_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 32
        && !n.starts_with('-')
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-$".contains(&b))
}

fn check_name(n: &str, place: String) -> Result<()> {
    if valid_account_name(n) {
        Ok(())
    } else {
        Err(Error::new(
            Stage::Plan,
            place,
            format!("{n:?} is not a valid user or group name"),
        ))
    }
}

/// A host name the kernel, /etc/hosts and Kubernetes can all take: dot-separated labels of
/// letters, digits, `-` and `_`, 1-63 characters each, not starting with `-`, 253 in all.
pub fn valid_host_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 253
        && n.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

fn check_host_name(n: &str, place: &str) -> Result<()> {
    if valid_host_name(n) {
        Ok(())
    } else {
        Err(Error::new(
            Stage::Plan,
            place,
            format!("{n:?} is not a valid host name"),
        ))
    }
}

/// Make a write_files path absolute and clean. Strict: relative paths and `..` are refused;
/// compat: resolved as Python's `os.path.abspath` does from `/`.
pub fn normalise_path(path: &str, compat: bool) -> std::result::Result<String, String> {
    if path.contains('\0') {
        return Err("path contains a NUL byte".into());
    }
    if !compat {
        if !path.starts_with('/') {
            return Err(format!(
                "path '{path}' is relative; write_files paths must be absolute"
            ));
        }
        if path.split('/').any(|c| c == "..") {
            return Err(format!("path '{path}' contains '..'"));
        }
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    if parts.is_empty() {
        return Err(format!(
            "path '{path}' names the root directory, not a file"
        ));
    }
    Ok(format!("/{}", parts.join("/")))
}

/// `user:group`, split at the first `:`, each side stripped; empty, `-1` or `none` = unchanged (C.2).
pub fn parse_owner(owner: Option<&str>) -> Owner {
    let owner = owner.unwrap_or("root:root");
    let keep = |s: &str| {
        let s = s.trim();
        (!(s.is_empty() || s == "-1" || s.eq_ignore_ascii_case("none"))).then(|| s.to_string())
    };
    match owner.split_once(':') {
        Some((u, g)) => Owner {
            user: keep(u),
            group: keep(g),
        },
        None => Owner {
            user: keep(owner),
            group: None,
        },
    }
}

/// cloud-init's `decode_perms` (C.4): absent = 0o644; an integer is the mode itself; a string is
/// octal (`'0640'`, `'640'`, `'0o640'`). `Ok(None)` = mode 0: leave the creation mode.
pub fn decode_permissions(v: Option<&Value>) -> std::result::Result<Option<u32>, String> {
    let mode = match v {
        None | Some(Value::Null) => return Ok(Some(0o644)),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(m) if (0..=0o7777).contains(&m) => m as u32,
            _ => return Err(format!("permissions {n} is not a file mode (0 to 07777)")),
        },
        Some(Value::String(s)) => {
            let t = s.trim().replace('_', "");
            let digits = t
                .strip_prefix("0o")
                .or_else(|| t.strip_prefix("0O"))
                .unwrap_or(&t);
            match u32::from_str_radix(digits, 8) {
                Ok(m) if m <= 0o7777 && !digits.is_empty() => m,
                _ => {
                    return Err(format!(
                        "permissions '{s}' is not an octal file mode (0 to 07777)"
                    ));
                }
            }
        }
        Some(other) => {
            return Err(format!(
                "permissions must be a string or an integer, found {}",
                crate::metadata::kind(other)
            ));
        }
    };
    Ok((mode != 0).then_some(mode))
}

fn write_file(
    b: &mut Builder<'_>,
    i: usize,
    wf: &crate::cloudconfig::WriteFile,
) -> Result<Option<FileWrite>> {
    let compat = b.input.compat;
    let place = format!("write_files[{i}]");
    let Some(raw_path) = wf.path.as_deref().filter(|p| !p.is_empty()) else {
        b.lenient(place, "no path given".into())?;
        return Ok(None);
    };
    let path = normalise_path(raw_path, compat)
        .and_then(|p| check_path_limits(&p).map(|()| p))
        .map_err(|m| Error::new(Stage::Plan, format!("{place}.path"), m))?;
    if wf.source.is_some() {
        b.lenient(
            format!("{place}.source"),
            "fetching file content from a URI is not supported; use content".into(),
        )?;
    }
    // `!!binary` content is bytes already, but `encoding` still applies to it (C.3).
    let raw: Option<&[u8]> = wf
        .content_binary
        .as_deref()
        .or(wf.content.as_deref().map(str::as_bytes));
    let content = match raw {
        Some(bytes) => {
            let enc = wf
                .encoding
                .as_deref()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            match crate::decode::decode_file_content(bytes, &enc) {
                Ok(decoded) => decoded,
                Err(msg) if compat && msg.contains("unknown encoding") => {
                    b.warnings
                        .push(format!("{place}.encoding: {msg}; assuming text/plain"));
                    bytes.to_vec()
                }
                Err(msg) => return Err(Error::new(Stage::Plan, format!("{place}.content"), msg)),
            }
        }
        None => Vec::new(),
    };
    let mode = match decode_permissions(wf.permissions.as_ref()) {
        Ok(m) => m,
        Err(msg) if compat => {
            b.warnings
                .push(format!("{place}.permissions: {msg}; using 0644"));
            Some(0o644)
        }
        Err(msg) => return Err(Error::new(Stage::Plan, format!("{place}.permissions"), msg)),
    };
    let secret = looks_secret(&path, &content);
    Ok(Some(FileWrite {
        path,
        content: Content(content),
        owner: parse_owner(wf.owner.as_deref()),
        mode,
        append: wf.append.0,
        defer: wf.defer.0,
        secret,
    }))
}

/// Paths on tmpfs that do not survive a reboot: written every boot, and never fsynced.
pub fn is_volatile(path: &str) -> bool {
    path.starts_with("/run/") || path.starts_with("/var/run/")
}

/// Private keys, tokens and kubeadm configs: their contents are never logged.
fn looks_secret(path: &str, content: &[u8]) -> bool {
    let text = String::from_utf8_lossy(content);
    path.ends_with(".key")
        || path.starts_with("/run/kubeadm/")
        || text.contains("PRIVATE KEY")
        || text.contains("token:")
        || text.contains("certificateKey")
}

fn hostname(b: &mut Builder<'_>, cfg: &CloudConfig) -> Result<()> {
    if cfg.preserve_hostname.map(|f| f.0).unwrap_or(false) {
        return Ok(());
    }
    let given = cfg.hostname.is_some()
        || cfg.fqdn.is_some()
        || cfg.manage_etc_hosts.is_some()
        || cfg.prefer_fqdn_over_hostname.is_some();
    if !given {
        return Ok(());
    }
    // cloud-init's get_hostname_fqdn (D.4).
    let ds_name = b
        .input
        .metadata
        .local_hostname
        .clone()
        .or_else(|| b.input.facts.fqdn.clone())
        .unwrap_or_else(|| "localhost".into());
    let (hostname, fqdn) = if let Some(fqdn) = &cfg.fqdn {
        (
            cfg.hostname.clone().unwrap_or_else(|| split_name(fqdn).0),
            fqdn.clone(),
        )
    } else if let Some(h) = cfg
        .hostname
        .as_ref()
        .filter(|h| h.find('.').is_some_and(|p| p > 0))
    {
        (split_name(h).0, h.clone())
    } else {
        (
            cfg.hostname
                .clone()
                .unwrap_or_else(|| split_name(&ds_name).0),
            ds_name.clone(),
        )
    };
    let etc_hosts = match cfg.manage_etc_hosts {
        Some(ManageEtcHosts::Template) => {
            Some(EtcHosts::Template(etc_hosts_template(&hostname, &fqdn)))
        }
        Some(ManageEtcHosts::Localhost) => Some(EtcHosts::Localhost {
            address: "127.0.1.1".into(),
        }),
        _ => None,
    };
    let prefer_fqdn = cfg.prefer_fqdn_over_hostname.map(|f| f.0).unwrap_or(false);
    check_host_name(&hostname, "hostname")?;
    check_host_name(&fqdn, "fqdn")?;
    b.push(
        "hostname".into(),
        RunStage::Main,
        Frequency::PerBoot,
        Action::Hostname(HostnameSpec {
            hostname,
            fqdn,
            prefer_fqdn,
            etc_hosts,
        }),
    );
    Ok(())
}

/// cloud-init's `hosts.debian.tmpl`, rendered (comment lines name nodeagent instead).
pub fn etc_hosts_template(hostname: &str, fqdn: &str) -> String {
    format!(
        "# Your system has configured 'manage_etc_hosts' as True.\n\
         # As a result, if you wish for changes to this file to persist\n\
         # then you will need to change or remove the value of\n\
         # 'manage_etc_hosts' in the node's user-data (nodeagent rewrites this file every boot).\n\
         #\n\
         127.0.1.1 {fqdn} {hostname}\n\
         127.0.0.1 localhost\n\
         \n\
         # The following lines are desirable for IPv6 capable hosts\n\
         ::1 localhost ip6-localhost ip6-loopback\n\
         ff02::1 ip6-allnodes\n\
         ff02::2 ip6-allrouters\n"
    )
}

/// A group in the target's database, or made by a group or user step planned so far.
fn group_exists_before(b: &Builder<'_>, g: &str) -> bool {
    b.input.users.groups.iter().any(|x| x == g)
        || b.steps.iter().any(|s| match &s.action {
            Action::Group(x) => x.name == g,
            Action::User(u) => {
                u.groups.iter().any(|x| x == g)
                    || (!u.groups.is_empty() && u.primary_group.as_deref() == Some(g))
                    || (u.name == g && u.primary_group.is_none() && !u.no_user_group)
            }
            _ => false,
        })
}

fn user(b: &mut Builder<'_>, i: usize, u: &crate::cloudconfig::UserEntry) -> Result<UserSpec> {
    let place = format!("users[{i}]");
    check_name(&u.name, format!("{place}.name"))?;
    for g in &u.groups.0 {
        check_name(g, format!("{place}.groups"))?;
    }
    if let Some(g) = &u.primary_group {
        check_name(g, format!("{place}.primary_group"))?;
        // cloud-init's add_user creates a missing primary group only when `groups` is given
        // too; alone, useradd fails and the user is never made. Refused here, before any write.
        if u.groups.0.is_empty() && b.input.users.known && !group_exists_before(b, g) {
            return Err(Error::new(
                Stage::Plan,
                format!("{place}.primary_group"),
                format!(
                    "group '{g}' does not exist and is not created before this user (cloud-init creates a primary group only together with groups:); add it to groups: or to the top-level groups:"
                ),
            ));
        }
    }
    check_user_fields(u, &place)?;
    if u.plain_text_passwd.is_some() {
        b.lenient(
            format!("{place}.plain_text_passwd"),
            "plain-text passwords are not applied; give a hash in passwd".into(),
        )?;
    }
    let sudo = match &u.sudo {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => crate::metadata::strings(items),
        Some(other) => {
            return Err(Error::new(
                Stage::Plan,
                format!("{place}.sudo"),
                format!(
                    "expected a rule string or a list, found {}",
                    crate::metadata::kind(other)
                ),
            ));
        }
    };
    let uid = match &u.uid {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => n.as_u64().and_then(|v| u32::try_from(v).ok()),
        Some(Value::String(s)) => s.trim().parse().ok(),
        Some(_) => None,
    };
    if u.uid.as_ref().is_some_and(|v| !v.is_null()) && uid.is_none() {
        return Err(Error::new(
            Stage::Plan,
            format!("{place}.uid"),
            "not a valid numeric uid",
        ));
    }
    let inactive = match &u.inactive {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    if inactive
        .as_deref()
        .is_some_and(|d| d.trim().parse::<i64>().map_or(true, |n| n < -1))
    {
        return Err(Error::new(
            Stage::Plan,
            format!("{place}.inactive"),
            "not a number of days (-1 or more)",
        ));
    }
    for (j, rule) in sudo.iter().enumerate() {
        if rule.trim().is_empty() || rule.chars().any(char::is_control) {
            return Err(Error::new(
                Stage::Plan,
                format!("{place}.sudo[{j}]"),
                "a sudo rule must be one non-empty line without control characters",
            ));
        }
    }
    check_new_user(b, u, uid, &place)?;
    if (u.no_create_home.0 || u.system.0) && !u.ssh_authorized_keys.0.is_empty() {
        return Err(Error::new(
            Stage::Plan,
            format!("{place}.ssh_authorized_keys"),
            "a user without a home (system or no_create_home) cannot have authorized keys",
        ));
    }
    Ok(UserSpec {
        name: u.name.clone(),
        gecos: u.gecos.clone(),
        homedir: u.homedir.clone(),
        primary_group: u.primary_group.clone(),
        groups: u.groups.0.clone(),
        shell: u.shell.clone(),
        passwd: u.passwd.clone().or_else(|| u.hashed_passwd.clone()),
        lock_passwd: u.lock_passwd.map(|f| f.0).unwrap_or(true),
        sudo,
        ssh_authorized_keys: u.ssh_authorized_keys.0.clone(),
        system: u.system.0,
        no_create_home: u.no_create_home.0,
        no_user_group: u.no_user_group.0,
        uid,
        inactive,
        expiredate: u.expiredate.clone(),
    })
}

fn disks(b: &mut Builder<'_>, cfg: &CloudConfig) -> Result<()> {
    let alias = |d: &str| {
        cfg.device_aliases
            .get(d)
            .cloned()
            .unwrap_or_else(|| d.to_string())
    };
    if let Some(map) = &cfg.disk_setup {
        let mut disks = Vec::new();
        for (dev, entry) in map {
            let place = format!("disk_setup.{dev}");
            let table_type = entry.table_type.clone().unwrap_or_else(|| "mbr".into());
            if !matches!(table_type.as_str(), "mbr" | "gpt") {
                return Err(Error::new(
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
                    return Err(Error::new(
                        Stage::Plan,
                        format!("{place}.layout"),
                        format!(
                            "expected true, false or a list, found {}",
                            crate::metadata::kind(other)
                        ),
                    ));
                }
            };
            check_layout(&layout, &table_type, &place)?;
            check_device(&alias(dev), &place)?;
            disks.push(DiskSpec {
                device: alias(dev),
                table_type,
                layout,
                overwrite: entry.overwrite.map(|f| f.0).unwrap_or(false),
            });
        }
        if !disks.is_empty() {
            b.push(
                "disk_setup".into(),
                RunStage::Main,
                Frequency::PerInstance,
                Action::DiskSetup(DiskSetupSpec { disks }),
            );
        }
    }
    if !cfg.fs_setup.is_empty() {
        let mut filesystems = Vec::new();
        for (i, fs) in cfg.fs_setup.iter().enumerate() {
            let place = format!("fs_setup[{i}]");
            let need = |v: &Option<String>, f: &str| {
                v.clone().ok_or_else(|| {
                    Error::new(
                        Stage::Plan,
                        format!("{place}.{f}"),
                        format!("{f} is required"),
                    )
                })
            };
            let partition = match &fs.partition {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                Some(other) => {
                    return Err(Error::new(
                        Stage::Plan,
                        format!("{place}.partition"),
                        format!("unexpected {}", crate::metadata::kind(other)),
                    ));
                }
            };
            let filesystem = need(&fs.filesystem, "filesystem")?;
            if filesystem.is_empty() || !filesystem.bytes().all(|c| c.is_ascii_alphanumeric()) {
                return Err(Error::new(
                    Stage::Plan,
                    format!("{place}.filesystem"),
                    format!("{filesystem:?} is not a filesystem type mkfs knows"),
                ));
            }
            check_device(
                &alias(&need(&fs.device, "device")?),
                &format!("{place}.device"),
            )?;
            filesystems.push(FsSpec {
                label: fs.label.clone(),
                filesystem,
                device: alias(&need(&fs.device, "device")?),
                partition,
                overwrite: fs.overwrite.map(|f| f.0).unwrap_or(false),
                replace_fs: fs.replace_fs.clone(),
                extra_opts: fs.extra_opts.0.clone(),
            });
        }
        b.push(
            "fs_setup".into(),
            RunStage::Main,
            Frequency::PerInstance,
            Action::FsSetup(FsSetupSpec { filesystems }),
        );
    }
    if !cfg.mounts.is_empty() {
        mounts(b, cfg)?;
    }
    Ok(())
}

/// cloud-init's default `mount_default_fields` on systemd distros, with its
/// `x-systemd.requires=cloud-init.service` pointing at our local-stage unit instead: a
/// requirement on a unit that is absent or masked (cloud-init on a nodeagent image) makes
/// systemd fail the mount at every later boot.
pub const MOUNT_DEFAULT_OPTIONS: &str =
    "defaults,nofail,x-systemd.requires=nodeagent-local.service,_netdev";

/// cc_mounts' handling of the `mounts` list that needs no host: fields `str()`-ed, defaults
/// filled in (`mount_default_fields` replaces them whole), and an entry whose mount point is
/// null cancels itself and every earlier entry of the same device. Which devices exist is
/// decided at apply time (`apply::disks::mounts`), as cloud-init decides it on the host.
fn mounts(b: &mut Builder<'_>, cfg: &CloudConfig) -> Result<()> {
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
            return Err(Error::new(
                Stage::Plan,
                place,
                "an fstab entry has at most 6 fields",
            ));
        }
        let mut e: Vec<Option<String>> = m.iter().map(|f| f.0.clone()).collect();
        if e.first().cloned().flatten().is_none() {
            return Err(Error::new(
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
            for earlier in entries.iter_mut().filter(|x| x[0] == e[0]) {
                earlier[1] = None;
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
            return Err(Error::new(
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
            return Err(Error::new(
                Stage::Plan,
                format!("mounts[{i}]"),
                "fstab fields must be non-empty and free of spaces, tabs and newlines",
            ));
        }
        out.push(fields);
    }
    if !out.is_empty() {
        b.push(
            "mounts".into(),
            RunStage::Main,
            Frequency::PerInstance,
            Action::Mounts(MountsSpec {
                entries: out,
                device_aliases: cfg.device_aliases.clone(),
            }),
        );
    }
    Ok(())
}

fn layout_part(p: &Value, place: &str, table_type: &str) -> Result<(u32, Option<String>)> {
    let pct = |v: &Value| {
        v.as_u64()
            .filter(|n| (1..=100).contains(n))
            .map(|n| n as u32)
    };
    let bad = || {
        Error::new(
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
                Error::new(Stage::Plan, format!("{place}.layout"), format!("{p}: {m}"))
            })?;
            pct(&a[0]).map(|n| (n, Some(ty))).ok_or_else(bad)
        }
        _ => Err(bad()),
    }
}

/// Every file owner must exist in the target or be created earlier by the plan.
fn check_owners(b: &Builder<'_>) -> Result<()> {
    for step in &b.steps {
        if let Action::WriteFile(f) = &step.action {
            for n in f.owner.user.iter().chain(f.owner.group.iter()) {
                check_name(n, format!("{}.owner", step.id))?;
            }
        }
    }
    let db = b.input.users;
    // Without a user database only `root` resolves, as in apply (`UserDb::uid`).
    let (mut users, mut groups): (Vec<&str>, Vec<&str>) = if db.known {
        (
            db.users.iter().map(String::as_str).collect(),
            db.groups.iter().map(String::as_str).collect(),
        )
    } else {
        (vec!["root"], vec!["root"])
    };
    for step in &b.steps {
        match &step.action {
            Action::User(u) => {
                users.push(&u.name);
                if !u.no_user_group {
                    groups.push(&u.name);
                }
            }
            Action::Group(g) => groups.push(&g.name),
            Action::WriteFile(f) => {
                // Owners are names resolved in the target's database, as cloud-init's
                // chownbyname does: "1000" is a user called 1000, not uid 1000.
                if let Some(u) = f.owner.user.as_deref().filter(|u| !users.contains(u)) {
                    return Err(Error::new(
                        Stage::Plan,
                        format!("{}.owner", step.id),
                        format!(
                            "user '{u}' does not exist in the target and is not created before this file"
                        ),
                    ));
                }
                if let Some(g) = f.owner.group.as_deref().filter(|g| !groups.contains(g)) {
                    return Err(Error::new(
                        Stage::Plan,
                        format!("{}.owner", step.id),
                        format!(
                            "group '{g}' does not exist in the target and is not created before this file"
                        ),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Longest file name component and whole path Linux takes (NAME_MAX, PATH_MAX): a longer one
/// fails `open` at apply, after earlier steps ran.
pub const NAME_MAX: usize = 255;
pub const PATH_MAX: usize = 4096;

/// A normalised path within NAME_MAX per component and PATH_MAX in all (the `--root` prefix
/// is added by the target check).
fn check_path_limits(path: &str) -> std::result::Result<(), String> {
    if let Some(c) = path.split('/').find(|c| c.len() > NAME_MAX) {
        return Err(format!(
            "a path component of {} bytes; the filesystem limit is {NAME_MAX}",
            c.len()
        ));
    }
    // Leave room for the temp file's `.` prefix and `.nodeagent-tmp` suffix.
    if path.len() + 16 > PATH_MAX {
        return Err(format!(
            "path of {} bytes; the limit is {}",
            path.len(),
            PATH_MAX - 16
        ));
    }
    Ok(())
}

/// One field of an /etc/passwd line (gecos, home, shell): no `:`, no control character.
fn check_passwd_field(v: &str, place: String) -> Result<()> {
    if v.contains(':') || v.chars().any(char::is_control) {
        return Err(Error::new(
            Stage::Plan,
            place,
            "must not contain ':', a line break or another control character (it becomes a field of /etc/passwd)",
        ));
    }
    Ok(())
}

/// The fields of a user entry that end up in /etc/passwd, /etc/shadow or authorized_keys.
fn check_user_fields(u: &crate::cloudconfig::UserEntry, place: &str) -> Result<()> {
    if let Some(g) = &u.gecos {
        check_passwd_field(g, format!("{place}.gecos"))?;
    }
    if let Some(h) = &u.homedir {
        check_passwd_field(h, format!("{place}.homedir"))?;
        if !h.starts_with('/') {
            return Err(Error::new(
                Stage::Plan,
                format!("{place}.homedir"),
                "must be an absolute path",
            ));
        }
    }
    if let Some(sh) = &u.shell {
        check_passwd_field(sh, format!("{place}.shell"))?;
    }
    for (key, hash) in [("passwd", &u.passwd), ("hashed_passwd", &u.hashed_passwd)] {
        if hash
            .as_deref()
            .is_some_and(|h| h.is_empty() || h.contains(':') || h.chars().any(char::is_control))
        {
            // The value is never shown: it is a password hash, or a password by mistake.
            return Err(Error::new(
                Stage::Plan,
                format!("{place}.{key}"),
                "not a password hash (empty, or contains ':' or a control character; value not shown)",
            ));
        }
    }
    if let Some(d) = &u.expiredate
        && d.chars().any(char::is_control)
    {
        return Err(Error::new(
            Stage::Plan,
            format!("{place}.expiredate"),
            "must not contain a control character",
        ));
    }
    for (j, k) in u.ssh_authorized_keys.0.iter().enumerate() {
        if k.chars().any(|c| c.is_control() && c != '\t') {
            return Err(Error::new(
                Stage::Plan,
                format!("{place}.ssh_authorized_keys[{j}]"),
                "a key must be one line (it would add lines to authorized_keys)",
            ));
        }
    }
    Ok(())
}

/// What `useradd` refuses for a user that does not exist yet: a uid another user has, a
/// primary group that neither the target nor an earlier step has.
fn check_new_user(
    b: &Builder<'_>,
    u: &crate::cloudconfig::UserEntry,
    uid: Option<u32>,
    place: &str,
) -> Result<()> {
    let db = b.input.users;
    if db.known && db.users.contains(&u.name) {
        return Ok(()); // apply leaves an existing user's uid and group alone
    }
    let planned = || {
        b.steps.iter().filter_map(|s| match &s.action {
            Action::User(o) => Some(o),
            _ => None,
        })
    };
    if let Some(uid) = uid {
        let owner = db
            .uids
            .iter()
            .find(|&(n, &id)| id == uid && *n != u.name)
            .map(|(n, _)| n.clone())
            .or_else(|| {
                planned()
                    .find(|o| o.uid == Some(uid) && o.name != u.name)
                    .map(|o| o.name.clone())
            });
        if let Some(other) = owner {
            return Err(Error::new(
                Stage::Plan,
                format!("{place}.uid"),
                format!("uid {uid} already belongs to user '{other}'"),
            ));
        }
    }
    if let Some(g) = &u.primary_group {
        let exists = if let Ok(gid) = g.parse::<u32>() {
            db.gids.values().any(|&id| id == gid) || (!db.known && gid == 0)
        } else {
            // As cloud-init's add_user: a missing primary group is created when `groups` is
            // given too (the check above refuses it alone).
            (!db.known && g == "root") || group_exists_before(b, g) || !u.groups.0.is_empty()
        };
        if !exists {
            return Err(Error::new(
                Stage::Plan,
                format!("{place}.primary_group"),
                format!(
                    "group '{g}' does not exist in the target and is not created before this user (add it under groups:)"
                ),
            ));
        }
    }
    Ok(())
}

/// NTP sources become `server`/`pool` lines of chrony.conf or one `NTP=` line: a host name
/// or address, nothing that could start another line or directive.
fn check_ntp(ntp: &crate::cloudconfig::Ntp) -> Result<()> {
    let client = ntp.ntp_client.as_deref().unwrap_or("auto");
    if !matches!(client, "auto" | "" | "chrony" | "systemd-timesyncd") {
        return Err(Error::of(
            crate::error::ErrorKind::Unsupported,
            Stage::Plan,
            "ntp.ntp_client",
            format!("{client:?} is not supported (chrony, systemd-timesyncd, auto)"),
        ));
    }
    for (key, list) in [("servers", &ntp.servers), ("pools", &ntp.pools)] {
        for (j, s) in list.iter().enumerate() {
            let ok = !s.is_empty()
                && s.len() <= 253
                && s.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b".-_:[]%".contains(&c));
            if !ok {
                return Err(Error::new(
                    Stage::Plan,
                    format!("ntp.{key}[{j}]"),
                    "not a host name or address (letters, digits, '.', '-', '_', ':', '[', ']', '%')",
                ));
            }
        }
    }
    Ok(())
}

/// A device the disk tools can be given: an absolute path, no whitespace or control chars.
fn check_device(d: &str, place: &str) -> Result<()> {
    if d.starts_with('/') && !d.contains(|c: char| c.is_whitespace() || c.is_control()) {
        Ok(())
    } else {
        Err(Error::new(
            Stage::Plan,
            place,
            format!("{d:?} is not a device path (absolute, or a device_aliases name)"),
        ))
    }
}

/// Sizes add up to at most 100 %, and an MBR table has at most 4 (primary) partitions, as
/// cloud-init's `get_partition_mbr_layout` requires.
fn check_layout(layout: &[(u32, Option<String>)], table_type: &str, place: &str) -> Result<()> {
    let sum: u32 = layout.iter().map(|l| l.0).sum();
    if sum > 100 {
        return Err(Error::new(
            Stage::Plan,
            format!("{place}.layout"),
            format!("partition sizes add up to {sum} %; at most 100"),
        ));
    }
    if table_type == "mbr" && layout.len() > 4 {
        return Err(Error::new(
            Stage::Plan,
            format!("{place}.layout"),
            format!("{} partitions; an mbr table takes at most 4", layout.len()),
        ));
    }
    Ok(())
}

/// sgdisk's GPT type codes (cloud-init partitions GPT disks with sgdisk) and the GUIDs sfdisk
/// takes for them (gdisk's parttypes.cc).
const GPT_TYPES: &[(&str, &str)] = &[
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn permissions_follow_cloud_init() {
        assert_eq!(decode_permissions(None), Ok(Some(0o644)));
        assert_eq!(decode_permissions(Some(&json!("0640"))), Ok(Some(0o640)));
        assert_eq!(decode_permissions(Some(&json!("640"))), Ok(Some(0o640)));
        assert_eq!(decode_permissions(Some(&json!("0o600"))), Ok(Some(0o600)));
        assert_eq!(decode_permissions(Some(&json!(420))), Ok(Some(0o644)));
        assert_eq!(
            decode_permissions(Some(&json!(0))),
            Ok(None),
            "mode 0 = leave the creation mode"
        );
        assert!(decode_permissions(Some(&json!("9999"))).is_err());
        assert!(decode_permissions(Some(&json!(-1))).is_err());
        assert!(decode_permissions(Some(&json!("rw-r--r--"))).is_err());
    }

    #[test]
    fn owners_and_paths() {
        assert_eq!(
            parse_owner(None),
            Owner {
                user: Some("root".into()),
                group: Some("root".into())
            }
        );
        assert_eq!(
            parse_owner(Some(" capv : adm ")),
            Owner {
                user: Some("capv".into()),
                group: Some("adm".into())
            }
        );
        assert_eq!(parse_owner(Some("-1:none")), Owner::default());
        assert_eq!(
            parse_owner(Some("root")),
            Owner {
                user: Some("root".into()),
                group: None
            }
        );
        assert_eq!(normalise_path("/etc//x/./y", false).unwrap(), "/etc/x/y");
        assert!(normalise_path("etc/x", false).is_err());
        assert!(
            normalise_path("/etc/../x", false)
                .unwrap_err()
                .contains("..")
        );
        assert_eq!(normalise_path("/etc/../x", true).unwrap(), "/x");
        assert_eq!(normalise_path("x/y", true).unwrap(), "/x/y");
        assert!(normalise_path("/a\0b", true).is_err());
    }
}
