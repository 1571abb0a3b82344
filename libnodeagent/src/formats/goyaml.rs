//! The one YAML emitter of nodeagent's output. It writes what Go's sigs.k8s.io/yaml (go-yaml
//! v2) writes for the same data: keys in go-yaml's "natural" order, 2-space indent, sequences
//! not indented under their key, `{}`/`[]`/`null` for empty values, and go-yaml's scalar
//! quoting. CAPI serializes kubeadm configs and kubeconfigs this way (docs/formats.md a.4);
//! matching it byte-for-byte keeps minted bundles indistinguishable from CABPK's. Typed values
//! (the kubeadm documents of `crate::kubeadm::api`, status, parsed YAML) reach it through
//! [`to_y`] or [`dump`].

mod ser;

pub use ser::{Error, to_y};

use std::cmp::Ordering;

#[derive(Debug, Clone, PartialEq)]
pub enum Y {
    Map(Vec<(String, Y)>),
    Seq(Vec<Y>),
    Str(String),
    Int(i64),
    Bool(bool),
    /// A number that is not an `i64` (a float, a large unsigned), as its YAML text.
    Num(String),
    Null,
}

/// Serialize a value as one document through this emitter.
pub fn dump<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, Error> {
    Ok(to_string(&to_y(value)?))
}

/// `Y::Map` from pairs (order irrelevant: the emitter sorts).
pub fn map<K: Into<String>>(pairs: impl IntoIterator<Item = (K, Y)>) -> Y {
    Y::Map(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect())
}

pub fn s(v: impl Into<String>) -> Y {
    Y::Str(v.into())
}

/// Serialize one document (ends with `\n`).
pub fn to_string(y: &Y) -> String {
    let mut out = String::new();
    match y {
        Y::Map(m) if !m.is_empty() => emit_map(m, 0, &mut out),
        Y::Seq(v) if !v.is_empty() => emit_seq(v, 0, &mut out),
        other => {
            out.push_str(&inline(other).expect("scalar"));
            out.push('\n');
        }
    }
    out
}

/// The one-line form of empty collections and scalars; `None` for non-empty collections.
fn inline(y: &Y) -> Option<String> {
    Some(match y {
        Y::Map(m) if m.is_empty() => "{}".into(),
        Y::Seq(v) if v.is_empty() => "[]".into(),
        Y::Map(_) | Y::Seq(_) => return None,
        Y::Str(v) => scalar(v),
        Y::Int(i) => i.to_string(),
        Y::Bool(b) => b.to_string(),
        Y::Num(n) => n.clone(),
        Y::Null => "null".into(),
    })
}

fn sorted(m: &[(String, Y)]) -> Vec<&(String, Y)> {
    let mut v: Vec<_> = m.iter().collect();
    v.sort_by(|a, b| natural_cmp(&a.0, &b.0));
    v
}

fn emit_map(m: &[(String, Y)], indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    for (i, (k, v)) in sorted(m).into_iter().enumerate() {
        // The first key of a map inside a sequence item shares the `- ` line.
        if !(i == 0 && out.ends_with("- ")) {
            out.push_str(&pad);
        }
        out.push_str(&scalar(k));
        out.push(':');
        match inline(v) {
            Some(text) => {
                out.push(' ');
                out.push_str(&text);
                out.push('\n');
            }
            None => {
                out.push('\n');
                match v {
                    Y::Map(inner) => emit_map(inner, indent + 2, out),
                    Y::Seq(items) => emit_seq(items, indent, out),
                    _ => unreachable!(),
                }
            }
        }
    }
}

fn emit_seq(items: &[Y], indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    for item in items {
        if !out.ends_with("- ") {
            out.push_str(&pad);
        }
        out.push_str("- ");
        match inline(item) {
            Some(text) => {
                out.push_str(&text);
                out.push('\n');
            }
            None => match item {
                Y::Map(inner) => emit_map(inner, indent + 2, out),
                Y::Seq(inner) => emit_seq(inner, indent + 2, out),
                _ => unreachable!(),
            },
        }
    }
}

/// go-yaml v2 key order: numbers compare numerically, letters by code point, a non-letter
/// sorts before a letter at the first difference, digit runs compare as numbers.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (ar, br): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    for i in 0..ar.len().min(br.len()) {
        if ar[i] == br[i] {
            continue;
        }
        let (al, bl) = (ar[i].is_alphabetic(), br[i].is_alphabetic());
        if al && bl {
            return ar[i].cmp(&br[i]);
        }
        if al || bl {
            return if bl {
                Ordering::Less
            } else {
                Ordering::Greater
            };
        }
        let (mut an, mut bn) = (0i64, 0i64);
        if ar[i] == '0' || br[i] == '0' {
            let mut j = i;
            while j > 0 && ar[j - 1].is_ascii_digit() {
                j -= 1;
                if ar[j] != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let (an, ai) = digit_run(&ar, i, an);
        let (bn, bi) = digit_run(&br, i, bn);
        if an != bn {
            return an.cmp(&bn);
        }
        if ai != bi {
            return ai.cmp(&bi);
        }
        return ar[i].cmp(&br[i]);
    }
    ar.len().cmp(&br.len())
}

/// The digit run of `r` from `from`, accumulated onto `n` (saturating), and where it ends.
fn digit_run(r: &[char], from: usize, mut n: i64) -> (i64, usize) {
    let mut end = from;
    while let Some(d) = r.get(end).and_then(|c| c.to_digit(10)) {
        n = n.saturating_mul(10).saturating_add(i64::from(d));
        end += 1;
    }
    (n, end)
}

/// Would a plain scalar with this text resolve to something other than a string (YAML 1.1)?
fn resolves_to_non_string(v: &str) -> bool {
    const WORDS: &[&str] = &[
        "", "~", "null", "Null", "NULL", "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
        "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
        ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan",
        ".NaN", ".NAN", "<<",
    ];
    if WORDS.contains(&v) {
        return true;
    }
    let body = v.strip_prefix(['-', '+']).unwrap_or(v);
    let plain = body.replace('_', "");
    let is_digits = |s: &str, radix: u32| !s.is_empty() && s.chars().all(|c| c.is_digit(radix));
    if is_digits(&plain, 10)
        || plain.strip_prefix("0x").is_some_and(|h| is_digits(h, 16))
        || plain.strip_prefix("0b").is_some_and(|h| is_digits(h, 2))
        // YAML 1.2 octal: Go would write it plain, but a 1.2 reader (serde_yaml) takes a number.
        || plain.strip_prefix("0o").is_some_and(|h| is_digits(h, 8))
    {
        return true;
    }
    is_float(body) || is_base60(body)
}

/// `^(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$` (sign already stripped).
fn is_float(s: &str) -> bool {
    let (mant, exp) = match s.split_once(['e', 'E']) {
        Some((mant, exp)) => (mant, Some(exp)),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let mant_ok = match mant.split_once('.') {
        Some(("", frac)) => digits(frac),
        Some((int, frac)) => digits(int) && (frac.is_empty() || digits(frac)),
        None => digits(mant),
    };
    let exp_ok = exp.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)));
    mant_ok && exp_ok
}

/// `^[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$` (sign already stripped).
fn is_base60(s: &str) -> bool {
    let (main, frac) = match s.split_once('.') {
        Some((m, f)) => (m, Some(f)),
        None => (s, None),
    };
    let mut parts = main.split(':');
    let head = parts.next().unwrap_or("");
    let head_ok = head.bytes().next().is_some_and(|b| b.is_ascii_digit())
        && head.bytes().all(|b| b.is_ascii_digit() || b == b'_');
    let rest: Vec<&str> = parts.collect();
    let rest_ok = !rest.is_empty()
        && rest.iter().all(|p| {
            matches!(p.as_bytes(), [d] if d.is_ascii_digit())
                || matches!(p.as_bytes(), [a, d] if (b'0'..=b'5').contains(a) && d.is_ascii_digit())
        });
    let frac_ok = frac.is_none_or(|f| f.bytes().all(|b| b.is_ascii_digit() || b == b'_'));
    head_ok && rest_ok && frac_ok
}

/// Whether libyaml's emitter allows this text as a plain scalar in block context.
fn plain_allowed(v: &str) -> bool {
    if v.is_empty() || v.starts_with("---") || v.starts_with("...") {
        return false;
    }
    let c: Vec<char> = v.chars().collect();
    if c[0].is_whitespace() || c[c.len() - 1].is_whitespace() {
        return false;
    }
    if "#,[]{}&*!|>'\"%@`".contains(c[0]) {
        return false;
    }
    if "-?:".contains(c[0]) && (c.len() == 1 || c[1] == ' ') {
        return false;
    }
    for i in 0..c.len() {
        let next_space = i + 1 == c.len() || c[i + 1] == ' ';
        if (c[i] == ':' && next_space)
            || (c[i] == '#' && i > 0 && c[i - 1] == ' ')
            || c[i].is_control()
        {
            return false;
        }
    }
    true
}

/// go-yaml v2 scalar style: double quotes when the plain text would change type or needs
/// escapes, single quotes when it only contains indicators, plain otherwise.
pub fn scalar(v: &str) -> String {
    if !resolves_to_non_string(v) && plain_allowed(v) {
        return v.to_string();
    }
    if !resolves_to_non_string(v) && !v.chars().any(|c| c.is_control()) {
        return format!("'{}'", v.replace('\'', "''"));
    }
    double_quoted(v, |c| {
        c.is_control().then(|| format!("\\x{:02X}", c as u32))
    })
}

/// `"v"` with `"`, `\`, newline and tab backslash-escaped as Go writes them; `other` gives
/// the escape of any further character that needs one.
pub fn double_quoted(v: &str, other: impl Fn(char) -> Option<String>) -> String {
    let mut out = String::from("\"");
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => match other(c) {
                Some(escape) => out.push_str(&escape),
                None => out.push(c),
            },
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_matches_go_yaml() {
        let mut keys = vec![
            "scheduler",
            "kind",
            "controllerManager",
            "controlPlaneEndpoint",
            "apiVersion",
            "apiServer",
            "a10",
            "a9",
            "A",
        ];
        keys.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            keys,
            [
                "A",
                "a9",
                "a10",
                "apiServer",
                "apiVersion",
                "controlPlaneEndpoint",
                "controllerManager",
                "kind",
                "scheduler"
            ]
        );
    }

    #[test]
    fn scalars_quote_like_go() {
        for (text, want) in [
            ("{{ local_hostname }}", "'{{ local_hostname }}'"),
            ("true", "\"true\""),
            ("6443", "\"6443\""),
            ("1.30", "\"1.30\""),
            ("10:30", "\"10:30\""),
            ("", "\"\""),
            ("127.0.0.1:6443", "127.0.0.1:6443"),
            ("v1.30.2", "v1.30.2"),
            ("sha256:ab", "sha256:ab"),
            ("a: b", "'a: b'"),
        ] {
            assert_eq!(scalar(text), want, "{text:?}");
        }
    }

    /// Whatever the string, a YAML reader gets the same string back (OVF metadata and
    /// collect-logs dump arbitrary text through this emitter).
    #[test]
    fn any_string_reads_back_the_same() {
        let tricky = [
            "",
            "~",
            "null",
            "yes",
            "0o17",
            "0x1F",
            "1_000",
            "1e3",
            ".5",
            "12:30",
            "+1",
            "-",
            "- x",
            "? x",
            ": x",
            "#x",
            "x #y",
            "a: b",
            "{x}",
            "[x]",
            "*x",
            "&x",
            "!x",
            "|",
            ">",
            "@x",
            "`x",
            "%x",
            "'",
            "\"",
            "\\",
            " lead",
            "trail ",
            "x\ty",
            "a\r\nb",
            "a\nb",
            "\u{85}",
            "\u{2028}",
            "\u{feff}x",
            "\u{7f}",
            "é",
            "---",
            "...",
            "<<",
            "=",
        ];
        for v in tricky {
            let text = to_string(&map([("k", s(v))]));
            // Read back by the agent's own YAML 1.1 reader: still the same string.
            let doc = crate::formats::yaml::Doc::new(crate::base::error::Stage::Report, "k");
            let back = crate::formats::yaml::read(doc, &text)
                .unwrap_or_else(|e| panic!("{v:?}: {text:?}: {e}"));
            let got = back.get("k").map(|n| &n.value);
            assert_eq!(
                got,
                Some(&crate::formats::yaml::Value::Str(v.to_string())),
                "{text:?}"
            );
        }
    }

    #[test]
    fn layout_matches_go() {
        let y = map([
            (
                "taints",
                Y::Seq(vec![map([("key", s("k")), ("effect", s("NoSchedule"))])]),
            ),
            ("empty", map::<&str>([])),
            ("none", Y::Null),
            (
                "nested",
                map([("b", Y::Int(1)), ("a", Y::Seq(vec![s("x")]))]),
            ),
        ]);
        assert_eq!(
            to_string(&y),
            "empty: {}\nnested:\n  a:\n  - x\n  b: 1\nnone: null\ntaints:\n- effect: NoSchedule\n  key: k\n"
        );
    }
}
