//! One cycle of a source (SPEC §20.3, "One cycle"): the branch's head, whether it
//! descends from what was applied, the document at `path`, its signature, its plan, and
//! what the mode does with it; then the status and an event when the state changed.
//!
//! Every step runs with the authority of the token that put the source, through the
//! dispatcher, as a request of that token would: a plan is `compute.fleet.plan`, an apply
//! `compute.fleet.apply` (policies, audit, `fleet.applied`, the revision's `source`), a
//! proposal `compute.proposals.create`. A cycle runs on a blocking thread; the fetches
//! it waits for run on the runtime.

use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::{Value, json};

use super::git::{Credential, Git, GitError, Remote};
use super::signature::{self, Signer, Verdict};
use super::source::{Mode, Status, Stored};
use crate::api::{ApiError, Code};
use crate::calls::Dispatcher;
use crate::calls::auth::Caller;
use crate::db::{self, Tx, params};
use crate::events::{self, Wake};
use crate::fleet::{self, files};
use crate::secrets::{self, Key, Place};

/// What asked for a cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// Its interval passed, or a hook came: nothing to do when the head did not move.
    Due,
    /// `refresh`: fetch and act now, even on the head it settled on.
    Refresh,
    /// `sync`: apply the document at `commit` (the head if none), in any mode,
    /// pinned to `plan_hash` if given.
    Sync { commit: Option<String>, plan_hash: Option<String> },
}

/// What a cycle needs: where it fetches, the dispatcher its requests run through, and
/// the key that opens the source's credential.
pub struct Cycles<'a> {
    pub git: &'a Git,
    pub dispatcher: &'a Dispatcher,
    pub key: Option<&'a Key>,
    /// Wakes this process's event streams when a cycle published an event.
    pub wake: &'a Wake,
}

/// How a cycle ended: the status to record, whether the head is settled (the same head
/// next time is nothing to do), and the plan hash and error its event tells.
struct Ending {
    status: Status,
    settled: bool,
    plan_hash: Option<String>,
}

impl Cycles<'_> {
    /// Runs one cycle of `source` and records what it found; the status after it.
    pub fn run(&self, source: &Stored, ask: &Ask) -> Result<Status, ApiError> {
        let mut status = source.status.clone();
        let ending = match self.cycle(source, ask, &mut status) {
            Ok(ending) => ending,
            Err(Failure::Failing(error)) => {
                status.state = "failing".into();
                status.error = Some(error);
                Ending { status, settled: false, plan_hash: None }
            }
            Err(Failure::Api(error)) => return Err(error),
        };
        // A pinned source in step with its commit says so: it ignores the branch.
        let mut ending = ending;
        if source.pinned.is_some() && ending.status.state == "synced" {
            ending.status.state = "pinned".into();
        }
        self.record(source, ending)
    }

    fn cycle(&self, source: &Stored, ask: &Ask, status: &mut Status) -> Result<Ending, Failure> {
        let credential = self.credential(source)?;
        let remote = Remote { url: &source.url, credential: credential.as_ref() };
        let caller = self.caller(source)?;

        // 0. An open proposal of the source approved since is applied first.
        if let Some(ending) = self.apply_approved(source, &caller, status)? {
            return Ok(ending);
        }

        // 1. The branch's head: the same as last time is nothing to do.
        let head = block(self.git.head(&remote, &source.branch)).map_err(Failure::git)?;
        status.head_commit = Some(head.clone());
        status.fetched_at = Some(db::now());
        let (target, plan_hash) = match ask {
            Ask::Sync { commit, plan_hash } => (commit.clone().unwrap_or_else(|| head.clone()), plan_hash.clone()),
            Ask::Due | Ask::Refresh => (source.pinned.clone().unwrap_or_else(|| head.clone()), None),
        };
        if *ask == Ask::Due && source.status.settled_commit.as_ref() == Some(&target) {
            // Nothing new: the state, and its error, stand.
            return Ok(Ending { status: status.clone(), settled: true, plan_hash: None });
        }
        status.error = None;
        let cache = &source.id;
        block(self.git.fetch(cache, &remote, &target)).map_err(Failure::git)?;

        // 2. A head that does not descend from what was applied: a force push.
        let following = matches!(ask, Ask::Due | Ask::Refresh) && source.pinned.is_none();
        if let (true, Some(applied)) = (following, status.applied_commit.clone())
            && applied != target
            && !block(self.git.descends(cache, &remote, &applied, &target)).map_err(Failure::git)?
        {
            status.state = "diverged".into();
            status.error = Some(format!(
                "{} of {} does not descend from {}, the commit applied last (a force push?): \
                 nothing is applied until a sync names a commit",
                short(&target),
                source.branch,
                short(&applied)
            ));
            return Ok(Ending { status: status.clone(), settled: true, plan_hash: None });
        }
        status.changed_in = block(self.git.changed_in(cache, status.applied_commit.as_deref(), &target, &source.path))
            .map_err(Failure::git)?
            .or_else(|| status.changed_in.clone());

        // 3. The document at `path`: missing or unreadable is failing, never a prune.
        let (document_id, merged) = self.document(source, &target)?;
        let same_document = status.applied_document.as_deref() == Some(document_id.as_str());
        if same_document && following && status.state != "outOfSync" {
            status.state = "synced".into();
            return Ok(Ending { status: status.clone(), settled: true, plan_hash: None });
        }

        // 4. With signers, the commit must be signed by one of them.
        let signer = match self.signer(source, &target)? {
            Some(Verdict::Signed { fingerprint }) => Some(fingerprint),
            Some(verdict) => {
                status.state = "unverified".into();
                status.error = Some(unverified(&target, &verdict));
                return Ok(Ending { status: status.clone(), settled: true, plan_hash: None });
            }
            None => None,
        };

        // 5. The plan, made as the source's principal with the source as `input.source`;
        // 6. what the mode does with it.
        let caller = vouching(&caller, source, Some(&target), signer.as_deref());
        let origin = json!({"repo": source.url, "commit": target, "ref": format!("refs/heads/{}", source.branch),
            "path": source.path});
        let request = json!({"document": merged, "prune": source.prune});
        let attempt = |plan_hash: Option<&str>, error: Option<&str>| {
            let mut attempt = json!({"commit": target, "at": db::now()});
            if let Some(plan_hash) = plan_hash {
                attempt["planHash"] = json!(plan_hash);
            }
            if let Some(error) = error {
                attempt["error"] = json!(error);
            }
            attempt
        };
        let mode = match ask {
            Ask::Sync { .. } => Mode::Auto,
            Ask::Due | Ask::Refresh => source.mode,
        };
        // `auto` (and `sync`) apply at once: the apply plans in its own transaction and
        // applies that plan, pinned to a sync's hash if it names one (decision 0033).
        // `observe` and `propose` need the plan first.
        let planned = match mode {
            Mode::Auto => plan_hash,
            Mode::Observe | Mode::Propose => {
                let Planned { plan_hash: planned, calls } = self.call(&caller, "compute.fleet.plan", &request)?;
                let has_calls = !calls.is_empty();
                if mode == Mode::Observe {
                    status.state = if has_calls { "outOfSync" } else { "synced" }.into();
                    status.last_attempt = Some(attempt(Some(&planned), None));
                    return Ok(Ending { status: status.clone(), settled: true, plan_hash: Some(planned) });
                }
                if has_calls {
                    return self.propose(source, &caller, status, &request, origin, &target);
                }
                Some(planned)
            }
        };
        let mut applying = request;
        if let Some(plan_hash) = &planned {
            applying["planHash"] = json!(plan_hash);
        }
        applying["source"] = origin.clone();
        // Healed by fleet.drift to this revision, with the source's token (§15).
        applying["heal"] = json!(source.heal);
        match self.call::<Applied>(&caller, "compute.fleet.apply", &applying) {
            Ok(answer) => {
                let plan_hash = Some(answer.plan.plan_hash);
                status.state = "synced".into();
                status.applied_commit = Some(target.clone());
                status.applied_document = Some(document_id);
                status.applied_revision = self.revision(&source.tenant)?.or(status.applied_revision);
                status.proposal = None;
                status.last_attempt = Some(attempt(plan_hash.as_deref(), None));
                Ok(Ending { status: status.clone(), settled: true, plan_hash })
            }
            // A plan that needs approval goes to reviewers, as in propose.
            Err(Failure::Api(error)) if error.code == Code::ApprovalRequired => {
                self.propose(source, &caller, status, &applying, origin, &target)
            }
            Err(Failure::Api(error)) => {
                let (state, settled) = match error.code {
                    Code::InvalidState => ("blocked", true),
                    Code::PolicyDenied => ("denied", true),
                    // Tried again next cycle.
                    Code::ConfigDrift => ("outOfSync", false),
                    Code::Unavailable | Code::Internal | Code::ResourceExhausted => return Err(Failure::Api(error)),
                    _ => ("failing", false),
                };
                let why = fleet::refusal(&error);
                status.state = state.into();
                status.error = Some(why.clone());
                status.last_attempt = Some(attempt(planned.as_deref(), Some(&why)));
                Ok(Ending { status: status.clone(), settled, plan_hash: planned })
            }
            Err(failure) => Err(failure),
        }
    }

    /// The document at the source's `path` in `commit` (fetched already): its object id
    /// and the files merged; failing, saying why, when it is missing or does not read.
    fn document(&self, source: &Stored, commit: &str) -> Result<(String, Value), Failure> {
        let document = block(self.git.read(&source.id, commit, &source.path)).map_err(Failure::git)?;
        let parsed = document.files.iter().map(|(name, text)| {
            files::parse(name, text).map(|value| (name.clone(), value)).map_err(|error| error.to_string())
        });
        let parsed: Vec<(String, Value)> = parsed.collect::<Result<_, _>>().map_err(Failure::Failing)?;
        let merged = files::merge(parsed).map_err(|problems| {
            let listed: Vec<String> =
                problems.listed().iter().map(|problem| format!("{}: {}", problem.path, problem.message)).collect();
            Failure::Failing(format!("the document at {} does not merge: {}", source.path, listed.join("; ")))
        })?;
        Ok((document.id, merged))
    }

    /// `compute.sources.plan`: the plan of `document` (a pull request's), or of the
    /// document at `commit` (the head when neither is given), made as the source's
    /// principal with its prune, changing nothing: what the source would apply.
    pub fn plan(&self, source: &Stored, document: Option<Value>, commit: Option<String>) -> Result<Value, ApiError> {
        let refused = |failure: Failure| match failure {
            Failure::Failing(why) => ApiError::failed_precondition(why),
            Failure::Api(error) => error,
        };
        let caller = self.caller(source).map_err(refused)?;
        let (document, commit) = match document {
            Some(document) => (document, None),
            None => {
                let credential = self.credential(source).map_err(refused)?;
                let remote = Remote { url: &source.url, credential: credential.as_ref() };
                let commit = match commit {
                    Some(commit) => commit,
                    None => {
                        block(self.git.head(&remote, &source.branch)).map_err(|error| refused(Failure::git(error)))?
                    }
                };
                block(self.git.fetch(&source.id, &remote, &commit)).map_err(|error| refused(Failure::git(error)))?;
                (self.document(source, &commit).map_err(refused)?.1, Some(commit))
            }
        };
        let signer = match &commit {
            Some(commit) => match self.signer(source, commit).map_err(refused)? {
                Some(Verdict::Signed { fingerprint }) => Some(fingerprint),
                _ => None,
            },
            None => None,
        };
        let caller = vouching(&caller, source, commit.as_deref(), signer.as_deref());
        let request = json!({"document": document, "prune": source.prune});
        let plan: Value = self.call(&caller, "compute.fleet.plan", &request).map_err(refused)?;
        let mut answer = json!({"plan": plan, "tenant": source.tenant, "principal": caller.principal,
            "prune": source.prune});
        if let Some(commit) = commit {
            answer["commit"] = json!(commit);
        }
        Ok(answer)
    }

    /// Opens a proposal for `target` unless one is open for it already; an open one of an
    /// older commit of this source is stale. The plan hash told is the proposal's.
    fn propose(
        &self,
        source: &Stored,
        caller: &Caller,
        status: &mut Status,
        request: &Value,
        origin: Value,
        target: &str,
    ) -> Result<Ending, Failure> {
        let open = status.proposal.and_then(|number| self.proposal(caller, number).ok().map(|it| (number, it)));
        if let Some((number, proposal)) = &open
            && proposal["state"] == "open"
        {
            if proposal["source"]["commit"] == target {
                status.state = "awaitingApproval".into();
                let plan_hash = proposal["planHash"].as_str().map(str::to_owned);
                return Ok(Ending { status: status.clone(), settled: true, plan_hash });
            }
            fleet::mark_stale(&self.dispatcher.db().get().map_err(ApiError::from)?, caller, *number)?;
        }
        let title = format!("{} at {}", source.branch, short(target));
        let mut proposing = json!({"document": request["document"], "prune": request["prune"], "title": title});
        proposing["source"] = origin;
        let created: Value = self.call(caller, "compute.proposals.create", &proposing)?;
        let plan_hash = created["proposal"]["planHash"].as_str().map(str::to_owned);
        status.state = "awaitingApproval".into();
        status.proposal = created["proposal"]["number"].as_i64();
        status.last_attempt = Some(json!({"commit": target, "at": db::now(), "planHash": plan_hash}));
        Ok(Ending { status: status.clone(), settled: true, plan_hash })
    }

    /// Step 0: the source's open proposal, approved since, applied as it was reviewed.
    fn apply_approved(&self, source: &Stored, caller: &Caller, status: &mut Status) -> Result<Option<Ending>, Failure> {
        let Some(number) = status.proposal else { return Ok(None) };
        let Ok(proposal) = self.proposal(caller, number) else { return Ok(None) };
        if proposal["state"] != "open" || proposal["approved"] != true {
            return Ok(None);
        }
        let commit = proposal["source"]["commit"].as_str().unwrap_or_default().to_owned();
        match self.call::<Applied>(caller, "compute.fleet.apply", &json!({"proposal": number})) {
            Ok(answer) => {
                status.state = "synced".into();
                status.applied_commit = Some(commit.clone());
                status.applied_revision = self.revision(&source.tenant)?.or(status.applied_revision);
                // The document's id is that of the proposal's commit: read again next cycle.
                status.applied_document = None;
                status.proposal = None;
                let plan_hash = Some(answer.plan.plan_hash);
                status.last_attempt = Some(json!({"commit": commit, "at": db::now(), "planHash": plan_hash}));
                Ok(Some(Ending { status: status.clone(), settled: false, plan_hash }))
            }
            // A stale proposal: the cycle proposes again.
            Err(Failure::Api(error)) if error.code == Code::ConfigDrift => {
                status.proposal = None;
                Ok(None)
            }
            Err(failure) => Err(failure),
        }
    }

    /// With signers, what `commit`'s signature is, checked against them (it is fetched).
    fn signer(&self, source: &Stored, commit: &str) -> Result<Option<Verdict>, Failure> {
        if source.signers.is_empty() {
            return Ok(None);
        }
        let raw = block(self.git.raw_commit(&source.id, commit)).map_err(Failure::git)?;
        let signers: Vec<Signer> = source.signers.iter().filter_map(|line| Signer::parse(line).ok()).collect();
        Ok(Some(signature::verify(&raw, &signers)))
    }

    fn proposal(&self, caller: &Caller, number: i64) -> Result<Value, Failure> {
        let answer: Value = self.call(caller, "compute.proposals.get", &json!({"number": number}))?;
        Ok(answer["proposal"].clone())
    }

    /// The token that put the source, as a caller now: refused (the source is failing,
    /// saying why) when it expired, was revoked, or may not plan.
    fn caller(&self, source: &Stored) -> Result<Caller, Failure> {
        match self.dispatcher.caller_of_token(&source.tenant, &source.token, "compute.fleet.plan")? {
            Ok(caller) => Ok(caller),
            Err(refused) => Err(Failure::Failing(format!("the source acts as the token that put it: {refused}"))),
        }
    }

    /// Runs `method` as `caller`; its answer as JSON, or as much of it as `T` reads (a
    /// 10k plan's answer is megabytes, of which a cycle reads the hash).
    fn call<T: DeserializeOwned>(&self, caller: &Caller, method: &str, body: &Value) -> Result<T, Failure> {
        let output = self.dispatcher.run_named(caller.clone(), method, body.to_string().as_bytes())?;
        Ok(serde_json::from_str(&output).map_err(ApiError::internal)?)
    }

    fn credential(&self, source: &Stored) -> Result<Option<Credential>, Failure> {
        let db = self.dispatcher.db().get().map_err(ApiError::from)?;
        let stored: Option<Option<String>> =
            db.query_opt("SELECT credential FROM sources WHERE tenant = ?1", params![&source.tenant], |row| {
                row.get(0)
            })?;
        let Some(stored) = stored.flatten() else { return Ok(None) };
        let place = Place { column: "sources.credential", row: &[&source.tenant] };
        let text = secrets::reveal(self.key, &stored, place)
            .map_err(|error| Failure::Failing(format!("the source's credential cannot be read: {error}")))?;
        let value: Value = serde_json::from_str(&text).map_err(ApiError::internal)?;
        let token = value["token"].as_str().unwrap_or_default().to_owned();
        Ok(Some(Credential { username: value["username"].as_str().map(str::to_owned), token }))
    }

    fn revision(&self, tenant: &str) -> Result<Option<i64>, ApiError> {
        let db = self.dispatcher.db().get()?;
        Ok(db
            .query_opt("SELECT revision FROM fleet_applied WHERE tenant = ?1", params![tenant], |row| {
                row.get::<Option<i64>>(0)
            })?
            .flatten())
    }

    /// Records what the cycle found, if the source is still the one it ran for (a put
    /// since replaced it); settles its head only if no pin or unpin came meanwhile (the
    /// next cycle then runs for the pin as it is now). Publishes `source.<state>` when
    /// the state or its commit changed.
    fn record(&self, source: &Stored, ending: Ending) -> Result<Status, ApiError> {
        let Ending { status, settled, plan_hash } = ending;
        let db = self.dispatcher.db().get()?;
        db::transaction(&db, Tx::Write(&source.tenant), |db| {
            let attempt = status.last_attempt.as_ref().map(Value::to_string);
            let changed = db.execute(
                "UPDATE sources SET state = ?3, head_commit = ?4, fetched_at = ?5, applied_commit = ?6,
                   applied_revision = ?7, applied_document = ?8, changed_in = ?9, proposal = ?10,
                   last_attempt = ?11, error = ?12,
                   settled_commit = CASE WHEN ?13 AND pinned IS NOT DISTINCT FROM ?16 THEN ?14 ELSE settled_commit END,
                   updated_at = ?15
                 WHERE tenant = ?1 AND id = ?2",
                params![
                    &source.tenant,
                    &source.id,
                    &status.state,
                    status.head_commit.as_deref(),
                    status.fetched_at.as_deref(),
                    status.applied_commit.as_deref(),
                    status.applied_revision,
                    status.applied_document.as_deref(),
                    status.changed_in.as_deref(),
                    status.proposal,
                    attempt.as_deref(),
                    status.error.as_deref(),
                    settled,
                    source.pinned.as_deref().or(status.head_commit.as_deref()),
                    &db::now(),
                    source.pinned.as_deref(),
                ],
            )?;
            let before = (&source.status.state, &source.status.head_commit);
            if changed > 0
                && before != (&status.state, &status.head_commit)
                && let Some(kind) = event_of(&status.state)
            {
                let mut data = json!({"commit": status.head_commit, "state": status.state});
                if let Some(plan_hash) = &plan_hash {
                    data["planHash"] = json!(plan_hash);
                }
                if let Some(error) = &status.error {
                    data["error"] = json!(error);
                }
                events::publish(db, &source.tenant, kind, &data)?;
            }
            Ok(())
        })?;
        let _ = self.wake.send(());
        Ok(status)
    }
}

/// What a cycle reads of a plan: its hash, and its calls (counted, not kept).
#[derive(Deserialize)]
struct Planned {
    #[serde(rename = "planHash")]
    plan_hash: String,
    calls: Vec<IgnoredAny>,
}

/// What a cycle reads of an apply's answer: its plan's hash.
#[derive(Deserialize)]
struct Applied {
    plan: AppliedPlan,
}

#[derive(Deserialize)]
struct AppliedPlan {
    #[serde(rename = "planHash")]
    plan_hash: String,
}

/// `caller` planning for `source`: the policies see `input.source` (SPEC §20.3), the
/// commit (none for a document that is no commit yet) and its verified signer.
fn vouching(caller: &Caller, source: &Stored, commit: Option<&str>, signer: Option<&str>) -> Caller {
    let mut vouched = json!({"url": source.url, "branch": source.branch, "path": source.path});
    if let Some(commit) = commit {
        vouched["commit"] = json!(commit);
    }
    if let Some(signer) = signer {
        vouched["signer"] = json!(signer);
    }
    Caller { git_source: Some(vouched.to_string()), ..caller.clone() }
}

/// The event a state is announced by.
fn event_of(state: &str) -> Option<&'static str> {
    Some(match state {
        "outOfSync" => events::SOURCE_OUT_OF_SYNC,
        "synced" => events::SOURCE_SYNCED,
        "awaitingApproval" => events::SOURCE_PROPOSED,
        "blocked" => events::SOURCE_BLOCKED,
        "diverged" => events::SOURCE_DIVERGED,
        "failing" => events::SOURCE_FAILING,
        "unverified" => events::SOURCE_UNVERIFIED,
        _ => return None,
    })
}

/// Why a cycle stopped short: the source is failing (said why), or the server could
/// not go on (an outage or a bug, for the runner to log; the cycle is tried again).
enum Failure {
    Failing(String),
    Api(ApiError),
}

impl From<ApiError> for Failure {
    fn from(error: ApiError) -> Failure {
        Failure::Api(error)
    }
}

impl From<crate::db::Error> for Failure {
    fn from(error: crate::db::Error) -> Failure {
        Failure::Api(error.into())
    }
}

impl Failure {
    fn git(error: GitError) -> Failure {
        Failure::Failing(error.to_string())
    }
}

fn unverified(commit: &str, verdict: &Verdict) -> String {
    match verdict {
        Verdict::Unsigned => {
            format!("{} carries no SSH signature; the source applies only signed commits", short(commit))
        }
        Verdict::UnknownSigner { fingerprint } => {
            format!("{} is signed by {fingerprint}, which is not among the source's signers", short(commit))
        }
        Verdict::BadSignature(why) => format!("{}'s signature does not verify: {why}", short(commit)),
        Verdict::Signed { .. } => String::new(),
    }
}

/// Waits on a blocking thread for what runs on the runtime (a fetch).
fn block<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Handle::current().block_on(future)
}

/// A commit as people name it: its first 12 hex digits.
pub fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}
