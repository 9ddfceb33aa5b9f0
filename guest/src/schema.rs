//! The FleetConfig schema: the fields of every kind, their types and flags, and the
//! uniform field values the planner diffs, prints and hashes.

use serde::{Serialize, Serializer};

use crate::Kind;
use crate::state::StringMap;

/// The largest number every JSON parser and RFC 8785 represent exactly: 2^53 − 1.
pub(crate) use crate::json::MAX_COUNT as MAX_NUMBER;

/// What a field holds, and how a document's value of it is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldType {
    /// Any string.
    Text,
    /// A string that must not be empty.
    NonEmpty,
    /// A string of the name pattern (also used for owners).
    Name,
    /// A reference to an object of the kind: its document key, or its id.
    Ref(Kind),
    /// A non-negative integer no larger than [`MAX_NUMBER`].
    Number,
    /// A map of string to string.
    Map,
}

#[derive(Debug)]
pub(crate) struct FieldSpec {
    /// The camelCase wire name.
    pub(crate) name: &'static str,
    pub(crate) ty: FieldType,
    pub(crate) required: bool,
    pub(crate) immutable: bool,
}

const fn field(name: &'static str, ty: FieldType) -> FieldSpec {
    FieldSpec { name, ty, required: false, immutable: false }
}

const fn required(name: &'static str, ty: FieldType) -> FieldSpec {
    FieldSpec { name, ty, required: true, immutable: false }
}

const fn fixed(name: &'static str, ty: FieldType) -> FieldSpec {
    FieldSpec { name, ty, required: true, immutable: true }
}

const SITE: [FieldSpec; 3] =
    [required("region", FieldType::NonEmpty), field("description", FieldType::Text), field("labels", FieldType::Map)];

const PROVIDER_ACCOUNT: [FieldSpec; 3] =
    [fixed("provider", FieldType::Name), field("credentialsRef", FieldType::Text), field("settings", FieldType::Map)];

const POOL: [FieldSpec; 8] = [
    fixed("site", FieldType::Ref(Kind::Site)),
    required("account", FieldType::Ref(Kind::ProviderAccount)),
    fixed("class", FieldType::Name),
    required("owner", FieldType::Name),
    field("vcpus", FieldType::Number),
    field("memoryMib", FieldType::Number),
    field("gpus", FieldType::Number),
    field("labels", FieldType::Map),
];

const OWNER_QUOTA: [FieldSpec; 4] = [
    field("vcpus", FieldType::Number),
    field("memoryMib", FieldType::Number),
    field("gpus", FieldType::Number),
    field("instances", FieldType::Number),
];

const OFFER: [FieldSpec; 5] = [
    fixed("pool", FieldType::Ref(Kind::Pool)),
    required("to", FieldType::Name),
    field("vcpus", FieldType::Number),
    field("memoryMib", FieldType::Number),
    field("gpus", FieldType::Number),
];

const FLAVOR: [FieldSpec; 5] = [
    fixed("pool", FieldType::Ref(Kind::Pool)),
    field("vcpus", FieldType::Number),
    field("memoryMib", FieldType::Number),
    field("gpus", FieldType::Number),
    field("diskGib", FieldType::Number),
];

/// The fields of a kind in the order of its create method's input (SPEC §4).
pub(crate) fn fields(kind: Kind) -> &'static [FieldSpec] {
    match kind {
        Kind::Site => &SITE,
        Kind::ProviderAccount => &PROVIDER_ACCOUNT,
        Kind::Pool => &POOL,
        Kind::OwnerQuota => &OWNER_QUOTA,
        Kind::Offer => &OFFER,
        Kind::Flavor => &FLAVOR,
    }
}

/// The position of a field of `kind` by its wire name.
pub(crate) fn position(kind: Kind, name: &str) -> Option<usize> {
    fields(kind).iter().position(|spec| spec.name == name)
}

/// The positions of a kind's fields sorted by field name: the order of a change's
/// `fields` and of the reasons of a blocked object.
pub(crate) fn alphabetical(kind: Kind) -> Vec<usize> {
    let specs = fields(kind);
    let mut order: Vec<usize> = (0..specs.len()).collect();
    order.sort_by_key(|&index| specs[index].name);
    order
}

/// Fields that are in no FleetConfig because the server sets them.
pub(crate) const READ_ONLY: [&str; 4] = ["id", "createdAt", "updatedAt", "archived"];

/// One field's value. References are [`Value::Text`]: a document key (or id) in a
/// document, an id in state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Text(String),
    Number(u64),
    Map(StringMap),
}

impl Value {
    /// The default a FleetConfig gives an omitted field of this type.
    pub(crate) fn default_of(ty: FieldType) -> Value {
        match ty {
            FieldType::Number => Value::Number(0),
            FieldType::Map => Value::Map(StringMap::new()),
            FieldType::Text | FieldType::NonEmpty | FieldType::Name | FieldType::Ref(_) => Value::Text(String::new()),
        }
    }

    pub(crate) fn as_text(&self) -> &str {
        match self {
            Value::Text(text) => text,
            Value::Number(_) | Value::Map(_) => "",
        }
    }

    pub(crate) fn as_number(&self) -> u64 {
        match self {
            Value::Number(number) => *number,
            Value::Text(_) | Value::Map(_) => 0,
        }
    }

    /// The value as a person reads it in a text line: strings bare (`""` when empty),
    /// maps as compact JSON.
    pub(crate) fn display(&self) -> String {
        match self {
            Value::Text(text) if text.is_empty() => "\"\"".to_owned(),
            Value::Text(text) => text.clone(),
            Value::Number(number) => number.to_string(),
            Value::Map(map) => serde_json::to_string(map).unwrap_or_default(),
        }
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Text(text) => serializer.serialize_str(text),
            Value::Number(number) => serializer.serialize_u64(*number),
            Value::Map(map) => map.serialize(serializer),
        }
    }
}

/// An ordered JSON object of named values, serialized in the order given (call inputs,
/// filled-in document objects), whatever the `serde_json` map features.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Fields(pub(crate) Vec<(&'static str, Value)>);

impl Serialize for Fields {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(name, value)| (*name, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_and_immutable_fields_follow_the_spec_table() {
        let immutable: Vec<(Kind, &str)> = Kind::ALL
            .iter()
            .flat_map(|&kind| fields(kind).iter().filter(|spec| spec.immutable).map(move |spec| (kind, spec.name)))
            .collect();
        assert_eq!(
            immutable,
            [
                (Kind::ProviderAccount, "provider"),
                (Kind::Pool, "site"),
                (Kind::Pool, "class"),
                (Kind::Offer, "pool"),
                (Kind::Flavor, "pool"),
            ]
        );
    }

    #[test]
    fn alphabetical_order_sorts_by_wire_name() {
        let names: Vec<&str> =
            alphabetical(Kind::Pool).into_iter().map(|index| fields(Kind::Pool)[index].name).collect();
        assert_eq!(names, ["account", "class", "gpus", "labels", "memoryMib", "owner", "site", "vcpus"]);
    }
}
