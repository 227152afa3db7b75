//! Live events on the console and the approval webhook: signed, retried, and over
//! `https://` to a trusted receiver only.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use capability_host::webhook::Webhook;
use capability_server::ServerOptions;
use http_body_util::{BodyExt, Full};
use hyper::http::{HeaderMap, StatusCode};
use serde_json::Value;

use crate::fixture::*;
use capability_test_support::approvals::pending_approval;
use capability_test_support::tls::{TestCa, front};

async fn receiver() -> (String, tokio::sync::mpsc::Receiver<(HeaderMap, Vec<u8>)>) {
    use axum::routing::post;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let app = axum::Router::new().route(
        "/hook",
        post(move |headers: HeaderMap, body: Bytes| {
            let tx = tx.clone();
            let calls = Arc::clone(&calls);
            async move {
                if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    return StatusCode::SERVICE_UNAVAILABLE;
                }
                tx.send((headers, body.to_vec())).await.unwrap();
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_events_and_signed_webhook() {
    let (url, mut deliveries) = receiver().await;
    let mut hook = Webhook::new(&url, "s3cret").unwrap();
    hook.backoff = Duration::from_millis(20);
    let f = start(move |_| ServerOptions {
        webhook: Some(hook),
        ..ServerOptions::default()
    })
    .await;
    let (cookie, _) = f.login().await;
    // Subscribe, then make an approval.
    let req = hyper::Request::get(format!("{}/console/events", f.base))
        .header("cookie", &cookie)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let res = f.client.request(req).await.unwrap();
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut body = res.into_body();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let globex = f.pending("agent-globex", "not alice's secret").await;
    let id = f.pending("agent", "a live secret").await;
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains(&id) {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .expect("no live event")
            .unwrap()
            .unwrap();
        if let Ok(data) = frame.into_data() {
            seen.push_str(&String::from_utf8_lossy(&data));
        }
    }
    assert!(seen.contains("event: approval"), "{seen}");
    assert!(
        !seen.contains(&globex),
        "alice sees only acme's approvals: {seen}"
    );
    // The webhook got both, after a retry, signed.
    let mut got = Vec::new();
    for _ in 0..2 {
        let (headers, body) = tokio::time::timeout(Duration::from_secs(10), deliveries.recv())
            .await
            .expect("no webhook delivery")
            .unwrap();
        let ts: u64 = headers["x-capability-timestamp"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let expected = capability_host::webhook::signature(b"s3cret", ts, &body);
        assert_eq!(
            headers["x-capability-signature"].to_str().unwrap(),
            expected
        );
        assert_ne!(
            expected,
            capability_host::webhook::signature(b"other", ts, &body)
        );
        let doc: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(doc["type"], "approval.pending");
        got.push(doc["approval"]["id"].as_str().unwrap().to_string());
    }
    got.sort();
    let mut want = vec![globex, id];
    want.sort();
    assert_eq!(got, want);
}

/// The webhook to an `https://` receiver (a TLS terminator whose certificate a test CA
/// issued): refused on the certificate while the CA is not trusted (nothing reaches the
/// receiver), delivered and signed once it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_delivers_over_https_to_a_trusted_receiver_only() {
    let (url, mut deliveries) = receiver().await;
    let plain = url
        .strip_prefix("http://")
        .and_then(|u| u.strip_suffix("/hook"))
        .unwrap()
        .parse()
        .unwrap();
    let ca = TestCa::new("webhook test CA");
    let front = front(ca.server(&["127.0.0.1"]), plain);
    let https = format!("https://{front}/hook");
    let mut hook = Webhook::new(&https, "s3cret").unwrap();
    hook.attempts = 2;
    hook.backoff = Duration::from_millis(10);
    let untrusted = hook.clone();
    let e = tokio::task::spawn_blocking(move || untrusted.deliver(&pending_approval(1)))
        .await
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("certificate not trusted: {front}")),
        "{e}"
    );
    // Trusted: the receiver's first answer is a 503 (so it saw nothing before), the retry
    // is accepted.
    let mut hook = Webhook::with_roots(&https, "s3cret", Some(ca.pem())).unwrap();
    hook.backoff = Duration::from_millis(10);
    let record = pending_approval(2);
    let id = record.approval_id.clone();
    let trusted = tokio::task::spawn_blocking(move || hook.deliver(&record))
        .await
        .unwrap();
    assert_eq!(trusted, Ok(2));
    let (headers, body) = tokio::time::timeout(Duration::from_secs(10), deliveries.recv())
        .await
        .expect("no webhook delivery")
        .unwrap();
    let ts: u64 = headers["x-capability-timestamp"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        headers["x-capability-signature"].to_str().unwrap(),
        capability_host::webhook::signature(b"s3cret", ts, &body)
    );
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["approval"]["id"], id.as_str());
}
