//! What a refusal answers: each kind with its status, its code and its message, in the one
//! error shape `{"error": {"code", "message"}}`; and what the console makes of what it is
//! sent and shows (form decoding, HTML escaping, redaction of secret-looking inputs).

use capability_host::{Credential, Host, HostConfig, Role};
use capability_server::{ServerOptions, render_pending_page};
use capability_test_support::approvals::pending_approval;
use hyper::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::fixture::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refusal_answers_its_status_code_and_message() {
    let f = start(|_| ServerOptions::default()).await;
    let (cookie, _) = f.login().await;
    let no_token = json!({"capability": "text/slugify", "input": {"text": "x"}});
    let cases = [
        (
            f.post("/api/v1/resume", "agent", no_token).await,
            StatusCode::BAD_REQUEST,
            "INVALID_INPUT",
            Some("token is required"),
        ),
        (
            f.post("/api/v1/approvals/apr_x/approve", "agent", json!({}))
                .await,
            StatusCode::FORBIDDEN,
            "FORBIDDEN",
            Some("a principal with role agent cannot approve or deny"),
        ),
        (
            f.send(
                Method::POST,
                "/api/v1/approvals/apr_x/approve",
                None,
                Some("{}"),
                &[("cookie", &cookie), ("content-type", "application/json")],
            )
            .await,
            StatusCode::FORBIDDEN,
            "CSRF",
            Some("a session request that changes state needs its CSRF token"),
        ),
        (
            f.get("/api/v1/no/such/route", "agent").await,
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            Some("no such route"),
        ),
        (
            f.send(Method::GET, "/api/v1/approvals", None, None, &[])
                .await,
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            None,
        ),
    ];
    for (a, status, code, message) in cases {
        assert_eq!(a.status, status, "{}", a.text);
        let body = a.json();
        let said = body["error"]["message"].as_str().unwrap_or_default();
        assert!(!said.is_empty(), "{body}");
        assert_eq!(body, json!({"error": {"code": code, "message": said}}));
        if let Some(m) = message {
            assert_eq!(said, m);
        }
    }
    // A capability's own error answers the status its code stands for.
    let a = f
        .post(
            "/api/v1/invoke",
            "agent",
            json!({"capability": "no/such", "input": {}}),
        )
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::NOT_FOUND, "NOT_FOUND"),
        "{}",
        a.text
    );
    assert!(a.json()["error"]["message"].is_string(), "{}", a.text);
}

/// Form fields are percent-decoded (`%20` and `+` are spaces), a malformed escape or an
/// empty field does not spoil the form, and the CSRF check compares whole values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_forms_are_decoded_and_csrf_tokens_compared_whole() {
    let f = start(|_| ServerOptions::default()).await;
    let login = |password: &'static str, csrf: String, cookie: String| {
        let f = &f;
        async move {
            f.send(
                Method::POST,
                "/login",
                None,
                Some(&format!(
                    "login=alice&password={password}&csrf={csrf}&x=%zz&y=%4&empty="
                )),
                &[
                    ("content-type", "application/x-www-form-urlencoded"),
                    ("cookie", &format!("cap_login_csrf={cookie}")),
                ],
            )
            .await
        }
    };
    let form = f.send(Method::GET, "/login", None, None, &[]).await;
    let cookie = set_cookie(&form.headers, "cap_login_csrf");
    let csrf = hidden_csrf(&form.text);
    // A CSRF token one character short, or one character changed, is refused.
    let short = csrf[..csrf.len() - 1].to_string();
    let mut changed = csrf[..csrf.len() - 1].to_string();
    changed.push(if csrf.ends_with('a') { 'b' } else { 'a' });
    for wrong in [short, changed] {
        let a = login("correct+horse+battery", wrong, cookie.clone()).await;
        assert_ne!(a.status, StatusCode::SEE_OTHER, "{}", a.text);
    }
    let a = login("correct+horse+battery%21", csrf.clone(), cookie.clone()).await;
    assert_ne!(a.status, StatusCode::SEE_OTHER, "not alice's password");
    let a = login("correct%20horse+battery", csrf, cookie).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.text);
}

/// The pending page escapes what it shows (text and attributes), encodes what it links to,
/// and never shows the values of secret-looking input fields, however deep.
#[test]
fn the_pending_page_escapes_and_redacts() {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::open(HostConfig {
        home: Some(dir.path().join("home")),
        ..HostConfig::default()
    })
    .unwrap();
    let (_, secret) = host
        .tokens()
        .unwrap()
        .add(&spec("alice", Role::Admin, None, &[]))
        .unwrap();
    let viewer = host.authenticate(Credential::Bearer(&secret)).unwrap();
    let mut record = pending_approval(7);
    record.approval_id = "apr x/y".into();
    record.capability = "<a href=\"x\">&'".into();
    record.input =
        json!({"text": "hi", "apiKey": "k-123", "nested": [{"Password": "p-456", "n": 1}]});
    let page = render_pending_page(&[record], "csrf\"<", &viewer);
    assert!(
        page.contains("&lt;a href=&quot;x&quot;&gt;&amp;&#39;"),
        "{page}"
    );
    assert!(!page.contains("<a href=\"x\">"), "{page}");
    assert!(page.contains("/console/approvals/apr%20x%2Fy"), "{page}");
    assert!(page.contains("csrf&quot;&lt;"), "{page}");
    let shown: Value = json!({"text": "hi", "apiKey": "[REDACTED]",
        "nested": [{"Password": "[REDACTED]", "n": 1}]});
    let escaped = serde_json::to_string_pretty(&shown)
        .unwrap()
        .replace('"', "&quot;");
    assert!(page.contains(&escaped), "{page}");
    assert!(!page.contains("k-123") && !page.contains("p-456"), "{page}");
}

/// One nesting limit and one message on every surface (issue 30, item 16): the API accepts
/// the inputs the CLI accepts (128 levels, inside a body one level deeper) and refuses a
/// deeper one with the message the CLI and the runtime give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_takes_inputs_as_deep_as_the_cli_and_refuses_deeper_ones_alike() {
    let f = crate::fixture::start(|_| capability_server::ServerOptions::default()).await;
    let limit = capability_core::json::MAX_DEPTH;
    // `{"value": [[...]], "path": "a"}`: the input nests `levels` deep.
    let input = |levels: usize| {
        format!(
            "{{\"value\":{}1{},\"path\":\"a\"}}",
            "[".repeat(levels - 1),
            "]".repeat(levels - 1)
        )
    };
    for levels in [limit - 1, limit] {
        let body = format!(
            "{{\"capability\":\"json/get\",\"input\":{}}}",
            input(levels)
        );
        let a = f
            .send(
                Method::POST,
                "/api/v1/invoke",
                Some("agent"),
                Some(&body),
                &[("content-type", "application/json")],
            )
            .await;
        assert_eq!(a.status, StatusCode::OK, "{levels}: {}", a.text);
    }
    for levels in [limit + 1, limit + 2, 1000] {
        let body = format!(
            "{{\"capability\":\"json/get\",\"input\":{}}}",
            input(levels)
        );
        let a = f
            .send(
                Method::POST,
                "/api/v1/invoke",
                Some("agent"),
                Some(&body),
                &[("content-type", "application/json")],
            )
            .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{levels}");
        assert_eq!(
            a.json()["error"]["message"],
            capability_core::json::too_deep("Input"),
            "{levels}"
        );
    }
    // The runtime says the same for an input built in process.
    let mut deep = serde_json::json!(1);
    for _ in 0..limit {
        deep = serde_json::json!([deep]);
    }
    let host = capability_host::Host::open(capability_host::HostConfig {
        storage: capability_host::Storage::Memory,
        ..capability_host::HostConfig::default()
    })
    .unwrap();
    let e = host
        .plan("json/get", serde_json::json!({"value": deep, "path": "a"}))
        .unwrap_err();
    assert_eq!(e.message, capability_core::json::too_deep("Input"));
}
