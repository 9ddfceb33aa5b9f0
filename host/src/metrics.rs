//! `GET /metrics` (SPEC §13): Prometheus text exposition of what the server does. Labels
//! name methods, status codes, budgets and event types; never a tenant or a principal.

use std::time::Duration;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Every metric the server exports, registered once per process.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    durations: HistogramVec,
    pub sandbox_instances: IntCounter,
    sandbox_exhausted: IntCounterVec,
    pub sandbox_traps: IntCounter,
    pub apply_calls: IntCounter,
    /// Drift checks this server ran (of the tenants it claimed).
    pub drift_checks: IntCounter,
    drift_tenants: IntGaugeVec,
    events_published: IntCounterVec,
    cache_hits: IntCounterVec,
    cache_misses: IntCounterVec,
    cache_bytes: IntGaugeVec,
    webhook_deliveries: IntCounterVec,
    webhook_pending: prometheus::IntGauge,
    /// Planner calls waiting for a core or for sandbox memory.
    pub sandbox_waiting: prometheus::IntGauge,
    /// The memory the running planner calls hold, at their caps.
    pub sandbox_memory_held: prometheus::IntGauge,
}

/// The caches the server keeps (docs/decisions/0010), by their label.
pub const CACHES: [&str; 2] = ["state", "tokens"];

/// What a webhook delivery attempt came to.
pub const WEBHOOK_OUTCOMES: [&str; 3] = ["delivered", "retried", "failed"];

/// The budget a sandboxed call ran out of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    Cpu,
    Memory,
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| {
            let counter = IntCounter::new(name, help).expect("a valid metric name");
            registry.register(Box::new(counter.clone())).expect("registered once");
            counter
        };
        let counters = |name: &str, help: &str, labels: &[&str]| {
            let counters = IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric name");
            registry.register(Box::new(counters.clone())).expect("registered once");
            counters
        };
        let requests = counters(
            "fleet_http_requests_total",
            "HTTP requests by registry method and status code",
            &["method", "code"],
        );
        let durations = HistogramVec::new(
            HistogramOpts::new("fleet_http_request_duration_seconds", "HTTP request durations by registry method")
                .buckets(vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
            &["method"],
        )
        .expect("a valid metric name");
        registry.register(Box::new(durations.clone())).expect("registered once");
        let drift_tenants = IntGaugeVec::new(
            Opts::new("fleet_drift_tenants", "Tenants by the answer of their last drift check"),
            &["state"],
        )
        .expect("a valid metric name");
        registry.register(Box::new(drift_tenants.clone())).expect("registered once");
        let cache_bytes = IntGaugeVec::new(Opts::new("fleet_cache_bytes", "Bytes of values a cache holds"), &["cache"])
            .expect("a valid metric name");
        registry.register(Box::new(cache_bytes.clone())).expect("registered once");
        let webhook_pending =
            prometheus::IntGauge::new("fleet_webhook_pending", "Webhook deliveries waiting in the outbox (SPEC §18)")
                .expect("a valid metric name");
        registry.register(Box::new(webhook_pending.clone())).expect("registered once");
        let gauge = |name: &str, help: &str| {
            let gauge = prometheus::IntGauge::new(name, help).expect("a valid metric name");
            registry.register(Box::new(gauge.clone())).expect("registered once");
            gauge
        };
        let sandbox_waiting = gauge("fleet_sandbox_waiting", "Planner calls waiting for a core or for sandbox memory");
        let sandbox_memory_held = gauge(
            "fleet_sandbox_memory_held_bytes",
            "Memory the running planner calls hold at their caps (at most --sandbox-memory-total-mib)",
        );
        let metrics = Metrics {
            sandbox_waiting,
            sandbox_memory_held,
            webhook_deliveries: counters(
                "fleet_webhook_deliveries_total",
                "Webhook delivery attempts by outcome: delivered, retried, failed (SPEC §18)",
                &["outcome"],
            ),
            webhook_pending,
            cache_hits: counters(
                "fleet_cache_hits_total",
                "Lookups a cache answered (docs/decisions/0010)",
                &["cache"],
            ),
            cache_misses: counters("fleet_cache_misses_total", "Lookups a cache could not answer", &["cache"]),
            cache_bytes,
            requests,
            durations,
            sandbox_instances: counter("fleet_sandbox_instances_total", "Planner instances created"),
            sandbox_exhausted: counters(
                "fleet_sandbox_exhausted_total",
                "Sandboxed calls that ran out of a budget",
                &["budget"],
            ),
            sandbox_traps: counter("fleet_sandbox_traps_total", "Sandboxed calls that trapped (not for a budget)"),
            apply_calls: counter("fleet_apply_calls_total", "Module calls run by fleet applies"),
            drift_checks: counter("fleet_drift_checks_total", "Drift checks of claimed tenants this server ran"),
            drift_tenants,
            events_published: counters("fleet_events_published_total", "Events published, by type", &["type"]),
            registry,
        };
        // Every known label value from the start, so that a counter reads 0 before its
        // first event rather than not at all.
        for budget in ["cpu", "memory"] {
            metrics.sandbox_exhausted.with_label_values(&[budget]);
        }
        for outcome in WEBHOOK_OUTCOMES {
            metrics.webhook_deliveries.with_label_values(&[outcome]);
        }
        for cache in CACHES {
            metrics.cache_hits.with_label_values(&[cache]);
            metrics.cache_misses.with_label_values(&[cache]);
            metrics.cache_bytes.with_label_values(&[cache]);
        }
        metrics
    }

    /// Counts events of these types from zero, so that each reads 0 before its first
    /// event rather than not at all.
    pub fn count_events(&self, types: &[&str]) {
        for kind in types {
            self.events_published.with_label_values(&[kind]);
        }
    }

    /// A request answered: `method` is the registry name, or `other`.
    pub fn request(&self, method: &str, status: u16, elapsed: Duration) {
        self.requests.with_label_values(&[method, &status.to_string()]).inc();
        self.durations.with_label_values(&[method]).observe(elapsed.as_secs_f64());
    }

    pub fn exhausted(&self, budget: Exhausted) {
        let label = match budget {
            Exhausted::Cpu => "cpu",
            Exhausted::Memory => "memory",
        };
        self.sandbox_exhausted.with_label_values(&[label]).inc();
    }

    /// A cache lookup that found a current value or not.
    pub fn cache_lookup(&self, cache: &str, hit: bool) {
        let counter = if hit { &self.cache_hits } else { &self.cache_misses };
        counter.with_label_values(&[cache]).inc();
    }

    /// The bytes a cache holds now.
    pub fn cache_bytes(&self, cache: &str, bytes: usize) {
        self.cache_bytes.with_label_values(&[cache]).set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// A webhook delivery attempt's outcome: one of [`WEBHOOK_OUTCOMES`].
    pub fn webhook_attempt(&self, outcome: &str) {
        self.webhook_deliveries.with_label_values(&[outcome]).inc();
    }

    /// `count` deliveries that came to `outcome` at once (a `410 Gone` fails them all).
    pub fn webhook_deliveries(&self, outcome: &str, count: u64) {
        self.webhook_deliveries.with_label_values(&[outcome]).inc_by(count);
    }

    pub fn published(&self, kind: &str) {
        self.events_published.with_label_values(&[kind]).inc();
    }

    /// The exposition, with the drift gauges as the database has them now (so every
    /// replica reports the same numbers).
    pub fn render(&self, drifted: i64, converged: i64, webhooks_pending: i64) -> String {
        self.webhook_pending.set(webhooks_pending);
        self.drift_tenants.with_label_values(&["drifted"]).set(drifted);
        self.drift_tenants.with_label_values(&["converged"]).set(converged);
        let mut out = Vec::new();
        // Encoding into a Vec fails only on a metric the registry refused to hold.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}
