//! The operator's client of a running server: its errors and exit codes, the HTTP(S)
//! client, FleetConfig documents read from a file or a directory, and what is printed
//! of the server's strings (escaped, so that a terminal is safe).

use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use fleet::fleet::files;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Uri};
use hyper_util::rt::TokioIo;
use serde_json::Value;

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

pub fn escape_controls(text: &str) -> String {
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

pub fn is_yaml_path(path: &Path) -> bool {
    files::is_yaml_name(&path.to_string_lossy())
}

/// Reads a FleetConfig document (SPEC §20.1): a JSON or YAML file, or a directory whose
/// `*.yaml`, `*.yml` and `*.json` files, hidden ones and subdirectories left out, are
/// merged section by section ([`files::merge`]). Every file is read whole, as the
/// document itself (not wrapped in `{"document": ...}`), before anything is sent.
pub fn read_document(path: &Path) -> Result<Value, CliError> {
    let paths = if path.is_dir() { document_files(path)? } else { vec![path.to_owned()] };
    let mut read = Vec::with_capacity(paths.len());
    for file in paths {
        let name = file.display().to_string();
        let text = read_text(&file, files::MAX_FILE_BYTES as u64)?;
        let document = files::parse(&name, &text).map_err(|error| CliError::Input(error.to_string()))?;
        if document.get("document").is_some_and(Value::is_object) {
            return Err(CliError::Input(format!(
                "{name}: the file wraps its document in {{\"document\": ...}}; a FleetConfig file is the document \
                 itself: move its sections (sites, pools, ...) to the top level"
            )));
        }
        read.push((name, document));
    }
    files::merge(read).map_err(|problems| {
        // Each problem names its files; a directory's are listed under it.
        let (mut lines, indent) = match path.is_dir() {
            true => (vec![format!("{}: its files do not merge into one document", path.display())], "  "),
            false => (Vec::new(), ""),
        };
        lines.extend(problems.listed().iter().map(|problem| match problem.path.as_str() {
            "" => format!("{indent}{}", problem.message),
            at => format!("{indent}{at}: {}", problem.message),
        }));
        if problems.total() > problems.listed().len() {
            lines.push(format!("{indent}and {} more", problems.total() - problems.listed().len()));
        }
        CliError::Input(lines.join("\n"))
    })
}

/// The files of the document that is the directory `dir`, sorted by name: those
/// [`files::is_document_file`] names, not a directory among them, nothing below.
fn document_files(dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    let unreadable = |error: std::io::Error| CliError::Input(format!("{}: {error}", dir.display()));
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        let path = entry.path();
        if files::is_document_file(&entry.file_name().to_string_lossy()) && !path.is_dir() {
            found.push(path);
        }
    }
    if found.is_empty() {
        return Err(CliError::Input(format!(
            "{}: no document file in this directory (a directory's document is its *.yaml, *.yml and *.json \
             files; hidden files and subdirectories are not read)",
            dir.display()
        )));
    }
    found.sort();
    Ok(found)
}

/// A file's text, refused past `limit` bytes without reading more of it than that.
fn read_text(path: &Path, limit: u64) -> Result<String, CliError> {
    use std::io::Read as _;
    let failed = |error: std::io::Error| CliError::Input(format!("{}: {error}", path.display()));
    let mut bytes = Vec::new();
    std::fs::File::open(path).map_err(failed)?.take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(failed)?;
    if bytes.len() as u64 > limit {
        return Err(CliError::Input(format!(
            "{}: larger than {} MiB, the most one file of a document may hold (what a server accepts by default); \
             split it over the files of a directory",
            path.display(),
            limit >> 20
        )));
    }
    String::from_utf8(bytes).map_err(|_| CliError::Input(format!("{}: not UTF-8 text", path.display())))
}

/// Reads a plan saved by `fleet plan --out`, whose saved state carries the policies in
/// force: their sources are text with line breaks.
pub fn read_saved_plan(path: &Path) -> Result<Value, CliError> {
    let text = read_text(path, u64::MAX)?;
    let reading = fleet_guest::json::Reading { multiline: &["/state/policies/*/source"], budget: usize::MAX };
    files::parse_with(&path.display().to_string(), &text, &reading).map_err(|error| CliError::Input(error.to_string()))
}

pub fn write_document(path: &Path, value: &Value) -> Result<(), CliError> {
    let text = if is_yaml_path(path) {
        serde_yaml_ng::to_string(value).map_err(|error| CliError::Input(error.to_string()))?
    } else {
        serde_json::to_string_pretty(value).map_err(|error| CliError::Input(error.to_string()))? + "\n"
    };
    std::fs::write(path, text).map_err(|error| CliError::Input(format!("{}: {error}", path.display())))
}

pub fn print_json(value: &Value) -> Result<(), CliError> {
    let mut text = serde_json::to_string_pretty(value).map_err(|error| CliError::Input(error.to_string()))?;
    text.push('\n');
    write_stdout(text.as_bytes()).map_err(|error| CliError::Transport(error.to_string()))
}

/// Writes `bytes` to stdout. A reader that has gone (`fleet history --json | head`) is
/// no error: the output ends there, quietly, as `print!` ends it.
pub fn write_stdout(bytes: &[u8]) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        written => written,
    }
}
