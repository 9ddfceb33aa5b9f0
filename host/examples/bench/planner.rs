//! The planner natively, in the sandbox and over HTTP on one state snapshot; a bare
//! instantiate-and-call; and what the default budgets allow: the largest estate planned
//! and the planner's memory per object.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use fleet::calls::auth::Caller;
use fleet::planner::{Entry, Sandbox, Session, Source};
use fleet::sandbox::Budget;
use fleet_guest::Snapshot;
use serde_json::{Value, json};

use crate::Args;
use crate::server::Server;
use crate::support::{creates, median, ms, time, timed};

/// The `bench` tenant's planner on a plan of one document.
pub struct Planner {
    caller: Caller,
    snapshot: Snapshot,
    /// The snapshot in the state encoding, made before any clock starts, as the
    /// server's state cache keeps a tenant's.
    state: Source,
    /// The state of an empty estate.
    empty: Source,
    /// The plan request of the document.
    request: String,
    /// The server's planner with the benchmark's budgets and no plugins, as the native
    /// planner has none.
    pub sandbox: Arc<Sandbox>,
    app: Arc<fleet::App>,
}

impl Planner {
    /// The planner of a plan of `document` against the `bench` tenant's estate; an
    /// error when the component's plan differs from the native one.
    pub async fn new(server: &Server, document: &Value) -> Result<Planner> {
        let caller = server.caller("bench")?;
        let app = server.app.clone();
        let snapshot = {
            let (app, caller) = (app.clone(), caller.clone());
            tokio::task::spawn_blocking(move || app.core.planning.state.snapshot(&app.core.db.get()?, &caller))
                .await??
        };
        let metrics = app.core.metrics.clone();
        let planner = Planner {
            state: Source::snapshot(&snapshot),
            empty: Source::snapshot(&Snapshot::empty(fleet_guest::Caller {
                tenant: "bench".into(),
                principal: "alice".into(),
                grants: None,
            })),
            snapshot,
            caller,
            request: json!({"document": document}).to_string(),
            sandbox: Arc::new(Sandbox::new(fleet::planner::PLANNER, app.config.budget, None, metrics)?),
            app,
        };
        let native = fleet_guest::plan(&planner.snapshot, &planner.request).map_err(anyhow::Error::msg)?;
        if planner.in_sandbox()? != native {
            bail!("the component's plan differs from the native plan");
        }
        Ok(planner)
    }

    /// The plan, natively: its length.
    pub fn native(&self) -> Result<usize, String> {
        fleet_guest::plan(&self.snapshot, &self.request).map(|plan| plan.len()).map_err(|error| error.to_string())
    }

    /// The plan, in a fresh instance of the component.
    pub fn in_sandbox(&self) -> Result<String> {
        self.call(&self.sandbox, &self.state, Entry::Plan, &self.request)
    }

    /// Instantiate and an (almost) empty call: the export of an empty estate.
    pub fn empty_call(&self) -> Result<String> {
        self.call(&self.sandbox, &self.empty, Entry::Export, "{}")
    }

    fn call(&self, sandbox: &Sandbox, state: &Source, entry: Entry, request: &str) -> Result<String> {
        let session = Session::new(self.caller.clone(), self.app.core.db.get()?, state.clone());
        sandbox.call(session, entry, request).1.map_err(|error| anyhow::anyhow!("{error}"))
    }

    /// The plan natively, in the sandbox and over HTTP, one of each per round in an
    /// order that turns, so that the ratios between them (each round's, then their
    /// median) compare plans made within a tenth of a second of each other: this
    /// machine's speed moves by half within a run, and the ratio of medians taken
    /// seconds apart once had the sandbox faster than native code.
    pub async fn rounds(&self, server: &Server, args: &Args) -> Result<Value> {
        let mut rounds = Vec::new();
        for round in 0..args.runs {
            let mut times = [Duration::ZERO; 3];
            for turn in 0..3 {
                let which = (round + turn) % 3;
                times[which] = match which {
                    0 => timed(|| self.native()),
                    1 => timed(|| self.in_sandbox()),
                    _ => http_plan(server, &self.request, |plan| plan.get("policy").is_none()).await?,
                };
            }
            rounds.push(times);
        }
        let column = |which: usize| ms(median(rounds.iter().map(|times| times[which]).collect()));
        let over_native = |which: usize| {
            median(rounds.iter().map(|times| times[which].as_secs_f64() / times[0].as_secs_f64()).collect())
        };
        Ok(json!({
            "native_plan_ms": column(0),
            "wasm_plan_ms": column(1),
            "http_plan_ms_p50": column(2),
            "wasm_over_native": over_native(1),
            "http_over_native": over_native(2),
        }))
    }

    pub fn instantiate(&self) -> Value {
        json!({"instantiate_us_p50": time(2001, || self.empty_call()).as_secs_f64() * 1e6})
    }

    /// The largest estate planned within the default budgets, and the planner's memory
    /// per object.
    pub fn limits(&self) -> Result<Value> {
        Ok(json!({
            "max_objects_planned": self.max_objects()?,
            "guest_bytes_per_object": self.guest_bytes_per_object()?,
        }))
    }

    /// The largest all-creates estate that plans within the default budgets: doubled
    /// until the planner runs out, then halved in between to within 2 %.
    pub fn max_objects(&self) -> Result<usize> {
        let metrics = self.app.core.metrics.clone();
        let defaults = Sandbox::new(fleet::planner::PLANNER, Budget::default(), None, metrics)?;
        let fits = |objects: usize| {
            let request = json!({"document": creates(objects)}).to_string();
            self.call(&defaults, &self.empty, Entry::Plan, &request).is_ok()
        };
        let (mut low, mut high) = (0, 10_000);
        while fits(high) {
            (low, high) = (high, high * 2);
        }
        while high - low > high / 50 {
            let middle = (low + high) / 2;
            if fits(middle) { low = middle } else { high = middle }
        }
        Ok(low)
    }

    /// The planner's memory per object of a 100k all-creates plan, as the memory its
    /// call grew to beyond an empty call's: a figure of memory alone, which the
    /// machine's speed does not move (the largest estate above is bound by time too).
    fn guest_bytes_per_object(&self) -> Result<f64> {
        let roomy = Budget { cpu: Duration::from_secs(600), memory_bytes: 1 << 30 };
        let measured = Sandbox::new(fleet::planner::PLANNER, roomy, None, self.app.core.metrics.clone())?;
        self.call(&measured, &self.empty, Entry::Export, "{}")?;
        let empty_call = measured.largest_memory();
        let request = json!({"document": creates(100_000)}).to_string();
        self.call(&measured, &self.empty, Entry::Plan, &request)?;
        Ok((measured.largest_memory() - empty_call) as f64 / 100_000.0)
    }
}

/// One plan of `request` over HTTP, against the database, as the `bench` tenant: how
/// long it took; its answer, read after the clock stopped, must pass `check`.
pub async fn http_plan(server: &Server, request: &str, check: fn(&Value) -> bool) -> Result<Duration> {
    let body = request.to_owned();
    let started = Instant::now();
    let plan = server.post("plan", body).await?;
    let took = started.elapsed();
    if !check(&serde_json::from_str(&plan)?) {
        bail!("an unexpected plan: {}", &plan[..plan.len().min(300)]);
    }
    Ok(took)
}
