//! Package commands: run and plan a package's capability behind an isolation boundary, and
//! doctor (which boundaries work here).

use std::path::PathBuf;
use std::sync::Arc;

use capability_core::{CapabilityError, ErrorCode};
use capability_host::{Capability, CapabilitySource, Host, LocalPackage, PackageFile, Request};
use clap::Args;
use serde_json::{Value, json};

use crate::commands::host::RunOptions;
use crate::commands::runtime::{fail, invoke, print_outcome};
use crate::output::{parse_json_arg, print_json};

#[derive(Args, Debug)]
pub struct PackageRunArgs {
    /// The package.json declaring the capability.
    pub package: PathBuf,
    /// The capability id (an export of the package).
    pub id: String,
    /// The input, as JSON text (default `{}`).
    pub input: Option<String>,
    #[command(flatten)]
    pub options: RunOptions,
}

/// The package's export as a module-backed capability.
fn module_capability(package: &std::path::Path, id: &str) -> Result<Capability, CapabilityError> {
    PackageFile::read(package)?.capability(id)
}

/// A host with the package's export `id` as its one capability. Package modules run only
/// behind an isolation boundary: `--executor in-process` is refused.
fn open(
    package: &std::path::Path,
    id: &str,
    options: &RunOptions,
) -> Result<Host, CapabilityError> {
    if options.executor == crate::commands::host::ExecutorArg::InProcess {
        return Err(CapabilityError::new(
            ErrorCode::PermissionDenied,
            "in-process execution is reserved for trusted host code; package modules run only behind an isolation boundary (auto, process, wasm or oci)",
        ));
    }
    let source: Arc<dyn CapabilitySource> = Arc::new(LocalPackage::export(package, id)?);
    options
        .open(vec![source])
        .map_err(|e| CapabilityError::new(ErrorCode::ExecutionFailed, e))
}

fn input_of(args: &PackageRunArgs) -> Result<Value, String> {
    match &args.input {
        Some(text) => parse_json_arg(text, "input"),
        None => Ok(json!({})),
    }
}

/// `cap run`: plan and execute behind the chosen boundary; prints the receipt.
pub fn run(args: PackageRunArgs) -> Result<i32, String> {
    let input = input_of(&args)?;
    let host = match open(&args.package, &args.id, &args.options) {
        Ok(h) => h,
        Err(e) => return fail(&e),
    };
    let mut request = Request::new(args.id.clone(), input);
    request.caller = args.options.caller();
    request.approve_effects = args.options.approve;
    print_outcome(invoke(&host, &request, &args.options), |receipt| receipt)
}

/// `cap plan`: the plan, with the module's plan hook run behind the chosen boundary.
pub fn plan(args: PackageRunArgs) -> Result<i32, String> {
    let input = input_of(&args)?;
    let host = match open(&args.package, &args.id, &args.options) {
        Ok(h) => h,
        Err(e) => return fail(&e),
    };
    match host.plan(&args.id, input) {
        Ok(plan) => {
            print_json(&plan.to_value())?;
            Ok(0)
        }
        Err(e) => fail(&e),
    }
}

/// `cap doctor`: which boundaries work here and the kernel features found; exits 1 when no
/// boundary can run package code.
pub fn doctor(args: crate::commands::acquire::DoctorArgs) -> Result<i32, String> {
    let report = capability_host::doctor();
    let mut value = serde_json::to_value(&report).map_err(|e| e.to_string())?;
    let network = crate::commands::acquire::network_checks(&args)?;
    // Unreadable records of dead processes' journals, kept in the home's quarantine.
    let root = capability_host::home::resolve(args.home.home.as_deref());
    let quarantine = match capability_host::Home::existing(&root) {
        Ok(home) => capability_host::stores::Quarantined::in_home(&home)
            .map_err(|e| format!("doctor: quarantine: {e}"))?,
        Err(_) => capability_host::stores::Quarantined::default(),
    };
    let quarantined = quarantine.receipts + quarantine.audit_events;
    if quarantined > 0 {
        crate::output::error_line(&format!(
            "warning: {quarantined} unreadable journal record(s) kept in quarantine: {}",
            quarantine
                .files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    // The audit log is anchored only where a witness outside the home keeps checkpoints.
    let witness = args.home.witness()?;
    if witness.is_none() {
        crate::output::error_line(
            "warning: no audit witness is configured (--audit-witness or CAP_AUDIT_WITNESS): \
             a log cut short or a database rolled back would go unseen by `audit verify`",
        );
    }
    let ok = (report.process_sandbox_ok() || report.oci_ok())
        && network.as_ref().is_none_or(|n| n["ok"] == true)
        && quarantined == 0;
    if let Value::Object(map) = &mut value {
        if let Some(n) = network {
            map.insert("network".into(), n);
        }
        map.insert("quarantine".into(), quarantine.to_json());
        map.insert(
            "auditWitness".into(),
            serde_json::json!({
                "configured": witness.is_some(),
                "location": witness.as_ref().map(|w| w.describe()),
            }),
        );
        map.insert("ok".into(), Value::Bool(ok));
    }
    print_json(&value)?;
    Ok(if ok { 0 } else { 1 })
}

#[derive(Args, Debug)]
pub struct AcquireArgs {
    /// The package.json declaring the capability.
    pub package: PathBuf,
    /// The capability id.
    pub id: String,
}

/// `cap acquire`: safe acquisition — the module path must stay inside the package root and
/// its bytes must match the declared integrity; nothing is imported or run.
pub fn acquire(args: AcquireArgs) -> Result<i32, String> {
    match capability_host::packages::check_package_module(&args.package, &args.id) {
        Ok(capability) => {
            print_json(
                &json!({"manifest": capability.inspect(), "provenance": capability.provenance()}),
            )?;
            Ok(0)
        }
        Err(e) => fail(&e),
    }
}

#[derive(Args, Debug)]
pub struct FindLocalArgs {
    /// What to look for.
    pub query: String,
    /// package.json files to search (their inert manifests only).
    #[arg(required = true)]
    pub packages: Vec<PathBuf>,
}

/// `cap find-local`: lexical discovery over the inert manifests of local packages.
pub fn find_local(args: FindLocalArgs) -> Result<i32, String> {
    let registry = capability_host::CapabilityRegistry::new();
    let mut locators = std::collections::HashMap::new();
    for path in &args.packages {
        let pkg = PackageFile::read(path).map_err(|e| e.message)?;
        for (id, export) in &pkg.exports {
            let Some(manifest) = export.get("manifest") else {
                continue;
            };
            let cap = Capability::inert(manifest)
                .map_err(|e| format!("{}: {id}: {e}", path.display()))?;
            locators.insert(
                id.clone(),
                json!({"package": crate::output::absolute(path), "id": id}),
            );
            registry.replace(cap);
        }
    }
    let query = capability_core::discovery::DiscoveryQuery::text(args.query);
    let results: Vec<Value> = registry
        .discover(&query)
        .into_iter()
        .map(|d| {
            json!({
                "manifest": d.capability.manifest().to_value(),
                "locator": locators.get(d.capability.id()),
                "score": d.score as u64,
                "reasons": d.reasons,
            })
        })
        .collect();
    print_json(&Value::Array(results))?;
    Ok(0)
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The package.json declaring the capability.
    pub package: PathBuf,
    /// The capability id.
    pub id: String,
    /// The eval cases: a JSON array of {name, input, approved?, expectedOutput?,
    /// expectedOutputHash?}.
    pub cases: PathBuf,
    #[command(flatten)]
    pub options: RunOptions,
}

/// `cap eval`: runs eval cases through the governed runtime; exits 1 when any case fails.
pub fn eval(args: EvalArgs) -> Result<i32, String> {
    let cases: Vec<capability_host::evals::EvalCase> =
        serde_json::from_value(crate::output::read_json(&args.cases)?)
            .map_err(|e| format!("{}: {e}", args.cases.display()))?;
    let host = match open(&args.package, &args.id, &args.options) {
        Ok(h) => h,
        Err(e) => return fail(&e),
    };
    let report = match host.run_evals(
        &args.id,
        &cases,
        &args.options.caller(),
        args.options.approve,
    ) {
        Ok(report) => report,
        Err(e) => return fail(&e),
    };
    print_json(&serde_json::to_value(&report).map_err(|e| e.to_string())?)?;
    Ok(if report.failed == 0 { 0 } else { 1 })
}

#[derive(Args, Debug)]
pub struct TrustArgs {
    /// The package.json declaring the capability.
    pub package: PathBuf,
    /// The capability id.
    pub id: String,
    /// A trust policy (JSON file with minScore, requirePackage, requireIntegrity, ...).
    #[arg(long)]
    pub policy: Option<PathBuf>,
}

/// `cap trust`: the trust assessment of a package capability's provenance (default policy:
/// no requirement, score only). Exits 1 when not accepted.
pub fn trust(args: TrustArgs) -> Result<i32, String> {
    let capability = match module_capability(&args.package, &args.id) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let policy: capability_host::trust::TrustPolicy = match &args.policy {
        Some(p) => serde_json::from_value(crate::output::read_json(p)?)
            .map_err(|e| format!("{}: {e}", p.display()))?,
        None => Default::default(),
    };
    let assessment = capability_host::trust::assess_trust_of(&capability, &policy);
    print_json(&serde_json::to_value(&assessment).map_err(|e| e.to_string())?)?;
    Ok(if assessment.accepted { 0 } else { 1 })
}

#[derive(Args, Debug)]
pub struct McpToolsArgs {
    /// package.json files whose descriptor exports to project.
    #[arg(required = true)]
    pub packages: Vec<PathBuf>,
}

/// `cap mcp-tools`: the MCP tool projection of every descriptor export (inert manifests;
/// nothing is imported).
pub fn mcp_tools(args: McpToolsArgs) -> Result<i32, String> {
    let mut tools = Vec::new();
    for path in &args.packages {
        let pkg = PackageFile::read(path).map_err(|e| e.message)?;
        for (id, export) in &pkg.exports {
            let Some(manifest) = export.get("manifest") else {
                continue;
            };
            let m = capability_core::manifest::Manifest::from_value(manifest)
                .map_err(|e| format!("{}: {id}: {e}", path.display()))?;
            tools.push(capability_core::mcp::to_mcp_tool(&m));
        }
    }
    print_json(&json!({"tools": tools}))?;
    Ok(0)
}
