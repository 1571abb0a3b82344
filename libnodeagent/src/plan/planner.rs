//! Building the plan (`crate::plan`): cloud-init's module order and semantics, as a pure
//! function of what `pipeline::gather` read. Its checks: `target` (the plan against the
//! target's paths and tools) and `preflight` (kubeadm config and PKI).
//!
//! Order follows cloud-init's stages (docs/formats.md E.1, a.10):
//! local: hostname, network; main: bootcmd, write_files, disks, mounts, hostname/hosts,
//! groups, users, ntp, deferred write_files, runcmd (with the kubeadm step).

use crate::base::error::{Error, Result, Stage, ensure};
use crate::plan::*;
use crate::render::cloudconfig::{CloudConfig, CmdItem, ManageEtcHosts, UserItem};
use crate::source::config::ImageConfig;
use crate::source::facts::Facts;
use crate::source::metadata::Metadata;
use serde_json::Value;

mod files;
pub mod preflight;
mod storage;
pub mod target;
mod users;
pub use files::{NAME_MAX, PATH_MAX, decode_permissions, normalise_path, parse_owner};
use files::{check_owners, write_files};
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
            Err(Error::invalid(Stage::Plan, place, msg))
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
                preserve: false,
            }),
        });
    }
    if let Some(net) = &md.network {
        let renderer = facts
            .network_renderer
            .clone()
            .unwrap_or_else(|| "networkd".into());
        let rendered = crate::plan::network::render_with(net, &renderer, compat)
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
            peers: ntp.peers.clone(),
            allow: ntp.allow.clone(),
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
    scripts_user(&mut b, cfg);
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

/// A shell-script userdata (`#!`): written root-only (0700) into the instance's state
/// directory and run from there, by its own interpreter line, once per instance, after
/// everything else: cloud-init writes it as `part-001` in the instance's scripts directory
/// and its final-stage scripts-user runs it (`runparts`: executed, not given to a shell).
fn scripts_user(b: &mut Builder<'_>, cfg: &CloudConfig) {
    for (i, script) in cfg.scripts.iter().enumerate() {
        let name = format!("part-{:03}", i + 1);
        let path = format!(
            "/{}/instances/{}/scripts/{name}",
            crate::base::state::DIR.trim_matches('/'),
            crate::base::state::instance_dir_name(b.input.instance_id)
        );
        let file = FileWrite {
            secret: true,
            ..FileWrite::root_owned(path.clone(), script.clone().into_bytes(), 0o700)
        };
        let id = format!("scripts-user:{name}");
        b.push(
            format!("{id}:write"),
            RunStage::Main,
            Frequency::PerInstance,
            Action::WriteFile(file),
        );
        let spec = CommandSpec {
            origin: id.clone(),
            run: Run::Argv(vec![path]),
            timeout_secs: b.input.image.command_timeout_secs,
        };
        b.push(
            id,
            RunStage::Main,
            Frequency::PerInstance,
            Action::Command(spec),
        );
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

/// set_hostname and update_hostname (skipped with `preserve_hostname`), update_etc_hosts
/// (which does not look at it): one step.
fn hostname(b: &mut Builder<'_>, cfg: &CloudConfig) -> Result<()> {
    let preserve = cfg.preserve_hostname.map(|f| f.0).unwrap_or(false);
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
    if preserve && etc_hosts.is_none() {
        return Ok(());
    }
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
            preserve,
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

/// cloud-init 25.1's default `mount_default_fields` options on systemd distros (24.2+:
/// `x-systemd.after=cloud-init-network.service`, an ordering, no longer 22.4's
/// `x-systemd.requires=cloud-init.service`), ordered after our own unit that writes the
/// network configuration instead: a requirement on a unit that is absent, masked or failed
/// (cloud-init on a nodeagent image, our local unit failing once) fails the mount at every
/// later boot; an ordering on it does not.
pub const MOUNT_DEFAULT_OPTIONS: &str =
    "defaults,nofail,x-systemd.after=nodeagent-local.service,_netdev";

/// NTP sources become `server`/`pool` lines of chrony.conf or one `NTP=` line: a host name
/// or address, nothing that could start another line or directive.
fn check_ntp(ntp: &crate::render::cloudconfig::Ntp) -> Result<()> {
    let client = ntp.ntp_client.as_deref().unwrap_or("auto");
    if !matches!(client, "auto" | "" | "chrony" | "systemd-timesyncd") {
        return Err(Error::unsupported(
            Stage::Plan,
            "ntp.ntp_client",
            format!("{client:?} is not supported (chrony, systemd-timesyncd, auto)"),
        ));
    }
    let lists = [
        ("servers", &ntp.servers, ""),
        ("pools", &ntp.pools, ""),
        ("peers", &ntp.peers, ""),
        // chrony's `allow` takes a network: an address with a `/` prefix length.
        ("allow", &ntp.allow, "/"),
    ];
    for (key, list, more) in lists {
        for (j, s) in list.iter().enumerate() {
            let ok = !s.is_empty()
                && s.len() <= 253
                && s.bytes().all(|c| {
                    c.is_ascii_alphanumeric()
                        || b".-_:[]%".contains(&c)
                        || more.as_bytes().contains(&c)
                });
            if !ok {
                return Err(Error::invalid(
                    Stage::Plan,
                    format!("ntp.{key}[{j}]"),
                    format!(
                        "not a host name or address (letters, digits, '.', '-', '_', ':', '[', ']', '%'{})",
                        if more.is_empty() { "" } else { ", '/'" }
                    ),
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
        let config = crate::render::cloudconfig::parse(userdata, "userdata", false)
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
    fn files_of(plan: &Plan) -> Vec<&FileWrite> {
        plan.steps
            .iter()
            .filter_map(|s| match &s.action {
                Action::WriteFile(f) => Some(f),
                _ => None,
            })
            .collect()
    }

    /// `source:` as cloud-init 25.1's read_url_or_decode takes it: file:// and bare paths
    /// name a file of the target (fallback: whether content was given); a network URI is
    /// not fetched: with content it is written (a warning), without it is refused.
    #[test]
    fn write_files_source_as_25_1() {
        let doc = "#cloud-config\nwrite_files:\n\
- path: /etc/a\n  source: {uri: 'file://host/etc/src?x=1'}\n  content: fb\n\
- path: /etc/b\n  source: {uri: ' /etc/src#frag'}\n\
- path: /etc/c\n  source: {uri: 'https://example.test/c', headers: {X: y}}\n  content: inline\n\
- path: /etc/d\n  source: {uri: ''}\n";
        let plan = plan_of(doc, &["root"]).unwrap();
        let f = files_of(&plan);
        let src = |i: usize| f[i].source.as_ref().map(|s| (s.path.as_str(), s.fallback));
        assert_eq!(src(0), Some(("/etc/src", true)));
        assert_eq!(f[0].content.0, b"fb");
        assert_eq!(src(1), Some(("/etc/src", false)));
        assert_eq!((src(2), f[2].content.0.as_slice()), (None, &b"inline"[..]));
        assert!(
            plan.warnings
                .iter()
                .any(|w| w.contains("write_files[2].source.uri")),
            "{:?}",
            plan.warnings
        );
        assert_eq!(src(3), None, "an empty uri is no source");
        for (bad, place) in [
            (
                "source: {uri: 'http://example.test/x'}",
                "write_files[0].source.uri",
            ),
            ("source: 'file:///etc/x'", "write_files[0].source"),
            (
                "source: {uri: /etc/x, method: POST}",
                "write_files[0].source.method",
            ),
            ("source: {uri: 'file:../x'}", "write_files[0].source.uri"),
        ] {
            let e = plan_of(
                &format!("#cloud-config\nwrite_files:\n- path: /etc/x\n  {bad}\n"),
                &["root"],
            )
            .unwrap_err();
            assert_eq!(e.place, place, "{bad}: {e}");
        }
    }

    /// A numeric owner is a name to cloud-init: refused, the message says so.
    #[test]
    fn numeric_owner_is_refused_as_an_unknown_name() {
        let e = plan_of(
            "#cloud-config\nwrite_files:\n- path: /etc/x\n  owner: '65534:65534'\n",
            &["root"],
        )
        .unwrap_err();
        assert_eq!(e.place, "write_files[0]:/etc/x.owner");
        assert!(e.message.contains("a number is read as a name"), "{e}");
    }

    /// `preserve_hostname` keeps the name; /etc/hosts is still managed (update_etc_hosts
    /// ignores it); without `manage_etc_hosts` there is no step at all.
    #[test]
    fn preserve_hostname_still_manages_etc_hosts() {
        let plan = plan_of(
            "#cloud-config\npreserve_hostname: true\nhostname: n1\nmanage_etc_hosts: localhost\n",
            &["root"],
        )
        .unwrap();
        let h = plan.steps.iter().find_map(|s| match &s.action {
            Action::Hostname(h) => Some(h),
            _ => None,
        });
        let h = h.expect("a hostname step");
        assert!(h.preserve);
        assert!(matches!(h.etc_hosts, Some(EtcHosts::Localhost { .. })));
        let plan = plan_of(
            "#cloud-config\npreserve_hostname: true\nhostname: n1\n",
            &["root"],
        )
        .unwrap();
        assert!(
            !plan
                .steps
                .iter()
                .any(|s| matches!(s.action, Action::Hostname(_)))
        );
    }

    /// A `#!` userdata: its file written root-only in the instance's state directory, then
    /// run by its own interpreter line, after everything else.
    #[test]
    fn a_shell_script_userdata_is_written_then_run() {
        let plan = plan_of("#!/bin/bash\r\necho hi\r\n", &["root"]).unwrap();
        let ids: Vec<&str> = plan
            .steps
            .iter()
            .map(|s| s.id.as_str())
            .filter(|i| i.starts_with("scripts"))
            .collect();
        assert_eq!(
            ids,
            ["scripts-user:part-001:write", "scripts-user:part-001"]
        );
        let path = "/var/lib/nodeagent/instances/i-1/scripts/part-001";
        let f = files_of(&plan)[0];
        assert_eq!(
            (f.path.as_str(), f.mode, f.secret),
            (path, Some(0o700), true)
        );
        assert_eq!(
            f.content.0, b"#!/bin/bash\necho hi\n",
            "\\r\\n as dos2unix leaves it"
        );
        let run = plan.steps.iter().find(|s| s.id == "scripts-user:part-001");
        assert!(
            matches!(&run.unwrap().action, Action::Command(c) if c.run == Run::Argv(vec![path.into()]))
        );
    }

    #[test]
    fn ntp_peers_and_allow_are_checked() {
        let ok = "#cloud-config\nntp:\n  peers: [p1.example]\n  allow: [10.0.0.0/8]\n";
        let plan = plan_of(ok, &["root"]).unwrap();
        assert!(plan.steps.iter().any(|s| matches!(&s.action, Action::Ntp(n) if n.peers == ["p1.example"] && n.allow == ["10.0.0.0/8"])));
        let e = plan_of("#cloud-config\nntp:\n  peers: ['a/8']\n", &["root"]).unwrap_err();
        assert_eq!(e.place, "ntp.peers[0]");
    }
}
