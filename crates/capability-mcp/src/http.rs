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
use capability_host::AuthError;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::McpServer;
use crate::handler::{Handler, Principal, Surface, Transport};

/// Limits and checks of the HTTP transport.
#[derive(Clone, Debug)]
pub struct HttpLimits {
    /// Largest request body, in bytes (413 beyond it).
    pub max_body_bytes: usize,
    /// Most MCP sessions open at once (503 for a new one beyond it).
    pub max_sessions: usize,
    /// Most tool calls in flight per principal (a tool error beyond it); applies to stdio
    /// too, where there is one principal.
    pub max_calls_per_principal: usize,
    /// Host names (or `host:port`) accepted besides `localhost`, `127.0.0.1` and `::1`.
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted besides loopback ones (`https://app.example:443`); a request
    /// with any other `Origin` is refused. Requests without `Origin` (non-browser clients)
    /// pass.
    pub allowed_origins: Vec<String>,
    /// How long shutdown waits for calls in flight.
    pub drain_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_body_bytes: 1 << 20,
            max_sessions: 256,
            max_calls_per_principal: 64,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            drain_timeout: Duration::from_secs(30),
        }
    }
}

const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Pages served from this machine may call it; any other browser origin is refused.
const LOOPBACK_ORIGINS: [&str; 3] = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];

/// The host part of a `Host` header (`[::1]:80` → `::1`, `a:1` → `a`).
fn host_name(value: &str) -> &str {
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    value.rsplit_once(':').map_or(value, |(h, _)| h)
}

fn host_allowed(value: &str, extra: &[String]) -> bool {
    let name = host_name(value);
    LOOPBACK.contains(&name)
        || extra
            .iter()
            .any(|a| a.eq_ignore_ascii_case(value) || a.eq_ignore_ascii_case(name))
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

/// Host check, bearer token, role, session limit; then the MCP service.
async fn gate<S: Surface>(
    State(gate): State<Gate<S>>,
    mut request: Request,
    next: Next,
) -> Response {
    let limits = &gate.surface.options().http;
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    if !host_allowed(host, &limits.allowed_hosts) {
        return refuse(
            StatusCode::FORBIDDEN,
            "Forbidden: Host header is not allowed",
        );
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .map(str::trim)
        .unwrap_or_default()
        .to_string();
    let actor = if presented.is_empty()
        && let Some(anonymous) = &gate.surface.options().anonymous
    {
        anonymous.clone()
    } else {
        let host = gate.surface.host();
        let record = match host.tokens() {
            Ok(tokens) => match tokens.authenticate(&presented) {
                Ok(r) => r,
                Err(e) => return unauthorized(e),
            },
            Err(_) => return unauthorized(AuthError::Unavailable),
        };
        if !record.role.may_call() {
            return refuse(
                StatusCode::FORBIDDEN,
                &format!(
                    "Forbidden: a token with role {} cannot call tools",
                    record.role.as_str()
                ),
            );
        }
        record.actor()
    };
    let new_session = request.method() == axum::http::Method::POST
        && !request.headers().contains_key("mcp-session-id");
    if new_session && gate.sessions.sessions.read().await.len() >= limits.max_sessions {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("too many sessions (limit {})", limits.max_sessions),
        );
    }
    request.extensions_mut().insert(Principal(actor));
    next.run(request).await
}

fn http_router<S: Surface>(surface: &S, ct: CancellationToken) -> Router {
    let limits = &surface.options().http;
    let sessions = Arc::new(LocalSessionManager::default());
    let mut hosts: Vec<String> = LOOPBACK.iter().map(|h| h.to_string()).collect();
    hosts.extend(limits.allowed_hosts.iter().cloned());
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(
            LOOPBACK_ORIGINS
                .iter()
                .map(|o| o.to_string())
                .chain(limits.allowed_origins.iter().cloned()),
        )
        .enforce_origin_validation()
        .with_max_request_body_bytes(limits.max_body_bytes)
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
    if let Some(db) = host.database() {
        let db = Arc::clone(db);
        let _ = tokio::task::spawn_blocking(move || db.flush()).await;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names() {
        assert!(host_allowed("127.0.0.1:8080", &[]));
        assert!(host_allowed("localhost", &[]));
        assert!(host_allowed("[::1]:9", &[]));
        assert!(!host_allowed("evil.example:8080", &[]));
        assert!(!host_allowed("", &[]));
        assert!(host_allowed("mcp.internal:443", &["mcp.internal".into()]));
    }
}
