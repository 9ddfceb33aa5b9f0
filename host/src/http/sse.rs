//! The event stream's transport (SPEC §6.5, §16): `GET /api/compute/events/stream`,
//! the tenant's events as Server-Sent Events, authorized like `compute.events.list` and
//! asked again before every delivery, so that a token revoked (by any process on the
//! database), expired or stripped of its grant since the stream opened gets nothing
//! more: its stream ends. While the database is away (an outage, a failover) a stream
//! waits and then resumes after the last event it sent, skipping and repeating none.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Channel};
use hyper::body::{Frame, Incoming};
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response};
use tokio::sync::watch;

use super::{Body, bearer};
use crate::api::{ApiError, Problem};
use crate::calls::Dispatcher;
use crate::calls::input::{MAX_COUNT, Page};
use crate::events::{self, Wake};

pub const STREAM_PATH: &str = "/api/compute/events/stream";

/// The method a stream is authorized as.
const LIST: &str = "compute.events.list";

const KEEPALIVE: Duration = Duration::from_secs(15);
/// How often a stream whose database is away looks again.
const OUTAGE_RETRY: Duration = Duration::from_millis(500);

/// What the streams need: who may read them, what wakes them, and when the server
/// stops (they never end by themselves).
#[derive(Clone)]
pub struct Events {
    pub dispatcher: Arc<Dispatcher>,
    pub wake: Wake,
    pub stopping: watch::Receiver<bool>,
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

/// `GET /api/compute/events/stream[?after=N]`: the tenant's events as Server-Sent Events,
/// authorized like `compute.events.list`, again before each delivery. Resumes after
/// `Last-Event-ID` when given.
pub async fn stream(events: Events, request: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let authorization: Arc<str> = bearer(&request)?.into();
    let caller = {
        let (dispatcher, authorization) = (events.dispatcher.clone(), authorization.clone());
        tokio::task::spawn_blocking(move || dispatcher.authorized(&authorization, LIST))
            .await
            .map_err(ApiError::internal)??
    };
    let mut after = resume_point(&request)?;
    let (mut sender, body) = Channel::<Bytes, Infallible>::new(16);
    let mut wake = events.wake.subscribe();
    let mut stopping = events.stopping.clone();
    tokio::spawn(async move {
        loop {
            let batch = {
                let (dispatcher, authorization, tenant) =
                    (events.dispatcher.clone(), authorization.clone(), caller.tenant.clone());
                tokio::task::spawn_blocking(move || {
                    // The token answers for this delivery too; the tenant stays the one
                    // the stream opened for.
                    let now = dispatcher.authorized(&authorization, LIST)?;
                    if now.tenant != tenant {
                        return Err(ApiError::new(crate::api::Code::Unauthenticated, "the token changed tenant"));
                    }
                    events::read(&dispatcher.db().get()?, &tenant, after, Page::MAX_LIMIT)
                })
                .await
            };
            let events = match batch {
                Ok(Ok(events)) => events,
                // The database is away (an outage, a failover): the stream waits for it
                // and resumes where it was. A keep-alive each time finds a client gone.
                Ok(Err(error)) if error.code == crate::api::Code::Unavailable => {
                    let keep_alive = sender.send(Frame::data(Bytes::from_static(b": keep-alive\n\n")));
                    if keep_alive.await.is_err() {
                        return;
                    }
                    tokio::select! {
                        () = tokio::time::sleep(OUTAGE_RETRY) => continue,
                        _ = stopping.wait_for(|stopping| *stopping) => return,
                    }
                }
                Ok(Err(error)) => {
                    tracing::info!(%error, "an event stream ended: its token no longer answers for it");
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
