//! The log bundle `nodeagent collect-logs` writes: a tar.gz for a bug report, with no secret
//! in it.
//!
//! Contents (every source is redacted once on the way in, JSON by value so it stays JSON):
//! - `journal.txt`: `journalctl -u 'nodeagent*'` of this boot (on the host only, when present);
//! - `status.json`, `events.jsonl`, `kubeadm.log` (already redacted when written);
//! - the instance journal and the *redacted* instance data (`instance-data.json`);
//! - `userdata-redacted.yaml`: the rendered userdata with every `write_files` content
//!   replaced by its length and SHA-256 (base64 or gzip contents cannot be redacted by
//!   pattern), then pattern-redacted (tokens, passwords, PEM bodies);
//! - the image config; `nodeagent-output.log` (and its rotated `.1`);
//! - `version.txt` (`nodeagent --version`); on the node itself (root `/`) also `dmesg.txt`
//!   and `units.txt` (state and properties of nodeagent's units), each command bounded;
//! - `MANIFEST.txt` says what was included or skipped and why.
//!
//! Never included: `instance-data-sensitive.json`, the raw userdata, anything under the PKI dir.

use crate::base::redact::redact_text;
use crate::base::state::instance_dir_name;
use std::path::Path;

/// Deadline of each diagnostic command (`journalctl`, `dmesg`, `systemctl`).
const COMMAND_SECS: u64 = 30;
/// Most bytes of a command's output kept in the archive (this boot's agent journal).
const COMMAND_BYTES: usize = 16 * 1024 * 1024;

/// Diagnostic commands run on a real node (`--root /`): name in the archive and argv.
const COMMANDS: [(&str, &[&str]); 4] = [
    (
        "journal.txt",
        &[
            "journalctl",
            "--no-pager",
            "-o",
            "short-precise",
            "-b",
            "-u",
            "nodeagent*",
        ],
    ),
    ("dmesg.txt", &["dmesg", "--ctime"]),
    (
        "units.txt",
        &[
            "systemctl",
            "--no-pager",
            "status",
            "nodeagent-local.service",
            "nodeagent.service",
        ],
    ),
    (
        "units-show.txt",
        &[
            "systemctl",
            "show",
            "-p",
            "Id,LoadState,ActiveState,SubState,Result,ExecMainStatus,UnitFileState,ActiveEnterTimestamp,InactiveExitTimestamp",
            "nodeagent-local.service",
            "nodeagent.service",
        ],
    ),
];

/// `(name in the archive, redacted content)` of everything collected, plus the manifest.
pub fn gather(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut b = Bundle {
        root,
        files: Vec::new(),
        manifest: String::from(
            "nodeagent collect-logs: every file below was redacted (tokens, keys, passwords, PEM bodies).\n",
        ),
    };
    let rotated = format!("{}.1", crate::base::outlog::PATH);
    let ci_status = format!(
        "{}/{}",
        crate::report::cloud_init::files::DATA_DIR,
        crate::report::cloud_init::files::STATUS
    );
    let ci_result = format!(
        "{}/{}",
        crate::report::cloud_init::files::DATA_DIR,
        crate::report::cloud_init::files::RESULT
    );
    for (name, rel) in [
        ("status.json", crate::report::STATUS_JSON),
        ("events.jsonl", crate::report::EVENTS),
        ("kubeadm.log", crate::kubeadm::run::OUTPUT_LOG),
        ("nodeagent-output.log", crate::base::outlog::PATH),
        ("nodeagent-output.log.1", &rotated),
        ("image-config.yaml", crate::source::config::PATH),
        // cloud-init's surface (cloud_init/files.rs): what its tools read on this node.
        ("cloud-init.log", crate::base::outlog::CLOUD_INIT_LOG),
        (
            "cloud-init-output.log",
            crate::base::outlog::CLOUD_INIT_OUTPUT,
        ),
        ("cloud-init-status.json", &ci_status),
        ("cloud-init-result.json", &ci_result),
    ] {
        b.file(name, rel, &same);
    }
    b.instance_files();
    b.files.push((
        "version.txt".into(),
        format!("nodeagent {}\n", crate::VERSION).into_bytes(),
    ));
    b.manifest.push_str("included version.txt\n");
    if root == Path::new("/") {
        for (name, argv) in COMMANDS {
            b.command(name, argv);
        }
    } else {
        b.manifest.push_str(
            "skipped journal.txt, dmesg.txt, units.txt: --root is not / (the host's are not the node's)\n",
        );
    }
    b.files
        .push(("MANIFEST.txt".into(), b.manifest.into_bytes()));
    b.files
}

/// A file's text as it is (before redaction).
fn same(t: &str) -> String {
    t.to_string()
}

/// Redact a source once, as what it is: a JSON document or JSON lines by value (so it stays
/// valid JSON), any other text (or a line that is not JSON) as text.
fn redact_source(text: &str) -> String {
    if let Some(json) = crate::base::redact::redact_json(text) {
        return json;
    }
    let looks_jsonl = text.lines().any(|l| l.trim_start().starts_with('{'));
    if !looks_jsonl {
        return redact_text(text);
    }
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let body = line.strip_suffix('\n').unwrap_or(line);
        match crate::base::redact::redact_json(body) {
            Some(j) => out.push_str(&j),
            None => out.push_str(&redact_text(body)),
        }
        if line.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// The bundle being gathered: the files so far and the manifest saying what was left out.
struct Bundle<'a> {
    root: &'a Path,
    files: Vec<(String, Vec<u8>)>,
    manifest: String,
}

impl Bundle<'_> {
    /// The file at `rel` under the root as `name`, transformed and redacted. Every file is
    /// opened inside the root in one call (openat2): a symlink planted in the image, or
    /// swapped in while collecting, cannot pull a host file into the archive; and a link as
    /// the last component is not followed at all (`read_regular_nofollow`), so a link in a
    /// log directory cannot pull in another file of the node either.
    fn file(&mut self, name: &str, rel: &str, transform: &dyn Fn(&str) -> String) {
        let src = self.root.join(rel.trim_start_matches('/'));
        match crate::base::confine::read_regular_nofollow(self.root, rel) {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                self.files.push((
                    name.to_string(),
                    redact_source(&transform(&text)).into_bytes(),
                ));
                self.manifest
                    .push_str(&format!("included {name} (from {})\n", src.display()));
            }
            Err(e) => self
                .manifest
                .push_str(&format!("skipped {name}: {}: {e}\n", src.display())),
        }
    }

    /// The current instance's journal, instance data and redacted userdata; never the
    /// sensitive instance data or the raw userdata.
    fn instance_files(&mut self) {
        let iid = crate::base::confine::read(
            self.root,
            &format!("{}/instance-id", crate::base::state::DIR),
        )
        .ok()
        .map(|s| String::from_utf8_lossy(&s).trim_end().to_string());
        match iid {
            Some(iid) if !iid.is_empty() => {
                let idir = format!(
                    "{}/instances/{}",
                    crate::base::state::DIR,
                    instance_dir_name(&iid)
                );
                let journal = format!("{idir}/journal.jsonl");
                self.file("instance/journal.jsonl", &journal, &same);
                let data = format!("{idir}/instance-data.json");
                self.file("instance/instance-data.json", &data, &same);
                let userdata = format!("{idir}/userdata.txt");
                self.file(
                    "instance/userdata-redacted.yaml",
                    &userdata,
                    &redact_userdata,
                );
                self.manifest.push_str(
                    "not included: instance-data-sensitive.json, raw userdata (secrets)\n",
                );
            }
            _ => self.manifest.push_str(&format!(
                "skipped instance files: no {}/instance-id\n",
                self.root.join(crate::base::state::DIR).display()
            )),
        }
    }

    /// A diagnostic command's redacted output as `name`.
    fn command(&mut self, name: &str, argv: &[&str]) {
        match command_output(argv) {
            Ok(text) => {
                self.files
                    .push((name.into(), redact_text(&text).into_bytes()));
                self.manifest
                    .push_str(&format!("included {name} ({})\n", argv.join(" ")));
            }
            Err(e) => self.manifest.push_str(&format!("skipped {name}: {e}\n")),
        }
    }
}

/// Stdout (and stderr) of a diagnostic command, bounded in time and size. `systemctl status`
/// exits 3 for an inactive unit: its output is still what we want.
fn command_output(argv: &[&str]) -> Result<String, String> {
    let (prog, rest) = argv.split_first().ok_or("no command")?;
    let mut cmd = std::process::Command::new(prog);
    cmd.args(rest);
    // Bounded like every program the agent runs (process.rs): a wedged journald must not hang
    // the bug report, nor a huge journal fill memory.
    let limits = crate::base::process::Limits::new(std::time::Duration::from_secs(COMMAND_SECS))
        .stdout_cap(COMMAND_BYTES)
        .stderr_cap(64 * 1024);
    let out = crate::base::process::run(cmd, &limits, None).map_err(|e| e.to_string())?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.stderr.is_empty() {
        text.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    if out.stdout_cut {
        text.push_str(&format!(
            "[{prog}'s output cut to its first {COMMAND_BYTES} bytes]\n"
        ));
    }
    if out.stdout.is_empty() && !out.status.success() {
        return Err(format!(
            "{prog}: {}",
            crate::base::process::describe(&out.status)
        ));
    }
    Ok(text)
}

/// Rendered userdata with file contents replaced by `<redacted: N bytes, sha256 …>`.
/// YAML that does not parse is left out entirely rather than guessed at.
pub fn redact_userdata(text: &str) -> String {
    let body = text.strip_prefix("## template: jinja\n").unwrap_or(text);
    let doc = crate::formats::yaml::Doc::new(crate::base::error::Stage::Report, "userdata")
        .duplicate_keys(true);
    let Ok(node) = crate::formats::yaml::read(doc, body) else {
        return "# userdata omitted: it does not parse as YAML\n".into();
    };
    let mut doc = node.to_json();
    if let Some(files) = doc.get_mut("write_files").and_then(|f| f.as_array_mut()) {
        for f in files {
            if let Some(m) = f.as_object_mut()
                && let Some(c) = m.get_mut("content")
            {
                let bytes = c
                    .as_str()
                    .map(|s| s.as_bytes().to_vec())
                    .unwrap_or_default();
                let summary = crate::plan::Content(bytes);
                *c = serde_json::Value::String(format!(
                    "<redacted: {} bytes, sha256 {}>",
                    summary.0.len(),
                    summary.sha256_hex()
                ));
            }
        }
    }
    for key in ["users", "chpasswd"] {
        if let Some(v) = doc.get_mut(key) {
            scrub_passwords(v);
        }
    }
    format!(
        "#cloud-config (redacted by nodeagent collect-logs)\n{}",
        crate::formats::goyaml::dump(&doc).unwrap_or_else(|e| format!("# userdata omitted: {e}\n"))
    )
}

fn scrub_passwords(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, val) in m.iter_mut() {
                if (k.contains("passw") || k == "list" || k == "users") && val.is_string() {
                    *val = serde_json::Value::String("<redacted>".into());
                } else {
                    scrub_passwords(val);
                }
            }
        }
        serde_json::Value::Array(s) => s.iter_mut().for_each(scrub_passwords),
        _ => {}
    }
}

pub fn write_archive(out: &Path, files: &[(String, Vec<u8>)]) -> std::io::Result<()> {
    write_archive_in(out, "nodeagent-logs", files)
}

/// [`write_archive`] with the files in the directory `dir` of the archive (`cloud-init
/// collect-logs` names it as cloud-init does).
pub fn write_archive_in(out: &Path, dir: &str, files: &[(String, Vec<u8>)]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(out)?;
    let gz = flate2::write::GzEncoder::new(f, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let mtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o600);
        h.set_mtime(mtime);
        h.set_cksum();
        tar.append_data(&mut h, format!("{dir}/{name}"), data.as_slice())?;
    }
    tar.into_inner()?.finish()?.sync_all()
}

/// `cloud-init collect-logs`: this bundle in cloud-init's layout, one directory `cloud-init-logs-YYYY-MM-DD/` in a gzipped tar, cloud-init's files at
/// the node paths its tarball has them (`var/log/cloud-init.log`, …), nodeagent's own under
/// `nodeagent/`.
pub fn collect_cloud_init(root: &Path, out: &Path) -> std::io::Result<usize> {
    let entries: Vec<(String, Vec<u8>)> = gather(root)
        .into_iter()
        .map(|(name, data)| (tarball_name(&name), data))
        .collect();
    let t = time::OffsetDateTime::now_utc();
    let dir = format!(
        "cloud-init-logs-{:04}-{:02}-{:02}",
        t.year(),
        t.month() as u8,
        t.day()
    );
    write_archive_in(out, &dir, &entries)?;
    Ok(entries.len())
}

/// Where cloud-init's tarball has a file of nodeagent's bundle.
fn tarball_name(bundle_name: &str) -> String {
    let node = match bundle_name {
        "cloud-init.log" => crate::base::outlog::CLOUD_INIT_LOG,
        "cloud-init-output.log" => crate::base::outlog::CLOUD_INIT_OUTPUT,
        // Where 22.4's and 25.1's tarballs both have them.
        "cloud-init-status.json" => "run/cloud-init/status.json",
        "cloud-init-result.json" => "run/cloud-init/result.json",
        "instance/instance-data.json" => "run/cloud-init/instance-data.json",
        "version.txt" => "version",
        "journal.txt" | "dmesg.txt" => bundle_name,
        other => return format!("nodeagent/{other}"),
    };
    node.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userdata_contents_are_replaced() {
        let ud = "## template: jinja\n#cloud-config\nwrite_files:\n-   path: /etc/x\n    encoding: b64\n    content: c2VjcmV0LXZhbHVl\nusers:\n  - name: capv\n    passwd: $6$hash\nruncmd:\n  - kubeadm join --token abcdef.0123456789abcdef\n";
        let r = redact_userdata(ud);
        assert!(
            !r.contains("c2VjcmV0LXZhbHVl") && !r.contains("$6$hash"),
            "{r}"
        );
        assert!(
            r.contains("/etc/x") && r.contains("<redacted: 16 bytes"),
            "{r}"
        );
        let r = redact_text(&r);
        assert!(!r.contains("0123456789abcdef"));
        assert_eq!(
            redact_userdata("a: [unclosed"),
            "# userdata omitted: it does not parse as YAML\n"
        );
    }

    /// status.json as written (redacted, a quoted secret inside a message) stays valid JSON
    /// in the archive, and JSON lines stay one valid object a line: the second redaction once
    /// ate the backslash of `\"`.
    #[test]
    fn json_sources_stay_json() {
        let msg = "kubeadm: password: \"hunter2\" failed: a \\ b";
        let status = serde_json::json!({"v": 1, "error": crate::base::redact::redact_text(msg)});
        let text = serde_json::to_string_pretty(&status).unwrap() + "\n";
        let out = redact_source(&text);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v, status, "{out}");
        let lines = format!("{}\n{}\nnot json token: abc\n", status, status);
        let out = redact_source(&lines);
        let mut it = out.lines();
        for _ in 0..2 {
            let v: serde_json::Value = serde_json::from_str(it.next().unwrap()).unwrap();
            assert_eq!(v, status);
        }
        assert_eq!(it.next(), Some("not json token: <redacted>"));
    }
}
