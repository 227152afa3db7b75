//! Invoke and resume: outcomes, resumption, one database writer, a new home shared by
//! several openers at once.

use std::path::Path;
use std::sync::{Arc, Barrier};

use capability_core::ErrorCode;
use capability_host::{
    Actor, ApprovalDecision, AuditFilter, CapabilitySource, ExecutorChoice, Host, HostConfig,
    LocalPackage, Outcome, Principal, Request,
};
use capability_policy::HostKey;
use serde_json::json;

use crate::host_with;

#[test]
fn invoke_tells_completed_pending_and_failed_apart() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_with(
        dir.path(),
        Some(
            r#"permit(principal, action, resource);
            @decision("approval_required") @reason("secrets need a human")
            forbid(principal, action, resource) when { context.input.text like "*secret*" };
            @reason("no shouting") forbid(principal, action, resource) when { context.input.text like "*LOUD*" };"#,
        ),
    );
    let ok = host.invoke(&Request::new(
        "text/slugify",
        json!({"text": "Hello World"}),
    ));
    let Outcome::Completed(done) = ok else {
        panic!("{ok:?}")
    };
    let receipt = done.receipt;
    assert_eq!(receipt.output, Some(json!({"slug": "hello-world"})));
    let governance = receipt.governance.as_ref().unwrap();
    assert_eq!(governance.agent_id.as_deref(), Some("cap-cli"));
    assert_eq!(governance.audit_events.len(), 2);

    let pending = host.invoke(&Request::new("text/slugify", json!({"text": "a secret"})));
    let Outcome::NeedsApproval(p) = pending else {
        panic!("{pending:?}")
    };
    assert_eq!(p.reason, "secrets need a human");
    assert!(p.approval.is_some());

    let denied = host.invoke(&Request::new("text/slugify", json!({"text": "LOUD"})));
    let Outcome::Failed(e) = denied else {
        panic!("{denied:?}")
    };
    assert_eq!(e.code, ErrorCode::PermissionDenied);
    assert_eq!(e.message, "no shouting");
    assert!(e.receipt_id.is_none(), "nothing ran, no receipt");

    let invalid = host.invoke(&Request::new("text/slugify", json!({"nope": 1})));
    assert!(matches!(invalid, Outcome::Failed(e) if e.code == ErrorCode::InvalidInput));
    assert!(
        host.verify_audit(&Principal::operator("o"), None)
            .unwrap()
            .ok
    );
}

#[test]
fn resume_runs_only_the_approved_call_once() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_with(
        dir.path(),
        Some(
            r#"permit(principal, action, resource);
            @decision("approval_required") forbid(principal, action, resource) when { context.input.text like "*secret*" };"#,
        ),
    );
    let request =
        Request::new("text/slugify", json!({"text": "my secret"})).by(Actor::agent("bot"));
    let Outcome::NeedsApproval(p) = host.invoke(&request) else {
        panic!("approval expected")
    };
    let id = p.approval.unwrap().approval_id;
    // The agent cannot approve its own request.
    let bot = Principal::agent(&Actor::agent("bot"));
    assert!(
        host.decide_approval(&bot, &id, ApprovalDecision::Approve, None)
            .is_err()
    );
    let alice = Principal::operator("alice");
    let token = host
        .decide_approval(&alice, &id, ApprovalDecision::Approve, None)
        .unwrap()
        .token
        .unwrap()
        .0;
    // Another input with the same token is refused.
    let other =
        Request::new("text/slugify", json!({"text": "my secret 2"})).by(Actor::agent("bot"));
    let refused = host.resume(&other, &token);
    assert!(
        matches!(&refused, Outcome::Failed(e) if e.code == ErrorCode::PermissionDenied && e.message.contains("input differs")),
        "{refused:?}"
    );
    let Outcome::Completed(r) = host.resume(&request, &token) else {
        panic!("the approved call runs")
    };
    assert_eq!(
        r.receipt
            .governance
            .as_ref()
            .unwrap()
            .approval
            .as_ref()
            .unwrap()
            .approver,
        "alice"
    );
    let replay = host.resume(&request, &token);
    assert!(
        matches!(&replay, Outcome::Failed(e) if e.code == ErrorCode::PermissionDenied),
        "{replay:?}"
    );
}

fn failing_package(dir: &Path) -> std::path::PathBuf {
    let manifest = json!({
        "specVersion": "0.1", "id": "fixture/fail", "version": "1.0.0", "name": "Fail",
        "description": "Always throws.", "input": {"type": "object"}, "output": {"type": "object"},
        "effects": [],
    });
    std::fs::write(
        dir.join("fail.mjs"),
        format!("export const manifest = {manifest};\nexport default {{ manifest, async execute() {{ throw new Error('boom'); }} }};\n"),
    )
    .unwrap();
    let package = json!({"name": "@fixture/fail", "version": "1.0.0", "type": "module",
        "capability": {"specVersion": "0.1", "exports": {"fixture/fail": {"module": "./fail.mjs", "manifest": manifest}}}});
    let path = dir.join("package.json");
    std::fs::write(&path, package.to_string()).unwrap();
    path
}

#[test]
fn a_failed_execution_names_its_kept_receipt() {
    let dir = tempfile::tempdir().unwrap();
    let package = failing_package(dir.path());
    let source: Arc<dyn CapabilitySource> = Arc::new(LocalPackage::open(&package).unwrap());
    let host = Host::open(HostConfig {
        home: Some(dir.path().join("home")),
        sources: vec![source],
        executor: ExecutorChoice::Process,
        ..HostConfig::default()
    })
    .unwrap();
    let outcome = host.invoke(&Request::new("fixture/fail", json!({})));
    let Outcome::Failed(e) = &outcome else {
        panic!("{outcome:?}")
    };
    let id = outcome.receipt_id().unwrap();
    let kept = host.receipt(&Principal::operator("o"), id).unwrap();
    assert_eq!(kept.error.as_ref().unwrap().message, "boom");
    assert_eq!(e.code, ErrorCode::ExecutionFailed);
    // Package code never runs in process.
    let in_process = Host::open(HostConfig {
        home: Some(dir.path().join("home")),
        sources: vec![Arc::new(LocalPackage::open(&package).unwrap())],
        executor: ExecutorChoice::InProcess,
        ..HostConfig::default()
    })
    .unwrap();
    let refused = in_process.invoke(&Request::new("fixture/fail", json!({})));
    assert!(
        matches!(&refused, Outcome::Failed(e) if e.message.contains("requires an isolated executor")),
        "{refused:?}"
    );
}

/// Threads of this process whose name starts with `prefix`.
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end().starts_with(prefix))
        .count()
}

#[test]
fn one_database_and_one_writer_serve_every_store() {
    // Counted in a child process running only this test, so that other tests' hosts do not
    // add threads.
    if std::env::var_os("HOST_WRITER_CHILD").is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "invoke::one_database_and_one_writer_serve_every_store",
                "--nocapture",
            ])
            .env("HOST_WRITER_CHILD", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let host = host_with(dir.path(), Some("permit(principal, action, resource);"));
    // The writer thread's name as the kernel keeps it (15 bytes).
    let writer = &capability_journal::db::WRITER_THREAD[..15];
    assert_eq!(threads_named(writer), 1);
    assert!(threads_named("receipt-writer") + threads_named("audit-writer") == 0);
    let r = host.invoke(&Request::new("text/slugify", json!({"text": "one writer"})));
    assert!(matches!(r, Outcome::Completed(_)));
    assert_eq!(threads_named(writer), 1);
    assert!(host.database().is_some());
    // Receipts and audit events went through it into the one file.
    let everything = AuditFilter::default().query().unwrap();
    let page = host
        .audit_query(&Principal::operator("o"), &everything)
        .unwrap();
    assert_eq!(page.events.len(), 2);
}

#[test]
fn a_new_home_opened_by_many_at_once_ends_with_one_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("home").join("host.key");
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (key, barrier) = (key.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                HostKey::load_or_generate(&key).map(|k| k.key_id())
            })
        })
        .collect();
    let ids: Vec<String> = handles
        .into_iter()
        .map(|h| h.join().unwrap().unwrap())
        .collect();
    let on_disk = HostKey::load(&key).unwrap().key_id();
    assert!(ids.iter().all(|id| *id == on_disk), "{ids:?} vs {on_disk}");
    let leftovers: Vec<_> = std::fs::read_dir(key.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name() != "host.key")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // Hosts opened at once on a new home all work.
    let home = dir.path().join("shared");
    let barrier = Arc::new(Barrier::new(6));
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let (home, barrier) = (home.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let host = Host::open(HostConfig {
                    home: Some(home),
                    ..HostConfig::default()
                })?;
                match host.invoke(&Request::new(
                    "text/slugify",
                    json!({"text": format!("n {i}")}),
                )) {
                    Outcome::Completed(_) => Ok(()),
                    other => panic!("{other:?}"),
                }
            })
        })
        .collect();
    for h in handles {
        let r: Result<(), capability_host::HostError> = h.join().unwrap();
        r.unwrap();
    }
}

/// An input with a `__proto__` member is refused on every surface, not only MCP's (issue 30,
/// item 2): the canonical form that is approved and receipted leaves it out, so what ran
/// would be more than what was approved; a resume that adds one is refused too.
#[test]
fn an_input_with_a_proto_member_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let host = crate::host_with(dir.path(), None);
    for input in [
        json!({"text": "a", "__proto__": {"text": "b"}}),
        json!({"text": "a", "options": {"__proto__": {"separator": "_"}}}),
    ] {
        match host.invoke(&Request::new("text/slugify", input.clone())) {
            Outcome::Failed(e) => {
                assert_eq!(e.code, capability_core::ErrorCode::InvalidInput, "{e:?}");
                assert!(e.message.contains("__proto__"), "{e:?}");
                assert!(e.receipt_id.is_none(), "nothing ran: {e:?}");
            }
            other => panic!("{input}: {other:?}"),
        }
    }
    let mut retry = Request::new("text/slugify", json!({"text": "a", "__proto__": 1}));
    retry.caller.actor.agent_id = Some("bot".into());
    assert!(matches!(
        host.resume(&retry, "capapr1.anything"),
        Outcome::Failed(e) if e.code == capability_core::ErrorCode::InvalidInput
    ));
}
