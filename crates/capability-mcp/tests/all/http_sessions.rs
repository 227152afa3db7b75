//! MCP sessions over HTTP are their principal's: a session id used by another principal (a
//! token of another agent, or another token of the same agent) is answered as an unknown
//! one (404, the same answer to the byte), on POST, on the GET stream and on DELETE, and the
//! session goes on for its owner. One principal holds at most
//! `max_sessions_per_principal` sessions, so that it cannot lock the others out, while
//! `max_sessions` still bounds them all; a session deleted or expired frees its slot.

use std::time::Duration;

use capability_host::{Host, TokenSpec};
use capability_mcp::{HttpLimits, ServeOptions};
use capability_test_support::http::http;
use capability_test_support::mcp::{clients_present, names, post, py_client};
use serde_json::json;

use crate::serve::{Served, host, serve};

pub const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
/// An id of the form rmcp gives, that no session has.
const UNKNOWN: &str = "7d9f3c2e-1b4a-4c8d-9e6f-0a1b2c3d4e5f";

pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// A new agent token of `host`.
pub fn token(host: &Host, agent: &str) -> String {
    host.tokens()
        .unwrap()
        .add(&TokenSpec::agent(agent))
        .unwrap()
        .1
}

fn limits(max_sessions: usize, per_principal: usize) -> HttpLimits {
    HttpLimits {
        max_sessions,
        max_sessions_per_principal: per_principal,
        ..HttpLimits::default()
    }
}

/// The `mcp-session-id` of a response head.
fn session_id(head: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("mcp-session-id")
            .then(|| v.trim().to_string())
    })
}

/// `initialize` with `token`: the status, and the new session's id.
pub fn initialize(server: &Served, token: &str) -> (u16, Option<String>, String) {
    let auth = bearer(token);
    let (status, head, body) = post(&server.addr, &[("Authorization", &auth)], INIT);
    (status, session_id(&head), body)
}

/// A session of `token`, past its handshake.
pub fn open(server: &Served, token: &str) -> String {
    let (status, id, body) = initialize(server, token);
    assert_eq!(status, 200, "{body}");
    let id = id.unwrap();
    let (status, _, body) = in_session(server, token, &id, "POST", INITIALIZED, &[]);
    assert_eq!(status, 202, "{body}");
    id
}

/// A request in session `id` with `token`.
pub fn in_session(
    server: &Served,
    token: &str,
    id: &str,
    method: &str,
    body: &str,
    extra: &[(&str, &str)],
) -> (u16, String, String) {
    let auth = bearer(token);
    let mut headers = vec![
        ("Authorization", auth.as_str()),
        ("Mcp-Session-Id", id),
        ("MCP-Protocol-Version", "2025-06-18"),
        ("Content-Type", "application/json"),
    ];
    if !extra.iter().any(|(k, _)| k.eq_ignore_ascii_case("accept")) {
        headers.push(("Accept", "application/json, text/event-stream"));
    }
    headers.extend_from_slice(extra);
    http(&server.addr, method, "/mcp", &headers, body)
}

/// A response without its `date` header, to compare two.
fn dateless((status, head, body): (u16, String, String)) -> (u16, Vec<String>, String) {
    let head = head
        .lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
        .map(str::to_string)
        .collect();
    (status, head, body)
}

#[test]
fn a_session_answers_only_the_principal_that_opened_it() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(&dir.path().join("home"));
    let alice = token(&host, "alice-bot");
    let bob = token(&host, "bob-bot");
    // Another token of the same agent is another principal.
    let alice_again = token(&host, "alice-bot");
    let server = serve(host, ServeOptions::default());
    let session = open(&server, &alice);

    for thief in [&bob, &alice_again] {
        for (method, body, extra) in [
            ("POST", LIST, &[][..]),
            // rmcp would refuse a wrong Accept first: no answer may tell which ids exist.
            ("POST", LIST, &[("Accept", "text/plain")][..]),
            ("GET", "", &[("Accept", "text/event-stream")][..]),
            ("DELETE", "", &[][..]),
        ] {
            let stolen = in_session(&server, thief, &session, method, body, extra);
            let unknown = in_session(&server, thief, UNKNOWN, method, body, extra);
            assert_eq!(stolen.0, 404, "{method} {extra:?}: {stolen:?}");
            assert_eq!(dateless(stolen), dateless(unknown), "{method} {extra:?}");
        }
    }
    // The owner's own unknown id is answered the same.
    let (status, _, body) = in_session(&server, &alice, UNKNOWN, "DELETE", "", &[]);
    assert_eq!(
        (status, body.as_str()),
        (404, "Not Found: Session not found")
    );

    // The session was neither used nor deleted: it answers its owner.
    let (status, _, body) = in_session(&server, &alice, &session, "POST", LIST, &[]);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("capability_search"), "{body}");
    let (status, _, _) = in_session(&server, &alice, &session, "DELETE", "", &[]);
    assert_eq!(status, 202);
    let (status, _, _) = in_session(&server, &alice, &session, "POST", LIST, &[]);
    assert_eq!(status, 404);
}

#[test]
fn one_principal_cannot_take_every_session() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(&dir.path().join("home"));
    let greedy = token(&host, "greedy");
    let racer = token(&host, "racer");
    let polite = token(&host, "polite");
    let server = serve(
        host.clone(),
        ServeOptions {
            http: limits(8, 2),
            ..ServeOptions::default()
        },
    );
    open(&server, &greedy);
    open(&server, &greedy);
    let (status, id, body) = initialize(&server, &greedy);
    assert_eq!((status, id), (429, None), "{body}");
    assert!(body.contains("too many sessions"), "{body}");
    assert!(body.contains("limit 2 per principal"), "{body}");

    // Sessions opened at once do not slip past the limit.
    let opened = std::thread::scope(|s| {
        let racers: Vec<_> = (0..12)
            .map(|_| s.spawn(|| initialize(&server, &racer).0))
            .collect();
        racers
            .into_iter()
            .map(|r| r.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(
        opened.iter().filter(|&&s| s == 200).count(),
        2,
        "{opened:?}"
    );
    assert_eq!(
        opened.iter().filter(|&&s| s == 429).count(),
        10,
        "{opened:?}"
    );

    // Another principal still gets a session: a real client lists the tools.
    if clients_present() {
        let doc = py_client(
            &[
                "--mode",
                "legacy",
                "--http",
                &server.url,
                "--token",
                &polite,
            ],
            &json!([{"op": "list"}]),
        );
        assert_eq!(names(&doc["results"][0]).len(), 13, "{doc}");
    } else {
        open(&server, &polite);
    }
    drop(server);

    // `max_sessions` still bounds them all.
    let server = serve(
        host,
        ServeOptions {
            http: limits(3, 2),
            ..ServeOptions::default()
        },
    );
    open(&server, &greedy);
    open(&server, &greedy);
    open(&server, &polite);
    let (status, _, body) = initialize(&server, &racer);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("too many sessions (limit 3)"), "{body}");
}

#[test]
fn deleted_and_expired_sessions_free_their_slots() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(&dir.path().join("home"));
    let owner = token(&host, "owner");
    let other = token(&host, "other");
    let server = serve(
        host.clone(),
        ServeOptions {
            http: limits(8, 2),
            ..ServeOptions::default()
        },
    );
    let first = open(&server, &owner);
    let second = open(&server, &owner);
    assert_eq!(initialize(&server, &owner).0, 429);
    // Another principal's DELETE frees nothing.
    assert_eq!(
        in_session(&server, &other, &first, "DELETE", "", &[]).0,
        404
    );
    assert_eq!(initialize(&server, &owner).0, 429);
    // The owner's does, once.
    assert_eq!(
        in_session(&server, &owner, &first, "DELETE", "", &[]).0,
        202
    );
    assert_eq!(
        in_session(&server, &owner, &first, "DELETE", "", &[]).0,
        404
    );
    let third = open(&server, &owner);
    assert_eq!(initialize(&server, &owner).0, 429);
    for id in [&second, &third] {
        assert_eq!(in_session(&server, &owner, id, "POST", LIST, &[]).0, 200);
    }
    drop(server);

    // Sessions idle past their timeout end, and their slots come back.
    let server = serve(
        host,
        ServeOptions {
            http: HttpLimits {
                session_idle_timeout: Duration::from_secs(2),
                ..limits(8, 2)
            },
            ..ServeOptions::default()
        },
    );
    let idle = [open(&server, &owner), open(&server, &owner)];
    assert_eq!(initialize(&server, &owner).0, 429);
    std::thread::sleep(Duration::from_secs(4));
    for id in &idle {
        assert_eq!(in_session(&server, &owner, id, "POST", LIST, &[]).0, 404);
    }
    open(&server, &owner);
    open(&server, &owner);
}
