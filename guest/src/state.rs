//! The tenant's state as the module adapters report it: ids for references, maps sorted.

use serde::{Deserialize, Serialize};

use crate::{Error, ErrorCode, Host};

/// A string-to-string map (`labels`, `settings`), sorted by key.
pub type StringMap = std::collections::BTreeMap<String, String>;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Caller {
    pub tenant: String,
    pub principal: String,
}

/// The kinds of SPEC §4, in dependency order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Kind {
    Site,
    ProviderAccount,
    Pool,
    OwnerQuota,
    Offer,
    Flavor,
}

impl Kind {
    /// Every kind, in dependency order (creates run in this order, removals in reverse).
    pub const ALL: [Kind; 6] =
        [Kind::Site, Kind::ProviderAccount, Kind::Pool, Kind::OwnerQuota, Kind::Offer, Kind::Flavor];

    /// The kind name used in plans, ids and idempotency keys.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Site => "site",
            Kind::ProviderAccount => "providerAccount",
            Kind::Pool => "pool",
            Kind::OwnerQuota => "ownerQuota",
            Kind::Offer => "offer",
            Kind::Flavor => "flavor",
        }
    }

    /// The FleetConfig section.
    pub fn section(self) -> &'static str {
        match self {
            Kind::Site => "sites",
            Kind::ProviderAccount => "providerAccounts",
            Kind::Pool => "pools",
            Kind::OwnerQuota => "ownerQuotas",
            Kind::Offer => "offers",
            Kind::Flavor => "flavors",
        }
    }

    /// The API group (and module) that owns the kind.
    pub fn group(self) -> &'static str {
        match self {
            Kind::Site => "sites",
            Kind::ProviderAccount => "accounts",
            Kind::Pool => "pools",
            Kind::OwnerQuota => "quotas",
            Kind::Offer => "offers",
            Kind::Flavor => "flavors",
        }
    }

    /// The kind's position in [`Kind::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The kind whose FleetConfig section is `section`.
    pub(crate) fn from_section(section: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.section() == section)
    }

    /// The id prefix; owner quotas have no ids.
    pub fn id_prefix(self) -> Option<&'static str> {
        match self {
            Kind::Site => Some("site"),
            Kind::ProviderAccount => Some("acct"),
            Kind::Pool => Some("pool"),
            Kind::OwnerQuota => None,
            Kind::Offer => Some("offer"),
            Kind::Flavor => Some("flv"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Site {
    pub id: String,
    pub region: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub labels: StringMap,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderAccount {
    pub id: String,
    pub provider: String,
    #[serde(default)]
    pub credentials_ref: String,
    #[serde(default)]
    pub settings: StringMap,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pool {
    pub id: String,
    pub site: String,
    pub account: String,
    pub class: String,
    pub owner: String,
    #[serde(default)]
    pub vcpus: u64,
    #[serde(default)]
    pub memory_mib: u64,
    #[serde(default)]
    pub gpus: u64,
    #[serde(default)]
    pub labels: StringMap,
    #[serde(default)]
    pub archived: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OwnerQuota {
    pub owner: String,
    #[serde(default)]
    pub vcpus: u64,
    #[serde(default)]
    pub memory_mib: u64,
    #[serde(default)]
    pub gpus: u64,
    #[serde(default)]
    pub instances: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Offer {
    pub id: String,
    pub pool: String,
    pub to: String,
    #[serde(default)]
    pub vcpus: u64,
    #[serde(default)]
    pub memory_mib: u64,
    #[serde(default)]
    pub gpus: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Flavor {
    pub id: String,
    pub pool: String,
    #[serde(default)]
    pub vcpus: u64,
    #[serde(default)]
    pub memory_mib: u64,
    #[serde(default)]
    pub gpus: u64,
    #[serde(default)]
    pub disk_gib: u64,
    #[serde(default)]
    pub archived: bool,
}

/// A name fleet gave an object it created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Binding {
    pub kind: Kind,
    pub name: String,
    pub id: String,
}

/// Everything the planner reads of a tenant, in one value: what a host reports, or a
/// fixture of the golden tests (`state.json`). As a [`Host`] it cannot invoke methods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Snapshot {
    pub caller: Caller,
    #[serde(default = "all_kinds")]
    pub modules: Vec<Kind>,
    #[serde(default)]
    pub sites: Vec<Site>,
    #[serde(default)]
    pub provider_accounts: Vec<ProviderAccount>,
    #[serde(default)]
    pub pools: Vec<Pool>,
    #[serde(default)]
    pub owner_quotas: Vec<OwnerQuota>,
    #[serde(default)]
    pub offers: Vec<Offer>,
    #[serde(default)]
    pub flavors: Vec<Flavor>,
    #[serde(default)]
    pub bindings: Vec<Binding>,
}

fn all_kinds() -> Vec<Kind> {
    Kind::ALL.to_vec()
}

impl Snapshot {
    /// A tenant with nothing in it, every module run.
    pub fn empty(caller: Caller) -> Snapshot {
        Snapshot {
            caller,
            modules: all_kinds(),
            sites: Vec::new(),
            provider_accounts: Vec::new(),
            pools: Vec::new(),
            owner_quotas: Vec::new(),
            offers: Vec::new(),
            flavors: Vec::new(),
            bindings: Vec::new(),
        }
    }

    /// Reads everything once from a host: one call per table.
    pub fn read(host: &dyn Host) -> Snapshot {
        Snapshot {
            caller: host.caller(),
            modules: host.modules(),
            sites: host.sites(),
            provider_accounts: host.provider_accounts(),
            pools: host.pools(),
            owner_quotas: host.owner_quotas(),
            offers: host.offers(),
            flavors: host.flavors(),
            bindings: host.bindings(),
        }
    }
}

impl Host for Snapshot {
    fn caller(&self) -> Caller {
        self.caller.clone()
    }
    fn modules(&self) -> Vec<Kind> {
        self.modules.clone()
    }
    fn sites(&self) -> Vec<Site> {
        self.sites.clone()
    }
    fn provider_accounts(&self) -> Vec<ProviderAccount> {
        self.provider_accounts.clone()
    }
    fn pools(&self) -> Vec<Pool> {
        self.pools.clone()
    }
    fn owner_quotas(&self) -> Vec<OwnerQuota> {
        self.owner_quotas.clone()
    }
    fn offers(&self) -> Vec<Offer> {
        self.offers.clone()
    }
    fn flavors(&self) -> Vec<Flavor> {
        self.flavors.clone()
    }
    fn bindings(&self) -> Vec<Binding> {
        self.bindings.clone()
    }
    fn invoke(&mut self, method: &str, _input: &str) -> Result<String, Error> {
        Err(Error::new(ErrorCode::Unsupported, format!("this host cannot run {method}: it has no composite methods")))
    }
}
