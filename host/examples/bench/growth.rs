//! How apply and an unchanged re-plan grow with the estate: the large document (`bench`,
//! applied first by the run) and one ten times larger (`growth`), each applied to an
//! empty tenant and then planned again unchanged, over HTTP.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::server::Server;
use crate::support::{count, document, median, ms};

/// The re-plan of the applied large `document`, then the apply and re-plan of one ten
/// times larger.
pub async fn figures(server: &Server, document_10k: &Value) -> Result<Value> {
    let replanned = replan(server, &server.tokens.bench, document_10k).await?;
    let larger = document(10 * count(document_10k));
    let applied = crate::apply::large_as(server, &server.tokens.growth, &larger).await?;
    let replanned_larger = replan(server, &server.tokens.growth, &larger).await?;
    Ok(json!({
        "http_replan_ms": ms(replanned),
        "apply_10x_ms": ms(applied),
        "http_replan_10x_ms": ms(replanned_larger),
    }))
}

/// The median of three plans of the applied `document` as it is: every object unchanged.
async fn replan(server: &Server, token: &str, document: &Value) -> Result<Duration> {
    let body = json!({"document": document}).to_string();
    let mut samples = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let plan = server.post_as(token, "plan", body.clone()).await?;
        samples.push(started.elapsed());
        let plan: Value = serde_json::from_str(&plan)?;
        if plan["summary"]["unchanged"].as_u64() != Some(count(document) as u64) {
            bail!("the re-plan was not all unchanged: {}", plan["summary"]);
        }
    }
    Ok(median(samples))
}
