//! Cost budgets across calls: "at most $5 of `model_call` per agent per hour". The budgets
//! are a policy source of the host's engine (each budget a policy `budget:<id>`, before
//! stage): when what the budget's key
//! (an agent, a tenant, a capability, a principal) has spent in the window plus the action's
//! `estimatedCostUsd` would pass the limit, it denies the action, or routes it to a cheaper
//! capability. What an action costs is charged when the before stage lets it go ahead (its
//! estimate, so that actions in flight count) and corrected when its result reports the
//! actual cost; an action that reports none keeps its estimate.
//!
//! The running totals live in memory beside the store they are rebuilt from: each charged
//! action's audit event carries `metadata.costUsd`, and [`crate::Host::open`] sums the
//! events of the longest window. Budgets are read from a JSON file:
//!
//! ```json
//! {"budgets": [{"id": "agent-hourly", "per": "agent", "windowSeconds": 3600,
//!               "limitUsd": 5.0, "actionTypes": ["model_call"], "capabilities": ["openai.*"],
//!               "onExceed": {"route": "openai.gpt-4o-mini"}}]}
//! ```
//!
//! `per` is `agent`, `tenant`, `capability` or `principal`; `actionTypes` and
//! `capabilities` (names or globs) narrow what the budget counts (absent: everything);
//! `onExceed` is `"deny"` (the default) or `{"route": "<capability>"}`.
//!
//! Two actions decided at the same instant may each pass a budget only one of them fits: the
//! overshoot is at most the estimates of the actions decided concurrently.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use capability_policy::audit::AuditRecord;
use capability_policy::engine::{RankedDecision, SourceDecisions};
use capability_policy::policy::PolicyFault;
use capability_policy::{
    ActionType, AgentAction, Decision, PolicyContext, PolicySource, Stage, Target,
};
use serde_json::Value;

use crate::error::InvalidRequest;

/// Whose spending a budget adds up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetScope {
    Agent,
    Tenant,
    Capability,
    Principal,
}

impl BudgetScope {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "agent" => BudgetScope::Agent,
            "tenant" => BudgetScope::Tenant,
            "capability" => BudgetScope::Capability,
            "principal" => BudgetScope::Principal,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            BudgetScope::Agent => "agent",
            BudgetScope::Tenant => "tenant",
            BudgetScope::Capability => "capability",
            BudgetScope::Principal => "principal",
        }
    }
}

/// What a budget does to an action that would pass it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OnExceed {
    Deny,
    /// Use this capability instead (authorized again, as any `route`).
    Route(String),
}

/// One budget.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    pub id: String,
    pub per: BudgetScope,
    pub window: Duration,
    pub limit_usd: f64,
    /// Only these action types count (empty: all).
    pub action_types: Vec<ActionType>,
    /// Only these capabilities (names or globs) count (empty: all).
    pub capabilities: Vec<Target>,
    pub on_exceed: OnExceed,
}

impl Budget {
    fn counts(&self, action_type: ActionType, capability: &str) -> bool {
        (self.action_types.is_empty() || self.action_types.contains(&action_type))
            && (self.capabilities.is_empty()
                || self.capabilities.iter().any(|t| t.matches(capability)))
    }

    /// The key whose spending this budget adds up for an action (`None`: the action has no
    /// such key, e.g. no tenant, and the budget does not apply).
    fn key(
        &self,
        agent: &str,
        tenant: Option<&str>,
        principal: Option<&str>,
        capability: &str,
    ) -> Option<String> {
        match self.per {
            BudgetScope::Agent => Some(agent.to_string()),
            BudgetScope::Tenant => tenant.map(str::to_string),
            BudgetScope::Capability => Some(capability.to_string()),
            BudgetScope::Principal => principal.or(Some(agent)).map(str::to_string),
        }
    }

    fn key_of(&self, a: &AgentAction) -> Option<String> {
        self.key(
            &a.agent_id,
            a.tenant_id.as_deref(),
            a.principal_id.as_deref(),
            &a.capability.name,
        )
    }
}

/// The budgets of a host.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BudgetConfig {
    pub budgets: Vec<Budget>,
}

fn invalid(at: &str, message: impl std::fmt::Display) -> InvalidRequest {
    InvalidRequest::new(format!("budget {at}: {message}"))
}

impl BudgetConfig {
    /// Reads `{"budgets": [...]}` (see the module docs); every mistake is named.
    pub fn from_json(value: &Value) -> Result<Self, InvalidRequest> {
        let list = value
            .get("budgets")
            .and_then(Value::as_array)
            .ok_or_else(|| InvalidRequest::new("budgets: expected {\"budgets\": [...]}"))?;
        let mut budgets: Vec<Budget> = Vec::with_capacity(list.len());
        for (i, b) in list.iter().enumerate() {
            let at = format!("#{i}");
            let obj = b
                .as_object()
                .ok_or_else(|| invalid(&at, "expected an object"))?;
            for key in obj.keys() {
                if ![
                    "id",
                    "per",
                    "windowSeconds",
                    "limitUsd",
                    "actionTypes",
                    "capabilities",
                    "onExceed",
                ]
                .contains(&key.as_str())
                {
                    return Err(invalid(&at, format!("unknown member `{key}`")));
                }
            }
            let id = obj
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.trim().is_empty())
                .ok_or_else(|| invalid(&at, "`id` must be a non-empty string"))?
                .to_string();
            let at = format!("`{id}`");
            if budgets.iter().any(|b| b.id == id) {
                return Err(invalid(&at, "the id is used twice"));
            }
            let per = obj
                .get("per")
                .and_then(Value::as_str)
                .and_then(BudgetScope::parse)
                .ok_or_else(|| {
                    invalid(&at, "`per` must be agent, tenant, capability or principal")
                })?;
            let window = obj
                .get("windowSeconds")
                .and_then(Value::as_u64)
                .filter(|s| *s >= 1)
                .ok_or_else(|| invalid(&at, "`windowSeconds` must be a positive integer"))?;
            let limit_usd = obj
                .get("limitUsd")
                .and_then(Value::as_f64)
                .filter(|l| l.is_finite() && *l >= 0.0)
                .ok_or_else(|| invalid(&at, "`limitUsd` must be a number ≥ 0"))?;
            let strings = |key: &str| -> Result<Vec<String>, InvalidRequest> {
                match obj.get(key) {
                    None => Ok(Vec::new()),
                    Some(Value::Array(items)) => items
                        .iter()
                        .map(|v| {
                            v.as_str()
                                .map(str::to_string)
                                .ok_or_else(|| invalid(&at, format!("`{key}` must be strings")))
                        })
                        .collect(),
                    Some(_) => Err(invalid(&at, format!("`{key}` must be an array"))),
                }
            };
            let action_types = strings("actionTypes")?
                .iter()
                .map(|t| ActionType::parse(t).map_err(|e| invalid(&at, e)))
                .collect::<Result<Vec<_>, _>>()?;
            let capabilities = strings("capabilities")?
                .iter()
                .map(|c| Target::parse(c))
                .collect();
            let on_exceed = match obj.get("onExceed") {
                None => OnExceed::Deny,
                Some(Value::String(s)) if s == "deny" => OnExceed::Deny,
                Some(Value::Object(o)) if o.len() == 1 => {
                    match o.get("route").and_then(Value::as_str) {
                        Some(t) if !t.is_empty() => OnExceed::Route(t.to_string()),
                        _ => {
                            return Err(invalid(
                                &at,
                                "`onExceed` must be \"deny\" or {\"route\": \"<capability>\"}",
                            ));
                        }
                    }
                }
                Some(_) => {
                    return Err(invalid(
                        &at,
                        "`onExceed` must be \"deny\" or {\"route\": \"<capability>\"}",
                    ));
                }
            };
            budgets.push(Budget {
                id,
                per,
                window: Duration::from_secs(window),
                limit_usd,
                action_types,
                capabilities,
                on_exceed,
            });
        }
        Ok(BudgetConfig { budgets })
    }

    /// Reads a budgets file.
    pub fn load(path: &Path) -> Result<Self, InvalidRequest> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| InvalidRequest::new(format!("cannot read `{}`: {e}", path.display())))?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| InvalidRequest::new(format!("`{}` is not JSON: {e}", path.display())))?;
        Self::from_json(&value)
            .map_err(|e| InvalidRequest::new(format!("`{}`: {e}", path.display())))
    }
}

/// What one key spent in one budget's window.
#[derive(Debug, Default)]
struct Window {
    /// (time in ms, USD), oldest first.
    charges: VecDeque<(i64, f64)>,
    total: f64,
}

impl Window {
    fn prune(&mut self, since_ms: i64) {
        while let Some(&(at, usd)) = self.charges.front() {
            if at >= since_ms {
                break;
            }
            self.charges.pop_front();
            self.total -= usd;
        }
        if self.charges.is_empty() {
            self.total = 0.0;
        }
    }
}

/// The budgets and what each key spent in each window.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    budgets: Vec<Budget>,
    windows: Mutex<HashMap<(usize, String), Window>>,
}

fn now_ms() -> i64 {
    capability_core::js::now_millis()
}

fn window_ms(b: &Budget) -> i64 {
    i64::try_from(b.window.as_millis()).unwrap_or(i64::MAX)
}

impl Ledger {
    pub(crate) fn new(config: BudgetConfig) -> Arc<Self> {
        Arc::new(Ledger {
            budgets: config.budgets,
            windows: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.budgets.is_empty()
    }

    /// The longest window.
    pub(crate) fn longest(&self) -> Option<Duration> {
        self.budgets.iter().map(|b| b.window).max()
    }

    fn spent(&self, index: usize, key: &str, now: i64) -> f64 {
        let b = &self.budgets[index];
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        match windows.get_mut(&(index, key.to_string())) {
            Some(w) => {
                w.prune(now.saturating_sub(window_ms(b)));
                w.total.max(0.0)
            }
            None => 0.0,
        }
    }

    fn add(&self, charges: impl IntoIterator<Item = (usize, String, i64, f64)>) {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        for (index, key, at, usd) in charges {
            let w = windows.entry((index, key)).or_default();
            // Charges arrive in time order except when rebuilt; keep the deque sorted.
            let pos = w
                .charges
                .iter()
                .rposition(|&(t, _)| t <= at)
                .map_or(0, |p| p + 1);
            w.charges.insert(pos, (at, usd));
            w.total += usd;
        }
    }

    /// Charges `usd` for an action (its final capability) to every budget that counts it.
    pub(crate) fn charge(&self, action: &AgentAction, usd: f64) {
        if usd == 0.0 || !usd.is_finite() {
            return;
        }
        let now = now_ms();
        let charges: Vec<_> = self
            .budgets
            .iter()
            .enumerate()
            .filter(|(_, b)| b.counts(action.action_type, &action.capability.name))
            .filter_map(|(i, b)| b.key_of(action).map(|k| (i, k, now, usd)))
            .collect();
        self.add(charges);
    }

    /// Rebuilds the totals from stored audit events that carry `metadata.costUsd`.
    pub(crate) fn rebuild(&self, records: &[AuditRecord]) {
        let now = now_ms();
        let mut charges = Vec::new();
        for r in records {
            let e = &r.event;
            let text = |k: &str| e.get(k).and_then(Value::as_str);
            let Some(usd) = e.pointer("/metadata/costUsd").and_then(Value::as_f64) else {
                continue;
            };
            let (Some(agent), Some(capability), Some(action_type), Some(at)) = (
                text("agent_id"),
                text("capability_name"),
                text("action_type").and_then(|t| ActionType::parse(t).ok()),
                text("timestamp")
                    .and_then(capability_core::dates::date_parse)
                    .map(|ms| ms as i64),
            ) else {
                continue;
            };
            for (i, b) in self.budgets.iter().enumerate() {
                if at < now.saturating_sub(window_ms(b)) || !b.counts(action_type, capability) {
                    continue;
                }
                if let Some(k) = b.key(agent, text("tenant_id"), text("principal_id"), capability) {
                    charges.push((i, k, at, usd));
                }
            }
        }
        self.add(charges);
    }

    /// The decision of one budget on an action: none while it fits.
    fn decide(&self, index: usize, ctx: &PolicyContext) -> Option<Decision> {
        let b = &self.budgets[index];
        let a = &ctx.action;
        if !b.counts(a.action_type, &a.capability.name) {
            return None;
        }
        let key = b.key_of(a)?;
        let spent = self.spent(index, &key, now_ms());
        let estimate = a
            .estimated_cost_usd
            .filter(|e| e.is_finite())
            .unwrap_or(0.0)
            .max(0.0);
        if spent + estimate <= b.limit_usd {
            return None;
        }
        let reason = format!(
            "budget `{}`: {} `{key}` spent ${spent:.4} in the last {}s; with this action's ${estimate:.4} that passes ${:.4}",
            b.id,
            b.per.as_str(),
            b.window.as_secs(),
            b.limit_usd
        );
        let mut d = match &b.on_exceed {
            OnExceed::Deny => Decision::deny(reason),
            OnExceed::Route(target) => {
                let mut d = Decision::route(target.clone());
                d.reason = Some(reason);
                d
            }
        };
        d.code = Some("budget_exceeded".into());
        d.policy_id = Some(format!("budget:{}", b.id));
        d.policy_name.clone_from(&d.policy_id);
        Some(d)
    }
}

/// The budgets are a policy source of the engine: each budget an action would pass
/// decides (`deny` or `route`, policy id `budget:<id>`, code `budget_exceeded`); the others
/// say nothing. Only the before stage is decided.
impl PolicySource for Ledger {
    fn name(&self) -> &str {
        "budgets"
    }

    fn decide(&self, ctx: &PolicyContext) -> Result<SourceDecisions, PolicyFault> {
        let mut out = SourceDecisions::default();
        if ctx.stage != Stage::BeforeCapability {
            return Ok(out);
        }
        out.decisions = (0..self.budgets.len())
            .filter_map(|i| self.decide(i, ctx))
            .map(|decision| RankedDecision {
                priority: 0,
                decision,
            })
            .collect();
        Ok(out)
    }
}

/// The stored audit events of the longest window that may carry a cost, newest first.
pub(crate) fn spent_records(
    store: &dyn capability_policy::audit::AuditStore,
    ledger: &Ledger,
) -> Result<Vec<AuditRecord>, crate::error::StoreError> {
    let Some(longest) = ledger.longest() else {
        return Ok(Vec::new());
    };
    let since_ms = now_ms().saturating_sub(i64::try_from(longest.as_millis()).unwrap_or(i64::MAX));
    let mut query = capability_policy::audit::AuditQuery {
        since: Some(capability_core::js::iso_from_millis(since_ms)),
        limit: 10_000,
        ..Default::default()
    };
    let mut out = Vec::new();
    loop {
        let page = store
            .query(&query)
            .map_err(|e| crate::error::StoreError::new("audit log", e))?;
        let Some(last) = page.last() else { break };
        query.before = Some(last.seq);
        let full = page.len() == query.limit;
        out.extend(
            page.into_iter()
                .filter(|r| r.event.pointer("/metadata/costUsd").is_some()),
        );
        if !full {
            break;
        }
    }
    Ok(out)
}
