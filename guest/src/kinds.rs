//! What a kind of object is, as data: the vocabulary every kind is stated in (the six
//! built-in ones here, plugin kinds later, SPEC §10), and the catalogue of the kinds a
//! planner knows. The planner, the host's modules, storage, request validation, schemas
//! and OpenAPI all read these descriptors; no field list exists anywhere else.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// One kind of object: its API group, its FleetConfig section, how its objects are
/// identified and removed, and its fields.
#[derive(Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// The kind name of plans, ids and idempotency keys (`pool`).
    pub kind: &'static str,
    /// The API group that serves the kind (`pools`); also its table.
    pub group: &'static str,
    /// The FleetConfig section (`pools`).
    pub section: &'static str,
    pub identity: Identity,
    pub removal: Removal,
    /// Whether the kind has `archive` and `restore` besides its removal (flavors).
    pub archivable: bool,
    /// The fields besides the identity, in the order of the create method's input.
    pub fields: &'static [Field],
    /// Whether fleet may change an existing object. Sites: never, whatever the API allows.
    pub fleet_updates: bool,
    /// Rules over more than one object.
    pub rules: &'static [Rule],
    /// How a change's text line summarizes a new object.
    #[serde(skip)]
    pub summary: &'static [Part],
    /// Whether a module plugin serves the kind (SPEC §10): its check judges every
    /// create and update, at plan time too.
    pub plugin: bool,
    /// The orders [`Descriptor::alphabetical`] and [`Descriptor::whole_input_order`]
    /// answer, worked out on first use: a large plan writes them once per create.
    #[serde(skip)]
    pub(crate) orders: OnceLock<Orders>,
}

/// Orders of a kind's fields by name.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Orders {
    alphabetical: Box<[usize]>,
    whole_input: Box<[usize]>,
}

/// How the objects of a kind are told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Identity {
    /// By an id `<prefix>_` + 26 lowercase base32 characters, which the module makes
    /// unless the caller gives one (fleet does).
    Id { prefix: &'static str },
    /// By the value of a name-pattern field (owner quotas: `owner`). Such objects are
    /// upserted with `set`, never created or updated.
    Field { name: &'static str },
}

/// What removes an object, and what `prune` does to one the document leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Removal {
    /// `delete`, refused while a live object references the object.
    Delete,
    /// `archive`, undone by `restore`; archived objects are not live.
    Archive,
    /// Never removed (sites).
    Never,
}

impl Removal {
    /// The method name and plan action; `None` for [`Removal::Never`].
    pub fn verb(self) -> Option<&'static str> {
        match self {
            Removal::Delete => Some("delete"),
            Removal::Archive => Some("archive"),
            Removal::Never => None,
        }
    }
}

#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct Field {
    /// The camelCase wire name.
    pub name: &'static str,
    #[serde(flatten)]
    pub ty: FieldType,
    pub required: bool,
    pub immutable: bool,
}

/// What a field holds (SPEC §10). A required string must not be empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "type", content = "kind", rename_all = "camelCase")]
pub enum FieldType {
    String,
    /// A string of the name pattern `^[a-z][a-z0-9-]{0,62}$`.
    Name,
    /// An integer from 0 to 2^53 − 1.
    Count,
    Bool,
    /// A map of string to string.
    Map,
    /// A reference to an object of the kind named: its key in a document, its id in state.
    Ref(&'static str),
}

/// A rule over more than one object, stated as data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Rule {
    /// `field` must differ from `other` of the object that `via` references: an offer
    /// goes `to` someone other than its pool's `owner`.
    Differs { field: &'static str, via: &'static str, other: &'static str },
}

/// A part of the one-line summary of a new object (`class gpu, site eu-west, 64 gpus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `<field> <value>`.
    Labeled(&'static str),
    /// `<n> <unit>s`, singular for one.
    Counted(&'static str, &'static str),
    /// `<n> <suffix>`.
    Measured(&'static str, &'static str),
    /// The first of two counts if it is not zero, else the second.
    Either((&'static str, &'static str), (&'static str, &'static str)),
}

const fn field(name: &'static str, ty: FieldType) -> Field {
    Field { name, ty, required: false, immutable: false }
}

const fn required(name: &'static str, ty: FieldType) -> Field {
    Field { name, ty, required: true, immutable: false }
}

const fn fixed(name: &'static str, ty: FieldType) -> Field {
    Field { name, ty, required: true, immutable: true }
}

use FieldType::{Count, Map, Name, Ref};

pub static SITE: Descriptor = Descriptor {
    kind: "site",
    group: "sites",
    section: "sites",
    identity: Identity::Id { prefix: "site" },
    removal: Removal::Never,
    archivable: false,
    fields: &[required("region", FieldType::String), field("description", FieldType::String), field("labels", Map)],
    fleet_updates: false,
    rules: &[],
    summary: &[Part::Labeled("region")],
    plugin: false,
    orders: OnceLock::new(),
};

pub static PROVIDER_ACCOUNT: Descriptor = Descriptor {
    kind: "providerAccount",
    group: "accounts",
    section: "providerAccounts",
    identity: Identity::Id { prefix: "acct" },
    removal: Removal::Delete,
    archivable: false,
    fields: &[fixed("provider", Name), field("credentialsRef", FieldType::String), field("settings", Map)],
    fleet_updates: true,
    rules: &[],
    summary: &[Part::Labeled("provider")],
    plugin: false,
    orders: OnceLock::new(),
};

pub static POOL: Descriptor = Descriptor {
    kind: "pool",
    group: "pools",
    section: "pools",
    identity: Identity::Id { prefix: "pool" },
    removal: Removal::Archive,
    archivable: true,
    fields: &[
        fixed("site", Ref("site")),
        required("account", Ref("providerAccount")),
        fixed("class", Name),
        required("owner", Name),
        field("vcpus", Count),
        field("memoryMib", Count),
        field("gpus", Count),
        field("labels", Map),
    ],
    fleet_updates: true,
    rules: &[],
    summary: &[Part::Labeled("class"), Part::Labeled("site"), Part::Either(("gpus", "gpu"), ("vcpus", "vcpu"))],
    plugin: false,
    orders: OnceLock::new(),
};

pub static OWNER_QUOTA: Descriptor = Descriptor {
    kind: "ownerQuota",
    group: "quotas",
    section: "ownerQuotas",
    identity: Identity::Field { name: "owner" },
    removal: Removal::Delete,
    archivable: false,
    fields: &[field("vcpus", Count), field("memoryMib", Count), field("gpus", Count), field("instances", Count)],
    fleet_updates: true,
    rules: &[],
    summary: &[
        Part::Counted("vcpus", "vcpu"),
        Part::Measured("memoryMib", "MiB"),
        Part::Counted("gpus", "gpu"),
        Part::Counted("instances", "instance"),
    ],
    plugin: false,
    orders: OnceLock::new(),
};

pub static OFFER: Descriptor = Descriptor {
    kind: "offer",
    group: "offers",
    section: "offers",
    identity: Identity::Id { prefix: "offer" },
    removal: Removal::Delete,
    archivable: false,
    fields: &[
        fixed("pool", Ref("pool")),
        required("to", Name),
        field("vcpus", Count),
        field("memoryMib", Count),
        field("gpus", Count),
    ],
    fleet_updates: true,
    rules: &[Rule::Differs { field: "to", via: "pool", other: "owner" }],
    summary: &[
        Part::Labeled("pool"),
        Part::Labeled("to"),
        Part::Counted("vcpus", "vcpu"),
        Part::Measured("memoryMib", "MiB"),
        Part::Counted("gpus", "gpu"),
    ],
    plugin: false,
    orders: OnceLock::new(),
};

pub static FLAVOR: Descriptor = Descriptor {
    kind: "flavor",
    group: "flavors",
    section: "flavors",
    identity: Identity::Id { prefix: "flv" },
    removal: Removal::Delete,
    archivable: true,
    fields: &[
        fixed("pool", Ref("pool")),
        field("vcpus", Count),
        field("memoryMib", Count),
        field("gpus", Count),
        field("diskGib", Count),
    ],
    fleet_updates: true,
    rules: &[],
    summary: &[
        Part::Labeled("pool"),
        Part::Counted("vcpus", "vcpu"),
        Part::Measured("memoryMib", "MiB"),
        Part::Counted("gpus", "gpu"),
        Part::Measured("diskGib", "GiB disk"),
    ],
    plugin: false,
    orders: OnceLock::new(),
};

/// The built-in kinds (SPEC §4), in dependency order.
pub static BUILT_IN: [&Descriptor; 6] = [&SITE, &PROVIDER_ACCOUNT, &POOL, &OWNER_QUOTA, &OFFER, &FLAVOR];

/// `a pool`, `an owner`: a noun with its indefinite article.
pub fn with_article(noun: &str) -> String {
    let article = if noun.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    format!("{article} {noun}")
}

/// Field names no kind may declare: the server sets them, or they belong to a request.
pub const RESERVED: [&str; 5] = ["id", "createdAt", "updatedAt", "archived", "idempotencyKey"];

impl Descriptor {
    /// The id prefix; `None` for kinds identified by a field.
    pub fn id_prefix(&self) -> Option<&'static str> {
        match self.identity {
            Identity::Id { prefix } => Some(prefix),
            Identity::Field { .. } => None,
        }
    }

    /// The name of the identity in requests and objects: `id`, or the field's name.
    pub fn identity_name(&self) -> &'static str {
        match self.identity {
            Identity::Id { .. } => "id",
            Identity::Field { name } => name,
        }
    }

    /// Whether objects are upserted with `set` (kinds identified by a field).
    pub fn upserted(&self) -> bool {
        matches!(self.identity, Identity::Field { .. })
    }

    /// Whether the kind has `archive` and `restore`.
    pub fn archives(&self) -> bool {
        self.archivable || self.removal == Removal::Archive
    }

    /// The position of a field by its wire name.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|field| field.name == name)
    }

    /// The field positions sorted by wire name: the order of a change's `fields`, of
    /// blocked reasons and of the plan hash's document.
    pub fn alphabetical(&self) -> &[usize] {
        &self.orders().alphabetical
    }

    /// The members of a new object's input (its identity at 0, then field `n` at
    /// `n + 1`) sorted by name, as the plan hash writes them.
    pub fn whole_input_order(&self) -> &[usize] {
        &self.orders().whole_input
    }

    fn orders(&self) -> &Orders {
        self.orders.get_or_init(|| {
            let mut alphabetical: Vec<usize> = (0..self.fields.len()).collect();
            alphabetical.sort_by_key(|&index| self.fields[index].name);
            let name = |member: usize| match member {
                0 => self.identity_name(),
                _ => self.fields[member - 1].name,
            };
            let mut whole_input: Vec<usize> = (0..=self.fields.len()).collect();
            whole_input.sort_by_key(|&member| name(member));
            Orders { alphabetical: alphabetical.into(), whole_input: whole_input.into() }
        })
    }

    /// `a pool`, `an offer`.
    pub fn a(&self) -> String {
        with_article(self.kind)
    }

    /// What `self` shares with `other` that two kinds of one deployment may not: the
    /// kind, group, section or id prefix.
    pub fn clash(&self, other: &Descriptor) -> Option<&'static str> {
        let clashes = [
            (other.kind == self.kind, "kind"),
            (other.group == self.group, "group"),
            (other.section == self.section, "section"),
            (other.id_prefix().is_some() && other.id_prefix() == self.id_prefix(), "idPrefix"),
        ];
        clashes.iter().find(|(clash, _)| *clash).map(|(_, what)| *what)
    }

    /// The kinds the fields reference.
    pub fn references(&self) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
        self.fields.iter().filter_map(|field| match field.ty {
            FieldType::Ref(kind) => Some((field.name, kind)),
            _ => None,
        })
    }

    /// `compute.<group>.<verb>`.
    pub fn method(&self, verb: &'static str) -> Method {
        Method { group: self.group, verb }
    }
}

/// A module method, `compute.<group>.<verb>`: held as its two parts, which every call of
/// a large plan shares, and written whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Method {
    group: &'static str,
    verb: &'static str,
}

impl std::fmt::Display for Method {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "compute.{}.{}", self.group, self.verb)
    }
}

impl serde::Serialize for Method {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The kinds one planner or host knows, in dependency order: every kind after the kinds
/// its references name. A kind is its position here.
#[derive(Debug, Clone)]
pub struct Catalog {
    kinds: Vec<&'static Descriptor>,
    /// Per kind, per field: the position of the kind a reference names.
    targets: Vec<Vec<Option<usize>>>,
}

impl Default for Catalog {
    fn default() -> Catalog {
        Catalog::built_in()
    }
}

impl Catalog {
    /// The six built-in kinds.
    pub fn built_in() -> Catalog {
        Catalog::new(BUILT_IN.to_vec()).unwrap_or_else(|_| unreachable!("the built-in kinds are consistent"))
    }

    /// The built-in kinds and the kinds of module plugins (SPEC §10): the plugins' after
    /// the built-in ones, each after the kinds it references, ties by kind name. A
    /// plugin kind that clashes with an earlier kind, references a kind no module
    /// serves, or is part of a cycle of references is refused: the error names it.
    pub fn with_plugins(plugins: &[&'static Descriptor]) -> Result<Catalog, (&'static str, String)> {
        let mut kinds: Vec<&'static Descriptor> = BUILT_IN.to_vec();
        let mut waiting = plugins.to_vec();
        waiting.sort_by_key(|kind| kind.kind);
        for (position, plugin) in waiting.iter().enumerate() {
            let built_in = BUILT_IN.iter().map(|kind| (*kind, "the built-in"));
            let plugins = waiting[..position].iter().map(|kind| (*kind, "the plugin"));
            for (other, whose) in built_in.chain(plugins) {
                if let Some(what) = plugin.clash(other) {
                    return Err((plugin.kind, format!("its {what} is that of {whose} kind {}", other.kind)));
                }
            }
        }
        while !waiting.is_empty() {
            let known = |kind: &str| kinds.iter().any(|known| known.kind == kind);
            let Some(ready) = waiting.iter().position(|kind| kind.references().all(|(_, target)| known(target))) else {
                let plugin = waiting[0];
                let (field, target) = plugin.references().find(|(_, target)| !known(target)).unwrap_or_default();
                let reason = if waiting.iter().any(|other| other.kind == target) {
                    format!(
                        "its field {field} references {target}, and the plugin kinds left reference each other in a cycle"
                    )
                } else {
                    format!("its field {field} references {target}, a kind no module serves")
                };
                return Err((plugin.kind, reason));
            };
            kinds.push(waiting.remove(ready));
        }
        Catalog::new(kinds).map_err(|reason| ("", reason))
    }

    /// A catalogue of `kinds`, which must be in dependency order, each with a unique
    /// kind, group, section and id prefix, and referencing only kinds before it.
    pub fn new(kinds: Vec<&'static Descriptor>) -> Result<Catalog, String> {
        let mut targets = Vec::with_capacity(kinds.len());
        for (position, descriptor) in kinds.iter().enumerate() {
            let earlier = &kinds[..position];
            for other in earlier {
                if let Some(what) = descriptor.clash(other) {
                    return Err(format!("kind {} has the same {what} as kind {}", descriptor.kind, other.kind));
                }
            }
            let mut fields = Vec::with_capacity(descriptor.fields.len());
            for field in descriptor.fields {
                let target = match field.ty {
                    FieldType::Ref(kind) => {
                        Some(earlier.iter().position(|other| other.kind == kind).ok_or_else(|| {
                            format!(
                                "field {} of kind {} references {kind}, which no earlier kind is",
                                field.name, descriptor.kind
                            )
                        })?)
                    }
                    _ => None,
                };
                fields.push(target);
            }
            targets.push(fields);
        }
        Ok(Catalog { kinds, targets })
    }

    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// The descriptor of the kind at `kind`.
    pub fn get(&self, kind: usize) -> &'static Descriptor {
        self.kinds[kind]
    }

    /// Every kind with its position, in dependency order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (usize, &'static Descriptor)> + '_ {
        self.kinds.iter().copied().enumerate()
    }

    pub fn by_kind(&self, kind: &str) -> Option<usize> {
        self.kinds.iter().position(|descriptor| descriptor.kind == kind)
    }

    pub fn by_section(&self, section: &str) -> Option<usize> {
        self.kinds.iter().position(|descriptor| descriptor.section == section)
    }

    pub fn by_group(&self, group: &str) -> Option<usize> {
        self.kinds.iter().position(|descriptor| descriptor.group == group)
    }

    /// The kind that field `field` of `kind` references, if it is a reference.
    pub fn target(&self, kind: usize, field: usize) -> Option<usize> {
        self.targets[kind][field]
    }

    /// The kind whose well-formed id `text` is (`<prefix>_` + 26 of `[a-z2-7]`), if any.
    pub fn id_kind(&self, text: &str) -> Option<usize> {
        let (prefix, rest) = text.split_once('_')?;
        let kind = self.kinds.iter().position(|descriptor| descriptor.id_prefix() == Some(prefix))?;
        crate::grammar::is_id_body(rest).then_some(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_and_immutable_fields_follow_the_spec_table() {
        let immutable: Vec<(&str, &str)> = BUILT_IN
            .iter()
            .flat_map(|kind| {
                kind.fields.iter().filter(|field| field.immutable).map(move |field| (kind.kind, field.name))
            })
            .collect();
        assert_eq!(
            immutable,
            [
                ("providerAccount", "provider"),
                ("pool", "site"),
                ("pool", "class"),
                ("offer", "pool"),
                ("flavor", "pool")
            ]
        );
        for kind in BUILT_IN {
            assert!(kind.fields.iter().all(|field| !RESERVED.contains(&field.name)), "{}", kind.kind);
            assert!(kind.fields.iter().filter(|field| field.immutable).all(|field| field.required), "{}", kind.kind);
        }
    }

    #[test]
    fn alphabetical_order_sorts_by_wire_name() {
        let names: Vec<&str> = POOL.alphabetical().iter().map(|&index| POOL.fields[index].name).collect();
        assert_eq!(names, ["account", "class", "gpus", "labels", "memoryMib", "owner", "site", "vcpus"]);
    }

    fn plugin(kind: &str, prefix: &str, references: &[&str]) -> &'static Descriptor {
        let fields: Vec<String> = references
            .iter()
            .map(|target| format!(r#"{{"name": "{target}Ref", "type": "ref", "ref": "{target}", "required": true, "immutable": false}}"#))
            .collect();
        let json = format!(
            r#"{{"group": "{kind}s", "kind": "{kind}", "section": "{kind}s", "idPrefix": "{prefix}", "removal": "delete", "fields": [{}]}}"#,
            fields.join(",")
        );
        serde_json::from_str::<crate::plugins::PluginKind>(&json).unwrap().into_descriptor().unwrap()
    }

    #[test]
    fn plugin_kinds_follow_the_built_in_ones_each_after_what_it_references() {
        let (zone, lease, alarm) =
            (plugin("zone", "zn", &["site"]), plugin("lease", "ls", &["zone", "pool"]), plugin("alarm", "al", &[]));
        let catalog = Catalog::with_plugins(&[lease, zone, alarm]).unwrap();
        let order: Vec<&str> = catalog.iter().map(|(_, kind)| kind.kind).collect();
        assert_eq!(&order[6..], ["alarm", "zone", "lease"], "ties by name, then references");
        let cycle = (plugin("egg", "eg", &["hen"]), plugin("hen", "hn", &["egg"]));
        let (kind, reason) = Catalog::with_plugins(&[cycle.0, cycle.1]).unwrap_err();
        assert_eq!(kind, "egg");
        assert!(reason.contains("cycle"), "{reason}");
        let (kind, reason) = Catalog::with_plugins(&[plugin("probe", "pr", &["gizmo"])]).unwrap_err();
        assert_eq!((kind, reason.as_str()), ("probe", "its field gizmoRef references gizmo, a kind no module serves"));
        let (kind, reason) = Catalog::with_plugins(&[plugin("flavor", "fl", &[])]).unwrap_err();
        assert_eq!((kind, reason.as_str()), ("flavor", "its kind is that of the built-in kind flavor"));
    }

    #[test]
    fn references_resolve_to_earlier_kinds() {
        let catalog = Catalog::built_in();
        let pools = catalog.by_kind("pool").unwrap();
        assert_eq!(catalog.target(pools, 0), catalog.by_kind("site"));
        assert_eq!(catalog.target(pools, 1), catalog.by_kind("providerAccount"));
        assert_eq!(catalog.target(pools, 2), None);
        assert_eq!(catalog.id_kind("pool_aaaaaaaaaaaaaaaaaaaaaaaaaa"), Some(pools));
        assert_eq!(catalog.id_kind("quota_aaaaaaaaaaaaaaaaaaaaaaaaaa"), None);
        let backwards = Catalog::new(vec![&POOL, &SITE, &PROVIDER_ACCOUNT]).unwrap_err();
        assert!(backwards.contains("references site"), "{backwards}");
        let twice = Catalog::new(vec![&SITE, &SITE]).unwrap_err();
        assert!(twice.contains("kind site has the same kind as kind site"), "{twice}");
    }
}
