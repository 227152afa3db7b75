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
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub governance: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
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
