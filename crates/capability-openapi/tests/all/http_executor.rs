//! Operations executed through the governed runtime against the project's own HTTP server on
//! 127.0.0.1: parameters and bodies, response validation, credentials (injected, never
//! recorded), destinations checked after DNS resolution, same-origin redirects, the size
//! limit, the timeout and idempotent retries.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use capability_core::authorization::EffectPolicy;
use capability_core::{CapabilityError, ErrorCode};
use capability_openapi::executor::Secrets;
use capability_openapi::{ApiOptions, HttpClient, HttpConfig, Resolver, SecretRef, build_api};
use capability_runtime::capability::Capability;
use capability_runtime::{CapabilityRuntime, ExecuteOptions};
use serde_json::{Value, json};

const SECRET: &str = "s3cr3t-token-value";

#[derive(Default)]
struct Hits {
    flaky_get: AtomicUsize,
    flaky_post: AtomicUsize,
    other_origin: AtomicUsize,
}

fn json_response(status: StatusCode, v: Value) -> axum::response::Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

/// The test server; a second listener on another port is "another origin".
fn server() -> (SocketAddr, SocketAddr, Arc<Hits>) {
    let hits = Arc::new(Hits::default());
    let (tx, rx) = std::sync::mpsc::channel();
    let h = Arc::clone(&hits);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let main = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let (main_addr, other_addr) = (main.local_addr().unwrap(), other.local_addr().unwrap());
            let other_app = axum::Router::new()
                .fallback(|State(h): State<Arc<Hits>>| async move {
                    h.other_origin.fetch_add(1, Ordering::SeqCst);
                    json_response(StatusCode::OK, json!({"id": 1, "name": "elsewhere"}))
                })
                .with_state(Arc::clone(&h));
            let app = axum::Router::new()
                .route(
                    "/pets/{id}",
                    get(|Path(id): Path<String>, RawQuery(q): RawQuery, headers: HeaderMap| async move {
                        let n: i64 = id.parse().unwrap_or(-1);
                        json_response(StatusCode::OK, json!({"id": n, "name": "Rex",
                            "query": q.unwrap_or_default(),
                            "trace": headers.get("x-trace").and_then(|v| v.to_str().ok()),
                            "cookie": headers.get("cookie").and_then(|v| v.to_str().ok())}))
                    })
                    .delete(|| async { StatusCode::NO_CONTENT.into_response() }),
                )
                .route(
                    "/pets",
                    axum::routing::post(|body: String| async move {
                        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                        json_response(StatusCode::CREATED, json!({"id": 9, "name": v["name"]}))
                    }),
                )
                .route(
                    "/secure",
                    get(|headers: HeaderMap| async move {
                        let key = headers.get("x-api-key").and_then(|v| v.to_str().ok()).unwrap_or("");
                        if key != SECRET {
                            return json_response(StatusCode::UNAUTHORIZED, json!({"error": "no key"}));
                        }
                        // A careless server that echoes the credential back.
                        json_response(StatusCode::OK, json!({"id": 1, "name": format!("hello {key}")}))
                    }),
                )
                .route(
                    "/secure-fail",
                    get(|headers: HeaderMap| async move {
                        let key = headers.get("x-api-key").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                        (StatusCode::INTERNAL_SERVER_ERROR, format!("bad key {key}")).into_response()
                    }),
                )
                .route("/wrong", get(|| async { json_response(StatusCode::OK, json!({"id": "seven"})) }))
                .route("/same", get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/pets/5")]).into_response() }))
                .route(
                    "/away",
                    get(move || async move {
                        (StatusCode::FOUND, [(header::LOCATION, format!("http://{other_addr}/pets/1"))]).into_response()
                    }),
                )
                .route("/big", get(|| async { json_response(StatusCode::OK, json!({"id": 1, "name": "x".repeat(300_000)})) }))
                .route(
                    "/slow",
                    get(|| async {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        json_response(StatusCode::OK, json!({"id": 1, "name": "late"}))
                    }),
                )
                .route(
                    "/flaky",
                    get(|State(h): State<Arc<Hits>>| async move {
                        if h.flaky_get.fetch_add(1, Ordering::SeqCst) < 2 {
                            return StatusCode::SERVICE_UNAVAILABLE.into_response();
                        }
                        json_response(StatusCode::OK, json!({"id": 1, "name": "finally"}))
                    })
                    .post(|State(h): State<Arc<Hits>>| async move {
                        h.flaky_post.fetch_add(1, Ordering::SeqCst);
                        StatusCode::SERVICE_UNAVAILABLE.into_response()
                    }),
                )
                .with_state(h);
            tx.send((main_addr, other_addr)).unwrap();
            tokio::spawn(async move { axum::serve(other, other_app).await });
            axum::serve(main, app).await.unwrap();
        });
    });
    let (main, other) = rx.recv().unwrap();
    (main, other, hits)
}

fn pet() -> Value {
    json!({"type": "object", "required": ["id", "name"],
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}})
}

fn ok(schema: Value) -> Value {
    json!({"200": {"description": "ok", "content": {"application/json": {"schema": schema}}}})
}

fn document(server: &str) -> Value {
    let simple = |id: &str| json!({"get": {"operationId": id, "responses": ok(json!({"$ref": "#/components/schemas/Pet"}))}});
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Test", "version": "1.0.0"},
        "servers": [{"url": server}],
        "paths": {
            "/pets/{id}": {
                "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
                "get": {"operationId": "getPet", "parameters": [
                    {"name": "tags", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
                    {"name": "filter", "in": "query", "style": "deepObject", "explode": true, "schema": {"type": "object"}},
                    {"name": "X-Trace", "in": "header", "schema": {"type": "string"}},
                    {"name": "session", "in": "cookie", "schema": {"type": "string"}}],
                    "responses": ok(json!({"type": "object", "required": ["id", "name"],
                        "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}}))},
                "delete": {"operationId": "deletePet", "responses": {"204": {"description": "gone"}}}
            },
            "/pets": {"post": {"operationId": "createPet",
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["name"], "properties": {"name": {"type": "string", "minLength": 1}}}}}},
                "responses": {"201": {"description": "created", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}}}}}},
            "/secure": {"get": {"operationId": "secure", "security": [{"key": []}], "responses": ok(json!({"$ref": "#/components/schemas/Pet"}))}},
            "/secure-fail": {"get": {"operationId": "secureFail", "security": [{"key": []}], "responses": ok(json!({}))}},
            "/wrong": simple("wrong"),
            "/same": simple("same"),
            "/away": simple("away"),
            "/big": simple("big"),
            "/slow": simple("slow"),
            "/flaky": {"get": {"operationId": "flakyGet", "responses": ok(json!({"$ref": "#/components/schemas/Pet"}))},
                       "post": {"operationId": "flakyPost", "responses": ok(json!({}))}}
        },
        "components": {
            "schemas": {"Pet": pet()},
            "securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "X-API-Key"}}
        }
    })
}

struct Fixture {
    runtime: CapabilityRuntime,
    hits: Arc<Hits>,
    addr: SocketAddr,
}

fn fixture_with(
    doc: Value,
    config: HttpConfig,
    resolver: Resolver,
    base_url: Option<String>,
) -> (CapabilityRuntime, capability_openapi::Api) {
    let client = Arc::new(HttpClient::new(config, resolver).unwrap());
    let options = ApiOptions {
        auth: vec![("key".into(), SecretRef::Named("test-key".into()))],
        base_url,
        ..Default::default()
    };
    // The named secret lives in a secrets file, as in a capability home.
    let dir = tempfile::tempdir().unwrap().keep();
    let file = dir.join("secrets.json");
    std::fs::write(&file, json!({"test-key": SECRET}).to_string()).unwrap();
    let api = build_api(&doc, &options, client, Secrets { file: Some(file) }).unwrap();
    let runtime = CapabilityRuntime::builder()
        .policy(EffectPolicy::permissive())
        .build();
    for op in api.operations() {
        let executor: Arc<dyn capability_runtime::executor::Executor> = op.clone();
        runtime
            .register(Capability::with_executor(&op.manifest, executor).unwrap())
            .unwrap();
    }
    (runtime, api)
}

fn fixture() -> Fixture {
    let (addr, _, hits) = server();
    let config = HttpConfig {
        timeout: Duration::from_millis(800),
        max_response_bytes: 100_000,
        retry_backoff: Duration::from_millis(10),
        ..HttpConfig::default()
    };
    let (runtime, _) = fixture_with(
        document(&format!("http://{addr}")),
        config,
        Resolver::System,
        None,
    );
    Fixture {
        runtime,
        hits,
        addr,
    }
}

fn run(
    f: &Fixture,
    id: &str,
    input: Value,
) -> Result<Arc<capability_core::receipt::Receipt>, CapabilityError> {
    f.runtime
        .invoke(&format!("test/{id}"), input, &ExecuteOptions::approved())
}

/// What the call failed with: the named error the runtime wraps (`details.cause.message`), or
/// the error's own message.
fn cause(e: &CapabilityError) -> String {
    e.details
        .as_ref()
        .and_then(|d| d.pointer("/cause/message"))
        .and_then(Value::as_str)
        .map_or_else(|| e.message.clone(), String::from)
}

fn failed_receipt(f: &Fixture, e: &CapabilityError) -> Value {
    let id = e
        .receipt_id
        .as_deref()
        .unwrap_or_else(|| panic!("no receipt for {e:?}"));
    serde_json::to_value(f.runtime.store().get(id).unwrap().unwrap().as_ref()).unwrap()
}

#[test]
fn parameters_are_serialized_with_their_styles_and_the_plan_shows_the_exact_request() {
    let f = fixture();
    let input = json!({"path": {"id": 42}, "query": {"tags": ["a b", "c"], "filter": {"kind": "dog"}},
        "headers": {"X-Trace": "t-1"}, "cookies": {"session": "abc"}});
    let plan = f.runtime.plan("test/getpet", input.clone()).unwrap();
    let data = plan.data.clone().unwrap();
    assert_eq!(
        data["path"],
        json!({"id": 42}),
        "the reference plan data is kept"
    );
    let url = format!(
        "http://{}/pets/42?tags=a%20b&tags=c&filter%5Bkind%5D=dog",
        f.addr
    );
    assert_eq!(data["request"]["method"], "GET");
    assert_eq!(data["request"]["url"], url);
    assert_eq!(data["request"]["headers"], json!({"X-Trace": "t-1"}));
    assert_eq!(plan.summary, "GET /pets/{id}");
    assert_eq!(plan.effects, vec!["network.connect".to_string()]);

    let receipt = run(&f, "getpet", input).unwrap();
    let out = receipt.output.clone().unwrap();
    assert_eq!(out["id"], 42);
    assert_eq!(out["query"], "tags=a%20b&tags=c&filter%5Bkind%5D=dog");
    assert_eq!(out["trace"], "t-1");
    assert_eq!(out["cookie"], "session=abc");
    let isolation = receipt.isolation.clone().unwrap();
    assert_eq!(isolation["boundary"], "http");
    assert_eq!(isolation["response"]["status"], 200);
    assert_eq!(isolation["request"]["url"], url);
}

#[test]
fn a_json_body_is_sent_and_an_invalid_one_is_refused_before_sending() {
    let f = fixture();
    let receipt = run(&f, "createpet", json!({"body": {"name": "Kit"}})).unwrap();
    assert_eq!(
        receipt.output.clone().unwrap(),
        json!({"id": 9, "name": "Kit"})
    );
    let e = run(&f, "createpet", json!({"body": {"name": ""}})).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidInput);
    assert!(e.receipt_id.is_none(), "nothing was executed");
    let e = run(&f, "getpet", json!({"path": {"id": "seven"}})).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidInput);
}

#[test]
fn a_response_that_breaks_the_documents_schema_is_refused() {
    let f = fixture();
    let e = run(&f, "wrong", json!({})).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidOutput, "{e:?}");
}

#[test]
fn credentials_are_injected_and_never_recorded() {
    let f = fixture();
    let plan = f.runtime.plan("test/secure", json!({})).unwrap();
    assert_eq!(
        plan.effects,
        vec!["network.connect".to_string(), "secrets.read".to_string()]
    );
    let plan_text = serde_json::to_string(&plan).unwrap();
    assert!(
        plan_text.contains("X-API-Key") && !plan_text.contains(SECRET),
        "{plan_text}"
    );

    let receipt = run(&f, "secure", json!({})).unwrap();
    assert_eq!(
        receipt.output.clone().unwrap()["name"],
        "hello [redacted]",
        "the server saw the key and echoed it"
    );
    let text = serde_json::to_string(receipt.as_ref()).unwrap();
    assert!(!text.contains(SECRET), "{text}");

    let e = run(&f, "securefail", json!({})).unwrap_err();
    assert!(
        cause(&e).starts_with("HTTP 500: bad key [redacted]"),
        "{e:?}"
    );
    let failed = serde_json::to_string(&failed_receipt(&f, &e)).unwrap();
    assert!(
        !failed.contains(SECRET) && !format!("{e:?}").contains(SECRET),
        "{failed}"
    );
}

#[test]
fn redirects_are_followed_only_within_the_origin() {
    let f = fixture();
    let receipt = run(&f, "same", json!({})).unwrap();
    assert_eq!(receipt.output.clone().unwrap()["id"], 5);
    assert_eq!(receipt.isolation.clone().unwrap()["redirects"], 1);
    let e = run(&f, "away", json!({})).unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert!(
        cause(&e).contains("redirect to another origin not followed"),
        "{e:?}"
    );
    assert_eq!(f.hits.other_origin.load(Ordering::SeqCst), 0);
}

#[test]
fn oversized_and_slow_responses_are_cut() {
    let f = fixture();
    let e = run(&f, "big", json!({})).unwrap_err();
    assert!(
        cause(&e).contains("exceeds the limit of 100000 bytes"),
        "{e:?}"
    );
    let started = Instant::now();
    let e = run(&f, "slow", json!({})).unwrap_err();
    assert!(cause(&e).contains("timed out after 800 ms"), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    // The caller's tighter limit wins.
    let options = ExecuteOptions {
        timeout: Some(Duration::from_millis(200)),
        ..ExecuteOptions::approved()
    };
    let e = f
        .runtime
        .invoke("test/slow", json!({}), &options)
        .unwrap_err();
    assert!(cause(&e).contains("timed out after 200 ms"), "{e:?}");
}

#[test]
fn only_idempotent_methods_are_retried() {
    let f = fixture();
    let receipt = run(&f, "flakyget", json!({})).unwrap();
    assert_eq!(receipt.isolation.clone().unwrap()["attempts"], 3);
    assert_eq!(f.hits.flaky_get.load(Ordering::SeqCst), 3);
    let e = run(&f, "flakypost", json!({})).unwrap_err();
    assert!(cause(&e).starts_with("HTTP 503"), "{e:?}");
    assert_eq!(f.hits.flaky_post.load(Ordering::SeqCst), 1);
}

#[test]
fn names_are_checked_after_dns_resolution() {
    let (addr, _, _) = server();
    let name = format!("http://api.example.test:{}", addr.port());
    let resolver = Resolver::Static(BTreeMap::from([(
        "api.example.test".into(),
        vec![addr.ip()],
    )]));
    let (runtime, _) = fixture_with(
        document(&name),
        HttpConfig::default(),
        resolver.clone(),
        None,
    );
    let e = runtime
        .invoke(
            "test/getpet",
            json!({"path": {"id": 1}}),
            &ExecuteOptions::approved(),
        )
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert!(
        cause(&e).contains("resolves to 127.0.0.1, which is not a public address"),
        "{e:?}"
    );
    // A source added for an intranet API may reach private addresses.
    let config = HttpConfig {
        allow_private: true,
        ..HttpConfig::default()
    };
    let (runtime, _) = fixture_with(document(&name), config, resolver, None);
    let receipt = runtime
        .invoke(
            "test/getpet",
            json!({"path": {"id": 1}}),
            &ExecuteOptions::approved(),
        )
        .unwrap();
    assert_eq!(receipt.output.clone().unwrap()["id"], 1);
}

#[test]
fn the_base_url_replaces_the_documents_server() {
    let (addr, _, _) = server();
    let (runtime, api) = fixture_with(
        document("https://unreachable.example.test"),
        HttpConfig::default(),
        Resolver::System,
        Some(format!("http://{addr}")),
    );
    assert_eq!(api.server.as_str(), format!("http://{addr}/"));
    let receipt = runtime
        .invoke(
            "test/getpet",
            json!({"path": {"id": 3}}),
            &ExecuteOptions::approved(),
        )
        .unwrap();
    assert_eq!(receipt.output.clone().unwrap()["id"], 3);
}

/// A minimal HTTP/1.1 server on 127.0.0.1 that counts the connections it accepts and
/// answers every request with `ok`; with `close_after_each` it closes each connection after
/// its first response (without saying so, as a server whose keep-alive timed out).
fn counting_server(close_after_each: bool) -> (SocketAddr, Arc<AtomicUsize>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            count.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    writer
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .unwrap();
                    if close_after_each {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

fn post_ok(client: &HttpClient, addr: SocketAddr) {
    use capability_openapi::http::{Outgoing, origin_of};
    let url = url::Url::parse(&format!("http://{addr}/call")).unwrap();
    let origin = origin_of(&url).unwrap();
    let response = client
        .send(
            Outgoing {
                method: "POST".into(),
                url,
                headers: vec![],
                body: Some(("application/json".into(), b"{}".to_vec())),
            },
            &[origin],
            None,
            &|| false,
        )
        .unwrap();
    assert_eq!((response.status, &response.body[..]), (200, &b"ok"[..]));
}

#[test]
fn connections_are_kept_alive_and_a_closed_one_is_not_used() {
    let client = HttpClient::new(HttpConfig::default(), Resolver::System).unwrap();
    let (addr, accepted) = counting_server(false);
    for _ in 0..5 {
        post_ok(&client, addr);
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one connection for five calls"
    );

    // A server that closes each connection after one response: every call still succeeds,
    // each on a new connection.
    let (addr, accepted) = counting_server(true);
    for _ in 0..3 {
        post_ok(&client, addr);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
}
