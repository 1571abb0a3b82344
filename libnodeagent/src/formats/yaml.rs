//! The one way nodeagent reads YAML: every document (userdata, metadata, kubeadm configs,
//! kubeconfigs, OVF properties and seeds, the image config, facts, CAPI Secrets) goes through
//! [`read`] or [`read_all`], with the same bounds: its size ([`MAX_YAML_BYTES`]), nesting depth,
//! alias expansions, node count and bytes in memory (`limits`), so an alias bomb or a deep
//! document fails fast with an error naming the document ([`Doc`]) and the line.
//!
//! Scalars resolve as PyYAML's `safe_load` does (YAML 1.1, what cloud-init reads with):
//! `0644` is 420, `yes` is true, and every node keeps its line and column and, for a plain
//! scalar, its text as written. Typed readers ([`typed`], serde) take a plain scalar as the
//! string written where the field is a string (`mode: off`, `version: 1.30`), as Go's typed
//! YAML readers do; everything else gets the resolved value. `tests/structure-check` keeps the
//! parser (yaml-rust2) out of every other module, and no other YAML reader is a dependency.
//! Writing YAML is `goyaml`'s job.

// Parses untrusted input: no indexing that could panic (str slicing is denied crate-wide).
#![deny(clippy::indexing_slicing)]

mod de;
mod load;
mod resolve;

use crate::base::error::{Error, ErrorKind, Result, Stage};
pub use crate::base::limits::MAX_YAML_BYTES;
use serde_json::Value as Json;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// `!!binary` scalars.
    Binary(Vec<u8>),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    /// 1-based line and column of the node's first character.
    pub line: usize,
    pub col: usize,
    /// The scalar's text as written (plain scalars only), for messages like "644 is decimal".
    pub plain: Option<String>,
    /// Entry copied in by a merge key (`<<`); an explicit key may override it.
    pub merged: bool,
}

impl Node {
    /// Key lookup in a mapping node.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Value::Map(entries) => entries
                .iter()
                .rev()
                .find(|(k, _)| k.key_text() == key)
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The text a mapping key stands for (scalars only; PyYAML keys can be ints or bools).
    pub fn key_text(&self) -> String {
        match &self.value {
            Value::Str(s) => s.clone(),
            Value::Null => "null".into(),
            Value::Bool(b) => if *b { "true" } else { "false" }.into(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => f.to_string(),
            _ => self.plain.clone().unwrap_or_default(),
        }
    }

    /// The string a typed reader sees here: a string's text, or a plain scalar as written
    /// (`kind: 1.30` is `1.30`); `None` for null, collections and binary.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            Value::Bool(_) | Value::Int(_) | Value::Float(_) => self.plain.as_deref(),
            _ => None,
        }
    }

    /// `line L column C`, for error places.
    pub fn place(&self) -> String {
        format!("line {} column {}", self.line, self.col)
    }

    /// Convert to JSON (bytes become base64 strings, as cloud-init's instance data does).
    pub fn to_json(&self) -> Json {
        match &self.value {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::Int(i) => Json::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(Json::Number)
                .unwrap_or(Json::Null),
            Value::Str(s) => Json::String(s.clone()),
            Value::Binary(b) => {
                use base64::Engine;
                Json::String(base64::engine::general_purpose::STANDARD.encode(b))
            }
            Value::Seq(items) => Json::Array(items.iter().map(Node::to_json).collect()),
            Value::Map(entries) => {
                let mut m = serde_json::Map::new();
                for (k, v) in entries {
                    m.insert(k.key_text(), v.to_json());
                }
                Json::Object(m)
            }
        }
    }

    /// Find the node at a serde path (`write_files[2].permissions`), for error lines.
    pub fn locate(&self, path: &serde_path_to_error::Path) -> &Node {
        use serde_path_to_error::Segment;
        let mut node = self;
        for seg in path.iter() {
            let next = match (seg, &node.value) {
                (Segment::Seq { index }, Value::Seq(items)) => items.get(*index),
                (Segment::Map { key }, Value::Map(entries)) => node.get(key).or_else(|| {
                    // A plain key read as written (`yes:` for a field named `yes`).
                    entries
                        .iter()
                        .rev()
                        .find(|(k, _)| k.plain.as_deref() == Some(key.as_str()))
                        .map(|(_, v)| v)
                }),
                _ => None,
            };
            match next {
                Some(n) => node = n,
                None => break,
            }
        }
        node
    }
}

/// What is being read: names the document in every error, the stage it fails in, and how
/// strictly duplicate keys are taken.
#[derive(Debug, Clone, Copy)]
pub struct Doc<'a> {
    /// The document (`/run/kubeadm/kubeadm.yaml`, `guestinfo.ovfEnv: network-config`).
    pub name: &'a str,
    pub stage: Stage,
    /// Keep the last of duplicate keys, as PyYAML does, instead of refusing them.
    pub duplicate_keys: bool,
    /// Places read `userdata line 3 column 1` (the cloud-config form) rather than
    /// `name: line 3 column 1`.
    spaced: bool,
}

impl<'a> Doc<'a> {
    /// A document named `name`, read in `stage`; duplicate keys refused.
    pub fn new(stage: Stage, name: &'a str) -> Self {
        Doc {
            name,
            stage,
            duplicate_keys: false,
            spaced: false,
        }
    }

    /// Duplicate keys allowed (the last one wins) or refused.
    pub fn duplicate_keys(mut self, allowed: bool) -> Self {
        self.duplicate_keys = allowed;
        self
    }

    /// Places joined with a space, as cloud-config errors name them (`userdata line 3`).
    pub fn spaced(mut self) -> Self {
        self.spaced = true;
        self
    }

    /// `at` within this document.
    pub fn place(&self, at: &str) -> String {
        match (self.name.is_empty(), at.is_empty()) {
            (true, _) => at.to_string(),
            (false, true) => self.name.to_string(),
            (false, false) if self.spaced => format!("{} {at}", self.name),
            (false, false) => format!("{}: {at}", self.name),
        }
    }

    fn named(&self, mut e: Error) -> Error {
        e.stage = self.stage;
        e.place = self.place(&e.place);
        e
    }
}

/// One YAML document (an empty text is `Null`); more than one is an error.
pub fn read(doc: Doc, text: &str) -> Result<Node> {
    check_size(doc, text.len())?;
    load::load(text, doc.duplicate_keys).map_err(|e| doc.named(e))
}

/// Every document of a YAML stream (kubeadm configs and Secrets manifests are multi-document).
pub fn read_all(doc: Doc, text: &str) -> Result<Vec<Node>> {
    check_size(doc, text.len())?;
    load::load_all(text, doc.duplicate_keys).map_err(|e| doc.named(e))
}

/// [`read`] of bytes that must be UTF-8.
pub fn read_bytes(doc: Doc, bytes: &[u8]) -> Result<Node> {
    check_size(doc, bytes.len())?;
    let text = std::str::from_utf8(bytes).map_err(|e| {
        Error::invalid(
            doc.stage,
            doc.place(""),
            format!("not UTF-8 (invalid byte at offset {})", e.valid_up_to()),
        )
    })?;
    read(doc, text)
}

/// [`read_bytes`] of what `reader` gives, reading no more than [`MAX_YAML_BYTES`] and one byte
/// (an endless reader is refused, not read to its end).
pub fn read_from(doc: Doc, reader: impl std::io::Read) -> Result<Node> {
    use std::io::Read;
    let mut bytes = Vec::new();
    reader
        .take(MAX_YAML_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(doc.stage, doc.place(""), "cannot read", e))?;
    read_bytes(doc, &bytes)
}

/// A JSON document (metadata may be JSON, read as cloud-init reads it: JSON first), under the
/// same bounds as YAML: its text, its nesting depth and what it would take in memory (each
/// value counted at a node's size, as the YAML loader counts). `None` when the text is not
/// JSON (the caller reads it as YAML); a JSON text over a bound is an error.
pub fn read_json(doc: Doc, text: &str) -> Result<Option<Json>> {
    check_size(doc, text.len())?;
    if !text.trim_start().starts_with(['{', '[']) {
        return Ok(None); // not a JSON object or array: nothing serde_json would take here
    }
    let (values, depth) = json_shape(text);
    let too_large = |what: String| Err(Error::too_large(doc.stage, doc.place(""), what));
    if depth > crate::base::limits::MAX_YAML_DEPTH {
        return too_large(format!(
            "nesting deeper than {} levels",
            crate::base::limits::MAX_YAML_DEPTH
        ));
    }
    let bytes = values
        .saturating_mul(std::mem::size_of::<Node>())
        .saturating_add(text.len());
    if bytes > crate::base::limits::MAX_YAML_EXPANDED_BYTES
        || values > crate::base::limits::MAX_YAML_NODES
    {
        return too_large(format!(
            "document expands to more than {} MiB in memory (MAX_YAML_EXPANDED_BYTES)",
            crate::base::limits::MAX_YAML_EXPANDED_BYTES >> 20
        ));
    }
    Ok(serde_json::from_str(text).ok())
}

/// An upper bound of the values in a JSON text (one per `,` `:` `[` `{` outside strings, and
/// one) and its deepest nesting, in one pass without allocating.
fn json_shape(text: &str) -> (usize, usize) {
    let (mut values, mut depth, mut deepest) = (1usize, 0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                values += 1;
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' | b':' => values += 1,
            _ => {}
        }
    }
    (values, deepest)
}

fn check_size(doc: Doc, len: usize) -> Result<()> {
    if len > MAX_YAML_BYTES {
        return Err(Error::too_large(
            doc.stage,
            doc.place(""),
            format!("YAML text over {MAX_YAML_BYTES} bytes (MAX_YAML_BYTES)"),
        ));
    }
    Ok(())
}

/// Why a node did not deserialize into a type: the field path (`nodeRegistration.name`, `.`
/// for the node itself), where the failing node is, and serde's message.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    pub path: String,
    pub line: usize,
    pub col: usize,
    pub message: String,
}

/// The typed value of `node` (serde, through [`de`]): a plain scalar is its text where a
/// string is expected, the resolved value elsewhere.
pub fn deserialize<T: serde::de::DeserializeOwned>(
    node: &Node,
) -> std::result::Result<T, Mismatch> {
    serde_path_to_error::deserialize(de::NodeDe(node)).map_err(|e| {
        let at = node.locate(e.path());
        Mismatch {
            path: e.path().to_string(),
            line: at.line,
            col: at.col,
            message: e.inner().to_string(),
        }
    })
}

/// [`read`] then [`typed`]: one document as a `T`.
pub fn parse<T: serde::de::DeserializeOwned>(doc: Doc, text: &str) -> Result<T> {
    typed(doc, &read(doc, text)?)
}

/// [`deserialize`], the error naming the document, the field and the line.
pub fn typed<T: serde::de::DeserializeOwned>(doc: Doc, node: &Node) -> Result<T> {
    deserialize(node).map_err(|m| {
        let field = if m.path == "." {
            String::new()
        } else {
            format!("{} ", m.path)
        };
        Error::of(
            ErrorKind::Invalid,
            doc.stage,
            doc.place(&format!("{field}(line {} column {})", m.line, m.col)),
            m.message,
        )
    })
}
