//! `https://` through the shared client, against a real TLS server on 127.0.0.1: a test CA
//! (rcgen) issues the server's certificate, a TLS terminator forwards to a plain backend that
//! counts the requests it gets. Trusted, untrusted and misnamed certificates, an https → http
//! redirect, a plain server on an https URL, and the size limit and timeout over TLS.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get as route_get;
use capability_openapi::http::{HttpError, Incoming, Origin, Outgoing, origin_of};
use capability_openapi::{HttpClient, HttpConfig, Resolver};
use capability_test_support::http;
use capability_test_support::tls::{TestCa, front};

/// The plain backend: `/ok`, `/big` (300 kB), `/slow` (5 s), `/redirect?<location>`.
fn backend() -> (SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    let app = axum::Router::new()
        .route("/ok", route_get(|| async { "{\"ok\":true}" }))
        .route("/big", route_get(|| async { "x".repeat(300_000) }))
        .route(
            "/slow",
            route_get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "late"
            }),
        )
        .route(
            "/redirect",
            route_get(|RawQuery(q): RawQuery| async move {
                (
                    StatusCode::FOUND,
                    [(header::LOCATION, q.unwrap_or_default())],
                )
                    .into_response()
            }),
        )
        .layer(axum::middleware::from_fn_with_state(
            counted,
            |State(hits): State<Arc<AtomicUsize>>,
             request: axum::extract::Request,
             next: axum::middleware::Next| async move {
                hits.fetch_add(1, Ordering::SeqCst);
                next.run(request).await
            },
        ));
    (http::spawn(app), hits)
}

struct Fixture {
    ca: TestCa,
    /// The TLS port, its certificate for `localhost` and 127.0.0.1.
    tls: SocketAddr,
    plain: SocketAddr,
    hits: Arc<AtomicUsize>,
}

fn fixture() -> Fixture {
    let (plain, hits) = backend();
    let ca = TestCa::new("capability test CA");
    let tls = front(ca.server(&["localhost", "127.0.0.1"]), plain);
    Fixture {
        ca,
        tls,
        plain,
        hits,
    }
}

fn trusting(ca: &TestCa) -> HttpConfig {
    HttpConfig {
        extra_roots_pem: Some(ca.pem()),
        timeout: Duration::from_secs(5),
        retry_backoff: Duration::from_millis(10),
        ..HttpConfig::default()
    }
}

fn get_with(client: &HttpClient, url: &str, extra: &[Origin]) -> Result<Incoming, HttpError> {
    let url = url::Url::parse(url).unwrap();
    let mut allowed = vec![origin_of(&url).unwrap()];
    allowed.extend_from_slice(extra);
    let request = Outgoing {
        method: "GET".into(),
        url,
        headers: Vec::new(),
        body: None,
    };
    client.send(request, &allowed, None, &|| false)
}

fn get(config: HttpConfig, url: &str) -> Result<Incoming, HttpError> {
    get_with(
        &HttpClient::new(config, Resolver::System).unwrap(),
        url,
        &[],
    )
}

#[test]
fn https_works_with_the_test_ca_trusted() {
    let f = fixture();
    let port = f.tls.port();
    let client = HttpClient::new(trusting(&f.ca), Resolver::System).unwrap();
    // By IP address (verified against the certificate's IP addresses) and by name.
    for url in [
        format!("https://127.0.0.1:{port}/ok"),
        format!("https://localhost:{port}/ok"),
    ] {
        let r = get_with(&client, &url, &[]).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"{\"ok\":true}"[..]));
        assert_eq!(r.address.port(), port);
    }
    // A same-origin redirect stays on TLS.
    let r = get_with(
        &client,
        &format!("https://127.0.0.1:{port}/redirect?/ok"),
        &[],
    )
    .unwrap();
    assert_eq!((r.status, r.redirects), (200, 1));
    assert_eq!(f.hits.load(Ordering::SeqCst), 4);
}

#[test]
fn an_untrusted_certificate_authority_is_refused_before_any_request() {
    let f = fixture();
    let url = format!("https://127.0.0.1:{}/ok", f.tls.port());
    // The system roots alone, then another test CA.
    let other = TestCa::new("another CA");
    for config in [HttpConfig::default(), trusting(&other)] {
        let e = get(config, &url).unwrap_err();
        let HttpError::Certificate(m) = &e else {
            panic!("{e:?}");
        };
        assert!(m.contains(&format!("127.0.0.1:{}", f.tls.port())), "{m}");
        assert!(m.contains("UnknownIssuer"), "{m}");
        assert!(
            e.to_string().starts_with("certificate not trusted: "),
            "{e}"
        );
    }
    // The request (and whatever credential it carried) never reached the server.
    assert_eq!(f.hits.load(Ordering::SeqCst), 0);
}

#[test]
fn a_certificate_for_another_name_is_refused() {
    let f = fixture();
    // api.test resolves to the server, whose certificate names localhost and 127.0.0.1 only.
    let config = HttpConfig {
        allow_private: true,
        ..trusting(&f.ca)
    };
    let resolver = Resolver::Static(BTreeMap::from([("api.test".to_string(), vec![f.tls.ip()])]));
    let client = HttpClient::new(config, resolver).unwrap();
    let e = get_with(
        &client,
        &format!("https://api.test:{}/ok", f.tls.port()),
        &[],
    )
    .unwrap_err();
    let HttpError::Certificate(m) = &e else {
        panic!("{e:?}");
    };
    assert!(m.contains("not valid for name \"api.test\""), "{m}");
    // A certificate for a name only does not cover an IP-address URL.
    let named = front(f.ca.server(&["elsewhere.test"]), f.plain);
    let e = get(trusting(&f.ca), &format!("https://{named}/ok")).unwrap_err();
    let HttpError::Certificate(m) = &e else {
        panic!("{e:?}");
    };
    assert!(m.contains("127.0.0.1"), "{m}");
    assert_eq!(f.hits.load(Ordering::SeqCst), 0);
}

#[test]
fn a_redirect_from_https_to_http_is_refused() {
    let f = fixture();
    let client = HttpClient::new(trusting(&f.ca), Resolver::System).unwrap();
    // To the same host and port over http, and to the plain server (even when allowed).
    for target in [
        format!("http://127.0.0.1:{}/ok", f.tls.port()),
        format!("http://{}/ok", f.plain),
    ] {
        let allowed = origin_of(&url::Url::parse(&target).unwrap()).unwrap();
        let url = format!("https://127.0.0.1:{}/redirect?{target}", f.tls.port());
        let e = get_with(&client, &url, &[allowed]).unwrap_err();
        assert!(matches!(e, HttpError::InsecureRedirect(_)), "{e:?}");
        assert!(e.to_string().contains("refused"), "{e}");
    }
    // Only the two redirecting requests reached the backend.
    assert_eq!(f.hits.load(Ordering::SeqCst), 2);
}

#[test]
fn a_plain_http_server_on_an_https_url_fails_clearly() {
    let f = fixture();
    let e = get(trusting(&f.ca), &format!("https://{}/ok", f.plain)).unwrap_err();
    let HttpError::Tls(m) = &e else {
        panic!("{e:?}");
    };
    assert!(m.contains(&f.plain.to_string()), "{m}");
    assert!(m.contains("does not speak TLS"), "{m}");
    assert!(e.to_string().starts_with("TLS handshake failed: "), "{e}");
}

#[test]
fn the_size_limit_and_the_timeout_hold_over_tls() {
    let f = fixture();
    let base = format!("https://127.0.0.1:{}", f.tls.port());
    let config = HttpConfig {
        max_response_bytes: 100_000,
        ..trusting(&f.ca)
    };
    let e = get(config, &format!("{base}/big")).unwrap_err();
    assert_eq!(e, HttpError::TooLarge(100_000));
    let config = HttpConfig {
        timeout: Duration::from_millis(800),
        ..trusting(&f.ca)
    };
    let e = get(config, &format!("{base}/slow")).unwrap_err();
    assert_eq!(e, HttpError::Timeout(800));
}

#[test]
fn extra_roots_that_are_not_pem_certificates_are_a_clear_error() {
    let f = fixture();
    let config = HttpConfig {
        extra_roots_pem: Some("not a certificate".into()),
        ..HttpConfig::default()
    };
    let e = get(config, &format!("https://127.0.0.1:{}/ok", f.tls.port())).unwrap_err();
    assert!(
        e.to_string()
            .contains("extra roots: no PEM certificate found"),
        "{e}"
    );
    assert_eq!(f.hits.load(Ordering::SeqCst), 0);
}
