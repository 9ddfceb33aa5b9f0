//! The CI examples of `examples/ci/` run as their CI would run them: every step's (or
//! job's) shell script, with the variables that CI sets, against a real server. The
//! steps that need GitHub or GitLab itself — installing a release, posting and fetching
//! the comment — are the only ones not run; each is named here with the reason.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use serde_yaml_ng::Value as Yaml;

use crate::support::{FLEET, Server};

const SITES: &str = "
sites:
  eu-west: {region: eu-west-1}
providerAccounts:
  aws-main: {provider: aws, credentialsRef: 'vault:aws/main'}
";

fn pools(gpus: u64, class: &str) -> String {
    format!(
        r#"{{"pools": {{"gpu-a": {{"site": "eu-west", "account": "aws-main", "class": "{class}", "owner": "team-ml",
                     "vcpus": 512, "memoryMib": 2097152, "gpus": {gpus}}}}},
 "flavors": {{"g1-large": {{"pool": "gpu-a", "vcpus": 8, "memoryMib": 65536, "gpus": 1, "diskGib": 100}}}}}}"#
    )
}

/// A checkout of the estate's repository: `estate/` as a directory of documents.
struct Checkout {
    dir: tempfile::TempDir,
}

impl Checkout {
    fn new() -> Checkout {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("estate")).unwrap();
        std::fs::write(dir.path().join("estate/00-sites.yaml"), SITES).unwrap();
        std::fs::write(dir.path().join("estate/README.md"), "# The estate\n").unwrap();
        let checkout = Checkout { dir };
        checkout.pools(64, "gpu");
        checkout
    }

    /// A commit that changes the pools' file.
    fn pools(&self, gpus: u64, class: &str) {
        std::fs::write(self.path().join("estate/10-pools.json"), pools(gpus, class)).unwrap();
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path().join(name)).unwrap_or_else(|error| panic!("{name}: {error}"))
    }

    /// What posting the comment and fetching it on merge do on the forge: the plan the
    /// pull request showed is what the apply job reads.
    fn merge_reviewed(&self) {
        std::fs::copy(self.path().join("plan.md"), self.path().join("reviewed.md")).unwrap();
    }
}

/// `$PATH` with the `fleet` under test first, as the install step would leave it.
fn path_with_fleet() -> String {
    let dir = PathBuf::from(FLEET).parent().unwrap().to_owned();
    format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default())
}

/// Runs `script` as CI's bash does (`-eo pipefail`); whether it succeeded.
fn bash(script: &str, dir: &Path, env: &BTreeMap<String, String>) -> (bool, String) {
    let output = Command::new("bash")
        .args(["--noprofile", "--norc", "-eo", "pipefail", "-c", script])
        .current_dir(dir)
        .env_clear()
        .env("PATH", path_with_fleet())
        .env("HOME", dir)
        .envs(env)
        .output()
        .expect("bash runs");
    let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), log)
}

fn yaml(file: &str) -> Yaml {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file);
    serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn text(value: &Yaml) -> String {
    match value {
        Yaml::String(text) => text.clone(),
        Yaml::Number(number) => number.to_string(),
        Yaml::Bool(flag) => flag.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

/// The server, a CI token of one tenant, and what the examples need to reach them.
struct Ci {
    server: Server,
    token: String,
    checkout: Checkout,
}

impl Ci {
    fn new() -> Ci {
        let server = Server::start(&[]);
        server.tenant("acme");
        // The grants docs/guide/ci.md gives the CI job's token.
        let token =
            server.token("acme", "ci", &["compute:fleet:admin@compute-fleet", "compute:*:write@*", "compute:*:read@*"]);
        Ci { server, token, checkout: Checkout::new() }
    }

    fn revisions(&self) -> Vec<Value> {
        self.server.ok(&self.token, "fleet/history", json!({}))["revisions"].as_array().unwrap().clone()
    }

    fn move_the_estate(&self, gpus: u64) {
        let pool = self.server.ok(&self.token, "pools/list", json!({}))["items"][0]["id"].clone();
        self.server.ok(&self.token, "pools/update", json!({"id": pool, "gpus": gpus}));
    }
}

// ---- GitHub Actions ----------------------------------------------------------------------

/// The steps of the workflow that are not run, and why.
const GITHUB_ONLY: [(&str, &str); 3] = [
    ("Install fleet", "downloads a release; the fleet under test is on PATH instead"),
    ("Comment on the pull request", "posts through GitHub's API"),
    ("Fetch the reviewed plan", "reads the comment through GitHub's API; `merge_reviewed` copies it"),
];

/// A run of the workflow's job `job` on `event`, at `commit` of `reference`.
fn github_job(ci: &Ci, job: &str, event: &str, commit: &str, reference: &str) -> (bool, String) {
    let workflow = yaml("examples/ci/github-actions.yml");
    let definition = &workflow["jobs"][job];
    assert_eq!(text(&definition["if"]), format!("github.event_name == '{event}'"), "job {job} runs on {event}");
    let mut outputs: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let workspace = ci.checkout.path();
    let summary = workspace.join("summary.md");
    let mut log = String::new();
    for (number, step) in definition["steps"].as_sequence().unwrap().iter().enumerate() {
        if step.get("uses").is_some() {
            assert_eq!(
                text(&step["uses"]),
                "actions/checkout@v4",
                "the only action is the checkout, which is this test's"
            );
            continue;
        }
        let name = text(&step["name"]);
        if GITHUB_ONLY.iter().any(|(skipped, _)| *skipped == name) {
            continue;
        }
        let output = workspace.join(format!("output-{number}"));
        std::fs::write(&output, "").unwrap();
        let lookup = |expression: &str| -> String {
            match expression {
                "vars.FLEET_SERVER" => ci.server.base.clone(),
                "secrets.FLEET_TOKEN" => ci.token.clone(),
                "github.ref" => reference.to_owned(),
                other => match other.strip_prefix("steps.").and_then(|rest| rest.split_once(".outputs.")) {
                    Some((id, key)) => outputs[id][key].clone(),
                    None => panic!("step {name:?}: the test does not know ${{{{ {other} }}}}"),
                },
            }
        };
        let mut env: BTreeMap<String, String> = [
            ("CI", "true".to_owned()),
            ("GITHUB_ACTIONS", "true".to_owned()),
            ("GITHUB_EVENT_NAME", event.to_owned()),
            ("GITHUB_SERVER_URL", "https://github.com".to_owned()),
            ("GITHUB_REPOSITORY", "acme/estate".to_owned()),
            ("GITHUB_SHA", commit.to_owned()),
            ("GITHUB_REF", reference.to_owned()),
            ("GITHUB_WORKSPACE", workspace.display().to_string()),
            ("GITHUB_STEP_SUMMARY", summary.display().to_string()),
            ("GITHUB_OUTPUT", output.display().to_string()),
            ("RUNNER_TEMP", workspace.display().to_string()),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect();
        for scope in [&workflow["env"], &definition["env"], &step["env"]] {
            for (name, value) in scope.as_mapping().into_iter().flatten() {
                env.insert(text(name), expand(&text(value), &lookup));
            }
        }
        let (succeeded, step_log) = bash(&text(&step["run"]), workspace, &env);
        log.push_str(&format!("--- {name}\n{step_log}"));
        if !succeeded {
            return (false, log);
        }
        if let Some(id) = step.get("id") {
            let written = std::fs::read_to_string(&output).unwrap();
            let pairs = written.lines().filter_map(|line| line.split_once('=')).map(|(k, v)| (k.into(), v.into()));
            outputs.insert(text(id), pairs.collect());
        }
    }
    (true, log)
}

/// `${{ expression }}`s of a value, looked up.
fn expand(value: &str, lookup: &impl Fn(&str) -> String) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${{") {
        let end = rest[start..].find("}}").expect("an expression ends") + start;
        out.push_str(&rest[..start]);
        out.push_str(&lookup(rest[start + 3..end].trim()));
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_github_workflow_plans_a_pull_request_applies_it_on_merge_and_watches_drift() {
    let ci = Ci::new();
    let steps: Vec<String> = ["plan", "apply", "drift"]
        .iter()
        .flat_map(|job| yaml("examples/ci/github-actions.yml")["jobs"][*job]["steps"].as_sequence().unwrap().clone())
        .filter_map(|step| step.get("name").map(text))
        .collect();
    for (skipped, _) in GITHUB_ONLY {
        assert!(steps.iter().any(|step| *step == skipped), "the workflow has no step {skipped:?}");
    }

    // A pull request: its plan is the comment and the job's summary; changes pass.
    let (pull_request, merged) =
        ("1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222");
    let (planned, log) = github_job(&ci, "plan", "pull_request", pull_request, "refs/pull/7/merge");
    assert!(planned, "{log}");
    let comment = ci.checkout.read("plan.md");
    assert!(comment.starts_with("**fleet plan** — 4 to create, 0 to update, 0 to delete\n"), "{comment}");
    assert!(comment.trim_end().ends_with("<!-- fleet-plan tenant=acme -->"), "{comment}");
    assert_eq!(ci.checkout.read("summary.md"), comment, "the job's summary is the comment");
    assert!(ci.revisions().is_empty(), "a plan applies nothing");

    // Merged: the apply job applies exactly the plan the pull request showed, and the
    // revision says where it came from.
    ci.checkout.merge_reviewed();
    let (applied, log) = github_job(&ci, "apply", "push", merged, "refs/heads/main");
    assert!(applied, "{log}");
    let revisions = ci.revisions();
    assert_eq!(revisions.len(), 1);
    assert!(comment.contains(&format!("Plan hash `{}`", revisions[0]["planHash"].as_str().unwrap())), "{comment}");
    assert_eq!(
        revisions[0]["source"],
        json!({"repo": "https://github.com/acme/estate", "commit": merged, "ref": "refs/heads/main", "path": "estate"})
    );
    let (in_sync, log) = github_job(&ci, "drift", "schedule", merged, "refs/heads/main");
    assert!(in_sync, "{log}");

    // The next pull request is reviewed, then the estate moves before the merge: the
    // apply refuses, nothing is applied; and the drift job fails while it differs.
    ci.checkout.pools(96, "gpu");
    let (planned, log) = github_job(&ci, "plan", "pull_request", pull_request, "refs/pull/8/merge");
    assert!(planned, "{log}");
    assert!(ci.checkout.read("plan.md").starts_with("**fleet plan** — 0 to create, 1 to update, 0 to delete\n"));
    ci.checkout.merge_reviewed();
    ci.move_the_estate(80);
    let (applied, log) = github_job(&ci, "apply", "push", merged, "refs/heads/main");
    assert!(!applied, "an estate that moved since the review is not applied: {log}");
    assert!(log.contains("the plan hash does not match"), "{log}");
    assert_eq!(ci.revisions().len(), 1, "nothing was applied");
    let (in_sync, log) = github_job(&ci, "drift", "schedule", merged, "refs/heads/main");
    assert!(!in_sync, "the drift job fails while the estate has drifted: {log}");
    assert!(log.contains("Drifted"), "{log}");

    // A blocked change: the comment is still written (to be posted), and the job fails.
    ci.checkout.pools(96, "cpu");
    let (planned, log) = github_job(&ci, "plan", "pull_request", pull_request, "refs/pull/9/merge");
    assert!(!planned, "a blocked plan fails its job: {log}");
    let comment = ci.checkout.read("plan.md");
    assert!(comment.contains("; 1 blocked") && comment.contains("#### Blocked (1)"), "{comment}");
}

// ---- GitLab CI ---------------------------------------------------------------------------

/// A run of the pipeline's job `job`'s `script` (its `before_script` installs fleet or
/// reads the comment through GitLab's API, and is not run).
fn gitlab_job(ci: &Ci, job: &str, source: &str, commit: &str, branch: &str) -> (bool, String) {
    let pipeline = yaml("examples/ci/gitlab-ci.yml");
    let definition = &pipeline[job];
    let rule = text(&definition["rules"][0]["if"]);
    assert!(rule.starts_with(&format!("$CI_PIPELINE_SOURCE == \"{source}\"")), "job {job} runs on {source}: {rule}");
    let workspace = ci.checkout.path();
    let mut env: BTreeMap<String, String> = [
        ("CI", "true"),
        ("GITLAB_CI", "true"),
        ("CI_PIPELINE_SOURCE", source),
        ("CI_PROJECT_URL", "https://gitlab.example.com/acme/estate"),
        ("CI_COMMIT_SHA", commit),
        ("CI_COMMIT_REF_NAME", branch),
        ("CI_COMMIT_BRANCH", branch),
        ("CI_DEFAULT_BRANCH", "main"),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value.to_owned()))
    .collect();
    env.insert("CI_PROJECT_DIR".into(), workspace.display().to_string());
    // The project's CI/CD variables.
    env.insert("FLEET_SERVER".into(), ci.server.base.clone());
    env.insert("FLEET_TOKEN".into(), ci.token.clone());
    for (name, value) in pipeline["variables"].as_mapping().into_iter().flatten() {
        env.insert(text(name), text(value));
    }
    let script: Vec<String> = definition["script"].as_sequence().unwrap().iter().map(text).collect();
    bash(&script.join("\n"), workspace, &env)
}

#[test]
fn the_gitlab_pipeline_plans_a_merge_request_applies_it_on_merge_and_watches_drift() {
    let ci = Ci::new();
    let pipeline = yaml("examples/ci/gitlab-ci.yml");
    let jobs: Vec<String> =
        pipeline.as_mapping().unwrap().keys().map(text).filter(|name| name.starts_with("fleet:")).collect();
    // fleet:comment posts through GitLab's API, and is the one job not run.
    assert_eq!(jobs, ["fleet:plan", "fleet:comment", "fleet:apply", "fleet:drift"]);

    let (planned, log) = gitlab_job(&ci, "fleet:plan", "merge_request_event", "abcdef1", "feature");
    assert!(planned, "{log}");
    let comment = ci.checkout.read("plan.md");
    assert!(comment.starts_with("**fleet plan** — 4 to create"), "{comment}");
    assert_eq!(ci.checkout.read("plan.code").trim(), "2");

    ci.checkout.merge_reviewed();
    let (applied, log) = gitlab_job(&ci, "fleet:apply", "push", "abcdef2", "main");
    assert!(applied, "{log}");
    let revisions = ci.revisions();
    assert_eq!(
        revisions[0]["source"],
        json!({"repo": "https://gitlab.example.com/acme/estate", "commit": "abcdef2", "ref": "main", "path": "estate"})
    );
    assert!(gitlab_job(&ci, "fleet:drift", "schedule", "abcdef2", "main").0);
    ci.move_the_estate(8);
    let (in_sync, log) = gitlab_job(&ci, "fleet:drift", "schedule", "abcdef2", "main");
    assert!(!in_sync, "{log}");
}

#[test]
fn a_plan_of_thirty_thousand_changes_is_a_comment_github_takes() {
    let ci = Ci::new();
    let estate = ci.checkout.path().join("estate");
    for part in 0..3 {
        let pools: serde_json::Map<String, Value> = (0..10_000)
            .map(|n| {
                let pool = json!({"site": "eu-west", "account": "aws-main", "class": "cpu", "owner": "team-ml"});
                (format!("p{part}-{n:05}"), pool)
            })
            .collect();
        std::fs::write(estate.join(format!("2{part}-pools.json")), json!({ "pools": pools }).to_string()).unwrap();
    }
    std::fs::remove_file(estate.join("10-pools.json")).unwrap();
    let output = Command::new(FLEET)
        .args(["plan", "estate", "--format", "markdown", "--output", "plan.md"])
        .current_dir(ci.checkout.path())
        .env("FLEET_SERVER", &ci.server.base)
        .env("FLEET_TOKEN", &ci.token)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
    let comment = ci.checkout.read("plan.md");
    assert!(comment.starts_with("**fleet plan** — 30002 to create, 0 to update, 0 to delete\n"), "{comment:.200}");
    assert!(comment.chars().count() <= 65_000, "{}", comment.chars().count());
    let shown = comment.lines().filter(|line| line.starts_with("+ ")).count();
    assert!(comment.contains(&format!("_{} creates and updates left out", 30_002 - shown)), "{shown}");
    assert!(comment.trim_end().ends_with("<!-- fleet-plan tenant=acme -->"));
}
