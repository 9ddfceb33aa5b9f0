//! The planner's request as the host writes it (the proposal's apply, its judgement, a
//! drift check and a heal): serialized, with the document as the text it was sent or
//! stored as, never decoded and encoded again; and a client's request with the `source`
//! only the host may give.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::api::ApiError;
use crate::calls::auth::Caller;
use crate::calls::input::{self, Input};

/// `{"document", "prune", "planHash"?, "overrides"?, "proposal"?, "source"?}` (SPEC §6.2,
/// §6.3).
#[derive(Serialize)]
pub(super) struct PlannerRequest<'a> {
    pub document: &'a RawValue,
    pub prune: bool,
    /// The plan an apply must make, as reviewed.
    #[serde(rename = "planHash", skip_serializing_if = "Option::is_none")]
    pub plan_hash: Option<&'a str>,
    /// The overrides an apply gives the plan's denials, as the client sent them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overrides: Option<&'a RawValue>,
    /// The proposal whose approval the plan reports (`input.proposal`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proposal: Option<Value>,
    /// The git source the document comes from (`input.source`, SPEC §20.3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<&'a RawValue>,
}

impl<'a> PlannerRequest<'a> {
    /// A plan of `document` (JSON text the host wrote or a client sent) with `prune`.
    pub fn of(document: &'a str, prune: bool) -> Result<PlannerRequest<'a>, ApiError> {
        let document = serde_json::from_str(document).map_err(ApiError::internal)?;
        Ok(PlannerRequest { document, prune, plan_hash: None, overrides: None, proposal: None, source: None })
    }

    pub fn text(&self) -> Result<String, ApiError> {
        serde_json::to_string(self).map_err(ApiError::internal)
    }
}

/// `source` (JSON text the host wrote) as the planner request's member.
pub(super) fn source_member(source: Option<&str>) -> Result<Option<&RawValue>, ApiError> {
    source.map(|text| serde_json::from_str(text).map_err(ApiError::internal)).transpose()
}

/// A client's plan request (a JSON object's text) for the planner: `input.source` is
/// the host's alone to give, so a `source` in it is refused, and a git source's cycle
/// (`caller.git_source`) has its own added. A body that is no JSON object is the
/// planner's to refuse.
pub(super) fn vouched<'a>(request: Cow<'a, str>, caller: &Caller) -> Result<Cow<'a, str>, ApiError> {
    // Only a request that holds the word can name one.
    if caller.git_source.is_none() && !request.contains(r#""source""#) {
        return Ok(request);
    }
    let Ok(members) = input::members(&request) else { return Ok(request) };
    if members.iter().any(|(name, _)| name == "source") {
        let mut input = Input::new(Value::Object(serde_json::Map::new()))?;
        input.problem("source", "unknown field");
        input.finish()?;
    }
    match with_source_of(&members, caller)? {
        Some(text) => Ok(Cow::Owned(text)),
        None => Ok(request),
    }
}

/// An apply's request, its own `source` taken out already, with a git source's cycle's
/// `input.source` added as [`vouched`] adds it; as it is for any other caller.
pub(super) fn with_git_source<'a>(request: Cow<'a, str>, caller: &Caller) -> Result<Cow<'a, str>, ApiError> {
    if caller.git_source.is_none() {
        return Ok(request);
    }
    let Ok(members) = input::members(&request) else { return Ok(request) };
    Ok(with_source_of(&members, caller)?.map_or(request, Cow::Owned))
}

/// `members` and `caller.git_source` as `source`, written as one object; none without one.
fn with_source_of(members: &[(String, &RawValue)], caller: &Caller) -> Result<Option<String>, ApiError> {
    let Some(source) = &caller.git_source else { return Ok(None) };
    let members = members.iter().map(|(name, value)| (name.as_str(), value.get()));
    object_text(members.chain([("source", source.as_str())])).map(Some)
}

/// A JSON object's text from its members' names and values (each value JSON text as it
/// came), in their order.
pub(super) fn object_text<'m>(members: impl IntoIterator<Item = (&'m str, &'m str)>) -> Result<String, ApiError> {
    let mut text = String::from("{");
    for (name, value) in members {
        if text.len() > 1 {
            text.push(',');
        }
        text.push_str(&serde_json::to_string(name).map_err(ApiError::internal)?);
        text.push(':');
        text.push_str(value);
    }
    text.push('}');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_document_is_written_as_it_came() {
        let document = r#"{"pools": {"gpu-a": {"gpus": 1.50, "note": "\u00e9"}}}"#;
        let mut request = PlannerRequest::of(document, true).unwrap();
        assert_eq!(request.text().unwrap(), format!(r#"{{"document":{document},"prune":true}}"#));
        let overrides = serde_json::from_str::<&RawValue>(r#"[{"policy": "p", "reason": "r"}]"#).unwrap();
        request.plan_hash = Some("sha256:x");
        request.overrides = Some(overrides);
        request.proposal = Some(serde_json::json!({"number": 1}));
        let written: Value = serde_json::from_str(&request.text().unwrap()).unwrap();
        assert_eq!(written["planHash"], "sha256:x");
        assert_eq!(written["overrides"][0]["policy"], "p");
        assert_eq!(written["proposal"]["number"], 1);
        assert!(PlannerRequest::of("{", false).is_err());
    }

    fn caller(git_source: Option<&str>) -> Caller {
        Caller {
            tenant: "acme".into(),
            principal: "alice".into(),
            grants: Vec::new(),
            token: None,
            git_source: git_source.map(str::to_owned),
        }
    }

    #[test]
    fn only_the_host_gives_a_source() {
        let body = r#"{"document": {"sites": {"lab": {"labels": {"source": "git"}}}}, "prune": true}"#;
        assert_eq!(vouched(Cow::Borrowed(body), &caller(None)).unwrap(), body);
        let error = vouched(Cow::Borrowed(r#"{"document": {}, "source": {}}"#), &caller(None)).unwrap_err();
        assert_eq!(error.details.unwrap()["problems"][0]["path"], "/source");
        let source = r#"{"url":"https://h/r","branch":"main","commit":"abc","path":"fleet"}"#;
        let error = vouched(Cow::Borrowed(r#"{"document": {}, "source": {}}"#), &caller(Some(source))).unwrap_err();
        assert_eq!(error.details.unwrap()["problems"][0]["path"], "/source");

        let written: Value =
            serde_json::from_str(&vouched(Cow::Borrowed(body), &caller(Some(source))).unwrap()).unwrap();
        assert_eq!(written["source"]["branch"], "main");
        assert_eq!(
            (&written["prune"], &written["document"]["sites"]["lab"]["labels"]["source"]),
            (&json!(true), &json!("git"))
        );
        let written: Value =
            serde_json::from_str(&vouched(Cow::Borrowed("{}"), &caller(Some(source))).unwrap()).unwrap();
        assert_eq!(written, json!({"source": serde_json::from_str::<Value>(source).unwrap()}));
        // Not an object: the planner says what is wrong with it.
        assert_eq!(vouched(Cow::Borrowed("[1]"), &caller(Some(source))).unwrap(), "[1]");
    }
}
