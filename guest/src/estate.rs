//! The tenant's state indexed for planning: objects by kind and id (owner for quotas),
//! name bindings both ways, and the modules this deployment runs.

use rustc_hash::FxHashMap as HashMap;
use std::collections::hash_map::Entry;

use crate::schema::Value;
use crate::{Caller, Kind, Snapshot};

/// One object as the state reports it, its fields in schema order (references are ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Current {
    /// The id; the owner for owner quotas.
    pub(crate) id: String,
    pub(crate) values: Vec<Value>,
    pub(crate) archived: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Estate {
    pub(crate) caller: Caller,
    modules: [bool; 6],
    objects: [Vec<Current>; 6],
    by_id: [HashMap<String, usize>; 6],
    name_to_id: [HashMap<String, String>; 6],
    id_to_name: [HashMap<String, String>; 6],
}

impl Estate {
    /// Indexes a snapshot, taking its values without copying them.
    pub(crate) fn new(snapshot: Snapshot) -> Estate {
        let mut estate = Estate { caller: snapshot.caller, ..Estate::default() };
        for kind in snapshot.modules {
            estate.modules[kind.index()] = true;
        }
        let text = Value::Text;
        let number = Value::Number;
        estate.objects[Kind::Site.index()] = snapshot
            .sites
            .into_iter()
            .map(|site| Current {
                id: site.id,
                values: vec![text(site.region), text(site.description), Value::Map(site.labels)],
                archived: false,
            })
            .collect();
        estate.objects[Kind::ProviderAccount.index()] = snapshot
            .provider_accounts
            .into_iter()
            .map(|account| Current {
                id: account.id,
                values: vec![text(account.provider), text(account.credentials_ref), Value::Map(account.settings)],
                archived: false,
            })
            .collect();
        estate.objects[Kind::Pool.index()] = snapshot
            .pools
            .into_iter()
            .map(|pool| Current {
                id: pool.id,
                values: vec![
                    text(pool.site),
                    text(pool.account),
                    text(pool.class),
                    text(pool.owner),
                    number(pool.vcpus),
                    number(pool.memory_mib),
                    number(pool.gpus),
                    Value::Map(pool.labels),
                ],
                archived: pool.archived,
            })
            .collect();
        estate.objects[Kind::OwnerQuota.index()] = snapshot
            .owner_quotas
            .into_iter()
            .map(|quota| Current {
                id: quota.owner,
                values: vec![
                    number(quota.vcpus),
                    number(quota.memory_mib),
                    number(quota.gpus),
                    number(quota.instances),
                ],
                archived: false,
            })
            .collect();
        estate.objects[Kind::Offer.index()] = snapshot
            .offers
            .into_iter()
            .map(|offer| Current {
                id: offer.id,
                values: vec![
                    text(offer.pool),
                    text(offer.to),
                    number(offer.vcpus),
                    number(offer.memory_mib),
                    number(offer.gpus),
                ],
                archived: false,
            })
            .collect();
        estate.objects[Kind::Flavor.index()] = snapshot
            .flavors
            .into_iter()
            .map(|flavor| Current {
                id: flavor.id,
                values: vec![
                    text(flavor.pool),
                    number(flavor.vcpus),
                    number(flavor.memory_mib),
                    number(flavor.gpus),
                    number(flavor.disk_gib),
                ],
                archived: flavor.archived,
            })
            .collect();
        for kind in Kind::ALL {
            let index = kind.index();
            estate.objects[index].sort_by(|left, right| left.id.cmp(&right.id));
            estate.by_id[index] = estate.objects[index]
                .iter()
                .enumerate()
                .map(|(position, object)| (object.id.clone(), position))
                .collect();
        }
        // A name binds the smallest existing id bound to it; an id is keyed by the
        // smallest name that binds it. Bindings of objects that no longer exist are
        // ignored, so their names are free for new objects. The planner cannot see the
        // objects of a module that does not run, so their bindings are taken as given.
        for binding in snapshot.bindings {
            let index = binding.kind.index();
            if estate.modules[index] && !estate.by_id[index].contains_key(&binding.id) {
                continue;
            }
            match estate.name_to_id[index].entry(binding.name) {
                Entry::Vacant(entry) => {
                    entry.insert(binding.id);
                }
                Entry::Occupied(mut entry) => {
                    if binding.id < *entry.get() {
                        entry.insert(binding.id);
                    }
                }
            }
        }
        for kind in Kind::ALL {
            let index = kind.index();
            let mut id_to_name: HashMap<String, String> = HashMap::default();
            for (name, id) in &estate.name_to_id[index] {
                match id_to_name.entry(id.clone()) {
                    Entry::Vacant(entry) => {
                        entry.insert(name.clone());
                    }
                    Entry::Occupied(mut entry) => {
                        if name < entry.get() {
                            entry.insert(name.clone());
                        }
                    }
                }
            }
            estate.id_to_name[index] = id_to_name;
        }
        estate
    }

    /// Whether this deployment runs the module of `kind`.
    pub(crate) fn runs(&self, kind: Kind) -> bool {
        self.modules[kind.index()]
    }

    /// The objects of a kind, sorted by id (owner for quotas).
    pub(crate) fn objects(&self, kind: Kind) -> &[Current] {
        &self.objects[kind.index()]
    }

    /// The object of a kind with this id (owner for quotas), archived or not.
    pub(crate) fn get(&self, kind: Kind, id: &str) -> Option<&Current> {
        self.by_id[kind.index()].get(id).map(|&position| &self.objects[kind.index()][position])
    }

    /// The id an existing object bound to `name` has.
    pub(crate) fn bound(&self, kind: Kind, name: &str) -> Option<&str> {
        self.name_to_id[kind.index()].get(name).map(String::as_str)
    }

    /// The key export gives the object with this id: its bound name, else the id.
    pub(crate) fn key_of<'a>(&'a self, kind: Kind, id: &'a str) -> &'a str {
        self.id_to_name[kind.index()].get(id).map_or(id, String::as_str)
    }
}
