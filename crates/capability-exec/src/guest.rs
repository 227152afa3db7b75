//! What a guest says back, whichever boundary it ran behind: its error, and what its `plan`
//! and `verify` replies mean.

use capability_core::plan::PlanDetails;
use capability_core::receipt::Verification;
use capability_core::{CapabilityError, ErrorCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hook::HookError;

/// An error raised by the guest code itself and reported through its protocol
/// (`{"error": {"message": ..., "code"?: ...}}`). The runners fill `code` from the thrown error
/// where they can: Node's `error.code` (`EACCES`, `ECONNREFUSED`, ...), Python's errno name
/// or exception name, a WASM guest's own code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestError {
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

impl std::fmt::Display for GuestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.code {
            Some(code) => write!(f, "{} ({code})", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl GuestError {
    /// What the guest reported, as the run's error. The code is the guest's, never the run's:
    /// a guest saying `APPROVAL_REQUIRED` (or any other code the host itself uses) must not
    /// make the host's answer say so. The run failed with `EXECUTION_FAILED`, and the guest's
    /// code and message are in the details under `guest`.
    pub fn to_hook_error(&self) -> HookError {
        let mut guest = serde_json::Map::new();
        guest.insert("message".into(), self.message.as_str().into());
        if let Some(code) = &self.code {
            guest.insert("code".into(), code.as_str().into());
        }
        HookError::Capability(
            CapabilityError::new(ErrorCode::ExecutionFailed, self.message.as_str())
                .with_details(serde_json::json!({"guest": guest})),
        )
    }
}

/// What a guest's `plan` reply means: `{effects?, summary?, data?}`.
pub fn plan_from_reply(reply: &Value) -> PlanDetails {
    PlanDetails {
        effects: reply.get("effects").and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        }),
        summary: reply
            .get("summary")
            .and_then(Value::as_str)
            .map(String::from),
        data: reply.get("data").cloned(),
    }
}

/// What a guest's `verify` reply means: a boolean or `{ok, message?, data?}`.
pub fn verification_from_reply(reply: &Value) -> Verification {
    match reply {
        Value::Bool(ok) => Verification {
            ok: *ok,
            message: None,
            data: None,
        },
        other => Verification {
            ok: other.get("ok") == Some(&Value::Bool(true)),
            message: other
                .get("message")
                .and_then(Value::as_str)
                .map(String::from),
            data: other.get("data").cloned(),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    #[test]
    fn a_guest_code_never_becomes_the_host_code() {
        let g = GuestError {
            message: "nope".into(),
            code: Some("APPROVAL_REQUIRED".into()),
        };
        assert_eq!(g.to_string(), "nope (APPROVAL_REQUIRED)");
        let HookError::Capability(e) = g.to_hook_error() else {
            panic!("a capability error");
        };
        assert_eq!(e.code, ErrorCode::ExecutionFailed);
        assert_eq!(
            e.details,
            Some(json!({"guest": {"message": "nope", "code": "APPROVAL_REQUIRED"}}))
        );
        let plain: GuestError = serde_json::from_value(json!({"message": "m"})).unwrap();
        assert_eq!(
            serde_json::to_value(&plain).unwrap(),
            json!({"message": "m"})
        );
    }

    #[test]
    fn replies_mean_the_same_for_every_boundary() {
        let p = plan_from_reply(&json!({"effects": ["a", 1], "summary": "s", "data": {"k": 1}}));
        assert_eq!(p.effects, Some(vec!["a".to_string()]));
        assert_eq!(p.summary.as_deref(), Some("s"));
        assert_eq!(p.data, Some(json!({"k": 1})));
        assert!(verification_from_reply(&json!(true)).ok);
        let v = verification_from_reply(&json!({"ok": false, "message": "bad"}));
        assert!(!v.ok);
        assert_eq!(v.message.as_deref(), Some("bad"));
    }
}
