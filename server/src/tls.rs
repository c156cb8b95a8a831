//! Serving HTTPS: the certificate and key files (`--tls-cert`, `--tls-key`), checked at
//! start, and a listener that completes each TLS handshake beside the accept loop, so
//! `axum::serve` and its graceful shutdown work as they do on plain TCP.
//!
//! rustls with the aws-lc-rs provider, the one reqwest and sqlx are built with here, so the
//! process carries one crypto provider.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// A client that has not finished its handshake by then is dropped, so a connection that
/// never speaks holds nothing for long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The server's certificate chain and private key, as PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server's certificate first, then any intermediates.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

impl TlsFiles {
    /// Reads both files and builds the server's TLS settings. Refuses, naming the file, one
    /// that cannot be read, holds no certificate or no key, or a key that is not the
    /// certificate's (rustls compares the key's public half with the certificate's:
    /// <https://docs.rs/rustls/0.23/rustls/struct.ConfigBuilder.html#method.with_single_cert>).
    pub fn acceptor(&self) -> anyhow::Result<TlsAcceptor> {
        let certs = read_certs(&self.cert)?;
        let key = read_key(&self.key)?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .context("rustls has no protocol version to offer")?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| match e {
                rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => anyhow!(
                    "the TLS key {} is not the key of the certificate {}",
                    self.key.display(),
                    self.cert.display()
                ),
                e => anyhow!(
                    "the TLS key {} cannot serve the certificate {}: {e}",
                    self.key.display(),
                    self.cert.display()
                ),
            })?;
        // The server speaks HTTP/1.1 only (axum's `http1`).
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }

    /// Whether a client that trusts the certificates in `ca` (a PEM bundle) accepts this
    /// server's certificate for `name` (a DNS name or an IP address), as rustls' own
    /// verifier judges it: the chain, the dates, the use, the name.
    pub fn verify_for(&self, ca: &Path, name: &str) -> anyhow::Result<()> {
        let certs = read_certs(&self.cert)?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in read_certs(ca)? {
            roots.add(cert).with_context(|| {
                format!("{} holds a certificate rustls cannot use", ca.display())
            })?;
        }
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            provider(),
        )
        .build()?;
        let name = ServerName::try_from(name.to_owned())?;
        use rustls::client::danger::ServerCertVerifier;
        verifier.verify_server_cert(&certs[0], &certs[1..], &name, &[], UnixTime::now())?;
        Ok(())
    }
}

fn read_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let text = std::fs::read(path)
        .with_context(|| format!("cannot read the TLS certificate {}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("the TLS certificate {} is not valid PEM", path.display()))?;
    if certs.is_empty() {
        bail!(
            "{} holds no certificate (a PEM `BEGIN CERTIFICATE` block)",
            path.display()
        );
    }
    Ok(certs)
}

fn read_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    let text = std::fs::read(path)
        .with_context(|| format!("cannot read the TLS key {}", path.display()))?;
    PrivateKeyDer::from_pem_slice(&text).map_err(|e| match e {
        pem::Error::NoItemsFound => anyhow!(
            "{} holds no private key (a PEM `BEGIN PRIVATE KEY` block)",
            path.display()
        ),
        e => anyhow!("the TLS key {} is not valid PEM: {e}", path.display()),
    })
}

/// A TCP listener whose connections are TLS. Each handshake runs in a task of its own, so a
/// slow or silent client does not hold up the others; one that fails is logged at debug
/// and the listener carries on.
pub struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: JoinSet<(io::Result<TlsStream<TcpStream>>, SocketAddr)>,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, acceptor: TlsAcceptor) -> TlsListener {
        TlsListener {
            tcp,
            acceptor,
            handshakes: JoinSet::new(),
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    // Cancel-safe, as `axum::serve` needs: a connection accepted is in `handshakes` before
    // this future can be dropped, and a finished handshake waits there for the next call.
    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            tokio::select! {
                // axum's listener for TcpListener retries accept errors itself.
                (stream, peer) = axum::serve::Listener::accept(&mut self.tcp) => {
                    let acceptor = self.acceptor.clone();
                    self.handshakes.spawn(async move {
                        let done = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
                            .await
                            .unwrap_or_else(|_| {
                                Err(io::Error::new(io::ErrorKind::TimedOut, "handshake timed out"))
                            });
                        (done, peer)
                    });
                }
                Some(done) = self.handshakes.join_next(), if !self.handshakes.is_empty() => {
                    match done {
                        Ok((Ok(stream), peer)) => return (stream, peer),
                        Ok((Err(e), peer)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        }
                        Err(e) => tracing::debug!(error = %e, "TLS handshake task ended"),
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
