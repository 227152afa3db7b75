//! Audit reads are scoped by the principal's tenants, in the host: an approver of one
//! tenant reads that tenant's events, never another's (issue 30, item 9), whichever read it
//! asks for; auditors and admins read everything.

use std::collections::BTreeSet;

use capability_host::tokens::{Role, TokenRecord};
use capability_host::{Actor, AuditFilter, ExportFormat, Host, Outcome, Principal, Request};
use serde_json::json;

fn approver(tenants: &[&str]) -> Principal {
    Principal::from_token(&TokenRecord {
        id: format!("tok_{}", tenants.join("_")),
        agent_id: "alice".into(),
        tenant: None,
        scopes: BTreeSet::new(),
        role: Role::Approver,
        created_at: 0,
        expires_at: None,
        revoked_at: None,
        tenants: tenants.iter().map(|t| t.to_string()).collect(),
        login: None,
    })
}

fn call(host: &Host, tenant: Option<&str>, text: &str) {
    let mut actor = Actor::agent("bot");
    actor.tenant = tenant.map(str::to_string);
    match host.invoke(&Request::new("text/slugify", json!({"text": text})).by(actor)) {
        Outcome::Completed(_) => {}
        other => panic!("{other:?}"),
    }
}

fn tenants_of(host: &Host, p: &Principal, filter: AuditFilter) -> Vec<Option<String>> {
    let page = host.audit_query(p, &filter.query().unwrap()).unwrap();
    page.events
        .iter()
        .map(|r| r.event["tenant_id"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn an_approver_reads_its_tenants_events_only() {
    let dir = tempfile::tempdir().unwrap();
    let host = crate::host_with(dir.path(), None);
    for (tenant, text) in [
        (Some("acme"), "a one"),
        (Some("beta"), "b one"),
        (None, "none"),
        (Some("acme"), "a two"),
        (Some("gamma"), "g"),
    ] {
        call(&host, tenant, text);
    }
    let acme = approver(&["acme"]);
    let acme_and_gamma = approver(&["acme", "gamma"]);
    let everyone = approver(&["*"]);
    let auditor = Principal::operator("audrey");

    // The whole log as an approver: its tenants' events, nothing else.
    let seen = tenants_of(&host, &acme, AuditFilter::default());
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|t| t.as_deref() == Some("acme")),
        "{seen:?}"
    );
    let seen = tenants_of(&host, &acme_and_gamma, AuditFilter::default());
    assert!(seen.iter().any(|t| t.as_deref() == Some("gamma")));
    assert!(
        seen.iter()
            .all(|t| matches!(t.as_deref(), Some("acme" | "gamma"))),
        "{seen:?}"
    );
    // Merged pages keep the limit, newest last, with a cursor.
    let page = host
        .audit_query(
            &acme_and_gamma,
            &AuditFilter {
                limit: Some(2),
                ..Default::default()
            }
            .query()
            .unwrap(),
        )
        .unwrap();
    assert_eq!(page.events.len(), 2);
    assert!(page.events[0].seq < page.events[1].seq && page.next.is_some());
    // Another tenant, named: refused.
    let beta = AuditFilter {
        tenant: Some("beta".into()),
        ..Default::default()
    };
    let e = host.audit_query(&acme, &beta.query().unwrap()).unwrap_err();
    assert_eq!(e.status(), 403);
    // One of beta's events by id answers as a missing one.
    let all = host
        .audit_query(&auditor, &AuditFilter::default().query().unwrap())
        .unwrap();
    let beta_event = all
        .events
        .iter()
        .find(|r| r.event["tenant_id"] == "beta")
        .unwrap();
    let id = beta_event.event["event_id"].as_str().unwrap();
    assert_eq!(host.audit_event(&acme, id).unwrap_err().status(), 404);
    assert!(host.audit_event(&auditor, id).is_ok());
    assert!(host.audit_event(&everyone, id).is_ok());
    // Verify and export: its tenant's chain; another's, the whole one and checkpoints refused.
    assert!(host.verify_audit(&acme, None).unwrap().ok);
    assert_eq!(
        host.verify_audit(&acme, Some("beta")).unwrap_err().status(),
        403
    );
    assert_eq!(
        host.verify_audit(&acme_and_gamma, None)
            .unwrap_err()
            .status(),
        403
    );
    assert!(
        host.verify_audit(&acme_and_gamma, Some("gamma"))
            .unwrap()
            .ok
    );
    let mut out = Vec::new();
    let n = host
        .export_audit(&acme, None, ExportFormat::Jsonl, "t", &mut out)
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(n, text.lines().count());
    assert!(
        n > 0 && !text.contains("\"beta\"") && !text.contains("b-one"),
        "{text}"
    );
    let mut out = Vec::new();
    let e = host
        .export_audit(&acme, Some("beta"), ExportFormat::Jsonl, "t", &mut out)
        .unwrap_err();
    assert_eq!(e.status(), 403);
    assert!(out.is_empty());
    assert_eq!(host.audit_checkpoint(&acme).unwrap_err().status(), 403);
    // Readers of every tenant see everything, the tenant-less events too.
    let seen = tenants_of(&host, &auditor, AuditFilter::default());
    for t in [Some("acme"), Some("beta"), Some("gamma"), None] {
        assert!(seen.iter().any(|s| s.as_deref() == t), "{t:?} in {seen:?}");
    }
    assert_eq!(
        tenants_of(&host, &everyone, AuditFilter::default()).len(),
        seen.len()
    );
}
