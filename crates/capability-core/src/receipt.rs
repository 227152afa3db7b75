//! Native receipts: the evidence every execution attempt leaves
//! (`capability-receipt.schema.json`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::plan::CapabilityRef;

/// A receipt's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptStatus {
    Succeeded,
    Failed,
    RolledBack,
    RollbackFailed,
}

impl ReceiptStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiptStatus::Succeeded => "succeeded",
            ReceiptStatus::Failed => "failed",
            ReceiptStatus::RolledBack => "rolled_back",
            ReceiptStatus::RollbackFailed => "rollback_failed",
        }
    }

    pub fn parse(s: &str) -> Option<ReceiptStatus> {
        match s {
            "succeeded" => Some(ReceiptStatus::Succeeded),
            "failed" => Some(ReceiptStatus::Failed),
            "rolled_back" => Some(ReceiptStatus::RolledBack),
            "rollback_failed" => Some(ReceiptStatus::RollbackFailed),
            _ => None,
        }
    }
}

/// The outcome of a verification hook.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verification {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub data: Option<Value>,
}

/// A serialized error: `{name, message, code?}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SerializedError {
    pub name: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// A native execution receipt. Members appear in the reference's order; `isolation` (the
/// boundary used and the limits applied) and `governance` (policy decisions) are this
/// implementation's additions, which the receipt schema allows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    pub receipt_id: String,
    pub plan_id: String,
    pub capability: CapabilityRef,
    pub status: ReceiptStatus,
    pub started_at: String,
    pub ended_at: String,
    pub duration_ms: u64,
    pub effects: Vec<String>,
    pub input_hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_hash: Option<String>,
    pub input: Value,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<Verification>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<SerializedError>,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub metadata: Option<Value>,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub provenance: Option<Value>,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub rollback_result: Option<Value>,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub isolation: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub governance: Option<ReceiptGovernance>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What the governance layer decided about an execution, as its receipt records it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptGovernance {
    /// The agent that acted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The governed action's id (`act_...`), which the audit events name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_id: Option<String>,
    /// The verdict before the execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<VerdictSummary>,
    /// The verdict after the execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<VerdictSummary>,
    /// Ids of the audit events written for this execution, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audit_events: Vec<String>,
    /// The capabilities routed from, in order, when `route` decisions applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routed_from: Vec<String>,
    /// The approval this execution consumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalUse>,
    /// JSON pointers redacted from the output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redacted: Vec<String>,
    /// `execution_failed` when the capability itself failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Members written by other implementations, kept as they are.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One stage's verdict in a receipt.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerdictSummary {
    /// One of the nine decisions (`allow`, `deny`, `approval_required`, ...).
    pub decision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Structured details of a refusal (stage, policy, code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// The approval an execution consumed, and who granted it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalUse {
    pub approval_id: String,
    pub approver: String,
}

/// A fresh `receipt_<uuid v4>` id.
pub fn new_receipt_id() -> String {
    crate::plan::prefixed_uuid("receipt_")
}

impl Receipt {
    /// The receipt as JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Reads a receipt document.
    pub fn from_value(value: &Value) -> Result<Receipt, serde_json::Error> {
        serde_json::from_value(value.clone())
    }
}
