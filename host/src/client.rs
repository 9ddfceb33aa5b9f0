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

/// Exit codes: `plan` 0 = no changes, 2 = changes, 3 = blocked; any error 1.
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
}

impl Client {
    pub fn new(server: &str, token: Option<String>) -> Result<Client, CliError> {
        let server: Uri = server.parse().map_err(|error| CliError::Input(format!("--server {server:?}: {error}")))?;
        match server.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(CliError::Input("https is not supported here: fleet serves plain HTTP on a trusted network or behind a TLS proxy; use http://".into()));
            }
            _ => return Err(CliError::Input(format!("--server {server:?} must be http://HOST:PORT"))),
        }
        Ok(Client { server, token })
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
            let port = authority.port_u16().unwrap_or(80);
            let stream = tokio::net::TcpStream::connect((authority.host(), port))
                .await
                .map_err(|error| CliError::Transport(format!("cannot reach {}: {error}", self.server)))?;
            let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|error| CliError::Transport(error.to_string()))?;
            tokio::spawn(connection);
            let response =
                sender.send_request(request).await.map_err(|error| CliError::Transport(error.to_string()))?;
            let status = response.status();
            let bytes = response.into_body().collect().await.map_err(|error| CliError::Transport(error.to_string()))?;
            Ok::<_, CliError>((status, bytes.to_bytes()))
        })?;
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|_| CliError::Transport(format!("the server answered {status} with a body that is not JSON")))?;
        if status.is_success() {
            return Ok(value);
        }
        let error = &value["error"];
        Err(CliError::Api {
            code: escape_controls(error["code"].as_str().unwrap_or("UNKNOWN")),
            message: printable(&error["message"]),
            details: error["details"].clone(),
        })
    }
}

/// A string value from the server, safe to print on a terminal: control characters
/// (escape sequences, bells, carriage returns) are shown escaped, as `\u{1b}`.
fn printable(value: &Value) -> String {
    escape_controls(value.as_str().unwrap_or_default())
}

fn escape_controls(text: &str) -> String {
    if !text.contains(char::is_control) {
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

fn write_document(path: &Path, value: &Value) -> Result<(), CliError> {
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
    eprintln!("{red}error{red:#}: {}", escape_controls(&error.to_string()));
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

fn style_for(text: &str) -> Style {
    let color = match text.chars().next() {
        Some('+') => AnsiColor::Green,
        Some('~') => AnsiColor::Yellow,
        Some('-') => AnsiColor::Red,
        Some('!') => AnsiColor::Magenta,
        _ => return Style::new(),
    };
    Style::new().fg_color(Some(color.into()))
}

fn show(value: &Value) -> String {
    match value {
        Value::Null => "(none)".into(),
        Value::String(text) => format!("{text:?}"),
        other => other.to_string(),
    }
}

/// A plan for people: changes grouped by kind, field changes, blocked reasons, a
/// summary line and the plan hash.
pub fn render_plan(plan: &Value) -> String {
    let mut out = String::new();
    let changes = plan["changes"].as_array().cloned().unwrap_or_default();
    if changes.is_empty() {
        out.push_str("No changes: the estate matches the document.\n");
    }
    let mut kind = String::new();
    for change in &changes {
        let this_kind = printable(&change["kind"]);
        if this_kind != kind {
            kind = this_kind;
            let bold = Style::new().bold();
            out.push_str(&format!("\n{bold}{kind}{bold:#}\n"));
        }
        let text = printable(&change["text"]);
        let style = style_for(&text);
        out.push_str(&format!("  {style}{text}{style:#}\n"));
        if matches!(change["action"].as_str(), Some("update")) {
            for field in change["fields"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "      {}: {} → {}\n",
                    printable(&field["field"]),
                    show(&field["from"]),
                    show(&field["to"])
                ));
            }
        }
    }
    let blocked = plan["blocked"].as_array().cloned().unwrap_or_default();
    if !blocked.is_empty() {
        let style = style_for("!");
        out.push_str(&format!("\n{style}Blocked{style:#} (apply refuses the plan until these are resolved):\n"));
        for entry in &blocked {
            out.push_str(&format!("  {style}{}{style:#}\n", blocked_line(entry)));
        }
    }
    let summary = &plan["summary"];
    let number = |action: &str| summary[action].as_u64().unwrap_or_default();
    out.push_str(&format!(
        "\nPlan: {} to create, {} to update, {} to delete, {} to archive, {} to restore; {} unchanged, {} blocked.\n",
        number("create"),
        number("update"),
        number("delete"),
        number("archive"),
        number("restore"),
        number("unchanged"),
        number("blocked")
    ));
    out.push_str(&format!("Plan hash: {}\n", printable(&plan["planHash"])));
    out
}

fn render_status(status: &Value) -> String {
    let mut out = String::new();
    match status.get("applied") {
        Some(applied) => out.push_str(&format!(
            "Applied {} by {} at {} ({} calls, prune {}).\n",
            printable(&applied["planHash"]),
            printable(&applied["appliedBy"]),
            printable(&applied["appliedAt"]),
            applied["calls"],
            if applied["prune"] == true { "on" } else { "off" },
        )),
        None => out.push_str("No document has been applied to this tenant.\n"),
    }
    match status.get("drift") {
        Some(drift) => {
            let style = style_for("!");
            out.push_str(&format!(
                "{style}Drifted{style:#}: the last check at {} found the estate differing from the applied document:\n",
                printable(&drift["checkedAt"])
            ));
            for change in drift["changes"].as_array().into_iter().flatten() {
                let text = printable(&change["text"]);
                let style = style_for(&text);
                out.push_str(&format!("  {style}{text}{style:#}\n"));
            }
        }
        None if status.get("applied").is_some() => out.push_str("In sync with the applied document.\n"),
        None => {}
    }
    out
}

fn print_json(value: &Value) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(|error| CliError::Input(error.to_string()))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}").map_err(|error| CliError::Transport(error.to_string()))
}

// ---- commands ---------------------------------------------------------------------------------

pub fn export(client: &Client, output: Option<&Path>) -> Result<u8, CliError> {
    let exported = client.call("fleet/export", &json!({}))?;
    if let Some(missing) = exported["missing"].as_array().filter(|missing| !missing.is_empty()) {
        eprintln!("note: this deployment does not run the modules of {}", Value::Array(missing.clone()));
    }
    match output {
        Some(path) => write_document(path, &exported["document"])?,
        None => print_json(&exported["document"])?,
    }
    Ok(EXIT_OK)
}

pub fn plan(client: &Client, file: &Path, prune: bool, out: Option<&Path>, raw: bool) -> Result<u8, CliError> {
    let document = read_document(file)?;
    let plan = client.call("fleet/plan", &json!({"document": document, "prune": prune}))?;
    if let Some(out) = out {
        write_document(out, &json!({"document": document, "prune": prune, "plan": plan}))?;
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
    let has = |list: &str| plan[list].as_array().is_some_and(|items| !items.is_empty());
    Ok(if has("blocked") {
        EXIT_BLOCKED
    } else if has("calls") {
        EXIT_CHANGES
    } else {
        EXIT_OK
    })
}

/// What `fleet apply` applies: a document file, or a plan saved by `fleet plan --out`.
pub enum ApplySource {
    Document { file: PathBuf, prune: bool, plan_hash: Option<String> },
    SavedPlan(PathBuf),
}

pub fn apply(client: &Client, source: &ApplySource, raw: bool) -> Result<u8, CliError> {
    let request = match source {
        ApplySource::Document { file, prune, plan_hash } => {
            let mut request = json!({"document": read_document(file)?, "prune": prune});
            if let Some(hash) = plan_hash {
                request["planHash"] = json!(hash);
            }
            request
        }
        ApplySource::SavedPlan(file) => {
            let saved = read_document(file)?;
            let hash = saved["plan"]["planHash"].as_str().ok_or_else(|| {
                CliError::Input(format!(
                    "{}: not a plan saved by `fleet plan --out` (no plan.planHash)",
                    file.display()
                ))
            })?;
            json!({"document": saved["document"], "prune": saved["prune"].as_bool().unwrap_or(false), "planHash": hash})
        }
    };
    let applied = client.call("fleet/apply", &request)?;
    if raw {
        print_json(&applied)?;
    } else {
        print!("{}", render_plan(&applied["plan"]));
        let style = Style::new().fg_color(Some(AnsiColor::Green.into())).bold();
        println!("{style}Applied {} calls.{style:#}", applied["applied"]);
    }
    Ok(EXIT_OK)
}

pub fn status(client: &Client, raw: bool) -> Result<u8, CliError> {
    let status = client.call("fleet/status", &json!({}))?;
    if raw {
        print_json(&status)?;
    } else {
        print!("{}", render_status(&status));
    }
    Ok(EXIT_OK)
}
