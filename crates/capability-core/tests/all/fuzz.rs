//! Property-based fuzzing of the parsers that take outside input: JSON text (the project's
//! own `JSON.parse`-compatible parser and canonical JSON), stored records, and package
//! declarations and manifests. No input may panic or hang (inputs are bounded), and the
//! round trips hold: `parse(stringify(v)) == v`, canonical JSON is a fixed point.
//!
//! Runs 256 cases per property with a fixed seed; longer, by hand:
//! `PROPTEST_CASES=100000 cargo test --release -p capability-core --test all -- fuzz::`
//! (`PROPTEST_RNG_SEED=<n>` picks another seed).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_core::json::{self, MAX_DEPTH, RECORD_DEPTH};
use capability_test_support::fuzz::config;
use proptest::prelude::*;
use serde_json::{Map, Value};

/// Numbers as a parsed document holds them (integers up to 2^53, other finite doubles; not
/// `-0`, which `JSON.stringify` writes as `0`, as JavaScript does).
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(|i| Value::from(i % (1 << 53))),
        any::<f64>()
            .prop_filter("finite, not -0", |x| x.is_finite()
                && !(*x == 0.0 && x.is_sign_negative()))
            .prop_map(|x| Value::Number(json::number_from_f64(x).unwrap())),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((".{0,8}", inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// JSON-looking text: fragments of valid and broken JSON, escapes, odd numbers, unicode.
fn jsonish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("{".to_string()),
        Just("}".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just(",".to_string()),
        Just(":".to_string()),
        Just("\"".to_string()),
        Just("\\".to_string()),
        Just("\\u".to_string()),
        Just("\\ud800".to_string()),
        Just("\\udc00".to_string()),
        Just("true".to_string()),
        Just("nul".to_string()),
        Just("-0".to_string()),
        Just("1e400".to_string()),
        Just("1e-400".to_string()),
        Just("12345678901234567890".to_string()),
        Just(".5".to_string()),
        Just("0x1".to_string()),
        Just(" \n\t".to_string()),
        "[a-z0-9\"]{1,4}",
        "\\PC{1,3}",
    ];
    prop::collection::vec(piece, 0..64).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(config(256, 0x00c0_ffee))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        let _ = json::parse(&bytes);
        let _ = json::parse_record(&bytes);
        let _ = json::parse_message(&bytes);
        let _ = json::canonical_text(&bytes);
    }

    #[test]
    fn json_looking_text_parses_or_fails_cleanly(text in jsonish()) {
        if let Ok(v) = json::parse(text.as_bytes()) {
            // Whatever parses has a canonical form that is a fixed point.
            let canonical = json::canonical_string(&v);
            let again = json::parse(canonical.as_bytes()).unwrap();
            prop_assert_eq!(json::canonical_string(&again), canonical);
        }
        if let Ok(c) = json::canonical_text(text.as_bytes()) {
            prop_assert_eq!(json::canonical_text(c.as_bytes()).unwrap(), c);
        }
    }

    #[test]
    fn stringify_then_parse_round_trips(v in value()) {
        let text = json::to_js_string(&v);
        prop_assert_eq!(&json::parse(text.as_bytes()).unwrap(), &v);
        let pretty = json::to_pretty_string(&v);
        prop_assert_eq!(&json::parse(pretty.as_bytes()).unwrap(), &v);
        let canonical = json::canonical_string(&v);
        let back = json::parse(canonical.as_bytes()).unwrap();
        prop_assert_eq!(json::canonical_string(&back), canonical.clone());
        prop_assert_eq!(json::canonical_hash(&back), json::canonical_hash(&v));
        // The canonical text of the raw text agrees with the value's.
        prop_assert_eq!(json::canonical_text(text.as_bytes()).unwrap(), canonical);
    }

    #[test]
    fn nesting_is_bounded_and_what_is_accepted_reads_back_as_a_record(
        levels in 0usize..400,
        object in any::<bool>(),
    ) {
        let (open, close) = if object { ("{\"k\":", "}") } else { ("[", "]") };
        let text = format!("{}0{}", open.repeat(levels), close.repeat(levels));
        match json::parse(text.as_bytes()) {
            Ok(v) => {
                prop_assert!(levels <= MAX_DEPTH);
                prop_assert_eq!(json::depth(&v), levels);
                // Stored inside a record, a few levels down, it still reads back.
                let record = serde_json::json!({"receipt": {"output": {"value": v}}});
                let text = json::to_js_string(&record);
                prop_assert_eq!(json::parse_record(text.as_bytes()).unwrap(), record);
            }
            Err(e) => {
                prop_assert!(levels > MAX_DEPTH, "{}", e);
                prop_assert!(e.message.contains("nesting"), "{}", e);
            }
        }
        prop_assert_eq!(json::parse_record(text.as_bytes()).is_ok(), levels <= RECORD_DEPTH);
    }

    #[test]
    fn package_declarations_and_manifests_never_panic(v in value(), id in "[a-z]{1,6}/[a-z]{1,6}") {
        let _ = capability_core::validate_package_declaration(&v);
        let _ = capability_core::documents::PackageDeclaration::from_value(&v);
        let _ = capability_core::manifest::Manifest::from_value(&v);
        let _ = capability_core::validate_manifest(&v);
        // A declaration whose export holds the generated value where a manifest belongs.
        let declaration = serde_json::json!({
            "specVersion": "0.1",
            "exports": {id.clone(): {"module": "./m.mjs", "manifest": v}},
        });
        let _ = capability_core::validate_package_declaration(&declaration);
        let _ = capability_core::documents::PackageDeclaration::from_value(&declaration);
    }

    #[test]
    fn stored_receipt_lines_never_panic(v in value(), bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let line = json::to_js_string(&v);
        let _ = json::from_record::<capability_core::receipt::Receipt>(&line);
        let _ = json::from_record::<capability_core::plan::Plan>(&line);
        let _ = json::from_record::<capability_core::receipt::Receipt>(&String::from_utf8_lossy(&bytes));
    }
}
