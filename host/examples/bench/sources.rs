//! Git sources (issue 65): a cycle whose head did not move (one ls-refs round trip, no
//! fetch), and a cycle of a new commit of the large document (fetch, read, plan, apply),
//! against the direct apply of the same document (goal: at most 1.5 times it). The
//! repository is on disk (`file://`): the figures are fleet's, not a network's.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Result, bail};
use fleet::sources::Ask;
use serde_json::{Value, json};

use crate::server::Server;
use crate::support::{median, ms};

/// `source_cycle_10k_ms` and `source_cycle_unchanged_ms` (the median of `runs`).
pub async fn figures(server: &Server, document: &Value, runs: usize) -> Result<Value> {
    let dir = tempfile::tempdir()?;
    let repo = dir.path().join("estate");
    git(dir.path(), &["init", "-q", "-b", "main", "estate"])?;
    std::fs::write(repo.join("estate.json"), serde_json::to_vec(document)?)?;
    git(&repo, &["add", "estate.json"])?;
    git(&repo, &["-c", "user.name=Ada", "-c", "user.email=ada@example.com", "commit", "-q", "-m", "the estate"])?;
    let token = &server.tokens.sources;
    let put = json!({"url": format!("file://{}", repo.display()), "path": "estate.json", "mode": "auto",
                     "interval": "24h"});
    server.post_group(token, "sources/put", put.to_string()).await?;

    let started = Instant::now();
    let answer = server.post_group(token, "sources/refresh", "{}".to_owned()).await?;
    let cycle = started.elapsed();
    let status = serde_json::from_str::<Value>(&answer)?["source"]["status"].clone();
    if status["state"] != "synced" || status.get("appliedCommit").is_none() {
        bail!("the source's cycle did not apply the document: {status}");
    }

    let runner = server.app.core.sources.clone();
    let mut unchanged = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        tokio::task::block_in_place(|| runner.cycle_now("sources", &Ask::Due))?;
        unchanged.push(started.elapsed());
    }
    Ok(json!({"source_cycle_10k_ms": ms(cycle), "source_cycle_unchanged_ms": ms(median(unchanged))}))
}

fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .status()?;
    if !status.success() {
        bail!("git {args:?} failed");
    }
    Ok(())
}
