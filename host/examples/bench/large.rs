//! The large estates, all to be created, over HTTP (this server's budgets are the
//! benchmark's, larger than the defaults): 100k objects three times (or for
//! `--seconds`), then a million once. A plan that fails (a limit) is reported as null,
//! with its error.

use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{Value, json};

use crate::Args;
use crate::server::Server;
use crate::support::{creates, median, ms, peak_rss_mib};

/// The two plans' figures, and the peak memory of this process after the first.
pub async fn figures(server: &Server, args: &Args) -> Value {
    let (hundred_k, hundred_k_error) = split(plan_creates(server, args, 100_000, 3).await);
    let rss_large = peak_rss_mib();
    let (million, million_error) = split(plan_creates(server, args, 1_000_000, 1).await);
    json!({
        "http_plan_100k_ms": hundred_k,
        "http_plan_100k_error": hundred_k_error,
        "rss_large_mib": rss_large,
        "http_plan_1m_ms": million,
        "http_plan_1m_error": million_error,
    })
}

fn split(result: Result<f64>) -> (Option<f64>, Option<String>) {
    match result {
        Ok(median) => (Some(median), None),
        Err(error) => (None, Some(error.to_string())),
    }
}

/// The median time in milliseconds of up to `runs` plans of `objects` creates, as the
/// `bench` tenant, for `--seconds` at most after the first; an error when one fails.
pub async fn plan_creates(server: &Server, args: &Args, objects: usize, runs: usize) -> Result<f64> {
    // About 100 bytes an object.
    let body = json!({"document": creates(objects)}).to_string();
    let mut samples = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    for run in 0..runs {
        if run > 0 && Instant::now() > deadline {
            break;
        }
        let body = body.clone();
        let started = Instant::now();
        server.post("plan", body).await?;
        samples.push(started.elapsed());
    }
    Ok(ms(median(samples)))
}
