//! The `text` line of every change, for people: `+ pool gpu-a: create (...)`.

use crate::Kind;
use crate::schema::{self, Value};

/// `n vcpus`, `1 gpu`: a count with its unit, plural unless it is one.
fn count(number: u64, unit: &str) -> String {
    if number == 1 { format!("1 {unit}") } else { format!("{number} {unit}s") }
}

/// A short summary of a new object, from its document values (references as keys).
fn summary(kind: Kind, values: &[Value]) -> String {
    let text = |name: &str| schema::position(kind, name).map_or("", |position| values[position].as_text());
    let number = |name: &str| schema::position(kind, name).map_or(0, |position| values[position].as_number());
    match kind {
        Kind::Site => format!("region {}", text("region")),
        Kind::ProviderAccount => format!("provider {}", text("provider")),
        Kind::Pool => {
            let capacity =
                if number("gpus") > 0 { count(number("gpus"), "gpu") } else { count(number("vcpus"), "vcpu") };
            format!("class {}, site {}, {capacity}", text("class"), text("site"))
        }
        Kind::OwnerQuota => format!(
            "{}, {} MiB, {}, {}",
            count(number("vcpus"), "vcpu"),
            number("memoryMib"),
            count(number("gpus"), "gpu"),
            count(number("instances"), "instance")
        ),
        Kind::Offer => format!(
            "pool {}, to {}, {}, {} MiB, {}",
            text("pool"),
            text("to"),
            count(number("vcpus"), "vcpu"),
            number("memoryMib"),
            count(number("gpus"), "gpu")
        ),
        Kind::Flavor => format!(
            "pool {}, {}, {} MiB, {}, {} GiB disk",
            text("pool"),
            count(number("vcpus"), "vcpu"),
            number("memoryMib"),
            count(number("gpus"), "gpu"),
            number("diskGib")
        ),
    }
}

/// `+ pool gpu-a: create (class gpu, site eu-west, 64 gpus)`.
pub(crate) fn create(kind: Kind, key: &str, values: &[Value]) -> String {
    format!("+ {} {key}: create ({})", kind.name(), summary(kind, values))
}

/// `~ pool gpu-a: update (gpus 32 -> 64, vcpus 256 -> 512)`.
pub(crate) fn update<'a>(
    kind: Kind,
    key: &str,
    changes: impl Iterator<Item = (&'a str, &'a Value, &'a Value)>,
) -> String {
    let changes: Vec<String> =
        changes.map(|(field, from, to)| format!("{field} {} -> {}", from.display(), to.display())).collect();
    format!("~ {} {key}: update ({})", kind.name(), changes.join(", "))
}

/// `~ pool gpu-a: restore`.
pub(crate) fn restore(kind: Kind, key: &str) -> String {
    format!("~ {} {key}: restore", kind.name())
}

/// `- flavor g1-large: delete`, `- pool gpu-b: archive`.
pub(crate) fn removal(kind: Kind, key: &str, action: &str) -> String {
    format!("- {} {key}: {action}", kind.name())
}

/// `! pool gpu-b: class is immutable (cpu -> gpu); ...`.
pub(crate) fn blocked<'a>(kind: Kind, key: &str, reasons: impl Iterator<Item = &'a str>) -> String {
    let reasons: Vec<&str> = reasons.collect();
    format!("! {} {key}: {}", kind.name(), reasons.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(text: &str) -> Value {
        Value::Text(text.to_owned())
    }

    #[test]
    fn pool_summary_shows_gpus_or_vcpus() {
        let mut pool = vec![
            text("eu-west"),
            text("aws-main"),
            text("gpu"),
            text("team-ml"),
            Value::Number(512),
            Value::Number(2097152),
            Value::Number(64),
            Value::Map(Default::default()),
        ];
        assert_eq!(create(Kind::Pool, "gpu-a", &pool), "+ pool gpu-a: create (class gpu, site eu-west, 64 gpus)");
        pool[6] = Value::Number(0);
        assert_eq!(create(Kind::Pool, "gpu-a", &pool), "+ pool gpu-a: create (class gpu, site eu-west, 512 vcpus)");
    }

    #[test]
    fn update_lists_changes_and_blocked_joins_reasons() {
        let (from, to) = (Value::Number(32), Value::Number(64));
        let empty = text("");
        let line = update(Kind::Pool, "gpu-a", [("gpus", &from, &to), ("owner", &empty, &to)].into_iter());
        assert_eq!(line, "~ pool gpu-a: update (gpus 32 -> 64, owner \"\" -> 64)");
        assert_eq!(blocked(Kind::Offer, "o", ["a", "b"].into_iter()), "! offer o: a; b");
    }
}
