//! Reading a JSON request body field by field, collecting every problem before failing.
//!
//! serde stops at the first error; SPEC §2 wants all of them, each with its JSON pointer.

use std::collections::BTreeMap;

use fleet_guest::grammar::quoted;
use serde::de::{self, Deserializer as _, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::api::{ApiError, Problem, Problems};

/// Numbers on the wire are non-negative integers that every JSON parser holds exactly.
pub use fleet_guest::json::MAX_COUNT;

/// A request object's members, each value left as its text for a reader further on (the
/// planner reads a document itself): `INVALID_ARGUMENT` when the body is not an object
/// or names a member twice (SPEC §2), which a map would hide by keeping the last. An
/// empty body is `{}`.
pub fn members(body: &str) -> Result<Vec<(String, &RawValue)>, ApiError> {
    struct Members<'a, 'de>(&'a std::cell::RefCell<Option<String>>, std::marker::PhantomData<&'de ()>);
    impl<'de> Visitor<'de> for Members<'_, 'de> {
        type Value = Vec<(String, &'de RawValue)>;

        fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
            formatter.write_str("a JSON object")
        }

        fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
            let mut members: Vec<(String, &'de RawValue)> = Vec::new();
            let mut seen = std::collections::HashSet::new();
            while let Some(name) = map.next_key::<String>()? {
                if !seen.insert(name.clone()) {
                    *self.0.borrow_mut() = Some(name);
                    return Err(de::Error::custom("a duplicate key"));
                }
                members.push((name, map.next_value()?));
            }
            Ok(members)
        }
    }
    if body.is_empty() {
        return Ok(Vec::new());
    }
    let duplicate = std::cell::RefCell::new(None);
    let mut deserializer = serde_json::Deserializer::from_str(body);
    let read = deserializer.deserialize_map(Members(&duplicate, std::marker::PhantomData)).and_then(|members| {
        deserializer.end()?;
        Ok(members)
    });
    read.map_err(|error| {
        let problem = match duplicate.take() {
            Some(name) => Problem {
                path: pointer(&name),
                message: format!("the key {} appears twice in one object", quoted(&name)),
            },
            None if error.is_data() => {
                Problem { path: String::new(), message: "the request body must be a JSON object".into() }
            }
            None => Problem { path: String::new(), message: format!("malformed JSON: {error}") },
        };
        ApiError::invalid(vec![problem])
    })
}

/// A request object being read: fields are taken one by one, and what is left at
/// [`Input::finish`] is reported as unknown.
pub struct Input {
    fields: Map<String, Value>,
    problems: Problems,
}

impl Input {
    pub fn new(body: Value) -> Result<Input, ApiError> {
        match body {
            Value::Object(fields) => Ok(Input { fields, problems: Problems::default() }),
            _ => Err(ApiError::invalid(vec![Problem {
                path: String::new(),
                message: "the request body must be a JSON object".into(),
            }])),
        }
    }

    pub fn problem(&mut self, field: &str, message: impl Into<String>) {
        self.problems.push(Problem { path: pointer(field), message: message.into() });
    }

    /// Adds problems found elsewhere (e.g. by rules that read stored state), so that
    /// [`Input::finish`] reports them together with the shape problems.
    pub fn extend(&mut self, problems: impl IntoIterator<Item = Problem>) {
        for problem in problems {
            self.problems.push(problem);
        }
    }

    pub fn has(&self, field: &str) -> bool {
        self.fields.contains_key(field)
    }

    fn take(&mut self, field: &str, required: bool) -> Option<Value> {
        let value = self.fields.remove(field);
        if value.is_none() && required {
            self.problem(field, "is required");
        }
        value
    }

    /// A required field's value as it came, for a caller that checks it itself.
    pub fn take_value(&mut self, field: &str) -> Option<Value> {
        self.take(field, true)
    }

    /// An optional field's value as it came, for a caller that checks it itself.
    pub fn take_optional(&mut self, field: &str) -> Option<Value> {
        self.take(field, false)
    }

    pub fn string(&mut self, field: &str, required: bool) -> Option<String> {
        match self.take(field, required)? {
            Value::String(text) => Some(text),
            _ => {
                self.problem(field, "must be a string");
                None
            }
        }
    }

    /// A string matching the name pattern `^[a-z][a-z0-9-]{0,62}$`.
    pub fn name(&mut self, field: &str, required: bool) -> Option<String> {
        let text = self.string(field, required)?;
        if is_name(&text) {
            Some(text)
        } else {
            self.problem(field, format!("{} is not a valid name (^[a-z][a-z0-9-]{{0,62}}$)", quoted(&text)));
            None
        }
    }

    pub fn count(&mut self, field: &str, required: bool) -> Option<u64> {
        let value = self.take(field, required)?;
        let count = fleet_guest::json::count(&value);
        if count.is_none() {
            self.problem(field, format!("must be a non-negative integer no larger than {MAX_COUNT}"));
        }
        count
    }

    pub fn boolean(&mut self, field: &str, required: bool) -> Option<bool> {
        match self.take(field, required)? {
            Value::Bool(flag) => Some(flag),
            _ => {
                self.problem(field, "must be true or false");
                None
            }
        }
    }

    /// A map of string to string (`labels`, `settings`).
    pub fn string_map(&mut self, field: &str, required: bool) -> Option<BTreeMap<String, String>> {
        let Value::Object(entries) = self.take(field, required)? else {
            self.problem(field, "must be an object of strings");
            return None;
        };
        let mut map = BTreeMap::new();
        let mut valid = true;
        for (key, value) in entries {
            match value {
                Value::String(text) => {
                    map.insert(key, text);
                }
                _ => {
                    valid = false;
                    let path = || fleet_guest::json::pointer(&[field, &key]);
                    self.problems.push_with(|| Problem { path: path(), message: "must be a string".into() });
                }
            }
        }
        valid.then_some(map)
    }

    /// A list's window (`after` a sequence number, at most `limit` items), as
    /// `compute.events.list` and `compute.audit.list` read it.
    pub fn page(&mut self) -> Page {
        let after = self.count("after", false).unwrap_or(0);
        Page { after, limit: self.limit() }
    }

    /// A list's `limit`: 1 to [`Page::MAX_LIMIT`], [`Page::DEFAULT_LIMIT`] when absent.
    pub fn limit(&mut self) -> u64 {
        let limit = self.count("limit", false);
        if limit.is_some_and(|limit| limit == 0 || limit > Page::MAX_LIMIT) {
            self.problem("limit", format!("must be between 1 and {}", Page::MAX_LIMIT));
        }
        limit.unwrap_or(Page::DEFAULT_LIMIT)
    }

    /// Fails with every problem found, unknown fields included.
    pub fn finish(mut self) -> Result<(), ApiError> {
        for field in self.fields.keys() {
            self.problems.push_with(|| Problem { path: pointer(field), message: "is not a known field".into() });
        }
        if self.problems.total() == 0 { Ok(()) } else { Err(ApiError::invalid(self.problems)) }
    }
}

/// A window on a list ordered by sequence number: the items after `after`, at most
/// `limit` of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub after: u64,
    pub limit: u64,
}

impl Page {
    pub const DEFAULT_LIMIT: u64 = 100;
    pub const MAX_LIMIT: u64 = 1000;

    /// The request schema's `after` and `limit` properties.
    pub fn schema_properties() -> serde_json::Map<String, Value> {
        let schema = serde_json::json!({
            "after": {"type": "integer", "minimum": 0, "maximum": MAX_COUNT},
            "limit": {"type": "integer", "minimum": 1, "maximum": Page::MAX_LIMIT}});
        match schema {
            Value::Object(properties) => properties,
            _ => serde_json::Map::new(),
        }
    }
}

/// Names, owners, providers, classes and tenants: one grammar with the planner.
pub use fleet_guest::grammar::is_name;

/// The JSON pointer of a top-level field.
pub fn pointer(field: &str) -> String {
    fleet_guest::json::pointer(&[field])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn paths(error: &ApiError) -> Vec<String> {
        let problems = error.details.as_ref().and_then(|details| details["problems"].as_array()).expect("problems");
        problems.iter().map(|problem| problem["path"].as_str().expect("a path").to_owned()).collect()
    }

    #[test]
    fn members_refuse_a_duplicate_key_at_its_pointer() {
        let read = members(r#"{"document": {"a": 1, "a": 2}, "prune": false}"#).expect("members");
        let names: Vec<&str> = read.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["document", "prune"], "the document's own keys are the planner's to read");
        let error = members(r#"{"prune": false, "prune": true}"#).expect_err("a duplicate");
        assert_eq!(paths(&error), ["/prune"]);
        assert_eq!(paths(&members("[1]").expect_err("not an object")), [""]);
        assert_eq!(paths(&members("{").expect_err("malformed")), [""]);
        assert!(members("").expect("an empty body is {}").is_empty());
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let mut input =
            Input::new(json!({"vcpus": -1, "labels": {"a": 1, "b/c": 2}, "extra": true})).expect("an object");
        assert_eq!(input.count("vcpus", false), None);
        assert_eq!(input.string_map("labels", false), None);
        assert_eq!(input.string("region", true), None);
        input.extend([Problem { path: "/to".into(), message: "a rule of the module".into() }]);
        let error = input.finish().expect_err("the input has problems");
        assert_eq!(paths(&error), ["/vcpus", "/labels/a", "/labels/b~1c", "/region", "/to", "/extra"]);
    }

    #[test]
    fn counts_are_non_negative_integers_up_to_2_pow_53_minus_1() {
        let mut input = Input::new(json!({"max": MAX_COUNT, "zero": 0, "over": MAX_COUNT + 1, "negative": -1,
                                          "fraction": 1.5, "float": 1.0, "text": "1", "null": null}))
        .expect("an object");
        assert_eq!(input.count("max", true), Some(MAX_COUNT));
        assert_eq!(input.count("zero", true), Some(0));
        assert_eq!(input.count("float", true), Some(1), "1.0 is the integer 1, as JSON Schema reads it");
        assert_eq!(input.count("absent", false), None);
        for field in ["over", "negative", "fraction", "text", "null"] {
            assert_eq!(input.count(field, true), None, "{field}");
        }
        let error = input.finish().expect_err("the input has problems");
        assert_eq!(paths(&error), ["/over", "/negative", "/fraction", "/text", "/null"]);
    }

    #[test]
    fn a_body_must_be_an_object() {
        for body in [json!([]), json!(null), json!("x"), json!(1)] {
            let error = Input::new(body).err().expect("not an object");
            assert_eq!(paths(&error), [""]);
        }
    }
}
