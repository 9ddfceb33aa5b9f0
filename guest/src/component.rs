//! The wit-bindgen glue, and nothing else: WIT imports become a [`crate::Host`], WIT
//! exports call the pure planner.

wit_bindgen::generate!({ world: "fleet-planner", path: "../wit" });

use compute::fleet::{methods, state, types};
use exports::compute::fleet::planner::Guest;

use crate::{Binding, Caller, Error, ErrorCode, Flavor, Host, Kind, Offer, OwnerQuota, Pool};
use crate::{ProviderAccount, Site};

struct Component;

export!(Component);

impl Guest for Component {
    fn export(request: String) -> Result<String, types::Error> {
        crate::export(&Imports, &request).map_err(into_wit_error)
    }

    fn plan(request: String) -> Result<String, types::Error> {
        crate::plan(&Imports, &request).map_err(into_wit_error)
    }

    fn apply(request: String) -> Result<String, types::Error> {
        crate::apply(&mut Imports, &request).map_err(into_wit_error)
    }
}

/// The host, reached through the component's imports.
struct Imports;

impl Host for Imports {
    fn caller(&self) -> Caller {
        let caller = state::current_caller();
        Caller { tenant: caller.tenant, principal: caller.principal }
    }

    fn modules(&self) -> Vec<Kind> {
        state::modules().into_iter().map(from_wit_kind).collect()
    }

    fn sites(&self) -> Vec<Site> {
        state::sites()
            .into_iter()
            .map(|site| Site {
                id: site.id,
                region: site.region,
                description: site.description,
                labels: site.labels.into_iter().collect(),
            })
            .collect()
    }

    fn provider_accounts(&self) -> Vec<ProviderAccount> {
        state::provider_accounts()
            .into_iter()
            .map(|account| ProviderAccount {
                id: account.id,
                provider: account.provider,
                credentials_ref: account.credentials_ref,
                settings: account.settings.into_iter().collect(),
            })
            .collect()
    }

    fn pools(&self) -> Vec<Pool> {
        state::pools()
            .into_iter()
            .map(|pool| Pool {
                id: pool.id,
                site: pool.site,
                account: pool.account,
                class: pool.class,
                owner: pool.owner,
                vcpus: pool.vcpus,
                memory_mib: pool.memory_mib,
                gpus: pool.gpus,
                labels: pool.labels.into_iter().collect(),
                archived: pool.archived,
            })
            .collect()
    }

    fn owner_quotas(&self) -> Vec<OwnerQuota> {
        state::owner_quotas()
            .into_iter()
            .map(|quota| OwnerQuota {
                owner: quota.owner,
                vcpus: quota.vcpus,
                memory_mib: quota.memory_mib,
                gpus: quota.gpus,
                instances: quota.instances,
            })
            .collect()
    }

    fn offers(&self) -> Vec<Offer> {
        state::offers()
            .into_iter()
            .map(|offer| Offer {
                id: offer.id,
                pool: offer.pool,
                to: offer.to_owner,
                vcpus: offer.vcpus,
                memory_mib: offer.memory_mib,
                gpus: offer.gpus,
            })
            .collect()
    }

    fn flavors(&self) -> Vec<Flavor> {
        state::flavors()
            .into_iter()
            .map(|flavor| Flavor {
                id: flavor.id,
                pool: flavor.pool,
                vcpus: flavor.vcpus,
                memory_mib: flavor.memory_mib,
                gpus: flavor.gpus,
                disk_gib: flavor.disk_gib,
                archived: flavor.archived,
            })
            .collect()
    }

    fn bindings(&self) -> Vec<Binding> {
        state::bindings()
            .into_iter()
            .map(|binding| Binding { kind: from_wit_kind(binding.kind), name: binding.name, id: binding.id })
            .collect()
    }

    fn invoke(&mut self, method: &str, input: &str) -> Result<String, Error> {
        methods::invoke(method, input).map_err(from_wit_error)
    }
}

fn from_wit_kind(kind: types::Kind) -> Kind {
    match kind {
        types::Kind::Site => Kind::Site,
        types::Kind::ProviderAccount => Kind::ProviderAccount,
        types::Kind::Pool => Kind::Pool,
        types::Kind::OwnerQuota => Kind::OwnerQuota,
        types::Kind::Offer => Kind::Offer,
        types::Kind::Flavor => Kind::Flavor,
    }
}

const CODES: [(ErrorCode, types::ErrorCode); 13] = [
    (ErrorCode::InvalidArgument, types::ErrorCode::InvalidArgument),
    (ErrorCode::Unauthenticated, types::ErrorCode::Unauthenticated),
    (ErrorCode::PermissionDenied, types::ErrorCode::PermissionDenied),
    (ErrorCode::NotFound, types::ErrorCode::NotFound),
    (ErrorCode::AlreadyExists, types::ErrorCode::AlreadyExists),
    (ErrorCode::FailedPrecondition, types::ErrorCode::FailedPrecondition),
    (ErrorCode::InvalidState, types::ErrorCode::InvalidState),
    (ErrorCode::ConfigDrift, types::ErrorCode::ConfigDrift),
    (ErrorCode::PayloadTooLarge, types::ErrorCode::PayloadTooLarge),
    (ErrorCode::ResourceExhausted, types::ErrorCode::ResourceExhausted),
    (ErrorCode::Unsupported, types::ErrorCode::Unsupported),
    (ErrorCode::Unavailable, types::ErrorCode::Unavailable),
    (ErrorCode::Internal, types::ErrorCode::Internal),
];

fn into_wit_error(error: Error) -> types::Error {
    let code = CODES.iter().find(|(ours, _)| *ours == error.code).map(|(_, wit)| *wit);
    types::Error {
        code: code.unwrap_or(types::ErrorCode::Internal),
        message: error.message,
        details: error.details.map(|details| details.to_string()).unwrap_or_default(),
    }
}

fn from_wit_error(error: types::Error) -> Error {
    let code = CODES.iter().find(|(_, wit)| *wit == error.code).map(|(ours, _)| *ours);
    Error {
        code: code.unwrap_or(ErrorCode::Internal),
        message: error.message,
        details: serde_json::from_str(&error.details).ok(),
    }
}
