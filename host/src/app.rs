//! The composition root: the configuration, and the one place that builds every part
//! of the server from it and hands each part what it uses: the database, the modules
//! and their registry, the planner's sandbox and its [`Planning`], the dispatcher, the
//! HTTP server, the drift reconciler and the webhooks' deliverer (and, before them, the
//! secrets at rest checked and sealed).

use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fleet_guest::Catalog;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::calls::Dispatcher;
use crate::calls::auth::TokenCache;
use crate::calls::registry::Registry;
use crate::db::{self, Pool};
use crate::events::{self, Wake};
use crate::fleet::drift::{self, Asking, Reconciler};
use crate::fleet::{self, Planning};
use crate::http::connection::Limits;
use crate::http::{self, Server};
use crate::metrics::Metrics;
use crate::modules::Modules;
use crate::planner::{self, Sandbox};
use crate::plugins::Plugins;
use crate::policies::Deployment;
use crate::sandbox::Budget;
use crate::sources::git::GitConfig;
use crate::{secrets, sources, webhooks};

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
    /// What the requests being served may hold at once: bodies, and reading them.
    pub request_memory_total: usize,
    /// What one client may hold: timeouts and the connection cap (SPEC §7a).
    pub limits: Limits,
    /// How long a request waits for another process's write lock.
    pub busy_timeout: Duration,
    pub budget: Budget,
    /// The memory all planner calls may hold at once, at their caps.
    pub sandbox_memory_total: usize,
    /// How long a planner call may take in all, the host's work on its behalf included.
    pub request_timeout: Duration,
    /// Where the compiled planner is kept between runs; `None` compiles at every start.
    pub cache_dir: Option<PathBuf>,
    /// Where the console's built assets are read from (`--console-dir`); `None` serves
    /// those embedded in the binary.
    pub console_dir: Option<PathBuf>,
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
    /// Every plan with calls is applied through an approved proposal (SPEC §17).
    pub require_approval: bool,
    /// Which revisions are kept (`--keep-revisions`, `--revisions-max-age`); all unless told.
    pub retention: fleet::history::Retention,
    /// What webhooks may reach (SPEC §18).
    pub webhook_reach: webhooks::Reach,
    /// A CA certificate (PEM) webhooks' TLS trusts besides the system's roots.
    pub webhook_ca: Option<PathBuf>,
    pub webhook_schedule: webhooks::Schedule,
    /// The most webhooks a tenant may have (`serve --webhooks-per-tenant`).
    pub webhooks_per_tenant: usize,
    /// The key that seals secrets at rest (`serve --secret-key-file`, SPEC §20.4); none
    /// stores them unencrypted.
    pub secret_key: Option<secrets::Key>,
    /// How git sources are fetched (SPEC §20.3): the reach rules, the bounds, the cache.
    pub git: GitConfig,
}

impl Config {
    pub fn new(db_path: PathBuf) -> Config {
        Config {
            db_path,
            modules: Catalog::built_in().iter().map(|(_, kind)| kind.kind.to_owned()).collect(),
            drift_interval: Duration::from_secs(15 * 60),
            read_only: false,
            body_limit: 16 << 20,
            request_memory_total: crate::http::DEFAULT_REQUEST_MEMORY,
            limits: Limits::default(),
            busy_timeout: db::Options::default().busy_timeout,
            budget: Budget::default(),
            sandbox_memory_total: crate::sandbox::default_memory_total(),
            request_timeout: planner::DEFAULT_DEADLINE,
            cache_dir: None,
            console_dir: None,
            state_cache_bytes: 256 << 20,
            tls: None,
            plugins: Vec::new(),
            plugin_budget: crate::plugins::default_budget(),
            policies: Vec::new(),
            require_approval: false,
            retention: fleet::history::Retention::default(),
            webhook_reach: webhooks::Reach::default(),
            webhook_ca: None,
            webhook_schedule: webhooks::Schedule::default(),
            webhooks_per_tenant: webhooks::PER_TENANT,
            secret_key: None,
            git: GitConfig::new(std::env::temp_dir().join("fleet-git")),
        }
    }
}

/// The parts that serve methods, without a transport: the database, the modules, the
/// planner's [`Planning`], the dispatcher of every method and the drift reconciler.
/// The server is built on them; so are in-process tests that need a planner.
pub struct Core {
    pub db: Pool,
    /// This replica's sender of the webhooks' outbox.
    pub deliverer: Arc<webhooks::Deliverer>,
    pub modules: Arc<Modules>,
    pub planning: Arc<Planning>,
    pub dispatcher: Arc<Dispatcher>,
    pub reconciler: Arc<Reconciler>,
    /// Runs the git sources' cycles.
    pub sources: Arc<sources::Runner>,
    pub metrics: Metrics,
    pub wake: Wake,
    /// What `status --refresh` asks the reconciler, until it runs.
    asking: Mutex<Option<Asking>>,
    /// What the sources' methods ask the runner, until it runs.
    source_asks: Mutex<Option<sources::Asks>>,
}

impl Core {
    pub fn new(config: &Config) -> anyhow::Result<Core> {
        let options = db::Options { busy_timeout: config.busy_timeout, read_only: config.read_only };
        let metrics = Metrics::new();
        metrics.count_events(&events::TYPES);
        let db = db::open_with(&config.db_path, options)?.counting(metrics.clone());
        // Secrets nothing could sign with refuse the start; unencrypted ones are sealed.
        secrets::at_rest::prepare(&db.get()?, config.secret_key.as_ref(), config.read_only)?;
        let cache_dir = config.cache_dir.as_deref();
        let plugins = Arc::new(Plugins::load(&config.plugins, config.plugin_budget, cache_dir, &metrics)?);
        let policies = Deployment::load(&config.policies)?;
        let catalog = Arc::new(plugins.catalog().clone());
        prepare_plugin_tables(&db, &plugins, config.read_only)?;
        let modules = Arc::new(Modules::new(catalog.clone(), |kind| config.modules.contains(kind), &plugins));
        modules.check_plugin_references(&plugins)?;
        let sandbox = Sandbox::new(planner::PLANNER, config.budget, cache_dir, metrics.clone())?
            .with_plugins(plugins.clone())
            .with_deadline(config.request_timeout)
            .with_memory_total(config.sandbox_memory_total);
        let wake = wake(&db);
        let state =
            fleet::state::Reader::new(modules.clone(), policies.clone(), config.state_cache_bytes, metrics.clone());
        let planning = Arc::new(Planning {
            db: db.clone(),
            sandbox,
            state: Arc::new(state),
            modules: modules.clone(),
            plugins,
            metrics: metrics.clone(),
            wake: wake.clone(),
            drift_interval: config.drift_interval,
            read_only: config.read_only,
            require_approval: config.require_approval,
            retention: config.retention,
            git_insecure: config.git.allow_insecure,
        });
        let (checks, asking) = drift::checks();
        let git = Arc::new(sources::git::Git::new(config.git.clone()));
        let (source_asking, source_asks) = sources::asking();
        let registry = registry(&modules, &planning, checks, &policies, config, (git.clone(), source_asking));
        let deliverer = Arc::new(webhooks::Deliverer::new(
            db.clone(),
            config.webhook_reach.clone(),
            config.webhook_ca.as_deref(),
            config.webhook_schedule,
            metrics.clone(),
            config.secret_key.clone(),
        )?);
        let tokens = TokenCache::new("tokens", TOKEN_CACHE_BYTES, metrics.clone());
        let dispatcher = Arc::new(Dispatcher::new(db.clone(), registry, tokens, config.read_only, wake.clone()));
        let reconciler = Arc::new(Reconciler::new(planning.clone(), dispatcher.clone()));
        let sources = Arc::new(sources::Runner::new(dispatcher.clone(), git, config.secret_key.clone(), wake.clone()));
        Ok(Core {
            db,
            deliverer,
            modules,
            planning,
            dispatcher,
            reconciler,
            sources,
            metrics,
            wake,
            asking: Mutex::new(Some(asking)),
            source_asks: Mutex::new(Some(source_asks)),
        })
    }

    /// What the reconciler listens on for `status --refresh`; only the first caller gets
    /// it (the one that runs the reconciler).
    pub fn take_asking(&self) -> Option<Asking> {
        self.asking.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// What the sources' runner listens on; only the first caller gets it.
    pub fn take_source_asks(&self) -> Option<sources::Asks> {
        self.source_asks.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// The server: its configuration, its parts, and the HTTP server over them.
pub struct App {
    pub config: Config,
    pub core: Core,
    pub server: Arc<Server>,
}

impl App {
    pub fn new(config: Config) -> anyhow::Result<Arc<App>> {
        // A certificate that cannot serve stops the start before the database is opened.
        let tls = match &config.tls {
            Some((certificate, key)) => Some(http::tls::acceptor(certificate, key)?),
            None => None,
        };
        let core = Core::new(&config)?;
        let mut server = server(&config, &core);
        server.tls = tls;
        Ok(Arc::new(App { config, core, server: Arc::new(server) }))
    }
}

/// Every plugin kind's table, made or checked before anything serves.
fn prepare_plugin_tables(db: &Pool, plugins: &Plugins, read_only: bool) -> anyhow::Result<()> {
    let conn = db.get()?;
    for plugin in plugins.iter() {
        crate::store::prepare_plugin_table(&conn, plugin.kind, read_only)
            .map_err(|error| anyhow::anyhow!("plugin {}: {error:#}", plugin.path.display()))?;
    }
    Ok(())
}

/// Wakes the event streams of this process when events were committed here or, on
/// PostgreSQL, by another replica (`LISTEN`).
fn wake(db: &Pool) -> Wake {
    let wake = events::wake();
    if let Some(listener) = db.listener() {
        let wake = wake.clone();
        listener.spawn(move || {
            let _ = wake.send(());
        });
    }
    wake
}

/// Every method, each registered once with what it uses.
fn registry(
    modules: &Modules,
    planning: &Arc<Planning>,
    checks: drift::Checks,
    policies: &Deployment,
    config: &Config,
    (git, source_asking): (Arc<sources::git::Git>, sources::Asking),
) -> Arc<Registry> {
    let mut registry = Registry::default();
    modules.register(&mut registry);
    fleet::register(&mut registry, planning, checks);
    events::register(&mut registry);
    crate::audit::register(&mut registry);
    crate::policies::register(&mut registry, policies);
    let reach = config.webhook_reach.clone();
    let key = config.secret_key.clone();
    webhooks::register(&mut registry, reach, config.webhooks_per_tenant, &events::TYPES, key.clone());
    sources::register(&mut registry, git, key, source_asking);
    Arc::new(registry)
}

/// The HTTP server of `config` over `core`, its `/metrics` reading the drift gauges
/// from the database.
fn server(config: &Config, core: &Core) -> Server {
    let exposition = {
        let (db, metrics) = (core.db.clone(), core.metrics.clone());
        Arc::new(move || {
            let db = db.get()?;
            let (drifted, converged) = drift::tenants(&db)?;
            Ok(metrics.render(drifted, converged, webhooks::pending(&db)?))
        })
    };
    let mut server = Server::new(core.dispatcher.clone(), core.metrics.clone(), exposition, core.wake.clone());
    server.limits = config.limits;
    server.body_limit = config.body_limit;
    server.memory = crate::calls::memory::RequestMemory::new(config.request_memory_total);
    server.console_dir.clone_from(&config.console_dir);
    let key = config.secret_key.clone();
    server.hooks = Some(Arc::new(sources::hook::Hooks::new(core.db.clone(), key, config.read_only)));
    server
}

/// Serves `app` on `listener` with the drift reconciler running beside it (unless the
/// deployment is read-only, which writes nothing), until `shutdown` resolves; then both
/// stop and open connections finish.
pub async fn serve(app: Arc<App>, listener: TcpListener, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let (stop, stopped) = watch::channel(false);
    let asking = app.core.take_asking().filter(|_| !app.config.read_only);
    let reconciler = asking.map(|asking| {
        tokio::spawn(app.core.reconciler.clone().run(asking, async move {
            let mut stopped = stopped;
            let _ = stopped.wait_for(|stop| *stop).await;
        }))
    });
    // The outbox is delivered by every replica that writes.
    let deliverer = (!app.config.read_only).then(|| {
        let (deliverer, woken) = (app.core.deliverer.clone(), app.core.wake.subscribe());
        let mut stopped = stop.subscribe();
        tokio::spawn(async move {
            deliverer
                .run(woken, async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                })
                .await;
        })
    });
    // Every replica that writes runs the sources' cycles it claims.
    let runner = app.core.take_source_asks().filter(|_| !app.config.read_only).map(|asks| {
        let (runner, mut stopped) = (app.core.sources.clone(), stop.subscribe());
        tokio::spawn(runner.run(asks, async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }))
    });
    let served = http::run(app.server.clone(), listener, shutdown).await;
    let _ = stop.send(true);
    if let Some(reconciler) = reconciler {
        let _ = reconciler.await;
    }
    if let Some(deliverer) = deliverer {
        let _ = deliverer.await;
    }
    if let Some(runner) = runner {
        let _ = runner.await;
    }
    served
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                let _ = interrupt.await;
                return;
            }
        };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
