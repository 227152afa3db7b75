//! Connections that do not send a request head in time are closed
//! (`HttpLimits::header_read_timeout`): half-open ones, silent ones, ones that trickle their
//! head a byte at a time, and kept-alive ones that park half a second request. Meanwhile
//! clients get their answers, a response that takes long (an open event stream) is not cut,
//! and the gate still knows each connection's peer (it throttles failed tokens by address).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use capability_mcp::{HttpLimits, ServeOptions};
use capability_test_support::mcp::{clients_present, names, post, py_client};
use serde_json::json;

use crate::http_sessions::{INIT, bearer, open, token};
use crate::serve::{Served, host, serve};

const TIMEOUT: Duration = Duration::from_secs(1);

/// Longest a connection past its timeout may take to be closed (a loaded machine).
const GRACE: Duration = Duration::from_secs(4);

fn slow_server(dir: &std::path::Path) -> (Served, String) {
    let host = host(&dir.join("home"));
    let token = token(&host, "bot");
    let server = serve(
        host,
        ServeOptions {
            http: HttpLimits {
                header_read_timeout: TIMEOUT,
                ..HttpLimits::default()
            },
            ..ServeOptions::default()
        },
    );
    (server, token)
}

fn connect(server: &Served) -> TcpStream {
    let stream = TcpStream::connect(&server.addr).unwrap();
    stream
        .set_read_timeout(Some(TIMEOUT + GRACE + Duration::from_secs(2)))
        .unwrap();
    stream
}

/// Reads until the server closes `stream` (what it wrote before, such as a `408`, is
/// skipped); panics if it is still open after the read timeout.
fn closed_by_server(stream: &mut TcpStream, what: &str) {
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return,
            Err(e) => panic!("{what}: still open ({e})"),
        }
    }
}

#[test]
fn half_open_connections_are_closed_after_the_header_read_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (server, token) = slow_server(dir.path());
    let started = Instant::now();
    let half_open: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = connect(&server);
            s.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
                .unwrap();
            s
        })
        .collect();
    std::thread::scope(|scope| {
        let closed = scope.spawn(move || {
            for (i, mut s) in half_open.into_iter().enumerate() {
                closed_by_server(&mut s, &format!("half-open connection {i}"));
            }
            started.elapsed()
        });
        // Meanwhile clients are answered.
        let auth = bearer(&token);
        let (status, _, body) = post(&server.addr, &[("Authorization", &auth)], INIT);
        assert_eq!(status, 200, "{body}");
        if clients_present() {
            let doc = py_client(
                &["--http", &server.url, "--token", &token],
                &json!([{"op": "list"}]),
            );
            assert_eq!(names(&doc["results"][0]).len(), 13, "{doc}");
        }
        let took = closed.join().unwrap();
        assert!(took < TIMEOUT + GRACE, "closed after {took:?}");
    });
    // The peer's address still reaches the gate: failed tokens from it are throttled.
    let statuses: Vec<u16> = (0..25)
        .map(|_| post(&server.addr, &[("Authorization", "Bearer cap_bogus")], INIT).0)
        .collect();
    assert_eq!(statuses.first(), Some(&401), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
}

#[test]
fn trickling_silent_and_parked_connections_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let (server, token) = slow_server(dir.path());

    // A head trickled a byte every 100 ms: progress does not buy time.
    let mut trickle = connect(&server);
    let mut writer = trickle.try_clone().unwrap();
    let started = Instant::now();
    std::thread::spawn(move || {
        for b in b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
            if writer.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    // A connection that says nothing.
    let mut silent = connect(&server);
    closed_by_server(&mut trickle, "trickling connection");
    closed_by_server(&mut silent, "silent connection");
    let took = started.elapsed();
    assert!(took < TIMEOUT + GRACE, "closed after {took:?}");

    // A kept-alive connection: its first request is answered, then half a second one is
    // parked on it.
    let mut parked = connect(&server);
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    write!(
        parked,
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{ping}",
        server.addr,
        ping.len(),
    )
    .unwrap();
    // The answer (401, no token) has a length: read just it.
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        parked.read_exact(&mut byte).unwrap();
        answer.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 401"), "{head}");
    assert!(!head.contains("connection: close"), "{head}");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut body = vec![0u8; length];
    parked.read_exact(&mut body).unwrap();
    let answered = Instant::now();
    parked
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    closed_by_server(&mut parked, "parked second request");
    let took = answered.elapsed();
    assert!(took < TIMEOUT + GRACE, "closed after {took:?}");

    // An event stream open past the timeout is not cut.
    let session = open(&server, &token);
    let mut stream = connect(&server);
    write!(
        stream,
        "GET /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\nMcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-06-18\r\n\r\n",
        server.addr
    )
    .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut seen = Vec::new();
    let until = Instant::now() + TIMEOUT * 3;
    let mut buf = [0u8; 1024];
    while Instant::now() < until {
        match stream.read(&mut buf) {
            Ok(0) => panic!(
                "the event stream was closed: {}",
                String::from_utf8_lossy(&seen)
            ),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("{e}"),
        }
    }
    let seen = String::from_utf8_lossy(&seen);
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    assert!(seen.contains("text/event-stream"), "{seen}");
}
