//! What works on a fresh machine with no setup: the 12 built-ins as trusted in-process
//! capabilities, and an embedded default index that lists them.

use std::sync::Arc;

use capability_core::manifest::Manifest;
use capability_core::{CapabilityError, ErrorCode};
use serde_json::{Value, json};

use crate::builtins;
use crate::capability::{Capability, ExecuteHook, ExecutionContext, HookError, Hooks};

/// The package name under which the embedded index lists the built-ins.
pub const BUILTIN_PACKAGE: &str = "capability-builtins";

/// The built-in capability with that id. Its manifest is embedded (and checked by this
/// crate's tests), so it is not validated again and its schemas are compiled on first use.
pub fn builtin_capability(id: &str) -> Result<Capability, CapabilityError> {
    let not_found =
        || CapabilityError::new(ErrorCode::NotFound, format!("Capability not found: {id}"));
    let manifest = Manifest::from_value(builtins::manifest(id).ok_or_else(not_found)?)?;
    let owned_id = id.to_string();
    let execute =
        move |input: &Value, _ctx: &ExecutionContext<'_>| match builtins::execute(&owned_id, input)
        {
            Some(Ok(output)) => Ok(output),
            Some(Err(e)) => Err(HookError::named(e.name, e.message)),
            None => Err(HookError::msg(format!("Unknown built-in: {owned_id}"))),
        };
    let hooks = Hooks {
        execute: ExecuteHook::Sync(Arc::new(execute)),
        plan: None,
        verify: None,
        rollback: None,
    };
    Ok(Capability::embedded(
        manifest,
        hooks,
        json!({"source": format!("builtin:{id}"), "packageName": BUILTIN_PACKAGE, "packageVersion": env!("CARGO_PKG_VERSION")}),
    ))
}

/// All 12 built-ins, in the reference provider order.
pub fn builtin_capabilities() -> Result<Vec<Capability>, CapabilityError> {
    builtins::BUILTIN_IDS
        .iter()
        .map(|id| builtin_capability(id))
        .collect()
}

/// The embedded default index: one package holding the 12 built-in manifests.
pub fn default_index() -> Value {
    let capabilities: Vec<Value> = builtins::manifests()
        .iter()
        .map(|m| {
            let id = m.get("id").and_then(Value::as_str).unwrap_or_default();
            json!({"manifest": m, "module": format!("./builtin/{id}")})
        })
        .collect();
    json!({
        "indexVersion": capability_core::index::CAPABILITY_INDEX_VERSION,
        "generatedAt": "2026-11-30T00:00:00.000Z",
        "packages": [{
            "name": BUILTIN_PACKAGE,
            "version": env!("CARGO_PKG_VERSION"),
            "source": "builtin",
            "capabilities": capabilities,
        }],
        "metadata": {"name": "Embedded default index"},
    })
}
