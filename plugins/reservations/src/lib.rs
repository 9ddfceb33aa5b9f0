//! `reservations`: an example fleet module plugin (SPEC §10). A reservation holds part of
//! a pool's capacity for an owner over a time range:
//!
//! - group `reservations`, kind `reservation`, section `reservations`, ids `rsv_...`,
//!   removed with `delete`;
//! - `pool` (a pool, required, immutable), `owner` (a name, required), `vcpus`, `gpus`
//!   (counts), `startsAt`, `endsAt` (RFC 3339 UTC times, required), `note`;
//! - its rules: both times are RFC 3339 UTC times and `endsAt` is later; `vcpus` and
//!   `gpus` are at most the pool's.
//!
//! The rules are plain functions over JSON objects (tested natively); the component glue
//! at the bottom is all that knows about WIT.

use serde_json::Value;

/// A rule an object breaks: a JSON pointer into it, and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

/// The rules over one reservation, given the pool it references (absent when the host
/// gave none, which it always does for a live pool).
pub fn check(reservation: &Value, pool: Option<&Value>) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut problem = |path: &str, message: String| problems.push(Problem { path: path.into(), message });
    let starts = time_field(reservation, "startsAt");
    let ends = time_field(reservation, "endsAt");
    for (field, time) in [("startsAt", &starts), ("endsAt", &ends)] {
        if let Err(text) = time {
            problem(
                &format!("/{field}"),
                format!("{field} must be an RFC 3339 UTC time such as 2026-12-01T08:00:00Z, not {}", quoted(text)),
            );
        }
    }
    if let (Ok(starts), Ok(ends)) = (&starts, &ends)
        && ends <= starts
    {
        problem("/endsAt", "endsAt must be later than startsAt".into());
    }
    if let Some(pool) = pool {
        for field in ["vcpus", "gpus"] {
            let (wanted, has) = (count(reservation, field), count(pool, field));
            if wanted > has {
                let id = pool.get("id").and_then(Value::as_str).unwrap_or_default();
                problem(&format!("/{field}"), format!("{field} {wanted} is more than the {has} {field} of pool {id}"));
            }
        }
    }
    problems
}

/// The most characters of a user's value a message repeats.
const QUOTED: usize = 40;

/// A user's value quoted for a message: whole when short, else its first [`QUOTED`]
/// characters and how long it is, so that a message stays short whatever the input.
fn quoted(text: &str) -> String {
    let length = text.chars().count();
    if length <= QUOTED {
        return format!("{text:?}");
    }
    let prefix: String = text.chars().take(QUOTED).collect();
    format!("{prefix:?}… ({length} characters)")
}

fn count(object: &Value, field: &str) -> u64 {
    object.get(field).and_then(Value::as_u64).unwrap_or(0)
}

/// A field's RFC 3339 UTC time, as a value that sorts like the time; the text otherwise.
fn time_field(object: &Value, field: &str) -> Result<Instant, String> {
    let text = object.get(field).and_then(Value::as_str).unwrap_or_default();
    parse_utc(text).ok_or_else(|| text.to_owned())
}

/// Seconds since 0000-03-01 and the fraction's digits padded to nine: ordered as the
/// times are.
type Instant = (i64, u32);

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|+00:00)`, `T` and `Z` in either case (RFC 3339
/// §5.6), with real calendar dates and a leap second allowed.
pub fn parse_utc(text: &str) -> Option<Instant> {
    let bytes = text.as_bytes();
    let digits = |from: usize, to: usize| -> Option<u32> {
        let part = bytes.get(from..to)?;
        part.iter().all(u8::is_ascii_digit).then(|| part.iter().fold(0, |n, digit| n * 10 + u32::from(digit - b'0')))
    };
    let separators = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
    if bytes.len() < 20 || separators.iter().any(|(at, byte)| bytes[*at] != *byte) || !matches!(bytes[10], b'T' | b't')
    {
        return None;
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 7)?, digits(8, 10)?);
    let (hour, minute, second) = (digits(11, 13)?, digits(14, 16)?, digits(17, 19)?);
    let mut rest = &text[19..];
    let mut nanos = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let length = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if length == 0 || length > 9 {
            return None;
        }
        nanos = fraction[..length].bytes().fold(0, |n, digit| n * 10 + u32::from(digit - b'0'))
            * 10u32.pow(9 - length as u32);
        rest = &fraction[length..];
    }
    if !matches!(rest, "Z" | "z" | "+00:00") {
        return None;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if day == 0 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // Days from 0000-03-01, so that a leap day ends its year (Howard Hinnant's
    // days_from_civil).
    let (y, m) = if month <= 2 { (i64::from(year) - 1, month + 9) } else { (i64::from(year), month - 3) };
    let era_years = y.rem_euclid(400);
    let day_of_year = (153 * i64::from(m) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = era_years * 365 + era_years / 4 - era_years / 100 + day_of_year;
    let days = y.div_euclid(400) * 146_097 + day_of_era;
    let seconds = days * 86_400 + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second);
    Some((seconds, nanos))
}

#[cfg(target_arch = "wasm32")]
#[expect(unsafe_code, reason = "the canonical ABI glue that wit-bindgen generates")]
mod component {
    wit_bindgen::generate!({ world: "module-plugin", path: "../../wit/module" });

    use compute::module::types::{Descriptor, Field, FieldType, Problem, Removal, Subject};
    use exports::compute::module::plugin::Guest;
    use serde_json::Value;

    struct Reservations;

    export!(Reservations);

    fn field(name: &str, ty: FieldType, required: bool, immutable: bool) -> Field {
        Field { name: name.into(), type_: ty, required, immutable }
    }

    impl Guest for Reservations {
        fn describe() -> Descriptor {
            Descriptor {
                group: "reservations".into(),
                kind: "reservation".into(),
                section: "reservations".into(),
                id_prefix: "rsv".into(),
                removal: Removal::Delete,
                fields: vec![
                    field("pool", FieldType::Ref("pool".into()), true, true),
                    field("owner", FieldType::Name, true, false),
                    field("vcpus", FieldType::Count, false, false),
                    field("gpus", FieldType::Count, false, false),
                    field("startsAt", FieldType::String, true, false),
                    field("endsAt", FieldType::String, true, false),
                    field("note", FieldType::String, false, false),
                ],
            }
        }

        fn check(subjects: Vec<Subject>) -> Vec<Problem> {
            let mut problems = Vec::new();
            for (index, subject) in subjects.iter().enumerate() {
                let reservation: Value = serde_json::from_str(&subject.object).unwrap_or(Value::Null);
                let pool = subject
                    .references
                    .iter()
                    .find(|reference| reference.field == "pool")
                    .and_then(|reference| serde_json::from_str::<Value>(&reference.object).ok());
                problems.extend(super::check(&reservation, pool.as_ref()).into_iter().map(|problem| Problem {
                    subject: index as u32,
                    path: problem.path,
                    message: problem.message,
                }));
            }
            problems
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reservation(starts: &str, ends: &str, vcpus: u64, gpus: u64) -> Value {
        json!({"id": "rsv_x", "pool": "pool_y", "owner": "ml", "startsAt": starts, "endsAt": ends,
               "vcpus": vcpus, "gpus": gpus, "note": ""})
    }

    fn paths(problems: &[Problem]) -> Vec<&str> {
        problems.iter().map(|problem| problem.path.as_str()).collect()
    }

    #[test]
    fn a_reservation_within_its_pool_and_in_order_passes() {
        let pool = json!({"id": "pool_y", "vcpus": 64, "gpus": 8});
        let fine = reservation("2026-12-01T08:00:00Z", "2026-12-01T09:30:00.5Z", 64, 8);
        assert_eq!(check(&fine, Some(&pool)), []);
    }

    /// A message quotes at most a short prefix of the value it refuses (issue 30: a
    /// 1,000-character value once made a message the host refused).
    #[test]
    fn a_long_value_is_not_repeated_whole() {
        for length in [900, 1_000, 100_000] {
            let long = "x".repeat(length);
            let problems = check(&reservation(&long, "2026-12-01T00:00:00Z", 0, 0), None);
            assert_eq!(paths(&problems), ["/startsAt"]);
            assert!(problems[0].message.len() < 200, "{}", problems[0].message);
            assert!(problems[0].message.contains(&format!("({length} characters)")), "{}", problems[0].message);
        }
        let problems = check(&reservation("soon", "2026-12-01T00:00:00Z", 0, 0), None);
        assert!(problems[0].message.ends_with("not \"soon\""), "{}", problems[0].message);
    }

    #[test]
    fn every_rule_reports_its_field() {
        let pool = json!({"id": "pool_y", "vcpus": 4, "gpus": 0});
        let backwards = reservation("2026-12-02T00:00:00Z", "2026-12-01T00:00:00Z", 8, 1);
        let problems = check(&backwards, Some(&pool));
        assert_eq!(paths(&problems), ["/endsAt", "/vcpus", "/gpus"]);
        assert_eq!(problems[0].message, "endsAt must be later than startsAt");
        assert_eq!(problems[1].message, "vcpus 8 is more than the 4 vcpus of pool pool_y");
        let same = reservation("2026-12-01T00:00:00Z", "2026-12-01T00:00:00+00:00", 0, 0);
        assert_eq!(paths(&check(&same, None)), ["/endsAt"]);
    }

    #[test]
    fn only_rfc_3339_utc_times_are_times() {
        for good in ["2024-02-29T23:59:60Z", "2026-01-01t00:00:00z", "2026-06-30T12:00:00.123456789Z"] {
            assert!(parse_utc(good).is_some(), "{good}");
        }
        for bad in [
            "",
            "2026-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-12-01 08:00:00Z",
            "2026-12-01T08:00:00+01:00",
            "2026-12-01T08:00:00",
            "2026-12-01T08:00:00.Z",
            "2026-12-01T24:00:00Z",
        ] {
            assert!(parse_utc(bad).is_none(), "{bad}");
        }
        let problems = check(&reservation("tomorrow", "2026-12-01T00:00:00Z", 0, 0), None);
        assert_eq!(paths(&problems), ["/startsAt"]);
        assert!(problems[0].message.contains("not \"tomorrow\""), "{}", problems[0].message);
        assert!(parse_utc("2026-12-31T23:59:59Z") < parse_utc("2027-01-01T00:00:00Z"));
        assert!(parse_utc("2024-02-28T00:00:00Z") < parse_utc("2024-02-29T00:00:00Z"));
        assert!(parse_utc("2024-02-29T00:00:00Z") < parse_utc("2024-03-01T00:00:00Z"));
    }
}
