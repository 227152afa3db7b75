//! Approvals bound to the exact plan.
//!
//! An `approval_required` verdict becomes a pending [`ApprovalRecord`] that records the plan
//! fingerprint (when the action executes a Capability 1.x plan), the action digest
//! ([`AgentAction::digest`]: action type, capability, agent, tenant, environment, principal,
//! input), the requester, the reason and an expiry. Approving it mints a single-use
//! [`ApprovalToken`] signed with the host's ed25519 key ([`HostKey`]), valid only for that
//! fingerprint and digest, until its own expiry. [`ApprovalManager::redeem`] checks the
//! signature, the binding, the expiry and the record, then marks the approval consumed with a
//! compare-and-set, so a token works once. Pending approvals live in an [`ApprovalStore`]
//! (SQLite survives restarts).
//!
//! The same checks in steps, each done once per call: [`ApprovalManager::decode`] checks
//! the signature and gives a [`VerifiedToken`] (a host reads its plan fingerprint from it);
//! [`ApprovalManager::verify_decoded`] checks it against the action and reads the approval
//! record once, giving a [`VerifiedApproval`]; [`ApprovalManager::redeem_verified`] only
//! rechecks the expiry and does the compare-and-set `approved` → `consumed`.
//!
//! Token format: `capapr1.<base64url(canonical JSON payload)>.<base64url(signature)>`, the
//! signature covering the payload bytes. Payload fields: `v`, `kid` (key id), `approvalId`,
//! `planFingerprint` (or null), `actionDigest`, `approver`, `issuedAt`, `expiresAt`
//! (milliseconds), `nonce`.

use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::action::AgentAction;
use crate::clock::{Clock, SystemClock};
use crate::names::{new_id, string_enum};
use crate::policy::GrantedApproval;
use crate::store::StoreError;

const TOKEN_PREFIX: &str = "capapr1";

/// Failures of approvals and tokens.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error("approval `{id}` does not exist")]
    NotFound { id: String },
    #[error("approval `{id}` is {status}, not pending")]
    NotPending { id: String, status: ApprovalStatus },
    #[error("approval `{id}` expired")]
    Expired { id: String },
    #[error("`{approver}` requested approval `{id}` and cannot decide it")]
    SelfApproval { id: String, approver: String },
    #[error("`{approver}` may not decide approvals of tenant `{tenant}`")]
    OtherTenant { approver: String, tenant: String },
    #[error("approver must not be empty")]
    NoApprover,
    #[error("malformed approval token: {message}")]
    Malformed { message: String },
    #[error("approval token signature is invalid (forged, or signed by another host)")]
    BadSignature,
    #[error("approval token is for plan `{token}`, not `{actual}`")]
    PlanMismatch { token: String, actual: String },
    #[error("approval token does not match this action (its input or target changed)")]
    ActionMismatch,
    #[error("approval token expired")]
    TokenExpired,
    #[error("approval token was already used")]
    Replayed,
    #[error("approval `{id}` was denied")]
    Denied { id: String },
    #[error("host key: {message}")]
    Key { message: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

string_enum! {
    /// Lifecycle of an approval.
    pub enum ApprovalStatus ("approval status") {
        Pending => "pending",
        Approved => "approved",
        Denied => "denied",
        Expired => "expired",
        Consumed => "consumed",
    }
}

/// One approval request and what became of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRecord {
    /// `apr_<hex>`.
    pub approval_id: String,
    pub status: ApprovalStatus,
    pub plan_fingerprint: Option<String>,
    pub action_digest: String,
    pub capability: String,
    pub action_type: String,
    pub agent_id: String,
    pub tenant: Option<String>,
    pub environment: String,
    /// Who asked (the principal, else the agent).
    pub requester: String,
    pub reason: Option<String>,
    pub policy_ids: Vec<String>,
    /// The input the approver is asked about.
    pub input: Value,
    pub action_id: String,
    pub trace_id: String,
    /// Milliseconds since the epoch.
    pub created_at: i64,
    pub expires_at: i64,
    pub decided_by: Option<String>,
    pub decided_at: Option<i64>,
    pub note: Option<String>,
    pub token_nonce: Option<String>,
    pub token_expires_at: Option<i64>,
    pub consumed_at: Option<i64>,
}

impl ApprovalRecord {
    /// The JSON form for people and the CLI (timestamps also as ISO-8601).
    pub fn to_json(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Some(m) = v.as_object_mut() {
            let iso = |ms: i64| Value::String(capability_core::js::iso_from_millis(ms));
            m.insert("createdAtIso".into(), iso(self.created_at));
            m.insert("expiresAtIso".into(), iso(self.expires_at));
        }
        v
    }
}

/// Which approvals to list.
#[derive(Clone, Debug, Default)]
pub struct ApprovalFilter {
    pub status: Option<ApprovalStatus>,
    pub tenant: Option<String>,
    pub limit: Option<usize>,
}

/// Persistence of approvals. `update_approval` is a compare-and-set on the status, which is
/// what makes tokens single-use across processes.
pub trait ApprovalStore: Send + Sync {
    fn insert_approval(&self, record: &ApprovalRecord) -> Result<(), StoreError>;
    fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError>;
    /// Newest first. A stored record that cannot be read is left out (see
    /// [`ApprovalStore::list_approvals_checked`]), never failing the list.
    fn list_approvals(&self, filter: &ApprovalFilter) -> Result<Vec<ApprovalRecord>, StoreError>;
    /// [`ApprovalStore::list_approvals`], and one message per record left out because it could
    /// not be read.
    fn list_approvals_checked(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<(Vec<ApprovalRecord>, Vec<String>), StoreError> {
        Ok((self.list_approvals(filter)?, Vec::new()))
    }
    /// Replaces the record if its stored status is still `expected`; returns whether it did.
    fn update_approval(
        &self,
        record: &ApprovalRecord,
        expected: ApprovalStatus,
    ) -> Result<bool, StoreError>;
    /// The approvals changed (created or updated) after the change at `after` (0: from the
    /// first), oldest change first, at most `limit`: each change's position and the record
    /// as it is now. Every insert and successful update is one change, in every process that
    /// shares the store.
    fn approval_changes(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, ApprovalRecord)>, StoreError>;
    /// The position of the latest change (0: none yet).
    fn approval_change_head(&self) -> Result<u64, StoreError>;
}

/// The host's ed25519 signing key.
pub struct HostKey {
    signing: SigningKey,
}

impl std::fmt::Debug for HostKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostKey")
            .field("kid", &self.key_id())
            .finish_non_exhaustive()
    }
}

impl HostKey {
    /// A fresh key from the operating system's random source.
    pub fn generate() -> Result<Self, ApprovalError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| ApprovalError::Key {
            message: format!("no randomness: {e}"),
        })?;
        Ok(Self::from_seed(seed))
    }

    /// The key for a 32-byte seed.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        HostKey {
            signing: SigningKey::from_bytes(&seed),
        }
    }

    /// Reads a key file (base64 of the 32-byte seed, as written by [`HostKey::save`]).
    pub fn load(path: &Path) -> Result<Self, ApprovalError> {
        let text = std::fs::read_to_string(path).map_err(|e| ApprovalError::Key {
            message: format!("cannot read `{}`: {e}", path.display()),
        })?;
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|_| ApprovalError::Key {
                message: format!("`{}` is not base64", path.display()),
            })?;
        let seed: [u8; 32] = bytes.try_into().map_err(|_| ApprovalError::Key {
            message: format!("`{}` does not hold a 32-byte ed25519 seed", path.display()),
        })?;
        Ok(Self::from_seed(seed))
    }

    /// Writes the key to a new file of its own (mode 0600 on Unix) beside `path`, flushed
    /// to disk; returns its path.
    fn write_staged(&self, path: &Path) -> Result<std::path::PathBuf, ApprovalError> {
        let err = |e: std::io::Error| ApprovalError::Key {
            message: format!("cannot write `{}`: {e}", path.display()),
        };
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent).map_err(err)?;
        }
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| ApprovalError::Key {
            message: format!("no randomness: {e}"),
        })?;
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(
            ".{}.{}.tmp",
            std::process::id(),
            hex::encode(nonce)
        ));
        let tmp = path.with_file_name(name);
        use std::io::Write as _;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let written = options.open(&tmp).and_then(|mut f| {
            f.write_all(STANDARD.encode(self.signing.to_bytes()).as_bytes())?;
            f.write_all(b"\n")?;
            f.sync_all()
        });
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(err(e));
        }
        Ok(tmp)
    }

    /// Writes the key file (mode 0600 on Unix), creating parent directories; the file is
    /// replaced atomically.
    pub fn save(&self, path: &Path) -> Result<(), ApprovalError> {
        let tmp = self.write_staged(path)?;
        std::fs::rename(&tmp, path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            ApprovalError::Key {
                message: format!("cannot write `{}`: {e}", path.display()),
            }
        })
    }

    /// Loads the key file, or generates and saves a new key when there is none. Safe when
    /// several processes do this at once on a new home: the new key is written to a file of
    /// its own and linked into place only if no key is there yet, so exactly one key wins
    /// and every process ends up using it.
    pub fn load_or_generate(path: &Path) -> Result<Self, ApprovalError> {
        if path.exists() {
            return Self::load(path);
        }
        let key = Self::generate()?;
        let tmp = key.write_staged(path)?;
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(key),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Self::load(path),
            Err(e) => Err(ApprovalError::Key {
                message: format!("cannot write `{}`: {e}", path.display()),
            }),
        }
    }

    /// The public key.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.signing.verifying_key()
    }

    /// The public key, base64.
    pub fn public_key_base64(&self) -> String {
        STANDARD.encode(self.verifying_key().to_bytes())
    }

    /// First 16 hex characters of the SHA-256 of the public key.
    pub fn key_id(&self) -> String {
        let hex = capability_core::json::sha256_hex(&self.verifying_key().to_bytes());
        hex[..16].to_string()
    }

    fn sign(&self, bytes: &[u8]) -> Signature {
        self.signing.sign(bytes)
    }

    /// Signs `bytes` (audit checkpoints).
    pub(crate) fn sign_bytes(&self, bytes: &[u8]) -> Signature {
        self.sign(bytes)
    }
}

/// A signed, single-use approval token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalToken(pub String);

impl std::fmt::Display for ApprovalToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The verified content of a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenClaims {
    pub approval_id: String,
    pub plan_fingerprint: Option<String>,
    pub action_digest: String,
    pub approver: String,
    pub issued_at: i64,
    pub expires_at: i64,
    pub nonce: String,
}

/// Whether a decision approves or denies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalDecision {
    Approve,
    Deny,
}

/// Who decides an approval, as the one rule of [`ApprovalManager::decide`] sees them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decider {
    name: String,
    identities: Vec<String>,
    tenants: Option<std::collections::BTreeSet<String>>,
}

impl Decider {
    /// A decider recorded as `name` (`decidedBy`), who may decide for every tenant.
    pub fn named(name: impl Into<String>) -> Self {
        Decider {
            name: name.into(),
            identities: Vec::new(),
            tenants: None,
        }
    }

    /// Another name the decider is known by (its principal id, its agent id): a request
    /// made under any of them is the decider's own.
    pub fn also_known_as(mut self, identity: impl Into<String>) -> Self {
        let identity = identity.into();
        if !identity.is_empty() && identity != self.name && !self.identities.contains(&identity) {
            self.identities.push(identity);
        }
        self
    }

    /// Limits the decider to approvals of these tenants (`*`: every tenant; an approval
    /// without a tenant needs `*`).
    pub fn for_tenants(mut self, tenants: impl IntoIterator<Item = String>) -> Self {
        self.tenants = Some(tenants.into_iter().collect());
        self
    }

    /// The name the decision records.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every name the decider is known by, its recorded name first.
    pub fn identities(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.name.as_str()).chain(self.identities.iter().map(String::as_str))
    }

    /// Whether the decider may decide approvals of `tenant`.
    pub fn covers(&self, tenant: Option<&str>) -> bool {
        match &self.tenants {
            None => true,
            Some(t) => t.contains("*") || tenant.is_some_and(|x| t.contains(x)),
        }
    }

    /// The one rule: whether `record` may be decided by this decider — its tenant is one of
    /// the decider's, and the decider is not who asked (by any of its names: the request's
    /// requester and agent are compared with the decider's name, principal id and agent id).
    pub fn check(&self, record: &ApprovalRecord) -> Result<(), ApprovalError> {
        if self.name.trim().is_empty() {
            return Err(ApprovalError::NoApprover);
        }
        if !self.covers(record.tenant.as_deref()) {
            return Err(ApprovalError::OtherTenant {
                approver: self.name.clone(),
                tenant: record.tenant.clone().unwrap_or_else(|| "(none)".into()),
            });
        }
        let own = self
            .identities()
            .any(|i| i == record.requester || i == record.agent_id);
        if own {
            return Err(ApprovalError::SelfApproval {
                id: record.approval_id.clone(),
                approver: self.name.clone(),
            });
        }
        Ok(())
    }
}

/// What a decision gave: the updated record, and for an approval its single-use token.
#[derive(Clone, Debug, PartialEq)]
pub struct Decided {
    pub record: ApprovalRecord,
    pub token: Option<ApprovalToken>,
}

/// A token whose signature this host's key verified ([`ApprovalManager::decode`]): its
/// claims, not yet checked against an action or the approval record. Only an
/// [`ApprovalManager`] makes one, and only its own manager accepts it
/// ([`ApprovalManager::verify_decoded`]), so the signature is checked once per call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedToken {
    claims: TokenClaims,
    /// The public key that verified the signature.
    key: [u8; 32],
}

impl VerifiedToken {
    /// What the token says.
    pub fn claims(&self) -> &TokenClaims {
        &self.claims
    }

    /// The approval it was issued for.
    pub fn approval_id(&self) -> &str {
        &self.claims.approval_id
    }

    /// The plan it is bound to, when there is one.
    pub fn plan_fingerprint(&self) -> Option<&str> {
        self.claims.plan_fingerprint.as_deref()
    }
}

/// A [`VerifiedToken`] checked against an action and against its approval record, read once
/// ([`ApprovalManager::verify_decoded`]): bound to this plan and action, not expired, the
/// approval still `approved` with this token's nonce. [`ApprovalManager::redeem_verified`]
/// consumes it.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifiedApproval {
    claims: TokenClaims,
    record: ApprovalRecord,
}

impl VerifiedApproval {
    /// What the token says.
    pub fn claims(&self) -> &TokenClaims {
        &self.claims
    }

    /// The approval record as it was read.
    pub fn record(&self) -> &ApprovalRecord {
        &self.record
    }

    /// The approval as policies see it.
    pub fn granted(&self) -> GrantedApproval {
        GrantedApproval {
            approval_id: self.claims.approval_id.clone(),
            approver: self.claims.approver.clone(),
        }
    }
}

/// What to ask approval for.
#[derive(Clone, Debug)]
pub struct ApprovalRequest<'a> {
    pub action: &'a AgentAction,
    pub reason: Option<String>,
    pub policy_ids: Vec<String>,
}

/// Creates, decides and redeems approvals.
pub struct ApprovalManager {
    store: Arc<dyn ApprovalStore>,
    key: HostKey,
    clock: Arc<dyn Clock>,
    pending_ttl_ms: i64,
    token_ttl_ms: i64,
}

impl std::fmt::Debug for ApprovalManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalManager")
            .field("key", &self.key)
            .field("pending_ttl_ms", &self.pending_ttl_ms)
            .field("token_ttl_ms", &self.token_ttl_ms)
            .finish_non_exhaustive()
    }
}

impl ApprovalManager {
    /// A manager over a store and the host key; pending approvals expire after 24 hours,
    /// tokens 15 minutes after approval.
    pub fn new(store: Arc<dyn ApprovalStore>, key: HostKey) -> Self {
        ApprovalManager {
            store,
            key,
            clock: Arc::new(SystemClock),
            pending_ttl_ms: 24 * 3600 * 1000,
            token_ttl_ms: 15 * 60 * 1000,
        }
    }

    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
    pub fn with_pending_ttl_ms(mut self, ms: i64) -> Self {
        self.pending_ttl_ms = ms;
        self
    }
    pub fn with_token_ttl_ms(mut self, ms: i64) -> Self {
        self.token_ttl_ms = ms;
        self
    }

    /// The host key.
    pub fn key(&self) -> &HostKey {
        &self.key
    }

    /// Records a pending approval for the action. An identical pending request (same plan
    /// fingerprint and action digest, not expired) is returned instead of a duplicate.
    pub fn request(&self, req: ApprovalRequest<'_>) -> Result<ApprovalRecord, ApprovalError> {
        let now = self.clock.now_millis();
        let a = req.action;
        let digest = a.digest();
        let pending = self.store.list_approvals(&ApprovalFilter {
            status: Some(ApprovalStatus::Pending),
            tenant: a.tenant_id.clone(),
            limit: None,
        })?;
        if let Some(existing) = pending.into_iter().find(|r| {
            r.action_digest == digest
                && r.plan_fingerprint == a.plan_fingerprint
                && r.expires_at > now
        }) {
            return Ok(existing);
        }
        let record = ApprovalRecord {
            approval_id: new_id("apr"),
            status: ApprovalStatus::Pending,
            plan_fingerprint: a.plan_fingerprint.clone(),
            action_digest: digest,
            capability: a.capability.name.clone(),
            action_type: a.action_type.as_str().to_string(),
            agent_id: a.agent_id.clone(),
            tenant: a.tenant_id.clone(),
            environment: a.environment.as_str().to_string(),
            requester: a.principal_id.clone().unwrap_or_else(|| a.agent_id.clone()),
            reason: req.reason,
            policy_ids: req.policy_ids,
            input: a.input.clone(),
            action_id: a.action_id.clone(),
            trace_id: a.trace_id.clone(),
            created_at: now,
            expires_at: now.saturating_add(self.pending_ttl_ms),
            decided_by: None,
            decided_at: None,
            note: None,
            token_nonce: None,
            token_expires_at: None,
            consumed_at: None,
        };
        self.store.insert_approval(&record)?;
        Ok(record)
    }

    /// The approval with that id.
    pub fn get(&self, id: &str) -> Result<ApprovalRecord, ApprovalError> {
        self.store
            .get_approval(id)?
            .ok_or_else(|| ApprovalError::NotFound { id: id.to_string() })
    }

    /// Approvals, newest first. Pending ones past their expiry are reported `expired`.
    pub fn list(&self, filter: &ApprovalFilter) -> Result<Vec<ApprovalRecord>, ApprovalError> {
        self.expire_stale()?;
        Ok(self.store.list_approvals(filter)?)
    }

    /// [`ApprovalManager::list`], and one message per stored record that could not be read
    /// (left out of the list).
    pub fn list_checked(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<(Vec<ApprovalRecord>, Vec<String>), ApprovalError> {
        self.expire_stale()?;
        Ok(self.store.list_approvals_checked(filter)?)
    }

    /// Marks pending approvals past their expiry as expired; returns how many.
    pub fn expire_stale(&self) -> Result<usize, ApprovalError> {
        let now = self.clock.now_millis();
        let pending = self.store.list_approvals(&ApprovalFilter {
            status: Some(ApprovalStatus::Pending),
            ..ApprovalFilter::default()
        })?;
        let mut n = 0;
        for mut r in pending.into_iter().filter(|r| r.expires_at <= now) {
            r.status = ApprovalStatus::Expired;
            if self.store.update_approval(&r, ApprovalStatus::Pending)? {
                n += 1;
            }
        }
        Ok(n)
    }

    fn pending(&self, id: &str, decider: &Decider) -> Result<ApprovalRecord, ApprovalError> {
        if decider.name().trim().is_empty() {
            return Err(ApprovalError::NoApprover);
        }
        let mut r = self.get(id)?;
        if r.status != ApprovalStatus::Pending {
            return Err(ApprovalError::NotPending {
                id: id.to_string(),
                status: r.status,
            });
        }
        if r.expires_at <= self.clock.now_millis() {
            r.status = ApprovalStatus::Expired;
            self.store.update_approval(&r, ApprovalStatus::Pending)?;
            return Err(ApprovalError::Expired { id: id.to_string() });
        }
        decider.check(&r)?;
        Ok(r)
    }

    /// Decides a pending request by the one rule ([`Decider::check`]): approving mints its
    /// single-use token.
    pub fn decide(
        &self,
        id: &str,
        decider: &Decider,
        decision: ApprovalDecision,
        note: Option<String>,
    ) -> Result<Decided, ApprovalError> {
        match decision {
            ApprovalDecision::Approve => {
                let (record, token) = self.approve_as(id, decider, note)?;
                Ok(Decided {
                    record,
                    token: Some(token),
                })
            }
            ApprovalDecision::Deny => Ok(Decided {
                record: self.deny_as(id, decider, note)?,
                token: None,
            }),
        }
    }

    /// Approves a pending request as `approver` (who may decide for every tenant; see
    /// [`ApprovalManager::decide`]) and mints its single-use token.
    pub fn approve(
        &self,
        id: &str,
        approver: &str,
        note: Option<String>,
    ) -> Result<ApprovalToken, ApprovalError> {
        self.approve_as(id, &Decider::named(approver), note)
            .map(|(_, token)| token)
    }

    fn approve_as(
        &self,
        id: &str,
        decider: &Decider,
        note: Option<String>,
    ) -> Result<(ApprovalRecord, ApprovalToken), ApprovalError> {
        let approver = decider.name();
        let mut r = self.pending(id, decider)?;
        let now = self.clock.now_millis();
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).map_err(|e| ApprovalError::Key {
            message: format!("no randomness: {e}"),
        })?;
        let nonce = hex::encode(nonce);
        let expires_at = now.saturating_add(self.token_ttl_ms);
        r.status = ApprovalStatus::Approved;
        r.decided_by = Some(approver.to_string());
        r.decided_at = Some(now);
        r.note = note;
        r.token_nonce = Some(nonce.clone());
        r.token_expires_at = Some(expires_at);
        if !self.store.update_approval(&r, ApprovalStatus::Pending)? {
            let status = self.get(id)?.status;
            return Err(ApprovalError::NotPending {
                id: id.to_string(),
                status,
            });
        }
        let payload = json!({
            "v": 1,
            "kid": self.key.key_id(),
            "approvalId": r.approval_id,
            "planFingerprint": r.plan_fingerprint,
            "actionDigest": r.action_digest,
            "approver": approver,
            "issuedAt": now,
            "expiresAt": expires_at,
            "nonce": nonce,
        });
        let bytes = capability_core::json::canonical_string(&payload).into_bytes();
        let sig = self.key.sign(&bytes);
        let token = ApprovalToken(format!(
            "{TOKEN_PREFIX}.{}.{}",
            URL_SAFE_NO_PAD.encode(&bytes),
            URL_SAFE_NO_PAD.encode(sig.to_bytes())
        ));
        Ok((r, token))
    }

    /// Denies a pending request as `approver` (who may decide for every tenant; see
    /// [`ApprovalManager::decide`]).
    pub fn deny(
        &self,
        id: &str,
        approver: &str,
        note: Option<String>,
    ) -> Result<ApprovalRecord, ApprovalError> {
        self.deny_as(id, &Decider::named(approver), note)
    }

    fn deny_as(
        &self,
        id: &str,
        decider: &Decider,
        note: Option<String>,
    ) -> Result<ApprovalRecord, ApprovalError> {
        let approver = decider.name();
        let mut r = self.pending(id, decider)?;
        r.status = ApprovalStatus::Denied;
        r.decided_by = Some(approver.to_string());
        r.decided_at = Some(self.clock.now_millis());
        r.note = note;
        if !self.store.update_approval(&r, ApprovalStatus::Pending)? {
            let status = self.get(id)?.status;
            return Err(ApprovalError::NotPending {
                id: id.to_string(),
                status,
            });
        }
        Ok(r)
    }

    /// Checks a token's signature (against this host's key) and decodes it: the one
    /// signature check of a call.
    pub fn decode(&self, token: &str) -> Result<VerifiedToken, ApprovalError> {
        let key = self.key.verifying_key();
        let claims = decode_token(token, &key)?;
        Ok(VerifiedToken {
            claims,
            key: key.to_bytes(),
        })
    }

    /// Checks everything except single use: signature, binding to this plan fingerprint and
    /// action digest, expiry, and that the approval is still approved with this token's nonce.
    pub fn verify(
        &self,
        token: &str,
        plan_fingerprint: Option<&str>,
        action_digest: &str,
    ) -> Result<(TokenClaims, ApprovalRecord), ApprovalError> {
        let verified = self.verify_decoded(self.decode(token)?, plan_fingerprint, action_digest)?;
        Ok((verified.claims, verified.record))
    }

    /// [`ApprovalManager::verify`] for an action (its plan fingerprint and digest).
    pub fn verify_for(
        &self,
        token: &str,
        action: &AgentAction,
    ) -> Result<(TokenClaims, ApprovalRecord), ApprovalError> {
        self.verify(token, action.plan_fingerprint.as_deref(), &action.digest())
    }

    /// [`ApprovalManager::verify`] for a token whose signature [`ApprovalManager::decode`]
    /// already checked: the binding to this plan fingerprint and action digest, then the
    /// approval record, read once (still approved, with this token's nonce), then the
    /// expiry. A token decoded by another host's manager is refused
    /// ([`ApprovalError::BadSignature`]).
    pub fn verify_decoded(
        &self,
        token: VerifiedToken,
        plan_fingerprint: Option<&str>,
        action_digest: &str,
    ) -> Result<VerifiedApproval, ApprovalError> {
        if token.key != self.key.verifying_key().to_bytes() {
            return Err(ApprovalError::BadSignature);
        }
        let claims = token.claims;
        if claims.plan_fingerprint.as_deref() != plan_fingerprint {
            return Err(ApprovalError::PlanMismatch {
                token: claims.plan_fingerprint.unwrap_or_else(|| "none".into()),
                actual: plan_fingerprint.unwrap_or("none").to_string(),
            });
        }
        if claims.action_digest != action_digest {
            return Err(ApprovalError::ActionMismatch);
        }
        let record = self.get(&claims.approval_id)?;
        match record.status {
            ApprovalStatus::Approved => {}
            ApprovalStatus::Consumed => return Err(ApprovalError::Replayed),
            ApprovalStatus::Denied => {
                return Err(ApprovalError::Denied {
                    id: record.approval_id,
                });
            }
            status => {
                return Err(ApprovalError::NotPending {
                    id: record.approval_id,
                    status,
                });
            }
        }
        if record.token_nonce.as_deref() != Some(claims.nonce.as_str()) {
            return Err(ApprovalError::Malformed {
                message: "the token is not the one issued for this approval".into(),
            });
        }
        if self.clock.now_millis() >= claims.expires_at {
            return Err(ApprovalError::TokenExpired);
        }
        Ok(VerifiedApproval { claims, record })
    }

    /// Consumes a verified approval: the expiry is checked again, then the record read by
    /// [`ApprovalManager::verify_decoded`] is stored `consumed` with a compare-and-set
    /// `approved` → `consumed`, so only one redemption of a token succeeds; the others
    /// fail with [`ApprovalError::Replayed`].
    pub fn redeem_verified(
        &self,
        approval: VerifiedApproval,
    ) -> Result<GrantedApproval, ApprovalError> {
        let now = self.clock.now_millis();
        if now >= approval.claims.expires_at {
            return Err(ApprovalError::TokenExpired);
        }
        let VerifiedApproval { claims, mut record } = approval;
        record.status = ApprovalStatus::Consumed;
        record.consumed_at = Some(now);
        if !self
            .store
            .update_approval(&record, ApprovalStatus::Approved)?
        {
            return Err(ApprovalError::Replayed);
        }
        Ok(GrantedApproval {
            approval_id: claims.approval_id,
            approver: claims.approver,
        })
    }

    /// Verifies the token and consumes it (compare-and-set `approved` → `consumed`): the
    /// second redemption of a token fails with [`ApprovalError::Replayed`].
    pub fn redeem(
        &self,
        token: &str,
        plan_fingerprint: Option<&str>,
        action_digest: &str,
    ) -> Result<GrantedApproval, ApprovalError> {
        let verified = self.verify_decoded(self.decode(token)?, plan_fingerprint, action_digest)?;
        self.redeem_verified(verified)
    }

    /// [`ApprovalManager::redeem`] for an action.
    pub fn redeem_for(
        &self,
        token: &str,
        action: &AgentAction,
    ) -> Result<GrantedApproval, ApprovalError> {
        self.redeem(token, action.plan_fingerprint.as_deref(), &action.digest())
    }
}

/// Decodes a token and checks its signature with the given public key.
pub fn decode_token(token: &str, key: &VerifyingKey) -> Result<TokenClaims, ApprovalError> {
    let malformed = |m: &str| ApprovalError::Malformed {
        message: m.to_string(),
    };
    let mut parts = token.trim().split('.');
    let (Some(prefix), Some(payload), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed("expected three dot-separated parts"));
    };
    if prefix != TOKEN_PREFIX {
        return Err(malformed("unknown token version"));
    }
    let payload = URL_SAFE_NO_PAD
        .decode(payload)
        .map_err(|_| malformed("payload is not base64url"))?;
    let sig = URL_SAFE_NO_PAD
        .decode(sig)
        .map_err(|_| malformed("signature is not base64url"))?;
    let sig: [u8; 64] = sig
        .try_into()
        .map_err(|_| malformed("signature is not 64 bytes"))?;
    key.verify(&payload, &Signature::from_bytes(&sig))
        .map_err(|_| ApprovalError::BadSignature)?;
    let v = capability_core::json::parse(&payload).map_err(|e| malformed(&e.to_string()))?;
    let m: &Map<String, Value> = v
        .as_object()
        .ok_or_else(|| malformed("payload is not an object"))?;
    let s = |k: &str| {
        m.get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| malformed(&format!("`{k}` is missing")))
    };
    let n = |k: &str| {
        m.get(k)
            .and_then(Value::as_i64)
            .ok_or_else(|| malformed(&format!("`{k}` is missing")))
    };
    Ok(TokenClaims {
        approval_id: s("approvalId")?,
        plan_fingerprint: m
            .get("planFingerprint")
            .and_then(Value::as_str)
            .map(str::to_string),
        action_digest: s("actionDigest")?,
        approver: s("approver")?,
        issued_at: n("issuedAt")?,
        expires_at: n("expiresAt")?,
        nonce: s("nonce")?,
    })
}
