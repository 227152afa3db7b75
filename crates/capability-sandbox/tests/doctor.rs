//! `doctor` probes the host for real; `select_boundary` never picks in-process execution.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use capability_sandbox::{
    Boundary, DoctorReport, Grants, ModuleKind, Probe, ProcessSandbox, SandboxError, doctor,
    select_boundary,
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
