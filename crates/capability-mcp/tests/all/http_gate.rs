//! The gate of the HTTP transport: missing, unknown, revoked and expired bearer tokens get
//! 401 with a challenge; a role that may not call tools gets 403; so do a foreign Host and a
//! foreign Origin; an oversized body gets 413; a session beyond the limit gets 503. A good
//! token passes it (the MCP layer answers the handshake).

use std::time::Duration;

use capability_host::guard::HttpGuard;
use capability_host::{Role, TokenSpec};
use capability_mcp::{HttpLimits, ServeOptions};
use capability_test_support::mcp::post;

use crate::serve::{host, serve};

const PING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn limits(max_body_bytes: usize, max_sessions: usize) -> HttpLimits {
    let defaults = HttpLimits::default();
    HttpLimits {
        guard: HttpGuard {
            max_body_bytes,
            ..defaults.guard.clone()
        },
        max_sessions,
        ..defaults
    }
}

#[test]
fn http_refuses_bad_tokens_foreign_hosts_and_big_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(&dir.path().join("home"));
    let tokens = host.tokens().unwrap();
    let add = |spec: TokenSpec| tokens.add(&spec).unwrap();
    let (_, good) = add(TokenSpec::agent("bot"));
    let (revoked_record, revoked) = add(TokenSpec::agent("bot"));
    let (_, expiring) = add(TokenSpec {
        expires_in: Some(Duration::from_secs(1)),
        ..TokenSpec::agent("bot")
    });
    let (_, approver) = add(TokenSpec {
        role: Role::Approver,
        ..TokenSpec::agent("alice")
    });
    tokens.revoke(&revoked_record.id).unwrap();
    let server = serve(
        host.clone(),
        ServeOptions {
            http: limits(4096, 256),
            ..ServeOptions::default()
        },
    );
    std::thread::sleep(Duration::from_millis(1100));

    let (status, head, _) = post(&server.addr, &[], PING);
    assert_eq!(status, 401);
    assert!(
        head.to_ascii_lowercase()
            .contains("www-authenticate: bearer")
    );
    for (t, why) in [
        ("cap_0000", "not known"),
        (revoked.as_str(), "revoked"),
        (expiring.as_str(), "expired"),
    ] {
        let (status, head, body) = post(&server.addr, &[("Authorization", &bearer(t))], PING);
        assert_eq!(status, 401, "{why}: {body}");
        assert!(head.contains("error=\"invalid_token\""), "{head}");
        assert!(body.contains(why), "{body}");
    }
    let (status, _, body) = post(&server.addr, &[("Authorization", &bearer(&approver))], PING);
    assert_eq!(status, 403, "{body}");
    let (status, _, _) = post(
        &server.addr,
        &[("Authorization", &bearer(&good)), ("Host", "evil.example")],
        PING,
    );
    assert_eq!(status, 403);
    let (status, _, _) = post(
        &server.addr,
        &[
            ("Authorization", &bearer(&good)),
            ("Origin", "http://evil.example"),
        ],
        PING,
    );
    assert_eq!(status, 403);
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(8192)
    );
    let (status, _, _) = post(&server.addr, &[("Authorization", &bearer(&good))], &big);
    assert_eq!(status, 413);
    let (status, _, body) = post(&server.addr, &[("Authorization", &bearer(&good))], INIT);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("\"protocolVersion\":\"2025-06-18\""),
        "{body}"
    );
    assert!(body.contains("capability-network"));
    drop(server);

    // The session limit: a second session is refused while the first is open.
    let server = serve(
        host,
        ServeOptions {
            http: limits(1 << 20, 1),
            ..ServeOptions::default()
        },
    );
    let auth = bearer(&good);
    let auth = [("Authorization", auth.as_str())];
    let (first, head, _) = post(&server.addr, &auth, INIT);
    assert_eq!(first, 200);
    assert!(
        head.to_ascii_lowercase().contains("mcp-session-id"),
        "{head}"
    );
    let (second, _, body) = post(&server.addr, &auth, INIT);
    assert_eq!(second, 503, "{body}");
    assert!(body.contains("too many sessions"));
}
