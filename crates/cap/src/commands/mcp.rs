//! `cap mcp-serve` and `cap tokens`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use capability_host::guard::is_loopback_listener;
use capability_host::tokens::{now_ms, parse_duration};
use capability_host::upstream::GatewayConfig;
use capability_host::{Builtins, CapabilitySource, FileStamp, LocalPackage, Role, TokenSpec};
use capability_mcp::{HttpLimits, McpServer, ServeOptions};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::commands::host::{HomeArg, RunOptions, ServingOptions, open_home};
use crate::output::print_json;

#[derive(Args, Debug)]
pub struct McpServeArgs {
    /// Serve streamable HTTP at http://<host:port>/mcp instead of stdio (port 0 picks one;
    /// the address is printed on stderr).
    #[arg(long)]
    pub listen: Option<String>,
    /// A capability id, or a glob with `*`, to project as an MCP tool (repeatable).
    #[arg(long)]
    pub expose: Vec<String>,
    /// Project every capability the host has (the built-ins and every --package).
    #[arg(long)]
    pub expose_installed: bool,
    /// A package.json whose capabilities the host offers (repeatable); watched: when it
    /// changes, clients are told the tool list changed.
    #[arg(long = "package")]
    pub packages: Vec<PathBuf>,
    /// Let an agent's `approved: true` argument approve effects (off: agents never approve
    /// their own calls).
    #[arg(long)]
    pub allow_agent_approval: bool,
    /// Most MCP sessions open at once.
    #[arg(long, default_value_t = 256)]
    pub max_sessions: usize,
    /// Most MCP sessions one principal (a token, or the anonymous agent) holds at once
    /// (default: a quarter of --max-sessions, at least 1).
    #[arg(long)]
    pub max_sessions_per_principal: Option<usize>,
    /// HTTP requests without a bearer token act as this agent (loopback listeners only;
    /// for local clients that cannot send a token, such as the conformance suite).
    #[arg(long)]
    pub anonymous_agent: Option<String>,
    #[command(flatten)]
    pub serving: ServingOptions,
    #[command(flatten)]
    pub options: RunOptions,
}

fn sources(packages: &[PathBuf]) -> Result<Vec<Arc<dyn CapabilitySource>>, String> {
    let mut sources: Vec<Arc<dyn CapabilitySource>> = vec![Arc::new(Builtins)];
    for p in packages {
        let package =
            LocalPackage::open(p).map_err(|e| format!("{}: {}", p.display(), e.message))?;
        sources.push(Arc::new(package));
    }
    Ok(sources)
}

fn modified(paths: &[PathBuf]) -> Vec<Option<FileStamp>> {
    paths.iter().map(|p| FileStamp::of(p)).collect()
}

pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = async {
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

pub fn mcp_serve(args: McpServeArgs) -> Result<i32, String> {
    if args.options.approve || args.options.approval.is_some() {
        return Err(
            "mcp-serve: --approve and --approval do not apply; approvals are granted with \
             `cap approvals approve` (or, opted in, --allow-agent-approval)"
                .into(),
        );
    }
    check_anonymous(&args.anonymous_agent, &args.listen).map_err(|e| format!("mcp-serve: {e}"))?;
    let run_options = args.options.clone();
    let host = Arc::new(run_options.open_serving(&args.serving, sources(&args.packages)?, None)?);
    let options = ServeOptions {
        expose: args.expose.clone(),
        expose_all: args.expose_installed,
        allow_agent_approval: args.allow_agent_approval,
        stdio_actor: args.options.caller().actor,
        anonymous: args
            .anonymous_agent
            .clone()
            .map(capability_host::Actor::agent),
        http: HttpLimits {
            guard: args.serving.guard(true),
            max_sessions: args.max_sessions,
            max_sessions_per_principal: args
                .max_sessions_per_principal
                .unwrap_or((args.max_sessions / 4).max(1)),
            ..HttpLimits::default()
        },
    };
    let server = McpServer::new(host, options);
    let watcher = server.clone();
    let packages = args.packages.clone();
    let serving = args.serving.clone();
    serve_surface(
        "mcp-serve",
        args.listen.as_deref(),
        move || watch_packages(watcher, packages, run_options, serving),
        || async { server.serve_stdio().await },
        |listener| async { server.serve_http(listener, shutdown_signal()).await },
    )
}

/// Reopens the host when a served package.json changes (the server then tells its clients
/// the tools changed); a package that does not read keeps the current host.
fn watch_packages(
    server: McpServer,
    packages: Vec<PathBuf>,
    run_options: RunOptions,
    serving: ServingOptions,
) {
    if packages.is_empty() {
        return;
    }
    tokio::spawn(async move {
        let mut seen = modified(&packages);
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = modified(&packages);
            if now == seen {
                continue;
            }
            seen = now;
            match sources(&packages).and_then(|s| run_options.open_serving(&serving, s, None)) {
                Ok(host) => {
                    server.set_host(Arc::new(host)).await;
                }
                Err(e) => eprintln!("mcp-serve: keeping the previous tools: {e}"),
            }
        }
    });
}

/// Runs a surface on a multi-threaded runtime: `setup` inside it, then stdio, or streamable
/// HTTP on `listen` (the address printed on stderr) until SIGTERM or Ctrl-C.
fn serve_surface<S, H, FS, FH>(
    name: &str,
    listen: Option<&str>,
    setup: impl FnOnce(),
    stdio: S,
    http: H,
) -> Result<i32, String>
where
    S: FnOnce() -> FS,
    FS: std::future::Future<Output = std::io::Result<()>>,
    H: FnOnce(tokio::net::TcpListener) -> FH,
    FH: std::future::Future<Output = std::io::Result<()>>,
{
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if listen.is_none() {
        // One client: a second worker only hands its messages between threads (a wake-up
        // on the other core each). Calls still run side by side: a gateway call moves off
        // the worker while it waits (`block_in_place`), `cap mcp-serve` runs its calls in
        // Tokio's blocking pool.
        builder.worker_threads(1);
    }
    let runtime = builder
        .enable_all()
        .build()
        .map_err(|e| format!("{name}: {e}"))?;
    runtime
        .block_on(async move {
            setup();
            match listen {
                None => stdio().await,
                Some(addr) => {
                    let listener = tokio::net::TcpListener::bind(addr).await?;
                    eprintln!("{name}: listening on http://{}/mcp", listener.local_addr()?);
                    http(listener).await
                }
            }
        })
        .map_err(|e| format!("{name}: {e}"))?;
    Ok(0)
}

#[derive(Args, Debug)]
pub struct TokensArgs {
    #[command(subcommand)]
    pub command: TokensCommand,
    #[command(flatten)]
    pub home: HomeArg,
}

#[derive(Subcommand, Debug)]
pub enum TokensCommand {
    /// Make a bearer token for the HTTP surfaces; prints it once (the home keeps its hash).
    Add {
        /// The agent the token's holder acts as (default: the --login name).
        #[arg(long, required_unless_present = "login")]
        agent: Option<String>,
        /// The tenant an agent acts in; for an approver, a tenant it may approve for
        /// (repeatable; `*` for every tenant).
        #[arg(long = "tenant")]
        tenant: Vec<String>,
        /// A scope granted (repeatable).
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// agent (calls tools), approver, auditor or admin.
        #[arg(long, default_value = "agent", value_parser = parse_role)]
        role: Role,
        /// Validity, e.g. 90s, 15m, 12h, 30d, 2w (default: until revoked).
        #[arg(long, value_parser = parse_expiry)]
        expires: Option<Duration>,
        /// A console login name for this token; the password is read from standard input
        /// (its first line).
        #[arg(long)]
        login: Option<String>,
        /// Read the login's password from standard input (the default with --login).
        #[arg(long, requires = "login")]
        password_stdin: bool,
    },
    /// Every token (never the secrets).
    List,
    /// Revoke a token by id.
    Revoke { id: String },
}

fn parse_role(s: &str) -> Result<Role, String> {
    Role::parse(s).ok_or_else(|| format!("expected agent, approver, auditor or admin, got {s:?}"))
}

fn parse_expiry(s: &str) -> Result<Duration, String> {
    parse_duration(s)
        .ok_or_else(|| format!("expected a duration such as 90s, 15m, 12h or 30d, got {s:?}"))
}

pub fn tokens_cmd(args: TokensArgs) -> Result<i32, String> {
    let host = open_home(&args.home)?;
    let tokens = host.tokens().map_err(|e| e.to_string())?;
    let now = now_ms();
    match args.command {
        TokensCommand::Add {
            agent,
            tenant,
            scopes,
            role,
            expires,
            login,
            password_stdin: _,
        } => {
            let (tenant, tenants) = if role == Role::Approver {
                (None, tenant.into_iter().collect())
            } else if tenant.len() > 1 {
                return Err("tokens add: only an approver takes several --tenant".into());
            } else {
                (tenant.into_iter().next(), Default::default())
            };
            let login = match login {
                Some(name) => {
                    let mut password = String::new();
                    std::io::stdin()
                        .read_line(&mut password)
                        .map_err(|e| format!("tokens add: cannot read the password: {e}"))?;
                    let password = password.trim_end_matches(['\r', '\n']).to_string();
                    Some((name, password))
                }
                None => None,
            };
            let Some(agent) = agent.or_else(|| login.as_ref().map(|(n, _)| n.clone())) else {
                return Err("tokens add: --agent or --login is required".into());
            };
            let spec = TokenSpec {
                agent_id: agent,
                tenant,
                scopes: scopes.into_iter().collect(),
                role,
                expires_in: expires,
                tenants,
                login,
            };
            let (record, secret) = tokens.add(&spec).map_err(|e| e.to_string())?;
            let mut doc = record.to_json(now);
            doc["token"] = json!(secret);
            print_json(&doc)?;
        }
        TokensCommand::List => {
            let list = tokens.list().map_err(|e| e.to_string())?;
            print_json(&Value::Array(list.iter().map(|r| r.to_json(now)).collect()))?;
        }
        TokensCommand::Revoke { id } => {
            let record = tokens.revoke(&id).map_err(|e| e.to_string())?;
            print_json(&record.to_json(now))?;
        }
    }
    Ok(0)
}

#[derive(Args, Debug)]
pub struct McpGatewayArgs {
    /// The gateway config (TOML; see the README).
    #[arg(long)]
    pub config: PathBuf,
    /// Serve streamable HTTP at http://<host:port>/mcp instead of stdio.
    #[arg(long)]
    pub listen: Option<String>,
    /// HTTP requests without a bearer token act as this agent (loopback listeners only).
    #[arg(long)]
    pub anonymous_agent: Option<String>,
    #[command(flatten)]
    pub serving: ServingOptions,
    #[command(flatten)]
    pub options: RunOptions,
}

fn check_anonymous(anonymous: &Option<String>, listen: &Option<String>) -> Result<(), String> {
    if let (Some(_), Some(addr)) = (anonymous, listen)
        && !is_loopback_listener(addr)
    {
        return Err(format!(
            "--anonymous-agent needs a loopback --listen address, not {addr}"
        ));
    }
    Ok(())
}

pub fn mcp_gateway(args: McpGatewayArgs) -> Result<i32, String> {
    use capability_mcp::{Gateway, GatewayServer};
    check_anonymous(&args.anonymous_agent, &args.listen)
        .map_err(|e| format!("mcp-gateway: {e}"))?;
    let config = GatewayConfig::load(&args.config).map_err(|e| e.to_string())?;
    let host = Arc::new(args.options.open_serving(
        &args.serving,
        vec![Arc::new(Builtins)],
        Some(config),
    )?);
    for (what, problem) in host.upstream_problems() {
        eprintln!("mcp-gateway: upstream {what}: {problem}");
    }
    let serve = ServeOptions {
        stdio_actor: args.options.caller().actor,
        anonymous: args
            .anonymous_agent
            .clone()
            .map(capability_host::Actor::agent),
        http: HttpLimits {
            guard: args.serving.guard(true),
            ..HttpLimits::default()
        },
        ..ServeOptions::default()
    };
    let server = GatewayServer(Arc::new(Gateway::new(host, serve)));
    serve_surface(
        "mcp-gateway",
        args.listen.as_deref(),
        || {},
        || async { server.serve_stdio().await },
        |listener| async { server.serve_http(listener, shutdown_signal()).await },
    )
}

#[derive(Args, Debug)]
pub struct McpPinsArgs {
    #[command(subcommand)]
    pub command: McpPinsCommand,
    /// The pins file (default: mcp-pins.json in the home).
    #[arg(long, global = true)]
    pub pins: Option<PathBuf>,
    #[command(flatten)]
    pub home: HomeArg,
}

#[derive(Subcommand, Debug)]
pub enum McpPinsCommand {
    /// Every pinned tool definition, with pending (quarantined) changes: each pending
    /// definition with the hash to accept it by.
    List,
    /// Accept the pending definition of a tool, by the hash shown with it by `list` (the
    /// definition reviewed): refused when the pending definition is another one.
    Accept {
        server: String,
        tool: String,
        /// The `pending.hash` of the definition reviewed (from `cap mcp-pins list`).
        #[arg(long)]
        hash: String,
    },
}

pub fn mcp_pins(args: McpPinsArgs) -> Result<i32, String> {
    let path = match &args.pins {
        Some(p) => p.clone(),
        None => capability_host::Home::open_default(args.home.home.as_deref())
            .map_err(|e| e.to_string())?
            .mcp_pins(),
    };
    let mut pins = capability_host::upstream::Pins::open(&path).map_err(|e| e.to_string())?;
    match args.command {
        McpPinsCommand::List => print_json(&pins.to_json())?,
        McpPinsCommand::Accept { server, tool, hash } => {
            pins.accept(&server, &tool, &hash)
                .map_err(|e| format!("mcp-pins accept: {e}"))?;
            print_json(&json!({"server": server, "accepted": [tool], "hash": hash}))?;
        }
    }
    Ok(0)
}

#[derive(Args, Debug)]
pub struct McpImportArgs {
    /// The MCP server command and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
    #[arg(long)]
    pub namespace: Option<String>,
    #[arg(long)]
    pub version: Option<String>,
    /// The tools' declared effects are complete (no custom:mcp.opaque-effects).
    #[arg(long)]
    pub effects_complete: bool,
    /// Run the server inside the process sandbox (as a gateway's `sandbox = true`).
    #[arg(long)]
    pub sandbox: bool,
    /// An effect granted to the sandboxed server (`network.connect`, `process.spawn`);
    /// repeatable.
    #[arg(long = "effect", requires = "sandbox")]
    pub effects: Vec<String>,
}

pub fn mcp_import(args: McpImportArgs) -> Result<i32, String> {
    let (command, rest) = args
        .command
        .split_first()
        .ok_or("mcp-import: a server command is required")?;
    let manifests = capability_host::upstream::import_stdio(
        command,
        rest,
        args.namespace.as_deref(),
        args.version.as_deref(),
        args.effects_complete,
        args.sandbox.then_some(args.effects.as_slice()),
    )
    .map_err(|e| format!("mcp-import: {e}"))?;
    let tools: Vec<Value> = manifests
        .iter()
        .filter_map(|m| m.pointer("/metadata/mcpTool/name").cloned())
        .collect();
    let inspections: Vec<Value> = manifests
        .into_iter()
        .map(|mut m| {
            m["executable"] = json!(false);
            m
        })
        .collect();
    print_json(&json!({
        "server": {"command": command, "args": rest},
        "tools": tools,
        "capabilities": inspections,
    }))?;
    Ok(0)
}
