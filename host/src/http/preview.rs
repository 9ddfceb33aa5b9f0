//! The browser plan preview: the page and its scripts (embedded in the binary) and the
//! planner component transpiled by jco (read from the preview directory), served
//! without authentication because none of it holds tenant data.
//!
//! The page itself fetches the tenant's state with the token the user types and plans
//! in the browser; see `preview/` and `docs/decisions/0004-browser-preview.md`.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderName, HeaderValue, X_CONTENT_TYPE_OPTIONS};
use hyper::{Response, StatusCode};

use crate::api::{ApiError, Code};
use crate::http::{Body, error_response};

/// The page.
pub const PAGE_PATH: &str = "/preview";
/// The transpiled component: `fleet_planner.js` and its core modules.
const ASSETS_PREFIX: &str = "/preview/assets/";

/// The page's own files, compiled in so that the page always matches the server.
const FILES: [(&str, &str, &str); 4] = [
    ("/preview", "text/html; charset=utf-8", include_str!("../../../preview/index.html")),
    ("/preview/app.js", "text/javascript; charset=utf-8", include_str!("../../../preview/app.js")),
    ("/preview/planner.js", "text/javascript; charset=utf-8", include_str!("../../../preview/planner.js")),
    ("/preview/style.css", "text/css; charset=utf-8", include_str!("../../../preview/style.css")),
];

/// Scripts only from here, WebAssembly compiled from fetched bytes, calls only to this
/// server: the token typed into the page can go nowhere else.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// How to build the assets, for the page and for a missing asset.
pub const BUILD_HINT: &str = "the preview assets are not built: run `npm ci && npm run build` in preview/ \
     (needs Node.js and npm), or serve with --preview-dir pointing at a built copy";

/// Where `preview/build.sh` writes the assets in this workspace: the default of
/// `serve --preview-dir`.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/preview")
}

/// Whether the transpiled planner the page loads is in `preview_dir`.
pub fn is_built(preview_dir: &Path) -> bool {
    preview_dir.join("fleet_planner.js").is_file()
}

/// Whether `path` (of a GET) belongs to the preview.
pub fn owns(path: &str) -> bool {
    path == PAGE_PATH || path.starts_with("/preview/")
}

/// Answers a GET under `/preview`.
pub async fn serve(preview_dir: &Path, path: &str) -> Response<Body> {
    let path = if path == "/preview/" { PAGE_PATH } else { path };
    if let Some((_, content_type, text)) = FILES.iter().find(|(file_path, _, _)| *file_path == path) {
        let mut response = response(Bytes::from_static(text.as_bytes()), content_type);
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
        return error_response(&ApiError::not_found(format!("no preview file at {path}")));
    };
    let Some((file, content_type)) = asset(preview_dir, name) else {
        return error_response(&ApiError::not_found(format!("no preview asset named {name:?}")));
    };
    match tokio::task::spawn_blocking(move || std::fs::read(file)).await {
        Ok(Ok(bytes)) => response(Bytes::from(bytes), content_type),
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::NotFound => {
            error_response(&ApiError::not_found(format!("{name}: {BUILD_HINT}")))
        }
        Ok(Err(error)) => {
            tracing::error!(%error, name, dir = %preview_dir.display(), "reading a preview asset failed");
            error_response(&ApiError::new(Code::Internal, "the preview asset could not be read"))
        }
        Err(error) => {
            tracing::error!(%error, name, "reading a preview asset panicked");
            error_response(&ApiError::new(Code::Internal, "the preview asset could not be read"))
        }
    }
}

/// The file and content type of an asset: a plain name of the preview directory, or of
/// a transpiled plugin's directory, `plugins/<sha256 hex>/<plain name>`.
fn asset(preview_dir: &Path, name: &str) -> Option<(PathBuf, &'static str)> {
    if let Some(rest) = name.strip_prefix("plugins/") {
        let (digest, file) = rest.split_once('/')?;
        let hex = digest.len() == 64 && digest.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'));
        return hex.then(|| asset_type(file).map(|ty| (preview_dir.join("plugins").join(digest).join(file), ty)))?;
    }
    asset_type(name).map(|ty| (preview_dir.join(name), ty))
}

/// The content type of an asset name, or `None` for anything that is not a plain
/// `.js` or `.wasm` file name of the preview directory itself: no separators, no dot
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

fn response(body: Bytes, content_type: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(body).boxed());
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Rebuilt assets and a new binary must be picked up on reload.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

#[cfg(test)]
mod tests {
    use super::{asset, asset_type};
    use std::path::Path;

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
