//! Effect authorization: host-owned allow / deny / requireApproval patterns, the three
//! reference presets, and the decision shape.
//!
//! Patterns: `"*"` matches everything; a pattern ending in `*` is a prefix match on the text
//! before the star (`custom:*`, `database.*`); anything else must match exactly. An effect is
//! denied when it matches a deny pattern or no allow pattern (declared effects are denied by
//! default); any denial refuses the request and suppresses approval. Otherwise, unless the
//! caller approved, effects matching a requireApproval pattern make approval required.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::effects::MUTATING_OR_OPEN_WORLD_EFFECTS;
use crate::error::{CapabilityError, ErrorCode};

/// A host's effect policy (`CapabilityPolicy` in the reference).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_approval: Option<Vec<String>>,
}

/// The reference presets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// `{allow: []}`: only effect-free capabilities run. The runtime default.
    DenyAll,
    /// Allows `filesystem.read`, `environment.read` and `database.read`.
    ReadOnly,
    /// Allows everything; the 8 mutating or open-world effects and every `custom:` effect
    /// need approval. The CLI default, as in the reference.
    Permissive,
}

impl Preset {
    pub fn policy(self) -> EffectPolicy {
        match self {
            Preset::DenyAll => EffectPolicy::deny_all(),
            Preset::ReadOnly => EffectPolicy::read_only(),
            Preset::Permissive => EffectPolicy::permissive(),
        }
    }

    /// Parses `deny-all`, `read-only` or `permissive` (also the camelCase reference names).
    pub fn parse(name: &str) -> Option<Preset> {
        match name {
            "deny-all" | "denyAll" => Some(Preset::DenyAll),
            "read-only" | "readOnly" => Some(Preset::ReadOnly),
            "permissive" => Some(Preset::Permissive),
            _ => None,
        }
    }
}

impl EffectPolicy {
    /// `denyAllPolicy`.
    pub fn deny_all() -> Self {
        EffectPolicy {
            allow: Some(Vec::new()),
            deny: None,
            require_approval: None,
        }
    }

    /// `readOnlyPolicy`.
    pub fn read_only() -> Self {
        EffectPolicy {
            allow: Some(
                ["filesystem.read", "environment.read", "database.read"]
                    .map(String::from)
                    .to_vec(),
            ),
            deny: None,
            require_approval: None,
        }
    }

    /// `permissivePolicy`.
    pub fn permissive() -> Self {
        let mut approval: Vec<String> = MUTATING_OR_OPEN_WORLD_EFFECTS
            .iter()
            .map(|s| s.to_string())
            .collect();
        approval.push("custom:*".into());
        EffectPolicy {
            allow: Some(vec!["*".into()]),
            deny: None,
            require_approval: Some(approval),
        }
    }
}

/// Whether an effect matches a policy pattern.
pub fn pattern_matches(pattern: &str, effect: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    match pattern.strip_suffix('*') {
        Some(prefix) => effect.starts_with(prefix),
        None => pattern == effect,
    }
}

fn any_match(patterns: Option<&Vec<String>>, effect: &str) -> bool {
    patterns.is_some_and(|ps| ps.iter().any(|p| pattern_matches(p, effect)))
}

/// The result of effect authorization.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationDecision {
    pub allowed: bool,
    pub denied_effects: Vec<String>,
    pub approval_required: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl AuthorizationDecision {
    /// The refusal as a `PERMISSION_DENIED` or `APPROVAL_REQUIRED` error (message = reason,
    /// details = the decision); `None` when allowed.
    pub fn to_error(&self) -> Option<CapabilityError> {
        if self.allowed {
            return None;
        }
        let code = if self.approval_required.is_empty() {
            ErrorCode::PermissionDenied
        } else {
            ErrorCode::ApprovalRequired
        };
        let details = serde_json::to_value(self).unwrap_or(Value::Null);
        Some(
            CapabilityError::new(code, self.reason.clone().unwrap_or_default())
                .with_details(details),
        )
    }

    /// The decision as JSON.
    pub fn to_value(&self) -> Value {
        let mut v = json!({
            "allowed": self.allowed,
            "deniedEffects": self.denied_effects,
            "approvalRequired": self.approval_required,
        });
        if let (Some(reason), Value::Object(map)) = (&self.reason, &mut v) {
            map.insert("reason".into(), reason.clone().into());
        }
        v
    }
}

/// The reference `authorizeEffects(effects, policy, approved)`.
pub fn authorize_effects<S: AsRef<str>>(
    effects: &[S],
    policy: &EffectPolicy,
    approved: bool,
) -> AuthorizationDecision {
    let denied: Vec<String> = effects
        .iter()
        .map(AsRef::as_ref)
        .filter(|e| any_match(policy.deny.as_ref(), e) || !any_match(policy.allow.as_ref(), e))
        .map(String::from)
        .collect();
    if !denied.is_empty() {
        let reason = format!("denied effects: {}", denied.join(", "));
        return AuthorizationDecision {
            allowed: false,
            denied_effects: denied,
            approval_required: Vec::new(),
            reason: Some(reason),
        };
    }
    if !approved {
        let approval: Vec<String> = effects
            .iter()
            .map(AsRef::as_ref)
            .filter(|e| any_match(policy.require_approval.as_ref(), e))
            .map(String::from)
            .collect();
        if !approval.is_empty() {
            let reason = format!("approval required for: {}", approval.join(", "));
            return AuthorizationDecision {
                allowed: false,
                denied_effects: Vec::new(),
                approval_required: approval,
                reason: Some(reason),
            };
        }
    }
    AuthorizationDecision {
        allowed: true,
        denied_effects: Vec::new(),
        approval_required: Vec::new(),
        reason: None,
    }
}
