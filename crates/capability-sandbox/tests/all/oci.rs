//! The OCI executor: argument construction with the reference's hardening, digest pinning,
//! and engine detection (against fake CLIs: this machine has the docker CLI but no engine).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{Lang, Package};
use capability_sandbox::{
    Grants, Limits, OciEngine, OciExecutor, OciImages, ProcessLimits, SandboxError,
    check_pinned_image, docker_args, probe_engine,
};

const IMAGE: &str = "node@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn pos(args: &[String], needle: &str) -> usize {
    args.iter()
        .position(|a| a == needle)
        .unwrap_or_else(|| panic!("{needle} missing from {args:?}"))
}

#[test]
fn arguments_carry_the_reference_hardening() {
    let pkg = Package::new(Lang::Js);
    let limits = Limits {
        memory_bytes: 256 << 20,
        tmp_bytes: 64 << 20,
        boundary: ProcessLimits {
            max_pids: 64,
            ..ProcessLimits::default()
        },
        ..Limits::default()
    };
    let run = docker_args(
        &pkg.spec,
        IMAGE,
        &Grants::none(),
        &limits,
        "capability-test-1",
    )
    .unwrap();
    let a = &run.args;
    assert_eq!(&a[..3], ["run", "--rm", "-i"]);
    for flag in [
        "--network=none",
        "--read-only",
        "--cap-drop=ALL",
        "--security-opt=no-new-privileges:true",
        "--pids-limit=64",
        "--memory=268435456",
        "--cpus=1",
        "--user=65534:65534",
        "--name=capability-test-1",
        "--log-driver=none",
        "--ulimit=nofile=256:256",
        "--ulimit=core=0:0",
    ] {
        pos(a, flag);
    }
    // podman replaces all its default ulimits once one is given: nproc is always explicit.
    assert!(a.iter().any(|x| x.starts_with("--ulimit=nproc=")), "{a:?}");
    // podman-only flags stay out of the docker dialect.
    assert!(
        !a.iter().any(|x| x.starts_with("--read-only-tmpfs")),
        "{a:?}"
    );
    let tmpfs = pos(a, "--tmpfs");
    assert_eq!(a[tmpfs + 1], "/tmp:rw,nosuid,nodev,noexec,size=67108864");
    let v = pos(a, "-v");
    let root = pkg.dir.path().canonicalize().unwrap();
    assert_eq!(a[v + 1], format!("{}:/workspace:ro", root.display()));
    // The image comes after every option, then the runner.
    let image = pos(a, IMAGE);
    assert!(image > tmpfs && image > v);
    assert_eq!(a[image + 1], "node");
    assert_eq!(a.last().unwrap(), "/workspace/hostile.mjs");
    assert!(run.uses_shim);
    // No environment without environment.read.
    assert!(!a[..image].iter().any(|x| x == "-e"));
}

#[test]
fn grants_open_network_mounts_and_environment() {
    let pkg = Package::new(Lang::Py);
    let data = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let grants = Grants::none()
        .effect("network.connect")
        .read(data.path())
        .write(out.path())
        .env_var("MODE", "fast");
    let image = IMAGE.replace("node@", "python@");
    let run = docker_args(&pkg.spec, &image, &grants, &Limits::default(), "c").unwrap();
    let a = &run.args;
    pos(a, "--network=bridge");
    let d = data.path().canonicalize().unwrap().display().to_string();
    let o = out.path().canonicalize().unwrap().display().to_string();
    pos(a, &format!("{d}:{d}:ro"));
    pos(a, &format!("{o}:{o}:rw"));
    // The variable is named on the command line; its value travels in the engine's
    // environment, never in an argv another user could read.
    assert_eq!(a[pos(a, "MODE") - 1], "-e");
    assert!(!a.iter().any(|x| x.contains("fast")), "{a:?}");
    assert_eq!(run.env, [("MODE".to_string(), "fast".to_string())]);
    assert_eq!(a[pos(a, &image) + 1], "python3");
    // Paths listed without their effect are not mounted.
    let mut no_effect = Grants::none();
    no_effect.read_paths.push(data.path().into());
    let run = docker_args(&pkg.spec, &image, &no_effect, &Limits::default(), "c").unwrap();
    assert!(!run.args.iter().any(|x| x.contains(&d)));
}

#[test]
fn images_must_be_pinned_by_digest() {
    for bad in [
        "node:24-alpine",
        "node",
        "node@sha256:abc",
        "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "node@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
        "node:latest@sha512:0123",
    ] {
        assert!(
            matches!(check_pinned_image(bad), Err(SandboxError::Invalid { .. })),
            "{bad}"
        );
    }
    check_pinned_image(IMAGE).unwrap();
    check_pinned_image(&format!("registry.example/lib/node:24{}", &IMAGE[4..])).unwrap();
    let pkg = Package::new(Lang::Native);
    let e = docker_args(
        &pkg.spec,
        "alpine:3",
        &Grants::none(),
        &Limits::default(),
        "c",
    )
    .unwrap_err();
    assert!(e.to_string().contains("not pinned by digest"), "{e}");
}

fn fake_cli(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
fn engine_detection_needs_an_answering_engine() {
    let dir = tempfile::tempdir().unwrap();
    let answering = fake_cli(
        dir.path(),
        "docker-ok",
        r#"[ "$1 $2 $3" = "version --format {{.Server.Platform.Name}}|{{.Server.Version}}" ] && echo 'Docker Engine - Community|27.1.0' || exit 2"#,
    );
    assert_eq!(
        probe_engine(&answering, Duration::from_secs(5)).unwrap(),
        OciEngine {
            program: answering.clone(),
            server_version: "27.1.0".into(),
            name: "docker",
        }
    );
    // A CLI without a daemon fails; a hanging one is cut off by the timeout.
    let no_daemon = fake_cli(
        dir.path(),
        "docker-down",
        "echo 'Cannot connect to the Docker daemon' >&2; exit 1",
    );
    let reason = probe_engine(&no_daemon, Duration::from_secs(5))
        .unwrap_err()
        .to_string();
    assert!(
        reason.contains("failed (exit status: 1): Cannot connect to the Docker daemon"),
        "{reason}"
    );
    // podman installed as `docker` (podman-docker) has no platform: asked again as podman.
    let podman_docker = fake_cli(
        dir.path(),
        "docker",
        r#"case "$1 $3" in
  'version {{.Server.Platform.Name}}|{{.Server.Version}}') echo 'Error: template: version:1:11: executing "version" at <.Platform.Name>: can'"'"'t evaluate field Platform in type *define.Version' >&2; exit 125 ;;
  'version {{.Server.Version}}') echo 4.3.1 ;;
  *) exit 2 ;;
esac"#,
    );
    let engine = probe_engine(&podman_docker, Duration::from_secs(5)).unwrap();
    assert_eq!(
        (engine.name, engine.server_version.as_str()),
        ("podman", "4.3.1")
    );
    let hanging = fake_cli(dir.path(), "docker-hang", "exec sleep 30");
    let started = Instant::now();
    assert!(probe_engine(&hanging, Duration::from_millis(500)).is_err());
    assert!(started.elapsed() < Duration::from_secs(5));
    // The real CLI on this machine, if any, answers only when an engine is really there.
    if let Some(docker) = ["/usr/bin/docker", "/usr/local/bin/docker"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
    {
        let engine_socket = Path::new("/var/run/docker.sock").exists();
        let probed = probe_engine(docker, Duration::from_secs(5));
        if !engine_socket {
            assert!(
                probed.is_err(),
                "docker answered without an engine socket: {probed:?}"
            );
        }
    }
}

#[test]
fn executor_without_an_image_for_the_kind_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let cli = fake_cli(dir.path(), "docker", "exit 1");
    let exec = OciExecutor {
        engine: OciEngine {
            program: cli,
            server_version: "0".into(),
            name: "docker",
        },
        images: OciImages::default(),
    };
    let pkg = Package::new(Lang::Js);
    let e = exec
        .run(
            &pkg.spec,
            &capability_sandbox::Invocation::execute(serde_json::json!({})),
            &Grants::none(),
            &Limits::default(),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            SandboxError::Unavailable {
                boundary: "oci",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn a_package_the_container_user_cannot_read_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    // A CLI that would fail the test if it were ever asked to run anything.
    let cli = fake_cli(dir.path(), "podman", "echo ran >&2; exit 99");
    let exec = OciExecutor {
        engine: OciEngine {
            program: cli,
            server_version: "4.3.1".into(),
            name: "podman",
        },
        images: OciImages {
            native: Some(format!("localhost/guest{}", &IMAGE[4..])),
            ..OciImages::default()
        },
    };
    let pkg = Package::new(Lang::Native);
    // A private package directory: uid 65534 cannot even look inside.
    std::fs::set_permissions(pkg.dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let e = exec
        .run(
            &pkg.spec,
            &capability_sandbox::Invocation::execute(serde_json::json!({})),
            &Grants::none(),
            &Limits::default(),
        )
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, SandboxError::Invalid { .. })
            && msg.contains("mode 700")
            && msg.contains("container user 65534:65534")
            && msg.contains("chmod -R o+rX"),
        "{msg}"
    );
}

// ---------------------------------------------------------------------------------------------
// Against a real engine: podman (+ runc, with CONTAINERS_CONF=.ci/containers.conf on the CI VM).
// ---------------------------------------------------------------------------------------------

use std::net::{TcpListener, UdpSocket};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use capability_core::authorization::EffectPolicy;
use capability_core::receipt::ReceiptStatus;
use capability_runtime::capability::{Capability, ModuleSource};
use capability_runtime::{CapabilityRuntime, ExecuteOptions};
use capability_sandbox::{
    ENGINE_PROBE_TIMEOUT, ExecutorChoice, Invocation, ModuleExecutor, probe_cli,
};
use serde_json::{Value, json};

/// Set (by `.ci/run`) where podman must work: a missing or broken engine then fails the tests
/// instead of skipping them.
const REQUIRE_ENV: &str = "CAPABILITY_TEST_REQUIRE_OCI";
const MARKER: &str = "from-the-scratch-image";

/// The locally built image, pinned by digest.
struct Fixture {
    podman: std::path::PathBuf,
    image: String,
    digest: String,
    /// The static guest executable.
    guest: Vec<u8>,
}

/// Why podman cannot be used here, printed (the same words `cap doctor` uses), or a panic when
/// `CAPABILITY_TEST_REQUIRE_OCI` is set.
fn skip(why: String) -> Option<&'static Fixture> {
    assert!(
        std::env::var_os(REQUIRE_ENV).is_none(),
        "{REQUIRE_ENV} is set but the OCI engine cannot run: {why}"
    );
    eprintln!("skipping: the OCI engine cannot run here: {why}");
    None
}

fn run_ok(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Probes podman, compiles the guest statically and builds `FROM scratch` image around it,
/// once per test binary; `None` (after saying why) when podman cannot run.
fn fixture() -> Option<&'static Fixture> {
    static FIXTURE: OnceLock<Result<Fixture, String>> = OnceLock::new();
    let built = FIXTURE.get_or_init(|| {
        let engine = probe_cli("podman", None, ENGINE_PROBE_TIMEOUT).map_err(|e| e.to_string())?;
        let dir = std::env::temp_dir().join(format!("capability-oci-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cc = run_ok(
            Command::new("gcc")
                .args(["-static", "-O1", "-Wall", "-o"])
                .arg(dir.join("guest"))
                .arg(common::fixtures().join("oci/guest.c")),
        );
        cc.unwrap_or_else(|e| panic!("gcc -static is required for the OCI tests: {e}"));
        let guest = std::fs::read(dir.join("guest")).unwrap();
        std::fs::write(dir.join("marker"), MARKER).unwrap();
        std::fs::write(
            dir.join("Containerfile"),
            "FROM scratch\nCOPY guest /guest\nCOPY marker /marker\n",
        )
        .unwrap();
        // A fixed timestamp makes the build reproducible: rebuilding reuses the same image.
        let tag = "localhost/capability-test/oci-guest:1";
        let built = run_ok(
            Command::new(&engine.program)
                .args(["build", "-q", "--timestamp", "0", "-t", tag])
                .arg(&dir),
        );
        let _ = std::fs::remove_dir_all(&dir);
        built?;
        let digest = run_ok(Command::new(&engine.program).args([
            "image",
            "inspect",
            "--format",
            "{{.Digest}}",
            tag,
        ]))?;
        Ok(Fixture {
            podman: engine.program,
            image: format!("localhost/capability-test/oci-guest@{digest}"),
            digest,
            guest,
        })
    });
    match built {
        Ok(f) => Some(f),
        Err(why) => skip(why.clone()),
    }
}

/// The guest as a package any user can read (the container runs as 65534).
fn guest_package(f: &Fixture, id: &str, effects: &[&str]) -> (tempfile::TempDir, Value) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let guest = dir.path().join("guest");
    std::fs::write(&guest, &f.guest).unwrap();
    std::fs::set_permissions(&guest, std::fs::Permissions::from_mode(0o755)).unwrap();
    let manifest = json!({
        "specVersion": "0.1", "id": id, "version": "1.0.0", "name": "OCI guest",
        "description": "A static native capability run in a scratch image.", "effects": effects,
    });
    (dir, manifest)
}

fn oci_limits() -> Limits<ProcessLimits> {
    Limits {
        timeout: Duration::from_secs(60),
        memory_bytes: 128 << 20,
        tmp_bytes: 4 << 20,
        boundary: ProcessLimits {
            max_pids: 32,
            max_open_files: 128,
            max_file_size: 1 << 20,
            ..ProcessLimits::default()
        },
        ..Limits::default()
    }
}

/// A runtime whose executor is `--executor oci` with the native image; `None` when the
/// engine detected is not podman (then the image is not there).
fn oci_runtime(
    f: &Fixture,
    dir: &tempfile::TempDir,
    manifest: &Value,
    image: &str,
) -> Option<CapabilityRuntime> {
    let images = OciImages {
        native: Some(image.to_string()),
        ..OciImages::default()
    };
    match capability_sandbox::OciExecutor::detect(images.clone()) {
        Err(e) => {
            skip(e.to_string());
            return None;
        }
        Ok(exec) if exec.engine.name != "podman" => {
            skip(format!(
                "{} answers first (set CAPABILITY_OCI_ENGINE={})",
                exec.engine.program.display(),
                f.podman.display()
            ));
            return None;
        }
        Ok(_) => {}
    }
    let executor = ModuleExecutor::new(ExecutorChoice::Oci)
        .with_limits(oci_limits())
        .with_oci(images);
    let rt = CapabilityRuntime::builder()
        .policy(EffectPolicy::permissive())
        .executor(Arc::new(executor))
        .build();
    let source = ModuleSource {
        package_root: dir.path().to_path_buf(),
        module: "./guest".into(),
        integrity: None,
    };
    rt.register(Capability::module(manifest, source).unwrap())
        .unwrap();
    Some(rt)
}

#[test]
fn podman_runs_a_module_in_a_scratch_image_pinned_by_digest() {
    let Some(f) = fixture() else { return };
    assert!(
        f.digest.starts_with("sha256:") && f.digest.len() == 71,
        "{}",
        f.digest
    );
    check_pinned_image(&f.image).unwrap();
    let (dir, manifest) = guest_package(f, "oci/guest", &[]);
    let Some(rt) = oci_runtime(f, &dir, &manifest, &f.image) else {
        return;
    };

    // The envelope arrives intact on stdin and the reply comes back on stdout.
    let r = rt
        .invoke(
            "oci/guest",
            json!({"action": "echo", "n": 42}),
            &ExecuteOptions::approved(),
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(r.status, ReceiptStatus::Succeeded, "{r:?}");
    let request = &r.output.as_ref().unwrap()["request"];
    assert_eq!(request["op"], "execute");
    assert_eq!(request["input"], json!({"action": "echo", "n": 42}));
    assert_eq!(request["manifest"]["id"], "oci/guest");
    assert_eq!(request["effects"], json!([]));

    // The receipt names the boundary, the engine, the pinned image and the limits.
    let iso = r.isolation.as_ref().unwrap();
    assert_eq!(iso["kind"], "oci", "{iso}");
    assert_eq!(iso["runner"], "native");
    assert_eq!(iso["network"], "none");
    let program = iso["program"].as_str().unwrap();
    assert!(program.starts_with("podman "), "{program}");
    assert!(
        program.ends_with(&format!("image {}", f.image)),
        "{program}"
    );
    assert!(program.contains(&f.digest), "{program}");
    let limit = |name: &str| {
        iso["limits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {iso}"))
            .clone()
    };
    for (name, value) in [
        ("maxPids", 32),
        ("memoryBytes", 128 << 20),
        ("maxOpenFiles", 128),
        ("maxFileSize", 1 << 20),
        ("tmpSize", 4 << 20),
        ("wallTimeoutMs", 60_000),
    ] {
        let l = limit(name);
        assert_eq!(l["value"], value, "{l}");
        assert_eq!(l["enforced"], true, "{l}");
    }
    assert_eq!(limit("maxPids")["mechanism"], "podman");

    // Inside: the image's filesystem, the unprivileged user, a read-only root and package, a
    // writable /tmp, and the rlimits that were asked for.
    let r = rt
        .invoke(
            "oci/guest",
            json!({"action": "inspect"}),
            &ExecuteOptions::approved(),
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(
        r.output.as_ref().unwrap(),
        &json!({
            "uid": 65534, "gid": 65534, "marker": MARKER,
            "root": "EROFS", "workspace": "EROFS", "tmp": "ok",
            "nofile": 128, "nproc": r.output.as_ref().unwrap()["nproc"], "fsize": 1 << 20,
        })
    );
}

/// The host's address on its default route (not loopback), where a listener on 0.0.0.0 can
/// be reached from a container with a network; loopback when there is no route.
fn host_address() -> String {
    UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("10.255.255.255:9").map(|_| s))
        .and_then(|s| s.local_addr())
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into())
}

#[test]
fn the_guest_reaches_no_network_without_network_connect() {
    let Some(f) = fixture() else { return };
    let (dir, manifest) = guest_package(f, "oci/offline", &[]);
    let Some(rt) = oci_runtime(f, &dir, &manifest, &f.image) else {
        return;
    };
    let listener = TcpListener::bind("0.0.0.0:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let host = host_address();
    let err = rt
        .invoke(
            "oci/offline",
            json!({"action": "connect", "host": host, "port": port}),
            &ExecuteOptions::approved(),
        )
        .unwrap_err();
    let r = rt
        .get_receipt(err.receipt_id.as_ref().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(r.status, ReceiptStatus::Failed);
    let e = r.error.as_ref().unwrap();
    assert!(
        [
            "Network is unreachable",
            "No route to host",
            "Connection refused"
        ]
        .iter()
        .any(|c| e.message.contains(c)),
        "{e:?}"
    );
    let iso = r.isolation.as_ref().unwrap();
    assert_eq!(
        (&iso["kind"], &iso["network"]),
        (&json!("oci"), &json!("none"))
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        listener.accept().is_err(),
        "the host listener saw a connection"
    );
}

#[test]
fn network_connect_opens_a_bridge_to_the_host() {
    let Some(f) = fixture() else { return };
    let host = host_address();
    if host.starts_with("127.") {
        eprintln!("skipping: this host has no address besides loopback");
        return;
    }
    let (dir, manifest) = guest_package(f, "oci/online", &["network.connect"]);
    let Some(rt) = oci_runtime(f, &dir, &manifest, &f.image) else {
        return;
    };
    let listener = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accept = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut got = String::new();
        std::io::Read::read_to_string(&mut s, &mut got).unwrap();
        got
    });
    let r = rt
        .invoke(
            "oci/online",
            json!({"action": "connect", "host": host, "port": port}),
            &ExecuteOptions::approved(),
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(r.output.as_ref().unwrap(), &json!({"connected": true}));
    assert_eq!(r.isolation.as_ref().unwrap()["network"], "bridge");
    assert_eq!(accept.join().unwrap(), "hello");
}

#[test]
fn an_image_not_pinned_by_digest_is_refused_before_any_container_starts() {
    let Some(f) = fixture() else { return };
    let (dir, manifest) = guest_package(f, "oci/unpinned", &[]);
    // The tag exists locally and would run: it is refused because a tag can move.
    let Some(rt) = oci_runtime(f, &dir, &manifest, "localhost/capability-test/oci-guest:1") else {
        return;
    };
    let err = rt
        .invoke(
            "oci/unpinned",
            json!({"action": "echo"}),
            &ExecuteOptions::approved(),
        )
        .unwrap_err();
    assert!(err.message.contains("is not pinned by digest"), "{err:?}");

    // A digest that is not the image's is not run either: the engine finds no such image.
    let wrong = format!(
        "localhost/capability-test/oci-guest@sha256:{}",
        "0".repeat(64)
    );
    let exec = capability_sandbox::OciExecutor {
        engine: capability_sandbox::probe_engine(&f.podman, Duration::from_secs(30)).unwrap(),
        images: OciImages {
            native: Some(wrong),
            ..OciImages::default()
        },
    };
    let pkg = capability_sandbox::ModuleSpec {
        package_root: dir.path().to_path_buf(),
        install_root: None,
        module: "./guest".into(),
        integrity: None,
        manifest,
    };
    let out = exec
        .run(
            &pkg,
            &Invocation::execute(json!({"action": "echo"})),
            &Grants::none(),
            &oci_limits(),
        )
        .unwrap();
    match &out.result {
        Err(SandboxError::Unavailable {
            boundary: "oci",
            reason,
        }) => {
            assert!(
                reason.contains("podman could not start the container"),
                "{reason}"
            )
        }
        other => panic!(
            "expected the engine to refuse, got {other:?}\n{}",
            out.stderr
        ),
    }
}
