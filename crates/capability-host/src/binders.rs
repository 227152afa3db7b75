//! Software bound by a metabolic binder — a PyPI wheel, an OCI image, a WASM module —
//! executed under the host's governance.
//!
//! The binders and their registry are `capability_core::binder`'s: the registry validates a
//! binding after `bind` and again before `execute`, refuses incomplete authority without
//! approval and wraps every execution in a `MetabolicExecutionReceipt` 1.0. The host adds
//! what every other call has:
//!
//! * **Policy.** Each registered binder is a governed capability named by its id
//!   (`capability/pypi-wheel`, `capability/oci-command`, `capability/wasm-module`) of kind
//!   `sandbox`; an execution is an agent action of type `sandbox_execution` whose
//!   `context.input` is `{binding: {binderId, substrate, locator, immutableArtifact,
//!   authority}, input}`. Cedar policies, approvals (`approval_required` gives a pending
//!   approval; the retry's token is redeemed once), routes and redaction apply as to any
//!   action.
//! * **Approval of incomplete authority.** [`BindingRun::approved`] is the operator's
//!   explicit consent (the CLI's `--approve`); a redeemed approval token counts as consent
//!   too, since a human decided that very request.
//! * **Receipts and audit.** Every execution that reached the binder — a failed one too —
//!   leaves its execution receipt, with a `receiptId`, in the home's store beside the
//!   native receipts ([`Host::metabolic_receipts`]); the audit chain holds the decision and
//!   the outcome, whose metadata names the receipt (`metabolicReceiptId`). A refusal by the
//!   registry (incomplete authority without consent, a tampered binding) is audited as a
//!   failed action and leaves no execution receipt, because nothing ran.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use capability_core::binder::{
    BinderStatus, ExecuteOptions, MetabolicBinderRegistry, MetabolicExecutionResult,
};
use capability_journal::Database;
use capability_policy::approvals::ApprovalRecord;
use capability_policy::intercept::{InterceptError, InterceptRequest};
use capability_policy::model::CapabilityKind;
use capability_policy::{ActionType, GovernedCapability};
use serde_json::{Value, json};

use crate::Host;
use crate::error::{HostError, InvalidRequest, NotFound, StoreError};
use crate::principal::{Access, Principal};

/// How one binding is run.
#[derive(Clone, Debug, Default)]
pub struct BindingRun {
    /// The operator's explicit consent to run a binding whose authority is incomplete.
    pub approved: bool,
    /// A token from [`Host::decide_approval`] for a call that policy held for approval.
    pub approval_token: Option<String>,
}

/// What [`Host::execute_binding`] did.
#[derive(Debug)]
pub enum BindingOutcome {
    /// The binder ran (its status may still be `failed`).
    Executed(Box<BindingExecuted>),
    /// Policy wants a human first: nothing ran.
    NeedsApproval {
        approval: Option<Box<ApprovalRecord>>,
        reason: String,
    },
    /// Policy refused: nothing ran.
    Denied { reason: String },
}

/// One execution that reached the binder.
#[derive(Clone, Debug)]
pub struct BindingExecuted {
    pub status: BinderStatus,
    /// The output after the after-stage policies (redaction, transforms).
    pub output: Option<Value>,
    /// The `MetabolicExecutionReceipt` 1.0, with its `receiptId`, as stored.
    pub receipt: Value,
    /// The audit events of the call, in order.
    pub events: Vec<String>,
}

/// The governed-capability description of a binder.
fn governed(id: &str) -> GovernedCapability {
    let mut capability = GovernedCapability::new(id, CapabilityKind::Sandbox);
    capability.declared_effects = vec![
        "process.spawn".to_string(),
        "custom:external.opaque-effects".to_string(),
    ];
    capability
}

/// The part of a binding policies see.
fn binding_context(binding: &Value) -> Value {
    let pick = |k: &str| binding.get(k).cloned().unwrap_or(Value::Null);
    json!({
        "binderId": pick("binderId"),
        "substrate": pick("substrate"),
        "locator": pick("locator"),
        "immutableArtifact": pick("immutableArtifact"),
        "authority": pick("authority"),
    })
}

impl Host {
    /// Declares every binder of the configured registry as a governed capability.
    pub(crate) fn declare_binders(&self) {
        let Some(registry) = &self.binders else {
            return;
        };
        for summary in registry.list() {
            if let Some(id) = summary["id"].as_str() {
                self.governor.register_capability(governed(id));
            }
        }
    }

    /// The binder registry this host was configured with.
    pub fn binders(&self) -> Option<&Arc<MetabolicBinderRegistry>> {
        self.binders.as_ref()
    }

    fn registry(&self) -> Result<&Arc<MetabolicBinderRegistry>, HostError> {
        self.binders.as_ref().ok_or_else(|| {
            InvalidRequest::new("this host was opened without metabolic binders").into()
        })
    }

    /// Asks binder `binder_id` for a binding (validated by the registry). Binding downloads
    /// and inspects; nothing runs.
    pub fn bind(
        &self,
        principal: &Principal,
        binder_id: &str,
        request: &Value,
    ) -> Result<Value, HostError> {
        principal.require(Access::Call)?;
        self.registry()?
            .bind(binder_id, request)
            .map_err(|e| InvalidRequest::new(e.0).into())
    }

    /// Runs a binding through the governed lifecycle (see the module docs).
    pub fn execute_binding(
        &self,
        principal: &Principal,
        binding: &Value,
        input: &Value,
        run: &BindingRun,
    ) -> Result<BindingOutcome, HostError> {
        principal.require(Access::Call)?;
        let registry = Arc::clone(self.registry()?);
        let binder_id = binding
            .get("binderId")
            .and_then(Value::as_str)
            .ok_or_else(|| InvalidRequest::new("the binding names no binderId"))?
            .to_string();
        registry
            .get(&binder_id)
            .map_err(|e| NotFound::new("binder", e.0))?;
        capability_upstream::check_no_proto(input).map_err(|e| InvalidRequest::new(e.message))?;
        let receipt_id = format!("mrc_{}", uuid::Uuid::new_v4().simple());
        let mut req = InterceptRequest::new(
            binder_id.clone(),
            ActionType::SandboxExecution,
            json!({"binding": binding_context(binding), "input": input}),
        )
        .actor(principal.actor());
        req.metadata.insert("interceptor".into(), json!("binder"));
        req.metadata
            .insert("metabolicReceiptId".into(), json!(receipt_id));
        req.approval_token = run.approval_token.clone();
        let consent = run.approved || run.approval_token.is_some();
        let mut ran: Option<MetabolicExecutionResult> = None;
        let result = self.governor.intercept(req, |exec| {
            // The input after `transform_input` policies.
            let input = exec.input.get("input").cloned().unwrap_or(Value::Null);
            let options = ExecuteOptions {
                approved: consent,
                cancel: None,
            };
            let done = registry.execute(&binder_id, binding, &input, &options)?;
            exec.note("binderStatus", json!(done.status.as_str()));
            let status = done.status;
            let output = done.output.clone();
            ran = Some(done);
            match status {
                BinderStatus::Succeeded => Ok(output.unwrap_or(Value::Null)),
                BinderStatus::Failed => Err(capability_core::binder::BinderError(
                    "the binder's execution failed (see its receipt)".into(),
                )),
            }
        });
        let stored = match ran {
            Some(done) => Some(self.keep_metabolic(&receipt_id, principal, done)?),
            None => None,
        };
        match (result, stored) {
            (Ok(done), Some((status, receipt))) => {
                Ok(BindingOutcome::Executed(Box::new(BindingExecuted {
                    status,
                    output: Some(done.output),
                    receipt,
                    events: done.events,
                })))
            }
            (Err(InterceptError::Execution { .. }), Some((status, receipt))) => {
                Ok(BindingOutcome::Executed(Box::new(BindingExecuted {
                    status,
                    output: None,
                    receipt,
                    events: Vec::new(),
                })))
            }
            (Err(InterceptError::Execution { error, .. }), None) => {
                Err(InvalidRequest::new(error.0).into())
            }
            (Err(InterceptError::Denied(d)), _) => Ok(BindingOutcome::Denied {
                reason: d
                    .decision
                    .reason
                    .clone()
                    .unwrap_or_else(|| "denied by policy".into()),
            }),
            (
                Err(InterceptError::ApprovalRequired {
                    approval, decision, ..
                }),
                _,
            ) => Ok(BindingOutcome::NeedsApproval {
                approval,
                reason: decision
                    .reason
                    .clone()
                    .unwrap_or_else(|| "approval required".into()),
            }),
            (Err(e), _) => Err(crate::remote::governance_error(e)),
            (Ok(_), None) => {
                Err(StoreError::new("binders", "the execution left no receipt").into())
            }
        }
    }

    /// Stores an execution receipt (with its id) before the call answers.
    fn keep_metabolic(
        &self,
        receipt_id: &str,
        principal: &Principal,
        done: MetabolicExecutionResult,
    ) -> Result<(BinderStatus, Value), HostError> {
        let mut receipt = done.receipt;
        if let Value::Object(map) = &mut receipt {
            map.insert("receiptId".into(), json!(receipt_id));
        }
        let tenant = principal.actor().tenant.unwrap_or_default();
        self.metabolic
            .put(receipt_id, &tenant, &receipt)
            .map_err(|e| StoreError::new("metabolic receipts", e))?;
        Ok((done.status, receipt))
    }

    /// Execution receipts of bindings, newest first (at most `limit`).
    pub fn metabolic_receipts(
        &self,
        principal: &Principal,
        limit: usize,
    ) -> Result<Vec<Value>, HostError> {
        principal.require(Access::Read)?;
        let scope = principal.tenant_scope();
        self.metabolic
            .list(limit, &|tenant| scope.is_none_or(|s| s.contains(tenant)))
            .map_err(|e| StoreError::new("metabolic receipts", e).into())
    }

    /// One execution receipt of a binding.
    pub fn metabolic_receipt(&self, principal: &Principal, id: &str) -> Result<Value, HostError> {
        principal.require(Access::Read)?;
        let scope = principal.tenant_scope();
        match self
            .metabolic
            .get(id)
            .map_err(|e| StoreError::new("metabolic receipts", e))?
        {
            Some((tenant, receipt)) if scope.is_none_or(|s| s.contains(&tenant)) => Ok(receipt),
            _ => Err(NotFound::new("metabolic receipt", id).into()),
        }
    }
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS metabolic_receipts (
    id TEXT PRIMARY KEY,
    binder_id TEXT NOT NULL,
    status TEXT NOT NULL,
    tenant TEXT NOT NULL,
    started_at TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS metabolic_receipts_by_start ON metabolic_receipts (started_at);
";

/// Where execution receipts of bindings are kept: the home's database (written through its
/// one writer, committed before the call answers) or memory.
pub(crate) enum MetabolicStore {
    Memory(Mutex<Vec<(String, String, Value)>>),
    /// The database, and whether this process made sure of the table (on its first write;
    /// a command that never runs a binding never touches it).
    Database(Arc<Database>, AtomicBool),
}

impl std::fmt::Debug for MetabolicStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MetabolicStore::Memory(_) => "MetabolicStore::Memory",
            MetabolicStore::Database(..) => "MetabolicStore::Database",
        })
    }
}

type Failure = String;

impl MetabolicStore {
    pub(crate) fn new(database: Option<Arc<Database>>) -> MetabolicStore {
        match database {
            Some(db) => MetabolicStore::Database(db, AtomicBool::new(false)),
            None => MetabolicStore::Memory(Mutex::new(Vec::new())),
        }
    }

    fn put(&self, id: &str, tenant: &str, receipt: &Value) -> Result<(), Failure> {
        match self {
            MetabolicStore::Memory(all) => {
                all.lock().unwrap_or_else(PoisonError::into_inner).push((
                    id.to_string(),
                    tenant.to_string(),
                    receipt.clone(),
                ));
                Ok(())
            }
            MetabolicStore::Database(db, ready) => {
                let body = serde_json::to_string(receipt).map_err(|e| e.to_string())?;
                let text = |k: &str| {
                    receipt
                        .get(k)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                };
                let row = (
                    id.to_string(),
                    text("binderId"),
                    text("status"),
                    tenant.to_string(),
                    text("startedAt"),
                    body,
                );
                let create = !ready.load(Ordering::Acquire);
                db.call(move |conn| -> rusqlite::Result<()> {
                    if create {
                        conn.execute_batch(SCHEMA)?;
                    }
                    conn.execute(
                        "INSERT INTO metabolic_receipts (id, binder_id, status, tenant, started_at, body)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                        rusqlite::params![row.0, row.1, row.2, row.3, row.4, row.5],
                    )?;
                    Ok(())
                })
                .map_err(|_| "the database writer stopped".to_string())?
                .map_err(|e| e.to_string())?;
                ready.store(true, Ordering::Release);
                Ok(())
            }
        }
    }

    fn list(&self, limit: usize, visible: &dyn Fn(&str) -> bool) -> Result<Vec<Value>, Failure> {
        match self {
            MetabolicStore::Memory(all) => Ok(all
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .rev()
                .filter(|(_, t, _)| visible(t))
                .take(limit)
                .map(|(_, _, r)| r.clone())
                .collect()),
            MetabolicStore::Database(db, _) => {
                let Some(conn) = Self::reader(db)? else {
                    return Ok(Vec::new());
                };
                let mut stmt = conn
                    .prepare(
                        "SELECT tenant, body FROM metabolic_receipts
                         ORDER BY started_at DESC, rowid DESC",
                    )
                    .map_err(|e| e.to_string())?;
                let rows = stmt
                    .query_map([], |row| {
                        Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
                    })
                    .map_err(|e| e.to_string())?;
                let mut out = Vec::new();
                for row in rows {
                    let (tenant, body) = row.map_err(|e| e.to_string())?;
                    if !visible(&tenant) {
                        continue;
                    }
                    out.push(
                        capability_core::json::from_record::<Value>(&body)
                            .map_err(|e| e.to_string())?,
                    );
                    if out.len() >= limit {
                        break;
                    }
                }
                Ok(out)
            }
        }
    }

    fn get(&self, id: &str) -> Result<Option<(String, Value)>, Failure> {
        match self {
            MetabolicStore::Memory(all) => Ok(all
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .find(|(i, _, _)| i == id)
                .map(|(_, t, r)| (t.clone(), r.clone()))),
            MetabolicStore::Database(db, _) => {
                let Some(conn) = Self::reader(db)? else {
                    return Ok(None);
                };
                let row = conn.query_row(
                    "SELECT tenant, body FROM metabolic_receipts WHERE id = ?1",
                    [id],
                    |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)),
                );
                match row {
                    Ok((tenant, body)) => Ok(Some((
                        tenant,
                        capability_core::json::from_record::<Value>(&body)
                            .map_err(|e| e.to_string())?,
                    ))),
                    Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
                    Err(e) => Err(e.to_string()),
                }
            }
        }
    }

    /// A reading connection, or `None` while no receipt was ever stored (no table yet).
    fn reader(db: &Database) -> Result<Option<rusqlite::Connection>, Failure> {
        let conn = db.connect().map_err(|e| e.to_string())?;
        let exists: bool = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'metabolic_receipts')",
                [],
                |row| row.get(0),
            )
            .map_err(|e| e.to_string())?;
        Ok(exists.then_some(conn))
    }
}
