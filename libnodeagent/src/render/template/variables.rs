//! The variable tree templates see: cloud-init's `convert_jinja_instance_data` with key
//! aliases (docs/formats.md B.4).

use super::*;

/// Jinja's operator tokens, longest first (jinja2.lexer `operator_re`); each occurrence in
/// a key becomes one `_` in its alias.
pub(super) const OPERATORS: [&str; 26] = [
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}",
    ">", "<", "=", ".", ":", "|", ",", ";",
];

/// cloud-init's variable tree for templates (B.4): every key kept, operator-character aliases
/// (`local-hostname`→`local_hostname`, MACs, IPs...), `v<digits>` children promoted to the top level,
/// sorted-order collision rule. As JSON (compat mode, `query`, an error's text): the values
/// [`plain_variables`] builds, the one implementation of those rules.
pub fn jinja_variables(instance_data: &Json) -> Json {
    serde_json::to_value(plain_variables(instance_data))
        .unwrap_or_else(|_| Json::Object(serde_json::Map::new()))
}

/// cloud-init's variable tree as the minijinja value strict mode renders with, built in one
/// pass: a subtree seen under two names (an alias, a promoted `v1` child) is one shared value,
/// not a deep copy.
pub(super) fn plain_variables(instance_data: &Json) -> Value {
    match instance_data {
        Json::Object(m) => Value::from_pairs(plain_pairs(m)),
        _ => Value::from_pairs(Vec::<(String, Value)>::new()),
    }
}

/// cloud-init's insertions into the converted dict, in its order (keys sorted; a version
/// key's children after it; an alias after its key), as (key, value) pairs:
/// `Value::from_pairs` keeps a repeated key where it first came with the last value, as the
/// dict's assignments do.
fn plain_pairs(m: &serde_json::Map<String, Json>) -> Vec<(String, Value)> {
    let mut out = Vec::with_capacity(m.len());
    let mut entries: Vec<(&String, &Json)> = m.iter().collect();
    entries.sort_unstable_by_key(|(k, _)| *k);
    for (key, value) in entries {
        let value = match value {
            Json::Object(child) => {
                let pairs = plain_pairs(child);
                if is_version_key(key) {
                    // Kept under its name and its children promoted; a version key has no
                    // operator character, so no alias follows.
                    out.push((key.clone(), Value::from_pairs(pairs.clone())));
                    out.extend(pairs);
                    continue;
                }
                let whole = Value::from_pairs(pairs);
                out.push((key.clone(), whole.clone()));
                whole
            }
            other => {
                let v = scalar(other);
                out.push((key.clone(), v.clone()));
                v
            }
        };
        if let Some(alias) = alias(key) {
            out.push((alias, value));
        }
    }
    out
}

/// `re.match(r"v\d+$", key)`: `$` also matches before one final newline.
pub(super) fn is_version_key(key: &str) -> bool {
    let k = key.strip_suffix('\n').unwrap_or(key);
    let Some(d) = k.strip_prefix('v') else {
        return false;
    };
    !d.is_empty() && d.chars().all(|c| c.is_ascii_digit())
}

/// The key with every jinja operator token replaced by `_`, if that changes it. Operators
/// are tried only where the key has an operator character (all are ASCII): MACs and IPs are
/// most keys with one, and trying all 26 at every character was most of the tree's cost.
pub(super) fn alias(key: &str) -> Option<String> {
    const OP_CHARS: &str = "/*=!><+-%~[](){}.:|,;";
    if !key.bytes().any(|b| OP_CHARS.as_bytes().contains(&b)) {
        return None;
    }
    let mut out = String::with_capacity(key.len());
    let mut changed = false;
    let mut chars = key.char_indices();
    while let Some((i, c)) = chars.next() {
        let op = OP_CHARS
            .contains(c)
            .then(|| key.get(i..))
            .flatten()
            .and_then(|rest| OPERATORS.iter().find(|op| rest.starts_with(*op)));
        match op {
            Some(op) => {
                out.push('_');
                changed = true;
                // The operator's other characters (ASCII) are consumed with it.
                for _ in 1..op.len() {
                    chars.next();
                }
            }
            None => out.push(c),
        }
    }
    changed.then_some(out)
}
