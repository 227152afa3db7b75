//! # capability._native
//!
//! The Python package's engine: a thin surface over `capability-host`. It converts Python
//! values to the host's types and back and decides nothing itself: every decision,
//! approval, receipt and audit event is the host's (see `docs/architecture.md`).
//!
//! The Python API (documented in `python/capability/_native.pyi`):
//!
//! * `Host(home=None, *, store=None, policies=(), preset=..., shadow=False, agent=...,
//!   tenant=None, environment="dev", principal=None, scopes=(), memory=False,
//!   executor="auto")` → [`capability_host::Host::open`].
//! * `invoke`, `resume`, `plan`, `capabilities`: the governed lifecycle of executable
//!   capabilities ([`capability_host::Host::invoke`]), the GIL released for the whole call.
//! * `register`, `add_policy`, `remove_policy`, `intercept`, `evaluate`: any agent action
//!   ([`capability_host::actions`]); a Python policy is a host policy whose function
//!   re-acquires the GIL, and a failure of it (an exception, a wrong return) is a deny.
//! * `approvals`, `approve`, `reject`, `receipts`, `receipt`, `audit`, `verify_audit`,
//!   `export_audit`, `record`: the host's services, as the operator `by` names.
//! * Decisions (`allow`, `deny`, ... : [`decision`]), `PolicyContext` ([`context`]), the
//!   outcomes `Completed` / `NeedsApproval` / `Failed`, and the exceptions of
//!   `capability.errors` ([`errors`]).

/// The extension's own allocations (values are copied to and from Python objects, never
/// freed across allocators) go to mimalloc, as `cap`'s do.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod context;
mod convert;
mod decision;
mod errors;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use capability_host::actions::governance::{
    AuditEvent, Execution, InterceptMode, InterceptRequest, IsolationTier, Policy, PolicyContext,
    PolicyFault, SandboxRequirement, Stage,
};
use capability_host::receipts::ReceiptFilter;
use capability_host::{
    ActionType, Actor, ApprovalDecision, ApprovalFilter, ApprovalStatus, AuditFilter, Environment,
    ExecutorChoice, ExportFormat, Governance, GovernedCapability, Host, HostConfig, Outcome,
    Principal, Request, Storage,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use serde_json::{Map, Value, json};

use crate::context::PyPolicyContext;
use crate::convert::{object, to_json, to_json_lenient, to_py};
use crate::decision::PyDecision;

/// The defaults of every call of a `Host` (its constructor's arguments).
#[derive(Clone, Debug, Default)]
struct Defaults {
    tenant: Option<String>,
    environment: Option<Environment>,
    principal: Option<String>,
    scopes: Vec<String>,
}

/// The governed runtime in this process (see `_native.pyi`).
#[pyclass(frozen, subclass, name = "Host", module = "capability")]
struct PyHost {
    host: Arc<Host>,
    defaults: Defaults,
    /// What a `route` to a declared capability calls.
    functions: Arc<RwLock<HashMap<String, Py<PyAny>>>>,
}

fn parse<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> PyResult<T> {
    r.map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}

fn environment(s: Option<&str>) -> PyResult<Option<Environment>> {
    s.map(|e| parse("environment", Environment::parse(e)))
        .transpose()
}

/// The input argument of a call: a dict (None → `{}`).
fn input_value(input: Option<&Bound<'_, PyAny>>) -> PyResult<Value> {
    Ok(Value::Object(object(input, "input")?))
}

/// Who acts in one call: its own arguments over the host's defaults.
struct Who<'a> {
    agent: Option<String>,
    tenant: Option<String>,
    environment: Option<&'a str>,
    principal: Option<String>,
    scopes: Vec<String>,
}

impl PyHost {
    fn actor(&self, who: Who<'_>) -> PyResult<Actor> {
        let d = &self.defaults;
        Ok(Actor {
            agent_id: who.agent,
            tenant: who.tenant.or_else(|| d.tenant.clone()),
            scopes: d.scopes.iter().cloned().chain(who.scopes).collect(),
            environment: environment(who.environment)?.or(d.environment),
            principal_id: who.principal.or_else(|| d.principal.clone()),
        })
    }

    fn outcome(&self, py: Python<'_>, outcome: Outcome) -> PyResult<Py<PyAny>> {
        Ok(match outcome {
            Outcome::Completed(done) => {
                let receipt = serde_json::to_value(done.receipt.as_ref())
                    .map_err(|e| PyValueError::new_err(e.to_string()))?;
                Py::new(
                    py,
                    Completed {
                        receipt_id: done.receipt.receipt_id.clone(),
                        output: done.receipt.output.clone().unwrap_or(Value::Null),
                        receipt,
                    },
                )?
                .into_any()
            }
            Outcome::NeedsApproval(pending) => Py::new(
                py,
                NeedsApproval {
                    approval_id: pending
                        .approval
                        .as_ref()
                        .map(|a| a.approval_id.clone())
                        .unwrap_or_default(),
                    reason: pending.reason.clone(),
                    capability: pending.plan.capability.id.clone(),
                },
            )?
            .into_any(),
            Outcome::Failed(e) => Py::new(py, Failed { error: e })?.into_any(),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn request(
        &self,
        capability: String,
        action_type: &str,
        input: Value,
        who: Who<'_>,
        labels: Option<&Bound<'_, PyAny>>,
        metadata: Option<&Bound<'_, PyAny>>,
        trace_id: Option<String>,
        parent_action_id: Option<String>,
        estimated_cost_usd: Option<f64>,
    ) -> PyResult<InterceptRequest> {
        let action_type = parse("action_type", ActionType::parse(action_type))?;
        let mut req = InterceptRequest::new(capability, action_type, input).actor(self.actor(who)?);
        for (k, v) in object(labels, "labels")? {
            let Value::String(v) = v else {
                return Err(PyTypeError::new_err(format!("label {k} must be a str")));
            };
            req.labels.insert(k, v);
        }
        req.metadata = object(metadata, "metadata")?;
        req.trace_id = trace_id;
        req.parent_action_id = parent_action_id;
        req.estimated_cost_usd = estimated_cost_usd;
        Ok(req)
    }
}

/// The principal the embedding program reads the host's records as: the operator of this
/// process (as `cap` is for the CLI).
fn reader() -> Principal {
    Principal::operator("python")
}

/// A receipt as a Python dict.
fn receipt_py<'py>(
    py: Python<'py>,
    r: &capability_core::receipt::Receipt,
) -> PyResult<Bound<'py, PyAny>> {
    let v = serde_json::to_value(r).map_err(|e| PyValueError::new_err(e.to_string()))?;
    to_py(py, &v)
}

/// Whether a callable run in this process meets a `sandbox` requirement: only one that asks
/// for nothing beyond in-process execution.
fn in_process_meets(required: &SandboxRequirement) -> bool {
    required
        .min_tier
        .is_none_or(|t| t == IsolationTier::InProcess)
        && !required.deny_network
        && required.timeout_ms.is_none()
        && required.memory_mb.is_none()
}

/// A host policy whose function is a Python callable.
fn python_policy(stage: Stage, target: &str, function: Py<PyAny>) -> Policy {
    Policy::fallible(stage, target, move |ctx: &PolicyContext| {
        Python::attach(|py| {
            let arg = Py::new(py, PyPolicyContext { inner: ctx.clone() })
                .map_err(|e| PolicyFault::new(e.to_string()))?;
            let returned = function.call1(py, (arg,)).map_err(|e| {
                let kind = e
                    .get_type(py)
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_else(|_| "Exception".into());
                PolicyFault::new(format!("raised {kind}: {}", e.value(py)))
            })?;
            let bound = returned.bind(py);
            match bound.cast::<PyDecision>() {
                Ok(d) => Ok(d.get().inner.clone()),
                Err(_) => Err(PolicyFault::new(format!(
                    "returned {}, not a Decision",
                    bound
                        .get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                ))),
            }
        })
    })
}

#[pymethods]
impl PyHost {
    #[new]
    #[pyo3(signature = (home=None, *, store=None, policies=Vec::new(), preset="permissive",
        shadow=false, agent="python", tenant=None, environment="dev", principal=None,
        scopes=Vec::new(), memory=false, executor="auto"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        home: Option<PathBuf>,
        store: Option<String>,
        policies: Vec<PathBuf>,
        preset: &str,
        shadow: bool,
        agent: &str,
        tenant: Option<String>,
        environment: &str,
        principal: Option<String>,
        scopes: Vec<String>,
        memory: bool,
        executor: &str,
    ) -> PyResult<Self> {
        match store.as_deref() {
            None | Some("sqlite") => {}
            Some(other) => {
                return Err(PyValueError::new_err(format!(
                    "store {other:?}: only the embedded store (None or \"sqlite\") is built; a shared PostgreSQL store is not available yet"
                )));
            }
        }
        let preset = capability_core::authorization::Preset::parse(preset).ok_or_else(|| {
            PyValueError::new_err(format!(
                "preset {preset:?}: expected deny-all, read-only or permissive"
            ))
        })?;
        let config = HostConfig {
            home,
            storage: if memory {
                Storage::Memory
            } else {
                Storage::Durable
            },
            preset,
            policies,
            shadow,
            executor: parse("executor", executor.parse::<ExecutorChoice>())?,
            default_agent: agent.to_owned(),
            ..HostConfig::default()
        };
        let defaults = Defaults {
            tenant,
            environment: Some(parse("environment", Environment::parse(environment))?),
            principal,
            scopes,
        };
        let host = py
            .detach(|| Host::open(config))
            .map_err(|e| errors::host(py, &e))?;
        Ok(PyHost {
            host: Arc::new(host),
            defaults,
            functions: Arc::default(),
        })
    }

    /// The capability home's directory.
    #[getter]
    fn home(&self) -> PathBuf {
        self.host.home().root().to_path_buf()
    }

    /// The ids of the executable capabilities.
    fn capabilities(&self) -> Vec<String> {
        self.host
            .capabilities()
            .iter()
            .map(|c| c.id().to_owned())
            .collect()
    }

    /// Plan, authorize, run behind the boundary, verify, keep a receipt.
    #[pyo3(signature = (capability, input=None, *, agent=None, tenant=None, principal=None,
        scopes=Vec::new(), approval_token=None))]
    #[allow(clippy::too_many_arguments)]
    fn invoke(
        &self,
        py: Python<'_>,
        capability: String,
        input: Option<&Bound<'_, PyAny>>,
        agent: Option<String>,
        tenant: Option<String>,
        principal: Option<String>,
        scopes: Vec<String>,
        approval_token: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let actor = self.actor(Who {
            agent,
            tenant,
            environment: None,
            principal,
            scopes,
        })?;
        let request = Request::new(capability, input_value(input)?).by(actor);
        let host = &self.host;
        let outcome = py.detach(|| match &approval_token {
            Some(token) => host.resume(&request, token),
            None => host.invoke(&request),
        });
        self.outcome(py, outcome)
    }

    /// Runs the exact plan the approval `token` was granted for.
    #[pyo3(signature = (capability, input, token, *, agent=None, tenant=None, principal=None,
        scopes=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn resume(
        &self,
        py: Python<'_>,
        capability: String,
        input: Option<&Bound<'_, PyAny>>,
        token: String,
        agent: Option<String>,
        tenant: Option<String>,
        principal: Option<String>,
        scopes: Vec<String>,
    ) -> PyResult<Py<PyAny>> {
        self.invoke(
            py,
            capability,
            input,
            agent,
            tenant,
            principal,
            scopes,
            Some(token),
        )
    }

    /// The plan of a call, without running it.
    #[pyo3(signature = (capability, input=None))]
    fn plan<'py>(
        &self,
        py: Python<'py>,
        capability: &str,
        input: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let input = input_value(input)?;
        let plan = py
            .detach(|| self.host.plan(capability, input))
            .map_err(|e| errors::capability(py, &e))?;
        let v = serde_json::to_value(&plan).map_err(|e| PyValueError::new_err(e.to_string()))?;
        to_py(py, &v)
    }

    /// Declares a governed capability the caller executes itself.
    #[pyo3(signature = (name, r#type="tool", *, risk="low", effect=None, side_effects=None,
        scopes=None, tenant=None, environment=None, data_namespace=None, owner=None,
        description=None, metadata=None, input_schema=None, output_schema=None, function=None))]
    #[allow(clippy::too_many_arguments)]
    fn register(
        &self,
        py: Python<'_>,
        name: String,
        r#type: &str,
        risk: &str,
        effect: Option<&Bound<'_, PyAny>>,
        side_effects: Option<&Bound<'_, PyAny>>,
        scopes: Option<&Bound<'_, PyAny>>,
        tenant: Option<String>,
        environment: Option<String>,
        data_namespace: Option<String>,
        owner: Option<String>,
        description: Option<String>,
        metadata: Option<&Bound<'_, PyAny>>,
        input_schema: Option<&Bound<'_, PyAny>>,
        output_schema: Option<&Bound<'_, PyAny>>,
        function: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let mut g = Map::new();
        g.insert("kind".into(), json!(r#type));
        g.insert("risk".into(), json!(risk));
        let named = |v: Value, key: &str| match v {
            Value::String(s) => json!({ key: s }),
            other => other,
        };
        if let Some(e) = effect {
            g.insert("effect".into(), named(to_json(e)?, "type"));
        }
        for (key, arg, field) in [
            ("sideEffects", side_effects, "type"),
            ("scopes", scopes, "name"),
        ] {
            if let Some(list) = arg {
                let Value::Array(items) = to_json(list)? else {
                    return Err(PyTypeError::new_err(format!("{key} must be a list")));
                };
                g.insert(
                    key.into(),
                    Value::Array(items.into_iter().map(|v| named(v, field)).collect()),
                );
            }
        }
        let environment =
            environment.or_else(|| self.defaults.environment.map(|e| e.as_str().to_owned()));
        let tenant = tenant.or_else(|| self.defaults.tenant.clone());
        for (key, v) in [
            ("tenant", tenant),
            ("environment", environment),
            ("dataNamespace", data_namespace),
            ("owner", owner),
            ("description", description),
        ] {
            if let Some(v) = v {
                g.insert(key.into(), json!(v));
            }
        }
        for (key, schema) in [
            ("inputSchema", input_schema),
            ("outputSchema", output_schema),
        ] {
            if let Some(schema) = schema {
                g.insert(key.into(), to_json(schema)?);
            }
        }
        let meta = object(metadata, "metadata")?;
        if !meta.is_empty() {
            g.insert("metadata".into(), Value::Object(meta));
        }
        let governance = parse(
            "capability",
            Governance::from_json(&Value::Object(g), "capability"),
        )?;
        self.host
            .declare(GovernedCapability::with_governance(
                name.clone(),
                governance,
            ))
            .map_err(|e| errors::host(py, &e))?;
        let mut functions = self
            .functions
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match function {
            Some(f) => functions.insert(name, f),
            None => functions.remove(&name),
        };
        Ok(())
    }

    /// A Python policy beside the Cedar files; returns its id.
    #[pyo3(signature = (function, *, stage="before_capability", target="*", name=None,
        version=None, priority=0, enabled=true))]
    #[allow(clippy::too_many_arguments)]
    fn add_policy(
        &self,
        function: Bound<'_, PyAny>,
        stage: &str,
        target: &str,
        name: Option<String>,
        version: Option<String>,
        priority: i64,
        enabled: bool,
    ) -> PyResult<String> {
        if !function.is_callable() {
            return Err(PyTypeError::new_err("a policy must be callable"));
        }
        let stage = parse("stage", Stage::parse(stage))?;
        let name = match name {
            Some(n) => n,
            None => function
                .getattr("__name__")
                .and_then(|n| n.extract::<String>())
                .unwrap_or_else(|_| "python-policy".into()),
        };
        let mut policy = python_policy(stage, target, function.unbind())
            .named(name)
            .priority(priority)
            .enabled(enabled)
            .source("python");
        if let Some(v) = version {
            policy = policy.version(v);
        }
        Ok(self.host.add_policy(policy))
    }

    /// Removes a policy added with `add_policy`.
    fn remove_policy(&self, policy_id: &str) -> bool {
        self.host.remove_policy(policy_id)
    }

    /// before policies → `run(input)` → after policies (on_error on failure).
    #[pyo3(signature = (capability, run, input=None, *, action_type="tool_call", agent=None,
        tenant=None, environment=None, principal=None, scopes=Vec::new(), labels=None,
        metadata=None, trace_id=None, parent_action_id=None, estimated_cost_usd=None,
        approval_token=None, after_only=false))]
    #[allow(clippy::too_many_arguments)]
    fn intercept(
        &self,
        py: Python<'_>,
        capability: String,
        run: Py<PyAny>,
        input: Option<&Bound<'_, PyAny>>,
        action_type: &str,
        agent: Option<String>,
        tenant: Option<String>,
        environment: Option<&str>,
        principal: Option<String>,
        scopes: Vec<String>,
        labels: Option<&Bound<'_, PyAny>>,
        metadata: Option<&Bound<'_, PyAny>>,
        trace_id: Option<String>,
        parent_action_id: Option<String>,
        estimated_cost_usd: Option<f64>,
        approval_token: Option<String>,
        after_only: bool,
    ) -> PyResult<Py<PyAny>> {
        let who = Who {
            agent,
            tenant,
            environment,
            principal,
            scopes,
        };
        let mut req = self.request(
            capability.clone(),
            action_type,
            input_value(input)?,
            who,
            labels,
            metadata,
            trace_id,
            parent_action_id,
            estimated_cost_usd,
        )?;
        req.approval_token = approval_token;
        // One event per call, carrying the before stage's decision (as the gateway's).
        req.single_event = true;
        if after_only {
            req.mode = InterceptMode::AfterOnly;
        }
        let functions = Arc::clone(&self.functions);
        let original_input = input.map(|i| i.clone().unbind());
        let mut returned: Option<Py<PyAny>> = None;
        let host = &self.host;
        let slot = &mut returned;
        let call = move || {
            host.intercept(req, |exec: &Execution<'_>| -> Result<Value, PyErr> {
                Python::attach(|py| {
                    if let Some(required) = exec.sandbox.filter(|r| !in_process_meets(r)) {
                        return Err(errors::isolation_unavailable(
                            py,
                            format!(
                                "a sandbox decision requires {}; a Python callable runs in this process, so it was not run",
                                serde_json::to_string(&required.to_json()).unwrap_or_default()
                            ),
                        ));
                    }
                    let f = if exec.capability.name == capability {
                        run.clone_ref(py)
                    } else {
                        let routed = functions
                            .read()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .get(&exec.capability.name)
                            .map(|f| f.clone_ref(py));
                        routed.ok_or_else(|| {
                            errors::invalid(
                                py,
                                format!(
                                    "routed to {}, which was registered without a function",
                                    exec.capability.name
                                ),
                            )
                        })?
                    };
                    // The caller's own dict when no policy changed the input.
                    let arg = match (&original_input, exec.input_transformed) {
                        (Some(given), false) => given.clone_ref(py),
                        _ => to_py(py, exec.input)?.unbind(),
                    };
                    let out = f.call1(py, (arg,))?;
                    let value = to_json_lenient(out.bind(py));
                    *slot = Some(out);
                    Ok(value)
                })
            })
        };
        // The GIL is released while the audit event is written to the home's journal; a
        // host in memory only does microseconds of work in Rust, with the GIL held (the
        // callbacks into Python then need not take it again).
        let result = if self.host.database().is_some() {
            py.detach(call)
        } else {
            call()
        };
        let result = result.map_err(|e| errors::intercept(py, e, |error| error))?;
        let changed = |o: &capability_host::actions::governance::Verdict| {
            !o.obligations.output_mutations.is_empty() || !o.obligations.redact.is_empty()
        };
        let unchanged = !changed(&result.after) && !result.before.as_ref().is_some_and(changed);
        match returned {
            Some(original) if unchanged => Ok(original),
            _ => Ok(to_py(py, &result.output)?.unbind()),
        }
    }

    /// The composed decision of the policies at a stage, without audit or execution.
    #[pyo3(signature = (capability, input=None, *, stage="before_capability",
        action_type="tool_call", agent=None, tenant=None, environment=None, principal=None,
        scopes=Vec::new(), labels=None, metadata=None, output=None))]
    #[allow(clippy::too_many_arguments)]
    fn evaluate(
        &self,
        py: Python<'_>,
        capability: String,
        input: Option<&Bound<'_, PyAny>>,
        stage: &str,
        action_type: &str,
        agent: Option<String>,
        tenant: Option<String>,
        environment: Option<&str>,
        principal: Option<String>,
        scopes: Vec<String>,
        labels: Option<&Bound<'_, PyAny>>,
        metadata: Option<&Bound<'_, PyAny>>,
        output: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyDecision> {
        let stage = parse("stage", Stage::parse(stage))?;
        let output = output.map(to_json_lenient);
        let who = Who {
            agent,
            tenant,
            environment,
            principal,
            scopes,
        };
        let req = self.request(
            capability,
            action_type,
            input_value(input)?,
            who,
            labels,
            metadata,
            None,
            None,
            None,
        )?;
        let verdict = self
            .host
            .evaluate(&req, stage, output)
            .map_err(|e| errors::intercept(py, e, |never| match never {}))?;
        Ok(PyDecision {
            inner: verdict.decision,
        })
    }

    /// Approvals, newest first (`status`: pending, approved, denied, consumed, expired).
    #[pyo3(signature = (status=None))]
    fn approvals<'py>(
        &self,
        py: Python<'py>,
        status: Option<&str>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let status = status
            .map(|s| parse("status", ApprovalStatus::parse(s)))
            .transpose()?;
        let filter = ApprovalFilter {
            status,
            ..ApprovalFilter::default()
        };
        let list = py
            .detach(|| self.host.approvals(&reader(), &filter))
            .map_err(|e| errors::host(py, &e))?;
        list.approvals
            .iter()
            .map(|a| to_py(py, &capability_host::approvals::approval_json(a)))
            .collect()
    }

    /// Approves as the operator `by`; returns the single-use token.
    #[pyo3(signature = (approval_id, *, by, note=None))]
    fn approve(
        &self,
        py: Python<'_>,
        approval_id: &str,
        by: &str,
        note: Option<String>,
    ) -> PyResult<String> {
        let decided = py
            .detach(|| {
                self.host.decide_approval(
                    &Principal::operator(by),
                    approval_id,
                    ApprovalDecision::Approve,
                    note,
                )
            })
            .map_err(|e| errors::host(py, &e))?;
        decided
            .token
            .map(|t| t.0)
            .ok_or_else(|| PyValueError::new_err("the approval gave no token"))
    }

    /// Denies a pending approval as the operator `by`.
    #[pyo3(signature = (approval_id, *, by, note=None))]
    fn reject(
        &self,
        py: Python<'_>,
        approval_id: &str,
        by: &str,
        note: Option<String>,
    ) -> PyResult<()> {
        py.detach(|| {
            self.host.decide_approval(
                &Principal::operator(by),
                approval_id,
                ApprovalDecision::Deny,
                note,
            )
        })
        .map_err(|e| errors::host(py, &e))?;
        Ok(())
    }

    /// Receipts, newest first.
    #[pyo3(signature = (limit=50, *, capability=None))]
    fn receipts<'py>(
        &self,
        py: Python<'py>,
        limit: usize,
        capability: Option<String>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let query = ReceiptFilter {
            capability,
            limit: Some(limit),
            ..ReceiptFilter::default()
        }
        .query()
        .map_err(|e| errors::invalid(py, e.to_string()))?;
        let list = py
            .detach(|| self.host.receipts(&reader(), &query))
            .map_err(|e| errors::host(py, &e))?;
        list.receipts.iter().map(|r| receipt_py(py, r)).collect()
    }

    /// One receipt, or None.
    fn receipt<'py>(&self, py: Python<'py>, receipt_id: &str) -> PyResult<Bound<'py, PyAny>> {
        match py.detach(|| self.host.receipt(&reader(), receipt_id)) {
            Ok(r) => receipt_py(py, &r),
            Err(capability_host::HostError::NotFound(_)) => Ok(py.None().into_bound(py)),
            Err(e) => Err(errors::host(py, &e)),
        }
    }

    /// Audit events, oldest first, each `{"seq", "hash", "event"}`.
    #[pyo3(signature = (*, agent=None, tenant=None, capability=None, decision=None, limit=100))]
    fn audit<'py>(
        &self,
        py: Python<'py>,
        agent: Option<String>,
        tenant: Option<String>,
        capability: Option<String>,
        decision: Option<String>,
        limit: usize,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let query = AuditFilter {
            agent,
            tenant,
            capability,
            decision,
            limit: Some(limit),
            ..AuditFilter::default()
        }
        .query()
        .map_err(|e| errors::invalid(py, e.to_string()))?;
        let page = py
            .detach(|| self.host.audit_query(&reader(), &query))
            .map_err(|e| errors::host(py, &e))?;
        page.events
            .iter()
            .map(|r| {
                to_py(
                    py,
                    &json!({"seq": r.seq, "hash": r.hash, "prev_hash": r.prev_hash, "event": r.event}),
                )
            })
            .collect()
    }

    /// Verifies the audit hash chain: `{"ok", "records", "head_seq", "first_bad"}`.
    fn verify_audit<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let report = py
            .detach(|| self.host.verify_audit(&reader(), None))
            .map_err(|e| errors::host(py, &e))?;
        to_py(
            py,
            &json!({
                "ok": report.ok,
                "records": report.records,
                "head_seq": report.head_seq,
                "first_bad": report.first_bad.as_ref().map(|b| format!("{b:?}")),
            }),
        )
    }

    /// The whole audit log as JSON lines (`jsonl`) or an OpenTelemetry logs document
    /// (`otel`).
    #[pyo3(signature = (format="jsonl"))]
    fn export_audit(&self, py: Python<'_>, format: &str) -> PyResult<String> {
        let format = match format {
            "jsonl" => ExportFormat::Jsonl,
            "otel" => ExportFormat::Otel,
            other => {
                return Err(PyValueError::new_err(format!(
                    "format {other:?}: expected jsonl or otel"
                )));
            }
        };
        let mut out = Vec::new();
        py.detach(|| {
            self.host
                .export_audit(&reader(), None, format, "capability-python", &mut out)
        })
        .map_err(|e| errors::host(py, &e))?;
        String::from_utf8(out).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Appends an event made elsewhere (a Brane audit event's `to_dict()`) to the chain.
    fn record(&self, py: Python<'_>, event: &Bound<'_, PyAny>) -> PyResult<String> {
        let event = foreign_event(to_json(event)?)?;
        py.detach(|| self.host.record_event(event))
            .map_err(|e| errors::invalid(py, e.to_string()))
    }

    /// Waits until every receipt and audit event so far is in the database.
    fn flush(&self, py: Python<'_>) {
        py.detach(|| self.host.flush());
    }

    fn __repr__(&self) -> String {
        format!("Host({})", self.host.home().root().display())
    }
}

/// An audit event of another sink (Brane's keys) as the host's event: the fields the host
/// adds (decision id, policy ids, digest, ...) are empty; a `+00:00` timestamp is written
/// as the host writes its own (`...Z`, milliseconds).
fn foreign_event(event: Value) -> PyResult<AuditEvent> {
    let Value::Object(mut m) = event else {
        return Err(PyTypeError::new_err("an audit event must be a dict"));
    };
    if let Some(Value::String(t)) = m.get("timestamp") {
        let iso = normalize_timestamp(t);
        m.insert("timestamp".into(), Value::String(iso));
    }
    for (key, default) in [
        ("parent_action_id", Value::Null),
        ("decision_id", Value::String(String::new())),
        ("policy_ids", json!([])),
        ("code", Value::Null),
        ("plan_fingerprint", Value::Null),
        ("action_digest", Value::String(String::new())),
        ("receipt_id", Value::Null),
        ("approval_id", Value::Null),
        ("shadow", Value::Null),
        ("redacted", json!([])),
        ("input", Value::Null),
        ("output", Value::Null),
        ("labels", json!({})),
        ("metadata", json!({})),
    ] {
        m.entry(key).or_insert(default);
    }
    parse("audit event", AuditEvent::from_json(&Value::Object(m)))
}

/// `2026-12-03T16:01:51.123456+00:00` → `2026-12-03T16:01:51.123Z`.
fn normalize_timestamp(t: &str) -> String {
    let Some(base) = t.strip_suffix("+00:00").or_else(|| t.strip_suffix('Z')) else {
        return t.to_owned();
    };
    let (seconds, fraction) = base.split_once('.').unwrap_or((base, ""));
    let mut millis: String = fraction.chars().take(3).collect();
    while millis.len() < 3 {
        millis.push('0');
    }
    format!("{seconds}.{millis}Z")
}

/// The capability ran and succeeded.
#[pyclass(frozen, name = "Completed", module = "capability")]
struct Completed {
    #[pyo3(get)]
    receipt_id: String,
    output: Value,
    receipt: Value,
}

#[pymethods]
impl Completed {
    #[getter]
    fn output<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.output)
    }
    #[getter]
    fn receipt<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.receipt)
    }
    fn __repr__(&self) -> String {
        format!("Completed({}, {})", self.receipt_id, self.output)
    }
}

/// A policy wants a human first; the plan is kept.
#[pyclass(frozen, name = "NeedsApproval", module = "capability")]
struct NeedsApproval {
    #[pyo3(get)]
    approval_id: String,
    #[pyo3(get)]
    reason: String,
    #[pyo3(get)]
    capability: String,
}

#[pymethods]
impl NeedsApproval {
    fn __repr__(&self) -> String {
        format!("NeedsApproval({}, {:?})", self.approval_id, self.reason)
    }
}

/// The call was refused or failed.
#[pyclass(frozen, name = "Failed", module = "capability")]
struct Failed {
    error: capability_core::CapabilityError,
}

#[pymethods]
impl Failed {
    #[getter]
    fn code(&self) -> &'static str {
        self.error.code.as_str()
    }
    #[getter]
    fn message(&self) -> &str {
        &self.error.message
    }
    #[getter]
    fn receipt_id(&self) -> Option<&str> {
        self.error.receipt_id.as_deref()
    }
    #[getter]
    fn details<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match &self.error.details {
            Some(d) => to_py(py, d),
            None => Ok(py.None().into_bound(py)),
        }
    }
    /// Raises it as a `capability.errors.CapabilityError` (or a subclass).
    fn raise_(&self, py: Python<'_>) -> PyResult<()> {
        Err(errors::capability(py, &self.error))
    }
    fn __repr__(&self) -> String {
        format!(
            "Failed({}, {:?})",
            self.error.code.as_str(),
            self.error.message
        )
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyHost>()?;
    m.add_class::<PyPolicyContext>()?;
    m.add_class::<Completed>()?;
    m.add_class::<NeedsApproval>()?;
    m.add_class::<Failed>()?;
    decision::register(m)?;
    Ok(())
}
