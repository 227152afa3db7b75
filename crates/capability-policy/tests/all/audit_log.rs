//! The hash-chained audit log in SQLite (and memory): append with group commit, tail by
//! tenant, show, verify against edits, deletions, reordering and truncation, export.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use capability_policy::audit::{self, AuditRecord, ChainVerifier};
use capability_policy::*;
use rusqlite::Connection;
use serde_json::{Value, json};

fn event(tenant: Option<&str>, outcome: AuditOutcome, decision: Decision) -> AuditEvent {
    let cap = Arc::new(
        GovernedCapability::new("refund_customer", CapabilityKind::Tool).risk(RiskLevel::High),
    );
    let mut a =
        AgentAction::new(ActionType::ToolCall, cap, "agent").input(json!({"amount_usd": 5}));
    a.tenant_id = tenant.map(str::to_string);
    AuditEvent::new(&a, &decision, Stage::BeforeCapability, outcome)
}

fn fill(store: &dyn AuditStore, n: usize) -> Vec<AuditRecord> {
    let events: Vec<AuditEvent> = (0..n)
        .map(|i| {
            let tenant = if i % 2 == 0 { "acme" } else { "globex" };
            event(
                Some(tenant),
                AuditOutcome::Allowed,
                Decision::allow().with_reason(format!("r{i}")),
            )
        })
        .collect();
    store.append(&events).unwrap()
}

fn open(dir: &tempfile::TempDir) -> (SqliteStore, std::path::PathBuf) {
    let path = dir.path().join("data/capability.db");
    (SqliteStore::open(&path).unwrap(), path)
}

#[test]
fn appended_records_are_chained_and_persist() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    let records = fill(&store, 5);
    assert_eq!(
        records.iter().map(|r| r.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    assert_eq!(records[0].prev_hash, audit::GENESIS_HASH);
    for w in records.windows(2) {
        assert_eq!(w[1].prev_hash, w[0].hash);
    }
    assert_eq!(
        records[2].hash,
        audit::chain_hash(3, &records[2].prev_hash, &records[2].event)
    );
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.head().unwrap(), Some((5, records[4].hash.clone())));
    let more = fill(&store, 1);
    assert_eq!(
        (more[0].seq, more[0].prev_hash.clone()),
        (6, records[4].hash.clone())
    );
    assert!(verify_store(&store).unwrap().ok);
}

#[test]
fn tail_filters_by_tenant_and_limits_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(&dir);
    fill(&store, 7);
    let all = store.tail(None, 3).unwrap();
    assert_eq!(all.iter().map(|r| r.seq).collect::<Vec<_>>(), [5, 6, 7]);
    let acme = store.tail(Some("acme"), 10).unwrap();
    assert_eq!(acme.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 3, 5, 7]);
    let globex = store.tail(Some("globex"), 2).unwrap();
    assert_eq!(globex.iter().map(|r| r.seq).collect::<Vec<_>>(), [4, 6]);
    assert!(store.tail(Some("nobody"), 10).unwrap().is_empty());
}

#[test]
fn show_finds_an_event_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(&dir);
    let e = event(
        Some("acme"),
        AuditOutcome::DeniedBeforeExecution,
        Decision::deny("no").with_code("LIMIT"),
    );
    store.append(std::slice::from_ref(&e)).unwrap();
    let found = store.get(&e.event_id).unwrap().unwrap();
    assert_eq!(found.event().unwrap(), e);
    assert!(store.get("evt_missing").unwrap().is_none());
    // Event ids are unique in the log.
    assert!(matches!(
        store.append(&[e]),
        Err(store::StoreError::Duplicate { .. })
    ));
}

fn corrupt(path: &std::path::Path, sql: &str) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(sql).unwrap();
}

#[test]
fn verify_reports_an_edited_record() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    let records = fill(&store, 6);
    assert!(verify_store(&store).unwrap().ok);
    corrupt(
        &path,
        "UPDATE audit_events SET event = replace(event, '\"r3\"', '\"r9\"') WHERE seq = 4",
    );
    let report = verify_store(&store).unwrap();
    assert!(!report.ok);
    let bad = report.first_bad.unwrap();
    assert_eq!(bad.seq, 4);
    assert_eq!(bad.event_id.as_deref(), records[3].event_id());
    assert!(bad.problem.contains("edited"), "{}", bad.problem);
}

#[test]
fn verify_reports_a_deleted_record() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    fill(&store, 6);
    corrupt(&path, "DELETE FROM audit_events WHERE seq = 3");
    let bad = verify_store(&store).unwrap().first_bad.unwrap();
    assert_eq!(bad.seq, 3);
    assert!(
        bad.problem.contains("record 3 is missing"),
        "{}",
        bad.problem
    );
}

#[test]
fn verify_reports_reordered_records() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    fill(&store, 6);
    // Swap records 2 and 3 (their positions in the log), keeping everything else.
    corrupt(
        &path,
        "UPDATE audit_events SET seq = -1 WHERE seq = 2;
         UPDATE audit_events SET seq = 2 WHERE seq = 3;
         UPDATE audit_events SET seq = 3 WHERE seq = -1;",
    );
    let bad = verify_store(&store).unwrap().first_bad.unwrap();
    assert_eq!(bad.seq, 2);
    assert!(bad.problem.contains("reordered"), "{}", bad.problem);
}

#[test]
fn verify_reports_a_truncated_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    fill(&store, 4);
    corrupt(&path, "DELETE FROM audit_events WHERE seq = 4");
    let report = verify_store(&store).unwrap();
    assert_eq!(report.records, 3);
    let bad = report.first_bad.unwrap();
    assert!(
        bad.problem
            .contains("ends at record 3 but its head is record 4"),
        "{}",
        bad.problem
    );
}

#[test]
fn verify_on_memory_records_catches_the_same_tampering() {
    let store = MemoryStore::new();
    fill(&store, 5);
    assert!(verify_store(&store).unwrap().ok);
    store.tamper(|records| records[1].event["reason"] = json!("changed"));
    assert_eq!(verify_store(&store).unwrap().first_bad.unwrap().seq, 2);

    let store = MemoryStore::new();
    let records = fill(&store, 5);
    let mut swapped = records.clone();
    swapped.swap(2, 3);
    // Seen in stored order 1, 2, 4, 3, 5: the problem shows where 3 was expected.
    let report = audit::verify_chain(&swapped, store.head().unwrap());
    assert_eq!(report.first_bad.unwrap().seq, 3);
    let mut v = ChainVerifier::new();
    for r in &records {
        assert!(v.push(r));
    }
    assert!(v.finish(store.head().unwrap()).ok);
}

#[test]
fn other_tables_in_the_file_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE receipts (id TEXT PRIMARY KEY, body TEXT);
             INSERT INTO receipts VALUES ('rcpt_1', '{}');",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    fill(&store, 2);
    drop(store);
    let conn = Connection::open(&path).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM receipts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        tables,
        [
            "approval_changes",
            "approval_requests",
            "audit_checkpoints",
            "audit_events",
            "audit_head",
            "audit_tenant_heads",
            "receipts"
        ]
    );
}

#[test]
fn concurrent_appends_form_one_chain() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    let store = Arc::new(store);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..25 {
                    let e = event(
                        Some("acme"),
                        AuditOutcome::Executed,
                        Decision::allow().with_reason(format!("{t}-{i}")),
                    );
                    store.append(&[e]).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let report = verify_store(store.as_ref()).unwrap();
    assert!(report.ok, "{report:?}");
    assert_eq!(report.records, 200);
    // A second store on the same file (another process) continues the same chain.
    let other = SqliteStore::open(&path).unwrap();
    fill(&other, 3);
    fill(store.as_ref(), 3);
    let report = verify_store(&other).unwrap();
    assert!(report.ok && report.records == 206, "{report:?}");
}

#[test]
fn export_jsonl_and_otel() {
    let store = MemoryStore::new();
    let mut denied = event(
        Some("acme"),
        AuditOutcome::DeniedBeforeExecution,
        Decision::deny("no"),
    );
    denied.receipt_id = Some("rcpt_1".into());
    let failed = event(None, AuditOutcome::ExecutionFailed, Decision::allow());
    let records = store.append(&[denied.clone(), failed]).unwrap();

    let mut out = Vec::new();
    audit::export_jsonl(&records, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["seq"], json!(1));
    assert_eq!(lines[0]["hash"], json!(records[0].hash));
    assert_eq!(lines[0]["event_id"], json!(denied.event_id));
    assert_eq!(lines[0]["receipt_id"], json!("rcpt_1"));

    let otel = audit::export_otel(&records, "capability-runtime");
    let resource = &otel["resourceLogs"][0];
    assert_eq!(
        resource["resource"]["attributes"][0]["value"]["stringValue"],
        json!("capability-runtime")
    );
    let logs = resource["scopeLogs"][0]["logRecords"].as_array().unwrap();
    assert_eq!(logs.len(), 2);
    assert_eq!(logs[0]["severityText"], json!("WARN"));
    assert_eq!(logs[1]["severityText"], json!("ERROR"));
    let trace = logs[0]["traceId"].as_str().unwrap();
    assert_eq!(trace, &denied.trace_id[3..]);
    assert_eq!(
        logs[0]["spanId"].as_str().unwrap(),
        &denied.action_id[4..20]
    );
    let nanos: i128 = logs[0]["timeUnixNano"].as_str().unwrap().parse().unwrap();
    let millis = capability_core::js::now_millis() as i128;
    assert!(
        (millis * 1_000_000 - nanos).abs() < 60_000_000_000,
        "{nanos}"
    );
    let attrs = logs[0]["attributes"].as_array().unwrap();
    let get = |k: &str| {
        attrs
            .iter()
            .find(|a| a["key"] == json!(k))
            .map(|a| a["value"].clone())
    };
    assert_eq!(
        get("capability.outcome"),
        Some(json!({"stringValue": "denied_before_execution"}))
    );
    assert_eq!(get("audit.seq"), Some(json!({"intValue": "1"})));
    assert!(
        get("capability.principal_id").is_none(),
        "null fields are left out"
    );
}

#[test]
fn the_governor_writes_every_decision_to_the_chained_store() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(&dir);
    let store = Arc::new(store);
    let g = Governor::new("agent")
        .tenant("acme")
        .audit(store.clone() as Arc<dyn AuditSink>);
    g.register_capability(GovernedCapability::new("t", CapabilityKind::Tool));
    g.policies().register(Policy::before("t", |ctx| {
        if ctx.arg_str("mode") == Some("bad") {
            Decision::deny("bad mode").with_code("MODE")
        } else {
            Decision::allow()
        }
    }));
    g.intercept(
        InterceptRequest::new("t", ActionType::ToolCall, json!({}))
            .receipt("rcpt_9")
            .plan_fingerprint("fp"),
        |_| Ok::<_, String>(json!(1)),
    )
    .unwrap();
    let _ = g.intercept(
        InterceptRequest::new("t", ActionType::ToolCall, json!({"mode": "bad"})),
        |_| Ok::<_, String>(json!(1)),
    );
    let tail = store.tail(Some("acme"), 10).unwrap();
    let events: Vec<AuditEvent> = tail.iter().map(|r| r.event().unwrap()).collect();
    let outcomes: Vec<AuditOutcome> = events.iter().map(|e| e.outcome).collect();
    assert_eq!(
        outcomes,
        [
            AuditOutcome::Allowed,
            AuditOutcome::Executed,
            AuditOutcome::DeniedBeforeExecution
        ]
    );
    assert_eq!(events[1].receipt_id.as_deref(), Some("rcpt_9"));
    assert_eq!(events[1].plan_fingerprint.as_deref(), Some("fp"));
    assert_eq!(events[2].code.as_deref(), Some("MODE"));
    assert!(verify_store(store.as_ref()).unwrap().ok);
}

#[test]
fn emitted_events_are_journaled_and_a_dead_process_journal_joins_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    // emit() returns before the commit; the event is readable once committed.
    let e = event(Some("acme"), AuditOutcome::Executed, Decision::allow());
    store.emit(&e).unwrap();
    assert_eq!(
        store.get(&e.event_id).unwrap().unwrap().event["event_id"],
        e.event_id.as_str()
    );
    drop(store);
    // A journal left by a process that died before its writer committed.
    let lost = event(Some("acme"), AuditOutcome::Allowed, Decision::allow());
    let torn = event(Some("acme"), AuditOutcome::Allowed, Decision::allow());
    let torn_line = capability_core::json::canonical_string(&torn.to_json());
    let journal = path
        .parent()
        .unwrap()
        .join("journal")
        .join("audit-999999-dead.jsonl");
    std::fs::write(
        &journal,
        format!(
            "{}\n{}",
            capability_core::json::canonical_string(&lost.to_json()),
            &torn_line[..torn_line.len() / 2]
        ),
    )
    .unwrap();
    let store = SqliteStore::open(&path).unwrap();
    assert!(
        store.get(&lost.event_id).unwrap().is_some(),
        "the dead journal was replayed"
    );
    assert!(
        store.get(&torn.event_id).unwrap().is_none(),
        "a torn line is skipped"
    );
    assert!(!journal.exists());
    let report = audit::verify_store(&store).unwrap();
    assert!(report.ok, "{report:?}");
    assert_eq!(report.records, 2);
}

/// The tenants' own chains: acme's records (seq 1, 3, 5, 7, 9) and globex's (2, 4, 6, 8)
/// each go 1, 2, 3, … and verify from their own records alone.
#[test]
fn each_tenant_has_a_chain_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    let records = fill(&store, 9);
    let untenanted = event(None, AuditOutcome::Allowed, Decision::allow());
    let plain = store.append(&[untenanted]).unwrap();
    assert!(plain[0].tenant_link.is_none());
    let acme: Vec<&AuditRecord> = records.iter().step_by(2).collect();
    let links: Vec<&TenantLink> = acme
        .iter()
        .map(|r| r.tenant_link.as_ref().unwrap())
        .collect();
    assert_eq!(
        links.iter().map(|l| l.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    assert_eq!(links[0].prev_hash, audit::GENESIS_HASH);
    for w in links.windows(2) {
        assert_eq!(w[1].prev_hash, w[0].hash);
    }
    assert_eq!(
        links[1].hash,
        audit::chain_hash(2, &links[0].hash, &acme[1].event)
    );
    // Read back as written, with the tenant fields in the export form.
    let stored = store.tenant_records("acme", 0, 100).unwrap();
    assert_eq!(stored.len(), 5);
    assert_eq!(
        stored.iter().map(|r| r.seq).collect::<Vec<_>>(),
        [1, 3, 5, 7, 9]
    );
    assert_eq!(stored[2].to_json()["tenant_seq"], 3);
    assert_eq!(
        store.tenant_head("acme").unwrap(),
        Some((5, links[4].hash.clone()))
    );
    assert_eq!(store.tenant_head("globex").unwrap().unwrap().0, 4);
    assert!(verify_tenant(&store, "acme").unwrap().ok);
    assert!(verify_tenant(&store, "globex").unwrap().ok);
    assert!(verify_store(&store).unwrap().ok);
    // The chains continue after reopening.
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    let more = fill(&store, 1);
    assert_eq!(more[0].tenant_link.as_ref().unwrap().seq, 6);
    assert!(verify_tenant(&store, "acme").unwrap().ok);

    // Memory keeps the same chains.
    let memory = MemoryStore::new();
    let m = fill(&memory, 9);
    assert_eq!(
        m.iter()
            .map(|r| r.tenant_link.as_ref().unwrap().seq)
            .collect::<Vec<_>>(),
        [1, 1, 2, 2, 3, 3, 4, 4, 5]
    );
    assert!(verify_tenant(&memory, "acme").unwrap().ok);
    assert!(verify_store(&memory).unwrap().ok);
}

#[test]
fn an_edit_in_one_tenant_chain_shows_there_and_in_the_log_only() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    fill(&store, 9);
    // seq 5 is acme's 3rd record.
    corrupt(
        &path,
        "UPDATE audit_events SET event = replace(event, '\"r4\"', '\"r0\"') WHERE seq = 5",
    );
    let acme = verify_tenant(&store, "acme").unwrap();
    let bad = acme.first_bad.unwrap();
    assert_eq!(bad.seq, 3);
    assert!(bad.problem.contains("edited"), "{}", bad.problem);
    assert!(verify_tenant(&store, "globex").unwrap().ok);
    assert_eq!(verify_store(&store).unwrap().first_bad.unwrap().seq, 5);
}

#[test]
fn a_deleted_or_truncated_tenant_record_shows_in_its_chain() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    fill(&store, 9);
    // globex's 2nd record (seq 4).
    corrupt(&path, "DELETE FROM audit_events WHERE seq = 4");
    let bad = verify_tenant(&store, "globex").unwrap().first_bad.unwrap();
    assert_eq!(bad.seq, 2);
    assert!(
        bad.problem.contains("record 2 is missing"),
        "{}",
        bad.problem
    );
    assert!(verify_tenant(&store, "acme").unwrap().ok);
    assert!(!verify_store(&store).unwrap().ok);

    // acme's last record removed, the global chain's head moved back to hide it: the
    // global chain verifies, acme's head does not.
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    let records = fill(&store, 9);
    corrupt(
        &path,
        &format!(
            "DELETE FROM audit_events WHERE seq = 9; UPDATE audit_head SET seq = 8, hash = '{}'",
            records[7].hash
        ),
    );
    assert!(verify_store(&store).unwrap().ok);
    let bad = verify_tenant(&store, "acme").unwrap().first_bad.unwrap();
    assert!(
        bad.problem
            .contains("ends at record 4 but its head is record 5"),
        "{}",
        bad.problem
    );
}

#[test]
fn forged_tenant_links_and_moved_events_are_caught() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    fill(&store, 9);
    // acme's 3rd record linked to its 1st (the 2nd cut out of acme's chain only).
    corrupt(
        &path,
        "UPDATE audit_events SET tenant_prev_hash = (SELECT tenant_hash FROM audit_events WHERE seq = 1),
                                 tenant_seq = 2 WHERE seq = 5;
         UPDATE audit_events SET tenant_seq = NULL WHERE seq = 3",
    );
    assert!(!verify_tenant(&store, "acme").unwrap().ok);
    let global = verify_store(&store).unwrap().first_bad.unwrap();
    assert_eq!(global.seq, 5);
    assert!(global.problem.contains("tenant acme"), "{}", global.problem);

    // A globex event relabelled as acme's is not acme's.
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    fill(&store, 9);
    corrupt(
        &path,
        "UPDATE audit_events SET tenant = 'acme', tenant_seq = 6,
             tenant_prev_hash = (SELECT tenant_hash FROM audit_events WHERE seq = 9)
         WHERE seq = 2",
    );
    let bad = verify_tenant(&store, "acme").unwrap().first_bad.unwrap();
    assert!(bad.problem.contains("does not belong"), "{}", bad.problem);
}

/// A database written before tenant chains existed gets the columns; its old records stay
/// in the global chain, and each tenant's chain starts with its next event.
#[test]
fn an_old_database_gains_tenant_chains() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    fill(&store, 3);
    drop(store);
    corrupt(
        &path,
        "DROP INDEX audit_events_by_tenant_seq;
         ALTER TABLE audit_events DROP COLUMN tenant_seq;
         ALTER TABLE audit_events DROP COLUMN tenant_prev_hash;
         ALTER TABLE audit_events DROP COLUMN tenant_hash;
         DELETE FROM audit_tenant_heads;",
    );
    let store = SqliteStore::open(&path).unwrap();
    assert!(verify_store(&store).unwrap().ok);
    let more = fill(&store, 2);
    assert_eq!(more[0].tenant_link.as_ref().unwrap().seq, 1);
    assert!(verify_store(&store).unwrap().ok);
    assert!(verify_tenant(&store, "acme").unwrap().ok);
    assert_eq!(store.tenant_records("acme", 0, 10).unwrap().len(), 1);
}

/// A value nested `levels` deep.
fn nested(levels: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..levels {
        v = json!({ "d": v });
    }
    v
}

/// The journal directory of the store at `path` and the audit records its quarantine holds.
fn quarantined(path: &std::path::Path) -> capability_journal::Quarantine {
    SqliteStore::quarantined(&path.parent().unwrap().join("journal")).unwrap()
}

/// Writes a dead process's audit journal named `name` holding `lines` beside the store.
fn dead_journal(path: &std::path::Path, name: &str, content: &str) -> std::path::PathBuf {
    let journal = path.parent().unwrap().join("journal").join(name);
    std::fs::write(&journal, content).unwrap();
    journal
}

#[test]
fn an_unreadable_event_in_a_dead_journal_is_kept_in_quarantine_not_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    drop(store);
    let good = event(Some("acme"), AuditOutcome::Allowed, Decision::allow());
    let good_line = capability_core::json::canonical_string(&good.to_json());
    // JSON, but not an event (a decision no event has).
    let mut bad = good.to_json();
    bad["event_id"] = json!("evt-bad");
    bad["decision"] = json!("shrug");
    let bad_line = capability_core::json::canonical_string(&bad);
    let journal = dead_journal(
        &path,
        "audit-999998-dead.jsonl",
        &format!("{bad_line}\n{good_line}\n"),
    );

    let store = SqliteStore::open(&path).unwrap();
    assert!(
        store.get(&good.event_id).unwrap().is_some(),
        "the good one is chained"
    );
    assert!(store.get("evt-bad").unwrap().is_none());
    assert!(!journal.exists(), "the journal itself is gone");
    let kept = path
        .parent()
        .unwrap()
        .join("journal/quarantine/audit-999998-dead.jsonl");
    assert_eq!(
        std::fs::read(&kept).unwrap(),
        format!("{bad_line}\n").into_bytes(),
        "the bad one is kept byte for byte"
    );
    let recovery = store.recovery();
    assert_eq!((recovery.journals, recovery.records), (1, 1));
    let warnings = recovery.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains(&kept.display().to_string()),
        "the warning names the quarantine file: {}",
        warnings[0]
    );
    assert_eq!(quarantined(&path).records(), 1);
    let report = audit::verify_store(&store).unwrap();
    assert!(report.ok, "{report:?}");
    assert_eq!(report.records, 1);
}

#[test]
fn a_journaled_event_nested_deeper_than_a_record_may_is_quarantined_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    drop(store);
    let good = event(Some("acme"), AuditOutcome::Allowed, Decision::allow());
    let mut deep = event(Some("acme"), AuditOutcome::Allowed, Decision::allow());
    deep.output = Some(nested(capability_core::json::RECORD_DEPTH + 1));
    let deep_line = capability_core::json::canonical_string(&deep.to_json());
    let journal = dead_journal(
        &path,
        "audit-999997-dead.jsonl",
        &format!(
            "{}\n{deep_line}\n",
            capability_core::json::canonical_string(&good.to_json())
        ),
    );

    let store = SqliteStore::open(&path).unwrap();
    assert!(store.get(&good.event_id).unwrap().is_some());
    assert!(store.get(&deep.event_id).unwrap().is_none());
    assert!(!journal.exists());
    let q = &store.recovery().quarantined;
    assert_eq!(q.len(), 1);
    assert_eq!(
        std::fs::read(&q[0].file).unwrap(),
        format!("{deep_line}\n").into_bytes()
    );
    assert!(
        q[0].problems[0].starts_with("line 2: ") && q[0].problems[0].contains("nesting deeper"),
        "{:?}",
        q[0].problems
    );
    assert_eq!(quarantined(&path).records(), 1);
    assert!(audit::verify_store(&store).unwrap().ok);
}

#[test]
fn an_event_nested_deeper_than_a_record_may_is_refused_not_journaled_nor_chained() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    let mut deep = event(Some("acme"), AuditOutcome::Allowed, Decision::allow());
    deep.metadata
        .insert("d".into(), nested(capability_core::json::RECORD_DEPTH));
    let err = store.emit(&deep).unwrap_err();
    assert!(err.to_string().contains("deeper"), "{err}");
    assert!(store.emit_owned(deep.clone()).is_err());
    assert!(store.append(std::slice::from_ref(&deep)).is_err());
    let journal_dir = path.parent().unwrap().join("journal");
    for entry in std::fs::read_dir(&journal_dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        assert!(
            !text.contains(&deep.event_id),
            "a refused event is not journaled"
        );
    }
    // As deep as a record may be: chained, and the chain reads back and verifies.
    let mut edge = event(Some("acme"), AuditOutcome::Allowed, Decision::allow());
    edge.metadata
        .insert("d".into(), nested(capability_core::json::RECORD_DEPTH - 2));
    let text = capability_core::json::canonical_string(&edge.to_json());
    assert_eq!(
        capability_journal::json_nesting(text.as_bytes()),
        capability_core::json::RECORD_DEPTH
    );
    store.emit(&edge).unwrap();
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert!(store.get(&deep.event_id).unwrap().is_none());
    assert!(store.get(&edge.event_id).unwrap().is_some());
    let report = audit::verify_store(&store).unwrap();
    assert!(report.ok, "{report:?}");
    assert_eq!(report.records, 1);
}

#[test]
fn recovering_the_same_audit_journal_twice_does_not_duplicate_the_quarantine() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    drop(store);
    let good = event(Some("acme"), AuditOutcome::Allowed, Decision::allow());
    let content = format!(
        "{}\n{{\"not\":\"an event\"}}\n",
        capability_core::json::canonical_string(&good.to_json())
    );
    dead_journal(&path, "audit-999996-dead.jsonl", &content);
    drop(SqliteStore::open(&path).unwrap());
    // The journal again, as when the process that recovered it died after keeping its bad
    // line and committing, before deleting it; then an open with nothing left to recover.
    dead_journal(&path, "audit-999996-dead.jsonl", &content);
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.recovery().quarantined_records(), 1);
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert!(store.recovery().quarantined.is_empty());
    let q = quarantined(&path);
    assert_eq!((q.records(), q.files.len()), (1, 1), "{q:?}");
    assert_eq!(
        std::fs::read(&q.files[0].path).unwrap(),
        b"{\"not\":\"an event\"}\n"
    );
    let report = audit::verify_store(&store).unwrap();
    assert!(report.ok, "{report:?}");
    assert_eq!(report.records, 1, "the good event is chained once");
}

/// Verification from a checkpoint reads only the records after it, checks each tenant's
/// links from where that tenant's chain stood there, and still finds an edit, a broken
/// tenant link or a wrong starting hash after it.
#[test]
fn verification_after_a_record_reads_only_the_records_since_and_finds_their_tampering() {
    let dir = tempfile::tempdir().unwrap();
    let (store, path) = open(&dir);
    let records = fill(&store, 9);
    let memory = MemoryStore::new();
    let in_memory = fill(&memory, 9);
    let at = &records[3]; // seq 4
    for (s, records) in [(&store as &dyn AuditStore, &records), (&memory, &in_memory)] {
        let at = &records[3];
        let report = audit::verify_after(s, 4, &at.hash).unwrap();
        assert!(report.ok, "{report:?}");
        assert_eq!(report.records, 5);
        assert_eq!(report.since, Some(4));
        assert_eq!(report.head_seq, Some(9));
        // Started from a hash that is not record 4's: record 5 does not link to it.
        let report = audit::verify_after(s, 4, &records[2].hash).unwrap();
        assert_eq!(report.first_bad.unwrap().seq, 5);
        // Nothing after the head: nothing to read.
        let report = audit::verify_after(s, 9, &records[8].hash).unwrap();
        assert!(report.ok && report.records == 0, "{report:?}");
    }
    assert_eq!(
        store
            .tenant_link_before("globex", 5)
            .unwrap()
            .map(|l| l.seq),
        Some(2),
        "globex's 2nd record is seq 4"
    );
    assert_eq!(store.tenant_link_before("acme", 1).unwrap(), None);
    // An edit before the checkpoint's record is not read; one after it is found.
    corrupt(
        &path,
        "UPDATE audit_events SET event = replace(event, '\"r1\"', '\"r0\"') WHERE seq = 2",
    );
    assert!(audit::verify_after(&store, 4, &at.hash).unwrap().ok);
    assert_eq!(verify_store(&store).unwrap().first_bad.unwrap().seq, 2);
    // globex's link at seq 6 no longer follows its link at seq 4 (from before the
    // checkpoint): found although seq 4 itself is not read.
    corrupt(
        &path,
        "UPDATE audit_events SET tenant_prev_hash = 'x' WHERE seq = 6",
    );
    let report = audit::verify_after(&store, 4, &at.hash).unwrap();
    assert_eq!(report.first_bad.as_ref().unwrap().seq, 6, "{report:?}");
}

/// A query with a time range pages newest first by (timestamp, seq), every record once.
#[test]
fn a_time_range_query_pages_through_every_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(&dir);
    let memory = MemoryStore::new();
    for _ in 0..5 {
        fill(&store, 30);
        fill(&memory, 30);
        std::thread::sleep(std::time::Duration::from_millis(3));
    }
    for s in [&store as &dyn AuditStore, &memory] {
        let all = s
            .query(&AuditQuery {
                limit: 1000,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(all.len(), 150);
        let time = |r: &AuditRecord| r.event["timestamp"].as_str().unwrap().to_string();
        let since = time(&all[all.len() - 31]);
        let expected: Vec<u64> = all
            .iter()
            .filter(|r| time(r) >= since)
            .map(|r| r.seq)
            .collect();
        assert!(expected.len() >= 31, "{}", expected.len());
        let mut paged = Vec::new();
        let mut before = None;
        loop {
            let page = s
                .query(&AuditQuery {
                    since: Some(since.clone()),
                    tenant: None,
                    before,
                    limit: 7,
                    ..Default::default()
                })
                .unwrap();
            let Some(last) = page.last() else { break };
            before = Some(last.seq);
            paged.extend(page.iter().map(|r| r.seq));
        }
        assert_eq!(paged, expected);
    }
}
