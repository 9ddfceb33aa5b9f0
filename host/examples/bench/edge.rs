//! The large and the small plan through the edge component (SPEC §11), served in this
//! process by wasmtime-wasi-http in front of the server.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::Args;
use crate::server::Server;
use crate::small::small_request;
use crate::support::{median, ms};

#[path = "../../../tests/e2e/support/edge_host.rs"]
mod edge_host;

/// The medians of `--runs` plans of `changed` (as the `bench` tenant) and of 50 small
/// plans (as the `small` tenant) at the edge.
pub async fn figures(server: &Server, args: &Args, changed: &Value) -> Result<Value> {
    let origin = server.base.clone();
    let edge = tokio::task::spawn_blocking(move || {
        edge_host::EdgeServer::start(std::path::Path::new(edge_host::EDGE_WASM), &origin)
    })
    .await??;
    let url = format!("{}/api/compute/fleet/plan", edge.base);
    let large = json!({"document": changed}).to_string();
    let figures = async {
        Ok::<Value, anyhow::Error>(json!({
            "edge_plan_ms_p50": ms(plans(server, &url, &server.tokens.bench, &large, args.runs).await?),
            "edge_small_plan_ms_p50": ms(plans(server, &url, &server.tokens.small, &small_request(), 50).await?),
        }))
    }
    .await;
    tokio::task::spawn_blocking(move || drop(edge)).await?;
    figures
}

/// The median of `runs` plans of `body` as `token` through the edge at `url`.
async fn plans(server: &Server, url: &str, token: &str, body: &str, runs: usize) -> Result<Duration> {
    let mut samples = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        let response = server.http.post(url).bearer_auth(token).body(body.to_owned()).send().await?;
        let status = response.status();
        let text = response.text().await?;
        if !status.is_success() {
            bail!("the edge's plan failed: {text}");
        }
        samples.push(started.elapsed());
    }
    Ok(median(samples))
}
