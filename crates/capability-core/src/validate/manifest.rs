//! Capability manifests (`specVersion` 0.1): `validateManifest`.

use serde_json::Value;

use super::{is_non_blank_string, member};
use crate::effects::is_capability_effect;
use crate::json::js_string_of;

/// `true` for a stable `namespace/name` identifier:
/// `^[a-z0-9][a-z0-9._-]*(/[a-z0-9][a-z0-9._-]*)+$` (ASCII only, at least one `/`, no empty
/// segment, no segment starting with `.`, `_` or `-`).
pub fn is_capability_id(id: &str) -> bool {
    let mut segments = 0;
    for segment in id.split('/') {
        let mut bytes = segment.bytes();
        let first_ok = matches!(bytes.next(), Some(b'a'..=b'z' | b'0'..=b'9'));
        if !first_ok || !bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'))
        {
            return false;
        }
        segments += 1;
    }
    segments >= 2
}

/// `true` for the reference's SemVer-like pattern
/// `^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`
/// (ASCII digits only; it accepts some strings strict SemVer rejects, e.g. `1.0.0-00`).
pub fn is_semver_version(version: &str) -> bool {
    fn numeric(part: &str) -> bool {
        !part.is_empty()
            && part.bytes().all(|b| b.is_ascii_digit())
            && (part == "0" || !part.starts_with('0'))
    }
    fn identifier_chars(s: &str) -> bool {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
    }
    // The identifier classes exclude `+`, so the first `+` starts the build part.
    let (rest, build) = match version.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (version, None),
    };
    if build.is_some_and(|b| !identifier_chars(b)) {
        return false;
    }
    // The numeric parts exclude `-`, so the first `-` starts the pre-release part.
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    if pre.is_some_and(|p| !identifier_chars(p)) {
        return false;
    }
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| numeric(p))
}

/// Validates a capability manifest like the reference's `validateManifest`.
///
/// Issues, in this order: `specVersion must be 0.1`; `id must be a stable namespace/name
/// identifier`; `version must be valid semantic versioning`; `name is required`;
/// `description is required`; `effects must be an array` or one `invalid effect: <String(x)>`
/// per bad item; `tags must be an array of strings`. A value that is not a non-null object
/// gives only `manifest must be an object` (arrays count as objects). Unknown fields, the
/// input/output schemas, `behavior` and `metadata` are not checked.
pub fn validate_manifest(manifest: &Value) -> Vec<String> {
    if !super::is_js_object(manifest) {
        return vec!["manifest must be an object".to_string()];
    }
    let mut issues = Vec::new();
    if member(manifest, "specVersion").and_then(Value::as_str) != Some("0.1") {
        issues.push("specVersion must be 0.1".to_string());
    }
    if !member(manifest, "id")
        .and_then(Value::as_str)
        .is_some_and(is_capability_id)
    {
        issues.push("id must be a stable namespace/name identifier".to_string());
    }
    if !member(manifest, "version")
        .and_then(Value::as_str)
        .is_some_and(is_semver_version)
    {
        issues.push("version must be valid semantic versioning".to_string());
    }
    if !is_non_blank_string(member(manifest, "name")) {
        issues.push("name is required".to_string());
    }
    if !is_non_blank_string(member(manifest, "description")) {
        issues.push("description is required".to_string());
    }
    match member(manifest, "effects") {
        None => {}
        Some(Value::Array(effects)) => {
            for effect in effects {
                if !effect.as_str().is_some_and(is_capability_effect) {
                    issues.push(format!("invalid effect: {}", js_string_of(effect)));
                }
            }
        }
        Some(_) => issues.push("effects must be an array".to_string()),
    }
    match member(manifest, "tags") {
        None => {}
        Some(Value::Array(tags)) if tags.iter().all(Value::is_string) => {}
        Some(_) => issues.push("tags must be an array of strings".to_string()),
    }
    issues
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_grammar() {
        for ok in ["a/b", "a/b/c", "a/b.c_d-e", "0/0", "a..b/c", "a/b-"] {
            assert!(is_capability_id(ok), "{ok}");
        }
        for bad in [
            "a", "a/", "/a", "a//b", "-a/b", "a/-b", "a/B", "a /b", "", "é/b",
        ] {
            assert!(!is_capability_id(bad), "{bad}");
        }
    }

    #[test]
    fn version_grammar() {
        for ok in [
            "1.0.0",
            "0.0.0",
            "1.0.0-rc.1",
            "1.0.0+build.5",
            "1.0.0-beta+exp.sha.5114f85",
            "1.0.0-00",
            "1.0.0-a..b",
            "1.0.0--",
            "1.0.0+-",
            "999999999999999999999.0.0",
        ] {
            assert!(is_semver_version(ok), "{ok}");
        }
        for bad in [
            "01.0.0",
            "1.0",
            "1.0.0-",
            "1.0.0+",
            "v1.0.0",
            "1.0.0-α",
            "1.0.0+build+more",
            "1.0.0\n",
            "1.0.0.1",
            "-1.0.0",
            "\u{ff11}.0.0",
        ] {
            assert!(!is_semver_version(bad), "{bad}");
        }
    }
}
