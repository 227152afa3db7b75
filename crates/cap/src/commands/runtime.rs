//! Runtime commands: exec, find, info, receipts, rollback.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use capability_core::authorization::Preset;
use capability_core::discovery::DiscoveryQuery;
use capability_core::index::{IndexEntry, discover_index, index_entries, resolve};
use capability_core::receipt::ReceiptStatus;
use capability_core::{CapabilityError, ErrorCode};
use capability_runtime::defaults::{builtin_capabilities, default_index};
use capability_runtime::home::capability_home;
use capability_runtime::store::{ReceiptQuery, ReceiptStore, SqliteReceiptStore, export_jsonl};
use capability_runtime::{CapabilityRuntime, ExecuteOptions};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};

use crate::output::{parse_json_arg, print_json};

/// Effect-policy presets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PresetArg {
    DenyAll,
    ReadOnly,
    Permissive,
}

impl PresetArg {
    fn preset(self) -> Preset {
        match self {
            PresetArg::DenyAll => Preset::DenyAll,
            PresetArg::ReadOnly => Preset::ReadOnly,
            PresetArg::Permissive => Preset::Permissive,
        }
    }
}

fn open_store(home: Option<&Path>) -> Result<Arc<SqliteReceiptStore>, String> {
    let home = capability_home(home);
    SqliteReceiptStore::open(&home)
        .map(Arc::new)
        .map_err(|e| format!("cannot open the receipt store in {}: {e}", home.display()))
}

/// A runtime with the built-ins registered, receipts in the durable store and, when given,
/// the governance layer.
fn runtime(
    home: Option<&Path>,
    preset: Preset,
    governor: Option<Arc<capability_policy::Governor>>,
) -> Result<(CapabilityRuntime, Arc<SqliteReceiptStore>), String> {
    let store = open_store(home)?;
    let mut builder = CapabilityRuntime::builder()
        .policy(preset.policy())
        .store(Arc::clone(&store) as Arc<dyn ReceiptStore>);
    if let Some(g) = governor {
        builder = builder.governor(g);
    }
    let runtime = builder.build();
    for cap in builtin_capabilities().map_err(|e| e.to_string())? {
        runtime.register(cap).map_err(|e| e.to_string())?;
    }
    Ok((runtime, store))
}

fn error_value(e: &CapabilityError) -> Value {
    let mut err = json!({"code": e.code.as_str(), "message": e.message});
    if let Some(id) = &e.receipt_id {
        err["receiptId"] = json!(id);
    }
    if let Some(details) = &e.details {
        err["details"] = details.clone();
    }
    json!({"error": err})
}

/// Prints `{"error": {...}}` on stdout and returns exit status 1.
fn fail(e: &CapabilityError) -> Result<i32, String> {
    print_json(&error_value(e))?;
    Ok(1)
}

fn index() -> (Value, Vec<IndexEntry>) {
    let doc = default_index();
    let entries = index_entries(&doc);
    (doc, entries)
}

#[derive(Args, Debug)]
pub struct ExecArgs {
    /// Capability id (or a query resolved against the index).
    pub id: String,
    /// The input, as JSON text.
    pub input: String,
    /// Approve effects that require approval.
    #[arg(long)]
    pub approve: bool,
    /// The effect policy.
    #[arg(long, value_enum, default_value = "permissive")]
    pub preset: PresetArg,
    /// Capability home (receipts); default $CAP_HOME or the user data dir.
    #[arg(long)]
    pub home: Option<PathBuf>,
    /// Wall-clock limit in milliseconds.
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    #[command(flatten)]
    pub governance: crate::commands::governance::GovernanceArgs,
}

pub fn exec(args: ExecArgs) -> Result<i32, String> {
    let input = parse_json_arg(&args.input, "input")?;
    let (_, entries) = index();
    // An id-shaped argument must match exactly: never run a different capability because
    // its words happen to be similar. Other arguments are queries, resolved as the reference.
    let resolved = if capability_core::validate::is_capability_id(&args.id) {
        match entries.iter().any(|e| e.manifest.id == args.id) {
            true => args.id.clone(),
            false => {
                let e = CapabilityError::new(
                    ErrorCode::NotFound,
                    format!("Capability not found: {}", args.id),
                );
                return fail(&e);
            }
        }
    } else {
        match resolve(&entries, &args.id) {
            Ok(r) => r.entry.manifest.id.clone(),
            Err(e) => return fail(&CapabilityError::new(ErrorCode::NotFound, e.to_string())),
        }
    };
    let governor = crate::commands::governance::governor(args.home.as_deref(), &args.governance)?;
    let (runtime, _store) = runtime(args.home.as_deref(), args.preset.preset(), Some(governor))?;
    let options = ExecuteOptions {
        approved: args.approve,
        timeout: args.timeout_ms.map(Duration::from_millis),
        ..Default::default()
    };
    let result = crate::commands::governance::governed_invoke(
        &runtime,
        &resolved,
        input,
        options,
        &args.governance,
    );
    let inspection = runtime.inspect(&resolved).unwrap_or(Value::Null);
    match result {
        Ok(receipt) => {
            print_json(&json!({"capability": inspection, "receipt": receipt.to_value()}))?;
            Ok(0)
        }
        Err(e)
            if e.code == ErrorCode::ApprovalRequired
                && e.details
                    .as_ref()
                    .is_some_and(|d| d.get("approval").is_some()) =>
        {
            crate::commands::governance::approval_needed(e.details.as_ref())
        }
        Err(e) => fail(&e),
    }
}

#[derive(Args, Debug)]
pub struct FindArgs {
    /// What to look for.
    pub query: String,
    /// The most results to show.
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
}

pub fn find(args: FindArgs) -> Result<i32, String> {
    let (_, entries) = index();
    let query = DiscoveryQuery {
        text: args.query,
        limit: Some(args.limit),
        ..Default::default()
    };
    let hits: Vec<Value> = discover_index(&entries, &query)
        .into_iter()
        .map(|h| {
            let m = &h.item.manifest;
            json!({
                "id": m.id, "capabilityVersion": m.version, "name": m.name,
                "description": m.description, "effects": m.effects(),
                "package": h.item.package_ref(), "score": h.score, "reasons": h.reasons,
            })
        })
        .collect();
    print_json(&Value::Array(hits))?;
    Ok(0)
}

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// Capability id, or a query.
    pub id_or_query: String,
}

pub fn info(args: InfoArgs) -> Result<i32, String> {
    let (_, entries) = index();
    let r = resolve(&entries, &args.id_or_query).map_err(|e| e.to_string())?;
    let e = r.entry;
    let mut capability = json!({"manifest": e.manifest.to_value(), "module": e.module});
    if let Some(i) = &e.integrity {
        capability["integrity"] = json!(i);
    }
    print_json(&json!({
        "package": {"name": e.package_name, "version": e.package_version, "source": e.source},
        "capability": capability,
        "score": r.score,
        "reasons": r.reasons,
    }))?;
    Ok(0)
}

#[derive(Args, Debug)]
pub struct ReceiptsArgs {
    #[command(subcommand)]
    pub command: ReceiptsCommand,
    /// Capability home; default $CAP_HOME or the user data dir.
    #[arg(long, global = true)]
    pub home: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum ReceiptsCommand {
    /// List receipts, newest first.
    List(ReceiptFilter),
    /// Show one receipt.
    Show {
        /// The receipt id.
        receipt_id: String,
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
    fn query(&self) -> Result<ReceiptQuery, String> {
        let status = match &self.status {
            None => None,
            Some(s) => Some(ReceiptStatus::parse(s).ok_or_else(|| {
                format!("unknown status {s:?} (succeeded, failed, rolled_back, rollback_failed)")
            })?),
        };
        for t in [&self.since, &self.until].into_iter().flatten() {
            if !capability_core::dates::is_date_string(t) {
                return Err(format!("not a date: {t:?}"));
            }
        }
        Ok(ReceiptQuery {
            capability: self.capability.clone(),
            status,
            since: self.since.clone(),
            until: self.until.clone(),
            limit: self.limit,
        })
    }
}

pub fn receipts(args: ReceiptsArgs) -> Result<i32, String> {
    let store = open_store(args.home.as_deref())?;
    match args.command {
        ReceiptsCommand::List(filter) => {
            let receipts = store.list(&filter.query()?).map_err(|e| e.to_string())?;
            print_json(&Value::Array(
                receipts.iter().map(|r| r.to_value()).collect(),
            ))?;
            Ok(0)
        }
        ReceiptsCommand::Show { receipt_id } => {
            match store.get(&receipt_id).map_err(|e| e.to_string())? {
                Some(r) => {
                    print_json(&r.to_value())?;
                    Ok(0)
                }
                None => Err(format!("receipt not found: {receipt_id}")),
            }
        }
        ReceiptsCommand::Export { filter, out } => {
            let query = filter.query()?;
            match out {
                Some(path) => {
                    let mut file = std::fs::File::create(&path)
                        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                    let n = export_jsonl(store.as_ref(), &query, &mut file)
                        .map_err(|e| e.to_string())?;
                    print_json(&json!({"output": crate::output::absolute(&path), "receipts": n}))?;
                }
                None => {
                    let mut stdout = std::io::stdout().lock();
                    export_jsonl(store.as_ref(), &query, &mut stdout).map_err(|e| e.to_string())?;
                    stdout.flush().map_err(|e| e.to_string())?;
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
    /// Approve effects that require approval.
    #[arg(long)]
    pub approve: bool,
    /// The effect policy.
    #[arg(long, value_enum, default_value = "permissive")]
    pub preset: PresetArg,
    /// Capability home; default $CAP_HOME or the user data dir.
    #[arg(long)]
    pub home: Option<PathBuf>,
}

pub fn rollback(args: RollbackArgs) -> Result<i32, String> {
    let (runtime, _store) = runtime(args.home.as_deref(), args.preset.preset(), None)?;
    let options = ExecuteOptions {
        approved: args.approve,
        ..Default::default()
    };
    match runtime.rollback(&args.receipt_id, &options) {
        Ok(receipt) => {
            print_json(&json!({"receipt": receipt.to_value()}))?;
            Ok(0)
        }
        Err(e) => fail(&e),
    }
}
