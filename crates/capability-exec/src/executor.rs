//! The [`Executor`] trait, the request it receives and the outcome it returns.

use std::any::Any;
use std::path::PathBuf;
use std::time::Duration;

use capability_core::binder::CancelToken;
use capability_core::manifest::Manifest;
use capability_core::plan::{Plan, PlanDetails};
use capability_core::receipt::{Receipt, Verification};
use capability_core::{CapabilityError, ErrorCode};
use serde_json::{Map, Value};

use crate::grants::effects;
use crate::hook::{HookError, HookResult};
use crate::integrity::{read_module, verify_integrity};
use crate::isolation::{IsolationTier, SandboxRequirement};
use crate::module::{ModuleError, ModulePath, resolve_module_path};
use crate::report::BoundaryReport;

/// A package module behind an isolation boundary (never loaded into the host).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleSource {
    /// The package root directory.
    pub package_root: PathBuf,
    /// The package-relative module path (`./dist/add.js`).
    pub module: String,
    /// The expected integrity of the module bytes.
    pub integrity: Option<String>,
}

impl ModuleSource {
    /// The module file, its path checked to stay inside the package root
    /// ([`resolve_module_path`](crate::resolve_module_path)).
    pub fn resolve(&self) -> Result<ModulePath, ModuleError> {
        resolve_module_path(&self.package_root, &self.module)
    }

    /// The module's bytes, for an executor that compiles them: the path checked, a file
    /// above `max_bytes` refused from its size before it is read, and the bytes checked
    /// against `integrity` before anything parses them.
    pub fn read(&self, max_bytes: u64) -> Result<(ModulePath, Vec<u8>), ModuleError> {
        let path = self.resolve()?;
        let bytes = read_module(&path.file, max_bytes)?;
        if let Some(integrity) = &self.integrity {
            verify_integrity(&bytes, integrity)?;
        }
        Ok((path, bytes))
    }
}

/// What an executor sees of the capability it runs: identity, inert manifest, where its
/// module lives, and provenance. The runtime's `Capability` implements it; a host can
/// implement it for any other registration.
pub trait CapabilityView: Send + Sync {
    /// The manifest (already validated).
    fn manifest(&self) -> &Manifest;

    /// The capability id.
    fn id(&self) -> &str {
        &self.manifest().id
    }

    /// The package module, for a module-backed capability.
    fn module_source(&self) -> Option<&ModuleSource>;

    /// The provenance record (copied into every receipt), when there is one.
    fn provenance(&self) -> Option<&Value>;

    /// The concrete value, for an executor that only runs its own kind of capability (the
    /// runtime's in-process executor reaches its Rust hooks this way).
    fn as_any(&self) -> &dyn Any;
}

impl std::fmt::Debug for dyn CapabilityView + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapabilityView")
            .field("id", &self.id())
            .finish_non_exhaustive()
    }
}

/// What capability code sees of the execution it takes part in.
#[derive(Clone, Copy, Debug)]
pub struct ExecutionContext<'a> {
    pub manifest: &'a Manifest,
    /// The plan being executed (absent while planning).
    pub plan: Option<&'a Plan>,
    pub approved: bool,
    /// The caller's metadata.
    pub metadata: Option<&'a Value>,
    pub cancel: &'a CancelToken,
}

/// One execution as an executor sees it.
#[derive(Clone, Copy, Debug)]
pub struct ExecutionRequest<'a> {
    pub capability: &'a dyn CapabilityView,
    /// The authorized plan (for a rollback, a plan rebuilt from the receipt).
    pub plan: &'a Plan,
    pub approved: bool,
    pub metadata: Option<&'a Value>,
    pub cancel: &'a CancelToken,
    /// Wall-clock limit for this call (already the tighter of the caller's and the
    /// governance requirement's).
    pub timeout: Option<Duration>,
    /// Isolation a governance `sandbox` decision requires (tier floor, no network, limits).
    pub sandbox: Option<&'a SandboxRequirement>,
}

impl<'a> ExecutionRequest<'a> {
    /// The context hooks receive.
    pub fn context(&self) -> ExecutionContext<'a> {
        ExecutionContext {
            manifest: self.capability.manifest(),
            plan: Some(self.plan),
            approved: self.approved,
            metadata: self.metadata,
            cancel: self.cancel,
        }
    }

    /// The effects the boundary may open for `execute`: the plan's, without
    /// `network.connect` when the governance requirement denies the network.
    pub fn granted_effects(&self) -> Vec<String> {
        match self.sandbox {
            Some(s) if s.deny_network => self
                .plan
                .effects
                .iter()
                .filter(|e| e.as_str() != effects::NETWORK_CONNECT)
                .cloned()
                .collect(),
            _ => self.plan.effects.clone(),
        }
    }

    /// The memory limit the governance requirement sets, in bytes.
    pub fn memory_limit(&self) -> Option<u64> {
        self.sandbox.and_then(SandboxRequirement::memory_bytes)
    }

    /// Refuses (`PERMISSION_DENIED`) when the governance requirement asks for a stricter
    /// tier than the boundary about to be used.
    pub fn require_tier(&self, tier: IsolationTier) -> HookResult<()> {
        match self.sandbox.and_then(|s| s.min_tier) {
            Some(floor) if floor > tier => Err(HookError::Capability(CapabilityError::new(
                ErrorCode::PermissionDenied,
                format!(
                    "policy requires isolation tier {} but {} runs at tier {}",
                    floor.as_str(),
                    self.capability.id(),
                    tier.as_str()
                ),
            ))),
            _ => Ok(()),
        }
    }
}

/// What an execution produced, and the boundary it crossed.
#[derive(Clone, Debug, PartialEq)]
pub struct Executed {
    pub output: Value,
    /// The isolation boundary used and the limits applied (the receipt records it as
    /// `isolation`).
    pub isolation: BoundaryReport,
    /// Facts only the execution knows (an upstream's latency, how its answer ended), added
    /// to the metadata of the audit event that records the outcome.
    pub notes: Map<String, Value>,
    /// The executor's own answer in its protocol (an MCP tool result with its content
    /// items), handed back to the surface with the receipt when policies left the output
    /// as it was; never stored.
    pub reply: Option<Value>,
}

impl Executed {
    /// An output and the boundary record, with no notes and no reply.
    pub fn new(output: Value, isolation: BoundaryReport) -> Self {
        Executed {
            output,
            isolation,
            notes: Map::new(),
            reply: None,
        }
    }
}

/// A failed execution: the error, and the isolation record when the boundary was crossed
/// (the failed receipt names the boundary and the limit that stopped the run).
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionFailure {
    pub error: HookError,
    pub isolation: Option<BoundaryReport>,
    /// As [`Executed::notes`]: recorded in the audit event of the failure.
    pub notes: Map<String, Value>,
}

impl ExecutionFailure {
    /// A failure that crossed the boundary `isolation` (when it did).
    pub fn new(error: HookError, isolation: Option<BoundaryReport>) -> Self {
        ExecutionFailure {
            error,
            isolation,
            notes: Map::new(),
        }
    }

    /// A failure found after `executed` ran (its output refused, its verification failed):
    /// its boundary record and notes are kept.
    pub fn after(error: HookError, executed: Executed) -> Self {
        ExecutionFailure {
            error,
            isolation: Some(executed.isolation),
            notes: executed.notes,
        }
    }
}

impl From<HookError> for ExecutionFailure {
    fn from(error: HookError) -> Self {
        ExecutionFailure::new(error, None)
    }
}

/// Runs capability code behind some boundary.
pub trait Executor: Send + Sync {
    /// A short name (`in-process`, `sandbox`, `wasm`, `oci`, …).
    fn name(&self) -> &str;

    /// The executor's plan hook, used when the capability has none; `Ok(None)` for the
    /// default plan. It runs before authorization, so it is granted no effect.
    fn plan(
        &self,
        capability: &dyn CapabilityView,
        input: &Value,
        cancel: &CancelToken,
    ) -> HookResult<Option<PlanDetails>>;

    /// Runs `execute`.
    fn execute(&self, request: &ExecutionRequest<'_>) -> Result<Executed, ExecutionFailure>;

    /// Runs `execute`, hands the output to `check` (the runtime's output validation: number
    /// normalization, depth, the output schema), and, when it passes, runs the verification
    /// hook. The default calls [`Executor::execute`] then [`Executor::verify`]; an executor that
    /// can answer both across one boundary crossing (the process sandbox: one sandboxed process
    /// per run) overrides it. Failures after the boundary was crossed carry its isolation record.
    fn execute_verified(
        &self,
        request: &ExecutionRequest<'_>,
        check: &mut dyn FnMut(&mut Executed) -> Result<(), CapabilityError>,
    ) -> Result<(Executed, Option<Verification>), ExecutionFailure> {
        execute_then_verify(self, request, check)
    }

    /// The executor's verification hook; `Ok(None)` when there is none.
    fn verify(
        &self,
        request: &ExecutionRequest<'_>,
        output: &Value,
    ) -> HookResult<Option<Verification>>;

    /// Whether a rollback implementation exists for the capability.
    fn can_rollback(&self, capability: &dyn CapabilityView) -> bool;

    /// Runs the rollback hook for a successful receipt.
    fn rollback(&self, request: &ExecutionRequest<'_>, receipt: &Receipt) -> HookResult<Value>;
}

/// [`Executor::execute_verified`] as two calls: `execute`, `check`, then `verify` (for
/// executors that override it but fall back to it for some capabilities).
pub fn execute_then_verify<E: Executor + ?Sized>(
    executor: &E,
    request: &ExecutionRequest<'_>,
    check: &mut dyn FnMut(&mut Executed) -> Result<(), CapabilityError>,
) -> Result<(Executed, Option<Verification>), ExecutionFailure> {
    let mut executed = executor.execute(request)?;
    if let Err(e) = check(&mut executed) {
        return Err(ExecutionFailure::after(HookError::Capability(e), executed));
    }
    match executor.verify(request, &executed.output) {
        Ok(verification) => Ok((executed, verification)),
        Err(error) => Err(ExecutionFailure::after(error, executed)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use capability_core::plan::CapabilityRef;
    use serde_json::json;

    struct View(Manifest);

    impl CapabilityView for View {
        fn manifest(&self) -> &Manifest {
            &self.0
        }
        fn module_source(&self) -> Option<&ModuleSource> {
            None
        }
        fn provenance(&self) -> Option<&Value> {
            None
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    fn view() -> View {
        View(
            Manifest::from_value(&json!({
                "specVersion": "0.1", "id": "demo/fetch", "version": "1.0.0", "name": "Fetch",
                "description": "Fetches.", "effects": ["network.connect", "filesystem.read"]
            }))
            .unwrap(),
        )
    }

    fn plan() -> Plan {
        Plan::build(
            "plan_1".into(),
            CapabilityRef {
                id: "demo/fetch".into(),
                version: "1.0.0".into(),
            },
            json!({}),
            vec!["network.connect".into(), "filesystem.read".into()],
            "Execute Fetch".into(),
            "2024-01-01T00:00:00.000Z".into(),
            None,
        )
    }

    #[test]
    fn the_sandbox_requirement_is_applied_the_same_way_for_every_executor() {
        let view = view();
        let plan = plan();
        let cancel = CancelToken::new();
        let mut request = ExecutionRequest {
            capability: &view,
            plan: &plan,
            approved: false,
            metadata: None,
            cancel: &cancel,
            timeout: None,
            sandbox: None,
        };
        assert_eq!(request.granted_effects(), plan.effects);
        assert_eq!(request.memory_limit(), None);
        assert!(request.require_tier(IsolationTier::InProcess).is_ok());
        assert_eq!(request.context().manifest.id, "demo/fetch");

        let requirement = SandboxRequirement {
            min_tier: Some(IsolationTier::Oci),
            deny_network: true,
            timeout_ms: None,
            memory_mb: Some(32),
        };
        request.sandbox = Some(&requirement);
        assert_eq!(
            request.granted_effects(),
            vec!["filesystem.read".to_string()]
        );
        assert_eq!(request.memory_limit(), Some(32 << 20));
        assert!(request.require_tier(IsolationTier::Oci).is_ok());
        assert!(request.require_tier(IsolationTier::Wasm).is_ok());
        let e = request.require_tier(IsolationTier::Process).unwrap_err();
        assert_eq!(
            e.message(),
            "policy requires isolation tier oci but demo/fetch runs at tier process"
        );
        assert!(matches!(e, HookError::Capability(c) if c.code == ErrorCode::PermissionDenied));
        assert!(format!("{request:?}").contains("demo/fetch"));
    }

    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Part(u8);

    impl crate::BoundaryLimits for Part {
        fn defaults() -> crate::Limits<Part> {
            crate::Limits {
                timeout: Duration::from_secs(30),
                memory_bytes: 1 << 30,
                tmp_bytes: 1 << 20,
                output_bytes: 1 << 20,
                boundary: Part(7),
            }
        }
    }

    #[test]
    fn limits_are_tightened_by_the_request_the_same_way_for_every_boundary() {
        let view = view();
        let plan = plan();
        let cancel = CancelToken::new();
        let mut request = ExecutionRequest {
            capability: &view,
            plan: &plan,
            approved: false,
            metadata: None,
            cancel: &cancel,
            timeout: None,
            sandbox: None,
        };
        let limits = crate::Limits::<Part>::default();
        assert_eq!(limits.for_request(&request), limits);
        let requirement = SandboxRequirement {
            min_tier: None,
            deny_network: false,
            timeout_ms: Some(2000),
            memory_mb: Some(64),
        };
        request.timeout = Some(Duration::from_secs(5));
        request.sandbox = Some(&requirement);
        let tight = limits.for_request(&request);
        assert_eq!(tight.timeout, Duration::from_secs(2));
        assert_eq!(tight.memory_bytes, 64 << 20);
        assert_eq!((tight.tmp_bytes, &tight.boundary), (1 << 20, &Part(7)));
        request.timeout = Some(Duration::from_secs(1));
        assert_eq!(limits.for_request(&request).timeout, Duration::from_secs(1));
    }
}
