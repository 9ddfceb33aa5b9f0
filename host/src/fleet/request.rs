//! The planner's request as the host writes it (the proposal's apply, its judgement, a
//! drift check and a heal): serialized, with the document as the text it was sent or
//! stored as, never decoded and encoded again.

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::api::ApiError;

/// `{"document", "prune", "planHash"?, "overrides"?, "proposal"?}` (SPEC §6.2, §6.3).
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
}

impl<'a> PlannerRequest<'a> {
    /// A plan of `document` (JSON text the host wrote or a client sent) with `prune`.
    pub fn of(document: &'a str, prune: bool) -> Result<PlannerRequest<'a>, ApiError> {
        let document = serde_json::from_str(document).map_err(ApiError::internal)?;
        Ok(PlannerRequest { document, prune, plan_hash: None, overrides: None, proposal: None })
    }

    pub fn text(&self) -> Result<String, ApiError> {
        serde_json::to_string(self).map_err(ApiError::internal)
    }
}

#[cfg(test)]
mod tests {
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
}
