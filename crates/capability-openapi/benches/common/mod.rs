//! What the OpenAPI benches share: the loopback server their generated documents point at.

use capability_test_support::http;

/// A loopback server answering `GET /things0/{id}` with a thing.
pub fn server() -> std::net::SocketAddr {
    http::spawn(axum::Router::new().route(
        "/things0/{id}",
        axum::routing::get(|| async {
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                r#"{"id":1,"name":"x"}"#,
            )
        }),
    ))
}
