//! JSON as SPEC §2 reads it, wherever it enters (request bodies, FleetConfig documents):
//! a key that appears twice in one object is an error, and so is a string or key with
//! a control character (U+0000–U+001F, U+007F–U+009F).
//!
//! serde_json keeps the last of two equal keys without a word, so objects are built by a
//! visitor of our own that refuses the second. The happy path costs what serde_json's own
//! `Value` visitor costs: the JSON pointer of a problem is collected only while an error
//! unwinds, and strings are searched for control characters as they are read, with the
//! paths found by a second walk only when one was seen.
//!
//! JSON leaves the planner through `writer.rs`, with strings escaped by `escape.rs` and
//! the plan hash's input checked canonical by `canonical.rs`.

pub(crate) mod canonical;
pub(crate) mod escape;
pub(crate) mod writer;

use std::cell::{Cell, RefCell};
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

use crate::error::Problem;

/// Parses `text` as one JSON value. Malformed JSON is one problem at the empty path (with
/// serde_json's line and column); a duplicate key is one problem at the pointer of its
/// second occurrence; control characters are a problem each.
pub fn parse(text: &str) -> Result<Value, Vec<Problem>> {
    let context = Context::default();
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let parsed = ValueSeed(&context).deserialize(&mut deserializer).and_then(|value| {
        deserializer.end()?;
        Ok(value)
    });
    match parsed {
        Ok(value) if context.control.get() => Err(control_characters(&value)),
        Ok(value) => Ok(value),
        Err(error) => Err(vec![match context.duplicate.take() {
            Some(key) => {
                let mut trail = context.trail.take();
                trail.reverse();
                Problem {
                    path: pointer(&trail),
                    message: format!("the key {} appears twice in one object", crate::grammar::quoted(&key)),
                }
            }
            None => Problem { path: String::new(), message: format!("malformed JSON: {error}") },
        }]),
    }
}

/// [`parse`], where the top-level members named `multiline` (a policy's Rego `source`)
/// may also hold line breaks and tabs, as source text does; no other control character.
pub fn parse_multiline(text: &str, multiline: &[&str]) -> Result<Value, Vec<Problem>> {
    let Err(problems) = parse(text) else { return parse(text) };
    let Some(value) = problems
        .iter()
        .any(|problem| problem.message.starts_with("contains a control"))
        .then(|| serde_json::from_str::<Value>(text).ok())
        .flatten()
    else {
        return Err(problems);
    };
    let layout =
        |text: &str| text.chars().all(|character| !character.is_control() || matches!(character, '\n' | '\r' | '\t'));
    let remaining: Vec<Problem> = problems
        .into_iter()
        .filter(|problem| {
            let allowed = multiline.iter().any(|name| problem.path == pointer(&[name]));
            !(allowed && value.pointer(&problem.path).and_then(Value::as_str).is_some_and(layout))
        })
        .collect();
    if remaining.is_empty() { Ok(value) } else { Err(remaining) }
}

/// Whether `text` holds a character of Unicode category Cc, which SPEC §2 forbids.
pub fn has_control(text: &str) -> bool {
    text.chars().any(char::is_control)
}

/// The largest count on the wire: every JSON parser and RFC 8785 hold it exactly.
pub const MAX_COUNT: u64 = (1 << 53) - 1;

/// A count (SPEC §4): a non-negative integer up to 2^53 − 1. `3.0` and `3e2` are such
/// integers too, as JSON Schema (2020-12) and RFC 8785 read numbers.
pub fn count(value: &Value) -> Option<u64> {
    let Value::Number(number) = value else { return None };
    count_of_number(number)
}

/// [`count`] of a number.
pub fn count_of_number(number: &Number) -> Option<u64> {
    match number.as_u64() {
        Some(count) => (count <= MAX_COUNT).then_some(count),
        None => count_of_float(number.as_f64()?),
    }
}

/// [`count`] of a number read as a float: an integral one in 0 ..= 2^53 − 1.
pub fn count_of_float(float: f64) -> Option<u64> {
    if !(float >= 0.0 && float.fract() == 0.0 && float <= MAX_COUNT as f64) {
        return None;
    }
    #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "an integral float in 0 ..= 2^53 - 1")]
    let count = float as u64;
    Some(count)
}

/// A JSON pointer (RFC 6901) to the given reference tokens.
pub fn pointer<T: AsRef<str>>(tokens: &[T]) -> String {
    let mut path = String::new();
    for token in tokens {
        path.push('/');
        for character in token.as_ref().chars() {
            match character {
                '~' => path.push_str("~0"),
                '/' => path.push_str("~1"),
                _ => path.push(character),
            }
        }
    }
    path
}

/// What the visitors tell the caller beside the value: whether a string had a control
/// character, and for a duplicate key, the key and the reference tokens of its path,
/// innermost first, gathered as the error unwinds.
#[derive(Default)]
struct Context {
    control: Cell<bool>,
    duplicate: RefCell<Option<String>>,
    trail: RefCell<Vec<String>>,
}

impl Context {
    fn string(&self, text: &str) {
        if has_control(text) {
            self.control.set(true);
        }
    }

    /// Adds a token to a duplicate key's path while its error unwinds.
    fn unwinding(&self, token: impl FnOnce() -> String) {
        if self.duplicate.borrow().is_some() {
            self.trail.borrow_mut().push(token());
        }
    }
}

/// For readers that take JSON text apart themselves (`document::streamed`): values read
/// with the checks of [`parse`], and whether any of their strings had a control
/// character. Keys the reader reads itself are its own to check.
#[derive(Default)]
pub(crate) struct Strict(Context);

impl Strict {
    /// Reads one value; a key twice in one of its objects is an error.
    pub(crate) fn value(&self) -> ValueSeed<'_> {
        ValueSeed(&self.0)
    }

    pub(crate) fn saw_control(&self) -> bool {
        self.0.control.get()
    }
}

#[derive(Clone, Copy)]
pub(crate) struct ValueSeed<'a>(&'a Context);

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        self.0.string(value);
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        self.0.string(&value);
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            match access.next_element_seed(self) {
                Ok(Some(item)) => items.push(item),
                Ok(None) => return Ok(Value::Array(items)),
                Err(error) => {
                    self.0.unwinding(|| items.len().to_string());
                    return Err(error);
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            self.0.string(&key);
            let value = match access.next_value_seed(self) {
                Ok(value) => value,
                Err(error) => {
                    self.0.unwinding(|| key);
                    return Err(error);
                }
            };
            match map.entry(key) {
                Entry::Vacant(entry) => {
                    entry.insert(value);
                }
                Entry::Occupied(entry) => {
                    let key = entry.key().clone();
                    self.0.trail.borrow_mut().push(key.clone());
                    *self.0.duplicate.borrow_mut() = Some(key);
                    return Err(de::Error::custom("duplicate key"));
                }
            }
        }
        Ok(Value::Object(map))
    }
}

/// Every string and key of `value` with a control character, as problems.
fn control_characters(value: &Value) -> Vec<Problem> {
    fn walk(value: &Value, path: &mut Vec<String>, problems: &mut Vec<Problem>) {
        match value {
            Value::String(text) if has_control(text) => problems.push(Problem {
                path: pointer(path),
                message: format!("contains a control character ({})", first_control(text)),
            }),
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    path.push(index.to_string());
                    walk(item, path, problems);
                    path.pop();
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    path.push(key.clone());
                    if has_control(key) {
                        problems.push(Problem {
                            path: pointer(path),
                            message: format!("the key contains a control character ({})", first_control(key)),
                        });
                    }
                    walk(item, path, problems);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut problems = Vec::new();
    walk(value, &mut Vec::new(), &mut problems);
    problems
}

fn first_control(text: &str) -> String {
    text.chars()
        .find(|character| character.is_control())
        .map(|character| format!("U+{:04X}", character as u32))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn problems(text: &str) -> Vec<(String, String)> {
        parse(text).expect_err("a problem").into_iter().map(|problem| (problem.path, problem.message)).collect()
    }

    #[test]
    fn parses_what_serde_json_parses() {
        let text = r#"{"a": [1, -2, 1.5, true, null, "x", {"b": {}}], "c": "é"}"#;
        assert_eq!(parse(text).expect("valid"), serde_json::from_str::<Value>(text).expect("valid"));
    }

    #[test]
    fn a_duplicate_key_names_its_path() {
        assert_eq!(
            problems(r#"{"pools": {"gpu-a": {"gpus": 1, "gpus": 2}}}"#),
            [("/pools/gpu-a/gpus".to_owned(), r#"the key "gpus" appears twice in one object"#.to_owned())]
        );
        assert_eq!(problems(r#"[0, {"a/b": 1, "a/b": 1}]"#)[0].0, "/1/a~1b");
        assert_eq!(problems(r#"{"a": 1, "a": 1}"#)[0].0, "/a");
    }

    #[test]
    fn malformed_json_is_one_problem_at_the_root() {
        let found = problems(r#"{"a": [1, }"#);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, "");
        assert!(found[0].1.starts_with("malformed JSON: "), "{}", found[0].1);
        assert_eq!(problems("{} x")[0].0, "");
    }

    #[test]
    fn control_characters_are_found_in_strings_and_keys() {
        let text = json!({"sites": {"eu": {"region": "a\u{1b}[31m", "labels": {"k\u{7}": "v", "ok": "\u{85}"}}},
                          "fine": "tab\tless? no", "list": ["\u{0}"]})
        .to_string();
        let mut found = problems(&text);
        found.sort();
        assert_eq!(
            found,
            [
                ("/fine".to_owned(), "contains a control character (U+0009)".to_owned()),
                ("/list/0".to_owned(), "contains a control character (U+0000)".to_owned()),
                ("/sites/eu/labels/k\u{7}".to_owned(), "the key contains a control character (U+0007)".to_owned()),
                ("/sites/eu/labels/ok".to_owned(), "contains a control character (U+0085)".to_owned()),
                ("/sites/eu/region".to_owned(), "contains a control character (U+001B)".to_owned()),
            ]
        );
        assert!(!has_control("Lab in Berlin — ünïcödé \u{a0}"));
    }

    #[test]
    fn counts_are_integers_in_any_notation_up_to_2_pow_53_minus_1() {
        for (text, expected) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("7.0", Some(7)),
            ("7e2", Some(700)),
            ("-0.0", Some(0)),
            ("9007199254740991", Some(MAX_COUNT)),
            ("9007199254740992", None),
            ("9007199254740992.0", None),
            ("1e300", None),
            ("-1", None),
            ("1.5", None),
            ("\"1\"", None),
            ("null", None),
        ] {
            assert_eq!(count(&parse(text).expect("JSON")), expected, "{text}");
        }
    }

    #[test]
    fn nesting_past_the_recursion_limit_is_malformed_not_a_crash() {
        let text = "[".repeat(100_000);
        assert_eq!(problems(&text)[0].0, "");
    }
}
