//! Public capability indexes (`indexVersion` 0.1): `validateCapabilityIndex`.

use serde_json::Value;

use super::{is_js_object, is_non_empty_string, is_present_non_object, is_present_non_string};
use super::{member, validate_manifest};
use crate::dates::is_date_string;
use crate::urls::is_http_url;

/// Validates a public index document like the reference's `validateCapabilityIndex`.
///
/// Issues, in order: `indexVersion must be 0.1`; `generatedAt must be an ISO date string` (a
/// string `Date.parse` accepts); `federates must be an array` or `federates[i] must be an
/// http(s) URL` per bad item; `metadata must be an object`; `packages must be an array` (and
/// validation stops there). Then per package `packages[i]`: `… must be an object` (arrays
/// pass), `….name is required`, `….version is required`, `….source is required` (non-empty
/// strings), `….repository must be a string`, `….integrity must be a string`, `….capabilities
/// must be an array`; per capability `packages[i].capabilities[j]`: `… must be an object`,
/// `….module must be package-relative` (a string starting with `./`), `….integrity must be a
/// string`, and the manifest issues prefixed `packages[i].capabilities[j]: `. A value that is
/// not a non-null object gives only `index must be an object` (arrays count as objects).
pub fn validate_index(index: &Value) -> Vec<String> {
    if !is_js_object(index) {
        return vec!["index must be an object".to_string()];
    }
    let mut issues = Vec::new();
    if member(index, "indexVersion").and_then(Value::as_str) != Some("0.1") {
        issues.push("indexVersion must be 0.1".to_string());
    }
    if !member(index, "generatedAt")
        .and_then(Value::as_str)
        .is_some_and(is_date_string)
    {
        issues.push("generatedAt must be an ISO date string".to_string());
    }
    match member(index, "federates") {
        None => {}
        Some(Value::Array(federates)) => {
            for (i, url) in federates.iter().enumerate() {
                if !url.as_str().is_some_and(is_http_url) {
                    issues.push(format!("federates[{i}] must be an http(s) URL"));
                }
            }
        }
        Some(_) => issues.push("federates must be an array".to_string()),
    }
    if is_present_non_object(member(index, "metadata")) {
        issues.push("metadata must be an object".to_string());
    }
    let Some(Value::Array(packages)) = member(index, "packages") else {
        issues.push("packages must be an array".to_string());
        return issues;
    };
    for (i, package) in packages.iter().enumerate() {
        check_package(&format!("packages[{i}]"), package, &mut issues);
    }
    issues
}

fn check_package(path: &str, package: &Value, issues: &mut Vec<String>) {
    if !is_js_object(package) {
        issues.push(format!("{path} must be an object"));
        return;
    }
    for key in ["name", "version", "source"] {
        if !is_non_empty_string(member(package, key)) {
            issues.push(format!("{path}.{key} is required"));
        }
    }
    for key in ["repository", "integrity"] {
        if is_present_non_string(member(package, key)) {
            issues.push(format!("{path}.{key} must be a string"));
        }
    }
    let Some(Value::Array(capabilities)) = member(package, "capabilities") else {
        issues.push(format!("{path}.capabilities must be an array"));
        return;
    };
    for (j, capability) in capabilities.iter().enumerate() {
        let path = format!("{path}.capabilities[{j}]");
        if !is_js_object(capability) {
            issues.push(format!("{path} must be an object"));
            continue;
        }
        let module_ok = member(capability, "module")
            .and_then(Value::as_str)
            .is_some_and(|m| m.starts_with("./"));
        if !module_ok {
            issues.push(format!("{path}.module must be package-relative"));
        }
        if is_present_non_string(member(capability, "integrity")) {
            issues.push(format!("{path}.integrity must be a string"));
        }
        let manifest = member(capability, "manifest").unwrap_or(&Value::Null);
        issues.extend(
            validate_manifest(manifest)
                .into_iter()
                .map(|issue| format!("{path}: {issue}")),
        );
    }
}
