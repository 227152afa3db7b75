//! The OCI executor: argument construction with the reference's hardening, digest pinning,
//! and engine detection (against fake CLIs: this machine has the docker CLI but no engine).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use capability_sandbox::{
    Grants, Limits, OciEngine, OciExecutor, OciImages, SandboxError, check_pinned_image,
    docker_args, probe_engine,
};
use common::{Lang, Package};

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
        max_pids: 64,
        memory_bytes: 256 << 20,
        tmp_size: 64 << 20,
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
    ] {
        pos(a, flag);
    }
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
    pos(a, "MODE=fast");
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
        r#"[ "$1 $2 $3" = "info --format {{.ServerVersion}}" ] && echo 27.1.0 || exit 2"#,
    );
    assert_eq!(
        probe_engine(&answering, Duration::from_secs(5)).unwrap(),
        OciEngine {
            program: answering.clone(),
            server_version: "27.1.0".into()
        }
    );
    // A CLI without a daemon fails; a hanging one is cut off by the timeout.
    let no_daemon = fake_cli(
        dir.path(),
        "docker-down",
        "echo 'Cannot connect to the Docker daemon' >&2; exit 1",
    );
    assert!(probe_engine(&no_daemon, Duration::from_secs(5)).is_err());
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
