//! Guardrails, host side (SPEC §14): the deployment's policies (`serve --policy
//! LEVEL:FILE.rego`) and the tenants' own (`compute.policies.*`), which the state the
//! planner reads carries. The planner evaluates them; the host only stores them, checks
//! that they compile, and audits every change.

use std::path::Path;
use std::sync::Arc;

use fleet_guest::policy::{self, Level, Policy};
use serde_json::{Value, json};

use crate::api::{ApiError, Problem};
use crate::audit::{self, FieldChange};
use crate::calls::context::Ctx;
use crate::calls::input::Input;
use crate::calls::registry::{Method, MethodKind, Registry, handler};
use crate::db::params;
use crate::db::{self, Conn};

/// A policy's source: text with line breaks and tabs, no other control character.
const SOURCE_PATTERN: &str = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f]*$";

/// The most policies one tenant may keep.
pub const MAX_TENANT_POLICIES: i64 = 64;

/// The policies every tenant is judged by, loaded at start.
#[derive(Debug, Clone, Default)]
pub struct Deployment(pub Arc<Vec<Policy>>);

impl Deployment {
    /// Loads `LEVEL:FILE.rego` arguments: each named by its file's stem, compiled and
    /// checked, or the reason naming the file, line and column.
    pub fn load(arguments: &[String]) -> anyhow::Result<Deployment> {
        let mut policies: Vec<Policy> = Vec::new();
        for argument in arguments {
            let (level, file) = argument
                .split_once(':')
                .ok_or_else(|| anyhow::anyhow!("--policy {argument:?} is not LEVEL:FILE.rego"))?;
            let level = Level::parse(level).ok_or_else(|| {
                anyhow::anyhow!("--policy {argument:?}: the level must be one of {}", Level::NAMES.join(", "))
            })?;
            let path = Path::new(file);
            let name = path.file_stem().and_then(|stem| stem.to_str()).unwrap_or_default().to_owned();
            if !fleet_guest::grammar::is_name(&name) {
                anyhow::bail!(
                    "--policy {file}: a policy is named by its file's stem, which must match {}",
                    fleet_guest::grammar::NAME_PATTERN
                );
            }
            if policies.iter().any(|policy| policy.name == name) {
                anyhow::bail!("--policy {file}: another policy is named {name}");
            }
            let source = std::fs::read_to_string(path).map_err(|error| anyhow::anyhow!("--policy {file}: {error}"))?;
            policy::compile(&name, &source).map_err(|problem| anyhow::anyhow!("--policy {file}: {problem}"))?;
            policies.push(Policy { name, level, source });
        }
        policies.sort_by(|left, right| left.name.cmp(&right.name));
        Ok(Deployment(Arc::new(policies)))
    }

    fn get(&self, name: &str) -> Option<&Policy> {
        self.0.iter().find(|policy| policy.name == name)
    }
}

/// The policies in force for a tenant: the deployment's, then the tenant's, by name.
pub fn in_force(deployment: &Deployment, db: &Conn, tenant: &str) -> Result<Vec<Policy>, ApiError> {
    let mut policies: Vec<Policy> = deployment.0.as_ref().clone();
    for stored in tenant_policies(db, tenant)? {
        policies.push(stored.policy);
    }
    Ok(policies)
}

/// A tenant's policy as it is stored.
struct Stored {
    policy: Policy,
    sha256: String,
    updated_at: String,
    updated_by: String,
}

impl Stored {
    fn json(&self) -> Value {
        json!({"name": self.policy.name, "level": self.policy.level, "source": self.policy.source, "scope": "tenant",
               "sha256": self.sha256, "updatedAt": self.updated_at, "updatedBy": self.updated_by})
    }
}

fn deployment_json(policy: &Policy) -> Value {
    json!({"name": policy.name, "level": policy.level, "source": policy.source, "scope": "deployment",
           "sha256": sha256(&policy.source)})
}

fn sha256(source: &str) -> String {
    format!("sha256:{}", crate::sandbox::sha256_hex(source.as_bytes()))
}

fn tenant_policies(db: &Conn, tenant: &str) -> Result<Vec<Stored>, ApiError> {
    stored(db, tenant, None)
}

fn tenant_policy(db: &Conn, tenant: &str, name: &str) -> Result<Option<Stored>, ApiError> {
    Ok(stored(db, tenant, Some(name))?.pop())
}

/// The tenant's stored policies by name, or only the one named `name`.
fn stored(db: &Conn, tenant: &str, name: Option<&str>) -> Result<Vec<Stored>, ApiError> {
    let mut found = Vec::new();
    db.for_each(
        "SELECT name, level, source, sha256, updated_at, updated_by FROM policies
         WHERE tenant = ?1 AND (CAST(?2 AS TEXT) IS NULL OR name = ?2) ORDER BY name",
        params![tenant, name],
        |row| {
            let level: String = row.get(1)?;
            let level = Level::parse(&level).ok_or_else(|| db::decode(1, format!("no policy level is {level:?}")))?;
            let policy = Policy { name: row.get(0)?, level, source: row.get(2)? };
            found.push(Stored { policy, sha256: row.get(3)?, updated_at: row.get(4)?, updated_by: row.get(5)? });
            Ok(())
        },
    )?;
    Ok(found)
}

pub fn register(registry: &mut Registry, deployment: &Deployment) {
    let policy_schema = json!({"type": "object", "required": ["name", "level", "source", "scope", "sha256"], "properties": {
        "name": {"type": "string"}, "level": {"type": "string", "enum": Level::NAMES},
        "source": {"type": "string"}, "scope": {"type": "string", "enum": ["deployment", "tenant"]},
        "sha256": {"type": "string"}, "updatedAt": {"type": "string", "format": "date-time"},
        "updatedBy": {"type": "string"}}});
    let name = json!({"type": "string", "pattern": fleet_guest::grammar::NAME_PATTERN});
    let by_name =
        json!({"type": "object", "additionalProperties": false, "required": ["name"], "properties": {"name": name}});
    let put_input = json!({"type": "object", "additionalProperties": false, "required": ["name", "level", "source"],
        "properties": {"name": name, "level": {"type": "string", "enum": Level::NAMES},
                       "source": {"type": "string", "maxLength": policy::MAX_SOURCE_BYTES, "pattern": SOURCE_PATTERN}}});
    let (put_deployment, get_deployment, list_deployment, delete_deployment) =
        (deployment.clone(), deployment.clone(), deployment.clone(), deployment.clone());
    registry.register(
        Method::new("policies", "put", MethodKind::Mutation, handler(move |ctx: &Ctx, body| put(&put_deployment, ctx, body)))
            .phase("v0.3")
            .multiline(&["/source"])
            .summary("Creates or replaces one of the tenant's policies: a Rego module whose deny and warn rules judge every plan (SPEC §14).")
            .schemas(put_input, policy_schema.clone()),
    );
    registry.register(
        Method::new(
            "policies",
            "get",
            MethodKind::Read,
            handler(move |ctx: &Ctx, body| get(&get_deployment, ctx, body)),
        )
        .phase("v0.3")
        .summary("One policy in force, the tenant's or the deployment's, with its source.")
        .schemas(by_name.clone(), policy_schema.clone()),
    );
    registry.register(
        Method::new(
            "policies",
            "list",
            MethodKind::Read,
            handler(move |ctx: &Ctx, body| list(&list_deployment, ctx, body)),
        )
        .phase("v0.3")
        .summary("Every policy in force for the tenant: the deployment's and its own, by name.")
        .schemas(
            json!({"type": "object", "additionalProperties": false}),
            json!({"type": "object", "required": ["policies"], "properties": {
                    "policies": {"type": "array", "items": policy_schema}}}),
        ),
    );
    registry.register(
        Method::new(
            "policies",
            "delete",
            MethodKind::Mutation,
            handler(move |ctx: &Ctx, body| delete(&delete_deployment, ctx, body)),
        )
        .phase("v0.3")
        .summary("Deletes one of the tenant's policies; the deployment's cannot be deleted.")
        .schemas(by_name, json!({"type": "object"})),
    );
}

fn deployment_owns(name: &str) -> ApiError {
    ApiError::failed_precondition(format!(
        "{name} is a deployment policy (serve --policy): tenants can read it but not change, delete or replace it"
    ))
}

fn put(deployment: &Deployment, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let name = input.name("name", true);
    let level = input.string("level", true);
    let source = input.string("source", true);
    let level = level.and_then(|level| {
        let parsed = Level::parse(&level);
        if parsed.is_none() {
            input.problem("level", format!("must be one of {}", Level::NAMES.join(", ")));
        }
        parsed
    });
    if let (Some(name), Some(source)) = (&name, &source)
        && let Err(problem) = policy::compile(name, source)
    {
        input.extend([Problem { path: "/source".into(), message: problem.to_string() }]);
    }
    input.finish()?;
    let (Some(name), Some(level), Some(source)) = (name, level, source) else {
        return Err(ApiError::internal("a checked input lacks a field"));
    };
    if deployment.get(&name).is_some() {
        return Err(deployment_owns(&name));
    }
    let tenant = &ctx.caller.tenant;
    let previous = tenant_policy(ctx.db, tenant, &name)?;
    if previous.is_none() {
        let count = ctx
            .db
            .query_opt("SELECT count(*) FROM policies WHERE tenant = ?1", params![tenant], |row| row.get::<i64>(0))?;
        if count.unwrap_or(0) >= MAX_TENANT_POLICIES {
            return Err(ApiError::failed_precondition(format!(
                "the tenant has {MAX_TENANT_POLICIES} policies, the most it may keep; delete one first"
            )));
        }
    }
    let stored = Stored {
        sha256: sha256(&source),
        policy: Policy { name, level, source },
        updated_at: db::now(),
        updated_by: ctx.caller.principal.clone(),
    };
    ctx.db.execute(
        "INSERT INTO policies (tenant, name, level, source, sha256, updated_at, updated_by)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (tenant, name) DO UPDATE SET level = excluded.level, source = excluded.source,
           sha256 = excluded.sha256, updated_at = excluded.updated_at, updated_by = excluded.updated_by",
        params![
            tenant,
            &stored.policy.name,
            stored.policy.level.as_str(),
            &stored.policy.source,
            &stored.sha256,
            &stored.updated_at,
            &stored.updated_by,
        ],
    )?;
    let was = previous.as_ref().map(|previous| (json!(previous.policy.level), json!(previous.sha256)));
    let now = (json!(stored.policy.level), json!(stored.sha256));
    let changes = [
        FieldChange { field: "level", from: was.as_ref().map(|was| &was.0), to: Some(&now.0) },
        FieldChange { field: "sha256", from: was.as_ref().map(|was| &was.1), to: Some(&now.1) },
    ];
    audit::record(ctx, "compute.policies.put", "policy", &stored.policy.name, &changes)?;
    Ok(stored.json())
}

fn get(deployment: &Deployment, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let name = input.name("name", true);
    input.finish()?;
    let name = name.unwrap_or_default();
    if let Some(policy) = deployment.get(&name) {
        return Ok(deployment_json(policy));
    }
    match tenant_policy(ctx.db, &ctx.caller.tenant, &name)? {
        Some(stored) => Ok(stored.json()),
        None => Err(ApiError::not_found(format!("no policy {} is in force", fleet_guest::grammar::quoted(&name)))),
    }
}

fn list(deployment: &Deployment, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    Input::new(body)?.finish()?;
    let mut policies: Vec<(String, Value)> =
        deployment.0.iter().map(|policy| (policy.name.clone(), deployment_json(policy))).collect();
    for stored in tenant_policies(ctx.db, &ctx.caller.tenant)? {
        policies.push((stored.policy.name.clone(), stored.json()));
    }
    policies.sort_by(|left, right| left.0.cmp(&right.0));
    Ok(json!({ "policies": policies.into_iter().map(|(_, policy)| policy).collect::<Vec<_>>() }))
}

fn delete(deployment: &Deployment, ctx: &Ctx, body: Value) -> Result<Value, ApiError> {
    let mut input = Input::new(body)?;
    let name = input.name("name", true);
    input.finish()?;
    let name = name.unwrap_or_default();
    if deployment.get(&name).is_some() {
        return Err(deployment_owns(&name));
    }
    let Some(previous) = tenant_policy(ctx.db, &ctx.caller.tenant, &name)? else {
        return Err(ApiError::not_found(format!("the tenant has no policy {}", fleet_guest::grammar::quoted(&name))));
    };
    ctx.db.execute("DELETE FROM policies WHERE tenant = ?1 AND name = ?2", params![&ctx.caller.tenant, &name])?;
    let was = (json!(previous.policy.level), json!(previous.sha256));
    let changes = [
        FieldChange { field: "level", from: Some(&was.0), to: None },
        FieldChange { field: "sha256", from: Some(&was.1), to: None },
    ];
    audit::record(ctx, "compute.policies.delete", "policy", &name, &changes)?;
    Ok(json!({}))
}

/// The audit records of an apply's overrides (SPEC §14), written with its plan hash.
pub fn record_overrides<'a>(
    ctx: &Ctx,
    overrides: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), ApiError> {
    for (policy, reason) in overrides {
        let reason = json!(reason);
        let changes = [FieldChange { field: "override", from: None, to: Some(&reason) }];
        audit::record(ctx, "compute.fleet.override", "policy", policy, &changes)?;
    }
    Ok(())
}
