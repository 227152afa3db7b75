//! Provenance trust (the reference's advanced test 2 and ecosystem test 5, plus refusals).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_core::ErrorCode;
use capability_runtime::Capability;
use capability_runtime::trust::{
    TrustPolicy, assess_capability_trust, assess_trust_of, require_capability_trust,
    strict_npm_trust_policy,
};
use serde_json::{Value, json};

fn source_provenance() -> Value {
    json!({
        "source": "file:///packages/fixture/dist/add.js",
        "packageName": "@fixture/add",
        "packageVersion": "1.0.0",
        "integrity": "sha256-abc",
        "repository": "https://github.com/fixture/add",
        "commit": "0123456789abcdef0123456789abcdef01234567",
        "attestation": "https://example.test/attestations/1"
    })
}

fn npm_provenance() -> Value {
    let mut p = source_provenance();
    p["packageIntegrity"] = json!("sha512-test");
    p["registrySignatureVerified"] = json!(true);
    p["provenanceVerified"] = json!(true);
    p["verificationProvider"] = json!("npm audit signatures");
    p
}

fn advanced_policy() -> TrustPolicy {
    serde_json::from_value(json!({
        "minScore": 90, "requirePackage": true, "requireIntegrity": true,
        "requireRepository": true, "requireCommit": true, "requireAttestation": true,
        "allowedPackages": ["@fixture/*"]
    }))
    .unwrap()
}

#[test]
fn full_source_provenance_scores_100_under_the_advanced_policy() {
    let provenance = source_provenance();
    let a = assess_capability_trust(Some(&provenance), &advanced_policy());
    assert_eq!(a.score, 100);
    assert!(a.accepted, "{:?}", a.failures);
    assert!(a.failures.is_empty());
    assert_eq!(
        a.reasons,
        [
            "source observed",
            "package identity observed",
            "module integrity recorded",
            "repository recorded",
            "source commit recorded",
            "attestation reference recorded"
        ]
    );
    assert_eq!(a.provenance.as_ref(), Some(&provenance));
}

#[test]
fn strict_npm_policy_accepts_full_npm_provenance() {
    let policy = strict_npm_trust_policy();
    let a = assess_capability_trust(Some(&npm_provenance()), &policy);
    assert!(a.accepted, "{:?}", a.failures);
    assert!(a.score >= 80);
    assert_eq!(a.score, 100, "capped");
    assert_eq!(
        serde_json::to_value(&policy).unwrap(),
        json!({"minScore": 80.0, "requirePackage": true, "requirePackageIntegrity": true,
               "requireRegistrySignature": true, "requireVerifiedProvenance": true})
    );
    // Source provenance alone is not enough for npm acquisition.
    let a = assess_capability_trust(Some(&source_provenance()), &policy);
    assert!(!a.accepted);
    assert_eq!(
        a.failures,
        [
            "package integrity required",
            "verified registry signature required",
            "verified provenance attestation required"
        ]
    );
}

#[test]
fn missing_evidence_is_named_in_order_and_lowers_the_score() {
    let policy = TrustPolicy {
        min_score: Some(50.0),
        require_package: true,
        require_integrity: true,
        require_repository: true,
        require_commit: true,
        require_attestation: true,
        ..TrustPolicy::default()
    };
    let a = assess_capability_trust(Some(&json!({"source": "file:///x.js"})), &policy);
    assert_eq!(a.score, 20);
    assert!(!a.accepted);
    assert_eq!(
        a.failures,
        [
            "package identity required",
            "module integrity required",
            "repository required",
            "commit required",
            "attestation required",
            "trust score 20 is below minimum 50"
        ]
    );
    // A package name without a version is not an identity.
    let a = assess_capability_trust(Some(&json!({"packageName": "x"})), &policy);
    assert!(
        a.failures
            .contains(&"package identity required".to_string())
    );
}

#[test]
fn no_provenance_scores_the_base_and_fails_any_requirement() {
    let a = assess_capability_trust(None, &TrustPolicy::default());
    assert_eq!((a.score, a.accepted), (10, true));
    assert!(a.provenance.is_none());
    let v = serde_json::to_value(&a).unwrap();
    assert!(v.get("provenance").is_none());
    let a = assess_capability_trust(
        None,
        &TrustPolicy {
            require_package: true,
            ..TrustPolicy::default()
        },
    );
    assert_eq!(a.failures, ["package identity required"]);
}

#[test]
fn allow_lists_match_exactly_or_by_prefix() {
    let policy = TrustPolicy {
        allowed_packages: vec!["@fixture/*".into(), "exact-name".into()],
        allowed_repositories: vec!["https://github.com/fixture/*".into()],
        ..TrustPolicy::default()
    };
    let ok = assess_capability_trust(Some(&source_provenance()), &policy);
    assert!(ok.accepted, "{:?}", ok.failures);
    let p = json!({"packageName": "@other/add", "packageVersion": "1.0.0", "repository": "https://github.com/other/add"});
    let a = assess_capability_trust(Some(&p), &policy);
    assert_eq!(
        a.failures,
        ["package is not allowed", "repository is not allowed"]
    );
    let p = json!({"packageName": "exact-name-2", "repository": "https://github.com/fixture/x"});
    assert_eq!(
        assess_capability_trust(Some(&p), &policy).failures,
        ["package is not allowed"]
    );
    // A missing package name never matches a non-empty list.
    let a = assess_capability_trust(
        Some(&json!({"repository": "https://github.com/fixture/x"})),
        &policy,
    );
    assert_eq!(a.failures, ["package is not allowed"]);
}

#[test]
fn require_capability_trust_refuses_with_the_failures() {
    let err = require_capability_trust(Some(&json!({"source": "s"})), &strict_npm_trust_policy())
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied);
    assert_eq!(
        err.message,
        "Capability trust check failed: package identity required; package integrity required; \
         verified registry signature required; verified provenance attestation required; \
         trust score 20 is below minimum 80"
    );
    assert_eq!(err.details.as_ref().unwrap()["accepted"], false);
    let ok = require_capability_trust(Some(&npm_provenance()), &strict_npm_trust_policy()).unwrap();
    assert!(ok.accepted);
}

#[test]
fn verification_flags_count_only_when_true_and_the_policy_reads_the_alias() {
    let mut p = source_provenance();
    p["registrySignatureVerified"] = json!(false);
    p["provenanceVerified"] = json!("");
    let policy: TrustPolicy = serde_json::from_value(
        json!({"requireProvenance": true, "requireRegistrySignature": true}),
    )
    .unwrap();
    let a = assess_capability_trust(Some(&p), &policy);
    assert_eq!(
        a.failures,
        [
            "verified registry signature required",
            "verified provenance attestation required"
        ]
    );
}

#[test]
fn a_capability_is_assessed_by_its_attached_provenance() {
    let cap = Capability::builder(json!({
        "specVersion": "0.1", "id": "fixture/add", "version": "1.0.0",
        "name": "Add", "description": "Adds.", "effects": []
    }))
    .execute_json(|_, _| Ok(json!(null)))
    .provenance(source_provenance())
    .build()
    .unwrap();
    let a = assess_trust_of(&cap, &advanced_policy());
    assert_eq!((a.score, a.accepted), (100, true));
}
