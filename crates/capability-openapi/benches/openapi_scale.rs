//! `cargo bench -p capability-openapi --bench openapi_scale`: the OpenAPI scaling curve of
//! issue 31. A home keeps one generated document of 10, 100, 1,000 or 10,000 operations
//! (paths with path, query and header parameters, JSON request bodies, responses whose
//! schemas are `$ref`s into `components`), stored as `cap openapi add` stores it; printed per
//! size:
//!
//! * `openapi/build-api/<n>`: the eager build of the document ([`build_api`]: every operation
//!   imported, its manifest validated and its schemas compiled), what every `Host::open`
//!   did before stored documents were opened lazily;
//! * `openapi/lazy-api/<n>`: [`LazyApi::new`] of the same document (what a host's open does
//!   with it now), and `openapi/lazy-api-one/<n>`: that and the build of one operation;
//! * `openapi/read-entry/<n>`: reading the stored file's bytes back as an entry (the one
//!   cost of a stored document that opening a host cannot avoid);
//! * `openapi/load-home/<n>`: reading the home's documents for serving
//!   (`OpenApiSource::load_home`: that, [`LazyApi::new`] and the check of their ids);
//! * `openapi/open/<n>`: `Host::open` of that home (memory stores, so that only the
//!   capability sources differ from an empty home, `openapi/open/0`);
//! * `openapi/first-use/<n>`: the first governed call of one operation on a freshly opened
//!   host (against a loopback server);
//! * `openapi/later-use/<n>`: a later call of the same operation on the same host;
//! * `openapi/first-list/<n>`: the first listing of every capability on a freshly opened host
//!   (what `tools/list` and the console's list see);
//! * `openapi/first-find/<n>`: the first search of the index on a freshly opened host (what
//!   `cap find` and `cap info` see).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::Instant;

use std::sync::Arc;

use capability_host::{Host, HostConfig, Outcome, Request, Storage};
use capability_openapi::executor::Secrets;
use capability_openapi::store::{Entry, Store};
use capability_openapi::{HttpClient, HttpConfig, LazyApi, Resolver, build_api};
use capability_test_support::measure::{Percentiles, timed};
use serde_json::{Value, json};

mod common;
use common::server;

/// A document of `operations` operations (two per path: a `get` and a `put`).
fn generated(operations: usize, server: &str) -> Value {
    let mut paths = serde_json::Map::new();
    for i in 0..operations / 2 {
        paths.insert(
            format!("/things{i}/{{id}}"),
            json!({
                "parameters": [{"$ref": "#/components/parameters/Id"}],
                "get": {"operationId": format!("getThing{i}"), "summary": format!("Get thing {i}"),
                    "tags": ["things"],
                    "parameters": [{"name": "q", "in": "query", "schema": {"type": "string"}},
                                   {"name": "X-Trace", "in": "header", "schema": {"type": "string"}}],
                    "responses": {
                        "200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
                        "404": {"$ref": "#/components/responses/NotFound"}}},
                "put": {"operationId": format!("putThing{i}"), "summary": format!("Replace thing {i}"),
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
                    "responses": {
                        "200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
                        "400": {"$ref": "#/components/responses/Problem"}}}
            }),
        );
    }
    json!({"openapi": "3.1.0", "info": {"title": "Big", "version": "1.0.0"},
        "servers": [{"url": server}], "paths": paths,
        "components": {
            "parameters": {"Id": {"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}},
            "responses": {
                "NotFound": {"description": "not found", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Problem"}}}},
                "Problem": {"description": "bad request", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Problem"}}}}},
            "schemas": {
                "Thing": {"type": "object", "required": ["id"], "properties": {
                    "id": {"type": "integer"}, "name": {"type": "string"},
                    "tags": {"type": "array", "items": {"$ref": "#/components/schemas/Tag"}},
                    "next": {"$ref": "#/components/schemas/Thing"}}},
                "Tag": {"type": "object", "properties": {"name": {"type": "string"}}},
                "Problem": {"type": "object", "properties": {"title": {"type": "string"}, "status": {"type": "integer"}}}}}})
}

/// The entry `cap openapi add` keeps for a document of `operations` operations.
fn entry(operations: usize, server: &str) -> Entry {
    Entry {
        namespace: "big".into(),
        source: "bench".into(),
        base_url: None,
        auth: Vec::new(),
        allow_private: true,
        document: generated(operations, server),
    }
}

/// A home keeping a document of `operations` operations (none for 0), as `cap openapi add`
/// keeps it.
fn home(operations: usize, server: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let home = capability_host::Home::open(dir.path()).unwrap();
    if operations > 0 {
        Store::new(home.openapi())
            .add(&entry(operations, server))
            .unwrap();
    }
    dir
}

/// Times `f` on its own copy of the document, `runs` times (neither the copy nor dropping
/// what `f` returns is timed).
fn on_document<R>(entry: &Entry, runs: usize, f: impl Fn(Value) -> R) -> Percentiles {
    let mut samples: Vec<u128> = (0..runs)
        .map(|_| {
            let doc = entry.document.clone();
            let t = Instant::now();
            let kept = f(doc);
            let elapsed = t.elapsed().as_nanos();
            drop(kept);
            elapsed
        })
        .collect();
    Percentiles::of(&mut samples)
}

/// The document-level shapes: the eager build against the lazy read (and one operation).
fn documents(entry: &Entry, runs: usize) {
    let n = entry.document["paths"]
        .as_object()
        .map_or(0, |p| p.len() * 2);
    let client = Arc::new(HttpClient::new(HttpConfig::default(), Resolver::System).unwrap());
    let options = entry.options();
    on_document(entry, runs, |doc| {
        let api = build_api(&doc, &options, Arc::clone(&client), Secrets::default()).unwrap();
        assert_eq!(api.operations().len(), n);
        (doc, api)
    })
    .print(&format!("openapi/build-api/{n}"));
    on_document(entry, runs, |doc| {
        let api = LazyApi::new(doc, &options, Arc::clone(&client), Secrets::default()).unwrap();
        assert_eq!((api.ids().len(), api.built_count()), (n, 0));
        api
    })
    .print(&format!("openapi/lazy-api/{n}"));
    on_document(entry, runs, |doc| {
        let api = LazyApi::new(doc, &options, Arc::clone(&client), Secrets::default()).unwrap();
        assert!(api.operation("big/getthing0").unwrap().is_ok());
        assert_eq!(api.built_count(), 1);
        api
    })
    .print(&format!("openapi/lazy-api-one/{n}"));
}

fn open(dir: &Path) -> Host {
    Host::open(HostConfig {
        home: Some(dir.to_path_buf()),
        storage: Storage::Memory,
        ..HostConfig::default()
    })
    .unwrap()
}

/// Times `f` on a freshly opened host (the opening not timed), `runs` times.
fn on_fresh_host(dir: &Path, runs: usize, f: impl Fn(&Host)) -> Percentiles {
    let mut samples: Vec<u128> = (0..runs)
        .map(|_| {
            let host = open(dir);
            let t = Instant::now();
            f(&host);
            let elapsed = t.elapsed().as_nanos();
            drop(host);
            elapsed
        })
        .collect();
    Percentiles::of(&mut samples)
}

fn call(host: &Host) {
    let request = Request {
        approve_effects: true,
        ..Request::new(
            "big/getthing0",
            json!({"path": {"id": 1}, "query": {"q": "x"}}),
        )
    };
    match host.invoke(&request) {
        Outcome::Completed(done) => {
            assert_eq!(done.receipt.output, Some(json!({"id": 1, "name": "x"})))
        }
        other => panic!("{other:?}"),
    }
}

fn main() {
    let server = format!("http://{}", server());
    for operations in [0, 10, 100, 1_000, 10_000] {
        let dir = home(operations, &server);
        let runs = if operations >= 10_000 { 10 } else { 30 };
        if operations > 0 {
            documents(&entry(operations, &server), runs);
            let stored = capability_host::Home::open(dir.path()).unwrap().openapi();
            let bytes = std::fs::read(stored.join("big.json")).unwrap();
            let mut samples: Vec<u128> = (0..runs)
                .map(|_| {
                    let t = Instant::now();
                    let entry = Entry::read(&bytes).unwrap();
                    let elapsed = t.elapsed().as_nanos();
                    drop(entry);
                    elapsed
                })
                .collect();
            Percentiles::of(&mut samples).print(&format!("openapi/read-entry/{operations}"));
            let home = capability_host::Home::open(dir.path()).unwrap();
            let mut samples: Vec<u128> = (0..runs)
                .map(|_| {
                    let t = Instant::now();
                    let loaded = capability_host::OpenApiSource::load_home(&home);
                    let elapsed = t.elapsed().as_nanos();
                    assert_eq!(loaded.sources.len(), 1);
                    drop(loaded);
                    elapsed
                })
                .collect();
            Percentiles::of(&mut samples).print(&format!("openapi/load-home/{operations}"));
        }
        let mut samples: Vec<u128> = (0..runs)
            .map(|_| {
                let t = Instant::now();
                let host = open(dir.path());
                let elapsed = t.elapsed().as_nanos();
                drop(host);
                elapsed
            })
            .collect();
        Percentiles::of(&mut samples).print(&format!("openapi/open/{operations}"));
        if operations == 0 {
            continue;
        }
        on_fresh_host(dir.path(), runs, call).print(&format!("openapi/first-use/{operations}"));
        let host = open(dir.path());
        call(&host);
        timed(20, 200, || call(&host)).print(&format!("openapi/later-use/{operations}"));
        drop(host);
        on_fresh_host(dir.path(), runs, |host| {
            assert!(host.capabilities().len() >= operations);
        })
        .print(&format!("openapi/first-list/{operations}"));
        on_fresh_host(dir.path(), runs, |host| {
            let query = capability_core::discovery::DiscoveryQuery::text("thing 0");
            assert!(!host.find(&query).is_empty());
        })
        .print(&format!("openapi/first-find/{operations}"));
    }
}
