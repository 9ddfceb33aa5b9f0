//! Reading the state encoding (its grammar is in `mod.rs`) into a [`Snapshot`], kinds
//! and fields as the catalogue has them: a malformed state is an error, never a panic.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::encode::{BOOL, COUNT, MAP, TEXT, VERSION};
use super::snapshot::{Binding, Caller, Level, Object, Policy, Snapshot};
use crate::error::{Error, ErrorCode};
use crate::kinds::{Catalog, Descriptor, FieldType};
use crate::value::{StringMap, Value};

/// Reads the state encoding, kinds and fields as `catalog` has them. The caller is left
/// empty: it comes from `current-caller`.
pub fn decode(catalog: &Catalog, bytes: &[u8]) -> Result<Snapshot, Error> {
    let mut reader = Reader { bytes, at: 0 };
    let version = reader.byte()?;
    if version != VERSION {
        return Err(malformed(format_args!("state encoding version {version}; this planner reads {VERSION}")));
    }
    let modules = (0..reader.u32()?).map(|_| reader.text().map(str::to_owned)).collect::<Result<Vec<_>, _>>()?;
    let mut tables = BTreeMap::new();
    for _ in 0..reader.u32()? {
        let section = reader.text()?;
        let kind = catalog.by_section(section).map(|kind| catalog.get(kind));
        let kind = kind.ok_or_else(|| malformed(format_args!("no kind has the section {section}")))?;
        let columns = (0..reader.u32()?).map(|_| reader.column(kind)).collect::<Result<Vec<_>, _>>()?;
        let rows = reader.u32()?;
        let objects: &mut Vec<Object> = tables.entry(kind.kind.to_owned()).or_default();
        objects.reserve(rows as usize);
        let mut above = vec![None; kind.fields.len()];
        for _ in 0..rows {
            objects.push(reader.object(kind, &columns, &mut above)?);
        }
    }
    let mut bindings = Vec::new();
    for _ in 0..reader.u32()? {
        let (kind, name, id) = (reader.text()?, reader.text()?, reader.text()?);
        bindings.push(Binding { kind: kind.to_owned(), name: name.to_owned(), id: id.to_owned() });
    }
    let mut policies = Vec::new();
    for _ in 0..reader.u32()? {
        let (name, level, source) = (reader.text()?, reader.text()?, reader.text()?);
        let level = Level::parse(level).ok_or_else(|| malformed(format_args!("no policy level is {level:?}")))?;
        policies.push(Policy { name: name.to_owned(), level, source: source.to_owned() });
    }
    if reader.at != bytes.len() {
        return Err(malformed("bytes after the policies"));
    }
    Ok(Snapshot { caller: Caller::default(), modules, tables, bindings, policies })
}

/// What a table's name stands for.
#[derive(Clone, Copy)]
enum Column {
    Key,
    Archived,
    Field(usize),
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize) -> Result<&'a [u8], Error> {
        let end = self.at.checked_add(count).filter(|&end| end <= self.bytes.len());
        let end = end.ok_or_else(|| malformed("it ends early"))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn byte(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, Error> {
        let mut bytes = [0; 4];
        bytes.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(bytes))
    }

    fn u64(&mut self) -> Result<u64, Error> {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(bytes))
    }

    fn text(&mut self) -> Result<&'a str, Error> {
        let length = self.u32()? as usize;
        std::str::from_utf8(self.take(length)?).map_err(|_| malformed("a string is not UTF-8"))
    }

    /// A field's text, shared with the row above when it is the same (`above` holds that
    /// row's): the rows of a table mostly name the same few sites, accounts and classes,
    /// and comparing bytes costs less than checking them and copying them anew.
    fn shared_text(&mut self, above: &mut Option<Arc<str>>) -> Result<Arc<str>, Error> {
        let length = self.u32()? as usize;
        let bytes = self.take(length)?;
        if let Some(text) = above.as_ref().filter(|text| text.as_bytes() == bytes) {
            return Ok(text.clone());
        }
        let text: Arc<str> = std::str::from_utf8(bytes).map_err(|_| malformed("a string is not UTF-8"))?.into();
        *above = Some(text.clone());
        Ok(text)
    }

    fn column(&mut self, kind: &Descriptor) -> Result<Column, Error> {
        let name = self.text()?;
        if name == kind.identity_name() {
            Ok(Column::Key)
        } else if name == "archived" {
            Ok(Column::Archived)
        } else {
            let position = kind.position(name);
            position.map(Column::Field).ok_or_else(|| malformed(format_args!("{} has no field {name}", kind.a())))
        }
    }

    fn value(&mut self) -> Result<Value, Error> {
        Ok(match self.byte()? {
            TEXT => Value::Text(self.text()?.into()),
            COUNT => Value::Count(self.u64()?),
            BOOL => Value::Bool(self.byte()? != 0),
            MAP => {
                let mut map = StringMap::new();
                for _ in 0..self.u32()? {
                    let (key, value) = (self.text()?, self.text()?);
                    map.insert(key.to_owned(), value.to_owned());
                }
                Value::Map(map)
            }
            tag => return Err(malformed(format_args!("a value of unknown type {tag}"))),
        })
    }

    /// An object of `kind`; `above` holds the texts of the row above, by field.
    fn object(
        &mut self,
        kind: &Descriptor,
        columns: &[Column],
        above: &mut [Option<Arc<str>>],
    ) -> Result<Object, Error> {
        let mut key = None;
        let mut archived = false;
        let mut values: Vec<Value> = kind.fields.iter().map(|field| Value::default_of(field.ty)).collect();
        for _ in 0..self.u32()? {
            let column = self.u32()? as usize;
            let column = *columns.get(column).ok_or_else(|| malformed("a value of no column"))?;
            // Keys and texts are read in place; any other value whole, then checked.
            let text = self.bytes.get(self.at) == Some(&TEXT);
            match column {
                Column::Key if text => {
                    self.at += 1;
                    key = Some(self.text()?.to_owned());
                }
                Column::Field(position)
                    if text
                        && matches!(
                            kind.fields[position].ty,
                            FieldType::String | FieldType::Name | FieldType::Ref(_)
                        ) =>
                {
                    self.at += 1;
                    values[position] = Value::Text(self.shared_text(&mut above[position])?);
                }
                _ => match (column, self.value()?) {
                    (Column::Archived, Value::Bool(flag)) => archived = flag,
                    (Column::Field(position), value) if value.fits(kind.fields[position].ty) => {
                        values[position] = value
                    }
                    _ => return Err(malformed(format_args!("{} has a value of the wrong type", kind.a()))),
                },
            }
        }
        let key = key.ok_or_else(|| malformed(format_args!("{} has no {}", kind.a(), kind.identity_name())))?;
        Ok(Object { key, values, archived })
    }
}

/// The error of a state the host should not have handed over.
pub(super) fn malformed(detail: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::Internal, format!("the host's state is malformed: {detail}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::state::json::tests::fixture;

    /// A run of equal texts in a field is decoded into one shared copy; others are not.
    #[test]
    fn equal_texts_of_rows_in_a_row_are_shared() {
        let catalog = Catalog::built_in();
        let mut state = fixture();
        let pool = |id: &str, owner: &str| {
            json!({"id": id, "site": "site_aaaaaaaaaaaaaaaaaaaaaaaaaa", "account": "acct_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                   "class": "cpu", "owner": owner})
        };
        state["pools"] = json!([
            pool("pool_aaaaaaaaaaaaaaaaaaaaaaaaaa", "o"),
            pool("pool_bbbbbbbbbbbbbbbbbbbbbbbbbb", "p"),
            pool("pool_cccccccccccccccccccccccccc", "o")
        ]);
        let snapshot = Snapshot::from_json(&catalog, &state).unwrap();
        let decoded = decode(&catalog, &snapshot.encode(&catalog)).unwrap();
        assert_eq!(decoded.tables, snapshot.tables);
        let pools = decoded.objects("pool");
        let text = |row: usize, field: usize| match &pools[row].values[field] {
            Value::Text(text) => text.clone(),
            other => panic!("{other:?}"),
        };
        assert!(Arc::ptr_eq(&text(0, 0), &text(2, 0)), "the site, in every row");
        assert!(!Arc::ptr_eq(&text(0, 3), &text(2, 3)), "the owner, equal but not to the row above");
        assert_eq!(text(0, 3), text(2, 3));
    }

    #[test]
    fn malformed_states_are_errors_not_panics() {
        let catalog = Catalog::built_in();
        let bytes = Snapshot::from_json(&catalog, &fixture()).unwrap().encode(&catalog);
        for end in 0..bytes.len() {
            assert!(decode(&catalog, &bytes[..end]).is_err(), "cut at {end}");
        }
        let mut wrong_type = fixture();
        wrong_type["pools"][0]["gpus"] = json!("three");
        let error = Snapshot::from_json(&catalog, &wrong_type).unwrap_err();
        assert_eq!(error.code, ErrorCode::Internal);
        assert!(error.message.contains("a pool has a value of the wrong type"), "{}", error.message);
        let mut unknown = fixture();
        unknown["pools"][0]["colour"] = json!("red");
        assert!(Snapshot::from_json(&catalog, &unknown).unwrap_err().message.contains("no field colour"));
        let mut version = bytes.clone();
        version[0] = 9;
        assert!(decode(&catalog, &version).unwrap_err().message.contains("version 9"));
    }
}
