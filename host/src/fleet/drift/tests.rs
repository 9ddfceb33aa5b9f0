//! The reconciler: its pure transition and schedule, checks of a batch, replicas sharing
//! the checks, and heals, in paused time where the schedule runs.

use serde_json::json;

use super::*;
use crate::app::Core;
use crate::calls::context::{Ctx, Via};
use crate::testing::Database;

#[test]
fn a_check_a_poll_late_keeps_its_cadence_and_a_later_one_starts_again_from_now() {
    assert_eq!(next_due(10_000, 10_000, 10_000), 20_000, "on time");
    assert_eq!(next_due(10_000, 12_500, 10_000), 20_000, "a poll late: still due at 20 s");
    assert_eq!(next_due(10_000, 12_501, 10_000), 22_501, "later: one interval from now");
    assert_eq!(next_due(10_000, 25_000, 10_000), 35_000, "more than an interval late: from now");
}

#[test]
fn only_a_change_of_answer_publishes() {
    assert_eq!(transition(None, None), None);
    assert_eq!(transition(None, Some("sha256:a")), Some(events::DRIFTED));
    assert_eq!(transition(Some("sha256:a"), Some("sha256:a")), None);
    assert_eq!(transition(Some("sha256:a"), Some("sha256:b")), Some(events::DRIFTED));
    assert_eq!(transition(Some("sha256:a"), None), Some(events::CONVERGED));
}

/// The parts of a deployment whose checks run every `drift_interval`, on a database
/// of their own.
struct Fixture {
    core: Core,
    database: Database,
}

fn fixture(drift_interval: Duration) -> Fixture {
    let database = Database::new();
    let core = database.core(|config| config.drift_interval = drift_interval);
    Fixture { core, database }
}

fn caller(tenant: &str) -> Caller {
    Caller {
        tenant: tenant.into(),
        principal: "alice".into(),
        grants: vec![Grant::parse("compute:*:*@*").unwrap()],
        token: None,
        git_source: None,
    }
}

fn document() -> Value {
    json!({"sites": {"eu-west": {"region": "eu-west-1"}},
           "providerAccounts": {"aws": {"provider": "aws"}},
           "pools": {"gpu-a": {"site": "eu-west", "account": "aws", "class": "gpu", "owner": "team-ml", "gpus": 8}}})
}

impl Fixture {
    fn tenant_with_applied_document(&self, tenant: &str) {
        let _ = crate::calls::auth::create_tenant(&self.database.conn(), tenant, "2026-11-30T00:00:00Z");
        let body = json!({"document": document()}).to_string();
        self.core.dispatcher.run_named(caller(tenant), "compute.fleet.apply", body.as_bytes()).unwrap();
    }

    fn call(&self, tenant: &str, method: &str, input: Value) -> Value {
        let db = self.database.conn();
        let caller = caller(tenant);
        let method = self.core.dispatcher.registry().by_name(method).unwrap();
        let output = db::transaction(&db, Tx::Write(tenant), |db| {
            method.run_in(&Ctx { caller: &caller, db, via: Via::Api }, input)
        })
        .unwrap();
        serde_json::from_str(&output).unwrap()
    }

    fn check_all(&self) -> Vec<(String, Outcome)> {
        self.core.reconciler.check_all()
    }

    /// The reconciler running, until the sender is dropped or sends.
    fn run(&self) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let asking = self.core.take_asking().expect("the reconciler runs once");
        let reconciler = tokio::spawn(self.core.reconciler.clone().run(asking, async move {
            let _ = stopped.await;
        }));
        (stop, reconciler)
    }

    fn set_gpus(&self, tenant: &str, gpus: u64) {
        let pool = self.call(tenant, "compute.pools.list", json!({}))["items"][0]["id"].clone();
        self.call(tenant, "compute.pools.update", json!({"id": pool, "gpus": gpus}));
    }

    /// The tenant's events but its applies' own (`fleet.applied`): what the checks said.
    fn event_types(&self, tenant: &str) -> Vec<String> {
        let events = self.call(tenant, "compute.events.list", json!({}));
        let types = events["events"].as_array().unwrap().iter().map(|event| event["type"].as_str().unwrap().to_owned());
        types.filter(|kind| kind != "fleet.applied").collect()
    }
}

#[test]
fn checks_publish_once_per_change_of_answer() {
    let fixture = fixture(Duration::from_secs(900));
    fixture.tenant_with_applied_document("acme");
    assert_eq!(fixture.check_all(), [("acme".to_owned(), Outcome::Converged)]);
    assert!(fixture.event_types("acme").is_empty());

    fixture.set_gpus("acme", 4);
    let outcome = fixture.check_all();
    assert!(matches!(&outcome[0].1, Outcome::Drifted { .. }), "{outcome:?}");
    assert_eq!(fixture.check_all(), outcome, "the same drift again");
    assert_eq!(fixture.event_types("acme"), ["fleet.drifted"]);

    // Drift is identified by its plan hash, which covers the values the correction
    // changes from: the same value again is the same drift, a new one another.
    fixture.set_gpus("acme", 4);
    fixture.check_all();
    assert_eq!(fixture.event_types("acme"), ["fleet.drifted"], "the same value");
    fixture.set_gpus("acme", 2);
    fixture.check_all();
    assert_eq!(fixture.event_types("acme"), ["fleet.drifted"; 2], "the value moved again");
    let pool = fixture.call("acme", "compute.pools.list", json!({}))["items"][0]["id"].clone();
    fixture.call("acme", "compute.pools.update", json!({"id": pool, "vcpus": 3}));
    fixture.check_all();
    assert_eq!(fixture.event_types("acme"), ["fleet.drifted"; 3], "another field drifted");

    fixture.set_gpus("acme", 8);
    fixture.call("acme", "compute.pools.update", json!({"id": pool, "vcpus": 0}));
    assert_eq!(fixture.check_all(), [("acme".to_owned(), Outcome::Converged)]);
    assert_eq!(fixture.event_types("acme"), ["fleet.drifted", "fleet.drifted", "fleet.drifted", "fleet.converged"]);
}

impl Fixture {
    /// A token of `tenant` for `alice` with `grants`, and the caller it makes.
    fn token(&self, tenant: &str, grants: &[&str]) -> Caller {
        let db = self.database.conn();
        let grants: Vec<String> = grants.iter().map(|grant| (*grant).to_owned()).collect();
        let secret = crate::calls::auth::create_token(&db, tenant, "alice", &grants, &db::now(), None).unwrap();
        crate::calls::auth::authenticate_with(&db, Some(&format!("Bearer {secret}")), None).unwrap()
    }

    /// Applies the fixture's document as `caller`, asking for heal.
    fn apply_healing(&self, caller: Caller, heal: bool) {
        let body = json!({"document": document(), "heal": heal}).to_string();
        self.core.dispatcher.run_named(caller, "compute.fleet.apply", body.as_bytes()).unwrap();
    }

    fn gpus(&self, tenant: &str) -> u64 {
        self.call(tenant, "compute.pools.list", json!({}))["items"][0]["gpus"].as_u64().unwrap()
    }

    fn last_event(&self, tenant: &str) -> Value {
        let events = self.call(tenant, "compute.events.list", json!({}));
        events["events"].as_array().unwrap().last().cloned().unwrap_or(Value::Null)
    }

    /// The tenant's last event of type `kind`.
    fn last_of(&self, tenant: &str, kind: &str) -> Value {
        let events = self.call(tenant, "compute.events.list", json!({}));
        let mut events = events["events"].as_array().unwrap().iter().rev();
        events.find(|event| event["type"] == kind).cloned().unwrap_or(Value::Null)
    }

    fn status(&self, tenant: &str) -> Value {
        let status = self.core.dispatcher.run_named(caller(tenant), "compute.fleet.status", b"{}").unwrap();
        serde_json::from_str(&status).unwrap()
    }
}

const EVERY: &str = "compute:*:* @ *";

/// SPEC §15 in paused time: a revision that heals is applied again by the reconciler
/// when its check finds drift, audited as a heal, and the tenant is converged.
#[tokio::test(start_paused = true)]
async fn a_revision_that_heals_is_restored_when_its_check_finds_drift() {
    let interval = Duration::from_secs(15 * 60);
    let fixture = fixture(interval);
    let _ = crate::calls::auth::create_tenant(&fixture.database.conn(), "acme", &db::now());
    fixture.apply_healing(fixture.token("acme", &[EVERY]), true);
    assert_eq!(fixture.status("acme")["applied"]["heal"], true);
    fixture.set_gpus("acme", 1);
    let (stop, reconciler) = fixture.run();

    tokio::time::sleep(interval + Duration::from_secs(1)).await;
    events_reach(&fixture, "acme", 2).await;
    // The drift is told, with who made it, and then its heal; the heal's apply says so.
    assert_eq!(fixture.event_types("acme"), ["fleet.drifted", "fleet.healed"]);
    let drifted = fixture.last_of("acme", "fleet.drifted");
    assert_eq!(drifted["data"]["changes"][0]["changedBy"], "alice", "{drifted}");
    let healed = fixture.last_of("acme", "fleet.healed");
    assert_eq!((healed["data"]["revision"].as_i64(), healed["data"]["calls"].as_u64()), (Some(1), Some(1)));
    assert_eq!(fixture.last_of("acme", "fleet.applied")["data"]["via"], "fleet.heal");
    assert_eq!(fixture.gpus("acme"), 8, "the revision's value again");
    let status = fixture.status("acme");
    assert!(status.get("drift").is_none(), "{status}");
    assert_eq!(status["applied"]["revision"], 1, "a heal restores the revision, it makes no new one");
    assert_eq!(status["applied"]["lastHeal"]["calls"], 1, "{status}");
    let audit = fixture.call("acme", "compute.audit.list", json!({}));
    let last = audit["records"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["via"].as_str(), last["method"].as_str()), (Some("fleet.heal"), Some("compute.pools.update")));
    assert_eq!(last["planHash"], healed["data"]["planHash"]);

    // Converged: the next check finds nothing to do and says nothing.
    tokio::time::sleep(interval + Duration::from_secs(1)).await;
    let checked = fixture.status("acme")["checkedAt"].clone();
    let started = std::time::Instant::now();
    while fixture.status("acme")["checkedAt"] == checked && started.elapsed() < Duration::from_secs(30) {
        tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(10))).await.unwrap();
    }
    assert_eq!(fixture.event_types("acme"), ["fleet.drifted", "fleet.healed"]);
    assert!(fixture.status("acme").get("drift").is_none());
    let _ = stop.send(());
    reconciler.await.unwrap();
}

/// Waits, in paused time, for `tenant`'s events to number `count`: checks run on
/// blocking threads in real time.
async fn events_reach(fixture: &Fixture, tenant: &str, count: usize) {
    let started = std::time::Instant::now();
    while fixture.event_types(tenant).len() < count && started.elapsed() < Duration::from_secs(30) {
        tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(10))).await.unwrap();
    }
}

/// In paused time: a heal the token that asked for it can no longer make, or the
/// policies in force deny, is refused; the drift is recorded with why, nothing
/// changes, and the same refusal is not announced again at the next check.
#[tokio::test(start_paused = true)]
async fn a_heal_is_refused_when_its_token_or_the_policies_do_not_allow_it() {
    let interval = Duration::from_secs(15 * 60);
    let fixture = fixture(interval);
    let db = fixture.database.conn();
    let cases: [(&str, &[&str], &str); 4] = [
        ("revoked", &[EVERY], "was revoked"),
        ("expired", &[EVERY], "expired at 2001-01-01T00:00:00Z"),
        ("narrow", &["compute:fleet:admin @ compute-fleet"], "not permitted: compute:pools:write @ compute-pools"),
        ("denied", &[EVERY], "policy no-updates: updates wait for the change window"),
    ];
    for (tenant, grants, _) in cases {
        crate::calls::auth::create_tenant(&db, tenant, &db::now()).unwrap();
        // Everything made with every grant first, so that only the heal needs more.
        fixture.apply_healing(caller(tenant), false);
        let token = fixture.token(tenant, grants);
        let id = token.token.clone().unwrap();
        fixture.apply_healing(token, true);
        match tenant {
            "revoked" => crate::calls::auth::revoke_token(&db, &id, &db::now()).unwrap(),
            "expired" => {
                db.execute("UPDATE tokens SET expires_at = '2001-01-01T00:00:00Z' WHERE id = ?1", params![&id])
                    .unwrap();
            }
            "denied" => {
                let source = "package window\n\ndeny contains \"updates wait for the change window\" if {\n\tsome change in input.changes\n\tchange.action == \"update\"\n}\n";
                let policy = json!({"name": "no-updates", "level": "enforced", "source": source});
                fixture.call(tenant, "compute.policies.put", policy);
            }
            _ => {}
        }
        fixture.set_gpus(tenant, 1);
    }
    let (stop, reconciler) = fixture.run();
    for round in 1..=2 {
        tokio::time::sleep(interval + Duration::from_secs(1)).await;
        for (tenant, _, why) in cases {
            events_reach(&fixture, tenant, 1).await;
            assert_eq!(fixture.event_types(tenant), ["fleet.drifted"], "{tenant}, check {round}");
            let error = fixture.last_event(tenant)["data"]["healError"].as_str().unwrap_or_default().to_owned();
            assert!(error.contains(why), "{tenant}: {error}");
            assert_eq!(fixture.gpus(tenant), 1, "{tenant}: nothing healed");
        }
    }

    // An apply without heal turns it off: drift is reported, not healed.
    fixture.apply_healing(fixture.token("revoked", &[EVERY]), false);
    assert_eq!(fixture.status("revoked")["applied"]["heal"], false);
    fixture.set_gpus("revoked", 2);
    tokio::time::sleep(interval + Duration::from_secs(1)).await;
    events_reach(&fixture, "revoked", 3).await;
    let event = fixture.last_event("revoked");
    assert_eq!(event["type"], "fleet.drifted");
    assert!(event["data"].get("healError").is_none(), "{event}");
    assert_eq!(fixture.gpus("revoked"), 2);
    let _ = stop.send(());
    reconciler.await.unwrap();
}

#[test]
fn one_tenants_failure_does_not_stop_the_others() {
    let fixture = fixture(Duration::from_secs(900));
    fixture.tenant_with_applied_document("broken");
    fixture.tenant_with_applied_document("healthy");
    let db = fixture.database.conn();
    db.execute("UPDATE fleet_applied SET document = 'not json' WHERE tenant = 'broken'", &[]).unwrap();
    fixture.set_gpus("healthy", 1);
    let outcomes = fixture.check_all();
    assert!(matches!(&outcomes[0], (tenant, Outcome::Failed(_)) if tenant == "broken"), "{outcomes:?}");
    assert!(matches!(&outcomes[1], (tenant, Outcome::Drifted { .. }) if tenant == "healthy"), "{outcomes:?}");
    assert_eq!(fixture.event_types("healthy"), ["fleet.drifted"]);
}

/// Two replicas on one database share the checks: each tenant due is checked by
/// exactly one of them, once, and both do some of the work.
#[test]
fn replicas_share_the_due_checks_and_check_each_tenant_once() {
    let fixture = fixture(Duration::from_secs(900));
    let tenants: Vec<String> = (0..48).map(|n| format!("t{n:02}")).collect();
    for tenant in &tenants {
        fixture.tenant_with_applied_document(tenant);
    }
    let other = Reconciler::new(fixture.core.planning.clone(), fixture.core.dispatcher.clone()).named("other:1");
    let interval = 900_000;
    let due = now_ms() + interval;
    let counts: Vec<usize> = std::thread::scope(|scope| {
        let replicas = [fixture.core.reconciler.as_ref(), &other]
            .map(|reconciler| scope.spawn(move || reconciler.activate(due).unwrap().checked));
        replicas.map(|replica| replica.join().unwrap()).into()
    });
    assert_eq!(counts.iter().sum::<usize>(), tenants.len(), "{counts:?}");
    assert!(counts.iter().all(|&count| count > 0), "both replicas checked some: {counts:?}");
    let db = fixture.database.conn();
    let scheduled: Vec<(String, i64, Option<i64>)> = db
        .query("SELECT tenant, due_at, claimed_until FROM drift_schedule ORDER BY tenant", &[], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .unwrap();
    assert_eq!(scheduled.iter().map(|(tenant, _, _)| tenant).collect::<Vec<_>>(), tenants.iter().collect::<Vec<_>>());
    for (tenant, due_at, claimed_until) in scheduled {
        assert_eq!(claimed_until, None, "{tenant}: no claim left in flight");
        assert!(due_at > due && due_at <= due + interval, "{tenant} is due once more, an interval on: {due_at}");
    }
    // Nothing is due now: another poll claims nothing.
    assert_eq!(fixture.core.reconciler.activate(due).unwrap().checked, 0);
}

/// One claimed batch holds every kind of check: a quiet one (recorded with the
/// batch), one that finds drift, one that ends a recorded drift, and a tenant that
/// never applied. Each publishes what it should, and every claim ends.
#[test]
fn a_batch_of_checks_records_each_answer() {
    let fixture = fixture(Duration::from_secs(900));
    for tenant in ["quiet", "drifting", "recovering"] {
        fixture.tenant_with_applied_document(tenant);
    }
    fixture.set_gpus("recovering", 1);
    assert!(matches!(fixture.core.reconciler.check_tenant("recovering").unwrap(), Some(Outcome::Drifted { .. })));
    fixture.set_gpus("recovering", 8);
    fixture.set_gpus("drifting", 2);
    let db = fixture.database.conn();
    crate::calls::auth::create_tenant(&db, "never-applied", "2026-11-30T00:00:00Z").unwrap();
    db.execute("INSERT INTO drift_schedule (tenant, due_at) VALUES ('never-applied', 0)", &[]).unwrap();
    let checked_at = |tenant: &str| -> Option<String> {
        db.query_one("SELECT checked_at FROM fleet_applied WHERE tenant = ?1", params![tenant], |row| row.get(0))
            .unwrap()
    };
    db.execute("UPDATE fleet_applied SET checked_at = '2026-01-01T00:00:00Z' WHERE tenant = 'quiet'", &[]).unwrap();

    let interval = 900_000;
    let due = now_ms() + interval;
    assert_eq!(fixture.core.reconciler.activate(due).unwrap().checked, 4);
    assert!(fixture.event_types("quiet").is_empty());
    assert_eq!(fixture.event_types("drifting"), ["fleet.drifted"]);
    assert_eq!(fixture.event_types("recovering"), ["fleet.drifted", "fleet.converged"]);
    assert_ne!(checked_at("quiet").as_deref(), Some("2026-01-01T00:00:00Z"), "the quiet check's time is recorded");
    let open: i64 = db
        .query_one(
            "SELECT COUNT(*) FROM drift_schedule WHERE claimed_until IS NOT NULL OR due_at <= ?1",
            params![due],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(open, 0, "every claim ended, each due an interval on");
    assert_eq!(fixture.core.reconciler.activate(due).unwrap().checked, 0);
}

/// The checks a replica claimed and never finished (it died) are taken by another
/// once the claim lapses, not before.
#[test]
fn a_dead_replicas_claims_are_taken_over_when_they_lapse() {
    let fixture = fixture(Duration::from_secs(900));
    fixture.tenant_with_applied_document("acme");
    let interval = 900_000;
    let due = now_ms() + interval;
    let db = fixture.database.conn();
    db.execute(
        "UPDATE drift_schedule SET holder = 'dead:1', claimed_until = ?1 WHERE tenant = 'acme'",
        params![due + 1000],
    )
    .unwrap();
    assert_eq!(fixture.core.reconciler.activate(due).unwrap().checked, 0, "the claim still holds");
    assert_eq!(fixture.core.reconciler.activate(due + 1000).unwrap().checked, 1, "the claim lapsed");
}

/// The schedule, in paused time: nothing before the first interval, a check after it.
#[tokio::test(start_paused = true)]
async fn checks_run_every_interval() {
    let interval = Duration::from_secs(15 * 60);
    let fixture = fixture(interval);
    fixture.tenant_with_applied_document("acme");
    fixture.set_gpus("acme", 1);
    let (stop, reconciler) = fixture.run();

    tokio::time::sleep(interval - Duration::from_secs(60)).await;
    assert!(fixture.event_types("acme").is_empty(), "no check before the interval");

    tokio::time::sleep(Duration::from_secs(61)).await;
    // The check itself runs on a blocking thread in real time.
    let started = std::time::Instant::now();
    while fixture.event_types("acme").is_empty() && started.elapsed() < Duration::from_secs(30) {
        tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(10))).await.unwrap();
    }
    assert_eq!(fixture.event_types("acme"), ["fleet.drifted"]);
    let _ = stop.send(());
    reconciler.await.unwrap();
}
