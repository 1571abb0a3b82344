//! serde's view of a loaded [`Node`], for the typed readers ([`super::deserialize`]).
//!
//! A plain scalar deserialized where a string is expected is the text as written (`off`,
//! `1.30`, `0644`), as Go's typed YAML readers (sigs.k8s.io/yaml with a target) and YAML 1.2
//! readers take it; anywhere else it is the value PyYAML resolves (`deserialize_any`: untyped
//! fields, untagged enums, numbers, booleans). Nothing here allocates more than the node holds:
//! the loader's bounds are the bounds of every typed value.

use super::{Node, Value};
use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

/// serde's error: a message (serde_path_to_error adds the field path).
#[derive(Debug)]
pub struct DeError(String);

impl std::fmt::Display for DeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        DeError(msg.to_string())
    }
}

type Res<T> = std::result::Result<T, DeError>;

/// A node as a serde `Deserializer`.
pub struct NodeDe<'a>(pub &'a Node);

impl NodeDe<'_> {
    /// The text as written of a plain scalar that did not resolve to a string or null.
    fn written(&self) -> Option<&str> {
        match self.0.value {
            Value::Bool(_) | Value::Int(_) | Value::Float(_) => self.0.plain.as_deref(),
            _ => None,
        }
    }

    fn unexpected(&self) -> de::Unexpected<'_> {
        match &self.0.value {
            Value::Null => de::Unexpected::Unit,
            Value::Bool(b) => de::Unexpected::Bool(*b),
            Value::Int(i) => de::Unexpected::Signed(*i),
            Value::Float(f) => de::Unexpected::Float(*f),
            Value::Str(s) => de::Unexpected::Str(s),
            Value::Binary(b) => de::Unexpected::Bytes(b),
            Value::Seq(_) => de::Unexpected::Seq,
            Value::Map(_) => de::Unexpected::Map,
        }
    }
}

impl<'de> de::Deserializer<'de> for NodeDe<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Res<V::Value> {
        match &self.0.value {
            Value::Null => v.visit_unit(),
            Value::Bool(b) => v.visit_bool(*b),
            Value::Int(i) => v.visit_i64(*i),
            Value::Float(f) => v.visit_f64(*f),
            Value::Str(s) => v.visit_str(s),
            // As `Node::to_json` gives it (cloud-init's instance data does the same).
            Value::Binary(b) => {
                use base64::Engine;
                v.visit_string(base64::engine::general_purpose::STANDARD.encode(b))
            }
            Value::Seq(items) => v.visit_seq(Items(items.iter())),
            Value::Map(entries) => v.visit_map(Entries {
                iter: entries.iter(),
                value: None,
            }),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Res<V::Value> {
        match self.written() {
            Some(text) => v.visit_str(text),
            None => self.deserialize_any(v),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Res<V::Value> {
        self.deserialize_str(v)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, v: V) -> Res<V::Value> {
        self.deserialize_str(v)
    }

    fn deserialize_char<V: Visitor<'de>>(self, v: V) -> Res<V::Value> {
        self.deserialize_str(v)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, v: V) -> Res<V::Value> {
        match &self.0.value {
            Value::Binary(b) => v.visit_bytes(b),
            _ => self.deserialize_any(v),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, v: V) -> Res<V::Value> {
        self.deserialize_bytes(v)
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Res<V::Value> {
        match self.0.value {
            Value::Null => v.visit_none(),
            _ => v.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _: &'static str, v: V) -> Res<V::Value> {
        v.visit_newtype_struct(self)
    }

    /// A unit variant is a scalar (`RSA-2048`), any other a mapping of one entry.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        v: V,
    ) -> Res<V::Value> {
        if let Some(text) = self.written() {
            return v.visit_enum(text.into_deserializer());
        }
        match &self.0.value {
            Value::Str(s) => v.visit_enum(s.as_str().into_deserializer()),
            Value::Map(entries) => match entries.as_slice() {
                [(key, value)] => v.visit_enum(Variant { key, value }),
                _ => Err(de::Error::invalid_value(
                    self.unexpected(),
                    &"a mapping with exactly one key",
                )),
            },
            _ => Err(de::Error::invalid_type(self.unexpected(), &v)),
        }
    }

    /// Null is an empty mapping where a mapping or struct is expected (a document of only
    /// comments, `kubeadm: ~`), as serde_yaml and Go's readers take it.
    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Res<V::Value> {
        match self.0.value {
            Value::Null => v.visit_map(Entries {
                iter: [].iter(),
                value: None,
            }),
            _ => self.deserialize_any(v),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        v: V,
    ) -> Res<V::Value> {
        self.deserialize_map(v)
    }

    /// Null is an empty sequence where a sequence is expected, likewise.
    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Res<V::Value> {
        match self.0.value {
            Value::Null => v.visit_seq(Items([].iter())),
            _ => self.deserialize_any(v),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 unit unit_struct tuple
        tuple_struct ignored_any
    }
}

/// The items of a sequence.
struct Items<'a>(std::slice::Iter<'a, Node>);

impl<'de> de::SeqAccess<'de> for Items<'_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Res<Option<T::Value>> {
        self.0
            .next()
            .map(|n| seed.deserialize(NodeDe(n)))
            .transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

/// The entries of a mapping, in document order (merged entries included).
struct Entries<'a> {
    iter: std::slice::Iter<'a, (Node, Node)>,
    value: Option<&'a Node>,
}

impl<'de> de::MapAccess<'de> for Entries<'_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Res<Option<K::Value>> {
        match self.iter.next() {
            Some((k, v)) => {
                self.value = Some(v);
                seed.deserialize(NodeDe(k)).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Res<V::Value> {
        match self.value.take() {
            Some(v) => seed.deserialize(NodeDe(v)),
            None => Err(de::Error::custom("a mapping value without its key")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// `{Variant: value}`.
struct Variant<'a> {
    key: &'a Node,
    value: &'a Node,
}

impl<'de, 'a> de::EnumAccess<'de> for Variant<'a> {
    type Error = DeError;
    type Variant = NodeDe<'a>;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Res<(V::Value, NodeDe<'a>)> {
        let tag = seed.deserialize(NodeDe(self.key))?;
        Ok((tag, NodeDe(self.value)))
    }
}

impl<'de> de::VariantAccess<'de> for NodeDe<'_> {
    type Error = DeError;

    fn unit_variant(self) -> Res<()> {
        match self.0.value {
            Value::Null => Ok(()),
            _ => Err(de::Error::invalid_type(
                self.unexpected(),
                &"a unit variant",
            )),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Res<T::Value> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _: usize, v: V) -> Res<V::Value> {
        de::Deserializer::deserialize_seq(self, v)
    }

    fn struct_variant<V: Visitor<'de>>(self, _: &'static [&'static str], v: V) -> Res<V::Value> {
        de::Deserializer::deserialize_map(self, v)
    }
}
