//! Governance commands and options: Cedar policy files for exec and run, approvals, the
//! audit log, and policy tooling (schema, validate, test).

use std::io::Write;
use std::path::PathBuf;

use capability_host::policy_files as expand_policy_files;
use capability_policy::approvals::ApprovalFilter;
use capability_policy::cedar::{self, SchemaOptions};
use capability_policy::{
    ApprovalStatus, CapabilityRegistry, Governance, GovernedCapability, audit,
};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};

use crate::commands::host::{HomeArg, open_home};
use crate::output::{absolute, print_json, read_json};

/// `*.cedar` files from files and directories (the host's expansion rule).
pub fn policy_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    expand_policy_files(paths).map_err(|e| e.to_string())
}

#[derive(Args, Debug)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    pub command: ApprovalsCommand,
    #[command(flatten)]
    pub home: HomeArg,
}

#[derive(Subcommand, Debug)]
pub enum ApprovalsCommand {
    /// List approvals, newest first.
    List {
        /// pending, approved, denied, consumed or expired.
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Show one approval.
    Show { id: String },
    /// Approve a pending approval; prints its single-use token.
    Approve {
        id: String,
        /// Who approves (default: $USER).
        #[arg(long)]
        approver: Option<String>,
        #[arg(long)]
        note: Option<String>,
    },
    /// Deny a pending approval.
    Deny {
        id: String,
        #[arg(long)]
        approver: Option<String>,
        #[arg(long)]
        note: Option<String>,
    },
}

fn approver(given: Option<String>) -> String {
    given
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "cap-operator".into())
}

pub fn approvals_cmd(args: ApprovalsArgs) -> Result<i32, String> {
    let host = open_home(&args.home)?;
    let manager = host.approvals();
    match args.command {
        ApprovalsCommand::List {
            status,
            tenant,
            limit,
        } => {
            let status = status
                .map(|s| ApprovalStatus::parse(&s).map_err(|e| e.to_string()))
                .transpose()?;
            let (list, skipped) = manager
                .list_checked(&ApprovalFilter {
                    status,
                    tenant,
                    limit,
                })
                .map_err(|e| e.to_string())?;
            crate::commands::runtime::warn_skipped(&skipped);
            print_json(&Value::Array(list.iter().map(|r| r.to_json()).collect()))?;
        }
        ApprovalsCommand::Show { id } => {
            print_json(&manager.get(&id).map_err(|e| e.to_string())?.to_json())?;
        }
        ApprovalsCommand::Approve {
            id,
            approver: who,
            note,
        } => {
            let token = manager
                .approve(&id, &approver(who), note)
                .map_err(|e| e.to_string())?;
            let record = manager.get(&id).map_err(|e| e.to_string())?;
            print_json(
                &json!({"approvalId": id, "token": token.0, "expiresAt": record.token_expires_at.map(capability_core::js::iso_from_millis)}),
            )?;
        }
        ApprovalsCommand::Deny {
            id,
            approver: who,
            note,
        } => {
            let record = manager
                .deny(&id, &approver(who), note)
                .map_err(|e| e.to_string())?;
            print_json(&record.to_json())?;
        }
    }
    Ok(0)
}

/// Export formats of the audit log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AuditFormat {
    Jsonl,
    Otel,
}

#[derive(Args, Debug)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub command: AuditCommand,
    #[command(flatten)]
    pub home: HomeArg,
}

#[derive(Subcommand, Debug)]
pub enum AuditCommand {
    /// The newest events (oldest first).
    Tail {
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
    /// One event with its chain position and hashes.
    Show { event_id: String },
    /// Verify the hash chain; exits 1 with the first bad record. With --checkpoint, also
    /// that the log still extends a signed checkpoint (from `cap audit checkpoint`). With
    /// --tenant, that tenant's own chain, from its records alone (positions are the
    /// tenant's `tenant_seq`).
    Verify {
        #[arg(long, conflicts_with = "tenant")]
        checkpoint: Option<PathBuf>,
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Print a signed checkpoint of the chain's head, to keep somewhere else.
    Checkpoint,
    /// Export every event (with --tenant: that tenant's chain, in its order).
    Export {
        #[arg(long, value_enum, default_value = "jsonl")]
        format: AuditFormat,
        #[arg(long)]
        tenant: Option<String>,
        /// Write here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

pub fn audit_cmd(args: AuditArgs) -> Result<i32, String> {
    let host = open_home(&args.home)?;
    let store = host.audit();
    match args.command {
        AuditCommand::Tail { tenant, limit } => {
            let records = store
                .tail(tenant.as_deref(), limit)
                .map_err(|e| e.to_string())?;
            print_json(&Value::Array(records.iter().map(|r| r.to_json()).collect()))?;
            Ok(0)
        }
        AuditCommand::Show { event_id } => match store.get(&event_id).map_err(|e| e.to_string())? {
            Some(r) => {
                print_json(&r.to_json())?;
                Ok(0)
            }
            None => Err(format!("audit event not found: {event_id}")),
        },
        AuditCommand::Verify {
            checkpoint: None,
            tenant,
        } => {
            let report = match &tenant {
                Some(t) => host.verify_audit_tenant(t),
                None => host.verify_audit(),
            }
            .map_err(|e| e.to_string())?;
            let mut out = verify_json(&report);
            if let Some(t) = tenant {
                out["tenant"] = json!(t);
            }
            print_json(&out)?;
            Ok(if report.ok { 0 } else { 1 })
        }
        AuditCommand::Verify {
            checkpoint: Some(path),
            ..
        } => {
            let doc = read_json(&path)?;
            let report = host
                .verify_audit_against(&doc)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let mut out = verify_json(&report.chain);
            out["ok"] = Value::Bool(report.ok());
            out["checkpoint"] = json!({
                "seq": report.checkpoint.seq,
                "counter": report.checkpoint.counter,
                "createdAt": report.checkpoint.created_at,
                "ok": report.problem.is_none(),
                "problem": report.problem,
            });
            print_json(&out)?;
            Ok(if report.ok() { 0 } else { 1 })
        }
        AuditCommand::Checkpoint => {
            print_json(&host.audit_checkpoint()?)?;
            Ok(0)
        }
        AuditCommand::Export {
            format,
            tenant,
            out,
        } => {
            let mut records = Vec::new();
            let mut from = 0u64;
            loop {
                let page = match &tenant {
                    Some(t) => store.tenant_records(t, from, 1000),
                    None => store.records(from, 1000),
                }
                .map_err(|e| e.to_string())?;
                let Some(last) = page.last() else { break };
                from = match (&tenant, &last.tenant_link) {
                    (Some(_), Some(l)) => l.seq + 1,
                    (Some(_), None) => break,
                    (None, _) => last.seq + 1,
                };
                records.extend(page);
            }
            let mut buf = Vec::new();
            match format {
                AuditFormat::Jsonl => {
                    audit::export_jsonl(&records, &mut buf).map_err(|e| e.to_string())?
                }
                AuditFormat::Otel => {
                    let mut text = capability_core::json::to_pretty_string(&audit::export_otel(
                        &records, "cap",
                    ));
                    text.push('\n');
                    buf.extend_from_slice(text.as_bytes());
                }
            }
            match out {
                Some(path) => {
                    std::fs::write(&path, &buf)
                        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                    print_json(&json!({"output": absolute(&path), "events": records.len()}))?;
                }
                None => {
                    let mut stdout = std::io::stdout().lock();
                    stdout
                        .write_all(&buf)
                        .and_then(|_| stdout.flush())
                        .map_err(|e| e.to_string())?;
                }
            }
            Ok(0)
        }
    }
}

fn verify_json(report: &capability_policy::audit::VerifyReport) -> Value {
    let mut out = json!({"ok": report.ok, "records": report.records, "headSeq": report.head_seq});
    if let Some(bad) = &report.first_bad {
        out["firstBad"] = json!({"seq": bad.seq, "eventId": bad.event_id, "problem": bad.problem});
    }
    out
}

#[derive(Args, Debug)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub command: PolicyCommand,
}

/// Where the capabilities policies talk about come from.
#[derive(Args, Debug, Clone, Default)]
pub struct CapabilitySources {
    /// A JSON object mapping capability names to governance metadata (Brane-style
    /// registrations of things the runtime does not execute: models, memory, secrets).
    #[arg(long)]
    pub capabilities: Option<PathBuf>,
    /// A package.json whose exports to include (repeatable).
    #[arg(long = "package")]
    pub packages: Vec<PathBuf>,
}

impl CapabilitySources {
    /// The built-ins, the packages' exports and the named capabilities.
    fn registry(&self) -> Result<CapabilityRegistry, String> {
        let registry = CapabilityRegistry::new();
        for m in capability_runtime::builtins::manifests() {
            registry.register(GovernedCapability::from_manifest(m).map_err(|e| e.to_string())?);
        }
        for p in &self.packages {
            let pkg = crate::commands::core::read_package(p)?;
            for (id, export) in &pkg.exports {
                if let Some(m) = export.get("manifest") {
                    let g = GovernedCapability::from_manifest(m)
                        .map_err(|e| format!("{}: {id}: {e}", p.display()))?;
                    registry.register(g);
                }
            }
        }
        if let Some(path) = &self.capabilities {
            let doc = read_json(path)?;
            let Some(map) = doc.as_object() else {
                return Err(format!(
                    "{}: expected an object of name -> governance",
                    path.display()
                ));
            };
            for (name, g) in map {
                let governance = Governance::from_json(g, name)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                registry.register(GovernedCapability::with_governance(
                    name.clone(),
                    governance,
                ));
            }
        }
        Ok(registry)
    }
}

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// The Cedar schema generated from the known capabilities.
    Schema {
        #[command(flatten)]
        sources: CapabilitySources,
        /// Print Cedar's JSON schema format instead of the text format.
        #[arg(long)]
        json: bool,
        /// A label key to declare in context.labels (repeatable).
        #[arg(long = "label")]
        labels: Vec<String>,
    },
    /// Validate policy files against the generated schema; errors name file and line.
    Validate {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        sources: CapabilitySources,
    },
    /// Check policy files against fixtures of expected decisions.
    Test {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// A JSON array of {name, action: {capability, actionType, agentId, tenant, scopes,
        /// environment, input, output?, governance?}, expect}. Unregistered capabilities run
        /// with default attributes (kind tool, risk low, ...), marked in the report.
        #[arg(long)]
        fixtures: PathBuf,
        #[command(flatten)]
        sources: CapabilitySources,
    },
}

pub fn policy_cmd(args: PolicyArgs) -> Result<i32, String> {
    match args.command {
        PolicyCommand::Schema {
            sources,
            json: as_json,
            labels,
        } => {
            let registry = sources.registry()?;
            let caps = registry.all();
            let schema = cedar::generate_schema(
                caps.iter().map(|c| c.as_ref()),
                &SchemaOptions { label_keys: labels },
            )
            .map_err(|e| e.to_string())?;
            if as_json {
                print_json(&schema.json)?;
            } else {
                print!("{}", schema.text);
                if !schema.text.ends_with('\n') {
                    println!();
                }
            }
            for w in &schema.warnings {
                crate::output::error_line(&format!("warning: {w}"));
            }
            Ok(0)
        }
        PolicyCommand::Validate { files, sources } => {
            let registry = sources.registry()?;
            let caps = registry.all();
            let schema =
                cedar::generate_schema(caps.iter().map(|c| c.as_ref()), &SchemaOptions::default())
                    .map_err(|e| e.to_string())?;
            let files = policy_files(&files)?;
            let report =
                cedar::validate_paths(&files, Some(&schema.schema)).map_err(|e| e.to_string())?;
            let diagnostics: Vec<Value> = report
                .diagnostics
                .iter()
                .map(|d| {
                    json!({
                        "file": d.file, "line": d.line, "column": d.column,
                        "severity": format!("{:?}", d.severity).to_lowercase(),
                        "message": d.message, "policy": d.policy_id,
                    })
                })
                .collect();
            let ok = report.is_ok();
            print_json(
                &json!({"valid": ok, "policies": report.policies, "diagnostics": diagnostics}),
            )?;
            for d in &report.diagnostics {
                crate::output::error_line(&format!(
                    "{}:{}:{}: {}",
                    d.file, d.line, d.column, d.message
                ));
            }
            Ok(if ok { 0 } else { 1 })
        }
        PolicyCommand::Test {
            files,
            fixtures,
            sources,
        } => {
            let registry = sources.registry()?;
            let files = policy_files(&files)?;
            let report =
                capability_policy::fixtures::test_policy_files(&files, &fixtures, &registry)
                    .map_err(|e| e.to_string())?;
            print!("{}", report.render());
            Ok(if report.ok() { 0 } else { 1 })
        }
    }
}
