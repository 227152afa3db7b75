//! Protocol inventory and the 1.x compatibility check.

use serde_json::{Value, json};

/// The protocol version this implementation speaks.
pub const CAPABILITY_PROTOCOL_VERSION: &str = "1.0";
/// The stability line.
pub const CAPABILITY_STABILITY_LINE: &str = "1.x";
/// The locked protocol guarantees, in order.
pub const CAPABILITY_PROTOCOL_GUARANTEES: [&str; 8] = [
    "discovery-is-not-trust",
    "artifact-identity-is-not-safety",
    "authorization-is-host-owned",
    "unknown-authority-is-preserved",
    "executable-bindings-identify-immutable-artifacts",
    "isolation-is-an-explicit-boundary",
    "execution-attempts-leave-receipts",
    "breaking-public-contract-changes-require-a-new-major-version",
];
/// Document format versions, frozen for the 1.x line.
pub const FORMATS: [(&str, &str); 8] = [
    ("manifest", "0.1"),
    ("index", "0.1"),
    ("siteDiscovery", "0.1"),
    ("bridge", "0.1"),
    ("metabolism", "0.1"),
    ("gap", "0.1"),
    ("metabolicBinding", "1.0"),
    ("metabolicExecutionReceipt", "1.0"),
];

/// The reference `capabilityProtocolInfo()`.
pub fn protocol_info() -> Value {
    let formats: serde_json::Map<String, Value> = FORMATS
        .iter()
        .map(|(k, v)| (k.to_string(), Value::from(*v)))
        .collect();
    json!({
        "protocolVersion": CAPABILITY_PROTOCOL_VERSION,
        "stabilityLine": CAPABILITY_STABILITY_LINE,
        "formats": formats,
        "guarantees": CAPABILITY_PROTOCOL_GUARANTEES,
    })
}

/// Whether a protocol version string belongs to the 1.x line: trimmed (ECMAScript
/// whitespace), `^(\d+)\.(\d+)(\.\d+)?([-+].*)?$` with ASCII digits, no line terminator in
/// the suffix, and a major number (leading zeros allowed) equal to 1.
pub fn is_protocol_compatible(version: &str) -> bool {
    let v = crate::js::js_trim(version);
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let major_len = digits(v);
    if major_len == 0 {
        return false;
    }
    let (major, rest) = v.split_at(major_len);
    let Some(rest) = rest.strip_prefix('.') else {
        return false;
    };
    let minor_len = digits(rest);
    if minor_len == 0 {
        return false;
    }
    let mut rest = &rest[minor_len..];
    if let Some(after) = rest.strip_prefix('.') {
        let patch_len = digits(after);
        if patch_len == 0 {
            return false;
        }
        rest = &after[patch_len..];
    }
    if !rest.is_empty() {
        if !(rest.starts_with('-') || rest.starts_with('+')) {
            return false;
        }
        if rest.contains(['\n', '\r', '\u{2028}', '\u{2029}']) {
            return false;
        }
    }
    major.trim_start_matches('0') == "1"
}

/// The reference `assertCapabilityProtocolCompatible`: an incompatible version is an
/// [`IncompatibleProtocol`] (whose message is the reference's `TypeError` message).
pub fn assert_protocol_compatible(version: &str) -> Result<(), IncompatibleProtocol> {
    if is_protocol_compatible(version) {
        Ok(())
    } else {
        Err(IncompatibleProtocol {
            version: version.to_string(),
        })
    }
}

/// A protocol version outside the 1.x contract. The message is the reference's, word for
/// word (the protocol vectors check it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Capability protocol {version} is not compatible with the 1.x contract")]
pub struct IncompatibleProtocol {
    version: String,
}

impl IncompatibleProtocol {
    /// The version that was refused, as given.
    pub fn version(&self) -> &str {
        &self.version
    }
}
