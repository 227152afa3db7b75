//! Grants mean what they say, no more: reading a directory is not connecting to the unix
//! sockets in it; socket families no grant calls for are refused; connecting is not
//! listening; without `process.spawn` no new program image starts (not through the dynamic
//! loader, not from a memfd); files from grants are data, never code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Read as _;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{
    ALL, Lang, Outcome, Package, chmod, guest_error, limits, ok_output, world_readable_tempdir,
};
use capability_sandbox::{Grants, SandboxError};
use serde_json::{Value, json};

const MARK: &str = "PWNED-new-program-ran-5c2e";

fn ldso() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "/lib/ld-linux-aarch64.so.1"
    } else {
        "/lib64/ld-linux-x86-64.so.2"
    }
}

fn libm() -> PathBuf {
    let arch = if cfg!(target_arch = "aarch64") {
        "aarch64-linux-gnu"
    } else {
        "x86_64-linux-gnu"
    };
    [
        format!("/usr/lib/{arch}/libm.so.6"),
        format!("/lib/{arch}/libm.so.6"),
        "/usr/lib64/libm.so.6".to_string(),
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .expect("libm.so.6")
}

/// A guest error with one of `codes`, and nothing in the result or stderr shows `MARK`.
fn assert_refused(out: &Outcome, what: &str, codes: &[&str]) -> String {
    let text = format!("{:?} {}", out.result, out.stderr);
    assert!(!text.contains(MARK), "{what}: a new program ran: {text}");
    let (code, message) = guest_error(out);
    assert!(
        codes.contains(&code.as_str()),
        "{what}: expected one of {codes:?}, got {code}: {message}"
    );
    message
}

fn run(lang: Lang, input: Value, grants: &Grants) -> Outcome {
    Package::new(lang).run(input, grants, &limits())
}

#[test]
fn reading_a_directory_does_not_connect_to_its_unix_sockets() {
    let dir = world_readable_tempdir();
    let stream_path = dir.path().join("daemon.sock");
    let listener = UnixListener::bind(&stream_path).unwrap();
    listener.set_nonblocking(true).unwrap();
    chmod(&stream_path, 0o777);
    let dgram_path = dir.path().join("log.sock");
    let dgram = UnixDatagram::bind(&dgram_path).unwrap();
    dgram.set_nonblocking(true).unwrap();
    chmod(&dgram_path, 0o777);
    let read = Grants::none().read(dir.path());
    for lang in ALL {
        let out = run(
            lang,
            json!({"action": "unix-connect", "path": stream_path}),
            &read,
        );
        assert_refused(
            &out,
            &format!("{lang:?} stream connect"),
            &["EACCES", "EPERM"],
        );
    }
    for lang in [Lang::Py, Lang::Native] {
        let out = run(
            lang,
            json!({"action": "unix-dgram", "path": dgram_path}),
            &read,
        );
        assert_refused(&out, &format!("{lang:?} datagram"), &["EACCES", "EPERM"]);
    }
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the host socket saw a connection: {other:?}"),
    }
    let mut buf = [0u8; 64];
    match dgram.recv(&mut buf) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the host socket got a datagram: {other:?}"),
    }
    // A local socket pair inside the sandbox still works without any grant.
    let out = run(
        Lang::Native,
        json!({"action": "unix-pair"}),
        &Grants::none(),
    );
    assert_eq!(ok_output(&out)["echo"], "pair");
    // network.connect is the effect that opens sockets: then the same capability connects.
    listener.set_nonblocking(false).unwrap();
    let accepter = std::thread::spawn(move || {
        let mut got = Vec::new();
        for _ in 0..3 {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut text = String::new();
            s.read_to_string(&mut text).unwrap();
            got.push(text);
        }
        got
    });
    let connect = Grants::none().read(dir.path()).effect("network.connect");
    for lang in ALL {
        let out = run(
            lang,
            json!({"action": "unix-connect", "path": stream_path}),
            &connect,
        );
        assert_eq!(ok_output(&out)["connected"], true, "{lang:?}");
    }
    assert_eq!(accepter.join().unwrap(), vec!["hello"; 3]);
}

#[test]
fn socket_families_no_grant_calls_for_are_refused() {
    // (name, family, type, protocol)
    let exotic: [(&str, i32, i32, i32); 10] = [
        ("AF_VSOCK", libc::AF_VSOCK, libc::SOCK_STREAM, 0),
        ("AF_PACKET", libc::AF_PACKET, libc::SOCK_RAW, 0),
        ("AF_XDP", libc::AF_XDP, libc::SOCK_RAW, 0),
        (
            "NETLINK_KOBJECT_UEVENT",
            libc::AF_NETLINK,
            libc::SOCK_DGRAM,
            libc::NETLINK_KOBJECT_UEVENT,
        ),
        (
            "NETLINK_SOCK_DIAG",
            libc::AF_NETLINK,
            libc::SOCK_DGRAM,
            libc::NETLINK_SOCK_DIAG,
        ),
        ("AF_BLUETOOTH", libc::AF_BLUETOOTH, libc::SOCK_RAW, 0),
        ("AF_ALG", libc::AF_ALG, libc::SOCK_SEQPACKET, 0),
        ("AF_KEY", libc::AF_KEY, libc::SOCK_RAW, 2),
        ("AF_CAN", libc::AF_CAN, libc::SOCK_RAW, 1),
        ("AF_TIPC", libc::AF_TIPC, libc::SOCK_SEQPACKET, 0),
    ];
    for grants in [Grants::none(), Grants::none().effect("network.connect")] {
        for lang in [Lang::Py, Lang::Native] {
            let pkg = Package::new(lang);
            for (name, family, ty, proto) in exotic {
                let out = pkg.run(
                    json!({"action": "socket", "family": family, "type": ty, "proto": proto}),
                    &grants,
                    &limits(),
                );
                // EACCES is the sandbox's answer; a kernel without the family would say
                // EAFNOSUPPORT, a missing capability EPERM.
                let (code, message) = guest_error(&out);
                assert_eq!(code, "EACCES", "{lang:?} {name}: {message}");
            }
            // What the C library needs (routing netlink) stays.
            let out = pkg.run(
                json!({"action": "socket", "family": libc::AF_NETLINK, "type": libc::SOCK_RAW, "proto": 0}),
                &grants,
                &limits(),
            );
            assert_eq!(ok_output(&out)["opened"], true, "{lang:?} NETLINK_ROUTE");
            // Internet and unix sockets exactly when network.connect is granted.
            for family in [libc::AF_INET, libc::AF_INET6, libc::AF_UNIX] {
                let out = pkg.run(
                    json!({"action": "socket", "family": family, "type": libc::SOCK_STREAM}),
                    &grants,
                    &limits(),
                );
                if grants.network() {
                    assert_eq!(ok_output(&out)["opened"], true, "{lang:?} {family}");
                } else {
                    assert_eq!(guest_error(&out).0, "EACCES", "{lang:?} {family}");
                }
            }
        }
    }
}

#[test]
fn connecting_is_not_listening() {
    let grants = Grants::none().effect("network.connect");
    // A port that is free now: the guest tries to listen on it, then on any port.
    let port = capability_test_support::http::free_port();
    for lang in ALL {
        for p in [port, 0] {
            let out = run(lang, json!({"action": "listen", "port": p}), &grants);
            let message = assert_refused(&out, &format!("{lang:?} listen {p}"), &["EACCES"]);
            assert!(
                message.contains("bind") || message.contains("listen"),
                "{lang:?}: {message}"
            );
        }
    }
    // listen(2) on an unbound socket binds an ephemeral port by itself: refused too.
    let out = run(
        Lang::Native,
        json!({"action": "listen", "arg": "unbound"}),
        &grants,
    );
    let message = assert_refused(&out, "listen without bind", &["EACCES"]);
    assert!(message.starts_with("listen"), "{message}");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn connecting_is_not_binding() {
    let grants = Grants::none().effect("network.connect");
    // Ports that are free now, for each family and protocol; the guest binds them without
    // listening (a UDP socket bound to a port receives from anyone: a server).
    let udp4 = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp6 = std::net::UdpSocket::bind("[::1]:0").unwrap();
    let tcp6 = std::net::TcpListener::bind("[::1]:0").unwrap();
    let ports = [
        ("udp4", udp4.local_addr().unwrap().port()),
        ("udp6", udp6.local_addr().unwrap().port()),
        ("tcp6", tcp6.local_addr().unwrap().port()),
        ("tcp4", udp4.local_addr().unwrap().port()),
    ];
    drop((udp4, udp6, tcp6));
    for lang in ALL {
        for (kind, port) in ports {
            for p in [port, 0] {
                let out = run(
                    lang,
                    json!({"action": "bind", "arg": kind, "port": p}),
                    &grants,
                );
                let message =
                    assert_refused(&out, &format!("{lang:?} {kind} bind {p}"), &["EACCES"]);
                if lang == Lang::Native {
                    assert!(message.starts_with("bind"), "{kind}: {message}");
                }
            }
        }
    }
    // Nothing was left bound: the host can still take every one of the ports.
    for (kind, port) in ports {
        match kind {
            "udp4" => drop(std::net::UdpSocket::bind(("127.0.0.1", port)).unwrap()),
            "udp6" => drop(std::net::UdpSocket::bind(("::1", port)).unwrap()),
            "tcp6" => drop(std::net::TcpListener::bind(("::1", port)).unwrap()),
            _ => drop(std::net::TcpListener::bind(("127.0.0.1", port)).unwrap()),
        }
    }
    // Connecting still works over UDP: python's and native's sendto bind no port themselves
    // (the kernel picks one for the reply), as the DNS test in hostile_network.rs shows.
}

#[test]
fn no_new_program_image_without_process_spawn() {
    let probes = [
        (
            "the dynamic loader",
            json!({"action": "exec", "path": ldso(), "data": "/usr/bin/echo", "arg": MARK}),
        ),
        (
            "a memfd copy",
            json!({"action": "exec-memfd", "path": "/usr/bin/echo", "arg": MARK}),
        ),
        (
            "a system program",
            json!({"action": "exec", "path": "/usr/bin/echo", "arg": MARK}),
        ),
        (
            "the loader on the runner's own interpreter",
            json!({"action": "exec", "path": ldso(), "data": "--list", "arg": "/usr/bin/echo"}),
        ),
    ];
    for lang in [Lang::Py, Lang::Native] {
        let pkg = Package::new(lang);
        for (what, probe) in &probes {
            let out = pkg.run(probe.clone(), &Grants::none(), &limits());
            assert_refused(
                &out,
                &format!("{lang:?} via {what}"),
                &["ENOSYS", "EPERM", "EACCES"],
            );
            assert!(!out.boundary.process_spawn);
        }
    }
    // A seccomp listener of the guest's own, approving its own execve, is refused.
    let out = run(
        Lang::Native,
        json!({"action": "exec-notify", "path": ldso(), "data": "/usr/bin/echo", "arg": MARK}),
        &Grants::none(),
    );
    let message = assert_refused(&out, "a guest listener", &["EPERM", "ENOSYS"]);
    assert!(
        message.starts_with("seccomp") || message.starts_with("execve"),
        "{message}"
    );
}

#[test]
fn with_process_spawn_programs_come_only_from_system_paths() {
    let dir = world_readable_tempdir();
    let copy = dir.path().join("echo-copy");
    std::fs::copy("/usr/bin/echo", &copy).unwrap();
    chmod(&copy, 0o755);
    let grants = Grants::none().effect("process.spawn").read(dir.path());
    for lang in ALL {
        let pkg = Package::new(lang);
        // The real program runs.
        let out = pkg.run(
            json!({"action": "exec-child", "path": "/usr/bin/echo", "arg": MARK}),
            &grants,
            &limits(),
        );
        assert_eq!(ok_output(&out)["status"], 0, "{lang:?}");
        assert!(ok_output(&out)["stdout"].as_str().unwrap().contains(MARK));
        // Its copy in a granted directory does not: neither directly nor through the loader,
        // which would have to map it executable.
        for (what, probe) in [
            (
                "directly",
                json!({"action": "exec-child", "path": copy, "arg": MARK}),
            ),
            (
                "through the loader",
                json!({"action": "exec-child", "path": ldso(), "data": copy, "arg": MARK}),
            ),
        ] {
            let out = pkg.run(probe, &grants, &limits());
            let o = ok_output(&out);
            assert_ne!(o["status"], 0, "{lang:?} {what}: {o}");
            assert!(
                !o["stdout"].as_str().unwrap().contains(MARK),
                "{lang:?} {what}: {o}"
            );
        }
    }
    // A memfd copy is not executable either.
    for lang in [Lang::Py, Lang::Native] {
        let out = run(
            lang,
            json!({"action": "exec-memfd", "path": "/usr/bin/echo", "arg": MARK, "data": "child"}),
            &grants,
        );
        let o = ok_output(&out);
        assert_ne!(o["status"], 0, "{lang:?} memfd: {o}");
        assert!(
            !o["stdout"].as_str().unwrap().contains(MARK),
            "{lang:?}: {o}"
        );
    }
}

#[test]
fn files_from_grants_are_never_mapped_as_code() {
    let dir = world_readable_tempdir();
    let lib = dir.path().join("libcopy.so");
    std::fs::copy(libm(), &lib).unwrap();
    chmod(&lib, 0o755);
    let writable = world_readable_tempdir();
    chmod(writable.path(), 0o777);
    let wlib = writable.path().join("libcopy.so");
    std::fs::copy(libm(), &wlib).unwrap();
    chmod(&wlib, 0o755);
    for lang in [Lang::Py, Lang::Native] {
        let pkg = Package::new(lang);
        for (path, grants) in [
            (&lib, Grants::none().read(dir.path())),
            (&wlib, Grants::none().write(writable.path())),
            (
                &lib,
                Grants::none().read(dir.path()).effect("process.spawn"),
            ),
        ] {
            let out = pkg.run(
                json!({"action": "dlopen", "path": path}),
                &grants,
                &limits(),
            );
            match &out.result {
                Err(SandboxError::Guest(g)) => assert!(
                    g.message.contains("failed to map segment")
                        || g.message.contains("Operation not permitted"),
                    "{lang:?} {}: {g:?}",
                    path.display()
                ),
                other => panic!("{lang:?} {}: loaded as code: {other:?}", path.display()),
            }
        }
        // The system's own copy loads: libraries still work.
        let out = pkg.run(
            json!({"action": "dlopen", "path": libm()}),
            &Grants::none(),
            &limits(),
        );
        assert_eq!(ok_output(&out)["loaded"], true, "{lang:?}");
    }
    assert!(Path::new(&lib).exists());
}
