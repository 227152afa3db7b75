//! Sandboxed children (`ProcessSandbox::spawn_child`): a long-lived python program answering
//! requests over its pipes tries to read host files outside its grants, to write outside its
//! `/tmp`, to reach a listener on the host's loopback and to start a process; every attempt
//! fails and the test checks on the host that nothing happened. Granted, the same requests
//! work. Killing (or dropping) the child leaves no process behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use capability_test_support::process::processes_with;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use capability_sandbox::{ChildExit, ChildSpec, Grants, ProcessSandbox, SandboxedChild};
use serde_json::{Value, json};

const PROGRAM: &str = r#"
import errno, json, os, socket, subprocess, sys

def failure(e):
    return "error:" + errno.errorcode.get(e.errno or 0, type(e).__name__)

for line in sys.stdin:
    req = json.loads(line)
    op = req["op"]
    try:
        if op == "read":
            with open(req["path"]) as f:
                out = "read:" + f.read()
        elif op == "write":
            with open(req["path"], "w") as f:
                f.write(req["text"])
            out = "wrote"
        elif op == "connect":
            s = socket.create_connection(("127.0.0.1", req["port"]), timeout=5)
            s.sendall(b"hello")
            s.close()
            out = "connected"
        elif op == "spawn":
            out = "spawned:%d" % subprocess.run(["/bin/true"]).returncode
        elif op == "pid":
            out = "pid:%d" % os.getpid()
        elif op == "exit":
            sys.exit(req["code"])
        else:
            out = "unknown"
    except OSError as e:
        out = failure(e)
    print(json.dumps(out), flush=True)
"#;

/// A scratch directory outside `/tmp` (the sandbox's `/tmp` is private, which would hide a
/// host file there anyway): the program's own directory, and a sibling with a secret.
struct Dirs {
    _root: tempfile::TempDir,
    code: PathBuf,
    secret: PathBuf,
    out: PathBuf,
}

fn dirs() -> Dirs {
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let code = root.path().join("server");
    let out = root.path().join("out");
    std::fs::create_dir_all(&code).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(code.join("server.py"), PROGRAM).unwrap();
    let secret = root.path().join("secret.txt");
    std::fs::write(&secret, "the host's secret").unwrap();
    // A root host runs the guest as nobody: let it read and write what it is granted.
    for p in [root.path(), &code, &out] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    }
    Dirs {
        _root: root,
        code,
        secret,
        out,
    }
}

fn spawn(dirs: &Dirs, grants: Grants) -> SandboxedChild {
    let script = dirs.code.join("server.py");
    let mut spec = ChildSpec::command(
        "python3",
        &[script.to_str().unwrap().to_string()],
        vec![(
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or_default(),
        )],
    )
    .unwrap();
    assert!(
        spec.code
            .iter()
            .any(|c| c == &dirs.code.canonicalize().unwrap()),
        "{:?}",
        spec.code
    );
    spec.grants = grants;
    ProcessSandbox::global().spawn_child(&spec).unwrap()
}

struct Client {
    child: SandboxedChild,
    lines: BufReader<std::fs::File>,
}

impl Client {
    fn new(mut child: SandboxedChild) -> Client {
        let lines = BufReader::new(child.stdout.take().unwrap());
        Client { child, lines }
    }

    fn ask(&mut self, req: Value) -> String {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(format!("{req}\n").as_bytes()).unwrap();
        let mut line = String::new();
        self.lines.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line)
            .unwrap_or_else(|e| panic!("{e}: {line:?}"))
            .as_str()
            .unwrap()
            .to_string()
    }
}

fn no_connection(listener: &TcpListener) {
    listener.set_nonblocking(true).unwrap();
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the listener saw a connection: {other:?}"),
    }
}

#[test]
fn an_ungranted_child_cannot_read_write_connect_or_spawn() {
    let d = dirs();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut c = Client::new(spawn(&d, Grants::none()));
    assert_eq!(c.child.boundary().network, "none");
    assert!(!c.child.boundary().process_spawn);
    // Its own code is readable; the secret beside it, the repository and the capability home
    // are not there at all.
    let own = c.ask(json!({"op": "read", "path": d.code.join("server.py")}));
    assert!(own.starts_with("read:"), "{own}");
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let home = capability_sandbox::default_capability_home();
    for path in [d.secret.clone(), manifest_dir, home.join("capability.db")] {
        let got = c.ask(json!({"op": "read", "path": path}));
        assert!(
            matches!(got.as_str(), "error:ENOENT" | "error:EACCES"),
            "{}: {got}",
            path.display()
        );
    }
    // Writes: its private /tmp only.
    for path in [d.out.join("planted"), d.code.join("planted")] {
        let got = c.ask(json!({"op": "write", "path": path, "text": "x"}));
        assert!(
            matches!(
                got.as_str(),
                "error:ENOENT" | "error:EROFS" | "error:EACCES"
            ),
            "{}: {got}",
            path.display()
        );
        assert!(!path.exists(), "{} was written", path.display());
    }
    assert_eq!(
        c.ask(json!({"op": "write", "path": "/tmp/inside", "text": "x"})),
        "wrote"
    );
    let got = c.ask(json!({"op": "connect", "port": port}));
    assert!(
        matches!(
            got.as_str(),
            "error:EACCES" | "error:EPERM" | "error:ENETUNREACH" | "error:ECONNREFUSED"
        ),
        "{got}"
    );
    no_connection(&listener);
    let got = c.ask(json!({"op": "spawn"}));
    assert!(
        matches!(
            got.as_str(),
            "error:EPERM" | "error:EACCES" | "error:ENOSYS"
        ),
        "{got}"
    );
    drop(c);
}

#[test]
fn granted_effects_open_exactly_their_paths_and_the_network() {
    let d = dirs();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let granted = d.code.parent().unwrap().join("granted.txt");
    std::fs::write(&granted, "shared").unwrap();
    let grants = Grants::none()
        .effect("network.connect")
        .read(&granted)
        .write(&d.out);
    let mut c = Client::new(spawn(&d, grants));
    assert_eq!(c.child.boundary().network, "host");
    assert_eq!(c.ask(json!({"op": "read", "path": granted})), "read:shared");
    let secret = c.ask(json!({"op": "read", "path": d.secret}));
    assert!(secret.starts_with("error:"), "{secret}");
    let out = d.out.join("result");
    assert_eq!(
        c.ask(json!({"op": "write", "path": out, "text": "written inside"})),
        "wrote"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "written inside");
    assert_eq!(c.ask(json!({"op": "connect", "port": port})), "connected");
    let (mut conn, _) = listener.accept().unwrap();
    let mut got = String::new();
    std::io::Read::read_to_string(&mut conn, &mut got).unwrap();
    assert_eq!(got, "hello");
}

fn gone(marker: &str) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if processes_with(marker).is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn a_killed_or_dropped_child_leaves_no_process_and_reports_its_end() {
    let d = dirs();
    let marker = d.code.join("server.py").canonicalize().unwrap();
    let marker = marker.to_str().unwrap();
    let mut c = Client::new(spawn(&d, Grants::none()));
    assert!(c.ask(json!({"op": "pid"})).starts_with("pid:"));
    assert_eq!(processes_with(marker).len(), 1);
    assert_eq!(c.child.try_wait(), None);
    c.child.kill();
    assert_eq!(c.child.wait(), ChildExit::Killed);
    assert!(gone(marker));

    let mut c = Client::new(spawn(&d, Grants::none()));
    assert!(c.ask(json!({"op": "pid"})).starts_with("pid:"));
    drop(c);
    assert!(gone(marker));

    // A program that exits on its own reports its status.
    let mut c = Client::new(spawn(&d, Grants::none()));
    let stdin = c.child.stdin.as_mut().unwrap();
    stdin
        .write_all(b"{\"op\": \"exit\", \"code\": 3}\n")
        .unwrap();
    assert_eq!(c.child.wait(), ChildExit::Exited(3));
    let mut rest = String::new();
    c.lines.read_line(&mut rest).unwrap();
    assert_eq!(rest, "", "stdout ends with the program");
}

#[test]
fn the_code_of_a_command_is_its_script_package_or_node_modules_tree() {
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = root.path().canonicalize().unwrap();
    let pkg = root.join("proj/node_modules/@scope/server");
    std::fs::create_dir_all(pkg.join("dist")).unwrap();
    std::fs::write(pkg.join("package.json"), "{}").unwrap();
    std::fs::write(pkg.join("dist/index.js"), "").unwrap();
    let plain = root.join("plain");
    std::fs::create_dir_all(plain.join("lib")).unwrap();
    std::fs::write(plain.join("pyproject.toml"), "").unwrap();
    std::fs::write(plain.join("lib/server.py"), "").unwrap();
    std::fs::write(root.join("loose.py"), "").unwrap();
    let spec = |arg: &Path| {
        ChildSpec::command("sh", &["-x".into(), arg.to_str().unwrap().into()], vec![]).unwrap()
    };
    // Given with `..`: passed canonical; the outermost node_modules holds its dependencies.
    let s = spec(&pkg.join("dist/../dist/index.js"));
    assert_eq!(s.args[1], pkg.join("dist/index.js").to_str().unwrap());
    assert_eq!(s.code, vec![root.join("proj/node_modules")]);
    assert!(s.program.is_absolute() && s.program.ends_with("sh"));
    assert_eq!(spec(&plain.join("lib/server.py")).code, vec![plain.clone()]);
    assert_eq!(spec(&root.join("loose.py")).code, vec![root.clone()]);
    assert!(ChildSpec::command("no-such-program-here", &[], vec![]).is_err());
}

#[test]
fn a_program_the_sandbox_does_not_show_fails_to_start_and_says_why() {
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let bin = root.path().join("true");
    std::fs::copy("/bin/true", &bin).unwrap();
    let mut spec = ChildSpec::command(bin.to_str().unwrap(), &[], vec![]).unwrap();
    assert_eq!(spec.code, vec![root.path().canonicalize().unwrap()]);
    spec.code.clear();
    let child = ProcessSandbox::global().spawn_child(&spec).unwrap();
    match child.wait() {
        ChildExit::SetupFailed { stage, .. } => assert_eq!(stage, "execve"),
        other => panic!("{other:?}"),
    }
    // Shown, it runs and exits 0.
    let spec = ChildSpec::command(bin.to_str().unwrap(), &[], vec![]).unwrap();
    let child = ProcessSandbox::global().spawn_child(&spec).unwrap();
    assert_eq!(child.wait(), ChildExit::Exited(0));
}
