//! ## template: jinja detection and sandboxed, bounded minijinja rendering. Owner: core-tmpl.
//!
//! Reproduces cloud-init's jinja layer for user-data (docs/formats.md B.1-B.5):
//! the header rules, the variable tree with operator aliases, `trim_blocks`, the
//! trailing-newline rule, Python-style printing of values, and (with `compat`) the
//! `CI_MISSING_JINJA_VAR/<name>` placeholders. Deliberate differences from cloud-init:
//! undefined variables and header typos are errors (cloud-init renders placeholders or
//! silently drops the part), and rendering is bounded (fuel, output size, recursion).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use minijinja::value::{Enumerator, Kwargs, Object, ObjectRepr, Value, ValueKind};
use minijinja::{Environment, ErrorKind, UndefinedBehavior};
use serde_json::Value as Json;

use crate::error::{Error, Result, Stage};
use crate::limits::{MAX_RENDERED_BYTES, TEMPLATE_CPU_SECS, TEMPLATE_FUEL, TEMPLATE_MEMORY_BYTES};

pub use crate::limits::TEMPLATE_RECURSION_LIMIT;

/// State temp holding the number of bytes printed by `{{ }}` so far.
const PRINTED: &str = "nodeagent.printed";
const OUTPUT_TOO_LARGE: &str = "rendered output too large";

/// cloud-init's placeholder prefix for undefined variables (`MISSING_JINJA_PREFIX`).
pub const MISSING_PREFIX: &str = "CI_MISSING_JINJA_VAR/";

/// The exact user-data prefix cloud-init matches (after lower-casing and left-stripping).
const JINJA_PREFIX: &str = "## template: jinja";

/// Jinja's operator tokens, longest first (jinja2.lexer `operator_re`); each occurrence in
/// a key becomes one `_` in its alias.
const OPERATORS: [&str; 26] = [
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}",
    ">", "<", "=", ".", ":", "|", ",", ";",
];

/// What the header says about a userdata payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header {
    Jinja,
    NotTemplate,
    /// e.g. `## template:jinja` or `##template: jinja`: a likely typo (the text explains).
    LikelyTypo(String),
}

/// Python's `str.isspace()` (what `lstrip()`, `strip()` and `re`'s `\s` use): Unicode
/// whitespace plus the ASCII separators 0x1c-0x1f that Rust does not count.
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// cloud-init's `detect_template` check (rule 2): `##\s*template:(.*)` matched at the start
/// of the first line, case-insensitively; returns the captured type, lower-cased and stripped.
fn rule2_type(first_line: &str) -> Option<String> {
    let rest = first_line.strip_prefix("##")?;
    let rest = rest.trim_start_matches(py_space);
    let head = rest.get(..9)?;
    if !head.eq_ignore_ascii_case("template:") {
        return None;
    }
    Some(rest[9..].to_lowercase().trim_matches(py_space).to_string())
}

/// The first line as cloud-init's handler sees it (up to the first `\n`).
fn first_line(userdata: &str) -> &str {
    userdata.split('\n').next().unwrap_or("")
}

/// Decide whether a payload is a jinja template: cloud-init rule 1 (user-data prefix,
/// lower-cased, left-stripped) AND rule 2 (the jinja handler's re-check of line 1).
/// Headers that pass only one rule, or look like a template header with a typo, are
/// reported as [`Header::LikelyTypo`]: cloud-init silently ignores such payloads.
pub fn detect(userdata: &str) -> Header {
    let stripped = userdata.trim_start_matches(py_space);
    let rule1 = lower_prefix_matches(stripped, JINJA_PREFIX);
    let line1 = first_line(userdata);
    let rule2 = rule2_type(line1);
    match (rule1, rule2.as_deref()) {
        (true, Some("jinja")) => Header::Jinja,
        (true, Some(other)) => Header::LikelyTypo(format!(
            "first line {:?} asks for template type {other:?}; only `## template: jinja` is supported \
             (cloud-init fails this part with \"Unknown template rendering type\")",
            shorten(line1)
        )),
        (true, None) => Header::LikelyTypo(format!(
            "the `## template: jinja` header must be the very first line, with nothing before it \
             (found {:?} first; cloud-init drops such a part)",
            shorten(line1)
        )),
        (false, Some("jinja")) => Header::LikelyTypo(format!(
            "header {:?} is not exactly `## template: jinja` (one space after `##` and one after the colon); \
             cloud-init does not treat this user-data as a template and silently ignores it",
            shorten(line1.trim_end_matches(py_space))
        )),
        (false, _) => looks_like_header(stripped),
    }
}

/// `text.lower().startswith(prefix)` for an ASCII `prefix`, without lower-casing all of `text`.
fn lower_prefix_matches(text: &str, prefix: &str) -> bool {
    let mut lowered = text.chars().flat_map(char::to_lowercase);
    prefix.chars().all(|p| lowered.next() == Some(p))
}

/// Anything whose first non-blank line (BOM ignored) reads like `#... template ...:` is a
/// header attempt with a typo; everything else is simply not a template.
fn looks_like_header(stripped: &str) -> Header {
    let line = first_line(stripped.trim_start_matches(|c| c == '\u{feff}' || py_space(c)));
    let lower = line.to_lowercase();
    let Some(after_hash) = lower.strip_prefix('#') else {
        return Header::NotTemplate;
    };
    let body = after_hash.trim_start_matches(|c| c == '#' || py_space(c));
    let Some(after_word) = body.strip_prefix("template") else {
        return Header::NotTemplate;
    };
    if !after_word.trim_start_matches(py_space).starts_with(':') {
        return Header::NotTemplate;
    }
    let why = if stripped.starts_with('\u{feff}') {
        "starts with a byte-order mark"
    } else {
        "is not exactly `## template: jinja`"
    };
    Header::LikelyTypo(format!(
        "header {:?} {why}; cloud-init does not treat this user-data as a template and silently ignores it",
        shorten(line.trim_end_matches(py_space))
    ))
}

/// At most 60 characters of a header line for messages.
fn shorten(line: &str) -> String {
    let mut s: String = line.chars().take(60).collect();
    if s.len() < line.len() {
        s.push_str("...");
    }
    s
}

/// A rendered userdata and the warnings cloud-init would have logged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rendered {
    pub text: String,
    pub warnings: Vec<String>,
}

fn err(line: Option<usize>, message: impl Into<String>) -> Error {
    let place = match line {
        Some(n) => format!("userdata line {n}"),
        None => "userdata".to_string(),
    };
    Error::new(Stage::Template, place, message)
}

/// Render a `## template: jinja` userdata: header line removed, the rest rendered with the
/// instance-data variables. `compat` = cloud-init's CI_MISSING_JINJA_VAR/<name> placeholders.
pub fn render(userdata: &str, instance_data: &Json, compat: bool) -> Result<Rendered> {
    match detect(userdata) {
        Header::Jinja => {}
        Header::NotTemplate => {
            return Err(err(
                Some(1),
                "not a jinja template: the first line is not `## template: jinja`",
            ));
        }
        Header::LikelyTypo(why) => return Err(err(Some(1), why)),
    }
    let body = userdata.split_once('\n').map_or("", |(_, rest)| rest);
    render_body(body, &jinja_variables(instance_data), compat)
}

/// [`render`] in a forked child limited to [`TEMPLATE_MEMORY_BYTES`]: fuel bounds the work
/// and the output cap what is printed, but a string doubled with `~` in a loop (or through
/// macro recursion) grows to gigabytes before either sees it. What the agent runs.
pub fn render_bounded(userdata: &str, instance_data: &Json, compat: bool) -> Result<Rendered> {
    use crate::sandbox::{Outcome, run};
    // The result travels as JSON: escaping can at most ~6x a byte; plus the warnings.
    let max_result = 6 * MAX_RENDERED_BYTES + 1024 * 1024;
    match run(TEMPLATE_MEMORY_BYTES, TEMPLATE_CPU_SECS, max_result, || {
        render(userdata, instance_data, compat)
    }) {
        Ok(Outcome::Done(result)) => result,
        Ok(Outcome::OutOfMemory) => Err(err(
            None,
            format!(
                "rendering needed more than {} MiB of memory (TEMPLATE_MEMORY_BYTES); \
                 a value grows without bound (e.g. a string doubled with `~` in a loop)",
                TEMPLATE_MEMORY_BYTES >> 20
            ),
        )),
        Ok(Outcome::OutOfTime) => Err(err(
            None,
            format!(
                "rendering used more than {TEMPLATE_CPU_SECS} s of CPU time (TEMPLATE_CPU_SECS); \
                 the template does too much work (e.g. a costly filter on a large value, repeated)"
            ),
        )),
        Ok(Outcome::Failed(why)) => Err(err(None, format!("the template renderer failed: {why}"))),
        Err(e) => Err(err(
            None,
            format!("cannot start the template renderer: {e}"),
        )),
    }
}

/// Render a template body (header already removed) with an already converted variable tree.
fn render_body(body: &str, vars: &Json, compat: bool) -> Result<Rendered> {
    // jinja normalises every \r\n and lone \r to \n before lexing (and counts lines that way).
    let source = normalize_newlines(body);
    let env = shared_environment(compat);
    let tmpl = env
        .template_from_str(&source)
        .map_err(|e| syntax_error(&e, body))?;
    let ctx = if compat {
        compat_root(vars, env)
    } else {
        plain_value(vars)
    };
    let mut out = CappedWriter {
        buf: Vec::new(),
        overflow: false,
    };
    if let Err(e) = tmpl.render_captured_to(ctx, &mut out) {
        return Err(runtime_error(&e, &source, body, out.overflow, vars, compat));
    }
    let mut text =
        String::from_utf8(out.buf).map_err(|_| err(None, "rendered output is not valid UTF-8"))?;
    // cloud-init: jinja dropped one final \n; put it back iff the body ended with \n.
    if body.ends_with('\n') {
        text.push('\n');
    }
    let warnings = missing_warning(&text)
        .into_iter()
        .chain(subtype_warning(&text))
        .collect();
    Ok(Rendered { text, warnings })
}

fn normalize_newlines(s: &str) -> String {
    if !s.contains('\r') {
        return s.to_string();
    }
    s.replace("\r\n", "\n").replace('\r', "\n")
}

/// Environments are immutable once built; build each flavour once per process.
fn shared_environment(compat: bool) -> &'static Environment<'static> {
    static ENVS: std::sync::OnceLock<[Environment<'static>; 2]> = std::sync::OnceLock::new();
    &ENVS.get_or_init(|| [environment(false), environment(true)])[usize::from(compat)]
}

/// The environment cloud-init uses, as far as minijinja has the same knobs: trim_blocks on,
/// lstrip_blocks off, no autoescape, `do` (built into minijinja), Python-style printing.
fn environment(compat: bool) -> Environment<'static> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(false)
        .keep_trailing_newline(false)
        .build()
        .expect("default delimiters are valid");
    env.set_syntax(syntax);
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    // SemiStrict: printing/iterating/attribute access on undefined fails, `if x` and
    // `x | default(...)` still work. In compat mode missing names are `Missing` objects.
    env.set_undefined_behavior(UndefinedBehavior::SemiStrict);
    env.set_debug(true);
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_recursion_limit(TEMPLATE_RECURSION_LIMIT);
    env.set_formatter(|out, state, value| {
        let mut s = String::new();
        py_str(value, &mut s);
        // Count printed bytes here too, so an oversized render fails with its line
        // (the writer cap below is the backstop for literal text).
        let printed = state
            .get_temp(PRINTED)
            .and_then(|v| v.as_usize())
            .unwrap_or(0)
            + s.len();
        if printed > MAX_RENDERED_BYTES {
            return Err(minijinja::Error::new(
                ErrorKind::WriteFailure,
                OUTPUT_TOO_LARGE,
            ));
        }
        state.set_temp(PRINTED, Value::from(printed));
        out.write_str(&s).map_err(minijinja::Error::from)
    });
    env.add_filter("default", default_filter);
    env.add_filter("d", default_filter);
    env.add_test("defined", |v: &Value| !is_undef(v));
    env.add_test("undefined", |v: &Value| is_undef(v));
    // Keep jinja2's dialect: minijinja-only filters/tests would pass here and fail on
    // cloud-init; jinja2's `divisibleby` test is missing from minijinja.
    for f in ["split", "lines", "bool", "chain", "zip"] {
        env.remove_filter(f);
    }
    for t in ["safe", "int"] {
        env.remove_test(t);
    }
    env.add_test(
        "divisibleby",
        |v: &Value, n: &Value| -> std::result::Result<bool, minijinja::Error> {
            match (v.as_i64(), n.as_i64()) {
                (Some(_), Some(0)) => Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    "integer division or modulo by zero",
                )),
                (Some(a), Some(b)) => Ok(a.rem_euclid(b) == 0),
                _ => Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    "divisibleby needs integers",
                )),
            }
        },
    );
    // `debug()` would dump the whole context; jinja has no such global.
    env.remove_global("debug");
    env.add_filter("int", pyfilters::int);
    env.add_filter("float", pyfilters::float);
    env.add_filter("center", pyfilters::center);
    env.add_filter("wordcount", pyfilters::wordcount);
    env.add_filter("tojson", pyfilters::tojson);
    env.add_filter("replace", pyfilters::replace);
    env.add_filter("join", pyfilters::join);
    env.add_filter(
        "string",
        |v: &Value| -> std::result::Result<Value, minijinja::Error> {
            if v.is_undefined() {
                v.get_attr("_")?;
            }
            let mut s = String::new();
            py_str(v, &mut s);
            pyfilters::check_len(s.len())?;
            Ok(Value::from(s))
        },
    );
    // jinja's sandboxed `attr` uses getattr(), which never finds dict keys.
    env.add_filter(
        "attr",
        move |value: &Value, name: &str| -> std::result::Result<Value, minijinja::Error> {
            if value.is_undefined() {
                value.get_attr(name)?;
            }
            match value.kind() {
                ValueKind::Map if compat => Ok(Value::from_object(Missing(name.to_string()))),
                ValueKind::Map => Ok(Value::UNDEFINED),
                _ => value.get_attr(name),
            }
        },
    );
    env.set_unknown_method_callback(pycompat::call_method);
    env
}

/// Undefined for jinja's purposes: minijinja's undefined or a compat placeholder.
fn is_undef(v: &Value) -> bool {
    v.is_undefined() || v.downcast_object_ref::<Missing>().is_some()
}

/// jinja's `default(value, default_value='', boolean=False)` that also knows placeholders.
fn default_filter(
    value: &Value,
    other: Option<Value>,
    boolean: Option<Value>,
    kwargs: Kwargs,
) -> std::result::Result<Value, minijinja::Error> {
    let other = match other {
        Some(v) => v,
        None => kwargs
            .get::<Option<Value>>("default_value")?
            .unwrap_or_else(|| Value::from("")),
    };
    let boolean = match boolean {
        Some(v) => v.is_true(),
        None => kwargs
            .get::<Option<Value>>("boolean")?
            .is_some_and(|v| v.is_true()),
    };
    kwargs.assert_all_used()?;
    if is_undef(value) || (boolean && !value.is_true()) {
        Ok(other)
    } else {
        Ok(value.clone())
    }
}

/// An `io::Write` that refuses to grow past [`MAX_RENDERED_BYTES`].
struct CappedWriter {
    buf: Vec<u8>,
    overflow: bool,
}

impl std::io::Write for CappedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > MAX_RENDERED_BYTES {
            self.overflow = true;
            return Err(std::io::Error::other("rendered output too large"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// cloud-init's warning: every `CI_MISSING_JINJA_VAR/` followed by non-whitespace, in order.
fn missing_warning(text: &str) -> Option<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(MISSING_PREFIX) {
        let after = &rest[i + MISSING_PREFIX.len()..];
        let end = after.find(py_space).unwrap_or(after.len());
        if end > 0 {
            names.push(format!("'{}'", &after[..end]));
            rest = &after[end..];
        } else {
            rest = after;
        }
    }
    if names.is_empty() {
        None
    } else {
        Some(format!(
            "Could not render jinja template variables in file 'userdata': {}",
            names.join(", ")
        ))
    }
}

/// cloud-init's user-data type prefixes (`handlers.INCLUSION_TYPES_MAP`), matched longest
/// first against the lower-cased, left-stripped text.
const TYPE_PREFIXES: [(&str, &str); 9] = [
    ("#include", "text/x-include-url"),
    ("#include-once", "text/x-include-once-url"),
    ("#!", "text/x-shellscript"),
    ("#cloud-config", "text/cloud-config"),
    ("#part-handler", "text/part-handler"),
    ("#cloud-boothook", "text/cloud-boothook"),
    ("#cloud-config-archive", "text/cloud-config-archive"),
    ("#cloud-config-jsonp", "text/cloud-config-jsonp"),
    (JINJA_PREFIX, "text/jinja2"),
];

/// The MIME type cloud-init infers for a user-data text (`type_from_starts_with`).
pub fn content_type(text: &str) -> Option<&'static str> {
    let stripped = text.trim_start_matches(py_space);
    let mut prefixes = TYPE_PREFIXES;
    prefixes.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    prefixes
        .iter()
        .find(|(p, _)| lower_prefix_matches(stripped, p))
        .map(|(_, t)| *t)
}

/// cloud-init hands a rendered template only to the cloud-config, shell-script and
/// boothook handlers; anything else (or an empty result) is dropped. Say so.
fn subtype_warning(text: &str) -> Option<String> {
    if text.is_empty() {
        return Some("rendered user-data is empty: cloud-init skips this part".into());
    }
    match content_type(text) {
        Some(
            "text/cloud-config"
            | "text/cloud-config-jsonp"
            | "text/x-shellscript"
            | "text/cloud-boothook",
        ) => None,
        other => Some(format!(
            "rendered user-data is of type {}: cloud-init's jinja handler only passes on #cloud-config, \
             #! scripts and #cloud-boothook and ignores this part",
            other.unwrap_or("unknown (no #cloud-config or #! first line)")
        )),
    }
}

/// Python's `str.splitlines()` (what cloud-init uses to quote the failing line).
fn py_splitlines(s: &str) -> Vec<&str> {
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
            lines.push(&s[start..i]);
            let mut next = i + c.len_utf8();
            if c == '\r' && it.peek().map(|&(_, n)| n) == Some('\n') {
                it.next();
                next += 1;
            }
            start = next;
        }
    }
    if start < s.len() {
        lines.push(&s[start..]);
    }
    lines
}

/// cloud-init's syntax error text: `Unable to parse Jinja template due to syntax error:
/// <msg> on line <n>: <text>`, `n` counting the header as line 1, `text` redacted.
fn syntax_message(msg: &str, template_line: usize, body: &str) -> String {
    let text = py_splitlines(body)
        .get(template_line.wrapping_sub(1))
        .map(|l| l.trim_matches(py_space).to_string())
        .unwrap_or_default();
    let text = if text.is_empty() {
        String::new()
    } else {
        format!(": {}", crate::redact::redact_text(&text))
    };
    // minijinja's details can quote template tokens: redact them like the line itself.
    format!(
        "Unable to parse Jinja template due to syntax error: {} on line {}{text}",
        crate::redact::redact_text(msg),
        template_line + 1
    )
}

fn syntax_error(e: &minijinja::Error, body: &str) -> Error {
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
    err(Some(line + 1), syntax_message(msg, line, body))
}

/// Map a render-time error to our error: name the variable and the userdata line.
fn runtime_error(
    e: &minijinja::Error,
    source: &str,
    body: &str,
    overflow: bool,
    vars: &Json,
    compat: bool,
) -> Error {
    let line = e.line();
    let uline = line.map(|l| l + 1);
    if overflow || (e.kind() == ErrorKind::WriteFailure && e.detail() == Some(OUTPUT_TOO_LARGE)) {
        return err(
            uline,
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
            return err(
                uline,
                format!(
                    "template exceeded its budget of {TEMPLATE_FUEL} instructions (an endless or far too long loop?)"
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
            return err(
                Some(l + 1),
                syntax_message(&format!("No {what} named '{name}'."), l, body),
            );
        }
        _ => {}
    }
    if let Some(hint) = subtraction_hint(expr) {
        return err(uline, hint);
    }
    if let Some(var) = undefined_name(detail) {
        // In compat mode a missing name is a placeholder object, so minijinja blames the
        // attribute after it; walk the variable tree to name the first missing hop.
        let var = if compat {
            first_missing(vars, &var).unwrap_or(var)
        } else {
            var
        };
        return err(
            uline,
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
        return err(
            uline,
            format!("undefined variable in {var}: it is not in the instance data"),
        );
    }
    let msg = if detail.is_empty() {
        e.kind().to_string()
    } else {
        format!("{}: {}", e.kind(), crate::redact::redact_text(detail))
    };
    let msg = if expr.is_empty() {
        msg
    } else {
        format!("{msg} (in `{}`)", crate::redact::redact_text(expr))
    };
    err(uline, msg)
}

/// The name inside minijinja's "`ds.meta_data.foo` is undefined" detail.
fn undefined_name(detail: &str) -> Option<String> {
    let start = detail.find('`')?;
    let rest = &detail[start + 1..];
    let end = rest.find("` is undefined")?;
    Some(rest[..end].to_string())
}

/// For a simple path (`a.b['c'].d`, `x[0]`), the prefix up to the first hop that is not in
/// `vars`; `None` if the path is not simple, fully present, or its root is not a variable
/// (it may be a loop/set/macro local, which the tree cannot know about).
fn first_missing(vars: &Json, expr: &str) -> Option<String> {
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
            None => return Some(expr[..stop].to_string()),
        }
    }
    None
}

enum Hop {
    Key(String),
    Index(usize),
}

/// Parse `name(.attr | ['key'] | ["key"] | [digits])*` into hops with their end offsets.
fn parse_path(expr: &str) -> Option<Vec<(Hop, usize)>> {
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
    hops.push((Hop::Key(expr[..i].to_string()), i));
    while i < b.len() {
        match b[i] {
            b'.' => {
                let e = ident_end(i + 1);
                if e == i + 1 {
                    return None;
                }
                let name = &expr[i + 1..e];
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
                let close = i + expr[i..].find(']')?;
                let inner = expr[i + 1..close].trim();
                let hop = if inner.len() >= 2
                    && (inner.starts_with('\'') && inner.ends_with('\'')
                        || inner.starts_with('"') && inner.ends_with('"'))
                {
                    Hop::Key(inner[1..inner.len() - 1].to_string())
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
fn last_segment(expr: &str) -> String {
    let t = expr.trim_end_matches([']', '\'', '"']);
    let cut = t.rfind(['.', '[', '\'', '"']).map_or(0, |i| i + 1);
    t[cut..].to_string()
}

/// `{{ local-hostname }}` is a subtraction of two undefined names; say what was meant.
fn subtraction_hint(expr: &str) -> Option<String> {
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

// ---------------------------------------------------------------------------------------
// Python-style printing: `{{ x }}` is `str(x)` in jinja, so lists and dicts print as
// Python reprs, booleans as True/False, None as None, floats as Python floats.

fn py_str(v: &Value, out: &mut String) {
    if let Some(m) = v.downcast_object_ref::<Missing>() {
        out.push_str(MISSING_PREFIX);
        out.push_str(&m.0);
        return;
    }
    match v.kind() {
        ValueKind::Undefined => {}
        ValueKind::String => out.push_str(v.as_str().unwrap_or_default()),
        _ => py_repr(v, out, 0),
    }
}

fn py_repr(v: &Value, out: &mut String, depth: usize) {
    use std::fmt::Write;
    if depth > 64 {
        out.push_str("...");
        return;
    }
    if v.downcast_object_ref::<Missing>().is_some() {
        out.push_str("Undefined");
        return;
    }
    match v.kind() {
        ValueKind::Undefined => out.push_str("Undefined"),
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number if !v.is_integer() => match f64::try_from(v.clone()) {
            Ok(f) => out.push_str(&py_float(f)),
            Err(_) => {
                let _ = write!(out, "{v}");
            }
        },
        ValueKind::String => py_repr_str(v.as_str().unwrap_or_default(), out),
        // `n * [x]` is a lazy iterable in minijinja; jinja prints the list it is.
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            if let Ok(it) = v.try_iter() {
                for (i, item) in it.enumerate() {
                    // Over the output cap: stop, the caller refuses it (fuzz: printing a
                    // 63M-item `n * [x]` took 12 s before the cap was checked).
                    if out.len() > MAX_RENDERED_BYTES {
                        break;
                    }
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_repr(&item, out, depth + 1);
                }
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(it) = v.try_iter() {
                for (i, key) in it.enumerate() {
                    if out.len() > MAX_RENDERED_BYTES {
                        break;
                    }
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_repr(&key, out, depth + 1);
                    out.push_str(": ");
                    let val = v.get_item(&key).unwrap_or_default();
                    py_repr(&val, out, depth + 1);
                }
            }
            out.push('}');
        }
        _ => {
            let _ = write!(CappedString(out), "{v}");
        }
    }
}

/// A `fmt::Write` that stops (with `fmt::Error`) once the string passes the output cap, so
/// formatting an object that renders to gigabytes ends early; the caller refuses the result.
struct CappedString<'a>(&'a mut String);

impl std::fmt::Write for CappedString<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.0.len() > MAX_RENDERED_BYTES {
            return Err(std::fmt::Error);
        }
        self.0.push_str(s);
        Ok(())
    }
}

/// Python's `repr(str)`: single quotes unless the text has `'` and no `"`.
fn py_repr_str(s: &str, out: &mut String) {
    use std::fmt::Write;
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !py_printable(c) => {
                let n = c as u32;
                let _ = if n < 0x100 {
                    write!(out, "\\x{n:02x}")
                } else if n < 0x10000 {
                    write!(out, "\\u{n:04x}")
                } else {
                    write!(out, "\\U{n:08x}")
                };
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Approximates Python's `str.isprintable()` (controls, separators, format characters).
fn py_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    let n = c as u32;
    !(c.is_control()
        || py_space(c)
        || matches!(n, 0xad | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x180e | 0x200b..=0x200f | 0x202a..=0x202e
            | 0x2060..=0x206f | 0xfeff | 0xfff9..=0xfffb | 0xe000..=0xf8ff | 0xf0000..))
}

/// Python's `repr(float)`: shortest round-trip digits, fixed notation for exponents in
/// [-4, 16), otherwise `1e+16` style; integral values keep `.0`.
pub fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let sci = format!("{f:e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push_str(&format!(
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------
// Compat mode: mappings whose missing keys are cloud-init's placeholder values.

/// A missing variable in compat mode: prints as `CI_MISSING_JINJA_VAR/<name>`, is false,
/// empty and "undefined" for `defined`/`default`, like cloud-init's `UndefinedJinjaVariable`.
/// Attribute access on it yields a real undefined, so an intermediate miss still fails.
#[derive(Debug)]
struct Missing(String);

impl Object for Missing {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Iterable
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Empty
    }
    fn is_true(self: &Arc<Self>) -> bool {
        false
    }
    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{MISSING_PREFIX}{}", self.0)
    }
}

/// A mapping of the variable tree in compat mode. The root also declines names that are
/// jinja globals (`range`, `namespace`...) so they keep working.
#[derive(Debug)]
struct CiMap {
    keys: Vec<Value>,
    values: HashMap<String, Value>,
    reserved: Vec<String>,
}

impl Object for CiMap {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let name = match key.as_str() {
            Some(s) => s.to_string(),
            None => key.to_string(),
        };
        if let Some(v) = self.values.get(&name) {
            return Some(v.clone());
        }
        if self.reserved.contains(&name) {
            return None;
        }
        Some(Value::from_object(Missing(name)))
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Values(self.keys.clone())
    }
    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(self.keys.len())
    }
}

fn compat_value(v: &Json) -> Value {
    match v {
        Json::Object(m) => compat_map(m, Vec::new()),
        Json::Array(a) => Value::from(a.iter().map(compat_value).collect::<Vec<_>>()),
        other => scalar(other),
    }
}

/// The variable tree as plain minijinja values (strict mode): maps keep their order.
fn plain_value(v: &Json) -> Value {
    match v {
        Json::Object(m) => Value::from_pairs(m.iter().map(|(k, v)| (k.as_str(), plain_value(v)))),
        Json::Array(a) => Value::from(a.iter().map(plain_value).collect::<Vec<_>>()),
        other => scalar(other),
    }
}

fn scalar(v: &Json) -> Value {
    match v {
        Json::Null => Value::from(()),
        Json::Bool(b) => Value::from(*b),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Json::String(s) => Value::from(s.as_str()),
        Json::Array(_) | Json::Object(_) => plain_value(v),
    }
}

fn compat_map(m: &serde_json::Map<String, Json>, reserved: Vec<String>) -> Value {
    let keys = m.keys().map(|k| Value::from(k.as_str())).collect();
    let values = m
        .iter()
        .map(|(k, v)| (k.clone(), compat_value(v)))
        .collect();
    Value::from_object(CiMap {
        keys,
        values,
        reserved,
    })
}

fn compat_root(vars: &Json, env: &Environment<'_>) -> Value {
    let reserved: Vec<String> = env.globals().map(|(k, _)| k.to_string()).collect();
    match vars {
        Json::Object(m) => compat_map(m, reserved),
        _ => compat_map(&serde_json::Map::new(), reserved),
    }
}

// ---------------------------------------------------------------------------------------
// Variable tree (cloud-init `convert_jinja_instance_data` with `include_key_aliases=True`).

/// cloud-init's variable tree for templates (B.4): every key kept, operator-character aliases
/// (`local-hostname`→`local_hostname`, MACs, IPs...), `v<digits>` children promoted to the top level,
/// sorted-order collision rule.
pub fn jinja_variables(instance_data: &Json) -> Json {
    match instance_data {
        Json::Object(m) => Json::Object(convert(m)),
        _ => Json::Object(serde_json::Map::new()),
    }
}

fn convert(m: &serde_json::Map<String, Json>) -> serde_json::Map<String, Json> {
    let mut out = serde_json::Map::new();
    let mut keys: Vec<&String> = m.keys().collect();
    // Python sorts str keys by code point; Rust's str order (UTF-8 bytes) is the same.
    keys.sort();
    for key in keys {
        let value = &m[key];
        if let Json::Object(child) = value {
            let converted = convert(child);
            out.insert(key.clone(), Json::Object(converted.clone()));
            if is_version_key(key) {
                for (k, v) in converted {
                    out.insert(k, v);
                }
            }
        } else {
            out.insert(key.clone(), value.clone());
        }
        if let Some(alias) = alias(key) {
            let v = out[key.as_str()].clone();
            out.insert(alias, v);
        }
    }
    out
}

/// `re.match(r"v\d+$", key)`: `$` also matches before one final newline.
fn is_version_key(key: &str) -> bool {
    let k = key.strip_suffix('\n').unwrap_or(key);
    let Some(d) = k.strip_prefix('v') else {
        return false;
    };
    !d.is_empty() && d.chars().all(|c| c.is_ascii_digit())
}

/// The key with every jinja operator token replaced by `_`, if that changes it.
fn alias(key: &str) -> Option<String> {
    const OP_CHARS: &str = "/*=!><+-%~[](){}.:|,;";
    if !key.contains(|c| OP_CHARS.contains(c)) {
        return None;
    }
    let mut out = String::with_capacity(key.len());
    let mut rest = key;
    let mut changed = false;
    'outer: while !rest.is_empty() {
        for op in OPERATORS {
            if let Some(r) = rest.strip_prefix(op) {
                out.push('_');
                rest = r;
                changed = true;
                continue 'outer;
            }
        }
        let c = rest.chars().next().unwrap_or_default();
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    changed.then_some(out)
}

/// Python methods that cloud-init templates call on strings and dicts (`.split('.')`,
/// `.items()`...). Only side-effect-free ones: minijinja values are immutable, so
/// `list.append` / `dict.update` (usually used with `{% do %}`) are not available.
mod pycompat {
    use minijinja::value::{Value, ValueKind};
    use minijinja::{Error, ErrorKind, State};

    fn arg_str(args: &[Value], i: usize) -> Result<Option<String>, Error> {
        match args.get(i) {
            None => Ok(None),
            Some(v) if v.is_none() => Ok(None),
            Some(v) => match v.as_str() {
                Some(s) => Ok(Some(s.to_string())),
                None => Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "expected a string argument",
                )),
            },
        }
    }

    fn arg_int(args: &[Value], i: usize) -> Result<Option<i64>, Error> {
        match args.get(i) {
            None => Ok(None),
            Some(v) => v.as_i64().map(Some).ok_or_else(|| {
                Error::new(ErrorKind::InvalidOperation, "expected an integer argument")
            }),
        }
    }

    fn too_many(args: &[Value], max: usize) -> Result<(), Error> {
        if args.len() > max {
            Err(Error::from(ErrorKind::TooManyArguments))
        } else {
            Ok(())
        }
    }

    fn strip_set(s: &str, chars: &Option<String>, left: bool, right: bool) -> String {
        let pred = |c: char| match chars {
            Some(set) => set.contains(c),
            None => super::py_space(c),
        };
        let mut t = s;
        if left {
            t = t.trim_start_matches(pred);
        }
        if right {
            t = t.trim_end_matches(pred);
        }
        t.to_string()
    }

    fn split(s: &str, sep: Option<String>, max: Option<i64>) -> Result<Vec<Value>, Error> {
        let max = max.filter(|m| *m >= 0).map(|m| m as usize);
        let parts: Vec<String> = match sep {
            Some(sep) if sep.is_empty() => {
                return Err(Error::new(ErrorKind::InvalidOperation, "empty separator"));
            }
            Some(sep) => match max {
                Some(m) => s.splitn(m + 1, sep.as_str()).map(str::to_string).collect(),
                None => s.split(sep.as_str()).map(str::to_string).collect(),
            },
            None => {
                let mut out = Vec::new();
                let mut rest = s.trim_start_matches(super::py_space);
                while !rest.is_empty() {
                    if max.is_some_and(|m| out.len() == m) {
                        out.push(rest.to_string());
                        break;
                    }
                    let end = rest.find(super::py_space).unwrap_or(rest.len());
                    out.push(rest[..end].to_string());
                    rest = rest[end..].trim_start_matches(super::py_space);
                }
                out
            }
        };
        Ok(parts.into_iter().map(Value::from).collect())
    }

    fn str_method(s: &str, name: &str, args: &[Value]) -> Result<Value, Error> {
        Ok(match name {
            "upper" => Value::from(s.to_uppercase()),
            "lower" => Value::from(s.to_lowercase()),
            "strip" | "lstrip" | "rstrip" => {
                too_many(args, 1)?;
                let chars = arg_str(args, 0)?;
                Value::from(strip_set(s, &chars, name != "rstrip", name != "lstrip"))
            }
            "split" => {
                too_many(args, 2)?;
                Value::from(split(s, arg_str(args, 0)?, arg_int(args, 1)?)?)
            }
            "replace" => {
                too_many(args, 3)?;
                let (Some(old), Some(new)) = (arg_str(args, 0)?, arg_str(args, 1)?) else {
                    return Err(Error::from(ErrorKind::MissingArgument));
                };
                let count = arg_int(args, 2)?;
                super::pyfilters::check_len(super::pyfilters::replaced_len(
                    s,
                    &old,
                    &new,
                    count.and_then(|c| usize::try_from(c).ok()),
                ))?;
                match count {
                    Some(n) if n >= 0 => Value::from(s.replacen(old.as_str(), &new, n as usize)),
                    _ => Value::from(s.replace(old.as_str(), &new)),
                }
            }
            "startswith" | "endswith" => {
                too_many(args, 1)?;
                let arg = args
                    .first()
                    .ok_or_else(|| Error::from(ErrorKind::MissingArgument))?;
                let cands: Vec<String> = if let Some(p) = arg.as_str() {
                    vec![p.to_string()]
                } else {
                    arg.try_iter()?
                        .map(|v| v.as_str().unwrap_or_default().to_string())
                        .collect()
                };
                let hit = cands.iter().any(|p| {
                    if name == "startswith" {
                        s.starts_with(p.as_str())
                    } else {
                        s.ends_with(p.as_str())
                    }
                });
                Value::from(hit)
            }
            "join" => {
                too_many(args, 1)?;
                let arg = args
                    .first()
                    .ok_or_else(|| Error::from(ErrorKind::MissingArgument))?;
                let mut out = String::new();
                for (i, v) in arg.try_iter()?.enumerate() {
                    if i > 0 {
                        out.push_str(s);
                    }
                    out.push_str(&v.to_string());
                    super::pyfilters::check_len(out.len())?;
                }
                Value::from(out)
            }
            "find" => {
                too_many(args, 1)?;
                let sub =
                    arg_str(args, 0)?.ok_or_else(|| Error::from(ErrorKind::MissingArgument))?;
                Value::from(
                    s.find(sub.as_str())
                        .map_or(-1, |b| s[..b].chars().count() as i64),
                )
            }
            "count" => {
                too_many(args, 1)?;
                let sub =
                    arg_str(args, 0)?.ok_or_else(|| Error::from(ErrorKind::MissingArgument))?;
                let n = if sub.is_empty() {
                    s.chars().count() + 1
                } else {
                    s.matches(sub.as_str()).count()
                };
                Value::from(n)
            }
            "isdigit" => Value::from(!s.is_empty() && s.chars().all(|c| c.is_ascii_digit())),
            _ => return Err(Error::from(ErrorKind::UnknownMethod)),
        })
    }

    fn map_method(map: &Value, name: &str, args: &[Value]) -> Result<Value, Error> {
        let keys = || map.try_iter();
        Ok(match name {
            "keys" => {
                too_many(args, 0)?;
                Value::from(keys()?.collect::<Vec<_>>())
            }
            "values" => {
                too_many(args, 0)?;
                Value::from(
                    keys()?
                        .map(|k| map.get_item(&k).unwrap_or_default())
                        .collect::<Vec<_>>(),
                )
            }
            "items" => {
                too_many(args, 0)?;
                Value::from(
                    keys()?
                        .map(|k| {
                            let v = map.get_item(&k).unwrap_or_default();
                            Value::from(vec![k, v])
                        })
                        .collect::<Vec<_>>(),
                )
            }
            "get" => {
                too_many(args, 2)?;
                let key = args
                    .first()
                    .ok_or_else(|| Error::from(ErrorKind::MissingArgument))?;
                let present = keys()?.any(|k| &k == key);
                if present {
                    map.get_item(key)?
                } else {
                    args.get(1).cloned().unwrap_or(Value::from(()))
                }
            }
            _ => return Err(Error::from(ErrorKind::UnknownMethod)),
        })
    }

    pub fn call_method(
        _state: &mut State,
        value: &Value,
        name: &str,
        args: &[Value],
    ) -> Result<Value, Error> {
        match value.kind() {
            ValueKind::String => str_method(value.as_str().unwrap_or_default(), name, args),
            ValueKind::Map => map_method(value, name, args),
            _ => Err(Error::from(ErrorKind::UnknownMethod)),
        }
    }
}

/// jinja2 filters that minijinja lacks or implements differently, with jinja2's semantics
/// (cloud-init users copy templates written for jinja2).
mod pyfilters {
    use minijinja::value::{Kwargs, Value, ValueKind};
    use minijinja::{Error, ErrorKind};

    /// A real undefined (not a compat placeholder) is an error naming the variable: asking
    /// minijinja for an attribute of it produces its own "`x` is undefined" error.
    fn reject_undefined(value: &Value) -> Result<(), Error> {
        if value.is_undefined() {
            value.get_attr("_")?;
        }
        Ok(())
    }

    /// Also refuse compat placeholders: jinja's Undefined raises in `int()`/`float()`.
    fn reject_any_undefined(value: &Value) -> Result<(), Error> {
        reject_undefined(value)?;
        match value.downcast_object_ref::<super::Missing>() {
            Some(m) => Err(Error::new(
                ErrorKind::UndefinedError,
                format!("`{}` is undefined", m.0),
            )),
            None => Ok(()),
        }
    }

    /// Python's `int(str, base)`: surrounding whitespace, sign, optional prefix matching the
    /// base (base 0: prefix decides, no leading zeros), `_` between digits.
    fn py_int_str(s: &str, base: u32) -> Option<i128> {
        let t = s.trim_matches(super::py_space);
        let (neg, t) = match t.as_bytes().first() {
            Some(b'-') => (true, &t[1..]),
            Some(b'+') => (false, &t[1..]),
            _ => (false, t),
        };
        let lower = t.to_ascii_lowercase();
        let prefixed = |p: &str| lower.starts_with(p);
        let (base, digits) = match base {
            0 if prefixed("0x") => (16, &t[2..]),
            0 if prefixed("0o") => (8, &t[2..]),
            0 if prefixed("0b") => (2, &t[2..]),
            0 => {
                if t.len() > 1 && t.starts_with('0') && !t.trim_start_matches(['0', '_']).is_empty()
                {
                    return None;
                }
                (10, t)
            }
            16 if prefixed("0x") => (16, &t[2..]),
            8 if prefixed("0o") => (8, &t[2..]),
            2 if prefixed("0b") => (2, &t[2..]),
            2..=36 => (base, t),
            _ => return None,
        };
        let digits = digits
            .strip_prefix('_')
            .filter(|_| t.len() != digits.len())
            .unwrap_or(digits);
        if digits.is_empty()
            || digits.starts_with('_')
            || digits.ends_with('_')
            || digits.contains("__")
        {
            return None;
        }
        let clean: String = digits.chars().filter(|&c| c != '_').collect();
        let v = i128::from_str_radix(&clean, base).ok()?;
        Some(if neg { -v } else { v })
    }

    /// Python's `float(str)`: whitespace, `_` between digits, inf/nan spellings.
    fn py_float_str(s: &str) -> Option<f64> {
        let t = s.trim_matches(super::py_space);
        let b = t.as_bytes();
        for (i, &c) in b.iter().enumerate() {
            if c == b'_'
                && !(i > 0
                    && b[i - 1].is_ascii_digit()
                    && b.get(i + 1).is_some_and(u8::is_ascii_digit))
            {
                return None;
            }
        }
        let clean: String = t.chars().filter(|&c| c != '_').collect();
        let l = clean.to_ascii_lowercase();
        let body = l.trim_start_matches(['+', '-']);
        if !matches!(body, "inf" | "infinity" | "nan")
            && !body
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | '+' | '-'))
        {
            return None;
        }
        clean.parse().ok()
    }

    fn to_float(value: &Value) -> Option<f64> {
        match value.kind() {
            ValueKind::Bool => Some(if value.is_true() { 1.0 } else { 0.0 }),
            ValueKind::Number => f64::try_from(value.clone()).ok(),
            ValueKind::String => py_float_str(value.as_str().unwrap_or_default()),
            _ => None,
        }
    }

    /// jinja2 `int(value, default=0, base=10)`: never fails on bad input, returns the default.
    pub fn int(
        value: &Value,
        default: Option<Value>,
        base: Option<u32>,
        kwargs: Kwargs,
    ) -> Result<Value, Error> {
        reject_any_undefined(value)?;
        let default = match default {
            Some(d) => d,
            None => kwargs
                .get::<Option<Value>>("default")?
                .unwrap_or(Value::from(0)),
        };
        let base = match base {
            Some(b) => b,
            None => kwargs.get::<Option<u32>>("base")?.unwrap_or(10),
        };
        kwargs.assert_all_used()?;
        if value.is_integer() {
            return Ok(value.clone());
        }
        if let Some(s) = value.as_str()
            && let Some(i) = py_int_str(s, base)
        {
            return Ok(Value::from(i));
        }
        match to_float(value) {
            Some(f) if f.is_finite() => Ok(Value::from(f.trunc() as i128)),
            Some(_) => Err(Error::new(
                ErrorKind::InvalidOperation,
                "cannot convert float infinity or NaN to integer",
            )),
            None => Ok(default),
        }
    }

    /// jinja2 `float(value, default=0.0)`.
    pub fn float(value: &Value, default: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
        reject_any_undefined(value)?;
        let default = match default {
            Some(d) => d,
            None => kwargs
                .get::<Option<Value>>("default")?
                .unwrap_or(Value::from(0.0)),
        };
        kwargs.assert_all_used()?;
        Ok(to_float(value).map(Value::from).unwrap_or(default))
    }

    /// Refuse a string result longer than the render output cap before building it: a single
    /// filter call (`center(10**10)`, `replace` with a long `new`, `join`) could otherwise
    /// allocate gigabytes in one step, far ahead of the output check.
    pub(super) fn check_len(len: usize) -> Result<(), Error> {
        if len > crate::limits::MAX_RENDERED_BYTES {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "result would be {len} bytes, over the {} MiB render limit",
                    crate::limits::MAX_RENDERED_BYTES >> 20
                ),
            ));
        }
        Ok(())
    }

    /// Length of `s.replace(old, new)` (`count` replacements at most), without building it.
    pub(super) fn replaced_len(s: &str, old: &str, new: &str, count: Option<usize>) -> usize {
        let occurrences = if old.is_empty() {
            s.chars().count() + 1
        } else {
            s.matches(old).count()
        };
        let n = count.map_or(occurrences, |c| c.min(occurrences));
        (s.len() + n * new.len()).saturating_sub(n * old.len())
    }

    /// Python's `str.center(width)`.
    pub fn center(value: &Value, width: Option<usize>) -> Result<Value, Error> {
        reject_undefined(value)?;
        let mut s = String::new();
        super::py_str(value, &mut s);
        let width = width.unwrap_or(80);
        check_len(width)?;
        let len = s.chars().count();
        if width <= len {
            return Ok(Value::from(s));
        }
        let marg = width - len;
        let left = marg / 2 + (marg & width & 1);
        Ok(Value::from(format!(
            "{}{s}{}",
            " ".repeat(left),
            " ".repeat(marg - left)
        )))
    }

    /// jinja2 `join(value, d='', attribute=None)`: `str()` of each item, so floats, lists
    /// and None print the Python way.
    pub fn join(value: &Value, sep: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
        reject_undefined(value)?;
        let sep = match sep {
            Some(v) => v,
            None => kwargs
                .get::<Option<Value>>("d")?
                .unwrap_or_else(|| Value::from("")),
        };
        let attribute: Option<String> = kwargs.get("attribute")?;
        kwargs.assert_all_used()?;
        let mut sep_s = String::new();
        super::py_str(&sep, &mut sep_s);
        let mut out = String::new();
        for (i, item) in value.try_iter()?.enumerate() {
            if i > 0 {
                out.push_str(&sep_s);
            }
            let item = match &attribute {
                Some(path) => path
                    .split('.')
                    .try_fold(item, |v, a| match a.parse::<usize>() {
                        Ok(n) => v.get_item(&Value::from(n)),
                        Err(_) => v.get_attr(a),
                    })?,
                None => item,
            };
            super::py_str(&item, &mut out);
            check_len(out.len())?;
        }
        Ok(Value::from(out))
    }

    /// jinja2 `replace(s, old, new, count=None)` on `str()` of each argument.
    pub fn replace(
        value: &Value,
        old: &Value,
        new: &Value,
        count: Option<i64>,
    ) -> Result<Value, Error> {
        reject_undefined(value)?;
        let (mut s, mut o, mut n) = (String::new(), String::new(), String::new());
        super::py_str(value, &mut s);
        super::py_str(old, &mut o);
        super::py_str(new, &mut n);
        check_len(replaced_len(
            &s,
            &o,
            &n,
            count.and_then(|c| usize::try_from(c).ok()),
        ))?;
        Ok(Value::from(match count {
            Some(c) if c >= 0 => s.replacen(o.as_str(), &n, c as usize),
            _ => s.replace(o.as_str(), &n),
        }))
    }

    /// jinja2 `wordcount`: number of `\w+` runs.
    pub fn wordcount(value: &Value) -> Result<Value, Error> {
        reject_undefined(value)?;
        let mut s = String::new();
        super::py_str(value, &mut s);
        let mut n = 0;
        let mut in_word = false;
        for c in s.chars() {
            let w = c.is_alphanumeric() || c == '_';
            if w && !in_word {
                n += 1;
            }
            in_word = w;
        }
        Ok(Value::from(n))
    }

    /// jinja2 `tojson`: `json.dumps(value, sort_keys=True)` (ASCII-only output, Python float
    /// and separator style) made HTML-safe by escaping `<`, `>`, `&` and `'`.
    pub fn tojson(value: &Value, indent: Option<usize>, kwargs: Kwargs) -> Result<Value, Error> {
        let indent = match indent {
            Some(i) => Some(i),
            None => kwargs.get::<Option<usize>>("indent")?,
        };
        kwargs.assert_all_used()?;
        let mut out = String::new();
        dump(value, indent, 0, &mut out)?;
        let safe = out
            .replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026")
            .replace('\'', "\\u0027");
        Ok(Value::from_safe_string(safe))
    }

    fn newline(indent: Option<usize>, level: usize, out: &mut String) {
        if let Some(i) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', i * level));
        }
    }

    fn dump(v: &Value, indent: Option<usize>, level: usize, out: &mut String) -> Result<(), Error> {
        if level > 128 {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: value nested too deeply",
            ));
        }
        let item_sep = if indent.is_some() { "," } else { ", " };
        match v.kind() {
            ValueKind::Undefined => {
                reject_undefined(v)?;
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: undefined value is not JSON serializable",
                ));
            }
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
            ValueKind::Number => {
                let f = f64::try_from(v.clone())?;
                out.push_str(&if f.is_nan() {
                    "NaN".to_string()
                } else if f.is_infinite() {
                    if f > 0.0 {
                        "Infinity".into()
                    } else {
                        "-Infinity".into()
                    }
                } else {
                    super::py_float(f)
                });
            }
            ValueKind::String => json_str(v.as_str().unwrap_or_default(), out),
            ValueKind::Seq | ValueKind::Iterable
                if v.downcast_object_ref::<super::Missing>().is_none() =>
            {
                let items: Vec<Value> = v.try_iter()?.collect();
                if items.is_empty() {
                    out.push_str("[]");
                    return Ok(());
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(item_sep);
                    }
                    newline(indent, level + 1, out);
                    dump(item, indent, level + 1, out)?;
                }
                newline(indent, level, out);
                out.push(']');
            }
            ValueKind::Map => {
                let mut entries: Vec<(String, Value)> = Vec::new();
                for k in v.try_iter()? {
                    let key = match k.kind() {
                        ValueKind::String => k.as_str().unwrap_or_default().to_string(),
                        ValueKind::Number | ValueKind::Bool | ValueKind::None => {
                            let mut s = String::new();
                            dump(&k, None, level + 1, &mut s)?;
                            s
                        }
                        _ => {
                            return Err(Error::new(
                                ErrorKind::InvalidOperation,
                                "tojson: keys must be strings",
                            ));
                        }
                    };
                    let val = v.get_item(&k)?;
                    entries.push((key, val));
                }
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                if entries.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                out.push('{');
                for (i, (k, val)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(item_sep);
                    }
                    newline(indent, level + 1, out);
                    json_str(k, out);
                    out.push_str(": ");
                    dump(val, indent, level + 1, out)?;
                }
                newline(indent, level, out);
                out.push('}');
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: a {} value is not JSON serializable", v.kind()),
                ));
            }
        }
        Ok(())
    }

    /// A JSON string as Python's `json.dumps` writes it (ensure_ascii).
    fn json_str(s: &str, out: &mut String) {
        crate::instance::python_json_string(s, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_float_repr() {
        // Values checked against CPython 3.11 `repr(float)`.
        for (f, want) in [
            (1.0, "1.0"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (-0.0, "-0.0"),
            (123456.789, "123456.789"),
            (1.2345678901234568e17, "1.2345678901234568e+17"),
            (f64::INFINITY, "inf"),
            (2.5e-300, "2.5e-300"),
        ] {
            assert_eq!(py_float(f), want, "{f:e}");
        }
    }

    #[test]
    fn python_splitlines() {
        assert_eq!(
            py_splitlines("a\nb\r\nc\rd\u{c}e\u{2028}f\n"),
            ["a", "b", "c", "d", "e", "f"]
        );
        assert_eq!(py_splitlines(""), Vec::<&str>::new());
        assert_eq!(py_splitlines("\n\nx"), ["", "", "x"]);
    }

    #[test]
    fn python_repr_of_strings() {
        let r = |s: &str| {
            let mut o = String::new();
            py_repr_str(s, &mut o);
            o
        };
        assert_eq!(r("it's"), "\"it's\"");
        assert_eq!(r("it's \"x\""), "'it\\'s \"x\"'");
        assert_eq!(r("a\tb\n\\"), "'a\\tb\\n\\\\'");
        assert_eq!(r("\u{7f}\u{a0}é"), "'\\x7f\\xa0é'");
    }

    #[test]
    fn user_data_types() {
        assert_eq!(content_type("#cloud-config\n"), Some("text/cloud-config"));
        assert_eq!(
            content_type("  #Cloud-Config-Archive\n"),
            Some("text/cloud-config-archive")
        );
        assert_eq!(content_type("#!/bin/sh"), Some("text/x-shellscript"));
        assert_eq!(
            content_type("#include-once\nx"),
            Some("text/x-include-once-url")
        );
        assert_eq!(content_type("hello"), None);
    }

    #[test]
    fn operator_aliases() {
        assert_eq!(alias("local-hostname").as_deref(), Some("local_hostname"));
        assert_eq!(alias("a//b").as_deref(), Some("a_b"));
        assert_eq!(alias("a**b==c!=d>=e<=f").as_deref(), Some("a_b_c_d_e_f"));
        assert_eq!(alias("fd8e::1").as_deref(), Some("fd8e__1"));
        assert_eq!(alias("plain_key"), None);
        assert_eq!(alias("sp ace@$!"), None);
        assert!(is_version_key("v1") && is_version_key("v10") && is_version_key("v2\n"));
        assert!(!is_version_key("v") && !is_version_key("v1a") && !is_version_key("xv1"));
    }

    #[test]
    fn path_walk_names_first_missing_hop() {
        let vars = serde_json::json!({"ds": {"meta_data": {"a": [{"b": 1}]}}});
        assert_eq!(
            first_missing(&vars, "ds.meta_data.x.y").as_deref(),
            Some("ds.meta_data.x")
        );
        assert_eq!(
            first_missing(&vars, "ds['meta_data'].a[0].c").as_deref(),
            Some("ds['meta_data'].a[0].c")
        );
        assert_eq!(
            first_missing(&vars, "ds.meta_data.a[3]").as_deref(),
            Some("ds.meta_data.a[3]")
        );
        assert_eq!(first_missing(&vars, "ds.meta_data.a[0].b"), None);
        assert_eq!(first_missing(&vars, "f(x).y"), None);
        assert_eq!(
            first_missing(&vars, "loopvar.x"),
            None,
            "root may be a local"
        );
    }
}
