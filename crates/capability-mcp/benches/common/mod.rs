//! What the MCP benches share: an HTTP/1.1 client of a streamable-HTTP MCP server, and
//! real MCP servers to put behind the gateway (rmcp's streamable-HTTP service in the bench's
//! process, each listing [`TOOLS`] tools).

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};

/// One HTTP/1.1 connection with an MCP session.
pub struct Session {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    addr: String,
    path: String,
    token: String,
    session: Option<String>,
}

impl Session {
    /// A session with the server at `http://<addr>/mcp`.
    pub async fn open(addr: &str, token: &str) -> Session {
        Session::open_at(addr, "/mcp", token).await
    }

    /// A session with the server at `http://<addr><path>`.
    pub async fn open_at(addr: &str, path: &str, token: &str) -> Session {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let mut s = Session {
            sender,
            addr: addr.to_string(),
            path: path.to_string(),
            token: token.to_string(),
            session: None,
        };
        s.post(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}}}),
        )
        .await
        .unwrap();
        s.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await
            .unwrap();
        s
    }

    /// Posts a message; the whole body of the answer (JSON or an SSE stream).
    pub async fn post_raw(&mut self, msg: &Value) -> Result<Bytes, String> {
        let mut req = hyper::Request::post(&self.path)
            .header("host", &self.addr)
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        let req = req
            .body(Full::new(Bytes::from(msg.to_string())))
            .map_err(|e| e.to_string())?;
        self.sender.ready().await.map_err(|e| e.to_string())?;
        let res = self
            .sender
            .send_request(req)
            .await
            .map_err(|e| e.to_string())?;
        if !res.status().is_success() {
            return Err(format!("HTTP {}", res.status()));
        }
        if let Some(s) = res.headers().get("mcp-session-id") {
            self.session = Some(s.to_str().unwrap().to_string());
        }
        Ok(res
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes())
    }

    /// Posts a message; the JSON-RPC response (from JSON or the SSE stream), if any.
    pub async fn post(&mut self, msg: &Value) -> Result<Option<Value>, String> {
        let body = self.post_raw(msg).await?;
        Ok(response_of(&body))
    }
}

/// The JSON-RPC response in an answer's body (JSON or an SSE stream).
pub fn response_of(body: &[u8]) -> Option<Value> {
    let text = String::from_utf8_lossy(body);
    for line in text.lines() {
        let data = line.strip_prefix("data:").unwrap_or(line).trim();
        if let Ok(v) = serde_json::from_str::<Value>(data)
            && v.get("id").is_some()
        {
            return Some(v);
        }
    }
    None
}

/// Tools per upstream.
pub const TOOLS: usize = 100;

/// An upstream MCP server listing [`TOOLS`] tools (`t0` …), each answering its message.
#[derive(Clone)]
struct ManyTools {
    tools: Arc<ListToolsResult>,
}

impl ManyTools {
    fn new(server: usize) -> ManyTools {
        let tools: Vec<Value> = (0..TOOLS)
            .map(|j| {
                json!({
                    "name": format!("t{j}"),
                    "title": format!("Tool {j} of server {server}"),
                    "description": format!("Looks up record {j} of upstream {server} and answers it with the message it was given."),
                    "inputSchema": {
                        "type": "object",
                        "properties": {
                            "message": {"type": "string", "description": "What to answer."},
                            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                        },
                        "required": ["message"],
                    },
                    "annotations": {"readOnlyHint": true, "openWorldHint": false},
                })
            })
            .collect();
        ManyTools {
            tools: Arc::new(serde_json::from_value(json!({ "tools": tools })).unwrap()),
        }
    }
}

impl ServerHandler for ManyTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok((*self.tools).clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let message = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("message"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let result: CallToolResult = serde_json::from_value(
            json!({"content": [{"type": "text", "text": format!("Echo: {message}")}]}),
        )
        .unwrap();
        Ok(CallToolResponse::Complete(result))
    }
}

/// Serves `servers` upstreams at `http://<addr>/u<i>/mcp`; the address.
pub async fn upstreams(servers: usize) -> String {
    let mut router = axum::Router::new();
    for i in 0..servers {
        let handler = ManyTools::new(i);
        let service = StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        router = router.nest_service(&format!("/u{i}/mcp"), service);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    // As real servers do (Node's, uvicorn's): without it a response written in two parts
    // waits for the client's delayed ACK, 40 ms a call.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// A multi-threaded runtime of `workers` threads.
pub fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

/// Times `runs` posts of `msg` in `session` after `warmup` (the whole answer read, not
/// parsed).
pub async fn time_posts(
    session: &mut Session,
    msg: &Value,
    warmup: usize,
    runs: usize,
) -> capability_test_support::measure::Percentiles {
    for _ in 0..warmup {
        session.post_raw(msg).await.unwrap();
    }
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = std::time::Instant::now();
        std::hint::black_box(session.post_raw(msg).await.unwrap());
        samples.push(t.elapsed().as_nanos());
    }
    capability_test_support::measure::Percentiles::of(&mut samples)
}

/// Times `runs` calls of `f` after `runs / 10` to warm up.
pub fn measure_calls(
    runs: usize,
    mut f: impl FnMut(),
) -> capability_test_support::measure::Percentiles {
    capability_test_support::measure::timed(runs / 10, runs, &mut f)
}

/// Times `rounds` calls of `direct` and of `through` (each returns one call's round trip in
/// ns), alternating, so that both see the same machine (a VM's speed drifts from second to
/// second), after 500 of each to warm up. Prints both, the difference of their medians and
/// the median of the paired differences.
pub fn added(
    name: &str,
    rounds: usize,
    mut direct: impl FnMut() -> u128,
    mut through: impl FnMut() -> u128,
) {
    for _ in 0..500 {
        direct();
        through();
    }
    let (mut da, mut db, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        // Alternate which goes first, so that neither always follows the other's wake-up.
        let (x, y) = if i % 2 == 0 {
            let x = direct();
            (x, through())
        } else {
            let y = through();
            (direct(), y)
        };
        da.push(x);
        db.push(y);
        diff.push(y as i128 - x as i128);
    }
    let pa = capability_test_support::measure::Percentiles::of(&mut da)
        .print(&format!("{name}: direct"))
        .p50
        / 1000.0;
    let pb = capability_test_support::measure::Percentiles::of(&mut db)
        .print(&format!("{name}: through"))
        .p50
        / 1000.0;
    diff.sort_unstable();
    println!(
        "{name}: added p50 {:.1} µs (difference of the medians), {:.1} µs (median of the paired differences)",
        pb - pa,
        diff[diff.len() / 2] as f64 / 1000.0
    );
}

/// A gateway host in `dir` over the first `servers` upstreams served at `addr` (see
/// [`upstreams`]), under the Cedar policies `policy`, as `cap mcp-gateway` opens it; its
/// upstreams' tools listed and registered.
pub fn gateway_host(
    dir: &std::path::Path,
    policy: &str,
    addr: &str,
    servers: usize,
) -> Arc<capability_host::Host> {
    use capability_host::upstream::GatewayConfig;
    use capability_host::{Host, HostConfig};
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("gateway.cedar"), policy).unwrap();
    let mut toml = String::from("policy = [\"gateway.cedar\"]\ntimeout_ms = 10000\n");
    for i in 0..servers {
        toml.push_str(&format!(
            "[[server]]\nname = \"u{i}\"\nurl = \"http://{addr}/u{i}/mcp\"\n"
        ));
    }
    let path = dir.join("gateway.toml");
    std::fs::write(&path, toml).unwrap();
    let host = Host::open(HostConfig {
        home: Some(dir.join("home")),
        gateway: Some(GatewayConfig::load(&path).unwrap()),
        ..Default::default()
    })
    .unwrap();
    host.sync_upstreams(true);
    let tools = host.upstreams().unwrap().tools().len();
    assert_eq!(tools, servers * TOOLS, "{:?}", host.upstream_problems());
    Arc::new(host)
}
