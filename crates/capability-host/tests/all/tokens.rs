//! Bearer tokens and console logins: only hashes are stored; revoked, expired and unknown
//! tokens are refused with their reason.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use capability_host::tokens::{AuthError, Role, TokenSpec, Tokens, parse_duration};
use capability_host::{Host, HostConfig};
use rusqlite::Connection;

fn database(host: &Host) -> Connection {
    Connection::open(host.home().database()).unwrap()
}

#[test]
fn durations_are_a_number_and_a_unit() {
    assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
    assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
    assert_eq!(parse_duration("30d"), Some(Duration::from_secs(2_592_000)));
    for refused in ["0s", "10", "h", "5y"] {
        assert_eq!(parse_duration(refused), None, "{refused}");
    }
}

#[test]
fn a_token_authenticates_until_it_is_revoked_and_only_its_hash_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let host = crate::host_with(dir.path(), None);
    let tokens = host.tokens().unwrap();
    let mut spec = TokenSpec::agent("bot");
    spec.scopes.insert("read".into());
    let (rec, secret) = tokens.add(&spec).unwrap();
    assert!(secret.starts_with("cap_") && secret.len() == 68);
    let got = tokens.authenticate(&secret).unwrap();
    assert_eq!(got, rec);
    assert_eq!(got.actor().agent_id.as_deref(), Some("bot"));
    assert_eq!(
        tokens.authenticate("cap_nope").unwrap_err(),
        AuthError::Unknown
    );
    assert_eq!(tokens.authenticate("").unwrap_err(), AuthError::Missing);
    let n: i64 = database(&host)
        .query_row(
            "SELECT count(*) FROM tokens WHERE hash = ?1 OR id = ?1",
            [&secret],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 0, "the secret itself is never stored");
    let revoked = tokens.revoke(&rec.id).unwrap();
    assert!(revoked.revoked_at.is_some());
    assert_eq!(
        tokens.authenticate(&secret).unwrap_err(),
        AuthError::Revoked
    );
    assert!(tokens.revoke("tok_missing").is_err());
    assert_eq!(tokens.list().unwrap().len(), 1);
}

#[test]
fn an_approver_logs_in_with_an_argon2_password_for_its_tenants() {
    let dir = tempfile::tempdir().unwrap();
    let host = crate::host_with(dir.path(), None);
    let tokens = host.tokens().unwrap();
    let mut spec = TokenSpec::agent("alice");
    spec.role = Role::Approver;
    spec.tenants.insert("acme".into());
    spec.login = Some(("alice".into(), "correct horse".into()));
    let (rec, secret) = tokens.add(&spec).unwrap();
    assert!(rec.may_approve_for(Some("acme")));
    assert!(!rec.may_approve_for(Some("globex")));
    assert!(!rec.may_approve_for(None));
    let got = tokens.login("alice", "correct horse").unwrap();
    assert_eq!(got, rec);
    assert_eq!(got, tokens.authenticate(&secret).unwrap());
    assert_eq!(got.name(), "alice");
    for (name, password) in [("alice", "wrong horse"), ("bob", "correct horse")] {
        assert_eq!(
            tokens.login(name, password).unwrap_err(),
            AuthError::BadLogin
        );
    }
    let stored: String = database(&host)
        .query_row(
            "SELECT password_hash FROM tokens WHERE login = 'alice'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(stored.starts_with("$argon2id$") && !stored.contains("correct horse"));
    // A login name is unique; short passwords and tenants on non-approvers are refused.
    assert!(tokens.add(&spec).is_err());
    spec.login = Some(("carol".into(), "short".into()));
    assert!(tokens.add(&spec).is_err());
    let mut agent = TokenSpec::agent("bot");
    agent.tenants.insert("acme".into());
    assert!(tokens.add(&agent).is_err());
    // A revoked login is refused.
    tokens.revoke(&rec.id).unwrap();
    assert_eq!(
        tokens.login("alice", "correct horse").unwrap_err(),
        AuthError::Revoked
    );
    assert_eq!(tokens.by_id(&rec.id).unwrap_err(), AuthError::Revoked);
}

#[test]
fn a_token_table_of_an_older_home_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    {
        // The table as the first releases created it: no tenants, no logins.
        let conn = Connection::open(capability_host::Home::at(&home).database()).unwrap();
        conn.execute_batch(
            "CREATE TABLE tokens (id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, \
             agent_id TEXT NOT NULL, tenant TEXT, scopes TEXT NOT NULL, role TEXT NOT NULL, \
             created_at INTEGER NOT NULL, expires_at INTEGER, revoked_at INTEGER)",
        )
        .unwrap();
        conn.execute(
            "INSERT INTO tokens (id, hash, agent_id, scopes, role, created_at) \
             VALUES ('tok_old', 'h', 'bot', '[]', 'agent', 1)",
            [],
        )
        .unwrap();
    }
    let host = Host::open(HostConfig {
        home: Some(home),
        ..HostConfig::default()
    })
    .unwrap();
    let list = host.tokens().unwrap().list().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].id, "tok_old");
    assert!(list[0].tenants.is_empty() && list[0].login.is_none());
}

#[test]
fn an_expired_token_is_refused_and_listed_as_expired() {
    let dir = tempfile::tempdir().unwrap();
    let host = crate::host_with(dir.path(), None);
    let tokens: &Tokens = host.tokens().unwrap();
    let (rec, secret) = tokens.add(&TokenSpec::agent("bot")).unwrap();
    database(&host)
        .execute("UPDATE tokens SET expires_at = 1 WHERE id = ?1", [&rec.id])
        .unwrap();
    assert_eq!(
        tokens.authenticate(&secret).unwrap_err(),
        AuthError::Expired
    );
    let now = i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    assert_eq!(tokens.list().unwrap()[0].to_json(now)["status"], "expired");
}
