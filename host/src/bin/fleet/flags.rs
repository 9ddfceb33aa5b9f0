//! What the flags of several commands share: `--db` after a command's name, and
//! durations within the bounds that keep them representable.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

/// The database flag of the commands that work on it, after the command's name.
#[derive(Args)]
pub(crate) struct Database {
    /// The database: a SQLite file, or `postgres://user:password@host:5432/name`
    /// [env: FLEET_DB; default: ./fleet.db].
    #[arg(long = "db", value_name = "DB", global = true)]
    pub(crate) db: Option<PathBuf>,
}

/// The longest value each kind of duration flag takes: every one must be longer than
/// zero and no longer than its bound, so that no value reaches a clock, a timer or a
/// date it cannot be represented in (issue 30: `--expires 1000000000d` once panicked
/// formatting a date past the year 9999). clap names the flag in the message.
pub(crate) struct DurationLimits {
    /// How often the reconciler checks.
    pub(crate) drift_interval: Duration,
    /// Connection and lock timeouts.
    pub(crate) timeout: Duration,
    /// A sandbox's CPU budget.
    pub(crate) cpu: Duration,
    /// How long a token lives.
    pub(crate) token: Duration,
    /// How long revisions are kept.
    pub(crate) retention: Duration,
}

const DAY: Duration = Duration::from_secs(24 * 3600);

pub(crate) const LIMITS: DurationLimits = DurationLimits {
    drift_interval: Duration::from_secs(30 * 24 * 3600),
    timeout: DAY,
    cpu: Duration::from_secs(3600),
    token: Duration::from_secs(100 * 365 * 24 * 3600),
    retention: Duration::from_secs(100 * 365 * 24 * 3600),
};

/// A duration for a sentence: `30 days`, `1 h`, where humantime writes `30days`.
fn spaced(duration: Duration) -> String {
    let written = humantime::format_duration(duration).to_string();
    let mut spaced = String::with_capacity(written.len() + 4);
    let mut previous = ' ';
    for character in written.chars() {
        if previous.is_ascii_digit() && character.is_alphabetic() {
            spaced.push(' ');
        }
        spaced.push(character);
        previous = character;
    }
    spaced
}

/// A parser of durations such as `10s` or `15m`, longer than zero and at most `max`.
pub(crate) fn duration(max: Duration) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |text: &str| match humantime::parse_duration(text) {
        Ok(duration) if duration.is_zero() => Err("must be longer than zero".into()),
        Ok(duration) if duration > max => Err(format!("must be at most {}", spaced(max))),
        Ok(duration) => Ok(duration),
        Err(error) => Err(format!("{error} (a duration such as 30s, 15m or 12h)")),
    }
}
