//! The plan: a pure, ordered, serializable description of everything `run` will do.
//!
//! `planner::build` (pure) turns instance data + a validated cloud-config into a `Plan`;
//! `apply` executes it. Nothing here touches the node. All validation that can be done
//! without side effects happens while building the plan, so a bad input fails before
//! the first write. Secret material (file contents, passwords, tokens) never
//! serializes: contents print as length + SHA-256, commands print redacted.

use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};

/// Plan format version, printed by `nodeagent plan --json`.
pub const PLAN_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub version: u32,
    pub instance_id: String,
    pub steps: Vec<Step>,
    /// Non-fatal findings (only in `--compat` mode or for deprecated-but-safe input).
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// Stable id, unique within the plan; the instance journal records finished steps by it.
    /// Examples: `write_files[3]:/etc/kubernetes/pki/ca.key`, `runcmd[0]`, `kubeadm`, `user:capv`.
    pub id: String,
    pub stage: RunStage,
    pub frequency: Frequency,
    pub action: Action,
}

/// Which boot stage runs a step, and which stages `nodeagent run --stage` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RunStage {
    /// Before the network is up: hostname, network configuration.
    Local,
    /// Everything else, after network-online and the container runtime.
    Main,
    /// Both, local then main: a selection (`run --stage all`), never a step's stage.
    All,
}

impl RunStage {
    /// Does running `self` run a step of stage `step`?
    pub fn includes(self, step: RunStage) -> bool {
        self == RunStage::All || self == step
    }
    /// The CLI and journal name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStage::Local => "local",
            RunStage::Main => "main",
            RunStage::All => "all",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Frequency {
    /// Runs on every boot (bootcmd, /etc/hosts).
    PerBoot,
    /// Runs once per instance-id (everything CABPK emits).
    PerInstance,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
// A plan holds tens of steps, built once: a user's 330 bytes inline cost nothing that
// boxing would save, and every plan literal stays plain.
#[allow(clippy::large_enum_variant)]
pub enum Action {
    WriteFile(FileWrite),
    Group(GroupSpec),
    User(UserSpec),
    SshKeys(SshKeysSpec),
    Hostname(HostnameSpec),
    Network(NetworkSpec),
    Ntp(NtpSpec),
    DiskSetup(DiskSetupSpec),
    FsSetup(FsSetupSpec),
    Mounts(MountsSpec),
    Growpart(GrowpartSpec),
    ResizeFs(ResizeFsSpec),
    Command(CommandSpec),
    Kubeadm(KubeadmSpec),
}

/// Bytes that must not be printed: serialize as `{len, sha256}`.
#[derive(Clone, PartialEq, Eq)]
pub struct Content(pub Vec<u8>);

impl Content {
    pub fn sha256_hex(&self) -> String {
        hex::encode(Sha256::digest(&self.0))
    }
}

impl std::fmt::Debug for Content {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Content({} bytes, sha256 {})",
            self.0.len(),
            self.sha256_hex().get(..12).unwrap_or_default()
        )
    }
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Content", 2)?;
        st.serialize_field("len", &self.0.len())?;
        st.serialize_field("sha256", &self.sha256_hex())?;
        st.end()
    }
}

/// `user:group` as cloud-init parses it; `None` means "leave unchanged".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct Owner {
    pub user: Option<String>,
    pub group: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileWrite {
    /// Absolute, normalised path (no `..`, no NUL).
    pub path: String,
    pub content: Content,
    pub owner: Owner,
    /// Final mode; `None` keeps the creation default (cloud-init's "mode 0 means no chmod").
    /// Shown as operators write it (`"0644"`), not in decimal.
    #[serde(serialize_with = "octal_opt")]
    pub mode: Option<u32>,
    pub append: bool,
    /// Written after users and groups exist (`defer: true`).
    pub defer: bool,
    /// Heuristic: a private key, token or kubeadm config. Affects logging only.
    pub secret: bool,
    /// `source:` naming a file in the target (cloud-init 23.1+), read when the step runs;
    /// `content` is then what is written if it cannot be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<FileSource>,
}

/// A `write_files` entry's `source.uri` that is a file of the target (`file:///PATH` or
/// `/PATH`): cloud-init 25.1 reads it in place of `content`, and falls back to `content`
/// (when given) if it cannot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileSource {
    /// The absolute path in the target.
    pub path: String,
    /// Whether `content` was given, as what to write when the file cannot be read; without
    /// it the entry is skipped with a warning.
    pub fallback: bool,
}

impl FileWrite {
    /// A root:root file the agent itself generates (network, hostname, fstab, NTP config).
    pub fn root_owned(path: impl Into<String>, content: Vec<u8>, mode: u32) -> FileWrite {
        FileWrite {
            path: path.into(),
            content: Content(content),
            owner: Owner {
                user: Some("root".into()),
                group: Some("root".into()),
            },
            mode: Some(mode),
            append: false,
            defer: false,
            secret: false,
            source: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupSpec {
    pub name: String,
    pub members: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct UserSpec {
    pub name: String,
    pub gecos: Option<String>,
    pub homedir: Option<String>,
    pub primary_group: Option<String>,
    pub groups: Vec<String>,
    pub shell: Option<String>,
    /// Password hash; never printed.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "redacted_opt"
    )]
    pub passwd: Option<String>,
    /// `passwd` came from `passwd:` (not `hashed_passwd:`): as cloud-init's `useradd
    /// --password`, it is set only on a user this step creates, never on the image's.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub passwd_new_only: bool,
    /// `plain_text_passwd`: hashed at apply time as the image's chpasswd would; never
    /// printed.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "redacted_opt"
    )]
    pub plain_text_passwd: Option<String>,
    pub lock_passwd: bool,
    pub sudo: Vec<String>,
    pub ssh_authorized_keys: Vec<String>,
    pub system: bool,
    pub no_create_home: bool,
    pub no_user_group: bool,
    /// `create_groups: false`: the groups `groups` names are not made (useradd then fails
    /// when one is missing).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_create_groups: bool,
    /// `ssh_import_id`: the ids `ssh-import-id` fetches keys for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ssh_import_id: Vec<String>,
    pub uid: Option<u32>,
    pub inactive: Option<String>,
    pub expiredate: Option<String>,
}

/// Keys for one account's authorized_keys outside `users` (cloud-init's ssh module: the
/// top-level `ssh_authorized_keys` and the platform's public keys, for root).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SshKeysSpec {
    pub user: String,
    pub keys: Vec<String>,
    /// Options each key gets (`disable_root`'s command; empty: none, a key's own dropped).
    pub options: String,
}

fn octal_opt<S: Serializer>(v: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(m) => s.serialize_str(&crate::report::output::octal_mode(*m)),
        None => s.serialize_none(),
    }
}

fn redacted_opt<S: Serializer>(v: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(_) => s.serialize_str("<redacted>"),
        None => s.serialize_none(),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostnameSpec {
    /// Short host name (first label).
    pub hostname: String,
    pub fqdn: String,
    /// Write the FQDN, not the short name, to /etc/hostname and the kernel.
    pub prefer_fqdn: bool,
    /// `/etc/hosts` content when `manage_etc_hosts` asks for it (rendered at plan time).
    pub etc_hosts: Option<EtcHosts>,
    /// `preserve_hostname: true`: the host name is left as it is, only `/etc/hosts` is
    /// managed (cloud-init's update_etc_hosts does not look at preserve_hostname).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub preserve: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EtcHosts {
    /// Rewrite the whole file from cloud-init's Debian template.
    Template(String),
    /// Only ensure a `127.0.1.1 <fqdn> <hostname>` line.
    Localhost { address: String },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetworkSpec {
    /// `networkd` or `netplan`, chosen from the image (facts).
    pub renderer: String,
    /// Files rendered at plan time from the netplan-v2 metadata.
    pub files: Vec<FileWrite>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct NtpSpec {
    pub enabled: bool,
    /// `auto`, `chrony`, `systemd-timesyncd`, `ntp`.
    pub client: String,
    pub servers: Vec<String>,
    pub pools: Vec<String>,
    /// chrony `peer` lines (cloud-init 25.1; timesyncd has none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
    /// chrony `allow` lines: networks whose clients may ask this node (cloud-init 25.1).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiskSetupSpec {
    pub disks: Vec<DiskSpec>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiskSpec {
    pub device: String,
    /// `mbr` or `gpt`.
    pub table_type: String,
    /// Partition sizes in percent with an optional type code; empty = no partitioning, `[100]` = one partition.
    pub layout: Vec<(u32, Option<String>)>,
    pub overwrite: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FsSetupSpec {
    pub filesystems: Vec<FsSpec>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FsSpec {
    pub label: Option<String>,
    pub filesystem: String,
    pub device: String,
    pub partition: Option<String>,
    pub overwrite: bool,
    pub replace_fs: Option<String>,
    pub extra_opts: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MountsSpec {
    /// fstab entries after defaults were filled in (6 fields unless `mount_default_fields`
    /// has fewer); the device as given: apply resolves it on the host as cloud-init does.
    pub entries: Vec<Vec<String>>,
    /// `device_aliases`, applied to the device names.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub device_aliases: std::collections::BTreeMap<String, String>,
}

/// cloud-init's `growpart` (every boot): grow the partition under each entry to its disk's end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GrowpartSpec {
    /// Mount points or device paths (`/`, `/dev/vda2`).
    pub devices: Vec<String>,
    /// Grow even when `/etc/growroot-disabled` exists.
    pub ignore_growroot_disabled: bool,
    /// Deadline of each `growpart` call.
    pub timeout_secs: u64,
}

/// cloud-init's `resizefs` (every boot): grow the root filesystem to its partition's size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResizeFsSpec {
    /// Deadline of the resize tool.
    pub timeout_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandSpec {
    /// Where it came from: `runcmd[2]`, `bootcmd[0]`.
    pub origin: String,
    pub run: Run,
    pub timeout_secs: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Run {
    /// A string item: `/bin/sh -c <script>`.
    Shell(String),
    /// A list item: exec argv directly.
    Argv(Vec<String>),
}

impl Serialize for Run {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(1))?;
        match self {
            Run::Shell(script) => {
                m.serialize_entry("shell", &crate::base::redact::redact_text(script))?
            }
            Run::Argv(argv) => m.serialize_entry(
                "argv",
                &argv
                    .iter()
                    .map(|a| crate::base::redact::redact_text(a))
                    .collect::<Vec<_>>(),
            )?,
        }
        m.end()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KubeadmMode {
    Init,
    Join,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KubeadmSpec {
    pub mode: KubeadmMode,
    /// `--config` file, as written by a `write_files` step earlier in the plan.
    pub config_path: String,
    /// Extra arguments after `--config FILE` (e.g. `--v 5`).
    pub extra_args: Vec<String>,
    /// Write `/run/cluster-api/bootstrap-success.complete` after success.
    pub sentinel: bool,
    /// Control-plane endpoint `host:port` a join waits for (from the join config).
    pub endpoint: Option<String>,
    /// The runcmd item this step replaced, redacted.
    #[serde(serialize_with = "redacted_str")]
    pub original: String,
}

fn redacted_str<S: Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::base::redact::redact_text(v))
}

// Rules shared by planning (`planner`) and `apply`, which checks again before it acts.

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

/// A host name the kernel, /etc/hosts and Kubernetes can all take: dot-separated labels of
/// letters, digits, `-` and `_`, 1-63 characters each, not starting with `-`, 253 in all.
pub fn valid_host_name(n: &str) -> bool {
    dotted_name(n, |l| {
        l.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// The frame of every dotted name (host names here, DNS names of `mint`'s endpoints): 1-253
/// characters of dot-separated labels of 1-63 characters, none starting with `-`; `label_ok`
/// says what a label may hold besides.
pub fn dotted_name(n: &str, label_ok: impl Fn(&str) -> bool) -> bool {
    !n.is_empty()
        && n.len() <= 253
        && n.split('.')
            .all(|l| !l.is_empty() && l.len() <= 63 && !l.starts_with('-') && label_ok(l))
}

/// Paths on tmpfs that do not survive a reboot: written every boot, and never fsynced.
pub fn is_volatile(path: &str) -> bool {
    path.starts_with("/run/") || path.starts_with("/var/run/")
}

/// A device the disk tools can be given: an absolute path, no whitespace or control chars.
pub fn valid_device_path(d: &str) -> bool {
    d.starts_with('/') && !d.contains(|c: char| c.is_whitespace() || c.is_control())
}

pub mod network;
pub mod planner;
pub mod probe;
pub mod single;
