//! Provenance trust: a score and a policy decision over a capability's provenance record
//! (§2.21), before the host lets it run.
//!
//! [`assess_capability_trust`] scores the evidence present in the record and checks it
//! against a [`TrustPolicy`]; [`require_capability_trust`] turns a refusal into an error
//! (`PERMISSION_DENIED`, `Capability trust check failed: <failures joined by "; ">`, the
//! assessment as details). The assessment is `{score, accepted, reasons, failures,
//! provenance?}`.
//!
//! # Score
//!
//! The weights are the reference's (1.1.1). The score starts at 10 and is capped at 100; each
//! piece of evidence present (a non-empty string, or `true` for the two verification flags)
//! adds its points and its reason, in this order:
//!
//! | provenance evidence | points | reason |
//! |---|---|---|
//! | `source` | +10 | `source observed` |
//! | `packageName` and `packageVersion` | +20 | `package identity observed` |
//! | `integrity` (of the module) | +25 | `module integrity recorded` |
//! | `repository` | +10 | `repository recorded` |
//! | `commit` | +10 | `source commit recorded` |
//! | `attestation` (a reference) | +15 | `attestation reference recorded` |
//! | `packageIntegrity` | +10 | `package integrity recorded` |
//! | `registrySignatureVerified` | +10 | `registry signature verified` |
//! | `provenanceVerified` | +15 | `provenance attestation verified` |
//!
//! So a source-built module with package identity, integrity, repository, commit and an
//! attestation reference scores exactly 100 without any registry verification, and a package
//! installed from a registry with verified signatures and provenance reaches 100 as well.
//! The two verification flags mean something only when the host's installer set them after
//! verifying; a record copied from an untrusted document must not carry them.
//!
//! # Policy
//!
//! Each `require*` flag adds a failure when its evidence is missing; the allow-lists add a
//! failure when the package name or repository is not allowed; a score below `minScore`
//! adds `trust score S is below minimum M`. Failures come in this order:
//! `package identity required`, `module integrity required`, `package integrity required`,
//! `repository required`, `commit required`, `attestation required`, `verified registry
//! signature required`, `verified provenance attestation required`, `package is not
//! allowed`, `repository is not allowed`, then the score. An empty allow-list allows
//! everything; a pattern matches exactly, or as a prefix when it ends with `*`
//! (`@scope/*`); a missing value never matches a non-empty list. The assessment is accepted
//! when there is no failure.
//!
//! [`strict_npm_trust_policy`] is the policy for capabilities acquired from npm: minimum
//! score 80, package identity, package integrity, a verified registry signature and verified
//! provenance.

use capability_core::json::js_string_of;
use capability_core::{CapabilityError, ErrorCode};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::capability::Capability;

/// The score every capability starts from.
pub const BASE_TRUST_SCORE: u32 = 10;

/// The highest score.
pub const MAX_TRUST_SCORE: u32 = 100;

/// A trust policy (the reference's option names in JSON). Every requirement is off and every
/// allow-list empty by default, so the default policy accepts anything and only scores it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TrustPolicy {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_score: Option<f64>,
    /// `packageName` and `packageVersion`.
    #[serde(skip_serializing_if = "is_false")]
    pub require_package: bool,
    /// The module `integrity`.
    #[serde(skip_serializing_if = "is_false")]
    pub require_integrity: bool,
    /// The registry's `packageIntegrity`.
    #[serde(skip_serializing_if = "is_false")]
    pub require_package_integrity: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub require_repository: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub require_commit: bool,
    /// An `attestation` reference.
    #[serde(skip_serializing_if = "is_false")]
    pub require_attestation: bool,
    /// `registrySignatureVerified: true`.
    #[serde(skip_serializing_if = "is_false")]
    pub require_registry_signature: bool,
    /// `provenanceVerified: true` (JSON `requireVerifiedProvenance`, also read as
    /// `requireProvenance`).
    #[serde(
        rename = "requireVerifiedProvenance",
        alias = "requireProvenance",
        skip_serializing_if = "is_false"
    )]
    pub require_provenance: bool,
    /// Package-name patterns (`name`, or a prefix ending with `*` such as `@scope/*`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_packages: Vec<String>,
    /// Repository patterns, as `allowed_packages`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_repositories: Vec<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A trust assessment `{score, accepted, reasons, failures, provenance?}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrustAssessment {
    pub score: u32,
    pub accepted: bool,
    pub reasons: Vec<String>,
    pub failures: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Value>,
}

/// The policy for capabilities acquired from npm: `{minScore: 80, requirePackage,
/// requirePackageIntegrity, requireRegistrySignature, requireVerifiedProvenance}`.
pub fn strict_npm_trust_policy() -> TrustPolicy {
    TrustPolicy {
        min_score: Some(80.0),
        require_package: true,
        require_package_integrity: true,
        require_registry_signature: true,
        require_provenance: true,
        ..TrustPolicy::default()
    }
}

/// The provenance member `key` as a non-empty string.
fn text<'a>(provenance: Option<&'a Value>, key: &str) -> Option<&'a str> {
    provenance
        .and_then(|p| p.get(key))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Whether the provenance member `key` is JavaScript-truthy.
fn present(provenance: Option<&Value>, key: &str) -> bool {
    match provenance.and_then(|p| p.get(key)) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Number(n)) => {
            let x = capability_core::json::as_f64(n);
            x != 0.0 && !x.is_nan()
        }
        Some(_) => true,
    }
}

fn allowed(value: Option<&str>, patterns: &[String]) -> bool {
    if patterns.is_empty() {
        return true;
    }
    let Some(value) = value else {
        return false;
    };
    patterns
        .iter()
        .any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => value.starts_with(prefix),
            None => pattern == value,
        })
}

/// Scores a provenance record and checks it against the policy (see the module
/// documentation). `None` means the capability has no provenance record.
pub fn assess_capability_trust(
    provenance: Option<&Value>,
    policy: &TrustPolicy,
) -> TrustAssessment {
    let has = |key: &str| present(provenance, key);
    let package_identity = has("packageName") && has("packageVersion");
    let evidence: [(bool, u32, &str); 9] = [
        (has("source"), 10, "source observed"),
        (package_identity, 20, "package identity observed"),
        (has("integrity"), 25, "module integrity recorded"),
        (has("repository"), 10, "repository recorded"),
        (has("commit"), 10, "source commit recorded"),
        (has("attestation"), 15, "attestation reference recorded"),
        (has("packageIntegrity"), 10, "package integrity recorded"),
        (
            has("registrySignatureVerified"),
            10,
            "registry signature verified",
        ),
        (
            has("provenanceVerified"),
            15,
            "provenance attestation verified",
        ),
    ];
    let mut score = BASE_TRUST_SCORE;
    let mut reasons = Vec::new();
    for (ok, points, reason) in evidence {
        if ok {
            score += points;
            reasons.push(reason.to_string());
        }
    }
    let score = score.min(MAX_TRUST_SCORE);

    let requirements: [(bool, bool, &str); 8] = [
        (
            policy.require_package,
            package_identity,
            "package identity required",
        ),
        (
            policy.require_integrity,
            has("integrity"),
            "module integrity required",
        ),
        (
            policy.require_package_integrity,
            has("packageIntegrity"),
            "package integrity required",
        ),
        (
            policy.require_repository,
            has("repository"),
            "repository required",
        ),
        (policy.require_commit, has("commit"), "commit required"),
        (
            policy.require_attestation,
            has("attestation"),
            "attestation required",
        ),
        (
            policy.require_registry_signature,
            has("registrySignatureVerified"),
            "verified registry signature required",
        ),
        (
            policy.require_provenance,
            has("provenanceVerified"),
            "verified provenance attestation required",
        ),
    ];
    let mut failures: Vec<String> = requirements
        .into_iter()
        .filter(|(required, ok, _)| *required && !ok)
        .map(|(_, _, failure)| failure.to_string())
        .collect();
    if !allowed(text(provenance, "packageName"), &policy.allowed_packages) {
        failures.push("package is not allowed".into());
    }
    if !allowed(text(provenance, "repository"), &policy.allowed_repositories) {
        failures.push("repository is not allowed".into());
    }
    if let Some(min) = policy.min_score
        && f64::from(score) < min
    {
        failures.push(format!(
            "trust score {score} is below minimum {}",
            js_string_of(&json!(min))
        ));
    }
    TrustAssessment {
        score,
        accepted: failures.is_empty(),
        reasons,
        failures,
        provenance: provenance.cloned(),
    }
}

/// [`assess_capability_trust`] over the provenance attached to a capability.
pub fn assess_trust_of(capability: &Capability, policy: &TrustPolicy) -> TrustAssessment {
    assess_capability_trust(capability.provenance(), policy)
}

/// [`assess_capability_trust`], failing with `PERMISSION_DENIED` (`Capability trust check
/// failed: <failures joined by "; ">`, the assessment as details) when it is not accepted.
pub fn require_capability_trust(
    provenance: Option<&Value>,
    policy: &TrustPolicy,
) -> Result<TrustAssessment, CapabilityError> {
    let assessment = assess_capability_trust(provenance, policy);
    if assessment.accepted {
        return Ok(assessment);
    }
    let message = format!(
        "Capability trust check failed: {}",
        assessment.failures.join("; ")
    );
    Err(CapabilityError::new(ErrorCode::PermissionDenied, message)
        .with_details(serde_json::to_value(&assessment).unwrap_or(Value::Null)))
}
