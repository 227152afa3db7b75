//! The HTTP API: invoke, approve, resume and read everything, every role boundary and
//! authentication, and the OpenAPI document against the router.

use std::collections::BTreeSet;

use capability_server::ServerOptions;
use hyper::http::{Method, StatusCode};
use serde_json::json;

use crate::fixture::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invoke_approve_resume_and_read_everything() {
    let f = start(|_| ServerOptions::default()).await;
    // A call no policy holds up runs and returns its receipt.
    let a = f
        .post(
            "/api/v1/invoke",
            "agent",
            json!({"capability": "text/slugify", "input": {"text": "Hello World"}}),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let receipt = a.json()["receipt"].clone();
    assert_eq!(receipt["output"], json!({"slug": "hello-world"}));
    // A plan, without running.
    let a = f
        .post(
            "/api/v1/plans",
            "agent",
            json!({"capability": "text/slugify", "input": {"text": "x"}}),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert!(a.json()["plan"]["fingerprint"].is_string());
    // Invalid input and unknown capabilities are typed errors.
    let a = f
        .post(
            "/api/v1/invoke",
            "agent",
            json!({"capability": "text/slugify", "input": {"text": 5}}),
        )
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::BAD_REQUEST, "INVALID_INPUT")
    );
    let a = f
        .post(
            "/api/v1/invoke",
            "agent",
            json!({"capability": "no/such", "input": {}}),
        )
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::NOT_FOUND, "NOT_FOUND")
    );
    let a = f.post("/api/v1/invoke", "agent", json!({"nope": 1})).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);

    // A secret needs a human.
    let id = f.pending("agent", "a secret plan").await;
    let a = f.get("/api/v1/approvals?status=pending", "alice").await;
    let list = a.json()["approvals"].as_array().unwrap().clone();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["id"], json!(id));
    // bob approves for globex only: he does not even see acme's approval.
    let a = f.get("/api/v1/approvals", "bob").await;
    assert_eq!(a.json()["approvals"], json!([]));
    let a = f.get(&format!("/api/v1/approvals/{id}"), "alice").await;
    let shown = &a.json()["approval"];
    assert_eq!(shown["capability"], "text/slugify");
    assert_eq!(shown["tenant"], "acme");
    assert_eq!(shown["agentId"], "bot");
    assert_eq!(shown["input"], json!({"text": "a secret plan"}));
    assert_eq!(shown["policyIds"], json!(["secrets-need-approval"]));
    assert_eq!(shown["reason"], "secrets need a human");
    assert!(shown["planFingerprint"].is_string());
    let a = f.get("/api/v1/approvals?status=bogus", "alice").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let a = f.get("/api/v1/approvals/apr_missing", "alice").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);

    // Role boundaries on the decision.
    let approve = format!("/api/v1/approvals/{id}/approve");
    let deny = format!("/api/v1/approvals/{id}/deny");
    for (who, path) in [
        ("agent", &approve),
        ("auditor", &approve),
        ("auditor", &deny),
    ] {
        let a = f.post(path, who, json!({"comment": "me"})).await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (StatusCode::FORBIDDEN, "FORBIDDEN"),
            "{who}"
        );
    }
    let a = f.post(&approve, "bob", json!({})).await;
    assert_eq!(
        a.status,
        StatusCode::NOT_FOUND,
        "globex's approver: {}",
        a.text
    );
    let a = f
        .post("/api/v1/resume", "agent", json!({"capability": "text/slugify", "input": {"text": "a secret plan"}, "token": "capapr1.bogus.sig"}))
        .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);

    // alice approves; the approval names her.
    let a = f
        .post(&approve, "alice", json!({"comment": "fine by me"}))
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let token = a.json()["token"].as_str().unwrap().to_string();
    assert_eq!(a.json()["approval"]["decidedBy"], "alice");
    assert_eq!(a.json()["approval"]["note"], "fine by me");
    let a = f.post(&approve, "alice", json!({})).await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::CONFLICT, "NOT_PENDING")
    );

    // A changed input is refused; the exact call runs once.
    let a = f
        .post("/api/v1/resume", "agent", json!({"capability": "text/slugify", "input": {"text": "another secret"}, "token": token}))
        .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.text);
    let resume =
        json!({"capability": "text/slugify", "input": {"text": "a secret plan"}, "token": token});
    let a = f.post("/api/v1/resume", "auditor", resume.clone()).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let a = f.post("/api/v1/resume", "agent", resume.clone()).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(
        a.json()["receipt"]["output"],
        json!({"slug": "a-secret-plan"})
    );
    let resumed = a.json()["receipt"]["receiptId"]
        .as_str()
        .unwrap()
        .to_string();
    let a = f.post("/api/v1/resume", "agent", resume).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "a token works once");

    // Reading: the agent cannot; the auditor can.
    for path in [
        "/api/v1/audit",
        "/api/v1/receipts",
        "/api/v1/approvals",
        "/api/v1/policies",
    ] {
        let a = f.get(path, "agent").await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{path}");
    }
    let a = f
        .get("/api/v1/audit?tenant=acme&limit=500", "auditor")
        .await;
    let events = a.json()["events"].as_array().unwrap().clone();
    assert!(events.iter().all(|e| e["tenant_id"] == "acme"));
    let decisions: Vec<&str> = events
        .iter()
        .filter_map(|e| e["decision"].as_str())
        .collect();
    assert!(
        decisions.contains(&"approval_required") && decisions.contains(&"allow"),
        "{decisions:?}"
    );
    let a = f
        .get("/api/v1/audit?decision=approval_required", "auditor")
        .await;
    let held = a.json()["events"].as_array().unwrap().clone();
    assert!(!held.is_empty() && held.iter().all(|e| e["decision"] == "approval_required"));
    assert!(held.iter().all(|e| e["approval_id"] == json!(id)));
    let a = f.get("/api/v1/audit?agent=bot-g", "auditor").await;
    assert_eq!(a.json()["events"], json!([]));
    let a = f
        .get("/api/v1/audit?since=2999-01-01T00:00:00.000Z", "auditor")
        .await;
    assert_eq!(a.json()["events"], json!([]));
    let a = f.get("/api/v1/audit?since=yesterday", "auditor").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let a = f.get("/api/v1/audit?limit=0", "auditor").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let first = events[0]["event_id"].as_str().unwrap();
    let a = f.get(&format!("/api/v1/audit/{first}"), "auditor").await;
    assert_eq!(a.json()["event"]["event_id"], json!(first));
    assert_eq!(
        f.get("/api/v1/audit/evt_missing", "auditor").await.status,
        StatusCode::NOT_FOUND
    );
    let a = f.get("/api/v1/audit/verify", "auditor").await;
    assert_eq!(a.json()["ok"], true);
    let total = a.json()["records"].as_u64().unwrap();
    assert!(total as usize >= events.len());
    let a = f.get("/api/v1/audit/export", "auditor").await;
    assert_eq!(a.text.lines().count() as u64, total);
    let a = f.get("/api/v1/audit/export?format=otel", "auditor").await;
    assert!(a.json().is_object());
    assert_eq!(
        f.get("/api/v1/audit/export?format=xml", "auditor")
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    let a = f
        .get("/api/v1/receipts?capability=text/slugify", "auditor")
        .await;
    let ids: Vec<&str> = a.json()["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["receiptId"].as_str())
        .map(|s| Box::leak(s.to_string().into_boxed_str()) as &str)
        .collect();
    assert!(
        ids.contains(&resumed.as_str()) && ids.contains(&receipt["receiptId"].as_str().unwrap())
    );
    let a = f
        .get(&format!("/api/v1/receipts/{resumed}"), "auditor")
        .await;
    assert_eq!(a.json()["receipt"]["receiptId"], json!(resumed));
    assert_eq!(
        f.get("/api/v1/receipts/rcpt_missing", "auditor")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        f.get("/api/v1/receipts?status=weird", "auditor")
            .await
            .status,
        StatusCode::BAD_REQUEST
    );

    // Discovery is open to every role.
    let a = f.get("/api/v1/capabilities", "agent").await;
    let caps = a.json()["capabilities"].as_array().unwrap().clone();
    assert!(caps.iter().any(|c| c["id"] == "text/slugify"));
    let a = f.get("/api/v1/capabilities?q=slug", "auditor").await;
    assert_eq!(a.json()["hits"][0]["id"], "text/slugify", "{}", a.text);
    let a = f.get("/api/v1/capabilities/text/slugify", "agent").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert!(a.text.contains("text/slugify"));
    assert_eq!(
        f.get("/api/v1/capabilities/no/such", "agent").await.status,
        StatusCode::NOT_FOUND
    );
    let a = f.get("/api/v1/whoami", "alice").await;
    assert_eq!(a.json()["role"], "approver");
    assert_eq!(a.json()["tenants"], json!(["acme"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_self_approval_and_authentication() {
    let f = start(|_| ServerOptions::default()).await;
    // An admin may invoke and approve, but never its own request.
    let own = f.pending("admin", "my secret").await;
    let a = f
        .post(
            &format!("/api/v1/approvals/{own}/approve"),
            "admin",
            json!({}),
        )
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::FORBIDDEN, "SELF_APPROVAL")
    );
    // Approvers cannot invoke; bob cannot deny acme's, alice can.
    let a = f
        .post(
            "/api/v1/invoke",
            "alice",
            json!({"capability": "text/slugify", "input": {"text": "x"}}),
        )
        .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let id = f.pending("agent", "secret two").await;
    let globex = f.pending("agent-globex", "globex secret").await;
    let a = f
        .post(
            &format!("/api/v1/approvals/{globex}/approve"),
            "alice",
            json!({}),
        )
        .await;
    assert_eq!(
        a.status,
        StatusCode::NOT_FOUND,
        "alice approves for acme only"
    );
    let a = f
        .post(
            &format!("/api/v1/approvals/{globex}/approve"),
            "bob",
            json!({}),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let a = f
        .post(
            &format!("/api/v1/approvals/{id}/deny"),
            "alice",
            json!({"comment": "no"}),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.json()["approval"]["status"], "denied");
    assert_eq!(a.json()["approval"]["decidedBy"], "alice");
    // The admin decides what its own tenant's approver could.
    let a = f
        .post(&format!("/api/v1/approvals/{own}/deny"), "alice", json!({}))
        .await;
    assert_eq!(a.status, StatusCode::OK);
    // Authentication.
    let a = f.send(Method::GET, "/api/v1/audit", None, None, &[]).await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::UNAUTHORIZED, "UNAUTHORIZED")
    );
    let a = f
        .send(
            Method::GET,
            "/api/v1/audit",
            None,
            None,
            &[("authorization", "Bearer cap_nope")],
        )
        .await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    let a = f.send(Method::GET, "/api/v1/nope", None, None, &[]).await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::NOT_FOUND, "NOT_FOUND")
    );
    // Policies: listed, validated, tested.
    let a = f.get("/api/v1/policies", "auditor").await;
    assert_eq!(a.json()["validation"]["valid"], true, "{}", a.text);
    assert_eq!(a.json()["validation"]["policies"], 2);
    assert!(
        a.json()["files"][0]["text"]
            .as_str()
            .unwrap()
            .contains("secrets-need-approval")
    );
    let fixtures = json!([
        {"name": "plain text runs", "action": {"capability": "text/slugify", "actionType": "tool_call", "agentId": "bot", "input": {"text": "hi"}}, "expect": "allow"},
        {"name": "secrets wait", "action": {"capability": "text/slugify", "actionType": "tool_call", "agentId": "bot", "input": {"text": "a secret"}}, "expect": "approval_required"},
        {"name": "wrong on purpose", "action": {"capability": "text/slugify", "actionType": "tool_call", "agentId": "bot", "input": {"text": "a secret"}}, "expect": "allow"},
    ]);
    let a = f.post("/api/v1/policies/test", "auditor", fixtures).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(
        (a.json()["passed"].as_u64(), a.json()["failed"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(a.json()["results"][2]["passed"], false);
    let a = f
        .post("/api/v1/policies/test", "auditor", json!([{"name": 1}]))
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let a = f.post("/api/v1/policies/test", "agent", json!([])).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_document_matches_the_router() {
    let f = start(|_| ServerOptions::default()).await;
    let a = f.send(Method::GET, "/openapi.json", None, None, &[]).await;
    assert_eq!(a.status, StatusCode::OK);
    let doc = a.json();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut documented = BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            documented.insert((method.clone(), path.clone()));
        }
    }
    let routed: BTreeSet<(String, String)> = capability_server::routes::route_list()
        .into_iter()
        .map(|(m, p)| (m.to_string(), capability_server::routes::openapi_path(p)))
        .collect();
    assert_eq!(documented, routed);
    for required in [
        "/api/v1/invoke",
        "/api/v1/plans",
        "/api/v1/resume",
        "/api/v1/approvals",
        "/api/v1/approvals/{id}",
        "/api/v1/approvals/{id}/approve",
        "/api/v1/approvals/{id}/deny",
        "/api/v1/audit",
        "/api/v1/audit/verify",
        "/api/v1/receipts",
        "/api/v1/receipts/{id}",
        "/api/v1/policies",
        "/api/v1/capabilities",
    ] {
        assert!(
            doc["paths"].get(required).is_some(),
            "{required} is not documented"
        );
    }
    // Every documented operation is served: never the router's "no such route" nor 405.
    for (method, path) in &documented {
        let concrete = path.replace("{id}", "x");
        let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let a = f
            .send(
                m,
                &concrete,
                Some("admin"),
                Some("{}"),
                &[("content-type", "application/json")],
            )
            .await;
        assert_ne!(a.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert!(
            !a.text.contains("no such route"),
            "{method} {path}: {}",
            a.text
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_reads_only_its_tenants_audit_events_on_every_read() {
    let f = start(|_| ServerOptions::default()).await;
    for (who, text) in [("agent", "acme call"), ("agent-globex", "globex call")] {
        let a = f
            .post(
                "/api/v1/invoke",
                who,
                json!({"capability": "text/slugify", "input": {"text": text}}),
            )
            .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    }
    let all = f.get("/api/v1/audit?limit=1000", "auditor").await.json();
    let globex = all["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e.to_string().contains("\"globex\""))
        .expect("the auditor sees globex's event")
        .clone();
    let globex_id = globex["event"]["event_id"]
        .as_str()
        .or(globex["event_id"].as_str())
        .unwrap()
        .to_string();
    // alice approves for acme only.
    let a = f.get("/api/v1/audit?tenant=globex", "alice").await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.text);
    let a = f.get("/api/v1/audit?limit=1000", "alice").await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(a.text.contains("acme-call") || a.text.contains("\"acme\""));
    assert!(!a.text.contains("globex"), "{}", a.text);
    let a = f.get(&format!("/api/v1/audit/{globex_id}"), "alice").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    let a = f.get("/api/v1/audit/export", "alice").await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(
        !a.text.is_empty() && !a.text.contains("globex"),
        "{}",
        a.text
    );
    let a = f.get("/api/v1/audit/export?tenant=globex", "alice").await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let a = f.get("/api/v1/audit/verify", "alice").await;
    assert_eq!(a.json()["ok"], true, "{}", a.text);
    // The console's audit page, in alice's session: acme's events only.
    let (cookie, _) = f.login().await;
    for path in ["/console/audit", "/console/audit?tenant=globex"] {
        let page = f
            .send(Method::GET, path, None, None, &[("cookie", &cookie)])
            .await;
        assert!(
            !page.text.contains("globex call") && !page.text.contains(&globex_id),
            "{path}"
        );
    }
}
