//! Limits: the resources one run may use.

use std::fmt::Debug;
use std::time::Duration;

use crate::executor::ExecutionRequest;

/// Resource limits of one run. What every boundary limits is here; what only one boundary
/// limits is its part `B` ([`BoundaryLimits`]): the process sandbox's `ProcessLimits` (cpu
/// time, processes, open files, file size, module size) or the WASM engine's `WasmLimits`
/// (fuel, stdin, stderr, tables). Defaults differ per boundary — a WASM guest gets less
/// memory than a node process — so `Limits::<B>::default()` is the boundary's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits<B> {
    /// Wall-clock limit of the run.
    pub timeout: Duration,
    /// Memory of the whole guest.
    pub memory_bytes: u64,
    /// Size of the guest's private `/tmp` (`0`: no `/tmp`, where the boundary allows it).
    pub tmp_bytes: u64,
    /// Largest reply the guest may write on stdout.
    pub output_bytes: u64,
    /// What only this boundary limits.
    pub boundary: B,
}

/// The part of [`Limits`] only one boundary has, and that boundary's defaults.
pub trait BoundaryLimits: Clone + Debug + PartialEq + Eq {
    /// The boundary's default limits, common part included.
    fn defaults() -> Limits<Self>;
}

impl<B: BoundaryLimits> Default for Limits<B> {
    fn default() -> Self {
        B::defaults()
    }
}

impl<B: Clone> Limits<B> {
    /// These limits for one execution: the tighter of these and the request's wall clock
    /// (the caller's timeout and a governance `sandbox` requirement's), and of these and the
    /// requirement's memory limit. Every executor applies a request the same way.
    pub fn for_request(&self, request: &ExecutionRequest<'_>) -> Limits<B> {
        let mut limits = self.clone();
        if let Some(t) = request.timeout {
            limits.timeout = limits.timeout.min(t);
        }
        if let Some(ms) = request.sandbox.and_then(|s| s.timeout_ms) {
            limits.timeout = limits.timeout.min(Duration::from_millis(ms));
        }
        if let Some(bytes) = request.memory_limit() {
            limits.memory_bytes = limits.memory_bytes.min(bytes);
        }
        limits
    }
}
