//! TLS to PostgreSQL (SPEC §12), with rustls: a `--db` URL's `sslmode` and
//! `sslrootcert` as libpq reads them. tokio-postgres refuses both `verify-ca` /
//! `verify-full` and `sslrootcert` in a URL, so they are taken out of it here, before it
//! is parsed:
//!
//! | `sslmode` | what fleet does |
//! |---|---|
//! | `disable` | plain TCP |
//! | `prefer` (the default), `allow` | TLS when the server offers it, unverified (as libpq) |
//! | `require` | TLS or no connection; verified against `sslrootcert` when one is given, as libpq does |
//! | `verify-ca` | TLS, the server's chain checked against `sslrootcert` |
//! | `verify-full` | TLS, the chain and the URL's host name (or address) checked |

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, bail};
use postgres::config::SslMode;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// What connects a pool's connections: one connector for every `sslmode` (with
/// `disable`, tokio-postgres never uses it).
pub type Connector = tokio_postgres_rustls::MakeRustlsConnect;

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verify {
    Nothing,
    Chain,
    ChainAndName,
}

/// The connection settings and the TLS connector a `--db` URL asks for.
pub fn parse(url: &str) -> anyhow::Result<(postgres::Config, Connector)> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let (mut sslmode, mut root) = (None, None);
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        match pair.split_once('=') {
            Some(("sslmode", mode)) => sslmode = Some(mode.to_owned()),
            Some(("sslrootcert", file)) => {
                root = Some(PathBuf::from(percent_encoding::percent_decode_str(file).decode_utf8_lossy().as_ref()));
            }
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    let mut config: postgres::Config = url.parse().context("the --db URL is not a PostgreSQL connection URL")?;
    let (mode, verify) = match (sslmode.as_deref(), &root) {
        (Some("disable"), _) => (SslMode::Disable, Verify::Nothing),
        (None | Some("prefer" | "allow"), _) => (SslMode::Prefer, Verify::Nothing),
        (Some("require"), None) => (SslMode::Require, Verify::Nothing),
        (Some("require" | "verify-ca"), Some(_)) => (SslMode::Require, Verify::Chain),
        (Some("verify-full"), Some(_)) => (SslMode::Require, Verify::ChainAndName),
        (Some(mode @ ("verify-ca" | "verify-full")), None) => {
            bail!("sslmode={mode} needs sslrootcert=FILE in the --db URL: the certificate of the CA to trust")
        }
        (Some(other), _) => {
            bail!("sslmode={other} is not one of disable, allow, prefer, require, verify-ca, verify-full")
        }
    };
    config.ssl_mode(mode);
    Ok((config, connector(verify, root.as_deref())?))
}

fn connector(verify: Verify, root: Option<&Path>) -> anyhow::Result<Connector> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()?;
    let roots = || -> anyhow::Result<Arc<RootCertStore>> {
        let path = root.context("a CA certificate (sslrootcert)")?;
        let mut roots = RootCertStore::empty();
        let certificates =
            CertificateDer::pem_file_iter(path).with_context(|| format!("reading sslrootcert {}", path.display()))?;
        for certificate in certificates {
            roots.add(certificate.with_context(|| format!("sslrootcert {}", path.display()))?)?;
        }
        anyhow::ensure!(!roots.is_empty(), "sslrootcert {} holds no certificate", path.display());
        Ok(Arc::new(roots))
    };
    let config = match verify {
        Verify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(provider.signature_verification_algorithms))),
        Verify::ChainAndName => builder.with_root_certificates(roots()?),
        Verify::Chain => {
            let verifier = WebPkiServerVerifier::builder_with_provider(roots()?, provider.clone()).build()?;
            builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyName(verifier)))
        }
    };
    Ok(Connector::new(config.with_no_client_auth()))
}

/// `prefer` and `require` without a CA: the connection is encrypted and the handshake's
/// signatures checked, but the certificate is not (libpq's behaviour).
#[derive(Debug)]
struct Unverified(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, certificate, signature, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, certificate, signature, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to the CA; the name is not checked.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain before the name: a name error means the chain held.
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, certificate, signature)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, certificate, signature)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The ring provider, for the server's own TLS too: rustls is never left to guess a
/// process-wide one.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_and_sslrootcert_leave_the_url_before_it_is_parsed() {
        let (config, _) = parse("postgres://fleet@db:5432/fleet?sslmode=require&application_name=x").unwrap();
        assert_eq!(config.get_ssl_mode(), SslMode::Require);
        assert_eq!(config.get_application_name(), Some("x"));
        let (config, _) = parse("postgres://fleet@db/fleet").unwrap();
        assert_eq!(config.get_ssl_mode(), SslMode::Prefer);
        let (config, _) = parse("postgres://fleet@db/fleet?sslmode=disable").unwrap();
        assert_eq!(config.get_ssl_mode(), SslMode::Disable);
        for refused in [
            "postgres://db/f?sslmode=verify-full",
            "postgres://db/f?sslmode=verify-ca",
            "postgres://db/f?sslmode=always",
        ] {
            assert!(parse(refused).is_err(), "{refused}");
        }
        let Err(missing) = parse("postgres://db/f?sslmode=verify-full&sslrootcert=%2Fnowhere%2Fca.pem") else {
            panic!("a CA file that is not there is refused");
        };
        assert!(format!("{missing:#}").contains("/nowhere/ca.pem"), "{missing:#}");
    }
}
