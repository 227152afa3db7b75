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
//! * **Actions** the caller executes itself (`/api/v1/actions`, its batch form and
//!   `/api/v1/actions/{id}/result`): the host's before and after stages as two requests
//!   (`capability_host::remote`); a task closes actions left without a result.
//! * **Webhook**: each new pending approval is POSTed, signed with HMAC-SHA256, retried with
//!   backoff (the host's `webhook`, started by [`Server::serve`]).

mod access;
mod api;
mod auth;
mod console;
mod error;
mod events;
mod html;
pub mod routes;
mod state;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use axum::Router;
use capability_host::Host;

pub use access::Access;
pub use console::render_pending_page;
pub use error::status_of;

use state::AppState;
pub use state::ServerOptions;

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
        // Actions left without a result are closed as abandoned once their time is up.
        let reaper = {
            let host = Arc::clone(&self.state.host);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_millis(250));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    if host.open_action_count() > 0 {
                        let host = Arc::clone(&host);
                        let _ = tokio::task::spawn_blocking(move || host.close_abandoned_actions())
                            .await;
                    }
                }
            })
        };
        // SSE answers are written in pieces: without TCP_NODELAY each waits for Nagle.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        // The peer's address reaches the handlers (failed sign-ins are throttled by it).
        let served = axum::serve(
            listener,
            self.router()
                .into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown)
        .await;
        reaper.abort();
        let host = Arc::clone(&self.state.host);
        let _ = tokio::task::spawn_blocking(move || host.flush()).await;
        served
    }
}
