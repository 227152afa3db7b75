//! Audit anchoring (issue 30, item 17): a host that names a witness gives it signed
//! checkpoints of the log's head; `audit verify` checks the log against the witness's newest
//! one, so a log cut short, a rebuilt chain or a database rolled back to an older copy is
//! found even when the checkpoint table is forged too.

use std::path::Path;

use capability_host::witness::Witness;
use capability_host::{Host, HostConfig, Outcome, Principal, Request};
use serde_json::{Value, json};

fn host(dir: &Path, witness: Option<Witness>) -> Host {
    Host::open(HostConfig {
        home: Some(dir.join("home")),
        audit_witness: witness,
        ..HostConfig::default()
    })
    .unwrap()
}

fn calls(host: &Host, n: usize) {
    for i in 0..n {
        match host.invoke(&Request::new(
            "text/slugify",
            json!({"text": format!("call {i}")}),
        )) {
            Outcome::Completed(_) => {}
            other => panic!("{other:?}"),
        }
    }
}

fn verify(host: &Host) -> Value {
    host.verify_audit(&Principal::operator("op"), None)
        .unwrap()
        .to_json()
}

fn sql(dir: &Path, statement: &str) {
    let conn = rusqlite::Connection::open(dir.join("home").join("capability.db")).unwrap();
    conn.execute_batch(statement).unwrap();
}

/// Cuts the log after `keep` records as whoever can write the database would: the head
/// moved back with it and the checkpoint counters forged, so that the chain alone holds.
fn cut(dir: &Path, keep: u64) {
    sql(
        dir,
        &format!(
            "DELETE FROM audit_events WHERE seq > {keep};
             UPDATE audit_head SET seq = {keep}, hash = (SELECT hash FROM audit_events WHERE seq = {keep});
             DELETE FROM audit_tenant_heads;
             DELETE FROM audit_checkpoints;"
        ),
    );
}

#[test]
fn a_log_cut_short_with_its_checkpoint_table_forged_is_found_by_the_witness() {
    let dir = tempfile::tempdir().unwrap();
    let witness = Witness::Directory(dir.path().join("witness"));
    {
        let h = host(dir.path(), Some(witness.clone()));
        calls(&h, 3);
    } // closing anchors the head
    let files: Vec<_> = std::fs::read_dir(dir.path().join("witness"))
        .unwrap()
        .collect();
    assert_eq!(files.len(), 1, "one checkpoint file per home");
    let h = host(dir.path(), Some(witness.clone()));
    let report = verify(&h);
    assert_eq!(report["ok"], true, "{report}");
    let seq = report["witness"]["seq"].as_u64().unwrap();
    assert!(seq >= 3, "{report}");
    drop(h);
    // Whoever can write the database cuts the newest events and forges the counters.
    cut(dir.path(), seq - 2);
    let h = host(dir.path(), Some(witness.clone()));
    let report = verify(&h);
    assert_eq!(report["ok"], false, "{report}");
    let problem = report["witness"]["problem"].as_str().unwrap();
    assert!(problem.contains("removed"), "{problem}");
    // Without the witness the chain alone looks fine: the witness is what found it.
    drop(h);
    let h = host(dir.path(), None);
    assert_eq!(verify(&h)["ok"], true);
}

#[test]
fn a_database_rolled_back_to_an_older_copy_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let witness = Witness::Directory(dir.path().join("witness"));
    let db = dir.path().join("home").join("capability.db");
    {
        let h = host(dir.path(), Some(witness.clone()));
        calls(&h, 2);
        h.flush();
    }
    let old = std::fs::read(&db).unwrap();
    {
        let h = host(dir.path(), Some(witness.clone()));
        calls(&h, 4);
    }
    // The old copy back (its WAL files gone with it).
    for ext in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.path().join("home").join(format!("capability.db{ext}")));
    }
    std::fs::write(&db, old).unwrap();
    let h = host(dir.path(), Some(witness));
    let report = verify(&h);
    assert_eq!(report["ok"], false, "{report}");
    assert!(report["witness"]["problem"].is_string(), "{report}");
}

#[test]
fn a_replaced_host_key_fails_against_the_witness() {
    // A new host key (with which a forger could sign a checkpoint of a rebuilt chain): the
    // witnessed checkpoint's signature no longer verifies.
    let dir2 = tempfile::tempdir().unwrap();
    let witness2 = Witness::Directory(dir2.path().join("witness"));
    {
        let h = host(dir2.path(), Some(witness2.clone()));
        calls(&h, 1);
    }
    std::fs::remove_file(dir2.path().join("home").join("host.key")).unwrap();
    let h = host(dir2.path(), Some(witness2));
    let report = verify(&h);
    assert_eq!(report["ok"], false, "{report}");
    assert!(
        report["witness"]["problem"]
            .as_str()
            .unwrap()
            .contains("key"),
        "{report}"
    );
}

#[test]
fn an_http_witness_on_loopback_keeps_and_answers_the_newest_checkpoint() {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    let kept: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
    let store = Arc::clone(&kept);
    let addr = capability_test_support::http::on_loopback(move |listener| async move {
        use axum::extract::{Query, State};
        use axum::http::StatusCode;
        use axum::response::IntoResponse;
        type Kept = Arc<Mutex<HashMap<String, Value>>>;
        let app = axum::Router::new()
            .route(
                "/witness",
                axum::routing::post(|State(k): State<Kept>, body: String| async move {
                    let v: Value = serde_json::from_str(&body).unwrap();
                    let home = v["home"].as_str().unwrap().to_string();
                    k.lock().unwrap().insert(home, v["checkpoint"].clone());
                    StatusCode::NO_CONTENT
                })
                .get(
                    |State(k): State<Kept>, Query(q): Query<HashMap<String, String>>| async move {
                        match k.lock().unwrap().get(&q["home"]) {
                            Some(c) => json!({"checkpoint": c}).to_string().into_response(),
                            None => StatusCode::NOT_FOUND.into_response(),
                        }
                    },
                ),
            )
            .with_state(store);
        axum::serve(listener, app).await.unwrap();
    });
    let dir = tempfile::tempdir().unwrap();
    let witness = Witness::parse(&format!("http://{addr}/witness")).unwrap();
    {
        let h = host(dir.path(), Some(witness.clone()));
        assert_eq!(
            verify(&h)["witness"]["seq"],
            Value::Null,
            "nothing witnessed yet"
        );
        calls(&h, 2);
        assert!(h.anchor_audit().unwrap().is_some());
        assert_eq!(h.anchor_audit().unwrap(), None, "nothing new to anchor");
    }
    assert_eq!(kept.lock().unwrap().len(), 1);
    cut(dir.path(), 1);
    let h = host(dir.path(), Some(witness));
    let report = verify(&h);
    assert_eq!(report["ok"], false, "{report}");
    assert!(
        report["witness"]["problem"]
            .as_str()
            .unwrap()
            .contains("removed"),
        "{report}"
    );
}

#[test]
fn verification_starts_at_the_witnessed_checkpoint_and_full_reads_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let witness = Witness::Directory(dir.path().join("witness"));
    {
        let h = host(dir.path(), Some(witness.clone()));
        calls(&h, 3);
    } // closing anchors the head
    let h = host(dir.path(), Some(witness.clone()));
    calls(&h, 2);
    h.flush();
    let report = verify(&h);
    assert_eq!(report["ok"], true, "{report}");
    let since = report["witness"]["seq"].as_u64().unwrap();
    let head = report["headSeq"].as_u64().unwrap();
    assert_eq!(report["since"], since, "{report}");
    assert!(head > since, "{report}");
    assert_eq!(
        report["records"],
        head - since,
        "only the records after the checkpoint are read: {report}"
    );
    let full = |h: &Host| {
        h.verify_audit_with(&Principal::operator("op"), None, true)
            .unwrap()
            .to_json()
    };
    let report = full(&h);
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["since"], Value::Null, "{report}");
    assert_eq!(report["records"], head, "{report}");
    drop(h);

    // A record before the checkpoint edited in place (its stored hash kept): the incremental
    // verification does not read it (its documented limit); the full one finds it.
    sql(
        dir.path(),
        "UPDATE audit_events SET event = json_set(event, '$.forged', 1) WHERE seq = 1",
    );
    let h = host(dir.path(), Some(witness.clone()));
    assert_eq!(verify(&h)["ok"], true);
    let report = full(&h);
    assert_eq!(report["ok"], false, "{report}");
    assert_eq!(report["firstBad"]["seq"], 1, "{report}");
    drop(h);

    // A record after the checkpoint edited in place: the default verification finds it.
    let h = host(dir.path(), Some(witness));
    calls(&h, 1);
    h.flush();
    let last = verify(&h)["headSeq"].as_u64().unwrap();
    assert!(last > head);
    sql(
        dir.path(),
        &format!(
            "UPDATE audit_events SET event = json_set(event, '$.forged', 1) WHERE seq = {last}"
        ),
    );
    let report = verify(&h);
    assert_eq!(report["ok"], false, "{report}");
    assert_eq!(report["firstBad"]["seq"], last, "{report}");
}
