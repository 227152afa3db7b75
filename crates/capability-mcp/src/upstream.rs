//! Clients of one upstream MCP server ([`McpSession`]): over stdio ([`StdioSession`], the
//! reference's `StdioMcpSession` made safe against hostile servers: line-delimited JSON-RPC
//! 2.0 with numeric ids from 1) and over streamable HTTP ([`HttpSession`]); both do the
//! `initialize` handshake (2025-11-25), `tools/list` and `tools/call`.
//!
//! A server that crashes fails the calls in flight with its exit status and the tail of its
//! stderr; one that never answers is cut by the call's timeout; a line longer than
//! [`MAX_LINE`] (a 50 MB answer) fails the call and the session; invalid JSON-RPC and floods
//! of notifications are dropped and counted, never buffered. Blocking API: a reader thread
//! per session hands responses to the waiting callers (each caller waits on a [`Waiter`] of
//! its own: an atomic flag it polls briefly, then sleeps on, woken by the reader). A stdio
//! server runs as a plain child ([`StdioSession::start`]) or inside the process sandbox
//! ([`StdioSession::start_sandboxed`]).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use capability_sandbox::{ChildSpec, ProcessSandbox, SandboxedChild};
use serde_json::{Value, json};

/// The longest line accepted from an upstream (a larger answer fails the session).
pub const MAX_LINE: usize = 8 << 20;

/// How long a caller polls for its answer before it sleeps.
const SPIN: Duration = Duration::from_micros(300);

/// How much of a crashed server's stderr is kept for the error.
const STDERR_TAIL: usize = 16 << 10;

/// Why an upstream call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    #[error("cannot start the MCP server: {0}")]
    Spawn(String),
    #[error("MCP server exited{status}: {stderr}")]
    Exited { status: String, stderr: String },
    #[error("MCP server did not answer within {0} ms")]
    Timeout(u128),
    #[error("MCP server sent a message larger than {MAX_LINE} bytes")]
    TooLarge,
    #[error("MCP server error {code}: {message}")]
    Rpc { code: i64, message: String },
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

    /// Waits until `deadline` for the answer: polls for [`SPIN`] (most answers come
    /// within a few hundred microseconds, and a sleeping thread is slow to wake), then
    /// sleeps until woken.
    fn wait(&self, deadline: Instant) -> Option<Reply> {
        let spin_until = Instant::now() + SPIN;
        let mut spins = 0u32;
        while !self.ready.load(Ordering::Acquire) {
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            if now < spin_until {
                // Mostly busy-wait; yield now and then so a server on this core can run.
                spins += 1;
                if spins.is_multiple_of(16) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            } else {
                std::thread::park_timeout(deadline - now);
            }
        }
        self.reply
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

struct Shared {
    pending: Mutex<HashMap<u64, Arc<Waiter>>>,
    /// Set once the session is unusable, with the reason every later call gets.
    dead: Mutex<Option<UpstreamError>>,
    stderr: Mutex<Vec<u8>>,
    notifications: AtomicU64,
    list_changed: AtomicBool,
    invalid: AtomicU64,
}

impl Shared {
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

/// One running upstream server.
pub struct StdioSession {
    child: Mutex<Process>,
    stdin: Mutex<Box<dyn Write + Send>>,
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

/// Reads one line of at most `MAX_LINE` bytes; `Ok(None)` at end of stream.
fn read_line(reader: &mut impl BufRead, buf: &mut Vec<u8>) -> Result<Option<()>, UpstreamError> {
    buf.clear();
    let mut limited = reader.take(MAX_LINE as u64 + 1);
    match limited.read_until(b'\n', buf) {
        Ok(0) => Ok(None),
        Ok(_) if buf.len() > MAX_LINE => Err(UpstreamError::TooLarge),
        Ok(_) => Ok(Some(())),
        Err(_) => Ok(None),
    }
}

fn reader_loop(stdout: impl Read, shared: Arc<Shared>) {
    let mut reader = BufReader::with_capacity(64 << 10, stdout);
    let mut buf = Vec::new();
    loop {
        match read_line(&mut reader, &mut buf) {
            Ok(Some(())) => {}
            Ok(None) => return,
            Err(e) => {
                shared.fail_all(e);
                return;
            }
        }
        let Ok(mut msg) = serde_json::from_slice::<Value>(&buf) else {
            if !buf.iter().all(u8::is_ascii_whitespace) {
                shared.invalid.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        };
        let id = msg.get("id").and_then(Value::as_u64);
        match (id, msg.get("method")) {
            (Some(id), None) => {
                let sender = shared
                    .pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&id);
                if let Some(w) = sender {
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
                shared.notifications.fetch_add(1, Ordering::Relaxed);
                if method == "notifications/tools/list_changed" {
                    shared.list_changed.store(true, Ordering::Relaxed);
                }
            }
            // A server-to-client request (sampling, roots, ping): not offered; dropped.
            _ => {
                shared.invalid.fetch_add(1, Ordering::Relaxed);
            }
        }
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
            stdout,
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
            stdout,
            stderr,
            timeout,
        )
    }

    /// Reads the server's output and stderr on threads of their own, then does the handshake.
    fn begin(
        child: Process,
        stdin: Box<dyn Write + Send>,
        stdout: impl Read + Send + 'static,
        mut stderr: impl Read + Send + 'static,
        timeout: Duration,
    ) -> Result<StdioSession, UpstreamError> {
        let shared = Arc::new(Shared {
            pending: Mutex::new(HashMap::new()),
            dead: Mutex::new(None),
            stderr: Mutex::new(Vec::new()),
            notifications: AtomicU64::new(0),
            list_changed: AtomicBool::new(false),
            invalid: AtomicU64::new(0),
        });
        {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("mcp-upstream-reader".into())
                .spawn(move || {
                    reader_loop(stdout, Arc::clone(&shared));
                    let stderr = String::from_utf8_lossy(
                        &shared.stderr.lock().unwrap_or_else(PoisonError::into_inner),
                    )
                    .to_string();
                    shared.fail_all(UpstreamError::Exited {
                        status: String::new(),
                        stderr,
                    });
                })
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
                return Err(e);
            }
        }
        session.notify("notifications/initialized", json!({}));
        Ok(session)
    }

    fn send(&self, msg: &Value) -> Result<(), UpstreamError> {
        let mut line = msg.to_string();
        line.push('\n');
        let mut stdin = self.stdin.lock().unwrap_or_else(PoisonError::into_inner);
        stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|_| self.exit_error())
    }

    fn notify(&self, method: &str, params: Value) {
        let _ = self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
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
            stderr: String::from_utf8_lossy(
                &self
                    .shared
                    .stderr
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            )
            .to_string(),
        }
    }

    /// Sends a request and waits for its result.
    pub fn request(&self, method: &str, params: Value, timeout: Duration) -> Reply {
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
        let sent =
            self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        if let Err(e) = sent {
            forget();
            return Err(e);
        }
        match waiter.wait(deadline) {
            Some(reply) => reply,
            None => {
                forget();
                self.notify(
                    "notifications/cancelled",
                    json!({"requestId": id, "reason": "timeout"}),
                );
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

    /// Stops the server.
    pub fn kill(&self) {
        self.child
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .kill();
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
    fn call_tool(&self, name: &str, arguments: Value, timeout: Duration) -> Reply {
        let arguments = match arguments {
            Value::Object(_) => arguments,
            other => json!({ "value": other }),
        };
        self.request(
            "tools/call",
            json!({"name": name, "arguments": arguments}),
            timeout,
        )
    }
}

impl McpSession for StdioSession {
    fn request(&self, method: &str, params: Value, timeout: Duration) -> Reply {
        StdioSession::request(self, method, params, timeout)
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

    /// Posts one message; the response with `id` (when one is awaited).
    fn post(&self, msg: &Value, id: Option<u64>, timeout: Duration) -> Reply {
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
                other => UpstreamError::Exited {
                    status: String::new(),
                    stderr: other.to_string(),
                },
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
        if let Err(e @ UpstreamError::Exited { .. }) = &reply {
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

/// The reference's tool-result mapping: `isError` → the joined text (or `MCP tool returned
/// an error`) as an error; else `structuredContent`; else one text item JSON-parsed (or
/// the raw text); several text items as an array of texts; otherwise the raw result.
pub fn map_tool_result(result: &Value) -> Result<Value, String> {
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
        let joined = texts.join("\n");
        return Err(if joined.is_empty() {
            "MCP tool returned an error".into()
        } else {
            joined
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
            map_tool_result(&json!({"isError": true, "content": []})).unwrap_err(),
            "MCP tool returned an error"
        );
        let two =
            json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        assert_eq!(map_tool_result(&two).unwrap(), json!(["a", "b"]));
    }

    #[test]
    fn a_long_line_is_refused_without_buffering_it_all() {
        let big = vec![b'x'; MAX_LINE + 10];
        let mut reader = std::io::Cursor::new(big);
        let mut buf = Vec::new();
        assert_eq!(
            read_line(&mut reader, &mut buf).unwrap_err(),
            UpstreamError::TooLarge
        );
        assert!(buf.len() <= MAX_LINE + 1);
    }
}
