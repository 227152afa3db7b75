//! The lane of streamable HTTP: a `tools/call` of a session that began with `initialize`
//! (the 2025-06-18 and 2025-11-25 revisions) is answered by the gate itself, after the
//! host's guard, the bearer token and the session's owner were checked, instead of going
//! through rmcp's session worker.
//!
//! Why: rmcp hands such a request from the HTTP task to the session's worker, to its service
//! loop, to a task for the handler and back, and streams the answer from yet another
//! channel: about 0.3-0.4 ms a call on the 2-core VM where it was measured, several times
//! the governance of the call. The lane reads the body once, calls the surface as the
//! handler does ([`crate::handler::tool_call`]) and answers with the message rmcp would
//! write ([`crate::lane::answer`]) as the one event of a `text/event-stream`.
//!
//! The lane takes a request only when everything about it is plain, and hands anything else
//! to rmcp with its body as it came: a `POST` naming a session of this principal that
//! finished its handshake (`notifications/initialized` reached rmcp; the session's idle
//! time is the gate's, so a call here keeps it alive as one through rmcp would); `Accept`
//! naming both JSON and event streams, a JSON `Content-Type`, a `Content-Length` within the
//! body limit; no
//! `MCP-Protocol-Version` but one of the revisions negotiated with `initialize`, no
//! `Mcp-Method`/`Mcp-Name` (those come with 2026-07-28 requests, whose headers rmcp checks
//! against the body); and a body that is a `tools/call` whose every part the lane knows
//! ([`crate::lane::call_of`]). A `notifications/cancelled` for a call in the lane reaches
//! rmcp, which does not know that request; the call runs to its end, as calls under rmcp do.

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use capability_host::Actor;
use serde_json::Value;

use super::SESSION_ID;
use super::sessions::Sessions;
use crate::handler::{Surface, tool_call};
use crate::lane;

/// The revisions a session negotiates with `initialize` (the header may also be absent).
const SESSION_REVISIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];

/// Answers `request` in the lane, or gives it back (its body as it came) for rmcp.
pub(super) async fn take<S: Surface>(
    surface: &S,
    sessions: &Sessions,
    actor: &Actor,
    request: Request,
) -> Result<Response, Request> {
    if !plain(request.method(), request.headers(), sessions, surface) {
        return Err(request);
    }
    let (parts, body) = request.into_parts();
    let limit = surface.options().http.guard.max_body_bytes;
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => {
            return Ok(super::refuse(
                StatusCode::BAD_REQUEST,
                "Bad Request: the body could not be read",
            ));
        }
    };
    let call = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(mut msg))
            if msg.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
                && msg.get("method").and_then(Value::as_str) == Some("tools/call") =>
        {
            lane::call_of(&mut msg)
        }
        _ => None,
    };
    let Some(call) = call else {
        return Err(Request::from_parts(parts, Body::from(bytes)));
    };
    let result = tool_call(surface, actor.clone(), call.name, call.arguments, call.meta).await;
    let answer = lane::answer(call.id, result);
    let mut event = Vec::with_capacity(answer.len() + 8);
    event.extend_from_slice(b"data: ");
    event.extend_from_slice(&answer);
    event.extend_from_slice(b"\n\n");
    Ok((
        StatusCode::OK,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            // As rmcp's streams say, for proxies that would hold an event stream back.
            (
                header::HeaderName::from_static("x-accel-buffering"),
                HeaderValue::from_static("no"),
            ),
        ],
        Bytes::from(event),
    )
        .into_response())
}

/// Whether the request's head is one the lane may take (see the module docs).
fn plain<S: Surface>(
    method: &Method,
    headers: &HeaderMap,
    sessions: &Sessions,
    surface: &S,
) -> bool {
    if method != Method::POST {
        return false;
    }
    let Some(session) = single(headers, SESSION_ID) else {
        return false;
    };
    if !sessions.in_lane(session) {
        return false;
    }
    if headers.contains_key("mcp-method") || headers.contains_key("mcp-name") {
        return false;
    }
    if headers.contains_key("mcp-protocol-version")
        && !single(headers, "mcp-protocol-version").is_some_and(|v| SESSION_REVISIONS.contains(&v))
    {
        return false;
    }
    let accepts = |kind: &str| {
        headers.get_all(header::ACCEPT).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|m| essence(m).eq_ignore_ascii_case(kind)))
        })
    };
    if !accepts("application/json") || !accepts("text/event-stream") {
        return false;
    }
    let json = single(headers, header::CONTENT_TYPE.as_str())
        .is_some_and(|v| essence(v).eq_ignore_ascii_case("application/json"));
    let length = single(headers, header::CONTENT_LENGTH.as_str())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|n| n <= surface.options().http.guard.max_body_bytes);
    json && length
}

/// The one value of header `name`, when there is exactly one and it is text.
fn single<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    first.to_str().ok()
}

/// A media type without its parameters.
fn essence(media: &str) -> &str {
    media.split(';').next().unwrap_or_default().trim()
}
