//! The stdio transport of both surfaces: the client's pipes, with the `tools/call` requests of
//! a session that began with `initialize` answered in a lane of their own.
//!
//! rmcp serves everything else (the handshake, `tools/list`, pings, cancellations, requests
//! of 2026-07-28 clients that carry their protocol version in `_meta`): the lane reads the
//! client's input, takes the calls it can answer and hands every other line to rmcp
//! unchanged, through an in-memory pipe; rmcp's output comes back through another and is
//! written, like the lane's answers, one whole line at a time. A call in the lane runs in a
//! task of its own (so calls still run side by side) and writes its answer from that task.
//! A `notifications/cancelled` for a call in the lane reaches rmcp, which does not know that
//! request: the call runs to its end and is answered, which the protocol allows (the client
//! ignores the answer to a request it cancelled); a call under rmcp ran to its end as well,
//! since the surfaces' calls are not interrupted.
//!
//! Why: rmcp turns a request into a task, a message on a channel, a pass through its
//! service loop and a task that writes the answer, which cost about 60 µs a call on the
//! 2-core VM where the gateway was measured, more than the governance of the call. The
//! lane parses the line once and builds the answer with rmcp's own types and the rules rmcp
//! applies for a peer that negotiated a revision with `initialize` (no `resultType`, an
//! object-only `structuredContent`); the surface call and the conversion of its result are
//! the handler's own ([`crate::handler::tool_call`]), so a client cannot tell which path
//! answered.
//!
//! Every request is answered. rmcp drops without a word a line it cannot parse (not JSON,
//! nested deeper than serde_json reads, longer than its line limit), and answers a JSON line
//! that is not a message it knows (a known method with malformed params) with an error
//! without an id: either way the client of that request would wait forever. The lane
//! answers those lines itself and does not pass them on: a parse error (-32700) or an
//! invalid request (-32600), to the request's id when it can be read ([`scan::Scan`] reads
//! it from any line, however deep), else to a null id. A line too long for the lane to hold
//! goes to rmcp as it comes; it is scanned on the way and answered when rmcp cannot read it
//! (too long, too deep).

mod scan;

use std::sync::Arc;

use rmcp::model::{ClientJsonRpcMessage, ErrorData, RequestId, ServerJsonRpcMessage};
use serde_json::Value;
use serde_json::error::Category;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;
use tokio::task::JoinSet;

use crate::handler::{Surface, tool_call};
use crate::lane::{self, Call};

/// The longest line the lane looks at; a longer one goes to rmcp as it is (rmcp applies its
/// own limit).
const LANE_LINE_MAX: usize = 1 << 20;

/// How much of the client's input or of rmcp's output may wait in an in-memory pipe.
const PIPE_BYTES: usize = 1 << 16;

/// The longest line rmcp reads, its `\n` included; it drops a longer one.
const RMCP_LINE_MAX: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// The client's output, written by rmcp and the lane alike, one whole line at a time.
type Output<W> = Arc<Mutex<W>>;

/// Where a session is in its `initialize` handshake, as seen from the client's input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Handshake {
    #[default]
    None,
    /// The client sent `initialize`.
    Asked,
    /// ... and then `notifications/initialized`: its calls may take the lane.
    Done,
}

/// What the lane makes of one line of input.
#[derive(Debug, PartialEq)]
enum Line {
    /// A call to answer in the lane.
    Call(Call),
    /// A line rmcp would not answer: the lane answers it with this error.
    Refused(Refused),
    /// Anything else: for rmcp, unchanged.
    Rmcp,
}

/// The error answering a line rmcp would not answer, and the id it goes to.
#[derive(Debug, PartialEq)]
struct Refused {
    id: Option<RequestId>,
    error: ErrorData,
}

impl Refused {
    fn line(self) -> Vec<u8> {
        let written = match self.id {
            Some(id) => serde_json::to_vec(&ServerJsonRpcMessage::error(self.error, Some(id))),
            // JSON-RPC 2.0 answers what has no readable id to `"id": null` (rmcp would leave
            // the id out).
            None => serde_json::to_value(&self.error).and_then(|error| {
                serde_json::to_vec(
                    &serde_json::json!({"jsonrpc": "2.0", "id": null, "error": error}),
                )
            }),
        };
        let mut line = written.unwrap_or_else(|_| {
            // Serializing rmcp's own types does not fail; should it, a parse error.
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#
                .to_vec()
        });
        line.push(b'\n');
        line
    }
}

/// A line that does not parse (not JSON, or nested too deep): a parse error, to its id when
/// the line has one that can be read.
fn unparsable(line: &[u8], e: &serde_json::Error) -> Refused {
    let scan = scan::Scan::of(line);
    let message = if scan.max_depth() >= scan::TOO_DEEP {
        too_deep()
    } else {
        format!("Parse error: {e}")
    };
    Refused {
        id: scan.id(),
        error: ErrorData::parse_error(message, None),
    }
}

fn too_deep() -> String {
    format!(
        "Parse error: arrays and objects nested {} levels deep or more",
        scan::TOO_DEEP
    )
}

/// `None` when rmcp answers `line` (it reads it; it skips a blank line), else what the lane
/// answers: a line that does not parse (rmcp drops it), or a request that is not a message
/// rmcp knows (rmcp answers it, but without its id).
fn admit(line: &[u8]) -> Option<Refused> {
    // rmcp reads past a byte-order mark.
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let e = serde_json::from_slice::<ClientJsonRpcMessage>(line).err()?;
    match e.classify() {
        Category::Syntax | Category::Eof => Some(unparsable(line, &e)),
        Category::Data => invalid_request(line, &e),
        Category::Io => None,
    }
}

/// A JSON line that is not a message rmcp knows: when it is a request (a `method` and an id
/// that a request id can be), an invalid request to its id; anything else is rmcp's (a
/// notification is never answered).
fn invalid_request(line: &[u8], e: &serde_json::Error) -> Option<Refused> {
    let Ok(Value::Object(msg)) = serde_json::from_slice::<Value>(line) else {
        return None;
    };
    msg.get("method")?;
    let id = serde_json::from_value::<RequestId>(msg.get("id")?.clone()).ok()?;
    Some(Refused {
        id: Some(id),
        error: ErrorData::invalid_request(format!("Invalid request: {e}"), None),
    })
}

/// A line too long for the lane, scanned as it went to rmcp: rmcp does not read it if it is
/// longer than rmcp's limit or nested too deep.
fn refused_long(scan: &scan::Scan) -> Option<Refused> {
    let error = if scan.len() > RMCP_LINE_MAX {
        ErrorData::invalid_request(
            format!("Invalid request: a message longer than {RMCP_LINE_MAX} bytes"),
            None,
        )
    } else if scan.max_depth() >= scan::TOO_DEEP {
        ErrorData::parse_error(too_deep(), None)
    } else {
        return None;
    };
    Some(Refused {
        id: scan.id(),
        error,
    })
}

/// Reads one line (without its `\n`); a `tools/call` of a session past its handshake whose
/// every part the lane knows becomes a [`Call`]; `initialize` and
/// `notifications/initialized` advance the handshake. A line it parses and finds not to be
/// JSON is [`Line::Refused`]; the other lines for rmcp go through [`admit`] after.
fn classify(line: &[u8], handshake: &mut Handshake) -> Line {
    // Most lines are calls: the cheap test first.
    let call = contains(line, b"\"tools/call\"");
    if !call && !contains(line, b"initialize") {
        return Line::Rmcp;
    }
    let mut msg = match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(msg)) => msg,
        Ok(_) => return Line::Rmcp,
        Err(e) => return Line::Refused(unparsable(line, &e)),
    };
    if msg.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Line::Rmcp;
    }
    match (
        msg.get("method").and_then(Value::as_str),
        msg.contains_key("id"),
    ) {
        (Some("initialize"), true) => *handshake = Handshake::Asked,
        (Some("notifications/initialized"), false) if *handshake == Handshake::Asked => {
            *handshake = Handshake::Done;
        }
        (Some("tools/call"), true) if *handshake == Handshake::Done => {
            return lane::call_of(&mut msg).map_or(Line::Rmcp, Line::Call);
        }
        _ => {}
    }
    Line::Rmcp
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// [`lane::answer`] as a line.
fn answer_line(id: RequestId, result: Result<rmcp::model::CallToolResult, ErrorData>) -> Vec<u8> {
    let mut line = lane::answer(id, result);
    line.push(b'\n');
    line
}

async fn write_line<W: AsyncWrite + Unpin>(output: &Output<W>, line: &[u8]) -> std::io::Result<()> {
    let mut w = output.lock().await;
    w.write_all(line).await?;
    w.flush().await
}

/// Serves the handler's surface over `input` and `output` (the client's pipes) until the
/// input ends: rmcp with the handler behind the lane. Returns once rmcp has stopped and
/// every call the lane took has been answered.
pub(crate) async fn serve<S, R, W>(
    handler: crate::handler::Handler<S>,
    input: R,
    output: W,
) -> std::io::Result<()>
where
    S: Surface,
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    use rmcp::ServiceExt;
    let output: Output<W> = Arc::new(Mutex::new(output));
    let (to_rmcp, rmcp_input) = tokio::io::duplex(PIPE_BYTES);
    let (rmcp_output, from_rmcp) = tokio::io::duplex(PIPE_BYTES);
    let forward = tokio::spawn(forward_rmcp(from_rmcp, Arc::clone(&output)));
    let lane = tokio::spawn(read_input(handler.surface.clone(), input, to_rmcp, output));
    let running = handler
        .serve((rmcp_input, rmcp_output))
        .await
        .map_err(std::io::Error::other);
    let result = match running {
        Ok(running) => running
            .waiting()
            .await
            .map(|_| ())
            .map_err(std::io::Error::other),
        Err(e) => Err(e),
    };
    // The lane ends with the input (after its calls are answered); rmcp's output ends when
    // rmcp has stopped.
    let _ = lane.await;
    let _ = forward.await;
    result
}

/// Writes rmcp's output to the client, a whole line at a time.
async fn forward_rmcp<W: AsyncWrite + Unpin>(
    from_rmcp: tokio::io::DuplexStream,
    output: Output<W>,
) {
    let mut lines = BufReader::new(from_rmcp);
    let mut line = Vec::new();
    loop {
        line.clear();
        match lines.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if write_line(&output, &line).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Reads the client's input: calls the lane takes run in tasks of their own, every other
/// line goes to rmcp. At the end of the input, waits for the lane's calls, then ends rmcp's
/// input.
async fn read_input<S, R, W>(
    surface: S,
    input: R,
    mut to_rmcp: tokio::io::DuplexStream,
    output: Output<W>,
) where
    S: Surface,
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut input = BufReader::with_capacity(64 << 10, input);
    let mut handshake = Handshake::None;
    let mut calls = JoinSet::new();
    let mut line = Vec::new();
    'input: loop {
        line.clear();
        // A line longer than the lane looks at goes to rmcp as it comes, scanned.
        let mut long: Option<scan::Scan> = None;
        loop {
            let (used, complete) = match input.fill_buf().await {
                Ok(available) if !available.is_empty() => {
                    let (part, complete) = match available.iter().position(|&b| b == b'\n') {
                        Some(end) => (&available[..=end], true),
                        None => (available, false),
                    };
                    line.extend_from_slice(part);
                    (part.len(), complete)
                }
                // The end of the input: a last line without `\n` is rmcp's (incomplete).
                _ => {
                    let _ = to_rmcp.write_all(&line).await;
                    break 'input;
                }
            };
            input.consume(used);
            if long.is_some() || line.len() > LANE_LINE_MAX {
                long.get_or_insert_with(scan::Scan::default).feed(&line);
                if to_rmcp.write_all(&line).await.is_err() {
                    break 'input;
                }
                line.clear();
            }
            if complete {
                break;
            }
        }
        if let Some(scan) = long {
            if let Some(refused) = refused_long(&scan)
                && write_line(&output, &refused.line()).await.is_err()
            {
                break;
            }
            continue;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        match classify(text, &mut handshake) {
            Line::Call(call) => {
                #[cfg(test)]
                tests::LANE_CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let (surface, output) = (surface.clone(), Arc::clone(&output));
                calls.spawn(async move {
                    let actor = surface.options().stdio_actor.clone();
                    let result =
                        tool_call(&surface, actor, call.name, call.arguments, call.meta).await;
                    let _ = write_line(&output, &answer_line(call.id, result)).await;
                });
                // Forget the calls that have ended.
                while calls.try_join_next().is_some() {}
            }
            Line::Refused(refused) => {
                if write_line(&output, &refused.line()).await.is_err() {
                    break;
                }
            }
            Line::Rmcp => {
                if let Some(refused) = admit(text) {
                    if write_line(&output, &refused.line()).await.is_err() {
                        break;
                    }
                } else if to_rmcp.write_all(&line).await.is_err() {
                    break;
                }
            }
        }
    }
    while calls.join_next().await.is_some() {}
    let _ = to_rmcp.shutdown().await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Calls the lane has taken (in this test process).
    pub(super) static LANE_CALLS: std::sync::atomic::AtomicUsize =
        std::sync::atomic::AtomicUsize::new(0);

    fn line(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).unwrap()
    }

    fn initialized() -> Handshake {
        let mut h = Handshake::None;
        let init = line(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}));
        assert_eq!(classify(&init, &mut h), Line::Rmcp);
        let done = line(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!(classify(&done, &mut h), Line::Rmcp);
        assert_eq!(h, Handshake::Done);
        h
    }

    #[test]
    fn calls_take_the_lane_only_after_the_handshake() {
        let call = line(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"m": 1}, "_meta": {"traceparent": "x"}}}));
        let mut h = Handshake::None;
        assert_eq!(classify(&call, &mut h), Line::Rmcp);
        let mut h = initialized();
        let Line::Call(c) = classify(&call, &mut h) else {
            panic!("not a lane call");
        };
        assert_eq!(c.id, RequestId::Number(7));
        assert_eq!(c.name, "echo");
        assert_eq!(Value::Object(c.arguments), json!({"m": 1}));
        assert_eq!(Value::Object(c.meta), json!({"traceparent": "x"}));
        // A string id, no arguments.
        let call = line(json!({"jsonrpc": "2.0", "id": "a", "method": "tools/call",
            "params": {"name": "echo"}}));
        assert!(matches!(
            classify(&call, &mut h),
            Line::Call(Call {
                id: RequestId::String(_),
                ..
            })
        ));
    }

    #[test]
    fn what_the_lane_does_not_know_is_rmcps() {
        let mut h = initialized();
        for odd in [
            // Not JSON, not JSON-RPC 2.0, no id, a null id.
            json!("tools/call"),
            json!({"jsonrpc": "1.0", "id": 1, "method": "tools/call", "params": {"name": "e"}}),
            json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "e"}}),
            json!({"jsonrpc": "2.0", "id": null, "method": "tools/call", "params": {"name": "e"}}),
            // Arguments that are not an object, a name that is not a string, no params.
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "e", "arguments": [1]}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 5}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}),
            // A part the lane does not know (a task-augmented call), a revision in `_meta`.
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "e", "task": {}}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "e",
                "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ] {
            assert_eq!(classify(&line(odd.clone()), &mut h), Line::Rmcp, "{odd}");
        }
        // Not JSON: answered by the lane.
        assert!(matches!(
            classify(b"{\"tools/call\"", &mut h),
            Line::Refused(_)
        ));
    }

    /// The same call through the lane and through rmcp (a `_meta` that names the session's
    /// revision sends it to rmcp) answers the same; a line longer than the lane reads goes to
    /// rmcp and is answered too; the end of the input ends the service.
    #[test]
    fn the_lane_answers_as_rmcp_does() {
        use tokio::io::AsyncWriteExt;
        with_served(async |write, lines| {
            let mut ask = async |msg: Value| -> Option<Value> {
                let mut line = serde_json::to_vec(&msg).unwrap();
                line.push(b'\n');
                write.write_all(&line).await.unwrap();
                msg.get("id")?;
                let answer = lines.next_line().await.unwrap().unwrap();
                Some(serde_json::from_str(&answer).unwrap())
            };
            ask(
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}}),
            )
            .await
            .unwrap();
            ask(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
            let call = |id: u64, meta: Value, text: &str| {
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                    "name": "text__slugify", "arguments": {"text": text}, "_meta": meta}})
            };
            let receipt_less = |mut v: Value| {
                v["id"] = json!(0);
                v["result"]["_meta"]
                    .as_object_mut()
                    .unwrap()
                    .remove("receiptId")
                    .unwrap();
                v
            };
            let taken = || LANE_CALLS.load(std::sync::atomic::Ordering::Relaxed);
            let lane = ask(call(2, json!({}), "Hello Lane")).await.unwrap();
            assert_eq!(taken(), 1);
            let revision = json!({"io.modelcontextprotocol/protocolVersion": "2025-11-25"});
            let rmcp = ask(call(3, revision, "Hello Lane")).await.unwrap();
            assert_eq!(taken(), 1);
            assert_eq!(
                lane["result"]["structuredContent"]["slug"], "hello-lane",
                "{lane}"
            );
            assert_eq!(receipt_less(lane), receipt_less(rmcp));
            // A text longer than the lane reads: rmcp's.
            let long = "a".repeat(LANE_LINE_MAX + 10);
            let answer = ask(call(4, json!({}), &long)).await.unwrap();
            assert_eq!(answer["id"], 4);
            assert_eq!(
                answer["result"]["structuredContent"]["slug"]
                    .as_str()
                    .map(str::len),
                Some(long.len())
            );
            assert_eq!(taken(), 1);
        });
    }

    /// Serves a fresh server over an in-memory pipe; `drive` gets the client's ends.
    fn with_served<F>(drive: F)
    where
        F: AsyncFnOnce(
            &mut tokio::io::WriteHalf<tokio::io::DuplexStream>,
            &mut tokio::io::Lines<
                tokio::io::BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>,
            >,
        ),
    {
        let home = tempfile::tempdir().unwrap();
        let host = capability_host::Host::open(capability_host::HostConfig {
            home: Some(home.path().to_path_buf()),
            storage: capability_host::Storage::Memory,
            ..Default::default()
        })
        .unwrap();
        let options = crate::ServeOptions {
            expose: vec!["text/slugify".into()],
            ..Default::default()
        };
        let server = crate::McpServer::new(Arc::new(host), options);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let (client, server_io) = tokio::io::duplex(1 << 20);
            let (input, output) = tokio::io::split(server_io);
            let handler = crate::handler::Handler {
                surface: server,
                transport: crate::handler::Transport::Stdio,
            };
            let serving = tokio::spawn(serve(handler, input, output));
            let (read, mut write) = tokio::io::split(client);
            let mut lines = tokio::io::BufReader::new(read).lines();
            drive(&mut write, &mut lines).await;
            drop(write);
            drop(lines);
            serving.await.unwrap().unwrap();
        });
    }

    /// Every line that rmcp would drop (not JSON; nested deeper than serde_json reads, in a
    /// line the lane holds or in one too long for it; longer than rmcp reads) or answer
    /// without the request's id (malformed params) is answered, to the id when it can be
    /// read; the session goes on.
    #[test]
    fn every_refused_line_is_answered() {
        use tokio::io::AsyncWriteExt;
        with_served(async |write, lines| {
            let mut send = async |text: &str| {
                write.write_all(text.as_bytes()).await.unwrap();
                write.write_all(b"\n").await.unwrap();
            };
            send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#).await;
            send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
            let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
            let call = |id: &str, arguments: &str| {
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"text__slugify","arguments":{arguments}}}}}"#
                )
            };
            // Too deep, in the lane's reach: the id before and after the nesting.
            send(&call("2", &format!(r#"{{"a":{}}}"#, deep(200)))).await;
            send(&format!(r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"x","arguments":{{"a":{}}}}},"id":"late"}}"#, deep(130))).await;
            // Not JSON; a deep notification; malformed params of a known method.
            send("this is not json").await;
            send(&format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{}}}"#,
                deep(300)
            ))
            .await;
            send(r#"{"jsonrpc":"2.0","id":5,"method":"tools/list","params":7}"#).await;
            // Too deep in a line too long for the lane; longer than rmcp reads.
            let pad = "x".repeat(LANE_LINE_MAX);
            send(&format!(
                r#"{{"jsonrpc":"2.0","id":6,"method":"ping","params":{{"p":"{pad}","d":{}}}}}"#,
                deep(150)
            ))
            .await;
            let huge = "x".repeat(RMCP_LINE_MAX);
            send(&format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"ping","params":{{"p":"{huge}"}}}}"#
            ))
            .await;
            // And the session goes on.
            // (Through rmcp: a call in the lane would count in `LANE_CALLS`, which another
            // test reads.)
            send(r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"text__slugify","arguments":{"text":"Still Here"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}"#).await;
            let mut answers = std::collections::BTreeMap::new();
            let mut nulls = Vec::new();
            while answers.len() < 7 || nulls.len() < 2 {
                let line =
                    tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
                        .await
                        .unwrap_or_else(|_| panic!("no answer; so far {answers:?} {nulls:?}"))
                        .unwrap()
                        .unwrap();
                let answer: Value = serde_json::from_str(&line).unwrap();
                match &answer["id"] {
                    Value::Null => nulls.push(answer),
                    id => {
                        answers.insert(id.to_string(), answer);
                    }
                }
            }
            let code = |id: &str| answers[id]["error"]["code"].clone();
            assert!(answers["1"]["result"].is_object(), "{}", answers["1"]);
            assert_eq!(code("2"), json!(-32700), "{}", answers["2"]);
            assert!(
                answers["2"]["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("128 levels")
            );
            assert_eq!(code("\"late\""), json!(-32700));
            assert_eq!(code("5"), json!(-32600), "{}", answers["5"]);
            assert_eq!(code("6"), json!(-32700), "{}", answers["6"]);
            assert_eq!(code("7"), json!(-32600), "{}", answers["7"]);
            assert_eq!(
                answers["8"]["result"]["structuredContent"]["slug"],
                "still-here"
            );
            for null in &nulls {
                assert_eq!(null.get("id"), Some(&Value::Null), "{null}");
                assert_eq!(null["error"]["code"], -32700, "{null}");
            }
        });
    }

    #[test]
    fn answers_are_written_as_rmcp_writes_them_to_a_legacy_peer() {
        let result: rmcp::model::CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "[1]"}],
            "structuredContent": [1],
        }))
        .unwrap();
        let written: Value =
            serde_json::from_slice(&answer_line(RequestId::Number(3), Ok(result))).unwrap();
        // No `resultType`; a structured value that is not an object is dropped (the text
        // block already carries it).
        assert_eq!(
            written,
            json!({"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": "[1]"}]}})
        );
        let error = ErrorData::internal_error("boom", None);
        let written: Value =
            serde_json::from_slice(&answer_line(RequestId::Number(4), Err(error))).unwrap();
        assert_eq!(written["error"]["message"], "boom");
        assert_eq!(written["id"], 4);
    }
}
