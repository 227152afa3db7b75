//! [`WasmExecutor`]: the [`Executor`] (from `capability-exec`) for `.wasm` package modules,
//! on this crate's engine.
//!
//! The module path is resolved inside the package root (escapes refused), the file read under
//! the engine's module size limit and its bytes checked against `integrity` before anything
//! compiles them (`capability-exec`'s checks, the ones every executor uses); compiled modules
//! are cached by digest. Grants follow the rule of every boundary: the authorized effects,
//! host paths only with `filesystem.read` / `filesystem.write` (preopened at their host
//! path), environment only with `environment.read`; secrets have no channel into a guest, and
//! plan hooks get nothing. The guest ABI is [`crate::ABI`]: a `plan` reply of `null` or `{}`
//! means the default plan, a `verify` reply of `null` means no verification.

use std::sync::OnceLock;

use capability_core::binder::CancelToken;
use capability_core::plan::PlanDetails;
use capability_core::receipt::{Receipt, Verification};
use capability_core::{CapabilityError, ErrorCode};
use capability_exec::{
    BoundaryReport, CapabilityView, Executed, ExecutionFailure, ExecutionRequest, Executor,
    GuestError, HookError, HookResult, HostGrants, Invocation, IsolationTier, Limits,
    plan_from_reply, verification_from_reply,
};
use serde_json::Value;

use crate::config::{EngineConfig, WasmLimits};
use crate::engine::{WasmEngine, WasmModule, WasmModuleSpec};
use crate::error::{WasmError, WasmErrorKind};

/// Runs `.wasm` package modules: one engine (shared per process by default), the host's
/// grants, and the limits of each run.
pub struct WasmExecutor {
    engine: WasmEngine,
    host: HostGrants,
    limits: Limits<WasmLimits>,
}

impl std::fmt::Debug for WasmExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmExecutor")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// The process-wide engine (created on first use).
fn shared_engine() -> Result<WasmEngine, WasmError> {
    static ENGINE: OnceLock<Result<WasmEngine, WasmError>> = OnceLock::new();
    ENGINE
        .get_or_init(|| WasmEngine::new(EngineConfig::default()))
        .clone()
}

/// What a failed run means for the capability: a guest's own error keeps its code in the
/// details (never as the host's code), a bad artifact is `INVALID_PACKAGE_DECLARATION`, and
/// anything else is a named error (`WasmOutOfFuel`, `WasmTimeout`, ...).
fn hook_error(capability: &str, e: WasmError) -> HookError {
    match e.kind() {
        WasmErrorKind::Guest => match e.guest_error() {
            Some(g) => g.to_hook_error(),
            None => GuestError {
                message: e.message().to_string(),
                code: None,
            }
            .to_hook_error(),
        },
        WasmErrorKind::Integrity => HookError::Capability(
            CapabilityError::new(
                ErrorCode::InvalidPackageDeclaration,
                format!("Integrity check failed for {capability}"),
            )
            .with_details(serde_json::json!({"reason": e.message()})),
        ),
        WasmErrorKind::ManifestMismatch => HookError::Capability(CapabilityError::new(
            ErrorCode::InvalidPackageDeclaration,
            e.message(),
        )),
        kind => {
            let mut name = String::from("Wasm");
            let k = kind.as_str();
            let mut chars = k.chars();
            if let Some(first) = chars.next() {
                name.push(first.to_ascii_uppercase());
                name.push_str(chars.as_str());
            }
            HookError::named(name, e.message())
        }
    }
}

impl WasmExecutor {
    /// An executor on the process-wide engine with default limits and no host grants.
    pub fn new() -> Result<Self, WasmError> {
        Ok(WasmExecutor::with_engine(shared_engine()?))
    }

    /// An executor on `engine`, with default limits and no host grants.
    pub fn with_engine(engine: WasmEngine) -> Self {
        WasmExecutor {
            engine,
            host: HostGrants::default(),
            limits: Limits::default(),
        }
    }

    /// What the host opens when the matching effects are granted.
    pub fn with_host_grants(mut self, host: HostGrants) -> Self {
        self.host = host;
        self
    }

    /// The limits of each run (a request can only tighten them).
    pub fn with_limits(mut self, limits: Limits<WasmLimits>) -> Self {
        self.limits = limits;
        self
    }

    /// The engine runs go to.
    pub fn engine(&self) -> &WasmEngine {
        &self.engine
    }

    /// The module, checked and compiled within `limits.timeout`, and the limits left for its
    /// run.
    fn module(
        &self,
        capability: &dyn CapabilityView,
        limits: &Limits<WasmLimits>,
    ) -> Result<(WasmModule, Limits<WasmLimits>), HookError> {
        let Some(source) = capability.module_source() else {
            return Err(HookError::msg(format!(
                "{} is not a package module",
                capability.id()
            )));
        };
        // Path escapes, oversized files and integrity are refused before anything compiles.
        let max_bytes = u64::try_from(self.engine.config().max_module_bytes).unwrap_or(u64::MAX);
        let (_, bytes) = source
            .read(max_bytes)
            .map_err(|e| e.to_hook_error(capability.id()))?;
        let spec =
            WasmModuleSpec::from_bytes(bytes).with_manifest(capability.manifest().to_value());
        self.engine
            .load_for_run(&spec, limits)
            .map_err(|e| hook_error(capability.id(), e))
    }

    /// Runs one hook with these effects granted; the outer `Err` when the run did not start,
    /// else the hook's result and the boundary crossed.
    fn call(
        &self,
        capability: &dyn CapabilityView,
        invocation: &Invocation,
        granted: &[String],
        request: Option<&ExecutionRequest<'_>>,
    ) -> Result<(Result<Value, HookError>, BoundaryReport), HookError> {
        let limits = match request {
            Some(r) => self.limits.for_request(r),
            None => self.limits.clone(),
        };
        let (module, limits) = self.module(capability, &limits)?;
        let mut grants = self.host.grants(granted);
        // Secrets have no channel into a WASI guest.
        grants.secrets.clear();
        let id = capability.id();
        let outcome = self
            .engine
            .run(&module, invocation, &grants, &limits)
            .map_err(|e| hook_error(id, e))?;
        let boundary = BoundaryReport::Wasm(outcome.boundary);
        Ok((outcome.result.map_err(|e| hook_error(id, e)), boundary))
    }
}

impl Executor for WasmExecutor {
    fn name(&self) -> &str {
        "wasm"
    }

    fn plan(
        &self,
        capability: &dyn CapabilityView,
        input: &Value,
        _cancel: &CancelToken,
    ) -> HookResult<Option<PlanDetails>> {
        // Plan hooks run before authorization: no effect is granted to them.
        let (result, _) = self.call(capability, &Invocation::plan(input.clone()), &[], None)?;
        let v = result?;
        if v.is_null() || v.as_object().is_some_and(|o| o.is_empty()) {
            return Ok(None);
        }
        Ok(Some(plan_from_reply(&v)))
    }

    fn execute(&self, request: &ExecutionRequest<'_>) -> Result<Executed, ExecutionFailure> {
        // WASM is the strictest tier, so any floor is met; checked all the same.
        request.require_tier(IsolationTier::Wasm)?;
        let granted = request.granted_effects();
        let (result, isolation) = self.call(
            request.capability,
            &Invocation::executing(request.plan),
            &granted,
            Some(request),
        )?;
        match result {
            Ok(output) => Ok(Executed::new(output, isolation)),
            Err(error) => Err(ExecutionFailure::new(error, Some(isolation))),
        }
    }

    fn verify(
        &self,
        request: &ExecutionRequest<'_>,
        output: &Value,
    ) -> HookResult<Option<Verification>> {
        let (result, _) = self.call(
            request.capability,
            &Invocation::verifying(request.plan, output.clone()),
            &request.plan.effects,
            Some(request),
        )?;
        Ok(match result? {
            Value::Null => None,
            other => Some(verification_from_reply(&other)),
        })
    }

    fn can_rollback(&self, capability: &dyn CapabilityView) -> bool {
        capability.module_source().is_some()
    }

    fn rollback(&self, request: &ExecutionRequest<'_>, receipt: &Receipt) -> HookResult<Value> {
        let (result, _) = self.call(
            request.capability,
            &Invocation::rolling_back(receipt),
            &receipt.effects,
            Some(request),
        )?;
        result
    }
}
