//! A server on 127.0.0.1 over a fresh home with one token per role, and a client that
//! speaks to it as each of them (bearer tokens, console sessions).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use axum::body::Bytes;
use capability_host::{Host, HostConfig, Role, TokenSpec};
use capability_server::{Server, ServerOptions};
use http_body_util::{BodyExt, Full};
use hyper::http::{HeaderMap, Method, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

pub(crate) const POLICY: &str = r#"@id("allow-all") permit(principal, action, resource);
@id("secrets-need-approval") @decision("approval_required") @reason("secrets need a human")
forbid(principal, action, resource) when { context.input has text && context.input.text like "*secret*" };
"#;

pub(crate) struct Fixture {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) base: String,
    pub(crate) client: Client<HttpConnector, Full<Bytes>>,
    pub(crate) tokens: HashMap<&'static str, String>,
    pub(crate) server: tokio::task::JoinHandle<()>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.server.abort();
    }
}

pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) text: String,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.text))
    }
    pub(crate) fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
}

pub(crate) fn spec(agent: &str, role: Role, tenant: Option<&str>, tenants: &[&str]) -> TokenSpec {
    let mut s = TokenSpec::agent(agent);
    s.role = role;
    s.tenant = tenant.map(str::to_string);
    s.tenants = tenants
        .iter()
        .map(|t| t.to_string())
        .collect::<BTreeSet<_>>();
    s
}

pub(crate) async fn start(options: impl FnOnce(&std::path::Path) -> ServerOptions) -> Fixture {
    start_with(|_, _| {}, options).await
}

/// [`start`] with the host's config adjusted by `config` (given the test's directory)
/// before the host opens.
pub(crate) async fn start_with(
    config: impl FnOnce(&std::path::Path, &mut HostConfig),
    options: impl FnOnce(&std::path::Path) -> ServerOptions,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policies.cedar");
    std::fs::write(&policy, POLICY).unwrap();
    let mut host_config = HostConfig {
        home: Some(dir.path().join("home")),
        policies: vec![policy.clone()],
        ..HostConfig::default()
    };
    config(dir.path(), &mut host_config);
    let host = Host::open(host_config).unwrap();
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
    pub(crate) async fn send(
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

    pub(crate) async fn get(&self, path: &str, token: &str) -> Answer {
        self.send(Method::GET, path, Some(token), None, &[]).await
    }

    pub(crate) async fn post(&self, path: &str, token: &str, body: Value) -> Answer {
        self.send(
            Method::POST,
            path,
            Some(token),
            Some(&body.to_string()),
            &[("content-type", "application/json")],
        )
        .await
    }

    /// The status a POST of `body` is answered with, where the server may answer (and close)
    /// before it has read the whole body: written over a plain connection whose write errors
    /// (a broken pipe once the server closed) are ignored, so that the answer is what counts.
    pub(crate) async fn post_status_before_body(
        &self,
        path: &str,
        token: &str,
        body: &str,
    ) -> StatusCode {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = self.base.trim_start_matches("http://");
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut read, mut write) = stream.into_split();
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n",
            self.tokens[token],
            body.len()
        );
        let body = body.to_string();
        let writing = tokio::spawn(async move {
            let _ = write.write_all(head.as_bytes()).await;
            let _ = write.write_all(body.as_bytes()).await;
        });
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        while !answer.windows(2).any(|w| w == b"\r\n") {
            let n = read.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed without an answer");
            answer.extend_from_slice(&buf[..n]);
        }
        writing.abort();
        let line = String::from_utf8_lossy(&answer);
        let code = line.split_whitespace().nth(1).unwrap();
        StatusCode::from_u16(code.parse().unwrap()).unwrap()
    }

    /// An agent's call that needs approval; returns the approval id.
    pub(crate) async fn pending(&self, token: &str, text: &str) -> String {
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
    pub(crate) async fn login(&self) -> (String, String) {
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

pub(crate) fn set_cookie(headers: &HeaderMap, name: &str) -> String {
    headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix(&format!("{name}=")))
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("no {name} cookie in {headers:?}"))
        .to_string()
}

pub(crate) fn hidden_csrf(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no csrf field in {html}"));
    let rest = &html[at + 19..];
    rest[..rest.find('"').unwrap()].to_string()
}
