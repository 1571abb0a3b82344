//! JSON as Python's `json.dumps` writes it: cloud-init's instance-data files and the
//! templates' `tojson` filter print this way, and nodeagent's output must match byte for byte.

use serde_json::Value;

/// Serialize as Python's `json.dumps(indent=1, sort_keys=True)` (+ trailing newline), the
/// format of cloud-init's instance-data files: ASCII only, `\uXXXX` escapes.
pub fn to_python_json(v: &Value) -> String {
    to_python_json_indented(v, 1)
}

/// [`to_python_json`] with `indent` spaces a level (`cloud-init status --format json`: 2).
pub fn to_python_json_indented(v: &Value, indent: usize) -> String {
    let mut out = String::new();
    py_json(v, 0, indent, &mut out);
    out.push('\n');
    out
}

fn py_json(v: &Value, depth: usize, indent: usize, out: &mut String) {
    let pad = |d: usize, out: &mut String| {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', d * indent));
    };
    match v {
        Value::Object(m) if m.is_empty() => out.push_str("{}"),
        Value::Array(a) if a.is_empty() => out.push_str("[]"),
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_unstable_by_key(|(k, _)| *k);
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                pad(depth + 1, out);
                python_json_string(k, out);
                out.push_str(": ");
                py_json(v, depth + 1, indent, out);
            }
            pad(depth, out);
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                pad(depth + 1, out);
                py_json(item, depth + 1, indent, out);
            }
            pad(depth, out);
            out.push(']');
        }
        Value::String(s) => python_json_string(s, out),
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
    }
}

/// A JSON string as Python's `json.dumps` writes it (`ensure_ascii`: `\uXXXX` escapes).
pub fn python_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
