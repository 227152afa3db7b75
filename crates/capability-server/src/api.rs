//! The JSON handlers of `/api/v1`: parse, call the host, render.

use std::collections::HashMap;
use std::time::Duration;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use capability_core::discovery::DiscoveryQuery;
use capability_host::remote::MAX_BATCH;
use capability_host::{
    ActionReport, ActionRequest, ApprovalDecision, ApprovalFilter, ApprovalStatus, AuditFilter,
    ExportFormat, HostError, Outcome, ReceiptFilter, Request, approval_document, approval_json,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::Authenticated;
use crate::error::ApiError;
use crate::state::{AppState, blocking};

type Params = Query<HashMap<String, String>>;
type ApiResult = Result<Response, ApiError>;

fn ok(value: Value) -> ApiResult {
    Ok(json_response(StatusCode::OK, &value))
}

pub(crate) fn json_response(status: StatusCode, value: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// A JSON body read as the CLI reads its input (the project's parser, one level more than
/// the nesting limit for the body around the input), so that every surface accepts the
/// same inputs and refuses deeper ones with the one message.
fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return serde_json::from_value(json!({}))
            .map_err(|e| ApiError::bad_request(format!("the body is required: {e}")));
    }
    let value = capability_core::json::parse_message(body).map_err(|e| {
        if e.is_too_deep() {
            ApiError::bad_request(capability_core::json::too_deep("Input"))
        } else {
            ApiError::bad_request(format!("the body is not valid: {e}"))
        }
    })?;
    serde_json::from_value(value)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid: {e}")))
}

/// A positive integer query parameter (`limit`, `before`).
fn number(params: &HashMap<String, String>, key: &str) -> Result<Option<u64>, ApiError> {
    match params.get(key).filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => match s.parse::<u64>() {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err(ApiError::bad_request(format!(
                "{key} must be a positive integer, not {s:?}"
            ))),
        },
    }
}

fn limit(params: &HashMap<String, String>) -> Result<Option<usize>, ApiError> {
    Ok(number(params, "limit")?.map(|n| usize::try_from(n).unwrap_or(usize::MAX)))
}

fn text(params: &HashMap<String, String>, key: &str) -> Option<String> {
    params.get(key).filter(|v| !v.is_empty()).cloned()
}

pub(crate) async fn whoami(Extension(a): Extension<Authenticated>) -> ApiResult {
    let p = &a.principal;
    ok(json!({
        "principal": p.id(),
        "name": p.name(),
        "role": p.role().as_str(),
        "agentId": p.agent_id(),
        "tenant": p.tenant(),
        "tenants": p.tenants(),
    }))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CallBody {
    capability: String,
    #[serde(default)]
    input: Option<Value>,
    timeout_ms: Option<u64>,
    metadata: Option<Value>,
    /// Only on /resume.
    token: Option<String>,
}

fn request_of(a: &Authenticated, capability: String, body: &CallBody) -> Request {
    let mut request = Request::new(capability, body.input.clone().unwrap_or_else(|| json!({})))
        .by(a.principal.actor());
    request.timeout = body.timeout_ms.map(Duration::from_millis);
    request.metadata.clone_from(&body.metadata);
    request
}

fn outcome_response(outcome: Outcome) -> ApiResult {
    match outcome {
        Outcome::Completed(done) => ok(json!({"receipt": done.receipt.to_value()})),
        Outcome::NeedsApproval(pending) => Ok(json_response(
            StatusCode::ACCEPTED,
            &approval_document(&pending),
        )),
        Outcome::Failed(e) => Err(ApiError::capability(e)),
    }
}

fn resolve(state: &AppState, id: &str) -> Result<String, ApiError> {
    state.host.resolve(id).map_err(ApiError::capability)
}

pub(crate) async fn invoke(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
    body: Bytes,
) -> ApiResult {
    let body: CallBody = parse(&body)?;
    if body.token.is_some() {
        return Err(ApiError::bad_request(
            "an approval token is redeemed with POST /api/v1/resume",
        ));
    }
    let request = request_of(&a, resolve(&state, &body.capability)?, &body);
    outcome_response(blocking(|| state.host.invoke(&request)))
}

pub(crate) async fn plan(
    State(state): State<AppState>,
    Extension(_a): Extension<Authenticated>,
    body: Bytes,
) -> ApiResult {
    let body: CallBody = parse(&body)?;
    let id = resolve(&state, &body.capability)?;
    let input = body.input.unwrap_or_else(|| json!({}));
    let plan = blocking(|| state.host.plan(&id, input)).map_err(ApiError::capability)?;
    ok(json!({"plan": plan.to_value()}))
}

pub(crate) async fn resume(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
    body: Bytes,
) -> ApiResult {
    let body: CallBody = parse(&body)?;
    let Some(token) = body.token.clone() else {
        return Err(ApiError::bad_request("token is required"));
    };
    let request = request_of(&a, resolve(&state, &body.capability)?, &body);
    outcome_response(blocking(|| state.host.resume(&request, &token)))
}

pub(crate) async fn approvals(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
    Query(params): Params,
) -> ApiResult {
    let status = text(&params, "status")
        .map(|s| ApprovalStatus::parse(&s).map_err(|e| ApiError::bad_request(e.to_string())))
        .transpose()?;
    let filter = ApprovalFilter {
        status,
        tenant: text(&params, "tenant"),
        limit: Some(limit(&params)?.unwrap_or(100).min(10_000)),
    };
    let list = blocking(|| state.host.approvals(&a.principal, &filter))?;
    ok(json!({"approvals": list.approvals.iter().map(approval_json).collect::<Vec<_>>()}))
}

pub(crate) async fn approval(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
    Path(id): Path<String>,
) -> ApiResult {
    let record = blocking(|| state.host.approval(&a.principal, &id))?;
    ok(json!({"approval": approval_json(&record)}))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DecideBody {
    comment: Option<String>,
}

async fn decide(
    state: AppState,
    a: Authenticated,
    id: String,
    body: Bytes,
    decision: ApprovalDecision,
) -> ApiResult {
    let body: DecideBody = parse(&body)?;
    let decided = blocking(|| {
        state
            .host
            .decide_approval(&a.principal, &id, decision, body.comment)
    })?;
    let r = &decided.record;
    let mut out = json!({"approval": approval_json(r)});
    if let Some(token) = &decided.token {
        out["token"] = json!(token.0);
        out["tokenExpiresAt"] = json!(r.token_expires_at.map(capability_core::js::iso_from_millis));
    }
    ok(out)
}

pub(crate) async fn approve(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    decide(state, a, id, body, ApprovalDecision::Approve).await
}

pub(crate) async fn deny(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    decide(state, a, id, body, ApprovalDecision::Deny).await
}

/// The audit filters of a query string.
pub(crate) fn audit_filter(params: &HashMap<String, String>) -> Result<AuditFilter, ApiError> {
    Ok(AuditFilter {
        tenant: text(params, "tenant"),
        agent: text(params, "agent"),
        capability: text(params, "capability"),
        decision: text(params, "decision"),
        since: text(params, "since"),
        until: text(params, "until"),
        before: number(params, "before")?,
        limit: limit(params)?,
    })
}

pub(crate) async fn audit(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
    Query(params): Params,
) -> ApiResult {
    let query = audit_filter(&params)?
        .query()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let page = blocking(|| state.host.audit_query(&a.principal, &query))?;
    ok(page.to_json())
}

pub(crate) async fn audit_verify(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
    Query(params): Params,
) -> ApiResult {
    let tenant = text(&params, "tenant");
    let report = blocking(|| state.host.verify_audit(&a.principal, tenant.as_deref()))?;
    ok(report.to_json())
}

pub(crate) async fn audit_export(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
    Query(params): Params,
) -> ApiResult {
    let format = params.get("format").map_or("jsonl", String::as_str);
    let format = ExportFormat::parse(format).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let tenant = text(&params, "tenant");
    let mut buf = Vec::new();
    blocking(|| {
        state.host.export_audit(
            &a.principal,
            tenant.as_deref(),
            format,
            "cap-serve",
            &mut buf,
        )
    })?;
    let content_type = match format {
        ExportFormat::Jsonl => "application/x-ndjson",
        ExportFormat::Otel => "application/json",
    };
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, content_type)], buf).into_response())
}

pub(crate) async fn audit_event(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
    Path(id): Path<String>,
) -> ApiResult {
    let record = blocking(|| state.host.audit_event(&a.principal, &id))?;
    ok(json!({"event": record.to_json()}))
}

/// The receipt filters of a query string.
pub(crate) fn receipt_filter(params: &HashMap<String, String>) -> Result<ReceiptFilter, ApiError> {
    Ok(ReceiptFilter {
        capability: text(params, "capability"),
        status: text(params, "status"),
        since: text(params, "since"),
        until: text(params, "until"),
        limit: Some(limit(params)?.unwrap_or(100)),
    })
}

pub(crate) async fn receipts(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
    Query(params): Params,
) -> ApiResult {
    let query = receipt_filter(&params)?
        .query()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let list = blocking(|| state.host.receipts(&a.principal, &query))?;
    ok(json!({"receipts": list.receipts.iter().map(|r| r.to_value()).collect::<Vec<_>>()}))
}

pub(crate) async fn receipt(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
    Path(id): Path<String>,
) -> ApiResult {
    let receipt = blocking(|| state.host.receipt(&a.principal, &id))?;
    ok(json!({"receipt": receipt.to_value()}))
}

pub(crate) async fn policies(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
) -> ApiResult {
    let fixtures = state.options.policy_fixtures.clone();
    ok(blocking(|| {
        state.host.policy_report(&a.principal, fixtures.as_deref())
    })?)
}

pub(crate) async fn policies_test(
    State(state): State<AppState>,
    Extension(_a): Extension<Authenticated>,
    body: Bytes,
) -> ApiResult {
    let files = state.host.policy_files().to_vec();
    if files.is_empty() {
        return Err(ApiError::bad_request(
            "the server was started without --policy files",
        ));
    }
    let report = blocking(|| state.host.test_policies(&files, &body, "request body", &[]))?;
    ok(capability_host::policies::fixture_report_json(&report))
}

pub(crate) async fn capabilities(
    State(state): State<AppState>,
    Extension(_a): Extension<Authenticated>,
    Query(params): Params,
) -> ApiResult {
    if let Some(q) = params.get("q") {
        let query = DiscoveryQuery {
            text: q.clone(),
            limit: Some(limit(&params)?.unwrap_or(10).min(1000)),
            ..Default::default()
        };
        let hits: Vec<Value> = state
            .host
            .find(&query)
            .into_iter()
            .map(|h| h.item.hit_json(h.score, &h.reasons))
            .collect();
        return ok(json!({"hits": hits}));
    }
    let list: Vec<Value> = state
        .host
        .capabilities()
        .iter()
        .map(|c| {
            let m = c.manifest();
            json!({
                "id": m.id,
                "name": m.name,
                "version": m.version,
                "description": m.description,
                "effects": m.effects(),
            })
        })
        .collect();
    let mut list = list;
    list.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    ok(json!({"capabilities": list}))
}

pub(crate) async fn capability(
    State(state): State<AppState>,
    Extension(_a): Extension<Authenticated>,
    Path(id): Path<String>,
) -> ApiResult {
    let inspected = state.host.inspect(&id).map_err(ApiError::capability)?;
    ok(json!({"capability": inspected}))
}

/// A JSON body as a value (an empty body is `{}`).
fn parse_value(body: &[u8]) -> Result<Value, ApiError> {
    parse(body)
}

fn invalid(e: capability_host::error::InvalidRequest) -> ApiError {
    ApiError::Host(HostError::from(e))
}

pub(crate) async fn decide_action(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
    body: Bytes,
) -> ApiResult {
    let request = ActionRequest::from_json(&parse_value(&body)?).map_err(invalid)?;
    let decided = blocking(|| state.host.decide_action(&a.principal, request))?;
    ok(decided.to_json())
}

pub(crate) async fn decide_actions(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
    body: Bytes,
) -> ApiResult {
    let body = parse_value(&body)?;
    let Some(items) = body.get("actions").and_then(Value::as_array) else {
        return Err(ApiError::bad_request(
            "a batch is {\"actions\": [...]}, each an action as POST /api/v1/actions takes",
        ));
    };
    if items.is_empty() || items.len() > MAX_BATCH {
        return Err(ApiError::bad_request(format!(
            "a batch holds 1 to {MAX_BATCH} actions, not {}",
            items.len()
        )));
    }
    let results: Vec<Value> = blocking(|| {
        items
            .iter()
            .map(|item| {
                ActionRequest::from_json(item)
                    .map_err(HostError::from)
                    .and_then(|r| state.host.decide_action(&a.principal, r))
                    .map_or_else(
                        |e| json!({"error": {"code": e.code(), "message": e.to_string()}}),
                        |d| d.to_json(),
                    )
            })
            .collect()
    });
    ok(json!({"results": results}))
}

pub(crate) async fn action_result(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let report = ActionReport::from_json(&parse_value(&body)?).map_err(invalid)?;
    let closed = blocking(|| state.host.report_action(&a.principal, &id, report))?;
    ok(closed.to_json())
}

pub(crate) async fn register_capability(
    State(state): State<AppState>,
    Extension(a): Extension<Authenticated>,
    body: Bytes,
) -> ApiResult {
    let description = parse_value(&body)?;
    let declared = blocking(|| state.host.register_governed(&a.principal, &description))?;
    ok(json!({"capability": {
        "name": declared.name,
        "id": declared.id,
        "governance": declared.governance.to_json(),
    }}))
}
