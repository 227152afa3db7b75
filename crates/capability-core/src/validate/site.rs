//! Site discovery documents (`/.well-known/capabilities`, `capabilityDiscoveryVersion` 0.1):
//! `validateCapabilitySiteDocument`, and the probe URLs of a site.

use serde_json::Value;

use super::{is_non_empty_string, is_present_non_object, is_present_non_string, member};
use crate::urls::is_http_url;

pub use crate::urls::site_discovery_urls;

/// Validates a site discovery document like the reference's
/// `validateCapabilitySiteDocument`.
///
/// Issues, in order: `capabilityDiscoveryVersion must be 0.1`; `indexes must be a non-empty
/// array` or `indexes[i] must be an http(s) URL` per bad item; `documentation must be an
/// http(s) URL`; `repository must be an http(s) URL`; `package must be an object` or
/// `package.name is required` / `package.version must be a string`; `mcp must be an array` or
/// per entry `mcp[i] must be an object`, `mcp[i].command is required for stdio`,
/// `mcp[i].url is required for http`, `mcp[i].transport must be stdio or http`, `mcp[i].args
/// must be a string array`; `metadata must be an object`. A value that is not a non-null,
/// non-array object gives only `discovery document must be an object`.
pub fn validate_site(document: &Value) -> Vec<String> {
    if !document.is_object() {
        return vec!["discovery document must be an object".to_string()];
    }
    let mut issues = Vec::new();
    let get = |key: &str| member(document, key);
    if get("capabilityDiscoveryVersion").and_then(Value::as_str) != Some("0.1") {
        issues.push("capabilityDiscoveryVersion must be 0.1".to_string());
    }
    match get("indexes") {
        Some(Value::Array(indexes)) if !indexes.is_empty() => {
            for (i, url) in indexes.iter().enumerate() {
                if !is_http_url_value(url) {
                    issues.push(format!("indexes[{i}] must be an http(s) URL"));
                }
            }
        }
        _ => issues.push("indexes must be a non-empty array".to_string()),
    }
    for key in ["documentation", "repository"] {
        if get(key).is_some_and(|url| !is_http_url_value(url)) {
            issues.push(format!("{key} must be an http(s) URL"));
        }
    }
    match get("package") {
        None => {}
        Some(package @ Value::Object(_)) => {
            if !is_non_empty_string(member(package, "name")) {
                issues.push("package.name is required".to_string());
            }
            if is_present_non_string(member(package, "version")) {
                issues.push("package.version must be a string".to_string());
            }
        }
        Some(_) => issues.push("package must be an object".to_string()),
    }
    match get("mcp") {
        None => {}
        Some(Value::Array(entries)) => {
            for (i, entry) in entries.iter().enumerate() {
                check_mcp_entry(i, entry, &mut issues);
            }
        }
        Some(_) => issues.push("mcp must be an array".to_string()),
    }
    if is_present_non_object(get("metadata")) {
        issues.push("metadata must be an object".to_string());
    }
    issues
}

fn is_http_url_value(value: &Value) -> bool {
    value.as_str().is_some_and(is_http_url)
}

fn check_mcp_entry(i: usize, entry: &Value, issues: &mut Vec<String>) {
    if !entry.is_object() {
        issues.push(format!("mcp[{i}] must be an object"));
        return;
    }
    match member(entry, "transport").and_then(Value::as_str) {
        Some("stdio") => {
            if !is_non_empty_string(member(entry, "command")) {
                issues.push(format!("mcp[{i}].command is required for stdio"));
            }
        }
        Some("http") => {
            if !member(entry, "url").is_some_and(is_http_url_value) {
                issues.push(format!("mcp[{i}].url is required for http"));
            }
        }
        _ => issues.push(format!("mcp[{i}].transport must be stdio or http")),
    }
    match member(entry, "args") {
        None => {}
        Some(Value::Array(args)) if args.iter().all(Value::is_string) => {}
        Some(_) => issues.push(format!("mcp[{i}].args must be a string array")),
    }
}
