//! Capability gaps have no runtime validator in the reference; they are validated against the
//! published schema. The gaps the reference creates (`createCapabilityGap` cases of
//! `testdata/vectors/composition.json`) conform, except where §2.12 documents the schema as
//! stricter than the generator (empty intent, no verification, repeated effects, unknown
//! `searched` substrates), and one §2.12 does not mention: the generator copies caller-supplied
//! evidence candidates as they are (objects such as `{"id": ..., "score": ...}`), while the
//! schema wants strings.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_test_support::vectors::load;

use capability_core::published::{PublishedSchema, validate_published};
use capability_core::validate::validate_gap;
use serde_json::Value;

fn documented_difference(keyword: &str, path: &str) -> bool {
    matches!(
        (keyword, path),
        ("minLength", "/intent")
            | ("minItems", "/required/verification")
            | ("uniqueItems", "/required/effectsCeiling")
    ) || (keyword == "enum" && path.starts_with("/searched/"))
        || (keyword == "type"
            && (path.starts_with("/evidence/nativeCandidates/")
                || path.starts_with("/evidence/externalCandidates/")
                || path.starts_with("/evidence/compositionAttempts/")))
}

#[test]
fn gaps_created_by_the_reference_conform_to_the_gap_schema() {
    let doc = load("composition.json");
    let gaps: Vec<Value> = doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "createCapabilityGap")
        .map(|c| {
            let mut gap = c["gap"].clone();
            assert_eq!(gap["createdAt"], "<volatile:createdAt>");
            gap["createdAt"] = Value::from("2026-08-14T00:00:00.000Z");
            gap
        })
        .collect();
    assert_eq!(gaps.len(), 15);
    let mut conforming = 0;
    let mut failures = Vec::new();
    for gap in &gaps {
        let issues = validate_published(PublishedSchema::Gap, gap);
        if issues.is_empty() {
            conforming += 1;
        }
        for issue in issues {
            if !documented_difference(&issue.keyword, &issue.path) {
                failures.push(format!("{}: {issue:?}", gap["id"]));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        conforming >= gaps.len() - 3,
        "{conforming} of {} conform",
        gaps.len()
    );
}

#[test]
fn gap_issues_name_the_offending_member() {
    let doc = load("composition.json");
    let case = doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "createCapabilityGap")
        .unwrap();
    let mut gap = case["gap"].clone();
    gap["createdAt"] = Value::from("2026-08-14T00:00:00.000Z");
    assert_eq!(validate_gap(&gap), Vec::<String>::new());

    gap["id"] = Value::from("gap/Not Valid");
    gap["createdAt"] = Value::from("2026-02-30");
    gap["status"] = Value::from("resolved");
    let issues = validate_gap(&gap);
    assert_eq!(issues.len(), 3, "{issues:?}");
    for pointer in ["/id: ", "/createdAt: ", "/status: "] {
        assert!(
            issues.iter().any(|i| i.starts_with(pointer)),
            "no issue for {pointer}: {issues:?}"
        );
    }
    assert_eq!(validate_gap(&Value::Null).len(), 1);
}
