//! A private CA and a server certificate it signed (rcgen), and a server process serving
//! HTTPS with it: what tests/tls.rs and the team's flow over TLS (tests/team.rs) share.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::{Server, ServerOptions};

/// A private CA and a server certificate it signed for 127.0.0.1 and localhost, as PEM files.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub fn new_ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().expect("CA key");
    let cert = params.self_signed(&key).expect("CA certificate");
    (cert.pem(), Issuer::new(params, key))
}

pub fn pki() -> Pki {
    let dir = super::shared_tempdir();
    let (ca_pem, issuer) = new_ca("podq test CA");
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("server params");
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().expect("server key");
    let cert = params.signed_by(&key, &issuer).expect("server certificate");
    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write a PEM file");
        path
    };
    Pki {
        ca: write("ca.crt", ca_pem),
        cert: write("server.crt", cert.pem()),
        key: write("server.key", key.serialize_pem()),
        dir,
    }
}

/// The certificate of a CA that signed nothing of this test's.
pub fn unrelated_ca(dir: &Path) -> PathBuf {
    let path = dir.join("unrelated-ca.crt");
    std::fs::write(&path, new_ca("another CA").0).expect("write a PEM file");
    path
}

pub fn path(p: &Path) -> String {
    p.display().to_string()
}

/// An HTTP client that trusts only `ca`.
pub fn trusting(ca: &Path) -> reqwest::Client {
    let certs = reqwest::Certificate::from_pem_bundle(&std::fs::read(ca).expect("read the CA"))
        .expect("the CA's PEM");
    reqwest::Client::builder()
        .tls_certs_only(certs)
        .build()
        .expect("a client")
}

/// A server process serving HTTPS with `pki`'s certificate, and a test client trusting its CA.
pub async fn tls_server(pki: &Pki, args: &[&str], env: &[(&str, &str)]) -> Server {
    let mut options = ServerOptions::default();
    options.args.extend([
        "--tls-cert".into(),
        path(&pki.cert),
        "--tls-key".into(),
        path(&pki.key),
    ]);
    options.args.extend(args.iter().map(|a| a.to_string()));
    options.env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut server = Server::start_with(options).await;
    assert!(
        server.url.starts_with("https://127.0.0.1:"),
        "the server says it serves HTTPS: {}",
        server.url
    );
    server.client = trusting(&pki.ca);
    server
}
