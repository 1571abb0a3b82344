//! Python methods that cloud-init templates call on strings and dicts (`.split('.')`,
//! `.items()`...). Only side-effect-free ones: minijinja values are immutable, so
//! `list.append` / `dict.update` (usually used with `{% do %}`) are not available.

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
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "expected an integer argument")),
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
                let (word, after) = rest.split_at(rest.find(super::py_space).unwrap_or(rest.len()));
                out.push(word.to_string());
                rest = after.trim_start_matches(super::py_space);
            }
            out
        }
    };
    Ok(parts.into_iter().map(Value::from).collect())
}

fn str_method(state: &State, s: &str, name: &str, args: &[Value]) -> Result<Value, Error> {
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
            super::filters::check_len(super::filters::replaced_len(
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
                super::items(state, arg)?
                    .iter()
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
            super::each_item_joined(state, arg, s, &mut out, |v, out| {
                out.push_str(&v.to_string());
                super::filters::check_len(out.len())
            })?;
            Value::from(out)
        }
        "find" => {
            too_many(args, 1)?;
            let sub = arg_str(args, 0)?.ok_or_else(|| Error::from(ErrorKind::MissingArgument))?;
            Value::from(s.find(sub.as_str()).map_or(-1, |b| {
                s.get(..b).map_or(0, |head| head.chars().count()) as i64
            }))
        }
        "count" => {
            too_many(args, 1)?;
            let sub = arg_str(args, 0)?.ok_or_else(|| Error::from(ErrorKind::MissingArgument))?;
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

fn map_method(state: &State, map: &Value, name: &str, args: &[Value]) -> Result<Value, Error> {
    let keys = || super::items(state, map).map(Vec::into_iter);
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
    state: &mut State,
    value: &Value,
    name: &str,
    args: &[Value],
) -> Result<Value, Error> {
    match value.kind() {
        ValueKind::String => str_method(state, value.as_str().unwrap_or_default(), name, args),
        ValueKind::Map => map_method(state, value, name, args),
        _ => Err(Error::from(ErrorKind::UnknownMethod)),
    }
}
