//! A home that keeps an OpenAPI document opens without building any of its operations:
//! each is built (imported, its manifest validated, its schemas compiled) the first time it
//! is looked up, and kept; an operation that cannot be built fails alone, when it is used.

use capability_core::ErrorCode;
use capability_core::discovery::DiscoveryQuery;
use capability_host::openapi::store::{Entry, Store};
use capability_host::{Host, HostConfig, OpenApiSource, Outcome, Request, Storage};
use capability_runtime::source::CapabilitySource;
use serde_json::{Value, json};

/// Operations `op0`…`op<n-1>` (`GET /op<i>`, answering `{"ok": true}` against a schema in
/// `components`), and `broken`, whose response schema is a `$ref` to nothing: it cannot be
/// built.
fn document(server: &str, n: usize) -> Value {
    let mut paths = serde_json::Map::new();
    let ok = json!({"200": {"description": "ok", "content": {"application/json":
        {"schema": {"$ref": "#/components/schemas/Ok"}}}}});
    for i in 0..n {
        paths.insert(
            format!("/op{i}"),
            json!({"get": {"operationId": format!("op{i}"), "summary": format!("Operation {i}"),
                "responses": ok}}),
        );
    }
    paths.insert(
        "/broken".into(),
        json!({"get": {"operationId": "broken", "responses": {"200": {"description": "ok",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Missing"}}}}}}}),
    );
    json!({"openapi": "3.1.0", "info": {"title": "Lazy", "version": "2.0.0"},
        "servers": [{"url": server}], "paths": paths,
        "components": {"schemas": {"Ok": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}}})
}

/// A server that answers every `GET /op<i>` with `{"ok": true}`.
fn server() -> String {
    let app = axum::Router::new().route(
        "/{op}",
        axum::routing::get(|| async {
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                r#"{"ok":true}"#,
            )
        }),
    );
    format!("http://{}", capability_test_support::http::spawn(app))
}

const N: usize = 200;

/// A home keeping the document of [`N`] operations (and `broken`) under `lazy`.
fn home() -> (tempfile::TempDir, Entry) {
    let dir = tempfile::tempdir().unwrap();
    let home = capability_host::Home::open(&dir.path().join("home")).unwrap();
    let entry = Entry {
        namespace: "lazy".into(),
        source: "test".into(),
        base_url: None,
        auth: Vec::new(),
        allow_private: true,
        document: document(&server(), N),
    };
    Store::new(home.openapi()).add(&entry).unwrap();
    (dir, entry)
}

fn open(dir: &std::path::Path) -> Host {
    Host::open(HostConfig {
        home: Some(dir.join("home")),
        storage: Storage::Memory,
        ..HostConfig::default()
    })
    .unwrap()
}

fn call(host: &Host, id: &str) -> Outcome {
    host.invoke(&Request {
        approve_effects: true,
        ..Request::new(id, json!({}))
    })
}

#[test]
fn a_stored_document_opens_without_building_its_operations() {
    let (dir, entry) = home();
    // Built eagerly (as `cap openapi add` does), the document is refused for `broken`: a
    // host that built every operation could not serve it.
    let eager = OpenApiSource::build(&entry, None).unwrap_err();
    assert!(eager.message.contains("Missing"), "{}", eager.message);

    let host = open(dir.path());
    let registry = host.runtime().registry();
    assert!(registry.contains("lazy/op0") && registry.contains("lazy/broken"));
    assert_eq!(registry.unbuilt(), N + 1, "opening builds no operation");

    // A call builds its operation, and only it; a later call finds it built.
    for _ in 0..2 {
        let Outcome::Completed(done) = call(&host, "lazy/op0") else {
            panic!("lazy/op0 did not run")
        };
        assert_eq!(done.receipt.output, Some(json!({"ok": true})));
        assert_eq!(registry.unbuilt(), N);
    }
    // Describing one builds that one.
    let inspected = host.inspect("lazy/op7").unwrap();
    assert_eq!(inspected["id"], "lazy/op7", "{inspected}");
    assert_eq!(registry.unbuilt(), N - 1);

    // The operation that cannot be built fails alone, with why, every time.
    for _ in 0..2 {
        let Outcome::Failed(e) = call(&host, "lazy/broken") else {
            panic!("lazy/broken ran")
        };
        assert_eq!(e.code, ErrorCode::InvalidManifest, "{e:?}");
        assert!(
            e.message.contains("openapi lazy") && e.message.contains("Missing"),
            "{}",
            e.message
        );
    }
    assert_eq!(registry.unbuilt(), N - 2);
    let Outcome::Completed(_) = call(&host, "lazy/op1") else {
        panic!("lazy/op1 did not run")
    };

    // Discovery reads the index entries when first asked (the broken operation has none);
    // listing builds the rest.
    let hits = host.find(&DiscoveryQuery::text("Operation 150"));
    assert_eq!(hits[0].item.manifest.id, "lazy/op150");
    assert_eq!(hits[0].item.package_name, "openapi:lazy");
    assert_eq!(hits[0].item.package_version, "2.0.0");
    let entries = host.index_entries();
    let lazy: Vec<&str> = entries
        .iter()
        .map(|e| e.manifest.id.as_str())
        .filter(|id| id.starts_with("lazy/"))
        .collect();
    assert_eq!(lazy.len(), N);
    assert!(!lazy.contains(&"lazy/broken"));
    assert_eq!(host.resolve("lazy/op9").unwrap(), "lazy/op9");
    let listed = host
        .capabilities()
        .iter()
        .filter(|c| c.id().starts_with("lazy/"))
        .count();
    assert_eq!(listed, N, "every operation but the broken one");
    assert_eq!(registry.unbuilt(), 0);
    // What policies talk about has every operation, built or not when it was asked.
    let governed = host.governed_capabilities(&[]);
    assert!(governed.exists("lazy/op42") && !governed.exists("lazy/broken"));
}

#[test]
fn the_policies_see_operations_never_called() {
    let (dir, _) = home();
    let host = open(dir.path());
    let governed = host.governed_capabilities(&[]);
    let op = governed.get("lazy/op3").unwrap();
    assert_eq!(op.name, "lazy/op3");
}

#[test]
fn a_document_source_builds_one_operation_when_asked_for_it() {
    let (dir, _) = home();
    let home = capability_host::Home::open(&dir.path().join("home")).unwrap();
    let loaded = OpenApiSource::load_home(&home);
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let [source] = loaded.sources.as_slice() else {
        panic!("{} sources", loaded.sources.len())
    };
    assert_eq!(source.api().ids().len(), N + 1);
    assert_eq!(source.api().built_count(), 0, "reading builds nothing");
    assert_eq!(source.deferred_ids().map(|ids| ids.len()), Some(N + 1));
    let capability = source.capability("lazy/op5").unwrap();
    assert_eq!(capability.id(), "lazy/op5");
    assert_eq!(source.api().built_count(), 1);
    source.capability("lazy/op5").unwrap();
    assert_eq!(source.api().built_count(), 1, "kept");
    assert_eq!(
        source.capability("lazy/nope").unwrap_err().code,
        ErrorCode::NotFound
    );
    assert!(source.capabilities().is_err(), "broken cannot be built");
}
