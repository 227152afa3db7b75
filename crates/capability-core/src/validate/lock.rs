//! Lockfiles (`capability.lock.json`, `lockVersion` "1"): `validateCapabilityLock`.

use serde_json::Value;

use super::member;
use crate::dates::is_date_string;

/// Validates a lockfile like the reference's `validateCapabilityLock`. Only types are checked.
///
/// Issues, in order: `lockVersion must be 1` (the string `"1"`); `generatedAt must be an ISO
/// date string` (a string `Date.parse` accepts); `index.url and index.digest are required`;
/// `package.name and package.version are required`; `capability.id, capability.version and
/// capability.module are required` (each an object with string members; empty strings pass,
/// integrity fields are not checked). A value that is not a non-null, non-array object gives
/// only `lockfile must be an object`.
pub fn validate_lock(lock: &Value) -> Vec<String> {
    if !lock.is_object() {
        return vec!["lockfile must be an object".to_string()];
    }
    let mut issues = Vec::new();
    if member(lock, "lockVersion").and_then(Value::as_str) != Some("1") {
        issues.push("lockVersion must be 1".to_string());
    }
    if !member(lock, "generatedAt")
        .and_then(Value::as_str)
        .is_some_and(is_date_string)
    {
        issues.push("generatedAt must be an ISO date string".to_string());
    }
    let has_strings = |key: &str, fields: &[&str]| {
        member(lock, key).is_some_and(|section| {
            fields
                .iter()
                .all(|field| member(section, field).is_some_and(Value::is_string))
        })
    };
    if !has_strings("index", &["url", "digest"]) {
        issues.push("index.url and index.digest are required".to_string());
    }
    if !has_strings("package", &["name", "version"]) {
        issues.push("package.name and package.version are required".to_string());
    }
    if !has_strings("capability", &["id", "version", "module"]) {
        issues.push(
            "capability.id, capability.version and capability.module are required".to_string(),
        );
    }
    issues
}
