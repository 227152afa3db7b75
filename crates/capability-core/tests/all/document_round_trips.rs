//! Every valid document in the vectors survives a round trip through its typed model with
//! the same canonical hash: optional members, unknown members and present `null`s are kept.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_core::documents::{
    BridgeDocument, CapabilityGap, CapabilityIndex, CapabilityLock, MetabolicBinding,
    MetabolicExecutionReceipt, PackageDeclaration, ProtocolInfo, SiteDocument,
};
use capability_core::json::{self, canonical_hash};
use capability_core::manifest::Manifest;
use capability_core::validate;
use capability_test_support::vectors::load;
use serde_json::{Value, json};

fn round_trip<T>(
    file: &str,
    member: &str,
    valid: impl Fn(&Value) -> bool,
    read: impl Fn(&Value) -> T,
    write: impl Fn(&T) -> Value,
) -> usize {
    let doc = load(file);
    let mut n = 0;
    for (i, case) in doc["cases"].as_array().unwrap().iter().enumerate() {
        let d = &case[member];
        if !d.is_object() || !valid(d) {
            continue;
        }
        let typed = read(d);
        assert_eq!(
            canonical_hash(&write(&typed)),
            canonical_hash(d),
            "{file} case {i}"
        );
        n += 1;
    }
    assert!(n > 0, "{file}: no valid documents");
    n
}

#[test]
fn valid_documents_round_trip_through_their_models() {
    let manifests = round_trip(
        "manifest-validation.json",
        "manifest",
        |d| validate::validate_manifest(d).is_empty(),
        |d| Manifest::from_value(d).unwrap(),
        Manifest::to_value,
    );
    let packages = round_trip(
        "package-declaration.json",
        "declaration",
        |d| validate::validate_package_declaration(d).is_empty(),
        |d| PackageDeclaration::from_value(d).unwrap(),
        PackageDeclaration::to_value,
    );
    let indexes = round_trip(
        "index-validation.json",
        "document",
        |d| {
            validate::validate_index(d).is_empty()
                && d["packages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(Value::is_object)
        },
        |d| CapabilityIndex::from_value(d).unwrap_or_else(|e| panic!("{e}: {d}")),
        CapabilityIndex::to_value,
    );
    let sites = round_trip(
        "site-validation.json",
        "document",
        |d| validate::validate_site(d).is_empty(),
        |d| SiteDocument::from_value(d).unwrap(),
        SiteDocument::to_value,
    );
    let bridges = round_trip(
        "bridge-validation.json",
        "document",
        |d| validate::validate_bridge(d).is_empty(),
        |d| BridgeDocument::from_value(d).unwrap(),
        BridgeDocument::to_value,
    );
    let bindings = round_trip(
        "binding-validation.json",
        "binding",
        |d| validate::validate_binding(d, None).is_empty(),
        |d| MetabolicBinding::from_value(d).unwrap(),
        MetabolicBinding::to_value,
    );
    let locks = round_trip(
        "lock-validation.json",
        "document",
        |d| validate::validate_lock(d).is_empty(),
        |d| CapabilityLock::from_value(d).unwrap(),
        CapabilityLock::to_value,
    );
    eprintln!(
        "round trips: {manifests} manifests, {packages} declarations, {indexes} indexes, {sites} sites, {bridges} bridges, {bindings} bindings, {locks} locks"
    );
}

#[test]
fn gaps_receipts_and_protocol_info_round_trip() {
    let doc = load("composition.json");
    let mut gaps = 0;
    for case in doc["cases"].as_array().unwrap() {
        if case["kind"] == "createCapabilityGap" {
            let gap = CapabilityGap::from_value(&case["gap"]).unwrap();
            assert_eq!(
                canonical_hash(&gap.to_value()),
                canonical_hash(&case["gap"])
            );
            gaps += 1;
        }
    }
    assert!(gaps > 10);
    let info = capability_core::protocol::protocol_info();
    assert_eq!(
        json::to_js_string(&ProtocolInfo::from_value(&info).unwrap().to_value()),
        json::to_js_string(&info)
    );
    let receipt = json!({
        "receiptVersion": "1.0", "binderId": "b", "substrate": "s", "locator": "l", "immutableArtifact": "a",
        "status": "failed", "startedAt": "2026-01-01T00:00:00.000Z", "endedAt": "2026-01-01T00:00:00.000Z",
        "authority": {"complete": true, "effects": []}, "evidence": ["e"], "upstreamReceipt": null, "error": "boom", "x-extra": 1
    });
    let typed = MetabolicExecutionReceipt::from_value(&receipt).unwrap();
    assert_eq!(canonical_hash(&typed.to_value()), canonical_hash(&receipt));
}
