//! The `cap` command line (also installed as `capability`): its definition and dispatch.
//!
//! Output is pretty JSON on stdout (`JSON.stringify(value, null, 2)` and a newline). Errors
//! are one line on stderr and exit status 1; `exec` failures print `{"error": {...}}` on
//! stdout. Exit status 2 is reserved for unresolved solve/metabolize/compose routes.

mod commands;
mod output;
mod progress;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// Governed capabilities for agents: discover, inspect, plan, authorize, execute behind an
/// isolation boundary, verify and keep a receipt.
#[derive(Parser, Debug)]
#[command(name = "cap", version, about, long_about = None, disable_help_subcommand = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Arguments of a command that is not built yet (accepted so the command name exists).
#[derive(Args, Debug)]
pub struct Pending {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    pub args: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Validate a document: prints {"valid", "issues"}; exits 1 when invalid.
    Validate(commands::core::ValidateArgs),
    /// Canonical JSON and SHA-256 of a JSON text, byte-identical to the reference.
    Hash(commands::core::HashArgs),
    /// Run the offline protocol conformance suite (or, with --binders, the binder conformance
    /// suite against the binders given an artifact); exits 1 on any failed check.
    Conformance(commands::binders::BinderConformanceArgs),
    /// Inspect a package's capability declaration without importing any code.
    Package(commands::core::PackageArgs),
    /// Write a public index from package.json files.
    Index(commands::core::IndexArgs),
    /// Build the public index record of a package.
    RegistryEntry(commands::core::RegistryEntryArgs),
    /// Emit a capability gap document for an unresolved intent.
    Gap(commands::core::GapArgs),
    /// The substrate coverage report.
    Coverage,
    /// Run a capability through the whole governed lifecycle and print its receipt.
    Exec(commands::runtime::ExecArgs),
    /// Search the capability index.
    Find(commands::runtime::FindArgs),
    /// Resolve a capability id or query against the index.
    Info(commands::runtime::InfoArgs),
    /// List, show and export stored receipts.
    Receipts(commands::runtime::ReceiptsArgs),
    /// Roll back a successful execution of a reversible capability.
    Rollback(commands::runtime::RollbackArgs),
    /// Run a package's capability behind an isolation boundary; prints the receipt.
    Run(commands::packages::PackageRunArgs),
    /// Plan a package's capability (its plan hook runs behind the boundary).
    Plan(commands::packages::PackageRunArgs),
    /// Which isolation boundaries work here, the kernel features found, and whether the
    /// configured indexes and registry answer.
    Doctor(commands::acquire::DoctorArgs),
    /// Safely acquire a package capability: path and integrity checks, nothing imported.
    Acquire(commands::packages::AcquireArgs),
    /// Search the inert manifests of local packages.
    FindLocal(commands::packages::FindLocalArgs),
    /// Run eval cases against a package capability (behind the sandbox).
    Eval(commands::packages::EvalArgs),
    /// Assess the trust of a package capability's provenance.
    Trust(commands::packages::TrustArgs),
    /// Project package capabilities as MCP tools.
    McpTools(commands::packages::McpToolsArgs),
    /// Pending approvals: list, show, approve (prints the token), deny.
    Approvals(commands::governance::ApprovalsArgs),
    /// The hash-chained audit log: tail, show, verify, export.
    Audit(commands::governance::AuditArgs),
    /// Cedar policy tooling: schema, validate, test.
    Policy(commands::governance::PolicyArgs),
    /// Serve MCP (stdio, or streamable HTTP with --listen): the bootstrap tools and
    /// projected capabilities, every call governed by the host.
    McpServe(commands::mcp::McpServeArgs),
    /// Bearer tokens of the HTTP surfaces: add (printed once), list, revoke.
    Tokens(commands::mcp::TokensArgs),
    /// A governing gateway in front of upstream MCP servers (stdio, or HTTP with --listen).
    McpGateway(commands::mcp::McpGatewayArgs),
    /// Pinned upstream tool definitions: list, accept changed ones.
    McpPins(commands::mcp::McpPinsArgs),
    /// Import the tools of a stdio MCP server as capability manifests.
    McpImport(commands::mcp::McpImportArgs),
    /// Serve the HTTP API (/api/v1, /openapi.json) and the web console (/console).
    Serve(commands::serve::ServeArgs),

    // Commands of the reference (stability lock) that later issues build.
    #[command(hide = true)]
    Create(Pending),
    #[command(hide = true)]
    Bridge(Pending),
    #[command(hide = true)]
    Readiness(Pending),
    /// How novel a capability is against every manifest of the indexes.
    Novelty(commands::acquire::NoveltyArgs),
    /// Search the software world: capabilities of the indexes, npm packages and (configured)
    /// GitHub repositories, ranked for the query.
    World(commands::world::WorldArgs),
    #[command(hide = true)]
    Mine(Pending),
    #[command(hide = true)]
    Forge(Pending),
    #[command(hide = true)]
    Solve(Pending),
    #[command(hide = true)]
    Metabolize(Pending),
    /// A PyPI release and the exact wheel bound for it (nothing installed or run).
    PypiInspect(commands::binders::PypiInspectArgs),
    /// The candidates of a wheel (console scripts, public functions), read without importing
    /// it: Python's ast inside the process sandbox.
    PypiMine(commands::binders::PypiMineArgs),
    /// Bind a wheel's function as a capability; with --execute and --approve, run it once in
    /// the process sandbox under the host's policies.
    PypiForge(commands::binders::PypiForgeArgs),
    /// Resolve an OCI image to its manifest digest through the registry's HTTP API.
    OciInspect(commands::binders::OciInspectArgs),
    /// Run an OCI image by digest, hardened, under the host's policies (needs --approve).
    OciRun(commands::binders::OciRunArgs),
    /// Bind a WASM module by its sha256 (file or URL) and run it on the WASM engine.
    WasmRun(commands::binders::WasmRunArgs),
    #[command(hide = true)]
    ComposeIntent(Pending),
    #[command(hide = true)]
    BuildGap(Pending),
    /// Inspect an npm package's registry metadata (nothing downloaded or run).
    NpmInspect(commands::acquire::NpmInspectArgs),
    /// Probe a site's /.well-known/capabilities document and its indexes.
    Probe(commands::acquire::ProbeArgs),
    /// Install a capability's exact npm tarball (checked, unpacked, never run) and write the lock.
    Install(commands::acquire::InstallArgs),
    /// Import an OpenAPI document as inspections, or keep one in the home (add, list,
    /// remove) so that its operations run as governed HTTP calls.
    Openapi(commands::openapi::OpenapiArgs),
}

fn pending(name: &str) -> Result<i32, String> {
    Err(format!("{name}: not available yet in this implementation"))
}

fn run(cli: Cli) -> Result<i32, String> {
    use Command as C;
    match cli.command {
        C::Validate(a) => commands::core::validate(a),
        C::Hash(a) => commands::core::hash(a),
        C::Conformance(a) if a.binders => commands::binders::binder_conformance(a),
        C::Conformance(_) => commands::core::conformance(),
        C::Package(a) => commands::core::package(a),
        C::Index(a) => commands::core::index(a),
        C::RegistryEntry(a) => commands::core::registry_entry(a),
        C::Gap(a) => commands::core::gap(a),
        C::Coverage => commands::core::coverage(),
        C::Exec(a) => commands::runtime::exec(a),
        C::Find(a) => commands::runtime::find(a),
        C::Info(a) => commands::runtime::info(a),
        C::Receipts(a) => commands::runtime::receipts(a),
        C::Rollback(a) => commands::runtime::rollback(a),
        C::Run(a) => commands::packages::run(a),
        C::Plan(a) => commands::packages::plan(a),
        C::Doctor(a) => commands::packages::doctor(a),
        C::Acquire(a) => commands::packages::acquire(a),
        C::FindLocal(a) => commands::packages::find_local(a),
        C::Eval(a) => commands::packages::eval(a),
        C::Trust(a) => commands::packages::trust(a),
        C::McpTools(a) => commands::packages::mcp_tools(a),
        C::Approvals(a) => commands::governance::approvals_cmd(a),
        C::Audit(a) => commands::governance::audit_cmd(a),
        C::Policy(a) => commands::governance::policy_cmd(a),
        C::McpServe(a) => commands::mcp::mcp_serve(a),
        C::Tokens(a) => commands::mcp::tokens_cmd(a),
        C::McpGateway(a) => commands::mcp::mcp_gateway(a),
        C::McpPins(a) => commands::mcp::mcp_pins(a),
        C::McpImport(a) => commands::mcp::mcp_import(a),
        C::Serve(a) => commands::serve::serve(a),
        C::Create(_) => pending("create"),
        C::Bridge(_) => pending("bridge"),
        C::Readiness(_) => pending("readiness"),
        C::Novelty(a) => commands::acquire::novelty(a),
        C::World(a) => commands::world::world(a),
        C::Mine(_) => pending("mine"),
        C::Forge(_) => pending("forge"),
        C::Solve(_) => pending("solve"),
        C::Metabolize(_) => pending("metabolize"),
        C::PypiInspect(a) => commands::binders::pypi_inspect(a),
        C::PypiMine(a) => commands::binders::pypi_mine(a),
        C::PypiForge(a) => commands::binders::pypi_forge(a),
        C::OciInspect(a) => commands::binders::oci_inspect(a),
        C::OciRun(a) => commands::binders::oci_run(a),
        C::WasmRun(a) => commands::binders::wasm_run(a),
        C::ComposeIntent(_) => pending("compose-intent"),
        C::BuildGap(_) => pending("build-gap"),
        C::NpmInspect(a) => commands::acquire::npm_inspect(a),
        C::Probe(a) => commands::acquire::probe(a),
        C::Install(a) => commands::acquire::install(a),
        C::Openapi(a) => commands::openapi::openapi_cmd(a),
    }
}

/// Parses the process arguments, runs the command and returns the exit status.
pub fn main_entry() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            let code = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
                _ => 1,
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run(cli) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(message) => {
            output::error_line(&message);
            ExitCode::from(1)
        }
    }
}
