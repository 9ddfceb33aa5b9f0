//! The performance benchmark: `cargo run --release -p fleet --example bench -- --objects 10000 [--json]`.
//!
//! Everything is measured in one run on one machine: the planner natively and as a
//! component on the same state snapshot, a bare instantiate-and-call, plans and a small
//! plan's throughput over HTTP against the real server in this process, a bare hyper
//! handler as the throughput ceiling and that handler planning the small plan natively
//! and in the sandbox (what bounds the small plans), a large apply, the same plans
//! through the edge component (served in process by wasmtime-wasi-http), a plan of an
//! estate half of which is a module plugin's objects and a plugin check's own cost, the
//! large estates (100k and 1M objects), and the peak resident memory, of this process
//! and of the server alone in a process of its own. Times are medians (p50) over
//! repeated runs.
//!
//! Each file measures one group of figures and answers them by the names of the JSON
//! report; `report.rs` prints the table from that report.

mod apply;
mod edge;
mod growth;
mod large;
mod planner;
mod plugins;
mod policies;
mod replicas;
mod report;
mod rss;
mod server;
mod small;
mod sources;
mod support;
mod webhooks;

use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use serde_json::{Value, json};

use crate::server::Server;
use crate::support::{document, ms, peak_rss_mib, repeat, with_changed_pools};

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
    /// The small plan made by fleet's handler without HTTP, then by a bare sandbox call,
    /// on one thread: what the handler adds to the plan.
    SmallHandle,
    /// The growing search for the largest estate planned within the default budgets.
    MaxObjects,
    /// The 100k-object all-creates plan over HTTP.
    Plan100k,
    /// The apply and unchanged re-plan of the large document and one ten times larger.
    Growth,
    /// The large plan over HTTP with the five example policies in force.
    Policies,
    /// The 1M-object all-creates plan over HTTP.
    Plan1m,
    /// Only the drift run of `--drift-tenants` on the `--postgres` database.
    Drift,
    /// The server's peak RSS through twelve concurrent 200k-object plans.
    LargePlansRss,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match &args.serve_alone {
        Some(db) => runtime.block_on(rss::serve_alone(db.clone())),
        None => runtime.block_on(run(args)),
    }
}

async fn run(args: Args) -> Result<()> {
    if let Some(figure) = args.profile {
        return profile(&args, figure).await;
    }
    let server = Server::start(&args).await?;
    let mut report = json!({});
    let document = document(args.objects);
    let apply = apply::large(&server, &document).await?;
    add(&mut report, json!({"apply_ms": ms(apply)}));
    add(&mut report, apply::proposal(&server, &document).await?);
    add(&mut report, webhooks::figures(&server, &document).await?);
    add(&mut report, sources::figures(&server, &document, args.runs).await?);
    add(&mut report, apply::history(&server, &document, args.runs).await?);
    let changed = with_changed_pools(&document);
    let planner = planner::Planner::new(&server, &changed).await?;
    add(&mut report, planner.rounds(&server, &args).await?);
    add(&mut report, planner.instantiate());
    add(&mut report, policies::figures(&server, &args, &changed).await?);
    add(&mut report, plugins::figures(&server, &args).await?);
    add(&mut report, small::figures(&server, &args, &planner.sandbox).await?);
    add(&mut report, edge::figures(&server, &args, &changed).await?);
    // The large estates last: the peak memory of everything above is read before them.
    add(&mut report, json!({"rss_mib": peak_rss_mib()}));
    add(&mut report, growth::figures(&server, &document).await?);
    add(&mut report, planner.limits()?);
    add(&mut report, large::figures(&server, &args).await);
    server.stop().await?;
    add(&mut report, json!({"server_rss_mib": rss::server_rss_mib(&document, &changed, args.runs).await?}));
    add(&mut report, json!({"server_rss_mib_12_large_plans": rss::large_plans_rss_mib().await?}));
    if let Some(url) = &args.postgres {
        add(&mut report, replicas::figures(url, &document, &args).await?);
    }
    let cores = std::thread::available_parallelism().map(|cores| cores.get()).unwrap_or(1);
    add(&mut report, json!({"objects": support::count(&document), "cores": cores}));
    add_ratios(&mut report);
    if args.json {
        println!("{report}");
    } else {
        report::table(&report, args.runs);
    }
    Ok(())
}

/// Repeats `figure` for `--seconds` (or runs it once, for the figures of one long run)
/// with no more set up than it needs, for a profiler to watch.
async fn profile(args: &Args, figure: Figure) -> Result<()> {
    if figure == Figure::LargePlansRss {
        println!("server_rss_mib_12_large_plans {:.0}", rss::large_plans_rss_mib().await?);
        return Ok(());
    }
    if figure == Figure::Drift {
        let url = args.postgres.as_deref().context("--profile drift needs --postgres")?;
        println!("{}", replicas::drift_run(url, args.drift_tenants, Duration::from_secs(10)).await?);
        return Ok(());
    }
    let server = Server::start(args).await?;
    let document = document(args.objects);
    let nothing = json!({});
    match figure {
        Figure::Apply => {
            println!("apply_ms {:.1}", ms(apply::large(&server, &document).await?));
            if let Some(url) = &args.postgres {
                println!("{}", replicas::figures(url, &document, args).await?);
            }
        }
        Figure::NativePlan => {
            apply::large(&server, &document).await?;
            let planner = planner::Planner::new(&server, &with_changed_pools(&document)).await?;
            repeat(args.seconds, || planner.native());
        }
        Figure::WasmPlan => {
            apply::large(&server, &document).await?;
            let planner = planner::Planner::new(&server, &with_changed_pools(&document)).await?;
            repeat(args.seconds, || planner.in_sandbox());
        }
        Figure::Instantiate => {
            let planner = planner::Planner::new(&server, &nothing).await?;
            repeat(args.seconds, || planner.empty_call());
        }
        Figure::MaxObjects => {
            planner::Planner::new(&server, &nothing).await?.max_objects()?;
        }
        Figure::SmallHandle => {
            small::plan(&server, args).await?;
            tokio::task::block_in_place(|| small::handler_alone(&server, args))?;
        }
        Figure::SmallPlan => {
            let (latency, per_second) = small::plan(&server, args).await?;
            eprintln!("{per_second:.0} small plans per second, {:.3} ms each (median)", ms(latency));
        }
        Figure::Policies => {
            apply::large(&server, &document).await?;
            policies::repeat(&server, args, &with_changed_pools(&document)).await?;
        }
        Figure::Growth => {
            apply::large(&server, &document).await?;
            println!("{}", growth::figures(&server, &document).await?);
        }
        Figure::Plan100k | Figure::Plan1m => {
            let objects = if figure == Figure::Plan100k { 100_000 } else { 1_000_000 };
            let median = large::plan_creates(&server, args, objects, usize::MAX).await?;
            eprintln!("{median:.0} ms (median)");
        }
        Figure::Drift | Figure::LargePlansRss => {}
    }
    server.stop().await
}

/// The ratios of figures of different groups: `(ratio, figure, over figure)`. A ratio
/// of a figure the run left out is left out; one of a figure that failed is null.
const RATIOS: [(&str, &str, &str); 9] = [
    ("apply_webhooks_over_apply", "apply_webhooks_ms", "apply_ms"),
    ("source_cycle_over_apply", "source_cycle_10k_ms", "apply_ms"),
    ("policies_over_plan", "http_plan_policies_ms_p50", "http_plan_ms_p50"),
    ("proposal_apply_over_apply", "proposal_apply_ms", "apply_ms"),
    ("apply_after_revisions_over_first", "apply_after_revisions_ms", "apply_ms"),
    ("plan_1m_over_100k", "http_plan_1m_ms", "http_plan_100k_ms"),
    ("apply_10x_over_apply", "apply_10x_ms", "apply_ms"),
    ("replan_10x_over_replan", "http_replan_10x_ms", "http_replan_ms"),
    ("pg_apply_over_sqlite", "pg_apply_ms", "apply_ms"),
];

fn add_ratios(report: &mut Value) {
    for (ratio, figure, over) in RATIOS {
        if report.get(figure).is_some() {
            let value = report[figure].as_f64().zip(report[over].as_f64()).map(|(figure, over)| figure / over);
            report[ratio] = json!(value);
        }
    }
}

/// Adds the figures of the object `figures` to `report`.
fn add(report: &mut Value, figures: Value) {
    if let (Some(report), Value::Object(figures)) = (report.as_object_mut(), figures) {
        report.extend(figures);
    }
}
