//! `/api/v1/actions`: actions the agent executes itself (a model call, a memory write, a
//! retrieval, a handoff), decided by the host before and after, over real HTTP.

use std::path::Path;
use std::time::Duration;

use capability_host::HostConfig;
use capability_host::budgets::BudgetConfig;
use capability_server::ServerOptions;
use hyper::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::fixture::{Fixture, start_with};

const ACTION_POLICY: &str = r#"@id("allow-all") permit(principal, action, resource);
@id("no-untrusted-handoff") @reason("handoffs go to trusted agents only")
forbid(principal, action == Action::"agent_handoff", resource)
  when { context.input has target && context.input.target == "untrusted-agent" };
@id("memory-needs-approval") @decision("approval_required") @reason("memory writes need a human")
forbid(principal, action == Action::"memory_write", resource);
@id("mask-ssn") @decision("redact") @redact("/ssn")
permit(principal, action == Action::"retrieval", resource);
@id("no-prod-db") forbid(principal, action == Action::"database_query", resource)
  when { context.input has db && context.input.db == "prod" };
@id("watch-staging-db") @decision("log_only") @reason("staging queries are watched")
forbid(principal, action == Action::"database_query", resource)
  when { context.input has db && context.input.db == "staging" };
@id("big-payment") @reason("payments over 1000 need another path")
forbid(principal, action, resource) when { context.input has amount && context.input.amount > 1000 };
@id("sandbox-code") @decision("sandbox") @sandbox("wasm") @network("off")
permit(principal, action == Action::"sandbox_execution", resource);
@id("strip-pii") @decision("transform_input")
@mutations("[{\"op\": \"remove\", \"path\": \"/email\"}]")
permit(principal, action == Action::"model_call", resource == Capability::"openai.gpt-4o-mini")
  when { context.input has email };
"#;

const CAPABILITIES: &str = r#"{"capabilities": [
  {"name": "openai.gpt-4o", "type": "model", "risk": "medium"},
  {"name": "openai.gpt-4o-mini", "type": "model", "risk": "low"},
  {"name": "premium.model", "type": "model", "risk": "high"},
  {"name": "memory.store", "type": "memory", "risk": "medium",
   "side_effects": [{"type": "write", "can_disable": false}]},
  {"name": "docs.search", "type": "retrieval"},
  {"name": "agents.handoff", "type": "agent"},
  {"name": "warehouse.sql", "type": "database"},
  {"name": "code.run", "type": "sandbox", "risk": "high"}
]}"#;

const BUDGETS: &str = r#"{"budgets": [
  {"id": "gpt4o-hourly", "per": "agent", "windowSeconds": 3600, "limitUsd": 1.0,
   "actionTypes": ["model_call"], "capabilities": ["openai.gpt-4o"],
   "onExceed": {"route": "openai.gpt-4o-mini"}},
  {"id": "premium-hourly", "per": "agent", "windowSeconds": 3600, "limitUsd": 1.0,
   "capabilities": ["premium.*"]}
]}"#;

fn setup(shadow: bool, timeout: Duration) -> impl FnOnce(&Path, &mut HostConfig) {
    move |dir, config| {
        let policy = dir.join("actions.cedar");
        std::fs::write(&policy, ACTION_POLICY).unwrap();
        config.policies = vec![policy];
        let caps = dir.join("capabilities.json");
        std::fs::write(&caps, CAPABILITIES).unwrap();
        config.governed = capability_host::remote::read_governed(&caps).unwrap();
        config.budgets = BudgetConfig::from_json(&serde_json::from_str(BUDGETS).unwrap()).unwrap();
        config.shadow = shadow;
        config.action_timeout = timeout;
    }
}

async fn server() -> Fixture {
    start_with(setup(false, Duration::from_secs(300)), |_| {
        ServerOptions::default()
    })
    .await
}

impl Fixture {
    async fn decide(&self, token: &str, action: Value) -> Value {
        let a = self.post("/api/v1/actions", token, action).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
        a.json()
    }

    async fn result(&self, token: &str, id: &str, body: Value) -> crate::fixture::Answer {
        self.post(&format!("/api/v1/actions/{id}/result"), token, body)
            .await
    }

    /// The audit events of a capability, oldest first.
    async fn events(&self, capability: &str) -> Vec<Value> {
        let a = self
            .get(&format!("/api/v1/audit?capability={capability}"), "auditor")
            .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
        a.json()["events"].as_array().unwrap().clone()
    }

    async fn event_count(&self) -> usize {
        let a = self.get("/api/v1/audit?limit=10000", "auditor").await;
        a.json()["events"].as_array().unwrap().len()
    }
}

fn event_of<'a>(events: &'a [Value], action_id: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["event"]["action_id"] == action_id || e["action_id"] == action_id)
        .collect()
}

/// The event body, whether the API wraps it or not.
fn body(e: &Value) -> &Value {
    if e.get("event").is_some() {
        &e["event"]
    } else {
        e
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_call_round_trip_leaves_one_event_with_both_stages_and_a_receipt() {
    let f = server().await;
    let d = f
        .decide(
            "agent",
            json!({"actionType": "model_call", "capability": "openai.gpt-4o",
                   "input": {"prompt": "hello"}, "estimatedCostUsd": 0.25,
                   "tokens": {"input": 12}, "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}),
        )
        .await;
    assert_eq!(d["decision"], "allow", "{d}");
    assert_eq!(d["capability"], "openai.gpt-4o");
    assert_eq!(d["input"], json!({"prompt": "hello"}));
    assert!(d["expiresAt"].as_str().unwrap().ends_with('Z'));
    let id = d["actionId"].as_str().unwrap();
    assert!(id.starts_with("act_"));
    // Nothing is recorded until the result: the action is one event.
    assert!(event_of(&f.events("openai.gpt-4o").await, id).is_empty());

    let r = f
        .result(
            "agent",
            id,
            json!({"output": {"text": "hi there"}, "costUsd": 0.31, "tokens": {"input": 12, "output": 3}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = r.json();
    assert_eq!(r["outcome"], "executed");
    assert_eq!(r["output"], json!({"text": "hi there"}));
    assert_eq!(r["withheld"], false);

    let events = f.events("openai.gpt-4o").await;
    let mine = event_of(&events, id);
    assert_eq!(mine.len(), 1, "one event per action: {events:?}");
    let e = body(mine[0]);
    assert_eq!(e["outcome"], "executed");
    assert_eq!(e["action_type"], "model_call");
    assert_eq!(e["agent_id"], "bot");
    assert_eq!(e["tenant_id"], "acme");
    assert_eq!(e["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(e["metadata"]["costUsd"], 0.31);
    assert_eq!(e["metadata"]["tokens"], json!({"input": 12, "output": 3}));
    assert!(e["metadata"]["latencyMs"].is_u64(), "{e}");
    assert_eq!(e["metadata"]["decisions"]["before"]["decision"], "allow");
    assert_eq!(e["receipt_id"], r["receiptId"]);

    let receipt = f
        .get(
            &format!("/api/v1/receipts/{}", r["receiptId"].as_str().unwrap()),
            "auditor",
        )
        .await;
    assert_eq!(receipt.status, StatusCode::OK, "{}", receipt.text);
    let receipt = &receipt.json()["receipt"];
    assert_eq!(receipt["status"], "succeeded");
    assert_eq!(receipt["capability"]["id"], "openai.gpt-4o");
    assert_eq!(receipt["output"], json!({"text": "hi there"}));
    assert_eq!(receipt["governance"]["actionId"], id);

    // The action is closed: a second result finds nothing.
    let again = f.result("agent", id, json!({"output": {}})).await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_call_over_its_budget_is_routed_and_a_premium_one_denied() {
    let f = server().await;
    let call = |capability: &str, usd: f64| {
        json!({"actionType": "model_call", "capability": capability,
               "input": {"prompt": "p"}, "estimatedCostUsd": usd})
    };
    // $0.60 fits the $1 budget; the result says it cost $0.70.
    let d = f.decide("agent", call("openai.gpt-4o", 0.6)).await;
    assert_eq!(d["decision"], "allow", "{d}");
    let r = f
        .result(
            "agent",
            d["actionId"].as_str().unwrap(),
            json!({"output": "ok", "costUsd": 0.7}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    // $0.70 spent + $0.40 estimated passes $1: routed to the cheaper model.
    let d = f.decide("agent", call("openai.gpt-4o", 0.4)).await;
    assert_eq!(d["decision"], "route", "{d}");
    assert_eq!(d["capability"], "openai.gpt-4o-mini");
    assert_eq!(d["routedFrom"], json!(["openai.gpt-4o"]));
    assert_eq!(d["code"], "budget_exceeded");
    assert!(
        d["policyIds"]
            .as_array()
            .unwrap()
            .contains(&json!("budget:gpt4o-hourly"))
    );
    // $0.20 still fits.
    let d = f.decide("agent", call("openai.gpt-4o", 0.2)).await;
    assert_eq!(d["decision"], "allow", "{d}");
    // Budgets are per agent: another agent starts at zero.
    let d = f.decide("agent-globex", call("openai.gpt-4o", 0.9)).await;
    assert_eq!(d["decision"], "allow", "{d}");

    // The premium budget denies: its estimate is charged while the action is open.
    let first = f.decide("agent", call("premium.model", 0.8)).await;
    assert_eq!(first["decision"], "allow");
    let d = f.decide("agent", call("premium.model", 0.3)).await;
    assert_eq!(d["decision"], "deny", "{d}");
    assert_eq!(d["code"], "budget_exceeded");
    assert!(d["reason"].as_str().unwrap().contains("premium-hourly"));
    assert!(d.get("capability").is_none() && d.get("expiresAt").is_none());
    // A result that reports a smaller actual cost frees the budget.
    let r = f
        .result(
            "agent",
            first["actionId"].as_str().unwrap(),
            json!({"output": "ok", "costUsd": 0.1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let d = f.decide("agent", call("premium.model", 0.3)).await;
    assert_eq!(d["decision"], "allow", "{d}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_write_completes_once_after_a_console_approval() {
    let f = server().await;
    let write = json!({"actionType": "memory_write", "capability": "memory.store",
                       "input": {"key": "user.name", "value": "Ada"}});
    let d = f.decide("agent", write.clone()).await;
    assert_eq!(d["decision"], "approval_required", "{d}");
    assert_eq!(d["reason"], "memory writes need a human");
    let approval = d["approval"]["id"].as_str().unwrap().to_string();
    assert!(d["approval"]["expiresAt"].is_string());
    // Asking again finds the same pending approval.
    let again = f.decide("agent", write.clone()).await;
    assert_eq!(again["approval"]["id"], approval.as_str());
    // The agent cannot approve; approvers of other tenants cannot either.
    let a = f
        .post(
            &format!("/api/v1/approvals/{approval}/approve"),
            "agent",
            json!({}),
        )
        .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let a = f
        .post(
            &format!("/api/v1/approvals/{approval}/approve"),
            "bob",
            json!({}),
        )
        .await;
    assert!(
        a.status == StatusCode::FORBIDDEN || a.status == StatusCode::NOT_FOUND,
        "{}",
        a.text
    );

    // alice approves in the console: the page shows the exact write.
    let (cookie, csrf) = f.login().await;
    let page = f
        .send(
            Method::GET,
            &format!("/console/approvals/{approval}"),
            None,
            None,
            &[("cookie", &cookie)],
        )
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    assert!(page.text.contains("memory.store") && page.text.contains("user.name"));
    let origin = f.base.clone();
    let a = f
        .send(
            Method::POST,
            &format!("/console/approvals/{approval}/approve"),
            None,
            Some(&format!("comment=ok&csrf={csrf}")),
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("cookie", cookie.as_str()),
                ("origin", origin.as_str()),
            ],
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let at = a.text.find("id=\"approval-token\">").unwrap() + 20;
    let token = &a.text[at..at + a.text[at..].find('<').unwrap()];
    assert!(token.starts_with("capapr1."));

    // The token is bound to the write: another value is refused.
    let mut other = write.clone();
    other["input"]["value"] = json!("Eve");
    other["approvalToken"] = json!(token);
    let a = f.post("/api/v1/actions", "agent", other).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.text);
    assert_eq!(a.code(), "APPROVAL_INVALID");
    // The retry with the token goes ahead, once.
    let mut retry = write.clone();
    retry["approvalToken"] = json!(token);
    let d = f.decide("agent", retry.clone()).await;
    assert_eq!(d["decision"], "allow", "{d}");
    let r = f
        .result(
            "agent",
            d["actionId"].as_str().unwrap(),
            json!({"output": {"stored": true}}),
        )
        .await;
    assert_eq!(r.json()["outcome"], "executed");
    let a = f.post("/api/v1/actions", "agent", retry).await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.text);
    assert_eq!(a.code(), "APPROVAL_INVALID");
    let a = f
        .get(&format!("/api/v1/approvals/{approval}"), "auditor")
        .await;
    assert_eq!(a.json()["approval"]["status"], "consumed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retrieval_result_is_redacted_and_a_forbidden_handoff_denied() {
    let f = server().await;
    let d = f
        .decide(
            "agent",
            json!({"actionType": "retrieval", "capability": "docs.search", "input": {"q": "ada"}}),
        )
        .await;
    assert_eq!(d["decision"], "allow", "{d}");
    let id = d["actionId"].as_str().unwrap();
    let r = f
        .result(
            "agent",
            id,
            json!({"output": {"title": "Ada", "ssn": "123-45-6789"}}),
        )
        .await;
    let r = r.json();
    assert_eq!(r["decision"], "redact", "{r}");
    assert_eq!(r["output"]["title"], "Ada");
    assert_ne!(r["output"]["ssn"], "123-45-6789");
    assert_eq!(r["redacted"], json!(["/ssn"]));
    // Neither the receipt nor the audit log keeps the secret.
    let receipt = f
        .get(
            &format!("/api/v1/receipts/{}", r["receiptId"].as_str().unwrap()),
            "auditor",
        )
        .await;
    assert!(!receipt.text.contains("123-45-6789"), "{}", receipt.text);
    let export = f.get("/api/v1/audit/export", "auditor").await;
    assert!(!export.text.contains("123-45-6789"));

    // A handoff to a forbidden agent is denied before anything runs; a trusted one goes.
    let d = f
        .decide(
            "agent",
            json!({"actionType": "agent_handoff", "capability": "agents.handoff",
                   "input": {"target": "untrusted-agent"}}),
        )
        .await;
    assert_eq!(d["decision"], "deny", "{d}");
    assert_eq!(d["reason"], "handoffs go to trusted agents only");
    assert!(
        d["policyIds"]
            .as_array()
            .unwrap()
            .contains(&json!("no-untrusted-handoff"))
    );
    let denied = d["actionId"].as_str().unwrap();
    let events = f.events("agents.handoff").await;
    let mine = event_of(&events, denied);
    assert_eq!(mine.len(), 1);
    assert_eq!(body(mine[0])["outcome"], "denied_before_execution");
    // A denied action is not open.
    let a = f.result("agent", denied, json!({"output": {}})).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    let d = f
        .decide(
            "agent",
            json!({"actionType": "agent_handoff", "capability": "agents.handoff",
                   "input": {"target": "billing-agent"}}),
        )
        .await;
    assert_eq!(d["decision"], "allow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transform_input_sandbox_and_log_only_are_answered_as_such() {
    let f = server().await;
    let d = f
        .decide(
            "agent",
            json!({"actionType": "model_call", "capability": "openai.gpt-4o-mini",
                   "input": {"prompt": "p", "email": "ada@example.com"}}),
        )
        .await;
    assert_eq!(d["decision"], "transform_input", "{d}");
    assert_eq!(
        d["input"],
        json!({"prompt": "p"}),
        "the agent sends the transformed input"
    );
    let d = f
        .decide(
            "agent",
            json!({"actionType": "sandbox_execution", "capability": "code.run", "input": {"code": "1+1"}}),
        )
        .await;
    assert_eq!(d["decision"], "sandbox", "{d}");
    assert_eq!(
        d["sandbox"],
        json!({"minTier": "wasm", "denyNetwork": true}),
        "{d}"
    );
    let d = f
        .decide(
            "agent",
            json!({"actionType": "database_query", "capability": "warehouse.sql",
                   "input": {"db": "staging", "sql": "select 1"}}),
        )
        .await;
    assert_eq!(d["decision"], "log_only", "{d}");
    assert_eq!(d["wouldBe"], "deny", "{d}");
    assert_eq!(d["reason"], "staging queries are watched");
    assert!(d["expiresAt"].is_string(), "a logged action goes ahead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_records_what_would_have_happened_without_enforcing() {
    let f = start_with(setup(true, Duration::from_secs(300)), |_| {
        ServerOptions::default()
    })
    .await;
    let d = f
        .decide(
            "agent",
            json!({"actionType": "database_query", "capability": "warehouse.sql",
                   "input": {"db": "prod", "sql": "select 1"}}),
        )
        .await;
    assert_eq!(d["decision"], "allow", "{d}");
    assert_eq!(d["shadow"]["decision"], "deny", "{d}");
    let id = d["actionId"].as_str().unwrap();
    let r = f.result("agent", id, json!({"output": [1]})).await;
    assert_eq!(r.json()["outcome"], "executed");
    let events = f.events("warehouse.sql").await;
    let e = body(event_of(&events, id)[0]);
    assert_eq!(e["shadow"], "deny", "{e}");
    assert_eq!(e["outcome"], "executed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_without_a_result_is_closed_as_abandoned_and_audited() {
    let f = start_with(setup(false, Duration::from_millis(300)), |_| {
        ServerOptions::default()
    })
    .await;
    let d = f
        .decide(
            "agent",
            json!({"actionType": "model_call", "capability": "openai.gpt-4o-mini",
                   "input": {"prompt": "p"}, "estimatedCostUsd": 0.05}),
        )
        .await;
    let id = d["actionId"].as_str().unwrap().to_string();
    let mut abandoned = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let events = f.events("openai.gpt-4o-mini").await;
        if let Some(e) = event_of(&events, &id).first() {
            abandoned = Some(body(e).clone());
            break;
        }
    }
    let e = abandoned.expect("the abandoned action is audited");
    assert_eq!(e["outcome"], "execution_failed");
    assert_eq!(e["metadata"]["abandoned"], true);
    assert!(
        e["metadata"]["error_message"]
            .as_str()
            .unwrap()
            .contains("abandoned")
    );
    assert_eq!(
        e["metadata"]["costUsd"], 0.05,
        "an abandoned action keeps its estimate"
    );
    let receipt = f
        .get(
            &format!("/api/v1/receipts/{}", e["receipt_id"].as_str().unwrap()),
            "auditor",
        )
        .await;
    let receipt = &receipt.json()["receipt"];
    assert_eq!(receipt["status"], "failed");
    assert_eq!(receipt["error"]["name"], "Abandoned");
    // A late result is refused.
    let a = f.result("agent", &id, json!({"output": "late"})).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_principals_and_hostile_input_are_refused_with_nothing_recorded() {
    let f = server().await;
    let action =
        json!({"actionType": "model_call", "capability": "openai.gpt-4o-mini", "input": {}});
    // Roles that may not call, and no credential.
    for who in ["auditor", "alice"] {
        let a = f.post("/api/v1/actions", who, action.clone()).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{who}: {}", a.text);
    }
    let a = f
        .send(
            Method::POST,
            "/api/v1/actions",
            None,
            Some(&action.to_string()),
            &[],
        )
        .await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    // Another principal cannot close (or learn of) my action.
    let d = f.decide("agent", action.clone()).await;
    let id = d["actionId"].as_str().unwrap();
    let a = f
        .result("agent-globex", id, json!({"output": "forged"}))
        .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    let a = f
        .result("agent", "act_does_not_exist", json!({"output": 1}))
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::NOT_FOUND, "NOT_FOUND")
    );
    let r = f.result("agent", id, json!({"output": "mine"})).await;
    assert_eq!(r.json()["output"], "mine");

    let before = f.event_count().await;
    let mut deep = json!(1);
    for _ in 0..200 {
        deep = json!([deep]);
    }
    let hostile = [
        json!({"actionType": "launch_missiles", "capability": "openai.gpt-4o", "input": {}}),
        json!({"actionType": 7, "capability": "openai.gpt-4o"}),
        json!({"capability": "openai.gpt-4o"}),
        json!({"actionType": "model_call"}),
        json!({"actionType": "model_call", "capability": ""}),
        json!({"actionType": "model_call", "capability": "openai.gpt-4o", "estimatedCostUsd": "0.1"}),
        json!({"actionType": "model_call", "capability": "openai.gpt-4o", "estimatedCostUsd": -1}),
        json!({"actionType": "model_call", "capability": "openai.gpt-4o", "estimatedCosUsd": 9}),
        json!({"actionType": "model_call", "capability": "openai.gpt-4o", "labels": {"a": 1}}),
        json!({"actionType": "model_call", "capability": "openai.gpt-4o", "tokens": {"input": -3}}),
        json!({"actionType": "model_call", "capability": {"type": "model"}}),
        json!({"actionType": "model_call", "capability": {"name": "x", "type": "spaceship"}}),
        json!([1, 2]),
    ];
    for body in hostile {
        let a = f.post("/api/v1/actions", "agent", body.clone()).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{body}: {}", a.text);
        assert!(!a.json()["error"]["message"].as_str().unwrap().is_empty());
    }
    for text in [
        "{not json".to_string(),
        r#"{"actionType": "model_call", "capability": "openai.gpt-4o", "estimatedCostUsd": 1e400}"#
            .to_string(),
        format!(
            "{{\"actionType\": \"model_call\", \"capability\": \"openai.gpt-4o\", \"input\": {deep}}}"
        ),
    ] {
        let a = f
            .send(
                Method::POST,
                "/api/v1/actions",
                Some("agent"),
                Some(&text),
                &[("content-type", "application/json")],
            )
            .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
    }
    let huge = json!({"actionType": "model_call", "capability": "openai.gpt-4o",
                      "input": {"blob": "x".repeat(2 << 20)}});
    // The server may refuse it before reading it all, and close.
    let status = f
        .post_status_before_body("/api/v1/actions", "agent", &huge.to_string())
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    // An unknown capability is a 404, and a result must be one of output or error.
    let a = f
        .post(
            "/api/v1/actions",
            "agent",
            json!({"actionType": "model_call", "capability": "nope"}),
        )
        .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.text);
    let d = f.decide("agent", action.clone()).await;
    let id = d["actionId"].as_str().unwrap();
    for body in [
        json!({}),
        json!({"output": 1, "error": {"message": "x"}}),
        json!({"error": "x"}),
        json!({"output": 1, "costUsd": -2}),
    ] {
        let a = f.result("agent", id, body.clone()).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{body}: {}", a.text);
    }
    // None of those left an event; the open action still closes normally.
    assert_eq!(f.event_count().await, before);
    let r = f
        .result(
            "agent",
            id,
            json!({"error": {"message": "provider down", "type": "Timeout"}}),
        )
        .await;
    let r = r.json();
    assert_eq!(r["outcome"], "execution_failed");
    assert_eq!(f.event_count().await, before + 1);
    // A number Cedar cannot hold never passes a numeric guard: it is refused.
    for text in ["1e300", "10000000000000000000", "1e16", "1000.00001"] {
        let body = format!(
            r#"{{"actionType": "external_api_call", "capability": "docs.search", "input": {{"amount": {text}}}}}"#
        );
        let a = f
            .send(
                Method::POST,
                "/api/v1/actions",
                Some("agent"),
                Some(&body),
                &[("content-type", "application/json")],
            )
            .await;
        let d = a.json();
        assert_eq!(d["decision"], "deny", "{text}: {d}");
        assert!(
            d["policyIds"]
                .as_array()
                .unwrap()
                .contains(&json!("big-payment")),
            "{d}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answers_each_action_in_order_and_capabilities_register_by_admin_only() {
    let f = server().await;
    let a = f
        .post(
            "/api/v1/actions/batch",
            "agent",
            json!({"actions": [
                {"actionType": "model_call", "capability": "openai.gpt-4o-mini", "input": {"n": 1}},
                {"actionType": "agent_handoff", "capability": "agents.handoff", "input": {"target": "untrusted-agent"}},
                {"actionType": "bogus", "capability": "x"},
                {"actionType": "retrieval", "capability": "docs.search", "input": {"n": 3}}
            ]}),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let results = a.json()["results"].as_array().unwrap().clone();
    let kinds: Vec<Value> = results
        .iter()
        .map(|r| {
            r.get("decision")
                .cloned()
                .unwrap_or_else(|| r["error"]["code"].clone())
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            json!("allow"),
            json!("deny"),
            json!("INVALID_INPUT"),
            json!("allow")
        ]
    );
    assert_eq!(results[0]["input"], json!({"n": 1}));
    for bad in [
        json!({"actions": []}),
        json!({"nope": 1}),
        json!({"actions": vec![json!({}); 101]}),
    ] {
        let a = f.post("/api/v1/actions/batch", "agent", bad).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
    }

    // Registering a capability: admins only; Cedar sees its attributes at once.
    let cap = json!({"name": "payments.transfer", "type": "external_api", "risk": "critical",
                     "owner": "finance", "data_namespace": "ledger"});
    let a = f.post("/api/v1/capabilities", "agent", cap.clone()).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.text);
    let a = f.post("/api/v1/capabilities", "admin", cap).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.json()["capability"]["governance"]["risk"], "critical");
    let d = f
        .decide("agent", json!({"actionType": "external_api_call", "capability": "payments.transfer", "input": {}}))
        .await;
    assert_eq!(d["decision"], "allow");
    // An inline description may declare a new capability, never redefine a known one.
    let d = f
        .decide("agent", json!({"actionType": "tool_call",
                                "capability": {"name": "inline.echo", "type": "tool"}, "input": {}}))
        .await;
    assert_eq!(d["decision"], "allow");
    let a = f
        .post(
            "/api/v1/actions",
            "agent",
            json!({"actionType": "external_api_call",
              "capability": {"name": "payments.transfer", "type": "external_api", "risk": "low"}}),
        )
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
    assert!(a.text.contains("other governance"));
    // A name the host executes itself is not a declared capability.
    let a = f
        .post(
            "/api/v1/actions",
            "agent",
            json!({"actionType": "tool_call",
              "capability": {"name": "text/slugify", "type": "tool"}}),
        )
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{}", a.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_describes_the_actions() {
    let f = server().await;
    let a = f.send(Method::GET, "/openapi.json", None, None, &[]).await;
    let doc = a.json();
    for (path, op) in [
        ("/api/v1/actions", "decideAction"),
        ("/api/v1/actions/batch", "decideActions"),
        ("/api/v1/actions/{id}/result", "actionResult"),
        ("/api/v1/capabilities", "registerCapability"),
    ] {
        assert_eq!(doc["paths"][path]["post"]["operationId"], op, "{path}");
    }
    let types = &doc["paths"]["/api/v1/actions"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"]["properties"]["actionType"]["enum"];
    assert_eq!(types.as_array().unwrap().len(), 14);
    assert_eq!(
        doc["paths"]["/api/v1/capabilities"]["post"]["x-roles"],
        "admin"
    );
}
