//! What a run reports: the boundary it ran behind, the limits applied, what it consumed.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The engine named in every report.
pub const ENGINE: &str = "wasmtime 48";

/// One directory the guest could see.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreopenReport {
    /// Path inside the guest.
    pub guest: String,
    /// Host path (for `/tmp`, the per-run scratch directory, removed after the run).
    pub host: String,
    /// `read`, `write`, or `scratch`.
    pub access: String,
    /// The quota, for the scratch directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_bytes: Option<u64>,
}

/// The isolation boundary of one run and the limits it applied. Serializes as camelCase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoundaryReport {
    /// Always `"wasm"`.
    pub kind: String,
    /// Always `"wasmtime 48"`.
    pub engine: String,
    /// The ABI spoken, `capability-wasi-p1/1`.
    pub abi: String,
    /// WASI level offered: `"preview1"`.
    pub wasi: String,
    /// Lowercase hex SHA-256 of the module bytes.
    pub module_sha256: String,
    /// Instances come from a pooling allocator: `"pooling"`.
    pub instance_allocator: String,
    pub fuel: u64,
    pub memory_limit: u64,
    pub timeout_ms: u64,
    /// Epoch tick: the timeout's resolution.
    pub epoch_tick_ms: u64,
    pub max_wasm_stack: u64,
    pub stdin_limit: u64,
    pub stdout_limit: u64,
    pub tmp_quota: u64,
    /// Every directory the guest could open, and how.
    pub preopens: Vec<PreopenReport>,
    /// Names (never values) of the environment variables passed in.
    pub env: Vec<String>,
    /// `"none"`, and why.
    pub network: String,
    /// `"none"`, and why.
    pub process_spawn: String,
    /// Effects granted for the run.
    pub effects: Vec<String>,
}

impl capability_exec::BoundaryReport for BoundaryReport {
    fn boundary(&self) -> &str {
        &self.kind
    }

    fn tier(&self) -> capability_exec::IsolationTier {
        capability_exec::IsolationTier::Wasm
    }

    fn to_isolation(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}
