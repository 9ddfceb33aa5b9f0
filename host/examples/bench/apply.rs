//! The large apply, through the real path; the same apply as an approved proposal
//! (issue 52); and history (issue 27): a page of a tenant's 10,000 earlier revisions,
//! and the same apply in a tenant that keeps them.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use fleet::{App, db};
use serde_json::{Value, json};

use crate::server::Server;
use crate::support::{count, median, ms};

/// Applies `document` to the `bench` tenant: how long it took (the `apply_ms` figure).
pub async fn large(server: &Server, document: &Value) -> Result<Duration> {
    large_as(server, &server.tokens.bench, document).await
}

/// Applies `document` as `token`'s tenant, checked to have made every object: how long
/// it took.
pub async fn large_as(server: &Server, token: &str, document: &Value) -> Result<Duration> {
    let objects = count(document);
    let body = json!({"document": document}).to_string();
    let started = Instant::now();
    let applied = server.post_as(token, "apply", body).await?;
    let apply = started.elapsed();
    let applied: Value = serde_json::from_str(&applied)?;
    if applied["applied"].as_u64() != Some(objects as u64) {
        bail!("the apply ran {} calls for {objects} objects", applied["applied"]);
    }
    Ok(apply)
}

/// The large document proposed in the `proposals` tenant and approved (untimed), then
/// applied as the proposal: the `proposal_apply_ms` figure.
pub async fn proposal(server: &Server, document: &Value) -> Result<Value> {
    let objects = count(document);
    let (author, reviewer) = (&server.tokens.proposals, &server.tokens.reviewer);
    let created = server.post_group(author, "proposals/create", json!({"document": document}).to_string()).await?;
    let number = serde_json::from_str::<Value>(&created)?["proposal"]["number"].clone();
    let review = json!({"number": number, "verdict": "approve"}).to_string();
    server.post_group(reviewer, "proposals/review", review).await?;
    let body = json!({"proposal": number}).to_string();
    let started = Instant::now();
    let applied = server.post_as(author, "apply", body).await?;
    let apply = started.elapsed();
    let applied: Value = serde_json::from_str(&applied)?;
    if applied["applied"].as_u64() != Some(objects as u64) {
        bail!("the proposal's apply ran {} calls for {objects} objects", applied["applied"]);
    }
    Ok(json!({"proposal_apply_ms": ms(apply)}))
}

/// A page of 100 revisions of 10,000 (the median of `runs`), and the apply of `document` in a tenant
/// that keeps them: in about the time of the first apply.
pub async fn history(server: &Server, document: &Value, runs: usize) -> Result<Value> {
    let token = &server.tokens.history;
    tokio::task::block_in_place(|| keep_revisions(&server.app, "history", REVISIONS))?;
    let mut pages = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        let page = server.post_as(token, "history", json!({"limit": 100}).to_string()).await?;
        pages.push(started.elapsed());
        let page: Value = serde_json::from_str(&page)?;
        if page["revisions"].as_array().map(Vec::len) != Some(100) {
            bail!("history did not answer a page of 100 revisions");
        }
    }
    let started = Instant::now();
    server.post_as(token, "apply", json!({"document": document}).to_string()).await?;
    Ok(json!({
        "history_page_ms_p50": ms(median(pages)),
        "apply_after_revisions_ms": ms(started.elapsed()),
    }))
}

/// The earlier revisions of the history figures.
const REVISIONS: i64 = 10_000;

/// Gives `tenant` `count` revisions, as that many applies of a small document would
/// have kept them, written straight to the table (applying them would take minutes).
fn keep_revisions(app: &App, tenant: &str, count: i64) -> Result<()> {
    let db = app.core.db.get()?;
    let document = json!({"sites": {"eu-west": {"region": "eu-west-1"}}}).to_string();
    let hash = format!("sha256:{}", "0".repeat(64));
    let numbers: Vec<i64> = (1..=count).collect();
    let mut values = Vec::new();
    for number in &numbers {
        values.extend([
            db::Param::Int(*number),
            db::Param::Text(&document),
            db::Param::Bool(false),
            db::Param::Text(&hash),
            db::Param::Text("alice"),
            db::Param::Text("2026-11-30T00:00:00Z"),
            db::Param::Int(1),
            db::Param::Text("[]"),
        ]);
    }
    let columns =
        ["tenant", "revision", "document", "prune", "plan_hash", "applied_by", "applied_at", "calls", "overrides"];
    db::transaction(&db, db::Tx::Write(tenant), |db| {
        Ok(db.insert_rows("fleet_revisions", &columns, &[db::Param::Text(tenant)], &values, 100)?)
    })?;
    Ok(())
}
