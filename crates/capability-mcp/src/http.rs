//! Streamable HTTP: rmcp's service in axum, behind Host/Origin checks, bearer tokens and
//! limits; stdio.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use capability_host::guard::{self, HttpGuard};
use capability_host::{Access, AuthError, Credential};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::McpServer;
use crate::handler::{Authenticated, Handler, Surface, Transport};

/// Limits and checks of the HTTP transport.
#[derive(Clone, Debug)]
pub struct HttpLimits {
    /// The host's HTTP guard: Host and Origin validation (browser tools on this machine,
    /// such as the MCP Inspector, are accepted), the request body limit (413 beyond it).
    pub guard: HttpGuard,
    /// Most MCP sessions open at once (503 for a new one beyond it).
    pub max_sessions: usize,
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

#[derive(Clone)]
struct Gate<S: Surface> {
    surface: S,
    sessions: Arc<LocalSessionManager>,
}

/// The host's guard, the bearer token (authenticated by the host), the principal's role,
/// the session limit; then the MCP service.
async fn gate<S: Surface>(
    State(gate): State<Gate<S>>,
    mut request: Request,
    next: Next,
) -> Response {
    let limits = &gate.surface.options().http;
    if let Err(refusal) = limits.guard.check(request.headers()) {
        return refuse(StatusCode::FORBIDDEN, &format!("Forbidden: {refusal}"));
    }
    let presented = guard::bearer(request.headers()).map(str::to_string);
    let actor = match (presented, &gate.surface.options().anonymous) {
        (None, Some(anonymous)) => anonymous.clone(),
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
            principal.actor()
        }
    };
    let new_session = request.method() == axum::http::Method::POST
        && !request.headers().contains_key("mcp-session-id");
    if new_session && gate.sessions.sessions.read().await.len() >= limits.max_sessions {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("too many sessions (limit {})", limits.max_sessions),
        );
    }
    request.extensions_mut().insert(Authenticated(actor));
    next.run(request).await
}

fn http_router<S: Surface>(surface: &S, ct: CancellationToken) -> Router {
    let guard = &surface.options().http.guard;
    let sessions = Arc::new(LocalSessionManager::default());
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

/// Serves streamable HTTP at `/mcp` until `shutdown`; then drains.
pub(crate) async fn serve_http<S: Surface>(
    surface: &S,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let ct = CancellationToken::new();
    let router = http_router(surface, ct.child_token());
    let stop = ct.clone();
    // Responses are written in pieces (SSE): without TCP_NODELAY, Nagle's algorithm and
    // the client's delayed ACK hold each answer ~40 ms.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    // The peer's address reaches the gate (failed tokens are throttled by it).
    let router = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown.await;
            stop.cancel();
        })
        .await?;
    drain(surface).await;
    Ok(())
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
