//! Delivering the outbox (SPEC §18): every replica's [`Deliverer`] claims due
//! deliveries in the database (`outbox.rs`: a claim is one replica's until it ends or
//! lapses), sends each once per attempt (`client.rs`), and records the attempt:
//! delivered on a 2xx, the webhook disabled on `410 Gone`, else retried with backoff and
//! jitter for 24 hours.
//!
//! What one receiver can cost is bounded: at most [`IN_FLIGHT`] attempts at once in a
//! replica and [`PER_TENANT`](super::outbox::PER_TENANT) of a tenant's across replicas,
//! each within [`TIMEOUT`], reading at most [`READ_LIMIT`](super::client::READ_LIMIT) of
//! the answer; nothing of it runs on an apply's or a plan's path.
//!
//! One round is [`Deliverer::activate`]: claim what is due, attempt each, and answer
//! what came of them, [`Delivered`]. The loop, [`Deliverer::run`], claims and starts
//! rounds the same way but does not wait for their end: an endpoint that holds its
//! attempts for their whole timeout must hold up no other tenant's deliveries, so the
//! outbox is looked at again as soon as any one attempt ends.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;

use super::client::{Client, Message};
use super::outbox::now_ms;
use super::outbox::{self, Claimed, Endpoint, Outcome, Recorded};
use crate::api::ApiError;
use crate::db::Pool;
use crate::metrics::Metrics;
use crate::reach::Reach;
use crate::secrets::Key;

/// How long one attempt may take, connecting and reading the answer included.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts one replica makes at once.
pub const IN_FLIGHT: usize = 16;
/// How long a claim holds a delivery past an attempt's timeout, so that a replica that
/// dies mid-attempt lets it go to another then, and only then.
const CLAIM_MARGIN: Duration = Duration::from_secs(5);
/// The shortest wait between two looks at the outbox while something due is held back
/// (its tenant has an attempt in flight, or every permit is taken).
const POLL: Duration = Duration::from_millis(250);
/// The longest: an outbox with nothing due is looked at again when an event or an
/// attempt's end wakes the deliverer, when its earliest retry falls due, or after this.
const IDLE: Duration = Duration::from_secs(30);
/// The waits before the second, third, … attempt; hourly after the last.
const BACKOFF: [u64; 6] = [5, 30, 120, 600, 1800, 3600];
/// How long a delivery is tried.
const WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The retry schedule's time: `scale` 1 is the SPEC's; tests shorten it
/// (`serve --webhook-time-scale`, hidden).
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    pub scale: f64,
}

impl Default for Schedule {
    fn default() -> Schedule {
        Schedule { scale: 1.0 }
    }
}

impl Schedule {
    fn scaled(self, duration: Duration) -> i64 {
        i64::try_from(duration.mul_f64(self.scale).as_millis()).unwrap_or(i64::MAX)
    }

    /// An attempt's timeout: [`TIMEOUT`], scaled down to a second at least.
    fn timeout(self) -> Duration {
        TIMEOUT.mul_f64(self.scale).max(Duration::from_secs(1))
    }

    /// How long a claim holds a delivery.
    fn claim(self) -> i64 {
        let margin = CLAIM_MARGIN.mul_f64(self.scale).max(Duration::from_millis(500));
        i64::try_from((self.timeout() + margin).as_millis()).unwrap_or(i64::MAX)
    }

    /// The wait after attempt `attempts` (1-based), with ±20 % jitter.
    fn backoff(self, attempts: i64) -> i64 {
        let index = usize::try_from(attempts.saturating_sub(1)).unwrap_or(usize::MAX).min(BACKOFF.len() - 1);
        let jitter = 0.8 + 0.4 * rand::random::<f64>();
        self.scaled(Duration::from_secs(BACKOFF[index]).mul_f64(jitter))
    }
}

/// What one round did: the deliveries it claimed, and what their attempts made of them.
/// An attempt that could not be recorded is counted only as claimed: its claim lapses
/// and it is attempted again (at least once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Delivered {
    /// Deliveries claimed, those failed at once because their webhook is gone included.
    pub claimed: usize,
    /// Answered with a 2xx.
    pub delivered: usize,
    /// To be attempted again after their backoff.
    pub retried: usize,
    /// Failed: their webhook gone or disabled, their window passed, or pending for a
    /// webhook whose endpoint answered `410 Gone` (every one of those, claimed or not).
    pub failed: usize,
}

impl std::ops::AddAssign for Delivered {
    fn add_assign(&mut self, other: Delivered) {
        self.claimed += other.claimed;
        self.delivered += other.delivered;
        self.retried += other.retried;
        self.failed += other.failed;
    }
}

/// A replica's sender of the outbox.
pub struct Deliverer {
    db: Pool,
    client: Client,
    schedule: Schedule,
    metrics: Metrics,
    /// What opens the webhooks' secrets sealed at rest, if the deployment has a key.
    key: Option<Key>,
    permits: Arc<Semaphore>,
    /// Told when an attempt ends, which gives up its permit and its tenant's claim.
    ended: Notify,
}

/// What a round claimed: the deliveries to attempt, and when the outbox's earliest
/// pending delivery falls due after the claim (none when nothing is pending).
struct Claim {
    deliveries: Vec<(Claimed, Endpoint)>,
    /// The deliveries claimed, and those failed at once.
    counted: Delivered,
    next_due: Option<i64>,
}

impl Claim {
    fn none(next_due: Option<i64>) -> Claim {
        Claim { deliveries: Vec::new(), counted: Delivered::default(), next_due }
    }
}

/// A round under way: what its claim counted, and its attempts, running.
struct Round {
    counted: Delivered,
    attempts: Vec<JoinHandle<Delivered>>,
}

impl Round {
    /// What the round did, once every attempt of it has ended.
    async fn finished(self) -> Delivered {
        let mut delivered = self.counted;
        for attempt in self.attempts {
            match attempt.await {
                Ok(counted) => delivered += counted,
                Err(error) => tracing::error!(%error, "a webhook attempt panicked"),
            }
        }
        delivered
    }
}

impl Deliverer {
    /// A deliverer that trusts the system's roots, and `ca` if given, and opens the
    /// webhooks' secrets with `key`.
    pub fn new(
        db: Pool,
        reach: Reach,
        ca: Option<&Path>,
        schedule: Schedule,
        metrics: Metrics,
        key: Option<Key>,
    ) -> anyhow::Result<Deliverer> {
        let client = Client::new(reach, ca)?;
        let permits = Arc::new(Semaphore::new(IN_FLIGHT));
        Ok(Deliverer { db, client, schedule, metrics, key, permits, ended: Notify::new() })
    }

    /// Delivers until `shutdown`. The outbox is looked at when `woken` (an event
    /// committed here or, on PostgreSQL, by another replica: the event stream's wake),
    /// when an attempt ends, and when its earliest delivery falls due; between those a
    /// backlog costs nothing, however long (issue 62).
    pub async fn run(
        self: Arc<Self>,
        mut woken: tokio::sync::broadcast::Receiver<()>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let mut wait = Duration::ZERO;
        // Whether the wake can still come: a closed channel is ready at once, forever.
        let mut wakes = true;
        loop {
            tokio::select! {
                woke = woken.recv(), if wakes => {
                    wakes = !matches!(woke, Err(tokio::sync::broadcast::error::RecvError::Closed));
                }
                () = self.ended.notified() => {}
                () = tokio::time::sleep(wait) => {}
                () = &mut shutdown => return,
            }
            let free = self.permits.available_permits();
            if free == 0 {
                wait = IDLE;
                continue;
            }
            let (deliverer, now) = (self.clone(), now_ms());
            let claim = match tokio::task::spawn_blocking(move || deliverer.claim(now, free)).await {
                Ok(Ok(claim)) => claim,
                Ok(Err(error)) => {
                    tracing::warn!(%error, "webhook deliveries could not be claimed");
                    Claim::none(Some(now_ms() + i64::try_from(POLL.as_millis()).unwrap_or(0)))
                }
                Err(error) => {
                    tracing::error!(%error, "claiming webhook deliveries panicked");
                    Claim::none(None)
                }
            };
            wait = until_due(claim.next_due, now_ms());
            // The round's attempts run on their own; each one's end wakes this loop.
            drop(self.start(claim).await);
        }
    }

    /// One round: claims the deliveries due at `now`, as many as attempts may start,
    /// attempts each, and answers what came of them once every attempt is recorded.
    pub async fn activate(self: &Arc<Self>, now: i64) -> Result<Delivered, ApiError> {
        let (deliverer, most) = (self.clone(), self.permits.available_permits());
        let claim =
            tokio::task::spawn_blocking(move || deliverer.claim(now, most)).await.map_err(ApiError::internal)??;
        Ok(self.start(claim).await.finished().await)
    }

    /// Claims up to `most` deliveries due at `now`, at most
    /// [`PER_TENANT`](super::outbox::PER_TENANT) of a tenant's and none of a tenant with
    /// one in flight anywhere, and fails at once those whose webhook is gone or disabled.
    /// A look at an outbox with nothing due writes nothing.
    fn claim(&self, now: i64, most: usize) -> Result<Claim, ApiError> {
        let db = self.db.get()?;
        match outbox::earliest(&db)? {
            Some(due) if due <= now => {}
            later => return Ok(Claim::none(later)),
        }
        let until = now + self.schedule.claim();
        let mut claim = Claim::none(None);
        for (delivery, endpoint) in outbox::claim(&db, now, until, most, self.key.as_ref())? {
            claim.counted.claimed += 1;
            match endpoint {
                Some(endpoint) => claim.deliveries.push((delivery, endpoint)),
                None => {
                    let gone = "the webhook is gone or disabled";
                    outbox::fail(&db, delivery.id, &delivery.tenant, &delivery.webhook, gone)?;
                    self.metrics.webhook_attempt("failed");
                    claim.counted.failed += 1;
                }
            }
        }
        claim.next_due = outbox::earliest(&db)?;
        Ok(claim)
    }

    /// Starts a claim's attempts, each under one of the [`IN_FLIGHT`] permits.
    async fn start(self: &Arc<Self>, claim: Claim) -> Round {
        let mut attempts = Vec::with_capacity(claim.deliveries.len());
        for (delivery, endpoint) in claim.deliveries {
            let Ok(permit) = self.permits.clone().acquire_owned().await else { break };
            let deliverer = self.clone();
            attempts.push(tokio::spawn(async move {
                let counted = deliverer.clone().attempt(delivery, endpoint).await;
                drop(permit);
                deliverer.ended.notify_one();
                counted
            }));
        }
        Round { counted: claim.counted, attempts }
    }

    /// One attempt, recorded: what it made of its delivery. A secret that cannot be
    /// opened sends nothing: the attempt fails, and is retried (another replica, given
    /// the key, may make it).
    async fn attempt(self: Arc<Self>, delivery: Claimed, endpoint: Endpoint) -> Delivered {
        let started = Instant::now();
        let outcome = match &endpoint.secret {
            Ok(secret) => {
                let message = Message { url: &endpoint.url, secret, id: &delivery.message, body: &delivery.body };
                match self.client.attempt(&message, self.schedule.timeout()).await {
                    Ok(status) => Outcome::Answered(status),
                    Err(error) => Outcome::Failed(error),
                }
            }
            Err(error) => {
                tracing::error!(tenant = %delivery.tenant, webhook = %delivery.webhook, %error,
                    "a webhook's secret cannot be read to sign its delivery");
                let remedy = match error {
                    crate::secrets::Error::NoKey | crate::secrets::Error::Random => "",
                    _ => "; put the webhook again with \"rotate\": true for a new one",
                };
                Outcome::Failed(format!("not sent: the webhook's signing secret cannot be read: {error}{remedy}"))
            }
        };
        let elapsed = started.elapsed();
        let deliverer = self.clone();
        let recorded = tokio::task::spawn_blocking(move || deliverer.record(&delivery, &outcome, elapsed)).await;
        match recorded {
            Ok(Ok(counted)) => counted,
            // The claim lapses and another attempt is made: at least once.
            Ok(Err(error)) => {
                tracing::warn!(%error, "a webhook attempt could not be recorded");
                Delivered::default()
            }
            Err(error) => {
                tracing::error!(%error, "recording a webhook attempt panicked");
                Delivered::default()
            }
        }
    }

    /// The attempt's row and what it makes of the delivery (and, on `410 Gone`, of the
    /// webhook), counted, metered and logged.
    fn record(&self, delivery: &Claimed, outcome: &Outcome, elapsed: Duration) -> Result<Delivered, ApiError> {
        let db = self.db.get()?;
        let (backoff, window) = (self.schedule.backoff(delivery.attempts), self.schedule.scaled(WINDOW));
        let counted = match outbox::record(&db, delivery, outcome, elapsed, backoff, window)? {
            Recorded::Delivered => {
                self.metrics.webhook_attempt("delivered");
                Delivered { delivered: 1, ..Delivered::default() }
            }
            Recorded::Disabled { failed } => {
                // This delivery and every other one pending for the webhook.
                self.metrics.webhook_deliveries("failed", failed);
                tracing::warn!(tenant = %delivery.tenant, webhook = %delivery.webhook, failed,
                    "webhook disabled: its endpoint answered 410 Gone");
                Delivered { failed: usize::try_from(failed).unwrap_or(usize::MAX), ..Delivered::default() }
            }
            Recorded::Failed => {
                self.metrics.webhook_attempt("failed");
                tracing::warn!(tenant = %delivery.tenant, webhook = %delivery.webhook,
                    event = %delivery.message, attempts = delivery.attempts, outcome = %outcome,
                    "webhook delivery failed: no attempt was taken within its window");
                Delivered { failed: 1, ..Delivered::default() }
            }
            Recorded::Retried => {
                self.metrics.webhook_attempt("retried");
                tracing::info!(tenant = %delivery.tenant, webhook = %delivery.webhook,
                    event = %delivery.message, attempt = delivery.attempts, outcome = %outcome,
                    "webhook delivery will be retried");
                Delivered { retried: 1, ..Delivered::default() }
            }
        };
        Ok(counted)
    }
}

/// How long the deliverer may sleep when the earliest pending delivery falls due at
/// `next_due`: until then, but at least [`POLL`] (what is due now is held back) and at
/// most [`IDLE`].
fn until_due(next_due: Option<i64>, now: i64) -> Duration {
    let Some(due) = next_due else { return IDLE };
    Duration::from_millis(u64::try_from(due - now).unwrap_or(0)).clamp(POLL, IDLE)
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http_body_util::Full;
    use hyper::body::Incoming;
    use hyper::service::service_fn;
    use hyper::{Request, Response};
    use hyper_util::rt::TokioIo;

    use super::*;
    use crate::db::{Conn, params};
    use crate::testing::Database;
    use crate::webhooks::{at_rest, sign};

    /// A receiver on 127.0.0.1 that answers every request with the status its path
    /// names (`/200`, `/410`): its port.
    async fn receiver() -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let port = listener.local_addr().expect("an address").port();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let answer = service_fn(|request: Request<Incoming>| async move {
                    let status: u16 = request.uri().path().trim_start_matches('/').parse().expect("a status");
                    Ok::<_, Infallible>(
                        Response::builder().status(status).body(Full::new(Bytes::new())).expect("an answer"),
                    )
                });
                tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), answer));
            }
        });
        port
    }

    fn new_key() -> Key {
        Key::new(&crate::secrets::generate().expect("random bytes")).expect("a key")
    }

    /// A webhook whose new secret is sealed with `key`, as `put` stores it.
    fn webhook(db: &Conn, key: &Key, tenant: &str, name: &str, url: &str, enabled: bool) {
        let secret = at_rest::store(Some(key), tenant, name, &sign::new_secret()).expect("a sealed secret");
        db.execute(
            "INSERT INTO webhooks (tenant, name, url, events, secret, enabled, disabled, updated_at, updated_by)
             VALUES (?1, ?2, ?3, ',*,', ?4, ?5, NULL, '2026-11-30T00:00:00Z', 'alice')",
            params![tenant, name, url, &secret, i64::from(enabled)],
        )
        .expect("a webhook");
    }

    fn delivery(db: &Conn, tenant: &str, webhook: &str, created: i64, due: i64) {
        db.execute(
            "INSERT INTO webhook_deliveries (tenant, webhook, message, type, body, state, created_ms, next_ms)
             VALUES (?1, ?2, 'msg_1', 'webhook.test', '{}', 'pending', ?3, ?4)",
            params![tenant, webhook, created, due],
        )
        .expect("a delivery");
    }

    /// Each delivery's webhook and state, in the order they were made.
    fn states(db: &Conn) -> Vec<(String, String)> {
        db.query("SELECT webhook, state FROM webhook_deliveries ORDER BY id", &[], |row| Ok((row.get(0)?, row.get(1)?)))
            .expect("the outbox")
    }

    fn attempts(db: &Conn, webhook: &str) -> i64 {
        db.query_one("SELECT attempts FROM webhook_deliveries WHERE webhook = ?1", params![webhook], |row| row.get(0))
            .expect("one delivery")
    }

    #[tokio::test]
    async fn a_round_counts_what_its_attempts_made_of_each_delivery() {
        let database = Database::new();
        let db = database.conn();
        let url = format!("http://127.0.0.1:{}", receiver().await);
        let now = now_ms();
        // acme: one delivery answered 200, and two to an endpoint that answers 410 Gone,
        // one of them not due yet; other: one answered 503, and one to a disabled webhook.
        let key = new_key();
        webhook(&db, &key, "acme", "ok", &format!("{url}/200"), true);
        webhook(&db, &key, "acme", "gone", &format!("{url}/410"), true);
        webhook(&db, &key, "other", "busy", &format!("{url}/503"), true);
        webhook(&db, &key, "other", "off", &format!("{url}/200"), false);
        delivery(&db, "acme", "ok", now, now);
        delivery(&db, "acme", "gone", now, now);
        delivery(&db, "acme", "gone", now, now + 3_600_000);
        delivery(&db, "other", "busy", now, now);
        delivery(&db, "other", "off", now, now);
        let reach = Reach { allow_http: true, allow: vec!["127.0.0.0/8".parse().expect("a network")] };
        let metrics = Metrics::new();
        let deliverer =
            Deliverer::new(database.pool.clone(), reach, None, Schedule::default(), metrics.clone(), Some(key))
                .expect("a deliverer");
        let deliverer = Arc::new(deliverer);

        let round = deliverer.activate(now).await.expect("a round");
        // The 410 fails both of its webhook's pending deliveries; the disabled webhook's
        // fails at its claim.
        assert_eq!(round, Delivered { claimed: 4, delivered: 1, retried: 1, failed: 3 });
        let expected =
            [("ok", "delivered"), ("gone", "failed"), ("gone", "failed"), ("busy", "pending"), ("off", "failed")];
        let expected: Vec<(String, String)> =
            expected.iter().map(|(webhook, state)| (webhook.to_string(), state.to_string())).collect();
        assert_eq!(states(&db), expected);
        assert_eq!(attempts(&db, "busy"), 1);
        let exposition = metrics.render(0, 0, 0);
        for counted in [r#"{outcome="delivered"} 1"#, r#"{outcome="retried"} 1"#, r#"{outcome="failed"} 3"#] {
            assert!(exposition.contains(&format!("fleet_webhook_deliveries_total{counted}")), "{exposition}");
        }

        // Nothing is due until the retry's backoff has passed; then only the retry is.
        assert_eq!(deliverer.activate(now).await.expect("a round"), Delivered::default());
        let later = deliverer.activate(now + 60_000).await.expect("a round");
        assert_eq!(later, Delivered { claimed: 1, retried: 1, ..Delivered::default() });
        assert_eq!(states(&db)[3], ("busy".to_owned(), "pending".to_owned()));
        assert_eq!(attempts(&db, "busy"), 2);
    }

    #[tokio::test]
    async fn a_secret_that_does_not_open_sends_nothing_and_is_retried() {
        let database = Database::new();
        let db = database.conn();
        let url = format!("http://127.0.0.1:{}", receiver().await);
        let now = now_ms();
        let key = new_key();
        webhook(&db, &key, "acme", "ok", &format!("{url}/200"), true);
        webhook(&db, &key, "acme", "copy", &format!("{url}/200"), true);
        // `copy` holds `ok`'s sealed secret, copied: bound to `ok`'s row, it does not open.
        db.execute(
            "UPDATE webhooks SET secret = (SELECT secret FROM webhooks WHERE name = 'ok') WHERE name = 'copy'",
            &[],
        )
        .expect("a copied secret");
        delivery(&db, "acme", "copy", now, now);
        let reach = Reach { allow_http: true, allow: vec!["127.0.0.0/8".parse().expect("a network")] };
        let deliverer =
            Deliverer::new(database.pool.clone(), reach, None, Schedule::default(), Metrics::new(), Some(key))
                .expect("a deliverer");
        let round = Arc::new(deliverer).activate(now).await.expect("a round");
        // The receiver answers 200 to anything sent: nothing was.
        assert_eq!(round, Delivered { claimed: 1, retried: 1, ..Delivered::default() });
        let error: String = db
            .query_one("SELECT error FROM webhook_attempts WHERE webhook = 'copy'", &[], |row| row.get(0))
            .expect("the attempt");
        assert!(error.contains("cannot be read") && error.contains("copied from another row"), "{error}");
        assert!(!error.contains("whsec_") && !error.contains("enc:v1:"), "{error}");
    }
}
