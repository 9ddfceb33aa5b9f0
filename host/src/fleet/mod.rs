//! The fleet group (SPEC §6): export, plan, apply and status, history (§15), proposals
//! (§17), the previews other planner hosts read, and the `fleet.drift` reconciler. Export, plan and
//! apply run the planner component in a fresh sandbox instance per request; the host
//! owns the transaction, the authorization of every planned call, name bindings, the
//! applied document and the drift state.
//!
//! Its methods capture at registration what they use, a [`Planning`], as the policies'
//! capture the deployment's policies: no handler sees the whole application.

mod apply;
pub mod bindings;
pub mod drift;
pub mod files;
pub mod history;
mod plan_source;
mod planning;
mod preview;
mod proposals;
mod request;
mod schedule;
mod schema;
pub mod state;
mod status;

use std::borrow::Cow;
use std::sync::Arc;

use crate::calls::registry::{Answer, Call, Composite, Method, MethodKind, Registry, StateReader};
use crate::planner::Entry;
pub(crate) use apply::refusal;
use drift::Checks;
pub use planning::Planning;
pub(crate) use proposals::mark_stale;
use schema::{
    apply_schemas, check_schemas, export_schemas, plan_schema, request_schema, snapshot_schemas, status_schemas,
};

pub fn register(registry: &mut Registry, planning: &Arc<Planning>, checks: Checks) {
    let catalog = &planning.modules.catalog;
    let (export_input, export_output) = export_schemas(catalog);
    let (apply_input, apply_output) = apply_schemas(catalog, planning.git_insecure);
    let (status_input, status_output) = status_schemas(planning.git_insecure);
    let (snapshot_input, snapshot_output) = snapshot_schemas();
    let (check_input, check_output) = check_schemas();
    let run = |entry: Entry| {
        let planning = planning.clone();
        let composite: Composite = Arc::new(move |call: Call| {
            // A plan's `input.source` is the host's to give (a git source's cycle).
            let request = match entry {
                Entry::Plan => request::vouched(Cow::Borrowed(call.body), &call.caller),
                _ => Ok(Cow::Borrowed(call.body)),
            };
            match request {
                Ok(request) => planning.run(call.caller, call.db, entry, &request),
                Err(error) => Answer::from(Err(error)),
            }
        });
        composite
    };
    let state = {
        let planning = planning.clone();
        let state: StateReader =
            Arc::new(move |call: Call, form| preview::state(&planning, &call.caller, &call.db, form));
        state
    };
    registry.register(
        Method::planner("fleet", "export", MethodKind::Read, run(Entry::Export))
            .answers_state(state.clone())
            .summary("Returns the tenant's estate as a FleetConfig document, with `missing` listing the sections of modules this deployment does not run.")
            .schemas(export_input, export_output),
    );
    registry.register(
        Method::planner("fleet", "plan", MethodKind::Read, run(Entry::Plan))
            .answers_state(state)
            .summary("Diffs a FleetConfig document against the tenant's state: changes, exact calls, summary, blocked changes and a planHash. Changes nothing.")
            .schemas(request_schema(catalog, false, false), plan_schema()),
    );
    registry.register(
        Method::planner("fleet", "apply", MethodKind::Mutation, {
            let planning = planning.clone();
            Arc::new(move |call: Call| apply::apply(&planning, call))
        })
            .summary("Plans the document again and runs every planned call as the caller in one transaction; returns the plan and the number of calls applied. `{\"proposal\": N}` applies an approved proposal exactly as it was reviewed (SPEC §17).")
            .schemas(apply_input, apply_output),
    );
    history::register(registry, planning.git_insecure);
    proposals::register(registry, planning);
    registry.register(
        Method::planner("fleet", "status", MethodKind::Read, {
            let planning = planning.clone();
            Arc::new(move |call: Call| status::status(&planning, &checks, call).into())
        })
            .summary("The last applied document's hash, applier and time, when it was last checked, and the drift found then; `refresh` checks now.")
            .schemas(status_input, status_output),
    );
    // Not a fleet method (the fleet group is export, plan, apply and status): the read
    // that hosts of the planner component other than this one, such as the browser
    // preview, plan from.
    registry.register(
        Method::planner("preview", "snapshot", MethodKind::Read, {
            let planning = planning.clone();
            Arc::new(move |call: Call| preview::snapshot(&planning, call).into())
        })
            .summary("Everything the planner reads of the caller's tenant, in the planner's own format: for hosts that run the planner themselves, such as the console in the browser.")
            .schemas(snapshot_input, snapshot_output),
    );
    // For hosts of the planner without plugin components (the edge, SPEC §11): a plugin
    // kind's check, run here in the plugin's own sandbox, as a plan here would run it.
    registry.register(
        Method::planner("preview", "check", MethodKind::Read, {
            let planning = planning.clone();
            Arc::new(move |call: Call| preview::check(&planning, call.body).into())
        })
            .phase("v0.3")
            .summary("Runs a plugin kind's check on objects, as a plan would: for hosts of the planner that run no plugins, such as the edge.")
            .schemas(check_input, check_output),
    );
}
