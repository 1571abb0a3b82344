//! packaging/config.yaml, the commented default /etc/nodeagent/config.yaml the Debian
//! package ships: it must document every field of ImageConfig with its
//! real default, so uncommenting it changes nothing.

// Test code slices output it knows to be ASCII (ids, hashes, base64).
#![allow(clippy::string_slice)]

use libnodeagent::source::config::ImageConfig;
use std::collections::BTreeSet;

fn shipped() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/config.yaml");
    std::fs::read_to_string(path).expect("packaging/config.yaml")
}

/// Settings are written `#key: value` (nested: `#  key: value`); prose is `# text`.
fn uncomment(text: &str) -> String {
    text.lines()
        .map(|l| match l.strip_prefix('#') {
            Some(rest) if rest.starts_with(|c: char| !c.is_whitespace() && c != '#') => rest,
            Some(rest) if rest.starts_with("  ") && !rest[2..].starts_with(char::is_whitespace) => {
                rest
            }
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every mapping key path in a YAML value, e.g. `kubeadm.timeout_secs`.
fn key_paths(v: &serde_norway::Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let serde_norway::Value::Mapping(m) = v {
        for (k, v) in m {
            let path = format!("{prefix}{}", k.as_str().expect("string key"));
            key_paths(v, &format!("{path}."), out);
            out.insert(path);
        }
    }
}

#[test]
fn as_shipped_everything_is_commented_so_defaults_apply() {
    assert_eq!(
        ImageConfig::parse(&shipped()).unwrap(),
        ImageConfig::default()
    );
}

#[test]
fn uncommented_it_parses_strictly_and_equals_the_defaults() {
    let text = uncomment(&shipped());
    assert_ne!(text, shipped(), "no commented settings found");
    let parsed = ImageConfig::parse(&text).unwrap_or_else(|e| panic!("{e}\n---\n{text}"));
    assert_eq!(
        parsed,
        ImageConfig::default(),
        "a documented default differs from config.rs"
    );
}

#[test]
fn every_field_of_image_config_is_documented() {
    let mut want = BTreeSet::new();
    key_paths(
        &serde_norway::to_value(ImageConfig::default()).unwrap(),
        "",
        &mut want,
    );
    let mut have = BTreeSet::new();
    key_paths(
        &serde_norway::from_str(&uncomment(&shipped())).unwrap(),
        "",
        &mut have,
    );
    assert_eq!(
        have, want,
        "packaging/config.yaml and config.rs list different fields"
    );
    assert!(
        want.contains("kubeadm.join_attempts"),
        "key walk is broken: {want:?}"
    );
}

#[test]
fn uncomment_rule_leaves_prose_alone() {
    assert_eq!(
        uncomment("# prose\n#key: 1\n#  nested: 2\n#   deeper prose?\n"),
        "# prose\nkey: 1\n  nested: 2\n#   deeper prose?"
    );
}
