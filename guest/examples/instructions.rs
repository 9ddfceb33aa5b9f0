//! Units of the planner's work, natively, for an instruction counter: the machine's
//! speed moves what a timer reads, not how many instructions a plan takes. Each mode is
//! run twice at two sizes and the counts subtracted, so that what the process does
//! once (starting, building the input) falls out:
//!
//! ```sh
//! guest/examples/instructions.sh   # instructions per create and per small plan
//! ```
//!
//! - `creates N`: one plan of N creates (half pools, half their flavors, as the
//!   benchmark's largest estates) against an empty tenant;
//! - `estate N R`: R plans of N objects (half pools, half their flavors, one pool in a
//!   hundred changed) against the tenant their apply left, read from the state encoding;
//!   run with R = 1 and 2, so that building the estate falls out too;
//! - `small N`: N plans of a small estate (20 objects, one changed), each reading the
//!   tenant from the state encoding, as the component does on every call;
//! - `empty N`: N exports of an empty tenant read from the state encoding, the guest's
//!   part of the component's almost empty call.
//!
//! What the counts leave out: the component's own cost (cranelift's code, software
//! SHA-256 where the native build may use the CPU's) and the host's.

use fleet_guest::{Caller, Catalog, Error, Host, Snapshot};
#[path = "estates/mod.rs"]
mod estates;
use estates::{SMALL_POOLS, applied, caller, changes, creates};

/// A host that hands the planner its tenant in the state encoding, decoded per call.
struct Encoded {
    caller: Caller,
    state: Vec<u8>,
}

impl Host for Encoded {
    fn caller(&self) -> Caller {
        self.caller.clone()
    }

    fn state(&self, catalog: &Catalog) -> Result<Snapshot, Error> {
        fleet_guest::state::decode(catalog, &self.state)
    }

    fn invoke(&mut self, method: &str, _input: &str) -> Result<String, Error> {
        Err(Error::new(fleet_guest::ErrorCode::Unsupported, format!("no composite methods here: {method}")))
    }
}

/// `runs` plans of [`changes`]`(pools)` against [`applied`]`(pools)`, each reading the
/// tenant from the state encoding; the last plan.
fn plans(pools: usize, runs: usize) -> String {
    let host = Encoded { caller: caller(), state: applied(pools).encode(&Catalog::built_in()) };
    let request = changes(pools);
    (0..runs).fold(String::new(), |_, _| fleet_guest::plan(&host, &request).expect("a plan"))
}

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let (mode, count, runs) = match arguments.as_slice() {
        [mode, count] => (mode.as_str(), count.parse::<usize>().expect("a count"), 1),
        [mode, count, runs] => (mode.as_str(), count.parse().expect("a count"), runs.parse().expect("a count")),
        _ => panic!("usage: instructions creates N | estate N R | small N | empty N"),
    };
    let empty = Snapshot::empty(caller());
    match mode {
        "creates" => {
            let plan = fleet_guest::plan(&empty, &creates(count)).expect("a plan");
            println!("{} bytes of plan", plan.len());
        }
        "estate" => println!("{runs} plans of {} bytes", plans(count / 2, runs).len()),
        "small" => println!("{count} plans, the last: {}", plans(SMALL_POOLS, count)),
        "empty" => {
            let host = Encoded { caller: caller(), state: empty.encode(&Catalog::built_in()) };
            let exported = (0..count).fold(String::new(), |_, _| fleet_guest::export(&host, "{}").expect("an export"));
            println!("{count} exports, the last: {exported}");
        }
        _ => panic!("no mode {mode}"),
    }
}
