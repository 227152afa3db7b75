//! Governance commands and options: Cedar policy files for exec and run, approvals, the
//! audit log, and policy tooling (schema, validate, test).

use std::path::PathBuf;
use std::sync::Arc;

use capability_host::cedar::SchemaOptions;
use capability_host::policies::validation_json;
use capability_host::{
    ApprovalDecision, ApprovalFilter, ApprovalStatus, Builtins, CapabilitySource, ExportFormat,
    Governance, GovernedCapability, HostConfig, LocalPackage, Principal, Storage, approval_json,
};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};

use crate::commands::host::{HomeArg, open_home};
use crate::output::{absolute, print_json, read_json};

#[derive(Args, Debug)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    pub command: ApprovalsCommand,
    /// Act as the holder of this bearer token (default: $CAP_TOKEN): its role and tenants
    /// apply, as on the API and the console. Without one, the operator of this machine
    /// (`--approver`, else $USER) acts, for every tenant.
    #[arg(long, global = true)]
    pub token: Option<String>,
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

/// The operator of the CLI: `--approver`, else `$USER`, else `cap-operator`.
pub(crate) fn operator(given: Option<String>) -> Principal {
    Principal::operator(
        given
            .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
            .unwrap_or_else(|| "cap-operator".into()),
    )
}

pub fn approvals_cmd(args: ApprovalsArgs) -> Result<i32, String> {
    let host = open_home(&args.home)?;
    let token = args
        .token
        .clone()
        .or_else(|| std::env::var("CAP_TOKEN").ok().filter(|t| !t.is_empty()));
    // Who acts: the token's holder, else the operator.
    let principal = |approver: Option<String>| -> Result<Principal, String> {
        match &token {
            Some(t) => host
                .authenticate(capability_host::Credential::Bearer(t))
                .map_err(|e| e.to_string()),
            None => Ok(operator(approver)),
        }
    };
    match args.command {
        ApprovalsCommand::List {
            status,
            tenant,
            limit,
        } => {
            let status = status
                .map(|s| ApprovalStatus::parse(&s).map_err(|e| e.to_string()))
                .transpose()?;
            let list = host
                .approvals(
                    &principal(None)?,
                    &ApprovalFilter {
                        status,
                        tenant,
                        limit,
                    },
                )
                .map_err(|e| e.to_string())?;
            crate::commands::runtime::warn_skipped(&list.skipped);
            print_json(&Value::Array(
                list.approvals.iter().map(approval_json).collect(),
            ))?;
        }
        ApprovalsCommand::Show { id } => {
            let record = host
                .approval(&principal(None)?, &id)
                .map_err(|e| e.to_string())?;
            print_json(&approval_json(&record))?;
        }
        ApprovalsCommand::Approve {
            id,
            approver: who,
            note,
        } => {
            let decided = host
                .decide_approval(&principal(who)?, &id, ApprovalDecision::Approve, note)
                .map_err(|e| e.to_string())?;
            let token = decided.token.map(|t| t.0).unwrap_or_default();
            print_json(
                &json!({"approvalId": id, "token": token, "expiresAt": decided.record.token_expires_at.map(capability_core::js::iso_from_millis)}),
            )?;
        }
        ApprovalsCommand::Deny {
            id,
            approver: who,
            note,
        } => {
            let decided = host
                .decide_approval(&principal(who)?, &id, ApprovalDecision::Deny, note)
                .map_err(|e| e.to_string())?;
            print_json(&approval_json(&decided.record))?;
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
    /// tenant's `tenant_seq`). With an audit witness, the log must extend the witness's
    /// newest checkpoint and only the records since it are verified (`since` in the report;
    /// `records` counts those); --full verifies every record.
    Verify {
        #[arg(long, conflicts_with = "tenant")]
        checkpoint: Option<PathBuf>,
        #[arg(long)]
        tenant: Option<String>,
        /// Verify every record of the chain, not only those since the witnessed checkpoint.
        #[arg(long)]
        full: bool,
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
    let me = operator(None);
    match args.command {
        AuditCommand::Tail { tenant, limit } => {
            let query = capability_host::AuditFilter {
                tenant,
                limit: Some(limit.max(1)),
                ..Default::default()
            }
            .query()
            .map_err(|e| e.to_string())?;
            let page = host.audit_query(&me, &query).map_err(|e| e.to_string())?;
            print_json(&Value::Array(
                page.events.iter().map(|r| r.to_json()).collect(),
            ))?;
            Ok(0)
        }
        AuditCommand::Show { event_id } => {
            let record = host
                .audit_event(&me, &event_id)
                .map_err(|e| e.to_string())?;
            print_json(&record.to_json())?;
            Ok(0)
        }
        AuditCommand::Verify {
            checkpoint: None,
            tenant,
            full,
        } => {
            let report = host
                .verify_audit_with(&me, tenant.as_deref(), full)
                .map_err(|e| e.to_string())?;
            let mut out = report.to_json();
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
                .verify_audit_against(&me, &doc)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            print_json(&capability_host::audit::checkpoint_report_json(&report))?;
            Ok(if report.ok() { 0 } else { 1 })
        }
        AuditCommand::Checkpoint => {
            print_json(&host.audit_checkpoint(&me).map_err(|e| e.to_string())?)?;
            Ok(0)
        }
        AuditCommand::Export {
            format,
            tenant,
            out,
        } => {
            let format = match format {
                AuditFormat::Jsonl => ExportFormat::Jsonl,
                AuditFormat::Otel => ExportFormat::Otel,
            };
            match out {
                Some(path) => {
                    let mut file = std::fs::File::create(&path)
                        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                    let n = host
                        .export_audit(&me, tenant.as_deref(), format, "cap", &mut file)
                        .map_err(|e| e.to_string())?;
                    print_json(&json!({"output": absolute(&path), "events": n}))?;
                }
                None => {
                    let mut stdout = std::io::stdout().lock();
                    host.export_audit(&me, tenant.as_deref(), format, "cap", &mut stdout)
                        .map_err(|e| e.to_string())?;
                }
            }
            Ok(0)
        }
    }
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
    /// A gateway config: its upstream servers are started and their tools (with their
    /// input schemas) included.
    #[arg(long)]
    pub gateway: Option<PathBuf>,
    #[command(flatten)]
    pub home: HomeArg,
}

impl CapabilitySources {
    /// A host with the built-ins, the packages' exports and the gateway's upstream tools
    /// (nothing it does is kept: in-memory stores), and the named registrations.
    fn open(&self) -> Result<(capability_host::Host, Vec<GovernedCapability>), String> {
        let mut sources: Vec<Arc<dyn CapabilitySource>> = vec![Arc::new(Builtins)];
        for p in &self.packages {
            sources.push(Arc::new(
                LocalPackage::open(p).map_err(|e| format!("{}: {}", p.display(), e.message))?,
            ));
        }
        let gateway = self
            .gateway
            .as_deref()
            .map(capability_host::upstream::GatewayConfig::load)
            .transpose()
            .map_err(|e| e.to_string())?;
        let host = capability_host::Host::open(HostConfig {
            home: self.home.home.clone(),
            storage: Storage::Memory,
            sources,
            gateway,
            ..HostConfig::default()
        })
        .map_err(|e| e.to_string())?;
        for (what, problem) in host.upstream_problems() {
            crate::output::error_line(&format!("warning: upstream {what}: {problem}"));
        }
        let mut extra = Vec::new();
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
                extra.push(GovernedCapability::with_governance(
                    name.clone(),
                    governance,
                ));
            }
        }
        Ok((host, extra))
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
    /// Validate policy files against the known capabilities (each policy against the
    /// types of every capability it can apply to); errors name file, line, policy, the
    /// expression and a fix when one is known.
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
            let (host, extra) = sources.open()?;
            let schema = host
                .policy_schema(&extra, &SchemaOptions { label_keys: labels })
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
            let (host, extra) = sources.open()?;
            let report = host
                .validate_policies(&files, &extra)
                .map_err(|e| e.to_string())?;
            print_json(&validation_json(&report))?;
            for d in &report.diagnostics {
                crate::output::error_line(&d.to_string());
            }
            Ok(if report.is_ok() { 0 } else { 1 })
        }
        PolicyCommand::Test {
            files,
            fixtures,
            sources,
        } => {
            let (host, extra) = sources.open()?;
            let text = std::fs::read(&fixtures)
                .map_err(|e| format!("cannot read {}: {e}", fixtures.display()))?;
            let report = host
                .test_policies(&files, &text, &fixtures.display().to_string(), &extra)
                .map_err(|e| e.to_string())?;
            print!("{}", report.render());
            Ok(if report.ok() { 0 } else { 1 })
        }
    }
}
