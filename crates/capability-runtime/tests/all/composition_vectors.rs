//! Every case of `testdata/vectors/composition.json`: contract compatibility, composition
//! planning, pipeline-intent splitting and capability gaps. All failures are reported at
//! once, and the number of cases of each kind is checked.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use capability_core::json;
use capability_runtime::composition::{
    CompositionCandidate, DEFAULT_MAX_DEPTH, contracts_compose, create_gap, gap_options,
    plan_composition, plan_summary, split_pipeline_intent,
};
use capability_test_support::vectors::load;
use serde_json::{Value, json};

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`.
fn is_iso_millis_utc(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| r.into_iter().all(|i| b[i].is_ascii_digit());
    b.len() == 24
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b'.'
        && digits(20..23)
        && b[23] == b'Z'
}

fn check_case(case: &Value) -> Result<(), String> {
    match case["kind"].as_str().unwrap_or_default() {
        "contractsCompose" => {
            let result = contracts_compose(case.get("output"), case.get("input"));
            let actual = serde_json::to_value(&result).unwrap();
            if actual != case["result"] {
                return Err(format!(
                    "contractsCompose output={} input={}: expected {}, got {}",
                    case.get("output")
                        .map_or("<absent>".into(), json::to_js_string),
                    case.get("input")
                        .map_or("<absent>".into(), json::to_js_string),
                    json::to_js_string(&case["result"]),
                    json::to_js_string(&actual)
                ));
            }
        }
        "planComposition" => {
            let candidates: Vec<CompositionCandidate> =
                serde_json::from_value(case["candidates"].clone()).map_err(|e| e.to_string())?;
            let max_depth = case
                .get("maxDepth")
                .and_then(Value::as_u64)
                .map_or(DEFAULT_MAX_DEPTH, |d| d as usize);
            let intent = case["intent"].as_str().unwrap();
            let plans = plan_composition(intent, &candidates, max_depth);
            let actual = Value::Array(plans.iter().map(plan_summary).collect());
            if actual != case["plans"] {
                return Err(format!(
                    "planComposition {intent:?}:\n  expected {}\n  actual   {}",
                    json::to_js_string(&case["plans"]),
                    json::to_js_string(&actual)
                ));
            }
        }
        "splitPipelineIntent" => {
            let intent = case["intent"].as_str().unwrap();
            let actual = json!(split_pipeline_intent(intent));
            if actual != case["parts"] {
                return Err(format!(
                    "splitPipelineIntent {}: expected {}, got {}",
                    json::to_js_string(&case["intent"]),
                    json::to_js_string(&case["parts"]),
                    json::to_js_string(&actual)
                ));
            }
        }
        "createCapabilityGap" => {
            let intent = case["intent"].as_str().unwrap();
            let mut gap = create_gap(intent, &gap_options(&case["options"]));
            let created_at = gap["createdAt"].as_str().unwrap_or_default().to_string();
            if !is_iso_millis_utc(&created_at) {
                return Err(format!(
                    "gap {intent:?}: createdAt {created_at:?} is not ISO-8601 UTC with milliseconds"
                ));
            }
            gap["createdAt"] = json!("<volatile:createdAt>");
            if gap != case["gap"] {
                return Err(format!(
                    "createCapabilityGap {intent:?}:\n  expected {}\n  actual   {}",
                    json::to_js_string(&case["gap"]),
                    json::to_js_string(&gap)
                ));
            }
        }
        other => return Err(format!("unknown kind {other:?}")),
    }
    Ok(())
}

#[test]
fn composition_vectors_match_the_reference() {
    let doc = load("composition.json");
    let cases = doc["cases"].as_array().unwrap();
    let mut per_kind: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        *per_kind
            .entry(case["kind"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
        if let Err(e) = check_case(case) {
            failures.push(format!("#{i} {e}"));
        }
    }
    let expected: BTreeMap<String, usize> = [
        ("contractsCompose", 576),
        ("createCapabilityGap", 15),
        ("planComposition", 22),
        ("splitPipelineIntent", 41),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_string(), n))
    .collect();
    assert_eq!(per_kind, expected, "cases per kind");
    assert_eq!(cases.len(), 654);
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn gap_timestamps_are_current() {
    let before = capability_core::js::now_iso();
    let gap = create_gap("render video", &gap_options(&json!({})));
    let after = capability_core::js::now_iso();
    let at = gap["createdAt"].as_str().unwrap();
    assert!(is_iso_millis_utc(at), "{at}");
    assert!(
        before.as_str() <= at && at <= after.as_str(),
        "{before} <= {at} <= {after}"
    );
    assert_eq!(gap["id"], "gap/render-video");
}
