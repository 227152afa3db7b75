//! Clients of one upstream MCP server ([`McpSession`]): over stdio ([`StdioSession`], the
//! reference's `StdioMcpSession` made safe against hostile servers: line-delimited JSON-RPC
//! 2.0 with numeric ids from 1) and over streamable HTTP ([`HttpSession`]); both do the
//! `initialize` handshake (2025-11-25), `tools/list` and `tools/call`.
//!
//! A server that crashes fails the calls in flight with its exit status; the tail of its
//! stderr rides along for the operator only ([`UpstreamError::stderr`],
//! [`McpSession::stderr_tail`]): it is never part of an error's message, which callers and
//! agents read (a crashing server's stderr may hold its environment, keys included). One
//! that never answers is cut by the call's timeout; a line longer than
//! [`MAX_LINE`] (a 50 MB answer) fails the call and the session; invalid JSON-RPC and floods
//! of notifications are dropped and counted, never buffered. Blocking API: a caller waiting
//! for its answer reads the server's output itself (the `Inbox`, non-blocking), handing
//! every other response to the caller it belongs to, so that an answer reaches its caller
//! without a hand-off between threads; callers that find the inbox taken wait on a
//! `Waiter` of their own (an atomic flag polled briefly, then slept on). While no call is
//! in flight a thread per session drains notifications and notices the end of the output.
//! The server's input is non-blocking too: a server that stops reading fails the call at its
//! deadline (and the session, if half a message went out) instead of holding the caller.
//! Called on a worker of a multi-threaded Tokio runtime, only the short spin of a lone call
//! runs in place; every longer wait is inside `block_in_place`.
//! A stdio server runs as a plain child ([`StdioSession::start`]) or inside the process
//! sandbox ([`StdioSession::start_sandboxed`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use capability_sandbox::{ChildSpec, ProcessSandbox, SandboxedChild};
use rustix::event::PollFlags;
use serde_json::{Value, json};

/// The longest line accepted from an upstream (a larger answer fails the session).
pub const MAX_LINE: usize = 8 << 20;

/// How long a caller polls for its answer before it sleeps.
const SPIN: Duration = Duration::from_micros(300);

/// The longest a waiting caller sleeps before it looks again (it is woken earlier by its
/// answer, or when the inbox is free to take).
const NAP: Duration = Duration::from_millis(10);

/// How often the idle drainer looks at the output (it is woken earlier by output).
const IDLE_POLL: Duration = Duration::from_millis(100);

/// How much of a crashed server's stderr is kept for the operator.
const STDERR_TAIL: usize = 16 << 10;

/// How long a killed server's stderr is waited for (its last lines, for the operator).
const STDERR_DRAIN: Duration = Duration::from_millis(200);

/// Why an upstream call failed. The message (`Display`) is what callers may be told; the
/// stderr of a server that exited is not part of it ([`UpstreamError::stderr`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    #[error("cannot start the MCP server: {0}")]
    Spawn(String),
    /// A stdio server ended; `stderr` is the tail of its stderr, for the operator only.
    #[error("MCP server exited{status}")]
    Exited { status: String, stderr: String },
    /// A streamable-HTTP server could not be reached (or answered no HTTP).
    #[error("MCP server unreachable: {0}")]
    Unreachable(String),
    #[error("MCP server did not answer within {0} ms")]
    Timeout(u128),
    #[error("MCP server sent a message larger than {MAX_LINE} bytes")]
    TooLarge,
    #[error("MCP server stopped reading its input in the middle of a message")]
    Stalled,
    #[error("MCP server error {code}: {message}")]
    Rpc { code: i64, message: String },
}

impl UpstreamError {
    /// The tail of the stderr of a server that exited: the operator's, never to be shown to
    /// a caller.
    pub fn stderr(&self) -> Option<&str> {
        match self {
            UpstreamError::Exited { stderr, .. } => Some(stderr),
            _ => None,
        }
    }
}

type Reply = Result<Value, UpstreamError>;

/// Where the reader thread leaves the answer of one request for the caller waiting on it.
struct Waiter {
    reply: Mutex<Option<Reply>>,
    ready: AtomicBool,
    caller: std::thread::Thread,
}

impl Waiter {
    fn new() -> Arc<Waiter> {
        Arc::new(Waiter {
            reply: Mutex::new(None),
            ready: AtomicBool::new(false),
            caller: std::thread::current(),
        })
    }

    /// Hands over the answer and wakes the caller (the first answer wins).
    fn deliver(&self, reply: Reply) {
        let mut slot = self.reply.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(reply);
        }
        drop(slot);
        self.ready.store(true, Ordering::Release);
        self.caller.unpark();
    }

    fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    fn take(&self) -> Option<Reply> {
        self.reply
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// The server's output (non-blocking), read by whichever thread holds it.
struct Inbox {
    stdout: File,
    /// Where reads land (kept, so that a read costs no allocation or zeroing).
    chunk: Box<[u8]>,
    /// The bytes of a line not yet ended.
    partial: Vec<u8>,
    /// The output ended, or failed the session.
    closed: bool,
}

/// Waits until `fd` is ready for `flags` (or has hung up), at most `timeout`.
fn poll_ready(fd: &impl AsFd, flags: PollFlags, timeout: Duration) {
    use rustix::event::{PollFd, Timespec, poll};
    let timeout = Timespec::try_from(timeout).ok();
    let _ = poll(&mut [PollFd::new(fd, flags)], timeout.as_ref());
}

fn set_nonblocking(fd: &impl AsFd) -> std::io::Result<()> {
    use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
    fcntl_setfl(fd, fcntl_getfl(fd)? | OFlags::NONBLOCK)?;
    Ok(())
}

/// `m`, whether or not a holder panicked; `None` when another thread holds it.
fn try_take<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

struct Shared {
    inbox: Mutex<Inbox>,
    /// Calls waiting for their answer (the idle drainer leaves the inbox to them).
    active: AtomicUsize,
    /// The output has ended.
    closed: AtomicBool,
    pending: Mutex<HashMap<u64, Arc<Waiter>>>,
    /// Set once the session is unusable, with the reason every later call gets.
    dead: Mutex<Option<UpstreamError>>,
    stderr: Mutex<Vec<u8>>,
    /// The server's stderr has ended (or its reader stopped).
    stderr_done: AtomicBool,
    notifications: AtomicU64,
    list_changed: AtomicBool,
    invalid: AtomicU64,
}

impl Shared {
    /// The state of a session reading `stdout` (made non-blocking).
    fn new(stdout: File) -> std::io::Result<Arc<Shared>> {
        set_nonblocking(&stdout)?;
        Ok(Arc::new(Shared {
            inbox: Mutex::new(Inbox {
                stdout,
                chunk: vec![0; 64 << 10].into_boxed_slice(),
                partial: Vec::new(),
                closed: false,
            }),
            active: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            pending: Mutex::new(HashMap::new()),
            dead: Mutex::new(None),
            stderr: Mutex::new(Vec::new()),
            stderr_done: AtomicBool::new(false),
            notifications: AtomicU64::new(0),
            list_changed: AtomicBool::new(false),
            invalid: AtomicU64::new(0),
        }))
    }

    fn fail_all(&self, error: UpstreamError) {
        let mut dead = self.dead.lock().unwrap_or_else(PoisonError::into_inner);
        if dead.is_none() {
            *dead = Some(error.clone());
        }
        let reason = dead.clone().unwrap_or(error);
        drop(dead);
        let pending: Vec<Arc<Waiter>> = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, w)| w)
            .collect();
        for w in pending {
            w.deliver(Err(reason.clone()));
        }
    }

    /// What ended output fails the calls in flight with: the exit, with the stderr tail
    /// (for the operator).
    fn exited(&self) -> UpstreamError {
        UpstreamError::Exited {
            status: String::new(),
            stderr: self.stderr_tail(),
        }
    }

    /// The tail of the server's stderr read so far.
    fn stderr_tail(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap_or_else(PoisonError::into_inner))
            .to_string()
    }

    /// Reads what the server has written so far, without blocking, and hands each message
    /// on; at the end of the output (or a line longer than [`MAX_LINE`]) every pending call
    /// fails and the inbox is closed.
    fn pump(&self, inbox: &mut Inbox) {
        if let Err(e) = self.read_available(inbox) {
            self.close(inbox, e);
        }
    }

    fn read_available(&self, inbox: &mut Inbox) -> Result<(), UpstreamError> {
        let Inbox {
            stdout,
            chunk,
            partial,
            closed,
        } = inbox;
        if *closed {
            return Ok(());
        }
        loop {
            let n = match stdout.read(chunk) {
                Ok(0) => return Err(self.exited()),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return Err(self.exited()),
            };
            let mut rest = &chunk[..n];
            while let Some(end) = rest.iter().position(|&b| b == b'\n') {
                let line = &rest[..end];
                rest = &rest[end + 1..];
                if partial.len() + line.len() > MAX_LINE {
                    return Err(UpstreamError::TooLarge);
                }
                if partial.is_empty() {
                    self.dispatch(line);
                } else {
                    partial.extend_from_slice(line);
                    self.dispatch(partial);
                    partial.clear();
                }
            }
            partial.extend_from_slice(rest);
            if partial.len() > MAX_LINE {
                return Err(UpstreamError::TooLarge);
            }
        }
    }

    fn close(&self, inbox: &mut Inbox, error: UpstreamError) {
        inbox.closed = true;
        inbox.partial = Vec::new();
        self.closed.store(true, Ordering::Release);
        self.fail_all(error);
    }

    /// One line of output: a response goes to its caller, a notification is counted.
    fn dispatch(&self, line: &[u8]) {
        let Ok(mut msg) = serde_json::from_slice::<Value>(line) else {
            if !line.iter().all(u8::is_ascii_whitespace) {
                self.invalid.fetch_add(1, Ordering::Relaxed);
            }
            return;
        };
        let id = msg.get("id").and_then(Value::as_u64);
        match (id, msg.get("method")) {
            (Some(id), None) => {
                let waiter = self
                    .pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&id);
                if let Some(w) = waiter {
                    let reply = match msg.get("error") {
                        Some(e) => Err(UpstreamError::Rpc {
                            code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                            message: e
                                .get("message")
                                .and_then(Value::as_str)
                                .unwrap_or("error")
                                .to_string(),
                        }),
                        None => Ok(msg
                            .as_object_mut()
                            .and_then(|m| m.remove("result"))
                            .unwrap_or(Value::Null)),
                    };
                    w.deliver(reply);
                }
            }
            (None, Some(method)) => {
                self.notifications.fetch_add(1, Ordering::Relaxed);
                if method == "notifications/tools/list_changed" {
                    self.list_changed.store(true, Ordering::Relaxed);
                }
            }
            // A server-to-client request (sampling, roots, ping): not offered; dropped.
            _ => {
                self.invalid.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Waits until `deadline` for the answer of `waiter`: reads the output itself while no
    /// other caller does, else waits to be handed its answer by the caller who reads. The
    /// only call in flight polls for [`SPIN`] first, in place; then (or at once, when other
    /// calls are in flight) it sleeps in `poll` or `park`, inside [`crate::may_block`].
    fn wait(&self, waiter: &Waiter, deadline: Instant) -> Option<Reply> {
        let answer = match self.active.load(Ordering::Acquire) {
            1 => self.spin(waiter, (Instant::now() + SPIN).min(deadline)),
            _ => None,
        };
        let answer = match answer {
            Some(answer) => answer,
            None => crate::may_block(|| self.sleep(waiter, deadline)),
        };
        // Another caller may be asleep waiting for the inbox this one read: wake one.
        if let Some(w) = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .next()
        {
            w.caller.unpark();
        }
        answer
    }

    /// Busy-waits for the answer of `waiter` until `until`, reading the output while no
    /// other caller does; `None` if it has not come.
    fn spin(&self, waiter: &Waiter, until: Instant) -> Option<Option<Reply>> {
        let mut spins = 0u32;
        loop {
            if waiter.ready() {
                return Some(waiter.take());
            }
            if Instant::now() >= until {
                return None;
            }
            if let Some(mut inbox) = try_take(&self.inbox) {
                self.pump(&mut inbox);
                if waiter.ready() || inbox.closed {
                    continue;
                }
            }
            // Yield now and then so a server on this core can run.
            spins += 1;
            if spins.is_multiple_of(16) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Waits for the answer of `waiter` until `deadline`, asleep in `poll` while it holds
    /// the inbox, else parked until the reader hands it over.
    fn sleep(&self, waiter: &Waiter, deadline: Instant) -> Option<Reply> {
        loop {
            if waiter.ready() {
                return waiter.take();
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            if let Some(mut inbox) = try_take(&self.inbox) {
                self.pump(&mut inbox);
                if !waiter.ready() && !inbox.closed {
                    poll_ready(
                        &inbox.stdout,
                        PollFlags::IN,
                        (deadline - now).min(IDLE_POLL),
                    );
                }
            } else {
                std::thread::park_timeout((deadline - now).min(NAP));
            }
        }
    }

    /// While no call is in flight, reads the output as it comes (notifications, the end of
    /// the output); returns when it has ended or the session is gone.
    fn drain_while_idle(self: Arc<Self>, output: File) {
        while !self.closed.load(Ordering::Acquire) && Arc::strong_count(&self) > 1 {
            if self.active.load(Ordering::Acquire) > 0 {
                std::thread::sleep(NAP);
                continue;
            }
            poll_ready(&output, PollFlags::IN, IDLE_POLL);
            if self.active.load(Ordering::Acquire) > 0 {
                continue;
            }
            if let Some(mut inbox) = try_take(&self.inbox) {
                self.pump(&mut inbox);
            }
        }
    }
}

/// The process of a stdio server: a plain child, or one inside the process sandbox.
enum Process {
    Plain(Child),
    Sandboxed(Box<SandboxedChild>),
}

impl Process {
    /// How it ended, once it has.
    fn ended(&mut self) -> Option<String> {
        match self {
            Process::Plain(c) => c.try_wait().ok().flatten().map(|s| s.to_string()),
            Process::Sandboxed(c) => c.try_wait().map(|e| e.to_string()),
        }
    }

    fn kill(&mut self) {
        match self {
            Process::Plain(c) => {
                let _ = c.kill();
                let _ = c.wait();
            }
            Process::Sandboxed(c) => {
                c.kill();
                c.wait();
            }
        }
    }
}

/// The server's input: a pipe or a socket, made non-blocking.
trait Input: Write + AsFd + Send {}
impl<T: Write + AsFd + Send> Input for T {}

/// How long a notification may wait for room in the server's input.
const NOTIFY_TIMEOUT: Duration = Duration::from_millis(100);

/// One running upstream server.
pub struct StdioSession {
    child: Mutex<Process>,
    stdin: Mutex<Box<dyn Input>>,
    shared: Arc<Shared>,
    next_id: AtomicU64,
    /// What `initialize` answered.
    pub server_info: Value,
}

impl std::fmt::Debug for StdioSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioSession")
            .field("server_info", &self.server_info)
            .finish_non_exhaustive()
    }
}

impl StdioSession {
    /// Starts `command args` with `env` (only these variables) and performs the handshake.
    pub fn start(
        command: &str,
        args: &[String],
        env: &[(String, String)],
        timeout: Duration,
    ) -> Result<StdioSession, UpstreamError> {
        let mut cmd = Command::new(command);
        cmd.args(args)
            .env_clear()
            .envs(env.iter().cloned())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| UpstreamError::Spawn(format!("{command}: {e}")))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            return Err(UpstreamError::Spawn("no pipes".into()));
        };
        StdioSession::begin(
            Process::Plain(child),
            Box::new(stdin),
            stdout.into(),
            stderr,
            timeout,
        )
    }

    /// Starts the server of `spec` inside the process sandbox (its code, grants and limits)
    /// and performs the handshake. The sandbox dies with the session (and with this process).
    pub fn start_sandboxed(
        spec: &ChildSpec,
        timeout: Duration,
    ) -> Result<StdioSession, UpstreamError> {
        let mut child = ProcessSandbox::global()
            .spawn_child(spec)
            .map_err(|e| UpstreamError::Spawn(format!("{}: {e}", spec.program.display())))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(UpstreamError::Spawn("no pipes".into()));
        };
        StdioSession::begin(
            Process::Sandboxed(Box::new(child)),
            Box::new(stdin),
            stdout.into(),
            stderr,
            timeout,
        )
    }

    /// Reads the server's output and stderr on threads of their own, then does the handshake.
    fn begin(
        child: Process,
        stdin: Box<dyn Input>,
        stdout: OwnedFd,
        mut stderr: impl Read + Send + 'static,
        timeout: Duration,
    ) -> Result<StdioSession, UpstreamError> {
        let stdout = File::from(stdout);
        let spawn_error = |e: std::io::Error| UpstreamError::Spawn(format!("server output: {e}"));
        let watched = stdout.try_clone().map_err(spawn_error)?;
        let shared = Shared::new(stdout).map_err(spawn_error)?;
        set_nonblocking(&stdin).map_err(spawn_error)?;
        {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("mcp-upstream-idle".into())
                .spawn(move || shared.drain_while_idle(watched))
                .map_err(|e| UpstreamError::Spawn(e.to_string()))?;
        }
        {
            let shared = Arc::clone(&shared);
            let _ = std::thread::Builder::new()
                .name("mcp-upstream-stderr".into())
                .spawn(move || {
                    let mut chunk = [0u8; 4096];
                    while let Ok(n) = stderr.read(&mut chunk) {
                        if n == 0 {
                            break;
                        }
                        let mut tail = shared.stderr.lock().unwrap_or_else(PoisonError::into_inner);
                        tail.extend_from_slice(&chunk[..n]);
                        if tail.len() > STDERR_TAIL {
                            let cut = tail.len() - STDERR_TAIL;
                            tail.drain(..cut);
                        }
                    }
                    shared.stderr_done.store(true, Ordering::Release);
                });
        }
        let mut session = StdioSession {
            child: Mutex::new(child),
            stdin: Mutex::new(stdin),
            shared,
            next_id: AtomicU64::new(1),
            server_info: Value::Null,
        };
        let init = session.request("initialize", initialize_params(), timeout);
        match init {
            Ok(info) => session.server_info = info,
            Err(e) => {
                session.kill();
                // Its last words, now that it is gone (for the operator).
                return Err(match e {
                    UpstreamError::Exited { status, .. } => UpstreamError::Exited {
                        status,
                        stderr: session.shared.stderr_tail(),
                    },
                    other => other,
                });
            }
        }
        session.notify("notifications/initialized", json!({}));
        Ok(session)
    }

    /// Writes one message (a line), waiting (inside [`crate::may_block`]) until `deadline`
    /// for room when the server does not read. A message cut short by the deadline leaves
    /// the session unusable: it fails.
    fn send(&self, line: &[u8], deadline: Instant) -> Result<(), Unsent> {
        let mut rest = line;
        let mut stdin = self.stdin.lock().unwrap_or_else(PoisonError::into_inner);
        while !rest.is_empty() {
            match stdin.write(rest) {
                Ok(0) => return Err(Unsent::Failed(self.exit_error())),
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        if rest.len() < line.len() {
                            self.shared.fail_all(UpstreamError::Stalled);
                        }
                        return Err(Unsent::Deadline);
                    }
                    let stdin = &*stdin;
                    crate::may_block(|| poll_ready(stdin, PollFlags::OUT, left));
                }
                Err(_) => return Err(Unsent::Failed(self.exit_error())),
            }
        }
        Ok(())
    }

    fn notify(&self, method: &str, params: Value) {
        let line = message(None, method, &params);
        let _ = self.send(&line, Instant::now() + NOTIFY_TIMEOUT);
    }

    fn exit_error(&self) -> UpstreamError {
        if let Some(e) = self
            .shared
            .dead
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            return e;
        }
        let status = self
            .child
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .ended()
            .map(|s| format!(" with {s}"))
            .unwrap_or_default();
        UpstreamError::Exited {
            status,
            stderr: self.shared.stderr_tail(),
        }
    }

    /// Sends a request and waits for its result.
    pub fn request(&self, method: &str, params: Value, timeout: Duration) -> Reply {
        self.exchange(method, &params, timeout)
    }

    /// Sends a request whose params are written from `params` and waits for its result.
    fn exchange<P: serde::Serialize + ?Sized>(
        &self,
        method: &str,
        params: &P,
        timeout: Duration,
    ) -> Reply {
        if let Some(e) = self.dead() {
            return Err(e);
        }
        let deadline = Instant::now() + timeout;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let waiter = Waiter::new();
        let forget = || {
            self.shared
                .pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
        };
        self.shared
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, Arc::clone(&waiter));
        // The session may have died between the check above and the insert (after the
        // reader failed every pending call): nobody would answer.
        if let Some(e) = self.dead() {
            forget();
            return Err(e);
        }
        // Counted before sending, so that its answer is read by a caller, not the drainer.
        self.shared.active.fetch_add(1, Ordering::AcqRel);
        let line = message(Some(id), method, params);
        let answer = match self.send(&line, deadline) {
            Ok(()) => Ok(self.shared.wait(&waiter, deadline)),
            // The server did not take the message until the deadline: a timeout.
            Err(Unsent::Deadline) => Ok(None),
            Err(Unsent::Failed(e)) => Err(e),
        };
        self.shared.active.fetch_sub(1, Ordering::AcqRel);
        let answer = match answer {
            Ok(answer) => answer,
            Err(e) => {
                forget();
                return Err(e);
            }
        };
        match answer {
            Some(reply) => reply,
            None => {
                forget();
                if self.dead().is_none() {
                    self.notify(
                        "notifications/cancelled",
                        json!({"requestId": id, "reason": "timeout"}),
                    );
                }
                Err(UpstreamError::Timeout(timeout.as_millis()))
            }
        }
    }

    /// Why the session can no longer be used, if it cannot.
    pub fn dead(&self) -> Option<UpstreamError> {
        let dead = self
            .shared
            .dead
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(UpstreamError::Exited { stderr, .. }) = &dead {
            // Name the exit status once the process is reaped.
            let status = self
                .child
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .ended()
                .map(|s| format!(" with {s}"))
                .unwrap_or_default();
            return Some(UpstreamError::Exited {
                status,
                stderr: stderr.clone(),
            });
        }
        dead
    }

    /// Stops the server, and waits a little ([`STDERR_DRAIN`]) for the rest of its stderr.
    pub fn kill(&self) {
        self.child
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .kill();
        let deadline = Instant::now() + STDERR_DRAIN;
        while !self.shared.stderr_done.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// One upstream session, whatever its transport.
pub trait McpSession: Send + Sync + std::fmt::Debug {
    /// Sends a request and waits for its result.
    fn request(&self, method: &str, params: Value, timeout: Duration) -> Reply;
    /// Why the session can no longer be used, if it cannot.
    fn dead(&self) -> Option<UpstreamError>;
    /// Whether the server said its tools changed since the last call of this function.
    fn take_list_changed(&self) -> bool;
    /// Stops the session (and the server, for a child).
    fn kill(&self);

    /// The tail of the server's stderr (a child's), for the operator only: never to be
    /// shown to a caller.
    fn stderr_tail(&self) -> Option<String> {
        None
    }

    /// Every tool, following `nextCursor`.
    fn list_tools(&self, timeout: Duration) -> Result<Vec<Value>, UpstreamError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let page = self.request("tools/list", params, timeout)?;
            if let Some(list) = page.get("tools").and_then(Value::as_array) {
                tools.extend(list.iter().cloned());
            }
            cursor = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_string);
            if cursor.is_none() {
                break;
            }
        }
        Ok(tools)
    }

    /// `tools/call`, wrapping a non-object input as `{value: input}` (the reference).
    fn call_tool(&self, name: &str, arguments: &Value, timeout: Duration) -> Reply {
        self.request(
            "tools/call",
            json!({"name": name, "arguments": tool_arguments(arguments)}),
            timeout,
        )
    }
}

/// The arguments of a `tools/call`: an object as it is, anything else as `{value: input}`.
fn tool_arguments(input: &Value) -> std::borrow::Cow<'_, Value> {
    match input {
        Value::Object(_) => std::borrow::Cow::Borrowed(input),
        other => std::borrow::Cow::Owned(json!({ "value": other })),
    }
}

/// Why a message was not written (whole).
enum Unsent {
    /// The server's input stayed full until the deadline (had part of the message gone
    /// out, the session has failed with [`UpstreamError::Stalled`]).
    Deadline,
    Failed(UpstreamError),
}

/// A JSON-RPC 2.0 request (with an id) or notification, as one line.
fn message<P: serde::Serialize + ?Sized>(id: Option<u64>, method: &str, params: &P) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Message<'a, P: ?Sized> {
        jsonrpc: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<u64>,
        method: &'a str,
        params: &'a P,
    }
    let mut line = Vec::with_capacity(256);
    let msg = Message {
        jsonrpc: "2.0",
        id,
        method,
        params,
    };
    // Writing JSON into memory fails only for a map with non-string keys, which a `Value`
    // and the params here cannot have.
    let _ = serde_json::to_writer(&mut line, &msg);
    line.push(b'\n');
    line
}

impl McpSession for StdioSession {
    fn request(&self, method: &str, params: Value, timeout: Duration) -> Reply {
        StdioSession::request(self, method, params, timeout)
    }
    fn call_tool(&self, name: &str, arguments: &Value, timeout: Duration) -> Reply {
        #[derive(serde::Serialize)]
        struct Params<'a> {
            name: &'a str,
            arguments: &'a Value,
        }
        let arguments = tool_arguments(arguments);
        self.exchange(
            "tools/call",
            &Params {
                name,
                arguments: &arguments,
            },
            timeout,
        )
    }
    fn dead(&self) -> Option<UpstreamError> {
        StdioSession::dead(self)
    }
    fn take_list_changed(&self) -> bool {
        self.shared.list_changed.swap(false, Ordering::Relaxed)
    }
    fn kill(&self) {
        StdioSession::kill(self)
    }
    fn stderr_tail(&self) -> Option<String> {
        Some(self.shared.stderr_tail())
    }
}

/// The handshake every session starts with.
fn initialize_params() -> Value {
    json!({
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "capability-mcp-gateway", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// An upstream MCP server over streamable HTTP (the legacy session handshake: `initialize`,
/// then every request carries `Mcp-Session-Id`). Requests go through the OpenAPI HTTP
/// client's limits (deadline, an 8 MiB answer, same-origin redirects only); an answer is
/// JSON or a server-sent-event stream, in which the response with the request's id is
/// taken and notifications (`list_changed` among them) are read.
#[derive(Debug)]
pub struct HttpSession {
    client: capability_openapi::http::HttpClient,
    url: url::Url,
    allowed: Vec<capability_openapi::http::Origin>,
    headers: Vec<(String, String)>,
    session: Mutex<Option<String>>,
    next_id: AtomicU64,
    list_changed: AtomicBool,
    dead: Mutex<Option<UpstreamError>>,
    /// What `initialize` answered.
    pub server_info: Value,
}

impl HttpSession {
    /// Connects to `url` (`http://` or `https://`), with extra request `headers` (a bearer
    /// token for the upstream), and performs the handshake.
    pub fn start(
        url: &str,
        headers: Vec<(String, String)>,
        timeout: Duration,
    ) -> Result<HttpSession, UpstreamError> {
        use capability_openapi::http::{HttpClient, HttpConfig, Resolver, origin_of};
        let parsed =
            url::Url::parse(url).map_err(|e| UpstreamError::Spawn(format!("{url}: {e}")))?;
        let origin =
            origin_of(&parsed).ok_or_else(|| UpstreamError::Spawn(format!("{url}: no origin")))?;
        let client = HttpClient::new(
            HttpConfig {
                timeout,
                max_response_bytes: MAX_LINE,
                retries: 0,
                // The gateway's config names this upstream: private addresses are its choice.
                allow_private: true,
                ..HttpConfig::default()
            },
            Resolver::System,
        )
        .map_err(|e| UpstreamError::Spawn(e.to_string()))?;
        let mut session = HttpSession {
            client,
            url: parsed,
            allowed: vec![origin],
            headers,
            session: Mutex::new(None),
            next_id: AtomicU64::new(1),
            list_changed: AtomicBool::new(false),
            dead: Mutex::new(None),
            server_info: Value::Null,
        };
        session.server_info = session.request("initialize", initialize_params(), timeout)?;
        let _ = session.post(
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            None,
            timeout,
        );
        Ok(session)
    }

    /// Posts one message; the response with `id` (when one is awaited). Blocking, inside
    /// [`crate::may_block`].
    fn post(&self, msg: &Value, id: Option<u64>, timeout: Duration) -> Reply {
        crate::may_block(|| self.exchange(msg, id, timeout))
    }

    fn exchange(&self, msg: &Value, id: Option<u64>, timeout: Duration) -> Reply {
        use capability_openapi::http::{HttpError, Outgoing};
        let mut headers = vec![
            (
                "Accept".to_string(),
                "application/json, text/event-stream".to_string(),
            ),
            ("MCP-Protocol-Version".to_string(), "2025-11-25".to_string()),
        ];
        headers.extend(self.headers.iter().cloned());
        if let Some(s) = self
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            headers.push(("Mcp-Session-Id".to_string(), s));
        }
        let request = Outgoing {
            method: "POST".into(),
            url: self.url.clone(),
            headers,
            body: Some(("application/json".into(), msg.to_string().into_bytes())),
        };
        let response = self
            .client
            .send(request, &self.allowed, Some(timeout), &|| false)
            .map_err(|e| match e {
                HttpError::Timeout(ms) => UpstreamError::Timeout(ms),
                HttpError::TooLarge(_) => UpstreamError::TooLarge,
                other => UpstreamError::Unreachable(other.to_string()),
            })?;
        if let Some(s) = response.mcp_session_id {
            *self.session.lock().unwrap_or_else(PoisonError::into_inner) = Some(s);
        }
        if !(200..300).contains(&response.status) {
            return Err(UpstreamError::Rpc {
                code: -32000,
                message: format!("HTTP {}", response.status),
            });
        }
        let Some(id) = id else {
            return Ok(Value::Null);
        };
        let text = String::from_utf8_lossy(&response.body);
        let sse = response
            .content_type
            .as_deref()
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let messages: Vec<Value> = if sse {
            text.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str(d.trim()).ok())
                .collect()
        } else {
            serde_json::from_str(&text).into_iter().collect()
        };
        for m in messages {
            if m.get("method").and_then(Value::as_str) == Some("notifications/tools/list_changed") {
                self.list_changed.store(true, Ordering::Relaxed);
            }
            if m.get("id").and_then(Value::as_u64) == Some(id) {
                return match m.get("error") {
                    Some(e) => Err(UpstreamError::Rpc {
                        code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                        message: e
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("error")
                            .to_string(),
                    }),
                    None => Ok(m.get("result").cloned().unwrap_or(Value::Null)),
                };
            }
        }
        Err(UpstreamError::Rpc {
            code: -32603,
            message: "the upstream answered without a response to the request".into(),
        })
    }
}

impl McpSession for HttpSession {
    fn request(&self, method: &str, params: Value, timeout: Duration) -> Reply {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let reply = self.post(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
            Some(id),
            timeout,
        );
        if let Err(e @ UpstreamError::Unreachable(_)) = &reply {
            // Unreachable: restart (a new handshake) after the backoff.
            *self.dead.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.clone());
        }
        reply
    }
    fn dead(&self) -> Option<UpstreamError> {
        self.dead
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
    fn take_list_changed(&self) -> bool {
        self.list_changed.swap(false, Ordering::Relaxed)
    }
    fn kill(&self) {
        let session = self
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if session.is_some() {
            *self.dead.lock().unwrap_or_else(PoisonError::into_inner) =
                Some(UpstreamError::Spawn("closed".into()));
        }
    }
}

impl Drop for StdioSession {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A tool result that reports an error (`isError: true`). Its message is the result's text
/// items joined by newlines, or the reference's `MCP tool returned an error` when it has none.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", if text.is_empty() { "MCP tool returned an error" } else { text.as_str() })]
pub struct ToolError {
    text: String,
}

impl ToolError {
    /// The result's text items, joined by newlines (empty when it has none).
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// The reference's tool-result mapping: `isError` → a [`ToolError`] with the joined text;
/// else `structuredContent`; else one text item JSON-parsed (or the raw text); several text
/// items as an array of texts; otherwise the raw result.
pub fn map_tool_result(result: &Value) -> Result<Value, ToolError> {
    let texts: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter(|i| i.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|i| i.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    if result.get("isError") == Some(&Value::Bool(true)) {
        return Err(ToolError {
            text: texts.join("\n"),
        });
    }
    if let Some(s) = result.get("structuredContent") {
        return Ok(s.clone());
    }
    match texts.as_slice() {
        [one] => Ok(serde_json::from_str(one).unwrap_or_else(|_| Value::String(one.to_string()))),
        [] => Ok(result.clone()),
        many => Ok(json!(many)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn result_mapping_follows_the_reference() {
        let text = |t: &str| json!({"content": [{"type": "text", "text": t}]});
        assert_eq!(
            map_tool_result(&text("{\"a\":1}")).unwrap(),
            json!({"a": 1})
        );
        assert_eq!(map_tool_result(&text("plain")).unwrap(), json!("plain"));
        assert_eq!(
            map_tool_result(&json!({"content": [], "structuredContent": {"x": 2}})).unwrap(),
            json!({"x": 2})
        );
        assert_eq!(
            map_tool_result(&json!({"isError": true, "content": []}))
                .unwrap_err()
                .to_string(),
            "MCP tool returned an error"
        );
        let failed = json!({"isError": true, "content": [{"type": "text", "text": "no such row"}]});
        let e = map_tool_result(&failed).unwrap_err();
        assert_eq!(
            (e.text(), e.to_string()),
            ("no such row", "no such row".into())
        );
        let two =
            json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        assert_eq!(map_tool_result(&two).unwrap(), json!(["a", "b"]));
    }

    #[test]
    fn a_server_that_stops_reading_fails_the_call_at_its_timeout() {
        // Answers the handshake, then never reads its input again.
        let script = concat!(
            "read line; printf '%s\\n' '{\"jsonrpc\":\"2.0\",\"id\":1,",
            "\"result\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{}}}'; ",
            "exec sleep 60"
        );
        let env = [("PATH".to_string(), "/usr/bin:/bin".to_string())];
        let session = StdioSession::start(
            "sh",
            &["-c".into(), script.into()],
            &env,
            Duration::from_secs(10),
        )
        .unwrap();
        // Far more than a pipe holds: the write stalls part-way.
        let big = json!({"text": "x".repeat(4 << 20)});
        let started = Instant::now();
        let answer = session.call_tool("echo", &big, Duration::from_millis(300));
        assert_eq!(answer, Err(UpstreamError::Timeout(300)));
        assert!(started.elapsed() < Duration::from_secs(5));
        // Half a message is in its input: the session is done.
        assert_eq!(session.dead(), Some(UpstreamError::Stalled));
        assert_eq!(
            session.call_tool("echo", &json!({}), Duration::from_secs(1)),
            Err(UpstreamError::Stalled)
        );
    }

    fn shared(output: std::io::PipeReader) -> Arc<Shared> {
        Shared::new(File::from(OwnedFd::from(output))).unwrap()
    }

    fn pending(shared: &Shared, id: u64) -> Arc<Waiter> {
        let w = Waiter::new();
        shared.pending.lock().unwrap().insert(id, Arc::clone(&w));
        w
    }

    #[test]
    fn a_long_line_is_refused_without_buffering_it_all() {
        let (output, mut input) = std::io::pipe().unwrap();
        let shared = shared(output);
        let w = pending(&shared, 1);
        let writer = std::thread::spawn(move || {
            let _ = input.write_all(&vec![b'x'; MAX_LINE + (1 << 20)]);
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        assert_eq!(
            shared.wait(&w, deadline),
            Some(Err(UpstreamError::TooLarge))
        );
        let inbox = shared.inbox.lock().unwrap();
        assert!(inbox.closed && inbox.partial.capacity() == 0);
        drop(inbox);
        // The writer is cut off when the session's output is dropped.
        drop(shared);
        writer.join().unwrap();
    }

    #[test]
    fn answers_reach_their_callers_across_split_lines_and_notifications() {
        let (output, mut input) = std::io::pipe().unwrap();
        let shared = shared(output);
        let (one, two) = (pending(&shared, 1), pending(&shared, 2));
        let other = {
            let shared = Arc::clone(&shared);
            let two = Arc::clone(&two);
            std::thread::spawn(move || shared.wait(&two, Instant::now() + Duration::from_secs(20)))
        };
        let writer = std::thread::spawn(move || {
            let lines = concat!(
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n",
                "not json\n",
                "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"n\":2}}\n",
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-1,\"message\":\"no\"}}\n",
            );
            // A byte at a time: every line arrives in pieces.
            for b in lines.bytes() {
                input.write_all(&[b]).unwrap();
                std::thread::sleep(Duration::from_micros(20));
            }
            input
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let rpc = UpstreamError::Rpc {
            code: -1,
            message: "no".into(),
        };
        assert_eq!(shared.wait(&one, deadline), Some(Err(rpc)));
        assert_eq!(other.join().unwrap(), Some(Ok(json!({"n": 2}))));
        assert!(shared.list_changed.load(Ordering::Relaxed));
        assert_eq!(shared.invalid.load(Ordering::Relaxed), 1);
        // The end of the output fails a call still waiting, with the server's stderr.
        let three = pending(&shared, 3);
        shared.stderr.lock().unwrap().extend_from_slice(b"bye");
        drop(writer.join().unwrap());
        let ended = shared.wait(&three, Instant::now() + Duration::from_secs(20));
        assert!(
            matches!(&ended, Some(Err(UpstreamError::Exited { stderr, .. })) if stderr == "bye"),
            "{ended:?}"
        );
    }
}
