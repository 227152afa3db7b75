//! `Decision` and the functions that make one (`allow`, `deny`, ... : all nine).

use capability_host::actions::governance::{
    Decision, DecisionType, IsolationTier, Mutation, SandboxRequirement,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::Value;

use crate::convert::{object, to_json, to_py};

/// A policy's answer. Build one with `allow`, `deny`, `approval_required`, `redact`,
/// `transform_input`, `transform_output`, `route`, `sandbox` or `log_only`.
#[pyclass(frozen, name = "Decision", module = "capability")]
#[derive(Clone)]
pub struct PyDecision {
    pub inner: Decision,
}

#[pymethods]
impl PyDecision {
    /// One of the nine decision types (`allow`, `deny`, ...).
    #[getter(r#type)]
    fn kind(&self) -> &'static str {
        self.inner.kind.as_str()
    }
    #[getter]
    fn reason(&self) -> Option<&str> {
        self.inner.reason.as_deref()
    }
    /// A machine-readable code (`deny(..., code=...)`).
    #[getter]
    fn code(&self) -> Option<&str> {
        self.inner.code.as_deref()
    }
    #[getter]
    fn policy_name(&self) -> Option<&str> {
        self.inner.policy_name.as_deref()
    }
    #[getter]
    fn policy_version(&self) -> Option<&str> {
        self.inner.policy_version.as_deref()
    }
    #[getter]
    fn policy_id(&self) -> Option<&str> {
        self.inner.policy_id.as_deref()
    }
    /// Execution may proceed (every type but `deny` and `approval_required`).
    #[getter]
    fn allowed(&self) -> bool {
        self.inner.allowed()
    }
    #[getter]
    fn denied(&self) -> bool {
        self.inner.denied()
    }
    #[getter]
    fn requires_approval(&self) -> bool {
        self.inner.requires_approval()
    }
    /// The decision as the audit log and the HTTP API show it.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.inner.to_json())
    }
    fn __repr__(&self) -> String {
        match &self.inner.reason {
            Some(r) => format!("Decision({}, {r:?})", self.inner.kind.as_str()),
            None => format!("Decision({})", self.inner.kind.as_str()),
        }
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyDecision>()
            .is_ok_and(|o| same(&o.get().inner, &self.inner))
    }
}

/// Equal when everything but the generated decision id is.
fn same(a: &Decision, b: &Decision) -> bool {
    let mut b = b.clone();
    b.decision_id.clone_from(&a.decision_id);
    *a == b
}

fn with_reason(mut d: Decision, reason: Option<String>) -> PyDecision {
    if let Some(r) = reason {
        d = d.with_reason(r);
    }
    PyDecision { inner: d }
}

/// Execution may proceed.
#[pyfunction]
#[pyo3(signature = (reason=None))]
pub fn allow(reason: Option<String>) -> PyDecision {
    with_reason(Decision::allow(), reason)
}

/// Refuse; the first deny in priority order is reported.
#[pyfunction]
#[pyo3(signature = (reason, *, code=None))]
pub fn deny(reason: String, code: Option<String>) -> PyDecision {
    let mut d = Decision::deny(reason);
    if let Some(c) = code {
        d = d.with_code(c);
    }
    PyDecision { inner: d }
}

/// Refuse until a human approves (a pending approval of the host is created).
#[pyfunction]
pub fn approval_required(reason: String) -> PyDecision {
    PyDecision {
        inner: Decision::approval_required(reason),
    }
}

/// Mask the values these JSON pointers point at with `"[REDACTED]"` (in the output and
/// in the audit record); `*` matches every element.
#[pyfunction]
#[pyo3(signature = (*pointers, reason=None))]
pub fn redact(pointers: Vec<String>, reason: Option<String>) -> PyResult<PyDecision> {
    for p in &pointers {
        capability_host::actions::governance::pointer::parse(p)
            .map_err(|e| PyValueError::new_err(format!("redact {p:?}: {e}")))?;
    }
    Ok(with_reason(Decision::redact(pointers), reason))
}

fn mutations(
    set: Option<&Bound<'_, PyAny>>,
    patch: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<Mutation>> {
    let mut out = Vec::new();
    for (k, v) in object(set, "set")? {
        out.push(Mutation::set(format!("/{}", escape(&k)), v));
    }
    if let Some(patch) = patch {
        let Value::Array(ops) = to_json(patch)? else {
            return Err(PyValueError::new_err(
                "patch must be a list of RFC 6902 operations",
            ));
        };
        for op in &ops {
            out.push(
                Mutation::from_json(op)
                    .map_err(|e| PyValueError::new_err(format!("patch: {e}")))?,
            );
        }
    }
    if out.is_empty() {
        return Err(PyValueError::new_err(
            "nothing to change: give set= or patch=",
        ));
    }
    Ok(out)
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Change the input before the call: `set` replaces top-level keys, `patch` is a list of
/// RFC 6902 `add`/`replace`/`remove` operations.
#[pyfunction]
#[pyo3(signature = (set=None, *, patch=None, reason=None))]
pub fn transform_input(
    set: Option<&Bound<'_, PyAny>>,
    patch: Option<&Bound<'_, PyAny>>,
    reason: Option<String>,
) -> PyResult<PyDecision> {
    Ok(with_reason(
        Decision::transform_input(mutations(set, patch)?),
        reason,
    ))
}

/// Change the output after the call (before redaction).
#[pyfunction]
#[pyo3(signature = (set=None, *, patch=None, reason=None))]
pub fn transform_output(
    set: Option<&Bound<'_, PyAny>>,
    patch: Option<&Bound<'_, PyAny>>,
    reason: Option<String>,
) -> PyResult<PyDecision> {
    Ok(with_reason(
        Decision::transform_output(mutations(set, patch)?),
        reason,
    ))
}

/// Use another declared capability instead (it is authorized again).
#[pyfunction]
#[pyo3(signature = (capability, reason=None))]
pub fn route(capability: String, reason: Option<String>) -> PyDecision {
    with_reason(Decision::route(capability), reason)
}

/// A floor on isolation: `in_process` < `process` < `oci` < `wasm`, no network, limits.
#[pyfunction]
#[pyo3(signature = (tier="process", *, network=false, timeout_ms=None, memory_mb=None, reason=None))]
pub fn sandbox(
    tier: &str,
    network: bool,
    timeout_ms: Option<u64>,
    memory_mb: Option<u64>,
    reason: Option<String>,
) -> PyResult<PyDecision> {
    let tier = IsolationTier::parse(tier).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let requirement = SandboxRequirement {
        min_tier: Some(tier),
        deny_network: !network,
        timeout_ms,
        memory_mb,
    };
    Ok(with_reason(Decision::sandbox(requirement), reason))
}

/// Recorded, never enforced.
#[pyfunction]
pub fn log_only(reason: String) -> PyDecision {
    PyDecision {
        inner: Decision::log_only(reason),
    }
}

/// The decision type names, in the standard's order.
pub fn decision_types() -> Vec<&'static str> {
    DecisionType::ALL.iter().map(|d| d.as_str()).collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDecision>()?;
    for f in [
        wrap_pyfunction!(allow, m)?,
        wrap_pyfunction!(deny, m)?,
        wrap_pyfunction!(approval_required, m)?,
        wrap_pyfunction!(redact, m)?,
        wrap_pyfunction!(transform_input, m)?,
        wrap_pyfunction!(transform_output, m)?,
        wrap_pyfunction!(route, m)?,
        wrap_pyfunction!(sandbox, m)?,
        wrap_pyfunction!(log_only, m)?,
    ] {
        m.add_function(f)?;
    }
    m.add("DECISION_TYPES", decision_types())?;
    Ok(())
}
