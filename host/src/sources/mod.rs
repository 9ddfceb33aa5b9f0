//! Git sources (SPEC §20.3): a tenant's document pulled from a repository's branch and
//! planned, proposed or applied by a cycle — `git` reaches the repository, `signature`
//! tells who signed a commit, `source` reads and keeps the source, `methods` serves
//! `compute.sources.*`, and `cycle` is one cycle, which the [`Runner`] runs for every
//! due source once among the replicas (claimed in the database, as drift checks are)
//! and for the methods that ask for one now; `hook` brings a source's next cycle
//! forward when its inbound hook is called.

pub mod cycle;
pub mod git;
pub mod hook;
mod methods;
pub mod signature;
pub mod source;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::api::{ApiError, Code};
use crate::calls::Dispatcher;
use crate::db::{self, params};
use crate::events::Wake;
use crate::secrets::Key;
pub use cycle::Ask;
use cycle::Cycles;
pub use methods::register;

/// How often a replica looks for due sources: a hook's refresh waits at most this long
/// past its time.
const POLL: Duration = Duration::from_secs(1);

/// How long a claim on a source's cycle lasts unless its holder renews it, which it does
/// every third of it while the cycle runs: a replica that died lets another run the
/// source's next cycle within this long.
const LEASE: Duration = Duration::from_secs(15);

/// A request to run one tenant's cycle now, or to plan as its source would, and where
/// its answer goes.
struct Asked {
    tenant: String,
    job: Job,
    answer: oneshot::Sender<Result<Value, ApiError>>,
}

enum Job {
    Cycle(Ask),
    Plan { document: Option<Value>, commit: Option<String> },
}

/// What the methods ask the runner through: a cycle now (`refresh`, `sync`).
#[derive(Clone)]
pub struct Asking(mpsc::Sender<Asked>);

/// Where the runner receives what [`Asking`] asks.
pub struct Asks(mpsc::Receiver<Asked>);

pub fn asking() -> (Asking, Asks) {
    let (sender, receiver) = mpsc::channel(64);
    (Asking(sender), Asks(receiver))
}

impl Asking {
    /// Runs `tenant`'s cycle now and answers its source afterwards. Called on a
    /// blocking thread: it waits for the runner.
    pub fn cycle_now(&self, tenant: &str, ask: Ask) -> Result<Value, ApiError> {
        self.ask(tenant, Job::Cycle(ask))
    }

    /// The plan the tenant's source would apply, of `document` or of the document at
    /// `commit` (the head when neither is given). Called on a blocking thread.
    pub fn plan_now(&self, tenant: &str, document: Option<Value>, commit: Option<String>) -> Result<Value, ApiError> {
        self.ask(tenant, Job::Plan { document, commit })
    }

    fn ask(&self, tenant: &str, job: Job) -> Result<Value, ApiError> {
        let stopped = || ApiError::new(Code::Unavailable, "the sources' runner is not running; try again shortly");
        let (answer, answered) = oneshot::channel();
        self.0.blocking_send(Asked { tenant: tenant.to_owned(), job, answer }).map_err(|_| stopped())?;
        answered.blocking_recv().map_err(|_| stopped())?
    }
}

/// Runs the sources' cycles: every due one once among the replicas on the database, and
/// those the methods ask for now.
pub struct Runner {
    dispatcher: Arc<Dispatcher>,
    git: Arc<git::Git>,
    key: Option<Key>,
    wake: Wake,
    /// Who holds a claim: this process on this host.
    replica: String,
}

impl Runner {
    pub fn new(dispatcher: Arc<Dispatcher>, git: Arc<git::Git>, key: Option<Key>, wake: Wake) -> Runner {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_else(|_| "localhost".into());
        let replica = format!("{}:{}", host.trim(), std::process::id());
        Runner { dispatcher, git, key, wake, replica }
    }

    /// Polls for due sources and serves what is asked, until `shutdown` resolves.
    pub async fn run(self: Arc<Self>, asks: Asks, shutdown: impl std::future::Future<Output = ()>) {
        let mut poll = tokio::time::interval(POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut asks = asks.0;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = poll.tick() => {
                    let runner = self.clone();
                    match tokio::task::spawn_blocking(move || runner.run_due()).await {
                        Ok(Ok(())) => {}
                        Ok(Err(error)) => tracing::error!(%error, "the sources' runner could not claim its cycles"),
                        Err(error) => tracing::error!(%error, "a source's cycle panicked"),
                    }
                }
                Some(asked) = asks.recv() => {
                    let runner = self.clone();
                    tokio::task::spawn_blocking(move || {
                        let answer = match asked.job {
                            Job::Cycle(ask) => runner.cycle_now(&asked.tenant, &ask),
                            Job::Plan { document, commit } => runner.plan(&asked.tenant, document, commit),
                        };
                        let _ = asked.answer.send(answer);
                    });
                }
                () = &mut shutdown => return,
            }
        }
    }

    /// Claims the due sources one at a time and runs each one's cycle.
    fn run_due(&self) -> Result<(), ApiError> {
        while let Some(claimed) = self.claim(None)? {
            let tenant = claimed.tenant.clone();
            if let Err(error) = self.cycle(claimed, &Ask::Due) {
                tracing::error!(%tenant, %error, "a source's cycle failed");
            }
        }
        Ok(())
    }

    /// A cycle asked for now: claimed first, waiting a little for one another replica
    /// runs; the source as it is afterwards.
    pub fn cycle_now(&self, tenant: &str, ask: &Ask) -> Result<Value, ApiError> {
        let mut waited = Duration::ZERO;
        let claimed = loop {
            if let Some(claimed) = self.claim(Some(tenant))? {
                break claimed;
            }
            if source::stored(&self.dispatcher.db().get()?, tenant)?.is_none() {
                return Err(no_source());
            }
            if waited >= Duration::from_secs(30) {
                return Err(ApiError::new(
                    Code::Unavailable,
                    "another cycle of the source is running; try again shortly",
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
            waited += Duration::from_millis(200);
        };
        self.cycle(claimed, ask)?;
        let stored = source::stored(&self.dispatcher.db().get()?, tenant)?.ok_or_else(no_source)?;
        Ok(serde_json::json!({"source": stored.json()}))
    }

    /// What the source would apply; claims nothing, changes nothing.
    fn plan(&self, tenant: &str, document: Option<Value>, commit: Option<String>) -> Result<Value, ApiError> {
        let stored = source::stored(&self.dispatcher.db().get()?, tenant)?.ok_or_else(no_source)?;
        self.cycles().plan(&stored, document, commit)
    }

    fn cycles(&self) -> Cycles<'_> {
        Cycles { git: &self.git, dispatcher: &self.dispatcher, key: self.key.as_ref(), wake: &self.wake }
    }

    /// One claimed cycle, its claim renewed while it runs; the claim ends with it, the
    /// source due again an interval on.
    fn cycle(&self, claimed: Claimed, ask: &Ask) -> Result<(), ApiError> {
        let renewal = Renewal::start(self.dispatcher.clone(), &claimed.tenant, &self.replica);
        let ran = self.claimed_cycle(&claimed, ask);
        drop(renewal);
        ran
    }

    fn claimed_cycle(&self, claimed: &Claimed, ask: &Ask) -> Result<(), ApiError> {
        let tenant = claimed.tenant.as_str();
        let db = self.dispatcher.db().get()?;
        let stored = source::stored(&db, tenant)?;
        drop(db);
        let ran = match &stored {
            Some(stored) => self.cycles().run(stored, ask).map(|_| ()),
            None => Ok(()),
        };
        let interval = stored.as_ref().map_or(0, |stored| stored.interval_ms);
        // A tenth of the interval of jitter, so that sources put together spread out.
        let jitter = rand::random_range(0..=interval / 10);
        let due = now_ms().saturating_add(interval).saturating_add(jitter);
        // A hook, pin or unpin that came during the cycle (`due_ms` set after the claim)
        // keeps its refresh.
        self.dispatcher.db().get()?.execute(
            "UPDATE sources SET holder = NULL, claimed_until_ms = NULL,
               due_ms = CASE WHEN due_ms > ?4 AND due_ms < ?3 THEN due_ms ELSE ?3 END
             WHERE tenant = ?1 AND holder = ?2",
            params![tenant, &self.replica, due, claimed.at_ms],
        )?;
        ran
    }

    /// Claims one due source (or `tenant`'s, due or not) for a lease: one statement, so
    /// that of the replicas that poll together exactly one claims it.
    fn claim(&self, tenant: Option<&str>) -> Result<Option<Claimed>, ApiError> {
        let db = self.dispatcher.db().get()?;
        let now = now_ms();
        let until = lease_from(now);
        let free = "(claimed_until_ms IS NULL OR claimed_until_ms <= ?2)";
        let sql = match (tenant, db.backend()) {
            (Some(_), _) => format!(
                "UPDATE sources SET holder = ?1, claimed_until_ms = ?3,
                   due_ms = CASE WHEN due_ms > ?2 THEN ?2 ELSE due_ms END
                 WHERE tenant = ?4 AND {free} RETURNING tenant"
            ),
            (None, db::Backend::Postgres) => format!(
                "WITH due AS MATERIALIZED (SELECT tenant FROM sources WHERE due_ms <= ?2 AND {free}
                   ORDER BY due_ms, tenant LIMIT 1 FOR UPDATE SKIP LOCKED)
                 UPDATE sources SET holder = ?1, claimed_until_ms = ?3 FROM due
                 WHERE sources.tenant = due.tenant AND due_ms <= ?2 AND {free} RETURNING sources.tenant"
            ),
            (None, db::Backend::Sqlite) => format!(
                "UPDATE sources SET holder = ?1, claimed_until_ms = ?3
                 WHERE tenant = (SELECT tenant FROM sources WHERE due_ms <= ?2 AND {free} ORDER BY due_ms, tenant LIMIT 1)
                   AND due_ms <= ?2 AND {free} RETURNING tenant"
            ),
        };
        let claimed: Option<String> = match tenant {
            Some(tenant) => db.query_opt(&sql, params![&self.replica, now, until, tenant], |row| row.get(0))?,
            None => db.query_opt(&sql, params![&self.replica, now, until], |row| row.get(0))?,
        };
        Ok(claimed.map(|tenant| Claimed { tenant, at_ms: now }))
    }
}

/// A source's cycle this replica claimed, and when.
struct Claimed {
    tenant: String,
    at_ms: i64,
}

/// The end of a lease that begins at `now_ms`.
fn lease_from(now_ms: i64) -> i64 {
    now_ms.saturating_add(i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX))
}

/// Renews a claim every third of its lease, on a thread of its own, until dropped.
struct Renewal {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Renewal {
    fn start(dispatcher: Arc<Dispatcher>, tenant: &str, replica: &str) -> Renewal {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let (tenant, replica) = (tenant.to_owned(), replica.to_owned());
        let renew = move || -> Result<(), ApiError> {
            dispatcher.db().get()?.execute(
                "UPDATE sources SET claimed_until_ms = ?3 WHERE tenant = ?1 AND holder = ?2",
                params![&tenant, &replica, lease_from(now_ms())],
            )?;
            Ok(())
        };
        let thread = std::thread::Builder::new().name("source-lease".into()).spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(LEASE / 3) {
                if let Err(error) = renew() {
                    tracing::warn!(%error, "a source's claim could not be renewed; another replica may take it");
                }
            }
        });
        match thread {
            Ok(thread) => Renewal { stop: Some(stop), thread: Some(thread) },
            Err(error) => {
                tracing::warn!(%error, "a source's claim is not renewed: no thread for it");
                Renewal { stop: None, thread: None }
            }
        }
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn no_source() -> ApiError {
    ApiError::not_found("the tenant has no source; put one with compute.sources.put")
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    crate::fleet::drift::now_ms()
}
