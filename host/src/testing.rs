//! What in-process tests build: only the parts a test needs. A database of its own, the
//! built-in modules' methods, or the whole [`Core`] when a test needs the planner.

use std::path::PathBuf;
use std::sync::Arc;

use fleet_guest::Catalog;

use crate::app::{Config, Core};
use crate::calls::auth;
use crate::calls::registry::Registry;
use crate::db::{self, Conn, Pool};
use crate::modules::Modules;
use crate::plugins::Plugins;

/// A migrated SQLite database in a temp dir of its own, with the tenants `acme` and
/// `other`.
pub struct Database {
    pub pool: Pool,
    dir: tempfile::TempDir,
}

impl Database {
    pub fn new() -> Database {
        let dir = tempfile::tempdir().expect("a temp dir");
        let pool = db::open_with(&dir.path().join("fleet.db"), db::Options::default()).expect("a database");
        for tenant in ["acme", "other"] {
            auth::create_tenant(&pool.get().expect("a connection"), tenant, "2026-11-30T00:00:00Z").expect("a tenant");
        }
        Database { pool, dir }
    }

    pub fn conn(&self) -> Conn {
        self.pool.get().expect("a connection")
    }

    /// The database's file, for a [`Config`] of the same database.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("fleet.db")
    }

    /// A configuration of this database for in-process tests, with the compiled planner
    /// shared between them through a cache in the temp dir.
    pub fn config(&self) -> Config {
        let mut config = Config::new(self.path());
        config.cache_dir = Some(planner_cache());
        config
    }

    /// The parts that serve methods on this database, configured by `configure`.
    pub fn core(&self, configure: impl FnOnce(&mut Config)) -> Core {
        let mut config = self.config();
        configure(&mut config);
        Core::new(&config).expect("the parts start")
    }
}

/// Where in-process tests keep the compiled planner, so that it is compiled once.
pub fn planner_cache() -> PathBuf {
    std::env::temp_dir().join("fleet-test-planner-cache")
}

/// The methods of the built-in kinds' modules, every one of them run.
pub fn module_registry() -> Registry {
    let modules = Modules::new(Arc::new(Catalog::built_in()), |_| true, &Plugins::default());
    let mut registry = Registry::default();
    modules.register(&mut registry);
    registry
}
