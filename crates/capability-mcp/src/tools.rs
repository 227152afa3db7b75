//! The 13 bootstrap tools: what each does over the host.

use capability_core::discovery::DiscoveryQuery;
use capability_host::composition::{contracts_compose, split_pipeline_intent};
use capability_host::{ActionType, Actor, Caller, Outcome, Request, approval_document};
use serde_json::{Map, Value, json};

use crate::{
    McpServer, approval_result, error_result, error_text, governed, take_approval_token,
    traceparent,
};

/// `{content: [{type: "text", text: pretty JSON}], structuredContent: value}`. MCP
/// structured content is an object, so a value that is not one (the search hits) is given
/// as `{result: value}`, the convention of the MCP SDKs.
fn ok(value: Value) -> Value {
    let text = serde_json::to_string_pretty(&value).unwrap_or_default();
    let structured = match value {
        Value::Object(_) => value,
        other => json!({ "result": other }),
    };
    json!({"content": [{"type": "text", "text": text}], "structuredContent": structured})
}

/// The reference's error shape: value `{error: message}` with `isError: true`.
fn err(message: impl Into<String>) -> Value {
    let message = message.into();
    let text = serde_json::to_string_pretty(&json!({ "error": message })).unwrap_or_default();
    error_result(text, Some(json!({ "error": message })), None)
}

fn string<'a>(args: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// What a tool that is not built yet needs.
fn not_built(name: &str) -> Option<&'static str> {
    Some(match name {
        "capability_need" => "provider resolution and acquisition from indexes and registries",
        "capability_search_world" => "npm and GitHub discovery over the network",
        "capability_mine_repository" => "repository mining",
        "capability_forge_repository" => "forging abilities from repositories",
        "capability_solve" => "solving intents over the software world",
        "capability_metabolize" => "metabolizing existing software (npm, PyPI, OCI)",
        "capability_probe_site" => "fetching site discovery documents over HTTP",
        _ => return None,
    })
}

pub(crate) fn call_bootstrap(
    server: &McpServer,
    name: &str,
    mut args: Map<String, Value>,
    meta: Option<&Value>,
    actor: &Actor,
) -> Value {
    if let Some(needs) = not_built(name) {
        return err(format!(
            "{name} is not built yet in this implementation (it needs {needs}); use \
             capability_search, capability_inspect and capability_execute"
        ));
    }
    // An input that carries `__proto__` is refused before anything is planned (see the
    // crate docs).
    if let Some(path) = capability_host::upstream::proto_member_of(&args) {
        return refused(&capability_host::upstream::refuse_proto(&path));
    }
    match name {
        "capability_search" => search(server, &args),
        "capability_inspect" => inspect(server, &args),
        "capability_execute" => execute(server, &mut args, meta, actor),
        "capability_coverage" => ok(capability_core::gap::metabolic_coverage()),
        "capability_compose" => compose(server, &mut args, meta, actor),
        "capability_doctor" => doctor(server),
        _ => err(format!("Unknown capability tool: {name}")),
    }
}

fn search(server: &McpServer, args: &Map<String, Value>) -> Value {
    let Some(query) = string(args, "query") else {
        return err("query is required");
    };
    let limit = args
        .get("limit")
        .and_then(Value::as_f64)
        .map(|l| l.clamp(1.0, 25.0) as usize)
        .unwrap_or(10);
    let host = server.host();
    let hits: Vec<Value> = host
        .find(&DiscoveryQuery {
            text: query.to_string(),
            limit: Some(limit),
            ..Default::default()
        })
        .into_iter()
        .map(|h| h.item.hit_json(h.score, &h.reasons))
        .collect();
    ok(Value::Array(hits))
}

fn inspect(server: &McpServer, args: &Map<String, Value>) -> Value {
    let Some(id) = string(args, "id") else {
        return err("id is required");
    };
    let host = server.host();
    match host.info(id) {
        Ok(r) => ok(r),
        Err(e) => err(e.message),
    }
}

/// The refusal `e` in the reference's error shape, with its code.
fn refused(e: &capability_core::CapabilityError) -> Value {
    let mut value = json!({"error": error_text(e), "code": e.code.as_str()});
    if let Some(r) = &e.receipt_id {
        value["receiptId"] = json!(r);
    }
    let text = serde_json::to_string_pretty(&value).unwrap_or_default();
    error_result(text, Some(value), None)
}

/// `capability_execute` and `capability_compose` run only what the server may execute
/// ([`McpServer::may_execute`]).
fn not_exposed(id: &str) -> Value {
    err(format!(
        "{id} is not exposed by this server (--expose / --expose-installed): it cannot be run \
         through MCP"
    ))
}

/// A governed call of a capability through a bootstrap tool: governed exactly as its
/// projected tool (action `mcp_tool_call`, surface `mcp`; see the crate docs).
fn call_request(
    id: &str,
    input: Value,
    actor: &Actor,
    approve_effects: bool,
    meta: Option<&Value>,
) -> Request {
    let mut request = Request::new(id, input);
    request.caller = Caller {
        actor: actor.clone(),
        action_type: ActionType::McpToolCall,
        ..Caller::default()
    };
    request.caller.labels.insert("surface".into(), "mcp".into());
    request.approve_effects = approve_effects;
    request.traceparent = traceparent(meta);
    request
}

/// The caller's `approved: true` counts only when the host opted in.
fn approved(server: &McpServer, args: &Map<String, Value>) -> bool {
    server.options().allow_agent_approval && args.get("approved") == Some(&Value::Bool(true))
}

fn execute(
    server: &McpServer,
    args: &mut Map<String, Value>,
    meta: Option<&Value>,
    actor: &Actor,
) -> Value {
    let Some(id) = string(args, "id").map(str::to_string) else {
        return err("id is required");
    };
    let host = server.host();
    let id = match host.resolve(&id) {
        Ok(id) => id,
        Err(e) => return err(e.message),
    };
    if !server.may_execute(&id) {
        return not_exposed(&id);
    }
    let input = args.get("input").cloned().unwrap_or_else(|| json!({}));
    let token = take_approval_token(args, meta, false);
    let package = host
        .info(&id)
        .ok()
        .map(|r| json!({"name": r["package"]["name"], "version": r["package"]["version"]}));
    let request = call_request(&id, input, actor, approved(server, args), meta);
    match governed(&host, &request, token.as_deref()) {
        Outcome::Completed(done) => ok(json!({
            "capability": {"id": done.receipt.capability.id, "version": done.receipt.capability.version},
            "package": package,
            "trust": null,
            "receipt": done.receipt.to_value(),
        })),
        Outcome::NeedsApproval(p) => approval_result(approval_document(&p), &id),
        Outcome::Failed(e) => refused(&e),
    }
}

/// Splits the intent into a pipeline, resolves each part to the best capability whose
/// contract the previous step can feed (among those the server may execute), and (given
/// `input`) runs the steps in turn, each one governed by the host as its projected tool.
fn compose(
    server: &McpServer,
    args: &mut Map<String, Value>,
    meta: Option<&Value>,
    actor: &Actor,
) -> Value {
    let Some(intent) = string(args, "intent").map(str::to_string) else {
        return err("intent is required");
    };
    let parts = split_pipeline_intent(&intent);
    let gap = |attempts: Vec<String>| {
        ok(json!({"intent": intent, "route": "gap", "compositionAttempts": attempts}))
    };
    if parts.len() < 2 {
        return gap(vec![
            "Intent does not contain an explicit pipeline boundary such as 'then' or '->'.".into(),
        ]);
    }
    let host = server.host();
    let mut steps: Vec<Value> = Vec::new();
    let mut reasons: Vec<String> = Vec::new();
    let mut effects: Vec<String> = Vec::new();
    let mut previous: Option<capability_core::manifest::Manifest> = None;
    for part in &parts {
        let hits = host.find(&DiscoveryQuery {
            text: part.clone(),
            limit: Some(6),
            ..Default::default()
        });
        let chosen = hits
            .iter()
            .filter(|h| server.may_execute(&h.item.manifest.id))
            .find(|h| match &previous {
                None => true,
                Some(p) => {
                    contracts_compose(p.output.as_ref(), h.item.manifest.input.as_ref()).compatible
                }
            });
        let Some(hit) = chosen else {
            return gap(vec![format!("{part}: {} candidates", hits.len())]);
        };
        let m = &hit.item.manifest;
        if let Some(p) = &previous {
            let check = contracts_compose(p.output.as_ref(), m.input.as_ref());
            reasons.push(format!("{} \u{2192} {}: {}", p.id, m.id, check.reason));
        }
        for e in m.effects() {
            if !effects.contains(e) {
                effects.push(e.clone());
            }
        }
        steps.push(json!({
            "intent": part, "id": m.id, "package": hit.item.package_ref(), "score": hit.score,
        }));
        previous = Some(m.clone());
    }
    let plan = json!({
        "compositionVersion": "0.1", "intent": intent, "parts": parts, "steps": steps,
        "effects": effects, "reasons": reasons,
    });
    let Some(mut value) = args.get("input").cloned() else {
        return ok(json!({"intent": intent, "route": "composition", "plan": plan}));
    };
    // An approval token completes the first step that waits for one (the steps before it
    // run again: the call is retried whole).
    let mut token = take_approval_token(args, meta, false);
    let approve = approved(server, args);
    let mut outputs = Vec::new();
    let mut receipts = Vec::new();
    for step in &steps {
        let id = step["id"].as_str().unwrap_or_default();
        if !server.may_execute(id) {
            return not_exposed(id);
        }
        let request = call_request(id, value.clone(), actor, approve, meta);
        let mut outcome = governed(&host, &request, None);
        if matches!(outcome, Outcome::NeedsApproval(_))
            && let Some(t) = token.take()
        {
            outcome = governed(&host, &request, Some(&t));
        }
        match outcome {
            Outcome::Completed(done) => {
                value = done.receipt.output.clone().unwrap_or(Value::Null);
                outputs.push(value.clone());
                receipts.push(done.receipt.receipt_id.clone());
            }
            Outcome::NeedsApproval(p) => return approval_result(approval_document(&p), id),
            Outcome::Failed(e) => {
                return err(format!("step {id} failed: {}", error_text(&e)));
            }
        }
    }
    ok(json!({
        "intent": intent, "route": "composition", "plan": plan, "outputs": outputs,
        "receipts": receipts,
    }))
}

fn doctor(server: &McpServer) -> Value {
    let host = server.host();
    let report = capability_host::doctor();
    ok(json!({
        "index": {
            "source": "host",
            "capabilities": host.capabilities().len(),
        },
        "isolation": serde_json::to_value(&report).unwrap_or(Value::Null),
    }))
}
