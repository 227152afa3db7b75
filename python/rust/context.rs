//! `PolicyContext`: what a Python policy sees, read-only, converted on access.

use capability_host::actions::governance::PolicyContext;
use pyo3::prelude::*;
use serde_json::{Value, json};

use crate::convert::{dict, to_py};

/// What a Python policy sees: the action, its capability, the arguments, the output (in
/// the after stage), the error message (on error). Read-only.
#[pyclass(frozen, name = "PolicyContext", module = "capability")]
pub struct PyPolicyContext {
    pub inner: PolicyContext,
}

#[pymethods]
impl PyPolicyContext {
    /// `before_capability`, `after_capability` or `on_error`.
    #[getter]
    fn stage(&self) -> &'static str {
        self.inner.stage.as_str()
    }
    #[getter]
    fn action_id(&self) -> &str {
        &self.inner.action.action_id
    }
    #[getter]
    fn trace_id(&self) -> &str {
        &self.inner.action.trace_id
    }
    #[getter]
    fn parent_action_id(&self) -> Option<&str> {
        self.inner.action.parent_action_id.as_deref()
    }
    #[getter]
    fn action_type(&self) -> &'static str {
        self.inner.action.action_type.as_str()
    }
    #[getter]
    fn capability_name(&self) -> &str {
        &self.inner.action.capability.name
    }
    /// The capability's declaration: name, type, risk, scopes, tenant_id, environment,
    /// owner, data_namespace, effect, side_effects.
    #[getter]
    fn capability<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let c = &self.inner.action.capability;
        let mut g = c.governance.to_json();
        if let Value::Object(m) = &mut g {
            m.insert("name".into(), json!(c.name));
            m.insert("type".into(), json!(c.governance.kind.as_str()));
            m.insert(
                "scopes".into(),
                json!(c.required_scopes().collect::<Vec<_>>()),
            );
            m.insert("tenant_id".into(), json!(c.governance.tenant));
            m.insert(
                "environment".into(),
                json!(c.governance.environment.map(|e| e.as_str())),
            );
            m.insert("is_high_risk".into(), json!(c.is_high_risk()));
        }
        to_py(py, &g)
    }
    #[getter]
    fn agent_id(&self) -> &str {
        &self.inner.action.agent_id
    }
    #[getter]
    fn tenant_id(&self) -> Option<&str> {
        self.inner.action.tenant_id.as_deref()
    }
    #[getter]
    fn principal_id(&self) -> Option<&str> {
        self.inner.action.principal_id.as_deref()
    }
    #[getter]
    fn environment(&self) -> &'static str {
        self.inner.action.environment.as_str()
    }
    #[getter]
    fn is_prod(&self) -> bool {
        self.inner.is_prod()
    }
    #[getter]
    fn is_high_risk(&self) -> bool {
        self.inner.is_high_risk()
    }
    #[getter]
    fn has_side_effects(&self) -> bool {
        self.inner.has_side_effects()
    }
    /// The action's input.
    #[getter]
    fn input<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.inner.action.input)
    }
    /// The output (after_capability only; otherwise None).
    #[getter]
    fn output<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match &self.inner.output {
            Some(v) => to_py(py, v),
            None => Ok(py.None().into_bound(py)),
        }
    }
    /// The error message (on_error only).
    #[getter]
    fn error(&self) -> Option<&str> {
        self.inner.error.as_deref()
    }
    #[getter]
    fn labels(&self) -> std::collections::BTreeMap<String, String> {
        self.inner.action.labels.clone().into_iter().collect()
    }
    #[getter]
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(dict(py, &self.inner.runtime_metadata)?.into_any())
    }
    #[getter]
    fn cost_so_far_usd(&self) -> f64 {
        self.inner.action.cost_so_far_usd
    }
    #[getter]
    fn estimated_cost_usd(&self) -> Option<f64> {
        self.inner.action.estimated_cost_usd
    }
    /// Scopes granted to the agent (the host's and the call's).
    #[getter]
    fn granted_scopes(&self) -> Vec<String> {
        self.inner.action.agent_scopes.iter().cloned().collect()
    }
    /// Whether an approval for this exact action was presented.
    #[getter]
    fn approved(&self) -> bool {
        self.inner.approval.is_some()
    }
    /// An argument: from the call's arguments when present (even when None), else
    /// `default`.
    #[pyo3(signature = (name, default=None))]
    fn arg<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match self.inner.arg(name) {
            Some(v) => to_py(py, v),
            None => Ok(default.unwrap_or_else(|| py.None().into_bound(py))),
        }
    }
    /// Whether the agent was granted `scope`.
    fn agent_has_scope(&self, scope: &str) -> bool {
        self.inner.agent_has_scope(scope)
    }
    /// Whether the capability declares that it requires `scope`.
    fn capability_requires_scope(&self, scope: &str) -> bool {
        self.inner.capability_requires_scope(scope)
    }
    /// The capability's required scopes the agent was not granted.
    fn missing_scopes(&self) -> Vec<String> {
        self.inner
            .missing_scopes()
            .into_iter()
            .map(str::to_owned)
            .collect()
    }
    fn __repr__(&self) -> String {
        format!(
            "PolicyContext({} {} by {})",
            self.inner.stage.as_str(),
            self.inner.action.capability.name,
            self.inner.action.agent_id
        )
    }
}
