//! Runtime commands: exec, find, info, receipts, rollback.

use std::io::Write;
use std::path::PathBuf;

use capability_core::CapabilityError;
use capability_core::discovery::DiscoveryQuery;
use capability_host::{
    Outcome, ReceiptFilter as Filter, Request, approval_document, error_document,
};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::commands::host::{HomeArg, RunOptions, open_home};
use crate::output::{parse_json_arg, print_json};

/// Prints `{"error": {...}}` on stdout and returns exit status 1.
pub fn fail(e: &CapabilityError) -> Result<i32, String> {
    print_json(&error_document(e))?;
    Ok(1)
}

/// Prints an invocation's outcome: the completed result (0), the pending approval (3) or
/// the error (1).
pub fn print_outcome(
    outcome: Outcome,
    completed: impl FnOnce(Value) -> Value,
) -> Result<i32, String> {
    match outcome {
        Outcome::Completed(done) => {
            print_json(&completed(done.receipt.to_value()))?;
            Ok(0)
        }
        Outcome::NeedsApproval(pending) => {
            print_json(&approval_document(&pending))?;
            Ok(3)
        }
        Outcome::Failed(e) => fail(&e),
    }
}

/// Runs a request, or resumes it with `--approval`.
pub fn invoke(host: &capability_host::Host, request: &Request, options: &RunOptions) -> Outcome {
    match &options.approval {
        Some(token) => host.resume(request, token),
        None => host.invoke(request),
    }
}

#[derive(Args, Debug)]
pub struct ExecArgs {
    /// Capability id (or a query resolved against the index).
    pub id: String,
    /// The input, as JSON text.
    pub input: String,
    /// Run an upstream MCP tool, `mcp.<server>.<tool>`, through the servers and policies of
    /// this gateway config (see `cap mcp-gateway`): a governed call like any other, with a
    /// receipt.
    #[arg(long)]
    pub gateway: Option<std::path::PathBuf>,
    /// The npm registry an indexed capability that is not installed is acquired from
    /// (default $CAP_NPM_REGISTRY, the npmrc `registry=` line, npm's).
    #[arg(long)]
    pub registry: Option<String>,
    #[command(flatten)]
    pub index: crate::commands::acquire::IndexOptions,
    #[command(flatten)]
    pub options: RunOptions,
}

pub fn exec(args: ExecArgs) -> Result<i32, String> {
    let input = parse_json_arg(&args.input, "input")?;
    let gateway = args
        .gateway
        .as_deref()
        .map(capability_host::upstream::GatewayConfig::load)
        .transpose()
        .map_err(|e| e.to_string())?;
    let mut config = args
        .options
        .config(vec![std::sync::Arc::new(capability_host::Builtins)])?;
    config.gateway = gateway;
    let host = crate::commands::host::open_host(config)?;
    for (what, problem) in host.upstream_problems() {
        crate::output::error_line(&format!("warning: upstream {what}: {problem}"));
    }
    // An id-shaped argument must match exactly: never run a different capability because
    // its words happen to be similar. Other arguments are queries, resolved as the reference.
    // One that is in a configured index but not installed is acquired first, as the
    // reference's exec: every check of `cap install`, under the strict npm trust policy
    // unless --trust-policy names another. The same host runs it.
    let mut acquired = None;
    let id = match host.resolve(&args.id) {
        Ok(id) => id,
        Err(e) if e.code == capability_core::ErrorCode::NotFound => {
            let trust = match &args.options.trust_policy {
                Some(p) => crate::commands::acquire::read_trust_policy(p)?,
                None => capability_host::trust::strict_npm_trust_policy(),
            };
            let options = args.index.install_options(args.registry.clone());
            match host
                .acquire(&args.id, &options, &trust)
                .map_err(|e| e.to_string())?
            {
                Some(a) => {
                    let id = a.installation.capability_id().to_string();
                    acquired = Some(a);
                    id
                }
                None => return fail(&e),
            }
        }
        Err(e) => return fail(&e),
    };
    let mut request = Request::new(id.clone(), input);
    request.caller = args.options.caller();
    request.approve_effects = args.options.approve;
    let outcome = invoke(&host, &request, &args.options);
    let inspection = host.inspect(&id).unwrap_or(Value::Null);
    print_outcome(outcome, |receipt| match acquired {
        Some(a) => json!({
            "capability": inspection,
            "package": a.installation.record.package_ref(),
            "trust": a.trust,
            "receipt": receipt,
        }),
        None => json!({"capability": inspection, "receipt": receipt}),
    })
}

#[derive(Args, Debug)]
pub struct FindArgs {
    /// What to look for.
    pub query: String,
    /// The most results to show.
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    #[command(flatten)]
    pub index: crate::commands::acquire::IndexOptions,
    #[command(flatten)]
    pub home: HomeArg,
}

pub fn find(args: FindArgs) -> Result<i32, String> {
    let host = open_home(&args.home)?;
    let query = DiscoveryQuery {
        text: args.query,
        limit: Some(args.limit),
        ..Default::default()
    };
    // The host's sources (built-ins, installed packages) and the configured indexes.
    let mut entries = host.index_entries().to_vec();
    entries.extend(args.index.entries(&args.home)?);
    let hits: Vec<Value> = capability_core::index::discover_index(&entries, &query)
        .into_iter()
        .map(|h| h.item.hit_json(h.score, &h.reasons))
        .collect();
    print_json(&Value::Array(hits))?;
    Ok(0)
}

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Capability id, or a query.
    pub id_or_query: String,
    #[command(flatten)]
    pub index: crate::commands::acquire::IndexOptions,
    #[command(flatten)]
    pub home: HomeArg,
}

pub fn info(args: InfoArgs) -> Result<i32, String> {
    let host = open_home(&args.home)?;
    let network = args.index.entries(&args.home)?;
    if network.is_empty() {
        let r = host.info(&args.id_or_query).map_err(|e| e.message)?;
        print_json(&r)?;
        return Ok(0);
    }
    let mut entries = host.index_entries().to_vec();
    entries.extend(network);
    let r =
        capability_core::index::resolve(&entries, &args.id_or_query).map_err(|e| e.to_string())?;
    print_json(&r.to_json())?;
    Ok(0)
}

#[derive(Args, Debug)]
pub struct ReceiptsArgs {
    #[command(subcommand)]
    pub command: ReceiptsCommand,
    #[command(flatten)]
    pub home: HomeArg,
}

#[derive(Subcommand, Debug)]
pub enum ReceiptsCommand {
    /// List receipts, newest first.
    List(ReceiptFilter),
    /// Show one receipt (a binding's execution receipt too: `mrc_…`).
    Show {
        /// The receipt id.
        receipt_id: String,
    },
    /// List the execution receipts of bindings (`pypi-forge --execute`, `oci-run`,
    /// `wasm-run`), newest first.
    Metabolic {
        /// The most receipts to return.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Write receipts as JSON lines (to standard output, or a file).
    Export {
        #[command(flatten)]
        filter: ReceiptFilter,
        /// Write to this file instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
pub struct ReceiptFilter {
    /// Only this capability.
    #[arg(long)]
    pub capability: Option<String>,
    /// Only this status (succeeded, failed, rolled_back, rollback_failed).
    #[arg(long)]
    pub status: Option<String>,
    /// Started at or after this ISO-8601 time.
    #[arg(long)]
    pub since: Option<String>,
    /// Started before this ISO-8601 time.
    #[arg(long)]
    pub until: Option<String>,
    /// The most receipts to return.
    #[arg(long)]
    pub limit: Option<usize>,
}

impl ReceiptFilter {
    fn query(&self) -> Result<capability_host::receipts::ReceiptQuery, String> {
        Filter {
            capability: self.capability.clone(),
            status: self.status.clone(),
            since: self.since.clone(),
            until: self.until.clone(),
            limit: self.limit,
        }
        .query()
        .map_err(|e| e.to_string())
    }
}

/// One `warning:` line on stderr per stored record that could not be read (and was skipped).
pub(crate) fn warn_skipped(skipped: &[String]) {
    for s in skipped {
        crate::output::error_line(&format!("warning: skipped unreadable {s}"));
    }
}

pub fn receipts(args: ReceiptsArgs) -> Result<i32, String> {
    let host = open_home(&args.home)?;
    let me = crate::commands::governance::operator(None);
    match args.command {
        ReceiptsCommand::List(filter) => {
            let listing = host
                .receipts(&me, &filter.query()?)
                .map_err(|e| e.to_string())?;
            warn_skipped(&listing.skipped);
            print_json(&Value::Array(
                listing.receipts.iter().map(|r| r.to_value()).collect(),
            ))?;
            Ok(0)
        }
        ReceiptsCommand::Show { receipt_id } if receipt_id.starts_with("mrc_") => {
            let receipt = host
                .metabolic_receipt(&me, &receipt_id)
                .map_err(|e| e.to_string())?;
            print_json(&receipt)?;
            Ok(0)
        }
        ReceiptsCommand::Metabolic { limit } => {
            let receipts = host
                .metabolic_receipts(&me, limit)
                .map_err(|e| e.to_string())?;
            print_json(&Value::Array(receipts))?;
            Ok(0)
        }
        ReceiptsCommand::Show { receipt_id } => {
            let receipt = host.receipt(&me, &receipt_id).map_err(|e| e.to_string())?;
            print_json(&receipt.to_value())?;
            Ok(0)
        }
        ReceiptsCommand::Export { filter, out } => {
            let query = filter.query()?;
            match out {
                Some(path) => {
                    let mut file = std::fs::File::create(&path)
                        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                    let (n, skipped) = host
                        .export_receipts(&me, &query, &mut file)
                        .map_err(|e| e.to_string())?;
                    warn_skipped(&skipped);
                    print_json(
                        &json!({"output": crate::output::absolute(&path), "receipts": n, "skipped": skipped.len()}),
                    )?;
                }
                None => {
                    let mut stdout = std::io::stdout().lock();
                    let (_, skipped) = host
                        .export_receipts(&me, &query, &mut stdout)
                        .map_err(|e| e.to_string())?;
                    stdout.flush().map_err(|e| e.to_string())?;
                    warn_skipped(&skipped);
                }
            }
            Ok(0)
        }
    }
}

#[derive(Args, Debug)]
pub struct RollbackArgs {
    /// The receipt of the execution to undo.
    pub receipt_id: String,
    #[command(flatten)]
    pub options: RunOptions,
}

pub fn rollback(args: RollbackArgs) -> Result<i32, String> {
    let host = args
        .options
        .open(vec![std::sync::Arc::new(capability_host::Builtins)])?;
    match host.rollback(&args.receipt_id, args.options.approve) {
        Ok(receipt) => {
            print_json(&json!({"receipt": receipt.to_value()}))?;
            Ok(0)
        }
        Err(e) => fail(&e),
    }
}
