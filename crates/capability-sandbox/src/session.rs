//! A session: several hooks of one module answered by ONE sandboxed process.
//!
//! Starting a sandbox (namespaces, mounts, landlock, seccomp, then node or python importing the
//! module) costs far more than a hook call, so a run's `execute` and `verify` (and a `plan`
//! whose run goes on without grants) share one process. The boundary does not change between
//! the ops of a session: one set of grants and limits is fixed when it starts, and a caller
//! that needs other grants starts another session (see [`crate::ModuleExecutor`]).
//!
//! The protocol is the shims' one with `"session": true` in the first envelope: after the
//! handshake the shim answers each envelope line with one response line and reads the next,
//! until stdin is closed. A native module can be pre-started the same way
//! ([`Session::prestart`]), but it reads its one envelope to the end of its input and exits
//! with the answer: its session serves one op. A thread owns the process (the sandbox is tied to the thread that
//! started it: it dies with it); [`Session::call`] hands it the next envelope. A session left
//! idle for [`Session::IDLE`] is closed by its thread, and dropping a session closes it; closing
//! waits for the thread, so the sandbox and what it made on the host are gone when it returns.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use capability_exec::{Grants, Invocation, Limits};

use crate::error::SandboxError;
use crate::linux::spawn::Next;
use crate::process::{ProcessSandbox, SessionReply};
use crate::types::{ModuleKind, ModuleSpec, Outcome, ProcessLimits};

enum Event {
    /// The answer to the pending op; the process waits for the next request.
    Reply(SessionReply),
    /// The process ended (the result of the pending op, if one was pending).
    Ended(Result<Outcome, SandboxError>),
}

/// One sandboxed process answering several hooks of one module, with fixed grants and limits.
pub struct Session {
    requests: Option<mpsc::Sender<(Vec<u8>, Instant)>>,
    events: mpsc::Receiver<Event>,
    spec: ModuleSpec,
    grants: Grants,
    limits: Limits<ProcessLimits>,
    hooks: Option<Vec<String>>,
    open: bool,
    /// Whether the first request was sent.
    called: bool,
    /// An event that came before it was waited for (a pre-started process that ended).
    ended: Option<Event>,
    /// Claimed from a pool: every outcome's boundary report says so.
    pooled: bool,
    /// Called once when the session closes (a pool starts the next spare then, so that the
    /// start does not compete with the run for the CPU).
    on_close: Option<Box<dyn FnOnce() + Send>>,
    /// The thread that owns the sandbox: joined when the session closes, so that the sandbox
    /// is gone (its process reaped, its scratch directory and cgroups removed) before
    /// [`Session::close`] returns.
    thread: Option<thread::JoinHandle<()>>,
}

/// The boundary note of a run answered by a pooled, pre-started sandbox.
pub const PRE_STARTED_NOTE: &str = "pre-started: this sandbox was started before the run's request, with no grants, and served this run only";

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("module", &self.spec.module)
            .field("hooks", &self.hooks)
            .field("open", &self.open)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// How long a session waits for its next request before it closes.
    pub const IDLE: Duration = Duration::from_secs(5);

    /// Starts the sandbox and runs the first invocation in it. `Err` means the run was refused
    /// before any code ran, as for [`ProcessSandbox::run`]; otherwise the first outcome is
    /// returned with the session (closed already when the process ended).
    pub fn start(
        sandbox: &'static ProcessSandbox,
        spec: &ModuleSpec,
        first: &Invocation,
        grants: &Grants,
        limits: &Limits<ProcessLimits>,
    ) -> Result<(Session, Outcome), SandboxError> {
        let mut session = Session::prestart(sandbox, spec, grants, limits)?;
        let outcome = session.call(first)?;
        Ok((session, outcome))
    }

    /// Starts the sandbox ahead of its first request: the interpreter starts up behind the
    /// boundary and waits on its stdin (it has not read the request or imported the module
    /// yet). The first [`Session::call`] sends the first request; its wall clock runs from
    /// then. A refusal before anything ran (a bad path, an integrity mismatch) is the answer
    /// of that first call.
    pub fn prestart(
        sandbox: &'static ProcessSandbox,
        spec: &ModuleSpec,
        grants: &Grants,
        limits: &Limits<ProcessLimits>,
    ) -> Result<Session, SandboxError> {
        let (request_tx, request_rx) = mpsc::channel::<(Vec<u8>, Instant)>();
        let (event_tx, event_rx) = mpsc::channel::<Event>();
        let (thread_spec, thread_grants, thread_limits) =
            (spec.clone(), grants.clone(), limits.clone());
        let thread = thread::Builder::new()
            .name("sandbox-session".into())
            .spawn(move || {
                let replies = event_tx.clone();
                let requests = &request_rx;
                let mut first = |wait: Duration| match requests.recv_timeout(wait) {
                    Ok((bytes, deadline)) => Some(Next::Send(bytes, deadline)),
                    Err(mpsc::RecvTimeoutError::Timeout) => None,
                    Err(mpsc::RecvTimeoutError::Disconnected) => Some(Next::Close),
                };
                let mut on_reply = |reply: SessionReply| -> Next {
                    if replies.send(Event::Reply(reply)).is_err() {
                        return Next::Close;
                    }
                    match requests.recv_timeout(Session::IDLE) {
                        Ok((bytes, deadline)) => Next::Send(bytes, deadline),
                        Err(_) => Next::Close,
                    }
                };
                let ended = sandbox.run_session(
                    &thread_spec,
                    &thread_grants,
                    &thread_limits,
                    &mut first,
                    &mut on_reply,
                );
                let _ = event_tx.send(Event::Ended(ended));
            })
            .map_err(|e| SandboxError::io("spawn the session thread", e))?;
        Ok(Session {
            requests: Some(request_tx),
            events: event_rx,
            spec: spec.clone(),
            grants: grants.clone(),
            limits: limits.clone(),
            hooks: None,
            open: true,
            called: false,
            ended: None,
            pooled: false,
            on_close: None,
            thread: Some(thread),
        })
    }

    /// Whether a pre-started session still waits for its first request (its process has
    /// not exited, and it was not called yet).
    pub fn is_waiting(&mut self) -> bool {
        if self.called || !self.open {
            return false;
        }
        match self.events.try_recv() {
            Err(mpsc::TryRecvError::Empty) => true,
            Ok(event) => {
                self.ended = Some(event);
                self.close();
                false
            }
            Err(mpsc::TryRecvError::Disconnected) => {
                self.close();
                false
            }
        }
    }

    fn wait(&mut self) -> Result<Outcome, SandboxError> {
        let event = match self.ended.take() {
            Some(event) => Ok(event),
            None => self.events.recv(),
        };
        match event {
            Ok(Event::Reply(reply)) => {
                let SessionReply { mut outcome, hooks } = reply;
                if hooks.is_some() {
                    self.hooks = hooks;
                }
                if self.pooled {
                    outcome.boundary.notes.push(PRE_STARTED_NOTE.into());
                }
                Ok(outcome)
            }
            Ok(Event::Ended(ended)) => {
                self.close();
                // A native module answers its one request as it exits.
                ended.map(|mut outcome| {
                    if self.pooled && self.called {
                        outcome.boundary.notes.push(PRE_STARTED_NOTE.into());
                    }
                    outcome
                })
            }
            Err(_) => {
                self.close();
                Err(SandboxError::Spawn {
                    detail: "the session thread ended without an answer".into(),
                })
            }
        }
    }

    /// Runs one more hook in the same process (with the session's grants and limits); the
    /// first call of a pre-started session is its first request.
    pub fn call(&mut self, invocation: &Invocation) -> Result<Outcome, SandboxError> {
        if !self.called
            && let Some(event) = self.ended.take()
        {
            // A pre-started process that ended before its first request: its end (a refusal
            // before anything ran, say) is the answer.
            self.called = true;
            self.ended = Some(event);
            return self.wait();
        }
        let Some(requests) = self.requests.as_ref().filter(|_| self.open) else {
            return Err(SandboxError::Invalid {
                detail: format!("the session of {} is closed", self.spec.module),
            });
        };
        let first = !self.called;
        let bytes = if first && ModuleKind::of(&self.spec.module) == ModuleKind::Native {
            // A native module reads one envelope to the end of its input.
            ProcessSandbox::session_request(&self.spec, invocation, &self.grants)
        } else if first {
            ProcessSandbox::session_opening(&self.spec, invocation, &self.grants)
        } else {
            ProcessSandbox::session_request(&self.spec, invocation, &self.grants)
        };
        self.called = true;
        let deadline = Instant::now() + self.limits.timeout;
        if requests.send((bytes, deadline)).is_err() {
            if first {
                // Refused before it started: the thread's last event says why.
                return self.wait();
            }
            self.close();
            return Err(SandboxError::Invalid {
                detail: format!("the session of {} is closed", self.spec.module),
            });
        }
        self.wait()
    }

    /// Marks a session claimed from a pool; `on_close` runs when it closes.
    pub(crate) fn set_pooled(&mut self, on_close: Box<dyn FnOnce() + Send>) {
        self.pooled = true;
        self.on_close = Some(on_close);
    }

    /// Whether the process still waits for requests.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Whether the module exports this hook (`plan`, `verify`, `rollback`); true when the shim
    /// did not say.
    pub fn has_hook(&self, op: &str) -> bool {
        self.hooks
            .as_ref()
            .is_none_or(|hooks| hooks.iter().any(|h| h == op))
    }

    /// The hooks the module exports, as the shim's handshake listed them.
    pub fn hooks(&self) -> Option<&[String]> {
        self.hooks.as_deref()
    }

    /// The grants the process was started with.
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// The limits the process was started with.
    pub fn limits(&self) -> &Limits<ProcessLimits> {
        &self.limits
    }

    /// Ends the session: the shim sees end of input and exits (it is killed after a short
    /// grace if it does not). Returns once the sandbox is gone: its processes reaped, its
    /// scratch directory and cgroups removed (nothing of the session outlives it, even when
    /// the process exits right after).
    pub fn close(&mut self) {
        self.open = false;
        self.requests = None;
        if let Some(thread) = self.thread.take() {
            // The thread sees the closed channel, ends the conversation and cleans up.
            let _ = thread.join();
        }
        if let Some(f) = self.on_close.take() {
            f();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.close();
    }
}
