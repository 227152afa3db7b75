//! The JSON handlers of `/api/v1`: parse, call the host, render.

use std::collections::HashMap;
use std::time::Duration;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use capability_core::discovery::DiscoveryQuery;
use capability_core::receipt::ReceiptStatus;
use capability_host::{Outcome, Request, approval_document};
use capability_policy::approvals::{ApprovalError, ApprovalFilter, ApprovalRecord};
use capability_policy::audit::AuditRecord;
use capability_policy::{ApprovalStatus, CapabilityRegistry, GovernedCapability, audit};
use capability_runtime::store::ReceiptQuery;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::Principal;
use crate::{ApiError, AppState, blocking};

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

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return serde_json::from_value(json!({}))
            .map_err(|e| ApiError::bad_request(format!("the body is required: {e}")));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid: {e}")))
}

fn limit(params: &HashMap<String, String>, default: usize, max: usize) -> Result<usize, ApiError> {
    match params.get("limit") {
        None => Ok(default),
        Some(s) => match s.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n.min(max)),
            _ => Err(ApiError::bad_request(format!(
                "limit must be a positive integer, not {s:?}"
            ))),
        },
    }
}

fn date(params: &HashMap<String, String>, key: &str) -> Result<Option<String>, ApiError> {
    match params.get(key) {
        None => Ok(None),
        Some(t) if capability_core::dates::is_date_string(t) => Ok(Some(t.clone())),
        Some(t) => Err(ApiError::bad_request(format!(
            "{key} must be an ISO 8601 date, not {t:?}"
        ))),
    }
}

pub(crate) async fn openapi() -> Response {
    json_response(StatusCode::OK, &crate::routes::openapi())
}

pub(crate) async fn whoami(Extension(p): Extension<Principal>) -> ApiResult {
    ok(json!({
        "principal": p.principal_id(),
        "name": p.name(),
        "role": p.role().as_str(),
        "agentId": p.record.agent_id,
        "tenant": p.record.tenant,
        "tenants": p.record.tenants,
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

fn request_of(p: &Principal, body: &CallBody) -> Request {
    let mut request = Request::new(
        body.capability.clone(),
        body.input.clone().unwrap_or_else(|| json!({})),
    )
    .by(p.record.actor());
    request.timeout = body.timeout_ms.map(Duration::from_millis);
    request.metadata.clone_from(&body.metadata);
    request
}

fn outcome_response(outcome: Outcome) -> ApiResult {
    match outcome {
        Outcome::Completed(receipt) => ok(json!({"receipt": receipt.to_value()})),
        Outcome::NeedsApproval(pending) => Ok(json_response(
            StatusCode::ACCEPTED,
            &approval_document(&pending),
        )),
        Outcome::Failed(e) => Err(ApiError::capability(&e)),
    }
}

fn resolve(state: &AppState, id: &str) -> Result<String, ApiError> {
    state.host.resolve(id).map_err(|e| ApiError::capability(&e))
}

pub(crate) async fn invoke(
    State(state): State<AppState>,
    Extension(p): Extension<Principal>,
    body: Bytes,
) -> ApiResult {
    let mut body: CallBody = parse(&body)?;
    if body.token.is_some() {
        return Err(ApiError::bad_request(
            "an approval token is redeemed with POST /api/v1/resume",
        ));
    }
    body.capability = resolve(&state, &body.capability)?;
    let request = request_of(&p, &body);
    outcome_response(blocking(|| state.host.invoke(&request)))
}

pub(crate) async fn plan(
    State(state): State<AppState>,
    Extension(_p): Extension<Principal>,
    body: Bytes,
) -> ApiResult {
    let body: CallBody = parse(&body)?;
    let id = resolve(&state, &body.capability)?;
    let input = body.input.unwrap_or_else(|| json!({}));
    let plan = blocking(|| state.host.plan(&id, input)).map_err(|e| ApiError::capability(&e))?;
    ok(json!({"plan": serde_json::to_value(&plan).map_err(ApiError::internal)?}))
}

pub(crate) async fn resume(
    State(state): State<AppState>,
    Extension(p): Extension<Principal>,
    body: Bytes,
) -> ApiResult {
    let mut body: CallBody = parse(&body)?;
    let Some(token) = body.token.clone() else {
        return Err(ApiError::bad_request("token is required"));
    };
    body.capability = resolve(&state, &body.capability)?;
    let request = request_of(&p, &body);
    outcome_response(blocking(|| state.host.resume(&request, &token)))
}

fn approval_error(e: ApprovalError) -> ApiError {
    let message = e.to_string();
    match e {
        ApprovalError::NotFound { .. } => ApiError::not_found(message),
        ApprovalError::NotPending { .. } | ApprovalError::Expired { .. } => {
            ApiError::new(StatusCode::CONFLICT, "NOT_PENDING", message)
        }
        ApprovalError::SelfApproval { .. } => {
            ApiError::new(StatusCode::FORBIDDEN, "SELF_APPROVAL", message)
        }
        ApprovalError::NoApprover => ApiError::bad_request(message),
        _ => ApiError::internal(message),
    }
}

/// The approvals a principal may see.
pub(crate) fn list_approvals(
    state: &AppState,
    p: &Principal,
    filter: &ApprovalFilter,
) -> Result<Vec<ApprovalRecord>, ApiError> {
    let list = blocking(|| state.host.approvals().list(filter)).map_err(approval_error)?;
    Ok(list
        .into_iter()
        .filter(|r| p.sees_tenant(r.tenant.as_deref()))
        .collect())
}

pub(crate) fn get_approval(
    state: &AppState,
    p: &Principal,
    id: &str,
) -> Result<ApprovalRecord, ApiError> {
    let record = blocking(|| state.host.approvals().get(id)).map_err(approval_error)?;
    if !p.sees_tenant(record.tenant.as_deref()) {
        // Not this approver's tenant: as if it did not exist.
        return Err(ApiError::not_found(format!(
            "approval `{id}` does not exist"
        )));
    }
    Ok(record)
}

/// The JSON of an approval as the API shows it.
pub(crate) fn approval_json(r: &ApprovalRecord) -> Value {
    let mut v = r.to_json();
    v["id"] = json!(r.approval_id);
    v["decidedAtIso"] = json!(r.decided_at.map(capability_core::js::iso_from_millis));
    v
}

pub(crate) async fn approvals(
    State(state): State<AppState>,
    Extension(p): Extension<Principal>,
    Query(params): Params,
) -> ApiResult {
    let status = params
        .get("status")
        .map(|s| ApprovalStatus::parse(s).map_err(|e| ApiError::bad_request(e.to_string())))
        .transpose()?;
    let filter = ApprovalFilter {
        status,
        tenant: params.get("tenant").cloned(),
        limit: Some(limit(&params, 100, 10_000)?),
    };
    let list = list_approvals(&state, &p, &filter)?;
    ok(json!({"approvals": list.iter().map(approval_json).collect::<Vec<_>>()}))
}

pub(crate) async fn approval(
    State(state): State<AppState>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult {
    ok(json!({"approval": approval_json(&get_approval(&state, &p, &id)?)}))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DecideBody {
    comment: Option<String>,
}

/// Whether `p` may decide `record`: its tenants, and never its own request.
pub(crate) fn check_decider(p: &Principal, record: &ApprovalRecord) -> Result<(), ApiError> {
    if !p.record.may_approve_for(record.tenant.as_deref()) {
        return Err(ApiError::forbidden(format!(
            "{} may not decide approvals of tenant {}",
            p.name(),
            record.tenant.as_deref().unwrap_or("(none)")
        )));
    }
    let own = record.requester == p.principal_id()
        || record.requester == p.name()
        || record.agent_id == p.name()
        || record.agent_id == p.record.agent_id;
    if own {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "SELF_APPROVAL",
            format!(
                "{} requested approval `{}` and cannot decide it",
                p.name(),
                record.approval_id
            ),
        ));
    }
    Ok(())
}

/// Approves for `p`; returns the token and the updated record.
pub(crate) fn do_approve(
    state: &AppState,
    p: &Principal,
    id: &str,
    comment: Option<String>,
) -> Result<(String, ApprovalRecord), ApiError> {
    let record = get_approval(state, p, id)?;
    check_decider(p, &record)?;
    let token = blocking(|| state.host.approvals().approve(id, p.name(), comment))
        .map_err(approval_error)?;
    let record = blocking(|| state.host.approvals().get(id)).map_err(approval_error)?;
    Ok((token.0, record))
}

pub(crate) fn do_deny(
    state: &AppState,
    p: &Principal,
    id: &str,
    comment: Option<String>,
) -> Result<ApprovalRecord, ApiError> {
    let record = get_approval(state, p, id)?;
    check_decider(p, &record)?;
    blocking(|| state.host.approvals().deny(id, p.name(), comment)).map_err(approval_error)
}

pub(crate) async fn approve(
    State(state): State<AppState>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let body: DecideBody = parse(&body)?;
    let (token, record) = do_approve(&state, &p, &id, body.comment)?;
    ok(json!({
        "approval": approval_json(&record),
        "token": token,
        "tokenExpiresAt": record.token_expires_at.map(capability_core::js::iso_from_millis),
    }))
}

pub(crate) async fn deny(
    State(state): State<AppState>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let body: DecideBody = parse(&body)?;
    let record = do_deny(&state, &p, &id, body.comment)?;
    ok(json!({"approval": approval_json(&record)}))
}

/// Filters of the audit log.
#[derive(Clone, Debug, Default)]
pub(crate) struct AuditFilter {
    pub tenant: Option<String>,
    pub agent: Option<String>,
    pub capability: Option<String>,
    pub decision: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub limit: usize,
}

impl AuditFilter {
    pub fn from_params(params: &HashMap<String, String>) -> Result<AuditFilter, ApiError> {
        let text = |k: &str| params.get(k).filter(|v| !v.is_empty()).cloned();
        Ok(AuditFilter {
            tenant: text("tenant"),
            agent: text("agent"),
            capability: text("capability"),
            decision: text("decision"),
            since: date(params, "since")?.filter(|v| !v.is_empty()),
            until: date(params, "until")?.filter(|v| !v.is_empty()),
            limit: limit(params, 100, 10_000)?,
        })
    }

    fn narrows(&self) -> bool {
        self.agent.is_some()
            || self.capability.is_some()
            || self.decision.is_some()
            || self.since.is_some()
            || self.until.is_some()
    }

    fn matches(&self, r: &AuditRecord) -> bool {
        let field = |k: &str| r.event.get(k).and_then(Value::as_str);
        let is =
            |want: &Option<String>, k: &str| want.as_deref().is_none_or(|w| field(k) == Some(w));
        let time = field("timestamp").unwrap_or_default();
        is(&self.agent, "agent_id")
            && is(&self.capability, "capability_name")
            && is(&self.decision, "decision")
            && self.since.as_deref().is_none_or(|s| time >= s)
            && self.until.as_deref().is_none_or(|u| time < u)
    }
}

/// The newest `limit` events that match, oldest first. By tenant alone this is one indexed
/// query; other filters read the tenant's events newest first in growing windows.
pub(crate) fn query_audit(state: &AppState, f: &AuditFilter) -> Result<Vec<AuditRecord>, ApiError> {
    let store = state.host.audit();
    let tenant = f.tenant.as_deref();
    if !f.narrows() {
        return blocking(|| store.tail(tenant, f.limit)).map_err(ApiError::internal);
    }
    let mut window = f.limit.saturating_mul(8).max(1024);
    loop {
        let page = blocking(|| store.tail(tenant, window)).map_err(ApiError::internal)?;
        let exhausted = page.len() < window;
        let matched: Vec<AuditRecord> = page.into_iter().filter(|r| f.matches(r)).collect();
        if matched.len() >= f.limit || exhausted {
            let skip = matched.len().saturating_sub(f.limit);
            return Ok(matched.into_iter().skip(skip).collect());
        }
        window = window.saturating_mul(4);
    }
}

pub(crate) async fn audit(
    State(state): State<AppState>,
    Extension(_p): Extension<Principal>,
    Query(params): Params,
) -> ApiResult {
    let filter = AuditFilter::from_params(&params)?;
    let records = query_audit(&state, &filter)?;
    ok(json!({"events": records.iter().map(AuditRecord::to_json).collect::<Vec<_>>()}))
}

pub(crate) fn verify_json(state: &AppState) -> Result<Value, ApiError> {
    let report = blocking(|| state.host.verify_audit()).map_err(ApiError::internal)?;
    let mut out = json!({"ok": report.ok, "records": report.records, "headSeq": report.head_seq});
    if let Some(bad) = &report.first_bad {
        out["firstBad"] = json!({"seq": bad.seq, "eventId": bad.event_id, "problem": bad.problem});
    }
    Ok(out)
}

pub(crate) async fn audit_verify(
    State(state): State<AppState>,
    Extension(_p): Extension<Principal>,
) -> ApiResult {
    ok(verify_json(&state)?)
}

pub(crate) async fn audit_export(
    State(state): State<AppState>,
    Extension(_p): Extension<Principal>,
    Query(params): Params,
) -> ApiResult {
    let format = params.get("format").map_or("jsonl", String::as_str);
    if !matches!(format, "jsonl" | "otel") {
        return Err(ApiError::bad_request(format!(
            "format must be jsonl or otel, not {format:?}"
        )));
    }
    let store = state.host.audit();
    let records = blocking(|| {
        let mut records = Vec::new();
        let mut from = 0u64;
        loop {
            let page = store.records(from, 1000)?;
            let Some(last) = page.last() else { break };
            from = last.seq + 1;
            records.extend(page);
        }
        Ok::<_, capability_policy::store::StoreError>(records)
    })
    .map_err(ApiError::internal)?;
    if format == "otel" {
        return ok(audit::export_otel(&records, "cap-serve"));
    }
    let mut buf = Vec::new();
    audit::export_jsonl(&records, &mut buf).map_err(ApiError::internal)?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        buf,
    )
        .into_response())
}

pub(crate) async fn audit_event(
    State(state): State<AppState>,
    Extension(_p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult {
    match blocking(|| state.host.audit().get(&id)).map_err(ApiError::internal)? {
        Some(r) => ok(json!({"event": r.to_json()})),
        None => Err(ApiError::not_found(format!("audit event not found: {id}"))),
    }
}

pub(crate) fn receipt_query(params: &HashMap<String, String>) -> Result<ReceiptQuery, ApiError> {
    let status = params
        .get("status")
        .filter(|s| !s.is_empty())
        .map(|s| {
            ReceiptStatus::parse(s)
                .ok_or_else(|| ApiError::bad_request(format!("unknown receipt status {s:?}")))
        })
        .transpose()?;
    Ok(ReceiptQuery {
        capability: params.get("capability").filter(|s| !s.is_empty()).cloned(),
        status,
        since: date(params, "since")?,
        until: date(params, "until")?,
        limit: Some(limit(params, 100, 10_000)?),
    })
}

pub(crate) async fn receipts(
    State(state): State<AppState>,
    Extension(_p): Extension<Principal>,
    Query(params): Params,
) -> ApiResult {
    let query = receipt_query(&params)?;
    let list = blocking(|| state.host.receipts().list(&query)).map_err(ApiError::internal)?;
    ok(json!({"receipts": list.iter().map(|r| r.to_value()).collect::<Vec<_>>()}))
}

pub(crate) async fn receipt(
    State(state): State<AppState>,
    Extension(_p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult {
    match blocking(|| state.host.receipts().get(&id)).map_err(ApiError::internal)? {
        Some(r) => ok(json!({"receipt": r.to_value()})),
        None => Err(ApiError::not_found(format!("receipt not found: {id}"))),
    }
}

/// The governed view of the host's capabilities, for the policy schema and fixtures.
fn registry(state: &AppState) -> CapabilityRegistry {
    let registry = CapabilityRegistry::new();
    for c in state.host.runtime().registry().list() {
        if let Ok(g) = GovernedCapability::from_manifest(&c.manifest().to_value()) {
            registry.register(g);
        }
    }
    registry
}

/// The policy files with their text, the validation report and (with fixtures) the test
/// results.
pub(crate) fn policies_json(state: &AppState) -> Result<Value, ApiError> {
    use capability_policy::cedar::{self, SchemaOptions};
    let files = &state.options.policy_files;
    let registry = registry(state);
    let caps = registry.all();
    let schema = cedar::generate_schema(caps.iter().map(|c| c.as_ref()), &SchemaOptions::default())
        .map_err(ApiError::internal)?;
    let listed: Vec<Value> = files
        .iter()
        .map(|f| {
            json!({"path": f.display().to_string(),
                   "text": std::fs::read_to_string(f).unwrap_or_default()})
        })
        .collect();
    let validation = if files.is_empty() {
        json!({"valid": true, "policies": 0, "diagnostics": []})
    } else {
        match cedar::validate_paths(files, Some(&schema.schema)) {
            Ok(report) => json!({
                "valid": report.is_ok(),
                "policies": report.policies,
                "diagnostics": report.diagnostics.iter().map(|d| json!({
                    "file": d.file, "line": d.line, "column": d.column,
                    "severity": format!("{:?}", d.severity).to_lowercase(),
                    "message": d.message, "policy": d.policy_id,
                })).collect::<Vec<_>>(),
            }),
            Err(e) => {
                json!({"valid": false, "policies": 0, "error": e.to_string(), "diagnostics": []})
            }
        }
    };
    let tests = match &state.options.policy_fixtures {
        None => Value::Null,
        Some(path) => match std::fs::read(path) {
            Ok(text) => run_fixtures(state, &registry, &text, &path.display().to_string())
                .unwrap_or_else(|e| json!({"error": e.message()})),
            Err(e) => json!({"error": format!("cannot read {}: {e}", path.display())}),
        },
    };
    Ok(json!({"files": listed, "validation": validation, "tests": tests}))
}

fn run_fixtures(
    state: &AppState,
    registry: &CapabilityRegistry,
    text: &[u8],
    name: &str,
) -> Result<Value, ApiError> {
    use capability_policy::fixtures;
    let files = &state.options.policy_files;
    if files.is_empty() {
        return Err(ApiError::bad_request(
            "the server was started without --policy files",
        ));
    }
    let cases =
        fixtures::parse_fixtures(text, name).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let cedar = capability_policy::CedarPolicies::from_paths(files)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let engine = capability_policy::PolicyEngine::new();
    engine.add_source(std::sync::Arc::new(cedar));
    let report = fixtures::run_fixtures(&engine, registry, &cases);
    let results: Vec<Value> = report
        .results
        .iter()
        .map(|r| {
            json!({
                "name": r.name,
                "capability": r.capability,
                "stage": format!("{:?}", r.stage),
                "expected": r.expected.to_string(),
                "actual": match &r.actual { Ok(d) => json!(d.to_string()), Err(e) => json!({"error": e}) },
                "reason": r.reason,
                "policyIds": r.policy_ids,
                "passed": r.passed(),
            })
        })
        .collect();
    Ok(
        json!({"ok": report.ok(), "passed": report.passed(), "failed": report.failed(), "results": results}),
    )
}

pub(crate) async fn policies(
    State(state): State<AppState>,
    Extension(_p): Extension<Principal>,
) -> ApiResult {
    ok(blocking(|| policies_json(&state))?)
}

pub(crate) async fn policies_test(
    State(state): State<AppState>,
    Extension(_p): Extension<Principal>,
    body: Bytes,
) -> ApiResult {
    let registry = registry(&state);
    ok(blocking(|| {
        run_fixtures(&state, &registry, &body, "request body")
    })?)
}

pub(crate) async fn capabilities(
    State(state): State<AppState>,
    Extension(_p): Extension<Principal>,
    Query(params): Params,
) -> ApiResult {
    if let Some(q) = params.get("q") {
        let query = DiscoveryQuery {
            text: q.clone(),
            limit: Some(limit(&params, 10, 1000)?),
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
    let mut list: Vec<Value> = state
        .host
        .runtime()
        .registry()
        .list()
        .iter()
        .map(|c| {
            let m = c.manifest().to_value();
            json!({
                "id": m.get("id"),
                "name": m.get("name"),
                "version": m.get("version"),
                "description": m.get("description"),
                "effects": m.get("effects"),
            })
        })
        .collect();
    list.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    ok(json!({"capabilities": list}))
}

pub(crate) async fn capability(
    State(state): State<AppState>,
    Extension(_p): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult {
    let inspected = state
        .host
        .inspect(&id)
        .map_err(|e| ApiError::capability(&e))?;
    ok(json!({"capability": inspected}))
}
