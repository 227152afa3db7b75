//! The MCP sessions of the HTTP transport, each bound to the principal that opened it.
//!
//! rmcp's [`LocalSessionManager`] keeps the sessions; [`Sessions`] stands in front of it and
//! records, when a session is created, which principal created it: the principal of the
//! request being served, which the gate puts in [`CALLER`] around the MCP service. The gate
//! asks [`Sessions::claim`] before a request that names a session reaches rmcp (or the
//! lane), and answers a session of another principal as it answers an unknown one.
//!
//! It also holds the limits: at most `max` sessions in all and `per_principal` for one
//! principal. A slot is taken when a session is about to be created (never for the stateless
//! requests of 2026-07-28 clients, which open none) and given back when the session ends:
//! closed by its client (`DELETE`), idle for longer than the idle timeout
//! ([`Sessions::close_idle`]), or ended by rmcp (the server stopping), which closes it
//! through [`SessionManager::close_session`] too.
//!
//! The idle timeout is kept here, not by rmcp's keep-alive (which is off): rmcp sees only
//! the requests that reach it, and the gate's lane for `tools/call` ([`super::lane`])
//! answers others. Every request that names a session, whichever path answers it, starts
//! its idle time again. The lane takes a session's calls once its handshake finished
//! (`notifications/initialized` reached rmcp).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rmcp::model::{ClientJsonRpcMessage, ClientNotification, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{
    EventStore, EventStream, RestoreOutcome, SessionId, SessionManager,
};

tokio::task_local! {
    /// The caller of the HTTP request being served (set by the gate around the MCP service;
    /// rmcp creates a session within the request's own task).
    pub(crate) static CALLER: Arc<Caller>;
}

/// Who is calling, and why the session this request would have opened was refused.
#[derive(Debug)]
pub(crate) struct Caller {
    principal: Arc<str>,
    refused: Mutex<Option<Refusal>>,
}

/// A session refused for a limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Every session the server holds is taken.
    Full(usize),
    /// The caller holds as many as one principal may.
    PrincipalFull(usize),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Full(max) => write!(f, "too many sessions (limit {max})"),
            Refusal::PrincipalFull(max) => {
                write!(
                    f,
                    "too many sessions for this caller (limit {max} per principal)"
                )
            }
        }
    }
}

impl Caller {
    pub(crate) fn new(principal: &str) -> Arc<Caller> {
        Arc::new(Caller {
            principal: Arc::from(principal),
            refused: Mutex::new(None),
        })
    }

    /// Why a session was refused to this request, if one was.
    pub(crate) fn refusal(&self) -> Option<Refusal> {
        self.refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn refuse(&self, why: Refusal) {
        *self.refused.lock().unwrap_or_else(PoisonError::into_inner) = Some(why);
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionsError {
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
    #[error("{0}")]
    Refused(Refusal),
    #[error("a session is opened only within an authenticated request")]
    NoCaller,
}

/// A session's principal, and what the lane needs to know of it.
#[derive(Debug)]
struct Session {
    principal: Arc<str>,
    /// The client sent `notifications/initialized`.
    initialized: bool,
    /// When the gate last took a request of it.
    seen: Instant,
}

/// Sessions by id, and how many each principal holds (with the slots taken for sessions
/// being created).
#[derive(Debug, Default)]
struct Owners {
    by_id: HashMap<SessionId, Session>,
    held: HashMap<Arc<str>, usize>,
    total: usize,
}

/// rmcp's sessions, bound to their principals and limited (see the module).
pub(crate) struct Sessions {
    local: LocalSessionManager,
    max: usize,
    per_principal: usize,
    /// How long a session lives without a request.
    idle_timeout: Duration,
    owners: Mutex<Owners>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("max", &self.max)
            .field("per_principal", &self.per_principal)
            .finish_non_exhaustive()
    }
}

/// A slot taken for a session being created: given back when dropped unless bound to the
/// session (a request can be dropped at any await).
struct Slot<'a> {
    sessions: &'a Sessions,
    principal: Arc<str>,
    armed: bool,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.sessions
                .give_back(&mut self.sessions.owners(), &self.principal);
        }
    }
}

impl Sessions {
    /// The sessions of `local` (whose own keep-alive is turned off: see the module docs).
    pub(crate) fn new(
        mut local: LocalSessionManager,
        max: usize,
        per_principal: usize,
        idle_timeout: Duration,
    ) -> Sessions {
        local.session_config.keep_alive = None;
        Sessions {
            local,
            max,
            per_principal,
            idle_timeout,
            owners: Mutex::new(Owners::default()),
        }
    }

    fn owners(&self) -> MutexGuard<'_, Owners> {
        self.owners.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the session `id` exists and was opened by `principal`; if so, a request of
    /// it is being served: its idle time starts again.
    pub(crate) fn claim(&self, id: &str, principal: &str) -> bool {
        match self.owners().by_id.get_mut(id) {
            Some(s) if &*s.principal == principal => {
                s.seen = Instant::now();
                true
            }
            _ => false,
        }
    }

    /// Whether the lane may answer a request of session `id`: it finished its handshake.
    pub(crate) fn in_lane(&self, id: &str) -> bool {
        self.owners().by_id.get(id).is_some_and(|s| s.initialized)
    }

    /// How often [`Sessions::close_idle`] should run: an idle session ends at most this
    /// late (a tenth of the idle timeout, at most a second).
    pub(crate) fn idle_check_period(&self) -> Duration {
        (self.idle_timeout / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    /// Closes the sessions without a request for longer than the idle timeout.
    pub(crate) async fn close_idle(&self) {
        let idle: Vec<SessionId> = self
            .owners()
            .by_id
            .iter()
            .filter(|(_, s)| s.seen.elapsed() >= self.idle_timeout)
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            let _ = self.close_session(&id).await;
        }
    }

    fn take_slot(&self, principal: Arc<str>) -> Result<Slot<'_>, Refusal> {
        let mut owners = self.owners();
        if owners.total >= self.max {
            return Err(Refusal::Full(self.max));
        }
        if owners.held.get(&principal).copied().unwrap_or(0) >= self.per_principal {
            return Err(Refusal::PrincipalFull(self.per_principal));
        }
        *owners.held.entry(Arc::clone(&principal)).or_insert(0) += 1;
        owners.total += 1;
        Ok(Slot {
            sessions: self,
            principal,
            armed: true,
        })
    }

    fn give_back(&self, owners: &mut Owners, principal: &Arc<str>) {
        owners.total = owners.total.saturating_sub(1);
        if let Some(held) = owners.held.get_mut(principal) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                owners.held.remove(principal);
            }
        }
    }

    /// Forgets the session `id` (once: rmcp closes a session the client deleted again when
    /// its worker ends) and gives its slot back.
    fn unbind(&self, id: &SessionId) {
        let mut owners = self.owners();
        if let Some(session) = owners.by_id.remove(id) {
            self.give_back(&mut owners, &session.principal);
        }
    }
}

// The streams are boxed into rmcp's `EventStream` (this crate does not depend on `futures`,
// whose `Stream` the trait names): a refinement of the trait's `impl Stream`.
#[allow(refining_impl_trait)]
impl SessionManager for Sessions {
    type Error = SessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let caller = CALLER
            .try_with(Arc::clone)
            .map_err(|_| SessionsError::NoCaller)?;
        let mut slot = match self.take_slot(Arc::clone(&caller.principal)) {
            Ok(slot) => slot,
            Err(why) => {
                caller.refuse(why.clone());
                return Err(SessionsError::Refused(why));
            }
        };
        let (id, transport) = self.local.create_session().await?;
        // The id is known to no one else yet: no request can name it before it is bound.
        let mut owners = self.owners();
        owners.by_id.insert(
            id.clone(),
            Session {
                principal: Arc::clone(&caller.principal),
                initialized: false,
                seen: Instant::now(),
            },
        );
        slot.armed = false;
        drop(owners);
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.local.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.local.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        // The slot first: a request dropped while rmcp closes must not keep it taken.
        self.unbind(id);
        Ok(self.local.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<EventStream, Self::Error> {
        Ok(Box::pin(self.local.create_stream(id, message).await?))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        let initialized = matches!(
            &message,
            ClientJsonRpcMessage::Notification(n)
                if matches!(n.notification, ClientNotification::InitializedNotification(_))
        );
        self.local.accept_message(id, message).await?;
        // Marked once rmcp took it: from then on the lane answers what rmcp would.
        if initialized && let Some(s) = self.owners().by_id.get_mut(id) {
            s.initialized = true;
        }
        Ok(())
    }

    async fn create_standalone_stream(&self, id: &SessionId) -> Result<EventStream, Self::Error> {
        Ok(Box::pin(self.local.create_standalone_stream(id).await?))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<EventStream, Self::Error> {
        Ok(Box::pin(self.local.resume(id, last_event_id).await?))
    }

    async fn restore_session(
        &self,
        _id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        // No session store: a session rmcp does not hold is unknown (and would have no owner).
        Ok(RestoreOutcome::NotSupported)
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.local.event_store()
    }
}
