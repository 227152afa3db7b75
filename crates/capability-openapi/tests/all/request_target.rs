//! The request sent is the one planned: hostile path parameters (dot segments, encoded or
//! hidden in a style's expansion, slashes, empty segments) and header parameters only the
//! client may set (`Content-Length`, `Transfer-Encoding`, `Host`, `Connection`, ...) are
//! refused before anything is sent, checked against a raw loopback server that records the
//! request line and headers it actually received.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use capability_core::ErrorCode;
use capability_core::authorization::EffectPolicy;
use capability_openapi::executor::Secrets;
use capability_openapi::http::{HttpError, Outgoing, origin_of};
use capability_openapi::{ApiOptions, HttpClient, HttpConfig, Resolver, build_api};
use capability_runtime::capability::Capability;
use capability_runtime::{CapabilityRuntime, ExecuteOptions};
use serde_json::{Value, json};

/// What the server read off the wire for one request.
#[derive(Clone, Debug)]
pub(crate) struct Received {
    /// `GET /api/cap/repos/o/r/issues HTTP/1.1`.
    request_line: String,
    headers: Vec<(String, String)>,
}

impl Received {
    fn target(&self) -> &str {
        self.request_line.split(' ').nth(1).unwrap_or_default()
    }

    fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

pub(crate) type Log = Arc<Mutex<Vec<Received>>>;

/// A raw HTTP/1.1 server on 127.0.0.1: it records each request head as received (no
/// framework between the wire and the record, so nothing is normalised) and answers
/// `{"ok": true}`, closing the connection.
pub(crate) fn recorder() -> (SocketAddr, Log) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let log: Log = Arc::default();
    let seen = Arc::clone(&log);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut lines = Vec::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        break;
                    }
                    lines.push(line.trim_end_matches(['\r', '\n']).to_string());
                }
                let request_line = lines.first().cloned().unwrap_or_default();
                let headers = lines
                    .iter()
                    .skip(1)
                    .filter_map(|l| l.split_once(':'))
                    .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                    .collect();
                seen.lock().unwrap().push(Received {
                    request_line,
                    headers,
                });
                let body = r#"{"ok":true}"#;
                let mut writer = stream;
                let _ = writer.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                );
            });
        }
    });
    (addr, log)
}

/// The client headers a document may declare as header parameters, and a value an agent
/// would give each to reframe the request.
const CLIENT_HEADERS: [(&str, &str); 12] = [
    ("Content-Length", "0"),
    ("Transfer-Encoding", "chunked"),
    ("Host", "evil.example"),
    ("Connection", "upgrade"),
    ("Upgrade", "websocket"),
    ("TE", "trailers"),
    ("Trailer", "X-Evil"),
    ("Keep-Alive", "timeout=600"),
    ("Expect", "100-continue"),
    ("Proxy-Authorization", "Basic ZXZpbA=="),
    ("proxy-connection", "keep-alive"),
    ("content-length", "5"),
];

fn document(server: &str) -> Value {
    let string = json!({"type": "string"});
    let path = |name: &str| json!({"name": name, "in": "path", "required": true, "schema": string});
    let ok = json!({"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}});
    let mut headers: Vec<Value> = CLIENT_HEADERS
        .iter()
        .map(|(name, _)| json!({"name": name, "in": "header", "schema": string}))
        .collect();
    headers.push(json!({"name": "X-Trace", "in": "header", "schema": string}));
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Target", "version": "1.0.0"},
        "servers": [{"url": server}],
        "paths": {
            "/repos/{owner}/{repo}/issues": {"get": {"operationId": "listIssues",
                "parameters": [path("owner"), path("repo")], "responses": ok}},
            "/files/{name}.{ext}": {"get": {"operationId": "getFile",
                "parameters": [path("name"), path("ext")], "responses": ok}},
            "/labels/{id}/x": {"get": {"operationId": "label",
                "parameters": [{"name": "id", "in": "path", "required": true, "style": "label",
                    "schema": {}}], "responses": ok}},
            "/headers": {
                "get": {"operationId": "headers", "parameters": headers, "responses": ok},
                "post": {"operationId": "upload", "parameters": headers,
                    "requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}},
                    "responses": ok}
            }
        }
    })
}

struct Target {
    runtime: CapabilityRuntime,
    api: capability_openapi::Api,
    addr: SocketAddr,
    log: Log,
}

/// Every operation of [`document`] registered in a runtime, served by a [`recorder`] under
/// the base path `/api/cap`.
fn target() -> Target {
    let (addr, log) = recorder();
    let client = Arc::new(HttpClient::new(HttpConfig::default(), Resolver::System).unwrap());
    let api = build_api(
        &document(&format!("http://{addr}/api/cap")),
        &ApiOptions::default(),
        client,
        Secrets::default(),
    )
    .unwrap();
    let runtime = CapabilityRuntime::builder()
        .policy(EffectPolicy::permissive())
        .build();
    for op in api.operations() {
        let executor: Arc<dyn capability_runtime::executor::Executor> = op.clone();
        runtime
            .register(Capability::with_executor(&op.manifest, executor).unwrap())
            .unwrap();
    }
    Target {
        runtime,
        api,
        addr,
        log,
    }
}

impl Target {
    fn received(&self) -> Vec<Received> {
        self.log.lock().unwrap().clone()
    }

    /// Plans and runs `id` with `input`; both must be refused as invalid input (so nothing
    /// is planned for approval and nothing sent), naming `why`.
    fn refused(&self, id: &str, input: Value, why: &str) {
        let id = format!("target/{id}");
        let e = self.runtime.plan(&id, input.clone()).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidInput, "{input}: {e:?}");
        assert!(e.message.contains(why), "{input}: {}", e.message);
        let e = self
            .runtime
            .invoke(&id, input.clone(), &ExecuteOptions::approved())
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidInput, "{input}: {e:?}");
        assert!(e.receipt_id.is_none(), "{input}: nothing was executed");
    }

    /// Plans and runs `id` with `input`: the server received exactly the planned request
    /// target (and the plan's method).
    fn sent_as_planned(&self, id: &str, input: Value) -> Received {
        let id = format!("target/{id}");
        let before = self.received().len();
        let plan = self.runtime.plan(&id, input.clone()).unwrap();
        let planned = plan.data.as_ref().unwrap()["request"].clone();
        self.runtime
            .invoke(&id, input.clone(), &ExecuteOptions::approved())
            .unwrap_or_else(|e| panic!("{input}: {e:?}"));
        let received = self.received();
        assert_eq!(received.len(), before + 1, "{input}: one request");
        let got = received[before].clone();
        let url = url::Url::parse(planned["url"].as_str().unwrap()).unwrap();
        let planned_target = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        };
        assert_eq!(got.target(), planned_target, "{input}: byte for byte");
        assert_eq!(
            got.request_line,
            format!(
                "{} {planned_target} HTTP/1.1",
                planned["method"].as_str().unwrap()
            )
        );
        got
    }
}

#[test]
fn dot_segments_in_path_parameters_are_refused_before_anything_is_sent() {
    let t = target();
    // Each would make `/repos/{owner}/{repo}/issues` climb to `/api/cap/issues` (or to
    // another resource under the template) once a URL library or a server normalises it.
    let hostile = [
        "..",
        ".",
        "%2e%2e",
        "%2E%2E",
        ".%2e",
        "%2E.",
        "%2e",
        "%252e%252e",
        "..;",
        "..;jsessionid=1",
        "../..",
        "..\\..",
        "a/../../b",
        "%2F",
        "\\",
    ];
    for value in hostile {
        for input in [
            json!({"path": {"owner": value, "repo": "r"}}),
            json!({"path": {"owner": "o", "repo": value}}),
        ] {
            t.refused("listissues", input, "refused");
        }
    }
    t.refused(
        "listissues",
        json!({"path": {"owner": "..", "repo": ".."}}),
        "dot segment",
    );
    // A parameter that leaves its segment empty (`/repos//r/issues`, which servers merge).
    t.refused(
        "listissues",
        json!({"path": {"owner": "", "repo": "r"}}),
        "empty segment",
    );
    assert!(
        t.received().is_empty(),
        "nothing reached the server: {:?}",
        t.received()
    );

    // Values that only look like dot segments are sent exactly as planned.
    for (owner, repo, path) in [
        ("octo", "hello", "/api/cap/repos/octo/hello/issues"),
        ("...", ".git", "/api/cap/repos/%2E%2E%2E/.git/issues"),
        ("a.b", "..x", "/api/cap/repos/a.b/..x/issues"),
        ("a b", "é", "/api/cap/repos/a%20b/%C3%A9/issues"),
    ] {
        let got = t.sent_as_planned(
            "listissues",
            json!({"path": {"owner": owner, "repo": repo}}),
        );
        assert_eq!(got.target(), path);
    }
}

#[test]
fn a_dot_segment_made_by_a_styles_expansion_or_the_template_is_refused() {
    let t = target();
    // `/files/{name}.{ext}`: the template's own dot joins the values into `.` or `..`.
    for (name, ext) in [("", ""), (".", ""), ("", "."), ("%2e", "")] {
        t.refused(
            "getfile",
            json!({"path": {"name": name, "ext": ext}}),
            "dot segment",
        );
    }
    // The label style's `.` prefix: `.` + `` is `.`, `.` + `.` is `..`.
    for id in [json!(""), json!("."), json!(["."]), json!([""])] {
        t.refused("label", json!({"path": {"id": id}}), "refused");
    }
    assert!(t.received().is_empty(), "{:?}", t.received());
    let got = t.sent_as_planned("getfile", json!({"path": {"name": "a", "ext": "txt"}}));
    assert_eq!(got.target(), "/api/cap/files/a.txt");
    let got = t.sent_as_planned("label", json!({"path": {"id": "7"}}));
    assert_eq!(got.target(), "/api/cap/labels/.7/x");
}

#[test]
fn header_parameters_only_the_client_sets_never_take_the_agents_value() {
    let t = target();
    // Adding the document shows the parameters that cannot be given.
    let warnings = t.api.import.warnings.join("\n");
    for (name, _) in CLIENT_HEADERS {
        assert!(
            warnings.contains(&format!("header parameter {name} of target/headers")),
            "{warnings}"
        );
    }
    for id in ["headers", "upload"] {
        for (name, value) in CLIENT_HEADERS {
            let mut input = json!({"headers": {name: value, "X-Trace": "t"}});
            if id == "upload" {
                input["body"] = json!({"a": 1});
            }
            t.refused(
                id,
                input,
                &format!("header parameter {name} cannot be given"),
            );
        }
    }
    assert!(t.received().is_empty(), "{:?}", t.received());

    // Without them, the request is sent with the client's own framing.
    let got = t.sent_as_planned("headers", json!({"headers": {"X-Trace": "t-1"}}));
    assert_eq!(got.header("x-trace"), ["t-1"]);
    assert_eq!(got.header("host"), [t.addr.to_string()]);
    assert!(got.header("transfer-encoding").is_empty(), "{got:?}");
    assert!(got.header("upgrade").is_empty(), "{got:?}");
    let got = t.sent_as_planned(
        "upload",
        json!({"headers": {"X-Trace": "t-2"}, "body": {"a": 1}}),
    );
    assert_eq!(got.header("content-length"), ["7"], "{got:?}");
    assert_eq!(got.header("host"), [t.addr.to_string()]);
}

#[test]
fn the_http_client_refuses_a_request_that_sets_a_framing_or_hop_by_hop_header() {
    let (addr, log) = recorder();
    let client = HttpClient::new(HttpConfig::default(), Resolver::System).unwrap();
    let url = url::Url::parse(&format!("http://{addr}/call")).unwrap();
    let origin = origin_of(&url).unwrap();
    let send = |headers: Vec<(String, String)>| {
        client.send(
            Outgoing {
                method: "POST".into(),
                url: url.clone(),
                headers,
                body: Some(("application/json".into(), b"{\"a\":1}".to_vec())),
            },
            std::slice::from_ref(&origin),
            None,
            &|| false,
        )
    };
    // Whoever builds the request (a document's credential placed in `Host`, an upstream's
    // configured headers), the client frames the message itself.
    for (name, value) in CLIENT_HEADERS {
        let e = send(vec![
            ("X-Ok".into(), "1".into()),
            (name.into(), value.into()),
        ])
        .unwrap_err();
        assert_eq!(e, HttpError::ClientHeader(name.into()), "{name}");
    }
    assert!(log.lock().unwrap().is_empty(), "{:?}", log.lock().unwrap());
    let response = send(vec![("X-Ok".into(), "1".into())]).unwrap();
    assert_eq!(response.status, 200);
    let got = log.lock().unwrap()[0].clone();
    assert_eq!(got.header("content-length"), ["7"]);
    assert_eq!(got.header("host"), [addr.to_string()]);
    assert_eq!(got.header("x-ok"), ["1"]);
}
