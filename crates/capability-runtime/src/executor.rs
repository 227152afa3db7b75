//! Executors: where capability code runs. The runtime runs the host's own Rust hooks in
//! process (they are trusted by construction) and hands package modules to an isolating
//! [`Executor`] (the process sandbox, WASM or OCI executors of `capability-sandbox`).
//! [`InProcessExecutor`] is the in-process path; it refuses package code.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::mpsc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use capability_core::binder::CancelToken;
use capability_core::plan::{Plan, PlanDetails};
use capability_core::receipt::{Receipt, Verification};
use capability_core::{CapabilityError, ErrorCode};
use serde_json::{Value, json};

use crate::capability::{
    AsyncContext, Capability, ExecuteHook, ExecutionContext, HookError, HookResult, SyncExecute,
};

/// One execution as an executor sees it.
#[derive(Clone, Copy, Debug)]
pub struct ExecutionRequest<'a> {
    pub capability: &'a Arc<Capability>,
    pub plan: &'a Plan,
    pub approved: bool,
    pub metadata: Option<&'a Value>,
    pub cancel: &'a CancelToken,
    /// Wall-clock limit for this call.
    pub timeout: Option<Duration>,
    /// Isolation a governance `sandbox` decision requires (tier floor, no network, limits).
    pub sandbox: Option<&'a capability_policy::SandboxRequirement>,
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
}

/// What an execution produced, and the boundary it crossed.
#[derive(Clone, Debug, PartialEq)]
pub struct Executed {
    pub output: Value,
    /// The isolation boundary used and the limits applied (recorded in the receipt).
    pub isolation: Value,
}

/// A failed execution: the error, and the isolation record when the boundary was crossed
/// (the failed receipt names the boundary and the limit that stopped the run).
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionFailure {
    pub error: HookError,
    pub isolation: Option<Value>,
}

impl From<HookError> for ExecutionFailure {
    fn from(error: HookError) -> Self {
        ExecutionFailure {
            error,
            isolation: None,
        }
    }
}

/// Runs capability code behind some boundary.
pub trait Executor: Send + Sync {
    /// A short name (`in-process`, `process-sandbox`, `wasm`, `oci`, …).
    fn name(&self) -> &str;

    /// The executor's plan hook, used when the capability has none; `Ok(None)` for the
    /// default plan.
    fn plan(
        &self,
        capability: &Arc<Capability>,
        input: &Value,
        cancel: &CancelToken,
    ) -> HookResult<Option<PlanDetails>>;

    /// Runs `execute`.
    fn execute(&self, request: &ExecutionRequest<'_>) -> Result<Executed, ExecutionFailure>;

    /// The executor's verification hook; `Ok(None)` when there is none.
    fn verify(
        &self,
        request: &ExecutionRequest<'_>,
        output: &Value,
    ) -> HookResult<Option<Verification>>;

    /// Whether a rollback implementation exists for the capability.
    fn can_rollback(&self, capability: &Arc<Capability>) -> bool;

    /// Runs the rollback hook for a successful receipt.
    fn rollback(&self, request: &ExecutionRequest<'_>, receipt: &Receipt) -> HookResult<Value>;
}

fn timeout_error(timeout: Duration) -> HookError {
    HookError::named(
        "TimeoutError",
        format!(
            "Capability execution timed out after {} ms",
            timeout.as_millis()
        ),
    )
}

fn aborted() -> HookError {
    HookError::named("AbortError", "The operation was aborted")
}

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Drives a future on the calling thread until it completes, the deadline passes or the
/// token is cancelled (the future is then dropped). The future must not need a specific
/// async runtime's reactor.
pub fn block_on<F: Future>(
    fut: F,
    deadline: Option<Instant>,
    cancel: &CancelToken,
) -> Result<F::Output, HookError> {
    let mut fut = pin!(fut);
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let started = Instant::now();
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Ok(v);
        }
        if cancel.is_cancelled() {
            return Err(aborted());
        }
        // Wake at least every 20 ms to notice cancellation.
        let mut wait = Duration::from_millis(20);
        if let Some(d) = deadline {
            let now = Instant::now();
            if now >= d {
                return Err(timeout_error(d.saturating_duration_since(started)));
            }
            wait = wait.min(d - now);
        }
        thread::park_timeout(wait);
    }
}

/// Runs the host's own Rust hooks in process. Package modules are refused: they run only
/// behind an isolating executor.
#[derive(Clone, Copy, Debug, Default)]
pub struct InProcessExecutor;

impl InProcessExecutor {
    fn refuse(capability: &Capability) -> HookError {
        HookError::Capability(CapabilityError::new(
            ErrorCode::ExecutionFailed,
            format!(
                "Module-backed capability {} requires an isolated executor",
                capability.id()
            ),
        ))
    }

    /// The isolation record of an in-process run.
    pub fn isolation(timeout: Option<Duration>) -> Value {
        static PLAIN: std::sync::LazyLock<Value> =
            std::sync::LazyLock::new(|| json!({"boundary": "in-process", "trusted": true}));
        match timeout {
            None => PLAIN.clone(),
            Some(t) => json!({
                "boundary": "in-process",
                "trusted": true,
                "limits": {"timeoutMs": t.as_millis() as u64}
            }),
        }
    }
}

impl Executor for InProcessExecutor {
    fn name(&self) -> &str {
        "in-process"
    }

    fn plan(
        &self,
        _capability: &Arc<Capability>,
        _input: &Value,
        _cancel: &CancelToken,
    ) -> HookResult<Option<PlanDetails>> {
        Ok(None)
    }

    fn execute(&self, request: &ExecutionRequest<'_>) -> Result<Executed, ExecutionFailure> {
        let Some(hooks) = request.capability.hooks() else {
            return Err(InProcessExecutor::refuse(request.capability).into());
        };
        let isolation = || Some(InProcessExecutor::isolation(request.timeout));
        let failed = |error| ExecutionFailure {
            error,
            isolation: isolation(),
        };
        let input = &request.plan.input;
        let output = match (&hooks.execute, request.timeout) {
            (ExecuteHook::Sync(f), None) => f(input, &request.context()).map_err(failed)?,
            (ExecuteHook::Sync(f), Some(timeout)) => {
                run_with_timeout(Arc::clone(f), request, timeout).map_err(failed)?
            }
            (ExecuteHook::Async(f), timeout) => {
                let ctx = AsyncContext {
                    capability_id: request.capability.id().to_string(),
                    approved: request.approved,
                    metadata: request.metadata.cloned(),
                    cancel: request.cancel.clone(),
                };
                let deadline = timeout.map(|t| Instant::now() + t);
                block_on(f(input.clone(), ctx), deadline, request.cancel)
                    .and_then(|r| r)
                    .map_err(failed)?
            }
        };
        Ok(Executed {
            output,
            isolation: InProcessExecutor::isolation(request.timeout),
        })
    }

    fn verify(
        &self,
        _request: &ExecutionRequest<'_>,
        _output: &Value,
    ) -> HookResult<Option<Verification>> {
        Ok(None)
    }

    fn can_rollback(&self, capability: &Arc<Capability>) -> bool {
        capability.hooks().is_some_and(|h| h.rollback.is_some())
    }

    fn rollback(&self, request: &ExecutionRequest<'_>, receipt: &Receipt) -> HookResult<Value> {
        match request.capability.hooks().and_then(|h| h.rollback.as_ref()) {
            Some(f) => f(receipt, &request.context()),
            None => Err(HookError::msg(format!(
                "Capability does not provide rollback(): {}",
                request.capability.id()
            ))),
        }
    }
}

/// Runs a synchronous hook on a helper thread and stops waiting at the timeout (the token is
/// cancelled so cooperative code can stop; the thread is left to finish on its own).
fn run_with_timeout(
    f: Arc<SyncExecute>,
    request: &ExecutionRequest<'_>,
    timeout: Duration,
) -> HookResult<Value> {
    let (tx, rx) = mpsc::channel();
    let capability = Arc::clone(request.capability);
    let plan = request.plan.clone();
    let metadata = request.metadata.cloned();
    let cancel = request.cancel.clone();
    let approved = request.approved;
    let spawned = thread::Builder::new()
        .name("capability-exec".into())
        .spawn(move || {
            let ctx = ExecutionContext {
                manifest: capability.manifest(),
                plan: Some(&plan),
                approved,
                metadata: metadata.as_ref(),
                cancel: &cancel,
            };
            let _ = tx.send(f(&plan.input, &ctx));
        });
    if let Err(e) = spawned {
        return Err(HookError::msg(format!(
            "could not start the execution thread: {e}"
        )));
    }
    match rx.recv_timeout(timeout) {
        Ok(result) => result,
        Err(_) => {
            request.cancel.cancel();
            Err(timeout_error(timeout))
        }
    }
}
