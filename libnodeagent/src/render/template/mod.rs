//! ## template: jinja detection and sandboxed, bounded minijinja rendering.
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
use minijinja::{Environment, ErrorKind, State, UndefinedBehavior};
use serde_json::Value as Json;

use crate::base::error::{Error, Result, Stage};
use crate::base::limits::{
    MAX_RENDERED_BYTES, TEMPLATE_CPU_SECS, TEMPLATE_FUEL, TEMPLATE_MEMORY_BYTES,
};

pub use crate::base::limits::TEMPLATE_RECURSION_LIMIT;

/// State temp holding the number of bytes printed by `{{ }}` so far.
const PRINTED: &str = "nodeagent.printed";
const OUTPUT_TOO_LARGE: &str = "rendered output too large";

/// cloud-init's placeholder prefix for undefined variables (`MISSING_JINJA_PREFIX`).
pub const MISSING_PREFIX: &str = "CI_MISSING_JINJA_VAR/";

mod environment;
mod errors;
mod header;
mod python;
#[cfg(test)]
mod tests;
mod variables;

use environment::*;
use errors::*;
use python::*;

use header::*;
pub use header::{Header, content_type, detect};
pub use python::py_float;
pub use variables::jinja_variables;

/// A rendered userdata and the warnings cloud-init would have logged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rendered {
    pub text: String,
    pub warnings: Vec<String>,
}

/// `userdata line N`, or `userdata` when no line is known.
fn at_line(line: Option<usize>) -> String {
    match line {
        Some(n) => format!("userdata line {n}"),
        None => "userdata".to_string(),
    }
}

/// Render a `## template: jinja` userdata: header line removed, the rest rendered with the
/// instance-data variables. `compat` = cloud-init's CI_MISSING_JINJA_VAR/<name> placeholders.
pub fn render(userdata: &str, instance_data: &Json, compat: bool) -> Result<Rendered> {
    match detect(userdata) {
        Header::Jinja => {}
        Header::NotTemplate => {
            return Err(Error::invalid(
                Stage::Template,
                at_line(Some(1)),
                "not a jinja template: the first line is not `## template: jinja`",
            ));
        }
        Header::LikelyTypo(why) => {
            return Err(Error::invalid(Stage::Template, at_line(Some(1)), why));
        }
    }
    let body = userdata.split_once('\n').map_or("", |(_, rest)| rest);
    render_body(body, instance_data, compat)
}

/// [`render`] in a forked child limited to [`TEMPLATE_MEMORY_BYTES`]: fuel bounds the work
/// and the output cap what is printed, but a string doubled with `~` in a loop (or through
/// macro recursion) grows to gigabytes before either sees it. What the agent runs.
pub fn render_bounded(userdata: &str, instance_data: &Json, compat: bool) -> Result<Rendered> {
    if only_substitutes(userdata) {
        return render(userdata, instance_data, compat);
    }
    render_forked(userdata, instance_data, compat)
}

/// [`render`] in the memory- and CPU-limited child (crate::base::sandbox).
fn render_forked(userdata: &str, instance_data: &Json, compat: bool) -> Result<Rendered> {
    use crate::base::sandbox::{Outcome, run};
    // The result travels as JSON: escaping can at most ~6x a byte; plus the warnings.
    let max_result = 6 * MAX_RENDERED_BYTES + 1024 * 1024;
    match run(TEMPLATE_MEMORY_BYTES, TEMPLATE_CPU_SECS, max_result, || {
        render(userdata, instance_data, compat)
    }) {
        Ok(Outcome::Done(result)) => result,
        Ok(Outcome::OutOfMemory) => Err(Error::too_large(
            Stage::Template,
            at_line(None),
            format!(
                "rendering needed more than {} MiB of memory (TEMPLATE_MEMORY_BYTES); \
                 a value grows without bound (e.g. a string doubled with `~` in a loop)",
                TEMPLATE_MEMORY_BYTES >> 20
            ),
        )),
        Ok(Outcome::OutOfTime) => Err(Error::of(
            crate::base::error::ErrorKind::Timeout,
            Stage::Template,
            at_line(None),
            format!(
                "rendering used more than {TEMPLATE_CPU_SECS} s of CPU time (TEMPLATE_CPU_SECS); \
                 the template does too much work (e.g. a costly filter on a large value, repeated)"
            ),
        )),
        Ok(Outcome::Failed(why)) => Err(Error::internal(
            Stage::Template,
            at_line(None),
            format!("the template renderer failed: {why}"),
        )),
        Err(e) => Err(Error::io(
            Stage::Template,
            at_line(None),
            "cannot start the template renderer",
            e,
        )),
    }
}

/// Whether `userdata` holds no jinja but `{{ name.path }}` substitutions: no statements,
/// comments, filters, operators or calls. Its output is then the text plus printed values,
/// bounded by the input and instance-data caps, so it renders in-process: the forked
/// sandbox (about 0.7 ms a run, most of what the CAPV/CABPK templates would cost) is kept
/// for templates that compute.
fn only_substitutes(userdata: &str) -> bool {
    if userdata.contains("{%") || userdata.contains("{#") {
        return false;
    }
    let mut rest = userdata;
    while let Some((_, after)) = rest.split_once("{{") {
        let Some((inner, tail)) = after.split_once("}}") else {
            return false;
        };
        let inner = inner.strip_prefix('-').unwrap_or(inner);
        let inner = inner.strip_suffix('-').unwrap_or(inner).trim();
        let is_name = |part: &str| {
            part.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if !inner.split('.').all(is_name) {
            return false;
        }
        rest = tail;
    }
    true
}

/// Render a template body (header already removed) with the variables of `instance_data`
/// (converted here: strict mode straight to values, the JSON tree only for an error's text).
fn render_body(body: &str, instance_data: &Json, compat: bool) -> Result<Rendered> {
    // jinja normalises every \r\n and lone \r to \n before lexing (and counts lines that way).
    let source = normalize_newlines(body);
    let env = shared_environment(compat);
    let tmpl = env
        .template_from_str(&source)
        .map_err(|e| syntax_error(&e, body))?;
    let ctx = if compat {
        compat_root(&jinja_variables(instance_data), env)
    } else {
        variables::plain_variables(instance_data)
    };
    let mut out = CappedWriter {
        buf: Vec::new(),
        overflow: false,
    };
    if let Err(e) = tmpl.render_captured_to(ctx, &mut out) {
        let vars = jinja_variables(instance_data);
        return Err(runtime_error(&e, &source, out.overflow, &vars, compat));
    }
    let mut text = String::from_utf8(out.buf).map_err(|_| {
        Error::invalid(
            Stage::Template,
            at_line(None),
            "rendered output is not valid UTF-8",
        )
    })?;
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

/// cloud-init's warning: every `CI_MISSING_JINJA_VAR/` followed by non-whitespace, in order.
fn missing_warning(text: &str) -> Option<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some((_, after)) = rest.split_once(MISSING_PREFIX) {
        let end = after.find(py_space).unwrap_or(after.len());
        let (name, tail) = after.split_at_checked(end).unwrap_or((after, ""));
        if !name.is_empty() {
            names.push(format!("'{name}'"));
            rest = tail;
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
