//! Loopback HTTP for tests: a listener on 127.0.0.1 served on a thread of its own
//! ([`on_loopback`]), a server that answers with an axum router ([`spawn`]) or from a route
//! table the test fills ([`Server`]), a free port
//! ([`free_port`]), the address a server child announces ([`announced_url`]), and a raw
//! HTTP/1.1 client ([`http`], [`set_cookies`]) that shows what a server wrote, byte for byte.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::Digest as _;

/// Runs `serve` with a listener on 127.0.0.1 (a free port), on a thread of its own with a
/// runtime of one worker, until the test process ends (or `serve` returns). The address.
pub fn on_loopback<F, Fut>(serve: F) -> SocketAddr
where
    F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            serve(listener).await;
        });
    });
    rx.recv().unwrap()
}

/// Serves `app` on 127.0.0.1 (a free port) from a thread of its own with a runtime of one
/// worker; runs until the test process ends. Its address.
pub fn spawn(app: axum::Router) -> SocketAddr {
    on_loopback(move |listener| async move {
        axum::serve(listener, app).await.unwrap();
    })
}

/// A port on 127.0.0.1 that was free a moment ago (for a child that must be told its port).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A raw HTTP/1.1 request to `addr` (`host:port`) with `Connection: close`; returns the
/// status, the response head and the body (chunked bodies are not decoded).
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

/// The values of the `Set-Cookie` headers of a response head, as `name=value`.
pub fn set_cookies(head: &str) -> Vec<String> {
    head.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("set-cookie")
                .then(|| v.trim().split(';').next().unwrap_or_default().to_string())
        })
        .collect()
}

/// The `http://` URL that `child` (started with its stderr piped) prints on stderr once it
/// listens (`... listening on http://127.0.0.1:<port>/...`); its stderr is drained from then
/// on, so that it never blocks on it. Panics if the child exits first.
pub fn announced_url(child: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let stderr = child.stderr.take().unwrap();
    let mut lines = std::io::BufReader::new(stderr).lines();
    let url = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("the server exited before it listened"))
            .unwrap();
        if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
            break url.to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    url
}

/// The `host:port` of an `http://host:port/...` URL.
pub fn authority(url: &str) -> String {
    let rest = url.trim_start_matches("http://");
    rest.split('/').next().unwrap_or(rest).to_string()
}

type Routes = Arc<Mutex<HashMap<String, (u16, Vec<u8>)>>>;

/// A loopback server answering from a route table (404 elsewhere); `/hang` never answers.
/// A 200 answer has an entity tag (its body's digest), and a matching `If-None-Match` gets
/// 304. It counts the requests it answers and can be stopped.
pub struct Server {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    routes: Routes,
    hits: Arc<AtomicUsize>,
    not_modified: Arc<AtomicUsize>,
    stopped: Arc<AtomicBool>,
}

impl Server {
    /// Listens on a free loopback port, with no route.
    pub fn start() -> Server {
        let routes: Routes = Arc::default();
        let hits: Arc<AtomicUsize> = Arc::default();
        let not_modified: Arc<AtomicUsize> = Arc::default();
        let stopped: Arc<AtomicBool> = Arc::default();
        let (shared, counted, stop) =
            (Arc::clone(&routes), Arc::clone(&hits), Arc::clone(&stopped));
        let unchanged = Arc::clone(&not_modified);
        let addr = on_loopback(move |listener| async move {
            let app = axum::Router::new().fallback(
                move |uri: axum::http::Uri, request: axum::http::HeaderMap| {
                    let routes = Arc::clone(&shared);
                    let unchanged = Arc::clone(&unchanged);
                    counted.fetch_add(1, Ordering::SeqCst);
                    async move {
                        let path = uri.path().to_string();
                        if path == "/hang" || path.starts_with("/hang/") {
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                        }
                        // A route with a query string answers that query only.
                        let found = {
                            let routes = routes.lock().unwrap();
                            uri.path_and_query()
                                .and_then(|pq| routes.get(pq.as_str()))
                                .or_else(|| routes.get(&path))
                                .cloned()
                        };
                        // A 3xx route's body is its Location.
                        let (status, body) = found.unwrap_or((404, b"{}".to_vec()));
                        let location = (300..400)
                            .contains(&status)
                            .then(|| String::from_utf8_lossy(&body).to_string());
                        // A 200 route has an entity tag (its body's digest) and answers a
                        // matching If-None-Match with 304 and no body.
                        let etag = (status == 200)
                            .then(|| format!("\"{:x}\"", sha2::Sha256::digest(&body)));
                        let matched = etag.as_deref().is_some_and(|e| {
                            request.get("if-none-match").and_then(|v| v.to_str().ok()) == Some(e)
                        });
                        let (status, body) = if matched {
                            unchanged.fetch_add(1, Ordering::SeqCst);
                            (304, Vec::new())
                        } else {
                            (status, body)
                        };
                        let mut response = axum::http::Response::new(axum::body::Body::from(body));
                        *response.status_mut() = axum::http::StatusCode::from_u16(status).unwrap();
                        if let Some(e) = etag {
                            response
                                .headers_mut()
                                .insert(axum::http::header::ETAG, e.parse().unwrap());
                        }
                        if let Some(l) = location {
                            response
                                .headers_mut()
                                .insert(axum::http::header::LOCATION, l.parse().unwrap());
                        }
                        response
                    }
                },
            );
            let stopping = async move {
                while !stop.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            };
            tokio::select! {
                r = axum::serve(listener, app) => r.unwrap(),
                () = stopping => {}
            }
        });
        Server {
            base: format!("http://{addr}"),
            routes,
            hits,
            not_modified,
            stopped,
        }
    }

    /// Stops listening (connections are then refused).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let addr = self.base.trim_start_matches("http://").to_string();
        let started = Instant::now();
        while std::net::TcpStream::connect(&addr).is_ok() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the server did not stop"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Requests answered so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// Requests answered 304 Not Modified.
    pub fn not_modified(&self) -> usize {
        self.not_modified.load(Ordering::SeqCst)
    }

    /// Answers `path` (with a query string: that query only) with `status` and `body` (a
    /// 3xx body is its `Location`); its URL.
    pub fn put(&self, path: &str, status: u16, body: impl Into<Vec<u8>>) -> String {
        self.routes
            .lock()
            .unwrap()
            .insert(path.to_string(), (status, body.into()));
        format!("{}{path}", self.base)
    }

    /// Answers `path` with `doc`; its URL.
    pub fn json(&self, path: &str, doc: &Value) -> String {
        self.put(path, 200, serde_json::to_vec(doc).unwrap())
    }
}
