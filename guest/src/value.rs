//! One field's value, as documents, the state and plans hold it: text (shared, not
//! copied), a count, a flag or a map of strings.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Serialize, Serializer};
use serde_json::Value as Json;

use crate::kinds::FieldType;

/// A string-to-string map (`labels`, `settings`), sorted by key.
pub type StringMap = BTreeMap<String, String>;

/// One field's value. References are [`Value::Text`]: a document key (or id) in a
/// document, an id in state.
///
/// Text is shared: a plan repeats most of a document's values (what each change sets a
/// field to, and each call's input), and a clone is no copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Text(Arc<str>),
    Count(u64),
    Bool(bool),
    Map(StringMap),
}

impl Value {
    /// The default of an omitted field (SPEC §5): `""`, `0`, `false`, `{}`.
    pub fn default_of(ty: FieldType) -> Value {
        match ty {
            // The empty text is shared, never allocated.
            FieldType::String | FieldType::Name | FieldType::Ref(_) => Value::Text(Arc::default()),
            FieldType::Count => Value::Count(0),
            FieldType::Bool => Value::Bool(false),
            FieldType::Map => Value::Map(StringMap::new()),
        }
    }

    /// Whether the value has the shape a field of `ty` holds.
    pub fn fits(&self, ty: FieldType) -> bool {
        matches!(
            (self, ty),
            (Value::Text(_), FieldType::String | FieldType::Name | FieldType::Ref(_))
                | (Value::Count(_), FieldType::Count)
                | (Value::Bool(_), FieldType::Bool)
                | (Value::Map(_), FieldType::Map)
        )
    }

    pub fn as_text(&self) -> &str {
        match self {
            Value::Text(text) => text,
            Value::Count(_) | Value::Bool(_) | Value::Map(_) => "",
        }
    }

    pub fn as_count(&self) -> u64 {
        match self {
            Value::Count(count) => *count,
            Value::Text(_) | Value::Bool(_) | Value::Map(_) => 0,
        }
    }

    /// The value as a person reads it in a text line: strings bare (`""` when empty),
    /// maps as compact JSON.
    pub fn display(&self) -> String {
        match self {
            Value::Text(text) if text.is_empty() => "\"\"".to_owned(),
            Value::Text(text) => text.to_string(),
            Value::Count(count) => count.to_string(),
            Value::Bool(flag) => flag.to_string(),
            Value::Map(map) => serde_json::to_string(map).unwrap_or_default(),
        }
    }

    /// The value of a JSON value, if it is a string, a count, a boolean or a map of
    /// strings.
    pub fn from_json(json: &Json) -> Option<Value> {
        match json {
            Json::String(text) => Some(Value::Text(text.as_str().into())),
            Json::Bool(flag) => Some(Value::Bool(*flag)),
            Json::Object(map) => map
                .iter()
                .map(|(key, value)| value.as_str().map(|value| (key.clone(), value.to_owned())))
                .collect::<Option<StringMap>>()
                .map(Value::Map),
            Json::Number(_) => crate::json::count(json).map(Value::Count),
            Json::Null | Json::Array(_) => None,
        }
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Text(text) => serializer.serialize_str(text),
            Value::Count(count) => serializer.serialize_u64(*count),
            Value::Bool(flag) => serializer.serialize_bool(*flag),
            Value::Map(map) => map.serialize(serializer),
        }
    }
}
