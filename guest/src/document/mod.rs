//! Requests and FleetConfig documents: parsing JSON text, validating it against the
//! catalogue's descriptors with every problem reported at once (SPEC §5), and the typed
//! document the planner reads.
//!
//! `request.rs` is the typed request, `filled.rs` a document written whole (export's
//! answer, the plan hash's input), `parser.rs` the reader that reports every problem and
//! `streamed.rs` (over `cursor.rs`) the fast reader of a valid request, which gives up
//! on anything else (docs/decisions/0019).

mod cursor;
mod filled;
mod parser;
mod request;
mod streamed;

pub(crate) use filled::FilledDocument;
pub(crate) use request::{Document, Move, Override, PlanRequest, Problems, Proposal, ReviewVerdict};
pub use request::{MOVED, PLAN_HASH_FORM, is_plan_hash};

use serde_json::{Map, Value as Json};

use crate::error::{Error, ErrorCode};
use crate::json::{self, pointer};
use crate::kinds::Catalog;
use parser::Parser;

/// Parses request text; an empty request (no bytes at all) means `{}`.
fn parse_json(request: &str) -> Result<Map<String, Json>, Error> {
    if request.is_empty() {
        return Ok(Map::new());
    }
    let value = json::parse(request).map_err(|found| {
        Problems::from(found)
            .into_result()
            .err()
            .unwrap_or_else(|| Error::new(ErrorCode::InvalidArgument, "malformed JSON"))
    })?;
    match value {
        Json::Object(map) => Ok(map),
        _ => {
            let mut problems = Problems::default();
            problems.push(String::new(), "the request must be a JSON object");
            problems.into_result().map(|()| Map::new())
        }
    }
}

/// Parses an export request: `{}` (or empty text), nothing else.
pub(crate) fn parse_export(request: &str) -> Result<(), Error> {
    let map = parse_json(request)?;
    let mut problems = Problems::default();
    for key in map.keys() {
        problems.push(pointer(&[key]), "unknown field; export takes no input");
    }
    problems.into_result()
}

/// Parses a plan request (`plan_hash_allowed` false) or an apply request (true). The
/// problems found so far are returned with the request, so that the planner can add
/// those it finds while resolving keys and report them all together.
pub(crate) fn parse_plan(
    catalog: &Catalog,
    request: &str,
    plan_hash_allowed: bool,
) -> Result<(PlanRequest, Problems), Error> {
    if let Some(valid) = streamed::valid_request(catalog, request, plan_hash_allowed) {
        return Ok((valid, Problems::default()));
    }
    parse_plan_reporting(catalog, request, plan_hash_allowed)
}

/// [`parse_plan`] through a JSON tree of the whole request: every problem found.
fn parse_plan_reporting(
    catalog: &Catalog,
    request: &str,
    plan_hash_allowed: bool,
) -> Result<(PlanRequest, Problems), Error> {
    let map = parse_json(request)?;
    let mut parser = Parser::new(catalog, plan_hash_allowed);
    let parsed = parser.request(&map);
    Ok((parsed, parser.problems))
}

/// Whether the fast reader reads `request` as the reader that reports every problem
/// does, whenever it reads it at all (the document fuzz target asks).
#[cfg(feature = "fuzzing")]
pub(crate) fn streamed_agrees(request: &str) -> bool {
    let catalog = Catalog::built_in();
    [false, true].into_iter().all(|plan_hash_allowed| {
        let Some(streamed) = streamed::valid_request(&catalog, request, plan_hash_allowed) else { return true };
        let reported = parse_plan_reporting(&catalog, request, plan_hash_allowed);
        matches!(reported, Ok((read, problems)) if problems.is_empty() && read == streamed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;

    fn problems(request: &str) -> Vec<(String, String)> {
        let result = parse_plan(&Catalog::built_in(), request, false).and_then(|(_, problems)| problems.into_result());
        let Err(error) = result else {
            return Vec::new();
        };
        assert_eq!(error.code, ErrorCode::InvalidArgument);
        let details = error.details.unwrap_or_default();
        details["problems"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|problem| {
                (
                    problem["path"].as_str().unwrap_or_default().to_owned(),
                    problem["message"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    fn paths(request: &str) -> Vec<String> {
        problems(request).into_iter().map(|(path, _)| path).collect()
    }

    #[test]
    fn ids_name_their_kind() {
        let catalog = Catalog::built_in();
        assert_eq!(catalog.id_kind("pool_aaaaaaaaaaaaaaaaaaaaaaaaaa"), catalog.by_kind("pool"));
        assert_eq!(catalog.id_kind("flv_234567abcdefghijklmnopqrst"), catalog.by_kind("flavor"));
        assert_eq!(catalog.id_kind("pool_aaaaaaaaaaaaaaaaaaaaaaaaa"), None, "25 characters");
        assert_eq!(catalog.id_kind("pool_aaaaaaaaaaaaaaaaaaaaaaaaa1"), None, "1 is not base32");
        assert_eq!(catalog.id_kind("quota_aaaaaaaaaaaaaaaaaaaaaaaaaa"), None);
    }

    #[test]
    fn pointers_escape_tilde_and_slash() {
        assert_eq!(pointer(&["pools", "a/b~c", "labels"]), "/pools/a~1b~0c/labels");
    }

    #[test]
    fn empty_request_needs_a_document() {
        assert_eq!(paths(""), ["/document"]);
        assert_eq!(paths("{}"), ["/document"]);
    }

    #[test]
    fn malformed_json_has_an_empty_path() {
        assert_eq!(paths("{"), [""]);
        assert_eq!(paths("[]"), [""]);
    }

    #[test]
    fn envelope_problems() {
        assert_eq!(paths(r#"{"document": [], "prune": 1, "planHash": "x"}"#), ["/document", "/planHash", "/prune"]);
        let hash = format!("sha256:{}", "0f".repeat(32));
        let request = format!(r#"{{"document": {{}}, "prune": true, "planHash": "{hash}"}}"#);
        let (request, problems) = parse_plan(&Catalog::built_in(), &request, true).unwrap();
        assert!(problems.into_result().is_ok());
        assert!(request.prune);
        assert_eq!(request.plan_hash, Some(hash));
        for malformed in ["x", "sha256:00", &format!("sha256:{}", "A".repeat(64)), &format!("sha1:{}", "0".repeat(64))]
        {
            let request = format!(r#"{{"document": {{}}, "planHash": "{malformed}"}}"#);
            assert_eq!(
                parse_plan(&Catalog::built_in(), &request, true).unwrap().1.into_result().unwrap_err().code,
                ErrorCode::InvalidArgument
            );
        }
    }

    #[test]
    fn every_problem_is_reported_in_one_pass() {
        let request = r#"{"document": {
            "pools": {
                "gpu-a": {"site": "Bad", "class": "gpu", "owner": "team-ml", "vcpus": -1, "gpus": 1.5,
                          "labels": {"a": 1}, "id": "pool_x", "colour": "red"},
                "Bad_Key": {"site": "s", "account": "a", "class": "c", "owner": "o"},
                "site_aaaaaaaaaaaaaaaaaaaaaaaaaa": {"site": "s", "account": "a", "class": "c", "owner": "o"}
            },
            "sites": {"eu": {"region": ""}, "us": 3},
            "ownerQuotas": {"pool_aaaaaaaaaaaaaaaaaaaaaaaaaa": {"instances": 9007199254740992}},
            "offers": {"o": {"pool": "p", "to": "Team"}},
            "flavors": [],
            "extra": {}
        }}"#;
        assert_eq!(
            paths(request),
            [
                "/extra",
                "/flavors",
                "/offers/o/to",
                "/ownerQuotas/pool_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                "/ownerQuotas/pool_aaaaaaaaaaaaaaaaaaaaaaaaaa/instances",
                "/pools/Bad_Key",
                "/pools/gpu-a/account",
                "/pools/gpu-a/colour",
                "/pools/gpu-a/gpus",
                "/pools/gpu-a/id",
                "/pools/gpu-a/labels/a",
                "/pools/gpu-a/site",
                "/pools/gpu-a/vcpus",
                "/pools/site_aaaaaaaaaaaaaaaaaaaaaaaaaa",
                "/sites/eu/region",
                "/sites/us",
            ]
        );
    }

    #[test]
    fn references_take_names_or_ids_of_their_kind() {
        let document = |site: &str| {
            format!(
                r#"{{"document": {{"pools": {{"p": {{"site": "{site}", "account": "a", "class": "c", "owner": "o"}}}}}}}}"#
            )
        };
        assert!(paths(&document("eu-west")).is_empty());
        assert!(paths(&document("site_aaaaaaaaaaaaaaaaaaaaaaaaaa")).is_empty());
        assert_eq!(paths(&document("pool_aaaaaaaaaaaaaaaaaaaaaaaaaa")), ["/pools/p/site"]);
    }

    #[test]
    fn defaults_fill_omitted_fields() {
        let (request, _) =
            parse_plan(&Catalog::built_in(), r#"{"document": {"offers": {"o": {"pool": "p", "to": "t"}}}}"#, false)
                .unwrap();
        let offer = &request.document.section(4)["o"];
        assert_eq!(
            &offer[..],
            &[Value::Text("p".into()), Value::Text("t".into()), Value::Count(0), Value::Count(0), Value::Count(0)]
        );
    }
}
