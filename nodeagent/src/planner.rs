//! Building the plan (`crate::plan`): cloud-init's module order and semantics, as a pure
//! function of what `pipeline::gather` read. Its checks: `target` (the plan against the
//! target's paths and tools) and `preflight` (kubeadm config and PKI).
//!
//! Order follows cloud-init's stages (docs/formats.md E.1, a.10):
//! local: hostname, network; main: bootcmd, write_files, disks, mounts, hostname/hosts,
//! groups, users, ntp, deferred write_files, runcmd (with the kubeadm step).

use crate::cloudconfig::{CloudConfig, CmdItem, ManageEtcHosts, UserItem};
use crate::config::ImageConfig;
use crate::error::{Error, Result, Stage, ensure};
use crate::facts::Facts;
use crate::metadata::Metadata;
use crate::plan::*;
use serde_json::Value;

pub mod preflight;
mod storage;
pub mod target;
mod users;
pub use storage::*;
use users::*;

/// Users and groups that already exist in the target root (from its /etc/passwd, /etc/group,
/// read by `pipeline::gather`).
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

/// What planning reads besides the cloud-config; all of it gathered by `pipeline::gather`.
pub struct PlanInput<'a> {
    pub instance_id: &'a str,
    pub metadata: &'a Metadata,
    pub facts: &'a Facts,
    pub config: &'a CloudConfig,
    pub users: &'a UserDb,
    pub image: &'a ImageConfig,
    pub compat: bool,
    /// Certificates, kubeadm configs and journal records already on the target, for kubeadm
    /// pre-flight.
    pub disk: &'a preflight::Disk,
    /// The clock (seconds since the epoch), for certificate validity.
    pub now: i64,
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

/// The whole plan (local and main steps), kubeadm pre-flight included. Pure: a function of
/// `input` alone, it reads nothing and writes nothing.
pub fn build(input: &PlanInput<'_>) -> Result<Plan> {
    let plan = steps(input)?;
    preflight::check(&plan, input.disk, input.now)?;
    Ok(plan)
}

/// The plan's steps before kubeadm pre-flight (`pipeline` runs pre-flight once it has read
/// the files it looks up, [`preflight::unread`]).
pub fn steps(input: &PlanInput<'_>) -> Result<Plan> {
    let mut local = build_local(input.instance_id, input.metadata, input.facts, input.compat)?;
    local.steps.extend(disk_growth(input.image, input.config)?);
    let mut b = Builder {
        input,
        steps: local.steps,
        warnings: local.warnings,
    };
    let cfg = input.config;
    bootcmd(&mut b, cfg);
    let deferred = write_files(&mut b, cfg)?;
    disks(&mut b, cfg)?;
    hostname(&mut b, cfg)?;
    accounts(&mut b, cfg)?;
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
    runcmd(&mut b, cfg);
    check_owners(&b)?;
    Ok(Plan {
        version: PLAN_VERSION,
        instance_id: input.instance_id.to_string(),
        steps: b.steps,
        warnings: b.warnings,
    })
}

fn bootcmd(b: &mut Builder<'_>, cfg: &CloudConfig) {
    for (i, item) in cfg.bootcmd.iter().enumerate() {
        command(b, format!("bootcmd[{i}]"), item, Frequency::PerBoot);
    }
}

/// The write_files steps, in order; the deferred ones (`defer: true`) are returned to go
/// after users and ntp, as cloud-init's write_files_deferred runs.
fn write_files(
    b: &mut Builder<'_>,
    cfg: &CloudConfig,
) -> Result<Vec<(String, FileWrite, Frequency)>> {
    let mut deferred = Vec::new();
    let mut total = 0usize;
    for (i, wf) in cfg.write_files.iter().enumerate() {
        let Some(file) = write_file(b, i, wf)? else {
            continue;
        };
        total += file.content.0.len();
        if total > crate::limits::MAX_WRITE_FILES_TOTAL_BYTES {
            return Err(Error::too_large(
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
    Ok(deferred)
}

/// groups, then users (cc_users_groups), then root's keys (cc_ssh).
fn accounts(b: &mut Builder<'_>, cfg: &CloudConfig) -> Result<()> {
    // As cloud-init's `_normalize_groups`: entries of one group are merged (in the order the
    // group first appears), its members deduplicated and sorted (`util.uniq_merge_sorted`),
    // the order `usermod -a -G` then adds them in.
    let mut merged: Vec<(&str, Vec<String>)> = Vec::new();
    for ((name, members), at) in cfg.groups.0.iter().zip(&cfg.groups.1) {
        let (name_at, members_at) = at.places(name);
        check_name(name, name_at)?;
        let members = group_members(b, &members_at, members)?;
        match merged.iter_mut().find(|(n, _)| n == name) {
            Some((_, all)) => all.extend(members),
            None => merged.push((name, members)),
        }
    }
    for (name, mut members) in merged {
        members.sort();
        members.dedup();
        let spec = GroupSpec {
            name: name.to_string(),
            members,
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
                let spec = user(b, i, u)?;
                b.push(
                    format!("user:{}", spec.name),
                    RunStage::Main,
                    Frequency::PerInstance,
                    Action::User(spec),
                );
            }
        }
    }
    root_keys(b, cfg)
}

/// cloud-init's ssh module: the top-level `ssh_authorized_keys` and the platform's public
/// keys go to the default user (nodeagent images have none) and to root, there with
/// `disable_root`'s options (`disable_root_opts`, `$USER` being `NONE` without a default
/// user); `disable_root: false` gives them without options (a key's own are dropped, as
/// there). Without keys nothing is written (cloud-init leaves an empty authorized_keys).
fn root_keys(b: &mut Builder<'_>, cfg: &CloudConfig) -> Result<()> {
    let mut keys = b.input.metadata.public_keys.clone();
    keys.extend(cfg.ssh_authorized_keys.iter().cloned());
    if keys.is_empty() {
        return Ok(());
    }
    let options = if cfg.disable_root.is_none_or(|f| f.0) {
        cfg.disable_root_opts
            .as_deref()
            .unwrap_or(crate::apply::authkeys::DISABLE_USER_OPTS)
            .replace("$USER", "NONE")
            .replace("$DISABLE_USER", "root")
    } else {
        String::new()
    };
    for (j, k) in keys.iter().enumerate() {
        check_key_line(k, Some(&options), format!("ssh_authorized_keys[{j}]"))?;
    }
    b.push(
        "ssh:root".into(),
        RunStage::Main,
        Frequency::PerInstance,
        Action::SshKeys(SshKeysSpec {
            user: "root".into(),
            keys,
            options,
        }),
    );
    Ok(())
}

/// The members of one `groups` entry that go to the plan. cloud-init's `create_group` adds a
/// member only if `pwd.getpwnam` finds it, else warns "user does not exist" and skips it;
/// groups run before users, so only the image's users count. A name no user can have here
/// (`alice,bob` from the list form's unsplit string, ` bob` from the mapping form's split,
/// `alice bob`) is skipped with a warning naming `place` (`groups[N].NAME`, `groups.NAME`), as cloud-init skips it: the same
/// /etc/group. Such a name that the image does have as a user is refused, as before: the
/// shadow tools would get it on their command line.
fn group_members(b: &mut Builder<'_>, place: &str, members: &[String]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for m in members {
        if valid_account_name(m) {
            out.push(m.clone());
        } else if b.input.users.users.iter().any(|u| u == m) {
            check_name(m, place.to_string())?;
        } else {
            let hint = if m.contains(',') {
                " (a string in a list entry is one member name, as in cloud-init; give the members as a list)"
            } else if m.trim() != m {
                " (cloud-init splits a mapping's members string at commas without trimming the names; give the members as a list)"
            } else {
                ""
            };
            b.warnings.push(format!(
                "{place}: member {m:?} is not a user; skipped, as cloud-init skips it{hint}"
            ));
        }
    }
    Ok(out)
}

/// runcmd items; Cluster API's kubeadm line becomes the kubeadm step.
fn runcmd(b: &mut Builder<'_>, cfg: &CloudConfig) {
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
        command(b, format!("runcmd[{i}]"), item, Frequency::PerInstance);
    }
}

/// The command step of a bootcmd or runcmd item, its id and origin `origin`; a skipped
/// (null) item or an empty argv list is no step.
fn command(b: &mut Builder<'_>, origin: String, item: &CmdItem, frequency: Frequency) {
    let run = match item {
        CmdItem::Shell(s) => Run::Shell(s.clone()),
        CmdItem::Argv(a) if !a.is_empty() => Run::Argv(a.clone()),
        _ => return,
    };
    let spec = CommandSpec {
        origin: origin.clone(),
        run,
        timeout_secs: b.input.image.command_timeout_secs,
    };
    b.push(origin, RunStage::Main, frequency, Action::Command(spec));
}

fn split_name(name: &str) -> (String, String) {
    let short = name.split('.').next().unwrap_or(name).to_string();
    (short, name.to_string())
}

fn check_name(n: &str, place: String) -> Result<()> {
    ensure(valid_account_name(n), Stage::Plan, place, || {
        format!("{n:?} is not a valid user or group name")
    })
}

fn check_host_name(n: &str, place: &str) -> Result<()> {
    ensure(valid_host_name(n), Stage::Plan, place, || {
        format!("{n:?} is not a valid host name")
    })
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
            return Err(crate::metadata::found(
                "permissions must be a string or an integer",
                other,
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
                // cloud-init warns and writes the content as text; so does nodeagent.
                Err(msg) if msg.contains("unknown encoding") => {
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
        // `permissions: '0000'` asks for no access at all, but cloud-init's chmod helper skips
        // a falsy mode and the file keeps 0644: a key readable by all. Refused; --compat keeps
        // cloud-init's result and says so.
        Ok(None) if compat => {
            b.warnings.push(format!(
                "{place}.permissions: mode 0 is ignored as cloud-init does: the file keeps its mode, 0644 (readable by all users) when new"
            ));
            None
        }
        Ok(None) => {
            return Err(Error::new(
                Stage::Plan,
                format!("{place}.permissions"),
                "mode 0 (no access at all) is not applied by cloud-init, which leaves the file 0644, readable by all users; give the mode you mean (e.g. '0600'), or run with --compat for cloud-init's result",
            ));
        }
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

/// cloud-init's `hosts.debian.tmpl`, rendered byte for byte (its comment block too: scripts
/// and image checks that look for it find it).
pub fn etc_hosts_template(hostname: &str, fqdn: &str) -> String {
    format!(
        "# Your system has configured 'manage_etc_hosts' as True.\n\
         # As a result, if you wish for changes to this file to persist\n\
         # then you will need to either\n\
         # a.) make changes to the master file in /etc/cloud/templates/hosts.debian.tmpl\n\
         # b.) change or remove the value of 'manage_etc_hosts' in\n\
         #     /etc/cloud/cloud.cfg or cloud-config from user-data\n\
         #\n\
         127.0.1.1 {fqdn} {hostname}\n\
         127.0.0.1 localhost\n\
         \n\
         # The following lines are desirable for IPv6 capable hosts\n\
         ::1 localhost ip6-localhost ip6-loopback\n\
         ff02::1 ip6-allnodes\n\
         ff02::2 ip6-allrouters\n\n"
    )
}

/// cloud-init's default `mount_default_fields` on systemd distros, with its
/// `x-systemd.requires=cloud-init.service` pointing at our local-stage unit instead: a
/// requirement on a unit that is absent or masked (cloud-init on a nodeagent image) makes
/// systemd fail the mount at every later boot.
pub const MOUNT_DEFAULT_OPTIONS: &str =
    "defaults,nofail,x-systemd.requires=nodeagent-local.service,_netdev";

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
                let owner = [
                    ("user", &f.owner.user, &users),
                    ("group", &f.owner.group, &groups),
                ];
                for (what, name, known) in owner {
                    if let Some(n) = name.as_deref().filter(|n| !known.contains(n)) {
                        return Err(Error::new(
                            Stage::Plan,
                            format!("{}.owner", step.id),
                            format!(
                                "{what} '{n}' does not exist in the target and is not created before this file"
                            ),
                        ));
                    }
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

/// NTP sources become `server`/`pool` lines of chrony.conf or one `NTP=` line: a host name
/// or address, nothing that could start another line or directive.
fn check_ntp(ntp: &crate::cloudconfig::Ntp) -> Result<()> {
    let client = ntp.ntp_client.as_deref().unwrap_or("auto");
    if !matches!(client, "auto" | "" | "chrony" | "systemd-timesyncd") {
        return Err(Error::unsupported(
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The plan's steps for a cloud-config on an image whose users are `users`.
    fn plan_of(userdata: &str, users: &[&str]) -> Result<Plan> {
        let config = crate::cloudconfig::parse(userdata, "userdata", false)
            .unwrap()
            .config;
        let db = UserDb {
            users: users.iter().map(|u| u.to_string()).collect(),
            groups: vec!["root".into()],
            known: true,
            ..Default::default()
        };
        steps(&PlanInput {
            instance_id: "i-1",
            metadata: &Metadata::default(),
            facts: &Facts::default(),
            config: &config,
            users: &db,
            image: &ImageConfig::default(),
            compat: false,
            disk: &preflight::Disk::default(),
            now: 0,
        })
    }

    fn members_of(plan: &Plan, group: &str) -> Vec<String> {
        plan.steps
            .iter()
            .find_map(|s| match &s.action {
                Action::Group(g) if g.name == group => Some(g.members.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no group step for {group}"))
    }

    const IMAGE_USERS: &[&str] = &["root", "alice", "bob"];

    /// cloud-init 22.4: in a list entry the members string is one name (`alice,bob`), which
    /// `create_group` does not find as a user: a warning, the group made without members.
    #[test]
    fn list_entry_members_string_with_comma_is_one_member_skipped_with_a_warning() {
        for ud in [
            "#cloud-config\ngroups:\n  - admins: \"alice,bob\"\n",
            "#cloud-config\ngroups:\n  - admins: \"alice, bob\"\n",
        ] {
            let plan = plan_of(ud, IMAGE_USERS).unwrap();
            assert_eq!(members_of(&plan, "admins"), Vec::<String>::new(), "{ud}");
            let w: Vec<_> = plan
                .warnings
                .iter()
                .filter(|w| {
                    w.starts_with("groups[0].admins: member \"alice,") && w.contains("not a user")
                })
                .collect();
            assert_eq!(w.len(), 1, "{ud}: {:?}", plan.warnings);
        }
    }

    /// In the mapping form the string is split at commas, the items not trimmed: `alice`
    /// is added, ` bob` is not a user (warning); without the space both are added.
    #[test]
    fn mapping_members_string_is_split_at_commas_untrimmed() {
        let plan = plan_of(
            "#cloud-config\ngroups: {admins: \"alice, bob\"}\n",
            IMAGE_USERS,
        )
        .unwrap();
        assert_eq!(members_of(&plan, "admins"), ["alice"]);
        assert!(
            plan.warnings
                .iter()
                .any(|w| w.starts_with("groups.admins: member \" bob\" is not a user")),
            "{:?}",
            plan.warnings
        );
        let plan = plan_of(
            "#cloud-config\ngroups: {admins: \"bob,alice\"}\n",
            IMAGE_USERS,
        )
        .unwrap();
        assert_eq!(members_of(&plan, "admins"), ["alice", "bob"]);
        assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
    }

    /// One name without a comma, a list, and a name with a space (no user has one).
    #[test]
    fn members_one_name_list_and_name_with_space() {
        for (ud, members) in [
            (
                "#cloud-config\ngroups:\n  - admins: alice\n",
                &["alice"][..],
            ),
            ("#cloud-config\ngroups: {admins: alice}\n", &["alice"][..]),
            (
                "#cloud-config\ngroups:\n  - admins: [bob, alice, bob]\n",
                &["alice", "bob"][..],
            ),
            (
                "#cloud-config\ngroups: {admins: [alice, bob]}\n",
                &["alice", "bob"][..],
            ),
        ] {
            let plan = plan_of(ud, IMAGE_USERS).unwrap();
            assert_eq!(members_of(&plan, "admins"), members, "{ud}");
            assert!(plan.warnings.is_empty(), "{ud}: {:?}", plan.warnings);
        }
        for (ud, place) in [
            (
                "#cloud-config\ngroups:\n  - admins: \"alice bob\"\n",
                "groups[0].admins",
            ),
            (
                "#cloud-config\ngroups: {admins: \"alice bob\"}\n",
                "groups.admins",
            ),
            (
                "#cloud-config\ngroups:\n  - ops\n  - admins: [\"alice bob\", bob]\n",
                "groups[1].admins",
            ),
        ] {
            let plan = plan_of(ud, IMAGE_USERS).unwrap();
            assert!(
                !members_of(&plan, "admins").contains(&"alice bob".to_string()),
                "{ud}"
            );
            assert!(
                plan.warnings
                    .iter()
                    .any(|w| w.starts_with(&format!("{place}: member \"alice bob\" is not a user"))),
                "{ud}: {:?}",
                plan.warnings
            );
        }
    }

    /// A name the shadow tools would not take that the image does have as a user: cloud-init
    /// would add it; the plan refuses it (as before), naming the entry.
    #[test]
    fn bad_member_name_that_is_an_image_user_is_refused() {
        let err = plan_of(
            "#cloud-config\ngroups:\n  - admins: \"alice bob\"\n",
            &["root", "alice bob"],
        )
        .unwrap_err();
        assert_eq!(err.place, "groups[0].admins", "{err}");
    }

    /// `groups: "admins, ops"`: cloud-init's `groupadd ' ops'` fails (a warning); refused
    /// here at the entry, as any name groupadd would refuse.
    #[test]
    fn group_names_string_is_split_untrimmed() {
        let plan = plan_of("#cloud-config\ngroups: \"admins,ops\"\n", IMAGE_USERS).unwrap();
        assert_eq!(members_of(&plan, "ops"), Vec::<String>::new());
        let err = plan_of("#cloud-config\ngroups: \"admins, ops\"\n", IMAGE_USERS).unwrap_err();
        assert_eq!(err.place, "groups", "{err}");
        assert!(err.message.contains("\" ops\""), "{err}");
    }

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
