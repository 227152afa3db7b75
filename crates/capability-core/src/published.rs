//! Validation against the published JSON Schemas (`schemas/*.schema.json`).
//!
//! The eight schema files of the standard are embedded byte for byte (they are copies of
//! `spec/schemas/`) and compiled once, on first use, as JSON Schema 2020-12 with the
//! [`jsonschema`] crate. `$ref`s between them (the index and bridge schemas refer to
//! `./capability-manifest.schema.json`) resolve against the embedded copies; nothing is ever
//! fetched.
//!
//! **Formats are enforced.** JSON Schema 2020-12 treats `format` as an annotation by default;
//! here `date-time` (RFC 3339) and `uri` (RFC 3986, absolute) are assertions, because that is
//! what the schemas' authors mean and what a document this project emits must satisfy. This
//! makes the published schemas stricter than the reference's runtime validators in two more
//! places besides those listed in §2.20 of the reference description:
//!
//! * `generatedAt` / `createdAt` strings that only V8's lenient `Date.parse` accepts
//!   (`2026-02-30`, `Tue, 01 Jan 2026 00:00:00 GMT`, `2026-01-01T00:00`) fail `date-time`;
//! * URLs the WHATWG parser accepts but RFC 3986 does not (`https://例え.jp/`,
//!   `" https://example.com "`, `http:\\example.com`) fail `uri`; the index schema also
//!   requires `federates` to match `^https?://` literally (lower case).
//!
//! Use the runtime validators of [`crate::validate`] to reproduce the reference's verdicts, and
//! this module to check documents against the published contract.

use std::sync::OnceLock;

use jsonschema::{Draft, Registry, Validator};
use serde_json::Value;

/// One of the eight published schemas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PublishedSchema {
    /// `capability-manifest.schema.json`.
    Manifest,
    /// `capability-index.schema.json`.
    Index,
    /// `capability-site.schema.json` (`/.well-known/capabilities`).
    Site,
    /// `capability-bridge.schema.json`.
    Bridge,
    /// `capability-gap.schema.json`.
    Gap,
    /// `capability-receipt.schema.json` (native execution receipts).
    Receipt,
    /// `metabolic-binding.schema.json`.
    Binding,
    /// `metabolic-execution-receipt.schema.json`.
    MetabolicReceipt,
}

impl PublishedSchema {
    /// All eight schemas.
    pub const ALL: [PublishedSchema; 8] = [
        PublishedSchema::Manifest,
        PublishedSchema::Index,
        PublishedSchema::Site,
        PublishedSchema::Bridge,
        PublishedSchema::Gap,
        PublishedSchema::Receipt,
        PublishedSchema::Binding,
        PublishedSchema::MetabolicReceipt,
    ];

    /// The schema's file name in `spec/schemas/`.
    pub fn file_name(self) -> &'static str {
        match self {
            PublishedSchema::Manifest => "capability-manifest.schema.json",
            PublishedSchema::Index => "capability-index.schema.json",
            PublishedSchema::Site => "capability-site.schema.json",
            PublishedSchema::Bridge => "capability-bridge.schema.json",
            PublishedSchema::Gap => "capability-gap.schema.json",
            PublishedSchema::Receipt => "capability-receipt.schema.json",
            PublishedSchema::Binding => "metabolic-binding.schema.json",
            PublishedSchema::MetabolicReceipt => "metabolic-execution-receipt.schema.json",
        }
    }

    /// The embedded schema text, byte-identical to the published file.
    pub fn text(self) -> &'static str {
        match self {
            PublishedSchema::Manifest => {
                include_str!("../schemas/capability-manifest.schema.json")
            }
            PublishedSchema::Index => include_str!("../schemas/capability-index.schema.json"),
            PublishedSchema::Site => include_str!("../schemas/capability-site.schema.json"),
            PublishedSchema::Bridge => include_str!("../schemas/capability-bridge.schema.json"),
            PublishedSchema::Gap => include_str!("../schemas/capability-gap.schema.json"),
            PublishedSchema::Receipt => include_str!("../schemas/capability-receipt.schema.json"),
            PublishedSchema::Binding => include_str!("../schemas/metabolic-binding.schema.json"),
            PublishedSchema::MetabolicReceipt => {
                include_str!("../schemas/metabolic-execution-receipt.schema.json")
            }
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A violation of a published schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaIssue {
    /// JSON Pointer to the offending value (`""` for the document itself).
    pub path: String,
    /// Human-readable message from the validator.
    pub message: String,
    /// The schema keyword that failed (`required`, `additionalProperties`, `format`, ...).
    pub keyword: String,
}

impl std::fmt::Display for SchemaIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

type Compiled = Result<Vec<Validator>, SchemasUnavailable>;

/// Why the embedded schemas could not be compiled (the crate's tests check that they can).
#[derive(Debug, thiserror::Error)]
enum SchemasUnavailable {
    #[error("{file} is not JSON: {error}")]
    NotJson {
        file: &'static str,
        error: serde_json::Error,
    },
    #[error("{file} has no $id")]
    NoId { file: &'static str },
    #[error("{file}: {reason}")]
    Registered { file: &'static str, reason: String },
    #[error("{reason}")]
    Registry { reason: String },
    #[error("{file} does not compile: {reason}")]
    Compile { file: &'static str, reason: String },
}

fn compiled() -> &'static Compiled {
    static VALIDATORS: OnceLock<Compiled> = OnceLock::new();
    VALIDATORS.get_or_init(compile_all)
}

fn compile_all() -> Compiled {
    let mut schemas = Vec::with_capacity(PublishedSchema::ALL.len());
    for schema in PublishedSchema::ALL {
        let file = schema.file_name();
        let value: Value = serde_json::from_str(schema.text())
            .map_err(|error| SchemasUnavailable::NotJson { file, error })?;
        let id = value
            .get("$id")
            .and_then(Value::as_str)
            .ok_or(SchemasUnavailable::NoId { file })?
            .to_string();
        schemas.push((schema, id, value));
    }
    let mut builder = Registry::new();
    for (schema, id, value) in &schemas {
        builder = builder
            .add(id, value)
            .map_err(|e| SchemasUnavailable::Registered {
                file: schema.file_name(),
                reason: e.to_string(),
            })?;
    }
    let registry = builder
        .prepare()
        .map_err(|e| SchemasUnavailable::Registry {
            reason: e.to_string(),
        })?;
    schemas
        .iter()
        .map(|(schema, _, value)| {
            jsonschema::options()
                .with_draft(Draft::Draft202012)
                .with_registry(&registry)
                .should_validate_formats(true)
                .build(value)
                .map_err(|e| SchemasUnavailable::Compile {
                    file: schema.file_name(),
                    reason: e.to_string(),
                })
        })
        .collect()
}

/// Validates `document` against a published schema. An empty list means it conforms.
///
/// The schemas are compiled once per process. Should an embedded schema ever fail to compile
/// (the crate's tests check that all eight do), that is reported as a single issue at the
/// document root rather than a panic.
pub fn validate_published(schema: PublishedSchema, document: &Value) -> Vec<SchemaIssue> {
    let validator = match compiled() {
        Ok(validators) => validators.get(schema.index()),
        Err(e) => {
            return vec![SchemaIssue {
                path: String::new(),
                message: format!("published schemas unavailable: {e}"),
                keyword: String::new(),
            }];
        }
    };
    let Some(validator) = validator else {
        return vec![SchemaIssue {
            path: String::new(),
            message: format!("published schema {} unavailable", schema.file_name()),
            keyword: String::new(),
        }];
    };
    validator
        .iter_errors(document)
        .map(|error| SchemaIssue {
            path: error.instance_path().as_str().to_string(),
            message: error.to_string(),
            keyword: error.kind().keyword().to_string(),
        })
        .collect()
}

/// `true` when `document` conforms to the published schema.
pub fn conforms_to_published(schema: PublishedSchema, document: &Value) -> bool {
    match compiled() {
        Ok(validators) => validators
            .get(schema.index())
            .is_some_and(|v| v.is_valid(document)),
        Err(_) => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn all_schemas_compile() {
        assert!(compiled().is_ok(), "{:?}", compiled().as_ref().err());
    }

    #[test]
    fn formats_are_enforced() {
        let gap = |created: &str| {
            serde_json::json!({
                "gapVersion": "0.1",
                "id": "gap/x",
                "intent": "x",
                "createdAt": created,
                "required": {"effectsCeiling": [], "verification": ["ok"]},
                "searched": ["native"],
                "evidence": {"nativeCandidates": [], "externalCandidates": [], "compositionAttempts": []},
                "status": "unresolved"
            })
        };
        assert!(conforms_to_published(
            PublishedSchema::Gap,
            &gap("2026-01-01T00:00:00.000Z")
        ));
        let issues = validate_published(PublishedSchema::Gap, &gap("2026-02-30"));
        assert_eq!(issues.len(), 1, "{issues:?}");
        assert_eq!(issues[0].path, "/createdAt");
        assert_eq!(issues[0].keyword, "format");
    }

    #[test]
    fn references_resolve_to_the_embedded_manifest_schema() {
        let bridge = serde_json::json!({
            "bridgeVersion": "0.1",
            "manifest": {"specVersion": "0.1", "id": "Bad", "version": "1.0.0", "name": "n", "description": "d"},
            "target": {"kind": "npm-cli", "package": "p", "version": "1", "bin": "b", "binPath": "./b"},
            "authority": {"complete": true}
        });
        let issues = validate_published(PublishedSchema::Bridge, &bridge);
        assert_eq!(issues.len(), 1, "{issues:?}");
        assert_eq!(issues[0].path, "/manifest/id");
        assert_eq!(issues[0].keyword, "pattern");
    }
}
