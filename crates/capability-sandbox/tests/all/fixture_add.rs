//! The reference package fixture: a node module exporting an `add` capability whose manifest
//! equals its inert descriptor.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use capability_sandbox::{Grants, Invocation, Limits, ModuleSpec, run_module};
use serde_json::json;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/add-package")
}

fn spec() -> ModuleSpec {
    let root = fixture();
    let pkg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("package.json")).unwrap()).unwrap();
    let export = &pkg["capability"]["exports"]["fixtures/add"];
    ModuleSpec::from_export(root, "fixtures/add", export).unwrap()
}

#[test]
fn add_returns_42_inside_the_sandbox() {
    let spec = spec();
    assert!(
        spec.integrity.is_some(),
        "the fixture pins its module integrity"
    );
    let out = run_module(
        &spec,
        &Invocation::execute(json!({"a": 20, "b": 22})),
        &Grants::none(),
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(out.result.unwrap(), json!({"result": 42}));
    assert_eq!(out.boundary.kind, "process-sandbox");
    assert_eq!(out.boundary.runner, "node");
    assert_eq!(out.boundary.network, "none");
}

/// The run records the version of the node that ran the module, as that node reported it.
#[test]
fn the_boundary_names_the_node_version_that_ran_inside() {
    let out = run_module(
        &spec(),
        &Invocation::execute(json!({"a": 1, "b": 2})),
        &Grants::none(),
        &Limits::default(),
    )
    .unwrap();
    let node = capability_sandbox::ProcessSandbox::global().node().unwrap();
    let version = std::process::Command::new(&node.path)
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8(version.stdout).unwrap();
    assert_eq!(
        out.boundary.program,
        format!("node {} ({})", version.trim(), node.path.display())
    );
}

/// Locating node and running a module never starts node outside the sandbox: a `node` that
/// records each start in a host directory the sandbox cannot write is never seen to start.
#[test]
fn the_run_path_starts_no_unsandboxed_node() {
    use std::os::unix::fs::PermissionsExt as _;
    let real = capability_sandbox::ProcessSandbox::global()
        .node()
        .unwrap()
        .path
        .clone();
    let marks = tempfile::tempdir().unwrap();
    let prefix = tempfile::tempdir().unwrap();
    std::fs::create_dir(prefix.path().join("bin")).unwrap();
    let fake = prefix.path().join("bin/node");
    let log = marks.path().join("started");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The fake really records starts when the host runs it.
    let probe = std::process::Command::new(&fake)
        .arg("--version")
        .output()
        .unwrap();
    assert!(probe.status.success());
    assert!(std::fs::read_to_string(&log).unwrap().contains("--version"));
    std::fs::remove_file(&log).unwrap();

    let sandbox = capability_sandbox::ProcessSandbox::new(capability_sandbox::SandboxConfig {
        node: Some(fake.clone()),
        ..Default::default()
    });
    assert_eq!(sandbox.node().unwrap().path, fake);
    // Inside, the wrapper may or may not get to start node; either way nothing ran outside.
    let out = sandbox.run(
        &spec(),
        &Invocation::execute(json!({"a": 1, "b": 2})),
        &Grants::none(),
        &Limits::default(),
    );
    assert_eq!(sandbox.starts(), 1, "{out:?}");
    assert!(
        !log.exists(),
        "node was started outside the sandbox: {:?}",
        std::fs::read_to_string(&log)
    );
}
