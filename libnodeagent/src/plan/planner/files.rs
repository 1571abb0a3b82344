//! write_files entries as cloud-init reads them (cc_write_files, 22.4 and 25.1): paths,
//! owners, permissions, encodings, `source`, `defer`; and the plan-wide owner check.

use super::{Builder, check_name};
use crate::base::error::{Error, Result, Stage};
use crate::plan::*;
use crate::render::cloudconfig::CloudConfig;
use serde_json::Value;

/// The write_files steps, in order; the deferred ones (`defer: true`) are returned to go
/// after users and ntp, as cloud-init's write_files_deferred runs.
pub(super) fn write_files(
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
        if total > crate::base::limits::MAX_WRITE_FILES_TOTAL_BYTES {
            return Err(Error::too_large(
                Stage::Plan,
                format!("write_files[{i}]"),
                format!(
                    "decoded contents so far total {total} bytes; the limit for all files is {}",
                    crate::base::limits::MAX_WRITE_FILES_TOTAL_BYTES
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
            return Err(crate::source::metadata::found(
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
    wf: &crate::render::cloudconfig::WriteFile,
) -> Result<Option<FileWrite>> {
    let compat = b.input.compat;
    let place = format!("write_files[{i}]");
    let Some(raw_path) = wf.path.as_deref().filter(|p| !p.is_empty()) else {
        b.lenient(place, "no path given".into())?;
        return Ok(None);
    };
    let path = normalise_path(raw_path, compat)
        .and_then(|p| check_path_limits(&p).map(|()| p))
        .map_err(|m| Error::invalid(Stage::Plan, format!("{place}.path"), m))?;
    let has_content = wf.content.is_some() || wf.content_binary.is_some();
    let source = match &wf.source {
        None => None,
        Some(v) => file_source(b, &format!("{place}.source"), v, has_content, compat)?,
    };
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
            match crate::source::decode::decode_file_content(bytes, &enc) {
                Ok(decoded) => decoded,
                // cloud-init warns and writes the content as text; so does nodeagent.
                Err(msg) if msg.contains("unknown encoding") => {
                    b.warnings
                        .push(format!("{place}.encoding: {msg}; assuming text/plain"));
                    bytes.to_vec()
                }
                Err(msg) => {
                    return Err(Error::invalid(Stage::Plan, format!("{place}.content"), msg));
                }
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
            return Err(Error::invalid(
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
        Err(msg) => {
            return Err(Error::invalid(
                Stage::Plan,
                format!("{place}.permissions"),
                msg,
            ));
        }
    };
    let secret = looks_secret(&path, &content) || source.is_some();
    Ok(Some(FileWrite {
        path,
        content: Content(content),
        owner: parse_owner(wf.owner.as_deref()),
        mode,
        append: wf.append.0,
        defer: wf.defer.0,
        secret,
        source,
    }))
}

/// A `write_files` entry's `source` as cloud-init 25.1's `read_url_or_decode` takes it
/// (22.4 ignores the key and writes `content`): `{uri: ..., headers: ...}`. A `file://` URI
/// or an absolute path names a file of the target, read when the step runs. Any other URI
/// (http, https, ftp) would be fetched over the network, which the agent never does at boot:
/// with `content` the entry is written from it, as cloud-init does when the fetch fails (a
/// warning says so); without, it is refused (cloud-init would then skip the entry, and the
/// file would be missing). An empty or absent `uri` is no source, as there.
fn file_source(
    b: &mut Builder<'_>,
    place: &str,
    v: &Value,
    has_content: bool,
    compat: bool,
) -> Result<Option<FileSource>> {
    let Value::Object(m) = v else {
        return Err(Error::invalid(
            Stage::Plan,
            place,
            crate::source::metadata::found("expected a mapping with `uri` (and `headers`)", v),
        ));
    };
    if let Some(k) = m.keys().find(|k| !matches!(k.as_str(), "uri" | "headers")) {
        return Err(Error::invalid(
            Stage::Plan,
            format!("{place}.{k}"),
            "unknown key (a source has `uri` and `headers`)",
        ));
    }
    let uri = match m.get("uri") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(u)) => u.trim_start_matches(crate::source::decode::py_isspace),
        Some(other) => {
            return Err(Error::invalid(
                Stage::Plan,
                format!("{place}.uri"),
                crate::source::metadata::found("expected a string", other),
            ));
        }
    };
    if uri.is_empty() {
        return Ok(None);
    }
    let scheme = uri.split_once(':').map(|(s, _)| s).filter(|s| {
        !s.is_empty()
            && s.bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"+-.".contains(&c))
    });
    let path = match scheme {
        _ if uri.starts_with('/') => uri,
        Some(s) if s.eq_ignore_ascii_case("file") => {
            let rest = uri.get(s.len() + 1..).unwrap_or_default();
            // `file://HOST/PATH`: urlparse's netloc is dropped, its path kept.
            match rest.strip_prefix("//") {
                Some(r) => r.find('/').and_then(|i| r.get(i..)).unwrap_or_default(),
                None => rest,
            }
        }
        _ if has_content => {
            b.warnings.push(format!(
                "{place}.uri: {uri:?} is not fetched (nodeagent fetches nothing from the network at boot); content is written, as cloud-init does when the fetch fails"
            ));
            return Ok(None);
        }
        _ => {
            return Err(Error::unsupported(
                Stage::Plan,
                format!("{place}.uri"),
                "only file:// URIs (a file of the node) are read: nodeagent fetches nothing from the network at boot; put the file's content in `content` (what cloud-init writes when the fetch fails)",
            ));
        }
    };
    // urlparse's path stops at a query or a fragment.
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let path = normalise_path(path, compat)
        .map_err(|m| Error::invalid(Stage::Plan, format!("{place}.uri"), m))?;
    Ok(Some(FileSource {
        path,
        fallback: has_content,
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

/// Every file owner must exist in the target or be created earlier by the plan.
pub(super) fn check_owners(b: &Builder<'_>) -> Result<()> {
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
                        // A number is a name too (pwd.getpwnam): cloud-init writes the file
                        // root-owned, then its chown fails and write_files stops there.
                        let numeric = if n.bytes().all(|c| c.is_ascii_digit()) {
                            "; a number is read as a name, as cloud-init reads it (cloud-init writes the file root-owned and skips the rest of write_files): give the name (e.g. `nobody:nogroup`)"
                        } else {
                            ""
                        };
                        return Err(Error::not_found(
                            Stage::Plan,
                            format!("{}.owner", step.id),
                            format!(
                                "{what} '{n}' does not exist in the target and is not created before this file{numeric}"
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
