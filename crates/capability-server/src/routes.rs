//! The route table of the API. The router and the OpenAPI document at `/openapi.json` are
//! both built from `api_routes`, so a route cannot exist without its documentation or the
//! other way round; each route's [`Access`] is enforced by the gate the router puts in
//! front of it and is what the document's security and error responses say.

use std::collections::BTreeMap;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{MethodRouter, get, post};
use serde_json::{Map, Value, json};

use crate::access::Access;
use crate::auth::{api_gate, check_host};
use crate::error::ApiError;
use crate::state::AppState;
use crate::{api, console};

async fn openapi_document() -> axum::response::Response {
    api::json_response(axum::http::StatusCode::OK, &openapi())
}

/// One API route.
pub(crate) struct ApiRoute {
    pub method: &'static str,
    pub path: &'static str,
    pub operation: &'static str,
    pub tag: &'static str,
    pub summary: &'static str,
    pub access: Access,
    /// Query parameters: name and description.
    pub query: &'static [(&'static str, &'static str)],
    /// The JSON body a POST takes (a short schema).
    pub body: Option<fn() -> Value>,
    handler: MethodRouter<AppState>,
}

#[allow(clippy::too_many_arguments)]
fn route(
    method: &'static str,
    path: &'static str,
    operation: &'static str,
    tag: &'static str,
    summary: &'static str,
    access: Access,
    query: &'static [(&'static str, &'static str)],
    body: Option<fn() -> Value>,
    handler: MethodRouter<AppState>,
) -> ApiRoute {
    ApiRoute {
        method,
        path,
        operation,
        tag,
        summary,
        access,
        query,
        body,
        handler,
    }
}

fn call_body() -> Value {
    json!({"type": "object", "required": ["capability"], "properties": {
        "capability": {"type": "string", "description": "the capability id"},
        "input": {"description": "the capability's input (default {})"},
        "timeoutMs": {"type": "integer", "minimum": 1},
        "metadata": {"type": "object"}}})
}

fn resume_body() -> Value {
    let mut b = call_body();
    b["required"] = json!(["capability", "token"]);
    b["properties"]["token"] =
        json!({"type": "string", "description": "the approval token (capapr1...)"});
    b
}

fn decide_body() -> Value {
    json!({"type": "object", "properties": {"comment": {"type": "string"}}})
}

fn fixtures_body() -> Value {
    json!({"type": "array", "description": "policy fixtures: {name, action: {capability, actionType, agentId, tenant, scopes, environment, input, output?}, expect}", "items": {"type": "object"}})
}

fn action_body() -> Value {
    json!({"type": "object", "required": ["actionType", "capability"], "properties": {
        "actionType": {"type": "string", "enum": capability_host::ActionType::ALL.iter().map(|t| t.as_str()).collect::<Vec<_>>()},
        "capability": {"description": "a governed capability's name, or its description in Brane's shape ({name, type, risk, effect, side_effects, scopes, tenant_id, environment, data_namespace, owner, ...}), declared on first use", "oneOf": [{"type": "string"}, {"type": "object", "required": ["name"]}]},
        "input": {"description": "the action's input (default {})"},
        "estimatedCostUsd": {"type": "number", "minimum": 0},
        "costSoFarUsd": {"type": "number", "minimum": 0},
        "tokens": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
        "traceId": {"type": "string"},
        "traceparent": {"type": "string", "description": "a W3C traceparent; its trace id becomes the action's"},
        "parentActionId": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "metadata": {"type": "object"},
        "approvalToken": {"type": "string", "description": "the token of an approval, for the retry of an action that needed one"}},
        "additionalProperties": false})
}

fn batch_body() -> Value {
    json!({"type": "object", "required": ["actions"], "properties": {
        "actions": {"type": "array", "minItems": 1, "maxItems": capability_host::remote::MAX_BATCH, "items": action_body()}}})
}

fn result_body() -> Value {
    json!({"type": "object", "description": "exactly one of output and error", "properties": {
        "output": {"description": "what the action produced"},
        "error": {"type": "object", "required": ["message"], "properties": {"message": {"type": "string"}, "type": {"type": "string"}}},
        "costUsd": {"type": "number", "minimum": 0, "description": "the actual cost (default: the estimate)"},
        "tokens": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}},
        "additionalProperties": false})
}

fn governed_body() -> Value {
    json!({"type": "object", "required": ["name"], "description": "a governed capability in Brane's shape", "properties": {
        "name": {"type": "string"}, "type": {"type": "string", "description": "the kind: tool, model, memory, retrieval, database, external_api, mcp_server, mcp_tool, mcp_resource, mcp_prompt, sandbox, filesystem, secret, approval_group, agent, workflow"},
        "risk": {"type": "string", "enum": ["low", "medium", "high", "critical"]},
        "effect": {"type": "object"}, "side_effects": {"type": "array"}, "scopes": {"type": "array"},
        "tenant_id": {"type": "string"}, "environment": {"type": "string"}, "data_namespace": {"type": "string"},
        "owner": {"type": "string"}, "description": {"type": "string"},
        "input_schema": {"type": "object"}, "output_schema": {"type": "object"}, "metadata": {"type": "object"}}})
}

const APPROVAL_QUERY: &[(&str, &str)] = &[
    (
        "status",
        "pending, approved, denied, consumed or expired (default: all)",
    ),
    ("tenant", "only this tenant's approvals"),
    ("limit", "at most this many (default 100)"),
];

const AUDIT_QUERY: &[(&str, &str)] = &[
    ("tenant", "the tenant"),
    ("agent", "the agent id"),
    ("capability", "the capability name"),
    (
        "decision",
        "allow, deny, approval_required, redact, ... (the decision type)",
    ),
    ("since", "ISO 8601 timestamp, inclusive"),
    ("until", "ISO 8601 timestamp, exclusive"),
    (
        "limit",
        "the newest this many matching events (default 100, max 10000)",
    ),
    (
        "before",
        "only events older than this position: the `next` cursor of the previous page",
    ),
];

const RECEIPT_QUERY: &[(&str, &str)] = &[
    ("capability", "the capability id"),
    ("status", "the receipt status"),
    ("since", "ISO 8601, inclusive lower bound on startedAt"),
    ("until", "ISO 8601, exclusive upper bound on startedAt"),
    ("limit", "at most this many (default 100)"),
];

/// Every API route.
pub(crate) fn api_routes() -> Vec<ApiRoute> {
    use Access::*;
    vec![
        route(
            "get",
            "/openapi.json",
            "openapi",
            "meta",
            "This OpenAPI document.",
            Public,
            &[],
            None,
            get(openapi_document),
        ),
        route(
            "get",
            "/api/v1/whoami",
            "whoami",
            "meta",
            "The authenticated principal.",
            Any,
            &[],
            None,
            get(api::whoami),
        ),
        route(
            "post",
            "/api/v1/invoke",
            "invoke",
            "run",
            "Run a capability through the governed lifecycle: 200 with the receipt, 202 with {approval: {id, reason, expiresAt, planFingerprint, ...}} when a human must approve, or an error.",
            Invoke,
            &[],
            Some(call_body),
            post(api::invoke),
        ),
        route(
            "post",
            "/api/v1/plans",
            "plan",
            "run",
            "Plan a call without executing it.",
            Invoke,
            &[],
            Some(call_body),
            post(api::plan),
        ),
        route(
            "post",
            "/api/v1/resume",
            "resume",
            "run",
            "Run the exact plan an approval token was granted for (same capability and input).",
            Invoke,
            &[],
            Some(resume_body),
            post(api::resume),
        ),
        route(
            "post",
            "/api/v1/actions",
            "decideAction",
            "actions",
            "The before stage of an action the caller executes itself (a model call, a memory write, a retrieval, ...): 200 with the decision (allow, deny, approval_required, transform_input, route, sandbox, redact, log_only) and the action id; when allowed, the capability and input to use and the time by which the result must be posted.",
            Invoke,
            &[],
            Some(action_body),
            post(api::decide_action),
        ),
        route(
            "post",
            "/api/v1/actions/batch",
            "decideActions",
            "actions",
            "The before stage of several actions: the answer of POST /api/v1/actions (or {error}) for each, in order.",
            Invoke,
            &[],
            Some(batch_body),
            post(api::decide_actions),
        ),
        route(
            "post",
            "/api/v1/actions/{id}/result",
            "actionResult",
            "actions",
            "The after stage of an open action: its output (or error) in; the output the agent may use (redacted, transformed, or withheld) out, with the receipt and audit event. 404 for an action that is not open for this principal.",
            Invoke,
            &[],
            Some(result_body),
            post(api::action_result),
        ),
        route(
            "post",
            "/api/v1/capabilities",
            "registerCapability",
            "capabilities",
            "Declare (or replace) a governed capability for the action API, in Brane's shape.",
            Admin,
            &[],
            Some(governed_body),
            post(api::register_capability),
        ),
        route(
            "get",
            "/api/v1/approvals",
            "listApprovals",
            "approvals",
            "Approvals, newest first (an approver sees its tenants').",
            Read,
            APPROVAL_QUERY,
            None,
            get(api::approvals),
        ),
        route(
            "get",
            "/api/v1/approvals/{id}",
            "getApproval",
            "approvals",
            "One approval with the exact call: capability, tenant, agent, input, plan fingerprint, policies, reason, expiry.",
            Read,
            &[],
            None,
            get(api::approval),
        ),
        route(
            "post",
            "/api/v1/approvals/{id}/approve",
            "approve",
            "approvals",
            "Approve a pending approval (recorded with the authenticated approver); returns the single-use token.",
            Decide,
            &[],
            Some(decide_body),
            post(api::approve),
        ),
        route(
            "post",
            "/api/v1/approvals/{id}/deny",
            "deny",
            "approvals",
            "Deny a pending approval.",
            Decide,
            &[],
            Some(decide_body),
            post(api::deny),
        ),
        route(
            "get",
            "/api/v1/audit",
            "queryAudit",
            "audit",
            "Audit events, oldest first, filtered (an approver sees its tenants' events only).",
            Read,
            AUDIT_QUERY,
            None,
            get(api::audit),
        ),
        route(
            "get",
            "/api/v1/audit/verify",
            "verifyAudit",
            "audit",
            "Verify the hash chain (with tenant: that tenant's chain; an approver verifies its tenant's).",
            Read,
            &[("tenant", "only this tenant's chain")],
            None,
            get(api::audit_verify),
        ),
        route(
            "get",
            "/api/v1/audit/export",
            "exportAudit",
            "audit",
            "Every event (with tenant: that tenant's chain), as JSON lines or an OpenTelemetry logs document. An approver reads its tenants' events only.",
            Read,
            &[
                ("format", "jsonl (default) or otel"),
                ("tenant", "only this tenant's events"),
            ],
            None,
            get(api::audit_export),
        ),
        route(
            "get",
            "/api/v1/audit/{id}",
            "getAuditEvent",
            "audit",
            "One event with its chain position and hashes.",
            Read,
            &[],
            None,
            get(api::audit_event),
        ),
        route(
            "get",
            "/api/v1/receipts",
            "listReceipts",
            "receipts",
            "Receipts, filtered.",
            Read,
            RECEIPT_QUERY,
            None,
            get(api::receipts),
        ),
        route(
            "get",
            "/api/v1/receipts/{id}",
            "getReceipt",
            "receipts",
            "One receipt.",
            Read,
            &[],
            None,
            get(api::receipt),
        ),
        route(
            "get",
            "/api/v1/policies",
            "listPolicies",
            "policies",
            "The policy files, validated against the schema of the host's capabilities, with the fixture results when fixtures are configured.",
            Read,
            &[],
            None,
            get(api::policies),
        ),
        route(
            "post",
            "/api/v1/policies/test",
            "testPolicies",
            "policies",
            "Check the host's policy files against fixtures of expected decisions.",
            Read,
            &[],
            Some(fixtures_body),
            post(api::policies_test),
        ),
        route(
            "get",
            "/api/v1/capabilities",
            "listCapabilities",
            "capabilities",
            "The host's capabilities; with q, a ranked search.",
            Any,
            &[("q", "a search query"), ("limit", "at most this many hits")],
            None,
            get(api::capabilities),
        ),
        route(
            "get",
            "/api/v1/capabilities/{*id}",
            "inspectCapability",
            "capabilities",
            "The inert view of one capability.",
            Any,
            &[],
            None,
            get(api::capability),
        ),
    ]
}

/// A route's path as OpenAPI writes it (`{*id}`, a capability id with slashes, is `{id}`).
pub fn openapi_path(path: &str) -> String {
    path.replace("{*", "{")
}

/// `(method, path)` of every API route.
pub fn route_list() -> Vec<(&'static str, &'static str)> {
    api_routes().iter().map(|r| (r.method, r.path)).collect()
}

/// The OpenAPI 3.1 document of the API.
pub fn openapi() -> Value {
    let error = json!({"description": "an error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    let mut paths: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for r in api_routes() {
        let mut parameters: Vec<Value> = r
            .path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(|s| s.trim_start_matches('*'))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        parameters.extend(r.query.iter().map(|(name, description)| {
            json!({"name": name, "in": "query", "required": false, "description": description, "schema": {"type": "string"}})
        }));
        let mut responses = Map::new();
        responses.insert(
            "200".into(),
            json!({"description": "success", "content": {"application/json": {}}}),
        );
        if r.operation == "invoke" {
            responses.insert("202".into(), json!({"description": "a human must approve the call", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ApprovalRequired"}}}}));
        }
        if r.body.is_some() || !r.query.is_empty() {
            responses.insert("400".into(), error.clone());
        }
        if r.access != Access::Public {
            responses.insert("401".into(), error.clone());
            responses.insert("403".into(), error.clone());
        }
        if r.path.contains('{') {
            responses.insert("404".into(), error.clone());
        }
        if r.access == Access::Decide {
            responses.insert("409".into(), error.clone());
        }
        let mut op = json!({
            "operationId": r.operation,
            "summary": r.summary,
            "tags": [r.tag],
            "parameters": parameters,
            "responses": responses,
            "x-roles": r.access.roles(),
        });
        if r.access == Access::Public {
            op["security"] = json!([]);
        }
        if let Some(body) = r.body {
            op["requestBody"] =
                json!({"required": true, "content": {"application/json": {"schema": body()}}});
        }
        paths
            .entry(openapi_path(r.path))
            .or_default()
            .insert(r.method.into(), op);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "capability runtime: HTTP API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The governed capability host over HTTP (`cap serve`). Bearer tokens come from `cap tokens add`.",
        },
        "paths": paths,
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {
                    "type": "object", "required": ["code", "message"],
                    "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                        "receiptId": {"type": "string"}, "details": {}}}}},
                "ApprovalRequired": {"type": "object", "required": ["approval"], "properties": {"approval": {
                    "type": "object", "required": ["id", "reason", "expiresAt", "planFingerprint"],
                    "properties": {"id": {"type": "string"}, "reason": {"type": ["string", "null"]},
                        "expiresAt": {"type": "string"}, "planFingerprint": {"type": "string"},
                        "capability": {"type": "string"}, "tenant": {"type": ["string", "null"]},
                        "agentId": {"type": "string"}, "policyIds": {"type": "array"}}}}},
            },
        },
    })
}

/// The application: the API routes (each behind its gate), the console, the Host/Origin
/// check and the body limit.
pub(crate) fn router(state: AppState) -> Router {
    let mut by_path: BTreeMap<&str, MethodRouter<AppState>> = BTreeMap::new();
    for r in api_routes() {
        let gated = r.handler.route_layer(middleware::from_fn_with_state(
            (state.clone(), r.access),
            api_gate,
        ));
        let merged = match by_path.remove(r.path) {
            Some(existing) => existing.merge(gated),
            None => gated,
        };
        by_path.insert(r.path, merged);
    }
    let mut app = Router::new();
    for (path, handler) in by_path {
        app = app.route(path, handler);
    }
    app.merge(console::routes(state.clone()))
        .fallback(|| async { ApiError::not_found("no such route") })
        .layer(DefaultBodyLimit::max(state.options.guard.max_body_bytes))
        .layer(middleware::from_fn_with_state(state.clone(), check_host))
        .with_state(state)
}
