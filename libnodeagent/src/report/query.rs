//! `nodeagent query`'s read side, as `cloud-init query`: the instance data the boot saved
//! (not the platform read again), with `userdata`/`vendordata` keys for root and their
//! redacted placeholders for everyone else, and `--format` templates rendered against it.

use crate::base::error::{Error, Result, Stage};
use crate::base::state::{instance_dir_name, state_dir};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// cloud-init's `REDACT_SENSITIVE_VALUE`.
pub const REDACTED: &str = "redacted for non-root user";

/// Where the saved copies of the current instance live, and which instance that is.
pub fn saved_instance_dir(root: &Path) -> Result<(String, PathBuf)> {
    let dir = state_dir(root)?;
    let iid =
        match crate::base::confine::read(root, &format!("{}/instance-id", crate::base::state::DIR))
        {
            Ok(s) => String::from_utf8_lossy(&s).trim_end().to_string(),
            // The state directory is root's (0700): say so rather than "has not run".
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(Error::io(
                    Stage::State,
                    dir.join("instance-id").display().to_string(),
                    "cannot read (the state directory is root's: try sudo)",
                    e,
                ));
            }
            Err(_) => String::new(),
        };
    if iid.is_empty() {
        return Err(Error::of(
            crate::base::error::ErrorKind::NotFound,
            Stage::State,
            dir.join("instance-id").display().to_string(),
            "no saved instance data: nodeagent has not run on this node yet \
             (give --transport to read the platform instead)",
        ));
    }
    let idir = dir.join("instances").join(instance_dir_name(&iid));
    Ok((iid, idir))
}

/// The saved instance data of the current instance: the sensitive copy for root
/// (`sensitive`), the redacted one otherwise; then `userdata` (the data as received) and
/// `vendordata` (null: nodeagent applies none), or their placeholders without `sensitive`.
///
/// Every file is read inside the root (`confine::read`): an absolute symlink planted in the
/// saved data resolves in R, never to the operator's own files.
pub fn saved(root: &Path, sensitive: bool) -> Result<Value> {
    if !sensitive && let Some(tree) = public_copy(root) {
        return Ok(tree);
    }
    let (iid, idir) = saved_instance_dir(root)?;
    let file = |name: &str| idir.join(name);
    let rel = |name: &str| {
        format!(
            "{}/instances/{}/{name}",
            crate::base::state::DIR,
            instance_dir_name(&iid)
        )
    };
    let read = |name: &str| {
        crate::base::confine::read(root, &rel(name))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    };
    let name = if sensitive {
        "instance-data-sensitive.json"
    } else {
        "instance-data.json"
    };
    let path = file(name);
    let text = read(name).map_err(|e| {
        let what = if e.kind() == std::io::ErrorKind::PermissionDenied {
            "cannot read (try sudo)"
        } else {
            "cannot read"
        };
        Error::io(Stage::State, path.display().to_string(), what, e)
    })?;
    let mut tree: Value = serde_json::from_str(&text).map_err(|e| {
        Error::invalid(
            Stage::State,
            path.display().to_string(),
            format!("not JSON: {e}"),
        )
    })?;
    let ud = file(crate::pipeline::SAVED_USERDATA);
    let (userdata, vendordata) = if sensitive {
        (
            read(crate::pipeline::SAVED_USERDATA).map_or(Value::Null, Value::String),
            Value::Null,
        )
    } else {
        (
            Value::String(format!("<{REDACTED}> file:{}", ud.display())),
            Value::String(format!("<{REDACTED}>")),
        )
    };
    if let Value::Object(m) = &mut tree {
        m.insert("userdata".into(), userdata);
        m.insert("vendordata".into(), vendordata);
    }
    Ok(tree)
}

/// The redacted instance data the boot left where cloud-init keeps it for everyone
/// (`/run/cloud-init/instance-data.json`, cloud_init/files.rs), with the placeholders of
/// `userdata` and `vendordata`: what `query` reads without root (the state directory is root's).
fn public_copy(root: &Path) -> Option<Value> {
    let rel = format!(
        "{}/{}",
        crate::report::cloud_init::files::RUN_DIR,
        crate::report::cloud_init::files::INSTANCE_DATA
    );
    let text = crate::base::confine::read(root, &rel).ok()?;
    let mut tree: Value = serde_json::from_slice(&text).ok()?;
    let iid = tree["v1"]["instance_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let ud = Path::new("/")
        .join(crate::base::state::DIR)
        .join("instances")
        .join(instance_dir_name(&iid))
        .join(crate::pipeline::SAVED_USERDATA);
    if let Value::Object(m) = &mut tree {
        m.insert(
            "userdata".into(),
            Value::String(format!("<{REDACTED}> file:{}", ud.display())),
        );
        m.insert("vendordata".into(), Value::String(format!("<{REDACTED}>")));
    }
    Some(tree)
}

/// `--format TEMPLATE`: a jinja template over the instance data (and its aliases), as
/// `cloud-init query --format` renders it; strict about undefined variables unless `compat`.
pub fn format(template: &str, tree: &Value, compat: bool) -> Result<(String, Vec<String>)> {
    let payload = format!("## template: jinja\n{template}");
    let r = crate::render::template::render_bounded(&payload, tree, compat).map_err(|e| {
        Error::of(
            e.kind(),
            Stage::Usage,
            "--format",
            e.to_string().replace("userdata line ", "template line "),
        )
    })?;
    // A query's output is not userdata: the note about what cloud-init's part handlers would
    // do with the rendered text does not apply.
    let warnings = r
        .warnings
        .into_iter()
        .filter(|w| !w.starts_with("rendered user-data is "))
        .collect();
    Ok((r.text, warnings))
}

/// `--list-keys`: the keys of a mapping, sorted.
pub fn list_keys(value: &Value, key: Option<&str>) -> Result<Vec<String>> {
    let Value::Object(m) = value else {
        return Err(Error::invalid(
            Stage::Usage,
            key.unwrap_or("--list-keys"),
            "--list-keys needs a mapping, and this is not one",
        ));
    };
    let mut keys: Vec<String> = m.keys().cloned().collect();
    keys.sort();
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(root: &Path) {
        let idir = state_dir(root).unwrap().join("instances/vm-1");
        std::fs::create_dir_all(&idir).unwrap();
        std::fs::write(state_dir(root).unwrap().join("instance-id"), "vm-1\n").unwrap();
        let tree = serde_json::json!({"v1": {"local_hostname": "cp-0"}, "ds": {"meta_data": {}}});
        std::fs::write(idir.join("instance-data.json"), tree.to_string()).unwrap();
        std::fs::write(idir.join("instance-data-sensitive.json"), tree.to_string()).unwrap();
        std::fs::write(
            idir.join(crate::pipeline::SAVED_USERDATA),
            "#cloud-config\n",
        )
        .unwrap();
    }

    #[test]
    fn saved_data_with_userdata_only_for_root() {
        let d = tempfile::tempdir().unwrap();
        assert!(saved(d.path(), true).is_err());
        node(d.path());
        let root = saved(d.path(), true).unwrap();
        assert_eq!(root["userdata"], "#cloud-config\n");
        assert_eq!(root["v1"]["local_hostname"], "cp-0");
        let user = saved(d.path(), false).unwrap();
        assert!(
            user["userdata"]
                .as_str()
                .unwrap()
                .starts_with("<redacted for non-root user> file:")
        );
    }

    /// `query userdata` / `query --all` followed an absolute link in the saved data to the
    /// operator's own files; it now resolves inside the root, where the target is missing.
    #[test]
    fn absolute_links_in_the_saved_data_stay_inside_the_root() {
        let d = tempfile::tempdir().unwrap();
        let (root, outside) = (d.path().join("r"), d.path().join("host-secret"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(&outside, "{\"host\": \"secret\"}").unwrap();
        node(&root);
        let idir = state_dir(&root).unwrap().join("instances/vm-1");
        for name in [
            crate::pipeline::SAVED_USERDATA,
            "instance-data-sensitive.json",
        ] {
            std::fs::remove_file(idir.join(name)).unwrap();
            std::os::unix::fs::symlink(&outside, idir.join(name)).unwrap();
        }
        let e = saved(&root, true).unwrap_err();
        assert!(e.to_string().contains("cannot read"), "{e}");
        std::fs::remove_file(idir.join("instance-data-sensitive.json")).unwrap();
        std::fs::write(idir.join("instance-data-sensitive.json"), "{}").unwrap();
        let tree = saved(&root, true).unwrap();
        assert_eq!(tree["userdata"], Value::Null, "{tree}");
        assert!(!tree.to_string().contains("secret"), "{tree}");
    }

    #[test]
    fn format_renders_and_names_undefined_variables() {
        let tree = serde_json::json!({"v1": {"local_hostname": "cp-0"}});
        let (text, warnings) = format("{{ v1.local_hostname }}-x", &tree, false).unwrap();
        assert_eq!(text, "cp-0-x");
        assert!(warnings.is_empty(), "{warnings:?}");
        let e = format("{{ nope }}", &tree, false).unwrap_err();
        assert_eq!(e.place, "--format");
        assert!(e.message.contains("nope"), "{e}");
        assert_eq!(list_keys(&tree, None).unwrap(), ["v1"]);
        assert!(list_keys(&tree["v1"]["local_hostname"], Some("v1.local_hostname")).is_err());
    }
}
