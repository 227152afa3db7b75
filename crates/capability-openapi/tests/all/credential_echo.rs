//! A credential a server echoes back is redacted by value in whatever form it comes back
//! (issue 30, item 6): percent-encoded with either hex case, form-encoded, only partly
//! encoded, JSON-escaped inside a text, base64 — in the output, an error, the receipt.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use axum::extract::RawQuery;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use base64::Engine as _;
use capability_core::authorization::EffectPolicy;
use capability_openapi::executor::Secrets;
use capability_openapi::{ApiOptions, HttpClient, HttpConfig, Resolver, SecretRef, build_api};
use capability_runtime::capability::Capability;
use capability_runtime::{CapabilityRuntime, ExecuteOptions};
use serde_json::{Value, json};

/// A key with what every encoding treats differently: a space, `+`, `/`, `=`, `&`, a quote,
/// unreserved marks and a non-ASCII letter.
const KEY: &str = "k3y with+sl/ash=&\"q\"-x.y_~é";

fn lower(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        out.push(c);
        if c == '%' {
            out.extend(it.next().map(|h| h.to_ascii_lowercase()));
            out.extend(it.next().map(|h| h.to_ascii_lowercase()));
        }
    }
    out
}

/// Every shape the careless server echoes the key in.
fn echoes(raw_query: &str, key: &str) -> Value {
    let pct =
        percent_encoding::utf8_percent_encode(key, percent_encoding::NON_ALPHANUMERIC).to_string();
    let form: String = url::form_urlencoded::byte_serialize(key.as_bytes()).collect();
    json!({
        "id": 1,
        "query": raw_query,
        "form": format!("api_key={form}&x=1"),
        "lower": lower(&pct),
        "json": json!({"key": key}).to_string(),
        "b64": base64::engine::general_purpose::STANDARD.encode(key),
        "b64url": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key),
        "plain": format!("you sent {key}"),
    })
}

fn server() -> std::net::SocketAddr {
    capability_test_support::http::on_loopback(|listener| async move {
        let app = axum::Router::new()
            .route(
                "/echo",
                get(|RawQuery(q): RawQuery| async move {
                    let q = q.unwrap_or_default();
                    let key = url::form_urlencoded::parse(q.as_bytes())
                        .find(|(k, _)| k == "api_key")
                        .map(|(_, v)| v.into_owned())
                        .unwrap_or_default();
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        echoes(&q, &key).to_string(),
                    )
                        .into_response()
                }),
            )
            .route(
                "/echo-fail",
                get(|RawQuery(q): RawQuery| async move {
                    let q = q.unwrap_or_default();
                    (StatusCode::INTERNAL_SERVER_ERROR, format!("rejected {q}")).into_response()
                }),
            );
        axum::serve(listener, app).await.unwrap();
    })
}

fn runtime(addr: std::net::SocketAddr) -> CapabilityRuntime {
    let doc = json!({
        "openapi": "3.1.0",
        "info": {"title": "Echo", "version": "1.0.0"},
        "servers": [{"url": format!("http://{addr}")}],
        "paths": {
            "/echo": {"get": {"operationId": "echo", "security": [{"key": []}],
                "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}}}},
            "/echo-fail": {"get": {"operationId": "echoFail", "security": [{"key": []}],
                "responses": {"200": {"description": "ok"}}}}
        },
        "components": {"securitySchemes": {"key": {"type": "apiKey", "in": "query", "name": "api_key"}}}
    });
    let client = Arc::new(HttpClient::new(HttpConfig::default(), Resolver::System).unwrap());
    let dir = tempfile::tempdir().unwrap().keep();
    let file = dir.join("secrets.json");
    std::fs::write(&file, json!({"echo-key": KEY}).to_string()).unwrap();
    let options = ApiOptions {
        auth: vec![("key".into(), SecretRef::Named("echo-key".into()))],
        ..Default::default()
    };
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
    runtime
}

/// Whether `text` still holds the key in any of the shapes the server used.
fn leaks(text: &str) -> Vec<String> {
    let shapes = echoes("", KEY);
    let mut found = Vec::new();
    for field in ["form", "lower", "json", "b64", "b64url"] {
        let shape = shapes[field].as_str().unwrap();
        let inner = match field {
            "form" => shape
                .trim_start_matches("api_key=")
                .trim_end_matches("&x=1"),
            "json" => shape
                .trim_start_matches("{\"key\":\"")
                .trim_end_matches("\"}"),
            _ => shape,
        };
        if text.contains(inner) {
            found.push(field.to_string());
        }
    }
    if text.contains(KEY) {
        found.push("raw".into());
    }
    for (i, word) in ["k3y", "sl/ash", "with+sl"].iter().enumerate() {
        if text.contains(word) {
            found.push(format!("fragment {i}: {word}"));
        }
    }
    found
}

#[test]
fn an_echoed_credential_is_redacted_in_every_form_it_comes_back_in() {
    let runtime = runtime(server());
    let receipt = runtime
        .invoke("echo/echo", json!({}), &ExecuteOptions::approved())
        .unwrap();
    let output = receipt.output.clone().unwrap();
    // The server did see the key, and echoed it in every shape.
    assert!(
        output["plain"].as_str().unwrap().starts_with("you sent "),
        "{output}"
    );
    let text = serde_json::to_string(receipt.as_ref()).unwrap();
    assert_eq!(leaks(&text), Vec::<String>::new(), "{text}");
    assert!(text.contains("[redacted]"));
}

#[test]
fn an_echoed_credential_in_an_error_is_redacted_too() {
    let runtime = runtime(server());
    let e = runtime
        .invoke("echo/echofail", json!({}), &ExecuteOptions::approved())
        .unwrap_err();
    let text = format!("{e:?} {}", serde_json::to_string(&e.details).unwrap());
    assert!(text.contains("rejected"), "{text}");
    assert_eq!(leaks(&text), Vec::<String>::new(), "{text}");
    let receipt = runtime
        .store()
        .get(e.receipt_id.as_deref().unwrap())
        .unwrap()
        .unwrap();
    let text = serde_json::to_string(receipt.as_ref()).unwrap();
    assert_eq!(leaks(&text), Vec::<String>::new(), "{text}");
}
