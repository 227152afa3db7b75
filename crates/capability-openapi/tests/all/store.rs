//! Documents kept in a home (`cap openapi add`): what cannot be served is refused at `add`
//! (operations that would share a capability id, a document nested deeper than the store
//! reads back), what the reader accepts is kept and read back, and a stored file that is
//! damaged or conflicts with another never stops the other documents from being found and
//! executed when a host opens the home.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use capability_core::discovery::DiscoveryQuery;
use capability_host::{Host, HostConfig, Outcome, Request, Storage};
use capability_openapi::executor::Secrets;
use capability_openapi::store::{Entry, Store, StoreError};
use capability_openapi::{HttpClient, HttpConfig, Resolver, build_api, parse_document};
use serde_json::{Value, json};

use crate::request_target::recorder;

fn ok() -> Value {
    json!({"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}})
}

/// A document whose operations have the given ids (`None`: no `operationId`), each under
/// its own path.
fn document(server: &str, ids: &[Option<&str>]) -> Value {
    let mut paths = serde_json::Map::new();
    for (i, id) in ids.iter().enumerate() {
        let mut op = json!({"responses": ok()});
        if let Some(id) = id {
            op["operationId"] = json!(id);
        }
        paths.insert(format!("/op{i}"), json!({"get": op}));
    }
    json!({"openapi": "3.1.0", "info": {"title": "Pets", "version": "1.0.0"},
        "servers": [{"url": server}], "paths": paths})
}

fn entry(namespace: &str, document: Value) -> Entry {
    Entry {
        namespace: namespace.into(),
        source: "test".into(),
        base_url: None,
        auth: Vec::new(),
        allow_private: true,
        document,
    }
}

/// What `cap openapi add` runs before it keeps a document: the operations built.
fn build(entry: &Entry) -> Result<capability_openapi::Api, capability_openapi::ImportError> {
    let client = HttpClient::new(HttpConfig::default(), Resolver::System).unwrap();
    build_api(
        &entry.document,
        &entry.options(),
        std::sync::Arc::new(client),
        Secrets::default(),
    )
}

#[test]
fn operation_ids_that_map_to_one_capability_id_are_refused_at_add() {
    for (a, b, id) in [
        ("listPets", "ListPets", "pets/listpets"),
        ("list pets", "list-pets", "pets/list-pets"),
        ("LIST_PETS", "list_pets", "pets/list_pets"),
    ] {
        let e = entry(
            "pets",
            document("http://127.0.0.1:9", &[Some(a), Some("other"), Some(b)]),
        );
        let err = build(&e).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains(&format!("{a:?}"))
                && message.contains(&format!("{b:?}"))
                && message.contains(id),
            "{message}"
        );
        // What `cap openapi add` runs (and the host at open): the same refusal.
        let open = capability_host::OpenApiSource::open(e, None).unwrap_err();
        assert!(open.message.contains(&format!("{a:?}")), "{}", open.message);
    }
    // Without an operationId the id comes from the method and path: `get-/a/b` and
    // `get-/a-b` are both `get-a-b`.
    let doc = json!({"openapi": "3.1.0", "info": {"title": "P", "version": "1.0.0"},
        "servers": [{"url": "http://127.0.0.1:9"}],
        "paths": {"/a/b": {"get": {"responses": ok()}}, "/a-b": {"get": {"responses": ok()}}}});
    let message = build(&entry("p", doc)).unwrap_err().to_string();
    assert!(
        message.contains("\"get-/a/b\"") && message.contains("\"get-/a-b\""),
        "{message}"
    );
    // Ids that differ after the mapping are served.
    let api = build(&entry(
        "pets",
        document("http://127.0.0.1:9", &[Some("listPets"), Some("listPet")]),
    ))
    .unwrap();
    assert_eq!(api.operations().len(), 2);
}

/// `n` arrays nested under `x-deep` of a small valid document, as JSON text.
fn nested_text(n: usize) -> String {
    let doc = document("http://127.0.0.1:9", &[Some("ping")]);
    let mut text = doc.to_string();
    text.pop();
    format!("{text},\"x-deep\":{}1{}}}", "[".repeat(n), "]".repeat(n))
}

/// `n` arrays nested under `x-deep` of a small valid document, built as a value (as an
/// embedder may hand one to the store).
fn nested_value(n: usize) -> Value {
    let mut deep = json!(1);
    for _ in 0..n {
        deep = json!([deep]);
    }
    let mut doc = document("http://127.0.0.1:9", &[Some("ping")]);
    doc["x-deep"] = deep;
    doc
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn the_deepest_document_the_reader_accepts_is_kept_and_read_back() {
    // The deepest document `cap openapi add` can read (JSON and YAML).
    let deepest = (1..400)
        .take_while(|n| parse_document(nested_text(*n).as_bytes()).is_ok())
        .last()
        .unwrap();
    assert!(deepest >= 120, "{deepest}");
    let yaml = |n: usize| {
        format!(
            "openapi: 3.1.0\ninfo: {{title: Pets, version: 1.0.0}}\nservers: [{{url: 'http://127.0.0.1:9'}}]\npaths: {{}}\nx-deep: {}1{}\n",
            "[".repeat(n),
            "]".repeat(n)
        )
    };
    let deepest_yaml = (1..400)
        .take_while(|n| parse_document(yaml(*n).as_bytes()).is_ok())
        .last()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path().join("openapi"));
    for (namespace, text) in [("json", nested_text(deepest)), ("yaml", yaml(deepest_yaml))] {
        let doc = parse_document(text.as_bytes()).unwrap();
        let kept = entry(namespace, doc);
        build(&kept).unwrap();
        store.add(&kept).unwrap();
        let read = store
            .list()
            .unwrap()
            .into_iter()
            .find(|e| e.namespace == namespace)
            .unwrap();
        assert_eq!(read, kept, "{namespace}: read back as kept");
    }
}

#[test]
fn a_document_nested_deeper_than_the_store_reads_is_refused_at_add() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::new(dir.path().join("openapi"));
    store.add(&entry("before", nested_value(3))).unwrap();
    for depth in [200, 1000] {
        let deep = entry("deep", nested_value(depth));
        let e = store.add(&deep).unwrap_err();
        assert!(
            matches!(&e, StoreError::Unreadable { namespace, .. } if namespace == "deep"),
            "{e:?}"
        );
        assert!(e.to_string().contains("could not be read back"), "{e}");
        assert!(e.to_string().contains("nesting deeper than"), "{e}");
    }
    // Nothing was written (not even a temporary file), and the store still reads.
    assert_eq!(files(&dir.path().join("openapi")), ["before.json"]);
    let listed: Vec<String> = store
        .list()
        .unwrap()
        .into_iter()
        .map(|e| e.namespace)
        .collect();
    assert_eq!(listed, ["before"]);
}

/// A home with a served document `good` (one operation, `good/ping`, against a loopback
/// server) and the given files written straight into its store.
fn home_with(damaged: &[(&str, String)]) -> (tempfile::TempDir, String) {
    let (addr, _) = recorder();
    let dir = tempfile::tempdir().unwrap();
    let home = capability_host::Home::open(dir.path()).unwrap();
    let server = format!("http://{addr}");
    let good = entry("good", document(&server, &[Some("ping")]));
    Store::new(home.openapi()).add(&good).unwrap();
    for (name, text) in damaged {
        std::fs::write(home.openapi().join(name), text).unwrap();
    }
    (dir, server)
}

fn open(dir: &Path) -> Host {
    Host::open(HostConfig {
        home: Some(dir.to_path_buf()),
        storage: Storage::Memory,
        ..HostConfig::default()
    })
    .unwrap_or_else(|e| panic!("the host does not open: {e}"))
}

/// `good/ping` is found and runs.
fn assert_good_is_served(host: &Host) {
    let hits = host.find(&DiscoveryQuery::text("ping"));
    assert!(
        hits.iter().any(|h| h.item.manifest.id == "good/ping"),
        "{:?}",
        hits.iter().map(|h| &h.item.manifest.id).collect::<Vec<_>>()
    );
    let request = Request {
        approve_effects: true,
        ..Request::new("good/ping", json!({}))
    };
    let outcome = host.invoke(&request);
    let Outcome::Completed(done) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(done.receipt.output, Some(json!({"ok": true})));
}

#[test]
fn a_damaged_stored_document_does_not_stop_the_others() {
    let collision = json!({"namespace": "clash", "source": "test", "allowPrivate": true,
        "document": document("http://127.0.0.1:9", &[Some("listPets"), Some("ListPets")])});
    let too_deep = format!(
        "{{\"namespace\": \"deep\", \"document\": {}1{}}}",
        "[".repeat(300),
        "]".repeat(300)
    );
    let damaged = [
        // Sorted before and after `good.json`: no order saves the others.
        (
            "a-truncated.json".to_string(),
            "{\"namespace\": \"a\", \"docu".to_string(),
        ),
        ("b-not-an-entry.json".to_string(), "[1, 2, 3]".to_string()),
        ("c-clash.json".to_string(), collision.to_string()),
        ("d-deep.json".to_string(), too_deep),
        (
            "e-bad-secret.json".to_string(),
            json!({"namespace": "e", "auth": {"k": "nope:x"}, "document": {}}).to_string(),
        ),
        (
            "z-not-openapi.json".to_string(),
            json!({"namespace": "z", "document": {"swagger": "2.0"}}).to_string(),
        ),
        (
            "zz-binary.json".to_string(),
            String::from_utf8_lossy(&[0xff, 0xfe, 0]).into_owned(),
        ),
    ];
    let files: Vec<(&str, String)> = damaged
        .iter()
        .map(|(n, t)| (n.as_str(), t.clone()))
        .collect();
    let (dir, _) = home_with(&files);
    let host = open(dir.path());
    assert_good_is_served(&host);

    // Each file left out is a problem naming it.
    let home = capability_host::Home::open(dir.path()).unwrap();
    let loaded = capability_host::sources::OpenApiSource::load_home(&home);
    assert_eq!(loaded.sources.len(), 1);
    for (name, _) in &damaged {
        assert!(
            loaded
                .problems
                .iter()
                .any(|(what, _)| what.ends_with(name.as_str())),
            "{name}: {:?}",
            loaded.problems
        );
    }
    let clash = loaded
        .problems
        .iter()
        .find(|(what, _)| what.ends_with("c-clash.json"))
        .unwrap();
    assert!(
        clash.1.contains("\"listPets\"") && clash.1.contains("\"ListPets\""),
        "{clash:?}"
    );
}

#[test]
fn a_stored_document_that_repeats_another_documents_ids_is_left_out() {
    let (dir, server) = home_with(&[]);
    let home = capability_host::Home::open(dir.path()).unwrap();
    let kept = std::fs::read(home.openapi().join("good.json")).unwrap();
    // A copy of `good.json` under another name (a backup, a hand edit), sorted before it:
    // the same ids. The file `add` wrote for the namespace is the one served.
    std::fs::write(home.openapi().join("good-copy.json"), &kept).unwrap();
    // A hand-written entry may name any namespace: `Ping` is `good/ping` again.
    let mut other = serde_json::from_slice::<Value>(&kept).unwrap();
    other["document"] = document(&server, &[Some("Ping"), Some("pong")]);
    std::fs::write(home.openapi().join("other.json"), other.to_string()).unwrap();

    let host = open(dir.path());
    assert_good_is_served(&host);
    let ids: Vec<String> = host
        .capabilities()
        .iter()
        .map(|c| c.id().to_string())
        .filter(|id| id.starts_with("good/"))
        .collect();
    assert_eq!(ids, ["good/ping"], "one document serves good/*");
    let loaded = capability_host::sources::OpenApiSource::load_home(&home);
    let left_out: Vec<&str> = loaded.problems.iter().map(|(w, _)| w.as_str()).collect();
    assert_eq!(left_out.len(), 2, "{left_out:?}");
    assert!(left_out[0].ends_with("good-copy.json"), "{left_out:?}");
    assert!(left_out[1].ends_with("other.json"), "{left_out:?}");
    for (_, problem) in &loaded.problems {
        assert!(
            problem.contains("good/ping is already served by openapi")
                && problem.ends_with("good.json"),
            "{problem}"
        );
    }
}
