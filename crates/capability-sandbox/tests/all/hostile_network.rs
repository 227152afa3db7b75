//! Network: without `network.connect` the guest has its own empty network namespace and may
//! not even open an internet socket (EACCES). A TCP listener and a DNS responder on the host's
//! loopback see nothing; granted, the same capabilities reach them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Read as _;
use std::net::{TcpListener, UdpSocket};
use std::time::Duration;

use crate::common::{ALL, Package, guest_error, limits, ok_output};
use capability_sandbox::Grants;
use serde_json::json;

#[test]
fn connecting_to_a_host_listener_fails_and_the_listener_sees_nothing() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    for lang in ALL {
        let pkg = Package::new(lang);
        let out = pkg.run(
            json!({"action": "connect", "host": "127.0.0.1", "port": port}),
            &Grants::none(),
            &limits(),
        );
        let (code, message) = guest_error(&out);
        assert!(
            matches!(
                code.as_str(),
                "ENETUNREACH" | "ECONNREFUSED" | "EACCES" | "EPERM"
            ),
            "{lang:?}: {code} {message}"
        );
        assert_eq!(out.boundary.network, "none");
        assert!(out.boundary.namespaces.contains(&"net"));
    }
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the listener saw a connection: {other:?}"),
    }
}

#[test]
fn granted_network_connect_reaches_the_listener() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepter = std::thread::spawn(move || {
        let mut got = Vec::new();
        for _ in 0..3 {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut buf = String::new();
            s.read_to_string(&mut buf).unwrap();
            got.push(buf);
        }
        got
    });
    let grants = Grants::none().effect("network.connect");
    for lang in ALL {
        let pkg = Package::new(lang);
        let out = pkg.run(
            json!({"action": "connect", "host": "127.0.0.1", "port": port}),
            &grants,
            &limits(),
        );
        assert_eq!(ok_output(&out)["connected"], true, "{lang:?}");
        assert_eq!(out.boundary.network, "host");
        assert!(!out.boundary.namespaces.contains(&"net"));
    }
    assert_eq!(accepter.join().unwrap(), vec!["hello"; 3]);
}

/// Answers DNS queries for any name with 127.0.0.2; counts the queries it saw.
fn dns_responder(socket: UdpSocket, answers: usize) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        socket
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut seen = 0;
        let mut buf = [0u8; 512];
        while seen < answers {
            let Ok((n, from)) = socket.recv_from(&mut buf) else {
                break;
            };
            seen += 1;
            // The header and the question only (a resolver may add an EDNS record).
            let mut end = 12;
            while end < n && buf[end] != 0 {
                end += 1 + buf[end] as usize;
            }
            let mut reply = buf[..(end + 5).min(n)].to_vec();
            reply[2] = 0x81; // response, recursion desired
            reply[3] = 0x80; // recursion available, no error
            reply[7] = 1; // one answer
            reply[10] = 0; // no additional records
            reply[11] = 0;
            reply.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 2]);
            socket.send_to(&reply, from).unwrap();
        }
        seen
    })
}

#[test]
fn resolving_a_name_fails_without_network_and_works_with_it() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    socket.set_nonblocking(true).unwrap();
    for lang in ALL {
        let pkg = Package::new(lang);
        let out = pkg.run(
            json!({"action": "resolve", "name": "capability.test", "port": port}),
            &Grants::none(),
            &limits(),
        );
        let (code, message) = guest_error(&out);
        assert!(
            matches!(
                code.as_str(),
                "EACCES"
                    | "EPERM"
                    | "ENETUNREACH"
                    | "ECONNREFUSED"
                    | "ETIMEDOUT"
                    | "EAGAIN"
                    | "timeout"
                    | "TimeoutError"
            ),
            "{lang:?}: {code} {message}"
        );
    }
    let mut buf = [0u8; 512];
    match socket.recv_from(&mut buf) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the DNS responder saw a query: {other:?}"),
    }
    socket.set_nonblocking(false).unwrap();
    let responder = dns_responder(socket, 3);
    let grants = Grants::none().effect("network.connect");
    for lang in ALL {
        let pkg = Package::new(lang);
        let out = pkg.run(
            json!({"action": "resolve", "name": "capability.test", "port": port}),
            &grants,
            &limits(),
        );
        assert_eq!(ok_output(&out)["address"], "127.0.0.2", "{lang:?}");
    }
    assert_eq!(responder.join().unwrap(), 3);
}
