//! The one path from a request to a method's answer: authenticate the bearer token,
//! find the method, authorize the caller from the registry, then run the method in the
//! transaction its kind needs. HTTP, the event stream (before every delivery) and a
//! heal's token check all go through [`Dispatcher`].

use std::sync::Arc;

use fleet_guest::json::{Reading, Refusal};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::api::{ApiError, Code, Problem};
use crate::calls::auth::{self, Caller, TokenCache};
use crate::calls::context::{Ctx, Via};
use crate::calls::memory::{Held, held_for};
use crate::calls::registry::{Answer, Call, Method, MethodKind, Registry, Run, StateForm};
use crate::db::{self, Conn, Pool, Tx};

/// What a method answered: its JSON, or the state asked for.
pub enum Reply {
    Json(String),
    State(StateForm, Vec<u8>),
}

/// Authenticates, finds and authorizes, and runs methods.
pub struct Dispatcher {
    db: Pool,
    registry: Arc<Registry>,
    tokens: TokenCache,
    /// Reads only: every mutation answers `UNSUPPORTED`.
    read_only: bool,
    /// Wakes this process's event streams when a mutation commits.
    wake: broadcast::Sender<()>,
}

/// A request's outcome, with what its log says of it.
pub struct Handled {
    /// The caller's tenant and principal, once authenticated.
    pub identity: Option<(String, String)>,
    pub reply: Result<Reply, ApiError>,
    /// The time its planner's sandbox took.
    pub sandbox: std::time::Duration,
}

impl Dispatcher {
    pub fn new(
        db: Pool,
        registry: Arc<Registry>,
        tokens: TokenCache,
        read_only: bool,
        wake: broadcast::Sender<()>,
    ) -> Dispatcher {
        Dispatcher { db, registry, tokens, read_only, wake }
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    pub fn db(&self) -> &Pool {
        &self.db
    }

    /// The caller of a bearer `Authorization` header, with the tokens authenticated
    /// before kept in the token cache (docs/decisions/0010).
    pub fn authenticate(&self, db: &Conn, authorization: Option<&str>) -> Result<Caller, ApiError> {
        auth::authenticate_with(db, authorization, Some(&self.tokens))
    }

    /// The method named `name`, when `caller` may call it: the registry decides.
    pub fn authorize(&self, caller: &Caller, name: &str) -> Result<&Method, ApiError> {
        let method =
            self.registry.by_name(name).ok_or_else(|| ApiError::not_found(format!("no method named {name}")))?;
        method.authorize(caller)?;
        Ok(method)
    }

    /// The caller of `authorization`, authenticated now and authorized for `name`: what
    /// an event stream asks before every delivery.
    pub fn authorized(&self, authorization: &str, name: &str) -> Result<Caller, ApiError> {
        let caller = self.authenticate(&self.db.get()?, Some(authorization))?;
        self.authorize(&caller, name)?;
        Ok(caller)
    }

    /// The caller the token `token` makes now, authorized for `name`: for work done
    /// later with the authority of the token that asked for it (a heal, SPEC §15).
    /// `Ok(Err(why))` when the token no longer may.
    pub fn caller_of_token(&self, tenant: &str, token: &str, name: &str) -> Result<Result<Caller, String>, ApiError> {
        let caller = match auth::caller_of_token(&self.db.get()?, tenant, token)? {
            Ok(caller) => caller,
            Err(refused) => return Ok(Err(refused)),
        };
        match self.authorize(&caller, name) {
            Ok(_) => Ok(Ok(caller)),
            Err(error) if error.code == Code::PermissionDenied => {
                Ok(Err(format!("the token {token}: {}", error.message)))
            }
            Err(error) => Err(error),
        }
    }

    /// A request to the method at `path`: authenticate, find, authorize, run. A method
    /// that answers its state answers that when `state` asks for it.
    /// What the body holds of memory (`held`), if counted, grows by what reading it
    /// takes when the method reads it here.
    pub fn handle(
        &self,
        authorization: Option<&str>,
        path: &str,
        body: &[u8],
        state: Option<StateForm>,
        held: Option<&mut Held>,
    ) -> Handled {
        let mut identity = None;
        let mut sandbox = std::time::Duration::ZERO;
        let reply = (|| {
            let db = self.db.get()?;
            let caller = self.authenticate(&db, authorization)?;
            identity = Some((caller.tenant.clone(), caller.principal.clone()));
            let method =
                self.registry.by_path(path).ok_or_else(|| ApiError::not_found(format!("no method at {path}")))?;
            method.authorize(&caller)?;
            if let (Some(reader), Some(form)) = (&method.state, state) {
                let call = Call { caller, db, body: "{}", methods: &self.registry };
                return Ok(Reply::State(form, reader(call, form)?));
            }
            let answer = self.run(caller, db, method, body, held);
            sandbox = answer.sandbox;
            answer.output.map(Reply::Json)
        })();
        Handled { identity, reply, sandbox }
    }

    /// Runs `method` as `caller` on a request body: module methods get the parsed body
    /// in a transaction of their kind; composite methods get the connection and the body
    /// as it came.
    pub fn run(&self, caller: Caller, db: Conn, method: &Method, body: &[u8], held: Option<&mut Held>) -> Answer {
        if self.read_only && method.kind == MethodKind::Mutation {
            let message = format!("{} is not available: this deployment is read-only", method.name);
            return Answer::from(Err(ApiError::new(Code::Unsupported, message)));
        }
        match &method.run {
            Run::InTransaction(handler) => {
                let mode = match method.kind {
                    MethodKind::Read => Tx::Read,
                    MethodKind::Mutation => Tx::Write(&caller.tenant),
                };
                // Reading the body as JSON is held too, up to its budget, before it begins.
                let reading = held.map_or(Ok(()), |held| held.grow_to(held_for(body.len())));
                let output = reading.and_then(|()| parse_body_with(body, method.multiline)).and_then(|input| {
                    db::transaction(&db, mode, |db| handler(&Ctx { caller: &caller, db, via: Via::Api }, input))
                });
                if output.is_ok() && method.kind == MethodKind::Mutation {
                    let _ = self.wake.send(());
                }
                Answer::from(output)
            }
            Run::Composite(composite) => match std::str::from_utf8(body) {
                Ok(text) => {
                    let body = if text.is_empty() { "{}" } else { text };
                    composite(Call { caller, db, body, methods: &self.registry })
                }
                Err(_) => Answer::from(Err(not_utf8())),
            },
        }
    }

    /// Runs the method named `name` as `caller`, in this process (the demo's seed).
    pub fn run_named(&self, caller: Caller, name: &str, body: &[u8]) -> Result<String, ApiError> {
        let method = self.authorize(&caller, name)?;
        self.run(caller, self.db.get()?, method, body, None).output
    }
}

fn not_utf8() -> ApiError {
    ApiError::invalid(vec![Problem { path: String::new(), message: "the body is not UTF-8".into() }])
}

/// An empty body (no bytes at all) means `{}`. Read strictly (SPEC §2): a duplicate key or a control
/// character is `INVALID_ARGUMENT`.
pub fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    parse_body_with(body, &[])
}

/// [`parse_body`], where the strings at the `multiline` JSON pointers may hold line breaks and tabs.
pub fn parse_body_with(body: &[u8], multiline: &[&str]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    let text = std::str::from_utf8(body).map_err(|_| not_utf8())?;
    read_json(text, &Reading::bounded(multiline, text.len()))
}

/// JSON from outside, read within `reading`'s memory budget: `INVALID_ARGUMENT` with its
/// first problems, or `PAYLOAD_TOO_LARGE` when its shape would cost more (SPEC §2).
pub fn read_json(text: &str, reading: &Reading) -> Result<Value, ApiError> {
    fleet_guest::json::read(text, reading).map_err(|refusal| match refusal {
        Refusal::Invalid(problems) => ApiError::invalid(problems),
        Refusal::TooLarge { budget } => ApiError::new(
            Code::PayloadTooLarge,
            format!(
                "the request's JSON would take more than {} MiB of memory to read: it is made of too many small \
                 values for its size",
                budget >> 20
            ),
        ),
    })
}
