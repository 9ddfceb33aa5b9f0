//! For the other hosts of the planner (SPEC §10, §11, §16): everything the planner reads
//! of the caller's tenant in one answer (`compute.preview.snapshot`, and export or plan
//! asked for their state), and a plugin kind's check run here for a host that runs no
//! plugins (`compute.preview.check`).

use fleet_guest::plugins::PluginKind;
use serde_json::{Value, json};

use super::planning::Planning;
use crate::api::{ApiError, Problem};
use crate::calls::auth::Caller;
use crate::calls::input::Input;
use crate::calls::parse_body;
use crate::calls::registry::{Call, StateForm};
use crate::db::{self, Conn};
use crate::planner::StateSource;

/// The state a planner reads, in one answer: the caller, the modules run, every table,
/// the name bindings, the policies in force and the plugins' kinds. Another host of the
/// planner (the console, the edge) plans from it with no further round trip. In the JSON
/// form of `fleet_guest::state`, or as the state encoding the planner here reads (kept
/// by generation, so not made again) in an envelope with the caller and the plugins.
pub(super) fn state(planning: &Planning, caller: &Caller, db: &Conn, form: StateForm) -> Result<Vec<u8>, ApiError> {
    match form {
        StateForm::Json => json_state(planning, caller, db).map(String::into_bytes),
        StateForm::Encoded => {
            let encoding = db::transaction(db, db::Tx::Read, |db| planning.state.encode(db, &caller.tenant))?;
            let header = json!({"caller": caller.for_planner(), "plugins": plugins(planning)}).to_string();
            Ok(fleet_guest::state::envelope(&header, &encoding))
        }
    }
}

/// The JSON form of the state, the plugins' kinds among its members.
fn json_state(planning: &Planning, caller: &Caller, db: &Conn) -> Result<String, ApiError> {
    let snapshot = db::transaction(db, db::Tx::Read, |db| planning.state.snapshot(db, caller))?;
    let mut state = snapshot.to_json(&planning.modules.catalog);
    state["plugins"] = plugins(planning);
    Ok(state.to_string())
}

/// The plugins' kinds, with their components' digests.
fn plugins(planning: &Planning) -> Value {
    let plugins = planning.plugins.iter();
    Value::Array(
        plugins.map(|plugin| json!({"descriptor": PluginKind::of(plugin.kind), "digest": plugin.digest})).collect(),
    )
}

pub(super) fn snapshot(planning: &Planning, call: Call) -> Result<String, ApiError> {
    Input::new(parse_body(call.body.as_bytes())?)?.finish()?;
    json_state(planning, &call.caller, &call.db)
}

/// Runs a plugin kind's check for another host of the planner. The objects come as
/// JSON objects of the kinds (a reference's of the kind it references); each is checked
/// against its descriptor and written as the planner writes it for a check (every field,
/// defaults filled in), so the plugin sees exactly what a plan here would give it.
pub(super) fn check(planning: &Planning, body: &str) -> Result<String, ApiError> {
    let mut input = Input::new(parse_body(body.as_bytes())?)?;
    let kind = input.string("kind", true);
    let subjects = input.take_value("subjects");
    input.finish()?;
    let kind = kind.unwrap_or_default();
    let plugin = planning
        .plugins
        .by_kind(&kind)
        .ok_or_else(|| ApiError::not_found(format!("no plugin of this deployment serves the kind {kind:?}")))?;
    let catalog = &planning.modules.catalog;
    let mut problems = Vec::new();
    let mut checked = Vec::new();
    let subjects = match subjects {
        Some(Value::Array(subjects)) => subjects,
        _ => {
            let problem = Problem { path: "/subjects".into(), message: "must be an array of subjects".into() };
            return Err(ApiError::invalid(vec![problem]));
        }
    };
    for (index, subject) in subjects.iter().enumerate() {
        let at = |rest: &[&str]| {
            let mut tokens = vec!["subjects".to_owned(), index.to_string()];
            tokens.extend(rest.iter().map(|token| (*token).to_owned()));
            fleet_guest::json::pointer(&tokens)
        };
        let Some(members) = subject.as_object() else {
            problems.push(Problem { path: at(&[]), message: "must be an object".into() });
            continue;
        };
        for name in members.keys().filter(|name| !matches!(name.as_str(), "object" | "previous" | "references")) {
            problems.push(Problem { path: at(&[name]), message: "unknown field".into() });
        }
        let object = subject_object(plugin.kind, members.get("object"), &at(&["object"]), &mut problems);
        let previous = match members.get("previous") {
            None | Some(Value::Null) => None,
            previous => subject_object(plugin.kind, previous, &at(&["previous"]), &mut problems),
        };
        let mut references = Vec::new();
        let listed = match members.get("references") {
            None => &Vec::new(),
            Some(Value::Array(listed)) => listed,
            Some(_) => {
                problems.push(Problem { path: at(&["references"]), message: "must be an array".into() });
                continue;
            }
        };
        for (position, reference) in listed.iter().enumerate() {
            let here = at(&["references", &position.to_string()]);
            let field = reference["field"].as_str().unwrap_or_default();
            let target = plugin.kind.position(field).and_then(|field| match plugin.kind.fields[field].ty {
                fleet_guest::kinds::FieldType::Ref(target) => catalog.by_kind(target).map(|target| catalog.get(target)),
                _ => None,
            });
            let Some(target) = target else {
                let message = format!("field must name a reference field of {kind}");
                problems.push(Problem { path: format!("{here}/field"), message });
                continue;
            };
            let unknown = reference
                .as_object()
                .is_some_and(|members| members.keys().any(|name| !matches!(name.as_str(), "field" | "object")));
            if unknown || !reference.is_object() {
                let message = "must be an object {\"field\", \"object\"}".to_owned();
                problems.push(Problem { path: here.clone(), message });
                continue;
            }
            if let Some(object) =
                subject_object(target, reference.get("object"), &format!("{here}/object"), &mut problems)
            {
                references.push((field.to_owned(), object));
            }
        }
        if let Some(object) = object {
            checked.push(fleet_guest::plugins::Subject { object, previous, references });
        }
    }
    if !problems.is_empty() {
        return Err(ApiError::invalid(problems));
    }
    Ok(json!({ "problems": plugin.check(checked)? }).to_string())
}

/// An object of `kind` as a check reads it, from its JSON form: its identity and fields
/// of their types, absent ones at their defaults; `None` (and the problems) otherwise.
fn subject_object(
    kind: &fleet_guest::Descriptor,
    value: Option<&Value>,
    path: &str,
    problems: &mut Vec<Problem>,
) -> Option<String> {
    let mut problem = |at: String, message: String| problems.push(Problem { path: at, message });
    let Some(Value::Object(members)) = value else {
        problem(path.to_owned(), format!("must be an object of the kind {}", kind.kind));
        return None;
    };
    let mut values: Vec<fleet_guest::Value> =
        kind.fields.iter().map(|field| fleet_guest::Value::default_of(field.ty)).collect();
    let mut id = String::new();
    let mut valid = true;
    for (name, member) in members {
        let at = format!("{path}/{}", fleet_guest::json::pointer(&[name]).trim_start_matches('/'));
        if name == kind.identity_name() {
            match member.as_str() {
                Some(text) => id = text.to_owned(),
                None => {
                    problem(at, "must be a string".into());
                    valid = false;
                }
            }
            continue;
        }
        let Some(position) = kind.position(name) else {
            problem(at, format!("{} has no field {name}", kind.kind));
            valid = false;
            continue;
        };
        match fleet_guest::Value::from_json(member).filter(|found| found.fits(kind.fields[position].ty)) {
            Some(found) => values[position] = found,
            None => {
                problem(at, "is not a value of the field's type".into());
                valid = false;
            }
        }
    }
    valid.then(|| fleet_guest::plugins::object_json(kind, &id, |position| &values[position]))
}
