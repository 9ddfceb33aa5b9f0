//! The application: configuration, database, registry and sandbox, shared by every
//! request and background task.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fleet_guest::Catalog;
use tokio::sync::{broadcast, watch};

use crate::calls::auth::TokenCache;
use crate::calls::registry::Registry;
use crate::db::{self, Pool};
use crate::fleet::{self, events};
use crate::http::connection::Limits;
use crate::metrics::Metrics;
use crate::modules::Modules;
use crate::planner::{self, Budget, Sandbox};
use crate::plugins::Plugins;

/// The most bytes of authenticated tokens kept: some ten thousand tokens.
const TOKEN_CACHE_BYTES: usize = 4 << 20;

#[derive(Debug, Clone)]
pub struct Config {
    /// The database: a SQLite file, or a `postgres://` URL (`db::Location`).
    pub db_path: PathBuf,
    /// The kinds (by name) whose modules this deployment runs.
    pub modules: BTreeSet<String>,
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
    /// How long a planner call may take in all, the host's work on its behalf included.
    pub request_timeout: Duration,
    /// Where the compiled planner is kept between runs; `None` compiles at every start.
    pub cache_dir: Option<PathBuf>,
    /// The console's assets (the planner transpiled by jco), served at `/console/assets/`.
    pub console_dir: PathBuf,
    /// The most bytes of encoded tenant states kept between requests (docs/decisions/0010).
    pub state_cache_bytes: usize,
    /// The certificate chain and private key (PEM files) to serve HTTPS with, if any.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Module plugin files (SPEC §10), loaded at start.
    pub plugins: Vec<PathBuf>,
    /// What one run of a plugin's check may use.
    pub plugin_budget: Budget,
    /// The deployment's policies (SPEC §14), `LEVEL:FILE.rego` each, loaded at start.
    pub policies: Vec<String>,
}

impl Config {
    pub fn new(db_path: PathBuf) -> Config {
        Config {
            db_path,
            modules: Catalog::built_in().iter().map(|(_, kind)| kind.kind.to_owned()).collect(),
            drift_interval: Duration::from_secs(15 * 60),
            read_only: false,
            body_limit: 16 << 20,
            limits: Limits::default(),
            busy_timeout: db::Options::default().busy_timeout,
            budget: Budget::default(),
            request_timeout: planner::DEFAULT_DEADLINE,
            cache_dir: None,
            console_dir: crate::http::console::default_dir(),
            state_cache_bytes: 256 << 20,
            tls: None,
            plugins: Vec::new(),
            plugin_budget: crate::plugins::default_budget(),
            policies: Vec::new(),
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
    /// The kinds this deployment knows and the modules it runs.
    pub modules: Arc<Modules>,
    /// The tenants' states as the planner reads them, cached by generation.
    pub state: Arc<planner::state::Reader>,
    /// Authenticated tokens, cached by generation.
    pub tokens: TokenCache,
    pub registry: Arc<Registry>,
    pub sandbox: Sandbox,
    /// The module plugins this deployment loads.
    pub plugins: Arc<Plugins>,
    /// Wakes event streams when events were committed.
    pub events: broadcast::Sender<()>,
    /// Turns true when the server stops serving: endless responses (event streams) end,
    /// so that a graceful shutdown does not wait for them forever.
    pub stopping: watch::Sender<bool>,
    pub metrics: Metrics,
    /// This server among the replicas on its database, as drift claims name their
    /// holder: `<host>:<pid>`.
    pub replica: String,
    /// Accepts HTTPS connections, when the server serves HTTPS.
    pub tls: Option<crate::http::tls::TlsAcceptor>,
}

impl App {
    pub fn new(config: Config) -> anyhow::Result<Arc<App>> {
        let tls = match &config.tls {
            Some((certificate, key)) => Some(crate::http::tls::acceptor(certificate, key)?),
            None => None,
        };
        let options = db::Options { busy_timeout: config.busy_timeout, read_only: config.read_only };
        let db = db::open_with(&config.db_path, options)?;
        let metrics = Metrics::new();
        let cache_dir = config.cache_dir.as_deref();
        let plugins = Arc::new(Plugins::load(&config.plugins, config.plugin_budget, cache_dir, &metrics)?);
        let policies = crate::policies::Deployment::load(&config.policies)?;
        let catalog = Arc::new(plugins.catalog().clone());
        {
            let conn = db.get()?;
            for plugin in plugins.iter() {
                crate::modules::store::prepare_plugin_table(&conn, plugin.kind, config.read_only)
                    .map_err(|error| anyhow::anyhow!("plugin {}: {error:#}", plugin.path.display()))?;
            }
        }
        let sandbox = Sandbox::new(planner::PLANNER, config.budget, cache_dir, metrics.clone())?
            .with_plugins(plugins.clone())
            .with_deadline(config.request_timeout);
        let modules = Arc::new(Modules::new(catalog.clone(), |kind| config.modules.contains(kind), &plugins));
        for plugin in plugins.iter() {
            if let Some((field, kind)) = plugin.kind.references().find(|(_, kind)| !modules.runs(kind)) {
                anyhow::bail!(
                    "plugin {}: its field {field} references {kind}, a kind no module of this deployment serves \
                     (see --modules)",
                    plugin.path.display()
                );
            }
        }
        let mut registry = Registry::default();
        modules.register(&mut registry);
        fleet::register(&mut registry, &catalog);
        events::register(&mut registry);
        crate::audit::register(&mut registry);
        crate::policies::register(&mut registry, &policies);
        let (events, _) = broadcast::channel(64);
        if let Some(listener) = db.listener() {
            let events = events.clone();
            listener.spawn(move || {
                let _ = events.send(());
            });
        }
        let state =
            Arc::new(planner::state::Reader::new(modules.clone(), policies, config.state_cache_bytes, metrics.clone()));
        let tokens = TokenCache::new("tokens", TOKEN_CACHE_BYTES, metrics.clone());
        let registry = Arc::new(registry);
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_else(|_| "localhost".into());
        let replica = format!("{}:{}", host.trim(), std::process::id());
        Ok(Arc::new(App {
            config,
            db,
            modules,
            state,
            tokens,
            registry,
            sandbox,
            plugins,
            events,
            stopping: watch::Sender::new(false),
            metrics,
            replica,
            tls,
        }))
    }

    /// Whether this deployment runs the module of the kind named `kind`.
    pub fn runs(&self, kind: &str) -> bool {
        self.modules.runs(kind)
    }
}
