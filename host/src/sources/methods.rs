//! `compute.sources.put|get|delete|refresh|sync|pin|unpin|plan` (SPEC §20.3), at
//! `compute:sources:read|write|plan @ compute-sources`. The credential and the hook's secret
//! are stored sealed when the deployment has a key, never answered (but the secret by
//! the put that makes it), logged or audited. `refresh` and `sync` run a cycle now, on
//! the runner, outside any transaction of theirs.

use std::sync::Arc;

use serde_json::{Value, json};

use super::cycle::Ask;
use super::git::Git;
use super::source::{self, Put};
use super::{Asking, now_ms};
use crate::api::{ApiError, Code};
use crate::calls::context::Ctx;
use crate::calls::input::Input;
use crate::calls::parse_body;
use crate::calls::registry::{Answer, Call, Composite, Method, MethodKind, Registry, handler};
use crate::db::{self, params};
use crate::secrets::{self, Key, Place};
use crate::webhooks::sign;

/// The methods, with where sources are fetched from, the key that seals their secrets,
/// and the runner that runs a cycle now.
pub fn register(registry: &mut Registry, git: Arc<Git>, key: Option<Key>, asking: Asking) {
    let empty = json!({"type": "object", "additionalProperties": false});
    let answer = json!({"type": "object", "required": ["source"], "properties": {"source": {"type": "object"}}});
    let commit = json!({"type": "string", "pattern": "^[0-9a-f]{40}([0-9a-f]{24})?$"});
    let text = json!({"type": "string", "minLength": 1, "maxLength": 4096, "pattern": "^[!-~]+$"});
    let put_input = json!({"type": "object", "additionalProperties": false, "required": ["url", "mode"], "properties": {
        "url": {"type": "string", "maxLength": 2048, "pattern": url_pattern(git.allows_insecure()),
                "description": "The repository: https (http, git and file too under serve --git-allow-insecure), no credentials in it."},
        "branch": {"type": "string", "default": "main", "maxLength": 255, "pattern": source::branch_pattern()},
        "path": {"type": "string", "default": ".", "maxLength": 1024, "pattern": source::path_pattern()},
        "mode": {"type": "string", "enum": ["observe", "propose", "auto"]},
        "prune": {"type": "boolean", "default": false}, "heal": {"type": "boolean", "default": false},
        "interval": {"type": "string", "default": "3m", "pattern": source::INTERVAL_PATTERN},
        "credential": {"type": "object", "additionalProperties": false, "required": ["token"], "properties": {
            "username": text.clone(), "token": text}},
        "signers": {"type": "array", "maxItems": source::MAX_SIGNERS, "items": {"type": "string", "maxLength": 16384,
                    "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]+$", "description": "An OpenSSH public key line."}}}});
    registry.register(
        Method::new("sources", "put", MethodKind::Mutation, handler(move |ctx: &Ctx, body| put(&git, key.as_ref(), ctx, body)))
            .phase("v0.5")
            .summary("Creates or replaces the tenant's git source: the repository, branch and path of its document, the mode (observe, propose, auto), prune, heal, interval, credential and allowed signers. Answers the inbound hook's secret, this once.")
            .schemas(
                put_input,
                json!({"type": "object", "required": ["source", "hookSecret"], "properties": {
                    "source": {"type": "object"}, "hookSecret": {"type": "string"}}}),
            ),
    );
    registry.register(
        Method::new("sources", "get", MethodKind::Read, handler(get))
            .phase("v0.5")
            .summary("The tenant's source and its status: what git holds against what was applied.")
            .schemas(empty.clone(), answer.clone()),
    );
    registry.register(
        Method::new("sources", "delete", MethodKind::Mutation, handler(delete))
            .phase("v0.5")
            .summary("Deletes the tenant's source. The estate is left as it is.")
            .schemas(empty.clone(), json!({"type": "object"})),
    );
    registry.register(
        Method::new("sources", "pin", MethodKind::Mutation, handler(pin))
            .phase("v0.5")
            .summary("Pins the source to a commit: it applies and heals to that commit and ignores new heads until unpinned (rollback while automation is on).")
            .schemas(
                json!({"type": "object", "additionalProperties": false, "required": ["commit"], "properties": {"commit": commit}}),
                answer.clone(),
            ),
    );
    registry.register(
        Method::new("sources", "unpin", MethodKind::Mutation, handler(unpin))
            .phase("v0.5")
            .summary("Unpins the source: it follows its branch's head again.")
            .schemas(empty.clone(), answer.clone()),
    );
    let asked = |run: fn(&Asking, Call) -> Result<Value, ApiError>| -> Composite {
        let asking = asking.clone();
        Arc::new(move |call: Call| Answer::from(run(&asking, call).map(|value| value.to_string())))
    };
    registry.register(
        Method::planner("sources", "refresh", MethodKind::Mutation, asked(refresh))
            .permission("compute:sources:write", "compute-sources")
            .phase("v0.5")
            .summary("Runs the source's cycle now: asks for the head, fetches and acts as the mode says; answers the source afterwards.")
            .schemas(empty, answer.clone()),
    );
    registry.register(
        Method::planner("sources", "plan", MethodKind::Read, asked(plan))
            .permission("compute:sources:plan", "compute-sources")
            .phase("v0.5")
            .summary("The plan the source would apply: of the document given (a pull request's), or of the document at a commit (the head by default), made as the source's principal with its prune. Changes nothing; needs only compute:sources:plan.")
            .schemas(
                // A document, or the document at a commit: not both.
                json!({"type": "object", "additionalProperties": false, "maxProperties": 1, "properties": {
                    "document": {"type": "object"}, "commit": commit}}),
                json!({"type": "object", "required": ["plan", "tenant", "principal", "prune"], "properties": {
                    "plan": {"type": "object"}, "tenant": {"type": "string"}, "principal": {"type": "string"},
                    "prune": {"type": "boolean"}, "commit": {"type": "string"}}}),
            ),
    );
    registry.register(
        Method::planner("sources", "sync", MethodKind::Mutation, asked(sync))
            .permission("compute:sources:write", "compute-sources")
            .phase("v0.5")
            .summary("Applies the document at a commit (the head by default), in any mode, optionally pinned to a plan hash; also needs what an apply needs.")
            .schemas(
                json!({"type": "object", "additionalProperties": false, "properties": {
                    "commit": commit, "planHash": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}}}),
                answer,
            ),
    );
}

/// What a source's `url` must look like before its host is looked at: `https://host[:port]/path`
/// (and `http`, `git` or `file:///path` when insecure transports are allowed), no
/// credentials, spaces, `\\`, `?` or `#`.
fn url_pattern(insecure: bool) -> String {
    const HOST: &str = "(?:\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9.-]+)";
    const PORT: &str = "(?::(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}))?";
    const PATH: &str = "/[^\\u0000-\\u0020\\u007f-\\u009f\\\\?#]+";
    match insecure {
        true => format!("^(?:(?:https|http|git)://{HOST}{PORT}{PATH}|file://{PATH})$"),
        false => format!("^https://{HOST}{PORT}{PATH}$"),
    }
}

fn put(git: &Git, key: Option<&Key>, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let put = Put::read(body, git)?;
    let tenant = &ctx.caller.tenant;
    let Some(token) = &ctx.caller.token else {
        return Err(ApiError::failed_precondition("a source acts as the token that puts it: put it with a token"));
    };
    let id = random_hex(16);
    let hook_secret = sign::new_secret();
    let sealed_secret = secrets::store(key, &hook_secret, Place { column: "sources.hook_secret", row: &[tenant] })
        .map_err(ApiError::internal)?;
    let credential = put
        .credential
        .as_ref()
        .map(|credential| {
            let text = json!({"username": credential.username, "token": credential.token}).to_string();
            secrets::store(key, &text, Place { column: "sources.credential", row: &[tenant] })
        })
        .transpose()
        .map_err(ApiError::internal)?;
    // What the cycles found stays when the put names the same document; a source of
    // another document starts again.
    let previous = source::stored(ctx.db, tenant)?;
    let same = previous.as_ref().is_some_and(|previous| {
        (&previous.url, &previous.branch, &previous.path) == (&put.url, &put.branch, &put.path)
    });
    let interval_ms = i64::try_from(put.interval.as_millis()).unwrap_or(i64::MAX);
    let signers = serde_json::to_string(&put.signers).map_err(ApiError::internal)?;
    let now = db::now();
    ctx.db.execute(
        "INSERT INTO sources (tenant, id, url, branch, path, mode, prune, heal, interval_ms, credential, signers,
           hook_secret, token, principal, state, due_ms, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, 'outOfSync', ?15, ?16)
         ON CONFLICT (tenant) DO UPDATE SET id = excluded.id, url = excluded.url, branch = excluded.branch,
           path = excluded.path, mode = excluded.mode, prune = excluded.prune, heal = excluded.heal,
           interval_ms = excluded.interval_ms, credential = excluded.credential, signers = excluded.signers,
           hook_secret = excluded.hook_secret, token = excluded.token, principal = excluded.principal,
           due_ms = excluded.due_ms, updated_at = excluded.updated_at, settled_commit = NULL,
           holder = NULL, claimed_until_ms = NULL",
        params![
            tenant,
            &id,
            &put.url,
            &put.branch,
            &put.path,
            put.mode.as_str(),
            put.prune,
            put.heal,
            interval_ms,
            credential.as_deref(),
            &signers,
            &sealed_secret,
            token,
            &ctx.caller.principal,
            now_ms(),
            &now,
        ],
    )?;
    if !same {
        ctx.db.execute(
            "UPDATE sources SET state = 'outOfSync', head_commit = NULL, fetched_at = NULL, applied_commit = NULL,
               applied_revision = NULL, applied_document = NULL, changed_in = NULL, proposal = NULL,
               last_attempt = NULL, error = NULL, pinned = NULL
             WHERE tenant = ?1",
            params![tenant],
        )?;
    }
    let stored = source::stored(ctx.db, tenant)?.ok_or_else(|| ApiError::internal("a source put is not there"))?;
    Ok(json!({"source": stored.json(), "hookSecret": hook_secret}))
}

fn get(ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    Input::new(body)?.finish()?;
    let stored = source::stored(ctx.db, &ctx.caller.tenant)?.ok_or_else(super::no_source)?;
    Ok(json!({"source": stored.json()}))
}

fn delete(ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    Input::new(body)?.finish()?;
    match ctx.db.execute("DELETE FROM sources WHERE tenant = ?1", params![&ctx.caller.tenant])? {
        0 => Err(super::no_source()),
        _ => Ok(json!({})),
    }
}

fn pin(ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let commit = take_commit(&mut input, true);
    input.finish()?;
    pinned(ctx, commit)
}

fn unpin(ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    Input::new(body)?.finish()?;
    pinned(ctx, None)
}

/// Pins or unpins the source; its next cycle is due now.
fn pinned(ctx: &Ctx, commit: Option<String>) -> Result<Value, ApiError> {
    let changed = ctx.db.execute(
        "UPDATE sources SET pinned = ?2, settled_commit = NULL, due_ms = ?3 WHERE tenant = ?1",
        params![&ctx.caller.tenant, commit.as_deref(), now_ms()],
    )?;
    if changed == 0 {
        return Err(super::no_source());
    }
    let stored = source::stored(ctx.db, &ctx.caller.tenant)?.ok_or_else(super::no_source)?;
    Ok(json!({"source": stored.json()}))
}

fn refresh(asking: &Asking, call: Call) -> Result<Value, ApiError> {
    Input::new(parse_body(call.body.as_bytes())?)?.finish()?;
    asking.cycle_now(&call.caller.tenant, Ask::Refresh)
}

fn plan(asking: &Asking, call: Call) -> Result<Value, ApiError> {
    let mut input = Input::new(parse_body(call.body.as_bytes())?)?;
    let document = input.take_optional("document");
    let commit = take_commit(&mut input, false);
    if document.is_some() && commit.is_some() {
        input.problem("commit", "plan a document, or the document at a commit, not both");
    }
    input.finish()?;
    asking.plan_now(&call.caller.tenant, document, commit)
}

fn sync(asking: &Asking, call: Call) -> Result<Value, ApiError> {
    let mut input = Input::new(parse_body(call.body.as_bytes())?)?;
    let commit = take_commit(&mut input, false);
    let plan_hash = input.string("planHash", false);
    if plan_hash.as_deref().is_some_and(|hash| !fleet_guest::is_plan_hash(hash)) {
        input.problem("planHash", fleet_guest::PLAN_HASH_FORM);
    }
    input.finish()?;
    // A sync applies: it needs what an apply needs.
    let apply = call
        .methods
        .by_name("compute.fleet.apply")
        .ok_or_else(|| ApiError::new(Code::Internal, "compute.fleet.apply is not served"))?;
    apply.authorize(&call.caller)?;
    asking.cycle_now(&call.caller.tenant, Ask::Sync { commit, plan_hash })
}

/// The request's `commit`, a full commit id (40, or 64, lowercase hex digits), or its
/// problem added to `input`.
fn take_commit(input: &mut Input, required: bool) -> Option<String> {
    let commit = input.string("commit", required);
    let is_commit = |text: &str| {
        matches!(text.len(), 40 | 64) && text.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
    };
    if commit.as_deref().is_some_and(|commit| !is_commit(commit)) {
        input.problem("commit", "must be a full commit id: 40 (or 64) lowercase hex digits");
    }
    commit
}

fn random_hex(bytes: usize) -> String {
    (0..bytes).map(|_| format!("{:02x}", rand::random::<u8>())).collect()
}
