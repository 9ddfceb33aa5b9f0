//! The client commands against a running server (SPEC §9): `fleet export`, `plan`,
//! `apply` and `status`, and `fleet policy eval` offline; exit codes made for CI.

use std::io::Write;
use std::path::{Path, PathBuf};

use anstream::{eprintln, print, println};
use anstyle::{AnsiColor, Style};
use serde_json::{Value, json};

use crate::client::{
    CliError, Client, EXIT_BLOCKED, EXIT_CHANGES, EXIT_OK, is_yaml_path, print_json, printable, read_document,
    read_saved_plan, write_document, write_stdout,
};
use crate::markdown;
use crate::render::{Shown, has, plural, render_plan, render_status, verdict_line};

/// `fleet policy eval`: the verdicts `files` give on a plan saved by `fleet plan --out`,
/// planned again offline on the state saved with it, with these policies in force
/// instead of the server's (each as mandatory). Exit code 3 when they deny it.
pub fn policy_eval(files: &[PathBuf], saved: &Path, raw: bool) -> Result<u8, CliError> {
    let saved_plan = read_saved_plan(saved)?;
    let not_saved =
        |what: &str| CliError::Input(format!("{}: not a plan saved by `fleet plan --out` ({what})", saved.display()));
    let state = saved_plan.get("state").ok_or_else(|| not_saved("no state; save it again with this fleet"))?;
    if state["plugins"].as_array().is_some_and(|plugins| !plugins.is_empty()) {
        return Err(CliError::Input(
            "the saved state has plugin kinds, whose checks only their server runs; evaluate against a plan              without plugin kinds"
                .into(),
        ));
    }
    let mut snapshot = fleet_guest::Snapshot::from_json(&fleet_guest::Catalog::built_in(), state)
        .map_err(|error| not_saved(&error.message))?;
    snapshot.policies = files
        .iter()
        .map(|file| {
            let source = std::fs::read_to_string(file)
                .map_err(|error| CliError::Input(format!("{}: {error}", file.display())))?;
            let name = file.file_stem().and_then(|stem| stem.to_str()).unwrap_or_default().to_owned();
            fleet_guest::policy::compile(&name, &source)
                .map_err(|problem| CliError::Input(format!("{}: {problem}", file.display())))?;
            Ok(fleet_guest::Policy { name, level: fleet_guest::Level::Mandatory, source })
        })
        .collect::<Result<_, CliError>>()?;
    let request = json!({"document": saved_plan["document"], "prune": saved_plan["prune"].as_bool().unwrap_or(false)});
    let plan = fleet_guest::plan(&snapshot, &request.to_string())
        .map_err(|error| CliError::Input(format!("the saved plan cannot be planned again: {error}")))?;
    let plan: Value = serde_json::from_str(&plan).map_err(|error| CliError::Input(error.to_string()))?;
    if raw {
        print_json(&plan["policy"])?;
    } else {
        for verdict in plan["policy"]["verdicts"].as_array().into_iter().flatten() {
            println!("{}", verdict_line(verdict));
        }
        let number = |name: &str| plan["summary"][name].as_u64().unwrap_or_default() as usize;
        println!("{} denied, {}.", number("denied"), plural(number("warnings"), "warning"));
    }
    Ok(if plan["summary"]["denied"].as_u64().unwrap_or_default() > 0 { EXIT_BLOCKED } else { EXIT_OK })
}

/// How `fleet export` writes the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Json,
    Yaml,
}

pub fn export(client: &Client, output: Option<&Path>, format: Option<Format>) -> Result<u8, CliError> {
    let exported = client.call("fleet/export", &json!({}))?;
    if let Some(missing) = exported["missing"].as_array().filter(|missing| !missing.is_empty()) {
        eprintln!("note: this deployment does not run the modules of {}", Value::Array(missing.clone()));
    }
    let document = &exported["document"];
    let format = format.unwrap_or(if output.is_some_and(is_yaml_path) { Format::Yaml } else { Format::Json });
    let text = match format {
        Format::Yaml => serde_yaml_ng::to_string(document).map_err(|error| CliError::Input(error.to_string()))?,
        Format::Json => {
            serde_json::to_string_pretty(document).map_err(|error| CliError::Input(error.to_string()))? + "\n"
        }
    };
    match output {
        Some(path) => {
            std::fs::write(path, text).map_err(|error| CliError::Input(format!("{}: {error}", path.display())))?;
            let objects: usize = document
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(_, section)| section.as_object())
                .map(|section| section.len())
                .sum();
            let format = match format {
                Format::Json => "JSON",
                Format::Yaml => "YAML",
            };
            eprintln!("Wrote the estate ({}) to {} as {format}.", plural(objects, "object"), path.display());
        }
        None => print!("{text}"),
    }
    Ok(EXIT_OK)
}

/// Reads the FleetConfig of `plan`, `apply` or `propose`: a file, or a directory of files
/// merged (SPEC §20.1), each the document itself, not wrapped.
pub fn read_fleet_config(file: &Path) -> Result<Value, CliError> {
    let document = read_document(file)?;
    // The server's body limit is its own (`serve --body-limit`): past the default, say
    // here which document is that large, before a server answers PAYLOAD_TOO_LARGE.
    let default_limit = fleet::fleet::files::MAX_FILE_BYTES;
    let size = serde_json::to_vec(&document).map_or(0, |bytes| bytes.len());
    if size > default_limit {
        eprintln!(
            "warning: {}: the document is {} bytes as JSON, more than the {} MiB a server accepts unless its \
             `serve --body-limit` allows more",
            file.display(),
            size,
            default_limit >> 20
        );
    }
    Ok(document)
}

fn plan_exit_code(plan: &Value) -> u8 {
    if has(plan, "blocked") || plan["summary"]["denied"].as_u64().unwrap_or_default() > 0 {
        EXIT_BLOCKED
    } else if has(plan, "calls") {
        EXIT_CHANGES
    } else {
        EXIT_OK
    }
}

/// How `fleet plan` shows a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanFormat {
    /// Lines for a terminal, coloured there.
    Text,
    /// The raw plan.
    Json,
    /// A pull-request comment (GitHub-flavoured Markdown).
    Markdown,
}

/// What `fleet plan` was asked for besides the document.
pub struct PlanOptions<'a> {
    pub prune: bool,
    /// `--out`: save the plan, its document and state for `fleet apply --plan`.
    pub out: Option<&'a Path>,
    pub format: PlanFormat,
    /// `--output`: write the rendering here and print only the summary line.
    pub output: Option<&'a Path>,
    /// `--as-source`: plan as the tenant's git source would apply it (its principal, its
    /// prune), with nothing but `compute:sources:plan`.
    pub as_source: bool,
}

pub fn plan(client: &Client, file: &Path, options: &PlanOptions) -> Result<u8, CliError> {
    let document = read_fleet_config(file)?;
    let prune = options.prune;
    // As the source would: its principal plans, with its prune, and says whose tenant.
    let as_source = match options.as_source {
        true => Some(client.call("sources/plan", &json!({"document": document}))?),
        false => None,
    };
    let plan = match &as_source {
        Some(answer) => answer["plan"].clone(),
        None => client.call("fleet/plan", &json!({"document": document, "prune": prune}))?,
    };
    // The state it was planned on too, for `fleet policy eval` to judge offline; and it
    // names the tenant, which a comment's marker needs.
    let state = match (options.out, options.format, &as_source) {
        (_, PlanFormat::Markdown, Some(answer)) => Some(json!({"caller": {"tenant": answer["tenant"]}})),
        (Some(_), _, _) | (_, PlanFormat::Markdown, _) => Some(client.call("preview/snapshot", &json!({}))?),
        _ => None,
    };
    if let (Some(out), Some(state)) = (options.out, &state) {
        write_document(out, &json!({"document": document, "prune": prune, "plan": plan, "state": state}))?;
    }
    let rendering = match options.format {
        PlanFormat::Json => {
            serde_json::to_string_pretty(&plan).map_err(|error| CliError::Input(error.to_string()))? + "\n"
        }
        PlanFormat::Text => {
            let mut text = String::new();
            if let Some(answer) = &as_source {
                let prune = if answer["prune"] == true { "with prune" } else { "without prune" };
                text.push_str(&format!(
                    "As the source would apply it: planned as {}, {prune}.\n",
                    printable(&answer["principal"])
                ));
            }
            text.push_str(&render_plan(&plan, Shown::Planned));
            if let Some(out) = options.out {
                text.push_str(&format!(
                    "Saved to {}; apply exactly this plan with `fleet apply --plan {}`.\n",
                    out.display(),
                    out.display()
                ));
            }
            text
        }
        PlanFormat::Markdown => {
            let tenant = state.as_ref().map(|state| printable(&state["caller"]["tenant"])).unwrap_or_default();
            markdown::render(&plan, &markdown::Target { tenant: &tenant, server: &client.server() })
        }
    };
    match options.output {
        Some(output) => {
            // A file gets no colours, whatever the terminal.
            let rendering = anstream::adapter::strip_str(&rendering).to_string();
            std::fs::write(output, rendering)
                .map_err(|error| CliError::Input(format!("{}: {error}", output.display())))?;
            let summary = markdown::headline(&plan).replacen("**fleet plan** — ", "", 1);
            println!("fleet plan: {summary} (plan {}); written to {}.", printable(&plan["planHash"]), output.display());
        }
        None if options.format == PlanFormat::Text => print!("{rendering}"),
        None => write_stdout(rendering.as_bytes()).map_err(|error| CliError::Transport(error.to_string()))?,
    }
    Ok(plan_exit_code(&plan))
}

/// What `fleet apply` applies: a document file, or a plan saved by `fleet plan --out`.
pub enum ApplySource {
    Document {
        file: PathBuf,
        prune: bool,
        plan_hash: Option<String>,
    },
    SavedPlan(PathBuf),
    /// `fleet rollback N [--prune]`: revision N's document, with its prune flag (or
    /// pruning when asked), applied to the estate of today as any document is; the
    /// revision it makes says it put N back.
    Revision {
        number: u64,
        prune: bool,
    },
    /// `fleet apply --proposal N`: exactly the plan an approved proposal was reviewed
    /// with (SPEC §17).
    Proposal(u64),
}

/// How `fleet apply` gets its go-ahead (SPEC §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirm {
    /// `--yes`: apply without asking.
    Given,
    /// Ask on the terminal; refuse without one.
    Ask,
}

/// What an apply request carries besides its document and plan: `--override`,
/// `--heal`, the revision a rollback puts back, and where the document came from.
#[derive(Clone)]
pub struct Extra {
    /// `[{"policy", "reason"}]`.
    pub overrides: Value,
    pub heal: bool,
    pub rollback_of: Option<u64>,
    /// `{"repo", "commit", "ref"?, "path"?}` (`provenance::source`).
    pub source: Option<Value>,
}

impl Extra {
    /// An apply's: overrides and heal, and what it rolls back to, if it does.
    pub fn new(overrides: Value, heal: bool) -> Extra {
        Extra { overrides, heal, rollback_of: None, source: None }
    }

    fn overrides_any(&self) -> bool {
        self.overrides.as_array().is_some_and(|overrides| !overrides.is_empty())
    }

    fn add_to(&self, request: &mut Value) {
        if self.overrides_any() {
            request["overrides"] = self.overrides.clone();
        }
        if self.heal {
            request["heal"] = json!(true);
        }
        if let Some(revision) = self.rollback_of {
            request["rollbackOf"] = json!(revision);
        }
        if let Some(source) = &self.source {
            request["source"] = source.clone();
        }
    }
}

/// `--override POLICY=REASON` arguments as the apply request's `overrides`.
pub fn overrides(arguments: &[String]) -> Result<Value, CliError> {
    let overrides: Result<Vec<Value>, CliError> = arguments
        .iter()
        .map(|argument| match argument.split_once('=') {
            Some((policy, reason)) if !policy.is_empty() && !reason.trim().is_empty() => {
                Ok(json!({"policy": policy, "reason": reason}))
            }
            _ => Err(CliError::Input(format!("--override {argument:?} is not POLICY=REASON (a reason is required)"))),
        })
        .collect();
    Ok(Value::Array(overrides?))
}

pub fn apply(
    client: &Client,
    source: &ApplySource,
    extra: &Extra,
    raw: bool,
    confirm: Confirm,
) -> Result<u8, CliError> {
    // Whether the plan was already shown, before asking.
    let mut shown = false;
    let applied = match source {
        ApplySource::SavedPlan(file) => apply_saved(client, file, extra)?,
        ApplySource::Document { file, prune, plan_hash } => {
            let document = read_fleet_config(file)?;
            apply_document(client, document, *prune, plan_hash.as_deref(), extra, confirm, &mut shown)?
        }
        ApplySource::Revision { number, prune } => {
            let revision = client.call("fleet/revision", &json!({ "revision": number }))?;
            let (document, prune) = (revision["document"].clone(), *prune || revision["prune"] == true);
            // The revision's document, from where that revision's came.
            let source = revision.get("source").filter(|source| source.is_object()).cloned();
            let extra = Extra { rollback_of: Some(*number), source, ..extra.clone() };
            apply_document(client, document, prune, None, &extra, confirm, &mut shown)?
        }
        // Reviewed already: applied without asking, as a saved plan is.
        ApplySource::Proposal(number) => apply_proposal(client, *number, extra)?,
    };
    if raw {
        print_json(&applied)?;
    } else {
        if !shown {
            print!("{}", render_plan(&applied["plan"], Shown::Applied));
        }
        let style = Style::new().fg_color(Some(AnsiColor::Green.into())).bold();
        let calls = applied["applied"].as_u64().unwrap_or_default() as usize;
        println!("{style}Applied {}.{style:#}", plural(calls, "call"));
    }
    Ok(EXIT_OK)
}

/// Applies `document`: pinned to `plan_hash` when given; else, when asking, the plan is
/// shown (`shown` says so) and what is applied is exactly that plan.
fn apply_document(
    client: &Client,
    document: Value,
    prune: bool,
    plan_hash: Option<&str>,
    extra: &Extra,
    confirm: Confirm,
    shown: &mut bool,
) -> Result<Value, CliError> {
    let overridden = extra.overrides_any();
    let mut request = json!({"document": document, "prune": prune});
    extra.add_to(&mut request);
    if let Some(hash) = plan_hash {
        request["planHash"] = json!(hash);
    } else if confirm == Confirm::Ask {
        let plan = client.call("fleet/plan", &json!({"document": request["document"], "prune": prune}))?;
        let denied = plan["summary"]["denied"].as_u64().unwrap_or_default() > 0;
        if has(&plan, "calls") && !has(&plan, "blocked") && (!denied || overridden) {
            print!("{}", render_plan(&plan, Shown::Planned));
            ask(&plan, &client.server())?;
            *shown = true;
        }
        request["planHash"] = plan["planHash"].clone();
    }
    client.call("fleet/apply", &request).map_err(|error| explain_hash_mismatch(error, plan_hash))
}

/// Asks on the terminal before an apply that changes something; loudly when it deletes
/// or archives. Without a terminal, refuses: CI passes `--yes` or a reviewed `--plan`.
fn ask(plan: &Value, server: &str) -> Result<(), CliError> {
    use std::io::{BufRead, IsTerminal};
    if !std::io::stdin().is_terminal() {
        return Err(CliError::Input(
            "apply asks for confirmation, and there is no terminal to ask on: pass --yes, or apply a reviewed \
             plan with --plan"
                .into(),
        ));
    }
    let number = |action: &str| plan["summary"][action].as_u64().unwrap_or_default() as usize;
    let removals = number("delete") + number("archive");
    if removals > 0 {
        let red = Style::new().fg_color(Some(AnsiColor::Red.into())).bold();
        println!(
            "{red}This plan deletes {} and archives {}.{red:#}",
            plural(number("delete"), "object"),
            plural(number("archive"), "object")
        );
    }
    print!("Apply {} to {server}? Only 'yes' applies: ", plural(plan["calls"].as_array().map_or(0, Vec::len), "call"));
    std::io::stdout().flush().map_err(|error| CliError::Transport(error.to_string()))?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer).map_err(|error| CliError::Input(error.to_string()))?;
    if answer.trim() != "yes" {
        return Err(CliError::Input("apply cancelled; nothing was changed".into()));
    }
    Ok(())
}

/// A `--plan-hash` that no longer matches says so, with the hash the plan has now.
fn explain_hash_mismatch(error: CliError, given: Option<&str>) -> CliError {
    match (&error, given) {
        (CliError::Api { code, details, .. }, Some(given)) if code == "CONFIG_DRIFT" => CliError::Input(format!(
            "the plan hash does not match: --plan-hash is {given}, the plan is now {}; nothing was applied. \
             Run `fleet plan` again and review it",
            printable(&details["actual"])
        )),
        _ => error,
    }
}

/// Applies a plan saved by `fleet plan --out`, exactly: if the estate moved since, the
/// server refuses it, and this says what moved.
fn apply_saved(client: &Client, file: &Path, extra: &Extra) -> Result<Value, CliError> {
    let saved = read_saved_plan(file)?;
    let hash = saved["plan"]["planHash"].as_str().ok_or_else(|| {
        CliError::Input(format!("{}: not a plan saved by `fleet plan --out` (no plan.planHash)", file.display()))
    })?;
    let prune = saved["prune"].as_bool().unwrap_or(false);
    let mut request = json!({"document": saved["document"], "prune": prune, "planHash": hash});
    extra.add_to(&mut request);
    match client.call("fleet/apply", &request) {
        Err(CliError::Api { code, .. }) if code == "CONFIG_DRIFT" => {
            let now = client.call("fleet/plan", &json!({"document": saved["document"], "prune": prune}))?;
            Err(CliError::Input(format!(
                "CONFIG_DRIFT: the estate moved since {} was planned, so it was not applied:\n{}Plan again and \
                 review the new plan.",
                file.display(),
                what_moved(&saved["plan"], &now)
            )))
        }
        other => other,
    }
}

/// Applies an approved proposal; if the estate moved since it was planned, says that it
/// is stale now, what moved, and that a new proposal is needed.
fn apply_proposal(client: &Client, number: u64, extra: &Extra) -> Result<Value, CliError> {
    let mut request = json!({ "proposal": number });
    extra.add_to(&mut request);
    match client.call("fleet/apply", &request) {
        Err(CliError::Api { code, .. }) if code == "CONFIG_DRIFT" => {
            let proposed = client.call("proposals/get", &json!({ "number": number }))?;
            let prune = proposed["proposal"]["prune"].as_bool().unwrap_or(false);
            let now = client.call("fleet/plan", &json!({"document": proposed["document"], "prune": prune}))?;
            Err(CliError::Input(format!(
                "CONFIG_DRIFT: the estate moved since proposal {number} was planned, so it was not applied and is \
                 stale now:\n{}Propose the document again (fleet propose) for a review of the plan it makes now.",
                what_moved(&proposed["plan"], &now)
            )))
        }
        other => other,
    }
}

/// The changes of two plans of one document, side by side where they differ.
fn what_moved(saved: &Value, now: &Value) -> String {
    let lines = |plan: &Value| -> Vec<(String, String)> {
        plan["changes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|change| {
                (format!("{} {}", printable(&change["kind"]), printable(&change["key"])), printable(&change["text"]))
            })
            .collect()
    };
    let (before, after) = (lines(saved), lines(now));
    let mut out = String::new();
    for (object, text) in &before {
        match after.iter().find(|(other, _)| other == object) {
            Some((_, now)) if now == text => {}
            Some((_, now)) => out.push_str(&format!("  planned: {text}\n  now:     {now}\n")),
            None => out.push_str(&format!("  planned: {text}\n  now:     nothing to do for {object}\n")),
        }
    }
    for (object, text) in &after {
        if !before.iter().any(|(other, _)| other == object) {
            out.push_str(&format!("  planned: nothing for {object}\n  now:     {text}\n"));
        }
    }
    if out.is_empty() {
        out.push_str("  the same changes, against an estate whose other values moved\n");
    }
    out
}

/// Exit code 0 when converged (or never applied), 2 when drifted (SPEC §9).
pub fn status(client: &Client, raw: bool, refresh: bool) -> Result<u8, CliError> {
    let request = if refresh { json!({"refresh": true}) } else { json!({}) };
    let mut status = client.call("fleet/status", &request)?;
    // The git source's state beside the drift: git ahead of what was applied is not the
    // estate drifting from it. A tenant without a source, or a token that may not read
    // it, shows none.
    let source = match client.call("sources/get", &json!({})) {
        Ok(answer) => Some(answer["source"].clone()),
        Err(CliError::Api { code, .. }) if code == "NOT_FOUND" || code == "PERMISSION_DENIED" => None,
        Err(error) => return Err(error),
    };
    if raw {
        if let Some(source) = &source {
            status["source"] = source.clone();
        }
        print_json(&status)?;
    } else {
        print!("{}", render_status(&status));
        if let Some(source) = &source {
            println!("Git source {}: {}.", printable(&source["url"]), crate::source::state_line(source));
        }
    }
    Ok(if status.get("drift").is_some() { EXIT_CHANGES } else { EXIT_OK })
}
