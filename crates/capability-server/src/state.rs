//! What every handler shares: the host, the options, the console's sessions.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capability_host::Host;
use capability_host::guard::HttpGuard;
use capability_host::webhook::Webhook;

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
pub struct AppState {
    pub host: Arc<Host>,
    pub options: Arc<ServerOptions>,
    pub sessions: Arc<Mutex<HashMap<String, Session>>>,
}

/// A console session: the token it stands for and its CSRF token.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    pub token_id: String,
    pub csrf: String,
    pub expires: Instant,
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
