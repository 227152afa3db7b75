//! Approvals as every surface serves them: listed and shown to the principals that may see
//! them, decided by the one rule, and their changes streamed.
//!
//! * [`Host::approvals`] and [`Host::approval`] need a principal that reads or decides; an
//!   approver sees the approvals of its tenants only, and one of another tenant answers
//!   exactly as a missing one (no existence oracle).
//! * [`Host::decide_approval`] is the one rule (`capability_policy::Decider::check`): the
//!   principal's role decides approvals, the approval is of one of its tenants, and the
//!   principal did not ask for it — its id, name and agent id are each compared with the
//!   approval's requester and agent. The CLI (the operator), the HTTP API and the console
//!   all decide through it.
//! * [`Host::approval_events`]: see [`crate::events`].
//! * [`approval_document`]: the `{"approval": {...}}` document of a pending approval, the
//!   one shape every surface answers a call that waits for a human with.

use capability_policy::approvals::{ApprovalFilter, ApprovalRecord};
use capability_policy::{ApprovalDecision, Decided};
use capability_runtime::PendingApproval;
use serde_json::{Value, json};

use crate::Host;
use crate::error::{Forbidden, HostError, NotFound};
use crate::events::ApprovalEvents;
use crate::principal::{Access, Principal};

/// Approvals a principal may see, and the stored records that could not be read.
#[derive(Clone, Debug, Default)]
pub struct ApprovalList {
    pub approvals: Vec<ApprovalRecord>,
    /// One message per stored record left out because it could not be read.
    pub skipped: Vec<String>,
}

fn may_read(principal: &Principal) -> Result<(), Forbidden> {
    if principal.may(Access::Read) || principal.may(Access::Decide) {
        Ok(())
    } else {
        Err(Forbidden::new(
            principal.name(),
            format!(
                "(role {}) may not read approvals",
                principal.role().as_str()
            ),
        ))
    }
}

impl Host {
    /// Approvals `principal` may see, newest first (pending ones past their expiry are
    /// marked expired first).
    pub fn approvals(
        &self,
        principal: &Principal,
        filter: &ApprovalFilter,
    ) -> Result<ApprovalList, HostError> {
        may_read(principal)?;
        self.approvals.expire_stale()?;
        // An approver sees its tenants only: read them all and keep its own, then cut.
        let scoped =
            principal.role() == crate::Role::Approver && !principal.tenants().contains("*");
        let read = ApprovalFilter {
            limit: if scoped { None } else { filter.limit },
            ..filter.clone()
        };
        let (mut approvals, skipped) = self.approvals.list_checked(&read)?;
        approvals.retain(|r| principal.sees_tenant(r.tenant.as_deref()));
        if let Some(limit) = filter.limit {
            approvals.truncate(limit);
        }
        Ok(ApprovalList { approvals, skipped })
    }

    /// One approval, if `principal` may see it (else, as for a missing one, `NotFound`).
    pub fn approval(&self, principal: &Principal, id: &str) -> Result<ApprovalRecord, HostError> {
        may_read(principal)?;
        let record = match self.approvals.get(id) {
            Ok(r) => r,
            Err(capability_policy::ApprovalError::NotFound { .. }) => {
                return Err(NotFound::new("approval", id).into());
            }
            Err(e) => return Err(e.into()),
        };
        if !principal.sees_tenant(record.tenant.as_deref()) {
            return Err(NotFound::new("approval", id).into());
        }
        Ok(record)
    }

    /// Approves or denies a pending approval as `principal`, by the one rule (see the
    /// module docs); an approval gives its single-use token.
    pub fn decide_approval(
        &self,
        principal: &Principal,
        id: &str,
        decision: ApprovalDecision,
        comment: Option<String>,
    ) -> Result<Decided, HostError> {
        if !principal.may(Access::Decide) {
            return Err(Forbidden::new(
                principal.name(),
                format!(
                    "(role {}) may not decide approvals",
                    principal.role().as_str()
                ),
            )
            .into());
        }
        // Another tenant's approval is not there for this principal.
        self.approval(principal, id)?;
        Ok(self
            .approvals
            .decide(id, &principal.decider(), decision, comment)?)
    }

    /// Every approval change from now on (see [`crate::events`]).
    pub fn approval_events(&self) -> ApprovalEvents {
        self.feed.subscribe(&self.approval_store)
    }
}

/// An approval as every surface shows it: the record's JSON ([`ApprovalRecord::to_json`]:
/// timestamps in milliseconds and as ISO-8601), with `id` and `decidedAtIso`.
pub fn approval_json(r: &ApprovalRecord) -> Value {
    let mut v = r.to_json();
    v["id"] = json!(r.approval_id);
    v["decidedAtIso"] = json!(r.decided_at.map(capability_core::js::iso_from_millis));
    v
}

/// The `{"approval": {...}}` document of a pending approval, as every surface answers it:
/// `id`, `reason`, `expiresAt`, `planFingerprint`, and the record's `capability`, `agentId`,
/// `tenant`, `requester`, `input`, `policyIds` and `status`.
pub fn approval_document(pending: &PendingApproval) -> Value {
    let record = pending
        .approval
        .as_ref()
        .map(ApprovalRecord::to_json)
        .unwrap_or(Value::Null);
    let mut approval = json!({
        "id": record.get("approvalId"),
        "reason": pending.reason,
        "expiresAt": record.get("expiresAtIso"),
        "planFingerprint": pending.plan.fingerprint,
    });
    if let (Value::Object(a), Value::Object(r)) = (&mut approval, &record) {
        for key in [
            "capability",
            "agentId",
            "tenant",
            "requester",
            "input",
            "policyIds",
            "status",
        ] {
            if let Some(v) = r.get(key) {
                a.insert(key.into(), v.clone());
            }
        }
    }
    json!({ "approval": approval })
}

/// Key names whose values the console never shows.
fn secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase().replace(['-', '_'], "");
    [
        "password",
        "passwd",
        "secret",
        "token",
        "apikey",
        "authorization",
        "credential",
        "privatekey",
        "cookie",
    ]
    .iter()
    .any(|s| k.contains(s))
}

/// An approval's input as a person or a hook is shown it: the values of secret-looking keys
/// (`password`, `token`, `api_key`, `authorization`, ...) replaced by `"[REDACTED]"`, at any
/// depth. The console and the webhook both show inputs this way.
pub fn redact_secret_looking(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if secret_key(k) {
                        Value::String("[REDACTED]".into())
                    } else {
                        redact_secret_looking(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact_secret_looking).collect()),
        other => other.clone(),
    }
}
