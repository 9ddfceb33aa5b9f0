//! `compute.webhooks.put|get|list|delete|test|deliveries` (SPEC §18), at
//! `compute:webhooks:read|write @ compute-webhooks`. The secret is answered once, by
//! the `put` that sets it, and never again: not by `get` or `list`, not in the audit
//! trail; it is stored sealed when the deployment has a key (`at_rest.rs`).

use std::net::{SocketAddr, ToSocketAddrs};

use fleet_guest::grammar::{NAME_PATTERN, quoted};
use serde_json::{Value, json};

use super::{TEST, at_rest, insert, sign};
use crate::api::{ApiError, Problem};
use crate::audit::{self, FieldChange};
use crate::calls::context::Ctx;
use crate::calls::input::{Input, MAX_COUNT, Page};
use crate::calls::registry::{Method, MethodKind, Registry, handler};
use crate::db::params;
use crate::reach::Reach;
use crate::secrets::Key;

/// A webhook as every method but `put` answers it: never its secret.
fn webhook_schema() -> Value {
    json!({"type": "object", "required": ["name", "url", "events", "enabled"], "properties": {
        "name": {"type": "string"}, "url": {"type": "string"},
        "events": {"type": "array", "items": {"type": "string"}}, "enabled": {"type": "boolean"},
        "disabled": {"type": "string", "description": "Why it was disabled (its endpoint answered 410 Gone)."}}})
}

/// The methods, with what the deployment lets webhooks reach, the event types there
/// are to subscribe to, and the key that seals secrets at rest, if it has one.
pub fn register(
    registry: &mut Registry,
    reach: Reach,
    per_tenant: usize,
    types: &'static [&'static str],
    key: Option<Key>,
) {
    let name = json!({"type": "string", "pattern": NAME_PATTERN});
    let by_name =
        json!({"type": "object", "additionalProperties": false, "required": ["name"], "properties": {"name": name}});
    let kinds: Vec<&str> = types.to_vec();
    // An https URL (or http, when the deployment allows it), with no credentials and a
    // port, if it names one, from 1 to 65535.
    const AUTHORITY: &str = "(?:\\[[0-9A-Fa-f:.]+\\]|[^\\u0000-\\u0020\\u007f-\\u009f@:/?#\\[\\]]+)\
        (?::(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}))?\
        (?:[/?#][^\\u0000-\\u0020\\u007f-\\u009f]*)?$";
    let url_pattern = if reach.allow_http { format!("^https?://{AUTHORITY}") } else { format!("^https://{AUTHORITY}") };
    let put_input = json!({"type": "object", "additionalProperties": false, "required": ["name", "url", "events"],
        "properties": {
            "name": name,
            "url": {"type": "string", "maxLength": 2048, "pattern": url_pattern},
            // Event types, each once, or `["*"]` alone: every type.
            "events": {"oneOf": [
                {"type": "array", "minItems": 1, "uniqueItems": true, "items": {"type": "string", "enum": kinds}},
                {"type": "array", "minItems": 1, "maxItems": 1, "items": {"type": "string", "const": "*"}}]},
            "secret": {"type": "string", "pattern": "^whsec_(?:[A-Za-z0-9+/]{4}){8,20}(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
                "description": "whsec_ and the base64 of 24 to 63 random bytes; without it a webhook put again keeps its secret"},
            "rotate": {"type": "boolean", "default": false,
                "description": "Make a new secret for a webhook put again (a secret given is the new one)."}}});
    registry.register(
        Method::new("webhooks", "put", MethodKind::Mutation, handler(move |ctx: &Ctx, body| put(&reach, per_tenant, types, key.as_ref(), ctx, body)))
            .phase("v0.4")
            .summary("Creates or replaces a webhook: its URL, the event types it takes (or [\"*\"]) and its signing secret, answered this once when new (one is made for a new webhook or on rotate; a webhook put again keeps its own).")
            .schemas(
                put_input,
                json!({"type": "object", "required": ["webhook"], "properties": {
                    "webhook": webhook_schema(), "secret": {"type": "string"}}}),
            ),
    );
    registry.register(
        Method::new("webhooks", "get", MethodKind::Read, handler(get))
            .phase("v0.4")
            .summary("One webhook, without its secret.")
            .schemas(by_name.clone(), json!({"type": "object", "properties": {"webhook": webhook_schema()}})),
    );
    registry.register(
        Method::new("webhooks", "list", MethodKind::Read, handler(list))
            .phase("v0.4")
            .summary("The tenant's webhooks, by name, without their secrets.")
            .schemas(
                json!({"type": "object", "additionalProperties": false}),
                json!({"type": "object", "properties": {"webhooks": {"type": "array", "items": webhook_schema()}}}),
            ),
    );
    registry.register(
        Method::new("webhooks", "delete", MethodKind::Mutation, handler(delete))
            .phase("v0.4")
            .summary("Deletes a webhook and what it has not delivered yet.")
            .schemas(by_name.clone(), json!({"type": "object"})),
    );
    registry.register(
        Method::new("webhooks", "test", MethodKind::Mutation, handler(test))
            .phase("v0.4")
            .summary("Delivers a webhook.test event to the webhook now, as any event is delivered.")
            .schemas(by_name, json!({"type": "object", "properties": {"id": {"type": "string"}}})),
    );
    let mut deliveries = Page::schema_properties();
    deliveries.insert("name".into(), json!({"type": "string", "pattern": NAME_PATTERN}));
    deliveries.insert(
        "after".into(),
        json!({"type": "integer", "minimum": 1, "maximum": MAX_COUNT, "description": "List the attempts of deliveries older than this one."}),
    );
    registry.register(
        Method::new("webhooks", "deliveries", MethodKind::Read, handler(list_deliveries))
            .phase("v0.4")
            .summary("A webhook's delivery attempts, newest first: the event, the attempt, its time, status or error, duration, and the delivery's state.")
            .schemas(
                json!({"type": "object", "additionalProperties": false, "required": ["name"], "properties": deliveries}),
                json!({"type": "object", "properties": {"deliveries": {"type": "array", "items": {"type": "object",
                    "required": ["id", "delivery", "event", "attempt", "at", "durationMs", "state"], "properties": {
                        "id": {"type": "string"}, "delivery": {"type": "integer"}, "event": {"type": "string"},
                        "attempt": {"type": "integer"}, "at": {"type": "string", "format": "date-time"},
                        "status": {"type": "integer"}, "error": {"type": "string"}, "durationMs": {"type": "integer"},
                        "state": {"type": "string", "enum": ["pending", "delivered", "failed"]}}}}}}),
            ),
    );
}

/// A stored webhook.
struct Stored {
    name: String,
    url: String,
    events: String,
    enabled: bool,
    disabled: Option<String>,
}

impl Stored {
    fn json(&self) -> Value {
        let events: Vec<&str> = self.events.split(',').filter(|kind| !kind.is_empty()).collect();
        let mut webhook = json!({"name": self.name, "url": self.url, "events": events, "enabled": self.enabled});
        if let Some(disabled) = &self.disabled {
            webhook["disabled"] = json!(disabled);
        }
        webhook
    }
}

fn stored(ctx: &Ctx, name: Option<&str>) -> Result<Vec<Stored>, ApiError> {
    Ok(ctx.db.query(
        "SELECT name, url, events, enabled, disabled FROM webhooks
         WHERE tenant = ?1 AND (?2 = '' OR name = ?2) ORDER BY name",
        params![&ctx.caller.tenant, name.unwrap_or("")],
        |row| {
            Ok(Stored {
                name: row.get(0)?,
                url: row.get(1)?,
                events: row.get(2)?,
                enabled: row.get(3)?,
                disabled: row.get(4)?,
            })
        },
    )?)
}

fn one(ctx: &Ctx, name: &str) -> Result<Stored, ApiError> {
    stored(ctx, Some(name))?
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::not_found(format!("the tenant has no webhook {}", quoted(name))))
}

fn named(body: Value) -> Result<String, ApiError> {
    let mut input = Input::new(body)?;
    let name = input.name("name", true);
    input.finish()?;
    Ok(name.unwrap_or_default())
}

fn put(
    reach: &Reach,
    per_tenant: usize,
    types: &[&str],
    key: Option<&Key>,
    ctx: &Ctx,
    body: Value,
) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let name = input.name("name", true);
    let url = input.string("url", true);
    let events = input.take_value("events");
    let secret = input.string("secret", false);
    // A secret given is the one rotated to; `rotate` asks for a new one made here.
    let rotate = input.boolean("rotate", false).unwrap_or(false);
    let target = url.as_deref().map(|url| reach.target(url)).transpose().unwrap_or_else(|why| {
        input.problem("url", why);
        None
    });
    let events = match events {
        Some(Value::Array(items)) if !items.is_empty() => {
            let mut kinds = Vec::new();
            for item in &items {
                match item.as_str() {
                    Some(kind) if (kind == "*" || types.contains(&kind)) && !kinds.contains(&kind) => kinds.push(kind),
                    _ => {
                        input.problem(
                            "events",
                            format!("must be event types ({}) each once, or [\"*\"]", types.join(", ")),
                        );
                        break;
                    }
                }
            }
            if kinds.contains(&"*") && kinds.len() > 1 {
                input.problem("events", "[\"*\"] takes every event type: list no other beside it");
            }
            kinds.into_iter().map(str::to_owned).collect::<Vec<_>>()
        }
        Some(_) => {
            input.problem("events", "must be a non-empty array of event types, or [\"*\"]");
            Vec::new()
        }
        None => Vec::new(),
    };
    if let Some(secret) = &secret
        && let Err(why) = sign::key(secret)
    {
        input.problem("secret", why);
    }
    // Every address the host resolves to now must be one deliveries may reach.
    if let Some(target) = &target {
        let resolved: Result<Vec<SocketAddr>, String> = (target.host.as_str(), target.port)
            .to_socket_addrs()
            .map(Iterator::collect)
            .map_err(|error| format!("{} does not resolve: {error}", target.host));
        if let Err(why) = resolved.and_then(|resolved| reach.check(target, &resolved)) {
            input.extend([Problem { path: "/url".into(), message: why }]);
        }
    }
    input.finish()?;
    let (Some(name), Some(url)) = (name, url) else { return Err(ApiError::internal("a checked input lacks a field")) };
    let listed = format!(",{},", events.join(","));
    let previous = stored(ctx, Some(&name))?.into_iter().next();
    if previous.is_none() {
        let count: i64 = ctx.db.query_one(
            "SELECT count(*) FROM webhooks WHERE tenant = ?1",
            params![&ctx.caller.tenant],
            |row| row.get(0),
        )?;
        if usize::try_from(count).unwrap_or(usize::MAX) >= per_tenant {
            return Err(ApiError::failed_precondition(format!(
                "the tenant has {count} webhooks, the most this deployment allows (serve --webhooks-per-tenant); \
                 delete one, or put this one under the name of one it replaces"
            )));
        }
    }
    // A webhook put again keeps its secret, so its receivers keep verifying, unless one
    // is given or a new one asked for; a new secret is answered, this once.
    let kept = match (&secret, rotate, &previous) {
        (None, false, Some(_)) => ctx.db.query_opt(
            "SELECT secret FROM webhooks WHERE tenant = ?1 AND name = ?2",
            params![&ctx.caller.tenant, &name],
            |row| row.get::<String>(0),
        )?,
        _ => None,
    };
    // Stored sealed when the deployment has a key (a kept one stored before there was a
    // key is sealed now).
    let (stored_secret, new_secret) = match kept {
        Some(kept) => (at_rest::keep(key, &ctx.caller.tenant, &name, kept)?, None),
        None => {
            let new_secret = secret.unwrap_or_else(sign::new_secret);
            (at_rest::store(key, &ctx.caller.tenant, &name, &new_secret)?, Some(new_secret))
        }
    };
    ctx.db.execute(
        "INSERT INTO webhooks (tenant, name, url, events, secret, enabled, disabled, updated_at, updated_by)
         VALUES (?1, ?2, ?3, ?4, ?5, 1, NULL, ?6, ?7)
         ON CONFLICT (tenant, name) DO UPDATE SET url = excluded.url, events = excluded.events,
           secret = excluded.secret, enabled = 1, disabled = NULL, updated_at = excluded.updated_at,
           updated_by = excluded.updated_by",
        params![&ctx.caller.tenant, &name, &url, &listed, &stored_secret, &crate::db::now(), &ctx.caller.principal],
    )?;
    let now = Stored { name, url, events: listed, enabled: true, disabled: None };
    let was = previous
        .as_ref()
        .map(|previous| (json!(previous.url), previous.json()["events"].clone(), json!(previous.enabled)));
    let is = (json!(now.url), now.json()["events"].clone(), json!(true));
    let changes = [
        FieldChange { field: "url", from: was.as_ref().map(|was| &was.0), to: Some(&is.0) },
        FieldChange { field: "events", from: was.as_ref().map(|was| &was.1), to: Some(&is.1) },
        FieldChange { field: "enabled", from: was.as_ref().map(|was| &was.2), to: Some(&is.2) },
    ];
    audit::record(ctx, "compute.webhooks.put", "webhook", &now.name, &changes)?;
    let mut answer = json!({"webhook": now.json()});
    if let Some(secret) = new_secret {
        answer["secret"] = json!(secret);
    }
    Ok(answer)
}

fn get(ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let name = named(body)?;
    Ok(json!({"webhook": one(ctx, &name)?.json()}))
}

fn list(ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    Input::new(body)?.finish()?;
    let webhooks: Vec<Value> = stored(ctx, None)?.iter().map(Stored::json).collect();
    Ok(json!({"webhooks": webhooks}))
}

fn delete(ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let name = named(body)?;
    let previous = one(ctx, &name)?;
    let tenant = &ctx.caller.tenant;
    ctx.db.execute("DELETE FROM webhooks WHERE tenant = ?1 AND name = ?2", params![tenant, &name])?;
    ctx.db.execute("DELETE FROM webhook_deliveries WHERE tenant = ?1 AND webhook = ?2", params![tenant, &name])?;
    ctx.db.execute("DELETE FROM webhook_attempts WHERE tenant = ?1 AND webhook = ?2", params![tenant, &name])?;
    let was = (json!(previous.url), previous.json()["events"].clone());
    let changes = [
        FieldChange { field: "url", from: Some(&was.0), to: None },
        FieldChange { field: "events", from: Some(&was.1), to: None },
    ];
    audit::record(ctx, "compute.webhooks.delete", "webhook", &name, &changes)?;
    Ok(json!({}))
}

/// A `webhook.test` delivery, made now in the outbox like any event's.
fn test(ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let name = named(body)?;
    let webhook = one(ctx, &name)?;
    if !webhook.enabled {
        return Err(ApiError::failed_precondition(format!(
            "the webhook {} is disabled ({}); put it again to enable it",
            quoted(&name),
            webhook.disabled.unwrap_or_default()
        )));
    }
    let random: [u8; 12] = rand::random();
    let message = format!("test_{}", data_encoding::HEXLOWER.encode(&random));
    let body = json!({"type": TEST, "timestamp": crate::db::now(),
                      "data": {"webhook": name, "tenant": ctx.caller.tenant, "seq": 0}});
    insert(ctx.db, &ctx.caller.tenant, &name, &message, TEST, &body.to_string())?;
    Ok(json!({"id": message}))
}

fn list_deliveries(ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let name = input.name("name", true).unwrap_or_default();
    let after = input.count("after", false);
    if after == Some(0) {
        input.problem("after", "must be a delivery, 1 or more");
    }
    let limit = input.limit();
    input.finish()?;
    one(ctx, &name)?;
    let before = after.map_or(i64::MAX, |after| i64::try_from(after).unwrap_or(i64::MAX));
    let attempts = ctx.db.query(
        "SELECT d.message, a.delivery, d.type, a.attempt, a.at, a.status, a.error, a.duration_ms, d.state
         FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery
         WHERE a.tenant = ?1 AND a.webhook = ?2 AND a.delivery < ?3
         ORDER BY a.delivery DESC, a.attempt DESC LIMIT ?4",
        params![&ctx.caller.tenant, &name, before, limit as i64],
        |row| {
            let mut attempt = json!({
                "id": row.get::<String>(0)?, "delivery": row.get::<i64>(1)?, "event": row.get::<String>(2)?,
                "attempt": row.get::<i64>(3)?, "at": row.get::<String>(4)?, "durationMs": row.get::<i64>(7)?,
                "state": row.get::<String>(8)?,
            });
            if let Some(status) = row.get::<Option<i64>>(5)? {
                attempt["status"] = json!(status);
            }
            if let Some(error) = row.get::<Option<String>>(6)? {
                attempt["error"] = json!(error);
            }
            Ok(attempt)
        },
    )?;
    Ok(json!({"deliveries": attempts}))
}
