//! The durable receipt store: read-your-writes, queries, replacement, journal recovery after
//! a crash (including a torn last line), and the journals of live processes left alone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::sync::Arc;

use capability_core::plan::CapabilityRef;
use capability_core::receipt::{Receipt, ReceiptStatus};
use capability_runtime::store::{ReceiptQuery, ReceiptStore, SqliteReceiptStore};
use serde_json::json;

fn receipt(id: &str, capability: &str, status: ReceiptStatus, started: &str) -> Receipt {
    Receipt {
        receipt_id: id.into(),
        plan_id: format!("plan_{id}"),
        capability: CapabilityRef {
            id: capability.into(),
            version: "1.0.0".into(),
        },
        status,
        started_at: started.into(),
        ended_at: started.into(),
        duration_ms: 0,
        effects: vec![],
        input_hash: "h".into(),
        output_hash: None,
        input: json!({"n": id}),
        output: Some(json!(null)),
        verification: None,
        error: None,
        metadata: None,
        provenance: None,
        rollback_result: None,
        isolation: None,
        governance: None,
        extra: Default::default(),
    }
}

#[test]
fn receipts_are_readable_at_once_and_persist_across_reopen() {
    let home = tempfile::tempdir().unwrap();
    {
        let store = SqliteReceiptStore::open(home.path()).unwrap();
        store
            .put(Arc::new(receipt(
                "r1",
                "a/x",
                ReceiptStatus::Succeeded,
                "2026-01-01T00:00:01.000Z",
            )))
            .unwrap();
        store
            .put(Arc::new(receipt(
                "r2",
                "a/x",
                ReceiptStatus::Failed,
                "2026-01-01T00:00:02.000Z",
            )))
            .unwrap();
        store
            .put(Arc::new(receipt(
                "r3",
                "b/y",
                ReceiptStatus::Succeeded,
                "2026-01-01T00:00:03.000Z",
            )))
            .unwrap();
        assert_eq!(
            store.get("r2").unwrap().unwrap().status,
            ReceiptStatus::Failed
        );
        // Rollback rewrites a receipt in place.
        let mut rolled = receipt(
            "r1",
            "a/x",
            ReceiptStatus::RolledBack,
            "2026-01-01T00:00:01.000Z",
        );
        rolled.rollback_result = Some(json!({"undone": true}));
        store.put(Arc::new(rolled)).unwrap();
    }
    let store = SqliteReceiptStore::open(home.path()).unwrap();
    let r1 = store.get("r1").unwrap().unwrap();
    assert_eq!(r1.status, ReceiptStatus::RolledBack);
    assert_eq!(r1.output, Some(json!(null)), "a null output stays a value");
    let all = store.list(&ReceiptQuery::default()).unwrap();
    assert_eq!(
        all.iter()
            .map(|r| r.receipt_id.as_str())
            .collect::<Vec<_>>(),
        ["r3", "r2", "r1"]
    );
    let q = ReceiptQuery {
        capability: Some("a/x".into()),
        ..Default::default()
    };
    assert_eq!(store.list(&q).unwrap().len(), 2);
    let q = ReceiptQuery {
        status: Some(ReceiptStatus::Succeeded),
        ..Default::default()
    };
    assert_eq!(store.list(&q).unwrap().len(), 1);
    let q = ReceiptQuery {
        since: Some("2026-01-01T00:00:02.000Z".into()),
        until: Some("2026-01-01T00:00:03.000Z".into()),
        ..Default::default()
    };
    assert_eq!(store.list(&q).unwrap()[0].receipt_id, "r2");
    let q = ReceiptQuery {
        limit: Some(1),
        ..Default::default()
    };
    assert_eq!(store.list(&q).unwrap().len(), 1);
    assert!(store.get("missing").unwrap().is_none());
}

#[test]
fn a_dead_process_journal_is_replayed_and_a_torn_line_skipped() {
    let home = tempfile::tempdir().unwrap();
    drop(SqliteReceiptStore::open(home.path()).unwrap());
    let journal = home.path().join("journal").join("receipts-4242-dead.jsonl");
    let good = serde_json::to_string(&receipt(
        "r-journal",
        "a/x",
        ReceiptStatus::Succeeded,
        "2026-01-01T00:00:00.000Z",
    ))
    .unwrap();
    let mut f = std::fs::File::create(&journal).unwrap();
    writeln!(f, "{good}").unwrap();
    write!(f, "{}", &good[..good.len() / 2]).unwrap(); // died mid-write
    drop(f);
    let store = SqliteReceiptStore::open(home.path()).unwrap();
    assert_eq!(
        store.get("r-journal").unwrap().unwrap().receipt_id,
        "r-journal"
    );
    assert!(!journal.exists(), "a replayed journal is removed");
    assert_eq!(store.list(&ReceiptQuery::default()).unwrap().len(), 1);
}

#[test]
fn a_live_store_journal_is_left_alone_and_receipts_wait_in_it_while_the_database_is_locked() {
    let home = tempfile::tempdir().unwrap();
    let writer = SqliteReceiptStore::open(home.path()).unwrap();
    let lock = rusqlite::Connection::open(home.path().join("capability.db")).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();
    writer
        .put(Arc::new(receipt(
            "r-live",
            "a/x",
            ReceiptStatus::Succeeded,
            "2026-01-01T00:00:00.000Z",
        )))
        .unwrap();
    // Read-your-writes while the commit is blocked.
    assert!(writer.get("r-live").unwrap().is_some());
    let journals: Vec<_> = std::fs::read_dir(home.path().join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(journals.len(), 1);
    let line = std::fs::read_to_string(&journals[0]).unwrap();
    assert!(
        line.contains("\"receiptId\":\"r-live\""),
        "the receipt is in the journal: {line}"
    );
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    // Another store in a live process does not take the live journal.
    let other = SqliteReceiptStore::open(home.path()).unwrap();
    writer.flush().unwrap();
    assert!(other.get("r-live").unwrap().is_some());
    drop(writer);
    assert_eq!(
        std::fs::read_dir(home.path().join("journal"))
            .unwrap()
            .count(),
        1,
        "only the other store's journal is left"
    );
}

/// A value nested `levels` deep.
fn nested(levels: usize) -> serde_json::Value {
    let mut v = json!(1);
    for _ in 0..levels {
        v = json!({ "d": v });
    }
    v
}

#[test]
fn a_journaled_receipt_as_deep_as_accepted_is_replayed_not_dropped() {
    let home = tempfile::tempdir().unwrap();
    drop(SqliteReceiptStore::open(home.path()).unwrap());
    let journal = home.path().join("journal").join("receipts-4243-dead.jsonl");
    let limit = capability_core::json::MAX_DEPTH;
    let mut deep = receipt(
        "r-deep",
        "a/x",
        ReceiptStatus::Succeeded,
        "2026-01-01T00:00:00.000Z",
    );
    deep.input = nested(limit);
    deep.output = Some(nested(limit));
    std::fs::write(&journal, serde_json::to_string(&deep).unwrap() + "\n").unwrap();
    let store = SqliteReceiptStore::open(home.path()).unwrap();
    let back = store
        .get("r-deep")
        .unwrap()
        .expect("the deep receipt was replayed");
    assert_eq!(
        capability_core::json::depth(back.output.as_ref().unwrap()),
        limit
    );
    assert_eq!(back.input, nested(limit));
    let listing = store.list_checked(&ReceiptQuery::default()).unwrap();
    assert_eq!(listing.receipts.len(), 1);
    assert!(listing.skipped.is_empty(), "{:?}", listing.skipped);
}

#[test]
fn a_committed_journal_is_rotated_not_left_to_grow_and_nothing_is_lost() {
    let home = tempfile::tempdir().unwrap();
    let store = SqliteReceiptStore::open(home.path()).unwrap();
    // Enough bytes for several rotations.
    let padding = "x".repeat(4096);
    let n = (capability_journal::ROTATE_BYTES as usize / 4096) * 3;
    for i in 0..n {
        let mut r = receipt(&format!("r{i}"), "demo/a", ReceiptStatus::Succeeded, "t");
        r.input = json!({"n": i, "pad": padding});
        store.put(Arc::new(r)).unwrap();
        // Let the writer keep up now and then, so that the journal is fully committed when
        // it passes the rotation size.
        if i % 64 == 0 {
            store.flush().unwrap();
        }
    }
    store.flush().unwrap();
    for i in [0, n / 2, n - 1] {
        assert!(store.get(&format!("r{i}")).unwrap().is_some(), "r{i}");
    }
    let journals: Vec<_> = std::fs::read_dir(home.path().join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("receipts-")
        })
        .collect();
    assert_eq!(journals.len(), 1, "{journals:?}");
    let size = std::fs::metadata(&journals[0]).unwrap().len();
    assert!(
        size < 2 * capability_journal::ROTATE_BYTES,
        "the journal kept growing: {size} bytes"
    );
    drop(store);
    let reopened = SqliteReceiptStore::open(home.path()).unwrap();
    assert!(reopened.get(&format!("r{}", n - 1)).unwrap().is_some());
}

/// The receipt quarantine of a home: what every recovery so far kept.
fn quarantined(home: &std::path::Path) -> capability_journal::Quarantine {
    SqliteReceiptStore::quarantined(&home.join("journal")).unwrap()
}

#[test]
fn an_unreadable_receipt_in_a_dead_journal_is_kept_in_quarantine_not_deleted() {
    let home = tempfile::tempdir().unwrap();
    drop(SqliteReceiptStore::open(home.path()).unwrap());
    let journal = home.path().join("journal").join("receipts-4244-dead.jsonl");
    let good = serde_json::to_string(&receipt(
        "r-good",
        "a/x",
        ReceiptStatus::Succeeded,
        "2026-01-01T00:00:00.000Z",
    ))
    .unwrap();
    // JSON, but not a receipt (a status no receipt has).
    let bad = good
        .replace("\"r-good\"", "\"r-bad\"")
        .replace("\"succeeded\"", "\"exploded\"");
    assert_ne!(bad, good);
    std::fs::write(&journal, format!("{bad}\n{good}\n")).unwrap();

    let store = SqliteReceiptStore::open(home.path()).unwrap();
    assert!(
        store.get("r-good").unwrap().is_some(),
        "the good one is replayed"
    );
    assert!(store.get("r-bad").unwrap().is_none());
    assert!(!journal.exists(), "the journal itself is gone");
    let kept = home
        .path()
        .join("journal/quarantine/receipts-4244-dead.jsonl");
    assert_eq!(
        std::fs::read(&kept).unwrap(),
        format!("{bad}\n").into_bytes(),
        "the bad one is kept byte for byte"
    );
    let recovery = store.recovery();
    assert_eq!((recovery.journals, recovery.records), (1, 1));
    assert_eq!(recovery.quarantined_records(), 1);
    let warnings = recovery.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains(&kept.display().to_string()),
        "the warning names the quarantine file: {}",
        warnings[0]
    );
    assert_eq!(quarantined(home.path()).records(), 1);
    assert_eq!(store.list(&ReceiptQuery::default()).unwrap().len(), 1);
}

#[test]
fn a_journaled_receipt_nested_deeper_than_a_record_may_is_quarantined_not_dropped() {
    let home = tempfile::tempdir().unwrap();
    drop(SqliteReceiptStore::open(home.path()).unwrap());
    let journal = home.path().join("journal").join("receipts-4245-dead.jsonl");
    let mut good = receipt("r-ok", "a/x", ReceiptStatus::Succeeded, "t");
    good.output = Some(nested(capability_core::json::MAX_DEPTH));
    let mut deep = receipt("r-deep", "a/x", ReceiptStatus::Succeeded, "t");
    deep.output = Some(nested(capability_core::json::RECORD_DEPTH + 1));
    let deep = serde_json::to_string(&deep).unwrap();
    let good = serde_json::to_string(&good).unwrap();
    std::fs::write(&journal, format!("{good}\n{deep}\n")).unwrap();

    let store = SqliteReceiptStore::open(home.path()).unwrap();
    assert!(store.get("r-ok").unwrap().is_some());
    assert!(store.get("r-deep").unwrap().is_none());
    assert!(!journal.exists());
    let q = &store.recovery().quarantined;
    assert_eq!(q.len(), 1);
    assert_eq!(
        std::fs::read(&q[0].file).unwrap(),
        format!("{deep}\n").into_bytes()
    );
    assert!(
        q[0].problems[0].starts_with("line 2: ") && q[0].problems[0].contains("nesting deeper"),
        "{:?}",
        q[0].problems
    );
    assert_eq!(quarantined(home.path()).records(), 1);
}

#[test]
fn a_receipt_nested_deeper_than_a_record_may_is_refused_not_journaled() {
    let home = tempfile::tempdir().unwrap();
    let store = SqliteReceiptStore::open(home.path()).unwrap();
    let mut deep = receipt("r-deep", "a/x", ReceiptStatus::Succeeded, "t");
    // A `put` from the runtime holds at most MAX_DEPTH levels; a direct one may hold more.
    deep.metadata = Some(nested(capability_core::json::RECORD_DEPTH));
    let err = store.put(Arc::new(deep)).unwrap_err();
    assert!(
        err.to_string().contains("r-deep") && err.to_string().contains("deeper"),
        "{err}"
    );
    assert!(store.get("r-deep").unwrap().is_none());
    // As deep as a record may be: stored and read back.
    let mut edge = receipt("r-edge", "a/x", ReceiptStatus::Succeeded, "t");
    edge.metadata = Some(nested(capability_core::json::RECORD_DEPTH - 1));
    assert_eq!(
        capability_journal::json_nesting(serde_json::to_string(&edge).unwrap().as_bytes()),
        capability_core::json::RECORD_DEPTH
    );
    store.put(Arc::new(edge)).unwrap();
    store.flush().unwrap();
    let journals: Vec<_> = std::fs::read_dir(home.path().join("journal"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert!(
        journals.iter().all(|j| !j.contains("r-deep")),
        "a refused receipt is not journaled"
    );
    drop(store);
    let store = SqliteReceiptStore::open(home.path()).unwrap();
    assert!(store.get("r-edge").unwrap().is_some(), "read back");
    let listing = store.list_checked(&ReceiptQuery::default()).unwrap();
    assert!(listing.skipped.is_empty(), "{:?}", listing.skipped);
}

#[test]
fn recovering_the_same_journal_twice_does_not_duplicate_the_quarantine() {
    let home = tempfile::tempdir().unwrap();
    drop(SqliteReceiptStore::open(home.path()).unwrap());
    let journal = home.path().join("journal").join("receipts-4246-dead.jsonl");
    let good =
        serde_json::to_string(&receipt("r-1", "a/x", ReceiptStatus::Succeeded, "t")).unwrap();
    let content = format!("{good}\nnot a receipt\n");
    std::fs::write(&journal, &content).unwrap();
    drop(SqliteReceiptStore::open(home.path()).unwrap());
    // The journal again, as when the process that recovered it died after keeping its bad
    // line and committing, before deleting it; then an open with nothing left to recover.
    std::fs::write(&journal, &content).unwrap();
    let store = SqliteReceiptStore::open(home.path()).unwrap();
    assert_eq!(store.recovery().quarantined_records(), 1);
    drop(store);
    let store = SqliteReceiptStore::open(home.path()).unwrap();
    assert!(store.recovery().quarantined.is_empty());
    let q = quarantined(home.path());
    assert_eq!((q.records(), q.files.len()), (1, 1), "{q:?}");
    assert_eq!(std::fs::read(&q.files[0].path).unwrap(), b"not a receipt\n");
    assert_eq!(store.list(&ReceiptQuery::default()).unwrap().len(), 1);
}

/// Paging with the `before` cursor walks every receipt once, newest first, in both stores
/// (receipts sharing a start time included), and the JSON-lines export, which reads a page
/// at a time, writes each receipt once across page boundaries.
#[test]
fn the_before_cursor_pages_through_every_receipt_once_and_export_streams_them_all() {
    use capability_runtime::store::{MemoryReceiptStore, export_jsonl};
    let home = tempfile::tempdir().unwrap();
    let sqlite = SqliteReceiptStore::open(home.path()).unwrap();
    let memory = MemoryReceiptStore::new();
    let n: usize = 2_345;
    for i in 0..n {
        // Three receipts per millisecond: ties are ordered by insertion, newest first.
        let started = format!(
            "2026-01-01T00:00:{:02}.{:03}Z",
            i / 3 / 1000,
            (i / 3) % 1000
        );
        let cap = if i % 2 == 0 { "a/x" } else { "b/y" };
        let r = Arc::new(receipt(
            &format!("r{i:05}"),
            cap,
            ReceiptStatus::Succeeded,
            &started,
        ));
        sqlite.put(Arc::clone(&r)).unwrap();
        memory.put(r).unwrap();
    }
    let stores: [(&str, &dyn ReceiptStore); 2] = [("sqlite", &sqlite), ("memory", &memory)];
    for (name, store) in stores {
        for capability in [None, Some("a/x")] {
            let query = ReceiptQuery {
                capability: capability.map(String::from),
                ..Default::default()
            };
            let whole: Vec<String> = store
                .list(&query)
                .unwrap()
                .iter()
                .map(|r| r.receipt_id.clone())
                .collect();
            let mut paged = Vec::new();
            let mut cursor = None;
            loop {
                let page = store
                    .list(&ReceiptQuery {
                        limit: Some(100),
                        before: cursor.clone(),
                        ..query.clone()
                    })
                    .unwrap();
                let Some(last) = page.last() else { break };
                cursor = Some(last.receipt_id.clone());
                paged.extend(page.iter().map(|r| r.receipt_id.clone()));
            }
            assert_eq!(paged, whole, "{name} {capability:?}");
            let expected = if capability.is_some() {
                n.div_ceil(2)
            } else {
                n
            };
            assert_eq!(whole.len(), expected, "{name}");
            let mut sorted = whole.clone();
            sorted.sort();
            sorted.reverse();
            assert_eq!(whole, sorted, "{name}: newest first, ties newest first");

            let mut out = Vec::new();
            let (count, skipped) = export_jsonl(store, &query, &mut out).unwrap();
            assert!(skipped.is_empty());
            assert_eq!(count, expected, "{name}");
            let exported: Vec<String> = String::from_utf8(out)
                .unwrap()
                .lines()
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(l).unwrap()["receiptId"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect();
            assert_eq!(exported, whole, "{name}");
        }
        // A limit smaller than a page, and a cursor that names no receipt.
        let query = ReceiptQuery {
            limit: Some(1_500),
            ..Default::default()
        };
        let mut out = Vec::new();
        assert_eq!(export_jsonl(store, &query, &mut out).unwrap().0, 1_500);
        let gone = ReceiptQuery {
            before: Some("no-such-receipt".into()),
            ..Default::default()
        };
        assert!(store.list(&gone).unwrap().is_empty(), "{name}");
    }
}
