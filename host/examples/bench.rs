//! The performance benchmark: `cargo run --release -p fleet --example bench -- --objects 10000 [--json]`.
//!
//! Everything is measured in one run on one machine: the planner natively and as a
//! component on the same state snapshot, a bare instantiate-and-call, plans and a small
//! plan's throughput over HTTP against the real server in this process, a bare hyper
//! handler as the throughput ceiling and that handler planning the small plan natively
//! and in the sandbox (what bounds the small plans), a large apply, the same plans through the edge
//! component (served in process by wasmtime-wasi-http), a plan of an estate half of
//! which is a module plugin's objects and a plugin check's own cost, the large
//! estates (100k and 1M objects), and the peak resident memory, of this process and of
//! the server alone in a process of its own.
//! Times are medians (p50) over repeated runs.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Parser;
use fleet::calls::auth::{self, Caller};
use fleet::planner::{Entry, Sandbox, Session, Source};
use fleet::sandbox::Budget;
use fleet::{App, Config, db};
use fleet_guest::Snapshot;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use serde_json::{Value, json};
use tokio::net::TcpListener;

#[path = "../../tests/e2e/support/edge_host.rs"]
mod edge_host;

/// glibc's malloc grows its per-thread arenas with `mprotect`, which showed as a tenth
/// of a large apply's time in the profile; mimalloc does not.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
struct Args {
    /// Objects in the large document (sites, accounts, pools, quotas, offers, flavors).
    #[arg(long, default_value_t = 10_000)]
    objects: usize,
    /// Repetitions of each timed plan.
    #[arg(long, default_value_t = 9)]
    runs: usize,
    /// Seconds of load for each throughput figure.
    #[arg(long, default_value_t = 3)]
    seconds: u64,
    /// Concurrent connections for the throughput figures.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// The database of the server the HTTP figures run against: a new SQLite file in a
    /// temp dir, or an empty PostgreSQL database (`postgres://user@host:5432/name`).
    #[arg(long)]
    db: Option<String>,
    /// An empty PostgreSQL database for the replica figures (issue 26): the large apply
    /// there, directly and through a proxy that adds 1 ms of round trip, another
    /// tenant's creates during a large apply, small applies of 24 tenants through one
    /// and three replicas, and the drift checks of many tenants shared by three
    /// replicas. With the default SQLite `--db`, the ratio of the PostgreSQL apply to
    /// its apply is the figure `pg_apply_over_sqlite`.
    #[arg(long)]
    postgres: Option<String>,
    /// Tenants of the drift run on PostgreSQL (each with a small applied document); 0
    /// leaves the run out.
    #[arg(long, default_value_t = 10_000)]
    drift_tenants: usize,
    /// Repeat one figure for `--seconds` and stop, for a profiler to watch
    /// (`perf record -g -- bench --profile wasm-plan`).
    #[arg(long, value_enum)]
    profile: Option<Figure>,
    /// Serve this SQLite file alone with `fleet serve`'s defaults (the `server_rss_mib`
    /// figure's server process): print `BASE TOKEN`, serve until stdin closes.
    #[arg(long, hide = true, value_name = "FILE")]
    serve_alone: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Figure {
    Apply,
    NativePlan,
    WasmPlan,
    Instantiate,
    SmallPlan,
    /// The growing search for the largest estate planned within the default budgets.
    MaxObjects,
    /// The 100k-object all-creates plan over HTTP.
    Plan100k,
    /// The 1M-object all-creates plan over HTTP.
    Plan1m,
    /// Only the drift run of `--drift-tenants` on the `--postgres` database.
    Drift,
}

/// Runs `work` over and over for `seconds`, and says on stderr how long it took each
/// time on average (so that two builds can be compared on one figure, alternately).
fn repeat<T>(seconds: u64, mut work: impl FnMut() -> T) {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let mut times = 0_u32;
    while Instant::now() < deadline {
        std::hint::black_box(work());
        times += 1;
    }
    let each = start.elapsed() / times.max(1);
    eprintln!("{times} times in {:.1?}: {:.3} ms each", start.elapsed(), each.as_secs_f64() * 1e3);
}

/// A document of about `objects` objects.
fn document(objects: usize) -> Value {
    fleet::demo::large_document(objects.saturating_sub(4 + 50) / 3)
}

fn count(document: &Value) -> usize {
    document
        .as_object()
        .map(|sections| sections.values().filter_map(Value::as_object).map(|section| section.len()).sum())
        .unwrap_or(0)
}

/// An estate of pools and flavors, `objects` of them, all to be created: half pools
/// (on the one site and account the document also creates), half flavors of them.
fn creates(objects: usize) -> Value {
    let (site, account) = ("eu-west", "aws-main");
    let mut pools = serde_json::Map::new();
    let mut flavors = serde_json::Map::new();
    for index in 0..objects / 2 {
        let pool = format!("pool-{index}");
        flavors.insert(format!("flavor-{index}"), json!({"pool": pool, "vcpus": 8, "memoryMib": 32768, "gpus": 1}));
        pools.insert(
            pool,
            json!({"site": site, "account": account, "class": "gpu", "owner": format!("team-{}", index % 50),
                   "vcpus": 64, "memoryMib": 262144, "gpus": 8}),
        );
    }
    json!({"sites": {site: {"region": "eu-west-1"}}, "providerAccounts": {account: {"provider": "aws"}},
           "pools": pools, "flavors": flavors})
}

/// The document with `count` reservations (the example plugin's kind) spread over its
/// pools, each with `note`.
fn with_reservations(document: &Value, count: usize, note: &str) -> Value {
    let pools: Vec<String> =
        document["pools"].as_object().map(|pools| pools.keys().cloned().collect()).unwrap_or_default();
    let mut reservations = serde_json::Map::new();
    for index in 0..count {
        reservations.insert(
            format!("rsv-{index}"),
            json!({"pool": pools[index % pools.len()], "owner": format!("team-{}", index % 50), "vcpus": 8, "gpus": 1,
                   "startsAt": "2026-12-01T00:00:00Z", "endsAt": "2026-12-08T00:00:00Z", "note": note}),
        );
    }
    let mut document = document.clone();
    document["reservations"] = Value::Object(reservations);
    document
}

/// The same document with one pool in a hundred changed, so the plan has work to show.
fn with_changed_pools(document: &Value) -> Value {
    let mut changed = document.clone();
    if let Some(pools) = changed["pools"].as_object_mut() {
        for (index, pool) in pools.values_mut().enumerate() {
            if index % 100 == 0 {
                pool["gpus"] = json!(16);
            }
        }
    }
    changed
}

/// The median of durations, or of ratios such as those of two plans timed in one round.
fn median<T: PartialOrd>(mut samples: Vec<T>) -> T {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    samples.swap_remove(samples.len() / 2)
}

fn timed<T>(work: impl FnOnce() -> T) -> Duration {
    let started = Instant::now();
    std::hint::black_box(work());
    started.elapsed()
}

fn time<T>(runs: usize, mut work: impl FnMut() -> T) -> Duration {
    median((0..runs).map(|_| timed(&mut work)).collect())
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// The peak RSS of this process.
fn peak_rss_mib() -> f64 {
    peak_rss_mib_of("self")
}

/// The peak RSS of the process `pid` ("self": this one).
fn peak_rss_mib_of(pid: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// Requests per second of `connections` clients posting `body` to `url` for `seconds`.
async fn throughput(url: String, token: Option<String>, body: String, connections: usize, seconds: u64) -> Result<f64> {
    let client = reqwest::Client::builder().pool_max_idle_per_host(connections).build()?;
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..connections {
        let (client, url, token, body) = (client.clone(), url.clone(), token.clone(), body.clone());
        workers.push(tokio::spawn(async move {
            let mut done = 0u64;
            while Instant::now() < deadline {
                let mut request = client.post(&url).body(body.clone());
                if let Some(token) = &token {
                    request = request.bearer_auth(token);
                }
                let response = request.send().await?;
                if !response.status().is_success() {
                    bail!("{url} answered {}", response.status());
                }
                response.bytes().await?;
                done += 1;
            }
            Ok(done)
        }));
    }
    let mut total = 0;
    for worker in workers {
        total += worker.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// A small plan over HTTP: the demo estate, applied to a tenant of its own, planned with
/// a change. Returns the p50 latency and the throughput with `--connections` clients.
async fn small_plan(base: &str, token: &str, args: &Args) -> Result<(Duration, f64)> {
    let http = reqwest::Client::new();
    let small_document = fleet::demo::document();
    let small_applied = http
        .post(format!("{base}/api/compute/fleet/apply"))
        .bearer_auth(token)
        .json(&json!({"document": small_document}))
        .send()
        .await?;
    if !small_applied.status().is_success() {
        bail!("applying the small estate failed: {}", small_applied.text().await?);
    }
    let small = small_request();
    let mut samples = Vec::new();
    for _ in 0..50 {
        let started = Instant::now();
        let response =
            http.post(format!("{base}/api/compute/fleet/plan")).bearer_auth(token).body(small.clone()).send().await?;
        response.bytes().await?;
        samples.push(started.elapsed());
    }
    let rps = throughput(
        format!("{base}/api/compute/fleet/plan"),
        Some(token.to_owned()),
        small,
        args.connections,
        args.seconds,
    )
    .await?;
    Ok((median(samples), rps))
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
fn small_request() -> String {
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

/// [`SmallLimits`] of the `small` tenant's estate (applied by [`small_plan`]), planned in
/// `sandbox` as `caller`.
async fn small_plan_limits(
    app: &Arc<App>,
    sandbox: &Arc<Sandbox>,
    caller: &Caller,
    args: &Args,
) -> Result<SmallLimits> {
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
        let (app, sandbox, caller) = (app.clone(), sandbox.clone(), caller.clone());
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

fn main() -> Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match &args.serve_alone {
        Some(db) => runtime.block_on(serve_alone(db.clone())),
        None => runtime.block_on(run(args)),
    }
}

/// POSTs `body` to the fleet method `method` of the server at `base` as `token`, and
/// returns the answer's text; an error when it is not a success.
async fn post_fleet(http: &reqwest::Client, base: &str, token: &str, method: &str, body: String) -> Result<String> {
    let response = http.post(format!("{base}/api/compute/fleet/{method}")).bearer_auth(token).body(body).send().await?;
    let status = response.status();
    let text = response.text().await?;
    if !status.is_success() {
        bail!("{method} failed: {text}");
    }
    Ok(text)
}

/// The server of `server_rss_mib`, in a process of its own: `fleet serve`'s defaults
/// on a new SQLite file, one tenant with a token, until stdin closes.
async fn serve_alone(db: std::path::PathBuf) -> Result<()> {
    let app = tokio::task::spawn_blocking(move || App::new(Config::new(db))).await??;
    let token = tokio::task::block_in_place(|| -> Result<String> {
        let db = app.core.db.get()?;
        let now = "2026-11-30T00:00:00Z";
        auth::create_tenant(&db, "alone", now)?;
        Ok(auth::create_token(&db, "alone", "alice", &["compute:*:* @ *".to_owned()], now, None)?)
    })?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    println!("http://{} {token}", listener.local_addr()?);
    let stdin_closed = tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin(), &mut std::io::sink()));
    fleet::app::serve(app, listener, async move {
        let _ = stdin_closed.await;
    })
    .await
}

/// The peak RSS of the server alone (`--serve-alone`, this program in a process of its
/// own) through an apply of `document` and `runs` plans of `changed`: what the server
/// needs, without the benchmark's client, native planner and copies of the estate.
async fn server_rss_mib(document: &Value, changed: &Value, runs: usize) -> Result<f64> {
    use std::io::BufRead;
    let dir = tempfile::tempdir()?;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .arg("--serve-alone")
        .arg(dir.path().join("alone.db"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().context("the server's stdout")?;
    let line = tokio::task::block_in_place(|| std::io::BufReader::new(stdout).lines().next())
        .context("the server process said nothing")??;
    let (base, token) = line.split_once(' ').context("the server process said no token")?;
    let http = reqwest::Client::new();
    let post = |method: &'static str, document: &Value| {
        post_fleet(&http, base, token, method, json!({"document": document}).to_string())
    };
    let result = async {
        post("apply", document).await?;
        for _ in 0..runs {
            post("plan", changed).await?;
        }
        Ok::<f64, anyhow::Error>(peak_rss_mib_of(&child.id().to_string()))
    }
    .await;
    drop(child.stdin.take());
    tokio::task::block_in_place(|| child.wait())?;
    result
}

async fn run(args: Args) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let db = args.db.as_ref().map_or_else(|| dir.path().join("bench.db"), std::path::PathBuf::from);
    let mut config = Config::new(db);
    config.budget.cpu = Duration::from_secs(60);
    config.budget.memory_bytes = 1 << 30;
    // A million objects' document is about 100 MB.
    config.body_limit = 256 << 20;
    config.plugins = vec![std::path::Path::new(env!("FLEET_PLUGINS_DIR")).join("reservations.wasm")];
    // Off the runtime's threads: the PostgreSQL client runs a runtime of its own.
    let app = tokio::task::spawn_blocking(move || App::new(config)).await??;
    let (token, small_token, plugins_token, history_token) = tokio::task::block_in_place(|| -> Result<_> {
        let db = app.core.db.get()?;
        let now = "2026-11-30T00:00:00Z";
        auth::create_tenant(&db, "bench", now)?;
        auth::create_tenant(&db, "small", now)?;
        auth::create_tenant(&db, "plugins", now)?;
        auth::create_tenant(&db, "history", now)?;
        let all = ["compute:*:* @ *".to_owned()];
        Ok((
            auth::create_token(&db, "bench", "alice", &all, now, None)?,
            auth::create_token(&db, "small", "alice", &all, now, None)?,
            auth::create_token(&db, "plugins", "alice", &all, now, None)?,
            auth::create_token(&db, "history", "alice", &all, now, None)?,
        ))
    })?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(fleet::app::serve(app.clone(), listener, async move {
        let _ = stopped.await;
    }));
    // A timed request sends a body serialized before the clock starts and ends when the
    // whole answer has arrived; the client reads it (`answer`) after the clock stops.
    let http = reqwest::Client::new();
    let post_as = |token: &String, method: &'static str, body: String| {
        let (http, base, token) = (http.clone(), base.clone(), token.clone());
        async move { post_fleet(&http, &base, &token, method, body).await }
    };
    let post = |method: &'static str, body: String| post_as(&token, method, body);
    let answer = |text: String| -> Result<Value> { Ok(serde_json::from_str(&text)?) };

    if args.profile == Some(Figure::Drift) {
        let url = args.postgres.as_deref().context("--profile drift needs --postgres")?;
        println!("{}", replicas::drift_run(url, args.drift_tenants, Duration::from_secs(10)).await?);
        return Ok(());
    }

    // The large apply: the estate is created through the real path.
    let document = document(args.objects);
    let objects = count(&document);
    let body = json!({"document": document}).to_string();
    let started = Instant::now();
    let applied = post("apply", body).await?;
    let apply = started.elapsed();
    let applied = answer(applied)?;
    if applied["applied"].as_u64() != Some(objects as u64) {
        bail!("the apply ran {} calls for {objects} objects", applied["applied"]);
    }
    match args.profile {
        Some(Figure::Apply) => {
            println!("apply_ms {:.1}", ms(apply));
            if let Some(url) = &args.postgres {
                println!("{}", replicas::figures(url, &document, &args).await?);
            }
            return Ok(());
        }
        Some(Figure::SmallPlan) => {
            let (latency, per_second) = small_plan(&base, &small_token, &args).await?;
            eprintln!("{per_second:.0} small plans per second, {:.3} ms each (median)", latency.as_secs_f64() * 1e3);
            return Ok(());
        }
        _ => {}
    }

    // History (issue 27): a tenant with 10,000 earlier revisions lists a page of them,
    // and applies the same estate as the first apply above, in about its time.
    tokio::task::block_in_place(|| keep_revisions(&app, "history", REVISIONS))?;
    let mut pages = Vec::new();
    for _ in 0..args.runs {
        let started = Instant::now();
        let page = post_as(&history_token, "history", json!({"limit": 100}).to_string()).await?;
        pages.push(started.elapsed());
        if answer(page)?["revisions"].as_array().map(Vec::len) != Some(100) {
            bail!("history did not answer a page of 100 revisions");
        }
    }
    let history_page = median(pages);
    let started = Instant::now();
    post_as(&history_token, "apply", json!({"document": document}).to_string()).await?;
    let apply_after_revisions = started.elapsed();

    // Native and component planner on the same snapshot.
    let changed = with_changed_pools(&document);
    let request = json!({"document": changed}).to_string();
    let every = vec![auth::Grant::parse("compute:*:* @ *").map_err(|error| anyhow::anyhow!(error))?];
    let caller = Caller { tenant: "bench".into(), principal: "alice".into(), grants: every.clone(), token: None };
    let snapshot: Snapshot = {
        let (app, caller) = (app.clone(), caller.clone());
        tokio::task::spawn_blocking(move || app.core.planning.state.snapshot(&app.core.db.get()?, &caller)).await??
    };
    let native = || fleet_guest::plan(&snapshot, &request).map(|plan| plan.len());
    if args.profile == Some(Figure::NativePlan) {
        repeat(args.seconds, native);
        return Ok(());
    }
    // The native planner's host has no plugins; the component's is the same.
    let sandbox = Arc::new(Sandbox::new(fleet::planner::PLANNER, app.config.budget, None, app.core.metrics.clone())?);
    let plan_in_sandbox = |source: &Source, entry: Entry, request: &str| -> Result<String> {
        let session = Session::new(caller.clone(), app.core.db.get()?, source.clone());
        sandbox.call(session, entry, request).1.map_err(|error| anyhow::anyhow!("{error}"))
    };
    // The native planner borrows the snapshot; the sandbox reads it in the state encoding,
    // made before the clock starts, as the server's state cache keeps a tenant's.
    let state = Source::snapshot(&snapshot);
    let native_output = fleet_guest::plan(&snapshot, &request).map_err(|error| anyhow::anyhow!("{error}"))?;
    if plan_in_sandbox(&state, Entry::Plan, &request)? != native_output {
        bail!("the component's plan differs from the native plan");
    }
    if args.profile == Some(Figure::WasmPlan) {
        repeat(args.seconds, || plan_in_sandbox(&state, Entry::Plan, &request));
        return Ok(());
    }
    // Over HTTP, against the database: one plan, its answer checked after its clock
    // stopped.
    let http_plan_once = |check: fn(&Value) -> bool| {
        let (post, body) = (&post, request.clone());
        async move {
            let started = Instant::now();
            let plan = post("plan", body).await?;
            let took = started.elapsed();
            if !check(&serde_json::from_str(&plan)?) {
                bail!("an unexpected plan: {}", &plan[..plan.len().min(300)]);
            }
            Ok::<Duration, anyhow::Error>(took)
        }
    };
    let plain = |plan: &Value| plan.get("policy").is_none();
    // The plan natively, in the sandbox and over HTTP, one of each per round in an order
    // that turns, so that the ratios between them (each round's, then their median)
    // compare plans made within a tenth of a second of each other: this machine's speed
    // moves by half within a run, and the ratio of medians taken seconds apart once had
    // the sandbox faster than native code.
    let mut rounds = Vec::new();
    for round in 0..args.runs {
        let mut times = [Duration::ZERO; 3];
        for turn in 0..3 {
            let which = (round + turn) % 3;
            times[which] = match which {
                0 => timed(native),
                1 => timed(|| plan_in_sandbox(&state, Entry::Plan, &request)),
                _ => http_plan_once(plain).await?,
            };
        }
        rounds.push(times);
    }
    let column = |which: usize| median(rounds.iter().map(|times| times[which]).collect());
    let over_native =
        |which: usize| median(rounds.iter().map(|times| times[which].as_secs_f64() / times[0].as_secs_f64()).collect());
    let (native_plan, wasm_plan, http_plan) = (column(0), column(1), column(2));

    // Instantiate + an (almost) empty call: export of an empty estate.
    let empty = Source::snapshot(&Snapshot::empty(fleet_guest::Caller {
        tenant: "bench".into(),
        principal: "alice".into(),
        grants: None,
    }));
    let empty_call = || plan_in_sandbox(&empty, Entry::Export, "{}");
    if args.profile == Some(Figure::Instantiate) {
        repeat(args.seconds, empty_call);
        return Ok(());
    }
    let instantiate = time(2001, empty_call);

    // The largest all-creates estate that plans within the default budgets: doubled
    // until the planner runs out, then halved in between to within 2 %.
    let defaults = Sandbox::new(fleet::planner::PLANNER, Budget::default(), None, app.core.metrics.clone())?;
    let fits = |objects: usize| {
        let session = Session::new(caller.clone(), app.core.db.get().expect("a connection"), empty.clone());
        let request = json!({"document": creates(objects)}).to_string();
        defaults.call(session, Entry::Plan, &request).1.is_ok()
    };
    let max_objects_planned = || {
        let (mut low, mut high) = (0, 10_000);
        while fits(high) {
            (low, high) = (high, high * 2);
        }
        while high - low > high / 50 {
            let middle = (low + high) / 2;
            if fits(middle) { low = middle } else { high = middle }
        }
        low
    };
    if args.profile == Some(Figure::MaxObjects) {
        max_objects_planned();
        return Ok(());
    }
    // The planner's memory per object of a 100k all-creates plan, as the memory its
    // call grew to beyond an empty call's: a figure of memory alone, which the machine's
    // speed does not move (the largest estate above is bound by time too).
    let guest_bytes_per_object = || -> Result<f64> {
        let roomy = Budget { cpu: Duration::from_secs(600), memory_bytes: 1 << 30 };
        let measured = Sandbox::new(fleet::planner::PLANNER, roomy, None, app.core.metrics.clone())?;
        let call = |request: &str, entry: Entry| {
            let session = Session::new(caller.clone(), app.core.db.get()?, empty.clone());
            measured.call(session, entry, request).1.map_err(|error| anyhow::anyhow!("{error}"))
        };
        call("{}", Entry::Export)?;
        let empty_call = measured.largest_memory();
        call(&json!({"document": creates(100_000)}).to_string(), Entry::Plan)?;
        Ok((measured.largest_memory() - empty_call) as f64 / 100_000.0)
    };

    // The median of `runs` plans over HTTP.
    let http_plans = |check: fn(&Value) -> bool| {
        let (http_plan_once, runs) = (&http_plan_once, args.runs);
        async move {
            let mut samples = Vec::new();
            for _ in 0..runs {
                samples.push(http_plan_once(check).await?);
            }
            Ok::<Duration, anyhow::Error>(median(samples))
        }
    };

    // The same plan with the five example policies of `policies/` in force (SPEC §14),
    // the tenant's own for the while: the planner builds their input and runs them.
    let policies = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let example_policies = [
        ("gpus-per-pool", "mandatory"),
        ("prune-limit", "mandatory"),
        ("protected-pools", "enforced"),
        ("offers-within-capacity", "mandatory"),
        ("no-prune-by-ci", "mandatory"),
    ];
    let policy_call = |method: &'static str, body: Value| {
        let (http, base, token) = (http.clone(), base.clone(), token.clone());
        async move {
            let response = http
                .post(format!("{base}/api/compute/policies/{method}"))
                .bearer_auth(token)
                .json(&body)
                .send()
                .await?;
            if !response.status().is_success() {
                bail!("policies/{method} failed: {}", response.text().await?);
            }
            Ok::<(), anyhow::Error>(())
        }
    };
    for (name, level) in example_policies {
        let source = std::fs::read_to_string(policies.join(format!("{name}.rego")))?;
        policy_call("put", json!({"name": name, "level": level, "source": source})).await?;
    }
    let http_plan_policies = http_plans(|plan| plan["policy"]["verdicts"].is_array()).await?;
    for (name, _) in example_policies {
        policy_call("delete", json!({"name": name})).await?;
    }

    // Module plugins (SPEC §10): an estate of as many objects, half of them reservations
    // (the example plugin's kind), applied, then planned over HTTP with every
    // reservation changed, so that the plan checks all of them (one batch); and one
    // plugin check by itself: a fresh instance and a call.
    let built_in = fleet::demo::large_document(args.objects.div_ceil(2).saturating_sub(4 + 50) / 3);
    let reservations = args.objects.saturating_sub(count(&built_in));
    let with_plugin = with_reservations(&built_in, reservations, "");
    let plugin_objects = count(&with_plugin);
    let applied = answer(post_as(&plugins_token, "apply", json!({"document": with_plugin}).to_string()).await?)?;
    if applied["applied"].as_u64() != Some(plugin_objects as u64) {
        bail!("the apply ran {} calls for {plugin_objects} objects", applied["applied"]);
    }
    let plugin_plan = |note: &str, updates: usize| {
        let document =
            json!({"document": with_reservations(&with_changed_pools(&built_in), reservations, note)}).to_string();
        let (post_as, token, runs) = (&post_as, &plugins_token, args.runs);
        async move {
            let mut samples = Vec::new();
            for _ in 0..runs {
                let body = document.clone();
                let started = Instant::now();
                let plan = post_as(token, "plan", body).await?;
                samples.push(started.elapsed());
                let plan = answer(plan)?;
                if plan["summary"]["update"].as_u64() != Some(updates as u64) {
                    bail!("the plan with plugin objects updates {} objects, not {updates}", plan["summary"]["update"]);
                }
            }
            Ok::<Duration, anyhow::Error>(median(samples))
        }
    };
    let changed_pools = built_in["pools"].as_object().map_or(0, |pools| pools.len().div_ceil(100));
    // As the plan above: one pool in a hundred changed, no reservation.
    let http_plan_plugins = plugin_plan("", changed_pools).await?;
    // And every reservation changed too: all of them checked, in one batch.
    let http_plan_plugins_checked = plugin_plan("moved", changed_pools + reservations).await?;
    let plugin =
        app.core.planning.plugins.by_kind("reservation").ok_or_else(|| anyhow::anyhow!("the plugin is not loaded"))?;
    let subject = fleet_guest::plugins::Subject {
        object: r#"{"endsAt":"2026-12-08T00:00:00Z","gpus":1,"id":"rsv_aaaaaaaaaaaaaaaaaaaaaaaaaa","note":"","owner":"ml","pool":"pool_aaaaaaaaaaaaaaaaaaaaaaaaaa","startsAt":"2026-12-01T00:00:00Z","vcpus":8}"#.into(),
        previous: None,
        references: vec![("pool".into(), r#"{"id":"pool_aaaaaaaaaaaaaaaaaaaaaaaaaa","vcpus":64,"gpus":8}"#.into())],
    };
    let plugin_check = time(2001, || plugin.check([subject.clone()]).expect("the check runs"));

    // 100k objects, all to be created, over HTTP (this server's budgets are the
    // benchmark's, larger than the defaults), three times (or for `--seconds`). A plan
    // that fails (a limit) is reported as null, with the error.
    let large = json!({"document": creates(100_000)}).to_string();
    let plan_creates = |body: &String, runs: usize| {
        let (post, body) = (&post, body.clone());
        async move {
            let mut samples = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(args.seconds);
            for run in 0..runs {
                if run > 0 && Instant::now() > deadline {
                    break;
                }
                let body = body.clone();
                let started = Instant::now();
                if let Err(error) = post("plan", body).await {
                    return (None, Some(error.to_string()));
                }
                samples.push(started.elapsed());
            }
            (Some(ms(median(samples))), None)
        }
    };
    let plan_100k = |runs: usize| plan_creates(&large, runs);
    // A million objects, all to be created (built when asked for: about 100 MB).
    let plan_1m = |runs: usize| async move {
        let million = json!({"document": creates(1_000_000)}).to_string();
        plan_creates(&million, runs).await
    };
    let profiled = match args.profile {
        Some(Figure::Plan100k) => Some(plan_100k(usize::MAX).await),
        Some(Figure::Plan1m) => Some(plan_1m(usize::MAX).await),
        _ => None,
    };
    if let Some((median, error)) = profiled {
        if let Some(error) = error {
            bail!(error);
        }
        eprintln!("{:.0} ms (median)", median.unwrap_or_default());
        return Ok(());
    }

    let (small_plan, small_rps) = small_plan(&base, &small_token, &args).await?;
    let small_caller = Caller { tenant: "small".into(), principal: "alice".into(), grants: every, token: None };
    let small_limits = small_plan_limits(&app, &sandbox, &small_caller, &args).await?;

    // The same two plans through the edge component (SPEC §11), served in this process
    // by wasmtime-wasi-http in front of this server.
    let origin = base.clone();
    let edge = tokio::task::spawn_blocking(move || {
        edge_host::EdgeServer::start(std::path::Path::new(edge_host::EDGE_WASM), &origin)
    })
    .await??;
    let edge_plan = |token: String, body: String, runs: usize| {
        let (http, url) = (http.clone(), format!("{}/api/compute/fleet/plan", edge.base));
        async move {
            let mut samples = Vec::new();
            for _ in 0..runs {
                let started = Instant::now();
                let response = http.post(&url).bearer_auth(&token).body(body.clone()).send().await?;
                let status = response.status();
                let text = response.text().await?;
                if !status.is_success() {
                    bail!("the edge's plan failed: {text}");
                }
                samples.push(started.elapsed());
            }
            Ok::<Duration, anyhow::Error>(median(samples))
        }
    };
    let edge_large = edge_plan(token.clone(), json!({"document": changed}).to_string(), args.runs).await?;
    let edge_small = edge_plan(small_token.clone(), small_request(), 50).await?;
    tokio::task::spawn_blocking(move || drop(edge)).await?;

    let hello_rps = throughput(hello_server().await?, None, String::new(), args.connections, args.seconds).await?;

    // The large estates last: the peak memory of everything above is read before them.
    let rss = peak_rss_mib();
    let max_objects = max_objects_planned();
    let guest_bytes_per_object = guest_bytes_per_object()?;
    let (http_plan_100k, plan_100k_error) = plan_100k(3).await;
    let rss_large = peak_rss_mib();
    drop(large);
    // A million objects, all to be created, once.
    let (http_plan_1m, plan_1m_error) = plan_1m(1).await;

    let _ = stop.send(());
    server.await??;
    let server_rss = server_rss_mib(&document, &changed, args.runs).await?;
    let on_postgres = match &args.postgres {
        Some(url) => Some(replicas::figures(url, &document, &args).await?),
        None => None,
    };
    let mut report = json!({
        "objects": objects,
        "native_plan_ms": ms(native_plan),
        "wasm_plan_ms": ms(wasm_plan),
        "wasm_over_native": over_native(1),
        "instantiate_us_p50": instantiate.as_secs_f64() * 1e6,
        "http_plan_ms_p50": ms(http_plan),
        "http_over_native": over_native(2),
        "http_plan_policies_ms_p50": ms(http_plan_policies),
        "policies_over_plan": http_plan_policies.as_secs_f64() / http_plan.as_secs_f64(),
        "http_plan_plugins_ms_p50": ms(http_plan_plugins),
        "http_plan_plugins_checked_ms_p50": ms(http_plan_plugins_checked),
        "plugin_objects_planned": reservations,
        "plugin_check_us_p50": plugin_check.as_secs_f64() * 1e6,
        "http_small_plan_ms_p50": ms(small_plan),
        "http_small_plan_rps": small_rps,
        "http_hello_rps": hello_rps,
        "small_over_hello": small_rps / hello_rps,
        "small_native_plan_us": small_limits.native.as_secs_f64() * 1e6,
        "small_wasm_plan_us": small_limits.sandboxed.as_secs_f64() * 1e6,
        "small_native_handler_over_hello": small_limits.native_rps / hello_rps,
        "small_sandbox_handler_over_hello": small_limits.sandboxed_rps / hello_rps,
        "max_objects_planned": max_objects,
        "guest_bytes_per_object": guest_bytes_per_object,
        "http_plan_100k_ms": http_plan_100k,
        "http_plan_100k_error": plan_100k_error,
        "http_plan_1m_ms": http_plan_1m,
        "http_plan_1m_error": plan_1m_error,
        "plan_1m_over_100k": http_plan_1m.zip(http_plan_100k).map(|(million, hundred_k)| million / hundred_k),
        "edge_plan_ms_p50": ms(edge_large),
        "edge_small_plan_ms_p50": ms(edge_small),
        "apply_ms": ms(apply),
        "history_page_ms_p50": ms(history_page),
        "apply_after_revisions_ms": ms(apply_after_revisions),
        "apply_after_revisions_over_first": apply_after_revisions.as_secs_f64() / apply.as_secs_f64(),
        "rss_mib": rss,
        "rss_large_mib": rss_large,
        "server_rss_mib": server_rss,
        "cores": std::thread::available_parallelism().map(|cores| cores.get()).unwrap_or(1),
    });
    if let Some(Value::Object(figures)) = on_postgres {
        let pg_apply = figures.get("pg_apply_ms").and_then(Value::as_f64).unwrap_or_default();
        report["pg_apply_over_sqlite"] = json!(pg_apply / ms(apply));
        for (name, value) in figures {
            report[name] = value;
        }
    }
    if args.json {
        println!("{report}");
        return Ok(());
    }
    let row = |name: &str, value: String, target: &str| println!("{name:<28} {value:>14}   {target}");
    println!("fleet benchmark: {objects} objects, medians of {} runs", args.runs);
    row("native plan", format!("{:.1} ms", ms(native_plan)), "");
    row("wasm plan", format!("{:.1} ms", ms(wasm_plan)), "");
    row("wasm / native", format!("{:.2}x", report["wasm_over_native"].as_f64().unwrap_or_default()), "target <= 1.3x");
    row(
        "instantiate + empty call",
        format!("{:.1} us", report["instantiate_us_p50"].as_f64().unwrap_or_default()),
        "target <= 10 us",
    );
    row("plan over HTTP (p50)", format!("{:.1} ms", ms(http_plan)), "target <= 40 ms");
    row("HTTP / native", format!("{:.2}x", report["http_over_native"].as_f64().unwrap_or_default()), "target <= 1.5x");
    row("plan, five policies (p50)", format!("{:.1} ms", ms(http_plan_policies)), "target <= 1.5x plan over HTTP");
    row(
        "plan, half plugin objects",
        format!("{:.1} ms", ms(http_plan_plugins)),
        "the same size, every plugin object checked",
    );
    row(
        "plugin check (one object)",
        format!("{:.1} us", plugin_check.as_secs_f64() * 1e6),
        "a fresh instance and a call",
    );
    let plan_100k = http_plan_100k.map_or_else(|| "failed".to_owned(), |ms| format!("{ms:.0} ms"));
    row("100k-object plan over HTTP", plan_100k, "target <= 1000 ms");
    let plan_1m = http_plan_1m.map_or_else(|| "failed".to_owned(), |ms| format!("{ms:.0} ms"));
    row("1M-object plan over HTTP", plan_1m, "target <= 12x the 100k plan");
    row("largest estate planned", format!("{max_objects} objects"), "target >= 250000");
    row("planner memory per object", format!("{guest_bytes_per_object:.0} B"), "100k creates");
    row("apply over HTTP", format!("{:.1} ms", ms(apply)), "target <= 400 ms");
    row("history page (p50)", format!("{:.2} ms", ms(history_page)), "100 of 10,000 revisions");
    row("apply after 10k revisions", format!("{:.1} ms", ms(apply_after_revisions)), "target: the first apply's time");
    row("small plan over HTTP (p50)", format!("{:.2} ms", ms(small_plan)), "");
    row("small plans over HTTP", format!("{small_rps:.0} rps"), "");
    row("bare hyper handler", format!("{hello_rps:.0} rps"), "");
    let share = |rps: f64| format!("{:.0}%", 100.0 * rps / hello_rps);
    row("small / bare", share(small_rps), "target >= 25%");
    let per_plan = |plan: Duration, note: &str| format!("{:.0} us a plan, {note}", plan.as_secs_f64() * 1e6);
    row(
        "  bare + native plan",
        share(small_limits.native_rps),
        &per_plan(small_limits.native, "no auth, database or pool hop"),
    );
    row("  bare + sandboxed plan", share(small_limits.sandboxed_rps), &per_plan(small_limits.sandboxed, "the same"));
    row("plan at the edge (p50)", format!("{:.1} ms", ms(edge_large)), "the origin's: plan over HTTP");
    row("small plan at the edge (p50)", format!("{:.2} ms", ms(edge_small)), "the origin's: small plan");
    row("peak RSS", format!("{rss:.0} MiB"), "the whole benchmark, before the large estates");
    row("peak RSS, large estates", format!("{rss_large:.0} MiB"), "with the two figures above");
    row("peak RSS, the server alone", format!("{server_rss:.0} MiB"), "target <= 200 MiB; the 10k apply and plans");
    if report.get("pg_apply_ms").is_some() {
        let figure = |name: &str| report[name].as_f64().unwrap_or_default();
        row("apply on PostgreSQL", format!("{:.0} ms", figure("pg_apply_ms")), "");
        row("  / apply on SQLite", format!("{:.2}x", figure("pg_apply_over_sqlite")), "target <= 2x");
        row("  with 1 ms round trips", format!("{:.0} ms", figure("pg_apply_latency1ms_ms")), "target <= 3000 ms");
        row(
            "bystander create (p99)",
            format!("{:.1} ms", figure("bystander_create_p99_ms")),
            "another tenant's, during a large apply",
        );
    }
    Ok(())
}

/// The earlier revisions of the history figures.
const REVISIONS: i64 = 10_000;

/// Gives `tenant` `count` revisions, as that many applies of a small document would
/// have kept them, written straight to the table (applying them would take minutes).
fn keep_revisions(app: &App, tenant: &str, count: i64) -> Result<()> {
    let db = app.core.db.get()?;
    let document = json!({"sites": {"eu-west": {"region": "eu-west-1"}}}).to_string();
    let hash = format!("sha256:{}", "0".repeat(64));
    let numbers: Vec<i64> = (1..=count).collect();
    let mut values = Vec::new();
    for number in &numbers {
        values.extend([
            db::Param::Int(*number),
            db::Param::Text(&document),
            db::Param::Bool(false),
            db::Param::Text(&hash),
            db::Param::Text("alice"),
            db::Param::Text("2026-11-30T00:00:00Z"),
            db::Param::Int(1),
            db::Param::Text("[]"),
        ]);
    }
    let columns =
        ["tenant", "revision", "document", "prune", "plan_hash", "applied_by", "applied_at", "calls", "overrides"];
    db::transaction(&db, db::Tx::Write(tenant), |db| {
        Ok(db.insert_rows("fleet_revisions", &columns, &[db::Param::Text(tenant)], &values, 100)?)
    })?;
    Ok(())
}

/// The replica figures of issue 26, against a real PostgreSQL database.
mod replicas {
    use std::time::{Duration, Instant};

    use anyhow::{Context, Result, bail};
    use serde_json::{Value, json};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use fleet::calls::auth;
    use fleet::{App, Config};

    /// A server of its own on the database at `url`: its base URL, a stop for it, and
    /// a token of every permission for each of `tenants` (made here).
    async fn server(url: String, tenants: &[&str]) -> Result<(String, tokio::sync::oneshot::Sender<()>, Vec<String>)> {
        server_with(url, tenants, Duration::from_secs(15 * 60)).await
    }

    async fn server_with(
        url: String,
        tenants: &[&str],
        drift_interval: Duration,
    ) -> Result<(String, tokio::sync::oneshot::Sender<()>, Vec<String>)> {
        let mut config = Config::new(url.into());
        config.drift_interval = drift_interval;
        config.budget.cpu = Duration::from_secs(60);
        config.budget.memory_bytes = 1 << 30;
        // A million objects' document is about 100 MB.
        config.body_limit = 256 << 20;
        let mut app = tokio::task::spawn_blocking(move || App::new(config)).await??;
        // Replicas in one process would share one name (`host:pid`): each its own.
        static REPLICAS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        if let Some(app) = std::sync::Arc::get_mut(&mut app) {
            let name = format!("bench-{}", REPLICAS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            let reconciler =
                fleet::fleet::drift::Reconciler::new(app.core.planning.clone(), app.core.dispatcher.clone());
            app.core.reconciler = std::sync::Arc::new(reconciler.named(&name));
        }
        let tenants: Vec<String> = tenants.iter().map(|tenant| (*tenant).to_owned()).collect();
        let tokens = {
            let app = app.clone();
            tokio::task::spawn_blocking(move || -> Result<Vec<String>> {
                let db = app.core.db.get()?;
                let now = "2026-11-30T00:00:00Z";
                let all = ["compute:*:* @ *".to_owned()];
                tenants
                    .iter()
                    .map(|tenant| {
                        auth::create_tenant(&db, tenant, now)?;
                        Ok(auth::create_token(&db, tenant, "alice", &all, now, None)?)
                    })
                    .collect()
            })
            .await??
        };
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(fleet::app::serve(app, listener, async move {
            let _ = stopped.await;
        }));
        Ok((base, stop, tokens))
    }

    async fn post(http: &reqwest::Client, base: &str, token: &str, path: &str, body: String) -> Result<Value> {
        let response = http.post(format!("{base}/api/compute/{path}")).bearer_auth(token).body(body).send().await?;
        let (status, text) = (response.status(), response.text().await?);
        if !status.is_success() {
            bail!("{path} answered {status}: {}", &text[..text.len().min(300)]);
        }
        Ok(serde_json::from_str(&text)?)
    }

    /// Forwards loopback connections to `upstream`, holding every chunk `delay` in each
    /// direction (a round trip gains twice `delay`), without limiting throughput.
    async fn delaying_proxy(upstream: String, delay: Duration) -> Result<u16> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else { return };
                    let _ = (client.set_nodelay(true), server.set_nodelay(true));
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::spawn(pipe(client_read, server_write, delay));
                    tokio::spawn(pipe(server_read, client_write, delay));
                });
            }
        });
        Ok(port)
    }

    async fn pipe(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf, delay: Duration) {
        let (chunks, mut delayed) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
        tokio::spawn(async move {
            while let Some((due, chunk)) = delayed.recv().await {
                tokio::time::sleep_until(due).await;
                if to.write_all(&chunk).await.is_err() {
                    return;
                }
            }
        });
        let mut buffer = vec![0u8; 64 << 10];
        while let Ok(read) = from.read(&mut buffer).await {
            if read == 0 || chunks.send((tokio::time::Instant::now() + delay, buffer[..read].to_vec())).is_err() {
                return;
            }
        }
    }

    /// Applies of small documents by `tenants.len()` tenants at once for `seconds`,
    /// each tenant through the replica `bases[n % replicas]`: applies per second.
    async fn tenants_apply_rps(bases: &[String], tokens: &[String], seconds: u64) -> Result<f64> {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let mut workers = Vec::new();
        for (index, token) in tokens.iter().enumerate() {
            let (http, base, token) = (http.clone(), bases[index % bases.len()].clone(), token.clone());
            workers.push(tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < deadline {
                    let gpus = done % 7;
                    let document = json!({"sites": {"eu": {"region": "eu-west-1"}},
                        "providerAccounts": {"aws": {"provider": "aws"}},
                        "pools": {"p": {"site": "eu", "account": "aws", "class": "gpu", "owner": "o", "gpus": gpus}}});
                    post(&http, &base, &token, "fleet/apply", json!({"document": document}).to_string()).await?;
                    done += 1;
                }
                Ok::<u64, anyhow::Error>(done)
            }));
        }
        let started = Instant::now();
        let mut total = 0;
        for worker in workers {
            total += worker.await??;
        }
        Ok(total as f64 / started.elapsed().as_secs_f64())
    }

    /// A row of the drift schedule: tenant, due time, last holder.
    type Scheduled = (String, i64, Option<String>);

    /// `tenants` tenants with a small applied document each, all due at once, checked by
    /// three replicas every `interval`: the checks each replica ran in the third
    /// interval (`fleet_drift_checks_total`), and how many tenants were overdue at the
    /// end: all of them, and those overdue by more than a poll (more than the replicas
    /// could check in time).
    pub async fn drift_run(url: &str, tenants: usize, interval: Duration) -> Result<Value> {
        let http = reqwest::Client::new();
        let names: Vec<String> = (0..tenants).map(|index| format!("drift-{index}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        // Made and applied with no reconciler due before the run starts.
        let (base, stop, tokens) = server_with(url.to_owned(), &refs, Duration::from_secs(24 * 3600)).await?;
        let document = json!({"document": {"sites": {"eu": {"region": "eu-west-1"}}}}).to_string();
        let started = Instant::now();
        for batch in tokens.chunks(16) {
            let applies: Vec<_> = batch
                .iter()
                .map(|token| {
                    let (http, base, token, document) = (http.clone(), base.clone(), token.clone(), document.clone());
                    tokio::spawn(async move { post(&http, &base, &token, "fleet/apply", document).await })
                })
                .collect();
            for applied in applies {
                applied.await??;
            }
        }
        let setup = started.elapsed();
        eprintln!("drift run: {tenants} tenants applied in {:.1} s", setup.as_secs_f64());
        let _ = stop.send(());
        // Every tenant of the run due now, then three replicas with the interval. (The PostgreSQL
        // client blocks: off the runtime's own work.)
        let url_owned = url.to_owned();
        let pool = tokio::task::spawn_blocking(move || fleet::db::open(std::path::Path::new(&url_owned))).await??;
        let sql = |work: &dyn Fn(&fleet::db::Conn) -> Result<Vec<Scheduled>>| {
            tokio::task::block_in_place(|| work(&pool.get()?))
        };
        let now = fleet::fleet::drift::now_ms();
        sql(&|db| {
            // Only the run's own tenants: the other figures' tenants (three of them with
            // 10k objects) stay due when their servers' interval says.
            db.execute(
                "UPDATE drift_schedule SET due_at = ?1, claimed_until = NULL WHERE tenant LIKE 'drift-%'",
                &[fleet::db::Param::Int(now)],
            )?;
            Ok(Vec::new())
        })?;
        let mut replicas = Vec::new();
        for _ in 0..3 {
            replicas.push(server_with(url.to_owned(), &[], interval).await?);
        }
        // Each replica's count of checks (`fleet_drift_checks_total`) over the third
        // interval, when the first round is done.
        let checks = |base: String| {
            let http = http.clone();
            async move {
                let text = http.get(format!("{base}/metrics")).send().await?.text().await?;
                let line = text.lines().find_map(|line| line.strip_prefix("fleet_drift_checks_total "));
                Ok::<u64, anyhow::Error>(line.and_then(|count| count.trim().parse().ok()).unwrap_or(0))
            }
        };
        tokio::time::sleep(interval * 2).await;
        let mut before = Vec::new();
        for (base, _, _) in &replicas {
            before.push(checks(base.clone()).await?);
        }
        tokio::time::sleep(interval).await;
        let mut per_replica = Vec::new();
        for ((base, _, _), before) in replicas.iter().zip(before) {
            per_replica.push(checks(base.clone()).await? - before);
        }
        let overdue: Vec<Scheduled> = sql(&|db| {
            let now = fleet::fleet::drift::now_ms();
            Ok(db.query(
                "SELECT tenant, due_at, holder FROM drift_schedule WHERE due_at < ?1 AND tenant LIKE 'drift-%'",
                &[fleet::db::Param::Int(now)],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )?)
        })?;
        for (_, stop, _) in replicas {
            let _ = stop.send(());
        }
        // A replica polls four times an interval, so a tenant waits up to a quarter of
        // one after it is due: later than that, the replicas did not keep up.
        let now = fleet::fleet::drift::now_ms();
        let poll = i64::try_from((interval / 4).as_millis()).unwrap_or(i64::MAX);
        let late = overdue.iter().filter(|(_, due_at, _)| *due_at < now - poll).count();
        Ok(json!({
            "tenants": tenants,
            "interval_s": interval.as_secs(),
            "setup_s": setup.as_secs_f64(),
            "checks_per_replica_in_an_interval": per_replica,
            "checks_in_an_interval": per_replica.iter().sum::<u64>(),
            "overdue_at_the_end": overdue.len(),
            "overdue_past_a_poll_at_the_end": late,
        }))
    }

    /// `pg_apply_ms`, `pg_apply_latency1ms_ms`, `bystander_create_p99_ms`,
    /// `tenants_apply_rps` (1 and 3 replicas) and `drift_run`.
    pub async fn figures(url: &str, document: &Value, args: &super::Args) -> Result<Value> {
        let http = reqwest::Client::new();
        let body = json!({"document": document}).to_string();
        let (base, stop, tokens) = server(url.to_owned(), &["pg-big", "pg-later", "pg-small"]).await?;

        let started = Instant::now();
        post(&http, &base, &tokens[0], "fleet/apply", body.clone()).await?;
        let pg_apply = started.elapsed();
        eprintln!("pg_apply_ms {:.0}", pg_apply.as_secs_f64() * 1e3);

        // Another tenant's creates, one after another, while `pg-later` applies the
        // large document.
        let applying = {
            let (http, base, token, body) = (http.clone(), base.clone(), tokens[1].clone(), body.clone());
            tokio::spawn(async move { post(&http, &base, &token, "fleet/apply", body).await })
        };
        let mut latencies = Vec::new();
        let site = json!({"region": "eu-west-1"}).to_string();
        while !applying.is_finished() {
            let started = Instant::now();
            post(&http, &base, &tokens[2], "sites/create", site.clone()).await?;
            latencies.push(started.elapsed());
        }
        applying.await??;
        latencies.sort();
        let p99 = latencies.get(latencies.len() * 99 / 100).copied().unwrap_or_default();
        eprintln!("bystander_create_p99_ms {:.1} over {} creates", p99.as_secs_f64() * 1e3, latencies.len());
        let _ = stop.send(());

        // The same apply with 1 ms more on every round trip to the database.
        let config: postgres::Config = url.parse().context("a PostgreSQL URL")?;
        let host = match config.get_hosts().first() {
            Some(postgres::config::Host::Tcp(host)) => host.clone(),
            _ => bail!("the --postgres URL must name a TCP host"),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let proxy = delaying_proxy(format!("{host}:{port}"), Duration::from_micros(500)).await?;
        let far = url.replacen(&format!("{host}:{port}"), &format!("127.0.0.1:{proxy}"), 1);
        if far == url {
            bail!("the --postgres URL must give its host and port (host:port)");
        }
        let (base, stop, tokens) = server(far, &["pg-far"]).await?;
        let started = Instant::now();
        post(&http, &base, &tokens[0], "fleet/apply", body).await?;
        let far_apply = started.elapsed();
        eprintln!("pg_apply_latency1ms_ms {:.0}", far_apply.as_secs_f64() * 1e3);
        let _ = stop.send(());

        // 24 tenants' small applies through one replica, then through three.
        let mut rps = Vec::new();
        for replicas in [1usize, 3] {
            let names: Vec<String> = (0..24).map(|index| format!("rps{replicas}-{index}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let mut servers = vec![server(url.to_owned(), &refs).await?];
            for _ in 1..replicas {
                servers.push(server(url.to_owned(), &[]).await?);
            }
            let bases: Vec<String> = servers.iter().map(|(base, _, _)| base.clone()).collect();
            rps.push(tenants_apply_rps(&bases, &servers[0].2, args.seconds.max(5)).await?);
            eprintln!("tenants_apply_rps with {replicas} replica(s): {:.0}", rps[rps.len() - 1]);
            for (_, stop, _) in servers {
                let _ = stop.send(());
            }
        }
        let drift = match args.drift_tenants {
            0 => Value::Null,
            tenants => drift_run(url, tenants, Duration::from_secs(10)).await?,
        };

        let ms = |duration: Duration| duration.as_secs_f64() * 1e3;
        Ok(json!({
            "pg_apply_ms": ms(pg_apply),
            "pg_apply_latency1ms_ms": ms(far_apply),
            "bystander_create_p99_ms": ms(p99),
            "bystander_creates": latencies.len(),
            "tenants_apply_rps": {"replicas_1": rps[0], "replicas_3": rps[1]},
            "drift_run": drift,
        }))
    }
}
