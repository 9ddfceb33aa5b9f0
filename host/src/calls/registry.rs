//! The method registry (SPEC §8): every method registered once with its name, path,
//! kind, permission, scope, module, phase and handler. Routing, authorization, the
//! catalogue and the OpenAPI description all come from here.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::api::{ApiError, Code};
use crate::app::App;
use crate::calls::auth::Caller;
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

/// What a handler sees: the application, the authenticated caller, a database
/// connection inside the transaction the server (or apply) opened, and how it was
/// called (for the audit trail).
pub struct Ctx<'a> {
    pub caller: &'a Caller,
    pub db: &'a Conn,
    pub via: Via<'a>,
}

/// How a module method was called: over HTTP, or by a fleet apply (whose audit records
/// and writes wait for it in `Deferred`).
#[derive(Clone, Copy)]
pub enum Via<'a> {
    Api,
    Apply(&'a Deferred),
}

/// What an apply's calls leave to be written when the apply records itself, in its
/// transaction: their audit records (with the apply's plan hash) and their writes to
/// module objects, many to a statement.
#[derive(Default)]
pub struct Deferred {
    pub audits: crate::audit::Pending,
    pub objects: crate::modules::store::Overlay,
}

impl Ctx<'_> {
    /// The caller's module objects, as this call reaches them: through the apply's
    /// overlay inside an apply, straight in the database otherwise.
    pub fn objects(&self) -> crate::modules::store::Objects<'_> {
        let overlay = match self.via {
            Via::Api => None,
            Via::Apply(deferred) => Some(&deferred.objects),
        };
        crate::modules::store::Objects { db: self.db, tenant: &self.caller.tenant, overlay }
    }
}

impl Via<'_> {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Api => "api",
            Via::Apply(_) => "fleet.apply",
        }
    }
}

/// A method that runs inside a transaction opened for it: a read or write transaction
/// around its HTTP call, or apply's transaction when fleet invokes it.
pub type Handler = Arc<dyn Fn(&Ctx, Value) -> Result<Value, ApiError> + Send + Sync>;

/// A method that runs the planner and manages its own transaction: it takes the
/// connection, which the sandbox store owns while the guest runs.
/// It takes the request body as it came and answers with the planner's JSON text as it
/// is, so that the bytes the component produced are the bytes the client gets.
pub type Composite = Arc<dyn Fn(Arc<App>, Caller, Conn, &str) -> Result<String, ApiError> + Send + Sync>;

pub enum Run {
    InTransaction(Handler),
    Composite(Composite),
}

pub struct Method {
    /// `compute.<group>.<method>`
    pub name: String,
    pub group: String,
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
    /// Top-level string fields that may hold line breaks and tabs (a policy's source).
    pub multiline: &'static [&'static str],
    pub run: Run,
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
            group: group.into(),
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
    pub fn run_in(&self, ctx: &Ctx, input: Value) -> Result<Value, ApiError> {
        match &self.run {
            Run::InTransaction(handler) => handler(ctx, input),
            Run::Composite(_) => Err(ApiError::internal(format_args!("{} cannot run inside a transaction", self.name))),
        }
    }

    pub fn permission(mut self, permission: &str, scope: &str) -> Method {
        self.permission = permission.into();
        self.scope = scope.into();
        self
    }

    /// Lets the named top-level fields hold line breaks and tabs (source text).
    pub fn multiline(mut self, fields: &'static [&'static str]) -> Method {
        self.multiline = fields;
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

    /// An OpenAPI 3 description generated from the registry.
    pub fn openapi(&self) -> Value {
        let mut paths = serde_json::Map::new();
        for method in &self.methods {
            let object = json!({"type": "object"});
            let input = method.input.clone().unwrap_or_else(|| object.clone());
            let output = method.output.clone().unwrap_or(object);
            // An empty body means `{}`: it may be left out exactly when `{}` is valid.
            let body_required = input["required"].as_array().is_some_and(|required| !required.is_empty());
            paths.insert(
                method.path.clone(),
                json!({ "post": {
                    "operationId": method.name,
                    "summary": method.summary,
                    "tags": [method.module],
                    "x-fleet-kind": method.kind.as_str(),
                    "x-fleet-permission": method.permission,
                    "x-fleet-scope": method.scope,
                    "x-fleet-phase": method.phase,
                    "security": [{"bearer": []}],
                    "requestBody": {"required": body_required, "content": {"application/json": {"schema": input}}},
                    "responses": {
                        "200": {"description": "success", "content": {"application/json": {"schema": output}}},
                        "default": {"description": "an error (SPEC §2)",
                                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
                    }
                }}),
            );
        }
        json!({
            "openapi": "3.1.0",
            "info": {"title": "fleet", "version": env!("CARGO_PKG_VERSION")},
            "paths": paths,
            "components": {
                "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
                "schemas": {"Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {"error": {
                        "type": "object",
                        "required": ["code", "message"],
                        "properties": {
                            "code": {"type": "string", "enum": Code::ALL.map(Code::as_str)},
                            "message": {"type": "string"},
                            "details": {"type": "object"}
                        }
                    }}
                }}
            }
        })
    }
}
