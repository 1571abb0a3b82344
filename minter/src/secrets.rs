//! Cluster API Secrets for a PKI (docs/formats.md d.1): `<cluster>-ca`, `-etcd`, `-proxy`
//! (`tls.crt`/`tls.key`), `-sa` (`tls.crt` = public key, `tls.key`), `-kubeconfig` (`value`),
//! type `cluster.x-k8s.io/secret`, label `cluster.x-k8s.io/cluster-name`, base64 `data`.
//! And the reverse, so join bundles can be minted for a cluster CAPI already runs.

// Parses untrusted input: no indexing that could panic (str slicing is denied crate-wide).
#![deny(clippy::indexing_slicing)]

use super::pki::{CaPair, Pki};
use base64::Engine;
use libnodeagent::base::error::{Error, Result, Stage};
use libnodeagent::formats::goyaml::{map, s, to_string};
use std::collections::BTreeMap;

pub const SECRET_TYPE: &str = "cluster.x-k8s.io/secret";
pub const CLUSTER_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Largest Secrets file `parse` accepts.
pub use libnodeagent::base::limits::MAX_SECRETS_BYTES;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

fn secret(cluster: &str, namespace: &str, suffix: &str, data: &[(&str, &str)]) -> String {
    let data = data
        .iter()
        .map(|(k, v)| (*k, s(b64().encode(v))))
        .collect::<Vec<_>>();
    to_string(&map([
        ("apiVersion", s("v1")),
        ("kind", s("Secret")),
        (
            "metadata",
            map([
                ("labels", map([(CLUSTER_LABEL, s(cluster))])),
                ("name", s(format!("{cluster}-{suffix}"))),
                ("namespace", s(namespace)),
            ]),
        ),
        ("type", s(SECRET_TYPE)),
        ("data", map(data)),
    ]))
}

/// All Secrets as one multi-document YAML stream for `kubectl apply -f -`.
pub fn render(cluster: &str, namespace: &str, pki: &Pki, kubeconfig: &str) -> String {
    let ca = |c: &CaPair| {
        [
            ("tls.crt", c.cert_pem.clone()),
            ("tls.key", c.key_pem.clone()),
        ]
    };
    let docs = [
        ("ca", ca(&pki.ca).to_vec()),
        ("etcd", ca(&pki.etcd).to_vec()),
        ("proxy", ca(&pki.front_proxy).to_vec()),
        (
            "sa",
            vec![
                ("tls.crt", pki.sa_pub.clone()),
                ("tls.key", pki.sa_key.clone()),
            ],
        ),
        ("kubeconfig", vec![("value", kubeconfig.to_string())]),
    ];
    let mut out = String::new();
    for (suffix, data) in docs {
        let data: Vec<(&str, &str)> = data.iter().map(|(k, v)| (*k, v.as_str())).collect();
        out.push_str("---\n");
        out.push_str(&secret(cluster, namespace, suffix, &data));
    }
    out
}

/// What `parse` found: the cluster name, its PKI, and the admin kubeconfig if present.
#[derive(Debug)]
pub struct Parsed {
    pub cluster: String,
    pub pki: Pki,
    pub kubeconfig: Option<String>,
}

/// Read CAPI Secrets (any order, other objects ignored) back into a PKI. `cluster` picks one
/// cluster when the stream holds several. `data` (base64) and `stringData` are both read.
pub fn parse(yaml: &str, cluster: Option<&str>) -> Result<Parsed> {
    let err = |place: String, m: String| Error::invalid(Stage::Mint, place, m);
    if yaml.len() > MAX_SECRETS_BYTES {
        return Err(Error::too_large(
            Stage::Mint,
            "--from-secrets",
            format!("larger than {MAX_SECRETS_BYTES} bytes"),
        ));
    }
    // name -> data
    let mut found: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let docs = libnodeagent::formats::yaml::read_all(
        libnodeagent::formats::yaml::Doc::new(Stage::Mint, "--from-secrets"),
        yaml,
    )?;
    for (i, doc) in docs.iter().enumerate() {
        let place = format!("document {}", i + 1);
        let v = doc.to_json();
        if v.get("kind").and_then(|k| k.as_str()) != Some("Secret") {
            continue;
        }
        let name = v
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(|n| n.as_str())
            .ok_or_else(|| err(place.clone(), "Secret without metadata.name".into()))?;
        found.insert(name.to_string(), secret_data(&v, name)?);
    }
    let clusters: Vec<&str> = found
        .keys()
        .filter_map(|n| n.strip_suffix("-ca"))
        .filter(|c| found.contains_key(&format!("{c}-sa")))
        .collect();
    let cluster = pick_cluster(cluster, &clusters)?;
    let get = |suffix: &str, key: &str| -> Result<String> {
        let name = format!("{cluster}-{suffix}");
        let data = found.get(&name).ok_or_else(|| {
            Error::of(
                libnodeagent::base::error::ErrorKind::NotFound,
                Stage::Mint,
                "--from-secrets",
                format!("Secret {name} not found"),
            )
        })?;
        data.get(key)
            .filter(|v| !v.is_empty())
            .cloned()
            .ok_or_else(|| err(format!("Secret {name}"), format!("has no {key}")))
    };
    let pair = |suffix: &str| -> Result<CaPair> {
        Ok(CaPair {
            cert_pem: get(suffix, "tls.crt")?,
            key_pem: get(suffix, "tls.key")?,
        })
    };
    let pki = Pki {
        ca: pair("ca")?,
        etcd: pair("etcd")?,
        front_proxy: pair("proxy")?,
        sa_pub: get("sa", "tls.crt")?,
        sa_key: get("sa", "tls.key")?,
    };
    pki.check()?;
    let kubeconfig = get("kubeconfig", "value").ok();
    Ok(Parsed {
        cluster,
        pki,
        kubeconfig,
    })
}

/// `data` (base64) and `stringData` of one Secret, as text.
fn secret_data(v: &serde_json::Value, name: &str) -> Result<BTreeMap<String, String>> {
    let mut data = BTreeMap::new();
    if let Some(m) = v.get("data").and_then(|d| d.as_object()) {
        for (k, val) in m {
            let Some(val) = val.as_str() else {
                continue;
            };
            let bytes = b64()
                .decode(val.split_whitespace().collect::<String>())
                .map_err(|e| {
                    Error::invalid(
                        Stage::Mint,
                        format!("Secret {name} data.{k}"),
                        format!("not base64: {e}"),
                    )
                })?;
            let text = String::from_utf8(bytes).map_err(|_| {
                Error::invalid(
                    Stage::Mint,
                    format!("Secret {name} data.{k}"),
                    "not UTF-8 PEM text",
                )
            })?;
            data.insert(k.to_string(), text);
        }
    }
    if let Some(m) = v.get("stringData").and_then(|d| d.as_object()) {
        for (k, val) in m {
            if let Some(val) = val.as_str() {
                data.insert(k.to_string(), val.to_string());
            }
        }
    }
    Ok(data)
}

/// The cluster named, else the only one with both a `-ca` and a `-sa` Secret.
fn pick_cluster(cluster: Option<&str>, clusters: &[&str]) -> Result<String> {
    Ok(match (cluster, clusters) {
        (Some(c), _) => c.to_string(),
        (None, [one]) => one.to_string(),
        (None, []) => {
            return Err(Error::of(
                libnodeagent::base::error::ErrorKind::NotFound,
                Stage::Mint,
                "--from-secrets",
                "no <cluster>-ca and <cluster>-sa Secrets found",
            ));
        }
        (None, many) => {
            return Err(Error::invalid(
                Stage::Mint,
                "--from-secrets",
                format!(
                    "Secrets for several clusters ({}); pick one with --cluster",
                    many.join(", ")
                ),
            ));
        }
    })
}
