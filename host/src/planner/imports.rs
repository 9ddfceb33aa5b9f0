//! The component's imports, as this host answers them: the caller's tenant in the state
//! encoding, and module methods run as the caller inside apply's transaction. Host
//! imports only ever see the store's caller.

use std::sync::Arc;

use fleet_guest::json::Reading;
use fleet_guest::plugins::Subject;
use fleet_guest::{ApprovalGate, Snapshot};
use sha2::Digest;

use super::Guest;
use super::compute::fleet::{digest, methods, output, plugins, state, types};
use super::errors::into_wit_error;
use crate::api::{ApiError, Code};
use crate::calls::context::{Ctx, Via};
use crate::calls::registry::MethodKind;
use crate::db::Conn;

/// The tenant's state in the state encoding, as of a transaction: what fleet reads for
/// the planner (its objects, bindings and the policies in force), cached as it likes.
pub trait StateSource: Send + Sync {
    fn encode(&self, db: &Conn, tenant: &str) -> Result<Arc<Vec<u8>>, ApiError>;

    /// The size of the tenant's state when it was last encoded, if it was.
    fn last_size(&self, tenant: &str) -> Option<usize>;
}

/// Where the state the guest reads comes from.
#[derive(Clone)]
pub enum Source {
    /// The caller's tenant in the database, in the transaction of the session's
    /// connection.
    Database(Arc<dyn StateSource>),
    /// A fixed state (golden cases, benchmarks) in the state encoding, made once, as the
    /// server's state cache keeps a tenant's: see [`Source::snapshot`].
    Encoded(Arc<Vec<u8>>),
}

impl Source {
    /// A fixed snapshot, encoded with the built-in kinds.
    pub fn snapshot(snapshot: &Snapshot) -> Source {
        Source::Encoded(Arc::new(snapshot.encode(&fleet_guest::Catalog::built_in())))
    }
}

impl types::Host for Guest {}

impl state::Host for Guest {
    fn current_caller(&mut self) -> wasmtime::Result<types::Caller> {
        let caller = self.session.caller.for_planner();
        let principal = self.session.planned_as.clone().unwrap_or(caller.principal);
        Ok(types::Caller { tenant: caller.tenant, principal, grants: caller.grants })
    }

    fn judging(&mut self, policy: String) -> wasmtime::Result<()> {
        self.judging = Some(policy).filter(|policy| !policy.is_empty());
        Ok(())
    }

    fn approval(&mut self) -> wasmtime::Result<state::ApprovalGate> {
        Ok(match self.session.gate {
            ApprovalGate::Verdicts => state::ApprovalGate::Verdicts,
            ApprovalGate::EveryChange => state::ApprovalGate::EveryChange,
            ApprovalGate::None => state::ApprovalGate::None,
        })
    }

    fn snapshot(&mut self) -> wasmtime::Result<Vec<u8>> {
        self.host_work(|guest| {
            let session = &guest.session;
            let state = match &session.source {
                Source::Encoded(state) => state.clone(),
                Source::Database(source) => source.encode(&session.db, &session.caller.tenant)?,
            };
            // The binding's result is owned, so the kept encoding is copied once here.
            Ok(state.as_ref().clone())
        })
    }
}

impl output::Host for Guest {
    /// The result grows by what the guest wrote, up to the memory budget, as when it had
    /// to fit in the guest's memory: a result that would pass it traps the call, which
    /// ends `RESOURCE_EXHAUSTED` as any exhausted memory does.
    fn write(&mut self, chunk: Vec<u8>) -> wasmtime::Result<()> {
        if self.output.len() + chunk.len() > self.limits.memory_bytes {
            self.limits.exhausted = true;
            return Err(wasmtime::Error::msg("the planner's result outgrew its memory budget"));
        }
        self.output.push(chunk);
        Ok(())
    }
}

/// The host's SHA-256 is the guest's work done faster: its time counts against the
/// guest's CPU budget, and what it is given was the guest's memory.
impl digest::Host for Guest {
    fn has_sha256(&mut self) -> wasmtime::Result<bool> {
        Ok(true)
    }

    fn sha256_update(&mut self, bytes: Vec<u8>) -> wasmtime::Result<()> {
        self.sha256.update(&bytes);
        Ok(())
    }

    fn sha256_finish(&mut self) -> wasmtime::Result<Vec<u8>> {
        Ok(self.sha256.finalize_reset().to_vec())
    }
}

/// The largest method input the guest may hand back.
const MAX_INVOKE_INPUT: usize = 1 << 20;

impl methods::Host for Guest {
    /// Everything the guest passes is checked: the method must be a registered module
    /// mutation of this deployment, the input a JSON object of bounded size, and the call
    /// is authorized as the caller, like any HTTP call. The tenant is the store's.
    fn invoke(&mut self, method: String, input: String) -> wasmtime::Result<Result<String, types::Error>> {
        self.host_work(|guest| Ok(guest.invoke_checked(&method, &input).map_err(into_wit_error)))
    }
}

impl Guest {
    fn invoke_checked(&mut self, name: &str, input: &str) -> Result<String, ApiError> {
        let session = &self.session;
        let Some(apply) = &session.methods else {
            return Err(ApiError::new(Code::Unsupported, "this host runs no composite methods"));
        };
        let method = apply
            .registry
            .by_name(name)
            .filter(|method| method.kind == MethodKind::Mutation && method.module != "fleet")
            .ok_or_else(|| ApiError::not_found(format!("no module method {name:?}")))?;
        if input.len() > MAX_INVOKE_INPUT {
            return Err(ApiError::new(Code::InvalidArgument, "the method input is too large"));
        }
        let input = crate::calls::dispatch::read_json(input, &Reading::bounded(&[], input.len()))?;
        method.authorize(&session.caller)?;
        let ctx = Ctx { caller: &session.caller, db: &session.db, via: Via::Apply(&apply.deferred) };
        method.run_in(&ctx, input)
    }
}

impl plugins::Host for Guest {
    fn kinds(&mut self) -> wasmtime::Result<String> {
        Ok(self.plugins.kinds_json().to_owned())
    }

    /// The plugin's check, in a sandbox of its own. What the guest passes is bounded
    /// by its own memory budget; the plugin's answer is checked by the plugin host.
    fn check(
        &mut self,
        kind: String,
        subjects: Vec<plugins::Subject>,
    ) -> wasmtime::Result<Result<Vec<plugins::Problem>, types::Error>> {
        let Some(plugin) = self.plugins.by_kind(&kind).cloned() else {
            let error = ApiError::new(Code::NotFound, format!("no plugin serves the kind {kind:?}"));
            return Ok(Err(into_wit_error(error)));
        };
        let subjects = subjects.into_iter().map(|plugins::Subject { object, previous, references }| Subject {
            object,
            previous,
            references,
        });
        self.host_work(|_| {
            Ok(plugin
                .check(subjects)
                .map(|findings| {
                    findings
                        .into_iter()
                        .map(|finding| plugins::Problem {
                            subject: finding.subject,
                            path: finding.path,
                            message: finding.message,
                        })
                        .collect()
                })
                .map_err(into_wit_error))
        })
    }
}
