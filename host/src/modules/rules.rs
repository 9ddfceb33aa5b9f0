//! What a module checks before it writes: a request's fields by their types, the kind's
//! rules, that references name live objects, the plugin's own check, and that nothing
//! live references what is deleted.

use fleet_guest::grammar;
use fleet_guest::kinds::{Descriptor, FieldType, Rule};
use fleet_guest::plugins::{Subject, object_json};
use rand::RngCore;
use serde_json::{Map, Value, json};

use super::Module;
use crate::api::{ApiError, Problem};
use crate::calls::context::Ctx;
use crate::calls::input::{Input, pointer};
use crate::store::Object;

/// Reads the kind's fields from a request. On create, required fields must be there
/// and absent ones take their defaults; on update every field is optional. A value with
/// a problem is left out (and reported through `input`).
pub fn read_fields(module: &Module, input: &mut Input, create: bool) -> Map<String, Value> {
    let mut fields = Map::new();
    for field in module.kind.fields {
        let required = create && field.required;
        let present = input.has(field.name);
        let value = match field.ty {
            FieldType::String => match input.string(field.name, required) {
                Some(text) if text.is_empty() && field.required => {
                    input.problem(field.name, "must not be empty");
                    None
                }
                other => other.map(Value::String),
            },
            FieldType::Ref(kind) => {
                let prefix = module.target(kind).and_then(Descriptor::id_prefix).unwrap_or_default();
                read_id(input, field.name, kind, prefix, required).map(Value::String)
            }
            FieldType::Name => input.name(field.name, required).map(Value::String),
            FieldType::Count => input.count(field.name, required).map(Value::from),
            FieldType::Bool => input.boolean(field.name, required).map(Value::Bool),
            FieldType::Map => input.string_map(field.name, required).map(|map| json!(map)),
        };
        match value {
            Some(value) => {
                fields.insert(field.name.into(), value);
            }
            None if create && !required && !present => {
                fields.insert(field.name.into(), default_value(field.ty));
            }
            None => {}
        }
    }
    fields
}

pub(super) fn default_value(ty: FieldType) -> Value {
    serde_json::to_value(fleet_guest::Value::default_of(ty)).unwrap_or(Value::Null)
}

pub fn new_id(prefix: &str) -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    grammar::id_from(prefix, &bytes)
}

/// A field holding the id of an object of `kind`: a malformed id is a bad value
/// (`INVALID_ARGUMENT`), whatever the tenant holds.
pub(super) fn read_id(input: &mut Input, field: &str, kind: &str, prefix: &str, required: bool) -> Option<String> {
    let text = input.string(field, required)?;
    if grammar::is_id(&text, prefix) {
        Some(text)
    } else {
        input.problem(
            field,
            format!("{} is not a {kind} id ({prefix}_ and 26 lowercase base32 characters)", grammar::quoted(&text)),
        );
        None
    }
}

/// The key of a get, update, delete, archive or restore: an id, or the identity field.
pub(super) fn read_key(kind: &Descriptor, input: &mut Input) -> Option<String> {
    match kind.id_prefix() {
        Some(prefix) => read_id(input, "id", kind.kind, prefix, true),
        None => input.name(kind.identity_name(), true),
    }
}

/// The kind's rules over the object as it would be written (`INVALID_ARGUMENT`
/// problems). Fields that failed their own validation are absent from the object, so a
/// rule skips what it cannot judge; so does a reference to nothing, which the reference
/// check reports.
pub(super) fn check_rules(module: &Module, ctx: &Ctx, object: &Object) -> Result<Vec<Problem>, ApiError> {
    let mut problems = Vec::new();
    for rule in module.kind.rules {
        match *rule {
            Rule::Differs { field, via, other } => {
                let (ours, reference) = (object.text(field), object.text(via));
                let target =
                    module.kind.fields.iter().find(|candidate| candidate.name == via).and_then(|via| match via.ty {
                        FieldType::Ref(kind) => module.target(kind),
                        _ => None,
                    });
                let (Some(target), false, false) = (target, ours.is_empty(), reference.is_empty()) else { continue };
                let Some(referenced) = ctx.objects().load(target, reference)? else { continue };
                if referenced.text(other) == ours {
                    let message = format!("{field} is the {other} of {} {reference} ({ours})", target.kind);
                    problems.push(Problem { path: pointer(field), message });
                }
            }
        }
    }
    Ok(problems)
}

/// References must name live objects of the caller's tenant (`FAILED_PRECONDITION`);
/// archived objects are not live. With `only`, just the references among those fields.
pub(super) fn check_references(
    ctx: &Ctx,
    module: &Module,
    object: &Object,
    only: Option<&Map<String, Value>>,
) -> Result<(), ApiError> {
    let mut problems = Vec::new();
    for field in module.kind.fields {
        let FieldType::Ref(kind) = field.ty else { continue };
        if only.is_some_and(|changed| !changed.contains_key(field.name)) {
            continue;
        }
        let id = object.text(field.name);
        let live = match module.target(kind) {
            Some(target) => ctx.objects().is_live(target, id)?,
            None => false,
        };
        if !live {
            let message = format!("{} {id:?} is not a live {kind} of this tenant", field.name);
            problems.push(Problem { path: pointer(field.name), message });
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let message = problems.iter().map(|problem| problem.message.as_str()).collect::<Vec<_>>().join("; ");
    Err(ApiError::failed_precondition(message).with_details(json!({ "problems": problems })))
}

/// The plugin's own rules over the object as it will be written (SPEC §10), given
/// the objects it references and the object as it was: `INVALID_ARGUMENT` with the
/// plugin's problems. They run last, once the references are known to be live.
pub(super) fn check_plugin(
    module: &Module,
    ctx: &Ctx,
    object: &Object,
    previous: Option<&Object>,
) -> Result<(), ApiError> {
    let Some(plugin) = &module.plugin else { return Ok(()) };
    let mut references = Vec::new();
    for (field, kind) in module.kind.references() {
        let Some(target) = module.target(kind) else { continue };
        if let Some(referenced) = ctx.objects().load(target, object.text(field))? {
            references.push((field.to_owned(), checked_form(target, &referenced)));
        }
    }
    let subject = Subject {
        object: checked_form(module.kind, object),
        previous: previous.map(|previous| checked_form(module.kind, previous)),
        references,
    };
    let findings = plugin.check([subject])?;
    if findings.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        findings
            .into_iter()
            .map(|finding| Problem { path: finding.path, message: finding.message })
            .collect::<Vec<_>>(),
    ))
}

/// An object in the form a plugin's check reads, written by the planner's own code so
/// that plan and API give a plugin the same text.
pub(super) fn checked_form(kind: &Descriptor, object: &Object) -> String {
    let values: Vec<fleet_guest::Value> = kind
        .fields
        .iter()
        .map(|field| {
            let value = object.fields.get(field.name).and_then(fleet_guest::Value::from_json);
            value.unwrap_or_else(|| fleet_guest::Value::default_of(field.ty))
        })
        .collect();
    object_json(kind, &object.key, |position| &values[position])
}

/// A delete is refused while a live object of the tenant references the object
/// (`FAILED_PRECONDITION`, the referrers by section in `details`).
pub(super) fn check_unreferenced(ctx: &Ctx, module: &Module, object: &Object) -> Result<(), ApiError> {
    let mut referrers = Map::new();
    let mut lines = Vec::new();
    for (_, referrer) in module.catalog.iter() {
        for field in referrer.fields {
            if field.ty != FieldType::Ref(module.kind.kind) {
                continue;
            }
            let keys = ctx.objects().live_keys_where(referrer, field.name, &object.key)?;
            if !keys.is_empty() {
                lines.push(format!("the live {} {keys:?}", referrer.section));
                referrers.insert(referrer.section.into(), json!(keys));
            }
        }
    }
    if referrers.is_empty() {
        return Ok(());
    }
    let kind = module.kind.kind;
    Err(ApiError::failed_precondition(format!(
        "{kind} {:?} is used by {}; remove them or point them at another {kind} first",
        object.key,
        lines.join(" and ")
    ))
    .with_details(Value::Object(referrers)))
}

pub(super) fn not_found(kind: &Descriptor, key: &str) -> ApiError {
    ApiError::not_found(format!("no {} {}", kind.kind, grammar::quoted(key)))
}
