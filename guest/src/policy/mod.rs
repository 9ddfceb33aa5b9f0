//! Guardrails (SPEC §14): Rego policies that the planner itself evaluates on every plan,
//! with `regorus` built without clock, randomness or I/O, so that every host of the
//! planner reaches the same verdicts on the same plan.
//!
//! A policy is one Rego v1 module; its package's `deny`, `warn` and `require_approval`
//! rules, sets of strings or of `{"msg", "kind"?, "key"?}` objects, judge `input`; its
//! `approve` and `reject` rules judge a proposal (`approval.rs`, SPEC §17). The input is built
//! from the planner's own values, never through JSON text, and only the members a
//! policy in force names are built at all (`input.estate` and `input.referencedBy` are the
//! costly ones). The plan builds that input and asks `judge` here for the verdicts
//! (`plan/judge.rs`): judging is a step of planning, and nothing here reads the plan's
//! own types.

use std::collections::{BTreeMap, BTreeSet};

use regorus::Value as Rego;
use regorus::unstable::{BUILTINS, Lexer, TokenKind};
use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorCode};
use crate::grammar::is_name;
use crate::value::Value;

/// A policy's data is the state's (`crate::state`); hosts name it here, beside [`compile`].
pub use crate::state::{Level, Policy};

pub(crate) mod approval;

/// The largest policy source: a guardrail is a page of rules, not a program.
pub const MAX_SOURCE_BYTES: usize = 64 * 1024;

/// Where a policy's source is wrong, and how: a line and column (1-based) and a
/// sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceProblem {
    pub line: u32,
    pub column: u32,
    pub message: String,
}

impl std::fmt::Display for SourceProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}, column {}: {}", self.line, self.column, self.message)
    }
}

/// Builtins that read the world rather than their arguments: a policy calling one would
/// judge the same plan differently at another time or place, so it is refused.
const NOT_DETERMINISTIC: [(&str, &str); 8] = [
    ("time.", "reads the clock"),
    ("rand.", "is random"),
    ("uuid.", "is random"),
    ("http.send", "reads the network"),
    ("net.lookup_ip_addr", "reads the network"),
    ("opa.runtime", "reads the environment"),
    ("crypto.", "reads keys and certificates"),
    ("io.jwt.", "reads keys"),
];

/// Words that a `(` may follow and that are not calls.
const KEYWORDS: [&str; 14] = [
    "if", "in", "contains", "every", "some", "not", "with", "as", "else", "default", "true", "false", "null", "import",
];

/// A compiled policy, ready to judge inputs.
pub struct Compiled {
    engine: regorus::Engine,
    /// `data.<package>`.
    package: String,
    /// The rules (functions included) the module defines.
    defined: BTreeSet<String>,
    /// The members of `input` the source names.
    pub(crate) reads: Reads,
}

/// Which members of `input` a policy may read. A source that uses `input` other than
/// as `input.member` or `input["member"]` may read them all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Reads {
    pub(crate) estate: bool,
    pub(crate) referenced_by: bool,
    pub(crate) changes: bool,
    pub(crate) rest: bool,
}

impl Reads {
    pub(crate) fn union(self, other: Reads) -> Reads {
        Reads {
            estate: self.estate || other.estate,
            referenced_by: self.referenced_by || other.referenced_by,
            changes: self.changes || other.changes,
            rest: self.rest || other.rest,
        }
    }

    const ALL: Reads = Reads { estate: true, referenced_by: true, changes: true, rest: true };
}

/// Compiles a policy's source and checks that it only calls deterministic builtins and
/// its own functions.
pub fn compile(name: &str, source: &str) -> Result<Compiled, SourceProblem> {
    if source.len() > MAX_SOURCE_BYTES {
        return Err(SourceProblem {
            line: 1,
            column: 1,
            message: format!("the source is {} bytes; a policy has at most {MAX_SOURCE_BYTES}", source.len()),
        });
    }
    let mut engine = regorus::Engine::new();
    let package = engine.add_policy(format!("{name}.rego"), source.to_owned()).map_err(|error| problem_of(&error))?;
    let defined = defined_functions(&mut engine);
    let reads = scan(name, source, &defined)?;
    Ok(Compiled { engine, package, defined, reads })
}

/// The names the module defines as rules (functions included), as written in their
/// heads: `f`, `lib.f`.
fn defined_functions(engine: &mut regorus::Engine) -> BTreeSet<String> {
    use regorus::unstable::{Rule, RuleHead};
    let mut names = BTreeSet::new();
    for module in engine.get_modules() {
        for rule in &module.policy {
            let refr = match rule.as_ref() {
                Rule::Spec { head: RuleHead::Func { refr, .. } | RuleHead::Compr { refr, .. }, .. } => refr,
                Rule::Spec { head: RuleHead::Set { refr, .. }, .. } | Rule::Default { refr, .. } => refr,
            };
            names.insert(refr.span().text().to_owned());
        }
    }
    names
}

/// The rules whose names start with `test_`, as `opa test` runs them.
pub fn test_rules(compiled: &Compiled) -> Vec<String> {
    let package = &compiled.package;
    compiled.defined.iter().filter(|name| name.starts_with("test_")).map(|name| format!("{package}.{name}")).collect()
}

impl Compiled {
    /// Evaluates a rule of the module (`data.pkg.test_x`) on no input: whether it is
    /// true, or the error it ends with.
    pub fn holds(&mut self, rule: &str) -> Result<bool, String> {
        self.engine.set_input(Rego::new_object());
        match self.engine.eval_rule(rule.to_owned()) {
            Ok(Rego::Bool(true)) => Ok(true),
            Ok(_) => Ok(false),
            Err(error) => Err(failure(&error)),
        }
    }
}

/// Walks the source's tokens: every call must be to a deterministic builtin or to a
/// function of the module, and `input` is read member by member or whole.
fn scan(name: &str, source: &str, defined: &BTreeSet<String>) -> Result<Reads, SourceProblem> {
    let parsed = regorus::Source::from_contents(format!("{name}.rego"), source.to_owned())
        .map_err(|error| problem_of(&error))?;
    let mut lexer = Lexer::new(&parsed);
    let mut tokens = Vec::new();
    loop {
        let token = lexer.next_token().map_err(|error| problem_of(&error))?;
        if token.0 == TokenKind::Eof {
            break;
        }
        tokens.push(token);
    }
    let text = |at: usize| tokens.get(at).map_or("", |token| token.1.text());
    let kind = |at: usize| tokens.get(at).map(|token| &token.0);
    let mut reads = Reads::default();
    let mut at = 0;
    while at < tokens.len() {
        if kind(at) != Some(&TokenKind::Ident) || (at > 0 && text(at - 1) == ".") {
            at += 1;
            continue;
        }
        // A path: ident (. ident)*.
        let start = at;
        let mut path = text(at).to_owned();
        while text(at + 1) == "." && kind(at + 2) == Some(&TokenKind::Ident) {
            path.push('.');
            path.push_str(text(at + 2));
            at += 2;
        }
        // `with input as {...}` (a test's own input) reads nothing of the plan's.
        let replaced = start > 0 && text(start - 1) == "with";
        if !replaced && (path == "input" || path.starts_with("input.")) {
            let member = match (text(start + 1), kind(start + 2)) {
                (".", Some(TokenKind::Ident)) => Some(text(start + 2).to_owned()),
                ("[", Some(TokenKind::String)) if text(start + 3) == "]" => Some(text(start + 2).to_owned()),
                _ => None,
            };
            reads = reads.union(match member.as_deref() {
                Some("estate") => Reads { estate: true, ..Reads::default() },
                Some("referencedBy") => Reads { referenced_by: true, ..Reads::default() },
                Some("changes") => Reads { changes: true, ..Reads::default() },
                Some(_) => Reads { rest: true, ..Reads::default() },
                None => Reads::ALL,
            });
        }
        if text(at + 1) == "(" && !KEYWORDS.contains(&path.as_str()) {
            let span = &tokens[start].1;
            let problem = |message: String| SourceProblem { line: span.line, column: span.col, message };
            let local = path.strip_prefix("data.").and_then(|rest| rest.split_once('.')).map(|(_, name)| name);
            let known = BUILTINS.contains_key(path.as_str())
                || defined.contains(&path)
                || local.is_some_and(|name| defined.contains(name));
            if !known {
                if let Some((_, why)) = NOT_DETERMINISTIC
                    .iter()
                    .find(|(prefix, _)| path.starts_with(prefix) || path == prefix.trim_end_matches('.'))
                {
                    return Err(problem(format!(
                        "{path} {why}: a policy must judge a plan the same way on every host, so it may call only deterministic builtins"
                    )));
                }
                return Err(problem(format!("{path} is neither a builtin nor a function of this policy")));
            }
        }
        at += 1;
    }
    Ok(reads)
}

/// Where a regorus error is and what it says: its text reads `--> file:line:col`, the
/// source line and a caret, then `error: message`.
fn located(text: &str) -> Option<(u32, u32, String)> {
    let arrow = text.lines().find_map(|line| line.trim().strip_prefix("-->"))?;
    let mut parts = arrow.trim().rsplitn(3, ':');
    let column = parts.next()?.trim().parse().ok()?;
    let line = parts.next()?.trim().parse().ok()?;
    let message = text.lines().skip_while(|line| !line.starts_with("error:")).collect::<Vec<_>>().join(" ");
    let message = message.strip_prefix("error:").unwrap_or(&message).trim();
    Some((line, column, safe(message)))
}

/// A compile error as a problem of the source.
fn problem_of(error: &anyhow::Error) -> SourceProblem {
    let text = error.to_string();
    match located(&text) {
        Some((line, column, message)) => SourceProblem { line, column, message },
        None => SourceProblem { line: 1, column: 1, message: one_line(&text) },
    }
}

/// An error while a policy runs, for its verdict's message.
fn failure(error: &anyhow::Error) -> String {
    let text = error.to_string();
    match located(&text) {
        Some((line, column, message)) => format!("the policy failed at line {line}, column {column}: {message}"),
        None => format!("the policy failed: {}", one_line(&text)),
    }
}

/// Text for people from a policy or its engine: one line, no control characters.
fn safe(text: &str) -> String {
    text.chars().map(|character| if character.is_control() { ' ' } else { character }).collect()
}

fn one_line(text: &str) -> String {
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
    safe(&lines.join(" "))
}

/// Which rule a verdict comes from. Verdicts sort by rule last, so a rule added at the
/// end orders the others as before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) enum RuleName {
    #[serde(rename = "deny")]
    Deny,
    #[serde(rename = "warn")]
    Warn,
    /// The plan must be proposed and approved before it applies (SPEC §17).
    #[serde(rename = "require_approval")]
    RequireApproval,
}

impl RuleName {
    const JUDGING: [RuleName; 3] = [RuleName::Deny, RuleName::Warn, RuleName::RequireApproval];

    fn as_str(self) -> &'static str {
        match self {
            RuleName::Deny => "deny",
            RuleName::Warn => "warn",
            RuleName::RequireApproval => "require_approval",
        }
    }
}

/// One verdict of one policy, ordered by policy, kind, key and message.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) struct Verdict {
    pub(crate) policy: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) key: Option<String>,
    pub(crate) message: String,
    pub(crate) level: Level,
    pub(crate) rule: RuleName,
}

impl Verdict {
    /// Whether it blocks the plan: a denial of a mandatory or enforced policy.
    pub(crate) fn denies(&self) -> bool {
        self.rule == RuleName::Deny && self.level != Level::Advisory
    }

    /// Whether it keeps the plan from a direct apply: a `require_approval` of a
    /// mandatory or enforced policy (an advisory one's is a warning).
    pub(crate) fn requires_approval(&self) -> bool {
        self.rule == RuleName::RequireApproval && self.level != Level::Advisory
    }
}

/// The plan's `policy`: the digest of the policies in force and their verdicts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Judgement {
    pub(crate) digest: String,
    pub(crate) verdicts: Vec<Verdict>,
    /// The names of the policies in force (not written: the digest stands for them).
    pub(crate) in_force: Vec<String>,
}

impl Judgement {
    pub(crate) fn denied(&self) -> usize {
        self.verdicts.iter().filter(|verdict| verdict.denies()).count()
    }

    /// Verdicts that bind nothing: warnings, and advisory denials and approvals.
    pub(crate) fn warnings(&self) -> usize {
        self.verdicts.len() - self.denied() - self.approval_required()
    }

    pub(crate) fn approval_required(&self) -> usize {
        self.verdicts.iter().filter(|verdict| verdict.requires_approval()).count()
    }

    /// The verdicts that keep the plan from a direct apply.
    pub(crate) fn approvals(&self) -> impl Iterator<Item = &Verdict> {
        self.verdicts.iter().filter(|verdict| verdict.requires_approval())
    }
}

/// Written in the order of SPEC §14: `{"digest", "verdicts": [{"policy", "level",
/// "rule", "kind"?, "key"?, "message"}]}`.
impl Serialize for Judgement {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("digest", &self.digest)?;
        map.serialize_entry("verdicts", &WrittenVerdicts(&self.verdicts, false))?;
        map.end()
    }
}

/// The judgement with every member in canonical (sorted) order, for the plan hash.
pub(crate) struct CanonicalJudgement<'a>(pub(crate) &'a Judgement);

impl Serialize for CanonicalJudgement<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("digest", &self.0.digest)?;
        map.serialize_entry("verdicts", &WrittenVerdicts(&self.0.verdicts, true))?;
        map.end()
    }
}

/// Verdicts in the order of SPEC §14 or, `canonical`, with members sorted.
struct WrittenVerdicts<'a>(&'a [Verdict], bool);

impl Serialize for WrittenVerdicts<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|verdict| WrittenVerdict(verdict, self.1)))
    }
}

struct WrittenVerdict<'a>(&'a Verdict, bool);

impl Serialize for WrittenVerdict<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Verdict { policy, kind, key, message, level, rule } = self.0;
        let members = [
            ("policy", Some(policy.as_str())),
            ("level", Some(level.as_str())),
            ("rule", Some(rule.as_str())),
            ("kind", kind.as_deref()),
            ("key", key.as_deref()),
            ("message", Some(message.as_str())),
        ];
        let mut members: Vec<(&str, &str)> =
            members.into_iter().filter_map(|(name, value)| value.map(|value| (name, value))).collect();
        if self.1 {
            members.sort_by_key(|(name, _)| *name);
        }
        serializer.collect_map(members)
    }
}

/// `sha256:` and the hex SHA-256 of the policies in force, by name: each policy's name,
/// level and source, every part ended by a NUL byte.
pub(crate) fn digest(policies: &[Policy]) -> String {
    let mut sorted: Vec<&Policy> = policies.iter().collect();
    sorted.sort_by(|left, right| left.name.cmp(&right.name));
    let mut hasher = Sha256::new();
    hasher.update(b"fleet-policies\0");
    for policy in sorted {
        for part in [policy.name.as_str(), policy.level.as_str(), policy.source.as_str()] {
            hasher.update(part.as_bytes());
            hasher.update([0]);
        }
    }
    format!("sha256:{}", data_encoding::HEXLOWER.encode(&hasher.finalize()))
}

/// Checks the policies a host hands over: names, levels and sources that compile. A
/// host that hands over others is broken; it is told which.
pub(crate) fn compile_all(policies: &[Policy]) -> Result<Vec<Compiled>, Error> {
    let mut names = BTreeSet::new();
    policies
        .iter()
        .map(|policy| {
            if !is_name(&policy.name) || !names.insert(policy.name.as_str()) {
                return Err(Error::new(
                    ErrorCode::Internal,
                    format!("the host's policies are malformed: the name {:?} is invalid or given twice", policy.name),
                ));
            }
            compile(&policy.name, &policy.source).map_err(|problem| {
                Error::new(ErrorCode::Internal, format!("the policy {} cannot be compiled: {problem}", policy.name))
            })
        })
        .collect()
}

/// Runs every policy on `input` (one value, shared), each named to `judging` before it
/// runs and `""` after the last ([`crate::host::Host::judging`]), and gathers their
/// verdicts. A policy that errors denies, its error the message.
pub(crate) fn judge(policies: &[Policy], compiled: &mut [Compiled], input: &Rego, judging: &dyn Fn(&str)) -> Judgement {
    let mut verdicts = Vec::new();
    for (policy, compiled) in policies.iter().zip(compiled.iter_mut()) {
        judging(&policy.name);
        compiled.engine.set_input(input.clone());
        for rule in RuleName::JUDGING {
            if !compiled.defined.contains(rule.as_str()) {
                continue;
            }
            let path = format!("{}.{}", compiled.package, rule.as_str());
            let verdict = |kind: Option<String>, key: Option<String>, message: String| Verdict {
                policy: policy.name.clone(),
                kind,
                key,
                message,
                level: policy.level,
                rule,
            };
            match compiled.engine.eval_rule(path) {
                Ok(Rego::Undefined) => {}
                Ok(value) => match messages(&value) {
                    Ok(found) => {
                        verdicts.extend(found.into_iter().map(|(kind, key, message)| verdict(kind, key, message)))
                    }
                    Err(message) => verdicts.push(Verdict { rule: RuleName::Deny, ..verdict(None, None, message) }),
                },
                Err(error) => verdicts.push(Verdict { rule: RuleName::Deny, ..verdict(None, None, failure(&error)) }),
            }
        }
    }
    judging("");
    verdicts.sort();
    verdicts.dedup();
    let in_force = policies.iter().map(|policy| policy.name.clone()).collect();
    Judgement { digest: digest(policies), verdicts, in_force }
}

type Message = (Option<String>, Option<String>, String);

/// The messages of a `deny`, `warn` or `require_approval` rule (or of `approve` and
/// `reject`): a set (or array) of strings or of
/// `{"msg", "kind"?, "key"?}` objects. Anything else is the policy's error.
fn messages(value: &Rego) -> Result<Vec<Message>, String> {
    let items: Vec<&Rego> = match value {
        Rego::Set(set) => set.iter().collect(),
        Rego::Array(array) => array.iter().collect(),
        _ => return Err("the rule is not a set of messages".to_owned()),
    };
    let shape = "each message must be a string or an object {\"msg\", \"kind\"?, \"key\"?} of strings";
    items
        .into_iter()
        .map(|item| match item {
            Rego::String(text) => Ok((None, None, safe(text))),
            Rego::Object(object) => {
                let text = |name: &str| match object.get(&Rego::from(name)) {
                    None => Ok(None),
                    Some(Rego::String(text)) => Ok(Some(safe(text))),
                    Some(_) => Err(shape.to_owned()),
                };
                if object
                    .keys()
                    .any(|key| !matches!(key, Rego::String(name) if matches!(&**name, "msg" | "kind" | "key")))
                {
                    return Err(shape.to_owned());
                }
                let message = text("msg")?.ok_or_else(|| shape.to_owned())?;
                Ok((text("kind")?, text("key")?, message))
            }
            _ => Err(shape.to_owned()),
        })
        .collect()
}

// ---- the input --------------------------------------------------------------------------

/// Builds Rego values, each field name made once.
#[derive(Default)]
pub(crate) struct Values {
    /// By the name's address and length: the names are the descriptors' own statics,
    /// so no text is compared to find one.
    names: rustc_hash::FxHashMap<(usize, usize), Rego>,
}

impl Values {
    pub(crate) fn name(&mut self, name: &'static str) -> Rego {
        let key = (name.as_ptr() as usize, name.len());
        self.names.entry(key).or_insert_with(|| Rego::from(name)).clone()
    }

    pub(crate) fn value(&mut self, value: &Value) -> Rego {
        match value {
            Value::Text(text) => Rego::from(&**text),
            Value::Count(count) => Rego::from(*count),
            Value::Bool(flag) => Rego::from(*flag),
            Value::Map(map) => {
                let map: BTreeMap<Rego, Rego> =
                    map.iter().map(|(key, value)| (Rego::from(key.as_str()), Rego::from(value.as_str()))).collect();
                Rego::from(map)
            }
        }
    }

    pub(crate) fn text(&mut self, text: &str) -> Rego {
        Rego::from(text)
    }
}

/// An object of named members.
pub(crate) fn object(members: impl IntoIterator<Item = (Rego, Rego)>) -> Rego {
    Rego::from(members.into_iter().collect::<BTreeMap<Rego, Rego>>())
}

/// A JSON value (the plan's own parts, which are small) as a Rego value.
pub(crate) fn from_serialize<T: Serialize>(value: &T) -> Result<Rego, Error> {
    serde_json::to_value(value)
        .map(Rego::from)
        .map_err(|error| Error::new(ErrorCode::Internal, format!("a policy's input cannot be built: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_that_do_not_compile_say_where() {
        let problem = compile("p", "package p\n\ndeny contains msg if {\n  msg := \n}\n").err().unwrap();
        assert!(problem.line >= 4, "{problem:?}");
        assert!(!problem.message.contains('\n'));
    }

    #[test]
    fn builtins_that_read_the_world_are_refused_where_they_are_called() {
        let source = "package p\n\ndeny contains msg if {\n  time.now_ns() > 0\n  msg := \"late\"\n}\n";
        let problem = compile("p", source).err().unwrap();
        assert_eq!((problem.line, problem.column), (4, 3), "{problem:?}");
        assert!(problem.message.contains("time.now_ns reads the clock"), "{problem:?}");
        for call in ["rand.intn(\"x\", 3)", "http.send({})", "uuid.rfc4122(\"a\")", "opa.runtime()", "nothing.here(1)"]
        {
            let source = format!("package p\n\ndeny contains \"x\" if {{\n  {call}\n}}\n");
            assert!(compile("p", &source).is_err(), "{call}");
        }
        let source = "package p\n\nsmall(n) := n < 3\n\ndeny contains sprintf(\"%d\", [count(input.changes)]) if {\n  not small(count(input.changes))\n}\n";
        let compiled = compile("p", source).unwrap();
        assert_eq!(compiled.reads, Reads { changes: true, ..Reads::default() });
    }

    #[test]
    fn a_policy_reads_what_it_names_of_the_input() {
        let reads = |body: &str| {
            compile("p", &format!("package p\n\ndeny contains \"x\" if {{\n  {body}\n}}\n")).unwrap().reads
        };
        assert_eq!(reads("count(input.estate.pools) > 1"), Reads { estate: true, ..Reads::default() });
        assert_eq!(reads("input[\"prune\"]"), Reads { rest: true, ..Reads::default() });
        assert_eq!(reads("input.referencedBy.pools"), Reads { referenced_by: true, ..Reads::default() });
        assert_eq!(reads("x := input\n  x.estate"), Reads::ALL);
        assert_eq!(reads("count(deny) == 0 with input as {}"), Reads::default());
    }

    fn judged(source: &str, input: serde_json::Value) -> Judgement {
        let policies = [Policy { name: "p".into(), level: Level::Mandatory, source: source.into() }];
        let mut compiled = compile_all(&policies).unwrap();
        judge(&policies, &mut compiled, &Rego::from(input), &|_| {})
    }

    #[test]
    fn messages_are_strings_or_objects_and_anything_else_denies() {
        let source = "package p\n\ndeny contains {\"msg\": \"too big\", \"kind\": \"pool\", \"key\": k} if {\n  some k in input.keys\n}\n\nwarn contains \"careful\" if { input.careful }\n";
        let judgement = judged(source, serde_json::json!({"keys": ["b", "a"], "careful": true}));
        let keys: Vec<_> = judgement.verdicts.iter().map(|verdict| (verdict.rule, verdict.key.clone())).collect();
        assert_eq!(
            keys,
            [(RuleName::Warn, None), (RuleName::Deny, Some("a".into())), (RuleName::Deny, Some("b".into()))]
        );
        assert_eq!((judgement.denied(), judgement.warnings()), (2, 1));

        let judgement = judged("package p\n\ndeny contains 3 if { true }\n", serde_json::json!({}));
        assert_eq!(judgement.denied(), 1);
        assert!(judgement.verdicts[0].message.contains("must be a string"), "{judgement:?}");
    }

    #[test]
    fn a_policy_that_errors_denies_with_its_error() {
        let judgement =
            judged("package p\n\ndeny contains \"x\" if {\n  to_number(\"ten\") > 1\n}\n", serde_json::json!({}));
        assert_eq!(judgement.denied(), 1, "{judgement:?}");
        assert_eq!(
            judgement.verdicts[0].message,
            "the policy failed at line 4, column 14: could not parse string as number"
        );
    }

    #[test]
    fn test_rules_are_found_and_run() {
        let source = "package p\n\ndouble(n) := n * 2\n\ntest_double if { double(2) == 4 }\n\ntest_wrong if { double(2) == 5 }\n";
        let mut compiled = compile("p", source).unwrap();
        let rules = test_rules(&compiled);
        assert_eq!(rules, ["data.p.test_double", "data.p.test_wrong"]);
        assert_eq!(compiled.holds(&rules[0]), Ok(true));
        assert_eq!(compiled.holds(&rules[1]), Ok(false));
    }

    #[test]
    fn the_digest_covers_name_level_and_source_in_name_order() {
        let policy = |name: &str, level| Policy { name: name.into(), level, source: "package p".into() };
        let (a, b) = (policy("a", Level::Advisory), policy("b", Level::Enforced));
        assert_eq!(digest(&[a.clone(), b.clone()]), digest(&[b.clone(), a.clone()]));
        assert_ne!(digest(&[a.clone(), b.clone()]), digest(&[a, policy("b", Level::Mandatory)]));
    }
}
