//! Revisions (SPEC §15): every apply keeps the document it applied as the tenant's next
//! revision, in the apply's own transaction; `compute.fleet.history` lists them newest
//! first and `compute.fleet.revision` gives one back, document and all, exactly as it
//! was applied. A deployment may keep fewer ([`Retention`]): an apply then removes the
//! revisions past the count or age kept, never the one it applied.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::plan_source;
use crate::api::ApiError;
use crate::calls::context::Ctx;
use crate::calls::input::{Input, MAX_COUNT, Page};
use crate::calls::registry::{Method, MethodKind, Registry, handler};
use crate::db::params;
use crate::db::{self, Conn};

pub fn register(registry: &mut Registry, insecure: bool) {
    let mut paging = Page::schema_properties();
    paging.insert(
        "after".into(),
        json!({"type": "integer", "minimum": 1, "maximum": MAX_COUNT, "description": "List the revisions older than this one."}),
    );
    registry.register(
        Method::new("fleet", "history", MethodKind::Read, handler(history))
            .permission("compute:fleet:admin", "compute-fleet")
            .phase("v0.3")
            .summary("The tenant's revisions, newest first: each apply's plan hash, applier, time, calls, prune flag, the overrides of its policies, the proposal it applied and where its document came from. `after` pages on to older ones; `oldest` is the oldest kept.")
            .schemas(
                json!({"type": "object", "additionalProperties": false, "properties": paging}),
                json!({"type": "object", "required": ["revisions"], "properties": {
                    "revisions": {"type": "array", "items": revision_schema(false, insecure)},
                    "oldest": {"type": "integer", "minimum": 1,
                               "description": "The oldest revision kept; those before it were pruned (serve --keep-revisions, --revisions-max-age)."}}}),
            ),
    );
    registry.register(
        Method::new("fleet", "revision", MethodKind::Read, Arc::new(revision))
            .permission("compute:fleet:admin", "compute-fleet")
            .phase("v0.3")
            .summary("One revision: what history lists of it, the overrides of its apply, and the document exactly as applied.")
            .schemas(
                json!({"type": "object", "additionalProperties": false, "required": ["revision"], "properties": {
                    "revision": {"type": "integer", "minimum": 1, "maximum": MAX_COUNT}}}),
                revision_schema(true, insecure),
            ),
    );
}

fn revision_schema(whole: bool, insecure: bool) -> Value {
    let mut schema = json!({"type": "object",
        "required": ["revision", "planHash", "appliedBy", "appliedAt", "calls", "prune"],
        "properties": {
            "revision": {"type": "integer", "minimum": 1},
            "planHash": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
            "appliedBy": {"type": "string"},
            "appliedAt": {"type": "string", "format": "date-time"},
            "calls": {"type": "integer", "minimum": 0},
            "prune": {"type": "boolean"},
            "overrides": {"type": "array", "items": {"type": "object",
                "required": ["policy", "reason"],
                "properties": {"policy": {"type": "string"}, "reason": {"type": "string"}}}},
            "proposal": {"type": "integer", "minimum": 1, "description": "The proposal this apply applied."},
            "rollbackOf": {"type": "integer", "minimum": 1, "description": "The revision whose document this apply put back (fleet rollback)."},
            "source": plan_source::schema(insecure)}});
    if let Some(required) = schema["required"].as_array_mut() {
        required.push(json!("overrides"));
        if whole {
            required.push(json!("document"));
        }
    }
    if whole {
        schema["properties"]["document"] = json!({"type": "object"});
    }
    schema
}

/// What an apply keeps of itself as a revision.
pub struct Kept<'a> {
    pub document: &'a str,
    pub prune: bool,
    pub plan_hash: &'a str,
    pub applied_by: &'a str,
    pub applied_at: &'a str,
    pub calls: u64,
    /// `[{"policy", "reason"}]`, as JSON text.
    pub overrides: &'a str,
    /// The proposal the apply applied (SPEC §17).
    pub proposal: Option<i64>,
    /// The revision whose document it put back, for a rollback.
    pub rollback_of: Option<i64>,
    /// Where the document came from (SPEC §20.2), as JSON text.
    pub source: Option<&'a str>,
}

/// Which revisions a deployment keeps (`serve --keep-revisions`, `--revisions-max-age`);
/// all by default. The newest, which is the applied one (a self-heal restores it), is
/// always kept.
#[derive(Debug, Clone, Copy, Default)]
pub struct Retention {
    /// The newest this many.
    pub count: Option<u64>,
    /// Those applied within this long.
    pub max_age: Option<std::time::Duration>,
}

/// Inside an apply's transaction, under the tenant's write lock: keeps `kept` as the
/// tenant's next revision, removes those `retention` no longer keeps, and answers its
/// number. The primary key finds the last one.
pub fn keep(db: &Conn, tenant: &str, kept: &Kept, retention: Retention) -> Result<i64, ApiError> {
    let last: i64 = db.query_one(
        "SELECT coalesce(max(revision), 0) FROM fleet_revisions WHERE tenant = ?1",
        params![tenant],
        |row| row.get(0),
    )?;
    let revision = last + 1;
    db.execute(
        "INSERT INTO fleet_revisions
           (tenant, revision, document, prune, plan_hash, applied_by, applied_at, calls, overrides, proposal, rollback_of,
            source)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        params![
            tenant,
            revision,
            kept.document,
            kept.prune,
            kept.plan_hash,
            kept.applied_by,
            kept.applied_at,
            i64::try_from(kept.calls).unwrap_or(i64::MAX),
            kept.overrides,
            kept.proposal,
            kept.rollback_of,
            kept.source,
        ],
    )?;
    prune(db, tenant, revision, retention)?;
    Ok(revision)
}

/// Removes the tenant's revisions older than `newest` that `retention` does not keep.
fn prune(db: &Conn, tenant: &str, newest: i64, retention: Retention) -> Result<(), ApiError> {
    let past_count = retention.count.map_or(0, |count| newest - i64::try_from(count).unwrap_or(i64::MAX));
    // `applied_at` is RFC 3339 in UTC to the second, so text order is time order; no
    // revision was applied before "".
    let cutoff = retention.max_age.map_or(String::new(), |age| {
        let cutoff = std::time::SystemTime::now().checked_sub(age).unwrap_or(std::time::UNIX_EPOCH);
        humantime::format_rfc3339_seconds(cutoff).to_string()
    });
    if past_count <= 0 && cutoff.is_empty() {
        return Ok(());
    }
    db.execute(
        "DELETE FROM fleet_revisions WHERE tenant = ?1 AND revision < ?2 AND (revision <= ?3 OR applied_at < ?4)",
        params![tenant, newest, past_count, cutoff.as_str()],
    )?;
    Ok(())
}

/// The tenant's oldest revision kept, if it has any.
fn oldest(db: &Conn, tenant: &str) -> Result<Option<i64>, ApiError> {
    Ok(db.query_one("SELECT min(revision) FROM fleet_revisions WHERE tenant = ?1", params![tenant], |row| {
        row.get::<Option<i64>>(0)
    })?)
}

/// The columns history lists, as the answer's members: a revision's overrides say who
/// let which mandatory policy's denials through, and why (SPEC §14); its source, where
/// its document came from (§20.2).
const LISTED: &str =
    "revision, plan_hash, applied_by, applied_at, calls, prune, overrides, proposal, rollback_of, source";

fn listed(row: &db::Row) -> Result<Map<String, Value>, db::Error> {
    let mut revision = Map::new();
    revision.insert("revision".into(), json!(row.get::<i64>(0)?));
    revision.insert("planHash".into(), json!(row.get::<String>(1)?));
    revision.insert("appliedBy".into(), json!(row.get::<String>(2)?));
    revision.insert("appliedAt".into(), json!(row.get::<String>(3)?));
    revision.insert("calls".into(), json!(row.get::<i64>(4)?));
    revision.insert("prune".into(), json!(row.get::<bool>(5)?));
    let overrides: Value = serde_json::from_str(row.text(6)?).map_err(|error| db::decode(6, error))?;
    revision.insert("overrides".into(), overrides);
    if let Some(proposal) = row.get::<Option<i64>>(7)? {
        revision.insert("proposal".into(), json!(proposal));
    }
    if let Some(rollback_of) = row.get::<Option<i64>>(8)? {
        revision.insert("rollbackOf".into(), json!(rollback_of));
    }
    if let Some(source) = row.get::<Option<String>>(9)? {
        let source: Value = serde_json::from_str(&source).map_err(|error| db::decode(9, error))?;
        revision.insert("source".into(), source);
    }
    Ok(revision)
}

/// Newest first, from the primary key's index: a page costs its rows, not the history's
/// length, and no document is read.
fn history(ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let after = input.count("after", false);
    if after == Some(0) {
        input.problem("after", "must be a revision, 1 or more");
    }
    let limit = input.limit();
    input.finish()?;
    // Older than `after`: the list is newest first.
    let before = after.map_or(i64::MAX, |after| i64::try_from(after).unwrap_or(i64::MAX));
    let revisions = ctx.db.query(
        &format!(
            "SELECT {LISTED} FROM fleet_revisions WHERE tenant = ?1 AND revision < ?2
             ORDER BY revision DESC LIMIT ?3"
        ),
        params![&ctx.caller.tenant, before, limit as i64],
        |row| Ok(Value::Object(listed(row)?)),
    )?;
    let mut answer = json!({ "revisions": revisions });
    if let Some(oldest) = oldest(ctx.db, &ctx.caller.tenant)? {
        answer["oldest"] = json!(oldest);
    }
    Ok(answer)
}

/// One revision, its document as the text the apply was sent (so exactly as applied).
fn revision(ctx: &Ctx, body: Value) -> Result<String, ApiError> {
    let mut input = Input::new(body)?;
    let number = input.count("revision", true);
    input.finish()?;
    let number = number.unwrap_or_default();
    let found = ctx.db.query_opt(
        &format!("SELECT {LISTED}, document FROM fleet_revisions WHERE tenant = ?1 AND revision = ?2"),
        params![&ctx.caller.tenant, i64::try_from(number).unwrap_or(i64::MAX)],
        |row| Ok((listed(row)?, row.get::<String>(10)?)),
    )?;
    let Some((revision, document)) = found else {
        return Err(ApiError::not_found(match oldest(ctx.db, &ctx.caller.tenant)? {
            Some(oldest) if i64::try_from(number).is_ok_and(|number| number < oldest) => format!(
                "revision {number} was pruned (the server keeps fewer revisions: --keep-revisions, \
                 --revisions-max-age); the oldest kept is {oldest}"
            ),
            _ => format!("this tenant has no revision {number}"),
        }));
    };
    // The document goes out as it was stored, byte for byte: spliced in, not re-encoded.
    let head = Value::Object(revision).to_string();
    let head = head.strip_suffix('}').unwrap_or(&head);
    Ok(format!("{head},\"document\":{document}}}"))
}
