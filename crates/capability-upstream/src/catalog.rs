//! The catalog of upstream tools ([`Upstreams`]): one session per configured server,
//! started and restarted with backoff, each server's tools listed, pinned and named.
//!
//! * Upstream tool `<tool>` of server `<server>` is the capability `mcp.<server>.<tool>`
//!   ([`UpstreamTool::capability`]), with the server's `effects`, `network.connect` for
//!   `openWorldHint`, `custom:mcp.destructive` for `destructiveHint`, and
//!   `custom:mcp.opaque-effects` unless the server's `effects_complete`
//!   ([`UpstreamTool::effects`]).
//! * Downstream it is named `<server>__<tool>` (or `<tool>` with `prefix = false`), every
//!   character outside `[A-Za-z0-9_-]` replaced by `_`; a name longer than 64 characters, or
//!   one that two tools would share, becomes its first 55 characters, `_` and 8 hex digits of
//!   the SHA-256 of `<server>/<tool>` (always `^[a-zA-Z0-9_-]{1,64}$`; [`downstream_name`]).
//! * Pins ([`crate::pins`]): a definition changed in any member is quarantined until a human
//!   accepts it (as is every tool whose pin cannot be checked: the pins file does not read
//!   or cannot be written); upstream `list_changed` makes [`Upstreams::refresh`] list the
//!   server again. Each tool's input schema is compiled once per definition
//!   ([`UpstreamTool::input`]).
//! * An upstream's stderr is the operator's: a failed upstream's error, as callers see it
//!   ([`Upstreams::session`], [`Unavailable`]), never holds it; the tail of its stderr is
//!   written to this process's stderr with the server's name and kept in
//!   [`Upstreams::problems`], which only operators read.
//! * An upstream that crashes, hangs, answers too much or sends garbage is restarted with
//!   backoff (1 s doubling to 30 s with each consecutive failure; a session that stayed up
//!   60 s counts as healthy, and the next failure waits 1 s again). A slow start delays no
//!   call to another upstream: starts happen outside the catalog's locks.
//!
//! The catalog decides nothing about callers: which tools a caller sees and may call is the
//! host's governance (policies, approvals, audit), which registers every tool as a
//! capability run by [`crate::ToolExecutor`].

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::arguments::InputSchema;
use crate::config::{Connect, GatewayConfig, HANDSHAKE_TIMEOUT_FLOOR, ServerConfig, start};
use crate::pins::{PinState, Pins, PinsError, definition_hash, hidden_characters};
use crate::session::{McpSession, UpstreamError};

/// The downstream name of `tool` of `server` (see the module docs); `taken` are the names
/// already given.
pub fn downstream_name(
    server: &str,
    tool: &str,
    prefix: bool,
    taken: &dyn Fn(&str) -> bool,
) -> String {
    let full = if prefix {
        format!("{server}__{tool}")
    } else {
        tool.to_string()
    };
    let clean: String = full
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= 64 && !taken(&clean) {
        return clean;
    }
    let digest = hex::encode(Sha256::digest(format!("{server}/{tool}").as_bytes()));
    format!("{}_{}", &clean[..clean.len().min(55)], &digest[..8])
}

/// Whether `name` matches `pattern` (`*` matches any run of characters, `/` included).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

fn glob(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| glob_match(p, name))
}

/// One upstream tool as the catalog knows it (shared: a call holds its tool).
#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamTool {
    /// The server's name in the config.
    pub server: String,
    /// The tool's name upstream.
    pub tool: String,
    /// Its name downstream (see the module docs).
    pub downstream: String,
    /// `mcp.<server>.<tool>`.
    pub capability: String,
    /// The definition the server listed.
    pub definition: Value,
    /// Its pinned hash ([`definition_hash`]).
    pub hash: String,
    /// Its definition differs from the pin: hidden and refused until accepted.
    pub quarantined: bool,
    /// Code points in its description or title that hide text ([`hidden_characters`]).
    pub hidden: Vec<String>,
    /// Its declared effects (see the module docs).
    pub effects: Vec<String>,
    /// The server's risk level (`medium` by default).
    pub risk: String,
    /// The config keeps it (`include`, `exclude`).
    pub included: bool,
    /// Its input schema, compiled (or why it does not compile): what its arguments are
    /// checked against before a call ([`crate::arguments`]).
    pub input: InputSchema,
}

impl UpstreamTool {
    /// Its input declares an `approvalToken` property (which is then the tool's argument,
    /// not the call's approval token).
    pub fn declares(&self, property: &str) -> bool {
        self.definition
            .pointer("/inputSchema/properties")
            .and_then(|p| p.get(property))
            .is_some()
    }

    /// The tool's description, when it has one.
    pub fn description(&self) -> Option<&str> {
        self.definition.get("description").and_then(Value::as_str)
    }

    /// The manifest the host registers the tool under: id [`UpstreamTool::capability`], the
    /// tool's input schema (when `with_input`; a schema this runtime cannot compile is left
    /// to the upstream to check), its effects and behaviour hints, and in `metadata` the
    /// governance view (kind `mcp_tool`, the server's risk, `resource.server` in Cedar, the
    /// input schema for policy typing) and the upstream facts (`mcp`: server, tool,
    /// downstream name, definition hash, hidden characters).
    pub fn manifest(&self, with_input: bool) -> Value {
        let def = &self.definition;
        let hint = |k: &str| def.pointer(&format!("/annotations/{k}")) == Some(&Value::Bool(true));
        let input = crate::arguments::input_schema_of(def);
        let name = def
            .get("title")
            .and_then(Value::as_str)
            .filter(|t| !t.trim().is_empty())
            .unwrap_or(&self.tool);
        let description = self
            .description()
            .filter(|d| !d.trim().is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| format!("MCP tool {} of server {}", self.tool, self.server));
        let mut mcp = json!({
            "server": self.server,
            "tool": self.tool,
            "downstream": self.downstream,
            "definitionHash": self.hash,
        });
        if !self.hidden.is_empty() {
            mcp["hiddenCharacters"] = json!(self.hidden);
        }
        let mut manifest = json!({
            "specVersion": "0.1",
            "id": self.capability,
            "version": "0.0.0",
            "name": name,
            "description": description,
            "effects": self.effects,
            "behavior": {"deterministic": false, "idempotent": hint("idempotentHint"), "reversible": false},
            "tags": ["mcp", "upstream"],
            "metadata": {
                "governance": {
                    "kind": "mcp_tool",
                    "risk": self.risk,
                    "inputSchema": input,
                    "metadata": {"server": self.server},
                },
                "mcp": mcp,
            },
        });
        if with_input {
            manifest["input"] = input;
        }
        manifest
    }
}

/// The effects a server's tool declares (see the module docs).
fn effects_of(server: &ServerConfig, tool: &Value) -> Vec<String> {
    let hint = |k: &str| tool.pointer(&format!("/annotations/{k}")) == Some(&Value::Bool(true));
    let mut effects: Vec<String> = Vec::new();
    let mut add = |e: &str| {
        if !effects.iter().any(|x| x == e) {
            effects.push(e.to_string());
        }
    };
    for e in &server.effects {
        add(e);
    }
    if hint("openWorldHint") {
        add("network.connect");
    }
    if hint("destructiveHint") {
        add("custom:mcp.destructive");
    }
    if !server.effects_complete {
        add("custom:mcp.opaque-effects");
    }
    effects
}

/// Writes a failed upstream's error and stderr tail to this process's stderr (the
/// operator's log; see the module docs).
fn operator_note(server: &str, error: &UpstreamError, stderr: Option<&str>) {
    match stderr {
        Some(tail) => {
            let tail = tail.trim_end().replace('\n', "\n    ");
            eprintln!("upstream {server}: {error}; its stderr ends with:\n    {tail}");
        }
        None => eprintln!("upstream {server}: {error}"),
    }
}

/// How long an upstream must stay up, after its last start, for its backoff to begin again
/// at 1 s.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);

struct Upstream {
    config: ServerConfig,
    session: Option<Arc<dyn McpSession>>,
    failures: u32,
    retry_at: Option<Instant>,
    /// Why it failed last, as callers may read it (never its stderr).
    last_error: Option<String>,
    /// The tail of its stderr when it failed last (the operator's only).
    last_stderr: Option<String>,
    /// When the current session was started.
    started_at: Option<Instant>,
    /// A start is under way (outside the upstreams lock): nobody starts another.
    starting: bool,
}

impl Upstream {
    fn new(config: ServerConfig) -> Self {
        Upstream {
            config,
            session: None,
            failures: 0,
            retry_at: None,
            last_error: None,
            last_stderr: None,
            started_at: None,
            starting: false,
        }
    }

    /// Records a failure; the next start waits `retry_after`, or the backoff (1 s doubling
    /// with each consecutive failure, at most 30 s). A session that stayed up
    /// [`HEALTHY_AFTER`] was healthy: the count of failures starts again. The error as
    /// callers see it is kept; the stderr tail (`stderr`, else the error's own) goes to the
    /// operator only (see the module docs).
    fn fail(
        &mut self,
        error: &UpstreamError,
        stderr: Option<String>,
        retry_after: Option<Duration>,
    ) {
        let stderr = stderr
            .or_else(|| error.stderr().map(str::to_string))
            .filter(|s| !s.trim().is_empty());
        operator_note(&self.config.name, error, stderr.as_deref());
        self.last_stderr = stderr;
        self.fail_at(error.to_string(), retry_after, Instant::now());
    }

    fn fail_at(&mut self, error: String, retry_after: Option<Duration>, now: Instant) {
        if self
            .started_at
            .take()
            .is_some_and(|t| now.saturating_duration_since(t) >= HEALTHY_AFTER)
        {
            self.failures = 0;
        }
        self.last_error = Some(error);
        self.failures += 1;
        let backoff = Duration::from_secs(1 << self.failures.min(6).saturating_sub(1))
            .min(Duration::from_secs(30));
        self.retry_at = Some(now + retry_after.unwrap_or(backoff));
    }
}

/// Why a call could not reach its upstream.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    #[error("no upstream server `{0}` is configured")]
    Unknown(String),
    #[error("upstream `{server}` is unavailable ({reason}); it is restarted with backoff")]
    Down { server: String, reason: String },
}

/// The upstream servers of a gateway config and their tools (see the module docs).
pub struct Upstreams {
    config: GatewayConfig,
    upstreams: Mutex<Vec<Upstream>>,
    /// Signalled when a start (outside the lock) ends.
    started: Condvar,
    tools: Mutex<Catalog>,
    pins: Mutex<Pins>,
    connect: Arc<Connect>,
}

/// Every tool, and each found by capability id and by downstream name.
#[derive(Default)]
struct Catalog {
    all: Arc<Vec<Arc<UpstreamTool>>>,
    by_capability: HashMap<String, Arc<UpstreamTool>>,
    by_downstream: HashMap<String, Arc<UpstreamTool>>,
}

impl Catalog {
    fn replace(&mut self, next: Vec<Arc<UpstreamTool>>) {
        self.by_capability = next
            .iter()
            .map(|t| (t.capability.clone(), Arc::clone(t)))
            .collect();
        // The first of a downstream name wins, as a scan in order would find it.
        self.by_downstream = HashMap::with_capacity(next.len());
        for t in &next {
            self.by_downstream
                .entry(t.downstream.clone())
                .or_insert_with(|| Arc::clone(t));
        }
        self.all = Arc::new(next);
    }
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams")
            .field(
                "servers",
                &self
                    .config
                    .servers
                    .iter()
                    .map(|s| &s.name)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// The definitions of a listing that have a name (the others are not tools).
fn named(listed: Vec<Value>) -> Vec<Value> {
    listed
        .into_iter()
        .filter(|def| def.get("name").and_then(Value::as_str).is_some())
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Upstreams {
    /// The catalog of `config`'s servers with the pins at `pins` (the config's `pins`, else
    /// the home's `mcp-pins.json`), started by `connect` ([`start`] when `None`). Nothing is
    /// started before the first [`Upstreams::refresh`].
    pub fn new(
        config: GatewayConfig,
        pins: &std::path::Path,
        connect: Option<Arc<Connect>>,
    ) -> Result<Upstreams, PinsError> {
        let pins = Pins::open(config.pins.as_deref().unwrap_or(pins))?;
        let upstreams = config.servers.iter().cloned().map(Upstream::new).collect();
        Ok(Upstreams {
            config,
            upstreams: Mutex::new(upstreams),
            started: Condvar::new(),
            tools: Mutex::new(Catalog::default()),
            pins: Mutex::new(pins),
            connect: connect.unwrap_or_else(|| Arc::new(start)),
        })
    }

    /// The config.
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }

    /// Every tool known now (quarantined and excluded ones too), in server then listing
    /// order.
    pub fn tools(&self) -> Arc<Vec<Arc<UpstreamTool>>> {
        Arc::clone(&lock(&self.tools).all)
    }

    /// The tool whose capability id is `capability`.
    pub fn tool(&self, capability: &str) -> Option<Arc<UpstreamTool>> {
        lock(&self.tools).by_capability.get(capability).cloned()
    }

    /// The tool named `name` downstream.
    pub fn downstream(&self, name: &str) -> Option<Arc<UpstreamTool>> {
        lock(&self.tools).by_downstream.get(name).cloned()
    }

    /// Upstreams that are down and why, with the tail of their stderr: for the operator
    /// only (see the module docs).
    pub fn problems(&self) -> Vec<(String, String)> {
        lock(&self.upstreams)
            .iter()
            .filter_map(|u| {
                let error = u.last_error.clone()?;
                let problem = match &u.last_stderr {
                    Some(tail) => format!("{error}; its stderr ends with: {}", tail.trim_end()),
                    None => error,
                };
                Some((u.config.name.clone(), problem))
            })
            .collect()
    }

    /// Makes sure every upstream runs (restarting dead ones whose backoff passed), re-lists
    /// those that are new, said their tools changed, or all of them with `force`, and
    /// re-reads the pins (a human may have accepted a change). Returns whether the tool set
    /// changed (a tool came, went, changed or left quarantine). Starts happen outside the
    /// locks, inside [`crate::may_block`].
    pub fn refresh(&self, force: bool) -> bool {
        let mut relist: Vec<(ServerConfig, Arc<dyn McpSession>)> = Vec::new();
        let mut to_start: Vec<ServerConfig> = Vec::new();
        {
            let mut upstreams = lock(&self.upstreams);
            for u in upstreams.iter_mut() {
                if let Some(s) = u.session.clone()
                    && let Some(e) = s.dead()
                {
                    u.session = None;
                    u.fail(&e, s.stderr_tail(), None);
                }
                if u.session.is_none() {
                    if !u.starting && u.retry_at.is_none_or(|t| Instant::now() >= t) {
                        u.starting = true;
                        to_start.push(u.config.clone());
                    }
                    continue;
                }
                if let Some(s) = &u.session
                    && (force || s.take_list_changed())
                {
                    relist.push((u.config.clone(), Arc::clone(s)));
                }
            }
        }
        for server in to_start {
            let handshake = self.config.timeout_of(&server).max(HANDSHAKE_TIMEOUT_FLOOR);
            let started = crate::may_block(|| (self.connect)(&server, handshake));
            let mut upstreams = lock(&self.upstreams);
            let Some(u) = upstreams.iter_mut().find(|u| u.config.name == server.name) else {
                continue;
            };
            u.starting = false;
            match started {
                Ok(s) => {
                    u.session = Some(Arc::clone(&s));
                    u.started_at = Some(Instant::now());
                    u.last_error = None;
                    u.last_stderr = None;
                    relist.push((server, s));
                }
                Err(e) => u.fail(&e, None, None),
            }
            drop(upstreams);
            self.started.notify_all();
        }
        let mut listings = Vec::new();
        for (server, session) in relist {
            let timeout = self.config.timeout_of(&server);
            match crate::may_block(|| session.list_tools(timeout)) {
                Ok(listed) => listings.push((server, named(listed))),
                Err(e) => self.mark_failed(&server.name, &e),
            }
        }
        let mut changed = false;
        if !listings.is_empty() {
            // Every listed tool against its pin at once: one write of the pins file.
            let mut pins = lock(&self.pins);
            let _ = pins.reload();
            let all: Vec<(&str, &Value)> = listings
                .iter()
                .flat_map(|(server, listed)| listed.iter().map(|d| (server.name.as_str(), d)))
                .collect();
            let mut states = pins.check_all(&all).into_iter();
            drop(all);
            for (server, listed) in listings {
                let states: Vec<_> = states.by_ref().take(listed.len()).collect();
                changed |= self.replace_tools(&server, listed, states);
            }
        }
        changed | self.recheck_pins()
    }

    /// Ends the session of `server` after it failed a call (its next start waits 1 s).
    pub fn mark_failed(&self, server: &str, e: &UpstreamError) {
        let mut upstreams = lock(&self.upstreams);
        if let Some(u) = upstreams.iter_mut().find(|u| u.config.name == server) {
            let mut stderr = None;
            if let Some(s) = u.session.take() {
                crate::may_block(|| {
                    s.kill();
                    stderr = s.stderr_tail();
                });
            }
            u.fail(e, stderr, Some(Duration::from_secs(1)));
        }
    }

    /// Replaces a server's tools with what it listed, each with the state of its pin;
    /// whether the set changed.
    fn replace_tools(
        &self,
        server: &ServerConfig,
        listed: Vec<Value>,
        states: Vec<Result<PinState, PinsError>>,
    ) -> bool {
        let mut catalog = lock(&self.tools);
        let tools = Arc::clone(&catalog.all);
        let before: Vec<&Arc<UpstreamTool>> =
            tools.iter().filter(|t| t.server == server.name).collect();
        let mut added: Vec<Arc<UpstreamTool>> = Vec::new();
        for (def, state) in listed.into_iter().zip(states) {
            let Some(name) = def.get("name").and_then(Value::as_str).map(str::to_string) else {
                continue;
            };
            // A pin that cannot be checked quarantines (the pins file does not read, or
            // cannot be written).
            let quarantined = !matches!(state, Ok(PinState::New | PinState::Pinned));
            let taken = |n: &str| {
                catalog
                    .by_downstream
                    .get(n)
                    .is_some_and(|t| t.server != server.name)
                    || added.iter().any(|t| t.downstream == n)
            };
            let downstream = downstream_name(&server.name, &name, server.prefix, &taken);
            let hidden = hidden_characters(
                &[def.get("description"), def.get("title")]
                    .iter()
                    .filter_map(|v| v.and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(" "),
            );
            let included = (server.include.is_empty() || glob(&server.include, &name))
                && !glob(&server.exclude, &name);
            added.push(Arc::new(UpstreamTool {
                server: server.name.clone(),
                capability: format!("mcp.{}.{}", server.name, name),
                downstream,
                hash: definition_hash(&def),
                input: InputSchema::of(&def),
                quarantined,
                hidden,
                effects: effects_of(server, &def),
                risk: server.risk.clone().unwrap_or_else(|| "medium".into()),
                included,
                tool: name,
                definition: def,
            }));
        }
        let changed =
            before.len() != added.len() || before.iter().zip(&added).any(|(a, b)| ***a != **b);
        if changed {
            let mut next: Vec<Arc<UpstreamTool>> = tools
                .iter()
                .filter(|t| t.server != server.name)
                .cloned()
                .collect();
            next.extend(added);
            // Server order, as configured.
            let order = |t: &Arc<UpstreamTool>| {
                self.config
                    .servers
                    .iter()
                    .position(|s| s.name == t.server)
                    .unwrap_or(usize::MAX)
            };
            next.sort_by_key(order);
            catalog.replace(next);
        }
        changed
    }

    /// Re-checks pins (a human may have accepted some) for every quarantined tool; whether
    /// one left quarantine.
    fn recheck_pins(&self) -> bool {
        let mut pins = lock(&self.pins);
        if pins.reload().is_err() {
            return false;
        }
        let mut catalog = lock(&self.tools);
        let tools = Arc::clone(&catalog.all);
        if !tools.iter().any(|t| t.quarantined) {
            return false;
        }
        let mut changed = false;
        let next: Vec<Arc<UpstreamTool>> = tools
            .iter()
            .map(|t| {
                if t.quarantined
                    && matches!(pins.check(&t.server, &t.definition), Ok(PinState::Pinned))
                {
                    changed = true;
                    Arc::new(UpstreamTool {
                        quarantined: false,
                        ..(**t).clone()
                    })
                } else {
                    Arc::clone(t)
                }
            })
            .collect();
        if changed {
            catalog.replace(next);
        }
        changed
    }

    /// The live session of `server`; one that is not live is waited for (restarted if its
    /// backoff has passed, or being started elsewhere) inside [`crate::may_block`].
    pub fn session(&self, server: &str) -> Result<Arc<dyn McpSession>, Unavailable> {
        let live = lock(&self.upstreams)
            .iter()
            .find(|u| u.config.name == server && !u.starting)
            .and_then(|u| u.session.clone())
            .filter(|s| s.dead().is_none());
        match live {
            Some(session) => Ok(session),
            None => crate::may_block(|| self.revive(server)),
        }
    }

    fn revive(&self, server: &str) -> Result<Arc<dyn McpSession>, Unavailable> {
        let alive = lock(&self.upstreams)
            .iter()
            .find(|u| u.config.name == server)
            .and_then(|u| u.session.as_ref())
            .is_some_and(|s| s.dead().is_none());
        if !alive {
            // Restart a dead upstream now if its backoff has passed.
            self.refresh(false);
        }
        let mut upstreams = lock(&self.upstreams);
        // A start of this upstream under way elsewhere: wait for it (only this upstream's
        // callers wait; the lock is free meanwhile).
        let wait = upstreams.iter().find(|u| u.config.name == server).map_or(
            HANDSHAKE_TIMEOUT_FLOOR,
            |u| {
                self.config
                    .timeout_of(&u.config)
                    .max(HANDSHAKE_TIMEOUT_FLOOR)
            },
        );
        let deadline = Instant::now() + wait;
        while upstreams
            .iter()
            .any(|u| u.config.name == server && u.starting)
        {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            upstreams = self
                .started
                .wait_timeout(upstreams, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let u = upstreams
            .iter()
            .find(|u| u.config.name == server)
            .ok_or_else(|| Unavailable::Unknown(server.to_string()))?;
        u.session.clone().ok_or_else(|| Unavailable::Down {
            server: server.to_string(),
            reason: u.last_error.clone().unwrap_or_else(|| "not started".into()),
        })
    }

    /// Stops every upstream session.
    pub fn shutdown(&self) {
        for u in lock(&self.upstreams).iter_mut() {
            if let Some(s) = u.session.take() {
                s.kill();
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("text/*", "text/slugify"));
        assert!(glob_match("*", "a/b"));
        assert!(glob_match("*/sha256", "data/sha256"));
        assert!(glob_match("t*t/*fy", "text/slugify"));
        assert!(!glob_match("text/*", "data/sha256"));
        assert!(!glob_match("text/slugify", "text/slugify2"));
        assert!(!glob_match("a*a", "a"));
    }

    #[test]
    fn backoff_doubles_and_starts_again_after_a_healthy_session() {
        let config: ServerConfig = toml::from_str("name = \"s\"\ncommand = \"x\"").unwrap();
        let mut u = Upstream::new(config);
        let t0 = Instant::now();
        let waits: Vec<u64> = (0..7)
            .map(|_| {
                u.fail_at("down".into(), None, t0);
                (u.retry_at.unwrap() - t0).as_secs()
            })
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        // Restarted, up less than a minute: still backing off.
        u.started_at = Some(t0);
        u.fail_at("down".into(), None, t0 + Duration::from_secs(59));
        assert_eq!(u.failures, 8);
        // Up a minute: healthy, so the next failure waits 1 s.
        u.started_at = Some(t0);
        let later = t0 + HEALTHY_AFTER;
        u.fail_at("down".into(), None, later);
        assert_eq!(u.failures, 1);
        assert_eq!(u.retry_at, Some(later + Duration::from_secs(1)));
        // An explicit wait wins over the backoff.
        u.fail_at("down".into(), Some(Duration::from_secs(7)), later);
        assert_eq!(u.retry_at, Some(later + Duration::from_secs(7)));
    }

    #[test]
    fn downstream_names_are_valid_and_collision_free() {
        let none = |_: &str| false;
        assert_eq!(
            downstream_name("everything", "get-sum", true, &none),
            "everything__get-sum"
        );
        assert_eq!(
            downstream_name("fs", "read.file", true, &none),
            "fs__read_file"
        );
        assert_eq!(
            downstream_name("fs", "read.file", false, &none),
            "read_file"
        );
        let long = downstream_name("s", &"x".repeat(100), true, &none);
        assert_eq!(long.len(), 64);
        let taken = |n: &str| n == "fs__read_file";
        let other = downstream_name("fs", "read/file", true, &taken);
        assert_ne!(other, "fs__read_file");
        let re = |n: &str| {
            n.len() <= 64
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        assert!(re(&long) && re(&other));
    }
}
