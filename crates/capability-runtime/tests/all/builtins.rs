//! The 12 built-ins against the reference: every case of `testdata/vectors/builtins.json`,
//! the manifests against the reference index and their canonical hashes, and a mutation run
//! that feeds malformed documents to every built-in. Uses only the public API.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::panic::{AssertUnwindSafe, catch_unwind};

use capability_core::json;
use capability_runtime::builtins::{self, BUILTIN_IDS};
use capability_test_support::vectors::{load, load_testdata};
use serde_json::Value;

fn builtin_cases() -> Vec<Value> {
    load("builtins.json")["cases"].as_array().unwrap().clone()
}

fn describe(i: usize, case: &Value) -> String {
    let label = case.get("label").and_then(Value::as_str).unwrap_or("-");
    format!(
        "case {i} {} ({label})\n  input    {}",
        case["id"].as_str().unwrap_or("?"),
        json::to_js_string(&case["input"])
    )
}

#[test]
fn builtin_vectors_match_the_reference() {
    let cases = builtin_cases();
    assert_eq!(cases.len(), 1156, "case count");
    let (mut succeeded, mut failed_as_expected, mut skipped) = (0, 0, 0);
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let id = case["id"].as_str().unwrap();
        let input = &case["input"];
        if let Some(error) = case.get("error") {
            match error["code"].as_str().unwrap() {
                "INVALID_INPUT" => {
                    skipped += 1;
                    continue;
                }
                "EXECUTION_FAILED" => {}
                other => panic!("case {i}: unexpected error code {other}"),
            }
            let engine_specific = error.get("messageIsEngineSpecific") == Some(&Value::Bool(true));
            match builtins::execute(id, input) {
                Some(Err(e))
                    if e.name == error["name"].as_str().unwrap()
                        && (engine_specific || e.message == error["message"].as_str().unwrap()) =>
                {
                    failed_as_expected += 1;
                }
                other => failures.push(format!(
                    "{}\n  got      {other:?}\n  expected error {}",
                    describe(i, case),
                    json::to_js_string(error)
                )),
            }
            continue;
        }
        let expected = &case["output"];
        let expected_hash = case["outputHash"].as_str().unwrap();
        match builtins::execute(id, input) {
            Some(Ok(output))
                if output == *expected && json::canonical_hash(&output) == expected_hash =>
            {
                succeeded += 1;
            }
            Some(Ok(output)) => failures.push(format!(
                "{}\n  got      {}\n  expected {}",
                describe(i, case),
                json::to_js_string(&output),
                json::to_js_string(expected)
            )),
            other => failures.push(format!(
                "{}\n  got      {other:?}\n  expected {}",
                describe(i, case),
                json::to_js_string(expected)
            )),
        }
    }
    println!(
        "builtins: {succeeded} outputs, {failed_as_expected} execution failures, \
         {skipped} INVALID_INPUT cases skipped"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        (succeeded, failed_as_expected, skipped),
        (1115, 13, 28),
        "(outputs, execution failures, skipped)"
    );
}

/// §8.3 of the reference description: canonical hashes of the built-in manifests.
const MANIFEST_HASHES: [(&str, &str); 12] = [
    (
        "text/normalize",
        "77e2a8de6d4c788ffc9f5ba2c3fbd20d42c6cb503a835ef86de3a63f3094823d",
    ),
    (
        "text/slugify",
        "0f7981b334ce644ab1da72eba84bf45bf69a3f82c47b61e039201ec3027751fe",
    ),
    (
        "data/sha256",
        "e7fcace6baa54e5662f3c6ea3a67cf8717523dbec15b76815198af344b829b25",
    ),
    (
        "json/get",
        "030dfe95eb9f4ab0a17f70d4ba8ad0560369fbd4d875a32bf3409f87dde83159",
    ),
    (
        "capability/authority-envelope",
        "196089b267bcd41caab5a39164e3f1688fac208015372592cbfeb3ee92ba969a",
    ),
    (
        "capability/contract-evolution",
        "500e9dbc65993e396809aeea3a3e0e626ecd716fe6430dcd332b08d4c07ac574",
    ),
    (
        "capability/contract-router",
        "936e24ee5880fc7bc9f773ec1873a68326acfc24c1528badc5b30265ad2ebfd5",
    ),
    (
        "capability/dominance-resolver",
        "0fc474badb9a1e7a6a8ba36a707e47a3783697b31be08b7f993b306a6522b1fd",
    ),
    (
        "capability/failure-frontier",
        "d179893c6b48b79495a88525b25107e37ddc626ecb283b3512fac6a72a2b730e",
    ),
    (
        "capability/novelty-radar",
        "022fad8db67b46f30c0719c543572cd809f4b6fe79caa99cc5b2a56553ff1f9b",
    ),
    (
        "capability/receipt-drift",
        "cc87bfb6440dc198505960e6fc6c9bde5f7804f82d2038bed2a416e7f9e2d177",
    ),
    (
        "capability/substitution-certificate",
        "2a259f6325f413739d1c2dfeac06282a97030e22b468b5944b453664866ad7ac",
    ),
];

#[test]
fn manifests_hash_as_the_reference_in_provider_order() {
    let manifests = builtins::manifests();
    assert_eq!(manifests.len(), 12);
    for ((id, hash), manifest) in MANIFEST_HASHES.iter().zip(manifests) {
        assert_eq!(manifest["id"], Value::from(*id));
        assert_eq!(&json::canonical_hash(manifest), hash, "{id}");
        assert_eq!(builtins::manifest(id), Some(manifest));
    }
    assert_eq!(
        BUILTIN_IDS.to_vec(),
        MANIFEST_HASHES
            .iter()
            .map(|(id, _)| *id)
            .collect::<Vec<_>>()
    );
}

#[test]
fn manifests_are_the_reference_index_entries_byte_for_byte() {
    let index = load_testdata("reference-data/registry-index.json");
    let entries = index["packages"][0]["capabilities"].as_array().unwrap();
    assert_eq!(entries.len(), 12);
    for entry in entries {
        let reference = &entry["manifest"];
        let id = reference["id"].as_str().unwrap();
        let ours = builtins::manifest(id).unwrap_or_else(|| panic!("{id} missing"));
        // Same members, same order, same text.
        assert_eq!(
            json::to_pretty_string(ours),
            json::to_pretty_string(reference),
            "{id}"
        );
    }
}

#[test]
fn every_builtin_dispatches_and_unknown_ids_do_not() {
    for id in BUILTIN_IDS {
        assert!(builtins::execute(id, &Value::Null).is_some(), "{id}");
    }
    assert!(builtins::execute("text/unknown", &Value::Null).is_none());
}

/// A small deterministic generator (64-bit LCG).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as usize
    }
}

fn odd_values() -> Vec<Value> {
    let texts = [
        "null",
        "true",
        "false",
        "0",
        "-1.5",
        "1e300",
        "\"\"",
        "\"x\"",
        "\"custom:x\"",
        "\"constructor\"",
        "\"__proto__\"",
        "\"😀é\\u0000\"",
        "[]",
        "[null]",
        "[1, \"a\", {}, [], null, true]",
        "[\"filesystem.write\", \"filesystem.write\", {\"id\": 1}]",
        "{}",
        "{\"length\": 0}",
        "{\"type\": 5, \"properties\": [], \"required\": \"x\", \"items\": []}",
        "{\"properties\": {\"0\": {\"type\": \"string\"}, \"__proto__\": true}, \"required\": [\"0\", \"0\"]}",
        "{\"id\": {}, \"version\": [], \"effects\": \"network.connect\", \"behavior\": 1}",
        "{\"manifest\": null, \"trustScore\": \"12\"}",
    ];
    texts.iter().map(|t| json::parse_str(t).unwrap()).collect()
}

/// Every path to a node of `v`, as a list of object keys or array indices.
fn paths(v: &Value, prefix: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    out.push(prefix.clone());
    match v {
        Value::Object(map) => {
            for (k, item) in map {
                prefix.push(Value::from(k.as_str()));
                paths(item, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                prefix.push(Value::from(i));
                paths(item, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn node_mut<'a>(mut v: &'a mut Value, path: &[Value]) -> &'a mut Value {
    for step in path {
        v = match step {
            Value::String(k) => &mut v[k.as_str()],
            _ => &mut v[step.as_u64().unwrap() as usize],
        };
    }
    v
}

#[test]
fn no_input_makes_a_builtin_panic() {
    let odd = odd_values();
    let mut rng = Lcg(0x5eed);
    let mut inputs: Vec<(String, Value)> = Vec::new();
    for id in BUILTIN_IDS {
        for value in &odd {
            inputs.push((id.to_string(), value.clone()));
        }
    }
    for case in builtin_cases() {
        let id = case["id"].as_str().unwrap().to_string();
        let input = case["input"].clone();
        let mut all = Vec::new();
        paths(&input, &mut Vec::new(), &mut all);
        for _ in 0..12 {
            let mut mutated = input.clone();
            let path = &all[rng.next() % all.len()];
            *node_mut(&mut mutated, path) = odd[rng.next() % odd.len()].clone();
            inputs.push((id.clone(), mutated));
        }
    }
    let mut panics = Vec::new();
    let mut errors = 0;
    for (id, input) in &inputs {
        match catch_unwind(AssertUnwindSafe(|| builtins::execute(id, input))) {
            Ok(Some(Ok(output))) => {
                // Outputs are plain JSON documents that hash.
                let _ = json::canonical_hash(&output);
            }
            Ok(Some(Err(e))) => {
                assert!(e.name == "TypeError" || e.name == "Error", "{e}");
                errors += 1;
            }
            Ok(None) => panics.push(format!("{id} not dispatched")),
            Err(_) => panics.push(format!("{id} panicked on {}", json::to_js_string(input))),
        }
    }
    println!("{} malformed inputs, {errors} refused", inputs.len());
    assert!(errors > 0, "the mutations should reach error paths");
    assert!(
        panics.is_empty(),
        "{} panics:\n{}",
        panics.len(),
        panics.join("\n")
    );
}
