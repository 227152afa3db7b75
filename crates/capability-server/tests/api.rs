//! The HTTP API and console on 127.0.0.1: every endpoint, every role boundary, CSRF,
//! Host/Origin checks, live events and the webhook.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use capability_host::webhook::Webhook;
use capability_host::{Host, HostConfig, Role, TokenSpec};
use capability_server::{Server, ServerOptions};
use http_body_util::{BodyExt, Full};
use hyper::http::{HeaderMap, Method, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

const POLICY: &str = r#"@id("allow-all") permit(principal, action, resource);
@id("secrets-need-approval") @decision("approval_required") @reason("secrets need a human")
forbid(principal, action, resource) when { context.input has text && context.input.text like "*secret*" };
"#;

struct Fixture {
    _dir: tempfile::TempDir,
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
    tokens: HashMap<&'static str, String>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.server.abort();
    }
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.text))
    }
    fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
}

fn spec(agent: &str, role: Role, tenant: Option<&str>, tenants: &[&str]) -> TokenSpec {
    let mut s = TokenSpec::agent(agent);
    s.role = role;
    s.tenant = tenant.map(str::to_string);
    s.tenants = tenants
        .iter()
        .map(|t| t.to_string())
        .collect::<BTreeSet<_>>();
    s
}

async fn start(options: impl FnOnce(&std::path::Path) -> ServerOptions) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policies.cedar");
    std::fs::write(&policy, POLICY).unwrap();
    let host = Host::open(HostConfig {
        home: Some(dir.path().join("home")),
        policies: vec![policy.clone()],
        ..HostConfig::default()
    })
    .unwrap();
    let tokens = host.tokens().unwrap();
    let mut made = HashMap::new();
    let mut alice = spec("alice", Role::Approver, None, &["acme"]);
    alice.login = Some(("alice".into(), "correct horse battery".into()));
    for (name, s) in [
        ("agent", spec("bot", Role::Agent, Some("acme"), &[])),
        (
            "agent-globex",
            spec("bot-g", Role::Agent, Some("globex"), &[]),
        ),
        ("alice", alice),
        ("bob", spec("bob", Role::Approver, None, &["globex"])),
        ("auditor", spec("audrey", Role::Auditor, None, &[])),
        ("admin", spec("root", Role::Admin, Some("acme"), &[])),
    ] {
        made.insert(name, tokens.add(&s).unwrap().1);
    }
    let opts = options(dir.path());
    let server = Server::new(Arc::new(host), opts);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = tokio::spawn(async move {
        server
            .serve(listener, std::future::pending())
            .await
            .unwrap();
    });
    Fixture {
        _dir: dir,
        base: format!("http://{addr}"),
        client: Client::builder(TokioExecutor::new()).build_http(),
        tokens: made,
        server: handle,
    }
}

impl Fixture {
    async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {}", self.tokens[t]));
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or("").to_string())))
            .unwrap();
        let res = self.client.request(req).await.unwrap();
        let status = res.status();
        let headers = res.headers().clone();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        Answer {
            status,
            headers,
            text: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    async fn get(&self, path: &str, token: &str) -> Answer {
        self.send(Method::GET, path, Some(token), None, &[]).await
    }

    async fn post(&self, path: &str, token: &str, body: Value) -> Answer {
        self.send(
            Method::POST,
            path,
            Some(token),
            Some(&body.to_string()),
            &[("content-type", "application/json")],
        )
        .await
    }

    /// An agent's call that needs approval; returns the approval id.
    async fn pending(&self, token: &str, text: &str) -> String {
        let a = self
            .post(
                "/api/v1/invoke",
                token,
                json!({"capability": "text/slugify", "input": {"text": text}}),
            )
            .await;
        assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.text);
        let approval = &a.json()["approval"];
        for k in ["id", "reason", "expiresAt", "planFingerprint"] {
            assert!(approval[k].is_string(), "{k} missing: {approval}");
        }
        approval["id"].as_str().unwrap().to_string()
    }

    /// A console session for alice: (cookie header, csrf token).
    async fn login(&self) -> (String, String) {
        let form = self.send(Method::GET, "/login", None, None, &[]).await;
        let cookie = set_cookie(&form.headers, "cap_login_csrf");
        let csrf = hidden_csrf(&form.text);
        let a = self
            .send(
                Method::POST,
                "/login",
                None,
                Some(&format!(
                    "login=alice&password=correct+horse+battery&csrf={csrf}"
                )),
                &[
                    ("content-type", "application/x-www-form-urlencoded"),
                    ("cookie", &format!("cap_login_csrf={cookie}")),
                ],
            )
            .await;
        assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.text);
        let raw = a
            .headers
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .find(|c| c.starts_with("cap_session="))
            .unwrap();
        for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
            assert!(raw.contains(attr), "{raw} lacks {attr}");
        }
        assert!(
            !raw.contains("Secure"),
            "loopback HTTP cookies cannot be Secure"
        );
        let session = set_cookie(&a.headers, "cap_session");
        let cookie = format!("cap_session={session}");
        let page = self
            .send(
                Method::GET,
                "/console/approvals",
                None,
                None,
                &[("cookie", &cookie)],
            )
            .await;
        assert_eq!(page.status, StatusCode::OK);
        (cookie, hidden_csrf(&page.text))
    }
}

fn set_cookie(headers: &HeaderMap, name: &str) -> String {
    headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix(&format!("{name}=")))
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("no {name} cookie in {headers:?}"))
        .to_string()
}

fn hidden_csrf(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no csrf field in {html}"));
    let rest = &html[at + 19..];
    rest[..rest.find('"').unwrap()].to_string()
}

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
async fn console_sessions_csrf_host_and_origin() {
    let f = start(|_| ServerOptions::default()).await;
    let id = f.pending("agent", "console secret").await;
    // Sign-in without the login CSRF cookie is refused.
    let a = f
        .send(
            Method::POST,
            "/login",
            None,
            Some("login=alice&password=correct+horse+battery&csrf=x"),
            &[("content-type", "application/x-www-form-urlencoded")],
        )
        .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    // A wrong password is refused.
    let form = f.send(Method::GET, "/login", None, None, &[]).await;
    let c = set_cookie(&form.headers, "cap_login_csrf");
    let a = f
        .send(
            Method::POST,
            "/login",
            None,
            Some(&format!("login=alice&password=wrong&csrf={c}")),
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("cookie", &format!("cap_login_csrf={c}")),
            ],
        )
        .await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    // Unauthenticated console pages send to the sign-in page.
    let a = f.send(Method::GET, "/console/audit", None, None, &[]).await;
    assert_eq!(a.status, StatusCode::SEE_OTHER);
    let (cookie, csrf) = f.login().await;
    let page = f
        .send(
            Method::GET,
            "/console/approvals",
            None,
            None,
            &[("cookie", &cookie)],
        )
        .await;
    assert!(page.text.contains(&id) && page.text.contains("console secret"));
    assert!(
        page.headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("script-src 'self'")
    );
    let approve = format!("/console/approvals/{id}/approve");
    let form_headers = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("cookie", cookie.as_str()),
    ];
    // No CSRF token, a wrong one: refused, and the approval stays pending.
    for body in [
        "comment=ok".to_string(),
        "comment=ok&csrf=forged".to_string(),
    ] {
        let a = f
            .send(Method::POST, &approve, None, Some(&body), &form_headers)
            .await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{body}");
    }
    let a = f.get(&format!("/api/v1/approvals/{id}"), "auditor").await;
    assert_eq!(a.json()["approval"]["status"], "pending");
    // The session on the API: a state change needs the CSRF header.
    let a = f
        .send(
            Method::POST,
            &format!("/api/v1/approvals/{id}/approve"),
            None,
            Some("{}"),
            &[("cookie", cookie.as_str())],
        )
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (StatusCode::FORBIDDEN, "CSRF")
    );
    let a = f
        .send(
            Method::GET,
            "/api/v1/whoami",
            None,
            None,
            &[("cookie", cookie.as_str())],
        )
        .await;
    assert_eq!(a.json()["name"], "alice");
    // A foreign Origin or Host is refused even with the right token.
    let body = format!("comment=ok&csrf={csrf}");
    let mut evil = form_headers.to_vec();
    evil.push(("origin", "http://evil.example"));
    let a = f
        .send(Method::POST, &approve, None, Some(&body), &evil)
        .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let a = f
        .send(
            Method::GET,
            "/api/v1/whoami",
            Some("alice"),
            None,
            &[("host", "evil.example")],
        )
        .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    // With its token and its own origin, the form approves and shows the agent's token.
    let mut own = form_headers.to_vec();
    let origin = f.base.clone();
    own.push(("origin", origin.as_str()));
    let a = f
        .send(Method::POST, &approve, None, Some(&body), &own)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert!(a.text.contains("id=\"approval-token\">capapr1."));
    let a = f.get(&format!("/api/v1/approvals/{id}"), "auditor").await;
    assert_eq!(a.json()["approval"]["decidedBy"], "alice");
    // Every console page renders for the session.
    for path in [
        "/console/decided",
        "/console/audit?tenant=acme",
        "/console/receipts",
        "/console/policies",
        &format!("/console/approvals/{id}"),
    ] {
        let a = f
            .send(
                Method::GET,
                path,
                None,
                None,
                &[("cookie", cookie.as_str())],
            )
            .await;
        assert_eq!(a.status, StatusCode::OK, "{path}");
        assert!(a.text.contains("<main id=\"main\">"), "{path}");
    }
    let audit = f
        .send(
            Method::GET,
            "/console/audit",
            None,
            None,
            &[("cookie", cookie.as_str())],
        )
        .await;
    assert!(audit.text.contains("Hash chain verified"));
    // Logging out ends the session.
    let a = f
        .send(
            Method::POST,
            "/logout",
            None,
            Some(&format!("csrf={csrf}")),
            &form_headers,
        )
        .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER);
    let a = f
        .send(
            Method::GET,
            "/console/approvals",
            None,
            None,
            &[("cookie", cookie.as_str())],
        )
        .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER);
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

/// A webhook receiver on loopback: fails the first delivery, accepts the next.
async fn receiver() -> (String, tokio::sync::mpsc::Receiver<(HeaderMap, Vec<u8>)>) {
    use axum::routing::post;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let app = axum::Router::new().route(
        "/hook",
        post(move |headers: HeaderMap, body: Bytes| {
            let tx = tx.clone();
            let calls = Arc::clone(&calls);
            async move {
                if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    return StatusCode::SERVICE_UNAVAILABLE;
                }
                tx.send((headers, body.to_vec())).await.unwrap();
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_events_and_signed_webhook() {
    let (url, mut deliveries) = receiver().await;
    let mut hook = Webhook::new(&url, "s3cret").unwrap();
    hook.backoff = Duration::from_millis(20);
    let f = start(move |_| ServerOptions {
        webhook: Some(hook),
        ..ServerOptions::default()
    })
    .await;
    let (cookie, _) = f.login().await;
    // Subscribe, then make an approval.
    let req = hyper::Request::get(format!("{}/console/events", f.base))
        .header("cookie", &cookie)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let res = f.client.request(req).await.unwrap();
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    let mut body = res.into_body();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let globex = f.pending("agent-globex", "not alice's secret").await;
    let id = f.pending("agent", "a live secret").await;
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains(&id) {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .expect("no live event")
            .unwrap()
            .unwrap();
        if let Ok(data) = frame.into_data() {
            seen.push_str(&String::from_utf8_lossy(&data));
        }
    }
    assert!(seen.contains("event: approval"), "{seen}");
    assert!(
        !seen.contains(&globex),
        "alice sees only acme's approvals: {seen}"
    );
    // The webhook got both, after a retry, signed.
    let mut got = Vec::new();
    for _ in 0..2 {
        let (headers, body) = tokio::time::timeout(Duration::from_secs(10), deliveries.recv())
            .await
            .expect("no webhook delivery")
            .unwrap();
        let ts: u64 = headers["x-capability-timestamp"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let expected = capability_host::webhook::signature(b"s3cret", ts, &body);
        assert_eq!(
            headers["x-capability-signature"].to_str().unwrap(),
            expected
        );
        assert_ne!(
            expected,
            capability_host::webhook::signature(b"other", ts, &body)
        );
        let doc: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(doc["type"], "approval.pending");
        got.push(doc["approval"]["id"].as_str().unwrap().to_string());
    }
    got.sort();
    let mut want = vec![globex, id];
    want.sort();
    assert_eq!(got, want);
}

#[path = "../../capability-openapi/tests/tls_front/mod.rs"]
mod tls_front;

fn pending_record(id: &str) -> capability_policy::approvals::ApprovalRecord {
    capability_policy::approvals::ApprovalRecord {
        approval_id: id.into(),
        status: capability_policy::approvals::ApprovalStatus::Pending,
        plan_fingerprint: None,
        action_digest: "sha256:00".into(),
        capability: "text/echo".into(),
        action_type: "invoke".into(),
        agent_id: "agent".into(),
        tenant: None,
        environment: "test".into(),
        requester: "agent".into(),
        reason: Some("secrets need a human".into()),
        policy_ids: vec!["secrets-need-approval".into()],
        input: json!({"text": "a secret"}),
        action_id: "act_1".into(),
        trace_id: "trace_1".into(),
        created_at: 0,
        expires_at: 1,
        decided_by: None,
        decided_at: None,
        note: None,
        token_nonce: None,
        token_expires_at: None,
        consumed_at: None,
    }
}

/// The webhook to an `https://` receiver (a TLS terminator whose certificate a test CA
/// issued): refused on the certificate while the CA is not trusted (nothing reaches the
/// receiver), delivered and signed once it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_delivers_over_https_to_a_trusted_receiver_only() {
    let (url, mut deliveries) = receiver().await;
    let plain = url
        .strip_prefix("http://")
        .and_then(|u| u.strip_suffix("/hook"))
        .unwrap()
        .parse()
        .unwrap();
    let ca = tls_front::TestCa::new("webhook test CA");
    let front = tls_front::front(ca.server(&["127.0.0.1"]), plain);
    let https = format!("https://{front}/hook");
    let mut hook = Webhook::new(&https, "s3cret").unwrap();
    hook.attempts = 2;
    hook.backoff = Duration::from_millis(10);
    let untrusted = hook.clone();
    let e =
        tokio::task::spawn_blocking(move || untrusted.deliver(&pending_record("apr_untrusted")))
            .await
            .unwrap()
            .unwrap_err()
            .to_string();
    assert!(
        e.contains(&format!("certificate not trusted: {front}")),
        "{e}"
    );
    // Trusted: the receiver's first answer is a 503 (so it saw nothing before), the retry
    // is accepted.
    let mut hook = Webhook::with_roots(&https, "s3cret", Some(ca.pem())).unwrap();
    hook.backoff = Duration::from_millis(10);
    let trusted = tokio::task::spawn_blocking(move || hook.deliver(&pending_record("apr_trusted")))
        .await
        .unwrap();
    assert_eq!(trusted, Ok(2));
    let (headers, body) = tokio::time::timeout(Duration::from_secs(10), deliveries.recv())
        .await
        .expect("no webhook delivery")
        .unwrap();
    let ts: u64 = headers["x-capability-timestamp"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        headers["x-capability-signature"].to_str().unwrap(),
        capability_host::webhook::signature(b"s3cret", ts, &body)
    );
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["approval"]["id"], "apr_trusted");
}
