//! The webhooks' HTTP client: one attempt at sending a delivery, from resolving its
//! URL's host (to addresses `crate::reach` admits) through TLS for `https` to reading
//! the answer, all within a time and at most [`READ_LIMIT`] of it. It knows nothing
//! of the outbox: what it sends is a [`Message`], what it answers a status or why none.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::header::{CONTENT_TYPE, HOST, USER_AGENT};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::sign;
use crate::reach::{Reach, Target};

/// The most of an answer read.
pub const READ_LIMIT: usize = 64 * 1024;

/// What one attempt sends: an event's delivery, to be signed with its webhook's secret.
pub(super) struct Message<'a> {
    pub(super) url: &'a str,
    pub(super) secret: &'a str,
    /// Its `webhook-id`, which the signature covers.
    pub(super) id: &'a str,
    pub(super) body: &'a str,
}

/// A replica's client of the webhooks' receivers: what they may reach, and the roots
/// their certificates are checked against.
pub(super) struct Client {
    reach: Reach,
    tls: TlsConnector,
}

impl Client {
    /// A client that trusts the system's roots, and `ca` if given.
    pub(super) fn new(reach: Reach, ca: Option<&Path>) -> anyhow::Result<Client> {
        let mut roots = rustls::RootCertStore::empty();
        for certificate in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(certificate);
        }
        if let Some(ca) = ca {
            let certificates =
                CertificateDer::pem_file_iter(ca).with_context(|| format!("reading --webhook-ca {}", ca.display()))?;
            for certificate in certificates {
                roots.add(certificate.with_context(|| format!("--webhook-ca {}", ca.display()))?)?;
            }
        }
        let config = rustls::ClientConfig::builder_with_provider(crate::db::tls::provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Client { reach, tls: TlsConnector::from(Arc::new(config)) })
    }

    /// Sends `message` once within `timeout`: the status of the answer, or why there is
    /// none.
    pub(super) async fn attempt(&self, message: &Message<'_>, timeout: Duration) -> Result<u16, String> {
        match tokio::time::timeout(timeout, self.send(message)).await {
            Ok(answered) => answered,
            Err(_) => Err(format!("no answer within {:.1} s", timeout.as_secs_f64())),
        }
    }

    async fn send(&self, message: &Message<'_>) -> Result<u16, String> {
        let target = self.reach.target(message.url)?;
        let key = sign::key(message.secret)?;
        let resolved: Vec<SocketAddr> = tokio::net::lookup_host((target.host.as_str(), target.port))
            .await
            .map_err(|error| format!("{} does not resolve: {error}", target.host))?
            .collect();
        self.reach.check(&target, &resolved)?;
        let tcp = connect(&resolved).await?;
        // The address actually connected to, whatever the name resolves to by now.
        let peer = tcp.peer_addr().map_err(|error| format!("the connection has no peer: {error}"))?;
        if !self.reach.admits(peer.ip()) {
            return Err(format!("connected to {}, which is not a public address", peer.ip()));
        }
        // Signed as it leaves, in seconds since the Unix epoch.
        let timestamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs());
        let timestamp = i64::try_from(timestamp).unwrap_or(i64::MAX);
        let signature = sign::signature(&key, message.id, timestamp, message.body);
        let request = request(&target, message, timestamp, &signature)?;
        if target.https {
            let name =
                ServerName::try_from(target.host.clone()).map_err(|_| format!("{} is no TLS name", target.host))?;
            let tls = self.tls.connect(name, tcp).await.map_err(|error| format!("TLS: {error}"))?;
            exchange(TokioIo::new(tls), request).await
        } else {
            exchange(TokioIo::new(tcp), request).await
        }
    }
}

/// A connection to the first of `addresses` that answers.
async fn connect(addresses: &[SocketAddr]) -> Result<TcpStream, String> {
    let mut last = String::from("no address");
    for address in addresses {
        match TcpStream::connect(address).await {
            Ok(stream) => return Ok(stream),
            Err(error) => last = format!("connecting to {address}: {error}"),
        }
    }
    Err(last)
}

/// The message's request, signed at `timestamp` (the signature covers it).
fn request(
    target: &Target,
    message: &Message<'_>,
    timestamp: i64,
    signature: &str,
) -> Result<Request<Full<Bytes>>, String> {
    let path = target.uri.path_and_query().map_or("/", |path| path.as_str());
    let host = target.uri.authority().map_or(target.host.as_str(), |authority| authority.as_str());
    Request::post(path)
        .header(HOST, host)
        .header(CONTENT_TYPE, "application/json")
        .header(USER_AGENT, concat!("fleet-webhooks/", env!("CARGO_PKG_VERSION")))
        .header("webhook-id", message.id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(Full::new(Bytes::from(message.body.to_owned())))
        .map_err(|error| format!("the request cannot be made: {error}"))
}

/// One HTTP/1.1 exchange on `io`: the answer's status, once at most [`READ_LIMIT`] of
/// its body was read. Redirects are answers like any other (not followed).
async fn exchange<I>(io: I, request: Request<Full<Bytes>>) -> Result<u16, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(io).await.map_err(|error| format!("HTTP: {error}"))?;
    let exchange = async move {
        let response = sender.send_request(request).await.map_err(|error| format!("HTTP: {error}"))?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut read = 0;
        while read < READ_LIMIT {
            match body.frame().await {
                Some(Ok(frame)) => read += frame.data_ref().map_or(0, Bytes::len),
                Some(Err(_)) | None => break,
            }
        }
        Ok(status)
    };
    tokio::pin!(connection, exchange);
    tokio::select! {
        biased;
        answered = &mut exchange => answered,
        // The connection ended (the receiver closed it): the exchange ends with it.
        _ = &mut connection => exchange.await,
    }
}
