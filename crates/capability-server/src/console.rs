//! The console: server-rendered pages over the same host calls as the API. Every action
//! that changes state is a plain form with the session's CSRF token; `app.js` only adds
//! live updates of the pending list.

use std::collections::HashMap;
use std::fmt::Write as _;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use capability_host::{
    ApprovalDecision, ApprovalFilter, ApprovalRecord, ApprovalStatus, Credential, Principal,
};
use serde_json::Value;

use crate::api;
use crate::auth::{self, Authenticated};
use crate::error::ApiError;
use crate::events;
use crate::html::{esc, esc_into, page, pretty, redact, url};
use crate::state::{AppState, blocking};

type Params = Query<HashMap<String, String>>;

fn html(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A page saying why a request was refused.
pub(crate) fn refused(status: StatusCode, message: &str) -> Response {
    html(
        status,
        page(
            "Refused",
            None,
            "",
            &format!(
                "<p class=\"banner status-bad\" role=\"alert\">{}</p><p><a href=\"/console/approvals\">Back to the console</a></p>",
                esc(message)
            ),
        ),
    )
}

fn error_page(p: &Authenticated, e: &ApiError) -> Response {
    html(
        e.status(),
        page(
            "Refused",
            who(p),
            "",
            &format!(
                "<p class=\"banner status-bad\" role=\"alert\">{}: {}</p>",
                esc(e.code()),
                esc(&e.message())
            ),
        ),
    )
}

/// A console form whose CSRF token matched the session's (403 otherwise); the console
/// gate has put the session's principal in the request.
pub(crate) struct CsrfForm {
    pub principal: Authenticated,
    pub fields: HashMap<String, String>,
}

impl<S: Send + Sync> FromRequest<S> for CsrfForm {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let principal = request
            .extensions()
            .get::<Authenticated>()
            .cloned()
            .ok_or_else(|| StatusCode::UNAUTHORIZED.into_response())?;
        let body = Bytes::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let fields = auth::parse_form(&body);
        let presented = fields.get("csrf").map(String::as_str).unwrap_or_default();
        if !principal
            .csrf
            .as_deref()
            .is_some_and(|c| auth::same(c, presented))
        {
            return Err(refused(
                StatusCode::FORBIDDEN,
                "The form's CSRF token is missing or wrong. Reload the page and try again.",
            ));
        }
        Ok(CsrfForm { principal, fields })
    }
}

/// Console pages need a session of a principal that may read.
async fn console_gate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let Some(p) = auth::session_principal(&state, request.headers()) else {
        if request.method() == axum::http::Method::GET {
            return Redirect::to("/login").into_response();
        }
        return refused(StatusCode::UNAUTHORIZED, "Sign in first.");
    };
    if !p.principal.may(capability_host::Access::Read) {
        return refused(
            StatusCode::FORBIDDEN,
            "Agent tokens use the API; the console is for approvers, auditors and admins.",
        );
    }
    request.extensions_mut().insert(p);
    next.run(request).await
}

pub(crate) fn routes(state: AppState) -> Router<AppState> {
    let gated = Router::new()
        .route(
            "/console",
            get(|| async { Redirect::to("/console/approvals") }),
        )
        .route("/console/approvals", get(pending))
        .route("/console/approvals/{id}", get(approval))
        .route("/console/approvals/{id}/approve", post(approve))
        .route("/console/approvals/{id}/deny", post(deny))
        .route("/console/decided", get(decided))
        .route("/console/audit", get(audit))
        .route("/console/receipts", get(receipts))
        .route("/console/receipts/{id}", get(receipt))
        .route("/console/policies", get(policies))
        .route("/console/events", get(events::stream))
        .route("/logout", post(logout))
        .route_layer(middleware::from_fn_with_state(state, console_gate));
    Router::new()
        .route("/", get(|| async { Redirect::to("/console/approvals") }))
        .route("/login", get(login_form).post(login))
        .route(
            "/console/style.css",
            get(|| async { ([(header::CONTENT_TYPE, "text/css")], crate::html::STYLE) }),
        )
        .route(
            "/console/app.js",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript")],
                    crate::html::SCRIPT,
                )
            }),
        )
        .merge(gated)
}

const LOGIN_CSRF: &str = "cap_login_csrf";

fn login_page(csrf: &str, message: Option<&str>) -> String {
    let mut body = String::new();
    if let Some(m) = message {
        let _ = write!(
            body,
            "<p class=\"banner status-bad\" role=\"alert\">{}</p>",
            esc(m)
        );
    }
    let _ = write!(
        body,
        "<form class=\"card\" method=\"post\" action=\"/login\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <p><label for=\"login\">Login name <input id=\"login\" name=\"login\" autocomplete=\"username\" required autofocus></label></p>\
         <p><label for=\"password\">Password <input id=\"password\" name=\"password\" type=\"password\" autocomplete=\"current-password\" required></label></p>\
         <p><button class=\"approve\" type=\"submit\">Sign in</button></p></form>\
         <p class=\"muted\">Logins are made with <code>cap tokens add --role approver --login NAME --tenant T</code>.</p>",
        esc(csrf)
    );
    page("Sign in", None, "", &body)
}

fn login_csrf_cookie(state: &AppState, value: &str) -> String {
    format!(
        "{LOGIN_CSRF}={value}; Path=/login; HttpOnly; SameSite=Strict; Max-Age=3600{}",
        if state.options.secure_cookies {
            "; Secure"
        } else {
            ""
        }
    )
}

async fn login_form(State(state): State<AppState>) -> Response {
    let csrf = auth::random_secret();
    let mut r = html(StatusCode::OK, login_page(&csrf, None));
    if let Ok(v) = HeaderValue::from_str(&login_csrf_cookie(&state, &csrf)) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

async fn login(
    State(state): State<AppState>,
    peer: auth::Peer,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let form = auth::parse_form(&body);
    let presented = form.get("csrf").map(String::as_str).unwrap_or_default();
    let expected = auth::cookie(&headers, LOGIN_CSRF).unwrap_or_default();
    if expected.is_empty() || !auth::same(expected, presented) {
        return refused(
            StatusCode::FORBIDDEN,
            "The sign-in form's CSRF token is missing or wrong. Reload the sign-in page.",
        );
    }
    let name = form.get("login").map(String::as_str).unwrap_or_default();
    let password = form.get("password").map(String::as_str).unwrap_or_default();
    let principal = blocking(|| {
        state
            .host
            .authenticate_from(Credential::Login { name, password }, peer.0)
    });
    let principal = match principal {
        Ok(p) if p.may(capability_host::Access::Read) => p,
        Ok(_) => {
            return html(
                StatusCode::FORBIDDEN,
                login_page(presented, Some("Agent logins cannot use the console.")),
            );
        }
        Err(e) => {
            let status = match e {
                capability_host::AuthError::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::UNAUTHORIZED,
            };
            let mut r = html(status, login_page(presented, Some(&e.to_string())));
            if let capability_host::AuthError::Throttled { retry_after } = e {
                r.headers_mut().insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(retry_after.as_secs().max(1)),
                );
            }
            return r;
        }
    };
    let secret = auth::start_session(&state, &principal);
    let mut r = Redirect::to("/console/approvals").into_response();
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&auth::session_cookie(&state, &secret)) {
        h.append(header::SET_COOKIE, v);
    }
    if let Ok(v) = HeaderValue::from_str(&login_csrf_cookie(&state, "")) {
        h.append(header::SET_COOKIE, v);
    }
    r
}

async fn logout(State(state): State<AppState>, headers: HeaderMap, form: CsrfForm) -> Response {
    let _ = form.fields;
    auth::end_session(&state, &headers);
    let mut r = Redirect::to("/login").into_response();
    if let Ok(v) = HeaderValue::from_str(&auth::session_cookie(&state, "")) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

fn who(p: &Authenticated) -> Option<(&str, &'static str, &str)> {
    Some((
        p.name(),
        p.principal.role().as_str(),
        p.csrf.as_deref().unwrap_or_default(),
    ))
}

fn iso(ms: i64) -> String {
    capability_core::js::iso_from_millis(ms)
}

/// The exact call of an approval, as a definition list.
fn call_details(out: &mut String, r: &ApprovalRecord) {
    out.push_str("<dl class=\"call\">");
    let mut row = |k: &str, v: &str| {
        let _ = write!(out, "<dt>{k}</dt><dd>");
        esc_into(out, v);
        out.push_str("</dd>");
    };
    row("Capability", &r.capability);
    row("Tenant", r.tenant.as_deref().unwrap_or("(none)"));
    row("Agent", &r.agent_id);
    row("Requester", &r.requester);
    row("Environment", &r.environment);
    row(
        "Plan fingerprint",
        r.plan_fingerprint.as_deref().unwrap_or("(not a plan)"),
    );
    row(
        "Policies",
        &if r.policy_ids.is_empty() {
            "(none)".to_string()
        } else {
            r.policy_ids.join(", ")
        },
    );
    row("Reason", r.reason.as_deref().unwrap_or("(none given)"));
    row("Requested", &iso(r.created_at));
    row("Expires", &iso(r.expires_at));
    out.push_str(
        "</dl><div><span class=\"muted\">Input (secret-looking fields redacted)</span><pre><code>",
    );
    esc_into(out, &pretty(&redact(&r.input)));
    out.push_str("</code></pre></div>");
}

fn pending_card(out: &mut String, r: &ApprovalRecord, csrf: &str, may_decide: bool) {
    let id = esc(&r.approval_id);
    let _ = write!(
        out,
        "<article class=\"card approval\" id=\"{id}\" aria-labelledby=\"h-{id}\"><h2 id=\"h-{id}\"><a href=\"/console/approvals/{}\">{}</a> <span class=\"muted\">{id}</span></h2>",
        url(&r.approval_id),
        esc(&r.capability)
    );
    call_details(out, r);
    if may_decide {
        let path = url(&r.approval_id);
        let _ = write!(
            out,
            "<form class=\"decide\" method=\"post\" action=\"/console/approvals/{path}/approve\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <label for=\"c-{id}\">Comment <textarea id=\"c-{id}\" name=\"comment\" rows=\"1\" cols=\"40\"></textarea></label>\
             <button class=\"approve\" type=\"submit\" id=\"approve-{id}\">Approve</button>\
             <button class=\"deny\" type=\"submit\" id=\"deny-{id}\" formaction=\"/console/approvals/{path}/deny\">Deny</button>\
             </form>"
        );
    } else {
        out.push_str("<p class=\"muted\">You cannot decide this approval (not your tenant, or your own request).</p>");
    }
    out.push_str("</article>");
}

fn pending_list(records: &[ApprovalRecord], csrf: &str, viewer: &Principal) -> String {
    let mut out = String::with_capacity(records.len() * 1800 + 256);
    if records.is_empty() {
        out.push_str("<p class=\"muted\" id=\"no-pending\">Nothing is waiting for a decision.</p>");
    }
    let csrf = esc(csrf);
    for r in records {
        pending_card(&mut out, r, &csrf, viewer.may_decide(r));
    }
    out
}

/// The pending-approvals page for `viewer` (public for the bench).
pub fn render_pending_page(records: &[ApprovalRecord], csrf: &str, viewer: &Principal) -> String {
    let mut body = String::with_capacity(records.len() * 1800 + 1024);
    let _ = write!(
        body,
        "<p id=\"live-status\" role=\"status\" aria-live=\"polite\">{} pending. Live updates: connecting</p>\
         <section id=\"pending-list\" aria-label=\"Pending approvals\">",
        records.len()
    );
    body.push_str(&pending_list(records, csrf, viewer));
    body.push_str("</section>");
    page(
        "Pending approvals",
        Some((viewer.name(), viewer.role().as_str(), csrf)),
        "/console/approvals",
        &body,
    )
}

fn pending_records(state: &AppState, p: &Authenticated) -> Result<Vec<ApprovalRecord>, ApiError> {
    let filter = ApprovalFilter {
        status: Some(ApprovalStatus::Pending),
        tenant: None,
        limit: Some(10_000),
    };
    Ok(blocking(|| state.host.approvals(&p.principal, &filter))?.approvals)
}

async fn pending(
    State(state): State<AppState>,
    axum::Extension(p): axum::Extension<Authenticated>,
    Query(params): Params,
) -> Response {
    let records = match pending_records(&state, &p) {
        Ok(r) => r,
        Err(e) => return error_page(&p, &e),
    };
    let csrf = p.csrf.clone().unwrap_or_default();
    if params.contains_key("fragment") {
        return html(StatusCode::OK, pending_list(&records, &csrf, &p.principal));
    }
    html(
        StatusCode::OK,
        render_pending_page(&records, &csrf, &p.principal),
    )
}

fn status_line(r: &ApprovalRecord) -> String {
    let mut s = format!("<strong>{}</strong>", esc(r.status.as_str()));
    if let Some(by) = &r.decided_by {
        let _ = write!(s, " by <strong class=\"decider\">{}</strong>", esc(by));
    }
    if let Some(at) = r.decided_at {
        let _ = write!(s, " at {}", esc(&iso(at)));
    }
    if let Some(note) = &r.note {
        let _ = write!(s, " — “{}”", esc(note));
    }
    s
}

async fn approval(
    State(state): State<AppState>,
    axum::Extension(p): axum::Extension<Authenticated>,
    Path(id): Path<String>,
) -> Response {
    let r = match blocking(|| state.host.approval(&p.principal, &id)) {
        Ok(r) => r,
        Err(e) => return error_page(&p, &e.into()),
    };
    let mut body = String::new();
    let _ = write!(body, "<p class=\"banner\">Status: {}</p>", status_line(&r));
    if r.status == ApprovalStatus::Pending {
        pending_card(
            &mut body,
            &r,
            &esc(p.csrf.as_deref().unwrap_or_default()),
            p.principal.may_decide(&r),
        );
    } else {
        body.push_str("<div class=\"card\">");
        call_details(&mut body, &r);
        body.push_str("</div>");
    }
    html(
        StatusCode::OK,
        page(&format!("Approval {id}"), who(&p), "", &body),
    )
}

async fn approve(
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: CsrfForm,
) -> Response {
    let p = form.principal;
    let comment = form
        .fields
        .get("comment")
        .filter(|c| !c.trim().is_empty())
        .cloned();
    let decided = blocking(|| {
        state
            .host
            .decide_approval(&p.principal, &id, ApprovalDecision::Approve, comment)
    });
    match decided {
        Ok(decided) => {
            let r = decided.record;
            let token = decided.token.map(|t| t.0).unwrap_or_default();
            let input = capability_core::json::canonical_string(&r.input);
            let body = format!(
                "<p class=\"banner status-ok\" role=\"status\">Approved {} for {}.</p>\
                 <div class=\"card\"><h2>Token for the agent</h2>\
                 <p>Single use, bound to plan <code>{}</code>, valid until {}. Hand it to the agent, which retries the exact call with it:</p>\
                 <pre><code id=\"approval-token\">{}</code></pre>\
                 <pre><code>cap exec {} '{}' --approval &lt;token&gt;</code></pre></div>\
                 <p><a href=\"/console/approvals\">Back to pending approvals</a></p>",
                esc(&id),
                esc(&r.agent_id),
                esc(r.plan_fingerprint.as_deref().unwrap_or_default()),
                esc(&r.token_expires_at.map(iso).unwrap_or_default()),
                esc(&token),
                esc(&r.capability),
                esc(&input),
            );
            html(StatusCode::OK, page("Approved", who(&p), "", &body))
        }
        Err(e) => error_page(&p, &e.into()),
    }
}

async fn deny(State(state): State<AppState>, Path(id): Path<String>, form: CsrfForm) -> Response {
    let p = form.principal;
    let comment = form
        .fields
        .get("comment")
        .filter(|c| !c.trim().is_empty())
        .cloned();
    let decided = blocking(|| {
        state
            .host
            .decide_approval(&p.principal, &id, ApprovalDecision::Deny, comment)
    });
    match decided.map(|d| d.record) {
        Ok(r) => {
            let body = format!(
                "<p class=\"banner status-bad\" role=\"status\">Denied {}: {}</p><p><a href=\"/console/approvals\">Back to pending approvals</a></p>",
                esc(&id),
                status_line(&r)
            );
            html(StatusCode::OK, page("Denied", who(&p), "", &body))
        }
        Err(e) => error_page(&p, &e.into()),
    }
}

async fn decided(
    State(state): State<AppState>,
    axum::Extension(p): axum::Extension<Authenticated>,
) -> Response {
    let filter = ApprovalFilter {
        status: None,
        tenant: None,
        limit: Some(500),
    };
    let list = match blocking(|| state.host.approvals(&p.principal, &filter)) {
        Ok(l) => l.approvals,
        Err(e) => return error_page(&p, &e.into()),
    };
    let mut body = String::from(
        "<table><caption class=\"muted\">The newest 500 approvals that are no longer pending</caption><thead><tr><th scope=\"col\">Approval</th><th scope=\"col\">Capability</th><th scope=\"col\">Tenant</th><th scope=\"col\">Agent</th><th scope=\"col\">Decision</th><th scope=\"col\">Requested</th></tr></thead><tbody>",
    );
    for r in list.iter().filter(|r| r.status != ApprovalStatus::Pending) {
        let _ = write!(
            body,
            "<tr><td><a href=\"/console/approvals/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            url(&r.approval_id),
            esc(&r.approval_id),
            esc(&r.capability),
            esc(r.tenant.as_deref().unwrap_or("")),
            esc(&r.agent_id),
            status_line(r),
            esc(&iso(r.created_at))
        );
    }
    body.push_str("</tbody></table>");
    html(
        StatusCode::OK,
        page("Decided approvals", who(&p), "/console/decided", &body),
    )
}

fn field<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

fn filter_input(out: &mut String, name: &str, label: &str, params: &HashMap<String, String>) {
    let _ = write!(
        out,
        "<label for=\"f-{name}\">{label} <input id=\"f-{name}\" name=\"{name}\" value=\"{}\"></label>",
        esc(params.get(name).map(String::as_str).unwrap_or_default())
    );
}

async fn audit(
    State(state): State<AppState>,
    axum::Extension(p): axum::Extension<Authenticated>,
    Query(params): Params,
) -> Response {
    let query = match api::audit_filter(&params)
        .and_then(|f| f.query().map_err(|e| ApiError::bad_request(e.to_string())))
    {
        Ok(q) => q,
        Err(e) => return error_page(&p, &e),
    };
    let records = match blocking(|| state.host.audit_query(&p.principal, &query)) {
        Ok(page) => page.events,
        Err(e) => return error_page(&p, &e.into()),
    };
    let mut body = String::new();
    let tenant = query.tenant.clone();
    match blocking(|| state.host.verify_audit(&p.principal, tenant.as_deref())).map(|r| r.to_json())
    {
        Ok(v) if v["ok"] == true => {
            let _ = write!(
                body,
                "<p class=\"banner status-ok\" id=\"chain-status\">Hash chain verified: {} records, head at seq {}.</p>",
                v["records"], v["headSeq"]
            );
        }
        Ok(v) => {
            let _ = write!(
                body,
                "<p class=\"banner status-bad\" id=\"chain-status\" role=\"alert\">Hash chain BROKEN at seq {}: {}</p>",
                v["firstBad"]["seq"],
                esc(v["firstBad"]["problem"].as_str().unwrap_or_default())
            );
        }
        Err(e) => {
            let _ = write!(
                body,
                "<p class=\"banner status-bad\" id=\"chain-status\">Cannot verify: {}</p>",
                esc(&e.to_string())
            );
        }
    }
    body.push_str("<form class=\"filters\" method=\"get\" action=\"/console/audit\" aria-label=\"Filter the audit log\">");
    filter_input(&mut body, "tenant", "Tenant", &params);
    filter_input(&mut body, "agent", "Agent", &params);
    filter_input(&mut body, "capability", "Capability", &params);
    filter_input(&mut body, "decision", "Decision", &params);
    filter_input(&mut body, "since", "Since (ISO 8601)", &params);
    filter_input(&mut body, "until", "Until (ISO 8601)", &params);
    filter_input(&mut body, "limit", "Limit", &params);
    body.push_str("<button class=\"plain\" type=\"submit\">Filter</button></form>");
    let _ = write!(
        body,
        "<table id=\"audit-events\"><caption class=\"muted\">{} events, oldest first</caption><thead><tr><th scope=\"col\">Seq</th><th scope=\"col\">Time</th><th scope=\"col\">Agent</th><th scope=\"col\">Tenant</th><th scope=\"col\">Capability</th><th scope=\"col\">Stage</th><th scope=\"col\">Decision</th><th scope=\"col\">Outcome</th><th scope=\"col\">Reason</th><th scope=\"col\">Approval</th><th scope=\"col\">Receipt</th></tr></thead><tbody>",
        records.len()
    );
    for r in &records {
        let e = &r.event;
        let receipt = field(e, "receipt_id");
        let receipt_cell = if receipt.is_empty() {
            String::new()
        } else {
            format!(
                "<a href=\"/console/receipts/{}\">{}</a>",
                url(receipt),
                esc(receipt)
            )
        };
        let approval = field(e, "approval_id");
        let approval_cell = if approval.is_empty() {
            String::new()
        } else {
            format!(
                "<a href=\"/console/approvals/{}\">{}</a>",
                url(approval),
                esc(approval)
            )
        };
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r.seq,
            esc(field(e, "timestamp")),
            esc(field(e, "agent_id")),
            esc(field(e, "tenant_id")),
            esc(field(e, "capability_name")),
            esc(field(e, "stage")),
            esc(field(e, "decision")),
            esc(field(e, "outcome")),
            esc(field(e, "reason")),
            approval_cell,
            receipt_cell
        );
    }
    body.push_str("</tbody></table>");
    html(
        StatusCode::OK,
        page("Audit log", who(&p), "/console/audit", &body),
    )
}

async fn receipts(
    State(state): State<AppState>,
    axum::Extension(p): axum::Extension<Authenticated>,
    Query(params): Params,
) -> Response {
    let query = match api::receipt_filter(&params)
        .and_then(|f| f.query().map_err(|e| ApiError::bad_request(e.to_string())))
    {
        Ok(q) => q,
        Err(e) => return error_page(&p, &e),
    };
    let list = match blocking(|| state.host.receipts(&p.principal, &query)) {
        Ok(l) => l.receipts,
        Err(e) => return error_page(&p, &e.into()),
    };
    let mut body = String::from(
        "<form class=\"filters\" method=\"get\" action=\"/console/receipts\" aria-label=\"Filter receipts\">",
    );
    filter_input(&mut body, "capability", "Capability", &params);
    filter_input(&mut body, "status", "Status", &params);
    filter_input(&mut body, "limit", "Limit", &params);
    body.push_str("<button class=\"plain\" type=\"submit\">Filter</button></form><table><thead><tr><th scope=\"col\">Receipt</th><th scope=\"col\">Capability</th><th scope=\"col\">Status</th><th scope=\"col\">Started</th></tr></thead><tbody>");
    for r in &list {
        let v = r.to_value();
        let id = field(&v, "receiptId");
        let _ = write!(
            body,
            "<tr><td><a href=\"/console/receipts/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            url(id),
            esc(id),
            esc(v
                .pointer("/capability/id")
                .and_then(Value::as_str)
                .unwrap_or_default()),
            esc(field(&v, "status")),
            esc(field(&v, "startedAt"))
        );
    }
    body.push_str("</tbody></table>");
    html(
        StatusCode::OK,
        page("Receipts", who(&p), "/console/receipts", &body),
    )
}

async fn receipt(
    State(state): State<AppState>,
    axum::Extension(p): axum::Extension<Authenticated>,
    Path(id): Path<String>,
) -> Response {
    match blocking(|| state.host.receipt(&p.principal, &id)) {
        Ok(r) => {
            let body = format!(
                "<div class=\"card\"><pre><code id=\"receipt-json\">{}</code></pre></div>",
                esc(&pretty(&r.to_value()))
            );
            html(
                StatusCode::OK,
                page(
                    &format!("Receipt {id}"),
                    who(&p),
                    "/console/receipts",
                    &body,
                ),
            )
        }
        Err(e) => error_page(&p, &e.into()),
    }
}

async fn policies(
    State(state): State<AppState>,
    axum::Extension(p): axum::Extension<Authenticated>,
) -> Response {
    let fixtures = state.options.policy_fixtures.clone();
    let doc = match blocking(|| state.host.policy_report(&p.principal, fixtures.as_deref())) {
        Ok(d) => d,
        Err(e) => return error_page(&p, &e.into()),
    };
    let mut body = String::new();
    let v = &doc["validation"];
    if v["valid"] == true {
        let _ = write!(
            body,
            "<p class=\"banner status-ok\" id=\"policy-validation\">{} policies, valid against the schema of this host's capabilities.</p>",
            v["policies"]
        );
    } else {
        let _ = write!(
            body,
            "<div class=\"banner status-bad\" id=\"policy-validation\" role=\"alert\"><p>The policies do not validate.</p><ul>"
        );
        if let Some(e) = v["error"].as_str() {
            let _ = write!(body, "<li>{}</li>", esc(e));
        }
        for d in v["diagnostics"].as_array().into_iter().flatten() {
            let _ = write!(
                body,
                "<li>{}:{}:{}: {}</li>",
                esc(field(d, "file")),
                d["line"],
                d["column"],
                esc(field(d, "message"))
            );
        }
        body.push_str("</ul></div>");
    }
    let tests = &doc["tests"];
    if tests.is_null() {
        body.push_str("<p class=\"muted\">No fixtures configured (start with <code>--policy-fixtures FILE</code>, or POST them to <code>/api/v1/policies/test</code>).</p>");
    } else if let Some(e) = tests["error"].as_str() {
        let _ = write!(
            body,
            "<p class=\"banner status-bad\">Fixtures: {}</p>",
            esc(e)
        );
    } else {
        let _ = write!(
            body,
            "<h2>Fixture results: {} passed, {} failed</h2><table id=\"policy-tests\"><thead><tr><th scope=\"col\">Case</th><th scope=\"col\">Capability</th><th scope=\"col\">Expected</th><th scope=\"col\">Actual</th><th scope=\"col\">Policies</th><th scope=\"col\">Result</th></tr></thead><tbody>",
            tests["passed"], tests["failed"]
        );
        for r in tests["results"].as_array().into_iter().flatten() {
            let passed = r["passed"] == true;
            let actual = match &r["actual"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\">{}</td></tr>",
                esc(field(r, "name")),
                esc(field(r, "capability")),
                esc(field(r, "expected")),
                esc(&actual),
                esc(&r["policyIds"]
                    .as_array()
                    .map(|a| a
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", "))
                    .unwrap_or_default()),
                if passed { "status-ok" } else { "status-bad" },
                if passed { "pass" } else { "FAIL" }
            );
        }
        body.push_str("</tbody></table>");
    }
    for f in doc["files"].as_array().into_iter().flatten() {
        let _ = write!(
            body,
            "<div class=\"card\"><h2>{}</h2><pre><code>{}</code></pre></div>",
            esc(field(f, "path")),
            esc(field(f, "text"))
        );
    }
    html(
        StatusCode::OK,
        page("Policies", who(&p), "/console/policies", &body),
    )
}
