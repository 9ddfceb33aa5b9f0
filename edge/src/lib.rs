//! `fleet-edge`: the planner as a serverless HTTP function (SPEC §11), a component of
//! the standard `wasi:http/proxy` world built from the same planner code as the origin.
//!
//! It serves `/healthz`, `fleet/export` and `fleet/plan`. Per request it asks the origin
//! named by `FLEET_ORIGIN`, with the caller's own bearer token, for the state the
//! planner reads — the same export or plan call, asking for the state in its encoding
//! ([`STATE_MEDIA_TYPE`]; the JSON form is read too), so the origin authorizes it as
//! that method — and plans here: export and plan answer with the bytes the origin would. The
//! origin's 401 and 403 pass through as they are. Every other method of the API is
//! `UNSUPPORTED` (501); an origin that cannot be reached in time, or answers with
//! something that is not a state, is `UNAVAILABLE`.
//!
//! The state carries the policies in force and the caller's grants, so verdicts and
//! plan-time permissions are the origin's; it names the plugins' kinds too, whose
//! checks the edge asks the origin to run (`compute.preview.check`, with the caller's
//! token): a document with a plugin's section plans here to the origin's bytes.
//!
//! This file is the whole behaviour, natively testable with any [`Origin`]; `wasi.rs`
//! (wasm32 only) is the wasi:http glue.

use fleet_guest::plugins::{Finding, Subject};
use fleet_guest::{Caller, Catalog, Error, ErrorCode, Host, Snapshot};

#[cfg(target_arch = "wasm32")]
mod wasi;

/// The largest request body, as the origin's default (SPEC §2).
pub const BODY_LIMIT: usize = 16 << 20;

/// The largest state the origin may answer with.
pub const STATE_LIMIT: usize = 256 << 20;

/// What the origin's export and plan answer with their state instead (SPEC §11): the
/// state encoding in an envelope with the caller and the plugins' kinds
/// (`fleet_guest::state::envelope`). The origin answers the JSON form too
/// (`application/vnd.fleet.state+json`), which the edge reads as well.
pub const STATE_MEDIA_TYPE: &str = "application/vnd.fleet.state";

/// An HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
    /// The `Allow` header of a 405.
    pub allow: Option<&'static str>,
}

/// The request's id (SPEC §2), as the origin names its requests: the client's own
/// `X-Request-Id` when it sent one of 1–128 visible ASCII characters, else `new()`. The
/// edge sends it on to the origin, so that both name the request alike.
pub fn request_id(given: Option<&[u8]>, new: impl FnOnce() -> String) -> String {
    match given {
        Some(id) if fleet_guest::grammar::is_request_id(id) => String::from_utf8_lossy(id).into_owned(),
        _ => new(),
    }
}

impl Answer {
    fn json(body: String) -> Answer {
        Answer { status: 200, content_type: "application/json".into(), body: body.into_bytes(), allow: None }
    }

    /// The error envelope of SPEC §2, as the origin writes it, naming the request.
    pub fn error(error: &Error, request_id: &str) -> Answer {
        let mut envelope = error.envelope();
        envelope["error"]["requestId"] = serde_json::Value::from(request_id);
        Answer {
            status: error.code.http_status(),
            content_type: "application/json".into(),
            body: envelope.to_string().into_bytes(),
            allow: None,
        }
    }

    /// Whether clients should retry later (`UNAVAILABLE`).
    pub fn retry_later(&self) -> bool {
        self.status == ErrorCode::Unavailable.http_status()
    }
}

/// What the origin answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
}

/// The origin, reached over HTTP.
pub trait Origin {
    /// POSTs `{}` to `path` with this `Authorization` header and `Accept:`
    /// [`STATE_MEDIA_TYPE`]. An error is why no answer came (unreachable, timed out,
    /// not HTTP, too large).
    fn state(&self, path: &str, authorization: &str) -> Result<Reply, String>;

    /// POSTs `body` to [`CHECK_PATH`] with this `Authorization` header: a plugin kind's
    /// check, which the origin runs in its plugin's sandbox.
    fn check(&self, authorization: &str, body: &[u8]) -> Result<Reply, String>;
}

/// Where the origin runs a plugin's check for another host of the planner.
pub const CHECK_PATH: &str = "/api/compute/preview/check";

/// What a request asks of the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Health,
    Export,
    Plan,
    /// Any other method of the API: apply, the modules, status, ...
    Unsupported,
    NotFound,
    /// A route that exists with another HTTP method.
    WrongMethod(&'static str),
}

/// The route of an HTTP method and path (without the query).
pub fn route(method: &str, path: &str) -> Route {
    let api = path.strip_prefix("/api/compute/").and_then(|rest| rest.split_once('/'));
    match (method, path, api) {
        ("GET", "/healthz", _) => Route::Health,
        (_, "/healthz", _) => Route::WrongMethod("GET"),
        ("POST", _, Some(("fleet", "export"))) => Route::Export,
        ("POST", _, Some(("fleet", "plan"))) => Route::Plan,
        ("POST", _, Some(_)) => Route::Unsupported,
        (_, _, Some(_)) => Route::WrongMethod("POST"),
        _ => Route::NotFound,
    }
}

/// Answers one request, named `request_id` (see [`request_id`]). `body` is `None` when
/// it was larger than [`BODY_LIMIT`].
pub fn serve(
    method: &str,
    path: &str,
    request_id: &str,
    authorization: Option<&str>,
    body: Option<&[u8]>,
    origin: &dyn Origin,
) -> Answer {
    let refused = |error: Error| Answer::error(&error, request_id);
    let (entry, request) = match route(method, path) {
        Route::Health => {
            return Answer { status: 200, content_type: "text/plain".into(), body: b"ok".to_vec(), allow: None };
        }
        Route::NotFound => {
            return refused(Error::new(ErrorCode::NotFound, format!("no route for {method} {path}")));
        }
        Route::WrongMethod(allow) => {
            // As the origin answers: 405 METHOD_NOT_ALLOWED, with `Allow`.
            let message = format!("{path} answers {allow} only, not {method}");
            let answer = refused(Error::new(ErrorCode::MethodNotAllowed, message));
            return Answer { allow: Some(allow), ..answer };
        }
        Route::Unsupported => {
            let message =
                format!("{path} is not available at the edge, which runs only export and plan; call the origin");
            return refused(Error::new(ErrorCode::Unsupported, message));
        }
        Route::Export => (Entry::Export, body),
        Route::Plan => (Entry::Plan, body),
    };
    // In the origin's order: the token's presence, the body's size, then the token.
    let Some(authorization) = authorization else {
        return refused(Error::new(ErrorCode::Unauthenticated, "a bearer token is required"));
    };
    let Some(request) = request else {
        let message = format!("the request body is larger than the limit of {BODY_LIMIT} bytes");
        return refused(Error::new(ErrorCode::PayloadTooLarge, message));
    };
    let Ok(request) = std::str::from_utf8(request) else {
        let problem = fleet_guest::Problem { path: String::new(), message: "the body is not UTF-8".into() };
        let details = serde_json::json!({ "problems": [problem] });
        return refused(Error::new(ErrorCode::InvalidArgument, "the request has 1 problem").with_details(details));
    };
    let request = if request.is_empty() { "{}" } else { request };
    let host = match state(origin, path, request_id, authorization) {
        Ok(host) => host,
        Err(answer) => return answer,
    };
    let planned = match entry {
        Entry::Export => fleet_guest::export(&host, request),
        Entry::Plan => fleet_guest::plan(&host, request),
    };
    match planned {
        Ok(output) => Answer::json(output),
        Err(error) => refused(error),
    }
}

#[derive(Clone, Copy)]
enum Entry {
    Export,
    Plan,
}

/// The planner's host at the edge: the origin's state, its plugin kinds, and their
/// checks, run by the origin with the caller's token.
struct EdgeHost<'a> {
    /// Taken by the planner's one read of it, not copied.
    snapshot: std::cell::RefCell<Option<Snapshot>>,
    caller: Caller,
    /// The plugin kinds' descriptors, as `plugins.kinds` answers them.
    kinds: String,
    origin: &'a dyn Origin,
    authorization: &'a str,
}

impl Host for EdgeHost<'_> {
    fn caller(&self) -> Caller {
        self.caller.clone()
    }

    fn state(&self, _catalog: &Catalog) -> Result<Snapshot, Error> {
        let taken = self.snapshot.borrow_mut().take();
        taken.ok_or_else(|| Error::new(ErrorCode::Internal, "the planner read the state twice"))
    }

    fn invoke(&mut self, method: &str, _input: &str) -> Result<String, Error> {
        Err(Error::new(ErrorCode::Unsupported, format!("the edge cannot run {method}: it has no composite methods")))
    }

    fn plugin_kinds(&self) -> Result<String, Error> {
        Ok(self.kinds.clone())
    }

    /// The origin runs the check in its plugin's sandbox; its refusal is the plan's
    /// error, as the origin's own plan would end.
    fn check(&self, kind: &str, subjects: Vec<Subject>) -> Result<Vec<Finding>, Error> {
        // The planner wrote each object as JSON text; the origin takes them as objects.
        let parsed = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap_or_default();
        let subjects: Vec<serde_json::Value> = subjects
            .iter()
            .map(|Subject { object, previous, references }| {
                let references: Vec<serde_json::Value> = references
                    .iter()
                    .map(|(field, object)| serde_json::json!({"field": field, "object": parsed(object)}))
                    .collect();
                let previous = previous.as_deref().map_or(serde_json::Value::Null, parsed);
                serde_json::json!({"object": parsed(object), "previous": previous, "references": references})
            })
            .collect();
        let body = serde_json::json!({"kind": kind, "subjects": subjects}).to_string();
        let unavailable = |why: String| Error::new(ErrorCode::Unavailable, why);
        let reply = self
            .origin
            .check(self.authorization, body.as_bytes())
            .map_err(|why| unavailable(format!("the origin cannot be reached for the check of {kind}: {why}")))?;
        let answer: serde_json::Value = serde_json::from_slice(&reply.body).map_err(|_| {
            unavailable(format!("the origin answered the check of {kind} with something other than JSON"))
        })?;
        if reply.status != 200 {
            let error = &answer["error"];
            let code = ErrorCode::ALL.into_iter().find(|code| error["code"] == code.as_str());
            let message = error["message"].as_str().unwrap_or("the origin refused the check").to_owned();
            return Err(Error::new(code.unwrap_or(ErrorCode::Unavailable), message));
        }
        serde_json::from_value::<Vec<Finding>>(answer["problems"].clone()).map_err(|_| {
            unavailable(format!("the origin answered the check of {kind} with something other than problems"))
        })
    }
}

/// The caller's state from the origin, as the planner's host; the origin's own answer
/// when it refuses the token.
fn state<'a>(
    origin: &'a dyn Origin,
    path: &str,
    request_id: &str,
    authorization: &'a str,
) -> Result<EdgeHost<'a>, Answer> {
    let unavailable = |why: String| Answer::error(&Error::new(ErrorCode::Unavailable, why), request_id);
    let reply =
        origin.state(path, authorization).map_err(|why| unavailable(format!("the origin cannot be reached: {why}")))?;
    match reply.status {
        200 => {}
        401 | 403 => {
            return Err(Answer {
                status: reply.status,
                content_type: reply.content_type,
                body: reply.body,
                allow: None,
            });
        }
        status => return Err(unavailable(format!("the origin answered the state read with HTTP {status}"))),
    }
    let not_a_state =
        |why: String| unavailable(format!("the origin answered with something other than a state: {why}"));
    let encoded = reply.content_type == STATE_MEDIA_TYPE;
    // The envelope's header, or the whole JSON form: the caller and the plugins' kinds.
    let (header, encoding) = match encoded {
        true => fleet_guest::state::open_envelope(&reply.body).map_err(not_a_state)?,
        false => (std::str::from_utf8(&reply.body).map_err(|_| not_a_state("not UTF-8".into()))?, &[][..]),
    };
    // serde_json, not the strict reader of requests: the state holds text with line
    // breaks (policies' sources), and the origin wrote it with serde_json itself.
    let json: serde_json::Value = serde_json::from_str(header).map_err(|_| not_a_state("not JSON".into()))?;
    let descriptors: Vec<&serde_json::Value> =
        json["plugins"].as_array().into_iter().flatten().map(|plugin| &plugin["descriptor"]).collect();
    let kinds = serde_json::to_string(&descriptors).map_err(|error| not_a_state(error.to_string()))?;
    let plugin_kinds = fleet_guest::plugins::parse_kinds(&kinds).map_err(not_a_state)?;
    let catalog = match plugin_kinds.is_empty() {
        true => Catalog::built_in(),
        false => Catalog::with_plugins(&plugin_kinds).map_err(|(kind, why)| not_a_state(format!("{kind}: {why}")))?,
    };
    let snapshot = match encoded {
        true => {
            let caller = serde_json::from_value(json["caller"].clone())
                .map_err(|error| not_a_state(format!("its caller: {error}")))?;
            let snapshot =
                fleet_guest::state::decode(&catalog, encoding).map_err(|error| not_a_state(error.message))?;
            Snapshot { caller, ..snapshot }
        }
        false => Snapshot::from_json(&catalog, &json).map_err(|error| not_a_state(error.message))?,
    };
    let caller = snapshot.caller.clone();
    Ok(EdgeHost { snapshot: std::cell::RefCell::new(Some(snapshot)), caller, kinds, origin, authorization })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_clients_request_id_is_kept_when_it_is_1_to_128_visible_ascii_characters() {
        let new = || "new".to_owned();
        assert_eq!(super::request_id(Some(b"ci-42/retry:1"), new), "ci-42/retry:1");
        assert_eq!(super::request_id(Some("x".repeat(128).as_bytes()), new), "x".repeat(128));
        for refused in [&b""[..], &b"two words"[..], "x".repeat(129).as_bytes(), "\u{e9}".as_bytes()] {
            assert_eq!(super::request_id(Some(refused), new), "new", "{refused:?}");
        }
        assert_eq!(super::request_id(None, new), "new");
    }

    use super::*;
    use serde_json::json;

    struct Fixed(Result<Reply, String>);

    impl Origin for Fixed {
        fn state(&self, path: &str, authorization: &str) -> Result<Reply, String> {
            assert_eq!(authorization, "Bearer t");
            assert!(path == "/api/compute/fleet/plan" || path == "/api/compute/fleet/export", "{path}");
            self.0.clone()
        }

        /// Every subject has one problem, at `/note`.
        fn check(&self, authorization: &str, body: &[u8]) -> Result<Reply, String> {
            assert_eq!(authorization, "Bearer t");
            let request: serde_json::Value = serde_json::from_slice(body).unwrap();
            let problems: Vec<serde_json::Value> = (0..request["subjects"].as_array().unwrap().len())
                .map(|subject| json!({"subject": subject, "path": "/note", "message": "no notes"}))
                .collect();
            let body = json!({ "problems": problems }).to_string().into_bytes();
            Ok(Reply { status: 200, content_type: "application/json".into(), body })
        }
    }

    fn reply(status: u16, body: &str) -> Fixed {
        Fixed(Ok(Reply { status, content_type: "application/json".into(), body: body.as_bytes().to_vec() }))
    }

    /// The origin's answer of `state` as the state encoding in its envelope.
    fn encoded(state: &serde_json::Value) -> Fixed {
        let descriptors: Vec<&serde_json::Value> =
            state["plugins"].as_array().into_iter().flatten().map(|plugin| &plugin["descriptor"]).collect();
        let kinds = fleet_guest::plugins::parse_kinds(&serde_json::to_string(&descriptors).unwrap()).unwrap();
        let catalog = Catalog::with_plugins(&kinds).unwrap();
        let snapshot = Snapshot::from_json(&catalog, state).unwrap();
        let header = json!({"caller": state["caller"], "plugins": state["plugins"]}).to_string();
        let body = fleet_guest::state::envelope(&header, &snapshot.encode(&catalog));
        Fixed(Ok(Reply { status: 200, content_type: STATE_MEDIA_TYPE.into(), body }))
    }

    fn state() -> serde_json::Value {
        json!({
            "caller": {"tenant": "acme", "principal": "alice"},
            "modules": ["site", "providerAccount", "pool", "ownerQuota", "offer", "flavor"],
            "sites": [{"id": "site_aaaaaaaaaaaaaaaaaaaaaaaaaa", "region": "eu-west-1", "labels": {}}],
            "bindings": [{"kind": "site", "name": "eu-west", "id": "site_aaaaaaaaaaaaaaaaaaaaaaaaaa"}]
        })
    }

    fn post(path: &str, body: &str, origin: &dyn Origin) -> Answer {
        serve("POST", path, "test-1", Some("Bearer t"), Some(body.as_bytes()), origin)
    }

    fn code(answer: &Answer) -> String {
        let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
        body["error"]["code"].as_str().unwrap_or_default().to_owned()
    }

    #[test]
    fn plans_and_exports_as_the_planner_does_on_the_origins_state_in_either_form() {
        let snapshot: Snapshot = serde_json::from_value(state()).unwrap();
        for origin in [reply(200, &state().to_string()), encoded(&state())] {
            let request = r#"{"document": {"sites": {"eu-west": {"region": "eu-west-2"}}}}"#;
            let planned = post("/api/compute/fleet/plan", request, &origin);
            assert_eq!(planned.status, 200);
            assert_eq!(planned.body, fleet_guest::plan(&snapshot, request).unwrap().into_bytes());
            let exported = post("/api/compute/fleet/export", "", &origin);
            assert_eq!(exported.body, fleet_guest::export(&snapshot, "{}").unwrap().into_bytes());
            let invalid = post("/api/compute/fleet/plan", "{}", &origin);
            assert_eq!((invalid.status, code(&invalid)), (400, "INVALID_ARGUMENT".into()));
        }
        let mut cut = encoded(&state());
        if let Ok(reply) = &mut cut.0 {
            reply.body.truncate(reply.body.len() - 3);
        }
        let answer = post("/api/compute/fleet/plan", r#"{"document": {}}"#, &cut);
        assert_eq!((answer.status, code(&answer)), (503, "UNAVAILABLE".into()));
    }

    #[test]
    fn plugin_kinds_plan_here_with_their_checks_run_by_the_origin() {
        let mut with_plugin = state();
        with_plugin["modules"].as_array_mut().unwrap().push(json!("reservation"));
        with_plugin["reservations"] = json!([{"id": "rsv_aaaaaaaaaaaaaaaaaaaaaaaaaa", "note": "old"}]);
        with_plugin["plugins"] = json!([{"digest": "00", "descriptor": {"group": "reservations",
            "kind": "reservation", "section": "reservations", "idPrefix": "rsv", "removal": "delete",
            "fields": [{"name": "note", "type": "string", "required": false, "immutable": false}]}}]);
        for origin in [reply(200, &with_plugin.to_string()), encoded(&with_plugin)] {
            let exported = post("/api/compute/fleet/export", "", &origin);
            let exported: serde_json::Value = serde_json::from_slice(&exported.body).unwrap();
            assert_eq!(exported["document"]["reservations"]["rsv_aaaaaaaaaaaaaaaaaaaaaaaaaa"]["note"], "old");
            let request = r#"{"document": {"reservations": {"night": {"note": "new"}}}}"#;
            let planned = post("/api/compute/fleet/plan", request, &origin);
            assert_eq!(planned.status, 200, "{:?}", String::from_utf8_lossy(&planned.body));
            let plan: serde_json::Value = serde_json::from_slice(&planned.body).unwrap();
            assert_eq!(plan["blocked"][0]["reason"], "no notes", "{plan}");
        }
    }

    #[test]
    fn the_policies_and_grants_of_the_state_judge_the_plan_here() {
        let mut judged = state();
        judged["caller"]["grants"] = json!(["compute:fleet:admin @ compute-fleet"]);
        judged["policies"] = json!([{"name": "no-sites", "level": "enforced",
            "source": "package p\n\ndeny contains \"no new sites\" if {\n  some c in input.changes\n  c.kind == \"site\"\n}\n"}]);
        let origin = reply(200, &judged.to_string());
        let request = r#"{"document": {"sites": {"eu-west": {"region": "eu-west-2"}, "us": {"region": "us-1"}}}}"#;
        let planned = post("/api/compute/fleet/plan", request, &origin);
        assert_eq!(planned.status, 200);
        let snapshot: Snapshot = serde_json::from_value(judged).unwrap();
        assert_eq!(planned.body, fleet_guest::plan(&snapshot, request).unwrap().into_bytes());
        let plan: serde_json::Value = serde_json::from_slice(&planned.body).unwrap();
        assert_eq!(plan["summary"]["denied"], 1, "{plan}");
        assert_eq!(plan["blocked"][0]["reason"], "not permitted: compute:sites:write @ compute-sites", "{plan}");
    }

    /// Every golden case of the planner (`guest/tests/plans`), its state answered by the
    /// origin: the edge answers what the planner answers, policies' verdicts included.
    #[test]
    fn every_golden_plan_comes_out_of_the_edge_unchanged() {
        for case in fleet_guest::golden::cases() {
            let read = |name: &str| std::fs::read_to_string(case.join(name)).unwrap();
            let (state, request) = (read("state.json"), read("request.json"));
            let answer = post("/api/compute/fleet/plan", &request, &reply(200, &state));
            let snapshot: Snapshot = serde_json::from_str(&state).unwrap();
            let planned = match fleet_guest::plan(&snapshot, &request) {
                Ok(plan) => plan.into_bytes(),
                Err(error) => Answer::error(&error, "test-1").body,
            };
            assert_eq!(String::from_utf8_lossy(&answer.body), String::from_utf8_lossy(&planned), "{case:?}");
        }
    }

    #[test]
    fn the_origins_refusal_passes_through_and_its_failures_are_unavailable() {
        let refused = r#"{"error":{"code":"UNAUTHENTICATED","message":"unknown token"}}"#;
        let answer = post("/api/compute/fleet/plan", "{}", &reply(401, refused));
        assert_eq!((answer.status, answer.body), (401, refused.as_bytes().to_vec()));
        for origin in [
            Fixed(Err("connection refused".into())),
            reply(500, "{}"),
            reply(200, "<html>"),
            reply(200, r#"{"caller": {"tenant": "acme", "principal": "alice"}, "pools": [{"id": 3}]}"#),
        ] {
            let answer = post("/api/compute/fleet/plan", "{}", &origin);
            assert_eq!((answer.status, code(&answer)), (503, "UNAVAILABLE".into()), "{answer:?}");
            assert!(answer.retry_later());
        }
    }

    #[test]
    fn only_export_and_plan_run_here() {
        let origin = reply(200, &state().to_string());
        for path in ["/api/compute/fleet/apply", "/api/compute/fleet/status", "/api/compute/pools/create"] {
            let answer = post(path, "{}", &origin);
            assert_eq!((answer.status, code(&answer)), (501, "UNSUPPORTED".into()), "{path}");
        }
        assert_eq!(serve("GET", "/healthz", "test-1", None, None, &origin).body, b"ok");
        // Its own errors name the request, as the origin's do.
        let refused = serve("POST", "/api/compute/pools/list", "test-1", Some("Bearer t"), Some(b"{}"), &origin);
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&refused.body).unwrap()["error"]["requestId"], "test-1");
        assert_eq!(post("/elsewhere", "{}", &origin).status, 404);
        let wrong = serve("GET", "/api/compute/fleet/plan", "test-1", None, None, &origin);
        assert_eq!((wrong.status, wrong.allow), (405, Some("POST")));
        let missing = serve("POST", "/api/compute/fleet/plan", "test-1", None, Some(b"{}"), &origin);
        assert_eq!((missing.status, code(&missing)), (401, "UNAUTHENTICATED".into()));
        let large = serve("POST", "/api/compute/fleet/plan", "test-1", Some("Bearer t"), None, &origin);
        assert_eq!((large.status, code(&large)), (413, "PAYLOAD_TOO_LARGE".into()));
    }
}
