//! The stable 1.0 metabolic binder boundary: [`MetabolicBinder`] adapts software by execution
//! substrate, and [`MetabolicBinderRegistry`] is the central gate every binding crosses.
//!
//! The registry validates a binding after `bind` and again before `execute`, refuses
//! execution of a binding with incomplete authority unless the caller approved, and wraps
//! every execution in the substrate-neutral 1.0 execution receipt. A binder that fails does
//! not make the call fail: the result has status `failed` and the receipt carries the error.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value, json};

/// The binding envelope version.
pub const METABOLIC_BINDING_VERSION: &str = "1.0";
/// The execution receipt version.
pub const METABOLIC_EXECUTION_RECEIPT_VERSION: &str = "1.0";

/// How a binder's substrate is discovered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinderDiscovery {
    Automatic,
    Explicit,
    Derived,
}

impl BinderDiscovery {
    pub fn as_str(self) -> &'static str {
        match self {
            BinderDiscovery::Automatic => "automatic",
            BinderDiscovery::Explicit => "explicit",
            BinderDiscovery::Derived => "derived",
        }
    }
}

/// A binder or registry failure (the reference throws `TypeError`/`Error` with these
/// messages).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BinderError(pub String);

/// A cooperative cancellation flag (the reference's `AbortSignal`).
#[derive(Clone, Debug, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    pub fn new() -> Self {
        CancelToken::default()
    }
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// The status a binder reports for one execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinderStatus {
    Succeeded,
    Failed,
}

impl BinderStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            BinderStatus::Succeeded => "succeeded",
            BinderStatus::Failed => "failed",
        }
    }
}

/// What a binder's `execute` returns.
#[derive(Clone, Debug, PartialEq)]
pub struct BinderExecution {
    pub status: BinderStatus,
    pub output: Option<Value>,
    /// A label naming the isolation boundary used.
    pub isolation: Option<String>,
    /// A substrate-specific receipt.
    pub upstream_receipt: Option<Value>,
    pub metadata: Option<Value>,
}

/// A substrate binder.
pub trait MetabolicBinder: Send + Sync {
    fn id(&self) -> &str;
    fn substrate(&self) -> &str;
    fn discovery(&self) -> BinderDiscovery;
    fn description(&self) -> &str;
    /// Produces a binding (a `MetabolicBinding` 1.0 document) for a request.
    fn bind(&self, request: &Value) -> Result<Value, BinderError>;
    /// Whether this binder provides an execution boundary.
    fn executable(&self) -> bool {
        false
    }
    /// Executes a validated binding.
    fn execute(
        &self,
        _binding: &Value,
        _input: &Value,
        _cancel: &CancelToken,
    ) -> Result<BinderExecution, BinderError> {
        Err(BinderError(format!(
            "Binder {} does not provide an execution boundary",
            self.id()
        )))
    }
}

/// `{id, substrate, discovery, description, executable}` of a registered binder.
pub fn binder_summary(binder: &dyn MetabolicBinder) -> Value {
    json!({
        "id": binder.id(),
        "substrate": binder.substrate(),
        "discovery": binder.discovery().as_str(),
        "description": binder.description(),
        "executable": binder.executable(),
    })
}

/// The result of [`MetabolicBinderRegistry::execute`].
#[derive(Clone, Debug, PartialEq)]
pub struct MetabolicExecutionResult {
    pub status: BinderStatus,
    pub output: Option<Value>,
    /// The 1.0 execution receipt.
    pub receipt: Value,
}

/// Options of one execution.
#[derive(Clone, Debug, Default)]
pub struct ExecuteOptions {
    /// Explicit approval for bindings with incomplete authority.
    pub approved: bool,
    pub cancel: Option<CancelToken>,
}

/// The registry of binders and the central gate for bindings.
#[derive(Default)]
pub struct MetabolicBinderRegistry {
    binders: Vec<Arc<dyn MetabolicBinder>>,
}

impl std::fmt::Debug for MetabolicBinderRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.binders.iter().map(|b| b.id().to_string()))
            .finish()
    }
}

impl MetabolicBinderRegistry {
    pub fn new() -> Self {
        MetabolicBinderRegistry::default()
    }

    /// Registers a binder (id, substrate and description must be non-blank; ids unique).
    pub fn register(&mut self, binder: Arc<dyn MetabolicBinder>) -> Result<(), BinderError> {
        for (field, value) in [
            ("id", binder.id()),
            ("substrate", binder.substrate()),
            ("description", binder.description()),
        ] {
            if crate::js::is_blank(value) {
                return Err(BinderError(format!("Binder {field} is required")));
            }
        }
        if self.binders.iter().any(|b| b.id() == binder.id()) {
            return Err(BinderError(format!(
                "Binder already registered: {}",
                binder.id()
            )));
        }
        self.binders.push(binder);
        Ok(())
    }

    /// The binder with that id (`Unknown metabolic binder: <id>`).
    pub fn get(&self, id: &str) -> Result<&Arc<dyn MetabolicBinder>, BinderError> {
        self.binders
            .iter()
            .find(|b| b.id() == id)
            .ok_or_else(|| BinderError(format!("Unknown metabolic binder: {id}")))
    }

    /// `[{id, substrate, discovery, description, executable}]` in registration order.
    pub fn list(&self) -> Vec<Value> {
        self.binders
            .iter()
            .map(|b| binder_summary(b.as_ref()))
            .collect()
    }

    /// Asks a binder for a binding and validates it against the binder.
    pub fn bind(&self, id: &str, request: &Value) -> Result<Value, BinderError> {
        let binder = self.get(id)?;
        let binding = binder.bind(request)?;
        assert_binding(&binding, binder.as_ref())?;
        Ok(binding)
    }

    /// Executes a binding through its binder: validate, require an execution boundary,
    /// require approval for incomplete authority, honour cancellation, then run and wrap the
    /// outcome in the 1.0 execution receipt.
    pub fn execute(
        &self,
        id: &str,
        binding: &Value,
        input: &Value,
        options: &ExecuteOptions,
    ) -> Result<MetabolicExecutionResult, BinderError> {
        let binder = self.get(id)?;
        assert_binding(binding, binder.as_ref())?;
        if !binder.executable() {
            return Err(BinderError(format!(
                "Binder {} does not provide an execution boundary",
                binder.id()
            )));
        }
        let complete = binding.pointer("/authority/complete") == Some(&Value::Bool(true));
        if !complete && !options.approved {
            return Err(BinderError(format!(
                "Binder {} requires explicit approval because authority is incomplete",
                binder.id()
            )));
        }
        let cancel = options.cancel.clone().unwrap_or_default();
        if cancel.is_cancelled() {
            return Err(BinderError("The operation was aborted".into()));
        }
        let started_at = crate::js::now_iso();
        let outcome = binder.execute(binding, input, &cancel);
        let ended_at = crate::js::now_iso();
        let mut receipt = Map::new();
        receipt.insert(
            "receiptVersion".into(),
            METABOLIC_EXECUTION_RECEIPT_VERSION.into(),
        );
        for key in ["binderId", "substrate", "locator", "immutableArtifact"] {
            receipt.insert(key.into(), binding.get(key).cloned().unwrap_or(Value::Null));
        }
        let (status, output) = match &outcome {
            Ok(exec) => (exec.status, exec.output.clone()),
            Err(_) => (BinderStatus::Failed, None),
        };
        receipt.insert("status".into(), status.as_str().into());
        receipt.insert("startedAt".into(), started_at.into());
        receipt.insert("endedAt".into(), ended_at.into());
        receipt.insert(
            "authority".into(),
            json!({
                "complete": binding.pointer("/authority/complete").cloned().unwrap_or(Value::Null),
                "effects": binding.pointer("/authority/effects").cloned().unwrap_or(Value::Null),
            }),
        );
        receipt.insert(
            "evidence".into(),
            binding.get("evidence").cloned().unwrap_or(Value::Null),
        );
        match &outcome {
            Ok(exec) => {
                if let Some(isolation) = exec.isolation.as_ref().filter(|s| !s.is_empty()) {
                    receipt.insert("isolation".into(), isolation.clone().into());
                }
                if let Some(upstream) = &exec.upstream_receipt {
                    receipt.insert("upstreamReceipt".into(), upstream.clone());
                }
                if let Some(metadata) = &exec.metadata {
                    receipt.insert("metadata".into(), metadata.clone());
                }
            }
            Err(e) => {
                receipt.insert("error".into(), e.0.clone().into());
            }
        }
        Ok(MetabolicExecutionResult {
            status,
            output,
            receipt: Value::Object(receipt),
        })
    }
}

/// Validates a binding against the binder that must own it
/// (`Invalid metabolic binding: <issues joined by "; ">`).
pub fn assert_binding(binding: &Value, binder: &dyn MetabolicBinder) -> Result<(), BinderError> {
    let issues =
        crate::validate::validate_binding(binding, Some((binder.id(), binder.substrate())));
    if issues.is_empty() {
        Ok(())
    } else {
        Err(BinderError(format!(
            "Invalid metabolic binding: {}",
            issues.join("; ")
        )))
    }
}
