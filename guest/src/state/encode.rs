//! Writing the state encoding (its grammar is in `mod.rs`): [`StateWriter`] by tables
//! and rows, as a host writes its database's rows straight in, or a whole [`Snapshot`].

use super::snapshot::{Object, Policy, Snapshot};
use crate::kinds::{Catalog, Descriptor};
use crate::value::Value;

// The encoding's version and its values' tags, which `decode.rs` reads back.
pub(super) const VERSION: u8 = 2;
pub(super) const TEXT: u8 = 0;
pub(super) const COUNT: u8 = 1;
pub(super) const BOOL: u8 = 2;
pub(super) const MAP: u8 = 3;

impl Snapshot {
    /// The state encoding of this snapshot (the caller is not part of it).
    pub fn encode(&self, catalog: &Catalog) -> Vec<u8> {
        let mut writer = StateWriter::new();
        writer.modules(self.modules.iter().map(String::as_str));
        for (_, kind) in catalog.iter() {
            let objects = self.objects(kind.kind);
            if objects.is_empty() {
                continue;
            }
            let mut table = writer.kind_table(kind);
            for object in objects {
                table.object(object);
            }
        }
        writer.bindings(self.bindings.iter().map(|binding| (&*binding.kind, &*binding.name, &*binding.id)));
        writer.policies(&self.policies);
        writer.finish()
    }
}

/// Writes the state encoding: modules, then tables, then bindings, then policies (none
/// unless written), each once.
pub struct StateWriter {
    bytes: Vec<u8>,
    tables: u32,
    /// Where the table count goes, once the modules are written.
    tables_at: usize,
    policies_written: bool,
}

impl Default for StateWriter {
    fn default() -> StateWriter {
        StateWriter::new()
    }
}

impl StateWriter {
    pub fn new() -> StateWriter {
        StateWriter { bytes: vec![VERSION], tables: 0, tables_at: 0, policies_written: false }
    }

    /// The kinds whose modules run; first.
    pub fn modules<'a>(&mut self, kinds: impl IntoIterator<Item = &'a str>) {
        let at = self.reserve();
        let mut count = 0;
        for kind in kinds {
            self.text(kind);
            count += 1;
        }
        self.patch(at, count);
        self.tables_at = self.reserve();
    }

    /// A table of `section` whose rows give values of the named fields.
    pub fn table(&mut self, section: &str, names: &[&str]) -> TableWriter<'_> {
        self.tables += 1;
        self.text(section);
        self.u32(names.len());
        for name in names {
            self.text(name);
        }
        let rows_at = self.reserve();
        TableWriter { writer: self, rows: 0, rows_at }
    }

    /// A table of a kind with its identity, every field and `archived`, in that order
    /// (what [`TableWriter::object`] writes).
    pub fn kind_table(&mut self, kind: &Descriptor) -> TableWriter<'_> {
        let mut names = vec![kind.identity_name(), "archived"];
        names.extend(kind.fields.iter().map(|field| field.name));
        self.table(kind.section, &names)
    }

    /// The name bindings; last.
    pub fn bindings<'a>(&mut self, bindings: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>) {
        self.patch(self.tables_at, self.tables as usize);
        let at = self.reserve();
        let mut count = 0;
        for (kind, name, id) in bindings {
            self.text(kind);
            self.text(name);
            self.text(id);
            count += 1;
        }
        self.patch(at, count);
    }

    /// The policies in force; after the bindings.
    pub fn policies(&mut self, policies: &[Policy]) {
        self.u32(policies.len());
        for policy in policies {
            self.text(&policy.name);
            self.text(policy.level.as_str());
            self.text(&policy.source);
        }
        self.policies_written = true;
    }

    pub fn finish(mut self) -> Vec<u8> {
        if !self.policies_written {
            self.u32(0);
        }
        self.bytes
    }

    fn reserve(&mut self) -> usize {
        self.bytes.extend_from_slice(&[0; 4]);
        self.bytes.len() - 4
    }

    fn patch(&mut self, at: usize, count: usize) {
        self.bytes[at..at + 4].copy_from_slice(&(count as u32).to_le_bytes());
    }

    fn u32(&mut self, value: usize) {
        self.bytes.extend_from_slice(&(value as u32).to_le_bytes());
    }

    fn text(&mut self, text: &str) {
        self.u32(text.len());
        self.bytes.extend_from_slice(text.as_bytes());
    }
}

pub struct TableWriter<'a> {
    writer: &'a mut StateWriter,
    rows: usize,
    rows_at: usize,
}

impl TableWriter<'_> {
    /// A row of `values` values.
    pub fn row(&mut self, values: usize) -> RowWriter<'_> {
        self.rows += 1;
        self.writer.u32(values);
        RowWriter { writer: self.writer }
    }

    /// A whole object of a table made by [`StateWriter::kind_table`].
    pub fn object(&mut self, object: &Object) {
        let mut row = self.row(object.values.len() + 2);
        row.text(0, &object.key);
        row.flag(1, object.archived);
        for (position, value) in object.values.iter().enumerate() {
            row.value(position + 2, value);
        }
    }
}

impl Drop for TableWriter<'_> {
    fn drop(&mut self) {
        self.writer.patch(self.rows_at, self.rows);
    }
}

/// The values of one row, each by its position in the table's names.
pub struct RowWriter<'a> {
    writer: &'a mut StateWriter,
}

impl RowWriter<'_> {
    pub fn text(&mut self, field: usize, text: &str) {
        self.writer.u32(field);
        self.writer.bytes.push(TEXT);
        self.writer.text(text);
    }

    pub fn count(&mut self, field: usize, count: u64) {
        self.writer.u32(field);
        self.writer.bytes.push(COUNT);
        self.writer.bytes.extend_from_slice(&count.to_le_bytes());
    }

    pub fn flag(&mut self, field: usize, flag: bool) {
        self.writer.u32(field);
        self.writer.bytes.extend_from_slice(&[BOOL, u8::from(flag)]);
    }

    /// A map, its pairs in key order.
    pub fn map<'m>(&mut self, field: usize, pairs: impl ExactSizeIterator<Item = (&'m str, &'m str)>) {
        self.writer.u32(field);
        self.writer.bytes.push(MAP);
        self.writer.u32(pairs.len());
        for (key, value) in pairs {
            self.writer.text(key);
            self.writer.text(value);
        }
    }

    pub fn value(&mut self, field: usize, value: &Value) {
        match value {
            Value::Text(text) => self.text(field, text),
            Value::Count(count) => self.count(field, *count),
            Value::Bool(flag) => self.flag(field, *flag),
            Value::Map(map) => self.map(field, map.iter().map(|(key, value)| (key.as_str(), value.as_str()))),
        }
    }
}
