//! The planner's golden cases, listed once for every test that replays them: natively
//! (`tests/golden.rs`), through the component (the host), at the edge, and through jco
//! (the browser tests, which read [`MINIMUM`] from here). A case is a folder of
//! `guest/tests/plans` with `request.json`, `state.json` and `expected.json`.

use std::path::{Path, PathBuf};

/// The fewest cases there are: fewer means the folder was not found or lost cases.
pub const MINIMUM: usize = 34;

/// Every case's folder, sorted by name.
pub fn cases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/plans");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|error| panic!("the golden cases are in {}: {error}", root.display()))
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() >= MINIMUM, "{} golden cases in {}, at least {MINIMUM} expected", cases.len(), root.display());
    cases
}
