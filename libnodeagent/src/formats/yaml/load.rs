//! The loader behind [`super::read`]: yaml-rust2's event stream built into [`Node`]s with
//! PyYAML 1.1 resolution, merge keys, `!!binary`, duplicate-key detection and the bounds in
//! `limits` (depth, alias expansions, nodes, expanded bytes). Only `yaml.rs` calls it: the one
//! entry point adds the size bound and names the document.

// Parses untrusted input: no indexing that could panic (str slicing is denied crate-wide).
#![deny(clippy::indexing_slicing)]

use super::resolve::resolve_plain;
use super::{Node, Value};
use crate::base::error::{Error, Result, Stage};
use crate::base::limits;
use yaml_rust2::parser::{Event, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// Load a single-document YAML text. An empty document is `Null`.
pub(super) fn load(text: &str, allow_duplicate_keys: bool) -> Result<Node> {
    let mut docs = load_all(text, allow_duplicate_keys)?;
    match docs.len() {
        0 => Ok(Node {
            value: Value::Null,
            line: 1,
            col: 1,
            plain: None,
            merged: false,
        }),
        1 => Ok(docs.remove(0)),
        _ => {
            let place = docs.get(1).map(Node::place).unwrap_or_default();
            Err(Error::invalid(
                Stage::CloudConfig,
                place,
                "expected a single YAML document, found several",
            ))
        }
    }
}

/// Load every document of a YAML stream (kubeadm configs are multi-document).
pub(super) fn load_all(text: &str, allow_duplicate_keys: bool) -> Result<Vec<Node>> {
    // yaml-rust2 takes NUL as end of input and would silently drop the rest; PyYAML refuses
    // it ("unacceptable character #x0000"), and so do we, naming the place.
    if let Some(at) = text.find('\0') {
        let before = text.get(..at).unwrap_or_default();
        let line = before.matches('\n').count() + 1;
        let col = at - before.rfind('\n').map(|p| p + 1).unwrap_or(0) + 1;
        return Err(Error::invalid(
            Stage::CloudConfig,
            format!("line {line} column {col}"),
            "NUL byte (not allowed in YAML)",
        ));
    }
    let mut builder = Builder::new(allow_duplicate_keys);
    let mut parser = Parser::new_from_str(text);
    loop {
        let (event, mark) = parser.next_token().map_err(|e| {
            let m = e.marker();
            Error::invalid(
                Stage::CloudConfig,
                format!("line {} column {}", m.line(), m.col() + 1),
                e.info().to_string(),
            )
        })?;
        let end = matches!(event, Event::StreamEnd);
        builder.on_event(event, mark);
        if let Some(err) = builder.error.take() {
            return Err(err);
        }
        if end {
            break;
        }
    }
    Ok(builder.docs)
}

enum Frame {
    Seq {
        node: Node,
        anchor: usize,
    },
    Map {
        node: Node,
        anchor: usize,
        pending_key: Option<Node>,
    },
}

struct Builder {
    /// PyYAML keeps the last of duplicate keys silently; they are refused unless allowed.
    allow_duplicate_keys: bool,
    stack: Vec<Frame>,
    docs: Vec<Node>,
    /// Anchored nodes with their size (nodes, bytes), for aliases.
    anchors: std::collections::HashMap<usize, (Node, (usize, usize))>,
    nodes: usize,
    /// Bytes of the document as built, aliases expanded (`node_bytes`): the loader's memory.
    bytes: usize,
    alias_expansions: usize,
    error: Option<Error>,
}

fn err_at(mark: &Marker, msg: impl Into<String>) -> Error {
    Error::invalid(
        Stage::CloudConfig,
        format!("line {} column {}", mark.line(), mark.col() + 1),
        msg,
    )
}

/// `Ok` while `count` is at most `max`; past it a `too-large` error at `mark`, its message
/// made from `max`.
fn within(
    count: usize,
    max: usize,
    mark: &Marker,
    message: impl FnOnce(usize) -> String,
) -> Result<()> {
    if count > max {
        return Err(err_at(mark, message(max)).with_kind(crate::base::error::ErrorKind::TooLarge));
    }
    Ok(())
}

/// Memory one node stands for: the struct and the text it holds (not its children).
fn node_bytes(node: &Node) -> usize {
    std::mem::size_of::<Node>()
        + node.plain.as_ref().map_or(0, String::len)
        + match &node.value {
            Value::Str(s) => s.len(),
            Value::Binary(b) => b.len(),
            _ => 0,
        }
}

/// Nodes and bytes (`node_bytes`) of a whole subtree: what one alias to it adds.
fn measure(node: &Node) -> (usize, usize) {
    let mut total = (1, node_bytes(node));
    let mut add = |n: &Node| {
        let (c, b) = measure(n);
        total.0 += c;
        total.1 += b;
    };
    match &node.value {
        Value::Seq(items) => items.iter().for_each(&mut add),
        Value::Map(entries) => entries.iter().for_each(|(k, v)| {
            add(k);
            add(v)
        }),
        _ => {}
    }
    total
}

impl Builder {
    fn new(allow_duplicate_keys: bool) -> Self {
        Builder {
            allow_duplicate_keys,
            stack: Vec::new(),
            docs: Vec::new(),
            anchors: Default::default(),
            nodes: 0,
            bytes: 0,
            alias_expansions: 0,
            error: None,
        }
    }

    fn on_event(&mut self, event: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        if let Err(e) = self.handle(event, mark) {
            self.error = Some(e);
        }
    }

    fn handle(&mut self, event: Event, mark: Marker) -> Result<()> {
        let at = |value| Node {
            value,
            line: mark.line(),
            col: mark.col() + 1,
            plain: None,
            merged: false,
        };
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                let node = resolve_scalar(text, style, tag.as_ref(), &mark)?;
                self.push_value(node, anchor, &mark)?;
            }
            Event::SequenceStart(anchor, tag) => {
                let node = at(Value::Seq(Vec::new()));
                self.open(Frame::Seq { node, anchor }, tag.as_ref(), &mark)?;
            }
            Event::MappingStart(anchor, tag) => {
                let node = at(Value::Map(Vec::new()));
                let frame = Frame::Map {
                    node,
                    anchor,
                    pending_key: None,
                };
                self.open(frame, tag.as_ref(), &mark)?;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (node, anchor) = match self.stack.pop() {
                    Some(Frame::Seq { node, anchor }) => (node, anchor),
                    Some(Frame::Map { node, anchor, .. }) => (node, anchor),
                    None => return Err(err_at(&mark, "unbalanced collection end")),
                };
                self.push_value(node, anchor, &mark)?;
            }
            Event::Alias(id) => {
                let (node, size) = self
                    .anchors
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| err_at(&mark, "alias to an unknown anchor"))?;
                self.alias_expansions += 1;
                within(
                    self.alias_expansions,
                    limits::MAX_YAML_ALIAS_EXPANSIONS,
                    &mark,
                    |max| format!("more than {max} alias expansions (alias bomb?)"),
                )?;
                // The copy's own node is counted when it is pushed; its subtree here.
                self.add_bytes(size.1.saturating_sub(node_bytes(&node)), &mark)?;
                self.nodes += size.0;
                within(self.nodes, limits::MAX_YAML_NODES, &mark, |max| {
                    format!("document expands to more than {max} nodes")
                })?;
                self.push_value(node, 0, &mark)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Start a collection: its tag checked against its kind, its depth bounded.
    fn open(&mut self, frame: Frame, tag: Option<&Tag>, mark: &Marker) -> Result<()> {
        let kind = match frame {
            Frame::Seq { .. } => "seq",
            Frame::Map { .. } => "map",
        };
        check_collection_tag(tag, kind, mark)?;
        within(self.stack.len() + 1, limits::MAX_YAML_DEPTH, mark, |max| {
            format!("nesting deeper than {max} levels")
        })?;
        self.stack.push(frame);
        Ok(())
    }

    /// Count bytes the document grows by; over `MAX_YAML_EXPANDED_BYTES` it is refused. A few
    /// aliases to a large anchor stay under the node and alias counts but not under this.
    fn add_bytes(&mut self, n: usize, mark: &Marker) -> Result<()> {
        self.bytes = self.bytes.saturating_add(n);
        within(self.bytes, limits::MAX_YAML_EXPANDED_BYTES, mark, |max| {
            format!(
                "document expands to more than {} MiB in memory (MAX_YAML_EXPANDED_BYTES; aliases count as copies)",
                max >> 20
            )
        })
    }

    fn push_value(&mut self, node: Node, anchor: usize, mark: &Marker) -> Result<()> {
        self.add_bytes(node_bytes(&node), mark)?;
        if !matches!(node.value, Value::Seq(_) | Value::Map(_)) {
            self.nodes += 1;
            within(self.nodes, limits::MAX_YAML_NODES, mark, |max| {
                format!("document has more than {max} nodes")
            })?;
        } else {
            self.nodes += 1;
        }
        if anchor > 0 {
            let size = measure(&node);
            self.anchors.insert(anchor, (node.clone(), size));
        }
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some(Frame::Seq { node: seq, .. }) => {
                if let Value::Seq(items) = &mut seq.value {
                    items.push(node);
                }
            }
            Some(Frame::Map {
                node: map,
                pending_key,
                ..
            }) => match pending_key.take() {
                None => {
                    if matches!(node.value, Value::Seq(_) | Value::Map(_)) && node.plain.is_none() {
                        // PyYAML would fail: unhashable key.
                        return Err(Error::invalid(
                            Stage::CloudConfig,
                            node.place(),
                            "a mapping or sequence cannot be a mapping key",
                        ));
                    }
                    *pending_key = Some(node);
                }
                Some(key) => {
                    let allow_dup = self.allow_duplicate_keys;
                    if let Value::Map(entries) = &mut map.value {
                        insert_entry(entries, key, node, allow_dup)?;
                    }
                }
            },
        }
        Ok(())
    }
}

/// Insert one mapping entry, applying YAML merge keys (`<<`) as PyYAML's SafeLoader does.
fn insert_entry(
    entries: &mut Vec<(Node, Node)>,
    key: Node,
    value: Node,
    allow_dup: bool,
) -> Result<()> {
    if key.plain.as_deref() == Some("<<") {
        let sources: Vec<&Node> = match &value.value {
            Value::Map(_) => vec![&value],
            Value::Seq(items) => items.iter().collect(),
            _ => {
                return Err(Error::invalid(
                    Stage::CloudConfig,
                    value.place(),
                    "a merge key (<<) needs a mapping or a list of mappings",
                ));
            }
        };
        for src in sources {
            let Value::Map(src_entries) = &src.value else {
                return Err(Error::invalid(
                    Stage::CloudConfig,
                    src.place(),
                    "a merge key (<<) needs a mapping or a list of mappings",
                ));
            };
            for (k, v) in src_entries {
                if !entries.iter().any(|(ek, _)| ek.key_text() == k.key_text()) {
                    let mut k = k.clone();
                    k.merged = true;
                    entries.push((k, v.clone()));
                }
            }
        }
        return Ok(());
    }
    let text = key.key_text();
    if let Some(pos) = entries.iter().position(|(k, _)| k.key_text() == text) {
        if let Some((first, _)) = entries.get(pos)
            && !allow_dup
            && !first.merged
        {
            return Err(Error::invalid(
                Stage::CloudConfig,
                key.place(),
                format!("duplicate key '{}' (first at line {})", text, first.line),
            ));
        }
        entries.remove(pos);
    }
    entries.push((key, value));
    Ok(())
}

fn check_collection_tag(tag: Option<&Tag>, expect: &str, mark: &Marker) -> Result<()> {
    match tag {
        None => Ok(()),
        Some(t)
            if t.handle == "tag:yaml.org,2002:"
                && (t.suffix == expect || (expect == "map" && t.suffix == "omap")) =>
        {
            Ok(())
        }
        Some(t) if t.handle == "!!" && t.suffix == expect => Ok(()),
        Some(t) => Err(err_at(
            mark,
            format!(
                "unsupported YAML tag {}{} (safe loading only)",
                t.handle, t.suffix
            ),
        )
        .with_kind(crate::base::error::ErrorKind::Unsupported)),
    }
}

fn resolve_scalar(
    text: String,
    style: TScalarStyle,
    tag: Option<&Tag>,
    mark: &Marker,
) -> Result<Node> {
    let mk = |value, plain: Option<String>| Node {
        value,
        line: mark.line(),
        col: mark.col() + 1,
        plain,
        merged: false,
    };
    if let Some(t) = tag {
        let suffix = if t.handle == "!!" || t.handle == "tag:yaml.org,2002:" {
            t.suffix.as_str()
        } else {
            ""
        };
        return match suffix {
            "str" => Ok(mk(Value::Str(text), None)),
            "binary" => {
                // PyYAML uses base64.decodebytes: characters outside the alphabet are skipped.
                let bytes = crate::source::decode::py_b64decode(
                    text.as_bytes(),
                    crate::base::limits::MAX_DECODED_BYTES,
                )
                .map_err(|e| err_at(mark, format!("!!binary value is not base64: {e:?}")))?;
                Ok(mk(Value::Binary(bytes), None))
            }
            "int" | "float" | "bool" | "null" => {
                let v = resolve_plain(&text);
                let ok = matches!(
                    (suffix, &v),
                    ("int", Value::Int(_))
                        | ("float", Value::Float(_))
                        | ("float", Value::Int(_))
                        | ("bool", Value::Bool(_))
                        | ("null", Value::Null)
                );
                if !ok {
                    return Err(err_at(mark, format!("'{text}' is not a valid !!{suffix}")));
                }
                let v = match (suffix, v) {
                    ("float", Value::Int(i)) => Value::Float(i as f64),
                    (_, v) => v,
                };
                Ok(mk(v, Some(text)))
            }
            _ => Err(err_at(
                mark,
                format!(
                    "unsupported YAML tag {}{} (safe loading only)",
                    t.handle, t.suffix
                ),
            )
            .with_kind(crate::base::error::ErrorKind::Unsupported)),
        };
    }
    if style != TScalarStyle::Plain {
        return Ok(mk(Value::Str(text), None));
    }
    let v = resolve_plain(&text);
    Ok(mk(v, Some(text)))
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::string_slice)]
mod tests {
    use super::*;
    use crate::formats::yaml::resolve::resolve_plain;

    fn plain(s: &str) -> Value {
        resolve_plain(s)
    }

    #[test]
    fn yaml11_scalars_resolve_like_pyyaml() {
        // Values from docs/formats.md section 0 (PyYAML 6.0.3 gives the same).
        assert_eq!(plain("0644"), Value::Int(420));
        assert_eq!(plain("644"), Value::Int(644));
        assert_eq!(plain("0o644"), Value::Str("0o644".into()));
        assert_eq!(plain("0x1F"), Value::Int(31));
        assert_eq!(plain("0b101"), Value::Int(5));
        assert_eq!(plain("1_000"), Value::Int(1000));
        assert_eq!(plain("1:20"), Value::Int(80));
        for t in ["yes", "Yes", "YES", "on", "On", "ON", "true"] {
            assert_eq!(plain(t), Value::Bool(true), "{t}");
        }
        for f in ["no", "off", "false", "OFF"] {
            assert_eq!(plain(f), Value::Bool(false), "{f}");
        }
        assert_eq!(plain("y"), Value::Str("y".into()));
        assert_eq!(plain("n"), Value::Str("n".into()));
        assert_eq!(plain("~"), Value::Null);
        assert_eq!(plain("1.5"), Value::Float(1.5));
        assert_eq!(
            plain("1e3"),
            Value::Str("1e3".into()),
            "PyYAML needs a signed exponent"
        );
        assert_eq!(plain("1.0e+3"), Value::Float(1000.0));
        assert_eq!(
            plain("08"),
            Value::Str("08".into()),
            "not octal, not decimal"
        );
        assert_eq!(plain("2024-01-01"), Value::Str("2024-01-01".into()));
        assert_eq!(plain("10.0.0.1"), Value::Str("10.0.0.1".into()));
        assert_eq!(
            plain("00:50:56:aa:bb:cc"),
            Value::Str("00:50:56:aa:bb:cc".into())
        );
    }

    #[test]
    fn quoted_scalars_stay_strings_and_lines_are_kept() {
        let doc = load("a: '0644'\nb: 0644\nc:\n  - yes\n", false).unwrap();
        assert_eq!(doc.get("a").unwrap().value, Value::Str("0644".into()));
        assert_eq!(doc.get("b").unwrap().value, Value::Int(420));
        let c = doc.get("c").unwrap();
        assert_eq!(c.line, 4);
        assert_eq!(c.to_json(), serde_json::json!([true]));
    }

    #[test]
    fn duplicate_keys_are_refused_with_both_lines() {
        let err = load("a: 1\nb: 2\na: 3\n", false).unwrap_err();
        assert!(err.place.contains("line 3"), "{err}");
        assert!(err.message.contains("first at line 1"), "{err}");
        let ok = load("a: 1\na: 3\n", true).unwrap();
        assert_eq!(ok.get("a").unwrap().value, Value::Int(3));
    }

    #[test]
    fn merge_keys_and_binary() {
        let doc = load(
            "base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  y: 3\nbin: !!binary aGk=\n",
            false,
        )
        .unwrap();
        assert_eq!(
            doc.get("d").unwrap().to_json(),
            serde_json::json!({"x": 1, "y": 3})
        );
        assert_eq!(doc.get("bin").unwrap().value, Value::Binary(b"hi".to_vec()));
    }

    #[test]
    fn alias_bomb_and_depth_are_bounded() {
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            bomb.push_str(&format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n", p = i - 1));
        }
        let err = load(&bomb, false).unwrap_err();
        assert_eq!(err.kind(), crate::base::error::ErrorKind::TooLarge, "{err}");
        let deep = "[".repeat(200) + &"]".repeat(200);
        let err = load(&deep, false).unwrap_err();
        assert_eq!(err.kind(), crate::base::error::ErrorKind::TooLarge, "{err}");
        assert!(err.message.contains("nesting deeper"), "{err}");
    }

    #[test]
    fn syntax_errors_name_line_and_column() {
        let err = load("a: b\n  c: d\n", false).unwrap_err();
        assert!(err.place.starts_with("line 2"), "{err}");
    }

    #[test]
    fn nul_bytes_are_refused_not_truncated() {
        let err = load("a: 1\n\0\nb: 2\n", false).unwrap_err();
        assert_eq!(err.place, "line 2 column 1");
    }

    #[test]
    fn unknown_tags_are_refused() {
        let err = load("a: !!python/object:os.system x\n", false).unwrap_err();
        assert_eq!(
            err.kind(),
            crate::base::error::ErrorKind::Unsupported,
            "{err}"
        );
    }
}
