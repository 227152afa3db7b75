//! The options every command that runs or plans a capability shares, and how they become a
//! [`HostConfig`] and a caller.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use capability_core::authorization::Preset;
use capability_host::Environment;
use capability_host::guard::HttpGuard;
use capability_host::upstream::GatewayConfig;
use capability_host::{
    Actor, Caller, CapabilitySource, ExecutorChoice, Host, HostConfig, HostGrants, OciImages,
};
use clap::{Args, ValueEnum};

/// Effect-policy presets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PresetArg {
    DenyAll,
    ReadOnly,
    Permissive,
}

impl PresetArg {
    pub fn preset(self) -> Preset {
        match self {
            PresetArg::DenyAll => Preset::DenyAll,
            PresetArg::ReadOnly => Preset::ReadOnly,
            PresetArg::Permissive => Preset::Permissive,
        }
    }
}

/// Where package code runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExecutorArg {
    Auto,
    Process,
    Wasm,
    Oci,
    InProcess,
}

impl ExecutorArg {
    fn choice(self) -> ExecutorChoice {
        match self {
            ExecutorArg::Auto => ExecutorChoice::Auto,
            ExecutorArg::Process => ExecutorChoice::Process,
            ExecutorArg::Wasm => ExecutorChoice::Wasm,
            ExecutorArg::Oci => ExecutorChoice::Oci,
            ExecutorArg::InProcess => ExecutorChoice::InProcess,
        }
    }
}

/// The capability home option of every command that keeps or reads state.
#[derive(Args, Debug, Clone, Default)]
pub struct HomeArg {
    /// Capability home; default $CAP_HOME, $XDG_DATA_HOME/capability or
    /// ~/.local/share/capability.
    #[arg(long, global = true)]
    pub home: Option<PathBuf>,
    /// Where signed checkpoints of the audit log are kept, outside the home: a directory,
    /// or an http(s):// witness (default $CAP_AUDIT_WITNESS). Every command that writes the
    /// log anchors it there, and `audit verify` checks the log against it.
    #[arg(long, global = true)]
    pub audit_witness: Option<String>,
}

impl HomeArg {
    /// The audit witness named by `--audit-witness` or `$CAP_AUDIT_WITNESS`.
    pub fn witness(&self) -> Result<Option<capability_host::witness::Witness>, String> {
        let named = self
            .audit_witness
            .clone()
            .or_else(|| std::env::var("CAP_AUDIT_WITNESS").ok())
            .filter(|w| !w.trim().is_empty());
        named
            .map(|w| capability_host::witness::Witness::parse(&w).map_err(|e| e.to_string()))
            .transpose()
    }
}

/// Governance, executor and limit options of every command that runs or plans a capability.
#[derive(Args, Debug, Clone)]
pub struct RunOptions {
    /// Approve effects that the effect policy puts behind approval.
    #[arg(long)]
    pub approve: bool,
    /// The effect policy.
    #[arg(long, value_enum, default_value = "permissive")]
    pub preset: PresetArg,
    /// A Cedar policy file, or a directory of `*.cedar` files (repeatable). With policy files,
    /// Cedar's default deny applies; without, the governance layer allows.
    #[arg(long = "policy")]
    pub policies: Vec<PathBuf>,
    /// The agent (`Agent::"<id>"`).
    #[arg(long)]
    pub agent: Option<String>,
    /// The tenant the agent acts in.
    #[arg(long)]
    pub tenant: Option<String>,
    /// A scope granted to the agent (repeatable).
    #[arg(long = "scope")]
    pub scopes: Vec<String>,
    /// dev, staging or prod.
    #[arg(long, value_parser = parse_environment)]
    pub environment: Option<Environment>,
    /// The token of an approved approval: runs the exact plan that was approved.
    #[arg(long)]
    pub approval: Option<String>,
    /// Record what policies would enforce without enforcing it.
    #[arg(long)]
    pub shadow: bool,
    /// A trust policy (JSON: minScore, requirePackage, requireIntegrity, ...) that package
    /// capabilities must satisfy before they run.
    #[arg(long = "trust-policy")]
    pub trust_policy: Option<PathBuf>,
    /// The isolation boundary for package code.
    #[arg(long, value_enum, default_value = "auto")]
    pub executor: ExecutorArg,
    /// An OCI image pinned by digest, per runner: `native=<ref@sha256:...>`, `node=...`,
    /// `python=...` (repeatable; default: $CAPABILITY_OCI_IMAGE_NATIVE, _NODE, _PYTHON).
    #[arg(long = "oci-image", value_parser = parse_oci_image)]
    pub oci_images: Vec<(String, String)>,
    /// Wall-clock limit in milliseconds (default 30000 in the sandbox).
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Memory limit in MiB (default 1024 in the sandbox).
    #[arg(long)]
    pub memory_mb: Option<u64>,
    /// Long-running surfaces (mcp-serve, mcp-gateway, serve): how many pre-started,
    /// single-use sandboxes to keep for grant-less node and python runs (default 4; 0: none).
    /// One-shot commands never keep any.
    #[arg(long)]
    pub sandbox_pool: Option<usize>,
    /// A host path opened read-only when filesystem.read is granted (repeatable).
    #[arg(long = "allow-read")]
    pub allow_read: Vec<PathBuf>,
    /// A host path opened read-write when filesystem.write is granted (repeatable).
    #[arg(long = "allow-write")]
    pub allow_write: Vec<PathBuf>,
    /// A host environment variable passed when environment.read is granted (repeatable).
    #[arg(long = "allow-env")]
    pub allow_env: Vec<String>,
    #[command(flatten)]
    pub home: HomeArg,
}

/// The options of every long-running surface (`serve`, `mcp-serve`, `mcp-gateway`): the
/// host's HTTP guard and its limit of calls per principal.
#[derive(Args, Debug, Clone)]
pub struct ServingOptions {
    /// A Host header value accepted besides loopback names (repeatable).
    #[arg(long = "allow-host")]
    pub allow_hosts: Vec<String>,
    /// A browser Origin accepted besides the server's own (and, for MCP surfaces, browser
    /// tools on this machine), e.g. `https://console.example` (repeatable; others refused).
    #[arg(long = "allow-origin")]
    pub allow_origins: Vec<String>,
    /// Largest HTTP request body, in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// Most calls in flight per principal; more are refused and audited (`rate_limited`).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_calls_per_principal: u32,
}

impl ServingOptions {
    /// The host's HTTP guard with these hosts, origins and body limit; `loopback_origins`
    /// for surfaces that browser tools on this machine call (the MCP Inspector).
    pub fn guard(&self, loopback_origins: bool) -> HttpGuard {
        HttpGuard {
            allowed_hosts: self.allow_hosts.clone(),
            allowed_origins: self.allow_origins.clone(),
            loopback_origins,
            max_body_bytes: self.max_body_bytes,
        }
    }
}

fn parse_environment(s: &str) -> Result<Environment, String> {
    Environment::parse(s).map_err(|e| e.to_string())
}

fn parse_oci_image(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((kind @ ("native" | "node" | "python"), image)) if !image.is_empty() => {
            Ok((kind.to_string(), image.to_string()))
        }
        _ => Err(format!(
            "expected native=<image>, node=<image> or python=<image>, got {s:?}"
        )),
    }
}

/// The pre-started sandboxes a long-running surface keeps by default.
pub const DEFAULT_SANDBOX_POOL: usize = 4;

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            approve: false,
            preset: PresetArg::Permissive,
            policies: Vec::new(),
            agent: None,
            tenant: None,
            scopes: Vec::new(),
            environment: None,
            approval: None,
            shadow: false,
            trust_policy: None,
            executor: ExecutorArg::Auto,
            oci_images: Vec::new(),
            timeout_ms: None,
            memory_mb: None,
            sandbox_pool: None,
            allow_read: Vec::new(),
            allow_write: Vec::new(),
            allow_env: Vec::new(),
            home: HomeArg::default(),
        }
    }
}

fn absolute(paths: &[PathBuf]) -> Vec<PathBuf> {
    paths
        .iter()
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        .collect()
}

impl RunOptions {
    /// Who acts.
    pub fn caller(&self) -> Caller {
        Caller::from(self.actor())
    }

    /// The agent these options name (unset: the host's default agent).
    pub fn actor(&self) -> Actor {
        Actor {
            agent_id: self.agent.clone(),
            tenant: self.tenant.clone(),
            scopes: self.scopes.iter().cloned().collect(),
            environment: self.environment,
            principal_id: None,
        }
    }

    /// The host configuration these options describe, with these sources.
    pub fn config(&self, sources: Vec<Arc<dyn CapabilitySource>>) -> Result<HostConfig, String> {
        let trust = match &self.trust_policy {
            Some(p) => Some(crate::commands::acquire::read_trust_policy(p)?),
            None => None,
        };
        // Images from CAPABILITY_OCI_IMAGE_{NODE,PYTHON,NATIVE}, then the flags.
        let mut images = OciImages::from_env();
        for (kind, image) in &self.oci_images {
            let slot = match kind.as_str() {
                "node" => &mut images.node,
                "python" => &mut images.python,
                _ => &mut images.native,
            };
            *slot = Some(image.clone());
        }
        Ok(HostConfig {
            home: self.home.home.clone(),
            audit_witness: self.home.witness()?,
            preset: self.preset.preset(),
            policies: self.policies.clone(),
            shadow: self.shadow,
            trust,
            executor: self.executor.choice(),
            timeout: self.timeout_ms.map(Duration::from_millis),
            memory_mb: self.memory_mb,
            grants: HostGrants {
                read_paths: absolute(&self.allow_read),
                write_paths: absolute(&self.allow_write),
                env: self
                    .allow_env
                    .iter()
                    .filter_map(|k| std::env::var(k).ok().map(|v| (k.clone(), v)))
                    .collect(),
                secrets: Default::default(),
            },
            oci_images: images,
            sources,
            ..HostConfig::default()
        })
    }

    /// Opens the host these options describe.
    pub fn open(&self, sources: Vec<Arc<dyn CapabilitySource>>) -> Result<Host, String> {
        open_host(self.config(sources)?)
    }

    /// Opens the host of a long-running surface: as [`RunOptions::open`] (with the MCP
    /// upstreams of `gateway`), with the limit of calls per principal of `serving`, and the
    /// sandbox pool (`--sandbox-pool`, default [`DEFAULT_SANDBOX_POOL`]) warmed for the
    /// module capabilities it serves.
    pub fn open_serving(
        &self,
        serving: &ServingOptions,
        sources: Vec<Arc<dyn CapabilitySource>>,
        gateway: Option<GatewayConfig>,
    ) -> Result<Host, String> {
        self.open_serving_with(serving, sources, gateway, |_| {})
    }

    /// [`RunOptions::open_serving`], with the config adjusted by `adjust` (a surface's own
    /// settings) before the host opens.
    pub fn open_serving_with(
        &self,
        serving: &ServingOptions,
        sources: Vec<Arc<dyn CapabilitySource>>,
        gateway: Option<GatewayConfig>,
        adjust: impl FnOnce(&mut HostConfig),
    ) -> Result<Host, String> {
        let mut config = HostConfig {
            sandbox_pool: self.sandbox_pool.unwrap_or(DEFAULT_SANDBOX_POOL),
            max_calls_per_principal: usize::try_from(serving.max_calls_per_principal).ok(),
            gateway,
            ..self.config(sources)?
        };
        adjust(&mut config);
        let host = open_host(config)?;
        host.prewarm_pool();
        // A policy that cannot type-check against what this host serves (an upstream tool's
        // number compared with `>`, a misspelt attribute) is reported before any call.
        match host.check_policies() {
            Ok(report) => {
                for d in &report.diagnostics {
                    eprintln!("policy: {d}");
                }
            }
            Err(e) => eprintln!("policy: cannot check the policies: {e}"),
        }
        Ok(host)
    }
}

/// Opens a host, and tells the operator on stderr what recovering dead processes' journals
/// kept in quarantine (every command that opens a home says it).
pub fn open_host(config: HostConfig) -> Result<Host, String> {
    let host = Host::open(config).map_err(|e| e.to_string())?;
    for w in host.recovery_warnings() {
        crate::output::error_line(&format!("warning: {w}"));
    }
    Ok(host)
}

/// Opens a host on `home` with the built-ins, for commands that only query or decide. A home
/// this process cannot write (a read-only mount) is opened read-only: queries work.
pub fn open_home(home: &HomeArg) -> Result<Host, String> {
    let config = HostConfig {
        home: home.home.clone(),
        audit_witness: home.witness()?,
        ..HostConfig::default()
    };
    let root = capability_host::home::resolve(home.home.as_deref());
    match open_host(config.clone()) {
        Ok(host) => Ok(host),
        Err(e) if root.is_dir() && !capability_host::Home::writable(&root) => {
            Host::open(HostConfig {
                storage: capability_host::Storage::ReadOnly,
                ..config
            })
            .map_err(|ro| format!("{e} (read-only: {ro})"))
        }
        Err(e) => Err(e.to_string()),
    }
}
