//! The minijinja environment as cloud-init configures jinja2 (docs/formats.md B.2), and the
//! compat-mode values whose missing keys print cloud-init's placeholders (B.5).

use super::*;

/// Environments are immutable once built; build each flavour once per process.
pub(super) fn shared_environment(compat: bool) -> &'static Environment<'static> {
    static ENVS: std::sync::OnceLock<[Environment<'static>; 2]> = std::sync::OnceLock::new();
    &ENVS.get_or_init(|| [environment(false), environment(true)])[usize::from(compat)]
}

/// The environment cloud-init uses, as far as minijinja has the same knobs: trim_blocks on,
/// lstrip_blocks off, no autoescape, `do` (built into minijinja), Python-style printing.
pub(super) fn environment(compat: bool) -> Environment<'static> {
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
        py_str(state, value, &mut s)?;
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
    jinja2_dialect(&mut env, compat);
    env.set_unknown_method_callback(python::methods::call_method);
    env
}

/// jinja2's filters and tests where minijinja's differ or are missing; minijinja-only ones
/// removed, so a template that passes here does not fail on cloud-init.
fn jinja2_dialect(env: &mut Environment<'static>, compat: bool) {
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
    env.add_filter("int", python::filters::int);
    env.add_filter("float", python::filters::float);
    env.add_filter("center", python::filters::center);
    env.add_filter("indent", python::filters::indent);
    env.add_filter("format", python::filters::format);
    env.add_filter("wordcount", python::filters::wordcount);
    env.add_filter("tojson", python::filters::tojson);
    env.add_filter("replace", python::filters::replace);
    env.add_filter("join", python::filters::join);
    env.add_filter(
        "string",
        |state: &State, v: &Value| -> std::result::Result<Value, minijinja::Error> {
            if v.is_undefined() {
                v.get_attr("_")?;
            }
            let mut s = String::new();
            py_str(state, v, &mut s)?;
            python::filters::check_len(s.len())?;
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
}

/// Undefined for jinja's purposes: minijinja's undefined or a compat placeholder.
pub(super) fn is_undef(v: &Value) -> bool {
    v.is_undefined() || v.downcast_object_ref::<Missing>().is_some()
}

/// jinja's `default(value, default_value='', boolean=False)` that also knows placeholders.
pub(super) fn default_filter(
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
pub(super) struct CappedWriter {
    pub(super) buf: Vec<u8>,
    pub(super) overflow: bool,
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

// ---------------------------------------------------------------------------------------
// Compat mode: mappings whose missing keys are cloud-init's placeholder values.

/// A missing variable in compat mode: prints as `CI_MISSING_JINJA_VAR/<name>`, is false,
/// empty and "undefined" for `defined`/`default`, like cloud-init's `UndefinedJinjaVariable`.
/// Attribute access on it yields a real undefined, so an intermediate miss still fails.
#[derive(Debug)]
pub(super) struct Missing(pub(super) String);

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
pub(super) struct CiMap {
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

pub(super) fn compat_value(v: &Json) -> Value {
    match v {
        Json::Object(m) => compat_map(m, Vec::new()),
        Json::Array(a) => Value::from(a.iter().map(compat_value).collect::<Vec<_>>()),
        other => scalar(other),
    }
}

/// The variable tree as plain minijinja values (strict mode): maps keep their order.
pub(super) fn plain_value(v: &Json) -> Value {
    match v {
        Json::Object(m) => Value::from_pairs(m.iter().map(|(k, v)| (k.as_str(), plain_value(v)))),
        Json::Array(a) => Value::from(a.iter().map(plain_value).collect::<Vec<_>>()),
        other => scalar(other),
    }
}

pub(super) fn scalar(v: &Json) -> Value {
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

pub(super) fn compat_map(m: &serde_json::Map<String, Json>, reserved: Vec<String>) -> Value {
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

pub(super) fn compat_root(vars: &Json, env: &Environment<'_>) -> Value {
    let reserved: Vec<String> = env.globals().map(|(k, _)| k.to_string()).collect();
    match vars {
        Json::Object(m) => compat_map(m, reserved),
        _ => compat_map(&serde_json::Map::new(), reserved),
    }
}
