//! `cap serve`: the HTTP API and web console over the host.

use std::path::PathBuf;
use std::sync::Arc;

use capability_host::guard::is_loopback_listener;
use capability_host::webhook::Webhook;
use capability_host::{BudgetConfig, Builtins};
use capability_server::{Server, ServerOptions};
use clap::Args;

use crate::commands::host::{RunOptions, ServingOptions};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Where to listen, host:port (port 0 picks one; the address is printed on stderr).
    #[arg(long, default_value = "127.0.0.1:8470")]
    pub listen: String,
    /// Policy fixtures the console's policies page tests the --policy files against.
    #[arg(long)]
    pub policy_fixtures: Option<PathBuf>,
    /// POST each new pending approval here (http:// or https://), signed with HMAC-SHA256.
    #[arg(long)]
    pub webhook: Option<String>,
    /// The file holding the webhook's HMAC secret (default: $CAP_WEBHOOK_SECRET).
    #[arg(long, requires = "webhook")]
    pub webhook_secret_file: Option<PathBuf>,
    /// Governed capabilities the caller executes itself, for `/api/v1/actions`: a JSON file
    /// `{"capabilities": [...]}` in Brane's shape (repeatable).
    #[arg(long = "capabilities")]
    pub capabilities: Vec<PathBuf>,
    /// Cost budgets across calls: a JSON file `{"budgets": [...]}` (per agent, tenant,
    /// capability or principal, over a window; deny or route when exceeded).
    #[arg(long)]
    pub budgets: Option<PathBuf>,
    /// How long a decided action waits for its result before it is closed as abandoned,
    /// e.g. 90s, 5m.
    #[arg(long, default_value = "5m", value_parser = action_timeout)]
    pub action_timeout: std::time::Duration,
    #[command(flatten)]
    pub serving: ServingOptions,
    #[command(flatten)]
    pub options: RunOptions,
}

fn action_timeout(text: &str) -> Result<std::time::Duration, String> {
    capability_host::tokens::parse_duration(text)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("not a duration: {text:?} (e.g. 90s, 5m, 1h)"))
}

fn webhook(args: &ServeArgs) -> Result<Option<Webhook>, String> {
    let Some(url) = &args.webhook else {
        return Ok(None);
    };
    let secret = match &args.webhook_secret_file {
        Some(p) => std::fs::read_to_string(p)
            .map_err(|e| format!("cannot read {}: {e}", p.display()))?
            .trim()
            .to_string(),
        None => std::env::var("CAP_WEBHOOK_SECRET").map_err(|_| {
            "--webhook needs a secret: --webhook-secret-file or $CAP_WEBHOOK_SECRET".to_string()
        })?,
    };
    Webhook::new(url, secret)
        .map(Some)
        .map_err(|e| e.to_string())
}

pub fn serve(args: ServeArgs) -> Result<i32, String> {
    if args.options.approve || args.options.approval.is_some() {
        return Err("serve: --approve and --approval do not apply to a server".into());
    }
    let options = ServerOptions {
        guard: args.serving.guard(false),
        // Loopback listeners serve plain HTTP to this machine: session cookies cannot be
        // `Secure` there. Anywhere else they are (put TLS in front).
        secure_cookies: !is_loopback_listener(&args.listen),
        policy_fixtures: args.policy_fixtures.clone(),
        webhook: webhook(&args).map_err(|e| format!("serve: {e}"))?,
        ..ServerOptions::default()
    };
    let mut run_options = args.options.clone();
    run_options.policies = run_options
        .policies
        .iter()
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        .collect();
    let budgets = match &args.budgets {
        Some(path) => BudgetConfig::load(path).map_err(|e| format!("serve: --budgets: {e}"))?,
        None => BudgetConfig::default(),
    };
    let mut governed = Vec::new();
    for path in &args.capabilities {
        governed.extend(
            capability_host::remote::read_governed(path)
                .map_err(|e| format!("serve: --capabilities: {e}"))?,
        );
    }
    let host = Arc::new(run_options.open_serving_with(
        &args.serving,
        vec![Arc::new(Builtins)],
        None,
        |config| {
            config.budgets = budgets;
            config.action_timeout = args.action_timeout;
            config.governed = governed;
        },
    )?);
    host.tokens().map_err(|e| format!("serve: {e}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("serve: {e}"))?;
    runtime
        .block_on(async move {
            let listener = tokio::net::TcpListener::bind(&args.listen).await?;
            let addr = listener.local_addr()?;
            eprintln!("serve: listening on http://{addr} (console at http://{addr}/console, API at /api/v1)");
            Server::new(host, options)
                .serve(listener, crate::commands::mcp::shutdown_signal())
                .await
        })
        .map_err(|e| format!("serve: {e}"))?;
    Ok(0)
}
