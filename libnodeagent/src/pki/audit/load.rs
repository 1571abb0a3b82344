//! Reading the node's PKI files, kubeconfigs and kubeadm config, each capped in size.

use super::*;

/// At most MAX_FILE_BYTES of the regular file `path`: opened non-blocking, so a FIFO in its
/// place is refused instead of waited on.
pub(super) fn read_capped(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut data = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut data)?;
    if data.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_FILE_BYTES} bytes"
        )));
    }
    Ok(data)
}

pub(super) fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// `x.crt` → its certificate and `x.key`. `Ok(None)`: the certificate file is absent.
pub(super) fn load_pair(path: &Path) -> std::result::Result<Option<Loaded>, String> {
    if !exists(path) {
        return Ok(None);
    }
    let data = read_capped(path).map_err(|e| e.to_string())?;
    let cert = first_cert(&data)?;
    let key_path = path.with_extension("key");
    let key = if !exists(&key_path) {
        KeyState::Missing
    } else {
        match read_capped(&key_path) {
            Ok(k) => KeyState::Pem(k),
            Err(e) => KeyState::Unreadable(e.to_string()),
        }
    };
    Ok(Some(Loaded { cert, key }))
}

pub(super) fn first_cert(data: &[u8]) -> std::result::Result<CertInfo, String> {
    inspect::parse_certs(data)?
        .into_iter()
        .next()
        .ok_or_else(|| "no certificate".to_string())
}

/// The current context's user (else the first user): `client-certificate-data` or the
/// `client-certificate` file (absolute paths under `root`, relative ones beside the file),
/// and the key likewise.
pub(super) fn load_kubeconfig(
    path: &Path,
    root: &Path,
) -> std::result::Result<Option<Kubeconfig>, String> {
    if !exists(path) {
        return Ok(None);
    }
    let text = read_capped(path).map_err(|e| e.to_string())?;
    let shown = path.display().to_string();
    let doc = crate::formats::yaml::Doc::new(crate::base::error::Stage::Usage, &shown)
        .duplicate_keys(true);
    let doc = crate::formats::yaml::read_bytes(doc, &text)
        .map_err(|e| format!("not a valid kubeconfig: {e}"))?
        .to_json();
    let named = |list: &str, name: Option<&str>| -> Option<serde_json::Value> {
        let items = doc.get(list)?.as_array()?;
        let found = match name {
            Some(n) => items
                .iter()
                .find(|i| i.get("name").and_then(|v| v.as_str()) == Some(n)),
            None => items.first(),
        };
        found.cloned()
    };
    let context = doc
        .get("current-context")
        .and_then(|c| c.as_str())
        .and_then(|c| named("contexts", Some(c)))
        .and_then(|c| c.get("context").cloned());
    let user_name = context
        .as_ref()
        .and_then(|c| c.get("user"))
        .and_then(|u| u.as_str());
    let cluster_name = context
        .as_ref()
        .and_then(|c| c.get("cluster"))
        .and_then(|u| u.as_str());
    let user = named("users", user_name)
        .and_then(|u| u.get("user").cloned())
        .ok_or("no user entry")?;
    let cluster = named("clusters", cluster_name).and_then(|c| c.get("cluster").cloned());
    let dir = path.parent().unwrap_or(Path::new("."));
    let field = |v: &serde_json::Value,
                 data: &str,
                 file: &str|
     -> std::result::Result<Option<Vec<u8>>, String> {
        if let Some(b64) = v.get(data).and_then(|d| d.as_str()) {
            use base64::Engine;
            return base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .map(Some)
                .map_err(|_| format!("{data} is not base64"));
        }
        if let Some(f) = v.get(file).and_then(|d| d.as_str()) {
            let p = Path::new(f);
            let p = match p.strip_prefix("/") {
                Ok(rel) => root.join(rel),
                Err(_) => dir.join(p),
            };
            return read_capped(&p)
                .map(Some)
                .map_err(|e| format!("{file} {f}: {e}"));
        }
        Ok(None)
    };
    let cert_pem = field(&user, "client-certificate-data", "client-certificate")?
        .ok_or("the user has no client certificate")?;
    let cert = first_cert(&cert_pem)?;
    let key = match field(&user, "client-key-data", "client-key") {
        Ok(Some(k)) => KeyState::Pem(k),
        Ok(None) => KeyState::Missing,
        Err(e) => KeyState::Unreadable(e),
    };
    let ca_data = match cluster.as_ref() {
        Some(c) => match field(c, "certificate-authority-data", "certificate-authority") {
            Ok(Some(pem)) => Some(first_cert(&pem).map_err(|e| format!("cluster CA: {e}"))?),
            _ => None,
        },
        None => None,
    };
    Ok(Some(Kubeconfig {
        loaded: Loaded { cert, key },
        ca_data,
    }))
}

/// kubeadm's config on the node: the explicit file, else the first `kubeadm*.yaml` of
/// [`CONFIG_GLOBS`]. `Ok(None)`: none there.
pub(super) fn find_config(
    root: &Path,
    explicit: Option<&Path>,
) -> std::result::Result<Option<(String, KubeadmConfig)>, Problem> {
    let candidates: Vec<PathBuf> = match explicit {
        Some(p) => vec![p.to_path_buf()],
        None => {
            let mut out = Vec::new();
            for (dir, prefix) in CONFIG_GLOBS {
                let Ok(in_root) = crate::base::confine::dir(root, dir) else {
                    continue;
                };
                let mut here: Vec<PathBuf> = std::fs::read_dir(in_root)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                            n.starts_with(prefix) && (n.ends_with(".yaml") || n.ends_with(".yml"))
                        })
                    })
                    .collect();
                here.sort();
                out.extend(here);
            }
            out
        }
    };
    let Some(path) = candidates.into_iter().next() else {
        return Ok(None);
    };
    let shown = path.display().to_string();
    let problem = |message: String| Problem {
        place: shown.clone(),
        kind: "kubeadm-config",
        message,
    };
    let text = read_capped(&path).map_err(|e| problem(e.to_string()))?;
    let text = String::from_utf8(text).map_err(|_| problem("not UTF-8".into()))?;
    match crate::kubeadm::config::parse(&text, &shown) {
        Ok(cfg) => Ok(Some((shown, cfg))),
        Err(e) => Err(problem(e.to_string())),
    }
}

/// The PKI directory kubeadm uses on this node: the kubeadm config's `certificatesDir`
/// (under `root`) when a config is found and parses, else `/etc/kubernetes/pki`.
pub fn default_pki_dir(root: &Path, explicit_config: Option<&Path>) -> PathBuf {
    let dir = find_config(root, explicit_config)
        .ok()
        .flatten()
        .map(|(_, c)| c.certificates_dir())
        .unwrap_or_else(|| "/etc/kubernetes/pki".into());
    root.join(dir.trim_start_matches('/'))
}

pub(super) fn rel_name(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .unwrap_or(path)
        .display()
        .to_string()
}

pub(super) fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let ft = e.file_type()?;
        if ft.is_dir() {
            walk(&e.path(), out)?;
        } else if ft.is_file() {
            out.push(e.path());
        }
    }
    Ok(())
}
