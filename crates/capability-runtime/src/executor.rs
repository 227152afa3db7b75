//! Executors: where capability code runs. The runtime runs the host's own Rust hooks in
//! process (they are trusted by construction) and hands package modules to an isolating
//! [`Executor`] (the process sandbox, WASM or OCI executors of `capability-sandbox`).
//! [`InProcessExecutor`] is the in-process path; it refuses package code.
//!
//! The trait and its vocabulary ([`ExecutionRequest`], [`Executed`], [`ExecutionFailure`],
//! [`CapabilityView`], ...) live in `capability-exec` so that executors need not depend on
//! the runtime; they are re-exported here at their old paths. The in-process executor reaches
//! the Rust hooks of the runtime's own [`Capability`] by downcasting the request's view
//! ([`CapabilityView::as_any`]); any other view is refused.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::mpsc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use capability_core::binder::CancelToken;
use capability_core::plan::PlanDetails;
use capability_core::receipt::{Receipt, Verification};
use capability_core::{CapabilityError, ErrorCode};
use serde_json::Value;

use capability_exec::{BoundaryReport, InProcessReport};
pub use capability_exec::{
    CapabilityView, Executed, ExecutionContext, ExecutionFailure, ExecutionRequest, Executor,
};

use crate::capability::{
    AsyncContext, Capability, ExecuteHook, HookError, HookResult, SyncExecute,
};

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
    fn refuse(capability: &dyn CapabilityView) -> HookError {
        HookError::Capability(CapabilityError::new(
            ErrorCode::ExecutionFailed,
            format!(
                "Module-backed capability {} requires an isolated executor",
                capability.id()
            ),
        ))
    }

    /// The isolation record of an in-process run.
    pub fn isolation(timeout: Option<Duration>) -> BoundaryReport {
        InProcessReport::new(timeout).into()
    }
}

impl Executor for InProcessExecutor {
    fn name(&self) -> &str {
        "in-process"
    }

    fn plan(
        &self,
        _capability: &dyn CapabilityView,
        _input: &Value,
        _cancel: &CancelToken,
    ) -> HookResult<Option<PlanDetails>> {
        Ok(None)
    }

    fn execute(&self, request: &ExecutionRequest<'_>) -> Result<Executed, ExecutionFailure> {
        let Some(capability) = native(request.capability) else {
            return Err(InProcessExecutor::refuse(request.capability).into());
        };
        let Some(hooks) = capability.hooks() else {
            return Err(InProcessExecutor::refuse(request.capability).into());
        };
        let isolation = || Some(InProcessExecutor::isolation(request.timeout));
        let failed = |error| ExecutionFailure::new(error, isolation());
        let input = &request.plan.input;
        let output = match (&hooks.execute, request.timeout) {
            (ExecuteHook::Sync(f), None) => f(input, &request.context()).map_err(failed)?,
            (ExecuteHook::Sync(f), Some(timeout)) => {
                run_with_timeout(Arc::clone(f), capability, request, timeout).map_err(failed)?
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
        Ok(Executed::new(
            output,
            InProcessExecutor::isolation(request.timeout),
        ))
    }

    fn verify(
        &self,
        _request: &ExecutionRequest<'_>,
        _output: &Value,
    ) -> HookResult<Option<Verification>> {
        Ok(None)
    }

    fn can_rollback(&self, capability: &dyn CapabilityView) -> bool {
        native(capability)
            .and_then(Capability::hooks)
            .is_some_and(|h| h.rollback.is_some())
    }

    fn rollback(&self, request: &ExecutionRequest<'_>, receipt: &Receipt) -> HookResult<Value> {
        let rollback = native(request.capability)
            .and_then(Capability::hooks)
            .and_then(|h| h.rollback.as_ref());
        match rollback {
            Some(f) => f(receipt, &request.context()),
            None => Err(HookError::msg(format!(
                "Capability does not provide rollback(): {}",
                request.capability.id()
            ))),
        }
    }
}

/// The runtime's own capability behind a view: only it has Rust hooks.
fn native(view: &dyn CapabilityView) -> Option<&Capability> {
    view.as_any().downcast_ref::<Capability>()
}

/// Runs a synchronous hook on a helper thread and stops waiting at the timeout (the token is
/// cancelled so cooperative code can stop; the thread is left to finish on its own).
fn run_with_timeout(
    f: Arc<SyncExecute>,
    capability: &Capability,
    request: &ExecutionRequest<'_>,
    timeout: Duration,
) -> HookResult<Value> {
    let (tx, rx) = mpsc::channel();
    let manifest = capability.shared_manifest();
    let plan = request.plan.clone();
    let metadata = request.metadata.cloned();
    let cancel = request.cancel.clone();
    let approved = request.approved;
    let spawned = thread::Builder::new()
        .name("capability-exec".into())
        .spawn(move || {
            let ctx = ExecutionContext {
                manifest: &manifest,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use capability_core::manifest::Manifest;
    use capability_core::plan::{CapabilityRef, Plan};
    use capability_exec::ModuleSource;
    use serde_json::json;

    fn manifest() -> Value {
        json!({
            "specVersion": "0.1", "id": "demo/echo", "version": "1.0.0", "name": "Echo",
            "description": "Echoes.", "effects": []
        })
    }

    fn plan() -> Plan {
        Plan::build(
            "plan_1".into(),
            CapabilityRef {
                id: "demo/echo".into(),
                version: "1.0.0".into(),
            },
            json!({"x": 1}),
            vec![],
            "Execute Echo".into(),
            "2024-01-01T00:00:00.000Z".into(),
            None,
        )
    }

    /// A view that is not the runtime's `Capability`: it has no Rust hooks to run.
    struct Foreign(Manifest);

    impl CapabilityView for Foreign {
        fn manifest(&self) -> &Manifest {
            &self.0
        }
        fn module_source(&self) -> Option<&ModuleSource> {
            None
        }
        fn provenance(&self) -> Option<&Value> {
            None
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    #[test]
    fn the_in_process_executor_runs_only_the_runtimes_own_hooks() {
        let native = Capability::builder(manifest())
            .execute_json(|input, _| Ok(input.clone()))
            .rollback(|_, _| Ok(json!(true)))
            .build()
            .unwrap();
        let foreign = Foreign(Manifest::from_value(&manifest()).unwrap());
        let plan = plan();
        let cancel = CancelToken::new();
        let request = |capability: &'_ dyn CapabilityView, timeout| {
            let out = InProcessExecutor.execute(&ExecutionRequest {
                capability,
                plan: &plan,
                approved: false,
                metadata: None,
                cancel: &cancel,
                timeout,
                sandbox: None,
            });
            out.map(|e| e.output)
                .map_err(|f| f.error.message().to_string())
        };
        assert_eq!(request(&native, None), Ok(json!({"x": 1})));
        assert_eq!(
            request(&native, Some(Duration::from_secs(5))),
            Ok(json!({"x": 1})),
            "through the helper thread"
        );
        assert_eq!(
            request(&foreign, None),
            Err("Module-backed capability demo/echo requires an isolated executor".into())
        );
        assert!(InProcessExecutor.can_rollback(&native));
        assert!(!InProcessExecutor.can_rollback(&foreign));
    }
}
