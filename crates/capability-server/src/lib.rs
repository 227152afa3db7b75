//! # capability-server
//!
//! `cap serve`: the HTTP API and the web console of the capability runtime, a thin surface
//! over the [`Host`]. It parses HTTP, calls the host and renders JSON or HTML; it builds no
//! store, governor or executor of its own.
//!
//! * **API** under `/api/v1` (`routes::api_routes` is the one table the router and the
//!   OpenAPI document at `/openapi.json` are both built from, so they cannot drift). Errors
//!   are `{"error": {"code", "message"}}` with a matching status.
//! * **Identities**: bearer tokens of `cap tokens` and console logins (a password set with
//!   `cap tokens add --login`) map to a principal with a role: `agent` invokes and never
//!   approves; `approver` decides approvals for its tenants only; `auditor` reads; `admin`
//!   does everything. A principal never approves its own request.
//! * **Console** at `/console`: server-rendered pages (approve and deny are plain forms with
//!   CSRF tokens), live updates through server-sent events when an approval is pending,
//!   sessions in `HttpOnly`, `SameSite=Strict` cookies (`Secure` off loopback), Host and
//!   Origin checks on every request.
//! * **Webhook**: each new pending approval is POSTed, signed with HMAC-SHA256, retried with
//!   backoff ([`webhook`]).

mod api;
mod auth;
mod console;
mod events;
mod html;
pub mod routes;
pub mod webhook;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use capability_core::{CapabilityError, ErrorCode};
use capability_host::Host;
use serde_json::json;

pub use console::render_pending_page;
pub use webhook::Webhook;

/// How the server runs.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Host header values accepted besides `localhost`, `127.0.0.1` and `::1`.
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted besides the server's own (`https://console.example`).
    pub allowed_origins: Vec<String>,
    /// Mark session cookies `Secure` (on unless the listener is loopback HTTP).
    pub secure_cookies: bool,
    /// The Cedar policy files the host was opened with (shown, validated and tested).
    pub policy_files: Vec<PathBuf>,
    /// Fixtures the policies page tests the policies against.
    pub policy_fixtures: Option<PathBuf>,
    /// Called on each new pending approval.
    pub webhook: Option<Webhook>,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// How long a console session lasts.
    pub session_ttl: Duration,
    /// How often the store is read for new pending approvals (other processes add them).
    pub poll_interval: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            secure_cookies: false,
            policy_files: Vec::new(),
            policy_fixtures: None,
            webhook: None,
            max_body_bytes: 1 << 20,
            session_ttl: Duration::from_secs(12 * 3600),
            poll_interval: Duration::from_millis(250),
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub host: Arc<Host>,
    pub options: Arc<ServerOptions>,
    pub sessions: Arc<Mutex<HashMap<String, auth::Session>>>,
    pub events: tokio::sync::broadcast::Sender<events::PendingEvent>,
}

/// The HTTP API and console over one host.
#[derive(Clone)]
pub struct Server {
    state: AppState,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").finish_non_exhaustive()
    }
}

impl Server {
    pub fn new(host: Arc<Host>, options: ServerOptions) -> Server {
        let (events, _) = tokio::sync::broadcast::channel(1024);
        Server {
            state: AppState {
                host,
                options: Arc::new(options),
                sessions: Arc::new(Mutex::new(HashMap::new())),
                events,
            },
        }
    }

    /// The whole application: the API, `/openapi.json` and the console.
    pub fn router(&self) -> Router {
        routes::router(self.state.clone())
    }

    /// Serves on `listener` until `shutdown`; watches for new pending approvals (live
    /// updates and the webhook) meanwhile, then flushes the database.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let watcher = tokio::spawn(events::watch(self.state.clone()));
        // SSE answers are written in pieces: without TCP_NODELAY each waits for Nagle.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let served = axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown)
            .await;
        watcher.abort();
        if let Some(db) = self.state.host.database() {
            let db = Arc::clone(db);
            let _ = tokio::task::spawn_blocking(move || db.flush()).await;
        }
        served
    }
}

/// An error answer: `{"error": {"code", "message", ...}}` with its status.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub body: serde_json::Value,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: json!({"error": {"code": code, "message": message.into()}}),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "INVALID_INPUT", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "FORBIDDEN", message)
    }

    pub fn internal(message: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            message.to_string(),
        )
    }

    /// A capability error, with the status its code stands for.
    pub fn capability(e: &CapabilityError) -> ApiError {
        ApiError {
            status: status_of(e.code),
            body: capability_host::error_document(e),
        }
    }

    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("ERROR")
    }

    pub fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or_default()
    }
}

/// The HTTP status of a capability error code.
pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::InvalidInput
        | ErrorCode::InvalidManifest
        | ErrorCode::InvalidPlan
        | ErrorCode::InvalidPackageDeclaration => StatusCode::BAD_REQUEST,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::PermissionDenied | ErrorCode::ApprovalRequired => StatusCode::FORBIDDEN,
        ErrorCode::DuplicateCapability | ErrorCode::RollbackUnavailable => StatusCode::CONFLICT,
        ErrorCode::InvalidOutput
        | ErrorCode::ExecutionFailed
        | ErrorCode::VerifyFailed
        | ErrorCode::RollbackFailed => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            self.body.to_string(),
        )
            .into_response()
    }
}

/// Runs a blocking host call: in place on a multi-threaded runtime (the host's calls are
/// short and their stores have their own threads), else directly.
pub(crate) fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}
