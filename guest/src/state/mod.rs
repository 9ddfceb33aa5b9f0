//! The tenant's state as the planner reads it, kind-generically: per kind, objects with
//! their fields in descriptor order (references are ids), the kinds whose modules run,
//! fleet's name bindings, and the policies in force (their data; `policy/` compiles and
//! runs them). It has two forms:
//!
//! - **JSON** (`compute.preview.snapshot`, the golden cases' `state.json`): `{"caller",
//!   "modules": [kind], <section>: [object as the API writes it], "bindings": [{"kind",
//!   "name", "id"}], "policies"?: [{"name", "level", "source"}]}`; absent fields take
//!   their defaults.
//! - **The state encoding**, which crosses the WIT boundary in one copy (`wit/fleet.wit`
//!   documents it for other hosts): self-describing, little-endian, strings as a `u32`
//!   byte length and UTF-8.
//!
//!   ```text
//!   state    = version:u8 (2) · modules:u32 · kind:str* · tables:u32 · table*
//!              · bindings:u32 · (kind:str · name:str · id:str)*
//!              · policies:u32 · (name:str · level:str · source:str)*
//!   table    = section:str · fields:u32 · name:str* · rows:u32 · row*
//!   row      = values:u32 · (field:u32 · value)*     field indexes the table's names
//!   value    = 0:u8 · str | 1:u8 · u64 | 2:u8 · (0|1):u8 | 3:u8 · pairs:u32 · (str · str)*
//!   ```
//!
//!   A table's names are the kind's identity (`id`, or e.g. `owner`), `archived`, and
//!   any of its fields; a row gives each at most once, absent ones take their defaults.
//!
//! Each file does one job: `snapshot.rs` holds the state as one value, `json.rs` reads
//! and writes its JSON form, `encode.rs` writes the state encoding and `decode.rs` reads
//! it, and `envelope.rs` wraps the encoding for another host of the planner. This file
//! only names what they offer, so that every host reaches it as `fleet_guest::state::…`.

mod decode;
mod encode;
mod envelope;
mod json;
mod snapshot;

pub use decode::decode;
pub use encode::{RowWriter, StateWriter, TableWriter};
pub use envelope::{envelope, open_envelope};
pub use snapshot::{Binding, Caller, Level, Object, Policy, Snapshot};
