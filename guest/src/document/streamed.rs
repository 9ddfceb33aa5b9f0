//! The fast path of reading a plan or apply request: a request that is valid as a whole
//! is read straight into its typed form, each object of the document field by field into
//! its values, with no JSON tree: a tree of the whole document took more memory than
//! its text and its typed form together, and one per object cost a third of a small
//! plan's reading in allocations.
//!
//! It only ever says yes or no: malformed JSON, a key twice in one object, a control
//! character or any other problem makes it give up, and the reader of `document.rs`
//! reads the request again and reports every problem, exactly as it always has.

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use super::{
    Document, MOVED, PlanRequest, Problems, Section, Strings, check_key, parse_member, parse_moves, section_kind,
    text_value,
};
use crate::json::{MAX_COUNT, Strict, count_of_float, has_control};
use crate::kinds::{Catalog, Descriptor, FieldType};
use crate::state::{StringMap, Value};

/// The request, if it is valid as a whole.
pub(super) fn valid_request(catalog: &Catalog, text: &str, plan_hash_allowed: bool) -> Option<PlanRequest> {
    let strict = Strict::default();
    let mut reader = Reader { catalog, plan_hash_allowed, strict: &strict, strings: Strings::default() };
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let request = Request(&mut reader).deserialize(&mut deserializer).ok()?;
    deserializer.end().ok()?;
    (!strict.saw_control()).then_some(request)
}

struct Reader<'a> {
    catalog: &'a Catalog,
    plan_hash_allowed: bool,
    strict: &'a Strict,
    strings: Strings,
}

/// A seed that is its own visitor: it asks the deserializer for what it visits.
macro_rules! reads_itself {
    ($seed:ident => $value:ty, $method:ident) => {
        impl<'de> DeserializeSeed<'de> for $seed<'_, '_> {
            type Value = $value;

            fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<$value, D::Error> {
                deserializer.$method(self)
            }
        }
    };
}

/// What every visitor here answers anything but the happy path with.
fn give_up<E: de::Error>() -> E {
    E::custom("read again, reporting every problem")
}

/// A key of an object read here: no control character, and none seen before in the
/// same object.
fn fresh_key<E: de::Error>(key: String, seen: &mut Vec<String>) -> Result<String, E> {
    if has_control(&key) || seen.contains(&key) {
        return Err(give_up());
    }
    seen.push(key.clone());
    Ok(key)
}

/// `{"document", "prune"?, "planHash"?, "overrides"?, "heal"?}`.
struct Request<'r, 'a>(&'r mut Reader<'a>);

reads_itself!(Request => PlanRequest, deserialize_map);

impl<'de> Visitor<'de> for Request<'_, '_> {
    type Value = PlanRequest;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a plan request")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<PlanRequest, A::Error> {
        let reader = self.0;
        let mut request = PlanRequest::new(reader.catalog);
        let mut problems = Problems::default();
        let mut seen = Vec::new();
        while let Some(key) = access.next_key::<String>()? {
            let key = fresh_key(key, &mut seen)?;
            if key == "document" {
                request.document = access.next_value_seed(DocumentSeed(&mut *reader))?;
                continue;
            }
            let value = access.next_value_seed(reader.strict.value())?;
            parse_member(&mut request, &key, &value, reader.plan_hash_allowed, &mut problems);
        }
        if !problems.is_empty() || !seen.iter().any(|key| key == "document") {
            return Err(give_up());
        }
        Ok(request)
    }
}

/// The FleetConfig: its sections, and `moved`.
struct DocumentSeed<'r, 'a>(&'r mut Reader<'a>);

reads_itself!(DocumentSeed => Document, deserialize_map);

impl<'de> Visitor<'de> for DocumentSeed<'_, '_> {
    type Value = Document;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a FleetConfig document")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Document, A::Error> {
        let reader = self.0;
        let catalog = reader.catalog;
        let mut document = Document::new(catalog);
        let mut problems = Problems::default();
        let mut seen = Vec::new();
        while let Some(section) = access.next_key::<String>()? {
            let section = fresh_key(section, &mut seen)?;
            if section == MOVED {
                let moved = access.next_value_seed(reader.strict.value())?;
                document.moved = parse_moves(catalog, &moved, &mut problems);
            } else {
                let kind = section_kind(catalog, &section, &mut problems).ok_or_else(give_up)?;
                let objects = SectionSeed { reader: &mut *reader, kind, section: &mut document.sections[kind] };
                access.next_value_seed(objects)?;
            }
            if !problems.is_empty() {
                return Err(give_up());
            }
        }
        Ok(document)
    }
}

/// A section's objects by key, each read straight into its values.
struct SectionSeed<'r, 'a> {
    reader: &'r mut Reader<'a>,
    kind: usize,
    section: &'r mut Section,
}

reads_itself!(SectionSeed => (), deserialize_map);

impl<'de> Visitor<'de> for SectionSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a section of objects by key")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<(), A::Error> {
        let reader = self.reader;
        let catalog = reader.catalog;
        let mut problems = Problems::default();
        let mut objects = Vec::new();
        while let Some(key) = access.next_key_seed(Text)? {
            if has_control(&key) || !check_key(catalog, self.kind, &key, &mut problems) {
                return Err(give_up());
            }
            let object = ObjectSeed { reader: &mut *reader, descriptor: catalog.get(self.kind) };
            let values = access.next_value_seed(object)?;
            objects.push((reader.strings.get(&key), values));
        }
        // Documents mostly list a section's objects in key order (an export does, as does
        // any JSON written from a sorted map): then one comparison per object finds them
        // in order and without a key twice, and the section is built in one pass, where
        // an insert each searched the tree from its root.
        if !objects.is_sorted_by(|before, after| before.0 < after.0) {
            objects.sort_unstable_by(|one, other| one.0.cmp(&other.0));
            // A key seen before in the section is a duplicate key.
            if objects.windows(2).any(|pair| pair[0].0 == pair[1].0) {
                return Err(give_up());
            }
        }
        *self.section = objects.into_iter().collect();
        Ok(())
    }
}

/// A string, borrowed from the request's text unless it had escapes.
struct Text;

impl<'de> DeserializeSeed<'de> for Text {
    type Value = Cow<'de, str>;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Cow<'de, str>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Text {
    type Value = Cow<'de, str>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(text))
    }

    fn visit_str<E>(self, text: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(text.to_owned()))
    }
}

/// An object of a kind: every field, in descriptor order, the omitted ones defaulted.
struct ObjectSeed<'r, 'a> {
    reader: &'r mut Reader<'a>,
    descriptor: &'static Descriptor,
}

reads_itself!(ObjectSeed => Arc<[Value]>, deserialize_map);

impl<'de> Visitor<'de> for ObjectSeed<'_, '_> {
    type Value = Arc<[Value]>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("an object of the section's kind")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Arc<[Value]>, A::Error> {
        let fields = self.descriptor.fields;
        let mut given: Vec<Option<Value>> = vec![None; fields.len()];
        while let Some(name) = access.next_key_seed(Text)? {
            // An unknown field (or one with a control character, which no field has).
            let position = self.descriptor.position(&name).ok_or_else(give_up)?;
            let field = &fields[position];
            let value = FieldSeed { reader: &mut *self.reader, ty: field.ty, required: field.required };
            if given[position].replace(access.next_value_seed(value)?).is_some() {
                return Err(give_up());
            }
        }
        let values = fields.iter().zip(given).map(|(field, value)| match value {
            Some(value) => Ok(value),
            None if field.required => Err(give_up()),
            None => Ok(Value::default_of(field.ty)),
        });
        values.collect()
    }
}

/// One field's value, of the field's type.
struct FieldSeed<'r, 'a> {
    reader: &'r mut Reader<'a>,
    ty: FieldType,
    required: bool,
}

reads_itself!(FieldSeed => Value, deserialize_any);

impl<'de> Visitor<'de> for FieldSeed<'_, '_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "a value of type {:?}", self.ty)
    }

    fn visit_bool<E: de::Error>(self, flag: bool) -> Result<Value, E> {
        match self.ty {
            FieldType::Bool => Ok(Value::Bool(flag)),
            _ => Err(give_up()),
        }
    }

    fn visit_u64<E: de::Error>(self, number: u64) -> Result<Value, E> {
        match self.ty {
            FieldType::Count if number <= MAX_COUNT => Ok(Value::Count(number)),
            _ => Err(give_up()),
        }
    }

    fn visit_i64<E: de::Error>(self, number: i64) -> Result<Value, E> {
        self.visit_u64(u64::try_from(number).map_err(|_| give_up())?)
    }

    fn visit_f64<E: de::Error>(self, number: f64) -> Result<Value, E> {
        match (self.ty, count_of_float(number)) {
            (FieldType::Count, Some(count)) => Ok(Value::Count(count)),
            _ => Err(give_up()),
        }
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Value, E> {
        if matches!(self.ty, FieldType::Count | FieldType::Bool | FieldType::Map) || has_control(text) {
            return Err(give_up());
        }
        let reader = self.reader;
        text_value(reader.catalog, self.ty, self.required, text, &mut reader.strings).map_err(|_| give_up())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        if self.ty != FieldType::Map {
            return Err(give_up());
        }
        let mut map = StringMap::new();
        while let Some(entry) = access.next_key::<String>()? {
            let text: String = access.next_value()?;
            if has_control(&entry) || has_control(&text) || map.insert(entry, text).is_some() {
                return Err(give_up());
            }
        }
        Ok(Value::Map(map))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn streamed(request: &str) -> Option<PlanRequest> {
        valid_request(&Catalog::built_in(), request, true)
    }

    #[test]
    fn a_valid_request_reads_as_the_tree_reader_reads_it() {
        let request = json!({
            "document": {
                "sites": {"eu-west": {"region": "eu-west-1", "labels": {"tier": "prod"}}},
                "pools": {"gpu-a": {"site": "eu-west", "account": "acct_aaaaaaaaaaaaaaaaaaaaaaaaaa", "class": "gpu",
                                    "owner": "team-ml", "gpus": 64.0}},
                "flavors": {"g1": {"pool": "gpu-a", "vcpus": 8}},
                "moved": [{"kind": "pool", "from": "gpu-old", "to": "gpu-a"}]
            },
            "prune": true,
            "planHash": format!("sha256:{}", "0".repeat(64)),
            "overrides": [{"policy": "p", "reason": "why"}],
            "heal": false
        })
        .to_string();
        let (parsed, problems) = super::super::parse_plan(&Catalog::built_in(), &request, true).unwrap();
        assert!(problems.is_empty());
        assert_eq!(streamed(&request), Some(parsed));
    }

    /// A section's objects in key order, out of it, or with a key twice (next to each
    /// other or apart) read as the tree reader reads them: a key twice is left to it.
    #[test]
    fn sections_in_any_order_read_as_the_tree_reader_reads_them() {
        let site = r#"{"region": "eu-west-1"}"#;
        for (keys, read) in [
            (&["a", "b", "c"][..], true),
            (&["c", "a", "b"], true),
            (&["b", "a"], true),
            (&["a", "b", "b"], false),
            (&["b", "a", "b"], false),
            (&["b", "b"], false),
        ] {
            let sites: Vec<String> = keys.iter().map(|key| format!(r#""{key}": {site}"#)).collect();
            let request = format!(r#"{{"document": {{"sites": {{{}}}}}}}"#, sites.join(", "));
            let reported = super::super::parse_plan_reporting(&Catalog::built_in(), &request, true).ok();
            let valid = reported.filter(|(_, problems)| problems.is_empty()).map(|(request, _)| request);
            assert_eq!(valid.is_some(), read, "{request}");
            assert_eq!(streamed(&request), valid, "{request}");
        }
    }

    /// The golden cases' requests read the same on both readers, and the fast one reads
    /// those without a problem.
    #[test]
    fn golden_requests_read_as_the_tree_reader_reads_them() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/plans");
        let mut read = 0;
        for case in std::fs::read_dir(root).unwrap() {
            let request = std::fs::read_to_string(case.unwrap().path().join("request.json")).unwrap();
            for plan_hash_allowed in [false, true] {
                let catalog = Catalog::built_in();
                let reported = super::super::parse_plan_reporting(&catalog, &request, plan_hash_allowed).ok();
                let valid = reported.filter(|(_, problems)| problems.is_empty()).map(|(request, _)| request);
                assert_eq!(valid_request(&catalog, &request, plan_hash_allowed), valid, "{request}");
                read += usize::from(valid.is_some());
            }
        }
        assert!(read >= 20, "{read} golden requests read");
    }

    /// Field values at the edges of their types read as the tree reader reads them, or
    /// are left to it.
    #[test]
    fn values_at_the_edges_read_as_the_tree_reader_reads_them() {
        // A pool with these fields beside its account and class.
        let pool = |fields: &str| {
            format!(r#"{{"document": {{"pools": {{"p\u002d1": {{"account": "a", "class": "c", {fields}}}}}}}}}"#)
        };
        let mut read = 0;
        for fields in [
            r#""site": "s", "owner": "o""#,
            r#""site": "s", "owner": "o", "gpus": 64.0"#,
            r#""site": "s", "owner": "o", "gpus": 3e2"#,
            r#""site": "s", "owner": "o", "gpus": -0"#,
            r#""site": "s", "owner": "o", "gpus": 9007199254740991"#,
            r#""site": "s", "owner": "o", "gpus": 9007199254740992"#,
            r#""site": "s", "owner": "o", "gpus": 18446744073709551616"#,
            r#""site": "s", "owner": "o", "gpus": -1"#,
            r#""site": "s", "owner": "o", "gpus": 1.5"#,
            r#""site": "s", "owner": "o", "gpus": "1""#,
            r#""site": "s", "owner": "o", "gpus": null"#,
            r#""site": "s", "owner": "o", "gpus": [1]"#,
            r#""site": "s", "owner": "o", "\u0067pus": 1"#,
            r#""site": "s", "owner": "o", "gpus": 1, "gpus": 2"#,
            r#""site": "s", "owner": "o", "labels": {"a": "b", "c\u0064": "\u0065"}"#,
            r#""site": "s", "owner": "o", "labels": {"a": "b", "a": "c"}"#,
            r#""site": "s", "owner": "o", "labels": {"a": 1}"#,
            r#""site": "s", "owner": "o", "labels": {"a": "\u0085"}"#,
            r#""site": "s", "owner": "o", "labels": "a""#,
            r#""site": "s", "owner": "o", "id": "pool_aaaaaaaaaaaaaaaaaaaaaaaaaa""#,
            r#""site": "s", "owner": """#,
            r#""site": "s", "owner": "o\u0000""#,
            r#""site": "s""#,
            r#""site": 1, "owner": "o""#,
            r#""site": "S", "owner": "o""#,
            r#""site": "site_aaaaaaaaaaaaaaaaaaaaaaaaaa", "owner": "o""#,
            r#""site": "pool_aaaaaaaaaaaaaaaaaaaaaaaaaa", "owner": "o""#,
        ] {
            let request = pool(fields);
            let catalog = Catalog::built_in();
            let reported = super::super::parse_plan_reporting(&catalog, &request, false).ok();
            let valid = reported.filter(|(_, problems)| problems.is_empty()).map(|(request, _)| request);
            assert_eq!(streamed(&request), valid, "{request}");
            read += usize::from(valid.is_some());
        }
        // The first five, the escaped field name, the escaped label and the site's id.
        assert_eq!(read, 8, "the valid ones");
    }

    /// Whatever has a problem is left to the reader that reports it.
    #[test]
    fn anything_but_a_valid_request_is_read_again() {
        for request in [
            "",
            "{}",
            "[]",
            r#"{"document": {}} x"#,
            r#"{"document": {}, "document": {}}"#,
            r#"{"document": {"sites": {}, "sites": {}}}"#,
            r#"{"document": {"sites": {"a": {"region": "r"}, "a": {"region": "r"}}}}"#,
            r#"{"document": {"sites": {"a": {"region": "r", "region": "s"}}}}"#,
            r#"{"document": {"sites": {"a": {"region": "r\u001b"}}}}"#,
            r#"{"document": {"sites": {"a\u0007": {"region": "r"}}}}"#,
            r#"{"document": {"sites": {"A": {"region": "r"}}}}"#,
            r#"{"document": {"sites": {"a": {"region": ""}}}}"#,
            r#"{"document": {"sites": []}}"#,
            r#"{"document": {"nothing": {}}}"#,
            r#"{"document": {"moved": [{"kind": "pool", "from": "a", "to": "a"}]}}"#,
            r#"{"document": {}, "prune": 1}"#,
            r#"{"document": {}, "other": 1}"#,
            r#"{"document": []}"#,
        ] {
            assert_eq!(streamed(request), None, "{request}");
        }
        assert_eq!(valid_request(&Catalog::built_in(), r#"{"document": {}, "heal": true}"#, false), None);
    }
}
