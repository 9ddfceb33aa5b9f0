//! A tenant's source as `put` reads it and the database keeps it (SPEC §20.3): the
//! request checked field by field, the stored row, and the `Source` every method
//! answers — never its credential or hook secret, only whether a credential is set.

use std::time::Duration;

use serde_json::{Value, json};

use super::git::{Credential, Git};
use super::signature::Signer;
use crate::api::{ApiError, Problem};
use crate::calls::input::Input;
use crate::db::{Conn, params};

/// What `interval` is when a put does not say.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(180);
/// The most allowed signers a source lists.
pub const MAX_SIGNERS: usize = 32;

/// How a source acts on a new commit (SPEC §20.3, step 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Observe,
    Propose,
    Auto,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Observe => "observe",
            Mode::Propose => "propose",
            Mode::Auto => "auto",
        }
    }

    pub fn parse(text: &str) -> Option<Mode> {
        [Mode::Observe, Mode::Propose, Mode::Auto].into_iter().find(|mode| mode.as_str() == text)
    }
}

/// What a `put` asks for, checked.
pub struct Put {
    pub url: String,
    pub branch: String,
    pub path: String,
    pub mode: Mode,
    pub prune: bool,
    pub heal: bool,
    pub interval: Duration,
    pub credential: Option<Credential>,
    pub signers: Vec<String>,
}

impl Put {
    /// Reads a put's body: every problem at once, at its path, before anything is
    /// stored; the URL's form and every address its host resolves to are checked by
    /// the rules the fetch keeps (`git`).
    pub fn read(body: Value, git: &Git) -> Result<Put, ApiError> {
        let mut input = Input::new(body)?;
        let url = input.string("url", true);
        let branch = input.string("branch", false).unwrap_or_else(|| "main".to_owned());
        let path = input.string("path", false).unwrap_or_else(|| ".".to_owned());
        let mode = input.string("mode", true);
        let prune = input.boolean("prune", false).unwrap_or(false);
        let heal = input.boolean("heal", false).unwrap_or(false);
        let interval = input.string("interval", false);
        let credential = input.take_optional("credential");
        let signers = input.take_optional("signers");
        if let Err(why) = check_branch(&branch) {
            input.problem("branch", why);
        }
        if let Err(why) = check_path(&path) {
            input.problem("path", why);
        }
        let mode = mode.and_then(|mode| {
            let parsed = Mode::parse(&mode);
            if parsed.is_none() {
                input.problem("mode", "must be observe, propose or auto");
            }
            parsed
        });
        let interval = match interval.as_deref().map(self::interval) {
            None => DEFAULT_INTERVAL,
            Some(Some(interval)) => interval,
            Some(None) => {
                input.problem("interval", "must be 1m to 1440m, or 1h to 24h, such as \"3m\"");
                DEFAULT_INTERVAL
            }
        };
        let credential = credential.and_then(|credential| match read_credential(credential) {
            Ok(credential) => Some(credential),
            Err(problems) => {
                input.extend(problems);
                None
            }
        });
        let signers = match signers {
            None => Vec::new(),
            Some(Value::Array(lines)) if lines.len() <= MAX_SIGNERS => {
                let mut signers = Vec::new();
                for (index, line) in lines.iter().enumerate() {
                    match line.as_str().map(|line| (line, Signer::parse(line))) {
                        Some((line, Ok(_))) => signers.push(line.trim().to_owned()),
                        Some((_, Err(why))) => {
                            input.extend([Problem { path: format!("/signers/{index}"), message: why }]);
                        }
                        None => input.extend([Problem {
                            path: format!("/signers/{index}"),
                            message: "must be an OpenSSH public key line".into(),
                        }]),
                    }
                }
                signers
            }
            Some(_) => {
                input.problem("signers", format!("must be an array of at most {MAX_SIGNERS} OpenSSH public key lines"));
                Vec::new()
            }
        };
        // The URL's form, then every address its host resolves to: a URL that cannot be
        // fetched is refused now rather than failing every cycle.
        if let Some(url) = url.as_deref()
            && let Err(why) = tokio::runtime::Handle::current().block_on(git.check_reach(url))
        {
            input.problem("url", why);
        }
        input.finish()?;
        let (Some(url), Some(mode)) = (url, mode) else {
            return Err(ApiError::internal("a checked input lacks a field"));
        };
        Ok(Put { url, branch, path, mode, prune, heal, interval, credential, signers })
    }
}

/// `{"username"?, "token"}`.
fn read_credential(credential: Value) -> Result<Credential, Vec<Problem>> {
    let problem = |field: &str, message: &str| Problem { path: format!("/credential{field}"), message: message.into() };
    let Value::Object(mut members) = credential else {
        return Err(vec![problem("", "must be an object {\"username\"?, \"token\"}")]);
    };
    let mut problems = Vec::new();
    let mut text = |field: &str, required: bool| match members.remove(field) {
        None if required => {
            problems.push(problem(&format!("/{field}"), "is required"));
            None
        }
        None => None,
        Some(Value::String(text)) if (1..=4096).contains(&text.len()) && text.chars().all(|c| c.is_ascii_graphic()) => {
            Some(text)
        }
        Some(_) => {
            problems.push(problem(&format!("/{field}"), "must be 1 to 4096 visible ASCII characters"));
            None
        }
    };
    let username = text("username", false);
    let token = text("token", true);
    for field in members.keys() {
        problems.push(problem(&format!("/{field}"), "is not a field of a credential"));
    }
    match (token, problems.is_empty()) {
        (Some(token), true) => Ok(Credential { username, token }),
        _ => Err(problems),
    }
}

/// A part of a branch's name: a letter, digit or `_`, then letters, digits, `_` and `-`.
const BRANCH_PART: &str = "[A-Za-z0-9_][A-Za-z0-9_-]*";
/// A part of a path: an optional leading `.` (a hidden directory), a letter, digit or
/// `_`, then letters, digits, spaces and `._+@=,~-`: never `.` or `..`, never an option.
const PATH_PART: &str = "\\.?[A-Za-z0-9_][A-Za-z0-9._ +@=,~-]*";

/// What `branch` must be: parts joined by `.` or `/` (so no `..`, `//`, `/.`, and no
/// leading or trailing `.`, `/` or `-`), at most 255 characters — what `git
/// check-ref-format` allows, a little stricter. The request schema states it.
pub fn branch_pattern() -> String {
    format!("^{BRANCH_PART}(?:[./]{BRANCH_PART})*$")
}

/// What `path` must be: `.` (the whole tree) or parts joined by `/`, at most 1024
/// characters. The request schema states it.
pub fn path_pattern() -> String {
    format!("^(?:\\.|{PATH_PART}(?:/{PATH_PART})*)$")
}

/// What `interval` must be: 1 to 1440 minutes, or 1 to 24 hours.
pub const INTERVAL_PATTERN: &str =
    "^(?:(?:[1-9]|[1-9][0-9]|[1-9][0-9]{2}|1[0-3][0-9]{2}|14[0-3][0-9]|1440)m|(?:[1-9]|1[0-9]|2[0-4])h)$";

/// Whether `text` is parts of `part` joined by one of `joins`.
fn is_joined(text: &str, joins: &[char], part: impl Fn(&str) -> bool) -> bool {
    text.split(|c| joins.contains(&c)).all(part)
}

fn check_branch(branch: &str) -> Result<(), String> {
    let part_ok = |part: &str| {
        part.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
    };
    match branch.len() <= 255 && is_joined(branch, &['.', '/'], part_ok) {
        true => Ok(()),
        false => Err("must be a branch name: parts of letters, digits, _ and - (each starting with a letter, \
                      digit or _) joined by . or /"
            .to_owned()),
    }
}

fn check_path(path: &str) -> Result<(), String> {
    let part_ok = |part: &str| {
        let part = part.strip_prefix('.').unwrap_or(part);
        part.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || "._ +@=,~-".contains(c))
    };
    match path == "." || (path.chars().count() <= 1024 && is_joined(path, &['/'], part_ok)) {
        true => Ok(()),
        false => Err("must be . or a relative path in the repository: parts of letters, digits, spaces and \
                      ._+@=,~- (each starting with a letter, digit or _, or . and one) joined by /"
            .to_owned()),
    }
}

/// The interval `text` names, if it is one [`INTERVAL_PATTERN`] admits.
fn interval(text: &str) -> Option<Duration> {
    let (number, unit) = text.split_at(text.len().checked_sub(1)?);
    let number: u64 = number.parse().ok().filter(|_| !number.starts_with('0'))?;
    let seconds = match unit {
        "m" if (1..=1440).contains(&number) => number * 60,
        "h" if (1..=24).contains(&number) => number * 3600,
        _ => return None,
    };
    Some(Duration::from_secs(seconds))
}

/// A source as its row holds it, less the secrets.
#[derive(Debug, Clone)]
pub struct Stored {
    pub tenant: String,
    pub id: String,
    pub url: String,
    pub branch: String,
    pub path: String,
    pub mode: Mode,
    pub prune: bool,
    pub heal: bool,
    pub interval_ms: i64,
    pub has_credential: bool,
    pub signers: Vec<String>,
    pub pinned: Option<String>,
    pub token: String,
    pub principal: String,
    pub status: Status,
}

/// What the last cycle found.
#[derive(Debug, Clone, Default)]
pub struct Status {
    pub state: String,
    pub head_commit: Option<String>,
    pub fetched_at: Option<String>,
    pub applied_commit: Option<String>,
    pub applied_revision: Option<i64>,
    pub applied_document: Option<String>,
    pub changed_in: Option<String>,
    pub proposal: Option<i64>,
    pub last_attempt: Option<Value>,
    pub error: Option<String>,
    /// The head the last cycle came to an end with (not answered): the same head again
    /// is nothing to do.
    pub settled_commit: Option<String>,
}

const COLUMNS: &str = "tenant, id, url, branch, path, mode, prune, heal, interval_ms, credential IS NOT NULL, \
    signers, pinned, token, principal, state, head_commit, fetched_at, applied_commit, applied_revision, \
    applied_document, changed_in, proposal, last_attempt, error, settled_commit";

/// The tenant's source, if it has one.
pub fn stored(db: &Conn, tenant: &str) -> Result<Option<Stored>, ApiError> {
    let sql = format!("SELECT {COLUMNS} FROM sources WHERE tenant = ?1");
    let row = db.query_opt(&sql, params![tenant], |row| {
        let texts: [String; 6] = [row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?];
        let flags: (bool, bool, i64, bool) = (row.get(6)?, row.get(7)?, row.get(8)?, row.get(9)?);
        let who: (String, Option<String>, String, String) = (row.get(10)?, row.get(11)?, row.get(12)?, row.get(13)?);
        let status = Status {
            state: row.get(14)?,
            head_commit: row.get(15)?,
            fetched_at: row.get(16)?,
            applied_commit: row.get(17)?,
            applied_revision: row.get(18)?,
            applied_document: row.get(19)?,
            changed_in: row.get(20)?,
            proposal: row.get(21)?,
            last_attempt: None,
            error: row.get(23)?,
            settled_commit: row.get(24)?,
        };
        let last_attempt: Option<String> = row.get(22)?;
        Ok((texts, flags, who, (status, last_attempt)))
    })?;
    let Some(([tenant, id, url, branch, path, mode], (prune, heal, interval_ms, has_credential), who, status)) = row
    else {
        return Ok(None);
    };
    let (signers, pinned, token, principal) = who;
    let (mut status, last_attempt) = status;
    status.last_attempt =
        last_attempt.map(|text| serde_json::from_str::<Value>(&text)).transpose().map_err(ApiError::internal)?;
    Ok(Some(Stored {
        tenant,
        id,
        url,
        branch,
        path,
        mode: Mode::parse(&mode).ok_or_else(|| ApiError::internal(format_args!("a source's mode is {mode}")))?,
        prune,
        heal,
        interval_ms,
        has_credential,
        signers: serde_json::from_str(&signers).map_err(ApiError::internal)?,
        pinned,
        token,
        principal,
        status,
    }))
}

impl Stored {
    /// The `Source` of SPEC §20.3, its hook's URL under `/hooks/sources/`.
    pub fn json(&self) -> Value {
        let fingerprints: Vec<String> = self
            .signers
            .iter()
            .filter_map(|line| Signer::parse(line).ok())
            .map(|signer| signer.fingerprint().to_owned())
            .collect();
        let interval = humantime::format_duration(Duration::from_millis(u64::try_from(self.interval_ms).unwrap_or(0)));
        let mut status = json!({"state": self.status.state});
        let optional = [
            ("headCommit", self.status.head_commit.as_ref().map(|text| json!(text))),
            ("fetchedAt", self.status.fetched_at.as_ref().map(|text| json!(text))),
            ("appliedCommit", self.status.applied_commit.as_ref().map(|text| json!(text))),
            ("appliedRevision", self.status.applied_revision.map(|number| json!(number))),
            ("changedIn", self.status.changed_in.as_ref().map(|text| json!(text))),
            ("proposal", self.status.proposal.map(|number| json!(number))),
            ("lastAttempt", self.status.last_attempt.clone()),
            ("error", self.status.error.as_ref().map(|text| json!(text))),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                status[name] = value;
            }
        }
        let mut source = json!({
            "url": self.url, "branch": self.branch, "path": self.path, "mode": self.mode.as_str(),
            "prune": self.prune, "heal": self.heal, "interval": interval.to_string(),
            "credential": self.has_credential, "signers": fingerprints,
            "hookUrl": format!("/hooks/sources/{}", self.id), "status": status,
        });
        if let Some(pinned) = &self.pinned {
            source["pinned"] = json!(pinned);
        }
        source
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `text` matches `pattern` as the request schema states it.
    fn matches(pattern: &str, text: &str) -> bool {
        regex::Regex::new(pattern).unwrap().is_match(text)
    }

    #[test]
    fn branches_are_checked_as_the_schema_states() {
        for good in ["main", "release/1.2", "feature_x-y", "_x"] {
            assert_eq!(check_branch(good), Ok(()), "{good}");
            assert!(matches(&branch_pattern(), good), "{good}");
        }
        for bad in ["", "-x", "a..b", "a//b", "a/.b", "x/", "a b", "a~1", "a:b", ".hidden", "x.", "a/-b"] {
            assert!(check_branch(bad).is_err(), "{bad}");
            assert!(!matches(&branch_pattern(), bad), "{bad}");
        }
    }

    #[test]
    fn paths_stay_in_the_repository_as_the_schema_states() {
        for good in [".", "fleet", "fleet/estate.yaml", "a/b/c.json", ".fleet/x", "my docs/fleet"] {
            assert_eq!(check_path(good), Ok(()), "{good}");
            assert!(matches(&path_pattern(), good), "{good}");
        }
        for bad in ["", "/etc", "../x", "a/../b", "a/./b", "a//b", "-x", "a\\b", "a\u{1}", "a/", "..", " a"] {
            assert!(check_path(bad).is_err(), "{bad}");
            assert!(!matches(&path_pattern(), bad), "{bad}");
        }
    }

    #[test]
    fn intervals_are_minutes_or_hours_in_range() {
        for (text, seconds) in [("1m", 60), ("3m", 180), ("1440m", 86_400), ("1h", 3600), ("24h", 86_400)] {
            assert_eq!(interval(text), Some(Duration::from_secs(seconds)), "{text}");
            assert!(matches(INTERVAL_PATTERN, text), "{text}");
        }
        for bad in ["", "0m", "1441m", "25h", "30s", "03m", "1d", "m", "1.5h"] {
            assert_eq!(interval(bad), None, "{bad}");
            assert!(!matches(INTERVAL_PATTERN, bad), "{bad}");
        }
    }

    #[test]
    fn a_credential_needs_a_token_and_nothing_else() {
        let read = |value: Value| read_credential(value).map(|credential| credential.username);
        assert_eq!(read(json!({"token": "t"})).ok(), Some(None));
        assert_eq!(read(json!({"username": "u", "token": "t"})).ok(), Some(Some("u".into())));
        let problems =
            |value: Value| read_credential(value).err().unwrap().into_iter().map(|p| p.path).collect::<Vec<_>>();
        assert_eq!(problems(json!({})), ["/credential/token"]);
        assert_eq!(problems(json!({"token": "a b"})), ["/credential/token"]);
        assert_eq!(problems(json!({"token": "t", "password": "p"})), ["/credential/password"]);
        assert_eq!(problems(json!("t")), ["/credential"]);
    }
}
