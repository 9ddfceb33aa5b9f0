//! TLS (SPEC §12): the server's own HTTPS listener (`--tls-cert`, `--tls-key`), and
//! connections to PostgreSQL verified against a CA (`sslmode=verify-full`,
//! `sslrootcert`). The certificates are made here, with rcgen.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use crate::support::{FLEET, Server};

/// A CA, and a certificate for `localhost` and 127.0.0.1 that it signed, as PEM files.
pub struct Pki {
    pub ca: PathBuf,
    pub certificate: PathBuf,
    pub key: PathBuf,
}

/// Makes a CA and a server certificate it signed in `dir`.
pub fn pki(dir: &Path) -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "fleet test CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let ca_certificate = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut server = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    server.distinguished_name.push(DnType::CommonName, "localhost");
    server.use_authority_key_identifier_extension = true;
    server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    server.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let certificate = server.signed_by(&key, &issuer).unwrap();
    let pki = Pki { ca: dir.join("ca.pem"), certificate: dir.join("server.pem"), key: dir.join("server.key") };
    std::fs::write(&pki.ca, ca_certificate.pem()).unwrap();
    std::fs::write(&pki.certificate, certificate.pem()).unwrap();
    std::fs::write(&pki.key, key.serialize_pem()).unwrap();
    pki
}

/// One HTTP/1.1 request over TLS to `address`, trusting only `ca`; the whole answer.
fn over_tls(address: &str, ca: &Path, request: &str) -> Result<String, String> {
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject as _;
    for certificate in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(certificate.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let socket = TcpStream::connect(address).unwrap();
    socket.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
    let mut stream = rustls::StreamOwned::new(connection, socket);
    stream.write_all(request.as_bytes()).map_err(|error| error.to_string())?;
    let mut answer = Vec::new();
    match stream.read_to_end(&mut answer) {
        Ok(_) => {}
        // A server that closes without close_notify still answered.
        Err(error) if !answer.is_empty() && error.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(error) => return Err(error.to_string()),
    }
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

#[test]
fn the_server_serves_https_with_its_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = self::pki(dir.path());
    let (certificate, key) = (pki.certificate.display().to_string(), pki.key.display().to_string());
    let server = Server::start(&["--tls-cert", &certificate, "--tls-key", &key]);
    assert!(server.base.starts_with("https://"), "{}", server.base);
    let address = server.address().trim_start_matches("https://").to_owned();
    let token = server.tenant_with_token("acme");

    let health = over_tls(&address, &pki.ca, "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let health = health.unwrap();
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(health.ends_with("ok"), "{health}");
    let body = json!({"region": "eu-west-1"}).to_string();
    let create = format!(
        "POST /api/compute/sites/create HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let created = over_tls(&address, &pki.ca, &create).unwrap();
    assert!(created.starts_with("HTTP/1.1 200"), "{created}");
    assert!(created.contains("\"region\":\"eu-west-1\""), "{created}");

    // The operator's client trusts the CA FLEET_CA_CERT names.
    let export = |ca: &Path| {
        std::process::Command::new(FLEET)
            .args(["export", "--format", "json", "--server", &server.base])
            .env("FLEET_TOKEN", &token)
            .env("FLEET_CA_CERT", ca)
            .output()
            .unwrap()
    };
    let exported = export(&pki.ca);
    assert_eq!(exported.status.code(), Some(0), "{}", String::from_utf8_lossy(&exported.stderr));
    assert!(String::from_utf8_lossy(&exported.stdout).contains("eu-west-1"));

    // Plain HTTP to the HTTPS port gets no answer of the API; another CA is not trusted.
    let mut plain = TcpStream::connect(&address).unwrap();
    plain.set_read_timeout(Some(std::time::Duration::from_secs(15))).unwrap();
    plain.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!String::from_utf8_lossy(&answer).contains("200 OK"), "plain HTTP is not served");
    let other = tempfile::tempdir().unwrap();
    let stranger = self::pki(other.path());
    assert!(over_tls(&address, &stranger.ca, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n").is_err());
    let refused = export(&stranger.ca);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("TLS"), "{}", String::from_utf8_lossy(&refused.stderr));

    // A key that is not the certificate's, or a file that is not PEM, stops serve
    // before it listens, naming the file.
    for (certificate, key) in [(&pki.certificate, &stranger.key), (&pki.key, &pki.key)] {
        let output = std::process::Command::new(FLEET)
            .arg("--db")
            .arg(dir.path().join("refused.db"))
            .args(["serve", "--listen", "127.0.0.1:0", "--tls-cert"])
            .arg(certificate)
            .arg("--tls-key")
            .arg(key)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("--tls-"), "{stderr}");
    }
}
