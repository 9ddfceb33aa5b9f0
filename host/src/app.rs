//! The application: configuration, database, registry and sandbox, shared by every
//! request and background task.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fleet_guest::Kind;
use tokio::sync::broadcast;

use crate::connection::Limits;
use crate::db::{self, Pool};
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::sandbox::{self, Budget, Sandbox};
use crate::{events, fleet, modules};

#[derive(Debug, Clone)]
pub struct Config {
    pub db_path: PathBuf,
    /// The kinds whose modules this deployment runs.
    pub modules: BTreeSet<Kind>,
    pub drift_interval: Duration,
    /// Reads only: apply and every other mutation answer UNSUPPORTED, the reconciler does
    /// not run, and nothing is ever written to the database.
    pub read_only: bool,
    pub body_limit: usize,
    /// What one client may hold: timeouts and the connection cap (SPEC §7a).
    pub limits: Limits,
    /// How long a request waits for another process's write lock.
    pub busy_timeout: Duration,
    pub budget: Budget,
    /// Where the compiled planner is kept between runs; `None` compiles at every start.
    pub cache_dir: Option<PathBuf>,
    /// The browser preview's assets (the planner transpiled by jco), served at `/preview/assets/`.
    pub preview_dir: PathBuf,
}

impl Config {
    pub fn new(db_path: PathBuf) -> Config {
        Config {
            db_path,
            modules: Kind::ALL.into_iter().collect(),
            drift_interval: Duration::from_secs(15 * 60),
            read_only: false,
            body_limit: 16 << 20,
            limits: Limits::default(),
            busy_timeout: db::Options::default().busy_timeout,
            budget: Budget::default(),
            cache_dir: None,
            preview_dir: crate::preview::default_dir(),
        }
    }

    /// The configuration of in-process tests: a database at `db_path`, and the compiled
    /// planner shared between tests through a cache in the temp dir.
    #[cfg(test)]
    pub fn for_tests(db_path: PathBuf) -> Config {
        let mut config = Config::new(db_path);
        config.cache_dir = Some(std::env::temp_dir().join("fleet-test-planner-cache"));
        config
    }
}

pub struct App {
    pub config: Config,
    pub db: Pool,
    pub registry: Registry,
    pub sandbox: Sandbox,
    /// Wakes event streams when events were committed.
    pub events: broadcast::Sender<()>,
    pub metrics: Metrics,
}

impl App {
    pub fn new(config: Config) -> anyhow::Result<Arc<App>> {
        let options = db::Options { busy_timeout: config.busy_timeout, read_only: config.read_only };
        let db = db::open_with(&config.db_path, options)?;
        let sandbox = Sandbox::new(sandbox::PLANNER, config.budget, config.cache_dir.as_deref())?;
        let mut registry = Registry::default();
        for module in modules::ALL.into_iter().filter(|module| config.modules.contains(&module.kind)) {
            module.register(&mut registry);
        }
        fleet::register(&mut registry);
        events::register(&mut registry);
        crate::audit::register(&mut registry);
        let (events, _) = broadcast::channel(64);
        Ok(Arc::new(App { config, db, registry, sandbox, events, metrics: Metrics::new() }))
    }

    pub fn runs(&self, kind: Kind) -> bool {
        self.config.modules.contains(&kind)
    }
}
