//! jinja2 filters that minijinja lacks or implements differently, with jinja2's semantics
//! (cloud-init users copy templates written for jinja2).

use minijinja::value::{ArgType, Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind, State};

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
    let (neg, t) = match (t.strip_prefix('-'), t.strip_prefix('+')) {
        (Some(rest), _) => (true, rest),
        (None, Some(rest)) => (false, rest),
        (None, None) => (false, t),
    };
    let lower = t.to_ascii_lowercase();
    let prefixed = |p: &str| lower.starts_with(p);
    // The prefixes are ASCII, so byte 2 is a character boundary after any of them.
    let after_prefix = t.get(2..).unwrap_or_default();
    let (base, digits) = match base {
        0 if prefixed("0x") => (16, after_prefix),
        0 if prefixed("0o") => (8, after_prefix),
        0 if prefixed("0b") => (2, after_prefix),
        0 => {
            if t.len() > 1 && t.starts_with('0') && !t.trim_start_matches(['0', '_']).is_empty() {
                return None;
            }
            (10, t)
        }
        16 if prefixed("0x") => (16, after_prefix),
        8 if prefixed("0o") => (8, after_prefix),
        2 if prefixed("0b") => (2, after_prefix),
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
            && !(i > 0 && b[i - 1].is_ascii_digit() && b.get(i + 1).is_some_and(u8::is_ascii_digit))
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

/// A filter argument given by position, else by keyword, else its default.
fn or_kwarg<'a, T>(
    pos: Option<T>,
    kwargs: &'a Kwargs,
    name: &'a str,
    default: T,
) -> Result<T, Error>
where
    Option<T>: ArgType<'a, Output = Option<T>>,
{
    match pos {
        Some(v) => Ok(v),
        None => Ok(kwargs.get::<Option<T>>(name)?.unwrap_or(default)),
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
    let default = or_kwarg(default, &kwargs, "default", Value::from(0))?;
    let base = or_kwarg(base, &kwargs, "base", 10)?;
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
    let default = or_kwarg(default, &kwargs, "default", Value::from(0.0))?;
    kwargs.assert_all_used()?;
    Ok(to_float(value).map(Value::from).unwrap_or(default))
}

/// Refuse a string result longer than the render output cap before building it: a single
/// filter call (`center(10**10)`, `replace` with a long `new`, `join`) could otherwise
/// allocate gigabytes in one step, far ahead of the output check.
pub(in crate::render::template) fn check_len(len: usize) -> Result<(), Error> {
    if len > crate::base::limits::MAX_RENDERED_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "result would be {len} bytes, over the {} MiB render limit",
                crate::base::limits::MAX_RENDERED_BYTES >> 20
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
pub fn center(state: &State, value: &Value, width: Option<usize>) -> Result<Value, Error> {
    reject_undefined(value)?;
    let mut s = String::new();
    super::py_str(state, value, &mut s)?;
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
pub fn join(
    state: &State,
    value: &Value,
    sep: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
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
    super::py_str(state, &sep, &mut sep_s)?;
    let mut out = String::new();
    super::each_item_joined(state, value, &sep_s, &mut out, |item, out| {
        let item = match &attribute {
            Some(path) => path
                .split('.')
                .try_fold(item, |v, a| match a.parse::<usize>() {
                    Ok(n) => v.get_item(&Value::from(n)),
                    Err(_) => v.get_attr(a),
                })?,
            None => item,
        };
        super::py_str(state, &item, out)?;
        check_len(out.len())
    })?;
    Ok(Value::from(out))
}

/// jinja2 `replace(s, old, new, count=None)` on `str()` of each argument.
pub fn replace(
    state: &State,
    value: &Value,
    old: &Value,
    new: &Value,
    count: Option<i64>,
) -> Result<Value, Error> {
    reject_undefined(value)?;
    let (mut s, mut o, mut n) = (String::new(), String::new(), String::new());
    super::py_str(state, value, &mut s)?;
    super::py_str(state, old, &mut o)?;
    super::py_str(state, new, &mut n)?;
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
pub fn wordcount(state: &State, value: &Value) -> Result<Value, Error> {
    reject_undefined(value)?;
    let mut s = String::new();
    super::py_str(state, value, &mut s)?;
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
pub fn tojson(
    state: &State,
    value: &Value,
    indent: Option<usize>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let indent = match indent {
        Some(i) => Some(i),
        None => kwargs.get::<Option<usize>>("indent")?,
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    dump(state, value, indent, 0, &mut out)?;
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

fn dump(
    state: &State,
    v: &Value,
    indent: Option<usize>,
    level: usize,
    out: &mut String,
) -> Result<(), Error> {
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
            let items = super::items(state, v)?;
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
                dump(state, item, indent, level + 1, out)?;
            }
            newline(indent, level, out);
            out.push(']');
        }
        ValueKind::Map => {
            let entries = json_entries(state, v, level)?;
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
                dump(state, val, indent, level + 1, out)?;
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

/// A map's entries as `json.dumps(sort_keys=True)` writes them: keys as JSON text (numbers,
/// booleans and None as their JSON), sorted.
fn json_entries(state: &State, v: &Value, level: usize) -> Result<Vec<(String, Value)>, Error> {
    let mut entries = Vec::new();
    for k in super::items(state, v)? {
        let key = match k.kind() {
            ValueKind::String => k.as_str().unwrap_or_default().to_string(),
            ValueKind::Number | ValueKind::Bool | ValueKind::None => {
                let mut s = String::new();
                dump(state, &k, None, level + 1, &mut s)?;
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
    Ok(entries)
}

/// A JSON string as Python's `json.dumps` writes it (ensure_ascii).
fn json_str(s: &str, out: &mut String) {
    crate::formats::pyjson::python_json_string(s, out)
}

/// minijinja's `indent`, refused first when its result would pass the render cap: it builds
/// width × lines in one string before the output writer's cap could see it.
pub fn indent(
    value: minijinja::value::StringInput<'_>,
    width: Option<usize>,
    first: Option<bool>,
    blank: Option<bool>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let w = match width {
        Some(w) => w,
        None => kwargs.peek::<Option<usize>>("width")?.unwrap_or(4),
    };
    let lines = value.as_str().matches('\n').count() + 1;
    check_len(value.as_str().len().saturating_add(w.saturating_mul(lines)))?;
    minijinja::filters::indent(value, width, first, blank, kwargs)
}

/// Sum of the widths and precisions of a printf format's conversion specs
/// (`%(name)-08.3f`: 8 + 3); numbers in literal text are not counted.
fn spec_widths(fmt: &str) -> usize {
    let mut total = 0usize;
    let mut rest = fmt;
    while let Some(at) = rest.find('%') {
        let mut spec = rest.get(at + 1..).unwrap_or_default();
        if let Some(named) = spec.strip_prefix('(') {
            spec = named.split_once(')').map_or("", |(_, r)| r);
        }
        spec = spec.trim_start_matches(['-', '+', ' ', '#', '0']);
        for part in 0..2 {
            if part == 1 {
                match spec.strip_prefix('.') {
                    Some(r) => spec = r,
                    None => break,
                }
            }
            let end = spec
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(spec.len());
            let (digits, r) = spec.split_at(end);
            total = total.saturating_add(digits.parse::<usize>().unwrap_or(if digits.is_empty() {
                0
            } else {
                usize::MAX
            }));
            spec = r;
        }
        // `%%` is a literal percent sign: skip its second `%`.
        rest = spec.strip_prefix('%').unwrap_or(spec);
    }
    total
}

/// minijinja's printf-style `format`, refused first when its result could pass the render
/// cap: a width or precision (`%999999999d`, `%.*f`) is padding built in one string. The
/// bound counts the format, every argument's text, every number in the format and, for `*`,
/// every integer argument.
pub fn format(
    state: &mut minijinja::State,
    format_str: &Value,
    format_args: minijinja::value::Rest<minijinja::value::ValueOrKwargs>,
) -> Result<Value, Error> {
    use minijinja::value::{ArgType, Rest, ValueOrKwargs};
    let values = format_args.into_values();
    let mut fmt = String::new();
    super::py_str(state, format_str, &mut fmt)?;
    let mut bound = fmt.len();
    for v in &values {
        let mut s = String::new();
        super::py_str(state, v, &mut s)?;
        bound = bound.saturating_add(s.len());
        if fmt.contains('*') {
            let n = v.as_i64().map_or(0, i64::unsigned_abs);
            bound = bound.saturating_add(usize::try_from(n).unwrap_or(usize::MAX));
        }
    }
    bound = bound.saturating_add(spec_widths(&fmt));
    check_len(bound)?;
    let args = values
        .iter()
        .map(|v| ValueOrKwargs::from_value(Some(v)))
        .collect::<Result<Vec<_>, _>>()?;
    minijinja::filters::format(state, format_str, Rest(args))
}
