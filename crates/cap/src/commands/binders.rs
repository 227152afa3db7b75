//! The metabolic binders: `pypi-inspect`, `pypi-mine`, `pypi-forge`, `oci-inspect`,
//! `oci-run`, `wasm-run` and `conformance --binders`. Inspecting and mining need no host;
//! every execution goes through the host ([`capability_host::Host::execute_binding`]):
//! policies, approvals, the audit chain and a stored execution receipt.

use std::path::PathBuf;
use std::sync::Arc;

use capability_binders::{BinderConfig, oci, pypi, wasm};
use capability_host::{BindingOutcome, BindingRun, Host, Principal};
use clap::Args;
use serde_json::{Value, json};

use crate::commands::host::RunOptions;
use crate::output::print_json;

/// Where PyPI packages come from.
#[derive(Args, Debug, Clone, Default)]
pub struct PypiIndexArgs {
    /// The package index (a simple API root such as `https://pypi.org/simple/`); default
    /// $CAP_PYPI_URL, $PIP_INDEX_URL, the `index-url` of pip's configuration, else PyPI.
    #[arg(long)]
    pub index_url: Option<String>,
}

/// Which OCI registries may be spoken to over plain HTTP.
#[derive(Args, Debug, Clone, Default)]
pub struct OciRegistryArgs {
    /// A loopback registry (`127.0.0.1:5000`) spoken to over plain HTTP (repeatable; other
    /// registries always use HTTPS).
    #[arg(long = "insecure-registry")]
    pub insecure_registries: Vec<String>,
    /// The platform to pick from a multi-platform image (`linux/amd64`); default this
    /// machine's.
    #[arg(long)]
    pub platform: Option<String>,
}

/// The binders' configuration for the home `home` names (their cache is `<home>/binders`).
fn binder_config(
    home: &crate::commands::host::HomeArg,
    index: &PypiIndexArgs,
    registries: &OciRegistryArgs,
) -> Result<BinderConfig, String> {
    let root = capability_host::home::resolve(home.home.as_deref());
    BinderConfig::new(
        root.join("binders"),
        index.index_url.as_deref(),
        &registries.insecure_registries,
        registries.platform.as_deref(),
    )
    .map_err(|e| e.to_string())
}

/// Opens the host with the default binders registered.
fn open_with_binders(
    options: &RunOptions,
    index: &PypiIndexArgs,
    registries: &OciRegistryArgs,
) -> Result<Host, String> {
    let config = binder_config(&options.home, index, registries)?;
    let registry =
        Arc::new(capability_binders::default_registry(&config).map_err(|e| e.to_string())?);
    let mut host_config = options.config(vec![Arc::new(capability_host::Builtins)])?;
    host_config.binders = Some(registry);
    crate::commands::host::open_host(host_config)
}

/// The agent the options name acts (the host's default agent when none is named).
fn principal(options: &RunOptions) -> Principal {
    let mut actor = options.actor();
    actor
        .agent_id
        .get_or_insert_with(|| capability_host::DEFAULT_AGENT.to_string());
    Principal::agent(&actor)
}

/// Runs a binding through the host and prints `{…extra, receipt}`; exit 0 when the binder
/// succeeded, 1 when it failed or was refused, 3 when policy wants an approval.
fn execute(
    host: &Host,
    options: &RunOptions,
    binding: &Value,
    input: &Value,
    extra: Value,
) -> Result<i32, String> {
    let run = BindingRun {
        approved: options.approve,
        approval_token: options.approval.clone(),
    };
    match host
        .execute_binding(&principal(options), binding, input, &run)
        .map_err(|e| e.to_string())?
    {
        BindingOutcome::Executed(done) => {
            let mut out = match extra {
                Value::Object(map) => map,
                _ => serde_json::Map::new(),
            };
            if let Some(output) = &done.output {
                out.insert("output".into(), output.clone());
            }
            out.insert("receipt".into(), done.receipt.clone());
            print_json(&Value::Object(out))?;
            Ok(
                if done.status == capability_core::binder::BinderStatus::Succeeded {
                    0
                } else {
                    1
                },
            )
        }
        BindingOutcome::NeedsApproval { approval, reason } => {
            print_json(&json!({
                "status": "approval_required",
                "reason": reason,
                "approval": approval.map(|a| capability_host::approval_json(&a)),
            }))?;
            Ok(3)
        }
        BindingOutcome::Denied { reason } => Err(format!("denied by policy: {reason}")),
    }
}

fn parse_input(text: &str) -> Result<Value, String> {
    crate::output::parse_json_arg(text, "input")
}

#[derive(Args, Debug)]
pub struct PypiInspectArgs {
    /// The project name.
    pub package: String,
    /// An exact version (default: the newest release with a usable wheel).
    #[arg(long)]
    pub version: Option<String>,
    #[command(flatten)]
    pub index: PypiIndexArgs,
    #[command(flatten)]
    pub home: crate::commands::host::HomeArg,
}

fn pypi_index(
    home: &crate::commands::host::HomeArg,
    index: &PypiIndexArgs,
) -> Result<pypi::Index, String> {
    let config = binder_config(home, index, &OciRegistryArgs::default())?;
    pypi::Index::new(&config.pypi).map_err(|e| e.to_string())
}

pub fn pypi_inspect(args: PypiInspectArgs) -> Result<i32, String> {
    let index = pypi_index(&args.home, &args.index)?;
    let inspection = index
        .inspect(&args.package, args.version.as_deref())
        .map_err(|e| e.to_string())?;
    print_json(&inspection.to_json())?;
    Ok(0)
}

#[derive(Args, Debug)]
pub struct PypiMineArgs {
    pub package: String,
    #[arg(long)]
    pub version: Option<String>,
    /// Words that rank the candidates.
    #[arg(long)]
    pub query: Option<String>,
    #[command(flatten)]
    pub index: PypiIndexArgs,
    #[command(flatten)]
    pub home: crate::commands::host::HomeArg,
}

pub fn pypi_mine(args: PypiMineArgs) -> Result<i32, String> {
    let index = pypi_index(&args.home, &args.index)?;
    let report = pypi::mine::mine(
        &index,
        &args.package,
        args.version.as_deref(),
        args.query.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    print_json(&report.to_json())?;
    Ok(0)
}

#[derive(Args, Debug)]
pub struct PypiForgeArgs {
    pub package: String,
    #[arg(long)]
    pub version: Option<String>,
    #[arg(long)]
    pub query: Option<String>,
    /// The module of the function to bind (default: the best candidate's).
    #[arg(long)]
    pub module: Option<String>,
    /// The function or console script to bind.
    #[arg(long)]
    pub symbol: Option<String>,
    /// Where the forged project is written (default: a directory in the home).
    #[arg(long)]
    pub directory: Option<PathBuf>,
    /// Run the forged function once with this input (`[args…]` or `{"args", "kwargs"}`),
    /// in the process sandbox, under the host's policies; needs --approve.
    #[arg(long)]
    pub execute: Option<String>,
    #[command(flatten)]
    pub index: PypiIndexArgs,
    #[command(flatten)]
    pub options: RunOptions,
}

pub fn pypi_forge(args: PypiForgeArgs) -> Result<i32, String> {
    let host = open_with_binders(&args.options, &args.index, &OciRegistryArgs::default())?;
    let mut request = json!({"package": args.package});
    for (key, value) in [
        ("version", &args.version),
        ("query", &args.query),
        ("module", &args.module),
        ("symbol", &args.symbol),
    ] {
        if let Some(v) = value {
            request[key] = json!(v);
        }
    }
    if let Some(d) = &args.directory {
        request["directory"] = json!(d.to_string_lossy());
    }
    let binding = host
        .bind(&principal(&args.options), pypi::BINDER_ID, &request)
        .map_err(|e| e.to_string())?;
    let forged = binding.get("forged").cloned().unwrap_or(Value::Null);
    match &args.execute {
        None => {
            let mut out = match forged {
                Value::Object(map) => map,
                _ => serde_json::Map::new(),
            };
            out.insert("binding".into(), binding);
            out.insert(
                "next".into(),
                json!([
                    "Review the manifest and capability.python.json in the forge directory.",
                    "Run it once in the process sandbox with --execute '<json>' --approve."
                ]),
            );
            print_json(&Value::Object(out))?;
            Ok(0)
        }
        Some(text) => {
            let input = parse_input(text)?;
            execute(&host, &args.options, &binding, &input, forged)
        }
    }
}

#[derive(Args, Debug)]
pub struct OciInspectArgs {
    /// The image reference (`registry/repo:tag` or `registry/repo@sha256:…`).
    pub image: String,
    #[command(flatten)]
    pub registries: OciRegistryArgs,
}

pub fn oci_inspect(args: OciInspectArgs) -> Result<i32, String> {
    let options = oci_options(&args.registries)?;
    let inspection = oci::inspect(&args.image, &options).map_err(|e| e.to_string())?;
    print_json(&inspection.to_json())?;
    Ok(0)
}

fn oci_options(registries: &OciRegistryArgs) -> Result<oci::OciOptions, String> {
    capability_binders::oci_options(
        &registries.insecure_registries,
        registries.platform.as_deref(),
    )
    .map_err(|e| e.to_string())
}

#[derive(Args, Debug)]
pub struct OciRunArgs {
    /// The image reference.
    pub image: String,
    /// Arguments for the image's entrypoint (after `--` when one starts with `-`).
    pub args: Vec<String>,
    /// Give the container a network (bridge); default none.
    #[arg(long)]
    pub network: bool,
    #[command(flatten)]
    pub registries: OciRegistryArgs,
    #[command(flatten)]
    pub options: RunOptions,
}

pub fn oci_run(args: OciRunArgs) -> Result<i32, String> {
    if !args.options.approve && args.options.approval.is_none() {
        // The reference's refusal, before anything is fetched.
        return Err(oci::APPROVAL_REQUIRED.into());
    }
    let host = open_with_binders(&args.options, &PypiIndexArgs::default(), &args.registries)?;
    let mut request = json!({"image": args.image, "network": args.network});
    if let Some(p) = &args.registries.platform {
        request["platform"] = json!(p);
    }
    let binding = host
        .bind(&principal(&args.options), oci::BINDER_ID, &request)
        .map_err(|e| e.to_string())?;
    let inspection = binding.get("inspection").cloned().unwrap_or(Value::Null);
    execute(
        &host,
        &args.options,
        &binding,
        &json!(args.args),
        json!({"inspection": inspection}),
    )
}

#[derive(Args, Debug)]
pub struct WasmRunArgs {
    /// The module: a file or an http(s):// URL.
    pub source: String,
    /// The module's sha256 (hex): a module is bound by its digest, never by its location.
    #[arg(long)]
    pub sha256: String,
    /// The input, as JSON text.
    #[arg(long, default_value = "{}")]
    pub input: String,
    /// A host directory the module may read (repeatable; a WASI preopen).
    #[arg(long = "preopen")]
    pub preopens: Vec<PathBuf>,
    /// A host directory the module may read and write (repeatable).
    #[arg(long = "preopen-rw")]
    pub preopens_rw: Vec<PathBuf>,
    /// Bind only: print the binding, run nothing.
    #[arg(long)]
    pub bind_only: bool,
    #[command(flatten)]
    pub options: RunOptions,
}

pub fn wasm_run(args: WasmRunArgs) -> Result<i32, String> {
    let host = open_with_binders(
        &args.options,
        &PypiIndexArgs::default(),
        &OciRegistryArgs::default(),
    )?;
    let mut preopens = Vec::new();
    for (dirs, write) in [(&args.preopens, false), (&args.preopens_rw, true)] {
        for d in dirs {
            preopens.push(json!({"path": d.to_string_lossy(), "write": write}));
        }
    }
    let request = json!({"source": args.source, "sha256": args.sha256, "preopens": preopens});
    let binding = host
        .bind(&principal(&args.options), wasm::WASM_BINDER_ID, &request)
        .map_err(|e| e.to_string())?;
    if args.bind_only {
        print_json(&binding)?;
        return Ok(0);
    }
    let input = parse_input(&args.input)?;
    execute(
        &host,
        &args.options,
        &binding,
        &input,
        json!({"binding": binding}),
    )
}

/// `cap conformance --binders`: the reference's binder conformance against each binder
/// given an artifact to bind.
#[derive(Args, Debug, Default)]
pub struct BinderConformanceArgs {
    /// Run the binder conformance suite instead of the protocol suite.
    #[arg(long)]
    pub binders: bool,
    /// A PyPI project to bind for the PyPI binder's checks.
    #[arg(long, requires = "binders")]
    pub pypi_package: Option<String>,
    /// Its input (`[args…]` or `{"args","kwargs"}`).
    #[arg(long, default_value = "[]")]
    pub pypi_input: String,
    /// An OCI image to bind for the OCI binder's checks.
    #[arg(long, requires = "binders")]
    pub oci_image: Option<String>,
    /// A WASM module (file or URL) for the WASM binder's checks, with --wasm-sha256.
    #[arg(long, requires = "wasm_sha256")]
    pub wasm_module: Option<String>,
    #[arg(long)]
    pub wasm_sha256: Option<String>,
    /// The WASM module's input.
    #[arg(long, default_value = "{}")]
    pub wasm_input: String,
    #[command(flatten)]
    pub index: PypiIndexArgs,
    #[command(flatten)]
    pub registries: OciRegistryArgs,
    #[command(flatten)]
    pub home: crate::commands::host::HomeArg,
}

pub fn binder_conformance(args: BinderConformanceArgs) -> Result<i32, String> {
    let config = binder_config(&args.home, &args.index, &args.registries)?;
    let run = |binder: Arc<dyn capability_core::binder::MetabolicBinder>,
               request: Value,
               input: Value| {
        let id = binder.id().to_string();
        let report = capability_core::conformance::run_binder_conformance(binder, &request, &input);
        (
            report.ok,
            json!({"binder": id, "report": report.to_value()}),
        )
    };
    let skipped = |id: &str, why: &str| (true, json!({"binder": id, "skipped": why}));
    let results = [
        match &args.pypi_package {
            Some(p) => run(
                Arc::new(pypi::PypiBinder::new(config.pypi.clone())),
                json!({"package": p}),
                parse_input(&args.pypi_input)?,
            ),
            None => skipped(pypi::BINDER_ID, "no --pypi-package named"),
        },
        match &args.oci_image {
            Some(image) => run(
                Arc::new(oci::OciBinder::new(config.oci.clone())),
                json!({"image": image}),
                json!([]),
            ),
            None => skipped(oci::BINDER_ID, "no --oci-image named"),
        },
        match (&args.wasm_module, &args.wasm_sha256) {
            (Some(source), Some(sha)) => run(
                Arc::new(wasm::WasmBinder::new(config.cache_dir.join("wasm"))),
                json!({"source": source, "sha256": sha}),
                parse_input(&args.wasm_input)?,
            ),
            _ => skipped(wasm::WASM_BINDER_ID, "no --wasm-module named"),
        },
    ];
    let ok = results.iter().all(|(ok, _)| *ok);
    let suites: Vec<Value> = results.into_iter().map(|(_, v)| v).collect();
    print_json(&json!({"ok": ok, "binders": suites}))?;
    Ok(if ok { 0 } else { 1 })
}
