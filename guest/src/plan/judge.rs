//! A plan judged by the policies in force (SPEC §14): their input, built straight from
//! the planner's values (only the members some policy names), and their verdicts.

use std::collections::BTreeMap;

use regorus::Value as Rego;
use rustc_hash::FxHashSet;

use super::output::{Action, Change, Plan};
use crate::document::PlanRequest;
use crate::error::Error;
use crate::estate::Estate;
use crate::kinds::{Descriptor, FieldType};
use crate::policy::approval::{self, Approval};
use crate::policy::{self, Compiled, Judgement, Reads, Values, object};
use crate::state::Object;
use crate::value::Value;

/// The judgement of the policies in force on `plan` (none when there are none) and,
/// when the request names a proposal, its approval (SPEC §17). The verdicts never see
/// the proposal, so a plan hashes the same with one or without.
pub(crate) fn judge(
    estate: &Estate,
    request: &PlanRequest,
    plan: &Plan,
    judging: &dyn Fn(&str),
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
    let judgement = policy::judge(&estate.policies, &mut compiled, &input, judging);
    let Some(proposal) = proposal else { return Ok((Some(judgement), None)) };
    if let Ok(members) = input.as_object_mut() {
        members.insert(Rego::from("proposal"), policy::from_serialize(proposal)?);
    }
    let approval = approval::judge(&estate.policies, &mut compiled, &input, proposal, judging);
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
    if reads.estate || reads.referenced_by {
        let after = EstateAfter::new(estate, request, plan);
        if reads.estate {
            members.push((values.name("estate"), after.value(&mut values)));
        }
        if reads.referenced_by {
            members.push((values.name("referencedBy"), after.referenced_by(&mut values)));
        }
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
        if let Some(source) = &request.source {
            members.push((values.name("source"), policy::from_serialize(source)?));
        }
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

/// The estate once the plan is applied, as export would then answer it: per kind that
/// runs, its objects sorted by key. Nothing is copied: each object is the live one or
/// the document's.
struct EstateAfter<'a> {
    estate: &'a Estate,
    sections: Vec<(usize, Vec<(&'a str, After<'a>)>)>,
}

/// An object of the estate once the plan is applied.
#[derive(Clone, Copy)]
enum After<'a> {
    /// As the planner read it, which the plan leaves as it is: references are ids.
    Live(&'a Object),
    /// As the document states it: references are keys.
    Stated(&'a [Value]),
}

impl<'a> EstateAfter<'a> {
    /// The document's objects replace what they name, by its key; pruned ones are gone
    /// (unless blocked); archived ones are left out, as export leaves them out.
    fn new(estate: &'a Estate, request: &'a PlanRequest, plan: &'a Plan) -> EstateAfter<'a> {
        let sections = estate.catalog.iter().filter(|(kind, _)| estate.runs(*kind)).map(|(kind, descriptor)| {
            let pruned: FxHashSet<&str> = plan
                .changes
                .iter()
                .filter(|change| {
                    matches!(change.action, Action::Delete | Action::Archive) && change.kind == descriptor.kind
                })
                .filter(|change| {
                    plan.blocked.iter().all(|blocked| blocked.kind != change.kind || *blocked.key != *change.key)
                })
                .map(|change| &*change.key)
                .collect();
            // The document's objects, last to first: one whose key is the exported key of
            // an object a later key names is replaced by that one.
            let mut replaced: FxHashSet<&str> = FxHashSet::default();
            let mut objects = Vec::new();
            for (key, fields) in request.document.section(kind).iter().rev() {
                if !replaced.contains(&**key) && !pruned.contains(&**key) {
                    objects.push((&**key, After::Stated(fields)));
                }
                let id = match estate.catalog.id_kind(key) == Some(kind) {
                    true => Some(&**key),
                    false => estate.bound(kind, key),
                };
                if let Some(id) = id {
                    replaced.insert(estate.key_of(kind, id));
                }
                replaced.insert(key);
            }
            let live = estate.objects(kind).iter().filter(|object| !object.archived).filter_map(|object| {
                let key = estate.key_of(kind, &object.key);
                (!replaced.contains(key) && !pruned.contains(key)).then_some((key, After::Live(object)))
            });
            objects.extend(live);
            objects.sort_unstable_by(|left, right| left.0.cmp(right.0));
            (kind, objects)
        });
        EstateAfter { estate, sections: sections.collect() }
    }

    /// A field of an object, references as keys.
    fn field(&self, kind: usize, object: After<'a>, at: usize) -> Field<'a> {
        match object {
            After::Stated(fields) => Field::Value(&fields[at]),
            After::Live(live) => match self.estate.catalog.target(kind, at) {
                Some(target) => Field::Key(self.estate.key_of(target, live.values[at].as_text())),
                None => Field::Value(&live.values[at]),
            },
        }
    }

    /// `input.estate`: section → key → object, every field filled in.
    fn value(&self, values: &mut Values) -> Rego {
        let mut sections = Vec::with_capacity(self.sections.len());
        for (kind, objects) in &self.sections {
            let descriptor = self.estate.kind(*kind);
            let mut members = Vec::with_capacity(objects.len());
            for &(key, after) in objects {
                let fields = descriptor.fields.iter().enumerate().map(|(at, field)| {
                    let value = match self.field(*kind, after, at) {
                        Field::Value(value) => values.value(value),
                        Field::Key(key) => values.text(key),
                    };
                    (values.name(field.name), value)
                });
                let fields: Vec<(Rego, Rego)> = fields.collect();
                members.push((values.text(key), object(fields)));
            }
            sections.push((values.name(descriptor.section), object(members)));
        }
        object(sections)
    }

    /// `input.referencedBy` (SPEC §14): section → key → referring section → the sorted
    /// keys of the objects whose references name that object. An object no one
    /// references is absent, as is a referring section with no referrer.
    fn referenced_by(&self, values: &mut Values) -> Rego {
        type Referrers<'k> = BTreeMap<&'static str, Vec<&'k str>>;
        let mut named: BTreeMap<&'static str, BTreeMap<&str, Referrers>> = BTreeMap::new();
        for (kind, objects) in &self.sections {
            let descriptor = self.estate.kind(*kind);
            for (at, field) in descriptor.fields.iter().enumerate() {
                let FieldType::Ref(target) = field.ty else { continue };
                let Some(target) = self.estate.catalog.by_kind(target) else { continue };
                let target = self.estate.kind(target).section;
                // Keys in order, so each list is sorted as it grows.
                for &(key, after) in objects {
                    let named_key = match self.field(*kind, after, at) {
                        Field::Key(named_key) => named_key,
                        Field::Value(Value::Text(named_key)) => named_key,
                        Field::Value(_) => continue,
                    };
                    if !named_key.is_empty() {
                        let referrers = named.entry(target).or_default().entry(named_key).or_default();
                        referrers.entry(descriptor.section).or_default().push(key);
                    }
                }
            }
        }
        let mut sections = Vec::new();
        for (section, objects) in named {
            let mut members = Vec::new();
            for (key, referrers) in objects {
                let referrers: Vec<(Rego, Rego)> = referrers
                    .into_iter()
                    .map(|(section, keys)| {
                        let keys: Vec<Rego> = keys.into_iter().map(|key| values.text(key)).collect();
                        (values.name(section), Rego::from(keys))
                    })
                    .collect();
                members.push((values.text(key), object(referrers)));
            }
            sections.push((values.name(section), object(members)));
        }
        object(sections)
    }
}

/// A field's value as a policy sees it.
enum Field<'a> {
    Value(&'a Value),
    /// A live object's reference, as the key of the object it names.
    Key(&'a str),
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::state::{Caller, Level, Policy, Snapshot};

    const SITE: &str = "site_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const ACCOUNT: &str = "acct_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const POOL: &str = "pool_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    const OLD: &str = "pool_bbbbbbbbbbbbbbbbbbbbbbbbbb";

    /// The verdicts of one policy that says what it sees of the input.
    fn seen(source: &str, prune: bool) -> Vec<String> {
        seen_with(source, json!({"prune": prune}))
    }

    /// The messages of `source`'s verdicts on a plan whose request has the members `more`.
    fn seen_with(source: &str, more: serde_json::Value) -> Vec<String> {
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
        let mut request = json!({"document": document});
        request.as_object_mut().unwrap().extend(more.as_object().unwrap().clone());
        let plan = crate::plan(&state, &request.to_string()).unwrap();
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
    fn referenced_by_names_each_objects_referrers_by_key() {
        // Every pool names site `eu` and account `aws` (the live, unbound pool_bbb… by
        // their ids, which come out as their bound names); no object references a pool.
        // With prune, pool_bbb… is gone and names nothing.
        let source = "package p\n\nwarn contains sprintf(\"%s %s %s %s\", [section, key, from, concat(\",\", keys)]) if {\n  some section, objects in input.referencedBy\n  some key, referrers in objects\n  some from, keys in referrers\n}\n";
        let referrers = ["gpu-a,gpu-b,pool_bbbbbbbbbbbbbbbbbbbbbbbbbb", "gpu-a,gpu-b"];
        for (prune, keys) in [(false, referrers[0]), (true, referrers[1])] {
            assert_eq!(
                seen(source, prune),
                [format!("\"providerAccounts aws pools {keys}\""), format!("\"sites eu pools {keys}\"")]
            );
        }
    }

    /// The example `offers-within-capacity` looks each pool's offers up in
    /// `input.referencedBy`; its earlier form scanned every offer. Both judge alike: pools
    /// over one resource or several, a live offer naming its pool by id, a pool the plan
    /// prunes while offers still name it, and pools that fit.
    #[test]
    fn the_offers_example_judges_as_its_scanning_form_did() {
        let offer = |pool: &str, vcpus: u64, gpus: u64| json!({"pool": pool, "to": "t", "vcpus": vcpus, "gpus": gpus});
        let mut state: Snapshot = serde_json::from_value(json!({
            "caller": {"tenant": "acme", "principal": "alice"},
            "sites": [{"id": SITE, "region": "r"}],
            "providerAccounts": [{"id": ACCOUNT, "provider": "aws"}],
            "pools": [{"id": POOL, "site": SITE, "account": ACCOUNT, "class": "gpu", "owner": "o", "vcpus": 8, "gpus": 8},
                      {"id": OLD, "site": SITE, "account": ACCOUNT, "class": "cpu", "owner": "o", "vcpus": 4}],
            "offers": [{"id": "offr_aaaaaaaaaaaaaaaaaaaaaaaaaa", "pool": POOL, "to": "t", "vcpus": 6},
                       {"id": "offr_bbbbbbbbbbbbbbbbbbbbbbbbbb", "pool": OLD, "to": "t", "vcpus": 3}],
            "bindings": [{"kind": "pool", "name": "gpu-a", "id": POOL}, {"kind": "site", "name": "eu", "id": SITE},
                         {"kind": "providerAccount", "name": "aws", "id": ACCOUNT}]
        }))
        .unwrap();
        let pool = |vcpus: u64, gpus: u64| json!({"site": "eu", "account": "aws", "class": "gpu", "owner": "o", "vcpus": vcpus, "gpus": gpus});
        let document = json!({
            "pools": {"gpu-a": pool(8, 8), "gpu-b": pool(16, 2), "gpu-c": pool(64, 64)},
            "offers": {"one": offer("gpu-a", 4, 4), "two": offer("gpu-b", 10, 1), "three": offer("gpu-b", 10, 2),
                       "four": offer("gpu-c", 32, 32), "five": offer("gpu-c", 32, 32), "six": offer(OLD, 5, 0)}});
        let mut verdicts = |name: &str, source: &str, prune: bool| {
            state.policies = vec![Policy { name: name.into(), level: Level::Mandatory, source: source.into() }];
            let request = json!({"document": document, "prune": prune}).to_string();
            let plan: serde_json::Value = serde_json::from_str(&crate::plan(&state, &request).unwrap()).unwrap();
            let verdicts = plan["policy"]["verdicts"].as_array().unwrap().clone();
            verdicts.into_iter().map(|verdict| (verdict["key"].clone(), verdict["message"].clone())).collect::<Vec<_>>()
        };
        // Without prune: gpu-a 6 + 4 vcpus of 8, gpu-b 20 vcpus of 16 and 3 gpus of 2, the
        // unbound pool 3 + 5 vcpus of 4. With prune the live offers go, and the unbound
        // pool too, while the document's offer still names it.
        let expected = [["gpu-a", "gpu-b", "gpu-b", OLD].as_slice(), &["gpu-b", "gpu-b", OLD]];
        for (prune, expected) in [false, true].into_iter().zip(expected) {
            let scanning = verdicts("scanning", include_str!("../../examples/policy-forms/partial-sets.rego"), prune);
            let looked_up = verdicts("looked-up", include_str!("../../../policies/offers-within-capacity.rego"), prune);
            assert_eq!(looked_up, scanning);
            let keys: Vec<&str> = looked_up.iter().filter_map(|(key, _)| key.as_str()).collect();
            assert_eq!(keys, expected, "{looked_up:?}");
        }
    }

    #[test]
    fn the_rest_of_the_input_is_the_plans_own() {
        let source = "package p\n\nwarn contains sprintf(\"%s %s %v %d %d\", [input.caller.tenant, input.caller.principal, input.prune, input.summary.create, count(input.calls)]) if { true }\n";
        assert_eq!(seen(source, false), ["\"acme alice false 1 2\""]);
    }

    #[test]
    fn a_source_the_host_vouches_for_is_input_source() {
        let source = "package p\n\nrequire_approval contains \"unsigned\" if not input.source.signer\n\nwarn contains sprintf(\"%s %s %s %s\", [input.source.url, input.source.branch, object.get(input.source, \"commit\", \"-\"), input.source.path]) if input.source\n";
        let from = json!({"url": "https://git.example/estate.git", "branch": "main", "commit": "0".repeat(40), "path": "fleet"});
        let commit = format!("\"https://git.example/estate.git main {} fleet\"", "0".repeat(40));
        assert_eq!(seen_with(source, json!({"source": from})), [commit.as_str(), "\"unsigned\""]);
        let mut signed = from.clone();
        signed["signer"] = json!("SHA256:abc");
        assert_eq!(seen_with(source, json!({"source": signed})), [commit.as_str()]);
        // A pull request's document is no commit yet; without a source, there is none.
        let pending = json!({"url": "https://git.example/estate.git", "branch": "main", "path": "fleet"});
        assert_eq!(
            seen_with(source, json!({"source": pending})),
            ["\"https://git.example/estate.git main - fleet\"", "\"unsigned\""]
        );
        assert_eq!(seen_with(source, json!({})), ["\"unsigned\""]);
    }

    #[test]
    fn a_source_of_another_form_is_refused() {
        let state = Snapshot::empty(Caller { tenant: "t".into(), principal: "p".into(), grants: None });
        for source in [
            json!("https://x"),
            json!({"url": "u", "branch": "b"}),
            json!({"url": "u", "branch": "b", "path": "p", "x": 1}),
        ] {
            let request = json!({"document": {}, "source": source}).to_string();
            let error = crate::plan(&state, &request).unwrap_err();
            assert!(format!("{:?}", error.details).contains("/source"), "{source}: {error:?}");
        }
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
