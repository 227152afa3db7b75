//! Package commands: run and plan a package's capability behind an isolation boundary, and
//! doctor (which boundaries work here).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use capability_core::authorization::EffectPolicy;
use capability_core::{CapabilityError, ErrorCode};
use capability_runtime::capability::{Capability, ModuleSource};
use capability_runtime::home::capability_home;
use capability_runtime::store::{ReceiptStore, SqliteReceiptStore};
use capability_runtime::{CapabilityRuntime, ExecuteOptions};
use capability_sandbox::{Choice, HostGrants, Limits, ModuleExecutor};
use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use crate::commands::core::read_package;
use crate::output::{parse_json_arg, print_json};

/// Where package code runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExecutorArg {
    Auto,
    Process,
    Wasm,
    Oci,
    InProcess,
}

#[derive(Args, Debug)]
pub struct PackageRunArgs {
    /// The package.json declaring the capability.
    pub package: PathBuf,
    /// The capability id (an export of the package).
    pub id: String,
    /// The input, as JSON text (default `{}`).
    pub input: Option<String>,
    /// Approve effects that require approval.
    #[arg(long)]
    pub approve: bool,
    /// The isolation boundary.
    #[arg(long, value_enum, default_value = "auto")]
    pub executor: ExecutorArg,
    /// Wall-clock limit in milliseconds (default 30000).
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Memory limit in MiB (default 1024).
    #[arg(long)]
    pub memory_mb: Option<u64>,
    /// A host path opened read-only when filesystem.read is granted (repeatable).
    #[arg(long = "allow-read")]
    pub allow_read: Vec<PathBuf>,
    /// A host path opened read-write when filesystem.write is granted (repeatable).
    #[arg(long = "allow-write")]
    pub allow_write: Vec<PathBuf>,
    /// A host environment variable passed when environment.read is granted (repeatable).
    #[arg(long = "allow-env")]
    pub allow_env: Vec<String>,
    /// Capability home (receipts); default $CAP_HOME or the user data dir.
    #[arg(long)]
    pub home: Option<PathBuf>,
    #[command(flatten)]
    pub governance: crate::commands::governance::GovernanceArgs,
}

fn fail(e: &CapabilityError) -> Result<i32, String> {
    let mut err = json!({"code": e.code.as_str(), "message": e.message});
    if let Some(id) = &e.receipt_id {
        err["receiptId"] = json!(id);
    }
    if let Some(details) = &e.details {
        err["details"] = details.clone();
    }
    print_json(&json!({"error": err}))?;
    Ok(1)
}

/// The package's export as a module-backed capability.
fn module_capability(package: &Path, id: &str) -> Result<Capability, CapabilityError> {
    let pkg = read_package(package)
        .map_err(|e| CapabilityError::new(ErrorCode::InvalidPackageDeclaration, e))?;
    let export = pkg.exports.get(id).ok_or_else(|| {
        CapabilityError::new(
            ErrorCode::NotFound,
            format!("Package does not export capability: {id}"),
        )
    })?;
    let Value::Object(descriptor) = export else {
        return Err(CapabilityError::new(
            ErrorCode::InvalidPackageDeclaration,
            format!(
                "Export {id} is a legacy module path: it has no inert manifest and cannot be acquired safely"
            ),
        ));
    };
    let root = std::path::absolute(package)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    let source = ModuleSource {
        package_root: root.clone(),
        module: descriptor
            .get("module")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        integrity: descriptor
            .get("integrity")
            .and_then(Value::as_str)
            .map(String::from),
    };
    let manifest = descriptor.get("manifest").cloned().unwrap_or(Value::Null);
    let mut provenance = json!({
        "source": format!("file://{}", root.join(source.module.trim_start_matches("./")).display()),
        "packageRoot": root.display().to_string(),
        "packageName": pkg.name,
        "packageVersion": pkg.version,
    });
    if let Some(repo) = pkg.doc.get("repository") {
        let repo = repo.get("url").unwrap_or(repo);
        if repo.is_string() {
            provenance["repository"] = repo.clone();
        }
    }
    if let Some(i) = &source.integrity {
        provenance["integrity"] = json!(i);
    }
    Ok(Capability::module(&manifest, source)?.with_provenance(provenance))
}

fn build(
    args: &PackageRunArgs,
) -> Result<(CapabilityRuntime, Option<Arc<SqliteReceiptStore>>), CapabilityError> {
    let choice = match args.executor {
        ExecutorArg::Auto => Choice::Auto,
        ExecutorArg::Process => Choice::Process,
        ExecutorArg::Wasm => Choice::Wasm,
        ExecutorArg::Oci => Choice::Oci,
        ExecutorArg::InProcess => {
            return Err(CapabilityError::new(
                ErrorCode::PermissionDenied,
                "in-process execution is reserved for trusted host code; package modules run only behind an isolation boundary (auto, process, wasm or oci)",
            ));
        }
    };
    let mut limits = Limits::default();
    if let Some(ms) = args.timeout_ms {
        limits.wall_timeout = Duration::from_millis(ms);
    }
    if let Some(mb) = args.memory_mb {
        limits.memory_bytes = mb.saturating_mul(1 << 20);
    }
    let host = HostGrants {
        read_paths: args
            .allow_read
            .iter()
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
            .collect(),
        write_paths: args
            .allow_write
            .iter()
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
            .collect(),
        env: args
            .allow_env
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.clone(), v)))
            .collect(),
        secrets: Default::default(),
    };
    let mut wasm_limits = capability_sandbox::WasmLimits::default();
    if let Some(ms) = args.timeout_ms {
        wasm_limits.timeout = Duration::from_millis(ms);
    }
    if let Some(mb) = args.memory_mb {
        wasm_limits.memory_bytes = mb.saturating_mul(1 << 20);
    }
    let mut executor = ModuleExecutor::new(choice)
        .with_host_grants(host.clone())
        .with_limits(limits);
    // OCI images come from CAPABILITY_OCI_IMAGE_{NODE,PYTHON,NATIVE} (pinned by digest); the
    // engine (CAPABILITY_OCI_ENGINE, else docker or podman on PATH) is probed only when needed.
    let images = capability_sandbox::OciImages::from_env();
    if choice == Choice::Oci || (choice == Choice::Auto && !images.is_empty()) {
        executor = executor.with_oci(images);
    }
    // The WASM executor is available wherever wasmtime runs; without it .wasm modules are
    // refused (they never run elsewhere).
    if let Ok(wasm) = capability_sandbox::WasmExecutor::new() {
        executor = executor.with_wasm(Arc::new(
            wasm.with_host_grants(host).with_limits(wasm_limits),
        ));
    }
    let home = capability_home(args.home.as_deref());
    let store = SqliteReceiptStore::open(&home).map(Arc::new).map_err(|e| {
        CapabilityError::new(
            ErrorCode::ExecutionFailed,
            format!("cannot open the receipt store in {}: {e}", home.display()),
        )
    })?;
    let governor = crate::commands::governance::governor(args.home.as_deref(), &args.governance)
        .map_err(|e| CapabilityError::new(ErrorCode::ExecutionFailed, e))?;
    let runtime = CapabilityRuntime::builder()
        .policy(EffectPolicy::permissive())
        .store(Arc::clone(&store) as Arc<dyn ReceiptStore>)
        .executor(Arc::new(executor))
        .governor(governor)
        .build();
    runtime.register(module_capability(&args.package, &args.id)?)?;
    Ok((runtime, Some(store)))
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
    let (runtime, _store) = match build(&args) {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    let options = ExecuteOptions {
        approved: args.approve,
        ..Default::default()
    };
    match runtime.invoke(&args.id, input, &options) {
        Ok(receipt) => {
            print_json(&receipt.to_value())?;
            Ok(0)
        }
        Err(e) => fail(&e),
    }
}

/// `cap plan`: the plan, with the module's plan hook run behind the chosen boundary.
pub fn plan(args: PackageRunArgs) -> Result<i32, String> {
    let input = input_of(&args)?;
    let (runtime, _store) = match build(&args) {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    match runtime.plan(&args.id, input) {
        Ok(plan) => {
            print_json(&plan.to_value())?;
            Ok(0)
        }
        Err(e) => fail(&e),
    }
}

/// `cap doctor`: which boundaries work here and the kernel features found; exits 1 when no
/// boundary can run package code.
pub fn doctor() -> Result<i32, String> {
    let report = capability_sandbox::doctor(capability_sandbox::ProcessSandbox::global());
    let mut value = serde_json::to_value(&report).map_err(|e| e.to_string())?;
    let ok = report.process_sandbox_ok() || report.oci_ok();
    if let Value::Object(map) = &mut value {
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
    let capability = match module_capability(&args.package, &args.id) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let capability_runtime::capability::Implementation::Module(source) =
        capability.implementation()
    else {
        return Err("not a module-backed capability".into());
    };
    let spec = capability_sandbox::ModuleSpec {
        package_root: source.package_root.clone(),
        install_root: None,
        module: source.module.clone(),
        integrity: source.integrity.clone(),
        manifest: capability.manifest().to_value(),
    };
    if let Err(e) = capability_sandbox::resolve_module(&spec) {
        let hook = capability_sandbox::hook_error(capability.id(), e);
        let err = match hook {
            capability_runtime::HookError::Capability(c) => c,
            other => CapabilityError::new(
                ErrorCode::InvalidPackageDeclaration,
                other.message().to_string(),
            ),
        };
        return fail(&err);
    }
    print_json(&json!({"manifest": capability.inspect(), "provenance": capability.provenance()}))?;
    Ok(0)
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
    let registry = capability_runtime::CapabilityRegistry::new();
    let mut locators = std::collections::HashMap::new();
    for path in &args.packages {
        let pkg = read_package(path)?;
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
    /// Approve effects that require approval.
    #[arg(long)]
    pub approve: bool,
    /// The isolation boundary.
    #[arg(long, value_enum, default_value = "auto")]
    pub executor: ExecutorArg,
    /// Capability home (receipts); default $CAP_HOME or the user data dir.
    #[arg(long)]
    pub home: Option<PathBuf>,
}

/// `cap eval`: runs eval cases through the governed runtime; exits 1 when any case fails.
pub fn eval(args: EvalArgs) -> Result<i32, String> {
    let cases: Vec<capability_runtime::evals::EvalCase> =
        serde_json::from_value(crate::output::read_json(&args.cases)?)
            .map_err(|e| format!("{}: {e}", args.cases.display()))?;
    let run = PackageRunArgs {
        package: args.package,
        id: args.id,
        input: None,
        approve: args.approve,
        executor: args.executor,
        timeout_ms: None,
        memory_mb: None,
        allow_read: Vec::new(),
        allow_write: Vec::new(),
        allow_env: Vec::new(),
        home: args.home,
        governance: Default::default(),
    };
    let (runtime, _store) = match build(&run) {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    let options = ExecuteOptions {
        approved: run.approve,
        ..Default::default()
    };
    let report =
        capability_runtime::evals::run_capability_evals(&runtime, &run.id, &cases, &options);
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
    let policy: capability_runtime::trust::TrustPolicy = match &args.policy {
        Some(p) => serde_json::from_value(crate::output::read_json(p)?)
            .map_err(|e| format!("{}: {e}", p.display()))?,
        None => Default::default(),
    };
    let assessment = capability_runtime::trust::assess_trust_of(&capability, &policy);
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
        let pkg = read_package(path)?;
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
