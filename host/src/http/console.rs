//! The console (SPEC §16, §19): the page, its scripts and the planner component
//! transpiled by jco, all embedded in the binary when the build had Node.js (or read
//! from `--console-dir`), served without authentication because none of it holds
//! tenant data, each with its content's hash as its `ETag`. `/preview`, the page's old
//! address, redirects here.
//!
//! The page itself calls the API with the token the user signs in with and plans in the
//! browser; see `console/`, `docs/decisions/0004-browser-preview.md` and
//! `docs/decisions/0017-console.md`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{
    ACCEPT_ENCODING, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_TYPE, ETAG, HeaderName, HeaderValue, IF_NONE_MATCH,
    LOCATION, VARY, X_CONTENT_TYPE_OPTIONS,
};
use hyper::{HeaderMap, Response, StatusCode};

use crate::api::{ApiError, Code};
use crate::http::{Body, error_response};

/// The page.
pub const PAGE_PATH: &str = "/console";
/// The page's old address, which redirects to it.
pub const OLD_PATH: &str = "/preview";
/// The transpiled component: `fleet_planner.js` and its core modules.
const ASSETS_PREFIX: &str = "/console/assets/";

/// The page's own files, compiled in so that the page always matches the server.
macro_rules! scripts {
    ($($name:literal),* $(,)?) => {
        [$((concat!("/console/", $name), "text/javascript; charset=utf-8", include_str!(concat!("../../../console/", $name)))),*]
    };
}
const SCRIPTS: [(&str, &str, &str); 14] = scripts![
    "app.js",
    "session.js",
    "dom.js",
    "planner.js",
    "load.js",
    "render.js",
    "plan.js",
    "status.js",
    "estate.js",
    "history.js",
    "proposals.js",
    "webhooks.js",
    "sources.js",
    "capacity.js",
];
const PAGES: [(&str, &str, &str); 2] = [
    ("/console", "text/html; charset=utf-8", include_str!("../../../console/index.html")),
    ("/console/style.css", "text/css; charset=utf-8", include_str!("../../../console/style.css")),
];

/// Scripts only from here, WebAssembly compiled from fetched bytes, calls only to this
/// server: the token typed into the page can go nowhere else.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// How to build the assets, for the page and for a missing asset.
pub const BUILD_HINT: &str = "the console's assets are not built: install Node.js 20+ and npm and build again \
     (cargo build runs console/build.sh), or serve with --console-dir pointing at a built copy";

/// The transpiled component and plugins built with this binary (`build.rs`).
mod built {
    include!(concat!(env!("OUT_DIR"), "/console_assets.rs"));
}

/// Whether the transpiled planner the page loads is there: in `console_dir` when given
/// (`--console-dir`), else embedded in this binary.
pub fn is_built(console_dir: Option<&Path>) -> bool {
    match console_dir {
        Some(dir) => dir.join("fleet_planner.js").is_file(),
        None => built::ASSETS.iter().any(|(name, _)| *name == "fleet_planner.js"),
    }
}

/// A file the binary carries: its content type, bytes (gzipped for the built assets)
/// and `ETag`.
struct Embedded {
    content_type: &'static str,
    bytes: &'static [u8],
    gzipped: bool,
    etag: HeaderValue,
}

/// Every file the binary carries, by path: the page's own, and the built assets unless
/// `--console-dir` serves them. Hashed once, at the first request.
fn embedded() -> &'static HashMap<String, Embedded> {
    static EMBEDDED: OnceLock<HashMap<String, Embedded>> = OnceLock::new();
    EMBEDDED.get_or_init(|| {
        let own = PAGES
            .iter()
            .chain(&SCRIPTS)
            .map(|(path, content_type, text)| ((*path).to_owned(), *content_type, text.as_bytes(), false));
        let assets = built::ASSETS.iter().filter_map(|(name, bytes)| {
            let content_type = asset_type(name.rsplit('/').next().unwrap_or_default())?;
            Some((format!("{ASSETS_PREFIX}{name}"), content_type, *bytes, true))
        });
        own.chain(assets)
            .map(|(path, content_type, bytes, gzipped)| {
                (path, Embedded { content_type, bytes, gzipped, etag: etag(bytes) })
            })
            .collect()
    })
}

/// The comma-separated members of every `name` header of a request.
fn listed(request: &HeaderMap, name: HeaderName) -> impl Iterator<Item = &str> {
    request.get_all(name).into_iter().filter_map(|value| value.to_str().ok()).flat_map(|value| value.split(','))
}

/// An `ETag`'s value without its weak mark: what `If-None-Match` compares.
fn weak_of(etag: &HeaderValue) -> &str {
    etag.to_str().unwrap_or_default().trim_start_matches("W/")
}

/// A strong validator of `bytes`: the first 128 bits of their SHA-256.
fn etag(bytes: &[u8]) -> HeaderValue {
    let digest = crate::sandbox::sha256_hex(bytes);
    HeaderValue::from_str(&format!("\"{}\"", &digest[..32])).expect("hex is a valid header value")
}

/// Whether `path` (of a GET) belongs to the console, at its address or its old one.
pub fn owns(path: &str) -> bool {
    [PAGE_PATH, OLD_PATH]
        .iter()
        .any(|page| path.strip_prefix(page).is_some_and(|rest| rest.is_empty() || rest.starts_with('/')))
}

/// Answers a GET under `/console` (and `/preview`, with a redirect to the page): from
/// what the binary carries, the built assets from `console_dir` when given.
pub async fn serve(console_dir: Option<&Path>, path: &str, headers: &HeaderMap) -> Response<Body> {
    if path == OLD_PATH || path.starts_with("/preview/") {
        return redirect(PAGE_PATH);
    }
    let path = if path == "/console/" { PAGE_PATH } else { path };
    let from_dir = console_dir.filter(|_| path.starts_with(ASSETS_PREFIX));
    if from_dir.is_none()
        && let Some(file) = embedded().get(path)
    {
        let mut response = match file.gzipped {
            false => response(Bytes::from_static(file.bytes), file.content_type, file.etag.clone(), headers),
            true => gzipped(file, headers),
        };
        if path == PAGE_PATH {
            response.headers_mut().insert(
                HeaderName::from_static("content-security-policy"),
                HeaderValue::from_static(CONTENT_SECURITY_POLICY),
            );
            response
                .headers_mut()
                .insert(HeaderName::from_static("referrer-policy"), HeaderValue::from_static("no-referrer"));
        }
        return response;
    }
    let Some(name) = path.strip_prefix(ASSETS_PREFIX) else {
        return error_response(&ApiError::not_found(format!("no console file at {path}")));
    };
    let found = from_dir.and_then(|dir| asset(dir, name));
    let Some((file, content_type)) = found else {
        let unbuilt = console_dir.is_none() && !is_built(None) && asset(Path::new(""), name).is_some();
        let why = if unbuilt { BUILD_HINT } else { "no console asset named" };
        return error_response(&ApiError::not_found(format!("{why}: {name:?}")));
    };
    match tokio::task::spawn_blocking(move || std::fs::read(file)).await {
        Ok(Ok(bytes)) => {
            let tag = etag(&bytes);
            response(Bytes::from(bytes), content_type, tag, headers)
        }
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::NotFound => {
            error_response(&ApiError::not_found(format!("{name}: {BUILD_HINT}")))
        }
        Ok(Err(error)) => {
            tracing::error!(%error, name, dir = ?console_dir, "reading a console asset failed");
            error_response(&ApiError::new(Code::Internal, "the console asset could not be read"))
        }
        Err(error) => {
            tracing::error!(%error, name, "reading a console asset panicked");
            error_response(&ApiError::new(Code::Internal, "the console asset could not be read"))
        }
    }
}

/// The file and content type of an asset: a plain name of the console directory, or of
/// a transpiled plugin's directory, `plugins/<sha256 hex>/<plain name>`.
fn asset(console_dir: &Path, name: &str) -> Option<(PathBuf, &'static str)> {
    if let Some(rest) = name.strip_prefix("plugins/") {
        let (digest, file) = rest.split_once('/')?;
        let hex = digest.len() == 64 && digest.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'));
        return hex.then(|| asset_type(file).map(|ty| (console_dir.join("plugins").join(digest).join(file), ty)))?;
    }
    asset_type(name).map(|ty| (console_dir.join(name), ty))
}

/// The content type of an asset name, or `None` for anything that is not a plain
/// `.js` or `.wasm` file name of the console directory itself: no separators, no dot
/// files, no escapes, hence no way out of the directory.
fn asset_type(name: &str) -> Option<&'static str> {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
    if !plain {
        return None;
    }
    if name.ends_with(".wasm") {
        Some("application/wasm")
    } else if name.ends_with(".js") || name.ends_with(".mjs") {
        Some("text/javascript; charset=utf-8")
    } else {
        None
    }
}

/// A permanent redirect (the method kept) to `location`.
fn redirect(location: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::new()).boxed());
    *response.status_mut() = StatusCode::PERMANENT_REDIRECT;
    response.headers_mut().insert(LOCATION, HeaderValue::from_static(location));
    response
}

/// A gzipped asset as the client takes it: as it is, when it accepts gzip (every
/// browser does), else unpacked, with the weak form of its `ETag` (the same content).
fn gzipped(file: &Embedded, request: &HeaderMap) -> Response<Body> {
    let accepts_gzip = listed(request, ACCEPT_ENCODING)
        .any(|coding| coding.split(';').next().is_some_and(|coding| coding.trim().eq_ignore_ascii_case("gzip")));
    let mut response = if accepts_gzip {
        let mut response = response(Bytes::from_static(file.bytes), file.content_type, file.etag.clone(), request);
        response.headers_mut().insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        response
    } else {
        let mut unpacked = Vec::new();
        if let Err(error) = std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(file.bytes), &mut unpacked) {
            tracing::error!(%error, "an embedded console asset does not unpack");
            return error_response(&ApiError::new(Code::Internal, "the console asset could not be read"));
        }
        let weak = HeaderValue::from_bytes(&[b"W/", file.etag.as_bytes()].concat()).unwrap_or(file.etag.clone());
        response(Bytes::from(unpacked), file.content_type, weak, request)
    };
    response.headers_mut().insert(VARY, HeaderValue::from_static("accept-encoding"));
    response
}

/// The file, or `304 Not Modified` when the client's copy has its `etag`.
fn response(body: Bytes, content_type: &'static str, etag: HeaderValue, request: &HeaderMap) -> Response<Body> {
    let fresh = listed(request, IF_NONE_MATCH)
        .any(|tag| tag.trim() == "*" || tag.trim().trim_start_matches("W/") == weak_of(&etag));
    let mut response = Response::new(Full::new(if fresh { Bytes::new() } else { body }).boxed());
    *response.status_mut() = if fresh { StatusCode::NOT_MODIFIED } else { StatusCode::OK };
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(ETAG, etag);
    // Revalidated on every load: a new binary or rebuilt assets are picked up, an
    // unchanged file costs a 304.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

#[cfg(test)]
mod tests {
    use super::{asset, asset_type, owns};
    use std::path::Path;

    #[test]
    fn the_console_owns_its_paths_and_its_old_ones_only() {
        for path in ["/console", "/console/", "/console/app.js", "/preview", "/preview/app.js"] {
            assert!(owns(path), "{path}");
        }
        for path in ["/consoles", "/previewer", "/", "/api/console"] {
            assert!(!owns(path), "{path}");
        }
    }

    #[test]
    fn assets_are_plain_js_and_wasm_names_only() {
        assert_eq!(asset_type("fleet_planner.js"), Some("text/javascript; charset=utf-8"));
        assert_eq!(asset_type("fleet_planner.core2.wasm"), Some("application/wasm"));
        for name in [
            "",
            "../fleet.db",
            "..%2ffleet.db",
            "%2e%2e/x.js",
            "interfaces/compute-fleet-state.d.ts",
            "a/b.js",
            "a\\b.js",
            ".hidden.js",
            "..",
            "fleet_planner.d.ts",
            "fleet.db",
            "/etc/passwd",
        ] {
            assert_eq!(asset_type(name), None, "{name:?} must not be served");
        }
    }

    #[test]
    fn plugin_assets_are_plain_names_under_a_digest() {
        let digest = "ab".repeat(32);
        let (file, _) = asset(Path::new("/p"), &format!("plugins/{digest}/plugin.core.wasm")).unwrap();
        assert_eq!(file, Path::new("/p/plugins").join(&digest).join("plugin.core.wasm"));
        for name in [
            format!("plugins/{digest}/../../fleet.db"),
            format!("plugins/{digest}/a/plugin.js"),
            format!("plugins/{}/plugin.js", "AB".repeat(32)),
            "plugins/../plugin.js".to_owned(),
            "plugins/ab/plugin.js".to_owned(),
        ] {
            assert!(asset(Path::new("/p"), &name).is_none(), "{name:?} must not be served");
        }
    }
}
