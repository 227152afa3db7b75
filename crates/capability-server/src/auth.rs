//! Who calls: bearer tokens (the API), console sessions (cookies), CSRF tokens, and the
//! Host and Origin checks every request passes first.

use std::collections::HashMap;
use std::sync::PoisonError;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use capability_host::{AuthError, Role, TokenRecord};
use sha2::{Digest, Sha256};

use crate::routes::Access;
use crate::{ApiError, AppState, blocking};

/// An authenticated caller.
#[derive(Clone, Debug)]
pub(crate) struct Principal {
    pub record: TokenRecord,
    /// The session's CSRF token, for a console session.
    pub csrf: Option<String>,
}

impl Principal {
    /// `token:<id>`: what approvals record as the requester of a token's calls.
    pub fn principal_id(&self) -> String {
        format!("token:{}", self.record.id)
    }

    pub fn name(&self) -> &str {
        self.record.name()
    }

    pub fn role(&self) -> Role {
        self.record.role
    }

    pub fn allows(&self, access: Access) -> bool {
        let role = self.role();
        match access {
            Access::Public | Access::Any => true,
            Access::Invoke => role.may_call(),
            Access::Read => role.may_read(),
            Access::Decide => role.may_approve(),
        }
    }

    /// Whether this principal may see approvals of `tenant` (approvers see their tenants').
    pub fn sees_tenant(&self, tenant: Option<&str>) -> bool {
        match self.role() {
            Role::Approver => self.record.may_approve_for(tenant),
            _ => true,
        }
    }
}

/// A console session: the token it stands for and its CSRF token.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    pub token_id: String,
    pub csrf: String,
    pub expires: Instant,
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

const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The host part of a `Host` header (`[::1]:80` → `::1`, `a:1` → `a`).
fn host_name(value: &str) -> &str {
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    value.rsplit_once(':').map_or(value, |(h, _)| h)
}

pub(crate) fn host_allowed(value: &str, extra: &[String]) -> bool {
    let name = host_name(value);
    !value.is_empty()
        && (LOOPBACK.contains(&name)
            || extra
                .iter()
                .any(|a| a.eq_ignore_ascii_case(value) || a.eq_ignore_ascii_case(name)))
}

/// A request's `Origin` (when a browser sent one) must be this server's own origin (the
/// scheme and the Host it was called by) or an allowed one.
pub(crate) fn origin_allowed(headers: &HeaderMap, extra: &[String]) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let own = |scheme: &str| origin.eq_ignore_ascii_case(&format!("{scheme}://{host}"));
    (!host.is_empty() && (own("http") || own("https")))
        || extra.iter().any(|a| a.eq_ignore_ascii_case(origin))
}

/// The Host and Origin checks, for every request.
pub(crate) async fn check_host(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    if !host_allowed(host, &state.options.allowed_hosts) {
        return ApiError::forbidden("the Host header is not allowed").into_response();
    }
    if !origin_allowed(headers, &state.options.allowed_origins) {
        return ApiError::forbidden("the Origin is not allowed").into_response();
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

pub(crate) fn unauthorized(e: AuthError) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", e.to_string())
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim)
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

/// Starts a session for a token; returns the cookie value.
pub(crate) fn start_session(state: &AppState, record: &TokenRecord) -> String {
    let secret = random_secret();
    let session = Session {
        token_id: record.id.clone(),
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
pub(crate) fn session_principal(state: &AppState, headers: &HeaderMap) -> Option<Principal> {
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
    let tokens = state.host.tokens().ok()?;
    let record = blocking(|| tokens.by_id(&session.token_id)).ok()?;
    Some(Principal {
        record,
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
    let principal = match bearer(request.headers()) {
        Some(secret) => {
            let tokens = match state.host.tokens() {
                Ok(t) => t,
                Err(_) => return unauthorized(AuthError::Unavailable).into_response(),
            };
            match blocking(|| tokens.authenticate(secret)) {
                Ok(record) => Principal { record, csrf: None },
                Err(e) => return unauthorized(e).into_response(),
            }
        }
        None => match session_principal(&state, request.headers()) {
            Some(p) => {
                let safe = matches!(*request.method(), Method::GET | Method::HEAD);
                let presented = request
                    .headers()
                    .get("x-csrf-token")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                if !safe && !p.csrf.as_deref().is_some_and(|c| same(c, presented)) {
                    return ApiError::new(
                        StatusCode::FORBIDDEN,
                        "CSRF",
                        "a session request that changes state needs its CSRF token",
                    )
                    .into_response();
                }
                p
            }
            None => return unauthorized(AuthError::Missing).into_response(),
        },
    };
    if !principal.allows(access) {
        return ApiError::forbidden(format!(
            "a principal with role {} cannot {}",
            principal.role().as_str(),
            access.verb()
        ))
        .into_response();
    }
    request.extensions_mut().insert(principal);
    next.run(request).await
}

/// A console form whose CSRF token matched the session's (403 otherwise); the console
/// gate has put the session's principal in the request.
pub(crate) struct CsrfForm {
    pub principal: Principal,
    pub fields: HashMap<String, String>,
}

impl<S: Send + Sync> FromRequest<S> for CsrfForm {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let principal = request
            .extensions()
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| StatusCode::UNAUTHORIZED.into_response())?;
        let body = Bytes::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let fields = parse_form(&body);
        let presented = fields.get("csrf").map(String::as_str).unwrap_or_default();
        if !principal
            .csrf
            .as_deref()
            .is_some_and(|c| same(c, presented))
        {
            return Err(crate::console::refused(
                StatusCode::FORBIDDEN,
                "The form's CSRF token is missing or wrong. Reload the page and try again.",
            ));
        }
        Ok(CsrfForm { principal, fields })
    }
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_origins() {
        assert!(host_allowed("127.0.0.1:8080", &[]));
        assert!(host_allowed("[::1]:9", &[]));
        assert!(!host_allowed("evil.example:8080", &[]));
        assert!(!host_allowed("", &[]));
        assert!(host_allowed(
            "console.internal",
            &["console.internal".into()]
        ));
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert!(origin_allowed(&h, &[]));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        assert!(origin_allowed(&h, &[]));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(!origin_allowed(&h, &[]));
        assert!(origin_allowed(&h, &["http://evil.example".into()]));
    }

    #[test]
    fn forms_decode() {
        let f = parse_form(b"csrf=a%2Fb&comment=looks+fine%21&x=%zz&empty=");
        assert_eq!(f["csrf"], "a/b");
        assert_eq!(f["comment"], "looks fine!");
        assert_eq!(f["x"], "%zz");
        assert_eq!(f["empty"], "");
        assert_eq!(
            parse_form(b"a=%4"),
            HashMap::from([("a".into(), "%4".into())])
        );
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }
}
