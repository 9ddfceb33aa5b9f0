//! The server's own peak memory: the server alone in a process of its own (this program
//! with `--serve-alone`), through the large apply and plans, without the benchmark's
//! client, native planner and copies of the estate.

use anyhow::{Context, Result};
use fleet::calls::auth;
use fleet::{App, Config};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::support::{peak_rss_mib_of, post_fleet};

/// The server of `server_rss_mib`, in a process of its own: `fleet serve`'s defaults
/// (but a body limit for 200k-object documents) on a new SQLite file, one tenant with a
/// token, until stdin closes.
pub async fn serve_alone(db: std::path::PathBuf) -> Result<()> {
    let config = Config { body_limit: 256 << 20, ..Config::new(db) };
    let app = tokio::task::spawn_blocking(move || App::new(config)).await??;
    let token = tokio::task::block_in_place(|| -> Result<String> {
        let db = app.core.db.get()?;
        let now = "2026-11-30T00:00:00Z";
        auth::create_tenant(&db, "alone", now)?;
        Ok(auth::create_token(&db, "alone", "alice", &["compute:*:* @ *".to_owned()], now, None)?)
    })?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    println!("http://{} {token}", listener.local_addr()?);
    let stdin_closed = tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin(), &mut std::io::sink()));
    fleet::app::serve(app, listener, async move {
        let _ = stdin_closed.await;
    })
    .await
}

/// A server alone, in a process of its own: its base URL, token and process.
struct Alone {
    child: std::process::Child,
    base: String,
    token: String,
    _dir: tempfile::TempDir,
}

impl Alone {
    fn start() -> Result<Alone> {
        use std::io::BufRead;
        let dir = tempfile::tempdir()?;
        let mut child = std::process::Command::new(std::env::current_exe()?)
            .arg("--serve-alone")
            .arg(dir.path().join("alone.db"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().context("the server's stdout")?;
        let line = tokio::task::block_in_place(|| std::io::BufReader::new(stdout).lines().next())
            .context("the server process said nothing")??;
        let (base, token) = line.split_once(' ').context("the server process said no token")?;
        Ok(Alone { base: base.to_owned(), token: token.to_owned(), child, _dir: dir })
    }

    /// Its peak RSS so far, in MiB.
    fn peak_rss_mib(&self) -> f64 {
        peak_rss_mib_of(&self.child.id().to_string())
    }

    fn stop(mut self) -> Result<()> {
        drop(self.child.stdin.take());
        tokio::task::block_in_place(|| self.child.wait())?;
        Ok(())
    }
}

/// `server_rss_mib_12_large_plans` (issue 54): the peak RSS of the server alone, with
/// the default `--sandbox-memory-total-mib`, through twelve concurrent plans of a
/// 200k-object document on an empty tenant.
pub async fn large_plans_rss_mib() -> Result<f64> {
    let server = Alone::start()?;
    let body = json!({"document": crate::support::document(200_000)}).to_string();
    let http = reqwest::Client::new();
    let mut plans = tokio::task::JoinSet::new();
    for _ in 0..12 {
        let (http, base, token, body) = (http.clone(), server.base.clone(), server.token.clone(), body.clone());
        plans.spawn(async move { post_fleet(&http, &base, &token, "plan", body).await });
    }
    let mut answered = Ok(());
    while let Some(plan) = plans.join_next().await {
        answered = answered.and(plan?.map(drop));
    }
    let peak = server.peak_rss_mib();
    server.stop()?;
    answered.map(|()| peak)
}

/// The peak RSS of the server alone (`--serve-alone`, this program in a process of its
/// own) through an apply of `document` and `runs` plans of `changed`: what the server
/// needs, without the benchmark's client, native planner and copies of the estate.
pub async fn server_rss_mib(document: &Value, changed: &Value, runs: usize) -> Result<f64> {
    let server = Alone::start()?;
    let http = reqwest::Client::new();
    let post = |method: &'static str, document: &Value| {
        post_fleet(&http, &server.base, &server.token, method, json!({"document": document}).to_string())
    };
    let result = async {
        post("apply", document).await?;
        for _ in 0..runs {
            post("plan", changed).await?;
        }
        Ok::<f64, anyhow::Error>(server.peak_rss_mib())
    }
    .await;
    server.stop()?;
    result
}
