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
    let executor = crate::commands::packages::wasm_capable(
        ModuleExecutor::new(choice)
            .with_host_grants(host)
            .with_limits(limits),
    );
    let home = capability_home(args.home.as_deref());
    let store = SqliteReceiptStore::open(&home).map(Arc::new).map_err(|e| {
        CapabilityError::new(
            ErrorCode::ExecutionFailed,
            format!("cannot open the receipt store in {}: {e}", home.display()),
        )
    })?;
    let runtime = CapabilityRuntime::builder()
        .policy(EffectPolicy::permissive())
        .store(Arc::clone(&store) as Arc<dyn ReceiptStore>)
        .executor(Arc::new(executor))
        .build();
    runtime.register(module_capability(&args.package, &args.id)?)?;
    Ok((runtime, Some(store)))
}

/// Adds the WASM executor to a module executor when it can be built here.
pub fn wasm_capable(executor: ModuleExecutor) -> ModuleExecutor {
    executor
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
