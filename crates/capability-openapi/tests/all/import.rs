//! The reference import against `testdata/vectors/openapi-import.json`, YAML and OpenAPI 3.0
//! documents, and the refusals.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_openapi::error::VERSION_REQUIRED;
use capability_openapi::{ImportOptions, Version, import, parse_document};
use serde_json::{Value, json};

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/vectors/openapi-import.json"
    );
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn options(v: &Value) -> ImportOptions {
    ImportOptions {
        namespace: v.get("namespace").and_then(Value::as_str).map(String::from),
        base_url: v.get("baseUrl").and_then(Value::as_str).map(String::from),
    }
}

/// The one deliberate divergence: the reference refuses OpenAPI 3.0; this crate imports it.
const IMPORTS_30: &str = "OpenAPI 3.0 is refused";

#[test]
fn every_vector_case_gives_the_reference_manifests_plans_and_errors() {
    let v = vectors();
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() >= 14);
    for case in cases {
        let label = case["label"].as_str().unwrap();
        let result = import(&case["document"], &options(&case["options"]));
        if label == IMPORTS_30 {
            // Same document as the first case with `openapi: 3.0.3`: the same manifests.
            let imported = result.unwrap_or_else(|e| panic!("{label}: {e}"));
            assert_eq!(imported.version, Version::V30);
            let first = import(&cases[0]["document"], &options(&cases[0]["options"])).unwrap();
            let a: Vec<&Value> = imported.operations.iter().map(|o| &o.manifest).collect();
            let b: Vec<&Value> = first.operations.iter().map(|o| &o.manifest).collect();
            assert_eq!(a, b, "{label}");
            continue;
        }
        match (&case["error"], result) {
            (Value::Null, Ok(imported)) => {
                let expected = case["capabilities"].as_array().unwrap();
                assert_eq!(imported.operations.len(), expected.len(), "{label}");
                for (op, want) in imported.operations.iter().zip(expected) {
                    assert_eq!(op.manifest, want["manifest"], "{label}: manifest");
                    // Key order matters for hashing interop: compare the canonical text too.
                    assert_eq!(
                        serde_json::to_string(&op.manifest).unwrap(),
                        serde_json::to_string(&want["manifest"]).unwrap(),
                        "{label}"
                    );
                    for plan in want["plans"].as_array().unwrap() {
                        let (summary, data) = op.reference_plan(&plan["input"]);
                        assert_eq!(
                            json!({"summary": summary, "data": data}),
                            plan["result"],
                            "{label}: plan"
                        );
                    }
                }
            }
            (Value::Object(err), Err(e)) => {
                assert_eq!(e.name(), err["name"], "{label}");
                assert_eq!(e.message(), err["message"], "{label}");
                if let Some(code) = err.get("code") {
                    let capability_openapi::ImportError::Manifest(c) = &e else {
                        panic!("{label}: {e:?}")
                    };
                    assert_eq!(c.code.as_str(), code, "{label}");
                }
            }
            (want, got) => panic!("{label}: expected {want}, got {got:?}"),
        }
    }
}

#[test]
fn swagger_and_unknown_versions_are_refused_with_what_was_found() {
    let e = import(
        &json!({"swagger": "2.0", "paths": {}}),
        &ImportOptions::default(),
    )
    .unwrap_err();
    assert_eq!(e.message(), VERSION_REQUIRED);
    assert!(e.to_string().contains("Swagger 2.0"), "{e}");
    let e = import(
        &json!({"openapi": "3.2.0", "servers": [{"url": "https://x.test"}]}),
        &ImportOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("\"3.2.0\""), "{e}");
}

#[test]
fn yaml_documents_import_like_their_json_form() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/openapi");
    for (yaml, version) in [
        ("petstore-3.0.yaml", Version::V30),
        ("petstore-3.1.yaml", Version::V31),
    ] {
        let doc = parse_document(&std::fs::read(format!("{dir}/{yaml}")).unwrap()).unwrap();
        let imported = import(&doc, &ImportOptions::default()).unwrap();
        assert_eq!(imported.version, version);
        let ids: Vec<&str> = imported.operations.iter().map(|o| o.id()).collect();
        assert_eq!(
            ids,
            [
                "petstore/listpets",
                "petstore/createpet",
                "petstore/showpetbyid",
                "petstore/deletepet"
            ],
            "{yaml}"
        );
        let show = &imported.operations[2];
        assert_eq!(show.manifest["input"]["required"], json!(["path"]));
        assert_eq!(
            show.manifest["output"],
            json!({"$ref": "#/components/schemas/Pet"})
        );
    }
}

#[test]
fn openapi_30_nullable_schemas_are_read_as_json_schema() {
    let doc = json!({"openapi": "3.0.3", "info": {"title": "N", "version": "1.0.0"},
        "servers": [{"url": "https://x.test"}],
        "paths": {"/n": {"get": {"operationId": "n", "parameters": [
            {"name": "q", "in": "query", "schema": {"type": "integer", "nullable": true, "minimum": 0, "exclusiveMinimum": true}}]}}}});
    let imported = import(&doc, &ImportOptions::default()).unwrap();
    assert_eq!(
        imported.operations[0].manifest["input"]["properties"]["query"]["properties"]["q"],
        json!({"type": ["integer", "null"], "exclusiveMinimum": 0})
    );
}
