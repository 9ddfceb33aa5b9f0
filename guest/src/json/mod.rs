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

use crate::error::{Problem, Problems};

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
        Ok(value) if context.control.get() => Err(control_characters(&value, &[], Problems::all()).into_listed()),
        Ok(value) => Ok(value),
        Err(error) => Err(vec![context.problem(error)]),
    }
}

/// How JSON from outside the process is read by [`read`]: the strings at the JSON
/// pointers `multiline` names (a policy's Rego `source`, `/state/policies/*/source` of a
/// saved plan; a `*` token matches any member or index) may also hold line breaks and
/// tabs, as source text does, and no other control character; and the value may take
/// at most about `budget` bytes of memory.
#[derive(Debug, Clone, Copy)]
pub struct Reading<'a> {
    pub multiline: &'a [&'a str],
    pub budget: usize,
}

impl Reading<'_> {
    /// No multiline string, and no bound but the text's.
    pub const STRICT: Reading<'static> = Reading { multiline: &[], budget: usize::MAX };

    /// What reading `length` bytes of JSON may take, for a reader that holds many at
    /// once: a megabyte, and 24 bytes for each byte of text. Values held in their own
    /// allocations (a string, a number) take about what their text does, and objects
    /// of a few members (`{"name": …, "labels": {…}}`) 15 to 20 times it; what a body
    /// can make costlier is many tiny objects and members (`[{},{},...]` takes a
    /// hundred times its text), which this refuses.
    pub fn bounded<'a>(multiline: &'a [&'a str], length: usize) -> Reading<'a> {
        Reading { multiline, budget: (1 << 20) + length.saturating_mul(24) }
    }
}

/// Why [`read`] refused a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// What [`parse`] reports, the first [`crate::error::MAX_PROBLEMS`] listed.
    Invalid(Problems),
    /// The value would take more memory than the reading's budget (in bytes).
    TooLarge { budget: usize },
}

/// [`parse`] as a host reads what comes from outside: within `reading`'s memory
/// budget, the strings it names allowed line breaks and tabs, and the problems listed
/// up to [`crate::error::MAX_PROBLEMS`] (the rest counted), so that no text's shape
/// makes reading it cost more than its budget.
pub fn read(text: &str, reading: &Reading) -> Result<Value, Refusal> {
    let context = Context { budget: Some(reading.budget), ..Context::default() };
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let parsed = ValueSeed(&context).deserialize(&mut deserializer).and_then(|value| {
        deserializer.end()?;
        Ok(value)
    });
    match parsed {
        Ok(value) if context.control.get() => {
            let problems = control_characters(&value, reading.multiline, Problems::default());
            if problems.total() == 0 { Ok(value) } else { Err(Refusal::Invalid(problems)) }
        }
        Ok(value) => Ok(value),
        Err(_) if context.too_large.get() => Err(Refusal::TooLarge { budget: reading.budget }),
        Err(error) => Err(Refusal::Invalid(vec![context.problem(error)].into())),
    }
}

/// Whether the path `tokens` is one the JSON pointer `pattern` names, where a `*`
/// token matches any one token.
fn pointer_matches(pattern: &str, tokens: &[String]) -> bool {
    let mut wanted = pattern.split('/').skip(1);
    tokens.iter().all(|token| wanted.next().is_some_and(|wanted| wanted == "*" || wanted == token))
        && wanted.next().is_none()
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
    /// The bytes the value may take, if bounded; what it took so far, by estimate; and
    /// whether it went past them.
    budget: Option<usize>,
    spent: Cell<usize>,
    too_large: Cell<bool>,
}

/// An estimate of a `Value`'s heap, for a bounded [`read`]: an object's first member
/// allocates a B-tree leaf of eleven slots; each member takes its slot (key and value,
/// 56 bytes) in a node about two-thirds full, and its key's text; an array's item its
/// 32 bytes in a vector that may have doubled.
const OBJECT_LEAF: usize = 640;
const MEMBER: usize = 96;
const ITEM: usize = 64;

impl Context {
    /// Counts `bytes` more; an error past the budget, which ends the reading.
    fn charge<E: de::Error>(&self, bytes: usize) -> Result<(), E> {
        let spent = self.spent.get().saturating_add(bytes);
        self.spent.set(spent);
        match self.budget {
            Some(budget) if spent > budget => {
                self.too_large.set(true);
                Err(E::custom("the value takes more memory than its reading may"))
            }
            _ => Ok(()),
        }
    }

    /// The one problem of a reading that failed: a duplicate key at its path, or
    /// malformed JSON.
    fn problem(&self, error: serde_json::Error) -> Problem {
        match self.duplicate.take() {
            Some(key) => {
                let mut trail = self.trail.take();
                trail.reverse();
                Problem {
                    path: pointer(&trail),
                    message: format!("the key {} appears twice in one object", crate::grammar::quoted(&key)),
                }
            }
            None => Problem { path: String::new(), message: format!("malformed JSON: {error}") },
        }
    }

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

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Value, E> {
        self.0.charge(value.len())?;
        self.0.string(value);
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Value, E> {
        self.0.charge(value.len())?;
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
                Ok(Some(item)) => {
                    self.0.charge(ITEM)?;
                    items.push(item);
                }
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
            self.0.charge(MEMBER + key.len() + if map.is_empty() { OBJECT_LEAF } else { 0 })?;
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

/// Every string and key of `value` with a control character, as problems (the first
/// listed), but for strings at the `multiline` pointers that hold only line breaks and
/// tabs besides their text.
fn control_characters(value: &Value, multiline: &[&str], mut problems: Problems) -> Problems {
    fn walk(value: &Value, path: &mut Vec<String>, multiline: &[&str], problems: &mut Problems) {
        match value {
            Value::String(text) if has_control(text) => {
                let layout =
                    text.chars().all(|character| !character.is_control() || matches!(character, '\n' | '\r' | '\t'));
                if !(layout && multiline.iter().any(|pattern| pointer_matches(pattern, path))) {
                    problems.push_with(|| Problem {
                        path: pointer(path),
                        message: format!("contains a control character ({})", first_control(text)),
                    });
                }
            }
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    path.push(index.to_string());
                    walk(item, path, multiline, problems);
                    path.pop();
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    path.push(key.clone());
                    if has_control(key) {
                        problems.push_with(|| Problem {
                            path: pointer(path),
                            message: format!("the key contains a control character ({})", first_control(key)),
                        });
                    }
                    walk(item, path, multiline, problems);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    walk(value, &mut Vec::new(), multiline, &mut problems);
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
    fn multiline_pointers_allow_line_breaks_there_and_nowhere_else() {
        let saved = r#"{"state": {"policies": [{"name": "p", "source": "package p\n\tdeny"}]}, "title": "a\nb"}"#;
        let reading = |multiline| Reading { multiline, budget: usize::MAX };
        let paths = |refusal| match refusal {
            Refusal::Invalid(problems) => problems.listed().iter().map(|problem| problem.path.clone()).collect(),
            Refusal::TooLarge { .. } => vec!["too large".to_owned()],
        };
        let refused = read(saved, &reading(&["/state/policies/*/source"])).expect_err("the title");
        assert_eq!(paths(refused), ["/title"]);
        let allowed = read(saved, &reading(&["/state/policies/*/source", "/title"])).expect("allowed");
        assert_eq!(allowed["state"]["policies"][0]["source"], "package p\n\tdeny");
        // Line breaks and tabs only: an escape sequence is refused even there.
        let escape = r#"{"source": "\u001b[2J"}"#;
        assert_eq!(paths(read(escape, &reading(&["/source"])).expect_err("refused")), ["/source"]);
        let tokens = |path: &[&str]| path.iter().map(|token| token.to_string()).collect::<Vec<_>>();
        assert!(pointer_matches("/state/policies/*/source", &tokens(&["state", "policies", "3", "source"])));
        assert!(!pointer_matches("/state/policies/*/source", &tokens(&["state", "policies", "0"])));
        assert!(!pointer_matches("/source", &tokens(&["source", "0"])));
    }

    #[test]
    fn a_bounded_reading_lists_a_hundred_problems_and_refuses_a_costly_shape() {
        // A million control characters: a hundred listed, the rest counted.
        let strings = vec!["\u{1}"; 1000];
        let text = serde_json::to_string(&strings).expect("JSON");
        let Err(Refusal::Invalid(problems)) = read(&text, &Reading::bounded(&[], text.len())) else {
            panic!("refused")
        };
        assert_eq!((problems.listed().len(), problems.total()), (100, 1000));
        assert_eq!(problems.details()["more"], 900);
        assert_eq!(problems.message(), "the request has 1000 problems");
        // Tiny objects, each an allocation many times its text: refused past the budget,
        // long before the text ends.
        let objects = format!("[{}{{}}]", r#"{"":0},"#.repeat(200_000));
        let refused = read(&objects, &Reading::bounded(&[], objects.len())).expect_err("too costly");
        assert!(matches!(refused, Refusal::TooLarge { .. }), "{refused:?}");
        // Within the budget, the same value as parse gives.
        let labels: String = (0..1000).map(|index| format!(r#""k{index}":"v""#)).collect::<Vec<_>>().join(",");
        let text = format!(r#"{{"labels": {{{labels}}}}}"#);
        assert_eq!(read(&text, &Reading::bounded(&[], text.len())).expect("read"), parse(&text).expect("parsed"));
        // Two megabytes of objects as requests carry them: read, however many.
        let object = r#"{"name": "pool-1234", "site": "site_abcdefghijklmnopqrstuvwxyz", "class": "gpu", "gpus": 8,
                        "labels": {"tier": "prod", "accelerator": "h100"}}"#;
        let objects = format!("[{}]", vec![object; (2 << 20) / object.len()].join(","));
        assert!(read(&objects, &Reading::bounded(&[], objects.len())).is_ok(), "a legitimate body is read");
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
