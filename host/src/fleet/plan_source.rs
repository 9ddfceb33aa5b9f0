//! Where a plan came from (SPEC §20.2): the `source` that `fleet/apply` and
//! `proposals/create` take, `{"repo", "commit", "ref"?, "path"?}`, read and checked here.
//! It is kept as JSON text on the revision or the proposal, shown with them, and told by
//! `fleet.applied`; it never reaches the planner, so a plan and its hash are the same with
//! or without it (docs/decisions/0029).
//!
//! The checks are the request schema's patterns written out, so that the OpenAPI
//! description admits exactly what is accepted: a client (or a fuzzer) that follows it is
//! never refused, and one that strays from it always is.

use fleet_guest::json::pointer;
use serde_json::{Value, json};

use crate::api::Problem;
use crate::calls::input::Input;

/// The longest `repo`, `ref` and `path`, in characters.
pub const MAX_CHARS: usize = 512;

/// A character of a URL's path segment: RFC 3986's unreserved and sub-delimiters, `:`
/// and `%`, and no `@`, so that nothing after the host can read as a user.
const SEGMENT: &str = "[A-Za-z0-9._~!$&'()*+,;=:%-]";
/// A host: letters, digits, dots and hyphens, beginning and ending with a letter or digit.
const HOST: &str = "[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?";
/// A port, 1 to 65535, with no leading zero.
const PORT: &str = "(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})";
/// An ssh user: no `:` (so no password) and no leading `-` or `.`.
const USER: &str = "[A-Za-z0-9_][A-Za-z0-9._-]*";
/// A commit: 7 to 64 hex digits (an abbreviated or a whole SHA-1 or SHA-256 name).
pub const COMMIT_PATTERN: &str = "^[0-9a-fA-F]{7,64}$";
/// `ref` and `path`: any text of at least one character without a control character.
const LINE_PATTERN: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$";

/// What `repo` must be: `https://host[:port]/path`, `ssh://[user@]host[:port]/path` or
/// the scp-like `user@host:path`, with no password and no user on https; and, where the
/// deployment's git sources may fetch over insecure transports (`insecure`, `serve
/// --git-allow-insecure`), what they fetch from too: `http://` and `git://` URLs of the
/// same form, and `file:///path` (docs/decisions/0033).
pub fn repo_pattern(insecure: bool) -> String {
    let url_path = format!("(/{SEGMENT}+)+/?");
    let schemes = if insecure { "(https|http|git)" } else { "https" };
    let file = if insecure { format!("|file://{url_path}") } else { String::new() };
    format!(
        "^({schemes}://{HOST}(:{PORT})?{url_path}|ssh://({USER}@)?{HOST}(:{PORT})?{url_path}|{USER}@{HOST}:[A-Za-z0-9._~!$&'()*+,;=:%/-]+{file})$"
    )
}

/// The schema of `source`, in a request (`insecure` as in [`repo_pattern`]) and in an
/// answer (`insecure`: every form a revision may hold).
pub fn schema(insecure: bool) -> Value {
    json!({"type": "object", "additionalProperties": false, "required": ["repo", "commit"],
        "description": "Where the document came from (SPEC §20.2): kept with what it makes and shown with it, no part of the plan or its hash.",
        "properties": {
            "repo": {"type": "string", "minLength": 1, "maxLength": MAX_CHARS, "pattern": repo_pattern(insecure),
                     "description": "The repository's URL, https or ssh, without credentials."},
            "commit": {"type": "string", "pattern": COMMIT_PATTERN, "description": "The commit, 7 to 64 hex digits."},
            "ref": {"type": "string", "minLength": 1, "maxLength": MAX_CHARS, "pattern": LINE_PATTERN,
                    "description": "The branch or tag, as the CI names it."},
            "path": {"type": "string", "minLength": 1, "maxLength": MAX_CHARS, "pattern": LINE_PATTERN,
                     "description": "The document's file or directory in the repository."}}})
}

/// Takes the request's `source`, if it has one: the JSON text to keep, or `None` with its
/// problems added to `input` at their paths (`/source/repo`, …).
pub fn take(input: &mut Input, insecure: bool) -> Option<String> {
    let value = input.take_optional("source")?;
    let problems = problems(&value, insecure);
    if problems.is_empty() {
        return Some(value.to_string());
    }
    input.extend(problems);
    None
}

/// Every problem of a `source` value, each at its JSON pointer.
fn problems(value: &Value, insecure: bool) -> Vec<Problem> {
    let at = |member: &str| pointer(&["source", member]);
    let Value::Object(members) = value else {
        return vec![Problem {
            path: pointer(&["source"]),
            message: "must be an object {\"repo\", \"commit\", \"ref\"?, \"path\"?}".into(),
        }];
    };
    let mut problems = Vec::new();
    for (member, required) in [("repo", true), ("commit", true), ("ref", false), ("path", false)] {
        let message = match members.get(member) {
            None if required => Some("is required".to_owned()),
            None => None,
            Some(Value::String(text)) => problem_of(member, text, insecure),
            Some(_) => Some("must be a string".to_owned()),
        };
        if let Some(message) = message {
            problems.push(Problem { path: at(member), message });
        }
    }
    for member in members.keys().filter(|member| !matches!(member.as_str(), "repo" | "commit" | "ref" | "path")) {
        problems.push(Problem { path: at(member), message: "is not a known field".into() });
    }
    problems
}

/// What is wrong with the string `text` as `member`, if anything. The value is never
/// quoted back: a URL refused for its credentials must not carry them into an answer.
fn problem_of(member: &str, text: &str, insecure: bool) -> Option<String> {
    if member == "commit" {
        let hex = (7..=64).contains(&text.len()) && text.bytes().all(|byte| byte.is_ascii_hexdigit());
        return (!hex).then(|| "must be a commit's name: 7 to 64 hex digits".to_owned());
    }
    if text.is_empty() {
        return Some("must not be empty".into());
    }
    if text.chars().count() > MAX_CHARS {
        return Some(format!("must be at most {MAX_CHARS} characters"));
    }
    if fleet_guest::json::has_control(text) {
        return Some("must not hold a control character".into());
    }
    if member != "repo" {
        return None;
    }
    if has_credentials(text) {
        return Some(
            "credentials do not belong in the URL: give the repository's address alone (a user name alone is \
             fine for ssh)"
                .into(),
        );
    }
    (!is_repo(text, insecure)).then(|| {
        "must be an https or ssh URL: https://host/path, ssh://[user@]host[:port]/path or user@host:path".to_owned()
    })
}

/// Whether `repo` carries credentials: a user of any URL but ssh's, a password in an
/// ssh or scp-like one.
fn has_credentials(repo: &str) -> bool {
    match repo.split_once("://") {
        Some((scheme, rest)) => {
            let authority = rest.split('/').next().unwrap_or_default();
            authority
                .rsplit_once('@')
                .is_some_and(|(user, _)| !scheme.eq_ignore_ascii_case("ssh") || user.contains(':'))
        }
        None => repo.split_once('@').is_some_and(|(user, _)| user.contains(':')),
    }
}

/// Whether `repo` matches [`repo_pattern`].
fn is_repo(repo: &str, insecure: bool) -> bool {
    if let Some(rest) = repo.strip_prefix("https://") {
        return is_host_port_path(rest);
    }
    if insecure {
        if let Some(rest) = repo.strip_prefix("http://").or_else(|| repo.strip_prefix("git://")) {
            return is_host_port_path(rest);
        }
        if let Some(path) = repo.strip_prefix("file://") {
            let path = path.strip_suffix('/').filter(|path| !path.is_empty()).unwrap_or(path);
            return path.starts_with('/')
                && path.split('/').skip(1).all(|segment| !segment.is_empty() && segment.chars().all(is_segment_char));
        }
    }
    if let Some(rest) = repo.strip_prefix("ssh://") {
        return match rest.split_once('@') {
            Some((user, rest)) => is_user(user) && is_host_port_path(rest),
            None => is_host_port_path(rest),
        };
    }
    let Some((user, rest)) = repo.split_once('@') else { return false };
    let Some((host, path)) = rest.split_once(':') else { return false };
    is_user(user) && is_host(host) && !path.is_empty() && path.chars().all(|c| c == '/' || is_segment_char(c))
}

/// `host[:port]/path`, the path one or more segments with an optional `/` after them.
fn is_host_port_path(text: &str) -> bool {
    let Some(slash) = text.find('/') else { return false };
    let (authority, path) = text.split_at(slash);
    let (host, port) = match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    };
    let path = path.strip_suffix('/').filter(|path| !path.is_empty()).unwrap_or(path);
    is_host(host)
        && port.is_none_or(is_port)
        && path.split('/').skip(1).all(|segment| !segment.is_empty() && segment.chars().all(is_segment_char))
}

fn is_segment_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "._~!$&'()*+,;=:%-".contains(c)
}

fn is_host(host: &str) -> bool {
    let edges = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    edges(host.chars().next())
        && edges(host.chars().last())
        && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
}

fn is_port(port: &str) -> bool {
    !port.starts_with('0')
        && (1..=5).contains(&port.len())
        && port.bytes().all(|byte| byte.is_ascii_digit())
        && port.parse::<u32>().is_ok_and(|port| port <= 65535)
}

fn is_user(user: &str) -> bool {
    user.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && user.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The problems of `source` as `(path, message)`.
    fn refused(source: Value) -> Vec<(String, String)> {
        problems(&source, false).into_iter().map(|problem| (problem.path, problem.message)).collect()
    }

    fn paths(source: Value) -> Vec<String> {
        refused(source).into_iter().map(|(path, _)| path).collect()
    }

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn https_and_ssh_urls_without_credentials_are_sources() {
        for repo in [
            "https://github.com/acme/infra",
            "https://github.com/acme/infra.git",
            "https://github.com/acme/infra/",
            "https://gitlab.example.com:8443/group/sub-group/project",
            "https://10.0.0.1/x",
            "ssh://github.com/acme/infra.git",
            "ssh://git@github.com/acme/infra.git",
            "ssh://git@gitlab.com:2222/group/project",
            "git@github.com:acme/infra.git",
            "git@github.com:/srv/git/infra",
            "deploy_bot@git.example.org:acme/infra",
        ] {
            let source = json!({"repo": repo, "commit": COMMIT, "ref": "refs/heads/main", "path": "fleet/"});
            assert_eq!(refused(source), Vec::new(), "{repo}");
        }
        // The shortest and the longest commit, in either case.
        for commit in ["abcdef0", "ABCDEF0", "a".repeat(64).as_str()] {
            assert_eq!(refused(json!({"repo": "https://h/r", "commit": commit})), Vec::new(), "{commit}");
        }
    }

    #[test]
    fn credentials_are_refused_and_never_quoted() {
        for repo in [
            "https://user:secret@github.com/acme/infra",
            "https://ghp_secret@github.com/acme/infra",
            "https://x-access-token:secret@github.com:443/acme/infra",
            "ssh://git:secret@github.com/acme/infra",
            "git:secret@github.com:acme/infra",
            "http://user:secret@example.com/infra",
        ] {
            let problems = refused(json!({"repo": repo, "commit": COMMIT}));
            assert_eq!(problems.len(), 1, "{repo}: {problems:?}");
            let (path, message) = &problems[0];
            assert_eq!(path, "/source/repo");
            assert!(message.starts_with("credentials do not belong in the URL"), "{repo}: {message}");
            assert!(!message.contains("secret"), "{message}");
        }
    }

    #[test]
    fn anything_but_an_https_or_ssh_url_is_refused() {
        for repo in [
            "github.com/acme/infra",
            "not a url",
            "http://github.com/acme/infra",
            "git://github.com/acme/infra",
            "file:///srv/git/infra",
            "HTTPS://github.com/acme/infra",
            "https://github.com",
            "https://github.com/",
            "https://github.com//infra",
            "https://github.com/acme/infra?tab=x",
            "https://github.com/acme/infra#x",
            "https://github.com/acme/infra@x",
            "https://-github.com/acme",
            "https://github.com:0/acme",
            "https://github.com:65536/acme",
            "https://github.com:/acme",
            "https://[::1]/acme",
            "https://github.com/a\\b",
            "https://github.com/acme/ínfra",
            "ssh://-oProxyCommand=x@host/acme",
            "git@github.com:",
            "git@github.com",
            "-o@github.com:acme",
            "acme:infra",
        ] {
            let problems = refused(json!({"repo": repo, "commit": COMMIT}));
            assert_eq!(problems.len(), 1, "{repo}: {problems:?}");
            assert_eq!(problems[0].0, "/source/repo", "{repo}");
            assert!(problems[0].1.starts_with("must be an https or ssh URL"), "{repo}: {}", problems[0].1);
        }
    }

    #[test]
    fn every_problem_is_reported_at_its_path() {
        let source = json!({"repo": "https://h/r", "commit": "abcdefg", "ref": "r".repeat(MAX_CHARS + 1),
                            "path": "a\u{7}b", "branch": "main"});
        let problems = refused(source);
        assert_eq!(
            problems,
            [
                ("/source/commit".to_owned(), "must be a commit's name: 7 to 64 hex digits".to_owned()),
                ("/source/ref".to_owned(), format!("must be at most {MAX_CHARS} characters")),
                ("/source/path".to_owned(), "must not hold a control character".to_owned()),
                ("/source/branch".to_owned(), "is not a known field".to_owned()),
            ]
        );
        for commit in ["abcdef", "a".repeat(65).as_str(), "0123456789abcdeg", ""] {
            assert_eq!(paths(json!({"repo": "https://h/r", "commit": commit})), ["/source/commit"], "{commit}");
        }
        assert_eq!(
            paths(json!({"ref": "", "path": 1})),
            ["/source/repo", "/source/commit", "/source/ref", "/source/path"]
        );
        assert_eq!(paths(json!("https://h/r")), ["/source"]);
        assert_eq!(paths(json!(null)), ["/source"]);
        let long = format!("https://h/{}", "r".repeat(MAX_CHARS));
        assert_eq!(
            refused(json!({"repo": long, "commit": COMMIT}))[0].1,
            format!("must be at most {MAX_CHARS} characters")
        );
        let longest = format!("https://h/{}", "r".repeat(MAX_CHARS - 10));
        assert_eq!(refused(json!({"repo": longest, "commit": COMMIT, "ref": "é".repeat(MAX_CHARS)})), Vec::new());
    }

    #[test]
    fn take_keeps_a_good_source_and_reports_a_bad_one_with_the_rest() {
        let mut input = Input::new(json!({"source": {"repo": "git@h:r", "commit": "abcdef0"}})).unwrap();
        let kept = take(&mut input, false).expect("a good source");
        assert_eq!(serde_json::from_str::<Value>(&kept).unwrap(), json!({"repo": "git@h:r", "commit": "abcdef0"}));
        input.finish().expect("nothing left");

        let mut input =
            Input::new(json!({"source": {"repo": "https://u:p@h/r", "commit": "abcdef0"}, "x": 1})).unwrap();
        assert_eq!(take(&mut input, false), None);
        let error = input.finish().expect_err("problems");
        let problems = error.details.as_ref().unwrap()["problems"].as_array().unwrap().clone();
        let paths: Vec<&str> = problems.iter().map(|problem| problem["path"].as_str().unwrap()).collect();
        assert_eq!(paths, ["/source/repo", "/x"]);

        let mut input = Input::new(json!({})).unwrap();
        assert_eq!(take(&mut input, false), None);
        input.finish().expect("no source is no problem");
    }

    #[test]
    fn the_pattern_is_the_grammar_written_out() {
        // The pieces the checks spell out one by one, as the pattern has them.
        let pattern = repo_pattern(false);
        for piece in [SEGMENT, HOST, PORT, USER] {
            assert!(pattern.contains(piece), "{piece}");
        }
        assert!(pattern.starts_with("^(https://") && pattern.ends_with(")$"));
        for port in ["1", "22", "443", "9999", "10000", "59999", "60000", "64999", "65000", "65499", "65500", "65535"] {
            assert!(is_port(port), "{port}");
        }
        for port in ["", "0", "022", "65536", "99999", "100000", "+1", "1a"] {
            assert!(!is_port(port), "{port}");
        }
        for (member, text) in [("ref", "main"), ("path", "fleet/estate.yaml")] {
            assert_eq!(problem_of(member, text, false), None);
        }
    }

    #[test]
    fn a_deployment_with_insecure_git_sources_takes_their_urls() {
        let insecure = |repo: &str| problems(&json!({"repo": repo, "commit": COMMIT}), true);
        for repo in
            ["http://mirror.internal/estate.git", "git://127.0.0.1:9418/estate.git", "file:///srv/git/estate.git"]
        {
            assert_eq!(insecure(repo).len(), 0, "{repo}");
            assert_eq!(paths(json!({"repo": repo, "commit": COMMIT})), ["/source/repo"], "{repo} without it");
        }
        for repo in ["http://u:p@h/r", "file://relative", "file:///a//b", "ftp://h/r", "ext::sh -c id"] {
            assert_eq!(insecure(repo).len(), 1, "{repo}");
        }
        let pattern = repo_pattern(true);
        assert!(pattern.starts_with("^((https|http|git)://") && pattern.contains("|file://"), "{pattern}");
    }
}
