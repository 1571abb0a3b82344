//! PyYAML's implicit resolvers (YAML 1.1, `yaml/resolver.py`) for plain scalars.

use super::Value;

/// PyYAML's implicit resolvers (YAML 1.1) for a plain scalar.
pub fn resolve_plain(s: &str) -> Value {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Value::Bool(true);
        }
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Value::Bool(false);
        }
        _ => {}
    }
    if let Some(i) = resolve_int(s) {
        return Value::Int(i);
    }
    if let Some(f) = resolve_float(s) {
        return Value::Float(f);
    }
    Value::Str(s.to_string())
}

fn split_sign(s: &str) -> (i64, &str) {
    if let Some(rest) = s.strip_prefix('-') {
        (-1, rest)
    } else {
        (1, s.strip_prefix('+').unwrap_or(s))
    }
}

fn resolve_int(s: &str) -> Option<i64> {
    let (sign, body) = split_sign(s);
    if body.is_empty() {
        return None;
    }
    let digits = |t: &str, radix: u32| -> Option<i64> {
        let cleaned: String = t.chars().filter(|c| *c != '_').collect();
        if cleaned.is_empty() || t.starts_with('_') && cleaned.is_empty() {
            return None;
        }
        i64::from_str_radix(&cleaned, radix).ok()
    };
    let valid = |t: &str, f: fn(char) -> bool| !t.is_empty() && t.chars().all(|c| c == '_' || f(c));
    if let Some(b) = body.strip_prefix("0b") {
        return valid(b, |c| c == '0' || c == '1')
            .then(|| digits(b, 2))
            .flatten()
            .map(|v| sign * v);
    }
    if let Some(h) = body.strip_prefix("0x") {
        return valid(h, |c| c.is_ascii_hexdigit())
            .then(|| digits(h, 16))
            .flatten()
            .map(|v| sign * v);
    }
    if body == "0" {
        return Some(0);
    }
    if let Some(o) = body.strip_prefix('0') {
        return valid(o, |c| ('0'..='7').contains(&c))
            .then(|| digits(o, 8))
            .flatten()
            .map(|v| sign * v);
    }
    let first = body.chars().next()?;
    if !('1'..='9').contains(&first) {
        return None;
    }
    if body.contains(':') {
        // Sexagesimal: 1:20 == 80. Each part after the first is [0-5]?[0-9].
        let mut parts = body.split(':');
        let head = parts.next()?;
        if !valid(head, |c| c.is_ascii_digit()) {
            return None;
        }
        let mut value = digits(head, 10)?;
        for p in parts {
            if p.is_empty()
                || p.len() > 2
                || !p.chars().all(|c| c.is_ascii_digit())
                || (p.len() == 2 && p.as_bytes().first().is_some_and(|&d| d > b'5'))
            {
                return None;
            }
            value = value.checked_mul(60)?.checked_add(p.parse::<i64>().ok()?)?;
        }
        return Some(sign * value);
    }
    valid(body, |c| c.is_ascii_digit())
        .then(|| digits(body, 10))
        .flatten()
        .map(|v| sign * v)
}

fn resolve_float(s: &str) -> Option<f64> {
    let (sign, body) = split_sign(s);
    match body {
        ".inf" | ".Inf" | ".INF" => return Some(sign as f64 * f64::INFINITY),
        _ => {}
    }
    if matches!(s, ".nan" | ".NaN" | ".NAN") {
        return Some(f64::NAN);
    }
    // [0-9][0-9_]*(\.[0-9_]*)?([eE][-+][0-9]+)?  or  \.[0-9_]+([eE][-+][0-9]+)?
    let cleaned: String = body.chars().filter(|c| *c != '_').collect();
    let (mantissa, exp) = match cleaned.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (cleaned.as_str(), None),
    };
    if let Some(e) = exp {
        let digits = e.strip_prefix(['+', '-']);
        if !digits.is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit())) {
            return None;
        }
    }
    let has_dot = mantissa.contains('.');
    if !has_dot && exp.is_none() {
        return None;
    }
    let mut parts = mantissa.splitn(2, '.');
    let int_part = parts.next().unwrap_or("");
    let frac = parts.next().unwrap_or("");
    if !int_part.chars().all(|c| c.is_ascii_digit()) || !frac.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if int_part.is_empty() && frac.is_empty() {
        return None;
    }
    if body.starts_with('_') {
        return None;
    }
    let text = format!("{}{}", if sign < 0 { "-" } else { "" }, cleaned);
    text.parse::<f64>().ok()
}
