//! The console's two heavy reads, on generated data:
//!
//! * the pending-approvals page with 10,000 pending approvals: rendering alone, and the
//!   whole page (the store's list, then rendering);
//! * an audit query by tenant (the newest 100 events of one of 10 tenants), and by tenant
//!   and agent, over 1,000,000 events: the host's query over the SQLite store's indexed
//!   columns, as the console and the API call it.
//!
//! The data is written straight into the home's database (a store on the same file); the
//! reads go through the host, as every surface's do. `cargo bench -p capability-server
//! --bench console` prints p50/p99 of individually timed runs beside criterion's estimates.
//! Generating the million events takes a while.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use capability_host::{AuditFilter, Host, HostConfig, Principal, Role, TokenRecord};
use capability_policy::approvals::{ApprovalFilter, ApprovalRecord, ApprovalStore};
use capability_policy::audit::{AuditEvent, AuditStore};
use capability_policy::{ApprovalStatus, SqliteStore};
use capability_test_support::approvals::pending_approval;
use capability_test_support::measure::measure;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

fn viewer() -> Principal {
    Principal::from_token(&TokenRecord {
        id: "tok_bench".into(),
        agent_id: "alice".into(),
        tenant: None,
        scopes: BTreeSet::new(),
        role: Role::Admin,
        created_at: 0,
        expires_at: None,
        revoked_at: None,
        tenants: BTreeSet::new(),
        login: Some("alice".into()),
    })
}

fn event_template() -> AuditEvent {
    AuditEvent::from_json(&json!({
        "event_id": "evt_0", "timestamp": "2026-01-01T00:00:00.000Z",
        "action_id": "act_0", "trace_id": "trc_0", "parent_action_id": null,
        "agent_id": "agent-0", "tenant_id": "tenant-0", "principal_id": null,
        "environment": "prod", "capability_name": "text/slugify", "capability_type": "tool",
        "capability_risk": "low", "action_type": "tool_call", "stage": "before_capability",
        "decision": "allow", "outcome": "allowed", "reason": null, "policy_name": null,
        "policy_version": null, "input_summary": null, "output_summary": null, "labels": {},
        "metadata": {}, "decision_id": "dec_0", "policy_ids": [], "code": null,
        "plan_fingerprint": null, "action_digest": "d", "receipt_id": null,
        "approval_id": null, "shadow": null, "redacted": [], "input": null, "output": null
    }))
    .expect("the template event parses")
}

fn bench(c: &mut Criterion) {
    // The pending page.
    let records: Vec<ApprovalRecord> = (0..10_000).map(pending_approval).collect();
    let viewer = viewer();
    let page = capability_server::render_pending_page(&records, "csrf-token", &viewer);
    println!(
        "pending page: {} approvals, {} KiB of HTML",
        records.len(),
        page.len() / 1024
    );
    measure("render pending page (10,000 pending)", 1, 50, || {
        std::hint::black_box(capability_server::render_pending_page(
            &records, "csrf", &viewer,
        ));
    });
    let dir = tempfile::tempdir().unwrap();
    let host = Host::open(HostConfig {
        home: Some(dir.path().join("home")),
        ..HostConfig::default()
    })
    .unwrap();
    let home = host.home().clone();
    let db = Arc::new(capability_journal::Database::open(&home.database()).unwrap());
    let store = SqliteStore::on(Arc::clone(&db), &home.journals()).unwrap();
    for r in &records {
        store.insert_approval(r).unwrap();
    }
    let filter = ApprovalFilter {
        status: Some(ApprovalStatus::Pending),
        tenant: None,
        limit: Some(10_000),
    };
    measure("list + render pending page (10,000 pending)", 1, 30, || {
        let list = host.approvals(&viewer, &filter).unwrap().approvals;
        assert_eq!(list.len(), 10_000);
        std::hint::black_box(capability_server::render_pending_page(
            &list, "csrf", &viewer,
        ));
    });
    c.bench_function("render_pending_10k", |b| {
        b.iter(|| capability_server::render_pending_page(&records, "csrf", &viewer))
    });

    // The audit log, in the same database.
    let audit = store;
    let template = event_template();
    let started = Instant::now();
    const EVENTS: usize = 1_000_000;
    let mut batch = Vec::with_capacity(10_000);
    for i in 0..EVENTS {
        let mut e = template.clone();
        e.event_id = format!("evt_{i}");
        e.tenant_id = Some(format!("tenant-{}", i % 10));
        e.agent_id = format!("agent-{}", i % 50);
        batch.push(e);
        if batch.len() == 10_000 {
            audit.append(&batch).unwrap();
            batch.clear();
        }
    }
    println!(
        "generated {EVENTS} audit events in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let by_tenant = AuditFilter {
        tenant: Some("tenant-7".into()),
        limit: Some(100),
        ..AuditFilter::default()
    }
    .query()
    .unwrap();
    let by_agent = AuditFilter {
        tenant: Some("tenant-7".into()),
        agent: Some("agent-17".into()),
        limit: Some(100),
        ..AuditFilter::default()
    }
    .query()
    .unwrap();
    measure(
        "audit query by tenant (newest 100 of 1,000,000)",
        1,
        200,
        || {
            let r = host.audit_query(&viewer, &by_tenant).unwrap();
            assert_eq!(r.events.len(), 100);
        },
    );
    measure(
        "audit query by tenant and agent (newest 100 of 1,000,000)",
        1,
        200,
        || {
            let r = host.audit_query(&viewer, &by_agent).unwrap();
            assert_eq!(r.events.len(), 100);
        },
    );
    c.bench_function("audit_query_tenant_1m", |b| {
        b.iter(|| host.audit_query(&viewer, &by_tenant).unwrap())
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
