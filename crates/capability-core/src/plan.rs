//! Plans: a capability id and version bound to one structured input, its hash, the requested
//! effects, a summary, a creation time, optional plan data, and an integrity fingerprint (the
//! canonical hash of the plan without `fingerprint`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{CapabilityError, ErrorCode};
use crate::json::{canonical_hash, sha256_hex, write_canonical, write_json_string};

/// `{id, version}` of a capability.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilityRef {
    pub id: String,
    pub version: String,
}

/// An execution plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub plan_id: String,
    pub capability: CapabilityRef,
    pub input: Value,
    pub input_hash: String,
    pub effects: Vec<String>,
    pub summary: String,
    pub created_at: String,
    #[serde(
        default,
        deserialize_with = "crate::json::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub data: Option<Value>,
    pub fingerprint: String,
    /// Members a foreign runtime added; they are part of the fingerprint.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What a plan hook (or the default) contributes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlanDetails {
    /// Requested effects; `None` means the manifest's declared effects.
    pub effects: Option<Vec<String>>,
    pub summary: Option<String>,
    pub data: Option<Value>,
}

/// A fresh `plan_<uuid v4>` id.
pub fn new_plan_id() -> String {
    prefixed_uuid("plan_")
}

/// `<prefix><uuid v4>` without going through the formatting machinery.
pub fn prefixed_uuid(prefix: &str) -> String {
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let id = uuid::Uuid::new_v4().hyphenated().encode_lower(&mut buf);
    let mut out = String::with_capacity(prefix.len() + id.len());
    out.push_str(prefix);
    out.push_str(id);
    out
}

/// Order-preserving de-duplication (the reference `unique`).
pub fn unique(items: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

impl Plan {
    /// Builds and fingerprints a plan (one canonical pass gives the input hash and the
    /// fingerprint).
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        plan_id: String,
        capability: CapabilityRef,
        input: Value,
        effects: Vec<String>,
        summary: String,
        created_at: String,
        data: Option<Value>,
    ) -> Plan {
        let mut plan = Plan {
            plan_id,
            capability,
            input,
            input_hash: String::new(),
            effects,
            summary,
            created_at,
            data,
            fingerprint: String::new(),
            extra: Map::new(),
        };
        let (input_hash, fingerprint) = plan.hashes(None);
        plan.input_hash = input_hash;
        plan.fingerprint = fingerprint;
        plan
    }

    /// The canonical hash of the plan without `fingerprint`.
    pub fn compute_fingerprint(&self) -> String {
        self.hashes(Some(&self.input_hash)).1
    }

    /// One canonical pass over the plan: the hash of the input as written, and the
    /// fingerprint computed with `input_hash` (else that computed hash) as `inputHash`.
    fn hashes(&self, input_hash: Option<&str>) -> (String, String) {
        if !self.extra.is_empty() {
            let computed = canonical_hash(&self.input);
            let mut v = self.to_value();
            if let Value::Object(map) = &mut v {
                map.remove("fingerprint");
                if input_hash.is_none() {
                    map.insert("inputHash".into(), Value::String(computed.clone()));
                }
            }
            return (computed, canonical_hash(&v));
        }
        // Members in canonical order: capability, createdAt, data, effects, input, inputHash,
        // planId, summary.
        crate::json::with_scratch(|s| {
            s.push_str("{\"capability\":{\"id\":");
            write_json_string(s, &self.capability.id);
            s.push_str(",\"version\":");
            write_json_string(s, &self.capability.version);
            s.push_str("},\"createdAt\":");
            write_json_string(s, &self.created_at);
            if let Some(data) = &self.data {
                s.push_str(",\"data\":");
                write_canonical(s, data);
            }
            s.push_str(",\"effects\":[");
            for (i, e) in self.effects.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                write_json_string(s, e);
            }
            s.push_str("],\"input\":");
            let start = s.len();
            write_canonical(s, &self.input);
            let computed = sha256_hex(&s.as_bytes()[start..]);
            s.push_str(",\"inputHash\":");
            write_json_string(s, input_hash.unwrap_or(&computed));
            s.push_str(",\"planId\":");
            write_json_string(s, &self.plan_id);
            s.push_str(",\"summary\":");
            write_json_string(s, &self.summary);
            s.push('}');
            (computed, sha256_hex(s.as_bytes()))
        })
    }

    /// The reference integrity check: a `"rollback"` fingerprint is exempt; otherwise the
    /// fingerprint must match (`Plan fingerprint mismatch`), then the input hash
    /// (`Plan input hash mismatch`). Both are `INVALID_PLAN`.
    pub fn verify_integrity(&self) -> Result<(), CapabilityError> {
        if self.fingerprint == "rollback" {
            return Ok(());
        }
        if self.compute_fingerprint() != self.fingerprint {
            return Err(CapabilityError::new(
                ErrorCode::InvalidPlan,
                "Plan fingerprint mismatch",
            ));
        }
        if canonical_hash(&self.input) != self.input_hash {
            return Err(CapabilityError::new(
                ErrorCode::InvalidPlan,
                "Plan input hash mismatch",
            ));
        }
        Ok(())
    }

    /// The plan as JSON, members in the reference order.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Reads a plan document.
    pub fn from_value(value: &Value) -> Result<Plan, CapabilityError> {
        serde_json::from_value(value.clone())
            .map_err(|e| CapabilityError::new(ErrorCode::InvalidPlan, format!("invalid plan: {e}")))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn base() -> Plan {
        Plan::build(
            "plan_00000000-0000-4000-8000-000000000000".into(),
            CapabilityRef {
                id: "text/slugify".into(),
                version: "1.0.0".into(),
            },
            json!({"text": "Hello World"}),
            vec![],
            "Execute Slugify Text".into(),
            "2026-01-01T00:00:00.000Z".into(),
            None,
        )
    }

    #[test]
    fn fingerprint_matches_the_reference_example() {
        let plan = base();
        assert_eq!(
            plan.input_hash,
            "6b2d470f563f10431ad892eb66a07e18d516d0b057e2f0e251b33267f0a19479"
        );
        assert_eq!(
            plan.fingerprint,
            "538fe032830bfad15d239f5a2187a148e1660bda285b0874061e150b27cf3e25"
        );
        let mut with_data = base();
        with_data.data = Some(json!({"path": {}, "query": {}}));
        assert_eq!(
            with_data.compute_fingerprint(),
            "e5d6d3dc6cbd06bc45e0a97192a63234b63195d59f1610e546e2a368723796c4"
        );
    }

    #[test]
    fn tampering_is_detected_fingerprint_first() {
        let mut plan = base();
        plan.input = json!({"text": "other"});
        assert_eq!(
            plan.verify_integrity().unwrap_err().message,
            "Plan fingerprint mismatch"
        );
        let mut plan = base();
        plan.effects.push("network.connect".into());
        assert_eq!(
            plan.verify_integrity().unwrap_err().code,
            ErrorCode::InvalidPlan
        );
        assert!(base().verify_integrity().is_ok());
    }

    #[test]
    fn foreign_members_take_part_in_the_fingerprint() {
        let mut plan = base();
        plan.extra.insert("x".into(), json!(1));
        let mut generic = plan.to_value();
        generic.as_object_mut().unwrap().remove("fingerprint");
        assert_eq!(plan.compute_fingerprint(), canonical_hash(&generic));
        assert_ne!(plan.compute_fingerprint(), base().fingerprint);
    }
}
