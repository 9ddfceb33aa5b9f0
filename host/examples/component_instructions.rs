//! The units of `guest/examples/instructions.rs`, planned by the component in the
//! sandbox, as the server runs it: what an instruction counter reads here, against the
//! native figures, is what running the planner as WebAssembly costs (cranelift's code,
//! software SHA-256, instantiation, the imports). Run by `guest/examples/instructions.sh`.
//!
//! `warm` compiles the component into the cache the counted runs load it from (a
//! compile under callgrind takes minutes); `creates N`, `estate N R` and `small N` are
//! the guest example's; `empty N` makes N almost empty calls (an export of an empty
//! estate, as the benchmark's `instantiate_us_p50`); `memory N` prints what a plan of N
//! creates grew the guest's memory to, per object, beyond an empty call's (as the
//! benchmark's `guest_bytes_per_object`). The state is handed over in the state
//! encoding made once, as the server's state cache keeps a tenant's.

use std::time::Duration;

use fleet::planner::{Entry, Sandbox, Session, Source};
use fleet::sandbox::Budget;
use fleet_guest::Snapshot;

#[path = "../../guest/examples/estates/mod.rs"]
mod estates;
use estates::{EVERY_GRANT, SMALL_POOLS, applied, caller, changes, creates};

fn main() -> anyhow::Result<()> {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let (mode, count, runs) = match arguments.as_slice() {
        [mode] if mode == "warm" => (mode.as_str(), 0, 0),
        [mode, count] => (mode.as_str(), count.parse::<usize>()?, 1),
        [mode, count, runs] => (mode.as_str(), count.parse()?, runs.parse()?),
        _ => {
            anyhow::bail!("usage: component_instructions warm | creates N | estate N R | small N | empty N | memory N")
        }
    };
    let dir = tempfile::tempdir()?;
    let db = fleet::db::open(&dir.path().join("instructions.db"))?;
    // Under callgrind the guest runs fifty times slower: its clock must not stop it.
    let budget = Budget { cpu: Duration::from_secs(3600), ..Budget::default() };
    let cache = std::env::temp_dir().join("fleet-instructions-cache");
    let sandbox = Sandbox::new(fleet::planner::PLANNER, budget, Some(&cache), fleet::metrics::Metrics::new())?
        .with_deadline(Duration::from_secs(3600));
    let every = fleet::calls::auth::Grant::parse(EVERY_GRANT).map_err(anyhow::Error::msg)?;
    let planner_caller = caller();
    let server_caller = fleet::calls::auth::Caller {
        tenant: planner_caller.tenant,
        principal: planner_caller.principal,
        grants: vec![every],
        token: None,
        git_source: None,
    };
    let call = |state: &Source, entry: Entry, request: &str| -> anyhow::Result<String> {
        let session = Session::new(server_caller.clone(), db.get()?, state.clone());
        sandbox.call(session, entry, request).1.map_err(|error| anyhow::anyhow!("{error}"))
    };
    let empty = Source::snapshot(&Snapshot::empty(caller()));
    let plan = |state: &Source, request: &str| call(state, Entry::Plan, request);
    // `runs` plans of `changes(pools)` against `applied(pools)`; the last plan.
    let plans = |pools: usize, runs: usize| -> anyhow::Result<String> {
        let (state, request) = (Source::snapshot(&applied(pools)), changes(pools));
        let mut last = String::new();
        for _ in 0..runs {
            last = plan(&state, &request)?;
        }
        Ok(last)
    };
    match mode {
        "warm" => println!("compiled into {}", cache.display()),
        "creates" => println!("{} bytes of plan", plan(&empty, &creates(count))?.len()),
        "estate" => println!("{runs} plans of {} bytes", plans(count / 2, runs)?.len()),
        "memory" => {
            call(&empty, Entry::Export, "{}")?;
            let empty_call = sandbox.largest_memory();
            plan(&empty, &creates(count))?;
            println!("{} bytes per object", (sandbox.largest_memory() - empty_call) / count.max(1));
        }
        "small" => println!("{count} plans, the last: {}", plans(SMALL_POOLS, count)?),
        "empty" => {
            for _ in 0..count {
                call(&empty, Entry::Export, "{}")?;
            }
            println!("{count} empty calls");
        }
        _ => anyhow::bail!("no mode {mode}"),
    }
    Ok(())
}
