//! Every guide runs as written (issue 62): the shell blocks of README.md and
//! docs/guide/*.md, in order, in one shell session per guide, against the real binary,
//! so that a guide cannot drift from what `fleet` does.
//!
//! How a block is run:
//! - `fleet` is the binary under test (a wrapper on `PATH`): `fleet serve ...` starts the
//!   server in the background on the guide's own port (`FLEET_SERVER`), replacing the
//!   one before, and a `--demo` server's token becomes `FLEET_TOKEN` for the blocks that
//!   follow; `fleet apply` and `rollback`, which ask on a terminal, get a terminal and
//!   the answer `yes`, as the reader gives it.
//! - What a reader of this repository types differently: `cargo run --release --` is
//!   `fleet`, `target/release/` the built binary's directory, `/path/to/fleet/` the
//!   repository, `http://127.0.0.1:8080` the guide's server. A line that sets a
//!   placeholder (`export FLEET_TOKEN=...`) is the reader's to fill in, and is left out,
//!   and so is `cargo build --release`: the suite runs on the build it was made by.
//! - A block of `$ ` lines is a transcript: its other lines are output, each of which
//!   (its parts between `…`) must appear in what the commands printed.
//! - A command may exit 0; `fleet plan`, `status`, `diff` and `policy eval` also 2 and
//!   3 (changes, blocked: their answers for CI); 1 only where the guide says it fails (a
//!   comment naming the refusal: `POLICY_DENIED`, "refused", …). Anything else, in a
//!   pipeline too, fails the guide, naming the command; so does a block that does not
//!   run to its end.
//! - Every guide starts where the README's set-up leaves a reader: `fleet serve --demo`
//!   running, its token in `FLEET_TOKEN`.
//! - `<!-- guide: before ... -->` just before a block runs first (what the prose asks
//!   the reader to do: edit a file); `<!-- guide: background PORT -->` runs a block that
//!   serves in the background until PORT listens; `<!-- guide: skip: REASON -->` skips a
//!   block that cannot run on one machine here, saying why (a PostgreSQL elsewhere, a
//!   new crate).

use std::path::Path;
use std::process::Command;

use crate::support::FLEET;

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// What a block prints last when it ran to its end.
const DONE: &str = "guide-block-ran-to-its-end";
const PLUGINS_DIR: &str = env!("FLEET_PLUGINS_DIR");

/// `fleet`, as the guides' reader has it: the binary, with `serve` in the background and
/// a terminal for the commands that ask.
const WRAPPER: &str = r#"#!/usr/bin/env bash
# The guides' `fleet`: the binary under test ($FLEET_REAL).
subcommand=""
skip=0
for arg in "$@"; do
  if [ "$skip" = 1 ]; then skip=0; continue; fi
  case "$arg" in
    --db) skip=1 ;;
    --db=*|-*) ;;
    *) subcommand="$arg"; break ;;
  esac
done
if [ "$subcommand" = serve ]; then
  if [ -f "$GUIDE_DIR/serve.pid" ]; then
    kill "$(cat "$GUIDE_DIR/serve.pid")" 2>/dev/null
    while kill -0 "$(cat "$GUIDE_DIR/serve.pid")" 2>/dev/null; do sleep 0.05; done
  fi
  args=()
  skip=0
  for arg in "$@"; do
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    case "$arg" in
      --listen) skip=1 ;;
      --listen=*) ;;
      *) args+=("$arg") ;;
    esac
  done
  : > "$GUIDE_DIR/serve.log"
  "$FLEET_REAL" "${args[@]}" --listen "${FLEET_SERVER#http://}" > "$GUIDE_DIR/serve.log" 2>&1 &
  echo $! > "$GUIDE_DIR/serve.pid"
  for _ in $(seq 600); do
    grep -q "fleet listening on" "$GUIDE_DIR/serve.log" && break
    kill -0 "$(cat "$GUIDE_DIR/serve.pid")" 2>/dev/null || { cat "$GUIDE_DIR/serve.log"; exit 1; }
    sleep 0.05
  done
  grep -q "fleet listening on" "$GUIDE_DIR/serve.log" || { cat "$GUIDE_DIR/serve.log"; exit 1; }
  token=$(grep -o 'FLEET_TOKEN=[^ ]*' "$GUIDE_DIR/serve.log" | head -n 1)
  [ -n "$token" ] && echo "export $token" > "$GUIDE_DIR/token.env"
  cat "$GUIDE_DIR/serve.log"
  exit 0
fi
case "$subcommand" in
  apply|rollback)
    asks=1
    for arg in "$@"; do
      case "$arg" in --yes|-y|--plan|--plan=*|--proposal|--proposal=*|--json|--plan-hash|--plan-hash=*) asks=0 ;; esac
    done
    if [ "$asks" = 1 ]; then
      printf -v command '%q ' "$FLEET_REAL" "$@"
      echo yes | script -qec "$command" /dev/null
      exit $?
    fi ;;
esac
exec "$FLEET_REAL" "$@"
"#;

/// A shell block of a guide, with what the comment before it says.
struct Block {
    line: usize,
    text: String,
    before: Option<String>,
    skip: Option<String>,
    /// A server the block starts and leaves running (the port it listens on).
    background: Option<u16>,
}

/// The `sh` blocks of a Markdown text, and the `guide:` comment before each.
fn blocks(markdown: &str) -> Vec<Block> {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut blocks = Vec::new();
    let mut comment: Option<String> = None;
    let mut index = 0;
    while index < lines.len() {
        let line = lines[index];
        if let Some(rest) = line.trim_start().strip_prefix("<!-- guide:") {
            let mut text = rest.to_owned();
            while !text.contains("-->") {
                index += 1;
                text.push('\n');
                text.push_str(lines[index]);
            }
            comment = Some(text.split("-->").next().unwrap_or_default().trim().to_owned());
        } else if line.trim_start() == "```sh" {
            let start = index + 1;
            let mut text = String::new();
            index += 1;
            while !lines[index].trim_start().starts_with("```") {
                text.push_str(lines[index]);
                text.push('\n');
                index += 1;
            }
            let (mut before, mut skip, mut background) = (None, None, None);
            match comment.take() {
                Some(said) if said.starts_with("background") => {
                    background = Some(said["background".len()..].trim().parse().expect("background PORT"));
                }
                Some(said) if said.starts_with("skip") => {
                    skip = Some(said["skip".len()..].trim_start_matches(':').trim().to_owned());
                }
                Some(said) if said.starts_with("before") => before = Some(said["before".len()..].to_owned()),
                Some(said) => panic!("line {start}: a guide comment says skip or before: {said}"),
                None => {}
            }
            assert!(skip.as_ref().is_none_or(|why| !why.is_empty()), "line {start}: a skip says why");
            blocks.push(Block { line: start, text, before, skip, background });
        } else if !line.trim().is_empty() {
            comment = None;
        }
        index += 1;
    }
    blocks
}

/// What the reader types, as it runs here (see the module's doc).
fn as_run(text: &str) -> String {
    let text = text
        .replace("cargo run --release -- ", "fleet ")
        .replace("target/release/fleet ", "fleet ")
        .replace("target/release/plugins/", "$FLEET_PLUGINS/")
        .replace("target/release/fleet-edge.wasm", "$FLEET_EDGE_WASM")
        .replace("/path/to/fleet/", "$REPO/")
        .replace("http://127.0.0.1:8080", "$FLEET_SERVER");
    let placeholder = |line: &str| line.split_whitespace().any(|word| word.ends_with("=...") || word.ends_with("=…"));
    // The build the suite itself was made by.
    let built = |line: &str| line.trim() == "cargo build --release";
    text.lines().filter(|line| !placeholder(line) && !built(line)).map(|line| format!("{line}\n")).collect()
}

/// A transcript's commands (its `$ ` lines and their continuations) and its output lines.
fn transcript(text: &str) -> (String, Vec<String>) {
    let (mut commands, mut output) = (String::new(), Vec::new());
    let mut continued = false;
    for line in text.lines() {
        if let Some(command) = line.strip_prefix("$ ") {
            commands.push_str(command);
            commands.push('\n');
            continued = command.ends_with('\\');
        } else if continued {
            commands.push_str(line);
            commands.push('\n');
            continued = line.ends_with('\\');
        } else if !line.trim().is_empty() {
            output.push(line.to_owned());
        }
    }
    (commands, output)
}

/// `text` as one shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Whether the guide says the command on `line` fails.
fn said_to_fail(line: &str) -> bool {
    let comment = line.split_once(" # ").map_or("", |(_, comment)| comment);
    ["POLICY_DENIED", "APPROVAL_REQUIRED", "CONFIG_DRIFT", "INVALID_STATE", "refused", "refuses", "fails", "exit 1"]
        .iter()
        .any(|word| comment.contains(word))
}

/// Runs `guide`'s blocks in order in a directory of its own; panics naming the first
/// that does not run as written.
fn run(guide: &str) {
    let path = Path::new(REPO).join(guide);
    let markdown = std::fs::read_to_string(&path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let wrapper = bin.join("fleet");
    std::fs::write(&wrapper, WRAPPER).unwrap();
    Command::new("chmod").arg("+x").arg(&wrapper).status().unwrap();
    // The repository's example files, where the guides name them.
    for name in ["policies", "plugins", "console", "wit"] {
        std::os::unix::fs::symlink(Path::new(REPO).join(name), dir.path().join(name)).unwrap();
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let state = dir.path().join("state.env");
    std::fs::write(&state, "").unwrap();
    let path_var = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let _served = Served(dir.path());
    let mut failures = Vec::new();
    // The README's set-up, which every guide starts from: `serve --demo` and its token.
    let setup = Block { line: 0, text: "fleet serve --demo\n".into(), before: None, skip: None, background: None };
    for block in std::iter::once(setup).chain(blocks(&markdown)) {
        if block.skip.is_some() {
            continue;
        }
        let (commands, expected) = match block.text.lines().any(|line| line.starts_with("$ ")) {
            true => transcript(&block.text),
            false => (block.text.clone(), Vec::new()),
        };
        // A server of its own: started in a process group of its own, waited for.
        let commands = match block.background {
            None => as_run(&commands),
            Some(port) => format!(
                "setsid bash -c {} > background.log 2>&1 & echo $! >> background.pids\n\
                 for _ in $(seq 600); do (echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; sleep 0.05; done\n\
                 (echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null || {{ cat background.log; false; }}\n",
                shell_quote(&as_run(&commands))
            ),
        };
        let script = format!(
            "set -a -E -o pipefail; source {state}; [ -f token.env ] && source token.env && rm token.env\n\
             trap 'echo \"$? $LINENO $BASH_COMMAND\" >> failures' ERR\n\
             {before}\n{commands}\
             export -p > {state}\n\
             echo {DONE}\n",
            state = state.display(),
            before = block.before.as_deref().map(as_run).unwrap_or_default(),
        );
        let _ = std::fs::remove_file(dir.path().join("failures"));
        let output = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .current_dir(dir.path())
            .env("PATH", &path_var)
            .env("FLEET_REAL", FLEET)
            .env("GUIDE_DIR", dir.path())
            .env("REPO", REPO)
            .env("FLEET_PLUGINS", PLUGINS_DIR)
            .env("FLEET_EDGE_WASM", env!("FLEET_EDGE_WASM"))
            .env("FLEET_SERVER", format!("http://127.0.0.1:{port}"))
            .env("FLEET_DB", dir.path().join("fleet.db"))
            .env("HOME", dir.path())
            .env_remove("FLEET_TOKEN")
            .output()
            .unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        let script_lines: Vec<&str> = script.lines().collect();
        // The block ran to its end (no syntax error, no `exit` part-way).
        if !(output.status.success() && said.contains(DONE)) {
            failures
                .push(format!("{guide}:{}: the block did not run to its end ({}):\n{said}", block.line, output.status));
        }
        let failed = std::fs::read_to_string(dir.path().join("failures")).unwrap_or_default();
        for failure in failed.lines() {
            let mut parts = failure.splitn(3, ' ');
            let (code, line, command) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap_or(""));
            let code: i32 = code.parse().unwrap();
            let text =
                line.parse::<usize>().ok().and_then(|line| script_lines.get(line.max(1) - 1)).copied().unwrap_or("?");
            // Changes to make (2) or blocked (3): a plan's, a status's, a diff's answer.
            let signal = matches!(code, 2 | 3)
                && ["fleet plan", "fleet status", "fleet diff", "fleet policy eval"]
                    .iter()
                    .any(|it| command.contains(it));
            if !(signal || (code == 1 && said_to_fail(text))) {
                failures.push(format!(
                    "{guide}:{}: `{command}` (line `{}`) exited {code}:\n{said}",
                    block.line,
                    text.trim()
                ));
            }
        }
        for line in &expected {
            let mut rest = said.as_str();
            for part in line.split('…').map(str::trim).filter(|part| !part.is_empty()) {
                match rest.find(part) {
                    Some(at) => rest = &rest[at + part.len()..],
                    None => failures.push(format!("{guide}:{}: the output lacks {part:?}:\n{said}", block.line)),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Stops the server a guide started, however its run ends.
struct Served<'a>(&'a Path);

impl Drop for Served<'_> {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.0.join("serve.pid")) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
        // The blocks' own servers, each its process group.
        for pid in std::fs::read_to_string(self.0.join("background.pids")).unwrap_or_default().lines() {
            let _ = Command::new("kill").arg("--").arg(format!("-{}", pid.trim())).status();
        }
    }
}

/// Each guide a test of its own, so that they run side by side.
macro_rules! guides {
    ($($name:ident: $path:literal),* $(,)?) => {$(
        #[test]
        fn $name() {
            run($path);
        }
    )*};
}

guides! {
    readme: "README.md",
    approvals: "docs/guide/approvals.md",
    ci: "docs/guide/ci.md",
    cli_and_ci: "docs/guide/cli-and-ci.md",
    console: "docs/guide/console.md",
    edge: "docs/guide/edge.md",
    git: "docs/guide/git.md",
    guardrails: "docs/guide/guardrails.md",
    history: "docs/guide/history.md",
    operating: "docs/guide/operating.md",
    plugins: "docs/guide/plugins.md",
    replicas: "docs/guide/replicas.md",
    webhooks: "docs/guide/webhooks.md",
}

#[test]
fn the_runner_reads_transcripts_placeholders_and_directives() {
    let (commands, output) = transcript("$ fleet plan a \\\n  --prune\nPlan: …\n$ fleet status\n");
    assert_eq!(commands, "fleet plan a \\\n  --prune\nfleet status\n");
    assert_eq!(output, ["Plan: …"]);
    assert_eq!(as_run("export FLEET_TOKEN=...   # the token\ncargo run --release -- status\n"), "fleet status\n");
    let found = blocks(
        "<!-- guide: skip needs PostgreSQL -->\n```sh\npg_dump\n```\n\n<!-- guide: before\ntouch a\n-->\n\n```sh\nls\n```\n",
    );
    assert_eq!((found[0].skip.as_deref(), found[1].before.as_deref()), (Some("needs PostgreSQL"), Some("\ntouch a")));
    assert!(said_to_fail("fleet apply x --yes     # POLICY_DENIED (409), nothing applied"));
    assert!(!said_to_fail("fleet apply x --yes"));
}
