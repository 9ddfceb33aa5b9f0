//! The method registry (SPEC §8): every method registered once with its name, path,
//! kind, permission, scope, module, phase and handler. Routing, authorization, the
//! catalogue and the OpenAPI description all come from here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::api::{ApiError, Code};
use crate::calls::auth::Caller;
use crate::calls::context::Ctx;
use crate::db::Conn;

/// Whether a method only reads or also changes state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodKind {
    Read,
    Mutation,
}

impl MethodKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MethodKind::Read => "read",
            MethodKind::Mutation => "mutation",
        }
    }
}

/// A method that runs inside a transaction opened for it: a read or write transaction
/// around its HTTP call, or apply's transaction when fleet invokes it. It answers JSON
/// text: most handlers make a value ([`handler`]); one that answers stored JSON as it
/// was stored (a revision's document) splices it in.
pub type Handler = Arc<dyn Fn(&Ctx, Value) -> Result<String, ApiError> + Send + Sync>;

/// The handler of a function that answers a JSON value.
pub fn handler(answer: impl Fn(&Ctx, Value) -> Result<Value, ApiError> + Send + Sync + 'static) -> Handler {
    Arc::new(move |ctx, body| answer(ctx, body).map(|value| value.to_string()))
}

/// A composite method's call: the caller, the connection it opens its own transactions
/// on (the sandbox's store owns it while the guest runs), the request body as it came
/// (which the planner parses and validates itself), and the methods an apply's calls
/// may run.
pub struct Call<'a> {
    pub caller: Caller,
    pub db: Conn,
    pub body: &'a str,
    pub methods: &'a Arc<Registry>,
}

/// What a composite method answers: the planner's JSON text as it is, so that the bytes
/// the component produced are the bytes the client gets, and the guest's CPU time spent
/// on it, for the request's log.
pub struct Answer {
    pub output: Result<String, ApiError>,
    pub sandbox: Duration,
}

impl From<Result<String, ApiError>> for Answer {
    fn from(output: Result<String, ApiError>) -> Answer {
        Answer { output, sandbox: Duration::ZERO }
    }
}

/// A method that manages its own transactions, such as those that run the planner. It
/// captures at registration what it uses (the planner, the state, the events).
pub type Composite = Arc<dyn Fn(Call<'_>) -> Answer + Send + Sync>;

/// What a client asks for with `Accept` on a method that answers its state (export,
/// plan) to get, instead, the state that method would plan from: the edge's read (SPEC
/// §11), authorized as that method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateForm {
    /// `application/vnd.fleet.state+json`: the JSON form of `fleet_guest::state`.
    Json,
    /// `application/vnd.fleet.state`: the state encoding the planner reads, in an
    /// envelope with the caller and the plugins' kinds (`fleet_guest::state::envelope`).
    Encoded,
}

impl StateForm {
    pub const ALL: [StateForm; 2] = [StateForm::Json, StateForm::Encoded];

    pub fn media_type(self) -> &'static str {
        match self {
            StateForm::Json => "application/vnd.fleet.state+json",
            StateForm::Encoded => "application/vnd.fleet.state",
        }
    }

    /// The form an `Accept` header names exactly, if any.
    pub fn accepted(accept: &[u8]) -> Option<StateForm> {
        StateForm::ALL.into_iter().find(|form| form.media_type().as_bytes() == accept)
    }
}

/// The state a method plans from, in the form a client asks for (SPEC §11).
pub type StateReader = Arc<dyn Fn(Call<'_>, StateForm) -> Result<Vec<u8>, ApiError> + Send + Sync>;

pub enum Run {
    InTransaction(Handler),
    Composite(Composite),
}

pub struct Method {
    /// `compute.<group>.<method>`
    pub name: String,
    pub path: String,
    pub kind: MethodKind,
    pub permission: String,
    pub scope: String,
    pub module: String,
    pub phase: &'static str,
    pub summary: String,
    /// JSON Schemas of the request and response, where known.
    pub input: Option<Value>,
    pub output: Option<Value>,
    /// JSON pointers (`*` for any token) of string fields that may hold line breaks and
    /// tabs (a policy's source).
    pub multiline: &'static [&'static str],
    pub run: Run,
    /// What the method answers instead when the client asks for the state it would plan
    /// from (the edge's read, SPEC §11), in the form asked for.
    pub state: Option<StateReader>,
}

impl Method {
    /// A module method: `compute:<group>:read|write @ compute-<group>`.
    pub fn new(group: &str, method: &str, kind: MethodKind, handler: Handler) -> Method {
        Method::with_run(group, method, kind, Run::InTransaction(handler))
    }

    fn with_run(group: &str, method: &str, kind: MethodKind, run: Run) -> Method {
        let action = match kind {
            MethodKind::Read => "read",
            MethodKind::Mutation => "write",
        };
        Method {
            name: format!("compute.{group}.{method}"),
            path: format!("/api/compute/{group}/{method}"),
            kind,
            permission: format!("compute:{group}:{action}"),
            scope: format!("compute-{group}"),
            module: group.into(),
            phase: "v0.1",
            summary: String::new(),
            input: None,
            output: None,
            multiline: &[],
            run,
            state: None,
        }
    }

    /// A method that runs the planner, decided like fleet's own methods:
    /// `compute:fleet:admin @ compute-fleet`, phase v0.2.
    pub fn planner(group: &str, method: &str, kind: MethodKind, composite: Composite) -> Method {
        Method::with_run(group, method, kind, Run::Composite(composite))
            .permission("compute:fleet:admin", "compute-fleet")
            .phase("v0.2")
    }

    /// Runs a method inside a transaction the caller already opened (apply's calls).
    pub fn run_in(&self, ctx: &Ctx, input: Value) -> Result<String, ApiError> {
        match &self.run {
            Run::InTransaction(handler) => handler(ctx, input),
            Run::Composite(_) => Err(ApiError::internal(format_args!("{} cannot run inside a transaction", self.name))),
        }
    }

    /// The registry decides: the method's permission and scope against the caller's
    /// grants (SPEC §3).
    pub fn authorize(&self, caller: &Caller) -> Result<(), ApiError> {
        if caller.grants.iter().any(|grant| grant.allows(&self.permission, &self.scope)) {
            return Ok(());
        }
        Err(ApiError::new(
            Code::PermissionDenied,
            format!("{} may not call {}: it needs {} @ {}", caller.principal, self.name, self.permission, self.scope),
        )
        .with_details(json!({ "permission": self.permission, "scope": self.scope, "principal": caller.principal })))
    }

    pub fn permission(mut self, permission: &str, scope: &str) -> Method {
        self.permission = permission.into();
        self.scope = scope.into();
        self
    }

    /// Lets the string fields at these JSON pointers hold line breaks and tabs (source text).
    pub fn multiline(mut self, fields: &'static [&'static str]) -> Method {
        self.multiline = fields;
        self
    }

    /// Answers `state` to a client that asks for the state the method plans from.
    pub fn answers_state(mut self, state: StateReader) -> Method {
        self.state = Some(state);
        self
    }

    pub fn phase(mut self, phase: &'static str) -> Method {
        self.phase = phase;
        self
    }

    pub fn summary(mut self, summary: impl Into<String>) -> Method {
        self.summary = summary.into();
        self
    }

    pub fn schemas(mut self, input: Value, output: Value) -> Method {
        self.input = Some(input);
        self.output = Some(output);
        self
    }

    /// The catalogue entry of `GET /api/methods`.
    pub fn describe(&self) -> Value {
        json!({
            "name": self.name,
            "path": self.path,
            "httpMethod": "POST",
            "kind": self.kind.as_str(),
            "permission": self.permission,
            "scope": self.scope,
            "module": self.module,
            "phase": self.phase,
            "summary": self.summary,
        })
    }
}

#[derive(Default)]
pub struct Registry {
    methods: Vec<Method>,
    by_path: HashMap<String, usize>,
    by_name: HashMap<String, usize>,
}

impl Registry {
    /// Registers a method. A name registered twice is a programming error.
    pub fn register(&mut self, method: Method) {
        assert!(!self.by_name.contains_key(&method.name), "method {} registered twice", method.name);
        self.by_path.insert(method.path.clone(), self.methods.len());
        self.by_name.insert(method.name.clone(), self.methods.len());
        self.methods.push(method);
    }

    pub fn by_path(&self, path: &str) -> Option<&Method> {
        self.by_path.get(path).map(|&index| &self.methods[index])
    }

    pub fn by_name(&self, name: &str) -> Option<&Method> {
        self.by_name.get(name).map(|&index| &self.methods[index])
    }

    pub fn methods(&self) -> &[Method] {
        &self.methods
    }

    pub fn catalogue(&self) -> Value {
        json!({ "methods": self.methods.iter().map(Method::describe).collect::<Vec<_>>() })
    }
}
