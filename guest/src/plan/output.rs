//! What a plan says (SPEC §6.2): its changes, calls, summary, blocked changes and the
//! objects it leaves alone, and how each is written. A create is held as the document's
//! values; its field changes, text line and call input are written from them.

use std::sync::Arc;

use serde::ser::SerializeMap as _;
use serde::{Serialize, Serializer};

use crate::error::{Error, ErrorCode};
use crate::hash::IdempotencyKey;
use crate::json::writer;
use crate::kinds::{Descriptor, FieldType, Method};
use crate::policy::Judgement;
use crate::policy::approval::Approval;
use crate::text;
use crate::value::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Action {
    Create,
    Update,
    Delete,
    Archive,
    Restore,
    /// A name binding moved (SPEC §15): no call.
    Rename,
}

impl Action {
    pub(crate) fn verb(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
            Action::Archive => "archive",
            Action::Restore => "restore",
            Action::Rename => "rename",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct FieldChange {
    pub(crate) field: &'static str,
    pub(crate) from: Option<Value>,
    pub(crate) to: Value,
}

/// A change of the plan, written as `{"action", "kind", "key", "from"?, "id"?, "fields",
/// "text"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    pub(crate) action: Action,
    pub(crate) kind: &'static str,
    pub(crate) key: Arc<str>,
    pub(crate) id: Option<Arc<str>>,
    pub(crate) detail: Detail,
}

/// What a change says field by field and in its text line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Detail {
    /// A create that nothing blocks, held as the document's values of the kind: every
    /// field changes from null to its value, and the text line summarizes them. Both
    /// are written when the plan is, never held, since a large plan is mostly creates.
    Created(&'static Descriptor, Arc<[Value]>),
    Written(Box<Written>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Written {
    /// A rename's old name; the change's `key` is its new one.
    pub(crate) from: Option<String>,
    /// In alphabetical order of their fields.
    pub(crate) fields: Vec<FieldChange>,
    pub(crate) text: String,
}

impl Change {
    pub(crate) fn written(
        action: Action,
        kind: &'static str,
        key: Arc<str>,
        id: Option<Arc<str>>,
        written: Written,
    ) -> Change {
        Change { action, kind, key, id, detail: Detail::Written(Box::new(written)) }
    }

    /// A change of the whole object, no field named: a removal or a restore.
    pub(crate) fn whole(
        action: Action,
        descriptor: &Descriptor,
        key: Arc<str>,
        id: Option<Arc<str>>,
        text: String,
    ) -> Change {
        Change::written(action, descriptor.kind, key, id, Written { from: None, fields: Vec::new(), text })
    }

    /// A rename's old name.
    pub(crate) fn from(&self) -> Option<&str> {
        match &self.detail {
            Detail::Written(written) => written.from.as_deref(),
            Detail::Created(..) => None,
        }
    }

    /// The changed fields, `(field, from, to)` in alphabetical order of fields.
    pub(crate) fn fields(&self) -> Vec<(&'static str, Option<&Value>, &Value)> {
        match &self.detail {
            Detail::Created(descriptor, values) => descriptor
                .alphabetical()
                .iter()
                .map(|&index| (descriptor.fields[index].name, None, &values[index]))
                .collect(),
            Detail::Written(written) => {
                written.fields.iter().map(|change| (change.field, change.from.as_ref(), &change.to)).collect()
            }
        }
    }

    /// The text line for people.
    pub(crate) fn text(&self) -> Line<'_> {
        match &self.detail {
            Detail::Created(kind, values) => Line::Create(text::Create { kind, key: &self.key, values }),
            Detail::Written(written) => Line::Written(&written.text),
        }
    }
}

/// A change's text line: a create's is written from its values where it goes.
pub(crate) enum Line<'a> {
    Create(text::Create<'a>),
    Written(&'a str),
}

impl std::fmt::Display for Line<'_> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Line::Create(create) => create.fmt(formatter),
            Line::Written(text) => formatter.write_str(text),
        }
    }
}

impl Serialize for Line<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Line::Create(create) => serializer.collect_str(create),
            Line::Written(text) => serializer.serialize_str(text),
        }
    }
}

impl Serialize for Change {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("action", &self.action)?;
        map.serialize_entry("kind", self.kind)?;
        map.serialize_entry("key", &*self.key)?;
        if let Some(from) = self.from() {
            map.serialize_entry("from", from)?;
        }
        if let Some(id) = &self.id {
            map.serialize_entry("id", &**id)?;
        }
        map.serialize_entry("fields", &FieldChanges(self))?;
        map.serialize_entry("text", &self.text())?;
        map.end()
    }
}

/// A change's `fields`: `[{"field", "from", "to"}]`, `from` null for a new value. Its
/// members are in sorted order, so the plan and its hash write it alike.
pub(crate) struct FieldChanges<'a>(pub(crate) &'a Change);

impl Serialize for FieldChanges<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.fields().into_iter().map(|(field, from, to)| WrittenFieldChange {
            field,
            from,
            to,
        }))
    }
}

/// One of a change's `fields`, its members in sorted order.
#[derive(Serialize)]
struct WrittenFieldChange<'a> {
    field: &'static str,
    from: Option<&'a Value>,
    to: &'a Value,
}

/// A call's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Input {
    /// Named values, written in the order given.
    Fields(Vec<(&'static str, Value)>),
    /// A new object's: its identity, then every field of its kind in descriptor order,
    /// the document's values shared, each reference (`references`, in field order) as
    /// the id it resolves to.
    Whole { kind: &'static Descriptor, identity: Value, values: Arc<[Value]>, references: Box<[Value]> },
}

impl Input {
    /// The input's members in the order they are written.
    pub(crate) fn members(&self) -> Vec<(&'static str, &Value)> {
        match self {
            Input::Fields(fields) => fields.iter().map(|(name, value)| (*name, value)).collect(),
            Input::Whole { kind, identity, values, references } => {
                let mut references = references.iter();
                let fields = kind.fields.iter().zip(values.iter()).map(|(field, value)| match field.ty {
                    FieldType::Ref(_) => (field.name, references.next().unwrap_or(value)),
                    _ => (field.name, value),
                });
                std::iter::once((kind.identity_name(), identity)).chain(fields).collect()
            }
        }
    }
}

impl Serialize for Input {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.members())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Call {
    pub(crate) method: Method,
    pub(crate) input: Input,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) idempotency_key: Option<IdempotencyKey>,
}

impl Call {
    /// The input `methods.invoke` receives: creates carry their idempotency key.
    pub(crate) fn invoke_input(&self) -> Result<String, Error> {
        let key = self.idempotency_key.as_ref().map(|key| Value::Text(key.to_string().into()));
        let mut members = self.input.members();
        members.extend(key.as_ref().map(|key| ("idempotencyKey", key)));
        writer::to_string(&Ordered(members))
            .map_err(|error| Error::new(ErrorCode::Internal, format!("a call cannot be written: {error}")))
    }
}

/// Named values, written as a JSON object in the order given.
struct Ordered<'a>(Vec<(&'static str, &'a Value)>);

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().copied())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Blocked {
    pub(crate) kind: &'static str,
    pub(crate) key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) field: Option<&'static str>,
    pub(crate) reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Summary {
    pub(crate) create: usize,
    pub(crate) update: usize,
    pub(crate) delete: usize,
    pub(crate) archive: usize,
    pub(crate) restore: usize,
    pub(crate) unchanged: usize,
    pub(crate) blocked: usize,
    /// With renames in the document: those the plan makes (SPEC §15).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rename: Option<usize>,
    /// With policies in force: their denials that block the plan (SPEC §14).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) denied: Option<usize>,
    /// With policies in force: their warnings, advisory denials included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) warnings: Option<usize>,
    /// With policies in force: their `require_approval` verdicts that keep the plan
    /// from a direct apply (SPEC §17).
    #[serde(rename = "approvalRequired", skip_serializing_if = "Option::is_none")]
    pub(crate) approval_required: Option<usize>,
}

/// A live object the document leaves out and a plan without `prune` leaves alone, with
/// what `prune` would do to it (SPEC §6.2 `leftAlone`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LeftAlone {
    pub(crate) kind: &'static str,
    pub(crate) key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<String>,
    pub(crate) action: Action,
}

/// A plan, serialized in the field order of SPEC §6.2.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Plan {
    pub(crate) changes: Vec<Change>,
    pub(crate) calls: Vec<Call>,
    pub(crate) summary: Summary,
    pub(crate) blocked: Vec<Blocked>,
    pub(crate) left_alone: Vec<LeftAlone>,
    /// The verdicts of the policies in force; none when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) policy: Option<Judgement>,
    /// With a proposal in the request: whether it is approved (not hashed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) approval: Option<Approval>,
    /// `"deployment"` when the deployment applies changes only through approved
    /// proposals (`serve --require-approval`) and the plan has calls: a direct apply is
    /// `APPROVAL_REQUIRED` (not hashed; the policies' verdicts say theirs in `summary`).
    #[serde(rename = "approvalRequired", skip_serializing_if = "Option::is_none")]
    pub(crate) approval_required: Option<&'static str>,
    pub(crate) plan_hash: String,
}
