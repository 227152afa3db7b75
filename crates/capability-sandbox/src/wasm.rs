//! The [`Executor`] (from `capability-exec`) for `.wasm` package modules, on the
//! `capability-wasm` engine.
//!
//! The module path is resolved inside the package root (escapes refused) and its integrity
//! checked before compiling; compiled modules are cached by digest. Grants follow the same
//! rule as the process sandbox: the authorized effects, host paths only with
//! `filesystem.read` / `filesystem.write` (preopened at their host path), environment only
//! with `environment.read`; plan hooks get nothing. The guest ABI is `capability-wasi-p1/1`
//! (see `capability_wasm`): a `plan` reply of `null` or `{}` means the default plan, a
//! `verify` reply of `null` means no verification.

use std::sync::OnceLock;

use capability_core::binder::CancelToken;
use capability_core::plan::PlanDetails;
use capability_core::receipt::{Receipt, Verification};
use capability_core::{CapabilityError, ErrorCode};
use capability_exec::{
    BoundaryReport as _, CapabilityView, Executed, ExecutionFailure, ExecutionRequest, Executor,
    Grants, HookError, HookResult, HostGrants, Invocation, IsolationTier, Limits, plan_from_reply,
    verification_from_reply,
};
use capability_wasm::{
    EngineConfig, WasmEngine, WasmError, WasmErrorKind, WasmLimits, WasmModule, WasmModuleSpec,
};
use serde_json::Value;

use crate::package::resolve_module_limited;
use crate::types::ModuleSpec;

/// Runs `.wasm` modules on a shared wasmtime engine.
pub struct WasmExecutor {
    engine: WasmEngine,
    host: HostGrants,
    limits: Limits<WasmLimits>,
}

impl std::fmt::Debug for WasmExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmExecutor").finish_non_exhaustive()
    }
}

/// The process-wide engine (created on first use).
fn shared_engine() -> Result<WasmEngine, String> {
    static ENGINE: OnceLock<Result<WasmEngine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| WasmEngine::new(EngineConfig::default()).map_err(|e| e.to_string()))
        .clone()
}

fn to_hook(e: WasmError) -> HookError {
    match e.kind() {
        WasmErrorKind::Guest => {
            let message = e.message();
            match e.guest_error() {
                Some(g) => g.to_hook_error(),
                None => capability_exec::GuestError {
                    message: message.to_string(),
                    code: None,
                }
                .to_hook_error(),
            }
        }
        WasmErrorKind::Integrity | WasmErrorKind::ManifestMismatch => HookError::Capability(
            CapabilityError::new(ErrorCode::InvalidPackageDeclaration, e.message()),
        ),
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
    /// An executor on the shared engine with default limits and no host grants.
    pub fn new() -> Result<Self, String> {
        Ok(WasmExecutor {
            engine: shared_engine()?,
            host: HostGrants::default(),
            limits: Limits::<WasmLimits>::default(),
        })
    }

    pub fn with_host_grants(mut self, host: HostGrants) -> Self {
        self.host = host;
        self
    }

    pub fn with_limits(mut self, limits: Limits<WasmLimits>) -> Self {
        self.limits = limits;
        self
    }

    /// The authorized effects, and the host paths and environment they open (preopened at
    /// their host path). Secrets have no channel into a WASI guest.
    fn grants(&self, granted: &[String]) -> Grants {
        let mut grants = self.host.grants(granted);
        grants.secrets.clear();
        grants
    }

    /// The module, compiled within `limits.timeout`, and the limits left for its run.
    fn module(
        &self,
        capability: &dyn CapabilityView,
        limits: &Limits<WasmLimits>,
    ) -> Result<(WasmModule, Limits<WasmLimits>), HookError> {
        let Some(m) = capability.module_source() else {
            return Err(HookError::msg(format!(
                "{} is not a package module",
                capability.id()
            )));
        };
        let spec = ModuleSpec {
            package_root: m.package_root.clone(),
            install_root: None,
            module: m.module.clone(),
            integrity: m.integrity.clone(),
            manifest: capability.manifest().to_value(),
        };
        // Path escapes and integrity are refused before anything is compiled.
        let limit = self.engine.config().max_module_bytes as u64;
        let resolved = resolve_module_limited(&spec, limit)
            .map_err(|e| crate::executor::hook_error(capability.id(), e))?;
        let mut wasm = WasmModuleSpec::from_path(resolved.host_path.clone())
            .with_manifest(capability.manifest().to_value());
        if let Some(i) = &m.integrity {
            wasm = wasm.with_integrity(i.clone());
        }
        self.engine.load_for_run(&wasm, limits).map_err(to_hook)
    }

    fn limits_for(&self, request: Option<&ExecutionRequest<'_>>) -> Limits<WasmLimits> {
        match request {
            Some(r) => self.limits.for_request(r),
            None => self.limits.clone(),
        }
    }

    fn call(
        &self,
        capability: &dyn CapabilityView,
        invocation: &Invocation,
        granted: &[String],
        request: Option<&ExecutionRequest<'_>>,
    ) -> Result<(Result<Value, HookError>, Value), HookError> {
        let (module, limits) = self.module(capability, &self.limits_for(request))?;
        let outcome = self
            .engine
            .run(&module, invocation, &self.grants(granted), &limits)
            .map_err(to_hook)?;
        let boundary = outcome.boundary.to_isolation();
        Ok((outcome.result.map_err(to_hook), boundary))
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
        let (result, _) = self.call(capability, &Invocation::plan(input.clone()), &[], None)?;
        let v = result?;
        if v.is_null() || v.as_object().is_some_and(|o| o.is_empty()) {
            return Ok(None);
        }
        Ok(Some(plan_from_reply(&v)))
    }

    fn execute(&self, request: &ExecutionRequest<'_>) -> Result<Executed, ExecutionFailure> {
        let invocation = Invocation::executing(request.plan);
        // WASM is the strictest tier, so any floor is met; checked all the same.
        request.require_tier(IsolationTier::Wasm)?;
        let granted = request.granted_effects();
        let (result, isolation) =
            self.call(request.capability, &invocation, &granted, Some(request))?;
        match result {
            Ok(output) => Ok(Executed { output, isolation }),
            Err(error) => Err(ExecutionFailure {
                error,
                isolation: Some(isolation),
            }),
        }
    }

    fn verify(
        &self,
        request: &ExecutionRequest<'_>,
        output: &Value,
    ) -> HookResult<Option<Verification>> {
        let invocation = Invocation::verifying(request.plan, output.clone());
        let (result, _) = self.call(
            request.capability,
            &invocation,
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
        let invocation = Invocation::rolling_back(receipt);
        let (result, _) = self.call(
            request.capability,
            &invocation,
            &receipt.effects,
            Some(request),
        )?;
        result
    }
}
