//! The HTTP client of every outgoing call (hyper 1, HTTP/1.1 over TCP, `https://` over
//! rustls): OpenAPI operations, index, packument and tarball fetches, streamable-HTTP MCP
//! upstreams and the approval webhook.
//!
//! The API: an [`HttpClient`] made from an [`HttpConfig`] and a [`Resolver`];
//! [`HttpClient::send`] takes an [`Outgoing`] request and the [`Origin`]s it may reach
//! ([`origin_of`] a URL) and returns an [`Incoming`] response or an [`HttpError`];
//! [`HttpClient::send_observed`] does the same and reports the body's bytes as they arrive
//! to a [`BodyProgress`] callback (a download's progress).
//!
//! Safe by default:
//!
//! * **Destinations.** A request goes only to an origin the document's servers (or the base
//!   URL) name, and the address is checked **after DNS resolution**: a server given as an IP
//!   literal connects to that address only; `localhost` only to loopback; any other name
//!   only to public addresses — a name that resolves to a loopback, private, link-local,
//!   CGNAT, unique-local or unspecified address is refused unless the source was added with
//!   `allow_private`. The connection is made to the checked address (no second lookup).
//! * **Connections** are kept alive: after a response was read whole, its connection (to
//!   the address checked when it was opened) may carry the client's next request to the same
//!   origin, for up to 2 s of idleness (8 connections at most). A request a kept connection
//!   did not take (the server had closed it) goes to another or a new one; a request it took
//!   is never sent twice, whatever the method, except by the retries below.
//! * **Limits.** One deadline covers connecting, redirects, retries and reading the body; the
//!   body is refused beyond `max_response_bytes` (the `Content-Length` is checked first).
//! * **Redirects** are followed (up to `max_redirects`) only to the same origin; a redirect
//!   elsewhere is not followed and fails the call.
//!   A redirect from `https://` to `http://` is refused outright.
//!   With `max_redirects` 0 none is followed: the 3xx response is returned with its
//!   `Location` (an OCI registry's blob redirect to a CDN, which the caller checks itself).
//! * **Retries** happen only for idempotent methods (GET, HEAD, PUT, DELETE, OPTIONS,
//!   TRACE), on connection failures and 502/503/504, with a short backoff (never on a TLS
//!   or certificate failure).
//! * **TLS** (`https://`): rustls with the *ring* provider, TLS 1.2 and 1.3, ALPN
//!   `http/1.1`. The certificate is always verified (there is no switch to turn that off)
//!   against the URL's host: its name (also sent as SNI), or an IP address matched against
//!   the certificate's IP addresses. Trusted roots: the system's (read once per process:
//!   the bundle and directory OpenSSL would use, e.g. `/etc/ssl/certs`; the environment
//!   variables `SSL_CERT_FILE` (a PEM bundle) and `SSL_CERT_DIR`, when set, are used
//!   instead, as OpenSSL does), the Mozilla roots of `webpki-roots` when the system has none,
//!   plus the PEM certificates of [`HttpConfig::extra_roots_pem`]. An untrusted certificate
//!   fails with [`HttpError::Certificate`] ("certificate not trusted: host:port: why"),
//!   another handshake failure with [`HttpError::Tls`].

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

mod tls;

/// Limits and switches of the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpConfig {
    /// The whole call (connect, redirects, retries, body).
    pub timeout: Duration,
    pub connect_timeout: Duration,
    pub max_response_bytes: usize,
    /// Redirects followed (same origin only). 0: none is followed, a 3xx response is
    /// returned as it is ([`Incoming::location`] says where) for the caller to judge.
    pub max_redirects: u32,
    /// Extra attempts for idempotent methods.
    pub retries: u32,
    pub retry_backoff: Duration,
    /// Names may resolve to private and loopback addresses.
    pub allow_private: bool,
    /// PEM certificates trusted as roots for `https://`, beside the system's (a private
    /// or test certificate authority).
    pub extra_roots_pem: Option<String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            max_response_bytes: 8 << 20,
            max_redirects: 5,
            retries: 2,
            retry_backoff: Duration::from_millis(100),
            allow_private: false,
            extra_roots_pem: None,
        }
    }
}

/// How names are resolved.
#[derive(Clone, Debug, Default)]
pub enum Resolver {
    /// The system resolver.
    #[default]
    System,
    /// Fixed answers (tests, pinned deployments); other names do not resolve.
    Static(BTreeMap<String, Vec<IpAddr>>),
}

/// Why a call failed. Messages never carry a credential: the URL in them is the redacted one
/// the caller passes in.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    #[error("destination refused: {0}")]
    Destination(String),
    #[error("redirect to another origin not followed: {0}")]
    CrossOriginRedirect(String),
    #[error("redirect from https:// to {0} refused (it would leave TLS)")]
    InsecureRedirect(String),
    #[error("more than {0} redirects")]
    TooManyRedirects(u32),
    #[error("the response exceeds the limit of {0} bytes")]
    TooLarge(usize),
    #[error("the call timed out after {0} ms")]
    Timeout(u128),
    #[error("connection failed: {0}")]
    Connect(String),
    #[error("certificate not trusted: {0}")]
    Certificate(String),
    #[error("TLS handshake failed: {0}")]
    Tls(String),
    #[error("HTTP exchange failed: {0}")]
    Protocol(String),
    #[error("cancelled")]
    Cancelled,
    #[error("{0}")]
    Unsupported(String),
    /// A request that sets a header only the client may set ([`is_client_header`]).
    #[error("the header {0} frames the message or the connection: only the client sets it")]
    ClientHeader(String),
}

impl HttpError {
    fn retryable(&self) -> bool {
        matches!(self, HttpError::Connect(_))
    }
}

/// One request as sent (credentials included: never log or record it).
#[derive(Clone, Debug)]
pub struct Outgoing {
    pub method: String,
    pub url: url::Url,
    pub headers: Vec<(String, String)>,
    pub body: Option<(String, Vec<u8>)>,
}

/// A response, read whole within the limits.
#[derive(Clone, Debug, PartialEq)]
pub struct Incoming {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    /// Attempts made (1 without retries).
    pub attempts: u32,
    pub redirects: u32,
    /// The address the final response came from.
    pub address: SocketAddr,
    /// The `Mcp-Session-Id` response header (an MCP streamable-HTTP upstream's session).
    pub mcp_session_id: Option<String>,
    /// The `ETag` response header (for a later `If-None-Match`).
    pub etag: Option<String>,
    /// The `Location` response header (a redirect the client did not follow).
    pub location: Option<String>,
    /// The `WWW-Authenticate` response header (a 401's challenge).
    pub www_authenticate: Option<String>,
    /// The `Docker-Content-Digest` response header (an OCI registry's digest of the body).
    pub docker_content_digest: Option<String>,
}

/// Called as a response body arrives, on the client's own thread: the bytes received so far
/// and the `Content-Length` when the response has one. It is called once when the headers
/// are in (0 bytes), then after every chunk; a redirect or retry starts again from 0.
pub type BodyProgress = Arc<dyn Fn(u64, Option<u64>) + Send + Sync>;

/// Whether a header is one only the client may set: `Host` (the origin checked before
/// connecting), the framing headers (`Content-Length`, `Transfer-Encoding`, `Trailer`,
/// `Expect`) and the hop-by-hop ones (`Connection`, `Keep-Alive`, `Upgrade`, `TE`,
/// `Proxy-*`). A caller's value for one of them would make the bytes on the wire differ
/// from the request the caller was shown (a second `Host`, a body cut short or smuggled, a
/// connection switched to another protocol), so [`HttpClient::send`] refuses a request
/// that sets one.
pub fn is_client_header(name: &str) -> bool {
    const NAMES: [&str; 9] = [
        "host",
        "content-length",
        "transfer-encoding",
        "trailer",
        "expect",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
    ];
    let name = name.trim();
    NAMES.iter().any(|n| name.eq_ignore_ascii_case(n))
        || name
            .get(..6)
            .is_some_and(|p| p.eq_ignore_ascii_case("proxy-"))
}

/// `(scheme, host, port)`.
pub type Origin = (String, String, u16);

/// The origin of a URL.
pub fn origin_of(url: &url::Url) -> Option<Origin> {
    Some((
        url.scheme().to_string(),
        url.host_str()?.to_string(),
        url.port_or_known_default()?,
    ))
}

/// Whether an address is public (routable on the internet).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            !(a.is_loopback()
                || a.is_private()
                || a.is_link_local()
                || a.is_unspecified()
                || a.is_broadcast()
                || a.is_multicast()
                || a.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
                || o[0] >= 240)
        }
        IpAddr::V6(a) => {
            if let Some(v4) = a.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = a.segments();
            !(a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] == 0x2001 && s[1] == 0x0db8))
        }
    }
}

/// Whether `ip` may be reached for the URL host `host`.
pub fn address_allowed(host: &url::Host<&str>, ip: IpAddr, allow_private: bool) -> bool {
    match host {
        url::Host::Ipv4(a) => ip == IpAddr::V4(*a),
        url::Host::Ipv6(a) => ip == IpAddr::V6(*a),
        url::Host::Domain(d) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            if d == "localhost" || d.ends_with(".localhost") {
                ip.is_loopback()
            } else {
                allow_private || is_public(ip)
            }
        }
    }
}

/// The client: a small tokio runtime of its own (so it works from any thread, inside or
/// outside another runtime; it may be dropped anywhere, an async context included), the
/// limits, the resolver and the TLS configuration (made at the first `https://` call).
pub struct HttpClient {
    runtime: Option<tokio::runtime::Runtime>,
    inner: Arc<Inner>,
}

struct Inner {
    config: HttpConfig,
    resolver: Resolver,
    tls: std::sync::OnceLock<Result<Arc<tokio_rustls::rustls::ClientConfig>, tls::RootsError>>,
    /// Connections kept alive after a response was read whole, newest last.
    idle: std::sync::Mutex<Vec<Idle>>,
}

/// A kept-alive connection to `origin`, at the address that was checked when it was opened.
struct Idle {
    origin: Origin,
    address: SocketAddr,
    sender: Sender,
    since: Instant,
}

/// How many idle connections a client keeps.
const IDLE_MAX: usize = 8;

/// How long an idle connection is kept: less than the keep-alive timeout of common servers
/// (node's is 5 s), so that a server seldom closes one just as it is reused.
const IDLE_FOR: Duration = Duration::from_secs(2);

impl Inner {
    /// The newest live idle connection to `origin`.
    fn take_idle(&self, origin: &Origin) -> Option<Idle> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        idle.retain(|c| !c.sender.is_closed() && c.since.elapsed() < IDLE_FOR);
        let i = idle.iter().rposition(|c| &c.origin == origin)?;
        Some(idle.remove(i))
    }

    fn keep_idle(&self, origin: Origin, address: SocketAddr, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() >= IDLE_MAX {
            idle.remove(0);
        }
        idle.push(Idle {
            origin,
            address,
            sender,
            since: Instant::now(),
        });
    }

    fn tls(&self) -> Result<Arc<tokio_rustls::rustls::ClientConfig>, HttpError> {
        self.tls
            .get_or_init(|| tls::client_config(self.config.extra_roots_pem.as_deref()))
            .clone()
            .map_err(|e| HttpError::Unsupported(format!("TLS trust roots: {e}")))
    }
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Drop for HttpClient {
    fn drop(&mut self) {
        // A runtime dropped the ordinary way blocks, which panics in an async context.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn idempotent(method: &str) -> bool {
    matches!(
        method,
        "GET" | "HEAD" | "PUT" | "DELETE" | "OPTIONS" | "TRACE"
    )
}

impl HttpClient {
    pub fn new(config: HttpConfig, resolver: Resolver) -> Result<HttpClient, HttpError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("capability-http")
            .enable_all()
            .build()
            .map_err(|e| HttpError::Unsupported(format!("cannot start the HTTP runtime: {e}")))?;
        Ok(HttpClient {
            runtime: Some(runtime),
            inner: Arc::new(Inner {
                config,
                resolver,
                tls: std::sync::OnceLock::new(),
                idle: std::sync::Mutex::new(Vec::new()),
            }),
        })
    }

    pub fn config(&self) -> &HttpConfig {
        &self.inner.config
    }

    /// Sends `request` to one of the `allowed` origins, blocking the calling thread until the
    /// response is read, the deadline passes or `cancelled` returns true.
    pub fn send(
        &self,
        request: Outgoing,
        allowed: &[Origin],
        timeout: Option<Duration>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Incoming, HttpError> {
        self.send_observed(request, allowed, timeout, cancelled, None)
    }

    /// [`HttpClient::send`], reporting the response body's bytes to `progress` as they
    /// arrive.
    pub fn send_observed(
        &self,
        request: Outgoing,
        allowed: &[Origin],
        timeout: Option<Duration>,
        cancelled: &dyn Fn() -> bool,
        progress: Option<BodyProgress>,
    ) -> Result<Incoming, HttpError> {
        // Checked here, where every caller passes, so that no caller's header can reframe
        // the message (hyper would send a caller's `Content-Length` as it is).
        if let Some((name, _)) = request.headers.iter().find(|(k, _)| is_client_header(k)) {
            return Err(HttpError::ClientHeader(name.clone()));
        }
        let config = &self.inner.config;
        let timeout = timeout.map_or(config.timeout, |t| t.min(config.timeout));
        let inner = Arc::clone(&self.inner);
        let allowed = allowed.to_vec();
        let (tx, rx) = std::sync::mpsc::channel();
        let Some(runtime) = &self.runtime else {
            return Err(HttpError::Protocol("the HTTP runtime is stopped".into()));
        };
        let task = runtime.spawn(async move {
            let result = match tokio::time::timeout(
                timeout,
                send_with_retries(&inner, &allowed, request, progress.as_ref()),
            )
            .await
            {
                Ok(r) => r,
                Err(_) => Err(HttpError::Timeout(timeout.as_millis())),
            };
            let _ = tx.send(result);
        });
        let deadline = Instant::now() + timeout + Duration::from_millis(500);
        loop {
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(r) => return r,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(HttpError::Protocol("the HTTP task stopped".into()));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if cancelled() {
                        task.abort();
                        return Err(HttpError::Cancelled);
                    }
                    if Instant::now() > deadline {
                        task.abort();
                        return Err(HttpError::Timeout(timeout.as_millis()));
                    }
                }
            }
        }
    }
}

async fn send_with_retries(
    inner: &Inner,
    allowed: &[Origin],
    request: Outgoing,
    progress: Option<&BodyProgress>,
) -> Result<Incoming, HttpError> {
    let config = &inner.config;
    let attempts = if idempotent(&request.method) {
        config.retries + 1
    } else {
        1
    };
    let mut attempt = 1;
    loop {
        let result = send_following(inner, allowed, request.clone(), progress).await;
        let again = attempt < attempts
            && match &result {
                Ok(r) => matches!(r.status, 502..=504),
                Err(e) => e.retryable(),
            };
        if !again {
            return result.map(|mut r| {
                r.attempts = attempt;
                r
            });
        }
        tokio::time::sleep(config.retry_backoff * attempt).await;
        attempt += 1;
    }
}

async fn send_following(
    inner: &Inner,
    allowed: &[Origin],
    mut request: Outgoing,
    progress: Option<&BodyProgress>,
) -> Result<Incoming, HttpError> {
    let start = origin_of(&request.url)
        .ok_or_else(|| HttpError::Destination("the URL has no host".into()))?;
    let mut redirects = 0;
    loop {
        let (status, location, response) = send_once(inner, allowed, &request, progress).await?;
        let Some(location) = location.filter(|_| {
            matches!(status, 301 | 302 | 303 | 307 | 308) && inner.config.max_redirects > 0
        }) else {
            let mut r = response;
            r.redirects = redirects;
            return Ok(r);
        };
        let next = request
            .url
            .join(&location)
            .map_err(|e| HttpError::Protocol(format!("invalid redirect location: {e}")))?;
        let next_origin = origin_of(&next);
        let shown = next_origin
            .as_ref()
            .map(|(s, h, p)| format!("{s}://{h}:{p}"))
            .unwrap_or_else(|| "a URL without a host".into());
        if start.0 == "https" && next.scheme() != "https" {
            return Err(HttpError::InsecureRedirect(shown));
        }
        if next_origin.as_ref() != Some(&start) {
            return Err(HttpError::CrossOriginRedirect(shown));
        }
        redirects += 1;
        if redirects > inner.config.max_redirects {
            return Err(HttpError::TooManyRedirects(inner.config.max_redirects));
        }
        if status == 303 || (matches!(status, 301 | 302) && request.method == "POST") {
            request.method = "GET".into();
            request.body = None;
        }
        request.url = next;
    }
}

async fn resolve(resolver: &Resolver, host: &str, port: u16) -> Result<Vec<SocketAddr>, HttpError> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    match resolver {
        Resolver::System => tokio::net::lookup_host((bare, port))
            .await
            .map(|a| a.collect())
            .map_err(|e| HttpError::Connect(format!("cannot resolve {bare}: {e}"))),
        Resolver::Static(map) => map
            .get(&bare.to_ascii_lowercase())
            .map(|ips| ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect())
            .ok_or_else(|| HttpError::Connect(format!("cannot resolve {bare}"))),
    }
}

type Sent = (u16, Option<String>, Incoming);

/// A connection, plain or TLS.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// A new connection to `origin` (of `url`): resolved, checked against the private-address
/// rule, connected, TLS for `https://`.
async fn connect(
    inner: &Inner,
    url: &url::Url,
    origin: &Origin,
) -> Result<(Sender, SocketAddr), HttpError> {
    let config = &inner.config;
    let tls = match url.scheme() {
        "https" => Some(inner.tls()?),
        _ => None,
    };
    let host = url
        .host()
        .ok_or_else(|| HttpError::Destination("the URL has no host".into()))?;
    let addresses = resolve(&inner.resolver, &origin.1, origin.2).await?;
    let permitted: Vec<SocketAddr> = addresses
        .iter()
        .copied()
        .filter(|a| address_allowed(&host, a.ip(), config.allow_private))
        .collect();
    if permitted.is_empty() {
        let shown: Vec<String> = addresses.iter().map(|a| a.ip().to_string()).collect();
        return Err(HttpError::Destination(format!(
            "{} resolves to {}, which is not a public address (add the source with allow-private to permit it)",
            origin.1,
            shown.join(", ")
        )));
    }
    let mut last = None;
    let mut stream = None;
    for address in &permitted {
        match tokio::time::timeout(
            config.connect_timeout,
            tokio::net::TcpStream::connect(address),
        )
        .await
        {
            Ok(Ok(s)) => {
                stream = Some((s, *address));
                break;
            }
            Ok(Err(e)) => last = Some(format!("{address}: {e}")),
            Err(_) => last = Some(format!("{address}: connect timed out")),
        }
    }
    let Some((stream, address)) = stream else {
        return Err(HttpError::Connect(last.unwrap_or_default()));
    };
    let _ = stream.set_nodelay(true);
    let stream: Box<dyn Io> = match tls {
        None => Box::new(stream),
        Some(tls) => {
            let shown = format!("{}:{}", origin.1, origin.2);
            let handshake = tls::connect(tls, &host, &shown, stream);
            match tokio::time::timeout(config.connect_timeout, handshake).await {
                Ok(s) => Box::new(s?),
                Err(_) => return Err(HttpError::Tls(format!("{shown}: the handshake timed out"))),
            }
        }
    };
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| HttpError::Protocol(e.to_string()))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok((sender, address))
}

async fn send_once(
    inner: &Inner,
    allowed: &[Origin],
    request: &Outgoing,
    progress: Option<&BodyProgress>,
) -> Result<Sent, HttpError> {
    let config = &inner.config;
    let url = &request.url;
    let origin =
        origin_of(url).ok_or_else(|| HttpError::Destination("the URL has no host".into()))?;
    if !allowed.contains(&origin) {
        return Err(HttpError::Destination(format!(
            "{}://{}:{} is not a server of the document",
            origin.0, origin.1, origin.2
        )));
    }
    if !matches!(url.scheme(), "http" | "https") {
        return Err(HttpError::Unsupported(format!(
            "{}:// is not supported (http:// and https:// only)",
            url.scheme()
        )));
    }
    let target = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    };
    let host_header = match url.port() {
        Some(p) => format!("{}:{p}", origin.1),
        None => origin.1.clone(),
    };
    let mut builder = hyper::Request::builder()
        .method(request.method.as_str())
        .uri(target)
        .header(hyper::header::HOST, host_header);
    // Defaults the request does not set itself.
    for (k, v) in [
        (hyper::header::ACCEPT, "application/json, */*;q=0.5"),
        (hyper::header::USER_AGENT, "capability-openapi"),
    ] {
        if !request
            .headers
            .iter()
            .any(|(h, _)| h.eq_ignore_ascii_case(k.as_str()))
        {
            builder = builder.header(k, v);
        }
    }
    for (k, v) in &request.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let body = match &request.body {
        Some((ct, bytes)) => {
            builder = builder.header(hyper::header::CONTENT_TYPE, ct.as_str());
            Bytes::from(bytes.clone())
        }
        None => Bytes::new(),
    };
    let mut http_request = builder
        .body(Full::new(body))
        .map_err(|e| HttpError::Protocol(format!("invalid request: {e}")))?;
    // A kept-alive connection first; a request it did not take (it was closed meanwhile)
    // goes to the next one or to a new connection. One it took and failed is not sent again.
    let (response, sender, address) = loop {
        let Some(mut idle) = inner.take_idle(&origin) else {
            let (mut sender, address) = connect(inner, url, &origin).await?;
            let response = sender
                .send_request(http_request)
                .await
                .map_err(|e| HttpError::Connect(e.to_string()))?;
            break (response, sender, address);
        };
        if idle.sender.ready().await.is_err() {
            continue;
        }
        match idle.sender.try_send_request(http_request).await {
            Ok(response) => break (response, idle.sender, idle.address),
            Err(mut e) => match e.take_message() {
                Some(unsent) => http_request = unsent,
                None => return Err(HttpError::Connect(e.into_error().to_string())),
            },
        }
    };
    let status = response.status().as_u16();
    let header = |name: hyper::header::HeaderName| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    let content_type = header(hyper::header::CONTENT_TYPE);
    let location = header(hyper::header::LOCATION);
    let mcp_session_id = header(hyper::header::HeaderName::from_static("mcp-session-id"));
    let etag = header(hyper::header::ETAG);
    let www_authenticate = header(hyper::header::WWW_AUTHENTICATE);
    let docker_content_digest = header(hyper::header::HeaderName::from_static(
        "docker-content-digest",
    ));
    let limit = config.max_response_bytes;
    let length = header(hyper::header::CONTENT_LENGTH).and_then(|l| l.parse::<u64>().ok());
    if let Some(len) = length
        && len > limit as u64
    {
        return Err(HttpError::TooLarge(limit));
    }
    if let Some(report) = progress {
        report(0, length);
    }
    let mut body = response.into_body();
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| HttpError::Protocol(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > limit {
                return Err(HttpError::TooLarge(limit));
            }
            out.extend_from_slice(&data);
            if let Some(report) = progress {
                report(out.len() as u64, length);
            }
        }
    }
    // Read whole: the connection may carry the next request.
    inner.keep_idle(origin, address, sender);
    Ok((
        status,
        location.clone(),
        Incoming {
            status,
            content_type,
            body: out,
            attempts: 1,
            redirects: 0,
            address,
            mcp_session_id,
            etag,
            location,
            www_authenticate,
            docker_content_digest,
        },
    ))
}

/// Shared handle.
pub type SharedClient = Arc<HttpClient>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_resolve_to_public_addresses() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let name = url::Host::Domain("api.example.test");
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(!address_allowed(&name, ip(private), false), "{private}");
            assert!(address_allowed(&name, ip(private), true), "{private}");
        }
        assert!(address_allowed(&name, ip("93.184.216.34"), false));
        let local = url::Host::Domain("localhost");
        assert!(address_allowed(&local, ip("127.0.0.1"), false));
        assert!(!address_allowed(&local, ip("93.184.216.34"), true));
        let literal = url::Host::Ipv4(std::net::Ipv4Addr::new(127, 0, 0, 1));
        assert!(address_allowed(&literal, ip("127.0.0.1"), false));
        assert!(!address_allowed(&literal, ip("127.0.0.2"), false));
    }
}
