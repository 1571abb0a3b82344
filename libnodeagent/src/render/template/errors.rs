//! Render errors in cloud-init's words, with the place (line, variable) named and values
//! redacted (docs/formats.md B.2, B.5).

use super::*;

/// Python's `str.splitlines()` (what cloud-init uses to quote the failing line).
pub(super) fn py_splitlines(s: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut it = s.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        let brk = matches!(
            c,
            '\n' | '\r'
                | '\u{b}'
                | '\u{c}'
                | '\u{1c}'
                | '\u{1d}'
                | '\u{1e}'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        );
        if brk {
            lines.extend(s.get(start..i));
            let mut next = i + c.len_utf8();
            if c == '\r' && it.peek().map(|&(_, n)| n) == Some('\n') {
                it.next();
                next += 1;
            }
            start = next;
        }
    }
    if start < s.len() {
        lines.extend(s.get(start..));
    }
    lines
}

/// cloud-init's syntax error text, `Unable to parse Jinja template due to syntax error: <msg>
/// on line <n>`, `n` counting the header as line 1. cloud-init appends the line's text; we
/// do not: userdata lines hold tokens, keys and passwords, and the message goes to the
/// journal, status.json (world-readable) and the platform. The line number finds it.
pub(super) fn syntax_message(msg: &str, template_line: usize) -> String {
    // minijinja's details can quote template tokens: redact them.
    format!(
        "Unable to parse Jinja template due to syntax error: {} on line {}",
        crate::base::redact::redact_text(msg),
        template_line + 1
    )
}

pub(super) fn syntax_error(e: &minijinja::Error, body: &str) -> Error {
    let line = e.line().unwrap_or(1);
    let detail = e.detail().unwrap_or("syntax error");
    let is_do = py_splitlines(body)
        .get(line.wrapping_sub(1))
        .is_some_and(|l| l.contains("do "));
    let msg = if detail.contains("expected call expression") && is_do {
        format!("{detail} (`{{% do %}}` here only accepts a call such as `{{% do f(x) %}}`)")
    } else {
        detail.to_string()
    };
    let msg = msg.as_str();
    Error::invalid(
        Stage::Template,
        at_line(Some(line + 1)),
        syntax_message(msg, line),
    )
}

/// Map a render-time error to our error: name the variable and the userdata line.
pub(super) fn runtime_error(
    e: &minijinja::Error,
    source: &str,
    overflow: bool,
    vars: &Json,
    compat: bool,
) -> Error {
    let line = e.line();
    let uline = line.map(|l| l + 1);
    if overflow || (e.kind() == ErrorKind::WriteFailure && e.detail() == Some(OUTPUT_TOO_LARGE)) {
        return Error::too_large(
            Stage::Template,
            at_line(uline),
            format!(
                "rendered output exceeds the {} MiB limit: the template produces too much text",
                MAX_RENDERED_BYTES >> 20
            ),
        );
    }
    let expr = e.range().and_then(|r| source.get(r)).unwrap_or("").trim();
    let detail = e.detail().unwrap_or("");
    match e.kind() {
        ErrorKind::OutOfFuel => {
            return Error::too_large(
                Stage::Template,
                at_line(uline),
                format!(
                    "template exceeded its work budget of {TEMPLATE_FUEL} fuel (TEMPLATE_FUEL: instructions, \
                     data made and items visited): an endless or far too long loop, or a value \
                     grown too large?"
                ),
            );
        }
        // jinja reports these at compile time as syntax errors; keep cloud-init's wording.
        ErrorKind::UnknownFilter | ErrorKind::UnknownTest => {
            let what = if e.kind() == ErrorKind::UnknownFilter {
                "filter"
            } else {
                "test"
            };
            // minijinja: "filter NAME is unknown"
            let name = detail.split_whitespace().nth(1).unwrap_or(detail);
            let l = line.unwrap_or(1);
            return Error::invalid(
                Stage::Template,
                at_line(Some(l + 1)),
                syntax_message(&format!("No {what} named '{name}'."), l),
            );
        }
        _ => {}
    }
    if let Some(hint) = subtraction_hint(expr) {
        return Error::invalid(Stage::Template, at_line(uline), hint);
    }
    if let Some(var) = undefined_name(detail) {
        // In compat mode a missing name is a placeholder object, so minijinja blames the
        // attribute after it; walk the variable tree to name the first missing hop.
        let var = if compat {
            first_missing(vars, &var).unwrap_or(var)
        } else {
            var
        };
        return Error::invalid(
            Stage::Template,
            at_line(uline),
            format!(
                "undefined variable `{var}`: it is not in the instance data (cloud-init would render \
                 the placeholder {MISSING_PREFIX}{} or drop the part; --compat renders placeholders)",
                last_segment(&var)
            ),
        );
    }
    if e.kind() == ErrorKind::UndefinedError {
        let var = if expr.is_empty() {
            "a variable".to_string()
        } else {
            format!("`{expr}`")
        };
        return Error::invalid(
            Stage::Template,
            at_line(uline),
            format!("undefined variable in {var}: it is not in the instance data"),
        );
    }
    let msg = if detail.is_empty() {
        e.kind().to_string()
    } else {
        format!("{}: {}", e.kind(), crate::base::redact::redact_text(detail))
    };
    let msg = if expr.is_empty() {
        msg
    } else {
        format!("{msg} (in `{}`)", crate::base::redact::redact_text(expr))
    };
    Error::invalid(Stage::Template, at_line(uline), msg)
}

/// The name inside minijinja's "`ds.meta_data.foo` is undefined" detail.
pub(super) fn undefined_name(detail: &str) -> Option<String> {
    let start = detail.find('`')?;
    let rest = detail.get(start + 1..)?;
    let end = rest.find("` is undefined")?;
    Some(rest.get(..end)?.to_string())
}

/// For a simple path (`a.b['c'].d`, `x[0]`), the prefix up to the first hop that is not in
/// `vars`; `None` if the path is not simple, fully present, or its root is not a variable
/// (it may be a loop/set/macro local, which the tree cannot know about).
pub(super) fn first_missing(vars: &Json, expr: &str) -> Option<String> {
    let hops = parse_path(expr)?;
    let mut cur = vars;
    for (i, (hop, stop)) in hops.into_iter().enumerate() {
        let next = match (&hop, cur) {
            (Hop::Key(k), Json::Object(m)) => m.get(k.as_str()),
            (Hop::Index(i), Json::Array(a)) => a.get(*i),
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None if i == 0 => return None,
            None => return expr.get(..stop).map(str::to_string),
        }
    }
    None
}

pub(super) enum Hop {
    Key(String),
    Index(usize),
}

/// Parse `name(.attr | ['key'] | ["key"] | [digits])*` into hops with their end offsets.
pub(super) fn parse_path(expr: &str) -> Option<Vec<(Hop, usize)>> {
    let b = expr.as_bytes();
    let ident_end = |from: usize| {
        let mut i = from;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        i
    };
    let mut hops = Vec::new();
    let mut i = ident_end(0);
    if i == 0 || b[0].is_ascii_digit() {
        return None;
    }
    hops.push((Hop::Key(expr.get(..i)?.to_string()), i));
    while i < b.len() {
        match b[i] {
            b'.' => {
                let e = ident_end(i + 1);
                if e == i + 1 {
                    return None;
                }
                let name = expr.get(i + 1..e)?;
                hops.push((
                    match name.parse() {
                        Ok(n) if name.bytes().all(|c| c.is_ascii_digit()) => Hop::Index(n),
                        _ => Hop::Key(name.to_string()),
                    },
                    e,
                ));
                i = e;
            }
            b'[' => {
                let close = i + expr.get(i..)?.find(']')?;
                let inner = expr.get(i + 1..close)?.trim();
                let hop = if inner.len() >= 2
                    && (inner.starts_with('\'') && inner.ends_with('\'')
                        || inner.starts_with('"') && inner.ends_with('"'))
                {
                    Hop::Key(inner.get(1..inner.len() - 1)?.to_string())
                } else if !inner.is_empty() && inner.bytes().all(|c| c.is_ascii_digit()) {
                    Hop::Index(inner.parse().ok()?)
                } else {
                    return None;
                };
                hops.push((hop, close + 1));
                i = close + 1;
            }
            _ => return None,
        }
    }
    Some(hops)
}

/// `ds.meta_data.foo` -> `foo`, `v1['nope']` -> `nope`.
pub(super) fn last_segment(expr: &str) -> String {
    let t = expr.trim_end_matches([']', '\'', '"']);
    let cut = t.rfind(['.', '[', '\'', '"']).map_or(0, |i| i + 1);
    t.get(cut..).unwrap_or_default().to_string()
}

/// `{{ local-hostname }}` is a subtraction of two undefined names; say what was meant.
pub(super) fn subtraction_hint(expr: &str) -> Option<String> {
    let parts: Vec<&str> = expr.split('-').map(str::trim).collect();
    let ident = |s: &str| {
        let mut cs = s.chars();
        matches!(cs.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
            && cs.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    };
    if parts.len() < 2 || !parts.iter().all(|p| ident(p)) {
        return None;
    }
    Some(format!(
        "Undefined jinja variable: \"{}\". Jinja tried subtraction. Perhaps you meant \"{}\"?",
        parts.join("-"),
        parts.join("_")
    ))
}
