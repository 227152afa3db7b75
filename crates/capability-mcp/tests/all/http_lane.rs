//! The lane of streamable HTTP (`tools/call` of a session answered by the gate, not rmcp's
//! session worker): its answers are rmcp's, what it does not know goes to rmcp, and a
//! session used only for calls stays alive.

use std::time::Duration;

use capability_mcp::{HttpLimits, ServeOptions};
use serde_json::{Value, json};

use crate::http_sessions::{open, token};
use crate::serve::{Served, host, serve};

/// A `POST` of `body` in session `id` with `token`.
fn in_session(server: &Served, token: &str, id: &str, body: &Value) -> (u16, String, String) {
    crate::http_sessions::in_session(server, token, id, "POST", &body.to_string(), &[])
}

/// The JSON-RPC messages of an event-stream body (its non-empty `data:` lines).
fn messages(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn slugify(id: u64, text: &str, params: Value) -> Value {
    let mut call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "text__slugify", "arguments": {"text": text}}});
    for (k, v) in params.as_object().unwrap() {
        call["params"][k] = v.clone();
    }
    call
}

/// What varies from one call to the next in an answer.
fn steady(mut message: Value) -> Value {
    if let Some(meta) = message["result"]["_meta"].as_object_mut() {
        meta.remove("receiptId");
        meta.remove("actionId");
        meta.remove("durationMs");
    }
    message
}

#[test]
fn the_lane_answers_as_rmcp_does() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(&dir.path().join("home"));
    let secret = token(&host, "bot");
    let other = token(&host, "eve");
    let server = serve(
        host,
        ServeOptions {
            expose: vec!["text/slugify".into()],
            ..ServeOptions::default()
        },
    );
    let id = open(&server, &secret);
    let lane = in_session(&server, &secret, &id, &slugify(5, "Hello Lane", json!({})));
    // `task` is a parameter the lane does not know: rmcp answers.
    let rmcp = in_session(
        &server,
        &secret,
        &id,
        &slugify(5, "Hello Lane", json!({"task": null})),
    );
    assert_eq!((lane.0, rmcp.0), (200, 200), "{lane:?} {rmcp:?}");
    for (status, head, _) in [&lane, &rmcp] {
        assert_eq!(*status, 200);
        assert!(head.contains("content-type: text/event-stream"), "{head}");
    }
    // rmcp's stream has a priming event and event ids; the lane's is the one message.
    assert!(rmcp.2.contains("id: "), "{}", rmcp.2);
    assert!(
        lane.2.starts_with("data: {") && !lane.2.contains("\nid: "),
        "{}",
        lane.2
    );
    let (a, b) = (messages(&lane.2), messages(&rmcp.2));
    assert_eq!((a.len(), b.len()), (1, 1), "{lane:?} {rmcp:?}");
    assert_eq!(steady(a[0].clone()), steady(b[0].clone()));
    assert_eq!(a[0]["result"]["structuredContent"]["slug"], "hello-lane");
    assert!(a[0]["result"].get("resultType").is_none(), "{}", a[0]);

    // A failure, an unknown tool and a string id are answered alike too.
    for (call, extra) in [
        (
            json!({"jsonrpc": "2.0", "id": "s-1", "method": "tools/call",
                   "params": {"name": "nope", "arguments": {}}}),
            json!({"jsonrpc": "2.0", "id": "s-1", "method": "tools/call",
                   "params": {"name": "nope", "arguments": {}, "task": null}}),
        ),
        (
            slugify(6, "", json!({"arguments": {"text": 7}})),
            slugify(6, "", json!({"arguments": {"text": 7}, "task": null})),
        ),
    ] {
        let a = messages(&in_session(&server, &secret, &id, &call).2);
        let b = messages(&in_session(&server, &secret, &id, &extra).2);
        assert_eq!(steady(a[0].clone()), steady(b[0].clone()));
    }

    // Another principal's token gets the answer to an unknown session, lane or not.
    let (status, _, _) = in_session(&server, &other, &id, &slugify(7, "x", json!({})));
    assert_eq!(status, 404);
}

/// A session whose client only calls tools (answered in the lane) stays alive past the
/// idle timeout, and lives the whole timeout after its last call; left idle, it ends.
#[test]
fn a_session_used_only_for_calls_stays_alive() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(&dir.path().join("home"));
    let secret = token(&host, "bot");
    let server = serve(
        host,
        ServeOptions {
            expose: vec!["text/slugify".into()],
            http: HttpLimits {
                session_idle_timeout: Duration::from_millis(800),
                ..HttpLimits::default()
            },
            ..ServeOptions::default()
        },
    );
    let id = open(&server, &secret);
    let started = std::time::Instant::now();
    let mut n = 0;
    while started.elapsed() < Duration::from_millis(2_500) {
        n += 1;
        let (status, _, body) =
            in_session(&server, &secret, &id, &slugify(n, "Still here", json!({})));
        assert_eq!(
            status,
            200,
            "call {n} after {:?}: {body}",
            started.elapsed()
        );
        assert_eq!(
            messages(&body)[0]["result"]["structuredContent"]["slug"],
            "still-here"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Idle for most of the timeout after calls in the lane: still alive, as under rmcp.
    for n in [90, 91] {
        std::thread::sleep(Duration::from_millis(600));
        let (status, _, body) =
            in_session(&server, &secret, &id, &slugify(n, "Still here", json!({})));
        assert_eq!(status, 200, "after 600 ms idle: {body}");
    }
    std::thread::sleep(Duration::from_millis(1_500));
    let (status, _, body) = in_session(&server, &secret, &id, &slugify(99, "x", json!({})));
    assert_eq!(status, 404, "{body}");
}
