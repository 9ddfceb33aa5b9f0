//! `fleet-edge`: the planner as a serverless HTTP function (SPEC §11), a component of
//! the standard `wasi:http/proxy` world built from the same planner code as the origin.
//!
//! Per request it asks the origin named by `FLEET_ORIGIN`, with the caller's own bearer
//! token, for everything the planner reads — the same export or plan call, with
//! `Accept: application/vnd.fleet.state+json`, so the origin authorizes it as that
//! method — and plans locally: export and plan answer with the origin's exact bytes.
//! Authorization is the origin's: its 401 and 403 pass through as they are. Everything else the API has is
//! `UNSUPPORTED`; an origin that cannot be reached in time, or answers with something
//! that is not a state, is `UNAVAILABLE`.
//!
//! This file is the whole behaviour, natively testable with any [`Origin`]; `wasi.rs`
//! (wasm32 only) is the wasi:http glue.

use fleet_guest::{Catalog, Error, ErrorCode, Snapshot};

#[cfg(target_arch = "wasm32")]
mod wasi;

/// The largest request body, as the origin's default (SPEC §2).
pub const BODY_LIMIT: usize = 16 << 20;

/// The largest state the origin may answer with.
pub const STATE_LIMIT: usize = 256 << 20;

/// What the origin's export and plan answer with their state instead (SPEC §11).
pub const STATE_MEDIA_TYPE: &str = "application/vnd.fleet.state+json";

/// An HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
    /// The `Allow` header of a 405.
    pub allow: Option<&'static str>,
}

impl Answer {
    fn json(body: String) -> Answer {
        Answer { status: 200, content_type: "application/json".into(), body: body.into_bytes(), allow: None }
    }

    /// The error envelope of SPEC §2, as the origin writes it.
    pub fn error(error: &Error) -> Answer {
        Answer {
            status: error.code.http_status(),
            content_type: "application/json".into(),
            body: error.envelope().to_string().into_bytes(),
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
}

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

/// Answers one request. `body` is `None` when it was larger than [`BODY_LIMIT`].
pub fn serve(
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: Option<&[u8]>,
    origin: &dyn Origin,
) -> Answer {
    let (entry, request) = match route(method, path) {
        Route::Health => {
            return Answer { status: 200, content_type: "text/plain".into(), body: b"ok".to_vec(), allow: None };
        }
        Route::NotFound => {
            return Answer::error(&Error::new(ErrorCode::NotFound, format!("no route for {method} {path}")));
        }
        Route::WrongMethod(allow) => {
            // As the origin answers: 405 METHOD_NOT_ALLOWED, with `Allow`.
            let message = format!("{path} answers {allow} only, not {method}");
            let answer = Answer::error(&Error::new(ErrorCode::MethodNotAllowed, message));
            return Answer { allow: Some(allow), ..answer };
        }
        Route::Unsupported => {
            let message =
                format!("{path} is not available at the edge, which runs only export and plan; call the origin");
            return Answer::error(&Error::new(ErrorCode::Unsupported, message));
        }
        Route::Export => (Entry::Export, body),
        Route::Plan => (Entry::Plan, body),
    };
    // In the origin's order: the token's presence, the body's size, then the token.
    let Some(authorization) = authorization else {
        return Answer::error(&Error::new(ErrorCode::Unauthenticated, "a bearer token is required"));
    };
    let Some(request) = request else {
        let message = format!("the request body is larger than the limit of {BODY_LIMIT} bytes");
        return Answer::error(&Error::new(ErrorCode::PayloadTooLarge, message));
    };
    let Ok(request) = std::str::from_utf8(request) else {
        let problem = fleet_guest::Problem { path: String::new(), message: "the body is not UTF-8".into() };
        let details = serde_json::json!({ "problems": [problem] });
        return Answer::error(
            &Error::new(ErrorCode::InvalidArgument, "the request has 1 problem").with_details(details),
        );
    };
    let request = if request.is_empty() { "{}" } else { request };
    let state = match state(origin, path, authorization) {
        Ok(state) => state,
        Err(answer) => return answer,
    };
    let planned = match entry {
        Entry::Export => fleet_guest::export(&state, request),
        Entry::Plan => fleet_guest::plan(&state, request),
    };
    match planned {
        Ok(output) => Answer::json(output),
        Err(error) => Answer::error(&error),
    }
}

#[derive(Clone, Copy)]
enum Entry {
    Export,
    Plan,
}

/// The caller's state from the origin; the origin's own answer when it refuses the token.
fn state(origin: &dyn Origin, path: &str, authorization: &str) -> Result<Snapshot, Answer> {
    let unavailable = |why: String| Answer::error(&Error::new(ErrorCode::Unavailable, why));
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
    let text = std::str::from_utf8(&reply.body).map_err(|_| not_a_state("not UTF-8".into()))?;
    let mut json = fleet_guest::json::parse(text).map_err(|_| not_a_state("not JSON".into()))?;
    without_plugin_kinds(&mut json);
    Snapshot::from_json(&Catalog::built_in(), &json).map_err(|error| not_a_state(error.message))
}

/// The edge runs no module plugins (their components are the origin's): it plans the
/// built-in kinds and leaves the tables of plugin kinds out, so that a document with a
/// plugin's section is an unknown section here (docs/decisions/0011).
fn without_plugin_kinds(state: &mut serde_json::Value) {
    let Some(members) = state.as_object_mut() else { return };
    let plugins = members.remove("plugins").unwrap_or_default();
    for plugin in plugins.as_array().into_iter().flatten() {
        if let Some(section) = plugin["descriptor"]["section"].as_str() {
            members.remove(section);
        }
        if let (Some(kind), Some(modules)) =
            (plugin["descriptor"]["kind"].as_str(), members.get_mut("modules").and_then(|m| m.as_array_mut()))
        {
            modules.retain(|module| module != kind);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Fixed(Result<Reply, String>);

    impl Origin for Fixed {
        fn state(&self, path: &str, authorization: &str) -> Result<Reply, String> {
            assert_eq!(authorization, "Bearer t");
            assert!(path == "/api/compute/fleet/plan" || path == "/api/compute/fleet/export", "{path}");
            self.0.clone()
        }
    }

    fn reply(status: u16, body: &str) -> Fixed {
        Fixed(Ok(Reply { status, content_type: "application/json".into(), body: body.as_bytes().to_vec() }))
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
        serve("POST", path, Some("Bearer t"), Some(body.as_bytes()), origin)
    }

    fn code(answer: &Answer) -> String {
        let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
        body["error"]["code"].as_str().unwrap_or_default().to_owned()
    }

    #[test]
    fn plans_and_exports_as_the_planner_does_on_the_origins_state() {
        let origin = reply(200, &state().to_string());
        let snapshot: Snapshot = serde_json::from_value(state()).unwrap();
        let request = r#"{"document": {"sites": {"eu-west": {"region": "eu-west-2"}}}}"#;
        let planned = post("/api/compute/fleet/plan", request, &origin);
        assert_eq!(planned.status, 200);
        assert_eq!(planned.body, fleet_guest::plan(&snapshot, request).unwrap().into_bytes());
        let exported = post("/api/compute/fleet/export", "", &origin);
        assert_eq!(exported.body, fleet_guest::export(&snapshot, "{}").unwrap().into_bytes());
        let invalid = post("/api/compute/fleet/plan", "{}", &origin);
        assert_eq!((invalid.status, code(&invalid)), (400, "INVALID_ARGUMENT".into()));
    }

    #[test]
    fn plugin_kinds_are_left_to_the_origin() {
        let mut with_plugin = state();
        with_plugin["modules"].as_array_mut().unwrap().push(json!("reservation"));
        with_plugin["reservations"] = json!([{"id": "rsv_aaaaaaaaaaaaaaaaaaaaaaaaaa", "owner": "ml"}]);
        with_plugin["plugins"] = json!([{"digest": "00", "descriptor": {"group": "reservations",
            "kind": "reservation", "section": "reservations", "idPrefix": "rsv", "removal": "delete", "fields": []}}]);
        let origin = reply(200, &with_plugin.to_string());
        let snapshot: Snapshot = serde_json::from_value(state()).unwrap();
        let exported = post("/api/compute/fleet/export", "", &origin);
        assert_eq!(exported.body, fleet_guest::export(&snapshot, "{}").unwrap().into_bytes());
        let planned = post("/api/compute/fleet/plan", r#"{"document": {"reservations": {}}}"#, &origin);
        assert_eq!((planned.status, code(&planned)), (400, "INVALID_ARGUMENT".into()));
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
        assert_eq!(serve("GET", "/healthz", None, None, &origin).body, b"ok");
        assert_eq!(post("/elsewhere", "{}", &origin).status, 404);
        let wrong = serve("GET", "/api/compute/fleet/plan", None, None, &origin);
        assert_eq!((wrong.status, wrong.allow), (405, Some("POST")));
        let missing = serve("POST", "/api/compute/fleet/plan", None, Some(b"{}"), &origin);
        assert_eq!((missing.status, code(&missing)), (401, "UNAUTHENTICATED".into()));
        let large = serve("POST", "/api/compute/fleet/plan", Some("Bearer t"), None, &origin);
        assert_eq!((large.status, code(&large)), (413, "PAYLOAD_TOO_LARGE".into()));
    }
}
