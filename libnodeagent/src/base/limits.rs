//! Every resource bound the agent enforces on untrusted input, in one place.
//! Documented in README.md ("Configuration reference" / "Limits"); change both together.

/// Largest decoded value of one guestinfo key (after base64, before gunzip).
pub const MAX_DECODED_BYTES: usize = 16 * 1024 * 1024;
/// Largest raw value a transport reads for one key: base64 of MAX_DECODED_BYTES plus
/// line breaks and slack.
pub const MAX_RAW_VALUE_BYTES: usize = 2 * MAX_DECODED_BYTES;
/// Largest output of a gunzip of one value (bomb guard).
pub const MAX_GUNZIP_BYTES: usize = 64 * 1024 * 1024;
/// Largest YAML text `yaml::read` takes, whatever the document: as large as rendered userdata
/// may be (MAX_RENDERED_BYTES), the largest the userdata reader ever saw. What a document
/// costs in memory is bounded by MAX_YAML_EXPANDED_BYTES; this refuses a larger text before
/// parsing, and bounds what a reader of a file (`yaml::read_from`) reads.
pub const MAX_YAML_BYTES: usize = 64 * 1024 * 1024;
/// Deepest YAML/JSON nesting accepted.
pub const MAX_YAML_DEPTH: usize = 64;
/// Most alias expansions (`*ref`) in one YAML document ("billion laughs" guard).
pub const MAX_YAML_ALIAS_EXPANSIONS: usize = 10_000;
/// Most YAML nodes in one document after alias expansion.
pub const MAX_YAML_NODES: usize = 1_000_000;
/// Largest YAML document in memory, aliases expanded: each node's struct plus its text.
/// Node and alias counts alone let a large anchor, aliased a few thousand times, expand to
/// gigabytes; this bounds the loader's memory, and so the copies made from it (JSON value,
/// typed config, plan), under the 256 MiB peak of a run.
pub const MAX_YAML_EXPANDED_BYTES: usize = 32 * 1024 * 1024;
/// Template fuel for one render: since minijinja 3.1 one per instruction, per 64 bytes of
/// data made or printed and per two items iterated (ours: one per item). The largest real
/// template seen (cloud-init's cloud.cfg.tmpl) uses ~310 instructions; 2M fails a runaway
/// loop in ~60 ms of CPU and covers the 64 MiB output cap (1M).
pub const TEMPLATE_FUEL: u64 = 2_000_000;
/// Deepest macro/loop recursion a template may use (minijinja's own cap is 500).
pub const TEMPLATE_RECURSION_LIMIT: usize = 100;
/// Largest rendered template output.
pub const MAX_RENDERED_BYTES: usize = 64 * 1024 * 1024;
/// Data memory (`RLIMIT_DATA`) of the child process that renders a template: fuel and the
/// output cap bound work and what is printed, this bounds values built inside the template.
pub const TEMPLATE_MEMORY_BYTES: u64 = 1024 * 1024 * 1024;
/// Sum of all decoded `write_files` contents in one plan (each may gunzip up to
/// MAX_GUNZIP_BYTES; without a total, 10,000 of them would exhaust memory).
pub const MAX_WRITE_FILES_TOTAL_BYTES: usize = 64 * 1024 * 1024;
/// Most `write_files` entries in one cloud-config.
pub const MAX_WRITE_FILES: usize = 10_000;
/// Most `network.ethernets` devices in one network config: a VM has a handful (vSphere
/// allows 10); the step writes up to two files per device, each closed before the next is
/// opened (apply/files.rs `write_all`), and commits them together.
pub const MAX_NETWORK_DEVICES: usize = 64;
/// Timeout of one guestinfo RPC helper call (vmware-rpctool / vmtoolsd), in milliseconds.
pub const RPC_TIMEOUT_MS: u64 = 10_000;
/// stderr kept from one RPC helper call (it goes into the error message).
pub const RPC_MAX_STDERR_BYTES: usize = 64 * 1024;
/// Longest guestinfo key name (keys become file names and RPC arguments).
pub const MAX_GUESTINFO_KEY_LEN: usize = 200;
/// Largest DMI field read during platform detection (`/sys/class/dmi/id/product_name`).
pub const MAX_DMI_FIELD_BYTES: u64 = 4096;
/// Output of one bootcmd/runcmd command logged to the journal: its last this many bytes.
pub const COMMAND_OUTPUT_LOG_BYTES: u64 = 1024 * 1024;
/// `/var/log/nodeagent-output.log` is rotated to `.1` past this size (outlog.rs).
pub const OUTPUT_LOG_MAX_BYTES: u64 = 4 * 1024 * 1024;
/// Output lines of a failed command kept for its error message.
pub const COMMAND_TAIL_LINES: usize = 20;
/// Longest command text shown in logs and errors (redacted first), in characters.
pub const COMMAND_SHOWN_CHARS: usize = 200;
/// Largest per-instance journal (`journal.jsonl`) read: a record per step event, a few KiB a
/// boot; a larger one is refused rather than read into memory.
pub const MAX_JOURNAL_BYTES: usize = 64 * 1024 * 1024;
/// Largest status JSON published through `guestinfo.nodeagent.status` (docs/formats.md N.4).
pub const MAX_STATUS_BYTES: usize = 4096;
/// kubeadm output lines kept for the failure report (status and guestinfo).
pub const KUBEADM_TAIL_LINES: usize = 20;
/// Longest kubeadm output line kept; longer lines are cut.
pub const KUBEADM_MAX_LINE: usize = 4096;
/// Deadline of one `kubeadm reset -f` between join attempts, seconds.
pub const KUBEADM_RESET_TIMEOUT_SECS: u64 = 120;
/// Deadline of pre-flight's `kubeadm config validate` (kubeadm::validate); natively ~35 ms.
pub const KUBEADM_VALIDATE_TIMEOUT_SECS: u64 = 30;
/// Deadline of one TCP connect attempt to the control-plane endpoint, seconds.
pub const ENDPOINT_CONNECT_TIMEOUT_SECS: u64 = 5;
/// Largest PEM file (certificate or key) the minter reads.
pub const MAX_PEM_BYTES: u64 = 64 * 1024;
/// Largest Secrets manifest `mint --from-secrets` reads.
pub const MAX_SECRETS_BYTES: usize = 1024 * 1024;
/// Largest SSH public key file `mint bootstrap --ssh-key` reads.
pub const MAX_SSH_KEY_BYTES: u64 = 16 * 1024;
/// Most bundles one `mint bootstrap --nodes N` makes.
pub const MAX_MINT_NODES: u32 = 100_000;
/// Output kept from one external program by default (stdout and stderr each); the rest is
/// read and dropped so the program never blocks on a full pipe.
pub const PROCESS_OUTPUT_CAP_BYTES: usize = 1024 * 1024;
/// Deadline of one system tool call (`useradd`, `chpasswd`, `mkfs.*`, `sfdisk`, `mount -a`,
/// `systemctl`, `netplan`, `blkid`...), seconds; the tool's process group is killed after it.
pub const TOOL_TIMEOUT_SECS: u64 = 300;
/// Longest wait for the container runtime before the first runcmd item or kubeadm
/// (`systemctl start nodeagent-cri.target`, apply/runtime.rs), seconds: containerd's own start
/// times out after systemd's default 90 s; then the commands run, and the run ends degraded.
pub const RUNTIME_WAIT_SECS: u64 = 300;
/// Total deadline of one `nodeagent run`, seconds: no external program (command, kubeadm,
/// tool, RPC) outlives it, so `TimeoutStartSec=infinity` can never mean forever. Longer than
/// the default kubeadm join deadline plus init and a few hundred commands.
pub const RUN_DEADLINE_SECS: u64 = 3 * 60 * 60;
/// Largest existing file a `write_files` entry with `append: true` extends (it is read
/// whole to write the result atomically).
pub const MAX_APPEND_BASE_BYTES: usize = 64 * 1024 * 1024;
/// Most read from a file a `write_files` entry's `source` names (`file://`).
pub const MAX_WRITE_FILES_SOURCE_BYTES: usize = 64 * 1024 * 1024;
/// CPU time (`RLIMIT_CPU`) of the child process that renders a template, seconds: fuel counts
/// instructions, not the work of one filter call on a large string.
pub const TEMPLATE_CPU_SECS: u64 = 10;
