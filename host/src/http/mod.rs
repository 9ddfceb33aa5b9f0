//! The HTTP server: hyper over tokio, routing from the method registry, the error
//! envelope, the body limit, and graceful shutdown.

pub mod connection;
pub mod console;
pub mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::header::{ACCEPT, ALLOW, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method as HttpMethod, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

use crate::api::{ApiError, Code};
use crate::app::App;
use crate::calls::auth;
use crate::fleet::{self, events};
use crate::http::connection::{Activity, Enveloped, TimedIo, Tracked};

pub type Body = BoxBody<Bytes, Infallible>;

/// Serves until `shutdown` resolves, then lets open connections finish.
///
/// At most `max_connections` are open at once: the next is accepted only when one ends,
/// so the others wait in the listen backlog while those open keep being served. An
/// accept that fails (out of file descriptors, say) is retried after a pause that doubles
/// up to a second, and logged once per run of failures, never in a loop.
pub async fn run(app: Arc<App>, listener: TcpListener, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let graceful = GracefulShutdown::new();
    let limits = app.config.limits;
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut backoff = AcceptBackoff::default();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = accept(&listener, &slots) => accepted,
            () = &mut shutdown => break,
        };
        let (stream, slot) = match accepted {
            Ok(accepted) => {
                backoff.succeeded();
                accepted
            }
            Err(error) => {
                let pause = backoff.failed(&error);
                tokio::select! {
                    () = tokio::time::sleep(pause) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        let activity = Arc::new(Activity::default());
        let io = TimedIo::new(stream, activity.clone(), limits);
        let app = app.clone();
        let tls = app.tls.clone();
        let service = service_fn(move |request| {
            let in_flight = activity.begin();
            let app = app.clone();
            async move {
                let response = handle(app, request).await;
                Ok::<_, Infallible>(response.map(|body| Tracked::new(body, in_flight)))
            }
        });
        let Some(tls) = tls else {
            let connection =
                graceful.watch(http1::Builder::new().serve_connection(TokioIo::new(Enveloped::new(io)), service));
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::debug!(%error, "connection ended with an error");
                }
                drop(slot);
            });
            continue;
        };
        // The handshake in the connection's own task, within the head timeout (the
        // timed socket also cuts a client that sends nothing), so that a slow client
        // never holds up accepting others.
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            match tokio::time::timeout(limits.head_timeout, tls.accept(io)).await {
                Ok(Ok(stream)) => {
                    let connection =
                        http1::Builder::new().serve_connection(TokioIo::new(Enveloped::new(stream)), service);
                    if let Err(error) = watcher.watch(connection).await {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                }
                Ok(Err(error)) => tracing::debug!(%error, "a TLS handshake failed"),
                Err(_) => tracing::debug!("a TLS handshake took longer than the head timeout"),
            }
            drop(slot);
        });
    }
    drop(listener);
    app.stopping.send_replace(true);
    graceful.shutdown().await;
    Ok(())
}

/// Waits for a free connection slot, then for a connection.
async fn accept(listener: &TcpListener, slots: &Arc<Semaphore>) -> std::io::Result<(TcpStream, OwnedSemaphorePermit)> {
    let slot = slots.clone().acquire_owned().await.map_err(std::io::Error::other)?;
    let (stream, _) = listener.accept().await?;
    Ok((stream, slot))
}

/// The pause after failed accepts: 10 ms, doubling up to 1 s, reset by a success.
#[derive(Default)]
struct AcceptBackoff {
    failures: u32,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(10);
    const LONGEST: Duration = Duration::from_secs(1);

    fn failed(&mut self, error: &std::io::Error) -> Duration {
        if self.failures == 0 {
            tracing::warn!(%error, "accepting connections failed; retrying with backoff");
        }
        self.failures = self.failures.saturating_add(1);
        Self::FIRST.saturating_mul(1 << (self.failures - 1).min(7)).min(Self::LONGEST)
    }

    fn succeeded(&mut self) {
        if self.failures > 0 {
            tracing::info!(failures = self.failures, "accepting connections again");
        }
        self.failures = 0;
    }
}

/// What a path serves, and with which HTTP method.
enum Route {
    Health,
    Metrics,
    Catalogue,
    OpenApi,
    EventStream,
    Console,
    Method,
}

impl Route {
    fn of(app: &App, path: &str) -> Option<Route> {
        Some(match path {
            "/healthz" => Route::Health,
            "/metrics" => Route::Metrics,
            "/api/methods" => Route::Catalogue,
            "/api/openapi.json" => Route::OpenApi,
            events::STREAM_PATH => Route::EventStream,
            _ if console::owns(path) => Route::Console,
            _ if app.registry.by_path(path).is_some() => Route::Method,
            _ => return None,
        })
    }

    fn http_method(&self) -> (HttpMethod, &'static str) {
        match self {
            Route::Method => (HttpMethod::POST, "POST"),
            _ => (HttpMethod::GET, "GET"),
        }
    }
}

/// What one request's log event says (SPEC §13): filled in as the request is served.
struct RequestLog {
    /// The registry name of the method, or `other`.
    method: String,
    tenant: Option<String>,
    principal: Option<String>,
    error: Option<ApiError>,
    sandbox: Duration,
}

impl RequestLog {
    /// One structured event per request, at `error` for an internal error (whose cause
    /// is logged here, once, and nowhere else) and `info` otherwise.
    fn emit(&self, status: StatusCode, elapsed: Duration) {
        let code = self.error.as_ref().map(|error| error.code.as_str());
        let cause = self.error.as_ref().and_then(|error| error.cause.as_deref());
        macro_rules! event {
            ($level:ident) => {
                tracing::$level!(
                    target: "fleet::request",
                    method = %self.method,
                    tenant = self.tenant.as_deref(),
                    principal = self.principal.as_deref(),
                    status = status.as_u16(),
                    code,
                    duration_ms = elapsed.as_secs_f64() * 1e3,
                    sandbox_ms = self.sandbox.as_secs_f64() * 1e3,
                    cause,
                    "request"
                )
            };
        }
        if cause.is_some() {
            event!(error);
        } else {
            event!(info);
        }
    }

    fn failed(&mut self, error: ApiError) -> Response<Body> {
        let response = error_response(&error);
        self.error = Some(error);
        response
    }
}

async fn handle(app: Arc<App>, request: Request<Incoming>) -> Response<Body> {
    let started = std::time::Instant::now();
    let mut log =
        RequestLog { method: "other".into(), tenant: None, principal: None, error: None, sandbox: Duration::ZERO };
    // What the server logs while serving the request carries its span.
    let span = tracing::info_span!("request", path = %request.uri().path());
    let response = route(&app, request, &mut log).instrument(span.clone()).await;
    let elapsed = started.elapsed();
    app.metrics.request(&log.method, response.status().as_u16(), elapsed);
    span.in_scope(|| log.emit(response.status(), elapsed));
    response
}

async fn route(app: &Arc<App>, request: Request<Incoming>, log: &mut RequestLog) -> Response<Body> {
    let path = request.uri().path().to_owned();
    let Some(route) = Route::of(app, &path) else {
        return log.failed(ApiError::not_found(format!("no route for {} {path}", request.method())));
    };
    let (allowed, allow) = route.http_method();
    if *request.method() != allowed {
        let message = format!("{path} answers {allow} only, not {}", request.method());
        let error = ApiError::new(Code::MethodNotAllowed, message);
        let mut response = error_response(&error);
        response.headers_mut().insert(ALLOW, HeaderValue::from_static(allow));
        log.error = Some(error);
        return response;
    }
    if let Err(error) = check_head(&request, app.config.limits.max_head_bytes) {
        let response = error_response_as(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, &error);
        log.error = Some(error);
        return response;
    }
    match route {
        Route::Health => text(StatusCode::OK, "ok"),
        Route::Catalogue => json(StatusCode::OK, &app.registry.catalogue()),
        Route::OpenApi => json(StatusCode::OK, &openapi(app)),
        Route::Metrics => metrics(app.clone()).await.unwrap_or_else(|error| log.failed(error)),
        Route::EventStream => events::stream(app.clone(), request).await.unwrap_or_else(|error| log.failed(error)),
        Route::Console => console::serve(&app.config.console_dir, &path).await,
        Route::Method => {
            if let Some(method) = app.registry.by_path(&path) {
                log.method.clone_from(&method.name);
            }
            match call(app.clone(), request, log).await {
                Ok(output) => json_text(StatusCode::OK, output),
                Err(error) => log.failed(error),
            }
        }
    }
}

/// `GET /metrics`: the exposition, with the drift gauges read from the database.
async fn metrics(app: Arc<App>) -> Result<Response<Body>, ApiError> {
    tokio::task::spawn_blocking(move || {
        let db = app.db.get()?;
        let (applied, drifted): (i64, i64) = db.query_one(
            "SELECT (SELECT count(*) FROM fleet_applied), (SELECT count(*) FROM fleet_drift)",
            &[],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        let text = app.metrics.render(drifted, applied - drifted);
        let mut response = Response::new(Full::new(Bytes::from(text)).boxed());
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
        Ok(response)
    })
    .await
    .map_err(ApiError::internal)?
}

/// The OpenAPI description: the registry's methods, and the routes served here besides.
pub fn openapi(app: &App) -> Value {
    let mut description = app.registry.openapi();
    let error = json!({"description": "an error (SPEC §2)",
                       "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    let text = |summary: &str, media: &str, schema: Value| {
        json!({"get": {"summary": summary, "responses": {
            "200": {"description": "success", "content": {media: {"schema": schema}}}, "default": error}}})
    };
    let routes = [
        ("/metrics", text("Prometheus text exposition (SPEC §13).", "text/plain", json!({"type": "string"}))),
        (
            "/healthz",
            text("Answers `ok` while the server serves.", "text/plain", json!({"type": "string", "enum": ["ok"]})),
        ),
        (
            "/api/methods",
            text(
                "The method catalogue of the registry.",
                "application/json",
                json!({"type": "object", "required": ["methods"],
            "properties": {"methods": {"type": "array", "items": {"type": "object"}}}}),
            ),
        ),
        ("/api/openapi.json", text("This description.", "application/json", json!({"type": "object"}))),
        (console::PAGE_PATH, text("The console (SPEC §16).", "text/html", json!({"type": "string"}))),
        (
            console::OLD_PATH,
            json!({"get": {"summary": "The console's old address: redirects to /console.",
                "responses": {"308": {"description": "to /console",
                    "headers": {"Location": {"schema": {"type": "string", "enum": [console::PAGE_PATH]}}}}}}}),
        ),
    ];
    let file = |summary: &str, name: &str| {
        let string = json!({"schema": {"type": "string"}});
        json!({"get": {"summary": summary,
            "parameters": [{"name": name, "in": "path", "required": true, "schema": {"type": "string"}}],
            "responses": {"200": {"description": "the file", "content": {
                "text/javascript": string, "text/css": string, "application/wasm": string}}, "default": error}}})
    };
    let paths = description["paths"].as_object_mut().expect("the registry describes paths");
    for (path, item) in routes {
        paths.insert(path.to_owned(), item);
    }
    paths.insert(
        "/console/{file}".to_owned(),
        file("A file of the console page (its scripts and style sheet).", "file"),
    );
    paths.insert(
        "/console/assets/{asset}".to_owned(),
        file("The planner transpiled by jco for the console (built by console/build.sh).", "asset"),
    );
    paths.insert(
        events::STREAM_PATH.to_owned(),
        json!({"get": {
            "operationId": "compute.events.stream",
            "summary": "The tenant's events as Server-Sent Events, live; authorized like compute.events.list.",
            "security": [{"bearer": []}],
            "parameters": [
                {"name": "after", "in": "query", "required": false,
                 "description": "resume after this sequence number",
                 "schema": {"type": "integer", "minimum": 0, "maximum": crate::calls::input::MAX_COUNT}},
                {"name": "Last-Event-ID", "in": "header", "required": false,
                 "description": "resume after this sequence number (sent by a reconnecting EventSource)",
                 "schema": {"type": "integer", "minimum": 0, "maximum": crate::calls::input::MAX_COUNT}}],
            "responses": {
                // The schema of one event, as OpenAPI 3.1 tools read `text/event-stream`
                // (3.2 names it `itemSchema`): its fields, `data` the event's JSON.
                "200": {"description": "an endless stream of `id`, `event` and `data` frames",
                        "content": {"text/event-stream": {"schema": {
                            "type": "object",
                            "required": ["id", "event", "data"],
                            "properties": {
                                "id": {"type": "string", "pattern": "^[0-9]+$",
                                       "description": "the event's sequence number"},
                                "event": {"type": "string", "description": "the event's type"},
                                "data": {"type": "string", "contentMediaType": "application/json",
                                         "description": "the event, as compute.events.list returns it"}}}}}},
                "default": error}}}),
    );
    description
}

/// Refuses a request head larger than `limit`. hyper refuses much larger heads itself,
/// before any of our code runs, and [`Enveloped`] gives its answer the envelope.
fn check_head<B>(request: &Request<B>, limit: usize) -> Result<(), ApiError> {
    let size = request.uri().path_and_query().map_or(0, |target| target.as_str().len())
        + request.headers().iter().map(|(name, value)| name.as_str().len() + value.len() + 4).sum::<usize>();
    if size > limit {
        return Err(ApiError::new(
            Code::PayloadTooLarge,
            format!("the request head is {size} bytes, more than the limit of {limit}"),
        ));
    }
    Ok(())
}

/// A method call: authenticate, route, authorize, read the body, run.
async fn call(app: Arc<App>, request: Request<Incoming>, log: &mut RequestLog) -> Result<String, ApiError> {
    let path = request.uri().path().to_owned();
    let authorization = bearer(&request)?;
    let wants_state = request.headers().get(ACCEPT).is_some_and(|accept| accept == fleet::STATE_MEDIA_TYPE);
    let limits = app.config.limits;
    let body = read_body(request, app.config.body_limit, limits.body_timeout).await?;
    let (identity, result, sandbox) = tokio::task::spawn_blocking(move || {
        let mut identity = None;
        let result = (|| {
            let db = app.db.get()?;
            let caller = auth::authenticate_with(&db, Some(&authorization), Some(&app.tokens))?;
            identity = Some((caller.tenant.clone(), caller.principal.clone()));
            let method =
                app.registry.by_path(&path).ok_or_else(|| ApiError::not_found(format!("no method at {path}")))?;
            auth::authorize(&caller, method)?;
            if wants_state && fleet::answers_state(&method.name) {
                return fleet::state(&app, &caller, &db);
            }
            crate::calls::dispatch(&app, caller, db, method, &body)
        })();
        (identity, result, crate::metrics::take_sandbox_time())
    })
    .await
    .unwrap_or_else(|panic| (None, Err(ApiError::internal(format_args!("handler panicked: {panic}"))), Duration::ZERO));
    if let Some((tenant, principal)) = identity {
        log.tenant = Some(tenant);
        log.principal = Some(principal);
    }
    log.sandbox = sandbox;
    result
}

pub fn bearer<B>(request: &Request<B>) -> Result<String, ApiError> {
    request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .ok_or_else(|| ApiError::new(Code::Unauthenticated, "a bearer token is required"))
}

/// How fast a body must arrive once its first `--body-timeout` has passed: a second
/// more for every 64 KiB received (docs/decisions/0021).
const MIN_BODY_RATE: u64 = 64 << 10;

/// Reads a body of at most `limit` bytes, of which some must arrive every `pause`, and
/// all of it within `pause` plus a second per [`MIN_BODY_RATE`] bytes received: a body
/// trickled in a byte at a time ends there, not never.
async fn read_body(request: Request<Incoming>, limit: usize, pause: Duration) -> Result<Bytes, ApiError> {
    let too_large =
        || ApiError::new(Code::PayloadTooLarge, format!("the request body is larger than the limit of {limit} bytes"));
    let declared = request.headers().get(CONTENT_LENGTH).and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    let started = tokio::time::Instant::now();
    let mut arrived = started;
    let mut body = Limited::new(request.into_body(), limit);
    let mut collected = Vec::with_capacity(declared.unwrap_or(0) as usize);
    loop {
        let allowed = pause + Duration::from_secs_f64(collected.len() as f64 / MIN_BODY_RATE as f64);
        let left = allowed.saturating_sub(started.elapsed());
        let frame = tokio::time::timeout(pause.min(left), body.frame()).await.map_err(|_| {
            let message = match arrived.elapsed() < pause {
                true => format!(
                    "the request body arrived too slowly: {} bytes in {} (a body may take {} and a second more per \
                     64 KiB)",
                    collected.len(),
                    humantime::format_duration(Duration::from_secs(started.elapsed().as_secs())),
                    humantime::format_duration(pause)
                ),
                false => {
                    format!("the request body stopped arriving: nothing came for {}", humantime::format_duration(pause))
                }
            };
            ApiError::new(Code::InvalidArgument, message)
        })?;
        match frame {
            None => return Ok(Bytes::from(collected)),
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    collected.extend_from_slice(data);
                    arrived = tokio::time::Instant::now();
                }
            }
            Some(Err(error)) if error.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
            Some(Err(error)) => {
                return Err(ApiError::new(
                    Code::InvalidArgument,
                    format!("the request body could not be read: {error}"),
                ));
            }
        }
    }
}

pub fn json(status: StatusCode, value: &Value) -> Response<Body> {
    json_text(status, value.to_string())
}

fn json_text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

/// The error envelope of SPEC §2 with the status of its code; `UNAVAILABLE` says when
/// to try again.
pub fn error_response(error: &ApiError) -> Response<Body> {
    error_response_as(crate::api::status(error.code), error)
}

/// The error envelope with a status of HTTP's own rather than the code's: 431 carries
/// `PAYLOAD_TOO_LARGE` (docs/decisions/0021).
fn error_response_as(status: StatusCode, error: &ApiError) -> Response<Body> {
    let mut response = json(status, &error.body());
    if error.code == Code::Unavailable {
        response.headers_mut().insert(RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_backoff_doubles_to_a_second_and_resets() {
        let mut backoff = AcceptBackoff::default();
        let error = std::io::Error::from_raw_os_error(24);
        let pauses: Vec<u128> = (0..10).map(|_| backoff.failed(&error).as_millis()).collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        backoff.succeeded();
        assert_eq!(backoff.failed(&error), Duration::from_millis(10));
    }
}
