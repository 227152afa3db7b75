//! Audit events and the hash-chained audit log.
//!
//! Every decision and outcome is an [`AuditEvent`]: Brane's fields (snake_case keys, as in
//! Brane's JSONL) plus `decision_id`, `policy_ids`, `plan_fingerprint`, `receipt_id`,
//! `action_digest`, `parent_action_id`, `code`, `approval_id`, `shadow` and `redacted`.
//!
//! Stored events form a chain: record `n` holds `prev_hash` (the hash of record `n-1`, or 64
//! zeros for the first) and `hash = sha256(canonical_json({"seq": n, "prev_hash": ...,
//! "event": ...}))`; a head (last seq and hash) is updated in the same transaction.
//! [`verify_chain`] walks the records in seq order and reports the first one that was edited,
//! removed, inserted or reordered, and a truncated tail.
//!
//! The events of each tenant also form a chain of their own ([`TenantLink`]): the record of
//! the `n`th event of tenant `t` holds `tenant_seq = n`, `tenant_prev_hash` (the
//! `tenant_hash` of the tenant's previous record, or 64 zeros) and `tenant_hash`, computed as
//! `hash` is with `tenant_seq` and `tenant_prev_hash` in place of `seq` and `prev_hash`; each
//! tenant has a head of its own. [`verify_tenant`] checks one tenant's chain from its
//! records alone (without any other tenant's events); the global walk checks the tenant
//! links too. Events without a tenant are in the global chain only.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::action::{ActionType, AgentAction};
use crate::decision::{Decision, DecisionType};
use crate::engine::Verdict;
use crate::model::{CapabilityKind, Environment, RiskLevel};
use crate::names::{new_id, string_enum};
use crate::policy::Stage;
use crate::store::StoreError;

string_enum! {
    /// What happened to an action.
    pub enum AuditOutcome ("audit outcome") {
        /// Before-stage policies allowed it; execution follows.
        Allowed => "allowed",
        DeniedBeforeExecution => "denied_before_execution",
        Executed => "executed",
        DeniedAfterExecution => "denied_after_execution",
        ExecutionFailed => "execution_failed",
        /// A pending approval was created (or found) instead of executing.
        ApprovalRequired => "approval_required",
    }
}

/// Audit failures.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot write audit file `{path}`: {message}")]
    Io { path: String, message: String },
    #[error("audit event is malformed: {message}")]
    Malformed { message: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One audit event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditEvent {
    pub event_id: String,
    /// ISO-8601 UTC with milliseconds (`...Z`).
    pub timestamp: String,
    pub action_id: String,
    pub trace_id: String,
    pub parent_action_id: Option<String>,
    pub agent_id: String,
    pub tenant_id: Option<String>,
    pub principal_id: Option<String>,
    pub environment: Environment,
    pub capability_name: String,
    pub capability_type: CapabilityKind,
    pub capability_risk: RiskLevel,
    pub action_type: ActionType,
    pub stage: Stage,
    pub decision: DecisionType,
    pub outcome: AuditOutcome,
    pub reason: Option<String>,
    pub policy_name: Option<String>,
    pub policy_version: Option<String>,
    pub input_summary: Option<String>,
    pub output_summary: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub metadata: Map<String, Value>,
    pub decision_id: String,
    /// Every policy that returned a decision, in evaluation order.
    pub policy_ids: Vec<String>,
    pub code: Option<String>,
    pub plan_fingerprint: Option<String>,
    pub action_digest: String,
    pub receipt_id: Option<String>,
    pub approval_id: Option<String>,
    /// In shadow mode: what enforcement would have decided.
    pub shadow: Option<DecisionType>,
    /// Pointers masked in the output (and in `output` below).
    pub redacted: Vec<String>,
    /// The input, when the host records payloads.
    pub input: Option<Value>,
    /// The output after transformation and redaction, when the host records payloads.
    pub output: Option<Value>,
}

impl AuditEvent {
    /// An event for an action, the reported decision, the stage and the outcome.
    pub fn new(
        action: &AgentAction,
        decision: &Decision,
        stage: Stage,
        outcome: AuditOutcome,
    ) -> Self {
        Self::with_digest(action, decision, stage, outcome, action.digest())
    }

    /// [`AuditEvent::new`] with the action's [`AgentAction::digest`] already computed (an
    /// interception emits several events for one action).
    pub(crate) fn with_digest(
        action: &AgentAction,
        decision: &Decision,
        stage: Stage,
        outcome: AuditOutcome,
        action_digest: String,
    ) -> Self {
        let cap = &action.capability;
        AuditEvent {
            event_id: new_id("evt"),
            timestamp: capability_core::js::now_iso(),
            action_id: action.action_id.clone(),
            trace_id: action.trace_id.clone(),
            parent_action_id: action.parent_action_id.clone(),
            agent_id: action.agent_id.clone(),
            tenant_id: action.tenant_id.clone(),
            principal_id: action.principal_id.clone(),
            environment: action.environment,
            capability_name: cap.name.clone(),
            capability_type: cap.governance.kind,
            capability_risk: cap.governance.risk,
            action_type: action.action_type,
            stage,
            decision: decision.kind,
            outcome,
            reason: decision.reason.clone(),
            policy_name: decision.policy_name.clone(),
            policy_version: decision.policy_version.clone(),
            input_summary: action.input_summary.clone(),
            output_summary: action.output_summary.clone(),
            labels: action.labels.clone(),
            metadata: action.metadata.clone(),
            decision_id: decision.decision_id.clone(),
            policy_ids: decision.policy_id.iter().cloned().collect(),
            code: decision.code.clone(),
            plan_fingerprint: action.plan_fingerprint.clone(),
            action_digest,
            receipt_id: None,
            approval_id: None,
            shadow: None,
            redacted: Vec::new(),
            input: None,
            output: None,
        }
    }

    /// An event for a verdict: its reported decision, all its policy ids, its shadow result.
    pub fn from_verdict(action: &AgentAction, verdict: &Verdict, outcome: AuditOutcome) -> Self {
        Self::from_verdict_with_digest(action, verdict, outcome, action.digest())
    }

    /// [`AuditEvent::from_verdict`] with the action's digest already computed.
    pub(crate) fn from_verdict_with_digest(
        action: &AgentAction,
        verdict: &Verdict,
        outcome: AuditOutcome,
        action_digest: String,
    ) -> Self {
        let mut e = Self::with_digest(
            action,
            &verdict.decision,
            verdict.stage,
            outcome,
            action_digest,
        );
        e.policy_ids = verdict.policy_ids();
        if let Some(s) = &verdict.shadow {
            e.shadow = Some(s.kind);
            e.metadata.insert(
                "shadow".into(),
                json!({
                    "decision": s.kind.as_str(),
                    "reason": s.decision.reason,
                    "policyName": s.decision.policy_name,
                }),
            );
        }
        if !verdict.errors.is_empty() {
            e.metadata.insert(
                "policyErrors".into(),
                Value::Array(verdict.errors.iter().cloned().map(Value::String).collect()),
            );
        }
        e
    }

    pub fn with_receipt(mut self, receipt_id: impl Into<String>) -> Self {
        self.receipt_id = Some(receipt_id.into());
        self
    }
    pub fn with_meta(mut self, key: impl Into<String>, value: Value) -> Self {
        self.metadata.insert(key.into(), value);
        self
    }

    /// The JSON object (snake_case keys).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Canonical JSON text (keys sorted as the project's canonical JSON sorts them).
    ///
    /// Written directly from the fields (no intermediate [`Value`]); byte-identical to
    /// `canonical_string(&self.to_json())`.
    pub fn to_canonical(&self) -> String {
        let mut out = String::with_capacity(1024);
        self.write_canonical(&mut out);
        out
    }

    /// Appends [`AuditEvent::to_canonical`] to `out`.
    pub fn write_canonical(&self, out: &mut String) {
        use capability_core::json::{write_canonical, write_json_string};
        fn opt(out: &mut String, v: Option<&str>) {
            match v {
                Some(s) => write_json_string(out, s),
                None => out.push_str("null"),
            }
        }
        fn strings(out: &mut String, items: &[String]) {
            out.push('[');
            for (i, s) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_string(out, s);
            }
            out.push(']');
        }
        fn payload(out: &mut String, v: Option<&Value>) {
            match v {
                Some(v) => write_canonical(out, v),
                None => out.push_str("null"),
            }
        }
        // Every key is plain ASCII, so canonical order is byte order; the members are
        // written in that order (a test compares with the generic canonical writer).
        out.push_str("{\"action_digest\":");
        write_json_string(out, &self.action_digest);
        out.push_str(",\"action_id\":");
        write_json_string(out, &self.action_id);
        out.push_str(",\"action_type\":");
        write_json_string(out, self.action_type.as_str());
        out.push_str(",\"agent_id\":");
        write_json_string(out, &self.agent_id);
        out.push_str(",\"approval_id\":");
        opt(out, self.approval_id.as_deref());
        out.push_str(",\"capability_name\":");
        write_json_string(out, &self.capability_name);
        out.push_str(",\"capability_risk\":");
        write_json_string(out, self.capability_risk.as_str());
        out.push_str(",\"capability_type\":");
        write_json_string(out, self.capability_type.as_str());
        out.push_str(",\"code\":");
        opt(out, self.code.as_deref());
        out.push_str(",\"decision\":");
        write_json_string(out, self.decision.as_str());
        out.push_str(",\"decision_id\":");
        write_json_string(out, &self.decision_id);
        out.push_str(",\"environment\":");
        write_json_string(out, self.environment.as_str());
        out.push_str(",\"event_id\":");
        write_json_string(out, &self.event_id);
        out.push_str(",\"input\":");
        payload(out, self.input.as_ref());
        out.push_str(",\"input_summary\":");
        opt(out, self.input_summary.as_deref());
        out.push_str(",\"labels\":");
        write_sorted_object(out, self.labels.iter(), |out, v| write_json_string(out, v));
        out.push_str(",\"metadata\":");
        write_sorted_object(out, self.metadata.iter(), write_canonical);
        out.push_str(",\"outcome\":");
        write_json_string(out, self.outcome.as_str());
        out.push_str(",\"output\":");
        payload(out, self.output.as_ref());
        out.push_str(",\"output_summary\":");
        opt(out, self.output_summary.as_deref());
        out.push_str(",\"parent_action_id\":");
        opt(out, self.parent_action_id.as_deref());
        out.push_str(",\"plan_fingerprint\":");
        opt(out, self.plan_fingerprint.as_deref());
        out.push_str(",\"policy_ids\":");
        strings(out, &self.policy_ids);
        out.push_str(",\"policy_name\":");
        opt(out, self.policy_name.as_deref());
        out.push_str(",\"policy_version\":");
        opt(out, self.policy_version.as_deref());
        out.push_str(",\"principal_id\":");
        opt(out, self.principal_id.as_deref());
        out.push_str(",\"reason\":");
        opt(out, self.reason.as_deref());
        out.push_str(",\"receipt_id\":");
        opt(out, self.receipt_id.as_deref());
        out.push_str(",\"redacted\":");
        strings(out, &self.redacted);
        out.push_str(",\"shadow\":");
        opt(out, self.shadow.map(DecisionType::as_str));
        out.push_str(",\"stage\":");
        write_json_string(out, self.stage.as_str());
        out.push_str(",\"tenant_id\":");
        opt(out, self.tenant_id.as_deref());
        out.push_str(",\"timestamp\":");
        write_json_string(out, &self.timestamp);
        out.push_str(",\"trace_id\":");
        write_json_string(out, &self.trace_id);
        out.push('}');
    }

    /// Reads an event back from JSON.
    pub fn from_json(v: &Value) -> Result<Self, AuditError> {
        serde_json::from_value(v.clone()).map_err(|e| AuditError::Malformed {
            message: e.to_string(),
        })
    }
}

/// Writes a JSON object with canonically ordered keys (`__proto__` dropped, as the
/// canonical writer does).
fn write_sorted_object<'a, V: 'a>(
    out: &mut String,
    members: impl Iterator<Item = (&'a String, &'a V)>,
    write_value: impl Fn(&mut String, &V),
) {
    let mut members: Vec<(&String, &V)> =
        members.filter(|(k, _)| k.as_str() != "__proto__").collect();
    members.sort_by(|a, b| capability_core::json::compare_keys(a.0.as_bytes(), b.0.as_bytes()));
    out.push('{');
    for (i, (k, v)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        capability_core::json::write_json_string(out, k);
        out.push(':');
        write_value(out, v);
    }
    out.push('}');
}

/// Where events go (Brane's sinks). Stores implement it by appending to the chain.
pub trait AuditSink: Send + Sync {
    fn emit(&self, event: &AuditEvent) -> Result<(), AuditError>;

    /// [`AuditSink::emit`] for an event the caller no longer needs ([`crate::Governor`]
    /// emits this way); sinks that keep events override it to avoid a copy.
    fn emit_owned(&self, event: AuditEvent) -> Result<(), AuditError> {
        self.emit(&event)
    }
}

/// Drops events.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopSink;

impl AuditSink for NoopSink {
    fn emit(&self, _event: &AuditEvent) -> Result<(), AuditError> {
        Ok(())
    }
}

/// Keeps events in memory.
#[derive(Debug, Default)]
pub struct MemorySink {
    events: Mutex<Vec<AuditEvent>>,
}

impl MemorySink {
    pub fn new() -> Self {
        Self::default()
    }
    /// A copy of the events so far.
    pub fn events(&self) -> Vec<AuditEvent> {
        match self.events.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

impl AuditSink for MemorySink {
    fn emit(&self, event: &AuditEvent) -> Result<(), AuditError> {
        match self.events.lock() {
            Ok(mut g) => g.push(event.clone()),
            Err(p) => p.into_inner().push(event.clone()),
        }
        Ok(())
    }
}

/// Appends one canonical JSON line per event, creating parent directories.
#[derive(Debug)]
pub struct JsonlSink {
    pub path: PathBuf,
    lock: Mutex<()>,
}

impl JsonlSink {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        JsonlSink {
            path: path.into(),
            lock: Mutex::new(()),
        }
    }
}

impl AuditSink for JsonlSink {
    fn emit(&self, event: &AuditEvent) -> Result<(), AuditError> {
        let _guard = match self.lock.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let err = |e: std::io::Error| AuditError::Io {
            path: self.path.display().to_string(),
            message: e.to_string(),
        };
        if let Some(parent) = self.path.parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent).map_err(err)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(err)?;
        let mut line = event.to_canonical();
        line.push('\n');
        f.write_all(line.as_bytes()).map_err(err)
    }
}

/// Emits to each sink in order; the first failure stops the rest and is returned.
#[derive(Default)]
pub struct CompositeSink {
    pub sinks: Vec<std::sync::Arc<dyn AuditSink>>,
}

impl std::fmt::Debug for CompositeSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompositeSink")
            .field("sinks", &self.sinks.len())
            .finish()
    }
}

impl AuditSink for CompositeSink {
    fn emit(&self, event: &AuditEvent) -> Result<(), AuditError> {
        self.sinks.iter().try_for_each(|s| s.emit(event))
    }
}

/// The hash that precedes the first record.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One stored, chained event.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditRecord {
    /// 1-based position in the log.
    pub seq: u64,
    pub prev_hash: String,
    pub hash: String,
    /// The event JSON as stored.
    pub event: Value,
    /// Its place in its tenant's chain (events with a tenant; absent for events written
    /// before tenant chains existed).
    pub tenant_link: Option<TenantLink>,
}

/// A record's place in its tenant's own chain (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantLink {
    pub tenant: String,
    /// 1-based position in the tenant's chain.
    pub seq: u64,
    pub prev_hash: String,
    pub hash: String,
}

impl TenantLink {
    /// The link after `head` (the tenant's last seq and hash) for an event's canonical text.
    pub fn after(tenant: &str, head: Option<&(u64, String)>, canonical_event: &str) -> Self {
        let (seq, prev_hash) = match head {
            Some((s, h)) => (s + 1, h.clone()),
            None => (1, GENESIS_HASH.to_string()),
        };
        TenantLink {
            tenant: tenant.to_string(),
            seq,
            hash: chain_hash_text(seq, &prev_hash, canonical_event),
            prev_hash,
        }
    }
}

impl AuditRecord {
    /// The typed event.
    pub fn event(&self) -> Result<AuditEvent, AuditError> {
        AuditEvent::from_json(&self.event)
    }

    /// The event id, read from the stored JSON.
    pub fn event_id(&self) -> Option<&str> {
        self.event.get("event_id").and_then(Value::as_str)
    }

    /// The JSON export form: the event's fields plus `seq`, `prev_hash`, `hash`.
    pub fn to_json(&self) -> Value {
        let mut v = self.event.clone();
        if let Some(m) = v.as_object_mut() {
            m.insert("seq".into(), self.seq.into());
            m.insert("prev_hash".into(), self.prev_hash.clone().into());
            m.insert("hash".into(), self.hash.clone().into());
            if let Some(l) = &self.tenant_link {
                m.insert("tenant_seq".into(), l.seq.into());
                m.insert("tenant_prev_hash".into(), l.prev_hash.clone().into());
                m.insert("tenant_hash".into(), l.hash.clone().into());
            }
        }
        v
    }

    /// The record as a position in its tenant's chain (`seq`, `prev_hash` and `hash` from
    /// its [`TenantLink`]), for [`ChainVerifier`].
    fn in_tenant_chain(&self) -> Option<AuditRecord> {
        let l = self.tenant_link.as_ref()?;
        Some(AuditRecord {
            seq: l.seq,
            prev_hash: l.prev_hash.clone(),
            hash: l.hash.clone(),
            event: self.event.clone(),
            tenant_link: None,
        })
    }
}

/// The chain hash of a record: the hex SHA-256 of the canonical JSON of
/// `{"seq": seq, "prev_hash": prev_hash, "event": event}`.
pub fn chain_hash(seq: u64, prev_hash: &str, event: &Value) -> String {
    chain_hash_text(
        seq,
        prev_hash,
        &capability_core::json::canonical_string(event),
    )
}

/// [`chain_hash`] from the event's canonical JSON text (as stored), without building the
/// wrapping object: its canonical form is `{"event":<event>,"prev_hash":"..","seq":n}`.
pub fn chain_hash_text(seq: u64, prev_hash: &str, canonical_event: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut tail = String::with_capacity(prev_hash.len() + 40);
    tail.push_str(",\"prev_hash\":");
    capability_core::json::write_json_string(&mut tail, prev_hash);
    tail.push_str(",\"seq\":");
    if seq <= 1 << 53 {
        tail.push_str(&seq.to_string());
    } else {
        // As JavaScript prints the double it would hold.
        capability_core::json::format_number(seq as f64, &mut tail);
    }
    tail.push('}');
    let mut h = Sha256::new();
    h.update(b"{\"event\":");
    h.update(canonical_event.as_bytes());
    h.update(tail.as_bytes());
    hex::encode(h.finalize())
}

/// The first record that breaks the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadRecord {
    /// The seq where the problem shows.
    pub seq: u64,
    pub event_id: Option<String>,
    pub problem: String,
}

/// What [`verify_chain`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyReport {
    pub ok: bool,
    /// Records checked.
    pub records: u64,
    pub head_seq: Option<u64>,
    pub first_bad: Option<BadRecord>,
    /// Records of dead processes' journals that could not be read and are kept in
    /// quarantine (set by the caller that knows the home; `ok` is false while any are).
    pub quarantined: u64,
    /// The check against the newest checkpoint a witness outside the home keeps (set by
    /// the caller that knows the witness; `ok` is false when it fails).
    pub witness: Option<Value>,
    /// The record the verification started after (a checkpoint's, [`verify_after`]);
    /// `None` when it started at the first record.
    pub since: Option<u64>,
}

impl VerifyReport {
    pub fn to_json(&self) -> Value {
        json!({
            "ok": self.ok,
            "records": self.records,
            "headSeq": self.head_seq,
            "firstBad": self.first_bad.as_ref().map(|b| json!({
                "seq": b.seq,
                "eventId": b.event_id,
                "problem": b.problem,
            })),
            "quarantined": self.quarantined,
            "witness": self.witness,
            "since": self.since,
        })
    }
}

/// Incremental chain verification (records in seq order, then [`ChainVerifier::finish`]).
///
/// The tenant links of the records are checked on the way: each tenant's links must go
/// 1, 2, 3, … in log order, each linking to the previous one.
#[derive(Debug)]
pub struct ChainVerifier {
    expected_seq: u64,
    prev_hash: String,
    checked: u64,
    first_bad: Option<BadRecord>,
    /// Per tenant: the last tenant seq and hash seen.
    tenants: BTreeMap<String, (u64, String)>,
    /// Where a verifier made by [`ChainVerifier::after`] started.
    since: Option<u64>,
}

impl Default for ChainVerifier {
    fn default() -> Self {
        ChainVerifier {
            expected_seq: 1,
            prev_hash: GENESIS_HASH.to_string(),
            checked: 0,
            first_bad: None,
            tenants: BTreeMap::new(),
            since: None,
        }
    }
}

impl ChainVerifier {
    pub fn new() -> Self {
        Self::default()
    }

    /// A verifier that continues after record `seq` with hash `hash`: the next record must be
    /// `seq + 1` and link to `hash`. Tenants' chains are taken to start where their first
    /// link says unless set beforehand (as [`verify_after`] does).
    pub fn after(seq: u64, hash: &str) -> Self {
        ChainVerifier {
            expected_seq: seq + 1,
            prev_hash: hash.to_string(),
            since: Some(seq),
            ..Self::default()
        }
    }

    /// Checks the next record; returns `false` once a bad record was found.
    pub fn push(&mut self, r: &AuditRecord) -> bool {
        if self.first_bad.is_some() {
            return false;
        }
        self.checked += 1;
        let bad = |problem: String| BadRecord {
            seq: r.seq,
            event_id: r.event_id().map(str::to_string),
            problem,
        };
        // The event's canonical text, made once for the chain's hash and the tenant's.
        let canonical = capability_core::json::canonical_string(&r.event);
        let problem = if r.seq != self.expected_seq {
            Some(if r.seq > self.expected_seq {
                BadRecord {
                    seq: self.expected_seq,
                    event_id: None,
                    problem: format!(
                        "record {} is missing (the next record is {}): records were removed",
                        self.expected_seq, r.seq
                    ),
                }
            } else {
                bad(format!(
                    "sequence goes back from {} to {}: records were reordered or duplicated",
                    self.expected_seq - 1,
                    r.seq
                ))
            })
        } else if r.prev_hash != self.prev_hash {
            Some(bad(format!(
                "prev_hash does not link to record {}: records were reordered, inserted or removed",
                r.seq - 1
            )))
        } else if chain_hash_text(r.seq, &r.prev_hash, &canonical) != r.hash {
            Some(bad(
                "hash does not match the content: the record was edited".into(),
            ))
        } else {
            r.tenant_link.as_ref().and_then(|l| {
                let expected = TenantLink::after(
                    &l.tenant,
                    self.tenants.get(&l.tenant),
                    &canonical,
                );
                let owner = r.event.get("tenant_id").and_then(Value::as_str);
                (expected != *l || owner != Some(l.tenant.as_str())).then(|| {
                    bad(format!(
                        "its link into the chain of tenant {} is broken (expected position {}): the tenant's records were edited, removed or reordered",
                        l.tenant, expected.seq
                    ))
                })
            })
        };
        if let Some(p) = problem {
            self.first_bad = Some(p);
            return false;
        }
        self.expected_seq = r.seq + 1;
        self.prev_hash.clone_from(&r.hash);
        if let Some(l) = &r.tenant_link {
            self.tenants
                .insert(l.tenant.clone(), (l.seq, l.hash.clone()));
        }
        true
    }

    /// Compares the end of the chain with the stored head.
    pub fn finish(mut self, head: Option<(u64, String)>) -> VerifyReport {
        if self.first_bad.is_none() {
            let last_seq = self.expected_seq - 1;
            match &head {
                Some((seq, hash)) if *seq != last_seq || *hash != self.prev_hash => {
                    self.first_bad = Some(BadRecord {
                        seq: last_seq + 1,
                        event_id: None,
                        problem: format!(
                            "the log ends at record {last_seq} but its head is record {seq}: records were removed from the end or the head was altered"
                        ),
                    });
                }
                None if last_seq > 0 => {
                    self.first_bad = Some(BadRecord {
                        seq: last_seq,
                        event_id: None,
                        problem: "the log has records but no head".into(),
                    });
                }
                _ => {}
            }
        }
        VerifyReport {
            ok: self.first_bad.is_none(),
            records: self.checked,
            head_seq: head.map(|(s, _)| s),
            first_bad: self.first_bad,
            quarantined: 0,
            witness: None,
            since: self.since,
        }
    }
}

/// Verifies a whole chain held in memory.
pub fn verify_chain(records: &[AuditRecord], head: Option<(u64, String)>) -> VerifyReport {
    let mut v = ChainVerifier::new();
    for r in records {
        if !v.push(r) {
            break;
        }
    }
    v.finish(head)
}

/// Persistence of the chained audit log.
/// Which audit events to read ([`AuditStore::query`]): every filter is a column the stores
/// index (tenant, agent, capability, decision, time), so a page costs the same however long
/// the log is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditQuery {
    pub tenant: Option<String>,
    pub agent: Option<String>,
    pub capability: Option<String>,
    /// A decision type (`allow`, `deny`, ...).
    pub decision: Option<String>,
    /// Events at or after this ISO-8601 time.
    pub since: Option<String>,
    /// Events before this ISO-8601 time.
    pub until: Option<String>,
    /// Only events older than this position (`seq`): the cursor of the next page.
    pub before: Option<u64>,
    /// The most events to return.
    pub limit: usize,
}

impl AuditQuery {
    /// Whether the query has a time range (`since` or `until`): its pages are then the
    /// newest by (timestamp, seq), and `before` means "after this record in that order",
    /// so that a page is read from the time index without sorting the whole range. The log
    /// is written in time order, so this is the seq order except for events of concurrent
    /// writers a few milliseconds apart.
    pub fn time_ordered(&self) -> bool {
        self.since.is_some() || self.until.is_some()
    }

    /// Whether `record` matches the filters (not the cursor or the limit).
    pub fn matches(&self, record: &AuditRecord) -> bool {
        let field = |k: &str| record.event.get(k).and_then(Value::as_str);
        let is =
            |want: &Option<String>, k: &str| want.as_deref().is_none_or(|w| field(k) == Some(w));
        let time = field("timestamp").unwrap_or_default();
        is(&self.tenant, "tenant_id")
            && is(&self.agent, "agent_id")
            && is(&self.capability, "capability_name")
            && is(&self.decision, "decision")
            && self.since.as_deref().is_none_or(|s| time >= s)
            && self.until.as_deref().is_none_or(|u| time < u)
    }
}

pub trait AuditStore: Send + Sync {
    /// The newest `query.limit` records that match `query` (older than `query.before` when
    /// given), newest first (by seq; with a time range by timestamp and seq, see
    /// [`AuditQuery::time_ordered`]).
    fn query(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError>;
    /// Appends events atomically, chaining them; returns their records.
    fn append(&self, events: &[AuditEvent]) -> Result<Vec<AuditRecord>, StoreError>;
    /// The last `limit` records (optionally of one tenant), oldest first.
    fn tail(&self, tenant: Option<&str>, limit: usize) -> Result<Vec<AuditRecord>, StoreError>;
    /// The record of an event id.
    fn get(&self, event_id: &str) -> Result<Option<AuditRecord>, StoreError>;
    /// Up to `limit` records with `seq >= from_seq`, in seq order.
    fn records(&self, from_seq: u64, limit: usize) -> Result<Vec<AuditRecord>, StoreError>;
    /// The head: last seq and hash.
    fn head(&self) -> Result<Option<(u64, String)>, StoreError>;
    /// Up to `limit` records of `tenant` with `tenant_seq >= from_seq`, in the tenant
    /// chain's order (records without a [`TenantLink`] are not in it).
    fn tenant_records(
        &self,
        tenant: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError>;
    /// The head of a tenant's chain: its last tenant seq and hash.
    fn tenant_head(&self, tenant: &str) -> Result<Option<(u64, String)>, StoreError>;
    /// The tenant link of `tenant`'s last record with a seq below `before`: where the
    /// tenant's chain stood just before record `before` (`None`: nothing of it yet). Lets a
    /// verification start in the middle of the log ([`verify_after`]).
    fn tenant_link_before(
        &self,
        tenant: &str,
        before: u64,
    ) -> Result<Option<TenantLink>, StoreError>;
    /// Records that a checkpoint of the head (`seq`, `hash`) was issued; returns its counter
    /// (1 for the first, then one more each time). See [`crate::checkpoint`].
    fn record_checkpoint(&self, seq: u64, hash: &str, created_at: &str) -> Result<u64, StoreError>;
    /// How many checkpoints this store has issued.
    fn checkpoints_issued(&self) -> Result<u64, StoreError>;
}

/// The records read at a time when a chain is verified.
const VERIFY_PAGE: usize = 1000;

/// Verifies a store's whole chain, page by page.
pub fn verify_store(store: &dyn AuditStore) -> Result<VerifyReport, StoreError> {
    verify_pages(store, ChainVerifier::new(), 0)
}

/// Verifies the chain from record `seq + 1` on, given that record `seq` has hash `hash`
/// (a checkpoint's head, already checked against the log): reads only the records after it,
/// so the cost is that of the records since. Each tenant's links are checked from where the
/// tenant's chain stood at `seq` ([`AuditStore::tenant_link_before`]). The report counts the
/// records checked; records up to `seq` are not read (see [`crate::checkpoint`]).
pub fn verify_after(
    store: &dyn AuditStore,
    seq: u64,
    hash: &str,
) -> Result<VerifyReport, StoreError> {
    verify_pages(store, ChainVerifier::after(seq, hash), seq + 1)
}

/// Feeds `v` the records from `from` on, a page at a time, until the end or the first bad
/// one. When `from` is past the first record, each tenant's chain is first set to where it
/// stood just before `from` (the tenant's last link before it), as it is met.
fn verify_pages(
    store: &dyn AuditStore,
    mut v: ChainVerifier,
    mut from: u64,
) -> Result<VerifyReport, StoreError> {
    let start = from;
    let head = store.head()?;
    let mut seeded = std::collections::BTreeSet::new();
    loop {
        let page = store.records(from, VERIFY_PAGE)?;
        let Some(last) = page.last() else { break };
        from = last.seq + 1;
        for r in &page {
            if start > 1
                && let Some(l) = &r.tenant_link
                && seeded.insert(l.tenant.clone())
                && let Some(before) = store.tenant_link_before(&l.tenant, start)?
            {
                v.tenants.insert(before.tenant, (before.seq, before.hash));
            }
            if !v.push(r) {
                return Ok(v.finish(head));
            }
        }
        if page.len() < VERIFY_PAGE {
            break;
        }
    }
    Ok(v.finish(head))
}

/// Verifies one tenant's chain from that tenant's records alone, page by page; positions
/// in the report are positions in the tenant's chain (`tenant_seq`).
pub fn verify_tenant(store: &dyn AuditStore, tenant: &str) -> Result<VerifyReport, StoreError> {
    const PAGE: usize = VERIFY_PAGE;
    let head = store.tenant_head(tenant)?;
    let mut v = ChainVerifier::new();
    let mut from = 0u64;
    loop {
        let page = store.tenant_records(tenant, from, PAGE)?;
        let Some(last) = page.last().and_then(|r| r.tenant_link.as_ref()) else {
            break;
        };
        from = last.seq + 1;
        let n = page.len();
        for r in &page {
            let owner = r.event.get("tenant_id").and_then(Value::as_str);
            let view = r.in_tenant_chain().filter(|_| owner == Some(tenant));
            let Some(view) = view else {
                v.first_bad = Some(BadRecord {
                    seq: r.tenant_link.as_ref().map_or(0, |l| l.seq),
                    event_id: r.event_id().map(str::to_string),
                    problem: format!("the event does not belong to tenant {tenant}"),
                });
                return Ok(v.finish(head));
            };
            if !v.push(&view) {
                return Ok(v.finish(head));
            }
        }
        if n < PAGE {
            break;
        }
    }
    Ok(v.finish(head))
}

/// Writes records as JSON lines (event fields plus `seq`, `prev_hash`, `hash`).
pub fn export_jsonl(records: &[AuditRecord], out: &mut dyn Write) -> std::io::Result<()> {
    for r in records {
        let mut line = capability_core::json::canonical_string(&r.to_json());
        line.push('\n');
        out.write_all(line.as_bytes())?;
    }
    Ok(())
}

fn otel_value(v: &Value) -> Value {
    match v {
        Value::String(s) => json!({"stringValue": s}),
        Value::Bool(b) => json!({"boolValue": b}),
        Value::Number(n) => match n.as_i64() {
            Some(i) => json!({"intValue": i.to_string()}),
            None => json!({"doubleValue": n.as_f64()}),
        },
        Value::Array(items) => {
            json!({"arrayValue": {"values": items.iter().map(otel_value).collect::<Vec<_>>()}})
        }
        Value::Object(m) => {
            json!({"kvlistValue": {"values": m.iter().map(|(k, v)| json!({"key": k, "value": otel_value(v)})).collect::<Vec<_>>()}})
        }
        Value::Null => json!({}),
    }
}

/// 32 (trace) or 16 (span) hex characters from a Brane id (`tr_<32 hex>`, `act_<32 hex>`);
/// ids without that shape are hashed.
fn otel_id(id: &str, len: usize) -> String {
    let hex = id.rsplit('_').next().unwrap_or(id);
    if hex.len() >= len && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        hex[..len].to_ascii_lowercase()
    } else {
        capability_core::json::sha256_hex(id.as_bytes())[..len].to_string()
    }
}

/// The trace id and parent span id of a valid W3C `traceparent` header
/// (`<version>-<32 hex trace id>-<16 hex span id>-<2 hex flags>`, lowercase, ids not all
/// zeros, version not `ff`); `None` for anything else.
pub fn parse_traceparent(header: &str) -> Option<(&str, &str)> {
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let mut parts = header.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let ok = hex(version, 2)
        && version != "ff"
        // Version 00 has exactly four fields; later versions may add more.
        && (version != "00" || parts.next().is_none())
        && hex(trace, 32)
        && trace.bytes().any(|b| b != b'0')
        && hex(span, 16)
        && span.bytes().any(|b| b != b'0')
        && hex(flags, 2);
    ok.then_some((trace, span))
}

/// Unix nanoseconds of an ISO-8601 UTC timestamp (`YYYY-MM-DDTHH:MM:SS(.mmm)Z`).
fn unix_nanos(iso: &str) -> Option<i128> {
    let b = iso.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| iso.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let millis = if b.get(19) == Some(&b'.') {
        num(20..23).unwrap_or(0)
    } else {
        0
    };
    let days = capability_core::js::days_from_civil(y, mo as u32, d as u32);
    let secs = days * 86_400 + h * 3600 + mi * 60 + s;
    Some(i128::from(secs) * 1_000_000_000 + i128::from(millis) * 1_000_000)
}

/// OTLP-JSON logs (`{"resourceLogs": [...]}`): one log record per event, body the event
/// summary, attributes the event fields, trace and span ids from the trace and action ids
/// (or, for an event whose `metadata.traceparent` is a valid W3C header, the header's
/// trace id and the caller's span id).
pub fn export_otel(records: &[AuditRecord], service_name: &str) -> Value {
    let logs: Vec<Value> = records
        .iter()
        .map(|r| {
            let e = &r.event;
            let get = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("");
            let outcome = get("outcome");
            let (severity, text) = match outcome {
                "execution_failed" => (17, "ERROR"),
                "denied_before_execution" | "denied_after_execution" => (13, "WARN"),
                _ => (9, "INFO"),
            };
            let nanos = unix_nanos(get("timestamp")).unwrap_or(0).to_string();
            let traceparent = e
                .pointer("/metadata/traceparent")
                .and_then(Value::as_str)
                .and_then(parse_traceparent);
            let mut attributes = vec![
                json!({"key": "audit.seq", "value": {"intValue": r.seq.to_string()}}),
                json!({"key": "audit.hash", "value": {"stringValue": r.hash}}),
            ];
            if let Some(l) = &r.tenant_link {
                attributes.push(
                    json!({"key": "audit.tenant_seq", "value": {"intValue": l.seq.to_string()}}),
                );
                attributes
                    .push(json!({"key": "audit.tenant_hash", "value": {"stringValue": l.hash}}));
            }
            if let Some(m) = e.as_object() {
                for (k, v) in m {
                    if v.is_null() {
                        continue;
                    }
                    attributes
                        .push(json!({"key": format!("capability.{k}"), "value": otel_value(v)}));
                }
            }
            json!({
                "timeUnixNano": nanos,
                "observedTimeUnixNano": nanos,
                "severityNumber": severity,
                "severityText": text,
                "body": {"stringValue": format!(
                    "{} {} {}: {}", get("capability_name"), get("stage"), get("decision"), outcome
                )},
                "attributes": attributes,
                "traceId": traceparent.map_or_else(|| otel_id(get("trace_id"), 32), |(t, _)| t.to_string()),
                "spanId": traceparent.map_or_else(|| otel_id(get("action_id"), 16), |(_, s)| s.to_string()),
            })
        })
        .collect();
    json!({"resourceLogs": [{
        "resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": service_name}},
        ]},
        "scopeLogs": [{
            "scope": {"name": "capability-policy.audit", "version": env!("CARGO_PKG_VERSION")},
            "logRecords": logs,
        }],
    }]})
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::GovernedCapability;

    fn sample(full: bool) -> AuditEvent {
        let cap = Arc::new(GovernedCapability::new("svc.x", CapabilityKind::McpTool));
        let mut a = AgentAction::new(ActionType::ToolCall, cap, "agent \"7\"\n").input(
            json!({"b": 1, "a": [1.5, -0.0, 1e21, "é"], "10": null, "9": {"z": 1, "__proto__": 2}}),
        );
        if full {
            a = a
                .tenant("acme")
                .principal("p")
                .parent("act_parent")
                .plan_fingerprint("f".repeat(64))
                .input_summary("in")
                .label("b", "2")
                .label("10", "ten")
                .label("9", "nine")
                .label("é", "e")
                .label("\u{1F600}", "smile")
                .label("\u{FF61}", "halfwidth")
                .label("__proto__", "x")
                .meta(
                    "z",
                    json!({"y": [1, {"b": 2, "a": 1}], "x": "\u{7f}\u{1f}"}),
                )
                .meta("__proto__", json!(1))
                .meta("1", json!(true))
                .meta("a", json!(12345678901234567890u64));
            a.output_summary = Some("out".into());
        }
        let mut d = Decision::deny("no \\ way").with_code("c");
        d.policy_id = Some("p1".into());
        d.policy_name = Some("name".into());
        d.policy_version = Some("v".into());
        let mut e = AuditEvent::new(&a, &d, Stage::AfterCapability, AuditOutcome::Executed);
        if full {
            e.receipt_id = Some("rcpt".into());
            e.approval_id = Some("apr".into());
            e.shadow = Some(DecisionType::Redact);
            e.redacted = vec!["/a".into(), "/b/*".into()];
            e.policy_ids = vec!["p1".into(), "p2".into()];
            e.input = Some(a.input.clone());
            e.output = Some(json!({"ok": true, "n": 0.1}));
        } else {
            e.policy_ids.clear();
            e.reason = None;
            e.code = None;
            e.policy_name = None;
            e.policy_version = None;
        }
        e
    }

    #[test]
    fn traceparent_headers_are_parsed_strictly() {
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
        let span = "00f067aa0ba902b7";
        assert_eq!(
            parse_traceparent(&format!("00-{trace}-{span}-01")),
            Some((trace, span))
        );
        assert_eq!(
            parse_traceparent(&format!("01-{trace}-{span}-00-later")),
            Some((trace, span))
        );
        for bad in [
            format!("00-{trace}-{span}-01-extra"),
            format!("ff-{trace}-{span}-01"),
            format!("00-{}-{span}-01", "0".repeat(32)),
            format!("00-{trace}-{}-01", "0".repeat(16)),
            format!("00-{}-{span}-01", trace.to_uppercase()),
            format!("00-{trace}-{span}"),
            format!("00-{}-{span}-01", &trace[1..]),
            "tr_0123".to_string(),
        ] {
            assert_eq!(parse_traceparent(&bad), None, "{bad}");
        }
    }

    #[test]
    fn direct_canonical_text_matches_the_generic_writer() {
        for full in [false, true] {
            let e = sample(full);
            assert_eq!(
                e.to_canonical(),
                capability_core::json::canonical_string(&e.to_json()),
                "full: {full}"
            );
        }
    }

    #[test]
    fn chain_hash_from_text_matches_the_wrapped_object() {
        let e = sample(true).to_json();
        for (seq, prev) in [
            (1u64, GENESIS_HASH),
            (42, "ab\"c"),
            (1 << 53, "x"),
            ((1 << 53) + 2, "y"),
            (u64::MAX, "z"),
        ] {
            let expected = capability_core::json::canonical_hash(&json!({
                "seq": seq,
                "prev_hash": prev,
                "event": e,
            }));
            assert_eq!(chain_hash(seq, prev, &e), expected, "seq {seq}");
            assert_eq!(
                chain_hash_text(seq, prev, &capability_core::json::canonical_string(&e)),
                expected
            );
        }
    }
}
