//! JSON text out: every result and the plan hash's canonical JSON, written by a
//! serializer of our own that writes what serde_json's compact serializer writes, byte
//! for byte, and can check as it writes that a value is canonical (RFC 8785) as it
//! stands (`canonical.rs`).
//!
//! serde_json's serializer writes strings a byte at a time (`escape.rs` says why that
//! was slow and writes them eight bytes at a time instead); here they go into a buffer
//! of our own that the sink is handed in chunks. `writer::tests` hold it to serde_json's
//! text and to the RFC 8785 reference implementation.

use std::fmt::{self, Display};
use std::io::{self, Write};

use serde::Serialize;
use serde::ser::{self, Impossible};

use crate::error::{Error, ErrorCode};

use super::canonical::{Canonical, Check, NotCanonical, Plain};
use super::escape::{push_contents, push_string};

/// How much is gathered before the sink is given it: each piece costs a sink that is an
/// import (the result, the host's SHA-256) a call, and a string of a few bytes written
/// to a buffer costs a few instructions.
pub(crate) const CHUNK: usize = 64 << 10;

/// Writes `value` as compact JSON, the text `serde_json::to_writer` writes, to `sink`
/// in pieces of about [`CHUNK`].
pub(crate) fn to_writer<T: Serialize + ?Sized>(sink: impl Write, value: &T) -> Result<(), WriteError> {
    let mut serializer = Serializer { out: Out::new(sink), check: Plain };
    value.serialize(&mut serializer)?;
    Ok(serializer.out.flush()?)
}

/// [`to_writer`] into a string.
pub(crate) fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, WriteError> {
    let mut out = Vec::new();
    to_writer(&mut out, value)?;
    String::from_utf8(out).map_err(|_| WriteError::Message("the JSON written is not UTF-8".to_owned()))
}

/// Writes `value` as JSON text to `out`; a failure is the planner's `INTERNAL` error
/// that names `what`.
pub(crate) fn write_json(out: impl Write, value: &impl Serialize, what: &str) -> Result<(), Error> {
    to_writer(out, value)
        .map_err(|error| Error::new(ErrorCode::Internal, format!("the {what} cannot be written: {error}")))
}

/// Writes `value` to `sink` if it serializes as canonical JSON as it is (every object's
/// members in order, no number that JCS writes otherwise than serde_json does), and
/// says whether it did; what it wrote otherwise is garbage.
pub(crate) fn to_writer_if_canonical<T: Serialize + ?Sized>(sink: impl Write, value: &T) -> Result<bool, WriteError> {
    let mut serializer = Serializer { out: Out::new(sink), check: Canonical::default() };
    match value.serialize(&mut serializer) {
        Ok(()) => Ok(serializer.out.flush().map(|()| true)?),
        Err(WriteError::NotCanonical) => Ok(false),
        Err(error) => Err(error),
    }
}

/// Why a value was not written.
#[derive(Debug)]
pub(crate) enum WriteError {
    Io(io::Error),
    /// The value is not canonical JSON as it stands (only when that was asked).
    NotCanonical,
    /// The value could not be serialized (its own `Serialize` said so, or a map key is
    /// not a string, an integer or a boolean).
    Message(String),
}

impl Display for WriteError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::Io(error) => error.fmt(formatter),
            WriteError::NotCanonical => formatter.write_str("the value is not canonical JSON as it stands"),
            WriteError::Message(message) => formatter.write_str(message),
        }
    }
}

impl std::error::Error for WriteError {}

impl ser::Error for WriteError {
    fn custom<T: Display>(message: T) -> Self {
        WriteError::Message(message.to_string())
    }
}

impl From<io::Error> for WriteError {
    fn from(error: io::Error) -> Self {
        WriteError::Io(error)
    }
}

impl From<NotCanonical> for WriteError {
    fn from(_: NotCanonical) -> Self {
        WriteError::NotCanonical
    }
}

struct Serializer<W, C> {
    out: Out<W>,
    check: C,
}

/// What is written, gathered in a buffer and handed to the sink a [`CHUNK`] at a time.
struct Out<W> {
    buffer: Vec<u8>,
    sink: W,
}

impl<W: Write> Out<W> {
    /// The buffer grows to a chunk as it is written: most values written are small.
    fn new(sink: W) -> Out<W> {
        Out { buffer: Vec::new(), sink }
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    fn byte(&mut self, byte: u8) {
        self.buffer.push(byte);
    }

    fn string(&mut self, text: &str) {
        push_string(&mut self.buffer, text);
    }

    /// Hands the sink what is gathered, once that is a chunk: called after each element
    /// and member, so only a single string longer than a chunk makes the buffer grow.
    fn spill(&mut self) -> io::Result<()> {
        if self.buffer.len() >= CHUNK { self.flush() } else { Ok(()) }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sink.write_all(&self.buffer)?;
        self.buffer.clear();
        self.sink.flush()
    }
}

impl<W: Write, C: Check> Serializer<W, C> {
    fn integer(&mut self, magnitude: u128, text: &str) -> Result<(), WriteError> {
        self.check.integer(magnitude)?;
        self.out.bytes(text.as_bytes());
        Ok(())
    }

    /// Rare in a plan: serde_json's own formatting (ryu's shortest digits of the float's
    /// own width; `null` when not finite).
    fn float(&mut self, value: impl Serialize) -> Result<(), WriteError> {
        self.check.fraction()?;
        serde_json::to_writer(&mut self.out.buffer, &value).map_err(|error| WriteError::Message(error.to_string()))
    }

    /// Opens an object of one member, `name` (an enum's variant with data).
    fn open_variant(&mut self, name: &str) -> Result<(), WriteError> {
        self.out.byte(b'{');
        self.check.begin_object();
        self.check.name(name, true)?;
        self.out.string(name);
        self.out.byte(b':');
        Ok(())
    }

    fn close_variant(&mut self) {
        self.check.end_object();
        self.out.byte(b'}');
    }

    fn open(&mut self, bracket: u8, in_variant: bool) -> Compound<'_, W, C> {
        self.out.byte(bracket);
        Compound { serializer: self, first: true, in_variant }
    }

    fn open_object(&mut self, in_variant: bool) -> Compound<'_, W, C> {
        self.check.begin_object();
        self.open(b'{', in_variant)
    }
}

/// Writes integers of each width through their decimal text.
macro_rules! integers {
    ($($method:ident: $type:ty),*) => {
        $(fn $method(self, value: $type) -> Result<(), WriteError> {
            self.integer(value.magnitude(), itoa::Buffer::new().format(value))
        })*
    };
}

/// The magnitude of an integer of any width, for [`Check::integer`].
trait Magnitude {
    fn magnitude(self) -> u128;
}

macro_rules! magnitudes {
    (signed: $($signed:ty),*; unsigned: $($unsigned:ty),*) => {
        $(impl Magnitude for $signed {
            fn magnitude(self) -> u128 {
                self.unsigned_abs().into()
            }
        })*
        $(impl Magnitude for $unsigned {
            fn magnitude(self) -> u128 {
                self.into()
            }
        })*
    };
}

magnitudes!(signed: i8, i16, i32, i64, i128; unsigned: u8, u16, u32, u64, u128);

impl<'a, W: Write, C: Check> ser::Serializer for &'a mut Serializer<W, C> {
    type Ok = ();
    type Error = WriteError;
    type SerializeSeq = Compound<'a, W, C>;
    type SerializeTuple = Compound<'a, W, C>;
    type SerializeTupleStruct = Compound<'a, W, C>;
    type SerializeTupleVariant = Compound<'a, W, C>;
    type SerializeMap = Compound<'a, W, C>;
    type SerializeStruct = Compound<'a, W, C>;
    type SerializeStructVariant = Compound<'a, W, C>;

    fn serialize_bool(self, value: bool) -> Result<(), WriteError> {
        self.out.bytes(if value { b"true" } else { b"false" });
        Ok(())
    }

    integers!(
        serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64, serialize_i128: i128,
        serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64, serialize_u128: u128
    );

    fn serialize_f32(self, value: f32) -> Result<(), WriteError> {
        self.float(value)
    }

    fn serialize_f64(self, value: f64) -> Result<(), WriteError> {
        self.float(value)
    }

    fn serialize_char(self, value: char) -> Result<(), WriteError> {
        self.serialize_str(value.encode_utf8(&mut [0; 4]))
    }

    fn serialize_str(self, value: &str) -> Result<(), WriteError> {
        self.out.string(value);
        Ok(())
    }

    fn serialize_bytes(self, value: &[u8]) -> Result<(), WriteError> {
        ser::Serializer::collect_seq(self, value)
    }

    fn serialize_none(self) -> Result<(), WriteError> {
        self.serialize_unit()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), WriteError> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), WriteError> {
        self.out.bytes(b"null");
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), WriteError> {
        self.serialize_unit()
    }

    fn serialize_unit_variant(self, _name: &'static str, _index: u32, variant: &'static str) -> Result<(), WriteError> {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _name: &'static str, value: &T) -> Result<(), WriteError> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), WriteError> {
        self.open_variant(variant)?;
        value.serialize(&mut *self)?;
        self.close_variant();
        Ok(())
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'a, W, C>, WriteError> {
        Ok(self.open(b'[', false))
    }

    fn serialize_tuple(self, len: usize) -> Result<Compound<'a, W, C>, WriteError> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<Compound<'a, W, C>, WriteError> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'a, W, C>, WriteError> {
        self.open_variant(variant)?;
        Ok(self.open(b'[', true))
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'a, W, C>, WriteError> {
        Ok(self.open_object(false))
    }

    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Compound<'a, W, C>, WriteError> {
        Ok(self.open_object(false))
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'a, W, C>, WriteError> {
        self.open_variant(variant)?;
        Ok(self.open_object(true))
    }

    /// Written as it is formatted, escaped piece by piece, never held apart.
    fn collect_str<T: Display + ?Sized>(self, value: &T) -> Result<(), WriteError> {
        /// Formatted text appended as a JSON string's contents.
        struct Escaped<'a>(&'a mut Vec<u8>);
        impl fmt::Write for Escaped<'_> {
            fn write_str(&mut self, text: &str) -> fmt::Result {
                push_contents(self.0, text.as_bytes());
                Ok(())
            }
        }
        self.out.byte(b'"');
        fmt::write(&mut Escaped(&mut self.out.buffer), format_args!("{value}"))
            .map_err(|_| WriteError::Message("a value could not be formatted".to_owned()))?;
        self.out.byte(b'"');
        Ok(())
    }
}

/// An array or object being written.
struct Compound<'a, W, C> {
    serializer: &'a mut Serializer<W, C>,
    first: bool,
    /// Inside the one-member object of an enum's variant, which is closed too.
    in_variant: bool,
}

impl<W: Write, C: Check> Compound<'_, W, C> {
    fn separate(&mut self) {
        if !std::mem::take(&mut self.first) {
            self.serializer.out.byte(b',');
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), WriteError> {
        self.separate();
        value.serialize(&mut *self.serializer)?;
        Ok(self.serializer.out.spill()?)
    }

    fn member<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> Result<(), WriteError> {
        self.serializer.check.name(name, self.first)?;
        self.separate();
        self.serializer.out.string(name);
        self.serializer.out.byte(b':');
        value.serialize(&mut *self.serializer)?;
        Ok(self.serializer.out.spill()?)
    }

    fn close_array(self) -> Result<(), WriteError> {
        self.serializer.out.byte(b']');
        if self.in_variant {
            self.serializer.close_variant();
        }
        Ok(())
    }

    fn close_object(self) -> Result<(), WriteError> {
        self.serializer.check.end_object();
        self.serializer.out.byte(b'}');
        if self.in_variant {
            self.serializer.close_variant();
        }
        Ok(())
    }
}

/// The element methods of the array kinds, all alike.
macro_rules! arrays {
    ($($trait:ident :: $method:ident),*) => {
        $(impl<W: Write, C: Check> ser::$trait for Compound<'_, W, C> {
            type Ok = ();
            type Error = WriteError;

            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), WriteError> {
                self.element(value)
            }

            fn end(self) -> Result<(), WriteError> {
                self.close_array()
            }
        })*
    };
}

arrays!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl<W: Write, C: Check> ser::SerializeMap for Compound<'_, W, C> {
    type Ok = ();
    type Error = WriteError;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), WriteError> {
        let first = self.first;
        self.separate();
        key.serialize(Key { serializer: &mut *self.serializer, first })
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), WriteError> {
        self.serializer.out.byte(b':');
        value.serialize(&mut *self.serializer)?;
        Ok(self.serializer.out.spill()?)
    }

    fn end(self) -> Result<(), WriteError> {
        self.close_object()
    }
}

/// The member methods of the object kinds, both alike.
macro_rules! objects {
    ($($trait:ident),*) => {
        $(impl<W: Write, C: Check> ser::$trait for Compound<'_, W, C> {
            type Ok = ();
            type Error = WriteError;

            fn serialize_field<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) -> Result<(), WriteError> {
                self.member(name, value)
            }

            fn end(self) -> Result<(), WriteError> {
                self.close_object()
            }
        })*
    };
}

objects!(SerializeStruct, SerializeStructVariant);

/// A map's key, written as a string: serde_json takes strings, and integers and
/// booleans as their text; anything else is refused.
struct Key<'a, W, C> {
    serializer: &'a mut Serializer<W, C>,
    first: bool,
}

impl<W: Write, C: Check> Key<'_, W, C> {
    fn name(self, name: &str) -> Result<(), WriteError> {
        self.serializer.check.name(name, self.first)?;
        self.serializer.out.string(name);
        Ok(())
    }
}

/// Writes integer keys of each width as their decimal text.
macro_rules! integer_keys {
    ($($method:ident: $type:ty),*) => {
        $(fn $method(self, value: $type) -> Result<(), WriteError> {
            self.name(itoa::Buffer::new().format(value))
        })*
    };
}

/// What serde_json says of a key of any other shape.
fn key_must_be_a_string() -> WriteError {
    WriteError::Message("key must be a string".to_owned())
}

/// Refuses keys of every other shape, as serde_json does.
macro_rules! refused_keys {
    ($($method:ident($($argument:ty),*) -> $ok:ty),*) => {
        $(fn $method(self, $(_: $argument),*) -> Result<$ok, WriteError> {
            Err(key_must_be_a_string())
        })*
    };
}

impl<W: Write, C: Check> ser::Serializer for Key<'_, W, C> {
    type Ok = ();
    type Error = WriteError;
    type SerializeSeq = Impossible<(), WriteError>;
    type SerializeTuple = Impossible<(), WriteError>;
    type SerializeTupleStruct = Impossible<(), WriteError>;
    type SerializeTupleVariant = Impossible<(), WriteError>;
    type SerializeMap = Impossible<(), WriteError>;
    type SerializeStruct = Impossible<(), WriteError>;
    type SerializeStructVariant = Impossible<(), WriteError>;

    fn serialize_str(self, value: &str) -> Result<(), WriteError> {
        self.name(value)
    }

    fn serialize_char(self, value: char) -> Result<(), WriteError> {
        self.name(value.encode_utf8(&mut [0; 4]))
    }

    fn serialize_bool(self, value: bool) -> Result<(), WriteError> {
        self.name(if value { "true" } else { "false" })
    }

    integer_keys!(
        serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64, serialize_i128: i128,
        serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64, serialize_u128: u128
    );

    fn serialize_unit_variant(self, _name: &'static str, _index: u32, variant: &'static str) -> Result<(), WriteError> {
        self.name(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _name: &'static str, value: &T) -> Result<(), WriteError> {
        value.serialize(self)
    }

    fn collect_str<T: Display + ?Sized>(self, value: &T) -> Result<(), WriteError> {
        self.name(&value.to_string())
    }

    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<(), WriteError> {
        Err(key_must_be_a_string())
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<(), WriteError> {
        Err(key_must_be_a_string())
    }

    refused_keys!(
        serialize_f32(f32) -> (),
        serialize_f64(f64) -> (),
        serialize_bytes(&[u8]) -> (),
        serialize_none() -> (),
        serialize_unit() -> (),
        serialize_unit_struct(&'static str) -> (),
        serialize_seq(Option<usize>) -> Self::SerializeSeq,
        serialize_tuple(usize) -> Self::SerializeTuple,
        serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct,
        serialize_tuple_variant(&'static str, u32, &'static str, usize) -> Self::SerializeTupleVariant,
        serialize_map(Option<usize>) -> Self::SerializeMap,
        serialize_struct(&'static str, usize) -> Self::SerializeStruct,
        serialize_struct_variant(&'static str, u32, &'static str, usize) -> Self::SerializeStructVariant
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn json() -> impl Strategy<Value = serde_json::Value> {
        let text = "[ -~\\x00-\\x1f\\x7f\u{e9}\u{2028}\u{e000}\u{1f600}\"\\\\]{0,24}";
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<u64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(serde_json::Value::from),
            text.prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                prop::collection::btree_map(text, inner, 0..6)
                    .prop_map(|members| serde_json::Value::Object(members.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// The text is serde_json's, byte for byte.
        #[test]
        fn writes_what_serde_json_writes(value in json()) {
            let mut ours = Vec::new();
            to_writer(&mut ours, &value).unwrap();
            prop_assert_eq!(String::from_utf8(ours).unwrap(), serde_json::to_string(&value).unwrap());
        }

        /// What is written as canonical is the reference implementation's text.
        #[test]
        fn canonical_text_is_the_reference_implementations(value in json()) {
            let mut ours = Vec::new();
            if to_writer_if_canonical(&mut ours, &value).unwrap() {
                let reference = serde_json_canonicalizer::to_string(&value).unwrap();
                prop_assert_eq!(String::from_utf8(ours).unwrap(), reference);
            }
        }
    }

    /// Enums, tuples, bytes, characters, integer and boolean keys and formatted strings
    /// come out as serde_json writes them; a key it refuses is refused.
    #[test]
    fn every_serde_shape_is_written_as_serde_json_writes_it() {
        #[derive(Serialize)]
        enum Shape {
            Unit,
            Newtype(u8),
            Tuple(i8, &'static str),
            Struct { a: char, b: Option<u8> },
        }
        #[derive(Serialize)]
        struct Everything<'a> {
            shapes: [Shape; 4],
            tuple: (u128, i128, f32, f64),
            #[serde(with = "serde_bytes_as_seq")]
            bytes: &'a [u8],
            integer_keys: std::collections::BTreeMap<i32, bool>,
            boolean_keys: std::collections::BTreeMap<bool, ()>,
            formatted: Formatted,
            nan: f64,
        }
        mod serde_bytes_as_seq {
            pub(super) fn serialize<S: serde::Serializer>(bytes: &&[u8], serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_bytes(bytes)
            }
        }
        struct Formatted;
        impl Serialize for Formatted {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(&format_args!("{}\n{}\"{}", "a", 1, '\u{1}'))
            }
        }
        let everything = Everything {
            shapes: [Shape::Unit, Shape::Newtype(7), Shape::Tuple(-3, "t\t"), Shape::Struct { a: '"', b: None }],
            tuple: (u128::MAX, i128::MIN, 0.1, -0.0),
            bytes: &[0, 255],
            integer_keys: [(-1, true), (20, false)].into(),
            boolean_keys: [(false, ()), (true, ())].into(),
            formatted: Formatted,
            nan: f64::NAN,
        };
        assert_eq!(to_string(&everything).unwrap(), serde_json::to_string(&everything).unwrap());
        let refused = std::collections::BTreeMap::from([((1, 2), 3)]);
        assert!(serde_json::to_string(&refused).is_err());
        assert!(matches!(to_string(&refused), Err(WriteError::Message(message)) if message == "key must be a string"));
    }

    /// An object's members out of order, a fraction or an integer past 2^53 make a value
    /// not canonical as it stands; the same value in order is.
    #[test]
    fn the_canonical_check_stops_at_what_jcs_writes_otherwise() {
        #[derive(Serialize)]
        struct Ordered {
            a: u64,
            b: (bool, Option<String>),
        }
        #[derive(Serialize)]
        struct Unordered {
            b: u8,
            a: u8,
        }
        assert!(canonical(&Ordered { a: 1 << 53, b: (true, None) }));
        assert!(!canonical(&Unordered { b: 1, a: 2 }));
        assert!(!canonical(&Ordered { a: (1 << 53) + 1, b: (true, None) }));
        assert!(!canonical(&serde_json::json!({"a": 0.5})));
        assert!(!canonical(&serde_json::json!({"a": -9007199254740993_i64})));
        assert!(!canonical(&serde_json::json!({"\u{e000}": 1, "\u{1f600}": 2})));
        assert!(canonical(&serde_json::json!({"a": {"z": 1}, "b": {"a": [{"b": 1, "c": 2}]}})));
        #[derive(Serialize)]
        struct Nested {
            a: Ordered,
            b: Vec<Unordered>,
        }
        assert!(!canonical(&Nested { a: Ordered { a: 1, b: (false, None) }, b: vec![Unordered { b: 1, a: 2 }] }));
    }

    fn canonical<T: Serialize>(value: &T) -> bool {
        to_writer_if_canonical(std::io::sink(), value).unwrap()
    }
}
