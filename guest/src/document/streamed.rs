//! The fast path of reading a plan or apply request: a request that is valid as a whole
//! is read straight into its typed form, each object of the document field by field into
//! its values, with no JSON tree: a tree of the whole document took more memory than
//! its text and its typed form together, and one per object cost a third of a small
//! plan's reading in allocations.
//!
//! It only ever says yes or no: malformed JSON, a key twice in one object, a control
//! character or any other problem makes it give up, and the reader of `parser.rs`
//! reads the request again and reports every problem, exactly as it always has. Both
//! read through the same [`Parser`], so a key, a field or a member is checked one way.

use serde::de::DeserializeSeed;
use std::borrow::Cow;
use std::sync::Arc;

use super::cursor::Cursor;
use super::parser::Parser;
use super::request::{Document, MOVED, PlanRequest, Section};
use crate::json::Strict;
use crate::kinds::{Catalog, FieldType};
use crate::value::{StringMap, Value};

/// The request, if it is valid as a whole.
pub(super) fn valid_request(catalog: &Catalog, text: &str, plan_hash_allowed: bool) -> Option<PlanRequest> {
    let mut reader = Reader { parser: Parser::new(catalog, plan_hash_allowed), strict: Strict::default() };
    let mut cursor = Cursor::new(text);
    let request = reader.request(&mut cursor)?;
    cursor.end()?;
    (!reader.strict.saw_control()).then_some(request)
}

/// How deep a member read whole may nest: `overrides` and `moved` are arrays of
/// objects of strings, and a `proposal`'s `reviews` one level deeper, so no deeper one
/// is valid.
const MEMBER_DEPTH: usize = 3;

struct Reader<'a> {
    /// The checks of the reporting reader; any problem it finds makes this one give up.
    parser: Parser<'a>,
    strict: Strict,
}

/// `key`, unless `seen` (the keys of its object so far) holds it.
fn fresh<'t>(key: Cow<'t, str>, seen: &mut Vec<Cow<'t, str>>) -> Option<Cow<'t, str>> {
    if seen.contains(&key) {
        return None;
    }
    seen.push(key.clone());
    Some(key)
}

impl Reader<'_> {
    /// `{"document", "prune"?, "planHash"?, "overrides"?, "heal"?}`.
    fn request(&mut self, cursor: &mut Cursor<'_>) -> Option<PlanRequest> {
        let mut request = PlanRequest::new(self.parser.catalog);
        let mut seen = Vec::new();
        cursor.object(|cursor, key| {
            let key = fresh(key, &mut seen)?;
            if key == "document" {
                request.document = self.document(cursor)?;
            } else {
                let value = self.whole(cursor)?;
                self.parser.member(&mut request, &key, &value);
            }
            Some(())
        })?;
        (self.parser.problems.is_empty() && seen.iter().any(|key| key == "document")).then_some(request)
    }

    /// A value read whole, as the reporting reader reads it.
    fn whole(&self, cursor: &mut Cursor<'_>) -> Option<serde_json::Value> {
        let mut deserializer = serde_json::Deserializer::from_str(cursor.value(MEMBER_DEPTH)?);
        let value = self.strict.value().deserialize(&mut deserializer).ok()?;
        deserializer.end().ok()?;
        Some(value)
    }

    /// The FleetConfig: its sections, and `moved`.
    fn document(&mut self, cursor: &mut Cursor<'_>) -> Option<Document> {
        let mut document = Document::new(self.parser.catalog);
        let mut seen = Vec::new();
        cursor.object(|cursor, section| {
            let section = fresh(section, &mut seen)?;
            if section == MOVED {
                let moved = self.whole(cursor)?;
                document.moved = self.parser.moves(&moved);
            } else {
                let kind = self.parser.section_kind(&section)?;
                document.sections[kind] = self.section(cursor, kind)?;
            }
            self.parser.problems.is_empty().then_some(())
        })?;
        Some(document)
    }

    /// A section's objects by key, each read straight into its values.
    fn section(&mut self, cursor: &mut Cursor<'_>, kind: usize) -> Option<Section> {
        let mut objects = Vec::new();
        cursor.object(|cursor, key| {
            if !self.parser.check_key(kind, &key) {
                return None;
            }
            let values = self.object(cursor, kind)?;
            objects.push((self.parser.strings.get(&key), values));
            Some(())
        })?;
        // Documents mostly list a section's objects in key order (an export does, as does
        // any JSON written from a sorted map): then one comparison per object finds them
        // in order and without a key twice, and the section is built in one pass, where
        // an insert each searched the tree from its root.
        if !objects.is_sorted_by(|before, after| before.0 < after.0) {
            objects.sort_unstable_by(|one, other| one.0.cmp(&other.0));
            // A key seen before in the section is a duplicate key.
            if objects.windows(2).any(|pair| pair[0].0 == pair[1].0) {
                return None;
            }
        }
        Some(objects.into_iter().collect())
    }

    /// An object of a kind: every field, in descriptor order, the omitted ones defaulted.
    fn object(&mut self, cursor: &mut Cursor<'_>, kind: usize) -> Option<Arc<[Value]>> {
        let descriptor = self.parser.catalog.get(kind);
        let (fields, alphabetical) = (descriptor.fields, descriptor.alphabetical());
        // Made whole at once and filled in place; a placeholder until a field is read.
        let mut values: Arc<[Value]> = fields.iter().map(|_| Value::Count(0)).collect();
        let slots = Arc::get_mut(&mut values)?;
        // The fields read, a bit each (a kind has at most 64).
        let mut read: u64 = 0;
        // Objects mostly list their fields in name order (an export does, as does any JSON
        // written from a sorted map): the field after the last one read is tried first,
        // then the others, each name compared with the text as it is.
        let mut next = 0;
        cursor.members(|cursor| {
            let found =
                (next..alphabetical.len()).chain(0..next).find(|&at| cursor.key_is(fields[alphabetical[at]].name));
            let position = match found {
                Some(at) => {
                    next = at + 1;
                    alphabetical[at]
                }
                // An escaped name, or an unknown field (or one with a control character,
                // which no field has).
                None => descriptor.position(&cursor.key()?)?,
            };
            let bit = 1u64.checked_shl(u32::try_from(position).ok()?)?;
            if read & bit != 0 {
                return None;
            }
            read |= bit;
            slots[position] = self.field(cursor, kind, position)?;
            Some(())
        })?;
        for (position, field) in fields.iter().enumerate().filter(|(position, _)| read & (1 << position) == 0) {
            if field.required {
                return None;
            }
            slots[position] = Value::default_of(field.ty);
        }
        Some(values)
    }

    /// The value of field `position` of `kind`.
    fn field(&mut self, cursor: &mut Cursor<'_>, kind: usize, position: usize) -> Option<Value> {
        let field = &self.parser.catalog.get(kind).fields[position];
        match field.ty {
            FieldType::Count => cursor.count().map(Value::Count),
            FieldType::Bool => cursor.bool().map(Value::Bool),
            FieldType::Map => {
                let mut map = StringMap::new();
                cursor.object(|cursor, entry| {
                    let text = cursor.string()?;
                    map.insert(entry.into_owned(), text.into_owned()).is_none().then_some(())
                })?;
                Some(Value::Map(map))
            }
            FieldType::String | FieldType::Name | FieldType::Ref(_) => {
                let text = cursor.string()?;
                self.parser.text_value(kind, position, &text).ok()
            }
        }
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
            // A field's name without its colon, before a field that is read (fuzzing).
            r#"{"document": {"flavors": {"f": {"pool": "p", "gpus", "vcpus": 8}}}}"#,
            r#"{"document": {"sites": {"a": {"region", "region": "r"}}}}"#,
        ] {
            assert_eq!(streamed(request), None, "{request}");
        }
        assert_eq!(valid_request(&Catalog::built_in(), r#"{"document": {}, "heal": true}"#, false), None);
    }
}
