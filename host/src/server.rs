//! The HTTP server: hyper over tokio, routing from the method registry, the error
//! envelope, the body limit, and graceful shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method as HttpMethod, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use serde_json::Value;
use tokio::net::TcpListener;

use crate::api::{ApiError, Code, Problem};
use crate::app::App;
use crate::auth::{self, Caller};
use crate::db::{self, Conn, Tx};
use crate::events;
use crate::preview;
use crate::registry::{Ctx, Method, MethodKind, Run};

pub type Body = BoxBody<Bytes, Infallible>;

/// Serves until `shutdown` resolves, then lets open connections finish.
pub async fn run(app: Arc<App>, listener: TcpListener, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::warn!(%error, "accept failed");
                        continue;
                    }
                };
                let app = app.clone();
                let service = service_fn(move |request| {
                    let app = app.clone();
                    async move { Ok::<_, Infallible>(handle(app, request).await) }
                });
                let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

async fn handle(app: Arc<App>, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path().to_owned();
    match (request.method(), path.as_str()) {
        (&HttpMethod::GET, "/healthz") => text(StatusCode::OK, "ok"),
        (&HttpMethod::GET, "/api/methods") => json(StatusCode::OK, &app.registry.catalogue()),
        (&HttpMethod::GET, "/api/openapi.json") => json(StatusCode::OK, &app.registry.openapi()),
        (&HttpMethod::GET, events::STREAM_PATH) => {
            events::stream(app, request).await.unwrap_or_else(|error| error_response(&error))
        }
        (&HttpMethod::GET, _) if preview::owns(&path) => preview::serve(&app.config.preview_dir, &path).await,
        (&HttpMethod::POST, _) if path.starts_with("/api/") => match call(app, request).await {
            Ok(output) => json_text(StatusCode::OK, output),
            Err(error) => error_response(&error),
        },
        _ => error_response(&ApiError::not_found(format!("no route for {} {path}", request.method()))),
    }
}

/// A method call: authenticate, route, authorize, read the body, run.
async fn call(app: Arc<App>, request: Request<Incoming>) -> Result<String, ApiError> {
    let path = request.uri().path().to_owned();
    let authorization = bearer(&request)?;
    let body = read_body(request, app.config.body_limit).await?;
    tokio::task::spawn_blocking(move || {
        let db = app.db.get()?;
        let caller = auth::authenticate(&db, Some(&authorization))?;
        let method = app.registry.by_path(&path).ok_or_else(|| ApiError::not_found(format!("no method at {path}")))?;
        auth::authorize(&caller, method)?;
        dispatch(&app, caller, db, method, &body)
    })
    .await
    .unwrap_or_else(|panic| Err(ApiError::internal(format_args!("handler panicked: {panic}"))))
}

/// Runs a method as `caller` on a request body: module methods get the parsed body in a
/// transaction of their kind; composite (planner) methods get the connection and the
/// body as it came, which the planner parses and validates itself.
pub fn dispatch(app: &Arc<App>, caller: Caller, db: Conn, method: &Method, body: &[u8]) -> Result<String, ApiError> {
    if app.config.read_only && method.kind == MethodKind::Mutation {
        return Err(ApiError::new(
            Code::Unsupported,
            format!("{} is not available: this deployment is read-only", method.name),
        ));
    }
    match &method.run {
        Run::InTransaction(handler) => {
            let mode = match method.kind {
                MethodKind::Read => Tx::Read,
                MethodKind::Mutation => Tx::Write,
            };
            let input = parse_body(body)?;
            let result = db::transaction(&db, mode, |db| handler(&Ctx { app, caller: &caller, db }, input));
            if result.is_ok() && method.kind == MethodKind::Mutation {
                let _ = app.events.send(());
            }
            result.map(|output| output.to_string())
        }
        Run::Composite(composite) => {
            let text = std::str::from_utf8(body).map_err(|_| {
                ApiError::invalid(vec![Problem { path: String::new(), message: "the body is not UTF-8".into() }])
            })?;
            let text = if text.trim().is_empty() { "{}" } else { text };
            composite(app.clone(), caller, db, text)
        }
    }
}

pub fn bearer<B>(request: &Request<B>) -> Result<String, ApiError> {
    request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .ok_or_else(|| ApiError::new(Code::Unauthenticated, "a bearer token is required"))
}

async fn read_body(request: Request<Incoming>, limit: usize) -> Result<Bytes, ApiError> {
    let too_large =
        || ApiError::new(Code::PayloadTooLarge, format!("the request body is larger than the limit of {limit} bytes"));
    let declared = request.headers().get(CONTENT_LENGTH).and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    match Limited::new(request.into_body(), limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(error) => Err(ApiError::new(Code::InvalidArgument, format!("the request body could not be read: {error}"))),
    }
}

/// An empty body means `{}`.
pub fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_slice(body).map_err(|error| {
        ApiError::invalid(vec![Problem {
            path: String::new(),
            message: format!("the body is not valid JSON: {error}"),
        }])
    })
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

pub fn error_response(error: &ApiError) -> Response<Body> {
    json(crate::api::status(error.code), &error.body())
}
