//! A document written whole, every object with every field: what export returns (the
//! sections of the modules that run, fields in descriptor order) and what the plan hash
//! covers (everything, in canonical order), streamed without a JSON tree.

use serde::{Serialize, Serializer};

use super::request::{Document, MOVED, Section};
use crate::kinds::{Catalog, Descriptor};
use crate::value::Value;

impl Document {
    /// The document with only the sections of `kinds`, every object with every field in
    /// descriptor order: what export returns (the modules that run).
    pub(crate) fn filled<'a>(&'a self, catalog: &Catalog, kinds: Vec<usize>) -> FilledDocument<'a> {
        let kinds = kinds
            .into_iter()
            .map(|kind| (catalog.get(kind), kind, (0..catalog.get(kind).fields.len()).collect()))
            .collect();
        FilledDocument { document: self, kinds, moved: false }
    }

    /// The whole document filled in, sections and fields in canonical (sorted) order:
    /// what the plan hash covers, streamed without a JSON tree.
    pub(crate) fn canonical<'a>(&'a self, catalog: &Catalog) -> FilledDocument<'a> {
        let mut kinds: Vec<_> =
            catalog.iter().map(|(kind, descriptor)| (descriptor, kind, descriptor.alphabetical().to_vec())).collect();
        kinds.sort_by_key(|(descriptor, _, _)| descriptor.section);
        FilledDocument { document: self, kinds, moved: !self.moved.is_empty() }
    }
}

pub(crate) struct FilledDocument<'a> {
    document: &'a Document,
    /// Per kind written: its descriptor, its position, and its field positions in the
    /// order they are written.
    kinds: Vec<(&'static Descriptor, usize, Vec<usize>)>,
    /// Whether `moved` is written, among the sections in sorted order.
    moved: bool,
}

impl Serialize for FilledDocument<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(None)?;
        let mut moved = self.moved;
        for (descriptor, kind, order) in &self.kinds {
            if moved && descriptor.section > MOVED {
                map.serialize_entry(MOVED, &self.document.moved)?;
                moved = false;
            }
            let objects = self.document.section(*kind);
            map.serialize_entry(descriptor.section, &FilledSection { descriptor, order, objects })?;
        }
        if moved {
            map.serialize_entry(MOVED, &self.document.moved)?;
        }
        map.end()
    }
}

struct FilledSection<'a> {
    descriptor: &'static Descriptor,
    order: &'a [usize],
    objects: &'a Section,
}

impl Serialize for FilledSection<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (descriptor, order) = (self.descriptor, self.order);
        serializer
            .collect_map(self.objects.iter().map(|(key, values)| (&**key, FilledObject { descriptor, order, values })))
    }
}

/// One object with every field, in the order given.
struct FilledObject<'a> {
    descriptor: &'static Descriptor,
    order: &'a [usize],
    values: &'a [Value],
}

impl Serialize for FilledObject<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(
            self.order.iter().map(|&position| (self.descriptor.fields[position].name, &self.values[position])),
        )
    }
}
