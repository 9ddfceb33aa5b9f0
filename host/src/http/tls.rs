//! HTTPS on the listener itself (`fleet serve --tls-cert FILE --tls-key FILE`, SPEC
//! §12), for deployments with no proxy in front: rustls with the ring provider,
//! HTTP/1.1.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub use tokio_rustls::TlsAcceptor;

/// The acceptor of a certificate chain and its private key, both PEM files; any
/// problem names the file.
pub fn acceptor(certificate: &Path, key: &Path) -> anyhow::Result<TlsAcceptor> {
    let chain = CertificateDer::pem_file_iter(certificate)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("--tls-cert {}", certificate.display()))?;
    anyhow::ensure!(!chain.is_empty(), "--tls-cert {} holds no certificate", certificate.display());
    let key = PrivateKeyDer::from_pem_file(key).with_context(|| format!("--tls-key {}", key.display()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(crate::db::tls::provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("--tls-cert and --tls-key do not make a certificate and its key")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
