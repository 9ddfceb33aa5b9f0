//! `fleet serve --demo`: tenant `demo`, a small realistic estate applied through fleet
//! (so every object goes through its module's handlers and has a name), and a token
//! with every permission.

use serde_json::{Value, json};

use crate::api::ApiError;
use crate::calls::{Dispatcher, auth};
use crate::db;
use crate::modules::Modules;

pub const TENANT: &str = "demo";
pub const PRINCIPAL: &str = "demo-admin";

/// The demo estate, as an operator would write it.
pub fn document() -> Value {
    json!({
        "sites": {
            "eu-west": {"region": "eu-west-1", "description": "Dublin", "labels": {"tier": "prod"}},
            "us-east": {"region": "us-east-1", "description": "Virginia", "labels": {"tier": "prod"}},
            "lab": {"region": "eu-central-1", "labels": {"tier": "dev"}}
        },
        "providerAccounts": {
            "aws-main": {"provider": "aws", "credentialsRef": "vault:aws/main"},
            "gcp-research": {"provider": "gcp", "credentialsRef": "vault:gcp/research", "settings": {"project": "research-42"}}
        },
        "pools": {
            "gpu-a": {"site": "eu-west", "account": "aws-main", "class": "gpu", "owner": "team-ml",
                      "vcpus": 512, "memoryMib": 2097152, "gpus": 64, "labels": {"accelerator": "h100"}},
            "cpu-a": {"site": "us-east", "account": "aws-main", "class": "cpu", "owner": "team-web",
                      "vcpus": 2048, "memoryMib": 8388608},
            "lab-gpu": {"site": "lab", "account": "gcp-research", "class": "gpu", "owner": "team-research",
                        "vcpus": 64, "memoryMib": 262144, "gpus": 8}
        },
        "ownerQuotas": {
            "team-ml": {"vcpus": 256, "memoryMib": 1048576, "gpus": 32, "instances": 100},
            "team-web": {"vcpus": 1024, "memoryMib": 4194304, "instances": 400},
            "team-research": {"vcpus": 96, "memoryMib": 393216, "gpus": 12, "instances": 40}
        },
        "offers": {
            "ml-to-research": {"pool": "gpu-a", "to": "team-research", "vcpus": 64, "gpus": 8},
            "web-to-ml": {"pool": "cpu-a", "to": "team-ml", "vcpus": 256, "memoryMib": 1048576}
        },
        "flavors": {
            "g1-large": {"pool": "gpu-a", "vcpus": 8, "memoryMib": 65536, "gpus": 1, "diskGib": 100},
            "g1-xlarge": {"pool": "gpu-a", "vcpus": 32, "memoryMib": 262144, "gpus": 4, "diskGib": 400},
            "c1-medium": {"pool": "cpu-a", "vcpus": 4, "memoryMib": 16384, "diskGib": 50}
        }
    })
}

/// A large estate for benchmarks and tests: 2 sites, 2 accounts, `pools` pools each
/// with a flavor and an offer, and 50 owner quotas (`4 + 3 * pools + 50` objects).
pub fn large_document(pools: usize) -> Value {
    let mut document = json!({
        "sites": {"site-a": {"region": "eu-west-1"}, "site-b": {"region": "us-east-1"}},
        "providerAccounts": {"acct-a": {"provider": "aws"}, "acct-b": {"provider": "gcp"}},
        "pools": {}, "ownerQuotas": {}, "offers": {}, "flavors": {}
    });
    for index in 0..pools {
        let pool = format!("pool-{index}");
        document["pools"][&pool] = json!({
            "site": if index % 2 == 0 { "site-a" } else { "site-b" },
            "account": if index % 3 == 0 { "acct-a" } else { "acct-b" },
            "class": "gpu", "owner": format!("team-{}", index % 50),
            "vcpus": 64, "memoryMib": 262144, "gpus": 8, "labels": {"rack": format!("r{}", index % 40)}
        });
        document["flavors"][format!("flavor-{index}")] =
            json!({"pool": pool, "vcpus": 8, "memoryMib": 32768, "gpus": 1, "diskGib": 100});
        document["offers"][format!("offer-{index}")] = json!({"pool": pool, "to": "team-shared", "vcpus": 8});
    }
    for team in 0..50 {
        document["ownerQuotas"][format!("team-{team}")] = json!({"vcpus": 1024, "memoryMib": 4194304, "instances": 10});
    }
    document
}

/// Creates the demo tenant (once), applies the demo estate (once), and returns a new
/// token with every permission, revoking the one the last start made: a demo database
/// started again and again holds one such token, not one for every start.
pub fn seed(dispatcher: &Dispatcher, modules: &Modules) -> anyhow::Result<String> {
    let db = dispatcher.db().get()?;
    let now = db::now();
    match auth::create_tenant(&db, TENANT, &now) {
        Ok(()) | Err(auth::AdminError::TenantExists(_)) => {}
        Err(error) => return Err(error.into()),
    }
    db.execute(
        "UPDATE tokens SET revoked_at = ?3 WHERE tenant = ?1 AND principal = ?2 AND revoked_at IS NULL
           AND id NOT IN (SELECT heal_token FROM fleet_applied WHERE heal_token IS NOT NULL)",
        crate::db::params![TENANT, PRINCIPAL, &now],
    )?;
    let token = auth::create_token(&db, TENANT, PRINCIPAL, &["compute:*:* @ *".to_owned()], &now, None)?;
    let applied: bool = db.query_one(
        "SELECT EXISTS (SELECT 1 FROM fleet_applied WHERE tenant = ?1)",
        crate::db::params![TENANT],
        |row| row.get(0),
    )?;
    if !applied {
        let caller = dispatcher.authenticate(&db, Some(&format!("Bearer {token}")))?;
        let mut document = document();
        if let Value::Object(sections) = &mut document {
            sections.retain(|section, _| modules.running().any(|kind| kind.section == section));
        }
        let body = json!({ "document": document }).to_string();
        dispatcher
            .run_named(caller, "compute.fleet.apply", body.as_bytes())
            .map_err(|error: ApiError| anyhow::anyhow!("applying the demo estate failed: {error}"))?;
    }
    Ok(token)
}
