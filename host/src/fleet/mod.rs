//! The fleet group (SPEC §6): export, plan, apply and status. Export, plan and apply
//! run the planner component in a fresh sandbox instance per request; the host owns
//! the transaction, the authorization of every planned call, name bindings, the
//! applied document and the drift state.

pub mod bindings;
pub mod drift;
pub mod events;
pub mod history;

use std::sync::Arc;

use fleet_guest::Catalog;
use fleet_guest::grammar::{self, is_name};
use fleet_guest::kinds::FieldType;
use fleet_guest::plugins::PluginKind;
use serde_json::{Map, Value, json};

use crate::api::{ApiError, Code};
use crate::app::App;
use crate::calls::auth::Caller;
use crate::calls::input::Input;
use crate::calls::parse_body;
use crate::calls::registry::{Ctx, Method, MethodKind, Registry, Via};
use crate::db::{self, Conn};
use crate::modules::text_schema;
use crate::params;
use crate::planner::{Apply, Entry, Session, Source};

pub fn register(registry: &mut Registry, catalog: &Catalog) {
    registry.register(
        Method::planner("fleet", "export", MethodKind::Read, Arc::new(export))
            .summary("Returns the tenant's estate as a FleetConfig document, with `missing` listing the sections of modules this deployment does not run.")
            .schemas(
                json!({"type": "object", "additionalProperties": false}),
                json!({"type": "object", "properties": {
                    "document": fleet_config_schema(catalog),
                    "missing": {"type": "array", "items": {"type": "string"}}}}),
            ),
    );
    registry.register(
        Method::planner("fleet", "plan", MethodKind::Read, Arc::new(plan))
            .summary("Diffs a FleetConfig document against the tenant's state: changes, exact calls, summary, blocked changes and a planHash. Changes nothing.")
            .schemas(request_schema(catalog, false), plan_schema()),
    );
    registry.register(
        Method::planner("fleet", "apply", MethodKind::Mutation, Arc::new(apply))
            .summary("Plans the document again and runs every planned call as the caller in one transaction; returns the plan and the number of calls applied.")
            .schemas(
                request_schema(catalog, true),
                json!({"type": "object", "properties": {"plan": plan_schema(), "applied": {"type": "integer", "minimum": 0}}}),
            ),
    );
    history::register(registry);
    registry.register(
        Method::planner("fleet", "status", MethodKind::Read, Arc::new(status))
            .summary("The last applied document's hash, applier and time, when it was last checked, and the drift found then; `refresh` checks now.")
            .schemas(
                json!({"type": "object", "additionalProperties": false, "properties": {
                    "refresh": {"type": "boolean", "default": false}}}),
                json!({"type": "object", "properties": {
                    "checkedAt": {"type": "string", "format": "date-time"},
                    "applied": {"type": "object", "properties": {
                        "revision": {"type": "integer", "minimum": 1}, "planHash": {"type": "string"}, "appliedBy": {"type": "string"},
                        "appliedAt": {"type": "string", "format": "date-time"},
                        "calls": {"type": "integer"}, "prune": {"type": "boolean"}, "heal": {"type": "boolean"}}},
                    "drift": {"type": "object", "properties": {
                        "checkedAt": {"type": "string", "format": "date-time"}, "planHash": {"type": "string"},
                        "summary": {"type": "object"}, "changes": {"type": "array", "items": {"type": "object"}}}}}}),
            ),
    );
    // Not a fleet method (the fleet group is export, plan, apply and status): the read
    // that hosts of the planner component other than this one, such as the browser
    // preview, plan from.
    registry.register(
        Method::planner("preview", "snapshot", MethodKind::Read, Arc::new(snapshot))
            .summary("Everything the planner reads of the caller's tenant, in the planner's own format: for hosts that run the planner themselves, such as the console in the browser.")
            .schemas(
                json!({"type": "object", "additionalProperties": false}),
                json!({"type": "object", "required": ["caller", "modules", "bindings", "plugins"], "properties": {
                    "caller": {"type": "object"}, "modules": {"type": "array", "items": {"type": "string"}},
                    "bindings": {"type": "array", "items": {"type": "object"}},
                    "plugins": {"type": "array", "items": {"type": "object", "required": ["descriptor", "digest"],
                        "properties": {"descriptor": {"type": "object"}, "digest": {"type": "string"}}}}}}),
            ),
    );
    // For hosts of the planner without plugin components (the edge, SPEC §11): a plugin
    // kind's check, run here in the plugin's own sandbox, as a plan here would run it.
    registry.register(
        Method::planner("preview", "check", MethodKind::Read, Arc::new(check))
            .phase("v0.3")
            .summary("Runs a plugin kind's check on objects, as a plan would: for hosts of the planner that run no plugins, such as the edge.")
            .schemas(
                json!({"type": "object", "additionalProperties": false, "required": ["kind", "subjects"], "properties": {
                    "kind": text_schema(),
                    "subjects": {"type": "array", "items": {"type": "object", "additionalProperties": false,
                        "required": ["object"], "properties": {
                            "object": {"type": "object"}, "previous": {"type": ["object", "null"]},
                            "references": {"type": "array", "items": {"type": "object", "additionalProperties": false,
                                "required": ["field", "object"],
                                "properties": {"field": text_schema(), "object": {"type": "object"}}}}}}}}}),
                json!({"type": "object", "required": ["problems"], "properties": {
                    "problems": {"type": "array", "items": {"type": "object", "properties": {
                        "subject": {"type": "integer"}, "path": {"type": "string"}, "message": {"type": "string"}}}}}}),
            ),
    );
}

/// Runs a plugin kind's check for another host of the planner. The objects come as
/// JSON objects of the kinds (a reference's of the kind it references); each is checked
/// against its descriptor and written as the planner writes it for a check (every field,
/// defaults filled in), so the plugin sees exactly what a plan here would give it.
fn check(app: Arc<App>, _caller: Caller, _db: Conn, body: &str) -> Result<String, ApiError> {
    let mut input = Input::new(parse_body(body.as_bytes())?)?;
    let kind = input.string("kind", true);
    let subjects = input.take_value("subjects");
    input.finish()?;
    let kind = kind.unwrap_or_default();
    let plugin = app
        .plugins
        .by_kind(&kind)
        .ok_or_else(|| ApiError::not_found(format!("no plugin of this deployment serves the kind {kind:?}")))?;
    let catalog = &app.modules.catalog;
    let mut problems = Vec::new();
    let mut checked = Vec::new();
    let subjects = match subjects {
        Some(Value::Array(subjects)) => subjects,
        _ => {
            let problem =
                crate::api::Problem { path: "/subjects".into(), message: "must be an array of subjects".into() };
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
            problems.push(crate::api::Problem { path: at(&[]), message: "must be an object".into() });
            continue;
        };
        for name in members.keys().filter(|name| !matches!(name.as_str(), "object" | "previous" | "references")) {
            problems.push(crate::api::Problem { path: at(&[name]), message: "unknown field".into() });
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
                problems.push(crate::api::Problem { path: at(&["references"]), message: "must be an array".into() });
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
                problems.push(crate::api::Problem { path: format!("{here}/field"), message });
                continue;
            };
            let unknown = reference
                .as_object()
                .is_some_and(|members| members.keys().any(|name| !matches!(name.as_str(), "field" | "object")));
            if unknown || !reference.is_object() {
                let message = "must be an object {\"field\", \"object\"}".to_owned();
                problems.push(crate::api::Problem { path: here.clone(), message });
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
    problems: &mut Vec<crate::api::Problem>,
) -> Option<String> {
    let mut problem = |at: String, message: String| problems.push(crate::api::Problem { path: at, message });
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

/// What a client sends as `Accept` on export or plan to get, instead, the state that
/// method would plan from: the edge's read (SPEC §11), authorized as that method.
pub const STATE_MEDIA_TYPE: &str = "application/vnd.fleet.state+json";

/// Whether `method` answers its state for [`STATE_MEDIA_TYPE`].
pub fn answers_state(method: &str) -> bool {
    matches!(method, "compute.fleet.export" | "compute.fleet.plan")
}

/// The state a planner reads, in one answer: the caller, the modules run, every table
/// and the name bindings, in the JSON form of `fleet_guest::state`. Another host of the
/// planner (the console, the edge) plans from it with no further round trip.
pub fn state(app: &App, caller: &Caller, db: &Conn) -> Result<String, ApiError> {
    let snapshot = db::transaction(db, db::Tx::Read, |db| app.state.snapshot(db, caller))?;
    let mut state = snapshot.to_json(&app.modules.catalog);
    let plugins: Vec<Value> = app
        .plugins
        .iter()
        .map(|plugin| json!({"descriptor": PluginKind::of(plugin.kind), "digest": plugin.digest}))
        .collect();
    state["plugins"] = Value::Array(plugins);
    Ok(state.to_string())
}

fn snapshot(app: Arc<App>, caller: Caller, db: Conn, body: &str) -> Result<String, ApiError> {
    Input::new(parse_body(body.as_bytes())?)?.finish()?;
    state(&app, &caller, &db)
}

/// The FleetConfig document of SPEC §5, from the kinds' descriptors: references are
/// keys of the same document or ids; nothing read-only appears.
fn fleet_config_schema(catalog: &Catalog) -> Value {
    let mut sections = Map::new();
    for (_, kind) in catalog.iter() {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for field in kind.fields {
            let schema = match field.ty {
                FieldType::Ref(target) => {
                    let prefix = catalog.by_kind(target).and_then(|position| catalog.get(position).id_prefix());
                    json!({"type": "string", "pattern": grammar::key_pattern(prefix),
                           "description": format!("the key of a {target} in this document, or its id")})
                }
                _ => crate::modules::field_schema(field.ty, field.required, catalog),
            };
            properties.insert(field.name.into(), schema);
            if field.required {
                required.push(field.name);
            }
        }
        let object =
            json!({"type": "object", "additionalProperties": false, "required": required, "properties": properties});
        sections.insert(
            kind.section.into(),
            json!({"type": "object", "propertyNames": {"pattern": grammar::key_pattern(kind.id_prefix())},
                   "additionalProperties": object}),
        );
    }
    // Renames (SPEC §15), of the kinds named by bindings.
    let named: Vec<&str> = catalog.iter().filter(|(_, kind)| !kind.upserted()).map(|(_, kind)| kind.kind).collect();
    let name = json!({"type": "string", "pattern": grammar::NAME_PATTERN});
    sections.insert(
        fleet_guest::MOVED.into(),
        json!({"type": "array", "items": {"type": "object", "additionalProperties": false,
            "required": ["kind", "from", "to"],
            "properties": {"kind": {"type": "string", "enum": named}, "from": name, "to": name}}}),
    );
    json!({"type": "object", "additionalProperties": false, "properties": sections})
}

fn request_schema(catalog: &Catalog, apply: bool) -> Value {
    let mut schema = json!({"type": "object", "additionalProperties": false, "required": ["document"], "properties": {
        "document": fleet_config_schema(catalog), "prune": {"type": "boolean", "default": false}}});
    if apply {
        schema["properties"]["planHash"] = json!({"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"});
        schema["properties"]["heal"] = json!({"type": "boolean", "default": false,
            "description": "Restore this revision whenever fleet.drift finds drift, with this token's authority."});
        schema["properties"]["overrides"] = json!({"type": "array", "items": {"type": "object",
            "additionalProperties": false, "required": ["policy", "reason"], "properties": {
                "policy": {"type": "string", "pattern": grammar::NAME_PATTERN},
                "reason": {"type": "string", "minLength": 1, "maxLength": 1000,
                           "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$"}}}});
    }
    schema
}

fn plan_schema() -> Value {
    let counts: Map<String, Value> =
        ["create", "update", "delete", "archive", "restore", "unchanged", "blocked", "rename", "denied", "warnings"]
            .into_iter()
            .map(|name| (name.to_owned(), json!({"type": "integer", "minimum": 0})))
            .collect();
    json!({"type": "object", "properties": {
        "changes": {"type": "array", "items": {"type": "object", "properties": {
            "action": {"type": "string", "enum": ["create", "update", "delete", "archive", "restore", "rename"]},
            "kind": {"type": "string"}, "key": {"type": "string"}, "from": {"type": "string"}, "id": {"type": "string"},
            "fields": {"type": "array", "items": {"type": "object", "properties": {
                "field": {"type": "string"}, "from": {}, "to": {}}}},
            "text": {"type": "string"}}}},
        "calls": {"type": "array", "items": {"type": "object", "properties": {
            "method": {"type": "string"}, "input": {"type": "object"}, "idempotencyKey": {"type": "string"}}}},
        "summary": {"type": "object", "properties": counts},
        "blocked": {"type": "array", "items": {"type": "object", "properties": {
            "kind": {"type": "string"}, "key": {"type": "string"}, "field": {"type": "string"}, "reason": {"type": "string"}}}},
        "leftAlone": {"type": "array", "items": {"type": "object", "required": ["kind", "key", "action"], "properties": {
            "kind": {"type": "string"}, "key": {"type": "string"}, "id": {"type": "string"},
            "action": {"type": "string", "enum": ["delete", "archive"]}}}},
        "policy": {"type": "object", "required": ["digest", "verdicts"], "properties": {
            "digest": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
            "verdicts": {"type": "array", "items": {"type": "object", "required": ["policy", "level", "rule", "message"],
                "properties": {"policy": {"type": "string"}, "level": {"type": "string", "enum": ["advisory", "mandatory", "enforced"]},
                    "rule": {"type": "string", "enum": ["deny", "warn"]}, "kind": {"type": "string"},
                    "key": {"type": "string"}, "message": {"type": "string"}}}}}},
        "planHash": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}}})
}

/// The planner run as `caller` on a snapshot of the tenant: one read transaction
/// around the whole guest call, so the tables it reads agree with each other.
pub fn run_planner(app: &Arc<App>, caller: Caller, db: Conn, entry: Entry, request: &str) -> Result<String, ApiError> {
    db::begin(&db, db::Tx::Read)?;
    let session = Session { caller, db, source: Source::Database(app.state.clone()), methods: None };
    let (session, result) = app.sandbox.call(session, entry, request);
    db::finish(&session.db, result)
}

fn export(app: Arc<App>, caller: Caller, db: Conn, body: &str) -> Result<String, ApiError> {
    run_planner(&app, caller, db, Entry::Export, body)
}

fn plan(app: Arc<App>, caller: Caller, db: Conn, body: &str) -> Result<String, ApiError> {
    run_planner(&app, caller, db, Entry::Plan, body)
}

/// SPEC §6.3: in one write transaction, a fresh planner plans, checks the planHash (if
/// given) and the blocked changes, and runs every call through `methods.invoke`, which
/// authorizes each as the caller and runs it through the module handlers; then the
/// bindings and the applied document are recorded, and it commits. Any error rolls all
/// of it back. Unpinned, the plan applied is the one made inside the transaction, so
/// identical concurrent applies converge (the later ones with no calls).
fn apply(app: Arc<App>, caller: Caller, db: Conn, body: &str) -> Result<String, ApiError> {
    let (output, _) = applied(&app, caller, db, body, None)?.unwrap_or_default();
    Ok(output)
}

/// A heal fleet.drift makes (SPEC §15): the revision it restores, if it is still the
/// applied one with the same heal token when the heal's transaction begins.
pub struct Heal<'a> {
    pub revision: i64,
    pub token: &'a str,
}

/// An apply, or a heal: the heal is audited `fleet.heal`, records no revision, and ends
/// the drift with `fleet.healed`. Answers the output and the calls made; a heal that an
/// apply overtook makes nothing and answers none.
fn applied(
    app: &Arc<App>,
    caller: Caller,
    db: Conn,
    body: &str,
    heal: Option<&Heal>,
) -> Result<Option<(String, u64)>, ApiError> {
    db::begin(&db, db::Tx::Write(&caller.tenant))?;
    if let Some(heal) = heal {
        let current = db.query_opt(
            "SELECT revision, heal_token FROM fleet_applied WHERE tenant = ?1",
            params![&caller.tenant],
            |row| Ok((row.get::<i64>(0)?, row.get::<Option<String>>(1)?)),
        );
        // An apply since the check found the drift: the heal is no longer wanted.
        match current {
            Ok(current) if current == Some((heal.revision, Some(heal.token.to_owned()))) => {}
            Ok(_) => return db::finish(&db, Ok(None)),
            Err(error) => return db::finish(&db, Err(error.into())),
        }
    }
    let methods = Some(Apply::new(app.registry.clone()));
    let session = Session { caller, db, source: Source::Database(app.state.clone()), methods };
    let (session, result) = app.sandbox.call(session, Entry::Apply, body);
    let recorded = result.and_then(|output| {
        let applied: Applied = serde_json::from_str(&output).map_err(ApiError::internal)?;
        if let Some(apply) = &session.methods {
            let ctx = Ctx { caller: &session.caller, db: &session.db, via: Via::Apply(&apply.deferred) };
            let overrides = applied.overrides.iter().map(|item| (&*item.policy, &*item.reason));
            crate::policies::record_overrides(&ctx, overrides)?;
            apply.deferred.objects.flush(&session.db, &session.caller.tenant)?;
            let via = if heal.is_some() { "fleet.heal" } else { "fleet.apply" };
            crate::audit::write_pending(&session.db, &apply.deferred, via, &applied.plan.plan_hash)?;
        }
        match heal {
            None => record(app, &session.db, &session.caller, body, &applied)?,
            Some(heal) => record_heal(app, &session.db, &session.caller, &applied, heal)?,
        }
        drift::schedule(&session.db, &session.caller.tenant, drift::now_ms(), app.config.drift_interval)?;
        let calls = applied.applied;
        Ok((output, calls))
    });
    let (output, calls) = db::finish(&session.db, recorded)?;
    app.metrics.apply_calls.inc_by(calls);
    let _ = app.events.send(());
    Ok(Some((output, calls)))
}

/// Why a heal was refused, or the calls it made; an error is an outage or a bug, for
/// the check to report, not a refusal.
pub fn heal(app: &Arc<App>, tenant: &str, heal: &Heal, request: &str) -> Result<Result<u64, String>, ApiError> {
    let caller = match crate::calls::auth::caller_of_token(&app.db.get()?, tenant, heal.token)? {
        Ok(caller) => caller,
        Err(refused) => return Ok(Err(refused)),
    };
    let method = app.registry.by_name("compute.fleet.apply").ok_or_else(|| ApiError::internal("no fleet apply"))?;
    if let Err(error) = crate::calls::auth::authorize(&caller, method) {
        return Ok(Err(format!("the token {}: {}", heal.token, error.message)));
    }
    match applied(app, caller, app.db.get()?, request, Some(heal)) {
        Ok(Some((_, calls))) => Ok(Ok(calls)),
        // The check that found the drift no longer records anything either.
        Ok(None) => Ok(Err("an apply came after the check that found the drift".to_owned())),
        Err(error) if matches!(error.code, Code::Unavailable | Code::Internal | Code::ResourceExhausted) => Err(error),
        Err(error) => Ok(Err(refusal(&error))),
    }
}

/// Why an apply was refused, in one line: the error, and what it lists (the blocked
/// changes' reasons, the policies' denials).
fn refusal(error: &ApiError) -> String {
    let mut why = format!("{}: {}", error.code.as_str(), error.message);
    let details = error.details.as_ref();
    let listed = |list: &str| details.and_then(|details| details[list].as_array()).cloned().unwrap_or_default();
    for blocked in listed("blocked") {
        why.push_str(&format!(
            "; {} {}: {}",
            blocked["kind"].as_str().unwrap_or_default(),
            blocked["key"].as_str().unwrap_or_default(),
            blocked["reason"].as_str().unwrap_or_default()
        ));
    }
    for verdict in listed("verdicts") {
        why.push_str(&format!(
            "; policy {}: {}",
            verdict["policy"].as_str().unwrap_or_default(),
            verdict["message"].as_str().unwrap_or_default()
        ));
    }
    why
}

/// What `record` reads of an apply's output (the planner's JSON, which goes to the
/// client unchanged): read in place, the rest skipped, as it is megabytes for a large
/// estate.
#[derive(serde::Deserialize)]
struct Applied<'a> {
    #[serde(borrow)]
    plan: AppliedPlan<'a>,
    applied: u64,
    /// The overrides that let the plan's denials through (SPEC §14).
    #[serde(borrow, default)]
    overrides: Vec<AppliedOverride<'a>>,
}

#[derive(serde::Deserialize)]
struct AppliedOverride<'a> {
    #[serde(borrow)]
    policy: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    reason: std::borrow::Cow<'a, str>,
}

#[derive(serde::Deserialize)]
struct AppliedPlan<'a> {
    #[serde(rename = "planHash", borrow)]
    plan_hash: std::borrow::Cow<'a, str>,
    summary: Value,
    #[serde(borrow)]
    changes: Vec<AppliedChange<'a>>,
}

#[derive(serde::Deserialize)]
struct AppliedChange<'a> {
    #[serde(borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    key: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    id: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    action: std::borrow::Cow<'a, str>,
    /// A rename's old name.
    #[serde(borrow, default)]
    from: Option<std::borrow::Cow<'a, str>>,
}

/// What `record` reads of the apply request: the document as its text, stored as sent.
#[derive(serde::Deserialize)]
struct ApplyRequest<'a> {
    #[serde(borrow)]
    document: &'a serde_json::value::RawValue,
    #[serde(default)]
    prune: bool,
    #[serde(default)]
    heal: bool,
}

/// Inside apply's transaction: the names of created objects, the applied document,
/// and the drift state (an apply counts as a check that converged; its caller puts the
/// next check one interval later).
fn record(app: &App, db: &Conn, caller: &Caller, body: &str, applied: &Applied) -> Result<(), ApiError> {
    // The planner accepted the request, so it is a JSON object with a document.
    let request: ApplyRequest = serde_json::from_str(body).map_err(ApiError::internal)?;
    let plan = &applied.plan;
    name_objects(app, db, &caller.tenant, plan)?;
    let heal_token = match (request.heal, &caller.token) {
        (false, _) => None,
        (true, Some(token)) => Some(token.as_str()),
        (true, None) => {
            return Err(ApiError::new(Code::InvalidArgument, "only a caller with a token can ask for heal"));
        }
    };
    let (document, prune) = (request.document.get(), request.prune);
    let overrides: Vec<Value> =
        applied.overrides.iter().map(|item| json!({"policy": item.policy, "reason": item.reason})).collect();
    let (applied_at, calls) = (db::now(), applied.applied);
    let kept = history::Kept {
        document,
        prune,
        plan_hash: &plan.plan_hash,
        applied_by: &caller.principal,
        applied_at: &applied_at,
        calls,
        overrides: &Value::Array(overrides).to_string(),
    };
    let revision = history::keep(db, &caller.tenant, &kept)?;
    db.execute(
        "INSERT INTO fleet_applied
           (tenant, document, prune, plan_hash, applied_by, applied_at, calls, checked_at, revision, heal_token)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?6, ?8, ?9)
         ON CONFLICT (tenant) DO UPDATE SET document = excluded.document, prune = excluded.prune,
           plan_hash = excluded.plan_hash, applied_by = excluded.applied_by,
           applied_at = excluded.applied_at, calls = excluded.calls, checked_at = excluded.checked_at,
           revision = excluded.revision, heal_token = excluded.heal_token",
        params![
            &caller.tenant,
            document,
            prune,
            &*plan.plan_hash,
            &caller.principal,
            &applied_at,
            i64::try_from(calls).unwrap_or(i64::MAX),
            revision,
            heal_token,
        ],
    )?;
    let was_drifted = db.execute("DELETE FROM fleet_drift WHERE tenant = ?1", params![&caller.tenant])? > 0;
    if was_drifted {
        events::publish(
            &app.metrics,
            db,
            &caller.tenant,
            events::CONVERGED,
            &json!({ "planHash": plan.plan_hash, "summary": plan.summary, "since": db::now() }),
        )?;
    }
    Ok(())
}

/// The names an apply gives: bindings of the objects it created under names, and the
/// renames it made (SPEC §15).
fn name_objects(app: &App, db: &Conn, tenant: &str, plan: &AppliedPlan) -> Result<(), ApiError> {
    let created = plan.changes.iter().filter(|change| change.action == "create" && is_name(&change.key));
    let named = created.filter_map(|change| Some((&*change.kind, &*change.key, &**change.id.as_ref()?)));
    bindings::bind(db, tenant, named)?;
    let catalog = &app.modules.catalog;
    for change in plan.changes.iter().filter(|change| change.action == "rename") {
        let (Some(from), Some(id)) = (&change.from, &change.id) else { continue };
        let kind = catalog
            .by_kind(&change.kind)
            .map(|kind| catalog.get(kind))
            .ok_or_else(|| ApiError::internal(format_args!("the plan renames a {} of no kind served", change.kind)))?;
        bindings::rename(db, tenant, kind, from, &change.key, id)?;
    }
    Ok(())
}

/// Inside a heal's transaction: the names of what it created, the check it counts as,
/// the drift it ends, and `fleet.healed`.
fn record_heal(app: &App, db: &Conn, caller: &Caller, applied: &Applied, heal: &Heal) -> Result<(), ApiError> {
    let plan = &applied.plan;
    name_objects(app, db, &caller.tenant, plan)?;
    db.execute("UPDATE fleet_applied SET checked_at = ?2 WHERE tenant = ?1", params![&caller.tenant, &db::now()])?;
    db.execute("DELETE FROM fleet_drift WHERE tenant = ?1", params![&caller.tenant])?;
    let data = json!({ "revision": heal.revision, "planHash": plan.plan_hash, "calls": applied.applied });
    events::publish(&app.metrics, db, &caller.tenant, events::HEALED, &data)?;
    Ok(())
}

/// SPEC §6.4: the applied document, when it was last checked, and the drift found. With
/// `refresh`, checks now first, as the reconciler would; a read-only deployment checks
/// without recording anything.
fn status(app: Arc<App>, caller: Caller, db: Conn, body: &str) -> Result<String, ApiError> {
    let mut input = Input::new(parse_body(body.as_bytes())?)?;
    let refresh = input.boolean("refresh", false).unwrap_or(false);
    input.finish()?;
    let found_now = match refresh {
        true if app.config.read_only => Some((db::now(), crate::fleet::drift::drift_now(&app, &caller.tenant)?)),
        true => {
            crate::fleet::drift::check_tenant(&app, &caller.tenant)?;
            None
        }
        false => None,
    };
    let mut output = db::transaction(&db, db::Tx::Read, |db| recorded_status(db, &caller.tenant))?;
    if let (Some((checked_at, plan)), Some(status)) = (found_now, output.as_object_mut())
        && status.contains_key("applied")
    {
        status.insert("checkedAt".into(), json!(checked_at));
        match plan {
            Some(plan) => status.insert("drift".into(), drift_of(&db, &caller.tenant, &checked_at, &plan)?),
            None => status.remove("drift"),
        };
    }
    Ok(output.to_string())
}

/// What status answers from the database alone.
fn recorded_status(db: &Conn, tenant: &str) -> Result<Value, ApiError> {
    let mut output = Map::new();
    let applied = db.query_opt(
        "SELECT plan_hash, applied_by, applied_at, calls, prune, coalesce(checked_at, applied_at), revision,
           heal_token IS NOT NULL
         FROM fleet_applied WHERE tenant = ?1",
        params![tenant],
        |row| {
            let applied = json!({
                "revision": row.get::<i64>(6)?,
                "planHash": row.get::<String>(0)?,
                "appliedBy": row.get::<String>(1)?,
                "appliedAt": row.get::<String>(2)?,
                "calls": row.get::<i64>(3)?,
                "prune": row.get::<bool>(4)?,
                "heal": row.get::<bool>(7)?,
            });
            Ok((applied, row.get::<String>(5)?))
        },
    )?;
    if let Some((applied, checked_at)) = applied {
        output.insert("applied".into(), applied);
        output.insert("checkedAt".into(), json!(checked_at));
    }
    let drift = db.query_opt(
        "SELECT checked_at, plan_hash, summary, changes, coalesce(since, checked_at) FROM fleet_drift WHERE tenant = ?1",
        params![tenant],
        |row| -> Result<(String, String, String, String, String), db::Error> {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?))
        },
    )?;
    if let Some((checked_at, plan_hash, summary, changes, since)) = drift {
        let parse = |text: &str| serde_json::from_str::<Value>(text).map_err(ApiError::internal);
        output.insert(
            "drift".into(),
            json!({ "checkedAt": checked_at, "since": since, "planHash": plan_hash, "summary": parse(&summary)?,
                    "changes": parse(&changes)? }),
        );
    }
    Ok(Value::Object(output))
}

/// Status's `drift` for a plan found at `checked_at` and recorded nowhere (read-only).
fn drift_of(db: &Conn, tenant: &str, checked_at: &str, plan: &Value) -> Result<Value, ApiError> {
    let changes = crate::fleet::drift::drift_changes(db, tenant, plan)?;
    Ok(json!({ "checkedAt": checked_at, "since": checked_at, "planHash": plan["planHash"], "summary": plan["summary"],
               "changes": changes }))
}
