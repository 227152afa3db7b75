//! `doctor` probes the host for real; `select_boundary` never picks in-process execution.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use capability_sandbox::{
    Boundary, DoctorReport, ENGINE_PROBE_TIMEOUT, EngineProbes, Grants, ModuleKind, Probe,
    ProcessSandbox, SandboxError, doctor, probe_cli, probe_engines, select_boundary,
};

#[test]
fn doctor_reports_what_this_host_offers() {
    let report = doctor(ProcessSandbox::global());
    eprintln!("{}", serde_json::to_string_pretty(&report).unwrap());
    for ns in ["user", "mount", "pid", "net", "ipc", "uts", "cgroup"] {
        assert!(report.namespaces.contains_key(ns), "{ns}");
    }
    // The full probe run works exactly when the namespaces it needs work.
    let needed = ["user", "mount", "pid", "ipc", "uts", "net"]
        .iter()
        .all(|n| report.namespaces[n].ok);
    assert_eq!(
        report.process_sandbox.ok, needed,
        "{:?}",
        report.process_sandbox
    );
    assert_eq!(
        report.boundaries.contains(&"process-sandbox"),
        report.process_sandbox.ok
    );
    assert_eq!(
        report.boundaries.contains(&"oci"),
        report.docker.ok || report.podman.ok
    );
    assert!(
        report.landlock.detail.starts_with("abi-")
            || report.landlock.detail.starts_with("unavailable")
    );
    assert_eq!(report.boundaries.last(), Some(&"wasm"));
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["namespaces"]["user"]["ok"].is_boolean());
}

fn probe(ok: bool) -> Probe {
    Probe {
        ok,
        detail: if ok { "ok".into() } else { "no".into() },
    }
}

fn synthetic(sandbox: bool, landlock: bool, oci: bool, node: bool) -> DoctorReport {
    DoctorReport {
        kernel: "test".into(),
        euid: 1000,
        namespaces: BTreeMap::new(),
        landlock: probe(landlock),
        seccomp: probe(true),
        cgroup_v2: probe(false),
        cgroup_used: "none".into(),
        node: probe(node),
        python: probe(true),
        docker: probe(oci),
        podman: probe(false),
        process_sandbox: probe(sandbox),
        boundaries: Vec::new(),
    }
}

#[test]
fn selection_prefers_the_strongest_boundary_and_never_in_process() {
    let g = Grants::none();
    let full = synthetic(true, true, true, true);
    assert_eq!(
        select_boundary(ModuleKind::Node, &g, &full, true).unwrap(),
        Boundary::ProcessSandbox
    );
    assert_eq!(
        select_boundary(ModuleKind::Wasm, &g, &full, true).unwrap(),
        Boundary::Wasm
    );
    // Without landlock, a container engine is preferred when an image is configured.
    let weak = synthetic(true, false, true, true);
    assert_eq!(
        select_boundary(ModuleKind::Python, &g, &weak, true).unwrap(),
        Boundary::Oci
    );
    assert_eq!(
        select_boundary(ModuleKind::Python, &g, &weak, false).unwrap(),
        Boundary::ProcessSandbox
    );
    // No node on the host: only a container can run node code.
    let no_node = synthetic(true, true, true, false);
    assert_eq!(
        select_boundary(ModuleKind::Node, &g, &no_node, true).unwrap(),
        Boundary::Oci
    );
    // Nothing works: refused, not run in process.
    let nothing = synthetic(false, false, false, true);
    let e = select_boundary(ModuleKind::Native, &g, &nothing, true).unwrap_err();
    assert!(matches!(e, SandboxError::Unavailable { .. }), "{e:?}");
}

/// A container CLI that never answers (as docker does when its daemon is unreachable): a shell
/// script that starts `sleep 30` and waits for it, writing the sleeper's pid to `pidfile`.
fn hanging_cli(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let pidfile = dir.join(format!("{name}.pid"));
    let p = dir.join(name);
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\nsleep 30 &\necho $! > {}\nwait\n",
            pidfile.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    pidfile
}

/// Whether `pid` is still a live (not zombie) process.
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s.rsplit_once(')').map(|(_, rest)| rest.trim_start());
            !state.is_some_and(|r| r.starts_with('Z') || r.starts_with('X'))
        })
        .unwrap_or(false)
}

#[test]
fn an_engine_cli_that_hangs_is_reported_unavailable_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let docker_pid = hanging_cli(dir.path(), "docker");
    let podman_pid = hanging_cli(dir.path(), "podman");
    let EngineProbes { docker, podman } = probe_engines(Some(dir.path().as_os_str()));
    let within = format!(
        "did not answer within {} ms",
        ENGINE_PROBE_TIMEOUT.as_millis()
    );
    for (name, probe) in [("docker", &docker), ("podman", &podman)] {
        assert!(!probe.ok, "{name}: {probe:?}");
        assert!(
            probe
                .detail
                .contains(&format!("{}/{name} version --format", dir.path().display()))
                && probe.detail.contains(&within),
            "{name}: {probe:?}"
        );
    }
    // The probe killed the CLI's whole process group, the sleeper included.
    for pidfile in [docker_pid, podman_pid] {
        // (A script killed before it wrote its pidfile started no sleeper.)
        let Ok(pid) = std::fs::read_to_string(&pidfile) else {
            continue;
        };
        let pid = pid.trim();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while alive(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(
            !alive(pid),
            "the probe left {pid} ({}) running",
            pidfile.display()
        );
    }
    // What doctor says is what the OCI executor (and the OCI tests) say.
    let _ = hanging_cli(dir.path(), "podman");
    let direct = probe_cli("podman", Some(dir.path().as_os_str()), ENGINE_PROBE_TIMEOUT);
    assert_eq!(direct.unwrap_err().to_string(), podman.detail);
    // No CLI at all.
    let empty = tempfile::tempdir().unwrap();
    let none = probe_engines(Some(empty.path().as_os_str()));
    assert_eq!(
        none.docker,
        Probe {
            ok: false,
            detail: "docker not found on PATH".into()
        }
    );
    assert_eq!(none.podman.detail, "podman not found on PATH");
}
