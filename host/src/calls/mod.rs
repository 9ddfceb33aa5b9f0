//! Calls: the method registry and everything between a request and a handler that does
//! not depend on the transport: authentication and authorization (`auth`), reading a
//! body (`input`), and running a method in the transaction it needs (`dispatch`).

pub mod auth;
pub mod input;
pub mod registry;

use std::sync::Arc;

use serde_json::Value;

use crate::api::{ApiError, Code, Problem};
use crate::app::App;
use crate::db::{self, Conn, Tx};
use auth::Caller;
use registry::{Ctx, Method, MethodKind, Run, Via};

/// Runs a method as `caller` on a request body: module methods get the parsed body in a
/// transaction of their kind; composite (planner) methods get the connection and the
/// body as it came, which the planner parses and validates itself.
pub fn dispatch(app: &Arc<App>, caller: Caller, db: Conn, method: &Method, body: &[u8]) -> Result<String, ApiError> {
    if app.config.read_only && method.kind == MethodKind::Mutation {
        return Err(ApiError::new(
            Code::Unsupported,
            format!("{} is not available: this deployment is read-only", method.name),
        ));
    }
    match &method.run {
        Run::InTransaction(handler) => {
            let mode = match method.kind {
                MethodKind::Read => Tx::Read,
                MethodKind::Mutation => Tx::Write(&caller.tenant),
            };
            let input = parse_body_with(body, method.multiline)?;
            let result = db::transaction(&db, mode, |db| handler(&Ctx { caller: &caller, db, via: Via::Api }, input));
            if result.is_ok() && method.kind == MethodKind::Mutation {
                let _ = app.events.send(());
            }
            result.map(|output| output.to_string())
        }
        Run::Composite(composite) => {
            let text = std::str::from_utf8(body).map_err(|_| {
                ApiError::invalid(vec![Problem { path: String::new(), message: "the body is not UTF-8".into() }])
            })?;
            let text = if text.is_empty() { "{}" } else { text };
            composite(app.clone(), caller, db, text)
        }
    }
}

/// An empty body (no bytes at all) means `{}`. Read strictly (SPEC §2): a duplicate key or a control
/// character is `INVALID_ARGUMENT`.
pub fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    parse_body_with(body, &[])
}

/// [`parse_body`], with top-level `multiline` fields that may hold line breaks and tabs.
pub fn parse_body_with(body: &[u8], multiline: &[&str]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    let text = std::str::from_utf8(body).map_err(|_| {
        ApiError::invalid(vec![Problem { path: String::new(), message: "the body is not UTF-8".into() }])
    })?;
    fleet_guest::json::parse_multiline(text, multiline).map_err(ApiError::invalid)
}
