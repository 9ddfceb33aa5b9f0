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

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::client::{Client, Message};
use super::outbox::{self, Claimed, Endpoint, Outcome, Recorded};
// `mod.rs` reaches these as `deliver::`.
pub(super) use super::outbox::{fail, now_ms};
use crate::api::ApiError;
use crate::db::Pool;
use crate::metrics::Metrics;
use crate::reach::Reach;

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

/// A replica's sender of the outbox.
pub struct Deliverer {
    db: Pool,
    client: Client,
    schedule: Schedule,
    metrics: Metrics,
    permits: Arc<Semaphore>,
}

/// What a look at the outbox claimed: the deliveries to attempt, and when the outbox's
/// earliest pending delivery falls due after the claim (none when nothing is pending).
struct Claim {
    deliveries: Vec<(Claimed, Endpoint)>,
    next_due: Option<i64>,
}

impl Claim {
    fn none(next_due: Option<i64>) -> Claim {
        Claim { deliveries: Vec::new(), next_due }
    }
}

impl Deliverer {
    /// A deliverer that trusts the system's roots, and `ca` if given.
    pub fn new(
        db: Pool,
        reach: Reach,
        ca: Option<&Path>,
        schedule: Schedule,
        metrics: Metrics,
    ) -> anyhow::Result<Deliverer> {
        let client = Client::new(reach, ca)?;
        Ok(Deliverer { db, client, schedule, metrics, permits: Arc::new(Semaphore::new(IN_FLIGHT)) })
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
        let ended = Arc::new(tokio::sync::Notify::new());
        let mut wait = Duration::ZERO;
        // Whether the wake can still come: a closed channel is ready at once, forever.
        let mut wakes = true;
        loop {
            tokio::select! {
                woke = woken.recv(), if wakes => {
                    wakes = !matches!(woke, Err(tokio::sync::broadcast::error::RecvError::Closed));
                }
                () = ended.notified() => {}
                () = tokio::time::sleep(wait) => {}
                () = &mut shutdown => return,
            }
            let free = self.permits.available_permits();
            if free == 0 {
                wait = IDLE;
                continue;
            }
            let deliverer = self.clone();
            let claim = match tokio::task::spawn_blocking(move || deliverer.claim(free)).await {
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
            for (delivery, endpoint) in claim.deliveries {
                let Ok(permit) = self.permits.clone().acquire_owned().await else { return };
                let (deliverer, ended) = (self.clone(), ended.clone());
                tokio::spawn(async move {
                    deliverer.attempt(delivery, endpoint).await;
                    drop(permit);
                    ended.notify_one();
                });
            }
        }
    }

    /// Claims up to `most` due deliveries, at most [`PER_TENANT`](super::outbox::PER_TENANT)
    /// of a tenant's and none of a tenant with one in flight anywhere, and fails at once
    /// those whose webhook is gone or disabled. A look at an outbox with nothing due
    /// writes nothing.
    fn claim(&self, most: usize) -> Result<Claim, ApiError> {
        let db = self.db.get()?;
        let now = now_ms();
        match outbox::earliest(&db)? {
            Some(due) if due <= now => {}
            later => return Ok(Claim::none(later)),
        }
        let until = now + self.schedule.claim();
        let mut claim = Claim::none(None);
        for (delivery, endpoint) in outbox::claim(&db, now, until, most)? {
            match endpoint {
                Some(endpoint) => claim.deliveries.push((delivery, endpoint)),
                None => {
                    let gone = "the webhook is gone or disabled";
                    outbox::fail(&db, delivery.id, &delivery.tenant, &delivery.webhook, gone)?;
                    self.metrics.webhook_attempt("failed");
                }
            }
        }
        claim.next_due = outbox::earliest(&db)?;
        Ok(claim)
    }

    /// One attempt, recorded.
    async fn attempt(self: Arc<Self>, delivery: Claimed, endpoint: Endpoint) {
        let started = Instant::now();
        let message =
            Message { url: &endpoint.url, secret: &endpoint.secret, id: &delivery.message, body: &delivery.body };
        let outcome = match self.client.attempt(&message, self.schedule.timeout()).await {
            Ok(status) => Outcome::Answered(status),
            Err(error) => Outcome::Failed(error),
        };
        let elapsed = started.elapsed();
        let deliverer = self.clone();
        let recorded = tokio::task::spawn_blocking(move || deliverer.record(&delivery, &outcome, elapsed)).await;
        match recorded {
            Ok(Ok(())) => {}
            // The claim lapses and another attempt is made: at least once.
            Ok(Err(error)) => tracing::warn!(%error, "a webhook attempt could not be recorded"),
            Err(error) => tracing::error!(%error, "recording a webhook attempt panicked"),
        }
    }

    /// The attempt's row and what it makes of the delivery (and, on `410 Gone`, of the
    /// webhook), metered and logged.
    fn record(&self, delivery: &Claimed, outcome: &Outcome, elapsed: Duration) -> Result<(), ApiError> {
        let db = self.db.get()?;
        let (backoff, window) = (self.schedule.backoff(delivery.attempts), self.schedule.scaled(WINDOW));
        match outbox::record(&db, delivery, outcome, elapsed, backoff, window)? {
            Recorded::Delivered => {
                self.metrics.webhook_attempt("delivered");
            }
            Recorded::Disabled { failed } => {
                // This delivery and every other one pending for the webhook.
                self.metrics.webhook_deliveries("failed", failed);
                tracing::warn!(tenant = %delivery.tenant, webhook = %delivery.webhook, failed,
                    "webhook disabled: its endpoint answered 410 Gone");
            }
            Recorded::Failed => {
                self.metrics.webhook_attempt("failed");
                tracing::warn!(tenant = %delivery.tenant, webhook = %delivery.webhook,
                    event = %delivery.message, attempts = delivery.attempts, outcome = %outcome,
                    "webhook delivery failed: no attempt was taken within its window");
            }
            Recorded::Retried => {
                self.metrics.webhook_attempt("retried");
                tracing::info!(tenant = %delivery.tenant, webhook = %delivery.webhook,
                    event = %delivery.message, attempt = delivery.attempts, outcome = %outcome,
                    "webhook delivery will be retried");
            }
        }
        Ok(())
    }
}

/// How long the deliverer may sleep when the earliest pending delivery falls due at
/// `next_due`: until then, but at least [`POLL`] (what is due now is held back) and at
/// most [`IDLE`].
fn until_due(next_due: Option<i64>, now: i64) -> Duration {
    let Some(due) = next_due else { return IDLE };
    Duration::from_millis(u64::try_from(due - now).unwrap_or(0)).clamp(POLL, IDLE)
}
