//! How the audit log and the receipts cost as history grows (issue 31, item 1: the audit
//! history and receipts axes). One run prints one line per measure and size:
//! `<axis>/<shape>/<size>: p50 .. µs, p99 .. µs`.
//!
//! Homes with 10 k and 1 M audit events and receipts (and 10 M with `HISTORY_SCALE=10m`)
//! are filled once through the stores' own append paths (so the chain verifies) and kept
//! under `target/bench-data/history-*-v<FORMAT>-<size>/`; later runs reuse them.
//!
//! * `audit/verify-incremental`: `Host::verify_audit` with a witness whose newest checkpoint
//!   is 1,000 events behind the head; `audit/verify-full` without a witness.
//! * `audit/console-page`: what the console's audit page does (first page + verify, with
//!   the witness).
//! * `audit/query-<filter>-first|deep`: a page of 50 with each filter, newest and ~90% deep.
//! * `audit/export-jsonl`: the whole log to a sink; the peak RSS growth during it.
//! * `receipts/list-*`, `receipts/show`, `receipts/export`, and the database's bytes per
//!   million.
//!
//! `cargo bench -p capability-host --bench history` (`HISTORY_SCALE=10m` for 10 M too).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capability_core::receipt::{Receipt, ReceiptStatus};
use capability_host::audit::{AuditFilter, ExportFormat};
use capability_host::principal::Principal;
use capability_host::receipts::ReceiptQuery;
use capability_host::witness::{self, Witness};
use capability_host::{Home, Host, HostConfig, Outcome, Request, Storage};
use capability_policy::action::{ActionType, AgentAction};
use capability_policy::approvals::HostKey;
use capability_policy::audit::{AuditEvent, AuditOutcome, AuditStore};
use capability_policy::decision::{Decision, DecisionType};
use capability_policy::model::{CapabilityKind, GovernedCapability};
use capability_policy::policy::Stage;
use capability_policy::store::SqliteStore;
use capability_runtime::store::{ReceiptStore, SqliteReceiptStore};
use capability_test_support::measure::Percentiles;
use serde_json::json;

/// Bump when what a filled home holds changes: old caches are then ignored.
const FORMAT: u32 = 1;
/// Events appended after the witnessed checkpoint.
const SINCE: usize = 1_000;
/// 2026-01-01T00:00:00Z; one event (and one receipt) every 100 ms.
const BASE_MS: i64 = 1_767_225_600_000;
const STEP_MS: i64 = 100;
const TENANTS: usize = 10;
const AGENTS: usize = 100;
const CAPABILITIES: usize = 1_000;
const PAGE: usize = 50;

fn sizes() -> Vec<(usize, &'static str)> {
    let mut s = vec![(10_000, "10k"), (1_000_000, "1m")];
    if std::env::var("HISTORY_SCALE").is_ok_and(|v| v == "10m") {
        s.push((10_000_000, "10m"));
    }
    s
}

fn data_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("bench-data")
}

fn ts(i: usize) -> String {
    capability_core::js::iso_from_millis(BASE_MS + i as i64 * STEP_MS)
}

fn operator() -> Principal {
    Principal::operator("bench")
}

/// Times `f` at least `min` and at most `max` times, stopping after `budget` once `min`
/// were taken.
fn adaptive(min: usize, max: usize, budget: Duration, mut f: impl FnMut()) -> Percentiles {
    let start = Instant::now();
    let mut samples = Vec::new();
    while samples.len() < max && (samples.len() < min || start.elapsed() < budget) {
        let t = Instant::now();
        f();
        samples.push(t.elapsed().as_nanos());
    }
    Percentiles::of(&mut samples)
}

fn db_bytes(home: &Path) -> u64 {
    ["capability.db", "capability.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(home.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

// ---------------------------------------------------------------------------------------
// Filling

fn template_event() -> AuditEvent {
    let cap = Arc::new(GovernedCapability::new("svc.cap0", CapabilityKind::McpTool));
    let action = AgentAction::new(ActionType::ToolCall, cap, "agent-0")
        .tenant("tenant-0")
        .principal("alice")
        .input_summary("{\"path\":\"/srv/data/report.csv\"}");
    let mut d = Decision::allow();
    d.policy_id = Some("allow-reads".into());
    d.policy_name = Some("allow-reads".into());
    let mut e = AuditEvent::new(&action, &d, Stage::BeforeCapability, AuditOutcome::Executed);
    e.policy_ids = vec!["allow-reads".into()];
    e.plan_fingerprint = Some("f".repeat(64));
    e
}

fn event(template: &AuditEvent, i: usize) -> AuditEvent {
    let mut e = template.clone();
    e.event_id = format!("evt_{i:032x}");
    e.action_id = format!("act_{i:032x}");
    e.timestamp = ts(i);
    e.tenant_id = Some(format!("tenant-{}", i % TENANTS));
    e.agent_id = format!("agent-{}", i % AGENTS);
    e.capability_name = format!("svc.cap{}", i % CAPABILITIES);
    if i % 100 == 7 {
        e.decision = DecisionType::Deny;
        e.outcome = AuditOutcome::DeniedBeforeExecution;
    }
    e.receipt_id = Some(format!("{i:08x}-0000-4000-8000-{i:012x}"));
    e
}

/// A home of `n` audit events, with a signed checkpoint of event `n - SINCE` beside it.
fn audit_home(n: usize, label: &str) -> PathBuf {
    let dir = data_dir().join(format!("history-audit-v{FORMAT}-{label}"));
    if dir.join("done").exists() {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let started = Instant::now();
    let store = SqliteStore::open(&home.join("capability.db")).unwrap();
    let key = HostKey::load_or_generate(&Home::at(&home).host_key()).unwrap();
    let template = template_event();
    let append = |from: usize, to: usize| {
        let mut i = from;
        while i < to {
            let end = (i + 10_000).min(to);
            let batch: Vec<AuditEvent> = (i..end).map(|j| event(&template, j)).collect();
            store.append(&batch).unwrap();
            i = end;
        }
    };
    append(0, n - SINCE);
    let doc = capability_policy::checkpoint::take(&store, &key, &ts(n - SINCE)).unwrap();
    std::fs::write(dir.join("checkpoint.json"), doc.to_string()).unwrap();
    append(n - SINCE, n);
    drop(store);
    std::fs::write(dir.join("done"), "").unwrap();
    eprintln!(
        "filled {n} audit events in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    dir
}

/// A real receipt (a built-in's run), to copy.
fn template_receipt() -> Receipt {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::open(HostConfig {
        home: Some(dir.path().to_path_buf()),
        storage: Storage::Memory,
        ..HostConfig::default()
    })
    .unwrap();
    match host.invoke(&Request::new(
        "text/slugify",
        json!({"text": "Quarterly report: revenue by region"}),
    )) {
        Outcome::Completed(done) => (*done.receipt).clone(),
        other => panic!("{other:?}"),
    }
}

fn receipt(template: &Receipt, i: usize) -> Receipt {
    let mut r = template.clone();
    r.receipt_id = format!("{i:08x}-0000-4000-8000-{i:012x}");
    r.plan_id = format!("plan-{i:08x}");
    r.capability.id = format!("svc/c{}", i % 100);
    r.started_at = ts(i);
    r.ended_at = capability_core::js::iso_from_millis(BASE_MS + i as i64 * STEP_MS + 2);
    if i % 50 == 3 {
        r.status = ReceiptStatus::Failed;
    }
    r
}

fn receipts_home(n: usize, label: &str) -> PathBuf {
    let dir = data_dir().join(format!("history-receipts-v{FORMAT}-{label}"));
    if dir.join("done").exists() {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let started = Instant::now();
    let template = template_receipt();
    let store = SqliteReceiptStore::open(&home).unwrap();
    for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
        for &i in chunk {
            store.put(Arc::new(receipt(&template, i))).unwrap();
        }
        store.flush().unwrap();
    }
    drop(store);
    std::fs::write(dir.join("done"), "").unwrap();
    eprintln!(
        "filled {n} receipts in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    dir
}

// ---------------------------------------------------------------------------------------
// Measuring

/// Peak RSS (kB) since the last reset.
fn hwm_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Runs `f` and returns how far the peak RSS rose above the RSS before it (kB).
fn peak_growth(f: impl FnOnce()) -> u64 {
    // "5" resets the peak to the current RSS (Linux ≥ 4.0).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = hwm_kb();
    f();
    hwm_kb().saturating_sub(before)
}

fn line(name: &str, p: Percentiles) {
    p.print(name);
}

fn audit(n: usize, label: &str) {
    let dir = audit_home(n, label);
    let home = dir.join("home");
    let bytes = db_bytes(&home);
    println!(
        "audit/db-bytes-per-million-events/{label}: {} bytes ({} bytes in all)",
        bytes as u128 * 1_000_000 / n as u128,
        bytes
    );
    let me = operator();
    let budget = Duration::from_secs(15);

    // With a witness whose newest checkpoint is SINCE events behind the head.
    {
        let wit = dir.join("witness");
        std::fs::create_dir_all(&wit).unwrap();
        std::fs::copy(
            dir.join("checkpoint.json"),
            wit.join(format!("{}.json", witness::home_id(&home))),
        )
        .unwrap();
        let host = Host::open(HostConfig {
            home: Some(home.clone()),
            audit_witness: Some(Witness::Directory(wit)),
            ..HostConfig::default()
        })
        .unwrap();
        let report = host.verify_audit(&me, None).unwrap();
        assert!(report.ok, "{}", report.to_json());
        eprintln!("  incremental verify checked {} records", report.records);
        line(
            &format!("audit/verify-incremental/{label}"),
            adaptive(3, 200, budget, || {
                assert!(host.verify_audit(&me, None).unwrap().ok);
            }),
        );
        let query = AuditFilter {
            limit: Some(PAGE),
            ..AuditFilter::default()
        }
        .query()
        .unwrap();
        line(
            &format!("audit/console-page/{label}"),
            adaptive(3, 200, budget, || {
                assert_eq!(host.audit_query(&me, &query).unwrap().events.len(), PAGE);
                assert!(host.verify_audit(&me, None).unwrap().ok);
            }),
        );
    }

    let host = Host::open(HostConfig {
        home: Some(home.clone()),
        ..HostConfig::default()
    })
    .unwrap();
    line(
        &format!("audit/verify-full/{label}"),
        adaptive(1, 20, budget, || {
            let r = host.verify_audit(&me, None).unwrap();
            assert!(r.ok && r.records == n as u64);
        }),
    );

    // Pages with each filter: the newest page and one about 90% deep (keyset cursor).
    let deep = (n / 10) as u64;
    let filters: [(&str, AuditFilter); 6] = [
        ("none", AuditFilter::default()),
        (
            "tenant",
            AuditFilter {
                tenant: Some("tenant-3".into()),
                ..AuditFilter::default()
            },
        ),
        (
            "agent",
            AuditFilter {
                agent: Some("agent-42".into()),
                ..AuditFilter::default()
            },
        ),
        (
            "capability",
            AuditFilter {
                capability: Some("svc.cap7".into()),
                ..AuditFilter::default()
            },
        ),
        (
            "decision",
            AuditFilter {
                decision: Some("deny".into()),
                ..AuditFilter::default()
            },
        ),
        (
            "time",
            AuditFilter {
                since: Some(ts(n / 20)),
                until: Some(ts(n / 2)),
                ..AuditFilter::default()
            },
        ),
    ];
    for (name, filter) in filters {
        for (shape, before) in [("first", None), ("deep", Some(deep))] {
            let query = AuditFilter {
                limit: Some(PAGE),
                before,
                ..filter.clone()
            }
            .query()
            .unwrap();
            // Filters that match 0.1-1% of the events leave less than a page in a small
            // log (or below its deep cursor): the query then reads down to the log's start.
            let got = host.audit_query(&me, &query).unwrap().events.len();
            assert!(
                got == PAGE || (n < 1_000_000 && got > 0),
                "{name} {shape}: {got}"
            );
            line(
                &format!("audit/query-{name}-{shape}/{label}"),
                adaptive(20, 2_000, Duration::from_secs(3), || {
                    std::hint::black_box(host.audit_query(&me, &query).unwrap());
                }),
            );
        }
    }
    let event_id = format!("evt_{:032x}", n / 3);
    line(
        &format!("audit/show/{label}"),
        adaptive(20, 2_000, Duration::from_secs(3), || {
            std::hint::black_box(host.audit_event(&me, &event_id).unwrap());
        }),
    );

    let mut count = 0;
    let started = Instant::now();
    let growth = peak_growth(|| {
        count = host
            .export_audit(
                &me,
                None,
                ExportFormat::Jsonl,
                "bench",
                &mut std::io::sink(),
            )
            .unwrap();
    });
    assert_eq!(count, n);
    println!(
        "audit/export-jsonl/{label}: {:.2} s for {count} events, peak RSS growth {growth} kB",
        started.elapsed().as_secs_f64()
    );
}

fn receipts(n: usize, label: &str) {
    let dir = receipts_home(n, label);
    let home = dir.join("home");
    let bytes = db_bytes(&home);
    println!(
        "receipts/db-bytes-per-million/{label}: {} bytes ({} bytes in all)",
        bytes as u128 * 1_000_000 / n as u128,
        bytes
    );
    let me = operator();
    let host = Host::open(HostConfig {
        home: Some(home.clone()),
        ..HostConfig::default()
    })
    .unwrap();
    let deep_until = ts(n / 10);
    let lists: [(&str, ReceiptQuery); 6] = [
        (
            "first",
            ReceiptQuery {
                limit: Some(PAGE),
                ..ReceiptQuery::default()
            },
        ),
        (
            "deep",
            ReceiptQuery {
                until: Some(deep_until.clone()),
                limit: Some(PAGE),
                ..ReceiptQuery::default()
            },
        ),
        (
            "capability-first",
            ReceiptQuery {
                capability: Some("svc/c7".into()),
                limit: Some(PAGE),
                ..ReceiptQuery::default()
            },
        ),
        (
            "capability-deep",
            ReceiptQuery {
                capability: Some("svc/c7".into()),
                until: Some(deep_until.clone()),
                limit: Some(PAGE),
                ..ReceiptQuery::default()
            },
        ),
        (
            "status-first",
            ReceiptQuery {
                status: Some(ReceiptStatus::Failed),
                limit: Some(PAGE),
                ..ReceiptQuery::default()
            },
        ),
        (
            "status-deep",
            ReceiptQuery {
                status: Some(ReceiptStatus::Failed),
                until: Some(deep_until.clone()),
                limit: Some(PAGE),
                ..ReceiptQuery::default()
            },
        ),
    ];
    for (shape, query) in lists {
        let got = host.receipts(&me, &query).unwrap().receipts.len();
        assert!(got == PAGE || (n < 1_000_000 && got > 0), "{shape}: {got}");
        line(
            &format!("receipts/list-{shape}/{label}"),
            adaptive(20, 2_000, Duration::from_secs(3), || {
                std::hint::black_box(host.receipts(&me, &query).unwrap());
            }),
        );
    }
    let mut i = 0usize;
    line(
        &format!("receipts/show/{label}"),
        adaptive(20, 5_000, Duration::from_secs(3), || {
            i = (i + 7_919) % n;
            let id = format!("{i:08x}-0000-4000-8000-{i:012x}");
            std::hint::black_box(host.receipt(&me, &id).unwrap());
        }),
    );
    let mut count = 0;
    let started = Instant::now();
    let growth = peak_growth(|| {
        count = host
            .export_receipts(&me, &ReceiptQuery::default(), &mut std::io::sink())
            .unwrap()
            .0;
    });
    assert_eq!(count, n);
    println!(
        "receipts/export-jsonl/{label}: {:.2} s for {count} receipts, peak RSS growth {growth} kB",
        started.elapsed().as_secs_f64()
    );
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read.
    for (n, label) in sizes() {
        audit(n, label);
        receipts(n, label);
    }
}
