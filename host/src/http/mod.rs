//! The HTTP server: hyper over tokio, the route table, the error envelope, the body
//! limit and timeout, `/metrics`, and graceful shutdown. Methods go to the
//! [`Dispatcher`]; the event stream is `sse`, the console's page `console`, the API's
//! description `openapi`; a git source's inbound hook goes to [`Hooks`].

pub mod connection;
pub mod console;
mod openapi;
pub mod request_id;
pub mod sse;
pub mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::path::PathBuf;
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
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tracing::Instrument;

use crate::api::{ApiError, Code};
use crate::calls::Dispatcher;
use crate::calls::dispatch::Reply;
use crate::calls::memory::{Held, RequestMemory};
use crate::calls::registry::StateForm;
use crate::events::Wake;
use crate::http::connection::{Activity, Enveloped, Limits, TimedIo, Tracked};
use crate::http::request_id::RequestId;
use crate::metrics::Metrics;
use crate::sources::hook::{self, Hooks, Outcome};

pub use openapi::openapi;

pub type Body = BoxBody<Bytes, Infallible>;

/// The text of `GET /metrics`, made when asked (its drift gauges are read from the
/// database, so that every replica reports the same numbers).
pub type Exposition = Arc<dyn Fn() -> Result<String, ApiError> + Send + Sync>;

/// What the server serves with: the methods, through their dispatcher; the limits of
/// SPEC §7a; TLS when it serves HTTPS; the metrics it counts requests in and exposes;
/// the console's assets; and the event streams' wake-ups.
pub struct Server {
    pub dispatcher: Arc<Dispatcher>,
    pub limits: Limits,
    pub body_limit: usize,
    /// What requests hold while they are served, against one total.
    pub memory: Arc<RequestMemory>,
    /// Accepts HTTPS connections, when the server serves HTTPS.
    pub tls: Option<tls::TlsAcceptor>,
    pub metrics: Metrics,
    pub exposition: Exposition,
    /// Where the console's built assets are read from (`--console-dir`), if not from the
    /// binary.
    pub console_dir: Option<PathBuf>,
    pub wake: Wake,
    /// Turns true when the server stops serving: endless responses (event streams) end,
    /// so that a graceful shutdown does not wait for them forever.
    pub stopping: watch::Sender<bool>,
    /// Receives git sources' inbound hooks (`POST /hooks/sources/<id>`), when served.
    pub hooks: Option<Arc<Hooks>>,
    /// `GET /api/openapi.json`, made once.
    description: Value,
}

/// The memory requests may hold at once unless the deployment says otherwise: about
/// sixty bodies of the largest size while they wait, three while methods read them.
pub const DEFAULT_REQUEST_MEMORY: usize = 1 << 30;

impl Server {
    pub fn new(dispatcher: Arc<Dispatcher>, metrics: Metrics, exposition: Exposition, wake: Wake) -> Server {
        let description = openapi(dispatcher.registry());
        Server {
            dispatcher,
            limits: Limits::default(),
            body_limit: 16 << 20,
            memory: RequestMemory::new(DEFAULT_REQUEST_MEMORY),
            tls: None,
            metrics,
            exposition,
            console_dir: None,
            wake,
            stopping: watch::Sender::new(false),
            hooks: None,
            description,
        }
    }

    fn events(&self) -> sse::Events {
        sse::Events {
            dispatcher: self.dispatcher.clone(),
            wake: self.wake.clone(),
            stopping: self.stopping.subscribe(),
        }
    }
}

/// Serves until `shutdown` resolves, then lets open connections finish.
///
/// At most `max_connections` are open at once: the next is accepted only when one ends,
/// so the others wait in the listen backlog while those open keep being served. An
/// accept that fails (out of file descriptors, say) is retried after a pause that doubles
/// up to a second, and logged once per run of failures, never in a loop.
pub async fn run(server: Arc<Server>, listener: TcpListener, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let graceful = GracefulShutdown::new();
    let limits = server.limits;
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
        let serving = server.clone();
        let service = service_fn(move |request| {
            let in_flight = activity.begin();
            let server = serving.clone();
            async move {
                let response = handle(server, request).await;
                Ok::<_, Infallible>(response.map(|body| Tracked::new(body, in_flight)))
            }
        });
        let Some(tls) = server.tls.clone() else {
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
    server.stopping.send_replace(true);
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
    SourceHook,
}

impl Route {
    fn of(server: &Server, path: &str) -> Option<Route> {
        Some(match path {
            "/healthz" => Route::Health,
            "/metrics" => Route::Metrics,
            "/api/methods" => Route::Catalogue,
            "/api/openapi.json" => Route::OpenApi,
            sse::STREAM_PATH => Route::EventStream,
            _ if console::owns(path) => Route::Console,
            _ if server.dispatcher.registry().by_path(path).is_some() => Route::Method,
            _ if path.starts_with(hook::PATH) && server.hooks.is_some() => Route::SourceHook,
            _ => return None,
        })
    }

    fn http_method(&self) -> (HttpMethod, &'static str) {
        match self {
            Route::Method | Route::SourceHook => (HttpMethod::POST, "POST"),
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

async fn handle(server: Arc<Server>, request: Request<Incoming>) -> Response<Body> {
    let started = std::time::Instant::now();
    let mut log =
        RequestLog { method: "other".into(), tenant: None, principal: None, error: None, sandbox: Duration::ZERO };
    // What the server logs while serving the request carries its span, and the span
    // names the request's id; so does its answer, and the envelope of its error.
    let id = RequestId::of(request.headers());
    let span = tracing::info_span!("request", path = %request.uri().path(), request_id = %id);
    let serving = route(&server, request, &mut log).instrument(span.clone());
    let mut response = id.clone().scope(serving).await;
    response.headers_mut().insert(request_id::HEADER, id.header());
    let elapsed = started.elapsed();
    server.metrics.request(&log.method, response.status().as_u16(), elapsed);
    span.in_scope(|| log.emit(response.status(), elapsed));
    response
}

async fn route(server: &Arc<Server>, request: Request<Incoming>, log: &mut RequestLog) -> Response<Body> {
    let path = request.uri().path().to_owned();
    let Some(route) = Route::of(server, &path) else {
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
    if let Err(error) = check_head(&request, server.limits.max_head_bytes) {
        let response = error_response_as(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, &error);
        log.error = Some(error);
        return response;
    }
    match route {
        Route::Health => text(StatusCode::OK, "ok"),
        Route::Catalogue => json(StatusCode::OK, &server.dispatcher.registry().catalogue()),
        Route::OpenApi => json(StatusCode::OK, &server.description),
        Route::Metrics => metrics(server.exposition.clone()).await.unwrap_or_else(|error| log.failed(error)),
        Route::EventStream => sse::stream(server.events(), request).await.unwrap_or_else(|error| log.failed(error)),
        Route::Console => console::serve(server.console_dir.as_deref(), &path, request.headers()).await,
        Route::Method => {
            if let Some(method) = server.dispatcher.registry().by_path(&path) {
                log.method.clone_from(&method.name);
            }
            match call(server.clone(), request, log).await {
                Ok(Reply::Json(output)) => json_text(StatusCode::OK, output),
                Ok(Reply::State(form, state)) => {
                    let mut response = Response::new(Full::new(Bytes::from(state)).boxed());
                    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(form.media_type()));
                    response
                }
                Err(error) => log.failed(error),
            }
        }
        Route::SourceHook => {
            log.method = "sources.hook".into();
            source_hook(server, request, log).await
        }
    }
}

/// A git source's inbound hook: its body read up to [`hook::MAX_BODY`], then the hook
/// checked and recorded on a blocking thread. No bearer token: the signature is the
/// authentication.
async fn source_hook(server: &Server, request: Request<Incoming>, log: &mut RequestLog) -> Response<Body> {
    let Some(hooks) = server.hooks.clone() else {
        return log.failed(ApiError::not_found("no source has this hook"));
    };
    let id = request.uri().path().strip_prefix(hook::PATH).unwrap_or_default().to_owned();
    let headers = request.headers().clone();
    let (body, held) = match read_body(request, hook::MAX_BODY, server.limits.body_timeout, &server.memory).await {
        Ok(read) => read,
        Err(error) => return log.failed(error),
    };
    let span = tracing::Span::current();
    let heard = tokio::task::spawn_blocking(move || {
        let _serving = span.enter();
        let heard = hooks.receive(&id, &headers, &body);
        drop((body, held));
        heard
    })
    .await;
    let heard = match heard {
        Ok(heard) => heard,
        Err(panic) => return log.failed(ApiError::internal(format_args!("the hook's handler panicked: {panic}"))),
    };
    log.tenant = heard.tenant;
    match heard.outcome {
        Ok(outcome @ Outcome::Accepted { .. }) => json(StatusCode::ACCEPTED, &outcome.body()),
        Ok(outcome @ Outcome::Duplicate) => json(StatusCode::OK, &outcome.body()),
        Err(error) => log.failed(error),
    }
}

/// `GET /metrics`: the exposition, made on a blocking thread (it reads the database).
async fn metrics(exposition: Exposition) -> Result<Response<Body>, ApiError> {
    let text = tokio::task::spawn_blocking(move || exposition()).await.map_err(ApiError::internal)??;
    let mut response = Response::new(Full::new(Bytes::from(text)).boxed());
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    Ok(response)
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

/// A method call: read the body, then the dispatcher authenticates, finds, authorizes
/// and runs it, on a blocking thread.
async fn call(server: Arc<Server>, request: Request<Incoming>, log: &mut RequestLog) -> Result<Reply, ApiError> {
    let path = request.uri().path().to_owned();
    let authorization = bearer(&request)?;
    let state = request.headers().get(ACCEPT).and_then(|accept| StateForm::accepted(accept.as_bytes()));
    let (body, mut held) = read_body(request, server.body_limit, server.limits.body_timeout, &server.memory).await?;
    let dispatcher = server.dispatcher.clone();
    // The handler's own log lines are the request's too.
    let span = tracing::Span::current();
    let handled = tokio::task::spawn_blocking(move || {
        let _serving = span.enter();
        let handled = dispatcher.handle(Some(&authorization), &path, &body, state, Some(&mut held));
        drop((body, held));
        handled
    })
    .await
    .map_err(|panic| ApiError::internal(format_args!("handler panicked: {panic}")))?;
    if let Some((tenant, principal)) = handled.identity {
        log.tenant = Some(tenant);
        log.principal = Some(principal);
    }
    log.sandbox = handled.sandbox;
    handled.reply
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
/// trickled in a byte at a time ends there, not never. Its bytes are held in `memory`
/// as they arrive (what a header declares reserves nothing), and given back when the
/// answer is made.
async fn read_body(
    request: Request<Incoming>,
    limit: usize,
    pause: Duration,
    memory: &Arc<RequestMemory>,
) -> Result<(Bytes, Held), ApiError> {
    let too_large =
        || ApiError::new(Code::PayloadTooLarge, format!("the request body is larger than the limit of {limit} bytes"));
    let declared = request.headers().get(CONTENT_LENGTH).and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    let mut held = memory.hold(0)?;
    let started = tokio::time::Instant::now();
    let mut arrived = started;
    let mut body = Limited::new(request.into_body(), limit);
    // Room for what is declared, up to a megabyte: a declaration alone costs no more.
    let mut collected = Vec::with_capacity((declared.unwrap_or(0) as usize).min(1 << 20));
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
            None => return Ok((Bytes::from(collected), held)),
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    held.grow_to((collected.len() + data.len()).next_power_of_two())?;
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

/// The error envelope of SPEC §2 with the status of its code; `UNAVAILABLE`, and a
/// refusal that passes, say when to try again.
pub fn error_response(error: &ApiError) -> Response<Body> {
    error_response_as(crate::api::status(error.code), error)
}

/// The error envelope with a status of HTTP's own rather than the code's: 431 carries
/// `PAYLOAD_TOO_LARGE` (docs/decisions/0021).
fn error_response_as(status: StatusCode, error: &ApiError) -> Response<Body> {
    let mut body = error.body();
    if let Some(id) = RequestId::current() {
        body["error"]["requestId"] = Value::from(id.as_str());
    }
    let mut response = json(status, &body);
    match (error.retry_after, error.code) {
        (Some(seconds), _) => {
            response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        (None, Code::Unavailable) => {
            response.headers_mut().insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        (None, _) => {}
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
