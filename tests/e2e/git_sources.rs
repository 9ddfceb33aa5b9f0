//! Git sources (SPEC §20.3) against a real git server on 127.0.0.1: `git daemon`, and
//! `git http-backend` behind a token. Every state of the status, every mode, a force
//! push, a deleted path, signed and unsigned commits, pinning, a stalled server and a
//! repository over the byte limit, and the addresses a source may not reach.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fleet::{estate, large_estate};
use crate::support::git::{Daemon, Http, Repo, Stalled};
use crate::support::{Server, code, eventually, problem_paths};

/// A server whose sources may reach 127.0.0.1 over any transport, fetching into a cache
/// of its own, within `timeout` and `max_bytes`.
fn server_with(timeout: &str, max_bytes: &str) -> Server {
    server_flags(&["--git-timeout", timeout, "--git-max-bytes", max_bytes])
}

/// A server as [`server_with`] says, with `more` flags.
fn server_flags(more: &[&str]) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("git-cache");
    let mut flags = vec!["--git-allow-insecure", "--git-allow", "127.0.0.0/8", "--git-cache", cache.to_str().unwrap()];
    flags.extend_from_slice(more);
    Server::start_in(dir, &flags)
}

fn server() -> Server {
    server_with("20s", "268435456")
}

fn yaml(document: &Value) -> String {
    serde_yaml_ng::to_string(document).unwrap()
}

/// The estate with pool gpu-a's GPUs at `gpus`.
fn estate_with(gpus: u64) -> Value {
    let mut document = estate();
    document["pools"]["gpu-a"]["gpus"] = json!(gpus);
    document
}

fn put(server: &Server, token: &str, url: &str, mode: &str, more: Value) -> Value {
    let mut body = json!({"url": url, "path": "fleet", "mode": mode});
    body.as_object_mut().unwrap().extend(more.as_object().unwrap().clone());
    server.ok(token, "sources/put", body)
}

fn refresh(server: &Server, token: &str) -> Value {
    server.ok(token, "sources/refresh", json!({}))["source"].clone()
}

/// Pool gpu-a's GPUs in the estate, if it has the pool.
fn gpus(server: &Server, token: &str) -> Option<u64> {
    server.ok(token, "fleet/export", json!({}))["document"]["pools"]["gpu-a"]["gpus"].as_u64()
}

fn revisions(server: &Server, token: &str) -> Vec<Value> {
    server.ok(token, "fleet/history", json!({}))["revisions"].as_array().unwrap().clone()
}

#[test]
fn auto_applies_each_new_commit_once_and_records_where_it_came_from() {
    let server = server();
    let acme = server.tenant_with_token("acme");
    let repo = Repo::new();
    let first = repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate_with(64))))], &[]);
    let daemon = Daemon::serve(&repo.root());

    let answer = put(&server, &acme, &daemon.url(), "auto", json!({}));
    assert!(answer["hookSecret"].as_str().unwrap().starts_with("whsec_"), "{answer}");
    assert_eq!(answer["source"]["credential"], json!(false));
    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "synced", "{source}");
    assert_eq!(source["status"]["headCommit"], first.as_str());
    assert_eq!(source["status"]["appliedCommit"], first.as_str());
    assert_eq!(gpus(&server, &acme), Some(64));
    let history = revisions(&server, &acme);
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["source"]["commit"], first.as_str(), "{history:?}");
    assert_eq!(history[0]["source"]["repo"], daemon.url().as_str());
    assert_eq!(source["status"]["appliedRevision"], history[0]["revision"]);

    // A new commit that changes the document is applied; one that leaves it alone (a
    // file beside it) makes no revision.
    let second = repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate_with(48))))], &[]);
    let source = refresh(&server, &acme);
    assert_eq!((&source["status"]["state"], &source["status"]["appliedCommit"]), (&json!("synced"), &json!(second)));
    assert_eq!(gpus(&server, &acme), Some(48));
    let third = repo.commit(&[("README.md", Some("the estate"))], &[]);
    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "synced", "{source}");
    assert_eq!(source["status"]["headCommit"], third.as_str());
    assert_eq!(source["status"]["appliedCommit"], second.as_str(), "the same document is not applied again");
    assert_eq!(revisions(&server, &acme).len(), 2);

    // Each state change was announced.
    let events = server.ok(&acme, "events/list", json!({}))["events"].as_array().unwrap().clone();
    let kinds: Vec<&str> = events.iter().filter_map(|event| event["type"].as_str()).collect();
    assert!(kinds.contains(&"source.synced"), "{kinds:?}");
}

#[test]
fn observe_tells_what_git_holds_apart_from_what_was_applied() {
    let server = server();
    let acme = server.tenant_with_token("acme");
    let repo = Repo::new();
    let commit = repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate())))], &[]);
    let daemon = Daemon::serve(&repo.root());
    put(&server, &acme, &daemon.url(), "observe", json!({}));

    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "outOfSync", "{source}");
    assert_eq!(source["status"]["lastAttempt"]["commit"], commit.as_str());
    assert!(source["status"]["lastAttempt"]["planHash"].as_str().is_some_and(|hash| hash.starts_with("sha256:")));
    assert!(source["status"].get("appliedCommit").is_none());
    assert_eq!(gpus(&server, &acme), None, "observe applies nothing");

    // Once the estate is what the document says, git is no longer ahead.
    server.ok(&acme, "fleet/apply", json!({"document": estate()}));
    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "synced", "{source}");
}

#[test]
fn a_force_push_diverges_until_a_sync_names_a_commit() {
    let server = server();
    let acme = server.tenant_with_token("acme");
    let repo = Repo::new();
    let first = repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate_with(64))))], &[]);
    let daemon = Daemon::serve(&repo.root());
    put(&server, &acme, &daemon.url(), "auto", json!({}));
    assert_eq!(refresh(&server, &acme)["status"]["appliedCommit"], first.as_str());

    let rewritten = repo.force_push(&[("fleet/estate.yaml", Some(&yaml(&estate_with(8))))]);
    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "diverged", "{source}");
    assert_eq!(source["status"]["appliedCommit"], first.as_str());
    assert!(source["status"]["error"].as_str().unwrap().contains("does not descend"), "{source}");
    assert_eq!(gpus(&server, &acme), Some(64), "nothing is applied");

    let synced = server.ok(&acme, "sources/sync", json!({"commit": rewritten}))["source"].clone();
    assert_eq!((&synced["status"]["state"], &synced["status"]["appliedCommit"]), (&json!("synced"), &json!(rewritten)));
    assert_eq!(gpus(&server, &acme), Some(8));
}

#[test]
fn a_missing_or_broken_document_is_failing_and_never_prunes() {
    let server = server();
    let acme = server.tenant_with_token("acme");
    let repo = Repo::new();
    repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate())))], &[]);
    let daemon = Daemon::serve(&repo.root());
    put(&server, &acme, &daemon.url(), "auto", json!({"prune": true}));
    assert_eq!(refresh(&server, &acme)["status"]["state"], "synced");

    let deleted = repo.commit(&[("fleet/estate.yaml", None)], &[]);
    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "failing", "{source}");
    assert_eq!(source["status"]["headCommit"], deleted.as_str());
    assert!(source["status"]["error"].as_str().unwrap().contains("fleet"), "{source}");
    assert_eq!(gpus(&server, &acme), Some(64), "nothing was pruned");

    repo.commit(&[("fleet/estate.yaml", Some("pools: [unclosed"))], &[]);
    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "failing", "{source}");
    assert!(source["status"]["error"].as_str().unwrap().contains("estate.yaml"), "{source}");
    assert_eq!(gpus(&server, &acme), Some(64));
}

#[test]
fn propose_opens_a_proposal_and_the_cycle_applies_it_once_approved() {
    let server = server();
    let acme = server.tenant_with_token("acme");
    let reviewer = server.token("acme", "bob", &["compute:proposals:review @ compute-proposals"]);
    let repo = Repo::new();
    let commit = repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate())))], &[]);
    let daemon = Daemon::serve(&repo.root());
    put(&server, &acme, &daemon.url(), "propose", json!({}));

    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "awaitingApproval", "{source}");
    let number = source["status"]["proposal"].as_i64().unwrap();
    let proposal = server.ok(&acme, "proposals/get", json!({"number": number}))["proposal"].clone();
    assert_eq!(proposal["source"]["commit"], commit.as_str(), "{proposal}");
    // A cycle of the same head opens no second proposal.
    assert_eq!(refresh(&server, &acme)["status"]["proposal"], number);
    assert_eq!(gpus(&server, &acme), None);

    server.ok(&reviewer, "proposals/review", json!({"number": number, "verdict": "approve"}));
    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "synced", "{source}");
    assert_eq!(source["status"]["appliedCommit"], commit.as_str());
    assert_eq!(gpus(&server, &acme), Some(64));
    let proposal = server.ok(&acme, "proposals/get", json!({"number": number}))["proposal"].clone();
    assert_eq!(proposal["state"], "applied");
}

#[test]
fn a_pinned_source_holds_its_commit_until_unpinned() {
    let server = server();
    let acme = server.tenant_with_token("acme");
    let repo = Repo::new();
    let first = repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate_with(64))))], &[]);
    let daemon = Daemon::serve(&repo.root());
    put(&server, &acme, &daemon.url(), "auto", json!({}));
    refresh(&server, &acme);
    let second = repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate_with(48))))], &[]);
    refresh(&server, &acme);
    assert_eq!(gpus(&server, &acme), Some(48));

    let pinned = server.ok(&acme, "sources/pin", json!({"commit": first}))["source"].clone();
    assert_eq!(pinned["pinned"], first.as_str());
    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "pinned", "{source}");
    assert_eq!(source["status"]["appliedCommit"], first.as_str());
    assert_eq!(gpus(&server, &acme), Some(64));

    server.ok(&acme, "sources/unpin", json!({}));
    let source = refresh(&server, &acme);
    assert_eq!((&source["status"]["state"], &source["status"]["appliedCommit"]), (&json!("synced"), &json!(second)));
    assert_eq!(gpus(&server, &acme), Some(48));
}

/// An unpin while the pinned commit's cycle runs is not lost: that cycle does not settle
/// the head, so the next one follows the branch again.
#[test]
fn an_unpin_while_the_pinned_cycle_runs_is_kept() {
    let server = server();
    let acme = server.tenant_with_token("acme");
    let repo = Repo::new();
    let head = repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate())))], &[]);
    let http = Http::serve(&repo.root(), "deploy", "s3cret-deploy-token");
    let credential = json!({"credential": {"username": "deploy", "token": "s3cret-deploy-token"}});
    put(&server, &acme, &http.url(), "auto", credential);
    assert_eq!(refresh(&server, &acme)["status"]["state"], "synced");

    // The pin makes a cycle due; the runner's is held at the server while the unpin comes.
    http.hold();
    server.ok(&acme, "sources/pin", json!({"commit": head}));
    let held = eventually(Duration::from_secs(10), || http.requests().iter().any(|line| line.ends_with(" held")));
    assert!(held, "the pinned cycle reached the server: {:?}", http.requests());
    server.ok(&acme, "sources/unpin", json!({}));
    http.release();

    // The held cycle ends pinned; the next follows the branch again and says so.
    let synced = || {
        let events = server.ok(&acme, "events/list", json!({}))["events"].as_array().unwrap().clone();
        events.iter().filter(|event| event["type"] == "source.synced").count()
    };
    assert!(eventually(Duration::from_secs(10), || synced() == 2), "synced again after the unpin: {}", synced());
    assert_eq!(server.ok(&acme, "sources/get", json!({}))["source"]["status"]["state"], "synced");
}

/// A server SIGKILLed while a cycle applies: the apply was all or nothing, the dead
/// replica's claim lapses within its lease, and the restarted server's next cycle
/// converges, the commit applied once.
#[test]
fn a_server_killed_mid_apply_of_a_cycle_converges_applying_once() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("git-cache").to_str().unwrap().to_owned();
    let flags = ["--git-allow-insecure", "--git-allow", "127.0.0.0/8", "--git-cache", cache.as_str()];
    let mut server = Server::start_in(dir, &flags);
    let acme = server.tenant_with_token("acme");
    let repo = Repo::new();
    repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate())))], &[]);
    let daemon = Daemon::serve(&repo.root());
    put(&server, &acme, &daemon.url(), "auto", json!({}));
    assert_eq!(refresh(&server, &acme)["status"]["state"], "synced");
    let large = repo.commit(&[("fleet/estate.yaml", Some(&yaml(&large_estate(2000))))], &[]);

    let refreshing = {
        let (base, token) = (server.base.clone(), acme.clone());
        std::thread::spawn(move || {
            reqwest::blocking::Client::new()
                .post(format!("{base}/api/compute/sources/refresh"))
                .bearer_auth(token)
                .body("{}")
                .send()
                .map(|response| response.status().as_u16())
        })
    };
    // Killed once the cycle's apply has held the database a while (or it was answered).
    let applying = eventually(Duration::from_secs(60), || {
        server.writing_for(Duration::from_millis(200)) || refreshing.is_finished()
    });
    assert!(applying, "the cycle's apply began within 60 s");
    server.kill();
    let answered = refreshing.join().unwrap();
    eprintln!("the refresh the kill cut off answered {answered:?}");
    let server = Server::start_in(server.stop(), &flags);

    let source = || server.ok(&acme, "sources/get", json!({}))["source"]["status"].clone();
    let converged = eventually(Duration::from_secs(60), || source()["appliedCommit"] == large.as_str());
    assert!(converged, "the next cycle applied the commit (the first answered {answered:?}): {}", source());
    assert_eq!(source()["state"], "synced");
    let from_large = revisions(&server, &acme).iter().filter(|revision| revision["source"]["commit"] == large.as_str()).count();
    assert_eq!(from_large, 1, "the commit was applied once");
    let exported = server.ok(&acme, "fleet/export", json!({}))["document"]["pools"].as_object().unwrap().len();
    assert_eq!(exported, 2001, "gpu-a and the large estate's pools");
}

#[test]
fn smart_http_with_a_token_that_is_never_answered() {
    let server = server();
    let acme = server.tenant_with_token("acme");
    let repo = Repo::new();
    let commit = repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate())))], &[]);
    let http = Http::serve(&repo.root(), "deploy", "s3cret-deploy-token");

    put(&server, &acme, &http.url(), "auto", json!({}));
    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "failing", "without the token: {source}");

    let answer = put(&server, &acme, &http.url(), "auto", json!({"credential": {"username": "deploy", "token": "s3cret-deploy-token"}}));
    assert_eq!(answer["source"]["credential"], json!(true));
    assert!(!answer.to_string().contains("s3cret"), "{answer}");
    let source = refresh(&server, &acme);
    assert_eq!((&source["status"]["state"], &source["status"]["appliedCommit"]), (&json!("synced"), &json!(commit)));
    assert!(http.requests().iter().any(|line| line.ends_with(" 200")), "{:?}", http.requests());
    let got = server.ok(&acme, "sources/get", json!({}));
    assert!(!got.to_string().contains("s3cret"), "{got}");
    let audit = server.ok(&acme, "audit/list", json!({}));
    assert!(!audit.to_string().contains("s3cret"), "{audit}");
}

#[test]
fn signed_commits_are_verified_against_the_sources_signers() {
    let keys = tempfile::tempdir().unwrap();
    let keygen = |name: &str| {
        let path = keys.path().join(name);
        let status = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success());
        (path.clone(), std::fs::read_to_string(path.with_extension("pub")).unwrap())
    };
    let (ada_key, ada_public) = keygen("ada");
    let (eve_key, _) = keygen("eve");
    let server = server();
    let acme = server.tenant_with_token("acme");
    let repo = Repo::new();
    repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate_with(64))))], &[]);
    let daemon = Daemon::serve(&repo.root());
    let answer = put(&server, &acme, &daemon.url(), "auto", json!({"signers": [ada_public.trim()]}));
    assert!(answer["source"]["signers"][0].as_str().unwrap().starts_with("SHA256:"), "{answer}");

    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "unverified", "an unsigned commit: {source}");
    assert_eq!(gpus(&server, &acme), None);

    repo.sign_with_ssh();
    let signing = |key: &std::path::Path, gpus: u64| {
        let flag = format!("--gpg-sign={}", key.display());
        repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate_with(gpus))))], &[&flag])
    };
    let by_eve = signing(&eve_key, 48);
    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "unverified", "{source}");
    assert!(source["status"]["error"].as_str().unwrap().contains("not among"), "{source}");
    assert_eq!(source["status"]["headCommit"], by_eve.as_str());

    let by_ada = signing(&ada_key, 32);
    let source = refresh(&server, &acme);
    assert_eq!((&source["status"]["state"], &source["status"]["appliedCommit"]), (&json!("synced"), &json!(by_ada)));
    assert_eq!(gpus(&server, &acme), Some(32));
}

/// `input.source` (SPEC §20.3): what the cycle plans from, as the server vouches for it.
/// policies/unsigned-prune-needs-approval.rego proposes an unsigned commit's prune,
/// whose proposal is applied once approved, planned as it was; a prune signed by an
/// allowed signer applies directly. A client cannot give a plan its own.
#[test]
fn policies_see_the_source_and_its_signer_as_input_source() {
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("ada");
    let made = std::process::Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-C", "ada", "-f"]).arg(&key).status();
    assert!(made.unwrap().success());
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let policy = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../policies/unsigned-prune-needs-approval.rego")).unwrap();
    let server = server();
    let acme = server.tenant_with_token("acme");
    let reviewer = server.token("acme", "bob", &["compute:proposals:review @ compute-proposals"]);
    server.ok(&acme, "policies/put", json!({"name": "unsigned-prune", "level": "mandatory", "source": policy}));
    let repo = Repo::new();
    repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate())))], &[]);
    let daemon = Daemon::serve(&repo.root());
    put(&server, &acme, &daemon.url(), "auto", json!({"prune": true, "signers": [public.trim()]}));
    // Unsigned, the first commit is unverified; signed, it applies (nothing to prune).
    assert_eq!(refresh(&server, &acme)["status"]["state"], "unverified");
    repo.sign_with_ssh();
    let signed = format!("--gpg-sign={}", key.display());
    repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate())))], &["--allow-empty", &signed]);
    assert_eq!(refresh(&server, &acme)["status"]["state"], "synced");

    // Without signers, an unsigned commit that prunes the offer is proposed.
    put(&server, &acme, &daemon.url(), "auto", json!({"prune": true}));
    let mut document = estate();
    document.as_object_mut().unwrap().remove("offers");
    let unsigned = repo.commit(&[("fleet/estate.yaml", Some(&yaml(&document)))], &[]);
    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "awaitingApproval", "{source}");
    let number = source["status"]["proposal"].as_i64().unwrap();
    let proposal = server.ok(&acme, "proposals/get", json!({"number": number}))["proposal"].clone();
    assert_eq!(proposal["summary"]["approvalRequired"], 1, "{proposal}");
    // The source's plan of that commit is the proposal's, and says why.
    let planned = server.ok(&acme, "sources/plan", json!({"commit": unsigned}))["plan"].clone();
    assert_eq!(planned["planHash"], proposal["planHash"]);
    let verdict = &planned["policy"]["verdicts"][0];
    assert_eq!((&verdict["rule"], &verdict["policy"]), (&json!("require_approval"), &json!("unsigned-prune")), "{planned}");
    let message = verdict["message"].as_str().unwrap();
    assert!(message.contains(&format!("at {unsigned} of main")), "{message}");
    // Approved, it is applied as planned: with the source it was planned from.
    server.ok(&reviewer, "proposals/review", json!({"number": number, "verdict": "approve"}));
    let source = refresh(&server, &acme);
    assert_eq!((&source["status"]["state"], &source["status"]["appliedCommit"]), (&json!("synced"), &json!(unsigned)), "{source}");
    assert_eq!(server.ok(&acme, "proposals/get", json!({"number": number}))["proposal"]["state"], "applied");
    let offers = server.ok(&acme, "offers/list", json!({}))["items"].clone();
    assert!(offers.as_array().unwrap().iter().all(|offer| offer["archived"] == true), "{offers}");

    // With ada as signer again, her signed prune of the flavor applies directly.
    put(&server, &acme, &daemon.url(), "auto", json!({"prune": true, "signers": [public.trim()]}));
    document.as_object_mut().unwrap().remove("flavors");
    let by_ada = repo.commit(&[("fleet/estate.yaml", Some(&yaml(&document)))], &[&signed]);
    let source = refresh(&server, &acme);
    assert_eq!((&source["status"]["state"], &source["status"]["appliedCommit"]), (&json!("synced"), &json!(by_ada)), "{source}");
    let flavors = server.ok(&acme, "flavors/list", json!({}))["items"].clone();
    assert!(flavors.as_array().unwrap().iter().all(|flavor| flavor["archived"] == true), "{flavors}");

    // The source's plan of a document (a pull request's) has no commit: unsigned.
    let planned = server.ok(&acme, "sources/plan", json!({"document": estate_with(64)}));
    assert_eq!(planned["plan"]["summary"]["approvalRequired"], 0, "nothing removed: {planned}");
    // A client's own `source` is no part of a plan.
    let (status, body) = server.call(&acme, "fleet/plan", json!({"document": estate(), "source": {
        "url": "https://git.example/estate.git", "branch": "main", "path": "fleet", "signer": "SHA256:forged"}}));
    assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{body}");
    assert_eq!(problem_paths(&body), ["/source"]);
}

#[test]
fn a_stalled_server_and_an_oversized_repository_end_failing_within_their_limits() {
    let server = server_with("2s", "1048576");
    let acme = server.tenant_with_token("acme");
    let stalled = Stalled::start();
    put(&server, &acme, &format!("git://127.0.0.1:{}/estate.git", stalled.port), "auto", json!({}));
    let started = std::time::Instant::now();
    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "failing", "{source}");
    assert!(source["status"]["error"].as_str().unwrap().contains("--git-timeout"), "{source}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());

    // Random bytes (base64, which compresses to about 3/4) beside the document, over the
    // limit of 1 MiB.
    let repo = Repo::new();
    let random: Vec<u8> = (0..2_000_000).map(|_| rand::random::<u8>()).collect();
    let noise = data_encoding::BASE64.encode(&random);
    repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate()))), ("noise.txt", Some(&noise))], &[]);
    let daemon = Daemon::serve(&repo.root());
    put(&server, &acme, &daemon.url(), "auto", json!({}));
    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "failing", "{source}");
    assert!(source["status"]["error"].as_str().unwrap().contains("--git-max-bytes"), "{source}");
    assert_eq!(gpus(&server, &acme), None);
}

#[test]
fn a_source_may_not_reach_what_the_deployment_does_not_admit() {
    let server = Server::start(&[]);
    let acme = server.tenant_with_token("acme");
    for url in [
        "http://127.0.0.1/estate.git",
        "https://127.0.0.1/estate.git",
        "https://10.0.0.1/estate.git",
        "https://169.254.169.254/latest",
        "https://[::1]/estate.git",
        "https://[::ffff:127.0.0.1]/estate.git",
        "https://2130706433/estate.git",
        "https://0177.0.0.1/estate.git",
        "https://user:pass@example.com/estate.git",
        "ext::sh -c touch% /tmp/pwned",
        "file:///etc",
        "git://127.0.0.1/estate.git",
        "fd::17",
    ] {
        let (status, body) = server.call(&acme, "sources/put", json!({"url": url, "mode": "auto"}));
        assert_eq!((status, code(&body)), (400, "INVALID_ARGUMENT"), "{url}: {body}");
        assert_eq!(problem_paths(&body), ["/url"], "{url}: {body}");
    }
    let (status, body) = server.call(&acme, "sources/get", json!({}));
    assert_eq!((status, code(&body)), (404, "NOT_FOUND"), "{body}");

    // Even with insecure transports, `ext::` is refused.
    let insecure = Server::start(&["--git-allow-insecure", "--git-allow", "127.0.0.0/8"]);
    let acme = insecure.tenant_with_token("acme");
    let (status, body) = insecure.call(&acme, "sources/put", json!({"url": "ext::sh -c id", "mode": "auto"}));
    assert_eq!(status, 400, "{body}");
    let bad = json!({"url": "git://127.0.0.1:9/r.git", "mode": "sometimes", "branch": "a..b", "path": "../x",
        "interval": "10s", "credential": {"password": "p"}, "signers": ["not a key"]});
    let (status, body) = insecure.call(&acme, "sources/put", bad);
    assert_eq!(status, 400, "{body}");
    let mut paths = problem_paths(&body);
    paths.sort();
    assert_eq!(paths, ["/branch", "/credential/password", "/credential/token", "/interval", "/mode", "/path", "/signers/0"]);
}

#[test]
fn a_plan_only_token_gets_the_plan_the_source_would_apply() {
    let server = server();
    let acme = server.tenant_with_token("acme");
    let ci = server.token("acme", "ci", &["compute:sources:plan @ compute-sources"]);
    let repo = Repo::new();
    let head = repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate_with(64))))], &[]);
    let daemon = Daemon::serve(&repo.root());
    put(&server, &acme, &daemon.url(), "auto", json!({}));
    refresh(&server, &acme);

    // A pull request's document, planned as the source's principal: the plan the merge
    // would apply, the same hash as that principal's own plan.
    let answer = server.ok(&ci, "sources/plan", json!({"document": estate_with(32)}));
    assert_eq!((&answer["principal"], &answer["tenant"], &answer["prune"]), (&json!("alice"), &json!("acme"), &json!(false)));
    let own = server.ok(&acme, "fleet/plan", json!({"document": estate_with(32)}));
    assert_eq!(answer["plan"]["planHash"], own["planHash"], "{answer}");
    assert_eq!(answer["plan"]["calls"].as_array().unwrap().len(), 1);
    // The document at the head: nothing to do.
    let at_head = server.ok(&ci, "sources/plan", json!({}));
    assert_eq!(at_head["commit"], head.as_str());
    assert_eq!(at_head["plan"]["calls"], json!([]));
    // It may plan, not apply, nor read or change the source.
    for (method, body) in [("fleet/apply", json!({"document": estate_with(32)})), ("sources/get", json!({})),
                           ("sources/refresh", json!({}))] {
        let (status, body) = server.call(&ci, method, body);
        assert_eq!((status, code(&body)), (403, "PERMISSION_DENIED"), "{method}: {body}");
    }
    assert_eq!(gpus(&server, &acme), Some(64));

    // The command line: `fleet plan FILE --as-source`.
    let file = server.dir.path().join("pr.yaml");
    std::fs::write(&file, yaml(&estate_with(32))).unwrap();
    let output = crate::cli::fleet(&server, &ci, &["plan", file.to_str().unwrap(), "--as-source"]);
    let said = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{said}{}", String::from_utf8_lossy(&output.stderr));
    assert!(said.starts_with("As the source would apply it: planned as alice, without prune."), "{said}");
    assert!(said.contains("gpu-a"), "{said}");
}

#[test]
fn the_command_line_sets_shows_and_drives_the_source() {
    let server = server();
    let acme = server.tenant_with_token("acme");
    let repo = Repo::new();
    let first = repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate_with(64))))], &[]);
    let daemon = Daemon::serve(&repo.root());
    let fleet = |args: &[&str]| {
        let output = crate::cli::fleet(&server, &acme, args);
        let said = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "{args:?}: {said}{}", String::from_utf8_lossy(&output.stderr));
        said
    };
    let said = fleet(&["source", "set", &daemon.url(), "--path", "fleet", "--mode", "observe", "--interval", "5m"]);
    assert!(said.contains("(observe, every 5m)") && said.contains("Hook: POST ") && said.contains("whsec_"), "{said}");
    let said = fleet(&["source", "refresh"]);
    assert!(said.contains(&format!("outOfSync: head {}, nothing applied from it yet", &first[..12])), "{said}");
    let said = fleet(&["source", "sync"]);
    assert!(said.contains(&format!("synced at {}", &first[..12])), "{said}");
    // `fleet status` tells git's state beside the drift.
    let output = crate::cli::fleet(&server, &acme, &["status"]);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains(&format!("Git source {}: synced at {}", daemon.url(), &first[..12])), "{said}");
    let second = repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate_with(48))))], &[]);
    fleet(&["source", "refresh"]);
    let output = crate::cli::fleet(&server, &acme, &["status"]);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        said.contains(&format!("outOfSync: head {}, applied {}", &second[..12], &first[..12])),
        "git ahead, the estate as applied: {said}"
    );
    let said = fleet(&["source", "pin", &first]);
    assert!(said.contains(&format!("pinned to {}", &first[..12])), "{said}");
    fleet(&["source", "unpin"]);
    let json: Value = serde_json::from_str(&fleet(&["source", "--json"])).unwrap();
    assert_eq!(json["source"]["mode"], "observe");
    assert!(fleet(&["source", "delete"]).contains("Deleted"));
    let output = crate::cli::fleet(&server, &acme, &["source"]);
    assert_eq!(output.status.code(), Some(1));
}

#[test]
fn a_blocked_or_denied_plan_leaves_the_source_so_and_applies_nothing() {
    let server = server();
    let acme = server.tenant_with_token("acme");
    let repo = Repo::new();
    repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate_with(64))))], &[]);
    let daemon = Daemon::serve(&repo.root());
    put(&server, &acme, &daemon.url(), "auto", json!({}));
    assert_eq!(refresh(&server, &acme)["status"]["state"], "synced");

    // A pool's class cannot change: the plan is blocked, and nothing is applied.
    let mut document = estate_with(48);
    document["pools"]["gpu-a"]["class"] = json!("cpu");
    let blocked = repo.commit(&[("fleet/estate.yaml", Some(&yaml(&document)))], &[]);
    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "blocked", "{source}");
    let error = source["status"]["error"].as_str().unwrap();
    assert!(error.starts_with("INVALID_STATE") && error.contains("gpu-a"), "{source}");
    assert_eq!(source["status"]["lastAttempt"]["commit"], blocked.as_str());
    assert_eq!(gpus(&server, &acme), Some(64));

    // A mandatory policy of the tenant's that denies every change: denied.
    let rego = "package frozen\n\ndeny contains \"the estate is frozen\" if {\n\tcount(input.calls) > 0\n}\n";
    server.ok(&acme, "policies/put", json!({"name": "frozen", "level": "mandatory", "source": rego}));
    repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate_with(48))))], &[]);
    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "denied", "{source}");
    let error = source["status"]["error"].as_str().unwrap();
    assert!(error.starts_with("POLICY_DENIED") && error.contains("the estate is frozen"), "{source}");
    assert_eq!(gpus(&server, &acme), Some(64));
    let events = server.ok(&acme, "events/list", json!({}))["events"].as_array().unwrap().clone();
    assert!(events.iter().any(|event| event["type"] == "source.blocked"), "{events:?}");
}

#[test]
fn a_source_that_heals_restores_its_applied_commit_never_a_newer_one() {
    let server = server_flags(&["--drift-interval", "1s"]);
    let acme = server.tenant_with_token("acme");
    let repo = Repo::new();
    repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate_with(64))))], &[]);
    let daemon = Daemon::serve(&repo.root());
    put(&server, &acme, &daemon.url(), "observe", json!({"heal": true}));
    // Observe applies nothing; a sync applies the head, healed from then on.
    server.ok(&acme, "sources/sync", json!({}));
    assert_eq!(gpus(&server, &acme), Some(64));
    // A newer commit, not yet applied (observe), and the estate changed by hand: the heal
    // puts back the applied commit's 64, not the newer 48.
    repo.commit(&[("fleet/estate.yaml", Some(&yaml(&estate_with(48))))], &[]);
    let pool = server.ok(&acme, "pools/list", json!({}))["items"][0]["id"].clone();
    server.ok(&acme, "pools/update", json!({"id": pool, "gpus": 2}));
    let healed = crate::support::eventually(std::time::Duration::from_secs(30), || gpus(&server, &acme) == Some(64));
    assert!(healed, "fleet.drift healed to the applied commit: {:?}", gpus(&server, &acme));
    let source = refresh(&server, &acme);
    assert_eq!(source["status"]["state"], "outOfSync", "moving forward is the cycle's: {source}");
}
