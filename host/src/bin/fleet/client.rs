//! The operator's command line against a running server: `fleet export`, `plan`,
//! `apply` and `status`. Documents are JSON or YAML; plans print for people (coloured
//! `+ ~ - !` lines grouped by kind) or raw with `--json`; exit codes are made for CI.

use std::io::Write;
use std::path::{Path, PathBuf};

use anstream::{eprintln, print, println};
use anstyle::{AnsiColor, Style};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Uri};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// Exit codes: `plan` 0 = no changes, 2 = changes, 3 = blocked or denied by policies;
/// any error 1.
pub const EXIT_OK: u8 = 0;
pub const EXIT_ERROR: u8 = 1;
pub const EXIT_CHANGES: u8 = 2;
pub const EXIT_BLOCKED: u8 = 3;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The server answered with an API error.
    #[error("{code}: {message}")]
    Api { code: String, message: String, details: Value },
    #[error("{0}")]
    Transport(String),
    #[error("{0}")]
    Input(String),
}

pub struct Client {
    server: Uri,
    token: Option<String>,
    /// For an `https://` server: whom to trust.
    tls: Option<tokio_rustls::TlsConnector>,
}

impl Client {
    /// The server this client talks to, as given.
    pub fn server(&self) -> String {
        self.server.to_string().trim_end_matches('/').to_owned()
    }

    pub fn new(server: &str, token: Option<String>) -> Result<Client, CliError> {
        let server: Uri = server.parse().map_err(|error| CliError::Input(format!("--server {server:?}: {error}")))?;
        let tls = match server.scheme_str() {
            Some("http") => None,
            Some("https") => Some(tls_connector()?),
            _ => {
                return Err(CliError::Input(format!(
                    "--server {server:?} must be http://HOST:PORT or https://HOST:PORT"
                )));
            }
        };
        Ok(Client { server, token, tls })
    }

    /// POSTs `body` to `/api/compute/<method>` and returns the JSON answer.
    pub fn call(&self, method: &str, body: &Value) -> Result<Value, CliError> {
        let token =
            self.token.as_deref().ok_or_else(|| CliError::Input("no token: pass --token or set FLEET_TOKEN".into()))?;
        let authority = self.server.authority().ok_or_else(|| CliError::Input("--server needs a host".into()))?.clone();
        let path = format!("{}/api/compute/{method}", self.server.path().trim_end_matches('/'));
        let request = Request::post(path)
            .header(hyper::header::HOST, authority.as_str())
            .header(hyper::header::AUTHORIZATION, format!("Bearer {token}"))
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|error| CliError::Input(error.to_string()))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| CliError::Transport(error.to_string()))?;
        let (status, bytes) = runtime.block_on(async {
            let port = authority.port_u16().unwrap_or(if self.tls.is_some() { 443 } else { 80 });
            let stream = tokio::net::TcpStream::connect((authority.host(), port))
                .await
                .map_err(|error| CliError::Transport(format!("cannot reach {}: {error}", self.server)))?;
            let transport = |error: &dyn std::fmt::Display| CliError::Transport(error.to_string());
            let mut sender = match &self.tls {
                None => {
                    let (sender, connection) =
                        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| transport(&e))?;
                    tokio::spawn(connection);
                    sender
                }
                Some(tls) => {
                    let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_owned();
                    let name = rustls::pki_types::ServerName::try_from(host)
                        .map_err(|error| CliError::Input(format!("--server {}: {error}", self.server)))?;
                    let stream = tls
                        .connect(name, stream)
                        .await
                        .map_err(|error| CliError::Transport(format!("TLS with {} failed: {error}", self.server)))?;
                    let (sender, connection) =
                        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| transport(&e))?;
                    tokio::spawn(connection);
                    sender
                }
            };
            let response = sender.send_request(request).await.map_err(|error| transport(&error))?;
            let status = response.status();
            let bytes = response.into_body().collect().await.map_err(|error| transport(&error))?;
            Ok::<_, CliError>((status, bytes.to_bytes()))
        })?;
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|_| CliError::Transport(format!("the server answered {status} with a body that is not JSON")))?;
        if status.is_success() {
            return Ok(value);
        }
        let error = &value["error"];
        let code = escape_controls(error["code"].as_str().unwrap_or("UNKNOWN"));
        let mut message = printable(&error["message"]);
        if code == "UNAUTHENTICATED" {
            message = format!("{message} (the token was refused by {})", self.server());
        }
        Err(CliError::Api { code, message, details: error["details"].clone() })
    }
}

/// Whom an `https://` server must prove it is: the CA certificates of the PEM file
/// `FLEET_CA_CERT` names (a deployment's own CA), else the system's trusted roots.
fn tls_connector() -> Result<tokio_rustls::TlsConnector, CliError> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    match std::env::var_os("FLEET_CA_CERT") {
        Some(file) => {
            let shown = std::path::PathBuf::from(&file).display().to_string();
            let certificates = rustls::pki_types::CertificateDer::pem_file_iter(&file)
                .map_err(|error| CliError::Input(format!("FLEET_CA_CERT {shown}: {error}")))?;
            for certificate in certificates {
                let certificate =
                    certificate.map_err(|error| CliError::Input(format!("FLEET_CA_CERT {shown}: {error}")))?;
                roots.add(certificate).map_err(|error| CliError::Input(format!("FLEET_CA_CERT {shown}: {error}")))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    if roots.is_empty() {
        return Err(CliError::Input(
            "no CA certificate to trust the server with: set FLEET_CA_CERT to a PEM file".into(),
        ));
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| CliError::Input(error.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)))
}

/// A string value from the server, safe to print on a terminal: control characters
/// (escape sequences, bells, carriage returns) are shown escaped, as `\u{1b}`.
pub fn printable(value: &Value) -> String {
    escape_controls(value.as_str().unwrap_or_default())
}

fn escape_controls(text: &str) -> String {
    if !fleet_guest::json::has_control(text) {
        return text.to_owned();
    }
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        if character.is_control() {
            escaped.extend(character.escape_unicode());
        } else {
            escaped.push(character);
        }
    }
    escaped
}

// ---- documents ---------------------------------------------------------------------------

fn is_yaml_path(path: &Path) -> bool {
    matches!(path.extension().and_then(|extension| extension.to_str()), Some("yaml" | "yml"))
}

/// Reads a FleetConfig (or a saved plan) as JSON or YAML: by extension, else by content.
pub fn read_document(path: &Path) -> Result<Value, CliError> {
    let text =
        std::fs::read_to_string(path).map_err(|error| CliError::Input(format!("{}: {error}", path.display())))?;
    let looks_like_json = text.trim_start().starts_with('{');
    if is_yaml_path(path) || !looks_like_json {
        serde_yaml_ng::from_str(&text).map_err(|error| CliError::Input(format!("{}: {error}", path.display())))
    } else {
        fleet_guest::json::parse(&text).map_err(|problems| {
            let problems: Vec<String> = problems
                .iter()
                .map(|problem| match problem.path.as_str() {
                    "" => problem.message.clone(),
                    path => format!("{path}: {}", problem.message),
                })
                .collect();
            CliError::Input(format!("{}: {}", path.display(), problems.join("; ")))
        })
    }
}

pub fn write_document(path: &Path, value: &Value) -> Result<(), CliError> {
    let text = if is_yaml_path(path) {
        serde_yaml_ng::to_string(value).map_err(|error| CliError::Input(error.to_string()))?
    } else {
        serde_json::to_string_pretty(value).map_err(|error| CliError::Input(error.to_string()))? + "\n"
    };
    std::fs::write(path, text).map_err(|error| CliError::Input(format!("{}: {error}", path.display())))
}

/// Prints an error; validation problems name the file and the field.
pub fn report(error: &CliError, file: Option<&Path>) {
    let red = Style::new().fg_color(Some(AnsiColor::Red.into())).bold();
    // Our own messages may span lines; nothing else they carry reaches the terminal raw.
    let message: Vec<String> = error.to_string().split('\n').map(escape_controls).collect();
    eprintln!("{red}error{red:#}: {}", message.join("\n"));
    if let CliError::Api { details, .. } = error {
        let prefix = file.map(|file| format!("{}: ", file.display())).unwrap_or_default();
        for problem in details["problems"].as_array().into_iter().flatten() {
            let path = printable(&problem["path"]);
            let path = if path.is_empty() { "(document)" } else { path.as_str() };
            eprintln!("  {prefix}{path}: {}", printable(&problem["message"]));
        }
        for blocked in details["blocked"].as_array().into_iter().flatten() {
            eprintln!("  {prefix}{}", blocked_line(blocked));
        }
        for verdict in details["verdicts"].as_array().into_iter().flatten() {
            eprintln!("  {}", verdict_line(verdict));
        }
        if let (Some(expected), Some(actual)) = (details["expected"].as_str(), details["actual"].as_str()) {
            eprintln!(
                "  expected plan {expected}\n  current plan  {actual}\n  the estate moved since the plan was made: plan again"
            );
        }
    }
}

fn blocked_line(blocked: &Value) -> String {
    let field = blocked["field"].as_str().map(|field| format!(" {field}")).unwrap_or_default();
    format!(
        "! {} {}{field}: {}",
        printable(&blocked["kind"]),
        printable(&blocked["key"]),
        printable(&blocked["reason"])
    )
}

// ---- rendering -----------------------------------------------------------------------------

pub fn style_for(text: &str) -> Style {
    let color = match text.chars().next() {
        Some('+') => AnsiColor::Green,
        Some('~') => AnsiColor::Yellow,
        Some('-') => AnsiColor::Red,
        Some('!') => AnsiColor::Magenta,
        _ => return Style::new(),
    };
    Style::new().fg_color(Some(color.into()))
}

/// A plan for people: changes grouped by kind, field changes, blocked reasons, a
/// summary line and the plan hash.
pub fn render_plan(plan: &Value) -> String {
    let mut out = String::new();
    let changes = plan["changes"].as_array().map(Vec::as_slice).unwrap_or_default();
    let left_alone = plan["leftAlone"].as_array().map(Vec::as_slice).unwrap_or_default();
    match (changes.is_empty(), left_alone.is_empty()) {
        (true, true) => out.push_str("No changes: the estate matches the document.\n"),
        (true, false) => out.push_str("No changes to make.\n"),
        (false, _) => {}
    }
    change_lines(&mut out, changes);
    // Blocked entries without a line above (none today) would otherwise go unseen.
    let shown = |blocked: &&Value| {
        changes.iter().any(|change| change["kind"] == blocked["kind"] && change["key"] == blocked["key"])
    };
    let blocked: Vec<&Value> =
        plan["blocked"].as_array().into_iter().flatten().filter(|blocked| !shown(blocked)).collect();
    for entry in blocked {
        let style = style_for("!");
        out.push_str(&format!("  {style}{}{style:#}\n", blocked_line(entry)));
    }
    if has(plan, "blocked") {
        let style = style_for("!");
        out.push_str(&format!("\n{style}Blocked{style:#}: apply refuses this plan until the ! lines are resolved.\n"));
    }
    let verdicts = plan["policy"]["verdicts"].as_array().map(Vec::as_slice).unwrap_or_default();
    if !verdicts.is_empty() {
        out.push('\n');
    }
    for verdict in verdicts {
        let line = verdict_line(verdict);
        let style = style_for(&line);
        out.push_str(&format!("  {style}{line}{style:#}\n"));
    }
    if plan["summary"]["denied"].as_u64().unwrap_or_default() > 0 {
        let style = style_for("!");
        out.push_str(&format!(
            "\n{style}Denied{style:#}: apply refuses this plan; only mandatory policies can be overridden \
             (fleet apply --override POLICY=REASON).\n"
        ));
    }
    for line in left_alone_lines(left_alone) {
        out.push_str(&format!("\n{line}"));
    }
    let summary = &plan["summary"];
    let number = |action: &str| summary[action].as_u64().unwrap_or_default();
    // Renames only when the document has some to make (SPEC §15).
    let renames = summary["rename"].as_u64().map(|renames| format!(", {renames} to rename")).unwrap_or_default();
    out.push_str(&format!(
        "\nPlan: {} to create, {} to update, {} to delete, {} to archive, {} to restore{renames}; {} unchanged, {} blocked.\n",
        number("create"),
        number("update"),
        number("delete"),
        number("archive"),
        number("restore"),
        number("unchanged"),
        number("blocked")
    ));
    if let (Some(denied), Some(warnings)) = (summary["denied"].as_u64(), summary["warnings"].as_u64()) {
        out.push_str(&format!(
            "Policies: {} denied, {} ({}).\n",
            denied,
            plural(warnings as usize, "warning"),
            printable(&plan["policy"]["digest"])
        ));
    }
    out.push_str(&format!("Plan hash: {}\n", printable(&plan["planHash"])));
    out
}

/// Changes grouped under their kind's heading, a line each: the line says it all (an
/// update's fields, a blocked change's reasons).
pub fn change_lines(out: &mut String, changes: &[Value]) {
    let mut heading = String::new();
    for change in changes {
        let this_heading = kind_heading(change["kind"].as_str().unwrap_or_default());
        if this_heading != heading {
            heading = this_heading;
            let bold = Style::new().bold();
            out.push_str(&format!("\n{bold}{heading}{bold:#}\n"));
        }
        let text = printable(&change["text"]);
        let style = style_for(&text);
        out.push_str(&format!("  {style}{text}{style:#}\n"));
    }
}

/// `fleet policy eval`: the verdicts `files` give on a plan saved by `fleet plan --out`,
/// planned again offline on the state saved with it, with these policies in force
/// instead of the server's (each as mandatory). Exit code 3 when they deny it.
pub fn policy_eval(files: &[PathBuf], saved: &Path, raw: bool) -> Result<u8, CliError> {
    let saved_plan = read_document(saved)?;
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

/// `! policy NAME: message (kind key)` for a denial, `?` for a warning (an advisory
/// policy's denial is one).
fn verdict_line(verdict: &Value) -> String {
    let denies = verdict["rule"] == "deny" && verdict["level"] != "advisory";
    let object = match (verdict["kind"].as_str(), verdict["key"].as_str()) {
        (Some(kind), Some(key)) => format!(" ({} {})", escape_controls(kind), escape_controls(key)),
        (Some(only), None) | (None, Some(only)) => format!(" ({})", escape_controls(only)),
        (None, None) => String::new(),
    };
    format!(
        "{} policy {}: {}{object}",
        if denies { "!" } else { "?" },
        printable(&verdict["policy"]),
        printable(&verdict["message"])
    )
}

/// The heading of a kind's changes, as the console has it: `Provider accounts`.
pub fn kind_heading(kind: &str) -> String {
    let noun = kind_noun(kind);
    let mut letters = noun.chars();
    let first = letters.next().map(|first| first.to_ascii_uppercase().to_string()).unwrap_or_default();
    format!("{first}{}s", letters.as_str())
}

/// A kind for people, from its camelCase name: `owner quota`, `provider account`.
pub fn kind_noun(kind: &str) -> String {
    fleet_guest::grammar::camel_words(kind, ' ')
}

/// `1 live flavor not in the document is left alone; --prune would delete it.`, one
/// line per kind and action.
fn left_alone_lines(left_alone: &[Value]) -> Vec<String> {
    let mut groups: Vec<(&str, &str, usize)> = Vec::new();
    for entry in left_alone {
        let (kind, action) = (entry["kind"].as_str().unwrap_or_default(), entry["action"].as_str().unwrap_or_default());
        match groups.iter_mut().find(|(k, a, _)| *k == kind && *a == action) {
            Some(group) => group.2 += 1,
            None => groups.push((kind, action, 1)),
        }
    }
    groups
        .into_iter()
        .map(|(kind, action, count)| {
            let (is, them) = if count == 1 { ("is", "it") } else { ("are", "them") };
            let action = if action == "archive" { "archive" } else { "delete" };
            format!(
                "{} not in the document {is} left alone; --prune would {action} {them}.\n",
                plural(count, &format!("live {}", kind_noun(kind)))
            )
        })
        .collect()
}

fn render_status(status: &Value) -> String {
    let mut out = String::new();
    let Some(applied) = status.get("applied") else {
        return "No document has been applied to this tenant.\n".into();
    };
    out.push_str(&format!(
        "Applied {} by {} at {} ({}, prune {}): revision {}{}.\n",
        printable(&applied["planHash"]),
        printable(&applied["appliedBy"]),
        printable(&applied["appliedAt"]),
        plural(applied["calls"].as_u64().unwrap_or_default() as usize, "call"),
        if applied["prune"] == true { "on" } else { "off" },
        applied["revision"].as_u64().unwrap_or_default(),
        if applied["heal"] == true { ", which fleet.drift heals" } else { "" },
    ));
    let checked_at = printable(&status["checkedAt"]);
    match status.get("drift") {
        Some(drift) => {
            let style = style_for("!");
            out.push_str(&format!(
                "{style}Drifted{style:#} since {}: the check at {checked_at} found the estate differing from the applied document:\n",
                printable(&drift["since"])
            ));
            for change in drift["changes"].as_array().into_iter().flatten() {
                out.push_str(&format!("  {}\n", drift_line(change)));
            }
        }
        None => out.push_str(&format!(
            "In sync with the applied document at the last check, {checked_at} (`fleet status --refresh` checks now).\n"
        )),
    }
    out
}

/// `pool gpu-a: gpus 64 → 48, changed by bob via compute.pools.update at 12:03:00Z`: the
/// applied value, then the actual one.
fn drift_line(change: &Value) -> String {
    let fields: Vec<String> = change["fields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|field| {
            format!("{} {} → {}", printable(&field["field"]), shown(&field["applied"]), shown(&field["actual"]))
        })
        .collect();
    let what = if fields.is_empty() {
        printable(&change["text"])
    } else {
        format!(
            "{} {}: {}",
            kind_noun(change["kind"].as_str().unwrap_or_default()),
            printable(&change["key"]),
            fields.join(", ")
        )
    };
    match change["changedBy"].as_str() {
        Some(principal) => format!(
            "{what}, changed by {} via {} at {}",
            escape_controls(principal),
            printable(&change["method"]),
            printable(&change["changedAt"])
        ),
        None => format!("{what} (no record of who changed it)"),
    }
}

/// A value for people: strings quoted only when empty, absent as `(none)`.
pub fn shown(value: &Value) -> String {
    match value {
        Value::Null => "(none)".into(),
        Value::String(text) if text.is_empty() => "\"\"".into(),
        Value::String(text) => escape_controls(text),
        other => escape_controls(&other.to_string()),
    }
}

pub fn print_json(value: &Value) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(|error| CliError::Input(error.to_string()))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}").map_err(|error| CliError::Transport(error.to_string()))
}

// ---- commands ---------------------------------------------------------------------------------

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

/// Reads the FleetConfig of a `plan` or `apply` file: the document itself, not wrapped.
fn read_fleet_config(file: &Path) -> Result<Value, CliError> {
    let document = read_document(file)?;
    if document.get("document").is_some_and(Value::is_object) {
        return Err(CliError::Input(format!(
            "{}: the file wraps its document in {{\"document\": ...}}; a FleetConfig file is the document \
             itself: move its sections (sites, pools, ...) to the top level",
            file.display()
        )));
    }
    Ok(document)
}

fn has(plan: &Value, list: &str) -> bool {
    plan[list].as_array().is_some_and(|items| !items.is_empty())
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

pub fn plan(client: &Client, file: &Path, prune: bool, out: Option<&Path>, raw: bool) -> Result<u8, CliError> {
    let document = read_fleet_config(file)?;
    let plan = client.call("fleet/plan", &json!({"document": document, "prune": prune}))?;
    if let Some(out) = out {
        // The state it was planned on too, for `fleet policy eval` to judge offline.
        let state = client.call("preview/snapshot", &json!({}))?;
        write_document(out, &json!({"document": document, "prune": prune, "plan": plan, "state": state}))?;
    }
    if raw {
        print_json(&plan)?;
    } else {
        print!("{}", render_plan(&plan));
        if let Some(out) = out {
            println!(
                "Saved to {}; apply exactly this plan with `fleet apply --plan {}`.",
                out.display(),
                out.display()
            );
        }
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
    /// `fleet rollback N`: revision N's document, with its prune flag, applied to the
    /// estate of today as any document is (SPEC §15).
    Revision(u64),
}

/// How `fleet apply` gets its go-ahead (SPEC §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirm {
    /// `--yes`: apply without asking.
    Given,
    /// Ask on the terminal; refuse without one.
    Ask,
}

/// What an apply request carries besides its document and plan: `--override` and
/// `--heal`.
pub struct Extra {
    /// `[{"policy", "reason"}]`.
    pub overrides: Value,
    pub heal: bool,
}

impl Extra {
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
        ApplySource::Revision(number) => {
            let revision = client.call("fleet/revision", &json!({ "revision": number }))?;
            let (document, prune) = (revision["document"].clone(), revision["prune"] == true);
            apply_document(client, document, prune, None, extra, confirm, &mut shown)?
        }
    };
    if raw {
        print_json(&applied)?;
    } else {
        if !shown {
            print!("{}", render_plan(&applied["plan"]));
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
            print!("{}", render_plan(&plan));
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
    let saved = read_document(file)?;
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
    let status = client.call("fleet/status", &request)?;
    if raw {
        print_json(&status)?;
    } else {
        print!("{}", render_status(&status));
    }
    Ok(if status.get("drift").is_some() { EXIT_CHANGES } else { EXIT_OK })
}

/// `1 call`, `2 calls`.
pub fn plural(count: usize, noun: &str) -> String {
    if count == 1 { format!("1 {noun}") } else { format!("{count} {noun}s") }
}
