//! # capability-exec
//!
//! The bottom of the execution stack: the [`Executor`] trait and the vocabulary every
//! executor and the runtime share. It depends on `capability-core` only, so an executor
//! (process sandbox, WASM, OCI, an HTTP or MCP upstream) is written against this crate and
//! never against the runtime or the policy crate.
//!
//! ## The trait
//!
//! An [`Executor`] runs capability code behind some boundary. Every hook crosses the same
//! boundary: [`Executor::plan`] (before authorization, so it is granted no effect; `Ok(None)`
//! means the default plan), [`Executor::execute`], [`Executor::verify`] (`Ok(None)`: no
//! verification), [`Executor::can_rollback`] and [`Executor::rollback`]. [`Executor::name`]
//! is a short tag (`in-process`, `sandbox`, `wasm`, `oci`).
//!
//! ## The request
//!
//! [`ExecutionRequest`] is one execution as an executor sees it: the capability (a
//! [`CapabilityView`]), the authorized [`Plan`](capability_core::plan::Plan), whether it was
//! approved, the caller's metadata, a [`CancelToken`](capability_core::binder::CancelToken),
//! the wall-clock timeout, and the [`SandboxRequirement`] of a governance `sandbox`
//! decision. Helpers apply that requirement the same way for every executor:
//! [`ExecutionRequest::granted_effects`] (no `network.connect` when the network is denied),
//! [`ExecutionRequest::memory_limit`], [`ExecutionRequest::require_tier`] (refuses with
//! `PERMISSION_DENIED` when the boundary's [`IsolationTier`] is below the floor), and
//! [`ExecutionRequest::context`] (the [`ExecutionContext`] hooks receive).
//!
//! [`CapabilityView`] is what an executor may know of a capability: `id`, `manifest`,
//! `module_source` (the package [`ModuleSource`]: root, module path, integrity) and
//! `provenance`. The request cannot name the runtime's `Capability` type without making
//! every executor depend on the runtime, so it holds this small trait object instead.
//!
//! **The in-process path.** The runtime's own Rust hooks (trusted host code, the built-ins)
//! are not part of the view: they are closures private to `capability-runtime`. Its
//! `InProcessExecutor` still implements [`Executor`] — so plan, execute, verify, receipt and
//! audit are the same path for every boundary — and reaches the hooks by downcasting
//! [`CapabilityView::as_any`] to the runtime's `Capability`. A view from anywhere else has no
//! hooks and is refused, and no other executor can reach them, so Rust hooks run in process
//! only through the runtime that registered them.
//!
//! ## The outcome
//!
//! [`Executed`] is the output plus the [`BoundaryReport`] of the boundary crossed (the
//! receipt keeps it as `isolation`). [`ExecutionFailure`] is the [`HookError`] plus that
//! report when the boundary was crossed, so a failed receipt names the boundary and the limit that stopped
//! the run. [`HookError`] is what capability code throws: a
//! [`CapabilityError`](capability_core::CapabilityError) kept as is, or a named error the
//! runtime records as `EXECUTION_FAILED` with `{name, message}`; [`HookResult`] is its
//! `Result`.
//!
//! ## A run: grants, limits, invocation, outcome
//!
//! What every boundary (process sandbox, OCI, WASM) is given and gives back is named once,
//! here; the executor crates re-export it.
//!
//! * [`effects`] names the effects a boundary gives meaning to; [`HostGrants`] is what the
//!   host is willing to open (paths, environment, secrets) and [`HostGrants::grants`] keeps
//!   each item closed unless its effect was granted, giving the [`Grants`] of one run.
//! * [`Limits`] is what every boundary limits (wall clock, memory, `/tmp`, output) plus the
//!   part only one boundary has (`B`: the sandbox's `ProcessLimits`, the WASM engine's
//!   `WasmLimits`), whose [`BoundaryLimits`] impl gives that boundary's defaults.
//!   [`Limits::for_request`] tightens them by an [`ExecutionRequest`] the same way for all.
//! * [`Invocation`] is one call of a hook ([`Op`]): `Invocation::executing(plan)`,
//!   `verifying(plan, output)`, `rolling_back(receipt)`.
//! * [`RunOutcome`] is what a run that entered its boundary returns: the output or the
//!   boundary's error, whether the hook exists, the boundary's report, duration, stderr.
//! * [`GuestError`] is what a guest reports through its protocol;
//!   [`GuestError::to_hook_error`] turns it into the run's error (the guest's code never
//!   becomes the host's). [`plan_from_reply`] and [`verification_from_reply`] read a guest's
//!   `plan` and `verify` replies.
//! * [`resolve_module_path`] (and [`ModuleSource::resolve`] / [`ModuleSource::read`]) keeps a
//!   package module inside its package root before anything reads it; [`ModuleError`] says
//!   why one was refused and [`ModuleError::to_hook_error`] what the capability "threw".
//!
//! ## Isolation
//!
//! * [`IsolationTier`] (`in_process` < `process` < `oci` < `wasm`) and [`SandboxRequirement`]
//!   (tier floor, no network, time and memory limits, [`SandboxRequirement::merge`] for the
//!   strictest of several) are the policy crate's `sandbox` vocabulary; it re-exports them.
//!   [`UnknownName`] is the error of parsing a closed vocabulary.
//! * [`ExecutorChoice`] is the host's choice of boundary for package code (`auto`, `process`,
//!   `wasm`, `oci`, `in-process`).
//!
//! ## The boundary report
//!
//! [`BoundaryReport`] is the typed record of the boundary one run crossed, one variant per
//! kind of boundary: [`InProcessReport`] (trusted host code), [`SandboxReport`] (the process
//! sandbox and OCI containers, with an [`AppliedLimit`] per limit), [`WasmReport`] (with a
//! [`PreopenReport`] per directory) and [`HttpReport`] (an HTTP operation:
//! [`HttpRequestReport`], [`HttpLimits`], and an [`HttpExchange`] once a response came).
//! [`BoundaryReport::name`] and [`BoundaryReport::tier`] say which; each variant serializes
//! to exactly the JSON receipts have always held ([`BoundaryReport::to_value`] is what the
//! runtime stores as the receipt's `isolation`), so receipts stay byte-compatible.
//!
//! ## Integrity
//!
//! [`integrity`] is the one checker for module bytes of every kind (`.wasm`, `.js`, `.py`,
//! native): [`Integrity::parse`] / [`verify_integrity`] accept sha256 (hex or base64, with or
//! without `sha256-`) and `sha512-<base64>` SRI, several tokens (the strongest algorithm
//! decides), and compare in constant time. [`digest_file`] streams a module file through the
//! hash instead of reading it whole and [`read_module`] reads one for compiling; both refuse
//! a file above a byte limit ([`DEFAULT_MAX_MODULE_BYTES`], 256 MiB, unless the host sets
//! another) before reading it. Errors are [`IntegrityError`].
//!
//! [`installed`] keeps installed packages as they were installed: the acquisition code
//! records every file of an unpacked package ([`installed::PackageFiles`]) and seals its
//! root ([`installed::seal_installed`]); [`resolve_module_path`] then checks, before every
//! run of one of its modules, that the store and the package directory are the home's own
//! private directories and that the tree is exactly what was recorded, naming the first
//! entry that is not ([`ModuleError::Installed`]).
//!
//! ## Example
//!
//! ```
//! use std::any::Any;
//! use capability_core::binder::CancelToken;
//! use capability_core::manifest::Manifest;
//! use capability_core::plan::PlanDetails;
//! use capability_core::receipt::{Receipt, Verification};
//! use capability_exec::{
//!     CapabilityView, Executed, ExecutionFailure, ExecutionRequest, Executor, HookError,
//!     HookResult, InProcessReport, ModuleSource,
//! };
//! use serde_json::{Value, json};
//!
//! /// An executor that echoes the input (a real one crosses a boundary here).
//! struct Echo;
//!
//! impl Executor for Echo {
//!     fn name(&self) -> &str { "echo" }
//!     fn plan(&self, _: &dyn CapabilityView, _: &Value, _: &CancelToken)
//!         -> HookResult<Option<PlanDetails>> { Ok(None) }
//!     fn execute(&self, request: &ExecutionRequest<'_>) -> Result<Executed, ExecutionFailure> {
//!         request.require_tier(capability_exec::IsolationTier::InProcess)?;
//!         Ok(Executed::new(
//!             request.plan.input.clone(),
//!             InProcessReport::new(request.timeout).into(),
//!         ))
//!     }
//!     fn verify(&self, _: &ExecutionRequest<'_>, _: &Value) -> HookResult<Option<Verification>> {
//!         Ok(None)
//!     }
//!     fn can_rollback(&self, _: &dyn CapabilityView) -> bool { false }
//!     fn rollback(&self, _: &ExecutionRequest<'_>, _: &Receipt) -> HookResult<Value> {
//!         Err(HookError::msg("no rollback"))
//!     }
//! }
//!
//! /// The smallest view: a manifest.
//! struct View(Manifest);
//!
//! impl CapabilityView for View {
//!     fn manifest(&self) -> &Manifest { &self.0 }
//!     fn module_source(&self) -> Option<&ModuleSource> { None }
//!     fn provenance(&self) -> Option<&Value> { None }
//!     fn as_any(&self) -> &dyn Any { self }
//! }
//! # let view = View(Manifest::from_value(&json!({
//! #     "specVersion": "0.1", "id": "demo/echo", "version": "1.0.0", "name": "Echo",
//! #     "description": "Echoes.", "effects": []
//! # }))?);
//! # let plan = capability_core::plan::Plan::build(
//! #     "plan_1".into(),
//! #     capability_core::plan::CapabilityRef { id: "demo/echo".into(), version: "1.0.0".into() },
//! #     json!({"x": 1}), vec![], "Execute Echo".into(), "2024-01-01T00:00:00.000Z".into(), None,
//! # );
//! # let cancel = CancelToken::new();
//! # let request = ExecutionRequest {
//! #     capability: &view, plan: &plan, approved: false, metadata: None, cancel: &cancel,
//! #     timeout: None, sandbox: None,
//! # };
//! # assert_eq!(Echo.execute(&request).map(|e| e.output), Ok(json!({"x": 1})));
//! # Ok::<(), capability_core::CapabilityError>(())
//! ```

mod executor;
mod grants;
mod guest;
pub mod home;
mod hook;
pub mod installed;
pub mod integrity;
mod isolation;
mod limits;
mod module;
mod report;
mod run;

pub use executor::{
    CapabilityView, Executed, ExecutionContext, ExecutionFailure, ExecutionRequest, Executor,
    ModuleSource, execute_then_verify,
};
pub use grants::{Grants, HostGrants, effects};
pub use guest::{GuestError, plan_from_reply, verification_from_reply};
pub use hook::{HookError, HookResult};
pub use integrity::{
    DEFAULT_MAX_MODULE_BYTES, DigestAlgorithm, Integrity, IntegrityError, ModuleDigest,
    digest_file, read_module, verify_integrity,
};
pub use isolation::{ExecutorChoice, IsolationTier, SandboxRequirement, UnknownName};
pub use limits::{BoundaryLimits, Limits};
pub use module::{ModuleError, ModulePath, resolve_module_path};
pub use report::{
    AppliedLimit, BoundaryReport, HttpDestination, HttpExchange, HttpLimits, HttpReport,
    HttpRequestReport, HttpResponseReport, InProcessLimits, InProcessReport, McpUpstreamReport,
    PreopenReport, SandboxReport, WasmReport,
};
pub use run::{Invocation, Op, RunOutcome};
