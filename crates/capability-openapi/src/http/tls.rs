//! TLS of the client: rustls with the *ring* provider, TLS 1.2 and 1.3, ALPN `http/1.1`.
//!
//! Trust: the system's roots (read once per process by `rustls-native-certs`: the bundle and
//! directory OpenSSL would use, `/etc/ssl/certs` on Debian; `SSL_CERT_FILE` and `SSL_CERT_DIR`,
//! when set, name them instead, as for OpenSSL), the Mozilla roots of `webpki-roots` when the
//! system has none, and the PEM certificates of [`super::HttpConfig::extra_roots_pem`].
//! Certificates are always verified, against the URL's host (a name, or an IP address
//! matched against the certificate's IP addresses).

use std::sync::{Arc, OnceLock};

use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

use super::HttpError;

/// Why the trust roots of a client could not be set up.
#[derive(Clone, Debug, thiserror::Error)]
pub(super) enum RootsError {
    /// `SSL_CERT_FILE` or `SSL_CERT_DIR` names no certificate this client can use.
    #[error("{named} holds no usable certificate{}", first_error.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    NoSystemRoot {
        named: String,
        first_error: Option<String>,
    },
    /// A certificate of [`super::HttpConfig::extra_roots_pem`] was refused.
    #[error("extra roots: {reason}")]
    ExtraRoot { reason: String },
    /// [`super::HttpConfig::extra_roots_pem`] holds no certificate.
    #[error("extra roots: no PEM certificate found")]
    NoExtraRoot,
    /// rustls refused the configuration.
    #[error(transparent)]
    Config(#[from] rustls::Error),
}

/// The roots every client trusts, read once.
fn system_roots() -> Result<RootCertStore, RootsError> {
    static ROOTS: OnceLock<Result<RootCertStore, RootsError>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let named = ["SSL_CERT_FILE", "SSL_CERT_DIR"]
                .iter()
                .filter_map(|v| std::env::var_os(v).map(|p| format!("{v}={}", p.display())))
                .collect::<Vec<_>>();
            let found = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 && !named.is_empty() {
                return Err(RootsError::NoSystemRoot {
                    named: named.join(" "),
                    first_error: found.errors.first().map(|e| e.to_string()),
                });
            }
            if added == 0 {
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            }
            Ok(roots)
        })
        .clone()
}

/// The client configuration: the system roots plus `extra_pem`.
pub(super) fn client_config(extra_pem: Option<&str>) -> Result<Arc<ClientConfig>, RootsError> {
    let mut roots = system_roots()?;
    if let Some(pem) = extra_pem {
        let refused = |reason: &dyn std::fmt::Display| RootsError::ExtraRoot {
            reason: reason.to_string(),
        };
        let mut count = 0;
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let cert = cert.map_err(|e| refused(&e))?;
            roots.add(cert).map_err(|e| refused(&e))?;
            count += 1;
        }
        if count == 0 {
            return Err(RootsError::NoExtraRoot);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The TLS handshake over `tcp`, verifying the certificate for `host`; `shown` (host:port)
/// names the server in errors.
pub(super) async fn connect(
    config: Arc<ClientConfig>,
    host: &url::Host<&str>,
    shown: &str,
    tcp: TcpStream,
) -> Result<TlsStream<TcpStream>, HttpError> {
    let name = match host {
        url::Host::Domain(d) => ServerName::try_from(d.trim_end_matches('.').to_string())
            .map_err(|e| HttpError::Tls(format!("{shown}: {e}")))?,
        url::Host::Ipv4(a) => ServerName::IpAddress(std::net::IpAddr::V4(*a).into()),
        url::Host::Ipv6(a) => ServerName::IpAddress(std::net::IpAddr::V6(*a).into()),
    };
    tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| handshake_error(shown, &e))
}

/// A clear error for a failed handshake: the certificate's problem, or the TLS one.
fn handshake_error(shown: &str, e: &std::io::Error) -> HttpError {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(c)) => {
            let why = match c {
                rustls::CertificateError::UnknownIssuer => {
                    "UnknownIssuer: its issuer is not a trusted root (see SSL_CERT_FILE)".into()
                }
                other => other.to_string(),
            };
            HttpError::Certificate(format!("{shown}: {why}"))
        }
        Some(rustls::Error::InvalidMessage(m)) => HttpError::Tls(format!(
            "{shown}: {m:?}: the server does not speak TLS (an http:// server?)"
        )),
        Some(other) => HttpError::Tls(format!("{shown}: {other}")),
        None => HttpError::Tls(format!("{shown}: {e}")),
    }
}
