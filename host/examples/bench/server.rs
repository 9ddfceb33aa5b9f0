//! The server the HTTP figures run against: the real one, in this process, with the
//! benchmark's budgets and the example plugin, and a tenant with a token for each group
//! of figures that needs an estate of its own.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use fleet::calls::auth::{self, Caller, Grant};
use fleet::{App, Config};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::Args;
use crate::support::post_fleet;

pub struct Server {
    pub app: Arc<App>,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    pub http: reqwest::Client,
    pub tokens: Tokens,
    stop: oneshot::Sender<()>,
    serving: JoinHandle<Result<()>>,
    /// The SQLite file's, when `--db` names none.
    _dir: tempfile::TempDir,
}

/// A token of every permission for each tenant: `bench` holds the large estate,
/// `small` the demo estate, `plugins` an estate half of plugin objects, `history` one
/// with 10,000 earlier revisions, `proposals` the large estate applied as a proposal
/// (`reviewer` reviews it there), `webhooks` the large apply with ten webhooks, `growth`
/// the large estate ten times over, `sources` the large estate from a git source.
pub struct Tokens {
    pub bench: String,
    pub small: String,
    pub plugins: String,
    pub history: String,
    pub proposals: String,
    pub reviewer: String,
    pub webhooks: String,
    pub growth: String,
    pub sources: String,
}

/// The tenants' time of creation.
const NOW: &str = "2026-11-30T00:00:00Z";

impl Server {
    pub async fn start(args: &Args) -> Result<Server> {
        let dir = tempfile::tempdir()?;
        let db = args.db.as_ref().map_or_else(|| dir.path().join("bench.db"), std::path::PathBuf::from);
        let mut config = Config::new(db);
        config.budget.cpu = Duration::from_secs(60);
        config.budget.memory_bytes = 1 << 30;
        // A million objects' document is about 100 MB.
        config.body_limit = 256 << 20;
        // The webhook figures' receiver is on 127.0.0.1, over http.
        config.webhook_reach = fleet::webhooks::Reach { allow_http: true, allow: vec!["127.0.0.0/8".parse()?] };
        // The git sources' figures fetch from a repository on disk.
        config.git.allow_insecure = true;
        config.git.cache = dir.path().join("git");
        config.plugins = vec![std::path::Path::new(env!("FLEET_PLUGINS_DIR")).join("reservations.wasm")];
        // Off the runtime's threads: the PostgreSQL client runs a runtime of its own.
        let app = tokio::task::spawn_blocking(move || App::new(config)).await??;
        let tokens = tokio::task::block_in_place(|| -> Result<Tokens> {
            let db = app.core.db.get()?;
            let token = |tenant: &str| -> Result<String> {
                auth::create_tenant(&db, tenant, NOW)?;
                Ok(auth::create_token(&db, tenant, "alice", &["compute:*:* @ *".to_owned()], NOW, None)?)
            };
            Ok(Tokens {
                bench: token("bench")?,
                small: token("small")?,
                plugins: token("plugins")?,
                history: token("history")?,
                proposals: token("proposals")?,
                reviewer: auth::create_token(&db, "proposals", "bob", &["compute:*:* @ *".to_owned()], NOW, None)?,
                webhooks: token("webhooks")?,
                growth: token("growth")?,
                sources: token("sources")?,
            })
        })?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = tokio::spawn(fleet::app::serve(app.clone(), listener, async move {
            let _ = stopped.await;
        }));
        Ok(Server { app, base, http: reqwest::Client::new(), tokens, stop, serving, _dir: dir })
    }

    /// POSTs `body` to the fleet method `method` as the `bench` tenant; the answer's
    /// text, or an error when it is not a success. A timed request sends a body made
    /// before the clock starts, and ends when the whole answer has arrived.
    pub async fn post(&self, method: &str, body: String) -> Result<String> {
        self.post_as(&self.tokens.bench, method, body).await
    }

    /// As [`Server::post`], with `token`.
    pub async fn post_as(&self, token: &str, method: &str, body: String) -> Result<String> {
        post_fleet(&self.http, &self.base, token, method, body).await
    }

    /// POSTs `body` to `compute.<group>.<method>` (`method` as `group/method`) with
    /// `token`: for the methods outside the fleet group.
    pub async fn post_group(&self, token: &str, method: &str, body: String) -> Result<String> {
        crate::support::post_method(&self.http, &self.base, token, method, body).await
    }

    /// The caller of every permission in `tenant`, as the planner sees it.
    pub fn caller(&self, tenant: &str) -> Result<Caller> {
        let every = Grant::parse("compute:*:* @ *").map_err(anyhow::Error::msg)?;
        Ok(Caller {
            tenant: tenant.into(),
            principal: "alice".into(),
            grants: vec![every],
            token: None,
            git_source: None,
        })
    }

    pub async fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        self.serving.await?
    }
}
