//! Metabolic binding 1.0: `validateMetabolicBinding`.

use serde_json::Value;

use super::{is_non_blank_string, is_present_non_object, member};
use crate::dates::is_date_string;
use crate::effects::{EXTERNAL_OPAQUE_EFFECTS, is_capability_effect};
use crate::json::js_string_of;

/// Validates a metabolic binding like the reference's `validateMetabolicBinding`.
///
/// `expected` is the registered binder's `(id, substrate)`; with `None`, `binderId` and
/// `substrate` are not compared. Extra properties are allowed.
///
/// Issues, in order: `bindingVersion must be 1.0`; `binderId is required`; `substrate is
/// required`; `locator is required`; `immutableArtifact is required; mutable locators are not
/// executable bindings` (each must be a string that is not blank); `createdAt must be an ISO
/// date string` (a non-blank string `Date.parse` accepts); `binderId must match registered
/// binder <id>`; `substrate must match registered binder substrate <substrate>`; then
/// `authority is required` (not a non-array object) or, in order, `authority.complete must be
/// boolean`, `authority.effects must be an array` or one `invalid authority effect:
/// <String(x)>` per bad effect, `incomplete authority must preserve
/// custom:external.opaque-effects` (when `complete` is exactly `false` and the marker is
/// missing), `authority.note must be a string`; then `evidence must contain at least one
/// item` (not a non-empty array) or at most one `evidence entries must be non-empty strings`;
/// and `metadata must be an object` (present but not a non-null, non-array object). A value
/// that is not a non-null, non-array object gives only `binding must be an object`.
pub fn validate_binding(binding: &Value, expected: Option<(&str, &str)>) -> Vec<String> {
    if !binding.is_object() {
        return vec!["binding must be an object".to_string()];
    }
    let mut issues = Vec::new();
    let get = |key: &str| member(binding, key);
    if get("bindingVersion").and_then(Value::as_str) != Some("1.0") {
        issues.push("bindingVersion must be 1.0".to_string());
    }
    for key in ["binderId", "substrate", "locator"] {
        if !is_non_blank_string(get(key)) {
            issues.push(format!("{key} is required"));
        }
    }
    if !is_non_blank_string(get("immutableArtifact")) {
        issues.push(
            "immutableArtifact is required; mutable locators are not executable bindings"
                .to_string(),
        );
    }
    let created_ok = get("createdAt")
        .and_then(Value::as_str)
        .is_some_and(|s| !crate::js::is_blank(s) && is_date_string(s));
    if !created_ok {
        issues.push("createdAt must be an ISO date string".to_string());
    }
    if let Some((id, substrate)) = expected {
        if get("binderId").and_then(Value::as_str) != Some(id) {
            issues.push(format!("binderId must match registered binder {id}"));
        }
        if get("substrate").and_then(Value::as_str) != Some(substrate) {
            issues.push(format!(
                "substrate must match registered binder substrate {substrate}"
            ));
        }
    }
    match get("authority") {
        Some(authority @ Value::Object(_)) => check_authority(authority, &mut issues),
        _ => issues.push("authority is required".to_string()),
    }
    match get("evidence") {
        Some(Value::Array(evidence)) if !evidence.is_empty() => {
            if !evidence.iter().all(|e| is_non_blank_string(Some(e))) {
                issues.push("evidence entries must be non-empty strings".to_string());
            }
        }
        _ => issues.push("evidence must contain at least one item".to_string()),
    }
    if is_present_non_object(get("metadata")) {
        issues.push("metadata must be an object".to_string());
    }
    issues
}

fn check_authority(authority: &Value, issues: &mut Vec<String>) {
    let complete = member(authority, "complete");
    if !matches!(complete, Some(Value::Bool(_))) {
        issues.push("authority.complete must be boolean".to_string());
    }
    let effects = match member(authority, "effects") {
        Some(Value::Array(effects)) => {
            for effect in effects {
                if !effect.as_str().is_some_and(is_capability_effect) {
                    issues.push(format!(
                        "invalid authority effect: {}",
                        js_string_of(effect)
                    ));
                }
            }
            effects.as_slice()
        }
        _ => {
            issues.push("authority.effects must be an array".to_string());
            &[]
        }
    };
    // Not covered by the vectors when `effects` is not an array: such an authority declares
    // no marker, so it is reported as missing one (the schema's `contains` agrees for arrays).
    if complete == Some(&Value::Bool(false))
        && !effects
            .iter()
            .any(|e| e.as_str() == Some(EXTERNAL_OPAQUE_EFFECTS))
    {
        issues.push(format!(
            "incomplete authority must preserve {EXTERNAL_OPAQUE_EFFECTS}"
        ));
    }
    if member(authority, "note").is_some_and(|n| !n.is_string()) {
        issues.push("authority.note must be a string".to_string());
    }
}
