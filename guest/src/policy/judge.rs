//! A plan judged by the policies in force (SPEC §14): their input, built straight from
//! the planner's values (only the members some policy names), and their verdicts.

use std::collections::BTreeMap;

use regorus::Value as Rego;

use crate::document::PlanRequest;
use crate::estate::Estate;
use crate::kinds::Descriptor;
use crate::plan::output::{Action, Change, Plan};
use crate::policy::approval::{self, Approval};
use crate::policy::{self, Compiled, Judgement, Reads, Values, object};
use crate::state::Object;
use crate::value::Value;
use crate::{Error, Host};

/// The judgement of the policies in force on `plan` (none when there are none) and,
/// when the request names a proposal, its approval (SPEC §17). The verdicts never see
/// the proposal, so a plan hashes the same with one or without.
pub(crate) fn judge(
    estate: &Estate,
    request: &PlanRequest,
    plan: &Plan,
    host: &dyn Host,
) -> Result<(Option<Judgement>, Option<Approval>), Error> {
    let proposal = request.proposal.as_deref();
    if estate.policies.is_empty() {
        let approval = proposal
            .map(|proposal| approval::by_default(proposal, Vec::new(), approval::reviewers_rejections(proposal)));
        return Ok((None, approval));
    }
    let mut compiled = policy::compile_all(&estate.policies)?;
    let reads = compiled.iter().fold(Reads::default(), |reads, compiled: &Compiled| reads.union(compiled.reads));
    let mut input = input(estate, request, plan, reads)?;
    let judgement = policy::judge(&estate.policies, &mut compiled, &input, host);
    let Some(proposal) = proposal else { return Ok((Some(judgement), None)) };
    if let Ok(members) = input.as_object_mut() {
        members.insert(Rego::from("proposal"), policy::from_serialize(proposal)?);
    }
    let approval = approval::judge(&estate.policies, &mut compiled, &input, proposal, host);
    Ok((Some(judgement), Some(approval)))
}

/// `input` of SPEC §14, with the members `reads` names.
fn input(estate: &Estate, request: &PlanRequest, plan: &Plan, reads: Reads) -> Result<Rego, Error> {
    let mut values = Values::default();
    let mut members: Vec<(Rego, Rego)> = Vec::new();
    if reads.changes {
        let changes: Vec<Rego> =
            plan.changes.iter().map(|change| change_value(estate, request, change, &mut values)).collect();
        members.push((values.name("changes"), Rego::from(changes)));
    }
    if reads.estate {
        members.push((values.name("estate"), estate_after(estate, request, plan, &mut values)));
    }
    if reads.rest {
        members.push((values.name("calls"), policy::from_serialize(&plan.calls)?));
        members.push((values.name("summary"), policy::from_serialize(&plan.summary)?));
        members.push((values.name("blocked"), policy::from_serialize(&plan.blocked)?));
        members.push((values.name("leftAlone"), policy::from_serialize(&plan.left_alone)?));
        members.push((values.name("prune"), Rego::from(request.prune)));
        let caller = &estate.caller;
        let caller = object([
            (values.name("tenant"), values.text(&caller.tenant)),
            (values.name("principal"), values.text(&caller.principal)),
        ]);
        members.push((values.name("caller"), caller));
    }
    Ok(object(members))
}

/// A change as the plan gives it, with `before`, `after` and `reason`.
fn change_value(estate: &Estate, request: &PlanRequest, change: &Change, values: &mut Values) -> Rego {
    let Some(kind) = estate.catalog.by_kind(change.kind) else { return Rego::Null };
    let descriptor = estate.kind(kind);
    let from_prune = matches!(change.action, Action::Delete | Action::Archive);
    let before = estate
        .get(kind, change.id.as_deref().unwrap_or(&change.key))
        .map_or(Rego::Null, |object| live_value(descriptor, object, values));
    let after = match from_prune {
        true => Rego::Null,
        false => request
            .document
            .section(kind)
            .get(&change.key)
            .map_or(Rego::Null, |fields| fields_value(descriptor, fields, values)),
    };
    let fields: Vec<Rego> = change
        .fields()
        .into_iter()
        .map(|(field, from, to)| {
            let from = from.map_or(Rego::Null, |from| values.value(from));
            object([
                (values.name("field"), values.name(field)),
                (values.name("from"), from),
                (values.name("to"), values.value(to)),
            ])
        })
        .collect();
    let mut members = vec![
        (values.name("action"), values.name(change.action.verb())),
        (values.name("kind"), values.name(change.kind)),
        (values.name("key"), values.text(&change.key)),
        (values.name("fields"), Rego::from(fields)),
        (values.name("text"), values.text(&change.text().to_string())),
        (values.name("before"), before),
        (values.name("after"), after),
        (values.name("reason"), values.name(if from_prune { "prune" } else { "document" })),
    ];
    if let Some(id) = &change.id {
        members.push((values.name("id"), values.text(id)));
    }
    object(members)
}

/// A live object as the planner read it: its identity, fields (references as ids) and,
/// for kinds that archive, `archived`.
fn live_value(descriptor: &'static Descriptor, live: &Object, values: &mut Values) -> Rego {
    let mut members = vec![(values.name(descriptor.identity_name()), values.text(&live.key))];
    for (field, value) in descriptor.fields.iter().zip(&live.values) {
        members.push((values.name(field.name), values.value(value)));
    }
    if descriptor.archives() {
        members.push((values.name("archived"), Rego::from(live.archived)));
    }
    object(members)
}

/// An object as a document states it, every field filled in.
fn fields_value(descriptor: &'static Descriptor, fields: &[Value], values: &mut Values) -> Rego {
    object(descriptor.fields.iter().zip(fields).map(|(field, value)| (values.name(field.name), values.value(value))))
}

/// The estate once the plan is applied, as export would then answer it: section → key
/// → object. The document's objects replace what they name; pruned ones are gone.
fn estate_after(estate: &Estate, request: &PlanRequest, plan: &Plan, values: &mut Values) -> Rego {
    let mut document = crate::export::document(estate);
    for kind in 0..estate.catalog.len() {
        if !estate.runs(kind) {
            continue;
        }
        let section = &mut document.sections[kind];
        for (key, fields) in request.document.section(kind) {
            // The key export gives the object this key names, if it is not this one.
            let id = match estate.catalog.id_kind(key) == Some(kind) {
                true => Some(&**key),
                false => estate.bound(kind, key),
            };
            if let Some(id) = id
                && let exported = estate.key_of(kind, id)
                && exported != &**key
            {
                section.remove(exported);
            }
            section.insert(key.clone(), fields.clone());
        }
    }
    for change in plan.changes.iter().filter(|change| matches!(change.action, Action::Delete | Action::Archive)) {
        if let Some(kind) = estate.catalog.by_kind(change.kind)
            && plan.blocked.iter().all(|blocked| blocked.kind != change.kind || *blocked.key != *change.key)
        {
            document.sections[kind].remove(&change.key);
        }
    }
    let sections = estate.catalog.iter().filter(|(kind, _)| estate.runs(*kind)).map(|(kind, descriptor)| {
        let objects: BTreeMap<Rego, Rego> = document.sections[kind]
            .iter()
            .map(|(key, fields)| (values.text(key), fields_value(descriptor, fields, values)))
            .collect();
        (values.name(descriptor.section), Rego::from(objects))
    });
    let sections: Vec<(Rego, Rego)> = sections.collect();
    object(sections)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::{Caller, Level, Policy, Snapshot};

    const SITE: &str = "site_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const ACCOUNT: &str = "acct_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const POOL: &str = "pool_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const OLD: &str = "pool_bbbbbbbbbbbbbbbbbbbbbbbbbb";

    /// The verdicts of one policy that says what it sees of the input.
    fn seen(source: &str, prune: bool) -> Vec<String> {
        let mut state: Snapshot = serde_json::from_value(json!({
            "caller": {"tenant": "acme", "principal": "alice"},
            "sites": [{"id": SITE, "region": "r"}],
            "providerAccounts": [{"id": ACCOUNT, "provider": "aws"}],
            "pools": [{"id": POOL, "site": SITE, "account": ACCOUNT, "class": "gpu", "owner": "o", "gpus": 8},
                      {"id": OLD, "site": SITE, "account": ACCOUNT, "class": "cpu", "owner": "o"}],
            "bindings": [{"kind": "pool", "name": "gpu-a", "id": POOL}, {"kind": "site", "name": "eu", "id": SITE},
                         {"kind": "providerAccount", "name": "aws", "id": ACCOUNT}]
        }))
        .unwrap();
        state.policies = vec![Policy { name: "p".into(), level: Level::Advisory, source: source.into() }];
        let document = json!({"pools": {
            "gpu-a": {"site": "eu", "account": "aws", "class": "gpu", "owner": "o", "gpus": 16},
            "gpu-b": {"site": "eu", "account": "aws", "class": "gpu", "owner": "o", "gpus": 4}}});
        let plan = crate::plan(&state, &json!({"document": document, "prune": prune}).to_string()).unwrap();
        let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
        plan["policy"]["verdicts"].as_array().unwrap().iter().map(|verdict| verdict["message"].to_string()).collect()
    }

    #[test]
    fn changes_carry_before_after_and_reason() {
        let source = "package p\n\nwarn contains sprintf(\"%s %s %v %v %s\", [c.action, c.key, object.get(c, [\"before\", \"gpus\"], null), object.get(c, [\"after\", \"gpus\"], null), c.reason]) if {\n  some c in input.changes\n}\n";
        assert_eq!(
            seen(source, true),
            [
                "\"archive pool_bbbbbbbbbbbbbbbbbbbbbbbbbb 0 null prune\"",
                "\"create gpu-b null 4 document\"",
                "\"update gpu-a 8 16 document\""
            ]
        );
    }

    #[test]
    fn the_estate_is_as_it_will_be_after_the_plan() {
        let source = "package p\n\nwarn contains sprintf(\"%s %d\", [key, pool.gpus]) if {\n  some key, pool in input.estate.pools\n}\n";
        // gpu-a by its bound name (not twice), the new pool, and without prune the old one.
        assert_eq!(seen(source, false), ["\"gpu-a 16\"", "\"gpu-b 4\"", "\"pool_bbbbbbbbbbbbbbbbbbbbbbbbbb 0\""]);
        assert_eq!(seen(source, true), ["\"gpu-a 16\"", "\"gpu-b 4\""]);
    }

    #[test]
    fn the_rest_of_the_input_is_the_plans_own() {
        let source = "package p\n\nwarn contains sprintf(\"%s %s %v %d %d\", [input.caller.tenant, input.caller.principal, input.prune, input.summary.create, count(input.calls)]) if { true }\n";
        assert_eq!(seen(source, false), ["\"acme alice false 1 2\""]);
    }

    #[test]
    fn no_policy_no_judgement() {
        let state = Snapshot::empty(Caller::default());
        let plan = crate::plan(
            &Snapshot { caller: Caller { tenant: "t".into(), principal: "p".into(), grants: None }, ..state },
            r#"{"document": {}}"#,
        )
        .unwrap();
        assert!(!plan.contains("\"policy\""), "{plan}");
        assert!(!plan.contains("denied"), "{plan}");
    }
}
