//! Streamable HTTP: rmcp's service in axum, behind Host/Origin checks, bearer tokens and
//! limits, on connections that must send their request heads in time, with the `tools/call`
//! requests of sessions answered in a lane of their own ([`lane`]); stdio.

mod lane;
mod sessions;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use capability_host::guard::{self, HttpGuard};
use capability_host::{Access, AuthError, Credential, Principal};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use self::sessions::{CALLER, Caller, Refusal, Sessions};
use crate::McpServer;
use crate::handler::{Authenticated, Handler, Surface, Transport};

/// The header that names a session (rmcp's `HEADER_SESSION_ID`).
const SESSION_ID: &str = "mcp-session-id";

/// Limits and checks of the HTTP transport.
#[derive(Clone, Debug)]
pub struct HttpLimits {
    /// The host's HTTP guard: Host and Origin validation (browser tools on this machine,
    /// such as the MCP Inspector, are accepted), the request body limit (413 beyond it).
    pub guard: HttpGuard,
    /// Most MCP sessions open at once, for all callers together (503 for a new one beyond
    /// it).
    pub max_sessions: usize,
    /// Most MCP sessions one principal (a token; the anonymous agent) holds at once (429 for
    /// a new one beyond it), so that one caller cannot take every session. By default a
    /// quarter of the default `max_sessions` (64): room for a principal's parallel clients
    /// and for sessions its crashed clients left to expire (the official conformance suite
    /// opens some 35 as one principal), while three quarters stay with the others.
    pub max_sessions_per_principal: usize,
    /// How long a session lives without a request (5 minutes by default; a request answered
    /// by the lane counts as one answered by rmcp); it then ends and frees its slot, like a
    /// session its client deleted.
    pub session_idle_timeout: Duration,
    /// How long a connection has to send the head of a request: from when it opens, and
    /// from each answer on a kept-alive connection. A slower (or silent) connection is
    /// closed; a request whose head came in time may take as long as it needs.
    pub header_read_timeout: Duration,
    /// How long shutdown waits for calls in flight.
    pub drain_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            guard: HttpGuard {
                loopback_origins: true,
                ..HttpGuard::default()
            },
            max_sessions: 256,
            max_sessions_per_principal: 64,
            session_idle_timeout: Duration::from_secs(300),
            header_read_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(30),
        }
    }
}

fn refuse(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": null,
        "error": {"code": -32600, "message": message},
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn unauthorized(e: AuthError) -> Response {
    if let AuthError::Throttled { retry_after } = e {
        let mut response = refuse(StatusCode::TOO_MANY_REQUESTS, &e.to_string());
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(retry_after.as_secs().max(1)),
        );
        return response;
    }
    let mut response = refuse(StatusCode::UNAUTHORIZED, &e.to_string());
    let challenge = match e {
        AuthError::Missing => "Bearer realm=\"capability\"".to_string(),
        other => format!(
            "Bearer realm=\"capability\", error=\"invalid_token\", error_description=\"{other}\""
        ),
    };
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    response
}

/// What rmcp answers a request naming a session it does not know (`Not Found`, without a
/// content type), for a session of another principal as well.
fn unknown_session() -> Response {
    (
        StatusCode::NOT_FOUND,
        Body::from("Not Found: Session not found"),
    )
        .into_response()
}

#[derive(Clone)]
struct Gate<S: Surface> {
    surface: S,
    sessions: Arc<Sessions>,
}

/// The host's guard, the bearer token (authenticated by the host), the principal's role,
/// the session it names (its own, else unknown); then the MCP service, where a session it
/// opens is bound to it and counted against the limits.
async fn gate<S: Surface>(State(gate): State<Gate<S>>, request: Request, next: Next) -> Response {
    let limits = &gate.surface.options().http;
    if let Err(refusal) = limits.guard.check(request.headers()) {
        return refuse(StatusCode::FORBIDDEN, &format!("Forbidden: {refusal}"));
    }
    let presented = guard::bearer(request.headers()).map(str::to_string);
    let (actor, principal) = match (presented, &gate.surface.options().anonymous) {
        (None, Some(anonymous)) => (
            anonymous.clone(),
            Principal::agent(anonymous).id().to_string(),
        ),
        (presented, _) => {
            let host = gate.surface.host();
            let secret = presented.unwrap_or_default();
            let peer = request
                .extensions()
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip());
            let principal = match host.authenticate_from(Credential::Bearer(&secret), peer) {
                Ok(p) => p,
                Err(e) => return unauthorized(e),
            };
            if !principal.may(Access::Call) {
                return refuse(
                    StatusCode::FORBIDDEN,
                    &format!(
                        "Forbidden: a token with role {} cannot call tools",
                        principal.role().as_str()
                    ),
                );
            }
            (principal.actor(), principal.id().to_string())
        }
    };
    // The session id as rmcp reads it (the first header, when it is text).
    let session = request
        .headers()
        .get(SESSION_ID)
        .and_then(|v| v.to_str().ok());
    if let Some(id) = session
        && !gate.sessions.claim(id, &principal)
    {
        return unknown_session();
    }
    let mut request = match lane::take(&gate.surface, &gate.sessions, &actor, request).await {
        Ok(answered) => return answered,
        Err(for_rmcp) => for_rmcp,
    };
    request.extensions_mut().insert(Authenticated(actor));
    let caller = Caller::new(&principal);
    let response = CALLER.scope(Arc::clone(&caller), next.run(request)).await;
    match caller.refusal() {
        None => response,
        Some(why @ Refusal::Full(_)) => refuse(StatusCode::SERVICE_UNAVAILABLE, &why.to_string()),
        Some(why @ Refusal::PrincipalFull(_)) => {
            refuse(StatusCode::TOO_MANY_REQUESTS, &why.to_string())
        }
    }
}

fn http_router<S: Surface>(surface: &S, ct: CancellationToken) -> Router {
    let limits = &surface.options().http;
    let guard = &limits.guard;
    let sessions = Arc::new(Sessions::new(
        LocalSessionManager::default(),
        limits.max_sessions,
        limits.max_sessions_per_principal,
        limits.session_idle_timeout,
    ));
    // Idle sessions end here (not by rmcp's keep-alive: see `sessions`), until the server
    // stops.
    let idle = (Arc::clone(&sessions), ct.clone());
    tokio::spawn(async move {
        let (sessions, stop) = idle;
        let mut tick = tokio::time::interval(sessions.idle_check_period());
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => sessions.close_idle().await,
            }
        }
    });
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(guard.host_patterns())
        .with_allowed_origins(guard.origin_patterns())
        .enforce_origin_validation()
        .with_max_request_body_bytes(guard.max_body_bytes)
        .with_cancellation_token(ct);
    let handler = Handler {
        surface: surface.clone(),
        transport: Transport::Http,
    };
    let service =
        StreamableHttpService::new(move || Ok(handler.clone()), Arc::clone(&sessions), config);
    let gate = Gate {
        surface: surface.clone(),
        sessions,
    };
    Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn_with_state(gate, self::gate::<S>))
}

/// Serves streamable HTTP at `/mcp` until `shutdown`; then stops taking connections, ends
/// the MCP sessions and streams, lets every connection finish its request, and drains.
///
/// Connections are served by hyper's HTTP/1 server with a header-read timeout
/// ([`HttpLimits::header_read_timeout`]), which `axum::serve` does not set: without it, a
/// connection that never completes a request head is held for as long as its peer likes.
pub(crate) async fn serve_http<S: Surface>(
    surface: &S,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let ct = CancellationToken::new();
    let service = TowerToHyperService::new(http_router(surface, ct.child_token()));
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(surface.options().http.header_read_timeout);
    let http1 = Arc::new(http1);
    let closing = CancellationToken::new();
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            (tcp, peer) = accept(&listener) => {
                connections.spawn(connection(
                    Arc::clone(&http1),
                    tcp,
                    peer,
                    service.clone(),
                    closing.clone(),
                ));
            }
            // Forget the connections that have ended.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    ct.cancel();
    closing.cancel();
    while connections.join_next().await.is_some() {}
    drain(surface).await;
    Ok(())
}

/// The next connection. Errors of one connection (reset before it was accepted) are
/// skipped; others (out of file descriptors) are waited out, as `axum::serve` does.
async fn accept(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    use std::io::ErrorKind;
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionRefused
                        | ErrorKind::ConnectionAborted
                        | ErrorKind::ConnectionReset
                ) => {}
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// Serves one connection until it ends; once `closing`, it finishes the request in hand and
/// closes.
async fn connection(
    http1: Arc<hyper::server::conn::http1::Builder>,
    tcp: TcpStream,
    peer: SocketAddr,
    service: TowerToHyperService<Router>,
    closing: CancellationToken,
) {
    // Responses are written in pieces (SSE): without TCP_NODELAY, Nagle's algorithm and
    // the client's delayed ACK hold each answer ~40 ms.
    let _ = tcp.set_nodelay(true);
    // The peer's address reaches the gate (failed tokens are throttled by it), as axum's
    // `into_make_service_with_connect_info` gives it.
    let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        hyper::service::Service::call(&service, request)
    });
    let served = http1.serve_connection(TokioIo::new(tcp), service);
    let mut served = std::pin::pin!(served);
    tokio::select! {
        _ = served.as_mut() => return,
        () = closing.cancelled() => {}
    }
    served.as_mut().graceful_shutdown();
    let _ = served.await;
}

/// Serves stdio until the client closes it; then drains.
pub(crate) async fn serve_stdio<S: Surface>(surface: &S) -> std::io::Result<()> {
    let handler = Handler {
        surface: surface.clone(),
        transport: Transport::Stdio,
    };
    // When stdin and stdout are pipes (as MCP clients start servers), they are read and
    // written on the IO reactor: the blocking `stdio()` handles cost a hand-off to Tokio's
    // blocking pool, and a thread wake-up, for every message each way.
    let (input, output) = rmcp::transport::stdio_pipes();
    crate::stdio::serve(handler, input, output).await?;
    drain(surface).await;
    Ok(())
}

/// Waits for the calls in flight, then flushes the database.
async fn drain<S: Surface>(surface: &S) {
    let deadline = Instant::now() + surface.options().http.drain_timeout;
    while !surface.idle() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let host = surface.host();
    let _ = tokio::task::spawn_blocking(move || host.flush()).await;
}

impl McpServer {
    /// Serves streamable HTTP at `/mcp` on `listener` until `shutdown` completes; then stops
    /// taking requests, waits (up to [`HttpLimits::drain_timeout`]) for the calls in flight
    /// and flushes every receipt and audit event to the database.
    pub async fn serve_http(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        serve_http(self, listener, shutdown).await
    }

    /// Serves stdio until the client closes it; then drains like [`McpServer::serve_http`].
    pub async fn serve_stdio(&self) -> std::io::Result<()> {
        serve_stdio(self).await
    }
}
