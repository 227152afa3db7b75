//! The one HTTP guard of every HTTP surface (`cap serve`, `cap mcp-serve --listen`,
//! `cap mcp-gateway --listen`): the checks a request passes before any handler sees it.
//!
//! * **Host**: the `Host` header must name this machine (`localhost`, `127.0.0.1`, `::1`)
//!   or an allowed name ([`HttpGuard::allowed_hosts`], with or without the port): a DNS
//!   rebinding page cannot reach a loopback server.
//! * **Origin**: a request that carries `Origin` (a browser) must come from the server's own
//!   origin (the scheme and the `Host` it called), from an allowed origin, or — when the
//!   surface serves browser tools on this machine, [`HttpGuard::loopback_origins`] — from
//!   `http://localhost:*`, `http://127.0.0.1:*` or `http://[::1]:*`.
//! * **Bearer**: [`bearer`] reads `Authorization: Bearer <token>`; the host authenticates it
//!   ([`Host::authenticate`](crate::Host::authenticate)).
//! * **Body**: [`HttpGuard::max_body_bytes`] is the largest request body a surface accepts
//!   (it applies the limit with its framework's body limit).

use http::HeaderMap;
use http::header::{AUTHORIZATION, HOST, ORIGIN};

/// Why the guard refused a request (403 for each).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the Host header {0:?} is not allowed")]
    Host(String),
    #[error("the Origin {0:?} is not allowed")]
    Origin(String),
}

/// The checks of an HTTP surface (see the module docs).
#[derive(Clone, Debug)]
pub struct HttpGuard {
    /// Host names (or `host:port`) accepted besides `localhost`, `127.0.0.1` and `::1`.
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted besides the server's own (`https://console.example`); a
    /// trailing `:*` accepts any port.
    pub allowed_origins: Vec<String>,
    /// Accept browser origins on this machine (any port): for surfaces that browser-based
    /// developer tools call (the MCP Inspector), never for the console.
    pub loopback_origins: bool,
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
}

impl Default for HttpGuard {
    fn default() -> Self {
        HttpGuard {
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            loopback_origins: false,
            max_body_bytes: 1 << 20,
        }
    }
}

const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "::1"];
const LOOPBACK_ORIGINS: [&str; 3] = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];

/// The host part of a `Host` header (`[::1]:80` → `::1`, `a:1` → `a`).
fn host_name(value: &str) -> &str {
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    value.rsplit_once(':').map_or(value, |(h, _)| h)
}

/// Whether `origin` matches `pattern` (case-insensitively; a pattern ending in `:*` matches
/// any port of that scheme and host).
fn origin_matches(pattern: &str, origin: &str) -> bool {
    match pattern.strip_suffix(":*") {
        Some(base) => {
            origin.len() > base.len()
                && origin[..base.len()].eq_ignore_ascii_case(base)
                && origin[base.len()..].strip_prefix(':').is_some_and(|port| {
                    !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
                })
        }
        None => pattern.eq_ignore_ascii_case(origin),
    }
}

/// Whether a listen address (`host:port`: `127.0.0.1:8470`, `[::1]:0`, `localhost:1`) only
/// accepts connections from this machine. Such a listener serves plain HTTP to local
/// clients: its session cookies cannot be `Secure`, and only there may requests without a
/// token act as an anonymous agent.
pub fn is_loopback_listener(listen: &str) -> bool {
    let host = match listen.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => listen,
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The token of `Authorization: Bearer <token>`, when there is one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

impl HttpGuard {
    /// Whether a `Host` header value is allowed.
    pub fn host_allowed(&self, value: &str) -> bool {
        let name = host_name(value);
        !value.is_empty()
            && (LOOPBACK.contains(&name)
                || self
                    .allowed_hosts
                    .iter()
                    .any(|a| a.eq_ignore_ascii_case(value) || a.eq_ignore_ascii_case(name)))
    }

    /// Whether the request's `Origin` (when a browser sent one) is allowed.
    pub fn origin_allowed(&self, headers: &HeaderMap) -> bool {
        let Some(origin) = headers.get(ORIGIN) else {
            return true;
        };
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        let host = headers
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        let own = |scheme: &str| origin.eq_ignore_ascii_case(&format!("{scheme}://{host}"));
        (!host.is_empty() && (own("http") || own("https")))
            || self
                .allowed_origins
                .iter()
                .any(|a| origin_matches(a, origin))
            || (self.loopback_origins && LOOPBACK_ORIGINS.iter().any(|a| origin_matches(a, origin)))
    }

    /// The Host and Origin checks of a request.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let host = headers
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        if !self.host_allowed(host) {
            return Err(Refusal::Host(host.to_string()));
        }
        if !self.origin_allowed(headers) {
            let origin = headers
                .get(ORIGIN)
                .map(|o| String::from_utf8_lossy(o.as_bytes()).into_owned())
                .unwrap_or_default();
            return Err(Refusal::Origin(origin));
        }
        Ok(())
    }

    /// The Host patterns a framework that checks hosts itself should accept.
    pub fn host_patterns(&self) -> Vec<String> {
        LOOPBACK
            .iter()
            .map(|h| h.to_string())
            .chain(self.allowed_hosts.iter().cloned())
            .collect()
    }

    /// The Origin patterns a framework that checks origins itself should accept (besides
    /// the server's own).
    pub fn origin_patterns(&self) -> Vec<String> {
        let loopback = self
            .loopback_origins
            .then_some(LOOPBACK_ORIGINS.iter().map(|o| o.to_string()));
        loopback
            .into_iter()
            .flatten()
            .chain(self.allowed_origins.iter().cloned())
            .collect()
    }
}
