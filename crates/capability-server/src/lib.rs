//! # capability-server
//!
//! `cap serve`: the HTTP API and the web console of the capability runtime, a thin surface
//! over the [`Host`]. It parses HTTP, calls the host and renders JSON or HTML; who may do
//! what, which approvals a principal sees and decides, the audit queries and reports are
//! the host's service API.
//!
//! * **API** under `/api/v1` (`routes::api_routes` is the one table the router and the
//!   OpenAPI document at `/openapi.json` are both built from, so they cannot drift). Errors
//!   are `{"error": {"code", "message"}}` with a matching status ([`ApiError`]).
//! * **Identities**: bearer tokens of `cap tokens` and console logins (a password set with
//!   `cap tokens add --login`), authenticated by the host to a principal with a role:
//!   `agent` invokes and never approves; `approver` decides approvals for its tenants only;
//!   `auditor` reads; `admin` does everything. A principal never decides its own request
//!   (the host's one rule).
//! * **Console** at `/console`: server-rendered pages (approve and deny are plain forms with
//!   CSRF tokens), live updates through server-sent events fed by the host's approval
//!   events, sessions in `HttpOnly`, `SameSite=Strict` cookies (`Secure` off loopback), the
//!   host's HTTP guard (Host and Origin checks, body limit) on every request.
//! * **Webhook**: each new pending approval is POSTed, signed with HMAC-SHA256, retried with
//!   backoff (the host's `webhook`, started by [`Server::serve`]).

mod api;
mod auth;
mod console;
mod events;
mod html;
pub mod routes;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use capability_core::{CapabilityError, ErrorCode};
use capability_host::guard::{HttpGuard, Refusal};
use capability_host::webhook::Webhook;
use capability_host::{AuthError, Host, HostError};
use serde_json::{Value, json};

pub use console::render_pending_page;

/// How the server runs.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// The host's HTTP guard: Host and Origin checks (the server's own origin and the
    /// allowed ones; never other pages on this machine), the body limit.
    pub guard: HttpGuard,
    /// Mark session cookies `Secure` (on unless the listener is loopback HTTP).
    pub secure_cookies: bool,
    /// Fixtures the policies page tests the host's policies against.
    pub policy_fixtures: Option<PathBuf>,
    /// Called on each new pending approval.
    pub webhook: Option<Webhook>,
    /// How long a console session lasts.
    pub session_ttl: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            guard: HttpGuard::default(),
            secure_cookies: false,
            policy_fixtures: None,
            webhook: None,
            session_ttl: Duration::from_secs(12 * 3600),
        }
    }
}

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub host: Arc<Host>,
    pub options: Arc<ServerOptions>,
    pub sessions: Arc<Mutex<HashMap<String, auth::Session>>>,
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
        Server {
            state: AppState {
                host,
                options: Arc::new(options),
                sessions: Arc::new(Mutex::new(HashMap::new())),
            },
        }
    }

    /// The whole application: the API, `/openapi.json` and the console.
    pub fn router(&self) -> Router {
        routes::router(self.state.clone())
    }

    /// Serves on `listener` until `shutdown` (the webhook, when configured, is called for
    /// each new pending approval meanwhile), then flushes the database.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        if let Some(webhook) = &self.state.options.webhook {
            self.state.host.serve_webhook(webhook.clone());
        }
        // SSE answers are written in pieces: without TCP_NODELAY each waits for Nagle.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let served = axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown)
            .await;
        let host = Arc::clone(&self.state.host);
        let _ = tokio::task::spawn_blocking(move || host.flush()).await;
        served
    }
}

/// An error answer: `{"error": {"code", "message", ...}}` with its status. Each variant holds
/// an error of its own: the host's and a capability call's as they are, the server's own
/// refusals as small structs.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// The host refused or failed (its status and code).
    #[error(transparent)]
    Host(#[from] HostError),
    /// A capability call failed (the status its code stands for).
    #[error(transparent)]
    Capability(Box<CapabilityError>),
    /// The request could not be read.
    #[error(transparent)]
    BadRequest(#[from] BadRequest),
    /// No valid credential.
    #[error(transparent)]
    Unauthorized(#[from] AuthError),
    /// The guard, a role, or CSRF refused it.
    #[error(transparent)]
    Forbidden(#[from] Forbidden),
    /// No such route.
    #[error(transparent)]
    NotFound(#[from] NotFound),
}

/// A request whose body or parameters could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub(crate) struct BadRequest {
    reason: String,
}

/// A request refused by the HTTP guard, the principal's role or the CSRF check.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub(crate) struct Forbidden {
    /// `FORBIDDEN`, or `CSRF` for a session request without its token.
    code: &'static str,
    reason: String,
}

impl Forbidden {
    /// The machine-readable code of the answer.
    pub fn code(&self) -> &'static str {
        self.code
    }
}

/// Nothing answers at the path asked for.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub(crate) struct NotFound {
    what: String,
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        ApiError::forbidden(r.to_string())
    }
}

impl ApiError {
    pub fn bad_request(reason: impl Into<String>) -> ApiError {
        BadRequest {
            reason: reason.into(),
        }
        .into()
    }

    pub fn not_found(what: impl Into<String>) -> ApiError {
        NotFound { what: what.into() }.into()
    }

    pub fn forbidden(reason: impl Into<String>) -> ApiError {
        Forbidden {
            code: "FORBIDDEN",
            reason: reason.into(),
        }
        .into()
    }

    /// A session request that changes state without its CSRF token.
    pub fn csrf(reason: impl Into<String>) -> ApiError {
        Forbidden {
            code: "CSRF",
            reason: reason.into(),
        }
        .into()
    }

    pub fn capability(e: CapabilityError) -> ApiError {
        ApiError::Capability(Box::new(e))
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Host(e) => {
                StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
            ApiError::Capability(e) => status_of(e.code),
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
        }
    }

    pub fn code(&self) -> &str {
        match self {
            ApiError::Host(e) => e.code(),
            ApiError::Capability(e) => e.code.as_str(),
            ApiError::BadRequest(_) => "INVALID_INPUT",
            ApiError::Unauthorized(_) => "UNAUTHORIZED",
            ApiError::Forbidden(e) => e.code(),
            ApiError::NotFound(_) => "NOT_FOUND",
        }
    }

    /// The answer's `message`: the error's own (a capability error's `message`).
    pub fn message(&self) -> String {
        self.to_string()
    }

    fn body(&self) -> Value {
        match self {
            ApiError::Capability(e) => capability_host::error_document(e),
            _ => json!({"error": {"code": self.code(), "message": self.message()}}),
        }
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
            self.status(),
            [(header::CONTENT_TYPE, "application/json")],
            self.body().to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_answers_its_status_code_and_message() {
        let cases = [
            (
                ApiError::bad_request("token is required"),
                400,
                "INVALID_INPUT",
            ),
            (
                ApiError::forbidden("a principal with role agent cannot approve"),
                403,
                "FORBIDDEN",
            ),
            (
                ApiError::csrf("a session request that changes state needs its CSRF token"),
                403,
                "CSRF",
            ),
            (ApiError::not_found("no such route"), 404, "NOT_FOUND"),
            (
                ApiError::Unauthorized(AuthError::Missing),
                401,
                "UNAUTHORIZED",
            ),
        ];
        for (error, status, code) in cases {
            assert_eq!(error.status().as_u16(), status, "{error}");
            assert_eq!(
                error.body(),
                json!({"error": {"code": code, "message": error.to_string()}})
            );
        }
        let failed = ApiError::capability(CapabilityError::new(
            ErrorCode::NotFound,
            "no such capability",
        ));
        assert_eq!(
            (failed.status().as_u16(), failed.code()),
            (404, "NOT_FOUND")
        );
        assert_eq!(failed.message(), "no such capability");
    }
}
