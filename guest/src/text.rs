//! The `text` line of every change, for people: `+ pool gpu-a: create (...)`.

use std::fmt::{self, Write};

use crate::kinds::{Descriptor, FieldType, Part};
use crate::value::Value;

/// `n vcpus`, `1 gpu`: a count with its unit, plural unless it is one.
fn count(out: &mut impl Write, number: u64, unit: &str) -> fmt::Result {
    measured(out, number, unit)?;
    if number == 1 { Ok(()) } else { out.write_str("s") }
}

/// `262144 MiB`: a number and what follows it.
fn measured(out: &mut impl Write, number: u64, suffix: &str) -> fmt::Result {
    words(out, itoa::Buffer::new().format(number), suffix)
}

/// `class gpu`: two words.
fn words(out: &mut impl Write, first: &str, second: &str) -> fmt::Result {
    out.write_str(first)?;
    out.write_str(" ")?;
    out.write_str(second)
}

/// A short summary of a new object, from its document values (references as keys), as
/// the kind's descriptor states it; kinds that state none list their fields that are
/// not maps.
fn summary(out: &mut impl Write, kind: &Descriptor, values: &[Value]) -> fmt::Result {
    let value = |name: &str| kind.position(name).map(|position| &values[position]);
    let text = |name: &str| value(name).map_or("", Value::as_text);
    let number = |name: &str| value(name).map_or(0, Value::as_count);
    let mut separator = "";
    if kind.summary.is_empty() {
        for (field, value) in kind.fields.iter().zip(values).filter(|(field, _)| field.ty != FieldType::Map) {
            write!(out, "{separator}{} {}", field.name, value.display())?;
            separator = ", ";
        }
        return Ok(());
    }
    for part in kind.summary {
        out.write_str(separator)?;
        separator = ", ";
        match *part {
            Part::Labeled(name) => words(out, name, text(name))?,
            Part::Counted(name, unit) => count(out, number(name), unit)?,
            Part::Measured(name, suffix) => measured(out, number(name), suffix)?,
            Part::Either((first, first_unit), (second, second_unit)) => {
                if number(first) > 0 {
                    count(out, number(first), first_unit)?;
                } else {
                    count(out, number(second), second_unit)?;
                }
            }
        }
    }
    Ok(())
}

/// `+ pool gpu-a: create (class gpu, site eu-west, 64 gpus)`, written where it goes: a
/// large plan is mostly creates, and holds none of their lines. Written piece by piece,
/// not through `write!`: a plan writes every line twice (the result and the hash), and
/// in the sandbox `format_args`' machinery cost more than the pieces.
pub(crate) struct Create<'a> {
    pub(crate) kind: &'a Descriptor,
    pub(crate) key: &'a str,
    pub(crate) values: &'a [Value],
}

impl fmt::Display for Create<'_> {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        for piece in ["+ ", self.kind.kind, " ", self.key, ": create ("] {
            out.write_str(piece)?;
        }
        summary(out, self.kind, self.values)?;
        out.write_str(")")
    }
}

/// [`Create`] as text.
#[cfg(test)]
fn create(kind: &Descriptor, key: &str, values: &[Value]) -> String {
    Create { kind, key, values }.to_string()
}

/// `~ pool gpu-a: update (gpus 32 -> 64, vcpus 256 -> 512)`.
pub(crate) fn update<'a>(
    kind: &Descriptor,
    key: &str,
    changes: impl Iterator<Item = (&'a str, &'a Value, &'a Value)>,
) -> String {
    let changes: Vec<String> =
        changes.map(|(field, from, to)| format!("{field} {} -> {}", from.display(), to.display())).collect();
    format!("~ {} {key}: update ({})", kind.kind, changes.join(", "))
}

/// `~ pool gpu-a → gpu-main: rename`.
pub(crate) fn rename(kind: &Descriptor, from: &str, to: &str) -> String {
    format!("~ {} {from} → {to}: rename", kind.kind)
}

/// `~ pool gpu-a: restore`.
pub(crate) fn restore(kind: &Descriptor, key: &str) -> String {
    format!("~ {} {key}: restore", kind.kind)
}

/// `- flavor g1-large: delete`, `- pool gpu-b: archive`.
pub(crate) fn removal(kind: &Descriptor, key: &str, action: &str) -> String {
    format!("- {} {key}: {action}", kind.kind)
}

/// `! pool gpu-b: class is immutable (cpu -> gpu); ...`.
pub(crate) fn blocked<'a>(kind: &Descriptor, key: &str, reasons: impl Iterator<Item = &'a str>) -> String {
    let reasons: Vec<&str> = reasons.collect();
    format!("! {} {key}: {}", kind.kind, reasons.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{OFFER, POOL};

    fn text(text: &str) -> Value {
        Value::Text(text.into())
    }

    #[test]
    fn pool_summary_shows_gpus_or_vcpus() {
        let mut pool = vec![
            text("eu-west"),
            text("aws-main"),
            text("gpu"),
            text("team-ml"),
            Value::Count(512),
            Value::Count(2097152),
            Value::Count(64),
            Value::Map(Default::default()),
        ];
        assert_eq!(create(&POOL, "gpu-a", &pool), "+ pool gpu-a: create (class gpu, site eu-west, 64 gpus)");
        pool[6] = Value::Count(0);
        assert_eq!(create(&POOL, "gpu-a", &pool), "+ pool gpu-a: create (class gpu, site eu-west, 512 vcpus)");
    }

    #[test]
    fn update_lists_changes_and_blocked_joins_reasons() {
        let (from, to) = (Value::Count(32), Value::Count(64));
        let empty = text("");
        let line = update(&POOL, "gpu-a", [("gpus", &from, &to), ("owner", &empty, &to)].into_iter());
        assert_eq!(line, "~ pool gpu-a: update (gpus 32 -> 64, owner \"\" -> 64)");
        assert_eq!(blocked(&OFFER, "o", ["a", "b"].into_iter()), "! offer o: a; b");
    }
}
