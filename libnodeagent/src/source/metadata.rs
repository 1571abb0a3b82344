//! Metadata parsing exactly as cloud-init's VMware datasource does it (docs/formats.md
//! A.6–A.8): JSON first, then YAML 1.1; `network` (a mapping, or an encoded string with
//! `network.encoding`) moves under `network.config`; `instance-id`, `local-hostname`,
//! `wait-on-network`, `redact`/`cleanup-guestinfo` and public keys are pulled out typed.
//! Unlike cloud-init, unparsable metadata is an error naming the line, not "empty metadata".

// Parses untrusted input: no indexing that could panic (str slicing is denied crate-wide).
#![deny(clippy::indexing_slicing)]

use crate::base::error::{Error, Result, Stage};
use crate::formats::yaml;
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Metadata {
    /// The processed tree as cloud-init keeps it (`ds.meta_data`), before host facts merge in.
    pub tree: Map<String, Value>,
    pub instance_id: Option<String>,
    pub local_hostname: Option<String>,
    pub wait_on_network: WaitOnNetwork,
    /// Logical guestinfo keys to overwrite with `---` (metadata `redact`, or legacy `cleanup-guestinfo`).
    pub redact: Vec<String>,
    pub public_keys: Vec<String>,
    /// The network config (v1 or v2), outer `network:` key unwrapped.
    pub network: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct WaitOnNetwork {
    pub ipv4: bool,
    pub ipv6: bool,
}

/// Parse decoded metadata text. `place` names the source (`guestinfo.metadata`).
pub fn parse(text: &str, place: &str) -> Result<Metadata> {
    let mut tree = parse_object(text, place)?;
    let mut md = Metadata::default();

    let encoding = tree.remove("network.encoding");
    if let Some(network) = tree.remove("network") {
        let config = match network {
            Value::String(s) if !s.is_empty() => {
                // cloud-init's process_metadata calls decode() directly: no rstrip, no `---` rule.
                let enc = encoding.as_ref().and_then(Value::as_str);
                let decoded = crate::source::decode::decode_encoded("metadata.network", &s, enc)
                    .map_err(|e| e.within(place))?
                    .text;
                Value::Object(parse_object(&decoded, &format!("{place}: network"))?)
            }
            Value::Object(m) if !m.is_empty() => Value::Object(m),
            Value::Null | Value::String(_) | Value::Object(_) | Value::Bool(false) => Value::Null,
            other => {
                return Err(Error::invalid(
                    Stage::Metadata,
                    format!("{place}: network"),
                    format!(
                        "expected a mapping or an encoded string, found {}",
                        kind(&other)
                    ),
                ));
            }
        };
        if !config.is_null() {
            let unwrapped = match &config {
                Value::Object(m) if m.len() == 1 && m.contains_key("network") => {
                    m["network"].clone()
                }
                _ => config.clone(),
            };
            md.network = Some(unwrapped);
            let mut n = Map::new();
            n.insert("config".into(), config);
            tree.insert("network".into(), Value::Object(n));
        }
    }

    let not_a_string = |key: &str, other: &Value| {
        Error::invalid(
            Stage::Metadata,
            format!("{place}: {key}"),
            found("expected a string", other),
        )
    };
    md.instance_id =
        scalar_text(tree.get("instance-id")).map_err(|v| not_a_string("instance-id", v))?;
    md.local_hostname = match tree.get("local-hostname") {
        Some(n @ Value::Number(_)) => return Err(not_a_string("local-hostname", n)),
        v => scalar_text(v).map_err(|v| not_a_string("local-hostname", v))?,
    };
    if let Some(w) = tree.get("wait-on-network") {
        let Value::Object(w) = w else {
            return Err(Error::invalid(
                Stage::Metadata,
                format!("{place}: wait-on-network"),
                "expected a mapping with ipv4/ipv6",
            ));
        };
        md.wait_on_network = WaitOnNetwork {
            ipv4: w.get("ipv4").map(translate_bool).unwrap_or(false),
            ipv6: w.get("ipv6").map(translate_bool).unwrap_or(false),
        };
    }
    let redact = tree.get("redact").or_else(|| tree.get("cleanup-guestinfo"));
    md.redact = match redact {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => strings(items),
        Some(other) => {
            return Err(Error::invalid(
                Stage::Metadata,
                format!("{place}: redact"),
                found("expected a list of keys", other),
            ));
        }
    };
    md.public_keys = public_keys(&tree);
    md.tree = tree;
    Ok(md)
}

/// JSON object first, else a YAML mapping (cloud-init's `load_json_or_yaml`).
/// NoCloud's network configuration: the seed's `network-config` file (cloud-init 22.4's
/// DataSourceNoCloud reads it as the whole network config, `version: 2` at the top; the
/// meta-data's `network` key is not a network config there). Empty: none. A document wrapped
/// in a top-level `network:` key is refused: 22.4 reads no such wrapping (later versions do),
/// so the two would configure the node differently.
pub fn nocloud_network(text: &str, place: &str) -> Result<Option<Value>> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let m = parse_object(text, place)?;
    if m.contains_key("network") {
        return Err(Error::invalid(
            Stage::Metadata,
            format!("{place}: network"),
            "a top-level `network:` key: cloud-init 22.4 reads network-config unwrapped \
             (`version: 2` at the top); write it so",
        ));
    }
    Ok((!m.is_empty()).then_some(Value::Object(m)))
}

fn parse_object(text: &str, place: &str) -> Result<Map<String, Value>> {
    let doc = yaml::Doc::new(Stage::Metadata, place);
    if let Some(Value::Object(m)) = yaml::read_json(doc, text)? {
        return Ok(m);
    }
    let node = yaml::read(doc, text)?;
    match node.to_json() {
        Value::Object(m) => Ok(m),
        Value::Null => Ok(Map::new()),
        other => Err(Error::invalid(
            Stage::Metadata,
            place,
            format!(
                "expected a JSON object or YAML mapping, found {}",
                kind(&other)
            ),
        )),
    }
}

/// First present of `public-keys-data`, `public_keys_data`, `public-keys`, `public_keys` (A.8).
fn public_keys(tree: &Map<String, Value>) -> Vec<String> {
    let v = [
        "public-keys-data",
        "public_keys_data",
        "public-keys",
        "public_keys",
    ]
    .iter()
    .find_map(|k| tree.get(*k));
    let mut out = Vec::new();
    fn flatten(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => out.extend(
                s.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_string),
            ),
            Value::Array(items) => items.iter().for_each(|i| flatten(i, out)),
            Value::Object(m) => m.values().for_each(|i| flatten(i, out)),
            _ => {}
        }
    }
    if let Some(v) = v {
        flatten(v, &mut out);
    }
    out
}

/// List items as strings, non-strings in their JSON form (cloud-init's `str()` of YAML scalars).
pub fn strings(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string())
        })
        .collect()
}

/// cloud-init's `translate_bool`: real booleans, or `true/1/on/yes` strings (any case).
pub fn translate_bool(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::String(s) => matches!(
            s.trim().to_ascii_lowercase().as_str(),
            "true" | "1" | "on" | "yes"
        ),
        Value::Number(n) => n.as_i64() == Some(1),
        _ => false,
    }
}

/// A string or number as its text (`str()` of it, as cloud-init takes such keys); absent or
/// null is `None`; anything else is handed back as the error.
pub fn scalar_text(v: Option<&Value>) -> std::result::Result<Option<String>, &Value> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(other) => Err(other),
    }
}

/// The message for a value of the wrong kind: `{expected}, found a list`.
pub fn found(expected: &str, v: &Value) -> String {
    format!("{expected}, found {}", kind(v))
}

pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::string_slice)]
mod tests {
    use super::*;

    #[test]
    fn capv_metadata_moves_network_under_config() {
        let text = "\ninstance-id: \"vm-1\"\nlocal-hostname: \"vm-1\"\nwait-on-network:\n  ipv4: true\n  ipv6: false\nnetwork:\n  version: 2\n  ethernets:\n    id0:\n      dhcp4: true\n";
        let md = parse(text, "guestinfo.metadata").unwrap();
        assert_eq!(md.instance_id.as_deref(), Some("vm-1"));
        assert_eq!(md.local_hostname.as_deref(), Some("vm-1"));
        assert_eq!(
            md.wait_on_network,
            WaitOnNetwork {
                ipv4: true,
                ipv6: false
            }
        );
        assert_eq!(md.network.as_ref().unwrap()["version"], 2);
        assert_eq!(
            md.tree["network"]["config"]["ethernets"]["id0"]["dhcp4"],
            true
        );
    }

    #[test]
    fn json_metadata_and_encoded_network_and_redact_string() {
        use base64::Engine;
        let net = base64::engine::general_purpose::STANDARD.encode("network:\n  version: 2\n");
        let text = format!(
            r#"{{"instance-id": 42, "network": "{net}", "network.encoding": "base64", "cleanup-guestinfo": "userdata", "public-keys": "ssh-ed25519 AAA a\nssh-rsa BBB b\n"}}"#
        );
        let md = parse(&text, "guestinfo.metadata").unwrap();
        assert_eq!(md.instance_id.as_deref(), Some("42"));
        assert_eq!(md.network.unwrap()["version"], 2);
        assert_eq!(md.redact, vec!["userdata"]);
        assert_eq!(md.public_keys.len(), 2);
        assert!(!md.tree.contains_key("network.encoding"));
    }

    #[test]
    fn broken_metadata_is_an_error_with_the_line() {
        let err = parse("instance-id: a\n  bad: [\n", "guestinfo.metadata").unwrap_err();
        assert!(err.place.starts_with("guestinfo.metadata: line 2"), "{err}");
        assert_eq!(err.stage, Stage::Metadata);
        let err = parse("- a\n- b\n", "guestinfo.metadata").unwrap_err();
        assert!(err.message.contains("found a list"), "{err}");
    }
}
