//! Helpers shared by the `cap` integration tests: run the binary with a capability home and
//! read its JSON output.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Runs `cap` with `CAP_HOME` set to `home`.
pub fn cap(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cap"))
        .env("CAP_HOME", home)
        .args(args)
        .output()
        .unwrap()
}

/// Runs `cap` with `CAP_HOME` set to `home` and its trusted TLS roots taken from `ca_file`
/// alone (`SSL_CERT_FILE`), or from the system when `None`.
pub fn cap_with_roots(home: &Path, ca_file: Option<&Path>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cap"));
    command.env("CAP_HOME", home).env_remove("SSL_CERT_DIR");
    match ca_file {
        Some(file) => command.env("SSL_CERT_FILE", file),
        None => command.env_remove("SSL_CERT_FILE"),
    };
    command.args(args).output().unwrap()
}

/// The JSON `cap` printed (a record, which may hold accepted values a few levels down), or a
/// panic showing stdout and stderr.
pub fn stdout_json(out: &Output) -> Value {
    capability_core::json::parse_record(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {} / {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A vector file from `testdata/vectors/`.
pub fn vectors(name: &str) -> Value {
    let path = format!(
        "{}/../../testdata/vectors/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    capability_core::json::parse(&std::fs::read(path).unwrap()).unwrap()
}

/// The reference's add fixture package.
pub fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/add-package/package.json")
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

/// `cap serve` on a free loopback port with `args`; the child (killed when dropped) and its
/// `host:port`.
pub fn serve(home: &Path, args: &[&str]) -> (Served, String) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_cap"))
        .env("CAP_HOME", home)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = std::io::BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("cap serve exited"))
            .unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (Served(child), addr)
}

/// A `cap serve` child, killed when dropped.
pub struct Served(std::process::Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
