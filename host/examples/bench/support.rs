//! What every group of figures uses: the documents, timing, medians, load and memory.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde_json::{Value, json};

/// Runs `work` over and over for `seconds`, and says on stderr how long it took each
/// time on average (so that two builds can be compared on one figure, alternately).
pub fn repeat<T>(seconds: u64, mut work: impl FnMut() -> T) {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let mut times = 0_u32;
    while Instant::now() < deadline {
        std::hint::black_box(work());
        times += 1;
    }
    let each = start.elapsed() / times.max(1);
    eprintln!("{times} times in {:.1?}: {:.3} ms each", start.elapsed(), each.as_secs_f64() * 1e3);
}

/// A document of about `objects` objects.
pub fn document(objects: usize) -> Value {
    fleet::demo::large_document(objects.saturating_sub(4 + 50) / 3)
}

/// The objects of `document`, of every kind.
pub fn count(document: &Value) -> usize {
    document
        .as_object()
        .map(|sections| sections.values().filter_map(Value::as_object).map(|section| section.len()).sum())
        .unwrap_or(0)
}

/// An estate of pools and flavors, `objects` of them, all to be created: half pools
/// (on the one site and account the document also creates), half flavors of them.
pub fn creates(objects: usize) -> Value {
    let (site, account) = ("eu-west", "aws-main");
    let mut pools = serde_json::Map::new();
    let mut flavors = serde_json::Map::new();
    for index in 0..objects / 2 {
        let pool = format!("pool-{index}");
        flavors.insert(format!("flavor-{index}"), json!({"pool": pool, "vcpus": 8, "memoryMib": 32768, "gpus": 1}));
        pools.insert(
            pool,
            json!({"site": site, "account": account, "class": "gpu", "owner": format!("team-{}", index % 50),
                   "vcpus": 64, "memoryMib": 262144, "gpus": 8}),
        );
    }
    json!({"sites": {site: {"region": "eu-west-1"}}, "providerAccounts": {account: {"provider": "aws"}},
           "pools": pools, "flavors": flavors})
}

/// The document with `count` reservations (the example plugin's kind) spread over its
/// pools, each with `note`.
pub fn with_reservations(document: &Value, count: usize, note: &str) -> Value {
    let pools: Vec<String> =
        document["pools"].as_object().map(|pools| pools.keys().cloned().collect()).unwrap_or_default();
    let mut reservations = serde_json::Map::new();
    for index in 0..count {
        reservations.insert(
            format!("rsv-{index}"),
            json!({"pool": pools[index % pools.len()], "owner": format!("team-{}", index % 50), "vcpus": 8, "gpus": 1,
                   "startsAt": "2026-12-01T00:00:00Z", "endsAt": "2026-12-08T00:00:00Z", "note": note}),
        );
    }
    let mut document = document.clone();
    document["reservations"] = Value::Object(reservations);
    document
}

/// The same document with one pool in a hundred changed, so the plan has work to show.
pub fn with_changed_pools(document: &Value) -> Value {
    let mut changed = document.clone();
    if let Some(pools) = changed["pools"].as_object_mut() {
        for (index, pool) in pools.values_mut().enumerate() {
            if index % 100 == 0 {
                pool["gpus"] = json!(16);
            }
        }
    }
    changed
}

/// The median of durations, or of ratios such as those of two plans timed in one round.
pub fn median<T: PartialOrd>(mut samples: Vec<T>) -> T {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    samples.swap_remove(samples.len() / 2)
}

/// How long `work` took.
pub fn timed<T>(work: impl FnOnce() -> T) -> Duration {
    let started = Instant::now();
    std::hint::black_box(work());
    started.elapsed()
}

/// The median time of `runs` runs of `work`.
pub fn time<T>(runs: usize, mut work: impl FnMut() -> T) -> Duration {
    median((0..runs).map(|_| timed(&mut work)).collect())
}

/// `duration` in milliseconds, the unit of most figures.
pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// The peak RSS of this process.
pub fn peak_rss_mib() -> f64 {
    peak_rss_mib_of("self")
}

/// The peak RSS of the process `pid` ("self": this one).
pub fn peak_rss_mib_of(pid: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// Requests per second of `connections` clients posting `body` to `url` for `seconds`.
pub async fn throughput(
    url: String,
    token: Option<String>,
    body: String,
    connections: usize,
    seconds: u64,
) -> Result<f64> {
    let client = reqwest::Client::builder().pool_max_idle_per_host(connections).build()?;
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..connections {
        let (client, url, token, body) = (client.clone(), url.clone(), token.clone(), body.clone());
        workers.push(tokio::spawn(async move {
            let mut done = 0u64;
            while Instant::now() < deadline {
                let mut request = client.post(&url).body(body.clone());
                if let Some(token) = &token {
                    request = request.bearer_auth(token);
                }
                let response = request.send().await?;
                if !response.status().is_success() {
                    bail!("{url} answered {}", response.status());
                }
                response.bytes().await?;
                done += 1;
            }
            Ok(done)
        }));
    }
    let mut total = 0;
    for worker in workers {
        total += worker.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// POSTs `body` to the fleet method `method` of the server at `base` as `token`, and
/// returns the answer's text; an error when it is not a success.
pub async fn post_fleet(http: &reqwest::Client, base: &str, token: &str, method: &str, body: String) -> Result<String> {
    post_method(http, base, token, &format!("fleet/{method}"), body).await
}

/// As [`post_fleet`], for any method: `method` is `group/method`.
pub async fn post_method(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    method: &str,
    body: String,
) -> Result<String> {
    let response = http.post(format!("{base}/api/compute/{method}")).bearer_auth(token).body(body).send().await?;
    let status = response.status();
    let text = response.text().await?;
    if !status.is_success() {
        bail!("{method} failed: {text}");
    }
    Ok(text)
}
