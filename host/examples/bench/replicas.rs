//! The replica figures of issue 26, against a real PostgreSQL database.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use fleet::calls::auth;
use fleet::{App, Config};

/// A server of its own on the database at `url`: its base URL, a stop for it, and
/// a token of every permission for each of `tenants` (made here).
async fn server(url: String, tenants: &[&str]) -> Result<(String, tokio::sync::oneshot::Sender<()>, Vec<String>)> {
    server_with(url, tenants, Duration::from_secs(15 * 60)).await
}

async fn server_with(
    url: String,
    tenants: &[&str],
    drift_interval: Duration,
) -> Result<(String, tokio::sync::oneshot::Sender<()>, Vec<String>)> {
    let mut config = Config::new(url.into());
    config.drift_interval = drift_interval;
    config.budget.cpu = Duration::from_secs(60);
    config.budget.memory_bytes = 1 << 30;
    // A million objects' document is about 100 MB.
    config.body_limit = 256 << 20;
    let mut app = tokio::task::spawn_blocking(move || App::new(config)).await??;
    // Replicas in one process would share one name (`host:pid`): each its own.
    static REPLICAS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    if let Some(app) = std::sync::Arc::get_mut(&mut app) {
        let name = format!("bench-{}", REPLICAS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let reconciler = fleet::fleet::drift::Reconciler::new(app.core.planning.clone(), app.core.dispatcher.clone());
        app.core.reconciler = std::sync::Arc::new(reconciler.named(&name));
    }
    let tenants: Vec<String> = tenants.iter().map(|tenant| (*tenant).to_owned()).collect();
    let tokens = {
        let app = app.clone();
        tokio::task::spawn_blocking(move || -> Result<Vec<String>> {
            let db = app.core.db.get()?;
            let now = "2026-11-30T00:00:00Z";
            let all = ["compute:*:* @ *".to_owned()];
            tenants
                .iter()
                .map(|tenant| {
                    auth::create_tenant(&db, tenant, now)?;
                    Ok(auth::create_token(&db, tenant, "alice", &all, now, None)?)
                })
                .collect()
        })
        .await??
    };
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(fleet::app::serve(app, listener, async move {
        let _ = stopped.await;
    }));
    Ok((base, stop, tokens))
}

async fn post(http: &reqwest::Client, base: &str, token: &str, path: &str, body: String) -> Result<Value> {
    let response = http.post(format!("{base}/api/compute/{path}")).bearer_auth(token).body(body).send().await?;
    let (status, text) = (response.status(), response.text().await?);
    if !status.is_success() {
        bail!("{path} answered {status}: {}", &text[..text.len().min(300)]);
    }
    Ok(serde_json::from_str(&text)?)
}

/// Forwards loopback connections to `upstream`, holding every chunk `delay` in each
/// direction (a round trip gains twice `delay`), without limiting throughput.
async fn delaying_proxy(upstream: String, delay: Duration) -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(&upstream).await else { return };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pipe(client_read, server_write, delay));
                tokio::spawn(pipe(server_read, client_write, delay));
            });
        }
    });
    Ok(port)
}

async fn pipe(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf, delay: Duration) {
    let (chunks, mut delayed) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    tokio::spawn(async move {
        while let Some((due, chunk)) = delayed.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let mut buffer = vec![0u8; 64 << 10];
    while let Ok(read) = from.read(&mut buffer).await {
        if read == 0 || chunks.send((tokio::time::Instant::now() + delay, buffer[..read].to_vec())).is_err() {
            return;
        }
    }
}

/// Applies of small documents by `tenants.len()` tenants at once for `seconds`,
/// each tenant through the replica `bases[n % replicas]`: applies per second.
async fn tenants_apply_rps(bases: &[String], tokens: &[String], seconds: u64) -> Result<f64> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut workers = Vec::new();
    for (index, token) in tokens.iter().enumerate() {
        let (http, base, token) = (http.clone(), bases[index % bases.len()].clone(), token.clone());
        workers.push(tokio::spawn(async move {
            let mut done = 0u64;
            while Instant::now() < deadline {
                let gpus = done % 7;
                let document = json!({"sites": {"eu": {"region": "eu-west-1"}},
                    "providerAccounts": {"aws": {"provider": "aws"}},
                    "pools": {"p": {"site": "eu", "account": "aws", "class": "gpu", "owner": "o", "gpus": gpus}}});
                post(&http, &base, &token, "fleet/apply", json!({"document": document}).to_string()).await?;
                done += 1;
            }
            Ok::<u64, anyhow::Error>(done)
        }));
    }
    let started = Instant::now();
    let mut total = 0;
    for worker in workers {
        total += worker.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// A row of the drift schedule: tenant, due time, last holder.
type Scheduled = (String, i64, Option<String>);

/// `tenants` tenants with a small applied document each, all due at once, checked by
/// three replicas every `interval`: the checks each replica ran in the third
/// interval (`fleet_drift_checks_total`), and how many tenants were overdue at the
/// end: all of them, and those overdue by more than a poll (more than the replicas
/// could check in time).
pub async fn drift_run(url: &str, tenants: usize, interval: Duration) -> Result<Value> {
    let http = reqwest::Client::new();
    let names: Vec<String> = (0..tenants).map(|index| format!("drift-{index}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    // Made and applied with no reconciler due before the run starts.
    let (base, stop, tokens) = server_with(url.to_owned(), &refs, Duration::from_secs(24 * 3600)).await?;
    let document = json!({"document": {"sites": {"eu": {"region": "eu-west-1"}}}}).to_string();
    let started = Instant::now();
    for batch in tokens.chunks(16) {
        let applies: Vec<_> = batch
            .iter()
            .map(|token| {
                let (http, base, token, document) = (http.clone(), base.clone(), token.clone(), document.clone());
                tokio::spawn(async move { post(&http, &base, &token, "fleet/apply", document).await })
            })
            .collect();
        for applied in applies {
            applied.await??;
        }
    }
    let setup = started.elapsed();
    eprintln!("drift run: {tenants} tenants applied in {:.1} s", setup.as_secs_f64());
    let _ = stop.send(());
    // Every tenant of the run due now, then three replicas with the interval. (The PostgreSQL
    // client blocks: off the runtime's own work.)
    let url_owned = url.to_owned();
    let pool = tokio::task::spawn_blocking(move || fleet::db::open(std::path::Path::new(&url_owned))).await??;
    let sql =
        |work: &dyn Fn(&fleet::db::Conn) -> Result<Vec<Scheduled>>| tokio::task::block_in_place(|| work(&pool.get()?));
    let now = fleet::fleet::drift::now_ms();
    sql(&|db| {
        // Only the run's own tenants: the other figures' tenants (three of them with
        // 10k objects) stay due when their servers' interval says.
        db.execute(
            "UPDATE drift_schedule SET due_at = ?1, claimed_until = NULL WHERE tenant LIKE 'drift-%'",
            &[fleet::db::Param::Int(now)],
        )?;
        Ok(Vec::new())
    })?;
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(server_with(url.to_owned(), &[], interval).await?);
    }
    // Each replica's count of checks (`fleet_drift_checks_total`) over the third
    // interval, when the first round is done.
    let checks = |base: String| {
        let http = http.clone();
        async move {
            let text = http.get(format!("{base}/metrics")).send().await?.text().await?;
            let line = text.lines().find_map(|line| line.strip_prefix("fleet_drift_checks_total "));
            Ok::<u64, anyhow::Error>(line.and_then(|count| count.trim().parse().ok()).unwrap_or(0))
        }
    };
    tokio::time::sleep(interval * 2).await;
    let mut before = Vec::new();
    for (base, _, _) in &replicas {
        before.push(checks(base.clone()).await?);
    }
    tokio::time::sleep(interval).await;
    let mut per_replica = Vec::new();
    for ((base, _, _), before) in replicas.iter().zip(before) {
        per_replica.push(checks(base.clone()).await? - before);
    }
    let overdue: Vec<Scheduled> = sql(&|db| {
        let now = fleet::fleet::drift::now_ms();
        Ok(db.query(
            "SELECT tenant, due_at, holder FROM drift_schedule WHERE due_at < ?1 AND tenant LIKE 'drift-%'",
            &[fleet::db::Param::Int(now)],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )?)
    })?;
    for (_, stop, _) in replicas {
        let _ = stop.send(());
    }
    // A replica polls four times an interval, so a tenant waits up to a quarter of
    // one after it is due: later than that, the replicas did not keep up.
    let now = fleet::fleet::drift::now_ms();
    let poll = i64::try_from((interval / 4).as_millis()).unwrap_or(i64::MAX);
    let late = overdue.iter().filter(|(_, due_at, _)| *due_at < now - poll).count();
    Ok(json!({
        "tenants": tenants,
        "interval_s": interval.as_secs(),
        "setup_s": setup.as_secs_f64(),
        "checks_per_replica_in_an_interval": per_replica,
        "checks_in_an_interval": per_replica.iter().sum::<u64>(),
        "overdue_at_the_end": overdue.len(),
        "overdue_past_a_poll_at_the_end": late,
    }))
}

/// `pg_apply_ms`, `pg_apply_latency1ms_ms`, `bystander_create_p99_ms`,
/// `tenants_apply_rps` (1 and 3 replicas) and `drift_run`.
pub async fn figures(url: &str, document: &Value, args: &crate::Args) -> Result<Value> {
    let http = reqwest::Client::new();
    let body = json!({"document": document}).to_string();
    let (base, stop, tokens) = server(url.to_owned(), &["pg-big", "pg-later", "pg-small"]).await?;

    let started = Instant::now();
    post(&http, &base, &tokens[0], "fleet/apply", body.clone()).await?;
    let pg_apply = started.elapsed();
    eprintln!("pg_apply_ms {:.0}", pg_apply.as_secs_f64() * 1e3);

    // Another tenant's creates, one after another, while `pg-later` applies the
    // large document.
    let applying = {
        let (http, base, token, body) = (http.clone(), base.clone(), tokens[1].clone(), body.clone());
        tokio::spawn(async move { post(&http, &base, &token, "fleet/apply", body).await })
    };
    let mut latencies = Vec::new();
    let site = json!({"region": "eu-west-1"}).to_string();
    while !applying.is_finished() {
        let started = Instant::now();
        post(&http, &base, &tokens[2], "sites/create", site.clone()).await?;
        latencies.push(started.elapsed());
    }
    applying.await??;
    latencies.sort();
    let p99 = latencies.get(latencies.len() * 99 / 100).copied().unwrap_or_default();
    eprintln!("bystander_create_p99_ms {:.1} over {} creates", p99.as_secs_f64() * 1e3, latencies.len());
    let _ = stop.send(());

    // The same apply with 1 ms more on every round trip to the database.
    let config: postgres::Config = url.parse().context("a PostgreSQL URL")?;
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(host)) => host.clone(),
        _ => bail!("the --postgres URL must name a TCP host"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let proxy = delaying_proxy(format!("{host}:{port}"), Duration::from_micros(500)).await?;
    let far = url.replacen(&format!("{host}:{port}"), &format!("127.0.0.1:{proxy}"), 1);
    if far == url {
        bail!("the --postgres URL must give its host and port (host:port)");
    }
    let (base, stop, tokens) = server(far, &["pg-far"]).await?;
    let started = Instant::now();
    post(&http, &base, &tokens[0], "fleet/apply", body).await?;
    let far_apply = started.elapsed();
    eprintln!("pg_apply_latency1ms_ms {:.0}", far_apply.as_secs_f64() * 1e3);
    let _ = stop.send(());

    // 24 tenants' small applies through one replica, then through three.
    let mut rps = Vec::new();
    for replicas in [1usize, 3] {
        let names: Vec<String> = (0..24).map(|index| format!("rps{replicas}-{index}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut servers = vec![server(url.to_owned(), &refs).await?];
        for _ in 1..replicas {
            servers.push(server(url.to_owned(), &[]).await?);
        }
        let bases: Vec<String> = servers.iter().map(|(base, _, _)| base.clone()).collect();
        rps.push(tenants_apply_rps(&bases, &servers[0].2, args.seconds.max(5)).await?);
        eprintln!("tenants_apply_rps with {replicas} replica(s): {:.0}", rps[rps.len() - 1]);
        for (_, stop, _) in servers {
            let _ = stop.send(());
        }
    }
    let drift = match args.drift_tenants {
        0 => Value::Null,
        tenants => drift_run(url, tenants, Duration::from_secs(10)).await?,
    };

    let ms = |duration: Duration| duration.as_secs_f64() * 1e3;
    Ok(json!({
        "pg_apply_ms": ms(pg_apply),
        "pg_apply_latency1ms_ms": ms(far_apply),
        "bystander_create_p99_ms": ms(p99),
        "bystander_creates": latencies.len(),
        "tenants_apply_rps": {"replicas_1": rps[0], "replicas_3": rps[1]},
        "drift_run": drift,
    }))
}
