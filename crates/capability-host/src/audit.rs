//! The audit log as every surface serves it: queries over indexed columns with cursor
//! paging, single events, chain verification (whole, per tenant, against a signed
//! checkpoint), checkpoints, and export (JSON lines streamed page by page, or an
//! OpenTelemetry logs document). Reads need a principal that may read ([`Access::Read`]).

use std::io::Write;

use capability_policy::AuditQuery;
use capability_policy::audit::{self, AuditRecord, VerifyReport};
use capability_policy::checkpoint::{Checkpoint, CheckpointReport};
use serde_json::{Value, json};

use crate::Host;
use crate::error::{Forbidden, HostError, InvalidRequest, NotFound, StoreError};
use crate::principal::{Access, Principal};

/// The largest page a query returns.
pub const MAX_PAGE: usize = 10_000;

/// Audit filters as a surface receives them (text), checked into an [`AuditQuery`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub tenant: Option<String>,
    pub agent: Option<String>,
    pub capability: Option<String>,
    pub decision: Option<String>,
    /// ISO-8601: events at or after.
    pub since: Option<String>,
    /// ISO-8601: events before.
    pub until: Option<String>,
    /// The cursor of a previous page ([`AuditPage::next`]).
    pub before: Option<u64>,
    /// At most this many (default 100, at most [`MAX_PAGE`]).
    pub limit: Option<usize>,
}

impl AuditFilter {
    /// The query, or why the filters are not valid (a date that is not ISO-8601, a zero
    /// limit, a decision that is not one of the nine).
    pub fn query(&self) -> Result<AuditQuery, InvalidRequest> {
        let text = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
        for (key, value) in [("since", &self.since), ("until", &self.until)] {
            if let Some(t) = text(value)
                && !capability_core::dates::is_date_string(&t)
            {
                return Err(InvalidRequest::new(format!(
                    "{key} must be an ISO 8601 date, not {t:?}"
                )));
            }
        }
        if let Some(d) = text(&self.decision)
            && capability_policy::DecisionType::parse(&d).is_err()
        {
            return Err(InvalidRequest::new(format!(
                "decision {d:?} is not one of allow, deny, approval_required, redact, \
                 transform_input, transform_output, route, sandbox, log_only"
            )));
        }
        let limit = match self.limit {
            Some(0) => return Err(InvalidRequest::new("limit must be a positive integer")),
            Some(n) => n.min(MAX_PAGE),
            None => 100,
        };
        Ok(AuditQuery {
            tenant: text(&self.tenant),
            agent: text(&self.agent),
            capability: text(&self.capability),
            decision: text(&self.decision),
            since: text(&self.since),
            until: text(&self.until),
            before: self.before,
            limit,
        })
    }
}

/// One page of a query: the events oldest first, and the cursor of the page of older
/// events when there may be one.
#[derive(Clone, Debug, Default)]
pub struct AuditPage {
    pub events: Vec<AuditRecord>,
    pub next: Option<u64>,
}

impl AuditPage {
    /// `{"events": [...], "next": cursor | null}`.
    pub fn to_json(&self) -> Value {
        json!({
            "events": self.events.iter().map(AuditRecord::to_json).collect::<Vec<_>>(),
            "next": self.next,
        })
    }
}

/// How the log is exported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// One canonical JSON record per line.
    Jsonl,
    /// An OpenTelemetry logs document (`resourceLogs`).
    Otel,
}

impl ExportFormat {
    /// `jsonl` or `otel`.
    pub fn parse(s: &str) -> Result<ExportFormat, InvalidRequest> {
        match s {
            "jsonl" => Ok(ExportFormat::Jsonl),
            "otel" => Ok(ExportFormat::Otel),
            other => Err(InvalidRequest::new(format!(
                "format must be jsonl or otel, not {other:?}"
            ))),
        }
    }
}

fn may_read(principal: &Principal) -> Result<(), Forbidden> {
    if principal.may(Access::Read) {
        Ok(())
    } else {
        Err(Forbidden::new(
            principal.name(),
            format!(
                "(role {}) may not read the audit log",
                principal.role().as_str()
            ),
        ))
    }
}

/// A principal limited to some tenants may read only those tenants' records: naming another
/// tenant is refused; the whole log (every tenant's and the tenant-less records) is its one
/// tenant's part when it has one, else refused. Returns the tenant to read.
fn tenant_to_read(
    principal: &Principal,
    tenant: Option<&str>,
) -> Result<Option<String>, Forbidden> {
    may_read(principal)?;
    match (principal.tenant_scope(), tenant) {
        (None, t) => Ok(t.map(str::to_string)),
        (Some(scope), Some(t)) if scope.contains(t) => Ok(Some(t.to_string())),
        (Some(_), Some(t)) => Err(Forbidden::new(
            principal.name(),
            format!("may not read the audit records of tenant `{t}`"),
        )),
        (Some(scope), None) if scope.len() == 1 => Ok(scope.iter().next().cloned()),
        (Some(_), None) => Err(Forbidden::new(
            principal.name(),
            "reads the audit records of its tenants only: name one with `tenant`",
        )),
    }
}

/// Checkpoints cover the whole chain: only a principal that reads every tenant's records
/// takes or checks them.
fn may_read_whole(principal: &Principal) -> Result<(), Forbidden> {
    may_read(principal)?;
    match principal.tenant_scope() {
        None => Ok(()),
        Some(_) => Err(Forbidden::new(
            principal.name(),
            "reads the audit records of its tenants only, not the whole chain's checkpoints",
        )),
    }
}

/// The tenant of a stored record.
fn tenant_of(record: &AuditRecord) -> Option<&str> {
    record.event.get("tenant_id").and_then(Value::as_str)
}

fn audit_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::new("audit log", e)
}

impl Host {
    /// The newest events that match `query` (older than its cursor), oldest first.
    pub fn audit_query(
        &self,
        principal: &Principal,
        query: &AuditQuery,
    ) -> Result<AuditPage, HostError> {
        may_read(principal)?;
        let (mut events, next) = match (principal.tenant_scope(), &query.tenant) {
            (None, _) => self.query_page(query)?,
            (Some(_), Some(t)) => {
                tenant_to_read(principal, Some(t))?;
                self.query_page(query)?
            }
            // Each of its tenants' newest events, merged: the newest `limit` of them.
            (Some(scope), None) => {
                let mut merged = Vec::new();
                let mut more = false;
                for t in scope {
                    let mut q = query.clone();
                    q.tenant = Some(t.clone());
                    let (page, next) = self.query_page(&q)?;
                    more |= next.is_some();
                    merged.extend(page);
                }
                if query.time_ordered() {
                    let time = |r: &AuditRecord| {
                        r.event
                            .get("timestamp")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string()
                    };
                    merged.sort_by_cached_key(|r| std::cmp::Reverse((time(r), r.seq)));
                } else {
                    merged.sort_by_key(|r| std::cmp::Reverse(r.seq));
                }
                more |= merged.len() > query.limit;
                merged.truncate(query.limit);
                let next = more.then(|| merged.last().map(|r| r.seq)).flatten();
                (merged, next)
            }
        };
        events.reverse();
        Ok(AuditPage { events, next })
    }

    /// The newest records of `query`, newest first, and the cursor of the next page.
    fn query_page(&self, query: &AuditQuery) -> Result<(Vec<AuditRecord>, Option<u64>), HostError> {
        let events = self.audit.query(query).map_err(audit_err)?;
        let next = (events.len() == query.limit && query.limit > 0)
            .then(|| events.last().map(|r| r.seq))
            .flatten();
        Ok((events, next))
    }

    /// One event with its chain position and hashes (an event of a tenant the principal may
    /// not read answers as a missing one).
    pub fn audit_event(&self, principal: &Principal, id: &str) -> Result<AuditRecord, HostError> {
        may_read(principal)?;
        self.audit
            .get(id)
            .map_err(audit_err)?
            .filter(|r| match principal.tenant_scope() {
                None => true,
                Some(scope) => tenant_of(r).is_some_and(|t| scope.contains(t)),
            })
            .ok_or_else(|| NotFound::new("audit event", id).into())
    }

    /// Verifies the hash chain (with each tenant's links on the way), or one tenant's chain
    /// from that tenant's records alone; not ok while audit records of dead processes'
    /// journals are kept in quarantine (`quarantined`). With a witness, the log must still
    /// extend the witness's newest checkpoint (`witness`), and the whole chain's
    /// verification starts there: only the records appended since are read (see
    /// [`Host::verify_audit_with`]).
    pub fn verify_audit(
        &self,
        principal: &Principal,
        tenant: Option<&str>,
    ) -> Result<VerifyReport, HostError> {
        self.verify_audit_with(principal, tenant, false)
    }

    /// [`Host::verify_audit`]; with `full`, every record of the chain is verified even when
    /// a witnessed checkpoint would let the verification start there (an edit of a record
    /// before the checkpoint that left the checkpoint's record in place is found only so).
    /// `records` in the report counts the records checked: with a checkpoint, those after
    /// it.
    pub fn verify_audit_with(
        &self,
        principal: &Principal,
        tenant: Option<&str>,
        full: bool,
    ) -> Result<VerifyReport, HostError> {
        let tenant = tenant_to_read(principal, tenant)?;
        let store = self.audit.as_ref();
        let (report, witness) = match (tenant.as_deref(), &self.anchor) {
            (Some(t), anchor) => (
                audit::verify_tenant(store, t),
                anchor.as_ref().map(|a| a.check()),
            ),
            (None, None) => (audit::verify_store(store), None),
            (None, Some(anchor)) if full => (audit::verify_store(store), Some(anchor.check())),
            (None, Some(anchor)) => match anchor.checkpoint() {
                Ok(Some(c)) => {
                    let r =
                        capability_policy::checkpoint::verify_since(store, c).map_err(audit_err)?;
                    let check = anchor.check_json(Ok(Some((r.checkpoint, r.problem))));
                    (Ok(r.chain), Some(check))
                }
                other => (
                    audit::verify_store(store),
                    Some(anchor.check_json(other.map(|_| None))),
                ),
            },
        };
        let mut report = report.map_err(audit_err)?;
        // Events kept in quarantine never joined the chain: the log is not whole while any
        // are (whatever their tenant, which cannot be read).
        let quarantined = self
            .quarantined()
            .map_err(|e| audit_err(format!("quarantine: {e}")))?;
        report.quarantined = u64::try_from(quarantined.audit_events).unwrap_or(u64::MAX);
        report.ok &= report.quarantined == 0;
        // A log cut short, rebuilt or rolled back since the witness's newest checkpoint.
        if let Some(check) = witness {
            report.ok &= check["ok"] == true;
            report.witness = Some(check);
        }
        Ok(report)
    }

    /// A signed checkpoint of the chain's head (see `capability_policy::checkpoint`), to be
    /// kept elsewhere and given to [`Host::verify_audit_against`] later.
    pub fn audit_checkpoint(&self, principal: &Principal) -> Result<Value, HostError> {
        may_read_whole(principal)?;
        let now = capability_core::js::now_iso();
        capability_policy::checkpoint::take(self.audit.as_ref(), self.approvals.key(), &now)
            .map_err(|e| audit_err(e).into())
    }

    /// Verifies the chain and that it still extends a checkpoint signed by this home's key
    /// (truncation, a rebuilt chain and an older database all fail).
    pub fn verify_audit_against(
        &self,
        principal: &Principal,
        checkpoint: &Value,
    ) -> Result<CheckpointReport, HostError> {
        may_read_whole(principal)?;
        let checkpoint = Checkpoint::verify(checkpoint, self.approvals.key())
            .map_err(|e| InvalidRequest::new(format!("checkpoint: {e}")))?;
        capability_policy::checkpoint::verify_against(self.audit.as_ref(), checkpoint)
            .map_err(|e| audit_err(e).into())
    }

    /// Writes every event (with `tenant`: that tenant's chain, in its order) to `out`;
    /// returns how many. JSON lines are written a page at a time.
    pub fn export_audit(
        &self,
        principal: &Principal,
        tenant: Option<&str>,
        format: ExportFormat,
        service_name: &str,
        out: &mut dyn Write,
    ) -> Result<usize, HostError> {
        let tenant = tenant_to_read(principal, tenant)?;
        let tenant = tenant.as_deref();
        let io = |e: std::io::Error| audit_err(format!("export: {e}"));
        let mut count = 0;
        let mut kept = Vec::new();
        let mut from = 0u64;
        loop {
            let page = match tenant {
                Some(t) => self.audit.tenant_records(t, from, 1000),
                None => self.audit.records(from, 1000),
            }
            .map_err(audit_err)?;
            let Some(last) = page.last() else { break };
            from = match (tenant, &last.tenant_link) {
                (Some(_), Some(l)) => l.seq + 1,
                (Some(_), None) => break,
                (None, _) => last.seq + 1,
            };
            count += page.len();
            match format {
                ExportFormat::Jsonl => audit::export_jsonl(&page, out).map_err(io)?,
                ExportFormat::Otel => kept.extend(page),
            }
        }
        if format == ExportFormat::Otel {
            let mut text =
                capability_core::json::to_pretty_string(&audit::export_otel(&kept, service_name));
            text.push('\n');
            out.write_all(text.as_bytes()).map_err(io)?;
        }
        out.flush().map_err(io)?;
        Ok(count)
    }
}

/// `verify_audit_against`'s report as JSON: the chain's report, `ok` for both, and the
/// checkpoint with its own `ok` and `problem`.
pub fn checkpoint_report_json(report: &CheckpointReport) -> Value {
    let mut out = report.chain.to_json();
    out["ok"] = Value::Bool(report.ok());
    out["checkpoint"] = json!({
        "seq": report.checkpoint.seq,
        "counter": report.checkpoint.counter,
        "createdAt": report.checkpoint.created_at,
        "ok": report.problem.is_none(),
        "problem": report.problem,
    });
    out
}
