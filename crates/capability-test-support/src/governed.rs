//! The governed-invoke workload: 48 `add` capabilities under 100 Cedar policies (the
//! runtime's `governed` bench, the host's `host` bench and the `governed_loop` example).

use std::sync::Arc;

use capability_core::authorization::EffectPolicy;
use capability_policy::cedar::{CedarPolicies, PolicyFile};
use capability_policy::{AuditSink, Governor, PolicyEngine};
use capability_runtime::store::ReceiptStore;
use capability_runtime::{Capability, CapabilityRuntime};
use serde_json::json;

pub const CAPABILITIES: usize = 48;

/// 100 policies: 4 global ones and 96 that each name one of 48 capabilities.
pub fn policies() -> String {
    let mut text = String::from(
        r#"@id("allow-all") permit(principal, action, resource);
@id("prod-high-risk") @reason("high risk in prod")
forbid(principal, action, resource) when { context.environment == "prod" && resource.riskLevel >= 4 };
@id("scopes") @reason("missing scope")
forbid(principal, action, resource) unless { principal.scopes.containsAll(resource.scopes) };
@id("budget") @decision("approval_required") @reason("expensive")
forbid(principal, action == Action::"model_call", resource)
when { context has estimatedCostUsd && context.estimatedCostUsd.greaterThan(decimal("5.0")) };
"#,
    );
    for i in 0..96 {
        let cap = i % CAPABILITIES;
        if i < CAPABILITIES {
            text.push_str(&format!(
                "@id(\"limit-{i}\") @reason(\"amount too large\")\nforbid(principal, action == Action::\"tool_call\", resource == Capability::\"svc/c{cap}\") when {{ context.input has a && context.input.a > {} }};\n",
                100 + i
            ));
        } else {
            text.push_str(&format!(
                "@id(\"tenant-{i}\") @reason(\"cross-tenant\")\nforbid(principal, action, resource == Capability::\"svc/c{cap}\") when {{ context.input has tenant && context.input.tenant != context.tenant }};\n"
            ));
        }
    }
    text
}

/// The `add` capability `id` (Rust hooks, in process).
pub fn add(id: &str) -> Capability {
    Capability::builder(json!({
        "specVersion": "0.1", "id": id, "version": "1.0.0", "name": "Add",
        "description": "Adds two numbers.",
        "input": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]},
        "output": {"type": "object", "properties": {"result": {"type": "number"}}, "required": ["result"]},
        "effects": ["database.read"],
        "metadata": {"governance": {"kind": "tool", "risk": "medium", "owner": "payments"}}
    }))
    .execute_json(|input, _| {
        Ok(json!({"result": input["a"].as_f64().unwrap_or(0.0) + input["b"].as_f64().unwrap_or(0.0)}))
    })
    .build()
    .unwrap()
}

/// A runtime with the 48 capabilities, the read-only effect preset, and (with `audit`) a
/// governor holding [`policies`].
pub fn runtime(
    store: Arc<dyn ReceiptStore>,
    audit: Option<Arc<dyn AuditSink>>,
) -> CapabilityRuntime {
    match audit {
        Some(audit) => governed_by(&policies(), store, audit),
        None => with_capabilities(
            CapabilityRuntime::builder()
                .policy(EffectPolicy::read_only())
                .store(store)
                .build(),
        ),
    }
}

/// A runtime with the 48 capabilities, the read-only effect preset, and a governor holding
/// the Cedar `policies` and auditing to `audit`.
pub fn governed_by(
    policies: &str,
    store: Arc<dyn ReceiptStore>,
    audit: Arc<dyn AuditSink>,
) -> CapabilityRuntime {
    let cedar = CedarPolicies::from_sources(&[PolicyFile::new("bench.cedar", policies)]).unwrap();
    let engine = PolicyEngine::new();
    engine.add_source(Arc::new(cedar));
    let governor = Governor::new("bench-agent")
        .engine(Arc::new(engine))
        .audit(audit);
    with_capabilities(
        CapabilityRuntime::builder()
            .policy(EffectPolicy::read_only())
            .store(store)
            .governor(Arc::new(governor))
            .build(),
    )
}

fn with_capabilities(rt: CapabilityRuntime) -> CapabilityRuntime {
    for i in 0..CAPABILITIES {
        rt.register(add(&format!("svc/c{i}"))).unwrap();
    }
    rt
}

/// The durable stores as the host opens them: receipts and the audit chain in one
/// `capability.db` with one writer thread, journals in `home/journal`.
pub fn durable(home: &std::path::Path) -> (Arc<dyn ReceiptStore>, Arc<dyn AuditSink>) {
    use capability_runtime::store::{Durability, SqliteReceiptStore};
    let db = Arc::new(capability_journal::Database::open(&home.join("capability.db")).unwrap());
    let journals = home.join("journal");
    let receipts =
        SqliteReceiptStore::on(Arc::clone(&db), &journals, Durability::default()).unwrap();
    let audit = capability_policy::SqliteStore::on(db, &journals).unwrap();
    (Arc::new(receipts), Arc::new(audit))
}
