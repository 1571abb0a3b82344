//! The Python-compatibility runtime: printing as Python's `str`/`repr` (lists, dicts,
//! booleans, floats), the str/dict methods templates call, and jinja2's filters.

use super::*;

pub(super) mod filters;
pub(super) mod methods;

// ---------------------------------------------------------------------------------------
// Python-style printing: `{{ x }}` is `str(x)` in jinja, so lists and dicts print as
// Python reprs, booleans as True/False, None as None, floats as Python floats.

pub(super) fn py_str(
    state: &State,
    v: &Value,
    out: &mut String,
) -> std::result::Result<(), minijinja::Error> {
    if let Some(m) = v.downcast_object_ref::<Missing>() {
        out.push_str(MISSING_PREFIX);
        out.push_str(&m.0);
        return Ok(());
    }
    match v.kind() {
        ValueKind::Undefined => Ok(()),
        ValueKind::String => {
            out.push_str(v.as_str().unwrap_or_default());
            Ok(())
        }
        _ => py_repr(state, v, out, 0),
    }
}

/// Every template value our own code iterates (printing, `join`, `tojson`, the str and
/// dict methods) goes through here: one fuel per item, as minijinja charges its built-in
/// filters since 3.1, so a long lazy `n * [x]` costs its length, not one instruction
/// (fuzz: printing a 63M-item one took 9 s in-process, past the renderer's CPU budget).
pub(super) fn each_item(
    state: &State,
    v: &Value,
    mut f: impl FnMut(Value) -> std::result::Result<(), minijinja::Error>,
) -> std::result::Result<(), minijinja::Error> {
    for item in v.try_iter()? {
        state.consume_fuel(1)?;
        f(item)?;
    }
    Ok(())
}

/// [`each_item`] with `sep` written into `out` between the items (`join`, printing a list).
pub(super) fn each_item_joined(
    state: &State,
    v: &Value,
    sep: &str,
    out: &mut String,
    mut f: impl FnMut(Value, &mut String) -> std::result::Result<(), minijinja::Error>,
) -> std::result::Result<(), minijinja::Error> {
    let mut first = true;
    each_item(state, v, |item| {
        if !std::mem::take(&mut first) {
            out.push_str(sep);
        }
        f(item, out)
    })
}

/// [`each_item`], collected.
pub(super) fn items(state: &State, v: &Value) -> std::result::Result<Vec<Value>, minijinja::Error> {
    let mut all = Vec::new();
    each_item(state, v, |item| {
        all.push(item);
        Ok(())
    })?;
    Ok(all)
}

pub(super) fn py_repr(
    state: &State,
    v: &Value,
    out: &mut String,
    depth: usize,
) -> std::result::Result<(), minijinja::Error> {
    use std::fmt::Write;
    if depth > 64 {
        out.push_str("...");
        return Ok(());
    }
    if v.downcast_object_ref::<Missing>().is_some() {
        out.push_str("Undefined");
        return Ok(());
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
            return py_repr_items(state, out, ('[', ']'), v, |item, out| {
                py_repr(state, item, out, depth + 1)
            });
        }
        ValueKind::Map => {
            return py_repr_items(state, out, ('{', '}'), v, |key, out| {
                py_repr(state, key, out, depth + 1)?;
                out.push_str(": ");
                py_repr(state, &v.get_item(key).unwrap_or_default(), out, depth + 1)
            });
        }
        _ => {
            let _ = write!(CappedString(out), "{v}");
        }
    }
    Ok(())
}

/// Python's `[a, b]` / `{k: v}`: `each` prints an item (or key) of `v` between the brackets.
/// Over the output cap it stops with the formatter's own refusal.
fn py_repr_items(
    state: &State,
    out: &mut String,
    (open, close): (char, char),
    v: &Value,
    mut each: impl FnMut(&Value, &mut String) -> std::result::Result<(), minijinja::Error>,
) -> std::result::Result<(), minijinja::Error> {
    out.push(open);
    each_item_joined(state, v, ", ", out, |item, out| {
        if out.len() > MAX_RENDERED_BYTES {
            return Err(minijinja::Error::new(
                ErrorKind::WriteFailure,
                OUTPUT_TOO_LARGE,
            ));
        }
        each(&item, out)
    })?;
    out.push(close);
    Ok(())
}

/// A `fmt::Write` that stops (with `fmt::Error`) once the string passes the output cap, so
/// formatting an object that renders to gigabytes ends early; the caller refuses the result.
pub(super) struct CappedString<'a>(&'a mut String);

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
pub(super) fn py_repr_str(s: &str, out: &mut String) {
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
pub(super) fn py_printable(c: char) -> bool {
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
                let (int_part, frac_part) = digits.split_at(int_len);
                out.push_str(int_part);
                out.push('.');
                out.push_str(frac_part);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        let (lead, rest) = digits.split_at(digits.len().min(1));
        out.push_str(lead);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        out.push_str(&format!(
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        ));
    }
    out
}
