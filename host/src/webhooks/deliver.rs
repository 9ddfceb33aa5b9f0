//! Delivering the outbox (SPEC §18): every replica's [`Deliverer`] claims due
//! deliveries in the database (a claim is one replica's until it ends or lapses), sends
//! each once per attempt, and records the attempt: delivered on a 2xx, the webhook
//! disabled on `410 Gone`, else retried with backoff and jitter for 24 hours.
//!
//! What one receiver can cost is bounded: at most [`IN_FLIGHT`] attempts at once in a
//! replica and [`PER_TENANT`] of a tenant's across replicas, each within [`TIMEOUT`],
//! reading at most [`READ_LIMIT`] of the answer; nothing of it runs on an apply's or a
//! plan's path.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::header::{CONTENT_TYPE, HOST, USER_AGENT};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio_rustls::TlsConnector;

use super::sign;
use crate::api::ApiError;
use crate::db::{self, Conn, Pool, params};
use crate::metrics::Metrics;
use crate::reach::{Reach, Target};

/// How long one attempt may take, connecting and reading the answer included.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an answer read.
pub const READ_LIMIT: usize = 64 * 1024;
/// Attempts one replica makes at once.
pub const IN_FLIGHT: usize = 16;
/// A tenant's attempts in flight at once, across replicas.
const PER_TENANT: i64 = 2;
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

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// A replica's sender of the outbox.
pub struct Deliverer {
    db: Pool,
    reach: Reach,
    tls: TlsConnector,
    schedule: Schedule,
    metrics: Metrics,
    permits: Arc<Semaphore>,
}

/// A delivery this replica claimed, with what sending it needs.
struct Claimed {
    id: i64,
    tenant: String,
    webhook: String,
    message: String,
    body: String,
    attempts: i64,
    created_ms: i64,
    url: String,
    secret: String,
}

/// What an attempt came to.
enum Outcome {
    Answered(u16),
    Failed(String),
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Answered(status) => write!(formatter, "answered {status}"),
            Outcome::Failed(error) => formatter.write_str(error),
        }
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
        let mut roots = rustls::RootCertStore::empty();
        for certificate in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(certificate);
        }
        if let Some(ca) = ca {
            let certificates =
                CertificateDer::pem_file_iter(ca).with_context(|| format!("reading --webhook-ca {}", ca.display()))?;
            for certificate in certificates {
                roots.add(certificate.with_context(|| format!("--webhook-ca {}", ca.display()))?)?;
            }
        }
        let config = rustls::ClientConfig::builder_with_provider(crate::db::tls::provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tls = TlsConnector::from(Arc::new(config));
        Ok(Deliverer { db, reach, tls, schedule, metrics, permits: Arc::new(Semaphore::new(IN_FLIGHT)) })
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
            let (claimed, next_due) = match tokio::task::spawn_blocking(move || deliverer.claim(free)).await {
                Ok(Ok(claimed)) => claimed,
                Ok(Err(error)) => {
                    tracing::warn!(%error, "webhook deliveries could not be claimed");
                    (Vec::new(), Some(now_ms() + i64::try_from(POLL.as_millis()).unwrap_or(0)))
                }
                Err(error) => {
                    tracing::error!(%error, "claiming webhook deliveries panicked");
                    (Vec::new(), None)
                }
            };
            wait = until_due(next_due, now_ms());
            for delivery in claimed {
                let Ok(permit) = self.permits.clone().acquire_owned().await else { return };
                let (deliverer, ended) = (self.clone(), ended.clone());
                tokio::spawn(async move {
                    deliverer.attempt(delivery).await;
                    drop(permit);
                    ended.notify_one();
                });
            }
        }
    }

    /// Claims up to `most` due deliveries, at most [`PER_TENANT`] of a tenant's and none
    /// of a tenant with one in flight anywhere; and when the outbox's earliest delivery
    /// falls due (none when nothing is pending). A claim moves a delivery's due time to
    /// the claim's end, where another replica may take it if this one died, so that
    /// the earliest due time is one index read, and a look at an outbox with nothing
    /// due writes nothing.
    fn claim(&self, most: usize) -> Result<(Vec<Claimed>, Option<i64>), ApiError> {
        let db = self.db.get()?;
        let now = now_ms();
        let earliest = |db: &Conn| {
            db.query_one("SELECT min(next_ms) FROM webhook_deliveries WHERE state = 'pending'", &[], |row| {
                row.get::<Option<i64>>(0)
            })
        };
        match earliest(&db)? {
            Some(due) if due <= now => {}
            later => return Ok((Vec::new(), later)),
        }
        let until = now + self.schedule.claim();
        let rows = db.query(
            "UPDATE webhook_deliveries SET claimed_until_ms = ?2, next_ms = ?2, attempts = attempts + 1
             WHERE id IN (
               SELECT id FROM (
                 SELECT d.id, ROW_NUMBER() OVER (PARTITION BY d.tenant ORDER BY d.next_ms, d.id) AS rank
                 FROM webhook_deliveries d
                 WHERE d.state = 'pending' AND d.next_ms <= ?1 AND d.claimed_until_ms <= ?1
                   AND d.tenant NOT IN (SELECT f.tenant FROM webhook_deliveries f
                                        WHERE f.state = 'pending' AND f.claimed_until_ms > ?1)
               ) ranked
               WHERE rank <= ?3 ORDER BY id LIMIT ?4)
             AND state = 'pending' AND claimed_until_ms <= ?1
             RETURNING id, tenant, webhook, message, body, attempts, created_ms",
            params![now, until, PER_TENANT, i64::try_from(most).unwrap_or(i64::MAX)],
            |row| {
                Ok(Claimed {
                    id: row.get(0)?,
                    tenant: row.get(1)?,
                    webhook: row.get(2)?,
                    message: row.get(3)?,
                    body: row.get(4)?,
                    attempts: row.get(5)?,
                    created_ms: row.get(6)?,
                    url: String::new(),
                    secret: String::new(),
                })
            },
        )?;
        let mut claimed = Vec::with_capacity(rows.len());
        for mut delivery in rows {
            let found = db.query_opt(
                "SELECT url, secret FROM webhooks WHERE tenant = ?1 AND name = ?2 AND enabled = 1",
                params![&delivery.tenant, &delivery.webhook],
                |row| Ok((row.get::<String>(0)?, row.get::<String>(1)?)),
            )?;
            match found {
                Some((url, secret)) => {
                    (delivery.url, delivery.secret) = (url, secret);
                    claimed.push(delivery);
                }
                None => {
                    fail(&db, delivery.id, &delivery.tenant, &delivery.webhook, "the webhook is gone or disabled")?;
                    self.metrics.webhook_attempt("failed");
                }
            }
        }
        Ok((claimed, earliest(&db)?))
    }

    /// One attempt, recorded.
    async fn attempt(self: Arc<Self>, delivery: Claimed) {
        let started = Instant::now();
        let timeout = self.schedule.timeout();
        let outcome = match tokio::time::timeout(timeout, self.send(&delivery)).await {
            Ok(Ok(status)) => Outcome::Answered(status),
            Ok(Err(error)) => Outcome::Failed(error),
            Err(_) => Outcome::Failed(format!("no answer within {:.1} s", timeout.as_secs_f64())),
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

    /// Sends the delivery once: the status of the answer, or why there is none.
    async fn send(&self, delivery: &Claimed) -> Result<u16, String> {
        let target = self.reach.target(&delivery.url)?;
        let key = sign::key(&delivery.secret)?;
        let resolved: Vec<SocketAddr> = tokio::net::lookup_host((target.host.as_str(), target.port))
            .await
            .map_err(|error| format!("{} does not resolve: {error}", target.host))?
            .collect();
        self.reach.check(&target, &resolved)?;
        let tcp = connect(&resolved).await?;
        // The address actually connected to, whatever the name resolves to by now.
        let peer = tcp.peer_addr().map_err(|error| format!("the connection has no peer: {error}"))?;
        if !self.reach.admits(peer.ip()) {
            return Err(format!("connected to {}, which is not a public address", peer.ip()));
        }
        let timestamp = now_ms() / 1000;
        let signature = sign::signature(&key, &delivery.message, timestamp, &delivery.body);
        let request = request(&target, delivery, timestamp, &signature)?;
        if target.https {
            let name =
                ServerName::try_from(target.host.clone()).map_err(|_| format!("{} is no TLS name", target.host))?;
            let tls = self.tls.connect(name, tcp).await.map_err(|error| format!("TLS: {error}"))?;
            exchange(TokioIo::new(tls), request).await
        } else {
            exchange(TokioIo::new(tcp), request).await
        }
    }

    /// The attempt's row, and what it makes of the delivery (and, on `410 Gone`, of the
    /// webhook).
    fn record(&self, delivery: &Claimed, outcome: &Outcome, elapsed: Duration) -> Result<(), ApiError> {
        let db = self.db.get()?;
        db::transaction(&db, db::Tx::Write(&delivery.tenant), |db| {
            let (status, error) = match outcome {
                Outcome::Answered(status) => (Some(i64::from(*status)), None),
                Outcome::Failed(error) => (None, Some(error.as_str())),
            };
            attempted(db, delivery, status, error, elapsed)?;
            let now = now_ms();
            match outcome {
                Outcome::Answered(status) if (200..300).contains(status) => {
                    db.execute(
                        "UPDATE webhook_deliveries SET state = 'delivered', claimed_until_ms = 0
                         WHERE id = ?1 AND state = 'pending'",
                        params![delivery.id],
                    )?;
                    self.metrics.webhook_attempt("delivered");
                }
                Outcome::Answered(410) => {
                    let why = format!("disabled at {}: the endpoint answered 410 Gone", db::now());
                    db.execute(
                        "UPDATE webhooks SET enabled = 0, disabled = ?3 WHERE tenant = ?1 AND name = ?2",
                        params![&delivery.tenant, &delivery.webhook, &why],
                    )?;
                    let failed = db.execute(
                        "UPDATE webhook_deliveries SET state = 'failed', claimed_until_ms = 0
                         WHERE tenant = ?1 AND webhook = ?2 AND state = 'pending'",
                        params![&delivery.tenant, &delivery.webhook],
                    )?;
                    // This delivery and every other one pending for the webhook.
                    self.metrics.webhook_deliveries("failed", failed);
                    tracing::warn!(tenant = %delivery.tenant, webhook = %delivery.webhook, failed,
                        "webhook disabled: its endpoint answered 410 Gone");
                }
                _ => {
                    let next = now + self.schedule.backoff(delivery.attempts);
                    if next - delivery.created_ms > self.schedule.scaled(WINDOW) {
                        db.execute(
                            "UPDATE webhook_deliveries SET state = 'failed', claimed_until_ms = 0
                             WHERE id = ?1 AND state = 'pending'",
                            params![delivery.id],
                        )?;
                        self.metrics.webhook_attempt("failed");
                        tracing::warn!(tenant = %delivery.tenant, webhook = %delivery.webhook,
                            event = %delivery.message, attempts = delivery.attempts, outcome = %outcome,
                            "webhook delivery failed: no attempt was taken within its window");
                    } else {
                        db.execute(
                            "UPDATE webhook_deliveries SET next_ms = ?2, claimed_until_ms = 0
                             WHERE id = ?1 AND state = 'pending'",
                            params![delivery.id, next],
                        )?;
                        self.metrics.webhook_attempt("retried");
                        tracing::info!(tenant = %delivery.tenant, webhook = %delivery.webhook,
                            event = %delivery.message, attempt = delivery.attempts, outcome = %outcome,
                            "webhook delivery will be retried");
                    }
                }
            }
            Ok(())
        })
    }
}

/// How long the deliverer may sleep when the earliest pending delivery falls due at
/// `next_due`: until then, but at least [`POLL`] (what is due now is held back) and at
/// most [`IDLE`].
fn until_due(next_due: Option<i64>, now: i64) -> Duration {
    let Some(due) = next_due else { return IDLE };
    Duration::from_millis(u64::try_from(due - now).unwrap_or(0)).clamp(POLL, IDLE)
}

/// The delivery's row of attempt `delivery.attempts`.
fn attempted(
    db: &Conn,
    delivery: &Claimed,
    status: Option<i64>,
    error: Option<&str>,
    elapsed: Duration,
) -> Result<(), ApiError> {
    db.execute(
        "INSERT INTO webhook_attempts (delivery, attempt, tenant, webhook, at, status, error, duration_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            delivery.id,
            delivery.attempts,
            &delivery.tenant,
            &delivery.webhook,
            &db::now(),
            status,
            error,
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX),
        ],
    )?;
    Ok(())
}

/// Fails a pending delivery at once, saying why, as an attempt of its own.
pub(super) fn fail(db: &Conn, id: i64, tenant: &str, webhook: &str, why: &str) -> Result<(), ApiError> {
    let attempts: i64 = db.query_one(
        "UPDATE webhook_deliveries SET state = 'failed', claimed_until_ms = 0, attempts = attempts + 1
         WHERE id = ?1 RETURNING attempts",
        params![id],
        |row| row.get(0),
    )?;
    db.execute(
        "INSERT INTO webhook_attempts (delivery, attempt, tenant, webhook, at, status, error, duration_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, NULL, ?6, 0)",
        params![id, attempts, tenant, webhook, &db::now(), why],
    )?;
    Ok(())
}

/// A connection to the first of `addresses` that answers.
async fn connect(addresses: &[SocketAddr]) -> Result<TcpStream, String> {
    let mut last = String::from("no address");
    for address in addresses {
        match TcpStream::connect(address).await {
            Ok(stream) => return Ok(stream),
            Err(error) => last = format!("connecting to {address}: {error}"),
        }
    }
    Err(last)
}

/// The delivery's request, signed at `timestamp` (the signature covers it).
fn request(
    target: &Target,
    delivery: &Claimed,
    timestamp: i64,
    signature: &str,
) -> Result<Request<Full<Bytes>>, String> {
    let path = target.uri.path_and_query().map_or("/", |path| path.as_str());
    let host = target.uri.authority().map_or(target.host.as_str(), |authority| authority.as_str());
    Request::post(path)
        .header(HOST, host)
        .header(CONTENT_TYPE, "application/json")
        .header(USER_AGENT, concat!("fleet-webhooks/", env!("CARGO_PKG_VERSION")))
        .header("webhook-id", &delivery.message)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(Full::new(Bytes::from(delivery.body.clone())))
        .map_err(|error| format!("the request cannot be made: {error}"))
}

/// One HTTP/1.1 exchange on `io`: the answer's status, once at most [`READ_LIMIT`] of
/// its body was read. Redirects are answers like any other (not followed).
async fn exchange<I>(io: I, request: Request<Full<Bytes>>) -> Result<u16, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(io).await.map_err(|error| format!("HTTP: {error}"))?;
    let exchange = async move {
        let response = sender.send_request(request).await.map_err(|error| format!("HTTP: {error}"))?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut read = 0;
        while read < READ_LIMIT {
            match body.frame().await {
                Some(Ok(frame)) => read += frame.data_ref().map_or(0, Bytes::len),
                Some(Err(_)) | None => break,
            }
        }
        Ok(status)
    };
    tokio::pin!(connection, exchange);
    tokio::select! {
        biased;
        answered = &mut exchange => answered,
        // The connection ended (the receiver closed it): the exchange ends with it.
        _ = &mut connection => exchange.await,
    }
}
