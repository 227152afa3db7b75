//! The [`Executor`] (from `capability-exec`) for package modules: every hook of a
//! module-backed capability crosses an isolation boundary chosen per module kind and per host
//! configuration.
//!
//! * **Grants** come from the effects the runtime authorized: `execute`, `verify` and
//!   `rollback` get the plan's (or receipt's) effects; `plan` hooks run before
//!   authorization and therefore get **no** effect at all. Host-chosen paths, environment
//!   variables and secrets ([`HostGrants`]) are opened only when the matching effect is
//!   granted (`filesystem.read`, `filesystem.write`, `environment.read`, `secrets.read`).
//! * **Selection** ([`ExecutorChoice`]): `auto` picks the WASM executor for `.wasm` modules
//!   (`capability-wasm`'s, given with [`ModuleExecutor::with_wasm`]), the process sandbox
//!   for node, python and native modules when it works here, else an OCI engine when one
//!   answers — and otherwise refuses. Package code never runs in process.
//! * **Receipts**: every run that crossed the boundary records it (kind, runner, namespaces,
//!   landlock, seccomp, network, limits) in the receipt's `isolation`, failures included.

use std::sync::Mutex;
use std::time::Instant;

use capability_core::binder::CancelToken;
use capability_core::plan::PlanDetails;
use capability_core::receipt::{Receipt, Verification};
use capability_core::{CapabilityError, ErrorCode};
use capability_exec::{
    BoundaryReport, CapabilityView, Executed, ExecutionFailure, ExecutionRequest, Executor,
    ExecutorChoice, Grants, HookError, HookResult, HostGrants, Invocation, IsolationTier, Limits,
    plan_from_reply, verification_from_reply,
};
use capability_wasm::WasmExecutor;
use serde_json::Value;

use crate::error::SandboxError;
use crate::oci::{OciExecutor, OciImages};
use crate::pool::SandboxPool;
use crate::process::ProcessSandbox;
use crate::session::Session;
use crate::types::{ModuleKind, ModuleSpec, Outcome, ProcessLimits};

/// The executor for module-backed capabilities.
pub struct ModuleExecutor {
    choice: ExecutorChoice,
    host: HostGrants,
    limits: Limits<ProcessLimits>,
    process: &'static ProcessSandbox,
    oci: Result<OciExecutor, NoOci>,
    wasm: Option<WasmExecutor>,
    /// Sessions whose `plan` ran without grants, kept for the `execute` of the same run when
    /// it needs no grants either (see [`ModuleExecutor::plan`]).
    parked: Mutex<Vec<Parked>>,
    /// Pre-started single-use sandboxes for grant-less runs ([`ModuleExecutor::with_pool`]).
    pool: Option<SandboxPool>,
}

/// Why OCI runs are refused: no engine was configured, or none answered.
#[derive(Debug, thiserror::Error)]
enum NoOci {
    #[error("no OCI engine was configured (ModuleExecutor::with_oci)")]
    NotConfigured,
    #[error(transparent)]
    Detect(SandboxError),
}

/// A session parked between `plan` and `execute`.
struct Parked {
    /// The thread, capability, module and input it planned: only the `execute` of that run
    /// (same thread, same capability, same input) may continue it.
    key: String,
    session: Session,
    at: Instant,
}

/// At most this many sessions wait between `plan` and `execute`; the oldest is closed first.
const MAX_PARKED: usize = 8;

impl std::fmt::Debug for ModuleExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleExecutor")
            .field("choice", &self.choice)
            .finish()
    }
}

fn refused(message: String) -> HookError {
    HookError::Capability(CapabilityError::new(ErrorCode::ExecutionFailed, message))
}

/// Maps a sandbox failure to what the capability "threw": guest errors become
/// `EXECUTION_FAILED` with the guest's code and message in the details
/// ([`GuestError::to_hook_error`](capability_exec::GuestError::to_hook_error)); boundary
/// failures name the limit or refusal that stopped the run.
pub fn hook_error(capability: &str, e: SandboxError) -> HookError {
    match e {
        SandboxError::Guest(g) => g.to_hook_error(),
        e
        @ (SandboxError::IntegrityMismatch { .. } | SandboxError::UnsupportedIntegrity { .. }) => {
            HookError::Capability(
                CapabilityError::new(
                    ErrorCode::InvalidPackageDeclaration,
                    format!("Integrity check failed for {capability}"),
                )
                .with_details(serde_json::json!({"reason": e.to_string()})),
            )
        }
        e @ SandboxError::ModuleTooLarge { .. } => HookError::Capability(CapabilityError::new(
            ErrorCode::InvalidPackageDeclaration,
            format!("Module of {capability} refused: {e}"),
        )),
        e @ SandboxError::PathEscape { .. } => HookError::Capability(CapabilityError::new(
            ErrorCode::InvalidPackageDeclaration,
            format!("Export {capability} escapes package root: {e}"),
        )),
        e @ SandboxError::ManifestMismatch { .. } => HookError::Capability(CapabilityError::new(
            ErrorCode::InvalidPackageDeclaration,
            format!("Loaded manifest for {capability} does not match inert package metadata: {e}"),
        )),
        other => HookError::Other {
            name: format!("Sandbox{}", pascal(other.kind())),
            message: other.to_string(),
        },
    }
}

fn pascal(kind: &str) -> String {
    kind.split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

impl ModuleExecutor {
    /// An executor with the default limits and no host grants.
    pub fn new(choice: ExecutorChoice) -> Self {
        ModuleExecutor {
            choice,
            host: HostGrants::default(),
            limits: Limits::<ProcessLimits>::default(),
            process: ProcessSandbox::global(),
            oci: Err(NoOci::NotConfigured),
            wasm: None,
            parked: Mutex::new(Vec::new()),
            pool: None,
        }
    }

    /// Keeps up to `capacity` pre-started, single-use sandboxes for grant-less node and
    /// python runs (see [`SandboxPool`]); for hosts that serve many runs.
    pub fn with_pool(mut self, capacity: usize) -> Self {
        self.pool = Some(SandboxPool::new(capacity));
        self
    }

    /// The pool, when one is kept.
    pub fn pool(&self) -> Option<&SandboxPool> {
        self.pool.as_ref()
    }

    /// Starts a spare for a node, python or native module capability ahead of its first run, when a
    /// pool is kept and the capability runs in the process sandbox; whether one was started.
    pub fn prewarm(&self, capability: &dyn CapabilityView) -> bool {
        let Some(pool) = &self.pool else {
            return false;
        };
        let Ok(spec) = ModuleExecutor::spec(capability) else {
            return false;
        };
        if !pre_starts(&spec) || !matches!(self.route(capability, &spec), Ok(Route::Process)) {
            return false;
        }
        pool.prestart(self.process, &spec, &self.host.grants(&[]), &self.limits);
        true
    }

    /// A session for a run: a pre-started spare when the run is grant-less and the pool has
    /// one for this module and limits, else a sandbox started now.
    fn start_session(
        &self,
        spec: &ModuleSpec,
        first: &Invocation,
        grants: &Grants,
        limits: &Limits<ProcessLimits>,
    ) -> Result<(Session, Outcome), SandboxError> {
        if let Some(mut session) = self.claim_spare(spec, grants, limits) {
            let outcome = session.call(first)?;
            return Ok((session, outcome));
        }
        Session::start(self.process, spec, first, grants, limits)
    }

    /// The pool's spare for a grant-less run of this module with these limits, if one waits
    /// (claiming starts the next one).
    fn claim_spare(
        &self,
        spec: &ModuleSpec,
        grants: &Grants,
        limits: &Limits<ProcessLimits>,
    ) -> Option<Session> {
        let grantless = *grants == self.host.grants(&[]) && grants.effects.is_empty();
        let pool = self.pool.as_ref().filter(|_| grantless)?;
        pool.claim(self.process, spec, grants, limits)
    }

    /// What the host opens when the matching effects are granted.
    pub fn with_host_grants(mut self, host: HostGrants) -> Self {
        self.host = host;
        self
    }

    /// Runs process-sandbox modules in this sandbox instead of the process-wide one.
    pub fn with_process_sandbox(mut self, process: &'static ProcessSandbox) -> Self {
        self.process = process;
        self
    }

    pub fn with_limits(mut self, limits: Limits<ProcessLimits>) -> Self {
        self.limits = limits;
        self
    }

    /// The executor for `.wasm` modules (`capability-wasm`'s); without one they are refused.
    pub fn with_wasm(mut self, wasm: WasmExecutor) -> Self {
        self.wasm = Some(wasm);
        self
    }

    /// Uses an OCI engine (when one answers) with these pinned images; when none does, OCI runs
    /// are refused with the engines' reasons.
    pub fn with_oci(mut self, images: OciImages) -> Self {
        self.oci = OciExecutor::detect(images).map_err(NoOci::Detect);
        self
    }

    fn spec(capability: &dyn CapabilityView) -> Result<ModuleSpec, HookError> {
        match capability.module_source() {
            Some(m) => Ok(ModuleSpec {
                package_root: m.package_root.clone(),
                install_root: None,
                module: m.module.clone(),
                integrity: m.integrity.clone(),
                manifest: capability.manifest().to_value(),
            }),
            None => Err(refused(format!(
                "{} is not a package module",
                capability.id()
            ))),
        }
    }

    fn wasm_for(&self, capability: &dyn CapabilityView) -> Result<&WasmExecutor, HookError> {
        self.wasm.as_ref().ok_or_else(|| {
            refused(format!(
                "{}: the WASM executor is not available here",
                capability.id()
            ))
        })
    }

    /// Which boundary runs this module, or why none can.
    fn route(
        &self,
        capability: &dyn CapabilityView,
        spec: &ModuleSpec,
    ) -> Result<Route<'_>, HookError> {
        let kind = ModuleKind::of(&spec.module);
        let wasm = kind == ModuleKind::Wasm;
        match (self.choice, wasm) {
            (ExecutorChoice::InProcess, _) => Err(refused(format!(
                "{}: package modules run only behind an isolation boundary, never in process",
                capability.id()
            ))),
            (ExecutorChoice::Wasm, false) => Err(refused(format!(
                "{}: the WASM executor runs .wasm modules only",
                capability.id()
            ))),
            (ExecutorChoice::Process | ExecutorChoice::Oci, true) => Err(refused(format!(
                "{}: a .wasm module runs only in the WASM executor",
                capability.id()
            ))),
            (ExecutorChoice::Wasm | ExecutorChoice::Auto, true) => {
                self.wasm_for(capability).map(Route::Wasm)
            }
            (ExecutorChoice::Process, false) => Ok(Route::Process),
            (ExecutorChoice::Oci, false) => match &self.oci {
                Ok(oci) => Ok(Route::Oci(oci)),
                Err(reason) => Err(refused(format!(
                    "{}: no OCI engine answers here: {reason}",
                    capability.id()
                ))),
            },
            (ExecutorChoice::Auto, false) => {
                if self.process.landlock_abi().is_ok() || self.process.node().is_ok() {
                    Ok(Route::Process)
                } else if let Ok(oci) = &self.oci {
                    Ok(Route::Oci(oci))
                } else {
                    Err(refused(format!(
                        "{}: no isolation boundary that can run this module is available here",
                        capability.id()
                    )))
                }
            }
        }
    }

    fn run(
        &self,
        capability: &dyn CapabilityView,
        spec: &ModuleSpec,
        route: &Route<'_>,
        invocation: &Invocation,
        granted: &[String],
    ) -> Result<Outcome, SandboxError> {
        self.run_with(capability, spec, route, invocation, granted, &self.limits)
    }

    fn run_with(
        &self,
        capability: &dyn CapabilityView,
        spec: &ModuleSpec,
        route: &Route<'_>,
        invocation: &Invocation,
        granted: &[String],
        limits: &Limits<ProcessLimits>,
    ) -> Result<Outcome, SandboxError> {
        let grants = self.host.grants(granted);
        match route {
            Route::Process if ModuleKind::of(&spec.module) == ModuleKind::Native => {
                match self.claim_spare(spec, &grants, limits) {
                    Some(mut spare) => spare.call(invocation),
                    None => self.process.run(spec, invocation, &grants, limits),
                }
            }
            Route::Process => self.process.run(spec, invocation, &grants, limits),
            Route::Oci(oci) => oci.run(spec, invocation, &grants, limits),
            Route::Wasm(_) => Err(SandboxError::Invalid {
                detail: format!("{} runs through the WASM executor", capability.id()),
            }),
        }
    }
}

/// Which run a parked session belongs to.
fn park_key(capability: &dyn CapabilityView, spec: &ModuleSpec, input: &Value) -> String {
    format!(
        "{:?}\u{0}{}\u{0}{}\u{0}{}",
        std::thread::current().id(),
        capability.id(),
        spec.module,
        capability_core::json::canonical_hash(input)
    )
}

/// Whether a spare can be started for the module ahead of its run: node and python (their
/// shims wait before importing the module) and native programs (started, they wait on
/// stdin for their one request).
fn pre_starts(spec: &ModuleSpec) -> bool {
    speaks_sessions(spec) || ModuleKind::of(&spec.module) == ModuleKind::Native
}

/// Whether the module runs through a shim that speaks sessions (node, python).
fn speaks_sessions(spec: &ModuleSpec) -> bool {
    matches!(
        ModuleKind::of(&spec.module),
        ModuleKind::Node | ModuleKind::Python
    )
}

impl ModuleExecutor {
    fn park(&self, key: String, session: Session) {
        if !session.is_open() {
            return;
        }
        let Ok(mut parked) = self.parked.lock() else {
            return;
        };
        // Sessions dropped here are closed once the lock is released: closing one waits for
        // its sandbox to be gone.
        let mut closed = Vec::new();
        for p in std::mem::take(&mut *parked) {
            if p.session.is_open() && p.at.elapsed() < Session::IDLE {
                parked.push(p);
            } else {
                closed.push(p);
            }
        }
        if parked.len() >= MAX_PARKED {
            closed.push(parked.remove(0));
        }
        parked.push(Parked {
            key,
            session,
            at: Instant::now(),
        });
        drop(parked);
        drop(closed);
    }

    /// The session parked by this run's `plan`, when it can run `execute` with exactly these
    /// grants and limits; any other session of the run is closed.
    fn unpark(
        &self,
        key: &str,
        grants: &Grants,
        limits: &Limits<ProcessLimits>,
    ) -> Option<Session> {
        let mut parked = self.parked.lock().ok()?;
        let i = parked.iter().position(|p| p.key == key)?;
        let p = parked.remove(i);
        drop(parked);
        let fits = p.session.is_open()
            && p.at.elapsed() < Session::IDLE
            && p.session.grants() == grants
            && p.session.limits() == limits;
        fits.then_some(p.session)
    }
}

enum Route<'a> {
    Process,
    Oci(&'a OciExecutor),
    Wasm(&'a WasmExecutor),
}

impl ModuleExecutor {
    /// The effects and limits of an execution once a governance `sandbox` requirement is
    /// applied: no network when it says so, the tighter time and memory limits, and a refusal
    /// when it asks for a stronger tier than the boundary about to be used.
    fn constrained(
        &self,
        request: &ExecutionRequest<'_>,
        tier: IsolationTier,
    ) -> Result<(Vec<String>, Limits<ProcessLimits>), HookError> {
        request.require_tier(tier)?;
        Ok((request.granted_effects(), self.limits.for_request(request)))
    }
}

impl Executor for ModuleExecutor {
    fn name(&self) -> &str {
        "sandbox"
    }

    fn plan(
        &self,
        capability: &dyn CapabilityView,
        input: &Value,
        cancel: &CancelToken,
    ) -> HookResult<Option<PlanDetails>> {
        let spec = ModuleExecutor::spec(capability)?;
        let route = self.route(capability, &spec)?;
        if let Route::Wasm(w) = route {
            return w.plan(capability, input, cancel);
        }
        // Plan hooks run before authorization: no effect is granted to them. A node or python
        // plan runs in a session that is parked for this run's `execute`, which continues it
        // only if it needs no grant either; otherwise `execute` starts its own sandbox.
        let outcome = if matches!(route, Route::Process) && speaks_sessions(&spec) {
            let grants = self.host.grants(&[]);
            let (session, outcome) = self
                .start_session(
                    &spec,
                    &Invocation::plan(input.clone()),
                    &grants,
                    &self.limits,
                )
                .map_err(|e| hook_error(capability.id(), e))?;
            if outcome.result.is_ok() {
                self.park(park_key(capability, &spec, input), session);
            }
            outcome
        } else {
            self.run(
                capability,
                &spec,
                &route,
                &Invocation::plan(input.clone()),
                &[],
            )
            .map_err(|e| hook_error(capability.id(), e))?
        };
        if !outcome.hook_present {
            return Ok(None);
        }
        let v = outcome.result.map_err(|e| hook_error(capability.id(), e))?;
        Ok(Some(plan_from_reply(&v)))
    }

    fn execute(&self, request: &ExecutionRequest<'_>) -> Result<Executed, ExecutionFailure> {
        let capability = request.capability;
        let spec = ModuleExecutor::spec(capability)?;
        let route = self.route(capability, &spec)?;
        if let Route::Wasm(w) = route {
            return w.execute(request);
        }
        let invocation = Invocation::executing(request.plan);
        let tier = match route {
            Route::Oci(_) => IsolationTier::Oci,
            _ => IsolationTier::Process,
        };
        let (granted, limits) = self.constrained(request, tier)?;
        let outcome = self
            .run_with(capability, &spec, &route, &invocation, &granted, &limits)
            .map_err(|e| hook_error(capability.id(), e))?;
        let isolation = BoundaryReport::Sandbox(outcome.boundary);
        match outcome.result {
            Ok(output) => Ok(Executed::new(output, isolation)),
            Err(e) => Err(ExecutionFailure::new(
                hook_error(capability.id(), e),
                Some(isolation),
            )),
        }
    }

    /// One sandboxed process for the run: `execute` continues the session `plan` left when
    /// it needs no grant, else starts one with its grants; `verify` is answered by the same
    /// process (with `execute`'s grants, which are never wider than the plan's effects), and
    /// not asked at all when the module exports no verify hook.
    fn execute_verified(
        &self,
        request: &ExecutionRequest<'_>,
        check: &mut dyn FnMut(&mut Executed) -> Result<(), CapabilityError>,
    ) -> Result<(Executed, Option<Verification>), ExecutionFailure> {
        let capability = request.capability;
        let spec = ModuleExecutor::spec(capability)?;
        let route = self.route(capability, &spec)?;
        if let Route::Wasm(w) = route {
            return w.execute_verified(request, check);
        }
        if !(matches!(route, Route::Process) && speaks_sessions(&spec)) {
            return capability_exec::execute_then_verify(self, request, check);
        }
        let (granted, limits) = self.constrained(request, IsolationTier::Process)?;
        let grants = self.host.grants(&granted);
        let invocation = Invocation::executing(request.plan);
        let key = park_key(capability, &spec, &request.plan.input);
        let (mut session, outcome) = match self.unpark(&key, &grants, &limits) {
            Some(mut session) => {
                let outcome = session.call(&invocation);
                (session, outcome)
            }
            None => match self.start_session(&spec, &invocation, &grants, &limits) {
                Ok((session, outcome)) => (session, Ok(outcome)),
                Err(e) => return Err(hook_error(capability.id(), e).into()),
            },
        };
        let outcome = outcome.map_err(|e| hook_error(capability.id(), e))?;
        let isolation = BoundaryReport::Sandbox(outcome.boundary);
        let mut executed = match outcome.result {
            Ok(output) => Executed::new(output, isolation.clone()),
            Err(e) => {
                return Err(ExecutionFailure::new(
                    hook_error(capability.id(), e),
                    Some(isolation),
                ));
            }
        };
        let failed = |error: HookError| ExecutionFailure::new(error, Some(isolation.clone()));
        check(&mut executed).map_err(|e| failed(HookError::Capability(e)))?;
        if !session.has_hook("verify") {
            return Ok((executed, None));
        }
        let outcome = session
            .call(&Invocation::verifying(
                request.plan,
                executed.output.clone(),
            ))
            .map_err(|e| failed(hook_error(capability.id(), e)))?;
        session.close();
        if !outcome.hook_present {
            return Ok((executed, None));
        }
        let v = outcome
            .result
            .map_err(|e| failed(hook_error(capability.id(), e)))?;
        Ok((executed, Some(verification_from_reply(&v))))
    }

    fn verify(
        &self,
        request: &ExecutionRequest<'_>,
        output: &Value,
    ) -> HookResult<Option<Verification>> {
        let capability = request.capability;
        let spec = ModuleExecutor::spec(capability)?;
        let route = self.route(capability, &spec)?;
        if let Route::Wasm(w) = route {
            return w.verify(request, output);
        }
        let invocation = Invocation::verifying(request.plan, output.clone());
        let outcome = self
            .run(
                capability,
                &spec,
                &route,
                &invocation,
                &request.plan.effects,
            )
            .map_err(|e| hook_error(capability.id(), e))?;
        if !outcome.hook_present {
            return Ok(None);
        }
        let v = outcome.result.map_err(|e| hook_error(capability.id(), e))?;
        Ok(Some(verification_from_reply(&v)))
    }

    fn can_rollback(&self, capability: &dyn CapabilityView) -> bool {
        // Whether the module has a rollback hook is only known by running it; the runtime
        // already required a reversible manifest.
        capability.module_source().is_some()
    }

    fn rollback(&self, request: &ExecutionRequest<'_>, receipt: &Receipt) -> HookResult<Value> {
        let capability = request.capability;
        let spec = ModuleExecutor::spec(capability)?;
        let route = self.route(capability, &spec)?;
        if let Route::Wasm(w) = route {
            return w.rollback(request, receipt);
        }
        let invocation = Invocation::rolling_back(receipt);
        let outcome = self
            .run(capability, &spec, &route, &invocation, &receipt.effects)
            .map_err(|e| hook_error(capability.id(), e))?;
        if !outcome.hook_present {
            return Err(HookError::Capability(CapabilityError::new(
                ErrorCode::RollbackUnavailable,
                format!("Capability is not rollback-enabled: {}", capability.id()),
            )));
        }
        outcome.result.map_err(|e| hook_error(capability.id(), e))
    }
}
