//! The runtime's errors as the exceptions of `capability.errors`, each with its code.

use capability_core::CapabilityError;
use capability_host::HostError;
use capability_host::actions::governance::InterceptError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule};
use serde_json::Value;

use crate::convert::to_py;

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// An exception of `capability.errors` with keyword attributes; if that module cannot be
/// imported (a broken install), a `RuntimeError` with the message.
fn make(py: Python<'_>, class: &str, message: &str, kwargs: &[(&str, Option<&str>)]) -> PyErr {
    make_with(py, class, message, kwargs, None)
}

fn make_with(
    py: Python<'_>,
    class: &str,
    message: &str,
    kwargs: &[(&str, Option<&str>)],
    details: Option<&Value>,
) -> PyErr {
    let built = (|| -> PyResult<PyErr> {
        let module = ERRORS.get_or_try_init(py, || {
            PyModule::import(py, "capability.errors").map(Bound::unbind)
        })?;
        let cls = module.bind(py).getattr(class)?;
        let kw = PyDict::new(py);
        for (k, v) in kwargs {
            kw.set_item(k, v)?;
        }
        if let Some(d) = details {
            kw.set_item("details", to_py(py, d)?)?;
        }
        let exc = cls.call((message,), Some(&kw))?;
        Ok(PyErr::from_value(exc))
    })();
    built.unwrap_or_else(|e| e)
}

/// A capability error (an invoke's failure) as the matching exception.
pub fn capability(py: Python<'_>, e: &CapabilityError) -> PyErr {
    let code = e.code.as_str();
    let details = e.details.as_ref();
    let detail = |k: &str| details.and_then(|d| d.get(k)).and_then(Value::as_str);
    match code {
        "PERMISSION_DENIED" => make_with(
            py,
            "Denied",
            &e.message,
            &[
                ("code", Some(code)),
                ("reason", Some(&e.message)),
                (
                    "policy_name",
                    detail("policyName").or(detail("policy_name")),
                ),
                ("decision_code", detail("code")),
                ("receipt_id", e.receipt_id.as_deref()),
            ],
            details,
        ),
        "APPROVAL_REQUIRED" => {
            let id = details
                .and_then(|d| d.pointer("/approval/approvalId"))
                .and_then(Value::as_str);
            make_with(
                py,
                "ApprovalRequired",
                &e.message,
                &[
                    ("approval_id", id),
                    ("reason", Some(&e.message)),
                    ("receipt_id", e.receipt_id.as_deref()),
                ],
                details,
            )
        }
        "NOT_FOUND" => make_with(py, "NotFound", &e.message, &[], details),
        _ => make_with(
            py,
            "CapabilityError",
            &e.message,
            &[
                ("code", Some(code)),
                ("receipt_id", e.receipt_id.as_deref()),
            ],
            details,
        ),
    }
}

/// A host service's refusal.
pub fn host(py: Python<'_>, e: &HostError) -> PyErr {
    let message = e.to_string();
    match e.code() {
        "NOT_FOUND" => make(py, "NotFound", &message, &[]),
        code => make(py, "CapabilityError", &message, &[("code", Some(code))]),
    }
}

/// An intercepted action's refusal; the callable's own exception comes back unchanged.
pub fn intercept<E: std::fmt::Display>(
    py: Python<'_>,
    e: InterceptError<E>,
    execution: impl FnOnce(E) -> PyErr,
) -> PyErr {
    let message = e.to_string();
    match e {
        InterceptError::Execution { error, .. } => execution(error),
        InterceptError::NotFound(_) => make(py, "NotFound", &message, &[]),
        InterceptError::Denied(d) => make(
            py,
            "Denied",
            &message,
            &[
                ("reason", d.reason()),
                ("policy_name", d.policy_name()),
                ("policy_version", d.policy_version()),
                ("decision_code", d.decision.code.as_deref()),
                ("action_id", Some(d.action_id())),
                ("stage", Some(d.stage.as_str())),
            ],
        ),
        InterceptError::ApprovalRequired {
            approval, decision, ..
        } => make(
            py,
            "ApprovalRequired",
            &message,
            &[
                (
                    "approval_id",
                    approval.as_ref().map(|a| a.approval_id.as_str()),
                ),
                ("reason", decision.reason.as_deref()),
                ("policy_name", decision.policy_name.as_deref()),
            ],
        ),
        InterceptError::Approval(_) => make(
            py,
            "Denied",
            &message,
            &[
                ("reason", Some(&message)),
                ("decision_code", Some("approval_invalid")),
            ],
        ),
        InterceptError::Transform(_) => make(
            py,
            "CapabilityError",
            &message,
            &[("code", Some("TRANSFORM_FAILED"))],
        ),
        InterceptError::Engine(_) | InterceptError::Audit(_) => make(
            py,
            "CapabilityError",
            &message,
            &[("code", Some("GOVERNANCE_FAILED"))],
        ),
    }
}

/// A bad argument of the caller's.
pub fn invalid(py: Python<'_>, message: String) -> PyErr {
    make(
        py,
        "CapabilityError",
        &message,
        &[("code", Some("INVALID_INPUT"))],
    )
}

/// A `sandbox` decision a callable of this process cannot meet: it is refused, never run
/// with a limit that would not hold.
pub fn isolation_unavailable(py: Python<'_>, message: String) -> PyErr {
    make(
        py,
        "CapabilityError",
        &message,
        &[("code", Some("ISOLATION_UNAVAILABLE"))],
    )
}
