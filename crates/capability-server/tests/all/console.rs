//! The web console: sessions, CSRF, and the Host and Origin checks.

use capability_server::ServerOptions;
use hyper::http::{Method, StatusCode};

use crate::fixture::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_sessions_csrf_host_and_origin() {
    let f = start(|_| ServerOptions::default()).await;
    let id = f.pending("agent", "console secret").await;
    // Sign-in without the login CSRF cookie is refused.
    let a = f
        .send(
            Method::POST,
            "/login",
            None,
            Some("login=alice&password=correct+horse+battery&csrf=x"),
            &[("content-type", "application/x-www-form-urlencoded")],
        )
        .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    // A wrong password is refused.
    let form = f.send(Method::GET, "/login", None, None, &[]).await;
    let c = set_cookie(&form.headers, "cap_login_csrf");
    let a = f
        .send(
            Method::POST,
            "/login",
            None,
            Some(&format!("login=alice&password=wrong&csrf={c}")),
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("cookie", &format!("cap_login_csrf={c}")),
            ],
        )
        .await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    // Unauthenticated console pages send to the sign-in page.
    let a = f.send(Method::GET, "/console/audit", None, None, &[]).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER);
    let (cookie, csrf) = f.login().await;
    let page = f
        .send(
            Method::GET,
            "/console/approvals",
            None,
            None,
            &[("cookie", &cookie)],
        )
        .await;
    assert!(page.text.contains(&id) && page.text.contains("console secret"));
    assert!(
        page.headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("script-src 'self'")
    );
    let approve = format!("/console/approvals/{id}/approve");
    let form_headers = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("cookie", cookie.as_str()),
    ];
    // No CSRF token, a wrong one: refused, and the approval stays pending.
    for body in [
        "comment=ok".to_string(),
        "comment=ok&csrf=forged".to_string(),
    ] {
        let a = f
            .send(Method::POST, &approve, None, Some(&body), &form_headers)
            .await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{body}");
    }
    let a = f.get(&format!("/api/v1/approvals/{id}"), "auditor").await;
    assert_eq!(a.json()["approval"]["status"], "pending");
    // The session on the API: a state change needs the CSRF header.
    let a = f
        .send(
            Method::POST,
            &format!("/api/v1/approvals/{id}/approve"),
            None,
            Some("{}"),
            &[("cookie", cookie.as_str())],
        )
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::FORBIDDEN, "CSRF")
    );
    let a = f
        .send(
            Method::GET,
            "/api/v1/whoami",
            None,
            None,
            &[("cookie", cookie.as_str())],
        )
        .await;
    assert_eq!(a.json()["name"], "alice");
    // A foreign Origin or Host is refused even with the right token.
    let body = format!("comment=ok&csrf={csrf}");
    let mut evil = form_headers.to_vec();
    evil.push(("origin", "http://evil.example"));
    let a = f
        .send(Method::POST, &approve, None, Some(&body), &evil)
        .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let a = f
        .send(
            Method::GET,
            "/api/v1/whoami",
            Some("alice"),
            None,
            &[("host", "evil.example")],
        )
        .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    // With its token and its own origin, the form approves and shows the agent's token.
    let mut own = form_headers.to_vec();
    let origin = f.base.clone();
    own.push(("origin", origin.as_str()));
    let a = f
        .send(Method::POST, &approve, None, Some(&body), &own)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert!(a.text.contains("id=\"approval-token\">capapr1."));
    let a = f.get(&format!("/api/v1/approvals/{id}"), "auditor").await;
    assert_eq!(a.json()["approval"]["decidedBy"], "alice");
    // Every console page renders for the session.
    for path in [
        "/console/decided",
        "/console/audit?tenant=acme",
        "/console/receipts",
        "/console/policies",
        &format!("/console/approvals/{id}"),
    ] {
        let a = f
            .send(
                Method::GET,
                path,
                None,
                None,
                &[("cookie", cookie.as_str())],
            )
            .await;
        assert_eq!(a.status, StatusCode::OK, "{path}");
        assert!(a.text.contains("<main id=\"main\">"), "{path}");
    }
    let audit = f
        .send(
            Method::GET,
            "/console/audit",
            None,
            None,
            &[("cookie", cookie.as_str())],
        )
        .await;
    assert!(audit.text.contains("Hash chain verified"));
    // Logging out ends the session.
    let a = f
        .send(
            Method::POST,
            "/logout",
            None,
            Some(&format!("csrf={csrf}")),
            &form_headers,
        )
        .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER);
    let a = f
        .send(
            Method::GET,
            "/console/approvals",
            None,
            None,
            &[("cookie", cookie.as_str())],
        )
        .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER);
}

/// Revoking a token ends the console stream of its session (issue 30, item 10): revoked
/// by another process on the same home, the stream announces nothing more and closes, and
/// the session is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_ends_its_open_event_stream_and_session() {
    use http_body_util::BodyExt;

    let f = crate::fixture::start(|_| capability_server::ServerOptions::default()).await;
    let (cookie, _) = f.login().await;
    let me = f
        .send(
            Method::GET,
            "/api/v1/whoami",
            None,
            None,
            &[("cookie", &cookie)],
        )
        .await
        .json();
    let token_id = me["principal"]
        .as_str()
        .unwrap()
        .strip_prefix("token:")
        .unwrap()
        .to_string();
    let req = hyper::Request::get(format!("{}/console/events", f.base))
        .header("cookie", &cookie)
        .body(http_body_util::Full::new(axum::body::Bytes::new()))
        .unwrap();
    let mut body = f.client.request(req).await.unwrap().into_body();
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    // Another process on the same home revokes alice's token.
    let other = capability_host::Host::open(capability_host::HostConfig {
        home: Some(f._dir.path().join("home")),
        ..capability_host::HostConfig::default()
    })
    .unwrap();
    other.tokens().unwrap().revoke(&token_id).unwrap();
    let after = f.pending("agent", "a secret after the revocation").await;
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => panic!("the stream of a revoked token is still open: {seen}"),
            Ok(None) => break,
            Ok(Some(frame)) => {
                if let Ok(data) = frame.unwrap().into_data() {
                    seen.push_str(&String::from_utf8_lossy(&data));
                }
            }
        }
    }
    assert!(!seen.contains(&after), "announced after revocation: {seen}");
    let a = f
        .send(
            Method::GET,
            "/api/v1/whoami",
            None,
            None,
            &[("cookie", &cookie)],
        )
        .await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
}

/// Wrong passwords at speed are throttled (issue 30, item 8): after the free failures the
/// sign-in answers 429 with Retry-After, before the password is checked, and a bearer
/// token guessed from the same address is throttled the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_and_bearer_guessing_is_throttled() {
    let f = crate::fixture::start(|_| capability_server::ServerOptions::default()).await;
    let form = f.send(Method::GET, "/login", None, None, &[]).await;
    let cookie = set_cookie(&form.headers, "cap_login_csrf");
    let csrf = hidden_csrf(&form.text);
    let attempt = |password: &'static str| {
        let body = format!("login=alice&password={password}&csrf={csrf}");
        let cookie = format!("cap_login_csrf={cookie}");
        let f = &f;
        async move {
            f.send(
                Method::POST,
                "/login",
                None,
                Some(&body),
                &[
                    ("content-type", "application/x-www-form-urlencoded"),
                    ("cookie", &cookie),
                ],
            )
            .await
        }
    };
    let mut statuses = Vec::new();
    for _ in 0..40 {
        statuses.push(attempt("wrong").await.status);
    }
    let unauthorized = statuses
        .iter()
        .filter(|s| **s == StatusCode::UNAUTHORIZED)
        .count();
    assert_eq!(
        unauthorized,
        capability_host::throttle::FREE_PER_PAIR as usize,
        "{statuses:?}"
    );
    let a = attempt("correct+horse+battery").await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.text);
    assert!(a.headers.contains_key("retry-after"));
    // Bearer tokens from this address: the free failures, then 429.
    let mut last = StatusCode::OK;
    for i in 0..capability_host::throttle::FREE_PER_ADDRESS {
        let wrong = format!("Bearer cap_wrong_{i}");
        last = f
            .send(
                Method::GET,
                "/api/v1/whoami",
                None,
                None,
                &[("authorization", &wrong)],
            )
            .await
            .status;
    }
    assert_eq!(last, StatusCode::TOO_MANY_REQUESTS);
    let a = f.get("/api/v1/whoami", "auditor").await;
    assert_eq!(
        a.status,
        StatusCode::TOO_MANY_REQUESTS,
        "a valid token from a locked address waits too"
    );
    assert_eq!(a.code(), "RATE_LIMITED");
}
