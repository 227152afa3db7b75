//! Governance commands and options: Cedar policy files for exec and run, approvals, the
//! audit log, and policy tooling (schema, validate, test).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use capability_policy::approvals::{ApprovalFilter, ApprovalStore};
use capability_policy::cedar::{self, SchemaOptions};
use capability_policy::{
    ApprovalManager, ApprovalStatus, AuditSink, AuditStore, CapabilityRegistry, CedarPolicies,
    Governance, GovernedCapability, Governor, HostKey, PolicyEngine, SqliteStore, audit,
};
use capability_runtime::Principal;
use capability_runtime::home::capability_home;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};

use crate::output::{absolute, print_json, read_json};

/// Policy and principal options of `exec` and `run`.
#[derive(Args, Debug, Clone, Default)]
pub struct GovernanceArgs {
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
    #[arg(long)]
    pub environment: Option<String>,
    /// The token of an approved approval: runs the exact plan that was approved.
    #[arg(long)]
    pub approval: Option<String>,
    /// Record what policies would enforce without enforcing it.
    #[arg(long)]
    pub shadow: bool,
}

impl GovernanceArgs {
    pub fn principal(&self) -> Principal {
        Principal {
            agent_id: self.agent.clone(),
            tenant: self.tenant.clone(),
            scopes: self.scopes.clone(),
            environment: self.environment.clone(),
            ..Default::default()
        }
    }
}

/// The agent id the CLI acts as when none is given.
pub const DEFAULT_AGENT: &str = "cap-cli";

/// The policy store (audit log and approvals) in the capability home's database.
pub fn policy_store(home: &Path) -> Result<Arc<SqliteStore>, String> {
    std::fs::create_dir_all(home).map_err(|e| format!("cannot create {}: {e}", home.display()))?;
    SqliteStore::open(&home.join("capability.db"))
        .map(Arc::new)
        .map_err(|e| format!("cannot open the audit store in {}: {e}", home.display()))
}

/// The approval manager with the host's ed25519 key (`host.key` in the home, created once).
pub fn approvals(home: &Path, store: &Arc<SqliteStore>) -> Result<Arc<ApprovalManager>, String> {
    let key =
        HostKey::load_or_generate(&home.join("host.key")).map_err(|e| format!("host key: {e}"))?;
    Ok(Arc::new(ApprovalManager::new(
        Arc::clone(store) as Arc<dyn ApprovalStore>,
        key,
    )))
}

/// `*.cedar` files from files and directories.
pub fn policy_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|e| e.extension().is_some_and(|x| x == "cedar"))
                .collect();
            entries.sort();
            if entries.is_empty() {
                return Err(format!("{} holds no .cedar file", p.display()));
            }
            out.extend(entries);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// The governance layer for one CLI invocation.
pub fn governor(home: Option<&Path>, args: &GovernanceArgs) -> Result<Arc<Governor>, String> {
    let home = capability_home(home);
    let store = policy_store(&home)?;
    let engine = PolicyEngine::new();
    let files = policy_files(&args.policies)?;
    if !files.is_empty() {
        let cedar = CedarPolicies::from_paths(&files).map_err(|e| e.to_string())?;
        engine.add_source(Arc::new(cedar));
    }
    engine.set_shadow_mode(args.shadow);
    let governor = Governor::new(args.agent.clone().unwrap_or_else(|| DEFAULT_AGENT.into()))
        .engine(Arc::new(engine))
        .audit(Arc::clone(&store) as Arc<dyn AuditSink>)
        .approvals(approvals(&home, &store)?);
    Ok(Arc::new(governor))
}

/// Prints `{"approval": {...}}` for an `APPROVAL_REQUIRED` refusal; exit status 3.
pub fn approval_needed(details: Option<&Value>) -> Result<i32, String> {
    let record = details
        .and_then(|d| d.get("approval"))
        .cloned()
        .unwrap_or(Value::Null);
    let mut approval = json!({
        "id": record.get("approvalId"),
        "reason": details.and_then(|d| d.get("reason")),
        "expiresAt": record.get("expiresAtIso"),
        "planFingerprint": details.and_then(|d| d.get("planFingerprint")),
    });
    if let (Value::Object(a), Value::Object(r)) = (&mut approval, &record) {
        for key in [
            "capability",
            "agentId",
            "tenant",
            "requester",
            "input",
            "policyIds",
            "status",
        ] {
            if let Some(v) = r.get(key) {
                a.insert(key.into(), v.clone());
            }
        }
    }
    print_json(&json!({"approval": approval}))?;
    Ok(3)
}

#[derive(Args, Debug)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    pub command: ApprovalsCommand,
    /// Capability home; default $CAP_HOME or the user data dir.
    #[arg(long, global = true)]
    pub home: Option<PathBuf>,
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
    let home = capability_home(args.home.as_deref());
    let store = policy_store(&home)?;
    let manager = approvals(&home, &store)?;
    match args.command {
        ApprovalsCommand::List {
            status,
            tenant,
            limit,
        } => {
            let status = status
                .map(|s| ApprovalStatus::parse(&s).map_err(|e| e.to_string()))
                .transpose()?;
            let list = manager
                .list(&ApprovalFilter {
                    status,
                    tenant,
                    limit,
                })
                .map_err(|e| e.to_string())?;
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
    /// Capability home; default $CAP_HOME or the user data dir.
    #[arg(long, global = true)]
    pub home: Option<PathBuf>,
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
    /// Verify the hash chain; exits 1 with the first bad record.
    Verify,
    /// Export every event.
    Export {
        #[arg(long, value_enum, default_value = "jsonl")]
        format: AuditFormat,
        /// Write here instead of standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

pub fn audit_cmd(args: AuditArgs) -> Result<i32, String> {
    let home = capability_home(args.home.as_deref());
    let store = policy_store(&home)?;
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
        AuditCommand::Verify => {
            let report = audit::verify_store(store.as_ref()).map_err(|e| e.to_string())?;
            let mut out =
                json!({"ok": report.ok, "records": report.records, "headSeq": report.head_seq});
            if let Some(bad) = &report.first_bad {
                out["firstBad"] =
                    json!({"seq": bad.seq, "eventId": bad.event_id, "problem": bad.problem});
            }
            print_json(&out)?;
            Ok(if report.ok { 0 } else { 1 })
        }
        AuditCommand::Export { format, out } => {
            let mut records = Vec::new();
            let mut from = 0u64;
            loop {
                let page = store.records(from, 1000).map_err(|e| e.to_string())?;
                let Some(last) = page.last() else { break };
                from = last.seq + 1;
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

/// Runs `id` on `input` through the governed runtime. With `--approval`, the exact plan the
/// approval was granted for is executed, after checking that it is the same capability and
/// input (a changed input is refused).
pub fn governed_invoke(
    runtime: &capability_runtime::CapabilityRuntime,
    id: &str,
    input: Value,
    mut options: capability_runtime::ExecuteOptions,
    args: &GovernanceArgs,
) -> Result<Arc<capability_core::receipt::Receipt>, capability_core::CapabilityError> {
    use capability_core::{CapabilityError, ErrorCode};
    options.principal = Some(args.principal());
    let Some(token) = &args.approval else {
        return runtime.invoke(id, input, &options);
    };
    let refused = |m: String| CapabilityError::new(ErrorCode::PermissionDenied, m);
    let manager = runtime
        .governor()
        .and_then(|g| g.approval_manager())
        .ok_or_else(|| refused("no approval manager".into()))?;
    let claims = manager
        .decode(token)
        .map_err(|e| refused(format!("approval refused: {e}")))?;
    let fingerprint = claims
        .plan_fingerprint
        .ok_or_else(|| refused("approval refused: the token is not bound to a plan".into()))?;
    let plan = runtime
        .pending_plan(&fingerprint)?
        .ok_or_else(|| refused(format!("approval refused: no pending plan {fingerprint}")))?;
    if plan.capability.id != id {
        return Err(refused(format!(
            "approval refused: it was granted for {}, not {id}",
            plan.capability.id
        )));
    }
    if capability_core::json::canonical_hash(&plan.input)
        != capability_core::json::canonical_hash(&input)
    {
        return Err(refused(
            "approval refused: the input differs from the approved plan".into(),
        ));
    }
    options.approval_token = Some(token.clone());
    runtime.execute(&plan, &options)
}
