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
