//! Module plugins (SPEC §10): an estate of as many objects as the large one, half of
//! them reservations (the example plugin's kind), applied, then planned over HTTP with
//! one pool in a hundred changed, and again with every reservation changed too, so that
//! the plan checks all of them (one batch); and one plugin check by itself: a fresh
//! instance and a call.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::{Value, json};

use crate::Args;
use crate::server::Server;
use crate::support::{count, median, ms, time, with_changed_pools, with_reservations};

pub async fn figures(server: &Server, args: &Args) -> Result<Value> {
    let built_in = fleet::demo::large_document(args.objects.div_ceil(2).saturating_sub(4 + 50) / 3);
    let reservations = args.objects.saturating_sub(count(&built_in));
    let with_plugin = with_reservations(&built_in, reservations, "");
    let objects = count(&with_plugin);
    let applied = server.post_as(&server.tokens.plugins, "apply", json!({"document": with_plugin}).to_string()).await?;
    let applied: Value = serde_json::from_str(&applied)?;
    if applied["applied"].as_u64() != Some(objects as u64) {
        bail!("the apply ran {} calls for {objects} objects", applied["applied"]);
    }
    let changed = with_changed_pools(&built_in);
    let changed_pools = built_in["pools"].as_object().map_or(0, |pools| pools.len().div_ceil(100));
    let plan = |note: &'static str, updates: usize| {
        let document = with_reservations(&changed, reservations, note);
        plans(server, args.runs, json!({"document": document}).to_string(), updates)
    };
    Ok(json!({
        "http_plan_plugins_ms_p50": ms(plan("", changed_pools).await?),
        "http_plan_plugins_checked_ms_p50": ms(plan("moved", changed_pools + reservations).await?),
        "plugin_objects_planned": reservations,
        "plugin_check_us_p50": check(server)?.as_secs_f64() * 1e6,
    }))
}

/// The median of `runs` plans of `request` as the `plugins` tenant, each of which must
/// update `updates` objects.
async fn plans(server: &Server, runs: usize, request: String, updates: usize) -> Result<Duration> {
    let mut samples = Vec::new();
    for _ in 0..runs {
        let body = request.clone();
        let started = Instant::now();
        let plan = server.post_as(&server.tokens.plugins, "plan", body).await?;
        samples.push(started.elapsed());
        let plan: Value = serde_json::from_str(&plan)?;
        if plan["summary"]["update"].as_u64() != Some(updates as u64) {
            bail!("the plan with plugin objects updates {} objects, not {updates}", plan["summary"]["update"]);
        }
    }
    Ok(median(samples))
}

/// The median time of the example plugin's check of one reservation.
fn check(server: &Server) -> Result<Duration> {
    let plugins = &server.app.core.planning.plugins;
    let plugin = plugins.by_kind("reservation").ok_or_else(|| anyhow::anyhow!("the plugin is not loaded"))?;
    let subject = fleet_guest::plugins::Subject {
        object: r#"{"endsAt":"2026-12-08T00:00:00Z","gpus":1,"id":"rsv_aaaaaaaaaaaaaaaaaaaaaaaaaa","note":"","owner":"ml","pool":"pool_aaaaaaaaaaaaaaaaaaaaaaaaaa","startsAt":"2026-12-01T00:00:00Z","vcpus":8}"#.into(),
        previous: None,
        references: vec![("pool".into(), r#"{"id":"pool_aaaaaaaaaaaaaaaaaaaaaaaaaa","vcpus":64,"gpus":8}"#.into())],
    };
    plugin.check([subject.clone()])?;
    Ok(time(2001, || plugin.check([subject.clone()])))
}
