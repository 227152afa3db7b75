//! The HTTP guard every HTTP surface shares: Host, Origin, bearer tokens.

use capability_host::guard::{HttpGuard, Refusal, bearer, is_loopback_listener};
use http::header::{AUTHORIZATION, HOST, ORIGIN};
use http::{HeaderMap, HeaderValue};

fn headers(host: &'static str, origin: Option<&'static str>) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(HOST, HeaderValue::from_static(host));
    if let Some(o) = origin {
        h.insert(ORIGIN, HeaderValue::from_static(o));
    }
    h
}

#[test]
fn only_this_machine_and_allowed_names_pass_the_host_check() {
    let g = HttpGuard::default();
    assert!(g.host_allowed("127.0.0.1:8080"));
    assert!(g.host_allowed("localhost"));
    assert!(g.host_allowed("[::1]:9"));
    assert!(!g.host_allowed("evil.example:8080"));
    assert!(!g.host_allowed(""));
    let g = HttpGuard {
        allowed_hosts: vec!["mcp.internal".into()],
        ..HttpGuard::default()
    };
    assert!(g.host_allowed("mcp.internal:443"));
    assert_eq!(
        g.check(&headers("evil.example", None)),
        Err(Refusal::Host("evil.example".into()))
    );
}

#[test]
fn the_console_accepts_only_its_own_origin_and_mcp_also_loopback_tools() {
    let console = HttpGuard::default();
    assert!(console.check(&headers("127.0.0.1:8080", None)).is_ok());
    assert!(
        console
            .check(&headers("127.0.0.1:8080", Some("http://127.0.0.1:8080")))
            .is_ok()
    );
    // The console never accepts another page on this machine.
    for other in ["http://localhost:3000", "http://evil.example"] {
        assert_eq!(
            console.check(&headers("127.0.0.1:8080", Some(other))),
            Err(Refusal::Origin(other.into()))
        );
    }
    let mcp = HttpGuard {
        loopback_origins: true,
        allowed_origins: vec!["https://app.example:*".into()],
        ..HttpGuard::default()
    };
    for ok in ["http://localhost:6274", "https://app.example:8443"] {
        assert!(
            mcp.check(&headers("127.0.0.1:8080", Some(ok))).is_ok(),
            "{ok}"
        );
    }
    for refused in ["https://app.example.evil:1", "http://localhost.evil:1"] {
        assert!(
            mcp.check(&headers("127.0.0.1:8080", Some(refused)))
                .is_err(),
            "{refused}"
        );
    }
}

#[test]
fn a_bearer_token_is_read_only_from_a_bearer_authorization() {
    let mut h = HeaderMap::new();
    assert_eq!(bearer(&h), None);
    h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer cap_abc "));
    assert_eq!(bearer(&h), Some("cap_abc"));
    h.insert(AUTHORIZATION, HeaderValue::from_static("Basic x"));
    assert_eq!(bearer(&h), None);
}

#[test]
fn only_listeners_on_this_machine_are_loopback() {
    for local in ["127.0.0.1:0", "[::1]:8080", "localhost:1", "127.1.2.3:80"] {
        assert!(is_loopback_listener(local), "{local}");
    }
    for open in [
        "0.0.0.0:8080",
        "[::]:80",
        "192.168.1.2:80",
        "example.com:80",
    ] {
        assert!(!is_loopback_listener(open), "{open}");
    }
}
