//! Every case of `protocol.json`: the protocol inventory, version compatibility (with the
//! asserting variant's message), the offline conformance report and the coverage report.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_core::conformance::run_protocol_conformance;
use capability_core::gap::metabolic_coverage;
use capability_core::json;
use capability_core::protocol::{
    assert_protocol_compatible, is_protocol_compatible, protocol_info,
};

#[test]
fn protocol_vectors_match_the_reference() {
    let path = format!(
        "{}/../../testdata/vectors/protocol.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let doc = json::parse(&std::fs::read(path).unwrap()).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 49);
    let mut counts = [0; 4];
    for (i, case) in cases.iter().enumerate() {
        match case["kind"].as_str().unwrap() {
            "info" => {
                counts[0] += 1;
                assert_eq!(
                    json::to_js_string(&protocol_info()),
                    json::to_js_string(&case["info"]),
                    "case {i}"
                );
            }
            "compatible" => {
                counts[1] += 1;
                let v = case["version"].as_str().unwrap();
                assert_eq!(
                    is_protocol_compatible(v),
                    case["compatible"] == true,
                    "case {i}: {v:?}"
                );
                match assert_protocol_compatible(v) {
                    Ok(()) => assert_eq!(case["compatible"], true),
                    Err(e) => {
                        assert_eq!(e.version(), v);
                        assert_eq!(
                            e.to_string(),
                            case["assertError"]["message"].as_str().unwrap()
                        )
                    }
                }
            }
            "conformanceReport" => {
                counts[2] += 1;
                assert_eq!(
                    run_protocol_conformance().to_value(),
                    case["report"],
                    "case {i}"
                );
            }
            "coverage" => {
                counts[3] += 1;
                assert_eq!(
                    json::to_js_string(&metabolic_coverage()),
                    json::to_js_string(&case["coverage"])
                );
            }
            other => panic!("unknown kind {other}"),
        }
    }
    assert_eq!(counts, [1, 46, 1, 1]);
}
