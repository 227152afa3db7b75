//! Signed audit checkpoints: the chain head (`seq`, `hash`), a counter and a time, signed
//! with the host key, to be kept somewhere the database's writer cannot reach.
//!
//! The hash chain alone shows edits that leave later hashes stale, but not a log cut short
//! with its head moved back, nor an event edited with every later hash recomputed: whoever
//! can write the database can rebuild a consistent chain. A checkpoint kept elsewhere pins
//! the chain at its `seq`: verifying against it fails when the log no longer reaches that
//! record (truncation), when the record there has another hash (any record up to it was
//! edited and the chain rebuilt), or when the store has issued fewer checkpoints than this
//! one's counter (the database was replaced by an older copy). Events appended after a
//! checkpoint are covered by the next one.
//!
//! The document (`cap audit checkpoint`):
//!
//! ```json
//! {"type": "capability-audit-checkpoint", "version": 1, "seq": 12, "hash": "…",
//!  "counter": 3, "createdAt": "2026-…Z", "keyId": "…", "signature": "<base64url>"}
//! ```
//!
//! The signature is ed25519 over the canonical JSON of every member but `signature`.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::Verifier as _;
use serde_json::{Map, Value, json};

use crate::approvals::HostKey;
use crate::audit::{AuditStore, VerifyReport, verify_after, verify_store};
use crate::store::StoreError;

/// The `type` member of a checkpoint.
pub const CHECKPOINT_TYPE: &str = "capability-audit-checkpoint";

/// A checkpoint's signed content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// The head's sequence number (0 for an empty log).
    pub seq: u64,
    /// The head's hash (the genesis hash for an empty log).
    pub hash: String,
    /// 1 for the store's first checkpoint, then one more each time.
    pub counter: u64,
    pub created_at: String,
    pub key_id: String,
}

/// Why a checkpoint document was refused.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("not an audit checkpoint: {0}")]
    Malformed(String),
    #[error("the checkpoint was signed by key {found}, not by this home's key {expected}")]
    OtherKey { found: String, expected: String },
    #[error("the checkpoint's signature does not verify: it was altered or forged")]
    BadSignature,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Checkpoint {
    fn payload(&self) -> Value {
        json!({
            "type": CHECKPOINT_TYPE,
            "version": 1,
            "seq": self.seq,
            "hash": self.hash,
            "counter": self.counter,
            "createdAt": self.created_at,
            "keyId": self.key_id,
        })
    }

    /// The signed document.
    pub fn sign(&self, key: &HostKey) -> Value {
        let payload = self.payload();
        let bytes = capability_core::json::canonical_string(&payload);
        let signature = URL_SAFE_NO_PAD.encode(key.sign_bytes(bytes.as_bytes()).to_bytes());
        let mut doc = payload;
        if let Value::Object(m) = &mut doc {
            m.insert("signature".into(), Value::String(signature));
        }
        doc
    }

    /// Reads a signed document and checks its signature with `key`.
    pub fn verify(doc: &Value, key: &HostKey) -> Result<Checkpoint, CheckpointError> {
        let bad = |m: &str| CheckpointError::Malformed(m.to_string());
        let m: &Map<String, Value> = doc.as_object().ok_or_else(|| bad("not an object"))?;
        if m.get("type").and_then(Value::as_str) != Some(CHECKPOINT_TYPE) {
            return Err(bad("`type` is not capability-audit-checkpoint"));
        }
        if m.get("version").and_then(Value::as_u64) != Some(1) {
            return Err(bad("unknown `version`"));
        }
        let text = |k: &str| {
            m.get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| bad(&format!("`{k}` is missing")))
        };
        let number = |k: &str| {
            m.get(k)
                .and_then(Value::as_u64)
                .ok_or_else(|| bad(&format!("`{k}` is missing")))
        };
        let checkpoint = Checkpoint {
            seq: number("seq")?,
            hash: text("hash")?,
            counter: number("counter")?,
            created_at: text("createdAt")?,
            key_id: text("keyId")?,
        };
        if checkpoint.key_id != key.key_id() {
            return Err(CheckpointError::OtherKey {
                found: checkpoint.key_id,
                expected: key.key_id(),
            });
        }
        let signature = URL_SAFE_NO_PAD
            .decode(text("signature")?)
            .map_err(|_| bad("`signature` is not base64url"))?;
        let signature: [u8; 64] = signature
            .try_into()
            .map_err(|_| bad("`signature` is not 64 bytes"))?;
        const MEMBERS: [&str; 8] = [
            "type",
            "version",
            "seq",
            "hash",
            "counter",
            "createdAt",
            "keyId",
            "signature",
        ];
        if let Some(k) = m.keys().find(|k| !MEMBERS.contains(&k.as_str())) {
            return Err(bad(&format!("unexpected member `{k}`")));
        }
        // The signed bytes are rebuilt from the members read: a changed member fails here.
        let payload = capability_core::json::canonical_string(&checkpoint.payload());
        key.verifying_key()
            .verify(
                payload.as_bytes(),
                &ed25519_dalek::Signature::from_bytes(&signature),
            )
            .map_err(|_| CheckpointError::BadSignature)?;
        Ok(checkpoint)
    }
}

/// Takes a checkpoint of `store`'s current head: records it (the store's counter moves on)
/// and returns the signed document.
pub fn take(
    store: &dyn AuditStore,
    key: &HostKey,
    created_at: &str,
) -> Result<Value, CheckpointError> {
    let (seq, hash) = store
        .head()?
        .unwrap_or((0, crate::audit::GENESIS_HASH.to_string()));
    let counter = store.record_checkpoint(seq, &hash, created_at)?;
    Ok(Checkpoint {
        seq,
        hash,
        counter,
        created_at: created_at.to_string(),
        key_id: key.key_id(),
    }
    .sign(key))
}

/// The outcome of verifying a store against a checkpoint.
#[derive(Clone, Debug)]
pub struct CheckpointReport {
    /// The chain on its own.
    pub chain: VerifyReport,
    pub checkpoint: Checkpoint,
    /// Why the log does not extend the checkpoint, when it does not.
    pub problem: Option<String>,
}

impl CheckpointReport {
    /// Both the chain and the checkpoint hold.
    pub fn ok(&self) -> bool {
        self.chain.ok && self.problem.is_none()
    }
}

/// Verifies `store`'s whole chain and that it still extends `checkpoint` (see the module
/// docs).
pub fn verify_against(
    store: &dyn AuditStore,
    checkpoint: Checkpoint,
) -> Result<CheckpointReport, CheckpointError> {
    let chain = verify_store(store)?;
    let problem = extends(store, &checkpoint)?;
    Ok(CheckpointReport {
        chain,
        checkpoint,
        problem,
    })
}

/// Incremental verification from a checkpoint (its signature already checked, as
/// [`Checkpoint::verify`] does): that the log still extends it, then the chain from the
/// checkpoint's record on ([`verify_after`]), so the cost is that of the records appended
/// since, not of the whole log. Records up to the checkpoint are not read again: an edit
/// among them that left the checkpoint's record and hash in place is found by the whole
/// chain's verification ([`verify_store`], `cap audit verify --full`) only. When the log
/// does not extend the checkpoint, the whole chain is verified, so that the report says
/// where it breaks.
pub fn verify_since(
    store: &dyn AuditStore,
    checkpoint: Checkpoint,
) -> Result<CheckpointReport, CheckpointError> {
    let problem = extends(store, &checkpoint)?;
    let chain = match problem {
        Some(_) => verify_store(store)?,
        None => verify_after(store, checkpoint.seq, &checkpoint.hash)?,
    };
    Ok(CheckpointReport {
        chain,
        checkpoint,
        problem,
    })
}

/// Why the log does not extend `checkpoint` (truncated, rebuilt, or an older database), or
/// `None` when it does. Reads the head, the checkpoint's record and the counter only.
pub fn extends(
    store: &dyn AuditStore,
    checkpoint: &Checkpoint,
) -> Result<Option<String>, StoreError> {
    let head_seq = store.head()?.map_or(0, |(s, _)| s);
    let problem = if head_seq < checkpoint.seq {
        Some(format!(
            "the log ends at record {head_seq}, but checkpoint {} was taken at record {}: \
             records were removed and the head moved back",
            checkpoint.counter, checkpoint.seq
        ))
    } else if checkpoint.seq == 0 {
        None
    } else {
        match store.records(checkpoint.seq, 1)?.first() {
            Some(r) if r.seq == checkpoint.seq && r.hash == checkpoint.hash => None,
            Some(r) if r.seq == checkpoint.seq => Some(format!(
                "record {} has hash {}, but checkpoint {} says {}: records up to it were \
                 edited and the chain recomputed",
                r.seq, r.hash, checkpoint.counter, checkpoint.hash
            )),
            _ => Some(format!(
                "record {} of checkpoint {} is missing: records were removed",
                checkpoint.seq, checkpoint.counter
            )),
        }
    };
    if problem.is_some() {
        return Ok(problem);
    }
    let issued = store.checkpoints_issued()?;
    Ok((issued < checkpoint.counter).then(|| {
        format!(
            "this store has issued {issued} checkpoints, but this is checkpoint {}: \
             the database was replaced by an older copy",
            checkpoint.counter
        )
    }))
}
