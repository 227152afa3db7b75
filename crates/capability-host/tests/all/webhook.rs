//! The approval webhook: what it signs and which URLs it accepts (deliveries are tested
//! with the HTTP server that serves them, in capability-server).

use capability_host::webhook::{Webhook, WebhookError, signature};
use hmac::{Hmac, Mac};
use sha2::Sha256;

#[test]
fn the_signature_is_hmac_sha256_over_the_timestamp_a_dot_and_the_body() {
    // RFC 4231 test case 2 ("Jefe"), framed as a delivery: "<timestamp>.<body>".
    let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
    mac.update(b"1700000000.what do ya want for nothing?");
    let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(
        signature(b"Jefe", 1_700_000_000, b"what do ya want for nothing?"),
        expected
    );
    let a = signature(b"k", 1, b"{}");
    assert!(a.starts_with("sha256=") && a.len() == 7 + 64);
    assert_ne!(a, signature(b"k", 2, b"{}"));
    assert_ne!(a, signature(b"j", 1, b"{}"));
    assert_ne!(a, signature(b"k", 1, b"{ }"));
}

#[test]
fn only_http_and_https_urls_with_a_secret_are_accepted() {
    assert!(Webhook::new("http://127.0.0.1:9/hook", "s").is_ok());
    assert!(Webhook::new("https://example.com/hook", "s").is_ok());
    for url in ["ftp://example.com/hook", "file:///tmp/hook", "not a url"] {
        assert!(
            matches!(Webhook::new(url, "s"), Err(WebhookError::Url { .. })),
            "{url}"
        );
    }
    assert_eq!(
        Webhook::new("http://127.0.0.1:9/hook", "").unwrap_err(),
        WebhookError::NoSecret
    );
}

/// The webhook posts an approval's input as the console shows it (issue 30, item 5): the
/// values of secret-looking keys are not sent to a hook.
#[test]
fn a_delivery_does_not_post_what_the_console_hides() {
    use std::sync::{Arc, Mutex};
    let got: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&got);
    let addr = capability_test_support::http::on_loopback(move |listener| async move {
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |body: String| {
                let seen = Arc::clone(&seen);
                async move {
                    seen.lock().unwrap().push(body);
                    axum::http::StatusCode::NO_CONTENT
                }
            }),
        );
        axum::serve(listener, app).await.unwrap();
    });
    let hook = capability_host::webhook::Webhook::new(&format!("http://{addr}/hook"), "s").unwrap();
    let mut record = capability_test_support::approvals::pending_approval(1);
    record.input = serde_json::json!({"text": "pay", "password": "hunter2",
        "nested": {"api_key": "sk-live-1", "list": [{"Authorization": "Bearer x"}]}});
    hook.deliver(&record).unwrap();
    let body = got.lock().unwrap().join("\n");
    for secret in ["hunter2", "sk-live-1", "Bearer x"] {
        assert!(!body.contains(secret), "{secret} posted: {body}");
    }
    assert!(
        body.contains("[REDACTED]") && body.contains("\"pay\""),
        "{body}"
    );
}
