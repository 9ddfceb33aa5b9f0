//! Export (SPEC §6.1): the tenant's state as a FleetConfig, keyed by bound names.

use serde::Serialize;

use crate::document::{Document, FilledDocument};
use crate::estate::Estate;
use crate::schema::{self, FieldType, Value};
use crate::{Error, ErrorCode, Kind};

#[derive(Serialize)]
struct Exported<'a> {
    document: FilledDocument<'a>,
    missing: Vec<&'static str>,
}

/// The document of the modules that run: objects keyed by bound name (else id), quotas
/// by owner, references rewritten to keys, archived pools and flavors left out.
pub(crate) fn document(estate: &Estate) -> Document {
    let mut document = Document::default();
    for kind in Kind::ALL.into_iter().filter(|&kind| estate.runs(kind)) {
        let specs = schema::fields(kind);
        let section = &mut document.sections[kind.index()];
        for object in estate.objects(kind).iter().filter(|object| !object.archived) {
            let values = specs
                .iter()
                .zip(&object.values)
                .map(|(spec, value)| match spec.ty {
                    FieldType::Ref(target) => Value::Text(estate.key_of(target, value.as_text()).to_owned()),
                    _ => value.clone(),
                })
                .collect();
            section.insert(estate.key_of(kind, &object.id).to_owned(), values);
        }
    }
    document
}

/// `{"document": FleetConfig, "missing": [sections of modules not run]}` as JSON text.
pub(crate) fn export(estate: &Estate) -> Result<String, Error> {
    let document = document(estate);
    let running: Vec<Kind> = Kind::ALL.into_iter().filter(|&kind| estate.runs(kind)).collect();
    let missing = Kind::ALL.into_iter().filter(|&kind| !estate.runs(kind)).map(Kind::section).collect();
    let exported = Exported { document: document.filled(running), missing };
    serde_json::to_string(&exported)
        .map_err(|error| Error::new(ErrorCode::Internal, format!("the export cannot be written: {error}")))
}
