//! A document read lazily ([`LazyApi`]) builds each operation exactly as the eager build
//! ([`build_api`]) does, one at a time, when first asked for, and keeps it.

use std::sync::Arc;

use capability_openapi::executor::{SecretRef, Secrets};
use capability_openapi::{
    ApiOptions, HttpClient, HttpConfig, ImportError, LazyApi, Resolver, build_api,
};
use serde_json::{Value, json};

fn client() -> Arc<HttpClient> {
    Arc::new(HttpClient::new(HttpConfig::default(), Resolver::System).unwrap())
}

fn vectors() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/vectors/openapi-import.json"
    );
    let v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    v["cases"].as_array().unwrap().clone()
}

/// Every vector document, and one whose operations share parameters, request bodies and
/// responses through `components`, whose one operation cannot be built (a response `$ref` to
/// nothing), and one with a security scheme.
fn documents() -> Vec<(String, Value, ApiOptions)> {
    let mut out: Vec<(String, Value, ApiOptions)> = vectors()
        .iter()
        .map(|case| {
            let text = |k: &str| {
                case["options"]
                    .get(k)
                    .and_then(Value::as_str)
                    .map(String::from)
            };
            let options = ApiOptions {
                namespace: text("namespace"),
                base_url: text("baseUrl"),
                ..ApiOptions::default()
            };
            (
                case["label"].as_str().unwrap().to_string(),
                case["document"].clone(),
                options,
            )
        })
        .collect();
    let thing = json!({"$ref": "#/components/schemas/Thing"});
    let shared = json!({"openapi": "3.1.0", "info": {"title": "Shared", "version": "1.2.3"},
        "servers": [{"url": "https://api.example.test/v1"}],
        "security": [{"key": []}],
        "paths": {
            "/things/{id}": {
                "parameters": [{"$ref": "#/components/parameters/Id"}],
                "get": {"operationId": "getThing", "tags": ["things"],
                    "parameters": [{"name": "q", "in": "query", "schema": {"type": "string"}},
                                   {"name": "Content-Length", "in": "header", "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": thing}}},
                                  "404": {"$ref": "#/components/responses/Problem"}}},
                "put": {"operationId": "putThing", "security": [],
                    "requestBody": {"required": true, "content": {"application/json": {"schema": thing}}},
                    "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": thing}}}}}},
            "/broken": {"get": {"operationId": "broken", "responses": {"200": {"description": "ok",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Missing"}}}}}}}},
        "components": {
            "securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "X-Key"}},
            "parameters": {"Id": {"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}},
            "responses": {"Problem": {"description": "problem", "content": {"application/json":
                {"schema": {"type": "object", "properties": {"title": {"type": "string"}}}}}}},
            "schemas": {"Thing": {"type": "object", "required": ["id"], "properties": {
                "id": {"type": "integer"}, "next": {"$ref": "#/components/schemas/Thing"}}}}}});
    let mut without_broken = shared.clone();
    without_broken["paths"]
        .as_object_mut()
        .unwrap()
        .remove("/broken");
    let keyed = ApiOptions {
        auth: vec![("key".into(), SecretRef::parse("env:LAZY_TEST_KEY").unwrap())],
        ..ApiOptions::default()
    };
    out.push(("shared components".into(), without_broken, keyed.clone()));
    out.push(("an operation that cannot be built".into(), shared, keyed));
    out
}

#[test]
fn each_operation_is_built_as_the_eager_build_builds_it() {
    // Documents built either way, refused either way, and refused eagerly for one operation.
    let mut seen = [0usize; 3];
    for (label, doc, options) in documents() {
        let eager = build_api(&doc, &options, client(), Secrets::default());
        let lazy = LazyApi::new(doc.clone(), &options, client(), Secrets::default());
        let lazy = match (eager, lazy) {
            (Ok(api), Ok(lazy)) => {
                seen[0] += 1;
                let ids: Vec<&str> = api.operations().iter().map(|o| o.id()).collect();
                assert_eq!(lazy.ids(), ids, "{label}");
                assert_eq!(lazy.server(), &api.server, "{label}");
                assert_eq!(lazy.built_count(), 0, "{label}");
                // In reverse, so that no operation is built by building another.
                for (n, op) in api.operations().iter().rev().enumerate() {
                    let built = lazy.operation(op.id()).unwrap().unwrap();
                    assert_eq!(lazy.built_count(), n + 1, "{label}");
                    // Key order matters (hashes): the text too.
                    assert_eq!(
                        serde_json::to_string(&built.manifest).unwrap(),
                        serde_json::to_string(&op.manifest).unwrap(),
                        "{label}: {}",
                        op.id()
                    );
                    assert_eq!(built.operation.manifest, op.operation.manifest, "{label}");
                    assert_eq!(built.operation.path, op.operation.path, "{label}");
                    assert_eq!(built.operation.method, op.operation.method, "{label}");
                    assert_eq!(built.operation.security, op.operation.security, "{label}");
                    assert_eq!(
                        built.credential_schemes(),
                        op.credential_schemes(),
                        "{label}"
                    );
                    // Kept: the same operation again.
                    let again = lazy.operation(op.id()).unwrap().unwrap();
                    assert!(Arc::ptr_eq(&built, &again), "{label}");
                }
                lazy
            }
            (Ok(_), Err(e)) => panic!("{label}: built eagerly, refused lazily: {e}"),
            (Err(e), Err(_)) => {
                // Refused for the whole document either way.
                seen[1] += 1;
                assert!(!e.to_string().is_empty(), "{label}");
                continue;
            }
            (Err(e), Ok(lazy)) => {
                // The eager build's error is one operation's: the same when it is used.
                seen[2] += 1;
                let errors: Vec<ImportError> = lazy
                    .ids()
                    .iter()
                    .filter_map(|id| lazy.operation(id).unwrap().err())
                    .collect();
                assert!(errors.contains(&e), "{label}: {e} not in {errors:?}");
                lazy
            }
        };
        assert!(lazy.operation("nope/nothing").is_none(), "{label}");
    }
    assert!(seen[0] >= 8 && seen[1] >= 3 && seen[2] >= 2, "{seen:?}");
}

#[test]
fn operations_that_share_an_id_are_refused_without_building_any() {
    let doc = json!({"openapi": "3.1.0", "info": {"title": "P", "version": "1.0.0"},
        "servers": [{"url": "http://127.0.0.1:9"}],
        "paths": {"/a": {"get": {"operationId": "listPets", "responses": {}}},
                  "/b": {"get": {"operationId": "ListPets", "responses": {}}}}});
    let eager = build_api(&doc, &ApiOptions::default(), client(), Secrets::default()).unwrap_err();
    let lazy = LazyApi::new(doc, &ApiOptions::default(), client(), Secrets::default()).unwrap_err();
    assert_eq!(lazy, eager);
}
