//! Typed cloud-config: the modules Cluster API emits and the common ones around them.
//!
//! Parsed from the YAML 1.1 tree (`yaml`), so `0644`, `yes` and friends mean what they
//! mean to cloud-init. Strict by default: an unknown or unsupported top-level key is an
//! error naming the key and its line; with `compat` it is a warning and ignored.

// Parses untrusted input: no indexing that could panic (str slicing is denied crate-wide).
#![deny(clippy::indexing_slicing)]

mod types;

pub use types::*;

use crate::base::error::{Error, Result, Stage};
use crate::formats::yaml::{self, Node, Value};
use serde::de::DeserializeOwned;

#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub config: CloudConfig,
    pub warnings: Vec<String>,
}

/// What kind of userdata payload this is (after template rendering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadKind {
    CloudConfig,
    ShellScript,
    Include,
    CloudConfigArchive,
    Boothook,
    Mime,
    Unknown,
}

/// cloud-init's prefix rule (B.1), applied to rendered userdata.
pub fn payload_kind(text: &str) -> PayloadKind {
    // Only the head decides; a prefix cut on a char boundary (fuzz: a cut inside a
    // multi-byte char at byte 4096 panicked).
    let trimmed = text.trim_start();
    let head = trimmed
        .get(..trimmed.floor_char_boundary(4096))
        .unwrap_or_default()
        .to_ascii_lowercase();
    if head.starts_with("#cloud-config-archive") {
        PayloadKind::CloudConfigArchive
    } else if head.starts_with("#cloud-config") {
        PayloadKind::CloudConfig
    } else if head.starts_with("#!") {
        PayloadKind::ShellScript
    } else if head.starts_with("#include") {
        PayloadKind::Include
    } else if head.starts_with("#cloud-boothook") {
        PayloadKind::Boothook
    } else if head.contains("mime-version:") {
        PayloadKind::Mime
    } else {
        PayloadKind::Unknown
    }
}

/// Top-level keys this agent implements.
const SUPPORTED: &[&str] = &[
    "write_files",
    "runcmd",
    "bootcmd",
    "users",
    "groups",
    "ssh_authorized_keys",
    "disable_root",
    "disable_root_opts",
    "ntp",
    "disk_setup",
    "fs_setup",
    "device_aliases",
    "mounts",
    "mount_default_fields",
    "hostname",
    "fqdn",
    "preserve_hostname",
    "prefer_fqdn_over_hostname",
    "create_hostname_file",
    "manage_etc_hosts",
    "final_message",
    "growpart",
    "resize_rootfs",
    "vendor_data",
    // Multi-part merge directives: meaningless for one part, accepted and ignored.
    "merge_how",
    "merge_type",
];

/// cloud-init modules and settings we deliberately do not implement (a node image is baked;
/// packages, repositories and configuration management belong in the image build).
const UNSUPPORTED: &[&str] = &[
    "allow_public_ssh_keys",
    "ansible",
    "apk_repos",
    "apt",
    "apt_pipelining",
    "apt_preserve_sources_list",
    "apt_reboot_if_required",
    "apt_update",
    "apt_upgrade",
    "authkey_hash",
    "autoinstall",
    "byobu_by_default",
    "ca-certs",
    "ca_certs",
    "chef",
    "chpasswd",
    "cloud_config_modules",
    "cloud_final_modules",
    "cloud_init_modules",
    "datasource",
    "debug",
    "disable_ec2_metadata",
    "drivers",
    "fan",
    "grub-dpkg",
    "grub_dpkg",
    "keyboard",
    "landscape",
    "locale",
    "locale_configfile",
    "lxd",
    "manage_resolv_conf",
    "mcollective",
    "network",
    "no_ssh_fingerprints",
    "output",
    "package_reboot_if_required",
    "package_update",
    "package_upgrade",
    "packages",
    "password",
    "phone_home",
    "power_state",
    "puppet",
    "random_seed",
    "reporting",
    "resolv_conf",
    "rh_subscription",
    "rsyslog",
    "salt_minion",
    "seed_random",
    "snap",
    "snappy",
    "spacewalk",
    "ssh",
    "ssh_deletekeys",
    "ssh_fp_console_blacklist",
    "ssh_genkeytypes",
    "ssh_import_id",
    "ssh_key_console_blacklist",
    "ssh_keys",
    "ssh_publish_hostkeys",
    "ssh_pwauth",
    "ssh_quiet_keygen",
    "swap",
    "system_info",
    "timezone",
    "ubuntu_advantage",
    "ubuntu_pro",
    "updates",
    "user",
    "wireguard",
    "yum_repo_dir",
    "yum_repos",
    "zypper",
];

/// Parse rendered userdata (`#cloud-config` ...). `source` names it in errors
/// (`userdata`, `rendered userdata`, a file path).
pub fn parse(text: &str, source: &str, compat: bool) -> Result<Parsed> {
    match payload_kind(text) {
        PayloadKind::CloudConfig => {}
        // cloud-init's ShellScriptPartHandler writes it, `\r\n` made `\n`, to the instance's
        // scripts directory (0700); scripts-user runs it in the final stage.
        PayloadKind::ShellScript => {
            return Ok(Parsed {
                config: CloudConfig {
                    scripts: vec![text.replace("\r\n", "\n")],
                    ..CloudConfig::default()
                },
                warnings: Vec::new(),
            });
        }
        other => {
            let what = match other {
                PayloadKind::Include => "an #include list",
                PayloadKind::CloudConfigArchive => "a #cloud-config-archive",
                PayloadKind::Boothook => "a #cloud-boothook",
                PayloadKind::Mime => "MIME multipart",
                _ => "not #cloud-config (first line must be #cloud-config)",
            };
            return Err(Error::unsupported(
                Stage::CloudConfig,
                format!("{source} line 1"),
                format!("unsupported userdata type: {what}"),
            ));
        }
    }
    let root = parse_text(text, source, compat)?;
    from_node(&root, source, compat)
}

fn parse_text(text: &str, source: &str, compat: bool) -> Result<Node> {
    let doc = yaml::Doc::new(Stage::CloudConfig, source)
        .duplicate_keys(compat)
        .spaced();
    yaml::read(doc, text)
}

/// Build the typed config from a loaded YAML tree; the first error, if any.
pub fn from_node(root: &Node, source: &str, compat: bool) -> Result<Parsed> {
    let (parsed, errors) = from_node_all(root, source, compat);
    match errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(parsed),
    }
}

/// Every error of a document at once (`nodeagent validate`), in document order of the
/// checks: unknown keys, then each module's fields, then limits and permissions.
pub fn errors(text: &str, source: &str, compat: bool) -> Vec<Error> {
    match parse_text(text, source, compat) {
        Ok(root) => from_node_all(&root, source, compat).1,
        Err(e) => vec![e],
    }
}

fn from_node_all(root: &Node, source: &str, compat: bool) -> (Parsed, Vec<Error>) {
    let mut warnings = Vec::new();
    let mut errors = Vec::new();
    let parsed = |config, warnings| Parsed { config, warnings };
    let entries = match &root.value {
        Value::Null => return (parsed(CloudConfig::default(), warnings), errors),
        Value::Map(entries) => entries,
        _ => {
            errors.push(Error::invalid(
                Stage::CloudConfig,
                format!("{source} {}", root.place()),
                "cloud-config must be a mapping of module keys",
            ));
            return (parsed(CloudConfig::default(), warnings), errors);
        }
    };
    check_keys(entries, source, compat, &mut warnings, &mut errors);
    let cfg = typed_fields(root, source, &mut errors);
    if cfg.write_files.len() > crate::base::limits::MAX_WRITE_FILES {
        errors.push(Error::too_large(
            Stage::CloudConfig,
            format!("{source} write_files"),
            format!(
                "{} entries; the limit is {}",
                cfg.write_files.len(),
                crate::base::limits::MAX_WRITE_FILES
            ),
        ));
    }
    if let Err(e) = check_permissions(root, source, compat, &mut warnings) {
        errors.push(e);
    }
    (parsed(cfg, warnings), errors)
}

/// Unknown and unsupported module keys: errors, or warnings with `--compat`.
fn check_keys(
    entries: &[(Node, Node)],
    source: &str,
    compat: bool,
    warnings: &mut Vec<String>,
    errors: &mut Vec<Error>,
) {
    for (k, _) in entries {
        let key = k.key_text();
        let (kind, problem) = if SUPPORTED.contains(&key.as_str()) {
            continue;
        } else if UNSUPPORTED.contains(&key.as_str()) {
            (
                crate::base::error::ErrorKind::Unsupported,
                format!(
                    "unsupported module '{key}' (nodeagent does not implement it; bake it into the image)"
                ),
            )
        } else {
            (
                crate::base::error::ErrorKind::Invalid,
                format!("unknown key '{key}'"),
            )
        };
        if compat {
            warnings.push(format!(
                "{source} {}: {problem}; ignored (--compat)",
                k.place()
            ));
        } else {
            errors.push(Error::of(
                kind,
                Stage::CloudConfig,
                format!("{source} {}", k.place()),
                problem,
            ));
        }
    }
}

/// The keys nodeagent implements, each read into its type (an error per key that does not
/// fit; the key is then left at its default).
fn typed_fields(root: &Node, source: &str, errors: &mut Vec<Error>) -> CloudConfig {
    let mut cfg = CloudConfig::default();
    macro_rules! field {
        ($name:ident) => {
            if let Some(n) = root
                .get(stringify!($name))
                .filter(|n| n.value != Value::Null)
            {
                match typed(n, stringify!($name), source) {
                    Ok(v) => cfg.$name = v,
                    Err(e) => errors.push(e),
                }
            }
        };
    }
    field!(write_files);
    binary_contents(root, &mut cfg);
    field!(runcmd);
    field!(bootcmd);
    if let Some(n) = root.get("users").filter(|n| n.value != Value::Null) {
        match users(n, source) {
            Ok(v) => cfg.users = v,
            Err(e) => errors.push(e),
        }
    }
    field!(groups);
    field!(ssh_authorized_keys);
    field!(disable_root);
    field!(disable_root_opts);
    field!(ntp);
    // `ntp:` with no value: cloud-init's cc_ntp reads it as `{}` (NTP on, the defaults).
    if root.get("ntp").is_some_and(|n| n.value == Value::Null) {
        cfg.ntp = Some(Default::default());
    }
    field!(disk_setup);
    field!(fs_setup);
    field!(device_aliases);
    field!(mounts);
    field!(mount_default_fields);
    field!(hostname);
    field!(fqdn);
    field!(preserve_hostname);
    field!(prefer_fqdn_over_hostname);
    field!(create_hostname_file);
    field!(manage_etc_hosts);
    field!(final_message);
    field!(growpart);
    field!(resize_rootfs);
    field!(vendor_data);
    cfg
}

/// `users:` as cloud-init's `_normalize_users` reads a list: entries naming the same user
/// are one user, merged key by key with the first entry winning (`util.mergemanydict`:
/// nested mappings merged the same way), at the place of its first entry (the step order
/// and the places errors name). Other shapes are typed as they are (and refused there).
fn users(n: &Node, source: &str) -> Result<Vec<UserItem>> {
    let Value::Seq(items) = &n.value else {
        return typed(n, "users", source);
    };
    let mut merged: Vec<(usize, serde_json::Value)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let mut j = item.to_json();
        if let serde_json::Value::String(s) = &j
            && s.trim() != "default"
        {
            j = serde_json::json!({ "name": s.trim() });
        }
        let name = j
            .get("name")
            .and_then(serde_json::Value::as_str)
            .map(str::to_string);
        let earlier = name.as_deref().and_then(|name| {
            merged
                .iter_mut()
                .find(|(_, m)| m.get("name").and_then(serde_json::Value::as_str) == Some(name))
        });
        match earlier {
            Some((_, first)) => merge_first_wins(first, j),
            None => merged.push((i, j)),
        }
    }
    merged
        .into_iter()
        .map(|(i, j)| {
            let node = items.get(i).unwrap_or(n);
            typed_json(node, j, &format!("users[{i}]"), source)
        })
        .collect()
}

/// cloud-init's default dict merge (`no_replace`, recursing into mappings): keys of `later`
/// not in `first` are added; a key in both keeps `first`'s value.
fn merge_first_wins(first: &mut serde_json::Value, later: serde_json::Value) {
    let (serde_json::Value::Object(a), serde_json::Value::Object(b)) = (first, later) else {
        return;
    };
    for (k, v) in b {
        match a.get_mut(&k) {
            None => {
                a.insert(k, v);
            }
            Some(old) => merge_first_wins(old, v),
        }
    }
}

/// `content: !!binary ...` is raw bytes, not text: keep them as such.
fn binary_contents(root: &Node, cfg: &mut CloudConfig) {
    let Some(Node {
        value: Value::Seq(items),
        ..
    }) = root.get("write_files")
    else {
        return;
    };
    for (item, wf) in items.iter().zip(cfg.write_files.iter_mut()) {
        if let Some(Node {
            value: Value::Binary(b),
            ..
        }) = item.get("content")
        {
            wf.content = None;
            wf.content_binary = Some(b.clone());
        }
    }
}

/// Deserialize one module's node, naming the field path and line on failure.
fn typed<T: DeserializeOwned>(node: &Node, key: &str, source: &str) -> Result<T> {
    typed_json(node, node.to_json(), key, source)
}

/// [`typed`] of `json`, read from `node` (or made from it).
fn typed_json<T: DeserializeOwned>(
    node: &Node,
    json: serde_json::Value,
    key: &str,
    source: &str,
) -> Result<T> {
    serde_path_to_error::deserialize(json).map_err(|e| {
        let at = node.locate(e.path());
        let path = e.path().to_string();
        let field = if path == "." || path.is_empty() {
            key.to_string()
        } else if path.starts_with('[') {
            format!("{key}{path}")
        } else {
            format!("{key}.{path}")
        };
        Error::invalid(
            Stage::CloudConfig,
            format!("{source} {}: {field}", at.place()),
            e.inner().to_string(),
        )
    })
}

/// `permissions: 644` (unquoted) is the decimal integer 644 in YAML 1.1, i.e. mode 0o1204:
/// almost always a mistake. cloud-init applies it silently; we refuse unless `compat`.
fn check_permissions(
    root: &Node,
    source: &str,
    compat: bool,
    warnings: &mut Vec<String>,
) -> Result<()> {
    let Some(Node {
        value: Value::Seq(items),
        ..
    }) = root.get("write_files")
    else {
        return Ok(());
    };
    for (i, item) in items.iter().enumerate() {
        let Some(p) = item.get("permissions") else {
            continue;
        };
        let (Value::Int(v), Some(text)) = (&p.value, &p.plain) else {
            continue;
        };
        let looks_octal = !text.starts_with('0')
            && (3..=4).contains(&text.len())
            && text.chars().all(|c| ('0'..='7').contains(&c));
        if looks_octal {
            let msg = format!(
                "permissions: {text} is a decimal integer in YAML 1.1 (mode {:#o}); write '0{text}' to mean octal",
                v
            );
            if compat {
                warnings.push(format!("{source} {}: write_files[{i}].{msg}", p.place()));
            } else {
                return Err(Error::invalid(
                    Stage::CloudConfig,
                    format!("{source} {}: write_files[{i}].permissions", p.place()),
                    msg,
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::string_slice)]
mod tests;
