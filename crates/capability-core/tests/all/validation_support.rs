//! Shared helpers for the validation vector tests: loading `testdata/vectors/*.json` and
//! checking every case, reporting all failures at once.

use capability_core::json;
use capability_test_support::vectors::load;
use serde_json::Value;

/// The member `key` of `doc`, which must be an array of exactly `count` items.
pub fn array<'a>(doc: &'a Value, key: &str, count: usize) -> &'a [Value] {
    let items = doc[key]
        .as_array()
        .unwrap_or_else(|| panic!("`{key}` is not an array"));
    assert_eq!(items.len(), count, "number of `{key}` items");
    items
}

/// The expected `issues` of a case.
pub fn expected_issues(case: &Value) -> Vec<String> {
    case["issues"]
        .as_array()
        .expect("issues array")
        .iter()
        .map(|i| i.as_str().expect("issue string").to_string())
        .collect()
}

/// Checks every case of a validation vector file: `validate(case[input_key])` must equal the
/// case's `issues`, in order. Panics with all failures listed.
pub fn check_issue_cases(
    file: &str,
    count: usize,
    input_key: &str,
    validate: impl Fn(&Value, &Value) -> Vec<String>,
) {
    let doc = load(file);
    let cases = array(&doc, "cases", count);
    let mut failures = Vec::new();
    let mut noted = 0;
    for (i, case) in cases.iter().enumerate() {
        let expected = expected_issues(case);
        let got = validate(&case[input_key], case);
        if case.get("note").is_some() {
            noted += 1;
        }
        if got != expected {
            failures.push(format!(
                "case {i} ({}){}\n  input    {}\n  got      {got:?}\n  expected {expected:?}",
                case["label"].as_str().unwrap_or(""),
                case.get("note")
                    .map(|n| format!(" [note: {}]", n.as_str().unwrap_or("")))
                    .unwrap_or_default(),
                json::to_js_string(&case[input_key]),
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{file}: {} of {count} cases failed ({noted} cases carry a note):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
