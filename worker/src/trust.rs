//! How a client of the podq server (the worker, the CLI, `podq up`) checks the server's
//! certificate on `https://` addresses: against the platform's roots, or only against a
//! private CA given with `--ca FILE` (as curl's `--cacert` and libpq's `sslrootcert` do);
//! and what to say when a call fails because of it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};

/// The certificates of a private CA, read from a PEM file. A client given one trusts those
/// certificates alone for the server's.
#[derive(Clone, Debug)]
pub struct CaFile {
    pub path: PathBuf,
    certs: Vec<reqwest::Certificate>,
}

impl CaFile {
    /// Reads `path`, refusing, with its name, a file that cannot be read or holds no
    /// certificate rustls can use.
    pub fn load(path: &Path) -> anyhow::Result<CaFile> {
        let text = std::fs::read(path)
            .with_context(|| format!("cannot read the CA file {}", path.display()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&text)
            .with_context(|| format!("the CA file {} is not valid PEM", path.display()))?;
        if certs.is_empty() {
            bail!(
                "the CA file {} holds no certificate (a PEM `BEGIN CERTIFICATE` block)",
                path.display()
            );
        }
        // A certificate rustls cannot parse is refused when a client is built: refuse it now.
        reqwest::Client::builder()
            .tls_certs_only(certs.clone())
            .build()
            .with_context(|| {
                format!(
                    "the CA file {} holds a certificate podq cannot use",
                    path.display()
                )
            })?;
        Ok(CaFile {
            path: path.to_owned(),
            certs,
        })
    }

    /// For clap's `value_parser`: the file is read when the arguments are.
    pub fn parse_arg(path: &str) -> Result<CaFile, String> {
        CaFile::load(Path::new(path)).map_err(|e| format!("{e:#}"))
    }
}

/// An HTTP client for the server: it trusts `ca` alone when given, else the platform's roots.
pub fn http_client(ca: Option<&CaFile>) -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(5));
    match ca {
        Some(ca) => builder.tls_certs_only(ca.certs.clone()),
        None => builder,
    }
}

/// The TLS error under a failed call, if TLS is why it failed. hyper-rustls hands rustls'
/// error up inside `io::Error`s, whose `source()` skips what they wrap, so each `io::Error`
/// of the chain is opened too.
pub fn tls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(tls) = error.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    let wrapped = error
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
        .and_then(|inner| tls_error(inner));
    wrapped.or_else(|| error.source().and_then(tls_error))
}

/// A failed call to `server` as a sentence: for a certificate it does not trust, what to
/// give; otherwise every cause in the chain, each once.
pub fn explain(error: &reqwest::Error, server: &str) -> String {
    match tls_error(error) {
        Some(tls @ rustls::Error::InvalidCertificate(_)) => format!(
            "the podq server at {server} presented a certificate podq does not trust \
             ({tls}): give the CA that signed it with --ca FILE (PODQ_CA)"
        ),
        Some(tls) => format!("TLS with the podq server at {server} failed: {tls}"),
        None => {
            let mut causes: Vec<String> = Vec::new();
            let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
            while let Some(cause) = next {
                let text = cause.to_string();
                if !causes.iter().any(|c| c.contains(&text)) {
                    causes.push(text);
                }
                next = cause.source();
            }
            causes.join(": ")
        }
    }
}
