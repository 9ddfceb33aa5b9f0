//! The fast path of reading a plan or apply request: a request that is valid as a whole
//! is read straight into its typed form, each object of the document through a small
//! JSON tree of its own, so that a large document is never held as one tree beside its
//! text and its typed form (the tree took more memory than either).
//!
//! It only ever says yes or no: malformed JSON, a key twice in one object, a control
//! character or any other problem makes it give up, and the reader of `document.rs`
//! reads the request again and reports every problem, exactly as it always has.

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use std::fmt;

use super::{
    Document, MOVED, PlanRequest, Problems, Section, Strings, parse_entry, parse_member, parse_moves, section_kind,
};
use crate::json::{Strict, has_control};
use crate::kinds::Catalog;

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

impl<'de> DeserializeSeed<'de> for Request<'_, '_> {
    type Value = PlanRequest;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<PlanRequest, D::Error> {
        deserializer.deserialize_map(self)
    }
}

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

impl<'de> DeserializeSeed<'de> for DocumentSeed<'_, '_> {
    type Value = Document;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Document, D::Error> {
        deserializer.deserialize_map(self)
    }
}

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

/// A section's objects by key, each read as a small tree of its own and parsed at once.
struct SectionSeed<'r, 'a> {
    reader: &'r mut Reader<'a>,
    kind: usize,
    section: &'r mut Section,
}

impl<'de> DeserializeSeed<'de> for SectionSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for SectionSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a section of objects by key")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<(), A::Error> {
        let reader = self.reader;
        let mut problems = Problems::default();
        while let Some(key) = access.next_key::<String>()? {
            if has_control(&key) {
                return Err(give_up());
            }
            let object = access.next_value_seed(reader.strict.value())?;
            let before = self.section.len();
            parse_entry(reader.catalog, self.kind, &key, &object, &mut reader.strings, &mut problems, self.section);
            // A key seen before replaces nothing: a valid object that adds no entry is
            // a duplicate key.
            if !problems.is_empty() || self.section.len() == before {
                return Err(give_up());
            }
        }
        Ok(())
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
