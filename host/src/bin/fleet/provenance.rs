//! Where a document came from (SPEC §20.2): the `--source-*` flags, else the variables
//! GitHub Actions and GitLab CI give every job, as the `source` an apply or a proposal
//! records. The server checks it; this only gathers it.

use std::path::Path;

use serde_json::{Value, json};

use crate::cli::SourceArgs;

/// The `source` of a request: the flags when given, else the CI's variables (read
/// through `variable`), else none. `document` is the file or directory given, whose
/// path in the repository is the source's `path` when the job's checkout holds it.
pub fn source(flags: &SourceArgs, document: Option<&Path>, variable: impl Fn(&str) -> Option<String>) -> Option<Value> {
    let variable = |name: &str| variable(name).filter(|value| !value.is_empty());
    let (repo, commit, reference, checkout) = match (&flags.source_repo, &flags.source_commit) {
        (Some(repo), Some(commit)) => (repo.clone(), commit.clone(), flags.source_ref.clone(), None),
        _ => match (variable("GITHUB_SERVER_URL"), variable("GITHUB_REPOSITORY"), variable("GITHUB_SHA")) {
            (Some(server), Some(repository), Some(commit)) => (
                format!("{}/{repository}", server.trim_end_matches('/')),
                commit,
                variable("GITHUB_REF"),
                variable("GITHUB_WORKSPACE"),
            ),
            _ => (
                variable("CI_PROJECT_URL")?,
                variable("CI_COMMIT_SHA")?,
                variable("CI_COMMIT_REF_NAME"),
                variable("CI_PROJECT_DIR"),
            ),
        },
    };
    let mut source = json!({"repo": repo, "commit": commit});
    if let Some(reference) = flags.source_ref.clone().or(reference) {
        source["ref"] = json!(reference);
    }
    let path = flags.source_path.clone().or_else(|| in_checkout(document?, Path::new(&checkout?)));
    if let Some(path) = path {
        source["path"] = json!(path);
    }
    Some(source)
}

/// `document`'s path inside `checkout`, with `/` between its parts; `.` for the
/// checkout itself.
fn in_checkout(document: &Path, checkout: &Path) -> Option<String> {
    let (document, checkout) = (document.canonicalize().ok()?, checkout.canonicalize().ok()?);
    let inside = document.strip_prefix(checkout).ok()?;
    let parts: Vec<&str> = inside.iter().map(|part| part.to_str()).collect::<Option<_>>()?;
    Some(if parts.is_empty() { ".".to_owned() } else { parts.join("/") })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn flags(repo: Option<&str>, commit: Option<&str>) -> SourceArgs {
        SourceArgs {
            source_repo: repo.map(str::to_owned),
            source_commit: commit.map(str::to_owned),
            source_ref: None,
            source_path: None,
        }
    }

    fn variables(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn github_actions_variables_fill_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("estate/prod")).unwrap();
        let workspace = dir.path().to_str().unwrap();
        let found = source(
            &flags(None, None),
            Some(&dir.path().join("estate/prod")),
            variables(&[
                ("GITHUB_SERVER_URL", "https://github.com/"),
                ("GITHUB_REPOSITORY", "acme/estate"),
                ("GITHUB_SHA", "0123456789abcdef0123456789abcdef01234567"),
                ("GITHUB_REF", "refs/heads/main"),
                ("GITHUB_WORKSPACE", workspace),
            ]),
        );
        assert_eq!(
            found,
            Some(
                json!({"repo": "https://github.com/acme/estate", "commit": "0123456789abcdef0123456789abcdef01234567",
                        "ref": "refs/heads/main", "path": "estate/prod"})
            )
        );
    }

    #[test]
    fn gitlab_ci_variables_fill_it_and_flags_win() {
        let gitlab = [
            ("CI_PROJECT_URL", "https://gitlab.example.com/acme/estate"),
            ("CI_COMMIT_SHA", "89abcdef"),
            ("CI_COMMIT_REF_NAME", "main"),
        ];
        assert_eq!(
            source(&flags(None, None), None, variables(&gitlab)),
            Some(json!({"repo": "https://gitlab.example.com/acme/estate", "commit": "89abcdef", "ref": "main"}))
        );
        assert_eq!(
            source(&flags(Some("git@example.com:a/b.git"), Some("abcdef0")), None, variables(&gitlab)),
            Some(json!({"repo": "git@example.com:a/b.git", "commit": "abcdef0"}))
        );
    }

    #[test]
    fn outside_ci_without_flags_there_is_none() {
        assert_eq!(source(&flags(None, None), None, variables(&[("GITHUB_SHA", "abcdef0")])), None);
        assert_eq!(
            source(&flags(None, None), None, variables(&[("CI_PROJECT_URL", ""), ("CI_COMMIT_SHA", "a")])),
            None
        );
    }

    #[test]
    fn a_document_outside_the_checkout_has_no_path() {
        let (checkout, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        assert_eq!(in_checkout(elsewhere.path(), checkout.path()), None);
        assert_eq!(in_checkout(checkout.path(), checkout.path()).as_deref(), Some("."));
    }
}
