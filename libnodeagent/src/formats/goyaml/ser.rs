//! `Serialize` values into the emitter's tree, the way Go's encoders see them: a struct field
//! that is `None` is left out (Go's `omitempty` on a pointer or slice); a field that must be
//! written even when empty says so by serializing a unit (`null`). Maps keep their keys as
//! text: a non-string scalar key (`1:`, `true:`) comes out as that text, quoted as a string.
//! Floats and integers beyond `i64` are written as their number text ([`Y::Num`]).

use super::Y;
use serde::ser::{self, Serialize};

#[derive(Debug)]
pub struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

/// The tree of a value (`None` at the top is `null`).
pub fn to_y<T: Serialize + ?Sized>(value: &T) -> Result<Y, Error> {
    Ok(value.serialize(Ser)?.unwrap_or(Y::Null))
}

/// A float as YAML reads it back as a float: `.inf`, `.nan`, and a `.0` on whole numbers.
fn float(v: f64) -> Y {
    Y::Num(if v.is_nan() {
        ".nan".into()
    } else if v.is_infinite() {
        (if v > 0.0 { ".inf" } else { "-.inf" }).into()
    } else {
        let t = format!("{v:?}");
        if t.contains(['.', 'e']) {
            t
        } else {
            format!("{t}.0")
        }
    })
}

/// `Ok(None)` is serde's `None`, which a struct field drops; everywhere else it is `null`.
struct Ser;

type Out = Result<Option<Y>, Error>;

fn some(y: Y) -> Out {
    Ok(Some(y))
}

fn tree<T: Serialize + ?Sized>(v: &T) -> Result<Y, Error> {
    to_y(v)
}

/// The serializers of the integer types that fit an `i64` (all but `u64`): a YAML int.
macro_rules! ints {
    ($($name:ident: $t:ty),* $(,)?) => {
        $(fn $name(self, v: $t) -> Out {
            some(Y::Int(i64::from(v)))
        })*
    };
}

impl ser::Serializer for Ser {
    type Ok = Option<Y>;
    type Error = Error;
    type SerializeSeq = Seq;
    type SerializeTuple = Seq;
    type SerializeTupleStruct = Seq;
    type SerializeTupleVariant = Seq;
    type SerializeMap = Map;
    type SerializeStruct = Map;
    type SerializeStructVariant = Map;

    fn serialize_bool(self, v: bool) -> Out {
        some(Y::Bool(v))
    }
    ints! {
        serialize_i8: i8,
        serialize_i16: i16,
        serialize_i32: i32,
        serialize_i64: i64,
        serialize_u8: u8,
        serialize_u16: u16,
        serialize_u32: u32,
    }
    fn serialize_u64(self, v: u64) -> Out {
        some(i64::try_from(v).map_or_else(|_| Y::Num(v.to_string()), Y::Int))
    }
    fn serialize_f32(self, v: f32) -> Out {
        some(float(v.into()))
    }
    fn serialize_f64(self, v: f64) -> Out {
        some(float(v))
    }
    fn serialize_char(self, v: char) -> Out {
        some(Y::Str(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Out {
        some(Y::Str(v.to_string()))
    }
    fn serialize_bytes(self, v: &[u8]) -> Out {
        some(Y::Seq(v.iter().map(|b| Y::Int((*b).into())).collect()))
    }
    fn serialize_none(self) -> Out {
        Ok(None)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Out {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Out {
        some(Y::Null)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Out {
        some(Y::Null)
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Out {
        some(Y::Str(variant.into()))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, v: &T) -> Out {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Out {
        in_variant(tree(v)?, Some(variant))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Seq, Error> {
        Ok(Seq(Vec::with_capacity(len.unwrap_or(0)), None))
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Seq, Error> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Seq, Error> {
        Ok(Seq(Vec::with_capacity(len), Some(variant)))
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Map, Error> {
        Ok(Map::new(len.unwrap_or(0), None))
    }
    fn serialize_struct(self, _: &'static str, len: usize) -> Result<Map, Error> {
        Ok(Map::new(len, None))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Map, Error> {
        Ok(Map::new(len, Some(variant)))
    }
}

/// An enum variant's content is written as a one-key map around it (serde's external tag).
fn in_variant(y: Y, variant: Option<&str>) -> Out {
    some(match variant {
        Some(variant) => Y::Map(vec![(variant.into(), y)]),
        None => y,
    })
}

/// Items, and the enum variant they belong to (written as a one-key map around them).
struct Seq(Vec<Y>, Option<&'static str>);

impl Seq {
    fn push<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        self.0.push(tree(v)?);
        Ok(())
    }
    fn done(self) -> Out {
        in_variant(Y::Seq(self.0), self.1)
    }
}

/// The four sequence-like serde traits all push an item and close the sequence.
macro_rules! seq_like {
    ($($tr:ident :: $add:ident),*) => {$(
        impl ser::$tr for Seq {
            type Ok = Option<Y>;
            type Error = Error;
            fn $add<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
                self.push(v)
            }
            fn end(self) -> Out {
                self.done()
            }
        }
    )*};
}

seq_like!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

/// Entries, the key waiting for its value, and the enum variant they belong to.
struct Map {
    entries: Vec<(String, Y)>,
    key: Option<String>,
    variant: Option<&'static str>,
}

impl Map {
    fn new(len: usize, variant: Option<&'static str>) -> Map {
        Map {
            entries: Vec::with_capacity(len),
            key: None,
            variant,
        }
    }
    /// A struct field: left out when `None`.
    fn field<T: Serialize + ?Sized>(&mut self, key: &str, v: &T) -> Result<(), Error> {
        if let Some(y) = v.serialize(Ser)? {
            self.entries.push((key.into(), y));
        }
        Ok(())
    }
    fn done(self) -> Out {
        in_variant(Y::Map(self.entries), self.variant)
    }
}

/// A map key's text; collections cannot be keys here.
fn key_text(y: Y) -> Result<String, Error> {
    match y {
        Y::Str(s) | Y::Num(s) => Ok(s),
        Y::Int(i) => Ok(i.to_string()),
        Y::Bool(b) => Ok(b.to_string()),
        Y::Null => Ok("null".into()),
        Y::Map(_) | Y::Seq(_) => Err(Error("a map key must be a scalar".into())),
    }
}

impl ser::SerializeMap for Map {
    type Ok = Option<Y>;
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), Error> {
        self.key = Some(key_text(tree(k)?)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), Error> {
        let key = self
            .key
            .take()
            .ok_or_else(|| Error("a map value without its key".into()))?;
        self.entries.push((key, tree(v)?));
        Ok(())
    }
    fn end(self) -> Out {
        self.done()
    }
}

/// A struct and a struct variant both add fields the same way.
macro_rules! struct_like {
    ($($tr:ident),*) => {$(
        impl ser::$tr for Map {
            type Ok = Option<Y>;
            type Error = Error;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                k: &'static str,
                v: &T,
            ) -> Result<(), Error> {
                self.field(k, v)
            }
            fn end(self) -> Out {
                self.done()
            }
        }
    )*};
}

struct_like!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests {
    use super::super::to_string;
    use super::*;
    use std::collections::BTreeMap;

    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Doc {
        name: Option<String>,
        absent: Option<u32>,
        /// A unit is written (`null`), unlike a `None`.
        kept: (),
        empty: Inner,
        big: u64,
        ratio: f64,
    }

    #[derive(serde::Serialize, Default)]
    struct Inner {
        x: Option<bool>,
    }

    #[test]
    fn none_fields_are_left_out_and_units_kept() {
        let d = Doc {
            name: Some("node".into()),
            absent: None,
            kept: (),
            empty: Inner::default(),
            big: u64::MAX,
            ratio: 2.0,
        };
        assert_eq!(
            to_string(&to_y(&d).unwrap()),
            "big: 18446744073709551615\nempty: {}\nkept: null\nname: node\nratio: 2.0\n"
        );
    }

    #[test]
    fn values_keep_their_types_except_non_string_keys() {
        #[derive(serde::Serialize)]
        #[serde(untagged)]
        enum Any {
            I(i64),
            F(f64),
            B(bool),
            N(Option<()>),
            S(&'static str),
        }
        #[derive(serde::Serialize)]
        struct Doc {
            b: Vec<Any>,
            a: BTreeMap<String, String>,
        }
        let b = vec![
            Any::I(1),
            Any::F(1.5),
            Any::F(f64::INFINITY),
            Any::B(true),
            Any::N(None),
            Any::S("x"),
        ];
        let v = Doc {
            b,
            a: BTreeMap::new(),
        };
        assert_eq!(
            to_string(&to_y(&v).unwrap()),
            "a: {}\nb:\n- 1\n- 1.5\n- .inf\n- true\n- null\n- x\n"
        );
        let numbered: BTreeMap<i64, &str> = [(1, "one")].into();
        assert_eq!(to_string(&to_y(&numbered).unwrap()), "\"1\": one\n");
    }

    #[test]
    fn collection_keys_are_refused() {
        let v: BTreeMap<Vec<&str>, &str> = [(vec!["a"], "b")].into();
        assert!(to_y(&v).is_err());
    }
}
