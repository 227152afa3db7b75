//! The 12 built-in capabilities, as pure, trusted Rust functions.
//!
//! They reproduce the outputs of the TypeScript reference runtime (`vectors/builtins.json`)
//! exactly, JavaScript semantics included: ECMAScript whitespace, UTF-16 lengths, full
//! Unicode case mapping, NFKD, ICU-root `localeCompare` tie-breaks, UTF-16 default sorts,
//! `Number(x.toFixed(4))`, `Math.round`, insertion-order `JSON.stringify` comparisons and
//! canonical hashing.
//!
//! # Public API
//!
//! * [`manifests()`] → `&'static [Value]`: the 12 manifests, byte for byte as the reference
//!   publishes them (they feed manifest hashes, the index digest and discovery), in the
//!   reference provider order: `text/normalize`, `text/slugify`, `data/sha256`, `json/get`,
//!   then the `capability/*` ones alphabetically.
//! * [`manifest(id)`](manifest) → `Option<&'static Value>` and [`BUILTIN_IDS`].
//! * [`execute(id, input)`](execute) → `Option<Result<Value, BuiltinError>>`: `None` for an
//!   unknown id; otherwise the output, or the [`BuiltinError`] (`TypeError` or `Error`, with
//!   the JavaScript message) that the reference algorithm throws, which the runtime reports
//!   as `EXECUTION_FAILED`.
//! * One module per built-in, each with `execute(input)`; the text and data ones also offer
//!   typed functions: [`text_normalize::normalize`], [`text_slugify::slugify`],
//!   [`json_get::segments`] and [`json_get::get`].
//!
//! The runtime validates `input` against the manifest's input schema before calling
//! [`execute`]; nested documents (manifests, receipts, steps, candidates) are not constrained
//! by those schemas and may hold anything. No input makes a built-in panic: wherever the
//! reference would throw, a [`BuiltinError`] is returned.
//!
//! # Deliberate divergences from the reference
//!
//! * `json/get` finds only own members of objects and canonical, in-range array indices: no
//!   prototype-chain lookups (`length`, `constructor`, `__proto__`, ...).
//! * `text/slugify` inserts the separator literally: no `$&`, `$$`, `` $` `` or `$'`
//!   replacement patterns.
//! * In the same spirit, effect names are looked up in the risk tables as own keys only (the
//!   reference would find `constructor` or `toString` on `Object.prototype`).

use std::sync::LazyLock;

use serde_json::Value;

pub mod authority_envelope;
mod common;
pub mod contract_evolution;
pub mod contract_router;
pub mod data_sha256;
pub mod dominance_resolver;
pub mod failure_frontier;
pub mod json_get;
pub mod novelty_radar;
pub mod receipt_drift;
pub mod substitution_certificate;
pub mod text_normalize;
pub mod text_slugify;

/// The error a built-in algorithm throws, as JavaScript names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuiltinError {
    /// The JavaScript error class: `"TypeError"` or `"Error"`.
    pub name: &'static str,
    /// The error message, as the reference words it.
    pub message: String,
}

impl BuiltinError {
    /// A JavaScript `TypeError`.
    pub fn type_error(message: impl Into<String>) -> Self {
        BuiltinError {
            name: "TypeError",
            message: message.into(),
        }
    }

    /// A plain JavaScript `Error`.
    pub fn error(message: impl Into<String>) -> Self {
        BuiltinError {
            name: "Error",
            message: message.into(),
        }
    }
}

impl std::fmt::Display for BuiltinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.name, self.message)
    }
}

impl std::error::Error for BuiltinError {}

/// The built-in ids, in the reference provider order (the order of [`manifests()`]).
pub const BUILTIN_IDS: [&str; 12] = [
    "text/normalize",
    "text/slugify",
    "data/sha256",
    "json/get",
    "capability/authority-envelope",
    "capability/contract-evolution",
    "capability/contract-router",
    "capability/dominance-resolver",
    "capability/failure-frontier",
    "capability/novelty-radar",
    "capability/receipt-drift",
    "capability/substitution-certificate",
];

const MANIFESTS_JSON: &str = include_str!("manifests.json");

static MANIFESTS: LazyLock<Vec<Value>> = LazyLock::new(|| {
    // The file is part of the crate and checked by the tests (count, order, hashes).
    match capability_core::json::parse_str(MANIFESTS_JSON) {
        Ok(Value::Array(items)) => items,
        _ => Vec::new(),
    }
});

/// The 12 built-in manifests, in the reference provider order.
pub fn manifests() -> &'static [Value] {
    &MANIFESTS
}

/// The manifest of one built-in.
pub fn manifest(id: &str) -> Option<&'static Value> {
    let index = BUILTIN_IDS.iter().position(|known| *known == id)?;
    manifests().get(index)
}

/// Runs the built-in `id` on `input`; `None` when `id` is not a built-in.
pub fn execute(id: &str, input: &Value) -> Option<Result<Value, BuiltinError>> {
    Some(match id {
        "text/normalize" => text_normalize::execute(input),
        "text/slugify" => text_slugify::execute(input),
        "data/sha256" => data_sha256::execute(input),
        "json/get" => json_get::execute(input),
        "capability/authority-envelope" => authority_envelope::execute(input),
        "capability/contract-evolution" => contract_evolution::execute(input),
        "capability/contract-router" => contract_router::execute(input),
        "capability/dominance-resolver" => dominance_resolver::execute(input),
        "capability/failure-frontier" => failure_frontier::execute(input),
        "capability/novelty-radar" => novelty_radar::execute(input),
        "capability/receipt-drift" => receipt_drift::execute(input),
        "capability/substitution-certificate" => substitution_certificate::execute(input),
        _ => return None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn manifests_are_in_provider_order() {
        let ids: Vec<&str> = manifests()
            .iter()
            .filter_map(|m| m.get("id").and_then(Value::as_str))
            .collect();
        assert_eq!(ids, BUILTIN_IDS);
        assert_eq!(
            manifest("json/get").and_then(|m| m.get("name")),
            Some(&Value::from("Get JSON Path"))
        );
        assert!(manifest("json/set").is_none());
    }

    /// The built-ins skip the checks of `Capability::new` when they are registered (their
    /// schemas compile on first use): here every one passes them, and a built-in made the
    /// embedded way validates input as one made the checked way.
    #[test]
    fn every_builtin_passes_the_checks_it_skips_at_registration() {
        use crate::capability::{Capability, Implementation};
        use capability_core::manifest::Manifest;
        for id in BUILTIN_IDS {
            let m = manifest(id).unwrap();
            let checked = Capability::new(Manifest::from_value(m).unwrap(), Implementation::Inert)
                .unwrap_or_else(|e| panic!("{id}: {e}"));
            let embedded = crate::defaults::builtin_capability(id).unwrap();
            for input in [
                serde_json::json!({}),
                serde_json::json!({"text": 1}),
                serde_json::json!("x"),
            ] {
                assert_eq!(
                    embedded.validate_input(&input),
                    checked.validate_input(&input),
                    "{id} {input}"
                );
            }
        }
        let slugify = crate::defaults::builtin_capability("text/slugify").unwrap();
        assert!(
            !slugify
                .validate_input(&serde_json::json!({"text": 1}))
                .is_empty()
        );
        assert!(!slugify.validate_output(&serde_json::json!({})).is_empty());
        assert!(
            slugify
                .validate_output(&serde_json::json!({"slug": "a"}))
                .is_empty()
        );
    }

    #[test]
    fn unknown_ids_are_not_executed() {
        assert!(execute("text/unknown", &Value::Null).is_none());
        assert!(execute("", &Value::Null).is_none());
    }
}
