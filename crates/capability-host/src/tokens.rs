//! Bearer tokens: who calls the host's HTTP surfaces (the MCP server, the MCP gateway and
//! `cap serve` all authenticate with these).
//!
//! A token is `cap_` followed by 64 hex digits (244 random bits). It is shown once, when it
//! is made ([`Tokens::add`]); the home keeps only its SHA-256, with the principal it stands
//! for: an agent id, an optional tenant, scopes and a [`Role`], and an optional expiry.
//! [`Tokens::authenticate`] maps a presented token to its [`TokenRecord`] or says why it is
//! refused ([`AuthError`]: missing, unknown, expired or revoked). Revocation is a row
//! update, seen by every process on its next request: nothing is cached.
//!
//! An approver token carries the tenants its holder may approve for (`*` for every
//! tenant), and a token may carry a console login: a name and a password stored as an
//! Argon2id hash ([`Tokens::login`] checks it; a wrong password and an unknown name are
//! refused alike, after the same work).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use capability_journal::Database;
use capability_policy::Actor;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::HostError;

/// What a token's holder may do on the HTTP surfaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Calls capabilities and tools (the MCP server and gateway).
    Agent,
    /// Decides approvals (the console and API); never calls tools.
    Approver,
    /// Reads receipts and the audit log.
    Auditor,
    /// Everything.
    Admin,
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "agent" => Role::Agent,
            "approver" => Role::Approver,
            "auditor" => Role::Auditor,
            "admin" => Role::Admin,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Approver => "approver",
            Role::Auditor => "auditor",
            Role::Admin => "admin",
        }
    }

    /// May call capabilities and tools.
    pub fn may_call(self) -> bool {
        matches!(self, Role::Agent | Role::Admin)
    }

    /// May approve or deny approvals (for the tenants of the token, see
    /// [`TokenRecord::may_approve_for`]).
    pub fn may_approve(self) -> bool {
        matches!(self, Role::Approver | Role::Admin)
    }

    /// May read approvals, receipts, the audit log and policies.
    pub fn may_read(self) -> bool {
        matches!(self, Role::Approver | Role::Auditor | Role::Admin)
    }
}

/// The principal a new token stands for.
#[derive(Clone, Debug)]
pub struct TokenSpec {
    pub agent_id: String,
    pub tenant: Option<String>,
    pub scopes: BTreeSet<String>,
    pub role: Role,
    /// How long the token is valid (forever when `None`).
    pub expires_in: Option<Duration>,
    /// The tenants an approver may approve for (`*`: every tenant).
    pub tenants: BTreeSet<String>,
    /// A console login name, with its password.
    pub login: Option<(String, String)>,
}

impl TokenSpec {
    pub fn agent(agent_id: impl Into<String>) -> Self {
        TokenSpec {
            agent_id: agent_id.into(),
            tenant: None,
            scopes: BTreeSet::new(),
            role: Role::Agent,
            expires_in: None,
            tenants: BTreeSet::new(),
            login: None,
        }
    }
}

/// A stored token (never its secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRecord {
    pub id: String,
    pub agent_id: String,
    pub tenant: Option<String>,
    pub scopes: BTreeSet<String>,
    pub role: Role,
    /// Milliseconds since the epoch.
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
    /// The tenants an approver may approve for (`*`: every tenant).
    pub tenants: BTreeSet<String>,
    /// The console login name, when the token has one.
    pub login: Option<String>,
}

impl TokenRecord {
    /// The principal's name as approvals record it: the login, else the agent id.
    pub fn name(&self) -> &str {
        self.login.as_deref().unwrap_or(&self.agent_id)
    }

    /// Whether this principal may decide an approval of `tenant`: an admin always; an
    /// approver when the tenant is one of its tenants or it holds `*` (an approval without
    /// a tenant needs `*`); nobody else.
    pub fn may_approve_for(&self, tenant: Option<&str>) -> bool {
        match self.role {
            Role::Admin => true,
            Role::Approver => {
                self.tenants.contains("*") || tenant.is_some_and(|t| self.tenants.contains(t))
            }
            Role::Agent | Role::Auditor => false,
        }
    }

    /// The actor a request made with this token acts as.
    pub fn actor(&self) -> Actor {
        let mut actor = Actor::agent(self.agent_id.clone());
        actor.tenant = self.tenant.clone();
        actor.scopes = self.scopes.clone();
        actor.principal_id = Some(format!("token:{}", self.id));
        actor
    }

    /// `{id, agentId, tenant, scopes, role, createdAt, expiresAt, revokedAt, status}`
    /// (times as ISO 8601).
    pub fn to_json(&self, now_ms: i64) -> Value {
        let status = if self.revoked_at.is_some() {
            "revoked"
        } else if self.expires_at.is_some_and(|e| e <= now_ms) {
            "expired"
        } else {
            "active"
        };
        json!({
            "id": self.id,
            "agentId": self.agent_id,
            "tenant": self.tenant,
            "scopes": self.scopes,
            "role": self.role.as_str(),
            "createdAt": iso(self.created_at),
            "expiresAt": self.expires_at.map(iso),
            "revokedAt": self.revoked_at.map(iso),
            "status": status,
            "tenants": self.tenants,
            "login": self.login,
        })
    }
}

fn iso(ms: i64) -> String {
    capability_core::js::iso_from_millis(ms)
}

/// Why a presented token is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("a bearer token is required")]
    Missing,
    #[error("the bearer token is not known")]
    Unknown,
    #[error("the bearer token has expired")]
    Expired,
    #[error("the bearer token has been revoked")]
    Revoked,
    #[error("the token store cannot be read")]
    Unavailable,
    #[error("the login name or password is wrong")]
    BadLogin,
    /// Too many failures from this address or for this login: retry after this long.
    #[error("too many failed attempts; retry in {} s", .retry_after.as_secs().max(1))]
    Throttled { retry_after: Duration },
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Parses `90s`, `15m`, `12h`, `30d` or `2w` (a number and one unit).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return None,
    };
    n.checked_mul(seconds)
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

fn digest(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// An Argon2id PHC string of `password` (the crate's default cost: 19 MiB, 2 passes).
fn hash_password(password: &str) -> Result<String, HostError> {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let salt = SaltString::encode_b64(uuid::Uuid::new_v4().as_bytes()).map_err(store_err)?;
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(store_err)
}

fn password_matches(password: &str, phc: &str) -> bool {
    use argon2::password_hash::{PasswordHash, PasswordVerifier};
    PasswordHash::new(phc).is_ok_and(|h| {
        argon2::Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

/// Checked when a login name is unknown, so that it costs what a wrong password costs.
fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| hash_password("not a password").unwrap_or_default())
}

/// Shortest console password accepted.
pub const MIN_PASSWORD_LEN: usize = 8;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    agent_id TEXT NOT NULL,
    tenant TEXT,
    scopes TEXT NOT NULL,
    role TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    revoked_at INTEGER
)";

/// Columns added after the first release, with their types (added when missing).
const ADDED_COLUMNS: [(&str, &str); 3] = [
    ("tenants", "TEXT"),
    ("login", "TEXT"),
    ("password_hash", "TEXT"),
];

const COLUMNS: &str =
    "id, agent_id, tenant, scopes, role, created_at, expires_at, revoked_at, tenants, login";

/// Creates or upgrades the table in one `BEGIN IMMEDIATE` transaction (see
/// [`capability_journal::db::create_schema`]: concurrent openers of a new home wait instead
/// of failing).
fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute_batch(SCHEMA)?;
    let mut have = BTreeSet::new();
    {
        let mut stmt = tx.prepare("PRAGMA table_info(tokens)")?;
        let names = stmt.query_map([], |r| r.get::<_, String>(1))?;
        for n in names {
            have.insert(n?);
        }
    }
    for (name, kind) in ADDED_COLUMNS {
        if !have.contains(name) {
            tx.execute_batch(&format!("ALTER TABLE tokens ADD COLUMN {name} {kind}"))?;
        }
    }
    tx.execute_batch("CREATE UNIQUE INDEX IF NOT EXISTS tokens_by_login ON tokens (login)")?;
    tx.commit()
}

fn record(row: &rusqlite::Row<'_>) -> rusqlite::Result<TokenRecord> {
    let scopes: String = row.get(3)?;
    let role: String = row.get(4)?;
    Ok(TokenRecord {
        id: row.get(0)?,
        agent_id: row.get(1)?,
        tenant: row.get(2)?,
        scopes: serde_json::from_str(&scopes).unwrap_or_default(),
        // An unknown role (a newer writer) grants the least.
        role: Role::parse(&role).unwrap_or(Role::Auditor),
        created_at: row.get(5)?,
        expires_at: row.get(6)?,
        revoked_at: row.get(7)?,
        tenants: row
            .get::<_, Option<String>>(8)?
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default(),
        login: row.get(9)?,
    })
}

/// The token store of a durable home.
pub struct Tokens {
    db: Arc<Database>,
    reader: Mutex<Option<Connection>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens").finish_non_exhaustive()
    }
}

fn store_err(e: impl std::fmt::Display) -> HostError {
    crate::error::StoreError::new("tokens", e).into()
}

impl Tokens {
    pub(crate) fn open(db: Arc<Database>) -> Result<Tokens, HostError> {
        db.call(migrate)
            .map_err(|_| store_err("the database writer stopped"))?
            .map_err(store_err)?;
        Ok(Tokens {
            db,
            reader: Mutex::new(None),
        })
    }

    /// Makes a token; returns its record and the secret (shown once, never stored).
    pub fn add(&self, spec: &TokenSpec) -> Result<(TokenRecord, String), HostError> {
        if spec.agent_id.trim().is_empty() {
            return Err(store_err("the agent id must not be empty"));
        }
        if !spec.tenants.is_empty() && spec.role != Role::Approver {
            return Err(store_err(format!(
                "only approver tokens carry tenants to approve for, not {}",
                spec.role.as_str()
            )));
        }
        let password_hash = match &spec.login {
            Some((name, password)) => {
                if name.trim().is_empty() || name.chars().any(char::is_control) {
                    return Err(store_err("the login name must not be empty"));
                }
                if password.chars().count() < MIN_PASSWORD_LEN {
                    return Err(store_err(format!(
                        "the password must have at least {MIN_PASSWORD_LEN} characters"
                    )));
                }
                Some(hash_password(password)?)
            }
            None => None,
        };
        let secret = format!(
            "cap_{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let created_at = now_ms();
        let expires_at = spec
            .expires_in
            .map(|d| created_at.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)));
        let id = format!("tok_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let record = TokenRecord {
            id,
            agent_id: spec.agent_id.clone(),
            tenant: spec.tenant.clone(),
            scopes: spec.scopes.clone(),
            role: spec.role,
            created_at,
            expires_at,
            revoked_at: None,
            tenants: spec.tenants.clone(),
            login: spec.login.as_ref().map(|(name, _)| name.clone()),
        };
        let row = record.clone();
        let hash = digest(&secret);
        let scopes = serde_json::to_string(&row.scopes).map_err(store_err)?;
        let tenants = serde_json::to_string(&row.tenants).map_err(store_err)?;
        self.db
            .call(move |conn| {
                conn.execute(
                    "INSERT INTO tokens (id, hash, agent_id, tenant, scopes, role, created_at, \
                     expires_at, tenants, login, password_hash) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                    params![
                        row.id,
                        hash,
                        row.agent_id,
                        row.tenant,
                        scopes,
                        row.role.as_str(),
                        row.created_at,
                        row.expires_at,
                        tenants,
                        row.login,
                        password_hash
                    ],
                )
            })
            .map_err(|_| store_err("the database writer stopped"))?
            .map_err(|e| match &e {
                rusqlite::Error::SqliteFailure(f, _)
                    if f.code == rusqlite::ErrorCode::ConstraintViolation =>
                {
                    crate::error::InvalidRequest::new("that login name is taken").into()
                }
                _ => store_err(e),
            })?;
        Ok((record, secret))
    }

    fn read<R>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<R>) -> rusqlite::Result<R> {
        let mut guard = self.reader.lock().unwrap_or_else(PoisonError::into_inner);
        if guard.is_none() {
            *guard = Some(self.db.connect()?);
        }
        match guard.as_ref() {
            Some(conn) => f(conn),
            None => Err(rusqlite::Error::InvalidQuery),
        }
    }

    /// Every token, oldest first.
    pub fn list(&self) -> Result<Vec<TokenRecord>, HostError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM tokens ORDER BY created_at, id"
            ))?;
            let rows = stmt.query_map([], record)?;
            rows.collect()
        })
        .map_err(store_err)
    }

    /// Revokes a token by id; revoking twice keeps the first time.
    pub fn revoke(&self, id: &str) -> Result<TokenRecord, HostError> {
        let owned = id.to_string();
        let now = now_ms();
        let changed = self
            .db
            .call(move |conn| {
                conn.execute(
                    "UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?2) WHERE id = ?1",
                    params![owned, now],
                )
            })
            .map_err(|_| store_err("the database writer stopped"))?
            .map_err(store_err)?;
        if changed == 0 {
            return Err(crate::error::NotFound::new("token", id).into());
        }
        self.read(|conn| {
            conn.query_row(
                &format!("SELECT {COLUMNS} FROM tokens WHERE id = ?1"),
                [id],
                record,
            )
        })
        .map_err(store_err)
    }

    /// The record of a presented token, or why it is refused.
    pub fn authenticate(&self, secret: &str) -> Result<TokenRecord, AuthError> {
        if secret.is_empty() {
            return Err(AuthError::Missing);
        }
        let hash = digest(secret);
        let found = self
            .read(|conn| {
                conn.prepare_cached(&format!("SELECT {COLUMNS} FROM tokens WHERE hash = ?1"))?
                    .query_row([hash], record)
                    .optional()
            })
            .map_err(|_| AuthError::Unavailable)?;
        let Some(record) = found else {
            return Err(AuthError::Unknown);
        };
        usable(record)
    }

    /// The record of a token id (a console session holds the id, and every request sees a
    /// revocation or expiry).
    pub fn by_id(&self, id: &str) -> Result<TokenRecord, AuthError> {
        let found = self
            .read(|conn| {
                conn.prepare_cached(&format!("SELECT {COLUMNS} FROM tokens WHERE id = ?1"))?
                    .query_row([id], record)
                    .optional()
            })
            .map_err(|_| AuthError::Unavailable)?;
        usable(found.ok_or(AuthError::Unknown)?)
    }

    /// The record of a console login whose password matches. An unknown name and a wrong
    /// password are both [`AuthError::BadLogin`], and cost the same.
    pub fn login(&self, name: &str, password: &str) -> Result<TokenRecord, AuthError> {
        let found = self
            .read(|conn| {
                conn.prepare_cached(&format!(
                    "SELECT {COLUMNS}, password_hash FROM tokens WHERE login = ?1"
                ))?
                .query_row([name], |row| {
                    Ok((record(row)?, row.get::<_, Option<String>>(10)?))
                })
                .optional()
            })
            .map_err(|_| AuthError::Unavailable)?;
        match found {
            Some((record, Some(phc))) if password_matches(password, &phc) => usable(record),
            Some(_) => Err(AuthError::BadLogin),
            None => {
                let _ = password_matches(password, dummy_hash());
                Err(AuthError::BadLogin)
            }
        }
    }
}

fn usable(record: TokenRecord) -> Result<TokenRecord, AuthError> {
    if record.revoked_at.is_some() {
        return Err(AuthError::Revoked);
    }
    if record.expires_at.is_some_and(|e| e <= now_ms()) {
        return Err(AuthError::Expired);
    }
    Ok(record)
}
