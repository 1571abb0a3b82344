//! Field types of the cloud-config modules, accepting exactly the shapes cloud-init accepts.

// Parses untrusted input: no indexing that could panic (str slicing is denied crate-wide).
#![deny(clippy::indexing_slicing)]

use serde::Deserialize;
use serde::de::{self, Deserializer};
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct CloudConfig {
    pub write_files: Vec<WriteFile>,
    pub runcmd: Vec<CmdItem>,
    pub bootcmd: Vec<CmdItem>,
    pub users: Vec<UserItem>,
    pub groups: Groups,
    pub ssh_authorized_keys: Vec<String>,
    pub disable_root: Option<Flag>,
    pub disable_root_opts: Option<String>,
    pub ntp: Option<Ntp>,
    pub disk_setup: Option<BTreeMap<String, DiskEntry>>,
    pub fs_setup: Vec<FsEntry>,
    pub device_aliases: BTreeMap<String, String>,
    pub mounts: Vec<Vec<MountField>>,
    pub mount_default_fields: Option<Vec<MountField>>,
    pub hostname: Option<String>,
    pub fqdn: Option<String>,
    pub preserve_hostname: Option<Flag>,
    pub prefer_fqdn_over_hostname: Option<Flag>,
    pub create_hostname_file: Option<Flag>,
    pub manage_etc_hosts: Option<ManageEtcHosts>,
    pub final_message: Option<String>,
    pub growpart: Option<Growpart>,
    pub resize_rootfs: Option<ResizeRootfs>,
    pub vendor_data: Option<VendorData>,
    /// A shell-script userdata (`#!`), as cloud-init's shell-script handler keeps it
    /// (`dos2unix`): run by scripts-user in the final stage. Not a cloud-config key.
    pub scripts: Vec<String>,
}

/// The error for a value of the wrong kind: `{expected}, found a list`.
fn found<E: de::Error>(expected: &str, other: &Value) -> E {
    E::custom(crate::source::metadata::found(expected, other))
}

/// `vendor_data:` in user-data: whether the platform's vendordata applies (stages.py
/// `_consume_vendordata`: `enabled` false turns it off; `prefix` only affects vendor scripts).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VendorData {
    pub enabled: Option<Flag>,
    pub prefix: Option<Value>,
}

/// A boolean as cloud-init's `translate_bool` reads it: YAML booleans, or the strings
/// `true/1/on/yes` (any case) for true; any other string is false.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flag(pub bool);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        match &v {
            Value::Bool(_) | Value::String(_) | Value::Null => {
                Ok(Flag(crate::source::metadata::translate_bool(&v)))
            }
            Value::Number(n) if n.as_i64() == Some(0) || n.as_i64() == Some(1) => {
                Ok(Flag(n.as_i64() == Some(1)))
            }
            other => Err(found("expected a boolean", other)),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteFile {
    pub path: Option<String>,
    pub content: Option<String>,
    /// Set when `content` was a YAML `!!binary` scalar (then `content` is unset).
    #[serde(skip)]
    pub content_binary: Option<Vec<u8>>,
    pub source: Option<Value>,
    pub owner: Option<String>,
    /// Integer or string; decoded by the plan (octal rules of cloud-init C.4).
    pub permissions: Option<Value>,
    pub encoding: Option<String>,
    #[serde(default)]
    pub append: Flag,
    #[serde(default)]
    pub defer: Flag,
}

/// A `runcmd`/`bootcmd` item.
#[derive(Debug, Clone, PartialEq)]
pub enum CmdItem {
    /// Run by `/bin/sh -c`.
    Shell(String),
    /// Exec'd directly; elements are `str()`-ed as cloud-init does.
    Argv(Vec<String>),
    /// A YAML null item (e.g. only a comment): skipped.
    Skip,
}

impl<'de> Deserialize<'de> for CmdItem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(CmdItem::Shell(s)),
            Value::Null => Ok(CmdItem::Skip),
            Value::Array(items) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    Value::Number(n) => Ok(n.to_string()),
                    Value::Bool(b) => Ok(if *b { "True" } else { "False" }.to_string()),
                    other => Err(found("a command list may hold strings and numbers", other)),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(CmdItem::Argv),
            other => Err(found("expected a command string or list", &other)),
        }
    }
}

/// A string or a list of strings (`groups: a, b` or `groups: [a, b]`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StrList(pub Vec<String>);

impl<'de> Deserialize<'de> for StrList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Null => Ok(StrList(Vec::new())),
            Value::String(s) => Ok(StrList(
                s.split(',')
                    .map(str::trim)
                    .filter(|x| !x.is_empty())
                    .map(str::to_string)
                    .collect(),
            )),
            Value::Array(items) => items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s),
                    other => Err(found("expected a string", &other)),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(StrList),
            other => Err(found("expected a string or a list of strings", &other)),
        }
    }
}

/// `ssh_authorized_keys` of a user as cloud-init's `create_user` takes it: a list, one key
/// as a string (never split: a key has no commas to split at, but it has spaces), or a
/// mapping whose values are the keys.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KeyList(pub Vec<String>);

impl<'de> Deserialize<'de> for KeyList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let items = match Value::deserialize(d)? {
            Value::Null => return Ok(KeyList(Vec::new())),
            Value::String(s) => return Ok(KeyList(vec![s])),
            Value::Array(items) => items,
            Value::Object(m) => m.into_iter().map(|(_, v)| v).collect(),
            other => {
                return Err(found(
                    "expected a key, a list of keys or a mapping of keys",
                    &other,
                ));
            }
        };
        items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                other => Err(found("an SSH key is a string", &other)),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(KeyList)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum UserItem {
    /// The image's default user (`default`).
    Default,
    User(Box<UserEntry>),
}

impl<'de> Deserialize<'de> for UserItem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) if s.trim() == "default" => Ok(UserItem::Default),
            // A documented cloud-init form: a user with every setting at its default.
            Value::String(s) => Ok(UserItem::User(Box::new(UserEntry {
                name: s.trim().to_string(),
                ..UserEntry::default()
            }))),
            Value::Object(m) => {
                // cloud-init (`ug_util._normalize_users`) reads `lock-passwd` as `lock_passwd`.
                let mut out = serde_json::Map::new();
                for (k, v) in m {
                    let key = k.trim().replace('-', "_");
                    if out.insert(key.clone(), v).is_some() {
                        return Err(de::Error::custom(format!(
                            "`{k}` repeats `{key}` (cloud-init reads `-` as `_`): keep one"
                        )));
                    }
                }
                // A gecos that is not a string: cloud-init leaves it out and goes on.
                if out
                    .get("gecos")
                    .is_some_and(|g| !g.is_string() && !g.is_null())
                {
                    out.remove("gecos");
                }
                serde_json::from_value::<UserEntry>(Value::Object(out))
                    .map(|u| UserItem::User(Box::new(u)))
                    .map_err(de::Error::custom)
            }
            other => Err(found("expected a user mapping or 'default'", &other)),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    pub name: String,
    pub gecos: Option<String>,
    pub homedir: Option<String>,
    pub primary_group: Option<String>,
    #[serde(default)]
    pub groups: StrList,
    pub lock_passwd: Option<Flag>,
    pub passwd: Option<String>,
    pub hashed_passwd: Option<String>,
    pub plain_text_passwd: Option<String>,
    pub shell: Option<String>,
    pub sudo: Option<Value>,
    #[serde(default)]
    pub ssh_authorized_keys: KeyList,
    #[serde(default)]
    pub system: Flag,
    #[serde(default)]
    pub no_create_home: Flag,
    #[serde(default)]
    pub no_user_group: Flag,
    #[serde(default)]
    pub no_log_init: Flag,
    pub create_groups: Option<Flag>,
    #[serde(default)]
    pub ssh_import_id: StrList,
    pub ssh_redirect_user: Option<Value>,
    pub selinux_user: Option<Value>,
    pub snapuser: Option<Value>,
    pub doas: Option<Value>,
    pub uid: Option<Value>,
    pub inactive: Option<Value>,
    pub expiredate: Option<String>,
}

/// `groups:` as a list of names / `{name: members}` mappings, or one mapping, or one string of
/// comma-separated names; the members as cloud-init 22.4's `_normalize_groups`
/// (distros/ug_util.py) leaves them. A members string is split at commas only in the mapping
/// form (`groups: {admins: "a,b"}`, through `util.uniq_merge`: the string stripped, split at
/// `,`, empty items dropped, the items themselves not stripped, so `"a, b"` is `a` and ` b`);
/// in the list form (`groups: [{admins: "a,b"}]`) the string is appended whole, one member
/// named `a,b`. A list is taken item by item, never split. Names are not checked here: the
/// plan warns about members that cannot be users and refuses bad group names.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Groups(pub Vec<(String, Vec<String>)>, pub Vec<GroupAt>);

/// Where a `groups` entry is in the document, for the places plan messages name.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupAt {
    /// `groups[N]`: item N of the list (a name, or a mapping whose keys are its groups).
    Item(usize),
    /// `groups.NAME`: a key of the mapping form.
    Key,
    /// `groups`: one of the names of a comma-separated string.
    Names,
}

impl GroupAt {
    /// The place of the group's name and of its members.
    pub fn places(&self, name: &str) -> (String, String) {
        match self {
            GroupAt::Item(i) => (format!("groups[{i}]"), format!("groups[{i}].{name}")),
            GroupAt::Key => (format!("groups.{name}"), format!("groups.{name}")),
            GroupAt::Names => ("groups".into(), "groups".into()),
        }
    }
}

impl<'de> Deserialize<'de> for Groups {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// `split`: a string is split as `util.uniq_merge` splits it (mapping form), else it
        /// is one member (list form).
        fn members<E: de::Error>(v: Value, split: bool) -> Result<Vec<String>, E> {
            match v {
                Value::String(s) if split => Ok(s
                    .trim()
                    .split(',')
                    .filter(|m| !m.is_empty())
                    .map(str::to_string)
                    .collect()),
                Value::String(s) => Ok(vec![s]),
                other => serde_json::from_value::<StrList>(other)
                    .map(|l| l.0)
                    .map_err(E::custom),
            }
        }
        // cloud-init's modules read the cloud-config back from the YAML its handler dumped to
        // cloud-config.txt (handlers/cloud_config.py `_write_cloud_config`, `safeyaml.dumps`:
        // PyYAML sorts keys by default), so a mapping's groups are made in sorted order (the
        // gids follow it).
        fn sorted(m: serde_json::Map<String, Value>) -> Vec<(String, Value)> {
            let mut v: Vec<_> = m.into_iter().collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        }
        let (mut out, mut at) = (Vec::new(), Vec::new());
        match Value::deserialize(d)? {
            Value::Null => {}
            // `grp_cfg.strip().split(",")`: the names are not stripped one by one.
            Value::String(s) => {
                for g in s.trim().split(',') {
                    out.push((g.to_string(), Vec::new()));
                    at.push(GroupAt::Names);
                }
            }
            Value::Object(m) => {
                for (k, v) in sorted(m) {
                    out.push((k, members(v, true)?));
                    at.push(GroupAt::Key);
                }
            }
            Value::Array(items) => {
                for (i, item) in items.into_iter().enumerate() {
                    match item {
                        Value::String(s) => {
                            out.push((s, Vec::new()));
                            at.push(GroupAt::Item(i));
                        }
                        Value::Object(m) => {
                            for (k, v) in sorted(m) {
                                out.push((k, members(v, false)?));
                                at.push(GroupAt::Item(i));
                            }
                        }
                        other => {
                            return Err(found("a group is a name or a mapping", &other));
                        }
                    }
                }
            }
            other => {
                return Err(found("expected a list of groups", &other));
            }
        }
        Ok(Groups(out, at))
    }
}

/// cloud-init's `growpart` module settings (cc_growpart.py, 22.4).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Growpart {
    /// `auto`, `growpart`, `off` (or a false value, as `util.is_false` reads it); `gpart`
    /// is BSD's tool and is refused by the plan.
    pub mode: Option<GrowMode>,
    pub devices: Option<Vec<String>>,
    pub ignore_growroot_disabled: Option<Flag>,
}

/// `growpart.mode`: a string, or a boolean where only false means anything (off).
#[derive(Debug, Clone, PartialEq)]
pub struct GrowMode(pub String);

impl<'de> Deserialize<'de> for GrowMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(GrowMode(s)),
            Value::Bool(false) => Ok(GrowMode("off".into())),
            other => Err(found("expected auto, growpart or off", &other)),
        }
    }
}

/// `resize_rootfs`: a boolean (`translate_bool`), or `noblock` (cloud-init then resizes in a
/// forked child; nodeagent resizes in line, bounded by its deadline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResizeRootfs(pub bool);

impl<'de> Deserialize<'de> for ResizeRootfs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        match &v {
            Value::String(s) if s == "noblock" => Ok(ResizeRootfs(true)),
            _ => Flag::deserialize(v)
                .map(|f| ResizeRootfs(f.0))
                .map_err(de::Error::custom),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ntp {
    pub enabled: Option<Flag>,
    pub ntp_client: Option<String>,
    /// `servers:` with nothing after it is what CABPK writes for an empty list
    /// (cluster-api.md a.6); null reads as empty, as cloud-init's cc_ntp takes it.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub servers: Vec<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub pools: Vec<String>,
    /// cloud-init 25.1's chrony `peer` and `allow` lines (22.4's schema lacks them).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub peers: Vec<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub allow: Vec<String>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskEntry {
    pub table_type: Option<String>,
    /// `true`, `false`, or a list of percentages / `[percent, type]` pairs.
    pub layout: Option<Value>,
    pub overwrite: Option<Flag>,
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FsEntry {
    pub label: Option<String>,
    pub filesystem: Option<String>,
    pub device: Option<String>,
    pub partition: Option<Value>,
    pub overwrite: Option<Flag>,
    pub replace_fs: Option<String>,
    #[serde(default)]
    pub extra_opts: StrList,
}

/// One fstab field: a string, a number (`str()`-ed) or null (use the default).
#[derive(Debug, Clone, PartialEq)]
pub struct MountField(pub Option<String>);

impl<'de> Deserialize<'de> for MountField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Null => Ok(MountField(None)),
            Value::String(s) => Ok(MountField(Some(s))),
            Value::Number(n) => Ok(MountField(Some(n.to_string()))),
            other => Err(found("expected a string or a number", &other)),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ManageEtcHosts {
    /// `true` (or the deprecated `template`): render the whole file.
    Template,
    /// `localhost`: only ensure the 127.0.1.1 line.
    Localhost,
    Off,
}

/// As cc_update_etc_hosts reads it (22.4 and 25.1 alike): the value as `str()`
/// (`get_cfg_option_str`), `localhost` exactly; else rendered from the template when
/// `translate_bool` with the `template` addon says true (`true`, `1`, `on`, `yes`,
/// `template`, any case, stripped; a YAML true, the number 1); anything else leaves
/// /etc/hosts alone (`false`, `"no"`, null, `0`, other strings).
impl<'de> Deserialize<'de> for ManageEtcHosts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = match Value::deserialize(d)? {
            Value::Bool(b) => return Ok(if b { Self::Template } else { Self::Off }),
            Value::String(s) => s,
            Value::Number(n) => n.to_string(),
            _ => return Ok(Self::Off),
        };
        let lower = text.trim().to_lowercase();
        if matches!(lower.as_str(), "true" | "1" | "on" | "yes" | "template") {
            Ok(Self::Template)
        } else if text == "localhost" {
            Ok(Self::Localhost)
        } else {
            Ok(Self::Off)
        }
    }
}
