//! The eval harness and determinism replay (the reference `runCapabilityEvals` and
//! `evaluateDeterminism`).
//!
//! * [`run_capability_evals`] invokes a capability once per [`EvalCase`] through the governed
//!   runtime (so every case leaves a receipt) and reports
//!   `{capabilityId, passed, failed, total, passRate, results: [{name, passed, receiptId?,
//!   outputHash?, error?}]}`. A case passes when the invocation succeeds, the canonical hash
//!   of its output equals that of `expectedOutput` (when given) and its `outputHash` equals
//!   `expectedOutputHash` (when given). `passRate` is `passed / total`, and 1 without cases.
//!   Each case runs with `approved = case.approved ?? options.approved` and with
//!   `case.metadata ?? options.metadata`.
//! * [`evaluate_determinism`] invokes a capability `runs` times (at least 2) on the same
//!   input and reports `{deterministic, hashes, receiptIds}`; it is deterministic when every
//!   run gave the same output hash.
//!
//! Beyond the reference, a case that ran but did not meet its expectation carries an
//! `error` saying which expectation failed (with the hashes), and a case whose invocation
//! failed after execution started carries the failed receipt's id.

use capability_core::json::canonical_hash;
use capability_core::{CapabilityError, ErrorCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::runtime::{CapabilityRuntime, ExecuteOptions};

/// One serialisable eval case `{name, input, approved?, expectedOutput?,
/// expectedOutputHash?, metadata?}` (the CLI's `cases.json` holds an array of them).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvalCase {
    pub name: String,
    #[serde(default)]
    pub input: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved: Option<bool>,
    /// Compared by canonical hash; a present `null` expects a `null` output.
    #[serde(
        default,
        deserialize_with = "capability_core::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub expected_output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_output_hash: Option<String>,
    /// Caller metadata for this case's receipt (else the options' metadata).
    #[serde(
        default,
        deserialize_with = "capability_core::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub metadata: Option<Value>,
}

/// The outcome of one case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvalResult {
    pub name: String,
    pub passed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The eval report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvalReport {
    pub capability_id: String,
    pub passed: usize,
    pub failed: usize,
    pub total: usize,
    pub pass_rate: f64,
    pub results: Vec<EvalResult>,
}

/// The determinism replay result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeterminismResult {
    pub deterministic: bool,
    /// The output hash of every run, in order.
    pub hashes: Vec<String>,
    pub receipt_ids: Vec<String>,
}

fn run_case(
    runtime: &CapabilityRuntime,
    capability_id: &str,
    case: &EvalCase,
    options: &ExecuteOptions,
) -> EvalResult {
    let options = ExecuteOptions {
        approved: case.approved.unwrap_or(options.approved),
        metadata: case.metadata.clone().or_else(|| options.metadata.clone()),
        ..options.clone()
    };
    match runtime.invoke(capability_id, case.input.clone(), &options) {
        Ok(receipt) => {
            let actual = receipt.output_hash.clone();
            let mut failures = Vec::new();
            if let Some(expected) = &case.expected_output {
                let expected = canonical_hash(expected);
                if actual.as_deref() != Some(expected.as_str()) {
                    failures.push(format!(
                        "output hash {} does not match expectedOutput (hash {expected})",
                        actual.as_deref().unwrap_or("none")
                    ));
                }
            }
            if let Some(expected) = &case.expected_output_hash
                && actual.as_deref() != Some(expected.as_str())
            {
                failures.push(format!(
                    "output hash {} does not match expectedOutputHash {expected}",
                    actual.as_deref().unwrap_or("none")
                ));
            }
            EvalResult {
                name: case.name.clone(),
                passed: failures.is_empty(),
                receipt_id: Some(receipt.receipt_id.clone()),
                output_hash: actual,
                error: (!failures.is_empty()).then(|| failures.join("; ")),
            }
        }
        Err(e) => EvalResult {
            name: case.name.clone(),
            passed: false,
            receipt_id: e.receipt_id.clone(),
            output_hash: None,
            error: Some(e.message),
        },
    }
}

/// Runs every case through [`CapabilityRuntime::invoke`] and reports the outcome (see the
/// module documentation). Failures are recorded per case, never returned.
pub fn run_capability_evals(
    runtime: &CapabilityRuntime,
    capability_id: &str,
    cases: &[EvalCase],
    options: &ExecuteOptions,
) -> EvalReport {
    let results: Vec<EvalResult> = cases
        .iter()
        .map(|case| run_case(runtime, capability_id, case, options))
        .collect();
    let total = results.len();
    let passed = results.iter().filter(|r| r.passed).count();
    EvalReport {
        capability_id: capability_id.to_string(),
        passed,
        failed: total - passed,
        total,
        pass_rate: if total == 0 {
            1.0
        } else {
            passed as f64 / total as f64
        },
        results,
    }
}

/// Invokes the capability `runs` times on `input` and compares the output hashes. Fails
/// with `INVALID_INPUT` (`runs must be an integer >= 2`) for fewer than 2 runs, and with
/// the invocation's error when a run fails.
pub fn evaluate_determinism(
    runtime: &CapabilityRuntime,
    capability_id: &str,
    input: &Value,
    runs: usize,
    options: &ExecuteOptions,
) -> Result<DeterminismResult, CapabilityError> {
    if runs < 2 {
        return Err(CapabilityError::new(
            ErrorCode::InvalidInput,
            "runs must be an integer >= 2",
        ));
    }
    let mut hashes = Vec::with_capacity(runs);
    let mut receipt_ids = Vec::with_capacity(runs);
    for _ in 0..runs {
        let receipt = runtime.invoke(capability_id, input.clone(), options)?;
        let Some(hash) = receipt.output_hash.clone() else {
            return Err(CapabilityError::new(
                ErrorCode::ExecutionFailed,
                format!(
                    "Execution {} did not produce an output hash",
                    receipt.receipt_id
                ),
            )
            .with_receipt(receipt.receipt_id.clone()));
        };
        hashes.push(hash);
        receipt_ids.push(receipt.receipt_id.clone());
    }
    let deterministic = hashes.windows(2).all(|w| w[0] == w[1]);
    Ok(DeterminismResult {
        deterministic,
        hashes,
        receipt_ids,
    })
}
