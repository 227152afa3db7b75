//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use capability_policy::audit::MemorySink;
use capability_policy::cedar::{CedarPolicies, PolicyFile};
use capability_policy::intercept::{Execution, Governor};
use capability_policy::{AgentAction, Environment, PolicyContext, PolicyEngine, Stage, Verdict};
use serde_json::Value;

/// A governor with an in-memory audit sink.
pub fn governor(agent: &str, env: Environment) -> (Governor, Arc<MemorySink>) {
    let sink = Arc::new(MemorySink::new());
    let g = Governor::new(agent)
        .environment(env)
        .audit(sink.clone() as Arc<dyn capability_policy::AuditSink>);
    (g, sink)
}

/// An engine holding the given Cedar text.
pub fn cedar_engine(name: &str, text: &str) -> Arc<PolicyEngine> {
    let engine = PolicyEngine::new();
    let cedar = CedarPolicies::from_sources(&[PolicyFile::new(name, text)]).expect("policies load");
    engine.add_source(Arc::new(cedar));
    Arc::new(engine)
}

/// An execute closure returning a fixed output.
pub fn returns(v: Value) -> impl FnOnce(&Execution<'_>) -> Result<Value, String> {
    move |_| Ok(v)
}

/// An execute closure echoing its input.
pub fn echo(e: &Execution<'_>) -> Result<Value, String> {
    Ok(e.input.clone())
}

/// The path of a file under `tests/fixtures`.
pub fn fixture_path(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// The engine's verdict on `action` at `stage` (with `output` after the call).
pub fn verdict(
    engine: &PolicyEngine,
    action: AgentAction,
    stage: Stage,
    output: Option<Value>,
) -> Verdict {
    let mut ctx = PolicyContext::new(action, stage);
    ctx.output = output;
    engine.evaluate(&ctx).unwrap()
}
