//! The gateway config (`gateway.toml`): upstream servers, their effects, grants and limits,
//! the gateway's and each tenant's policy files; and how the session of an upstream is
//! started ([`start`], or an embedder's [`Connect`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use capability_sandbox::{ChildSpec, Grants, ProcessSandbox};
use serde::Deserialize;

use crate::session::{HttpSession, McpSession, StdioSession, UpstreamError};

/// Why a gateway config was refused: the file (when it was read from one) and the reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{reason}", path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
pub struct ConfigError {
    path: Option<PathBuf>,
    reason: String,
}

impl ConfigError {
    fn new(reason: impl Into<String>) -> Self {
        ConfigError {
            path: None,
            reason: reason.into(),
        }
    }

    fn in_file(mut self, path: &Path) -> Self {
        self.path = Some(path.to_path_buf());
        self
    }

    /// The config file, when the config was read from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// What was wrong.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// The gateway config file (`gateway.toml`; see the README for the contract).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Cedar files or directories (relative to the config file).
    #[serde(default)]
    pub policy: Vec<PathBuf>,
    /// The pins file (default: `mcp-pins.json` in the home).
    pub pins: Option<PathBuf>,
    /// Record what policies would enforce without enforcing it.
    #[serde(default)]
    pub shadow: bool,
    /// How long one upstream call may take.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Record each call's arguments in its audit event (after the call's redactions); by
    /// default only their digest (`metadata.argumentsSha256`) is recorded.
    #[serde(default)]
    pub record_arguments: bool,
    #[serde(default, rename = "server")]
    pub servers: Vec<ServerConfig>,
    /// Policy files that apply to one tenant's callers only.
    #[serde(default, rename = "tenant")]
    pub tenants: Vec<TenantConfig>,
}

/// Per-tenant policies: evaluated for callers of that tenant only, in addition to the
/// gateway's (with Cedar's default deny among them: they need their own `permit`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    pub name: String,
    pub policy: Vec<PathBuf>,
}

fn default_timeout_ms() -> u64 {
    30_000
}

/// One upstream server.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// `[a-z0-9_-]+`.
    pub name: String,
    /// A stdio upstream, started as a child.
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment of the child (besides `PATH` and `HOME`, nothing is passed).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A streamable-HTTP upstream (`http://` or `https://`).
    pub url: Option<String>,
    /// Headers sent to an HTTP upstream (its bearer token, say).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Run the child inside the process sandbox: its code read-only, a private `/tmp`, and
    /// only what `effects` (with `read` and `write`) grants; see the README.
    #[serde(default)]
    pub sandbox: bool,
    /// Effects its tools have (also granted to a sandboxed child: `network.connect`,
    /// `process.spawn`, `filesystem.read` with `read`, `filesystem.write` with `write`).
    #[serde(default)]
    pub effects: Vec<String>,
    /// Host paths a sandboxed child may read (relative to the config file; needs
    /// `filesystem.read` in `effects`).
    #[serde(default)]
    pub read: Vec<PathBuf>,
    /// Host paths a sandboxed child may write (relative to the config file; needs
    /// `filesystem.write` in `effects`).
    #[serde(default)]
    pub write: Vec<PathBuf>,
    /// The declared effects are complete (no `custom:mcp.opaque-effects`).
    #[serde(default)]
    pub effects_complete: bool,
    /// Risk of its tools (`none` … `critical`; default `medium`).
    pub risk: Option<String>,
    /// Only these tools (names or `*` globs), before authorization.
    #[serde(default)]
    pub include: Vec<String>,
    /// Never these tools.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Overrides the gateway's `timeout_ms`.
    pub timeout_ms: Option<u64>,
    /// Overrides the gateway's `record_arguments` for this server's tools.
    pub record_arguments: Option<bool>,
    /// Name downstream tools `<server>__<tool>` (the default); `false` keeps the tool's
    /// own name where it is valid and not taken.
    #[serde(default = "yes")]
    pub prefix: bool,
}

fn yes() -> bool {
    true
}

impl GatewayConfig {
    /// Reads and checks a config file; relative paths are taken from its directory.
    pub fn load(path: &Path) -> Result<GatewayConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(e.to_string()).in_file(path))?;
        let mut config: GatewayConfig = toml::from_str(&text)
            .map_err(|e| ConfigError::new(e.to_string().trim_end()).in_file(path))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let rebase = |p: &PathBuf| {
            if p.is_relative() {
                base.join(p)
            } else {
                p.clone()
            }
        };
        config.policy = config.policy.iter().map(rebase).collect();
        for t in &mut config.tenants {
            t.policy = t.policy.iter().map(rebase).collect();
        }
        config.pins = config.pins.as_ref().map(rebase);
        for s in &mut config.servers {
            s.read = s.read.iter().map(rebase).collect();
            s.write = s.write.iter().map(rebase).collect();
        }
        config.check().map_err(|e| e.in_file(path))?;
        Ok(config)
    }

    /// Checks a config: server names, transports, sandbox keys, risks.
    pub fn check(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::BTreeSet::new();
        for s in &self.servers {
            let valid = !s.name.is_empty()
                && s.name.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'
                });
            if !valid {
                return Err(ConfigError::new(format!(
                    "server name {:?} must match [a-z0-9_-]+",
                    s.name
                )));
            }
            if !seen.insert(s.name.clone()) {
                return Err(ConfigError::new(format!(
                    "server {} is configured twice",
                    s.name
                )));
            }
            match (&s.command, &s.url) {
                (Some(_), None) => {}
                (None, Some(url)) if url.starts_with("http://") || url.starts_with("https://") => {}
                (None, Some(url)) => {
                    return Err(ConfigError::new(format!(
                        "server {}: {url}: only http:// and https:// upstreams are supported",
                        s.name
                    )));
                }
                _ => {
                    return Err(ConfigError::new(format!(
                        "server {}: give exactly one of command and url",
                        s.name
                    )));
                }
            }
            check_sandbox(s)?;
            if let Some(r) = &s.risk
                && !RISKS.contains(&r.as_str())
            {
                return Err(ConfigError::new(format!(
                    "server {}: risk {r:?} is not one of {}",
                    s.name,
                    RISKS.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// The configuration of the upstream named `name`.
    pub fn server(&self, name: &str) -> Option<&ServerConfig> {
        self.servers.iter().find(|s| s.name == name)
    }
}

/// The risk levels a server may declare.
pub const RISKS: [&str; 5] = ["none", "low", "medium", "high", "critical"];

/// The `sandbox`, `read` and `write` keys of a server: consistent, and a host that can
/// sandbox when one is asked for.
fn check_sandbox(s: &ServerConfig) -> Result<(), ConfigError> {
    let name = &s.name;
    if !s.sandbox {
        if !s.read.is_empty() || !s.write.is_empty() {
            return Err(ConfigError::new(format!(
                "server {name}: read and write are grants of a sandboxed child: set sandbox = true"
            )));
        }
        return Ok(());
    }
    if s.command.is_none() {
        return Err(ConfigError::new(format!(
            "server {name}: sandbox = true runs a stdio server (command), not a url"
        )));
    }
    for (paths, effect, key) in [
        (&s.read, "filesystem.read", "read"),
        (&s.write, "filesystem.write", "write"),
    ] {
        if !paths.is_empty() && !s.effects.iter().any(|e| e == effect) {
            return Err(ConfigError::new(format!(
                "server {name}: {key} paths are granted only with {effect:?} in effects"
            )));
        }
    }
    ProcessSandbox::check_children()
        .map_err(|e| ConfigError::new(format!("server {name}: sandbox = true, but {e}")))
}

/// What a sandboxed server runs: `command args` (and its code), `PATH`, `HOME=/tmp` and
/// `env`, with `effects` (and the `read` and `write` paths) as grants.
pub(crate) fn sandbox_spec(
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    effects: &[String],
    read: &[PathBuf],
    write: &[PathBuf],
) -> Result<ChildSpec, UpstreamError> {
    let mut vars: Vec<(String, String)> = std::env::var("PATH")
        .ok()
        .map(|p| ("PATH".to_string(), p))
        .into_iter()
        .collect();
    vars.push(("HOME".into(), "/tmp".into()));
    vars.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut spec = ChildSpec::command(command, args, vars)
        .map_err(|e| UpstreamError::Spawn(format!("{command}: {e}")))?;
    spec.grants = Grants {
        effects: effects.iter().cloned().collect(),
        read_paths: read.to_vec(),
        write_paths: write.to_vec(),
        ..Grants::default()
    };
    Ok(spec)
}

/// The least time an upstream's `initialize` handshake is given, whatever the call timeout:
/// an interpreter that imports an SDK can take seconds to start on a busy machine, and a
/// tight call timeout must not turn that into a failed start and a backoff.
pub(crate) const HANDSHAKE_TIMEOUT_FLOOR: Duration = Duration::from_secs(10);

impl GatewayConfig {
    /// How long one call of `server` may take.
    pub fn timeout_of(&self, server: &ServerConfig) -> Duration {
        Duration::from_millis(server.timeout_ms.unwrap_or(self.timeout_ms).max(1))
    }

    /// Whether calls of `server` record their arguments in the audit event.
    pub fn records_arguments(&self, server: &ServerConfig) -> bool {
        server.record_arguments.unwrap_or(self.record_arguments)
    }
}

fn child_env(server: &ServerConfig) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = ["PATH", "HOME"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    env.extend(server.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// How the session of an upstream is started (given the handshake's timeout): [`start`]
/// starts a child over stdio (or in the sandbox) or connects over HTTP; an embedder may give
/// another (its own transport, a benchmark's in-process upstream).
pub type Connect =
    dyn Fn(&ServerConfig, Duration) -> Result<Arc<dyn McpSession>, UpstreamError> + Send + Sync;

/// Starts the session of an upstream (a child over stdio, or an HTTP server).
pub fn start(
    server: &ServerConfig,
    timeout: Duration,
) -> Result<Arc<dyn McpSession>, UpstreamError> {
    match (&server.command, &server.url) {
        (Some(command), _) if server.sandbox => Ok(Arc::new(StdioSession::start_sandboxed(
            &sandbox_spec(
                command,
                &server.args,
                &server.env,
                &server.effects,
                &server.read,
                &server.write,
            )?,
            timeout,
        )?)),
        (Some(command), _) => Ok(Arc::new(StdioSession::start(
            command,
            &server.args,
            &child_env(server),
            timeout,
        )?)),
        (None, Some(url)) => Ok(Arc::new(HttpSession::start(
            url,
            server
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            timeout,
        )?)),
        (None, None) => Err(UpstreamError::Spawn("no command and no url".into())),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_keys_are_checked_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let load = |body: &str| {
            let path = dir.path().join("gateway.toml");
            std::fs::write(&path, format!("[[server]]\nname = \"s\"\n{body}")).unwrap();
            GatewayConfig::load(&path)
        };
        let refused = |body: &str, why: &str| {
            let e = load(body).unwrap_err();
            assert!(e.to_string().contains(why), "{body}: {e}");
        };
        refused(
            "command = \"node\"\nread = [\"data\"]\n",
            "set sandbox = true",
        );
        refused(
            "command = \"node\"\nsandbox = true\nread = [\"data\"]\n",
            "\"filesystem.read\" in effects",
        );
        refused(
            "command = \"node\"\nsandbox = true\neffects = [\"filesystem.read\"]\nwrite = [\"out\"]\n",
            "\"filesystem.write\" in effects",
        );
        refused(
            "url = \"http://127.0.0.1:1/mcp\"\nsandbox = true\n",
            "not a url",
        );
        let config = load(
            "command = \"node\"\nsandbox = true\neffects = [\"filesystem.read\"]\nread = [\"data\"]\n",
        )
        .unwrap();
        // Relative grants are taken from the config's directory.
        assert_eq!(config.servers[0].read, vec![dir.path().join("data")]);
    }
}
