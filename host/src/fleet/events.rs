//! The event log: events stored with a sequence number, listed per tenant by
//! `compute.events.list`, and followed live as Server-Sent Events.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Channel};
use hyper::body::{Frame, Incoming};
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response};
use serde_json::{Value, json};

use crate::api::{ApiError, Problem};
use crate::app::App;
use crate::calls::auth;
use crate::calls::input::{Input, MAX_COUNT, Page};
use crate::calls::registry::{Ctx, Method, MethodKind, Registry};
use crate::db::{self, Conn};
use crate::http::{Body, bearer};
use crate::metrics::Metrics;
use crate::params;

pub const DRIFTED: &str = "fleet.drifted";
pub const CONVERGED: &str = "fleet.converged";
/// fleet.drift restored a revision that heals (SPEC §15).
pub const HEALED: &str = "fleet.healed";
pub const STREAM_PATH: &str = "/api/compute/events/stream";

const KEEPALIVE: Duration = Duration::from_secs(15);

pub fn register(registry: &mut Registry) {
    registry.register(
        Method::new("events", "list", MethodKind::Read, Arc::new(list))
            .phase("v0.2")
            .summary("Lists the tenant's events after a sequence number, oldest first.")
            .schemas(
                json!({"type": "object", "additionalProperties": false, "properties": Page::schema_properties()}),
                json!({"type": "object", "properties": {"events": {"type": "array", "items": {"type": "object"}}}}),
            ),
    );
}

/// Stores an event in the caller's transaction, which must be a writer's: writers run
/// one at a time, so sequence numbers are given in the order their transactions commit
/// and a reader resuming after `seq` never skips one committed late. Subscribers of this
/// process are woken after commit by the caller; those of other replicas by `NOTIFY`.
pub fn publish(metrics: &Metrics, db: &Conn, tenant: &str, kind: &str, data: &Value) -> Result<i64, ApiError> {
    metrics.published(kind);
    let seq = db.query_one(
        "INSERT INTO events (tenant, type, at, data) VALUES (?1, ?2, ?3, ?4) RETURNING seq",
        params![tenant, kind, &db::now(), &data.to_string()],
        |row| row.get(0),
    )?;
    db::notify_events(db)?;
    Ok(seq)
}

fn read(db: &Conn, tenant: &str, after: u64, limit: u64) -> Result<Vec<Value>, ApiError> {
    Ok(db.query(
        "SELECT seq, type, tenant, at, data FROM events WHERE tenant = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
        params![tenant, after as i64, limit as i64],
        |row| {
            let seq: i64 = row.get(0)?;
            let data: Value = serde_json::from_str(row.text(4)?).map_err(|error| db::decode(4, error))?;
            Ok(json!({ "seq": seq, "type": row.text(1)?, "tenant": row.text(2)?, "at": row.text(3)?, "data": data }))
        },
    )?)
}

fn list(ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let page = input.page();
    input.finish()?;
    let events = read(ctx.db, &ctx.caller.tenant, page.after, page.limit)?;
    Ok(json!({ "events": events }))
}

/// Where a stream resumes: after `Last-Event-ID` if the client sent one (a reconnecting
/// `EventSource` does), else after the `after` query parameter, else from the start.
/// Both, when given, must be sequence numbers (0 … 2^53 − 1); anything else is refused
/// rather than replayed from the start.
fn resume_point<B>(request: &Request<B>) -> Result<u64, ApiError> {
    let parse = |text: &str, path: &str, what: &str| {
        text.parse::<u64>().ok().filter(|seq| *seq <= MAX_COUNT).ok_or_else(|| {
            ApiError::invalid(vec![Problem {
                path: path.to_owned(),
                message: format!(
                    "{what} {} is not an event sequence number (0 to 2^53 - 1)",
                    fleet_guest::grammar::quoted(text)
                ),
            }])
        })
    };
    let query = request.uri().query().unwrap_or_default();
    let mut after = 0;
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        match pair.split_once('=') {
            Some(("after", value)) => after = parse(value, "/after", "after")?,
            _ => {
                return Err(ApiError::invalid(vec![Problem {
                    path: String::new(),
                    message: format!(
                        "unknown query parameter {}; the stream takes `after`",
                        fleet_guest::grammar::quoted(pair)
                    ),
                }]));
            }
        }
    }
    if let Some(header) = request.headers().get("last-event-id") {
        let text = header.to_str().unwrap_or("(not text)");
        after = parse(text.trim(), "", "the Last-Event-ID header")?;
    }
    Ok(after)
}

/// The caller of a stream, authenticated and authorized like `compute.events.list`.
/// Asked again before every delivery, so that a token revoked (by any process on the
/// database), expired or stripped of its grant since the stream opened gets nothing
/// more: its stream ends (SPEC §9).
fn stream_caller(app: &App, authorization: &str) -> Result<auth::Caller, ApiError> {
    let db = app.db.get()?;
    let caller = auth::authenticate_with(&db, Some(authorization), Some(&app.tokens))?;
    let method = app.registry.by_name("compute.events.list").ok_or_else(|| ApiError::not_found("no events"))?;
    auth::authorize(&caller, method)?;
    Ok(caller)
}

/// `GET /api/compute/events/stream[?after=N]`: the tenant's events as Server-Sent Events,
/// authorized like `compute.events.list`, again before each delivery. Resumes after
/// `Last-Event-ID` when given.
pub async fn stream(app: Arc<App>, request: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let authorization: Arc<str> = bearer(&request)?.into();
    let caller = {
        let (app, authorization) = (app.clone(), authorization.clone());
        tokio::task::spawn_blocking(move || stream_caller(&app, &authorization)).await.map_err(ApiError::internal)??
    };
    let mut after = resume_point(&request)?;
    let (mut sender, body) = Channel::<Bytes, Infallible>::new(16);
    let mut wake = app.events.subscribe();
    let mut stopping = app.stopping.subscribe();
    tokio::spawn(async move {
        loop {
            let batch = {
                let (app, authorization, tenant) = (app.clone(), authorization.clone(), caller.tenant.clone());
                tokio::task::spawn_blocking(move || {
                    // The token answers for this delivery too; the tenant stays the one
                    // the stream opened for.
                    let now = stream_caller(&app, &authorization)?;
                    if now.tenant != tenant {
                        return Err(ApiError::new(crate::api::Code::Unauthenticated, "the token changed tenant"));
                    }
                    read(&app.db.get()?, &tenant, after, Page::MAX_LIMIT)
                })
                .await
            };
            let events = match batch {
                Ok(Ok(events)) => events,
                Ok(Err(error)) => {
                    tracing::info!(%error, "an event stream ended (its token no longer answers for it, or the database is away)");
                    return;
                }
                Err(_) => return,
            };
            for event in &events {
                after = event["seq"].as_u64().unwrap_or(after);
                let frame =
                    format!("id: {after}\nevent: {}\ndata: {event}\n\n", event["type"].as_str().unwrap_or("event"));
                if sender.send_data(Bytes::from(frame)).await.is_err() {
                    return;
                }
            }
            let woken = tokio::select! {
                woken = tokio::time::timeout(KEEPALIVE, wake.recv()) => woken,
                // The server stops serving (or already did, when the stream opened).
                _ = stopping.wait_for(|stopping| *stopping) => return,
            };
            match woken {
                Ok(Ok(())) | Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
                Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => return,
                Err(_) => {
                    if sender.send(Frame::data(Bytes::from_static(b": keep-alive\n\n"))).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut response = Response::new(body.boxed());
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}
