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
//! - `small N`: N plans of a small estate (20 objects, one changed), each reading the
//!   tenant from the state encoding, as the component does on every call.
//!
//! What the counts leave out: the component's own cost (cranelift's code, software
//! SHA-256 where the native build may use the CPU's) and the host's.

use fleet_guest::{Caller, Catalog, Error, Host, Snapshot};
use serde_json::{Map, Value, json};

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

/// `pools` pools on one site and account, each with a flavor.
fn document(pools: usize) -> Value {
    let mut pool_section = Map::new();
    let mut flavors = Map::new();
    for index in 0..pools {
        let pool = format!("pool-{index}");
        flavors.insert(format!("flavor-{index}"), json!({"pool": pool, "vcpus": 8, "memoryMib": 32768, "gpus": 1}));
        pool_section.insert(
            pool,
            json!({"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": format!("team-{}", index % 50),
                   "vcpus": 64, "memoryMib": 262_144, "gpus": 8}),
        );
    }
    json!({"sites": {"eu-west": {"region": "eu-west-1"}}, "providerAccounts": {"aws-main": {"provider": "aws"}},
           "pools": pool_section, "flavors": flavors})
}

/// An id: the prefix and 26 characters of base32, unique per number.
fn id(prefix: &str, number: usize) -> String {
    let alphabet = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut rest = number;
    let text: String = (0..26)
        .map(|_| {
            let character = alphabet[rest % 32] as char;
            rest /= 32;
            character
        })
        .collect();
    format!("{prefix}_{text}")
}

/// The tenant that applying [`document`] of `pools` pools leaves: its objects, their
/// references as ids, and the names bound to the ids.
fn applied(pools: usize) -> Snapshot {
    let mut bindings = vec![
        json!({"kind": "site", "name": "eu-west", "id": id("site", 0)}),
        json!({"kind": "providerAccount", "name": "aws-main", "id": id("acct", 0)}),
    ];
    let mut pool_objects = Vec::new();
    let mut flavors = Vec::new();
    for index in 0..pools {
        bindings.push(json!({"kind": "pool", "name": format!("pool-{index}"), "id": id("pool", index)}));
        bindings.push(json!({"kind": "flavor", "name": format!("flavor-{index}"), "id": id("flv", index)}));
        pool_objects.push(json!({"id": id("pool", index), "site": id("site", 0), "account": id("acct", 0),
                                 "class": "gpu", "owner": format!("team-{}", index % 50), "vcpus": 64,
                                 "memoryMib": 262_144, "gpus": 8}));
        flavors.push(json!({"id": id("flv", index), "pool": id("pool", index), "vcpus": 8, "memoryMib": 32768,
                            "gpus": 1}));
    }
    let state = json!({
        "caller": {"tenant": "bench", "principal": "alice"},
        "sites": [{"id": id("site", 0), "region": "eu-west-1"}],
        "providerAccounts": [{"id": id("acct", 0), "provider": "aws"}],
        "pools": pool_objects,
        "flavors": flavors,
        "bindings": bindings,
    });
    serde_json::from_value(state).expect("a snapshot")
}

fn caller() -> Caller {
    Caller { tenant: "bench".into(), principal: "alice".into(), grants: None }
}

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let (mode, count) = match arguments.as_slice() {
        [mode, count] => (mode.as_str(), count.parse::<usize>().expect("a count")),
        _ => panic!("usage: instructions creates|small N"),
    };
    let empty = Snapshot::empty(caller());
    match mode {
        "creates" => {
            let request = json!({"document": document(count / 2)}).to_string();
            let plan = fleet_guest::plan(&empty, &request).expect("a plan");
            println!("{} bytes of plan", plan.len());
        }
        "small" => {
            // The tenant as an apply of the small document leaves it (references are ids).
            let small = document(9);
            let host = Encoded { caller: caller(), state: applied(9).encode(&Catalog::built_in()) };
            let mut changed = small;
            changed["pools"]["pool-3"]["gpus"] = json!(16);
            let request = json!({"document": changed}).to_string();
            // Every plan is made; the last is shown.
            let last = (0..count).fold(String::new(), |_, _| fleet_guest::plan(&host, &request).expect("a plan"));
            println!("{count} plans, the last: {last}");
        }
        _ => panic!("no mode {mode}"),
    }
}
