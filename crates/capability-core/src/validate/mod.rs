//! Document validators that reproduce the reference's issue messages, in order.
//!
//! Every validator takes any JSON value (as [`crate::json::parse`] reads it) and returns the
//! ordered list of issues the reference runtime reports for it; an empty list means the
//! document is valid. The messages are byte-identical to the reference's (they are pinned by
//! the golden vectors in `vectors/*-validation.json`).
//!
//! | document | function | reference |
//! | --- | --- | --- |
//! | capability manifest (`specVersion` 0.1) | [`validate_manifest`] | `validateManifest` |
//! | `package.json` `capability` field | [`validate_package_declaration`] | `validatePackageDeclaration` |
//! | metabolic binding 1.0 | [`validate_binding`] | `validateMetabolicBinding` |
//! | public index (`indexVersion` 0.1) | [`validate_index`] | `validateCapabilityIndex` |
//! | site discovery document (`/.well-known/capabilities`) | [`validate_site`] | `validateCapabilitySiteDocument` |
//! | lockfile (`lockVersion` 1) | [`validate_lock`] | `validateCapabilityLock` |
//! | npm CLI bridge descriptor (`bridgeVersion` 0.1) | [`validate_bridge`] | `validateCapabilityBridge` |
//! | capability gap (`gapVersion` 0.1) | [`validate_gap`] | none: published schema only |
//!
//! Also here: the npm CLI bridge descriptor generator [`create_npm_cli_bridge_descriptor`],
//! the site probe URLs [`site_discovery_urls`], and the identifier grammars
//! [`is_capability_id`] and [`is_semver_version`].
//!
//! JavaScript semantics that matter and are reproduced:
//!
//! * "is an object" follows the reference: the manifest, package declaration and index
//!   validators accept arrays as objects (an array simply has none of the fields), the others
//!   reject them;
//! * blank means empty after trimming ECMAScript white space ([`crate::js::is_blank`]);
//! * non-string effects are printed as `String(x)` ([`crate::json::js_string_of`]);
//! * date strings are those `Date.parse` accepts ([`crate::dates::is_date_string`]);
//! * URLs are WHATWG absolute URLs with scheme http or https ([`crate::urls::is_http_url`]);
//! * object members are visited in JavaScript's own-key order: array-index keys (`"0"`,
//!   `"10"`) first in numeric order, then the others in the order of the JSON text.

mod binding;
mod bridge;
mod gap;
mod index;
mod lock;
mod manifest;
mod package;
mod site;

pub use binding::validate_binding;
pub use bridge::{
    BridgeError, NpmCliBridgeOptions, NpmPackageInspection, create_npm_cli_bridge_descriptor,
    validate_bridge,
};
pub use gap::validate_gap;
pub use index::validate_index;
pub use lock::validate_lock;
pub use manifest::{is_capability_id, is_semver_version, validate_manifest};
pub use package::validate_package_declaration;
pub use site::{site_discovery_urls, validate_site};

use serde_json::{Map, Value};

/// A member of an object (`undefined` for arrays and other values, as in JavaScript).
fn member<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    value.as_object().and_then(|map| map.get(key))
}

/// `typeof x === "object" && x !== null`: objects and arrays.
fn is_js_object(value: &Value) -> bool {
    matches!(value, Value::Object(_) | Value::Array(_))
}

/// A string member with at least one character.
fn is_non_empty_string(value: Option<&Value>) -> bool {
    matches!(value, Some(Value::String(s)) if !s.is_empty())
}

/// A string member that is not blank under ECMAScript trimming.
fn is_non_blank_string(value: Option<&Value>) -> bool {
    matches!(value, Some(Value::String(s)) if !crate::js::is_blank(s))
}

/// Present (not `undefined`) but not a string.
fn is_present_non_string(value: Option<&Value>) -> bool {
    matches!(value, Some(v) if !v.is_string())
}

/// Present but not a non-null, non-array object.
fn is_present_non_object(value: Option<&Value>) -> bool {
    matches!(value, Some(v) if !v.is_object())
}

/// `Object.entries(map)` order: canonical array-index keys first in ascending numeric order,
/// then the other keys in insertion order.
fn js_entries(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut indexed: Vec<(u32, (&String, &Value))> = Vec::new();
    let mut named = Vec::new();
    for (key, value) in map {
        match crate::json::is_array_index(key.as_bytes()) {
            Some(i) => indexed.push((i, (key, value))),
            None => named.push((key, value)),
        }
    }
    indexed.sort_by_key(|(i, _)| *i);
    indexed.into_iter().map(|(_, kv)| kv).chain(named).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn entries_put_array_index_keys_first() {
        let v = crate::json::parse_str(r#"{"b":1,"10":2,"a":3,"2":4,"01":5}"#).unwrap();
        let map = v.as_object().unwrap();
        let keys: Vec<&str> = js_entries(map).iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["2", "10", "b", "a", "01"]);
    }
}
