//! Who calls: bearer tokens (the API) and console sessions (cookies), both authenticated
//! by the host; CSRF tokens; and the host's HTTP guard, which every request passes first.

use std::collections::HashMap;
use std::sync::PoisonError;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use capability_host::guard;
use capability_host::{AuthError, Credential, Principal};
use sha2::{Digest, Sha256};

use crate::access::Access;
use crate::error::ApiError;
use crate::state::{AppState, Session, blocking};

/// The caller's network address, when the server was given it (see `Server::serve`);
/// never a rejection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer(pub Option<std::net::IpAddr>);

impl Peer {
    pub fn of(extensions: &axum::http::Extensions) -> Peer {
        Peer(
            extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip()),
        )
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Peer, Self::Rejection> {
        Ok(Peer::of(&parts.extensions))
    }
}

/// An authenticated caller: the host's principal, and for a console session its CSRF token.
#[derive(Clone, Debug)]
pub(crate) struct Authenticated {
    pub principal: Principal,
    /// The session's CSRF token, for a console session.
    pub csrf: Option<String>,
}

impl Authenticated {
    pub fn name(&self) -> &str {
        self.principal.name()
    }

    pub fn allows(&self, access: Access) -> bool {
        if access == Access::Admin {
            return self.principal.role() == capability_host::Role::Admin;
        }
        match access.host_access() {
            None => true,
            Some(a) => self.principal.may(a),
        }
    }
}

pub(crate) fn random_secret() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

fn session_key(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Equality that takes the same time wherever the strings differ.
pub(crate) fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The host's HTTP guard (Host and Origin checks), for every request.
pub(crate) async fn check_host(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if let Err(refusal) = state.options.guard.check(request.headers()) {
        return ApiError::from(refusal).into_response();
    }
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    response
}

/// The cookie's name: with `Secure`, the `__Host-` prefix pins it to this origin.
pub(crate) fn cookie_name(secure: bool) -> &'static str {
    if secure {
        "__Host-cap_session"
    } else {
        "cap_session"
    }
}

pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// `Set-Cookie` for a session (or its removal with an empty value).
pub(crate) fn session_cookie(state: &AppState, value: &str) -> String {
    let secure = state.options.secure_cookies;
    let max_age = if value.is_empty() {
        0
    } else {
        state.options.session_ttl.as_secs()
    };
    format!(
        "{}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{}",
        cookie_name(secure),
        if secure { "; Secure" } else { "" }
    )
}

/// Starts a session for a principal who logged in; returns the cookie value.
pub(crate) fn start_session(state: &AppState, principal: &Principal) -> String {
    let secret = random_secret();
    let session = Session {
        token_id: principal.token_id().unwrap_or_default().to_string(),
        csrf: random_secret(),
        expires: Instant::now() + state.options.session_ttl,
    };
    let mut sessions = state
        .sessions
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let now = Instant::now();
    sessions.retain(|_, s| s.expires > now);
    sessions.insert(session_key(&secret), session);
    secret
}

pub(crate) fn end_session(state: &AppState, headers: &HeaderMap) {
    if let Some(secret) = cookie(headers, cookie_name(state.options.secure_cookies)) {
        state
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&session_key(secret));
    }
}

/// The principal of a session cookie (its token re-read: a revocation ends the session).
pub(crate) fn session_principal(state: &AppState, headers: &HeaderMap) -> Option<Authenticated> {
    let secret = cookie(headers, cookie_name(state.options.secure_cookies))?;
    let session = {
        let sessions = state
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sessions.get(&session_key(secret)).cloned()?
    };
    if session.expires <= Instant::now() {
        return None;
    }
    let principal = blocking(|| {
        state.host.authenticate(Credential::Session {
            token_id: &session.token_id,
        })
    })
    .ok()?;
    Some(Authenticated {
        principal,
        csrf: Some(session.csrf),
    })
}

/// The API gate of one route: a bearer token (or a console session, whose requests that
/// change state must carry its CSRF token in `X-CSRF-Token`), then the route's access.
pub(crate) async fn api_gate(
    State((state, access)): State<(AppState, Access)>,
    mut request: Request,
    next: Next,
) -> Response {
    if access == Access::Public {
        return next.run(request).await;
    }
    let principal = match guard::bearer(request.headers()) {
        Some(secret) => match blocking(|| {
            state
                .host
                .authenticate_from(Credential::Bearer(secret), Peer::of(request.extensions()).0)
        }) {
            Ok(principal) => Authenticated {
                principal,
                csrf: None,
            },
            Err(e) => return ApiError::Unauthorized(e).into_response(),
        },
        None => match session_principal(&state, request.headers()) {
            Some(p) => {
                let safe = matches!(*request.method(), Method::GET | Method::HEAD);
                let presented = request
                    .headers()
                    .get("x-csrf-token")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                if !safe && !p.csrf.as_deref().is_some_and(|c| same(c, presented)) {
                    return ApiError::csrf(
                        "a session request that changes state needs its CSRF token",
                    )
                    .into_response();
                }
                p
            }
            None => return ApiError::Unauthorized(AuthError::Missing).into_response(),
        },
    };
    if !principal.allows(access) {
        return ApiError::forbidden(format!(
            "a principal with role {} cannot {}",
            principal.principal.role().as_str(),
            access.verb()
        ))
        .into_response();
    }
    request.extensions_mut().insert(principal);
    next.run(request).await
}

pub(crate) fn parse_form(body: &[u8]) -> HashMap<String, String> {
    url_decode_pairs(body).collect()
}

/// `application/x-www-form-urlencoded` pairs.
pub(crate) fn url_decode_pairs(body: &[u8]) -> impl Iterator<Item = (String, String)> + '_ {
    body.split(|b| *b == b'&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut it = p.splitn(2, |b| *b == b'=');
            let k = it.next().unwrap_or_default();
            let v = it.next().unwrap_or_default();
            (decode(k), decode(v))
        })
}

fn decode(s: &[u8]) -> String {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < s.len() => {
                match std::str::from_utf8(&s[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
