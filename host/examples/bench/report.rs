//! The report as a table for people: each figure of the JSON report by its name, with
//! its target where it has one.

use serde_json::Value;

/// Prints `report`, measured with medians of `runs`.
pub fn table(report: &Value, runs: usize) {
    let figure = |name: &str| report[name].as_f64().unwrap_or_default();
    let row = |name: &str, value: String, target: &str| println!("{name:<28} {value:>14}   {target}");
    let ms = |name: &str, digits: usize| format!("{:.digits$} ms", figure(name));
    let times = |name: &str| format!("{:.2}x", figure(name));
    let or_failed = |name: &str| report[name].as_f64().map_or_else(|| "failed".to_owned(), |ms| format!("{ms:.0} ms"));
    println!("fleet benchmark: {} objects, medians of {runs} runs", report["objects"]);
    row("native plan", ms("native_plan_ms", 1), "");
    row("wasm plan", ms("wasm_plan_ms", 1), "");
    row("wasm / native", times("wasm_over_native"), "target <= 1.3x");
    row("instantiate + empty call", format!("{:.1} us", figure("instantiate_us_p50")), "target <= 10 us");
    row("plan over HTTP (p50)", ms("http_plan_ms_p50", 1), "target <= 40 ms");
    row("HTTP / native", times("http_over_native"), "target <= 1.5x");
    row("plan, five policies (p50)", ms("http_plan_policies_ms_p50", 1), "target <= 1.5x plan over HTTP");
    row("plan, half plugin objects", ms("http_plan_plugins_ms_p50", 1), "the same size, one pool in 100 changed");
    row("  every plugin object changed", ms("http_plan_plugins_checked_ms_p50", 1), "all of them checked");
    row("plugin check (one object)", format!("{:.1} us", figure("plugin_check_us_p50")), "a fresh instance and a call");
    row("100k-object plan over HTTP", or_failed("http_plan_100k_ms"), "target <= 1000 ms");
    row("1M-object plan over HTTP", or_failed("http_plan_1m_ms"), "target <= 12x the 100k plan");
    row("largest estate planned", format!("{} objects", report["max_objects_planned"]), "target >= 250000");
    row("planner memory per object", format!("{:.0} B", figure("guest_bytes_per_object")), "100k creates");
    row("apply over HTTP", ms("apply_ms", 1), "target <= 400 ms");
    row("history page (p50)", ms("history_page_ms_p50", 2), "100 of 10,000 revisions");
    row("apply after 10k revisions", ms("apply_after_revisions_ms", 1), "target: the first apply's time");
    row("unchanged re-plan over HTTP", ms("http_replan_ms", 1), "the applied large document");
    row("apply, 10x the objects", ms("apply_10x_ms", 0), "target <= 11x the apply");
    row("unchanged re-plan, 10x", ms("http_replan_10x_ms", 0), "target <= 11x the re-plan");
    row("small plan over HTTP (p50)", ms("http_small_plan_ms_p50", 2), "");
    row("small plans over HTTP", format!("{:.0} rps", figure("http_small_plan_rps")), "");
    row("bare hyper handler", format!("{:.0} rps", figure("http_hello_rps")), "");
    let share = |name: &str| format!("{:.0}%", 100.0 * figure(name));
    let per_plan = |name: &str, note: &str| format!("{:.0} us a plan, {note}", figure(name));
    row("small / bare", share("small_over_hello"), "target >= 25%");
    row(
        "  bare + native plan",
        share("small_native_handler_over_hello"),
        &per_plan("small_native_plan_us", "no auth, database or pool hop"),
    );
    row(
        "  bare + sandboxed plan",
        share("small_sandbox_handler_over_hello"),
        &per_plan("small_wasm_plan_us", "the same"),
    );
    row("plan at the edge (p50)", ms("edge_plan_ms_p50", 1), "the origin's: plan over HTTP");
    row("small plan at the edge (p50)", ms("edge_small_plan_ms_p50", 2), "the origin's: small plan");
    let mib = |name: &str| format!("{:.0} MiB", figure(name));
    row("peak RSS", mib("rss_mib"), "the whole benchmark, before the large estates");
    row("peak RSS, large estates", mib("rss_large_mib"), "with the two figures above");
    row("peak RSS, the server alone", mib("server_rss_mib"), "target <= 200 MiB; the 10k apply and plans");
    row(
        "peak RSS, 12 concurrent 200k plans",
        mib("server_rss_mib_12_large_plans"),
        "the server alone, default --sandbox-memory-total-mib",
    );
    if report.get("pg_apply_ms").is_some() {
        row("apply on PostgreSQL", ms("pg_apply_ms", 0), "");
        row("  / apply on SQLite", times("pg_apply_over_sqlite"), "target <= 2x");
        row("  with 1 ms round trips", ms("pg_apply_latency1ms_ms", 0), "target <= 3000 ms");
        row("bystander create (p99)", ms("bystander_create_p99_ms", 1), "another tenant's, during a large apply");
    }
}
