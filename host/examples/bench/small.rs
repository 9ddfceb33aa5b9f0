//! The small plans: the demo estate planned with a change over HTTP, its latency and
//! throughput; a bare hyper handler as the ceiling of requests per second; and what
//! bounds the small plans, the same plan made by bare handlers natively and in the
//! sandbox.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use bytes::Bytes;
use fleet::planner::{Entry, Sandbox, Session, Source};
use fleet_guest::Snapshot;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::Args;
use crate::server::Server;
use crate::support::{median, ms, throughput, time};

/// The small plan's figures, its limits' planned in `sandbox`, and the ceiling's.
pub async fn figures(server: &Server, args: &Args, sandbox: &Arc<Sandbox>) -> Result<Value> {
    let (latency, rps) = plan(server, args).await?;
    let limits = limits(server, sandbox, args).await?;
    let hello_rps = throughput(hello_server().await?, None, String::new(), args.connections, args.seconds).await?;
    Ok(json!({
        "http_small_plan_ms_p50": ms(latency),
        "http_small_plan_rps": rps,
        "http_hello_rps": hello_rps,
        "small_over_hello": rps / hello_rps,
        "small_native_plan_us": limits.native.as_secs_f64() * 1e6,
        "small_wasm_plan_us": limits.sandboxed.as_secs_f64() * 1e6,
        "small_native_handler_over_hello": limits.native_rps / hello_rps,
        "small_sandbox_handler_over_hello": limits.sandboxed_rps / hello_rps,
    }))
}

/// A small plan over HTTP: the demo estate, applied to the `small` tenant, planned with
/// a change. Returns the p50 latency and the throughput with `--connections` clients.
pub async fn plan(server: &Server, args: &Args) -> Result<(Duration, f64)> {
    let token = &server.tokens.small;
    server.post_as(token, "apply", json!({"document": fleet::demo::document()}).to_string()).await?;
    let small = small_request();
    let mut samples = Vec::new();
    for _ in 0..50 {
        let body = small.clone();
        let started = Instant::now();
        server.post_as(token, "plan", body).await?;
        samples.push(started.elapsed());
    }
    let url = format!("{}/api/compute/fleet/plan", server.base);
    let rps = throughput(url, Some(token.clone()), small, args.connections, args.seconds).await?;
    Ok((median(samples), rps))
}

/// The small plan made over and over on this thread for `--seconds` each: by fleet's
/// handler (authentication, authorization, the state's freshness, the sandbox), then
/// by a bare sandbox call of a state read beforehand; each's time on stderr.
pub fn handler_alone(server: &Server, args: &Args) -> Result<()> {
    let (app, caller) = (server.app.clone(), server.caller("small")?);
    let request = small_request();
    let authorization = format!("Bearer {}", server.tokens.small);
    eprint!("fleet's handler: ");
    crate::support::repeat(args.seconds, || {
        let handled =
            app.core.dispatcher.handle(Some(&authorization), "/api/compute/fleet/plan", request.as_bytes(), None, None);
        handled.reply.map(|_| ()).map_err(|error| error.message)
    });
    let snapshot = app.core.planning.state.snapshot(&app.core.db.get()?, &caller)?;
    let state = Source::snapshot(&snapshot);
    let sandbox = Sandbox::new(fleet::planner::PLANNER, app.config.budget, None, app.core.metrics.clone())?;
    eprint!("a bare sandbox call: ");
    crate::support::repeat(args.seconds, || -> Result<String> {
        let session = Session::new(caller.clone(), app.core.db.get()?, state.clone());
        sandbox.call(session, Entry::Plan, &request).1.map_err(|error| anyhow::anyhow!("{error}"))
    });
    Ok(())
}

/// A bare hyper handler: the ceiling for requests per second on this machine.
async fn hello_server() -> Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = service_fn(|_request| async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"hello"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(format!("http://{address}/"))
}

/// The small plan's request: the demo estate with one pool changed.
pub fn small_request() -> String {
    let mut changed = fleet::demo::document();
    changed["pools"]["gpu-a"]["gpus"] = json!(72);
    json!({"document": changed}).to_string()
}

/// What bounds the small plans' throughput: the same plan made by bare hyper handlers that
/// do nothing else (no authentication, no database read, no hop to the blocking pool),
/// natively and in the sandbox, and the time of one such plan each way.
struct SmallLimits {
    native: Duration,
    sandboxed: Duration,
    native_rps: f64,
    sandboxed_rps: f64,
}

/// [`SmallLimits`] of the `small` tenant's estate (applied by [`plan`]), planned in
/// `sandbox`.
async fn limits(server: &Server, sandbox: &Arc<Sandbox>, args: &Args) -> Result<SmallLimits> {
    let (app, caller) = (server.app.clone(), server.caller("small")?);
    let snapshot: Arc<Snapshot> = {
        let (app, caller) = (app.clone(), caller.clone());
        Arc::new(
            tokio::task::spawn_blocking(move || app.core.planning.state.snapshot(&app.core.db.get()?, &caller))
                .await??,
        )
    };
    let state = Source::snapshot(&snapshot);
    let native = {
        let snapshot = snapshot.clone();
        move |request: &str| fleet_guest::plan(&*snapshot, request).map_err(|error| error.to_string())
    };
    let sandboxed = {
        let sandbox = sandbox.clone();
        move |request: &str| {
            let db = app.core.db.get().map_err(|error| error.to_string())?;
            let session = Session::new(caller.clone(), db, state.clone());
            sandbox.call(session, Entry::Plan, request).1.map_err(|error| error.to_string())
        }
    };
    let request = small_request();
    if native(&request).map_err(anyhow::Error::msg)? != sandboxed(&request).map_err(anyhow::Error::msg)? {
        bail!("the component's small plan differs from the native one");
    }
    let (native_time, sandboxed_time) = (time(2001, || native(&request)), time(2001, || sandboxed(&request)));
    let load = |url: String| throughput(url, None, request.clone(), args.connections, args.seconds);
    Ok(SmallLimits {
        native: native_time,
        sandboxed: sandboxed_time,
        native_rps: load(plan_server(native).await?).await?,
        sandboxed_rps: load(plan_server(sandboxed).await?).await?,
    })
}

/// A bare hyper handler that answers each request with `plan` of its body, or a 500.
async fn plan_server(plan: impl Fn(&str) -> Result<String, String> + Send + Sync + 'static) -> Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let plan = Arc::new(plan);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let plan = plan.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let plan = plan.clone();
                    async move {
                        let body = request.into_body().collect().await.map(|body| body.to_bytes()).unwrap_or_default();
                        let answer = match std::str::from_utf8(&body) {
                            Ok(request) => plan(request),
                            Err(error) => Err(error.to_string()),
                        };
                        let (status, body) = match answer {
                            Ok(plan) => (hyper::StatusCode::OK, plan),
                            Err(error) => (hyper::StatusCode::INTERNAL_SERVER_ERROR, error),
                        };
                        let mut response = hyper::Response::new(Full::new(Bytes::from(body)));
                        *response.status_mut() = status;
                        Ok::<_, Infallible>(response)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(format!("http://{address}/"))
}
