//! Export (SPEC §6.1): the tenant's state as a FleetConfig, keyed by bound names.

use serde::Serialize;

use crate::document::{Document, FilledDocument};
use crate::error::Error;
use crate::estate::Estate;
use crate::value::Value;

#[derive(Serialize)]
struct Exported<'a> {
    document: FilledDocument<'a>,
    missing: Vec<&'static str>,
}

/// The document of the modules that run: objects keyed by bound name (else id, or
/// their identity field), references rewritten to keys, archived objects left out.
pub(crate) fn document(estate: &Estate) -> Document {
    let mut document = Document::default();
    for (kind, descriptor) in estate.catalog.iter() {
        let mut section = std::collections::BTreeMap::new();
        if estate.runs(kind) {
            for object in estate.objects(kind).iter().filter(|object| !object.archived) {
                let values = (0..descriptor.fields.len())
                    .map(|index| match estate.catalog.target(kind, index) {
                        Some(target) => Value::Text(estate.key_of(target, object.values[index].as_text()).into()),
                        None => object.values[index].clone(),
                    })
                    .collect();
                section.insert(estate.key_of(kind, &object.key).into(), values);
            }
        }
        document.sections.push(section);
    }
    document
}

/// `{"document": FleetConfig, "missing": [sections of modules not run]}` as JSON text.
pub(crate) fn export(estate: &Estate, out: impl std::io::Write) -> Result<(), Error> {
    let document = document(estate);
    let (running, missing): (Vec<usize>, Vec<usize>) = (0..estate.catalog.len()).partition(|&kind| estate.runs(kind));
    let missing = missing.into_iter().map(|kind| estate.kind(kind).section).collect();
    let exported = Exported { document: document.filled(&estate.catalog, running), missing };
    crate::json::writer::write_json(out, &exported, "export")
}
