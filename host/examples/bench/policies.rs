//! The large plan with the five example policies of `policies/` in force (SPEC §14), the
//! `bench` tenant's own for the while: the planner builds their input and runs them.

use std::time::Duration;

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::Args;
use crate::planner::http_plan;
use crate::server::Server;
use crate::support::{median, ms};

const EXAMPLES: [(&str, &str); 5] = [
    ("gpus-per-pool", "mandatory"),
    ("prune-limit", "mandatory"),
    ("protected-pools", "enforced"),
    ("offers-within-capacity", "mandatory"),
    ("no-prune-by-ci", "mandatory"),
];

/// The median of `--runs` plans of `changed` over HTTP with the policies in force.
pub async fn figures(server: &Server, args: &Args, changed: &Value) -> Result<Value> {
    put_examples(server).await?;
    let request = json!({"document": changed}).to_string();
    let mut samples = Vec::<Duration>::new();
    for _ in 0..args.runs {
        samples.push(http_plan(server, &request, |plan| plan["policy"]["verdicts"].is_array()).await?);
    }
    for (name, _) in EXAMPLES {
        policy_call(server, "delete", json!({"name": name})).await?;
    }
    Ok(json!({"http_plan_policies_ms_p50": ms(median(samples))}))
}

/// The plan of `changed` with the policies in force, over and over for `--seconds`.
pub async fn repeat(server: &Server, args: &Args, changed: &Value) -> Result<()> {
    put_examples(server).await?;
    let request = json!({"document": changed}).to_string();
    let (started, mut times) = (std::time::Instant::now(), 0_u32);
    while started.elapsed().as_secs() < args.seconds {
        http_plan(server, &request, |plan| plan["policy"]["verdicts"].is_array()).await?;
        times += 1;
    }
    eprintln!("{times} times in {:.1?}: {:.3} ms each", started.elapsed(), ms(started.elapsed() / times.max(1)));
    Ok(())
}

/// The five examples in force as the `bench` tenant's policies.
async fn put_examples(server: &Server) -> Result<()> {
    let directory = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    for (name, level) in EXAMPLES {
        let source = std::fs::read_to_string(directory.join(format!("{name}.rego")))?;
        policy_call(server, "put", json!({"name": name, "level": level, "source": source})).await?;
    }
    Ok(())
}

async fn policy_call(server: &Server, method: &str, body: Value) -> Result<()> {
    let response = server
        .http
        .post(format!("{}/api/compute/policies/{method}", server.base))
        .bearer_auth(&server.tokens.bench)
        .json(&body)
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("policies/{method} failed: {}", response.text().await?);
    }
    Ok(())
}
