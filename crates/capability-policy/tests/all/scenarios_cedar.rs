//! The scenarios of brane-reference.md §4 as Cedar files with fixture JSON
//! (`tests/fixtures/scenarios/sNN_*.cedar` + `sNN_*.json`), checked by the same runner as
//! `cap policy test`, validated against the schema generated from the scenario
//! capabilities, and, where the flow matters, run through the [`Governor`].
//!
//! Differences from the Rust versions, forced by Cedar: reasons are static text (S2, S3);
//! there is no lowercase/trim (S4, S5: common spellings listed, leading spaces refused), no
//! null (S7: a null argument is absent), no set size (S12 reads a reported `row_count`).
//! S15 (Python signature binding) has no counterpart.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;

use crate::common::{cedar_engine, fixture_path, governor, returns};
use capability_policy::cedar::{self, PolicyFile, SchemaOptions, Severity};
use capability_policy::fixtures::{self, Fixture};
use capability_policy::intercept::InterceptError;
use capability_policy::*;
use serde_json::{Value, json};

fn registry() -> CapabilityRegistry {
    let text = std::fs::read(fixture_path("scenarios/capabilities.json")).unwrap();
    let v = capability_core::json::parse(&text).unwrap();
    let r = CapabilityRegistry::new();
    for (name, g) in v.as_object().unwrap() {
        let governance = Governance::from_json(g, name).unwrap();
        r.register(GovernedCapability::with_governance(
            name.clone(),
            governance,
        ));
    }
    r
}

fn scenario_files() -> Vec<(PathBuf, PathBuf)> {
    let dir = fixture_path("scenarios");
    let mut out: Vec<(PathBuf, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cedar"))
        .map(|p| {
            let json = p.with_extension("json");
            (p, json)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_scenario_has_cedar_and_fixtures() {
    let files = scenario_files();
    let names: Vec<String> = files
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy()[..3].to_string())
        .collect();
    for s in [
        "s01", "s02", "s03", "s04", "s05", "s06", "s07", "s08", "s09", "s10", "s11", "s12", "s13",
        "s14", "s16",
    ] {
        assert!(names.iter().any(|n| n == s), "missing {s}");
    }
    for (_, json) in &files {
        assert!(json.exists(), "{} has no fixtures", json.display());
    }
}

#[test]
fn every_scenario_fixture_file_passes() {
    let registry = registry();
    let mut total = 0;
    for (cedar, json) in scenario_files() {
        let report = fixtures::test_policy_files(&[&cedar], &json, &registry)
            .unwrap_or_else(|e| panic!("{}: {e}", cedar.display()));
        assert!(!report.results.is_empty(), "{}", json.display());
        assert!(report.ok(), "{}:\n{}", cedar.display(), report.render());
        total += report.results.len();
    }
    assert!(total >= 55, "only {total} cases");
}

#[test]
fn scenario_policies_validate_against_the_generated_schema() {
    let registry = registry();
    let caps = registry.all();
    let schema =
        cedar::generate_schema(caps.iter().map(|c| c.as_ref()), &SchemaOptions::default()).unwrap();
    let files = cedar::read_paths(&[fixture_path("scenarios")]).unwrap();
    assert!(files.len() >= 15);
    // Against the union schema, and against each capability's own types.
    for report in [
        cedar::validate_sources(&files, Some(&schema.schema)),
        cedar::check_sources(&files, &schema),
    ] {
        let errors: Vec<String> = report
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .map(|d| d.to_string())
            .collect();
        assert!(errors.is_empty(), "{}", errors.join("\n"));
        assert!(report.policies >= 30);
    }
}

#[test]
fn s03_the_first_deny_in_priority_order_is_reported() {
    let registry = registry();
    let engine = PolicyEngine::new();
    engine.add_source(Arc::new(
        CedarPolicies::from_paths(&[fixture_path("scenarios/s03_refund_recipe.cedar")]).unwrap(),
    ));
    let cases = fixtures::load_fixtures(&fixture_path("scenarios/s03_refund_recipe.json")).unwrap();
    let find = |name: &str| -> &Fixture { cases.iter().find(|c| c.name.contains(name)).unwrap() };
    let r = fixtures::run_fixture(&engine, &registry, find("dev acme 250"));
    assert_eq!(
        r.reason.as_deref(),
        Some(
            "Refund exceeds the $100.00 limit for tenant tenant_acme. Human approval is required."
        )
    );
    // Both denies matched; the prod check (priority 200) comes after the limit (100).
    assert_eq!(
        r.policy_ids
            .iter()
            .filter(|p| p.starts_with("refund_"))
            .count(),
        2
    );
    let r = fixtures::run_fixture(&engine, &registry, find("dev acme 50"));
    assert_eq!(
        r.reason.as_deref(),
        Some("Refunds can only be issued in the production environment")
    );
}

#[test]
fn s01_through_the_governor_with_cedar() {
    let text = std::fs::read_to_string(fixture_path("scenarios/s01_quickstart_refund_limit.cedar"))
        .unwrap();
    let (g, sink) = governor("support-agent", Environment::Prod);
    let g = g
        .engine(cedar_engine("s01.cedar", &text))
        .registry(Arc::new(registry()));
    let req = |amount: Value| {
        InterceptRequest::new(
            "refund_customer",
            ActionType::ToolCall,
            json!({"amount_usd": amount}),
        )
    };
    assert_eq!(
        g.intercept(req(json!(50)), returns(json!("ok")))
            .unwrap()
            .output,
        json!("ok")
    );
    let err = g
        .intercept(req(json!(500)), returns(json!("ok")))
        .unwrap_err();
    assert_eq!(err.to_string(), "Refund above $100 requires approval");
    assert_eq!(err.denial().unwrap().policy_name(), Some("refund_policy"));
    let last = sink.events().pop().unwrap();
    assert_eq!(last.outcome, AuditOutcome::DeniedBeforeExecution);
    assert_eq!(last.policy_ids, ["refund_policy"]);
}

#[test]
fn s14_failure_is_audited_with_the_on_error_observer() {
    let text = std::fs::read_to_string(fixture_path("scenarios/s14_failure_path.cedar")).unwrap();
    let (g, sink) = governor("agent", Environment::Dev);
    let g = g
        .engine(cedar_engine("s14.cedar", &text))
        .registry(Arc::new(registry()));
    let err = g
        .intercept(
            InterceptRequest::new("flaky", ActionType::ExternalApiCall, json!({})),
            |_| Err::<Value, _>("upstream timed out".to_string()),
        )
        .unwrap_err();
    assert!(matches!(err, InterceptError::Execution { .. }));
    let last = sink.events().pop().unwrap();
    assert_eq!(last.outcome, AuditOutcome::ExecutionFailed);
    assert!(
        last.policy_ids.contains(&"flaky_observed".to_string()),
        "{:?}",
        last.policy_ids
    );
    assert_eq!(last.metadata["error_message"], json!("upstream timed out"));
}

#[test]
fn s16_reregistration_changes_cedar_decisions() {
    let text =
        std::fs::read_to_string(fixture_path("scenarios/s16_registry_semantics.cedar")).unwrap();
    let (g, _) = governor("agent", Environment::Dev);
    let g = g.engine(cedar_engine("s16.cedar", &text));
    let call = |g: &Governor| {
        g.intercept(
            InterceptRequest::new("svc", ActionType::ToolCall, json!({})),
            returns(json!(1)),
        )
        .is_ok()
    };
    g.register_capability(
        GovernedCapability::new("svc", CapabilityKind::Tool).risk(RiskLevel::Low),
    );
    assert!(call(&g));
    g.register_capability(
        GovernedCapability::new("svc", CapabilityKind::Tool).risk(RiskLevel::Critical),
    );
    assert!(
        !call(&g),
        "the cached entity must follow the new registration"
    );
    g.register_capability(
        GovernedCapability::new("svc", CapabilityKind::Tool).risk(RiskLevel::Low),
    );
    assert!(call(&g));
}

#[test]
fn a_failing_fixture_is_reported_with_a_readable_diff() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.cedar");
    std::fs::write(
        &policy,
        "permit(principal, action, resource);\n@id(\"no-prod\") @reason(\"not in prod\")\nforbid(principal, action, resource) when { context.environment == \"prod\" };\n",
    )
    .unwrap();
    let cases = dir.path().join("cases.json");
    std::fs::write(
        &cases,
        r#"[
          {"name": "dev passes", "action": {"capability": "x", "actionType": "tool_call", "agentId": "a",
            "environment": "dev", "governance": {}}, "expect": "allow"},
          {"name": "prod was expected to pass", "action": {"capability": "x", "actionType": "tool_call",
            "agentId": "a", "environment": "prod", "governance": {}}, "expect": "allow"},
          {"name": "unknown capability", "action": {"capability": "ghost", "actionType": "tool_call",
            "agentId": "a"}, "expect": "deny"}
        ]"#,
    )
    .unwrap();
    let report =
        fixtures::test_policy_files(&[&policy], &cases, &CapabilityRegistry::new()).unwrap();
    assert!(!report.ok());
    assert_eq!((report.passed(), report.failed()), (1, 2));
    let text = report.render();
    assert!(
        text.contains("ok     dev passes (before_capability): allow"),
        "{text}"
    );
    assert!(text.contains("FAILED prod was expected to pass (before_capability)\n  - expected: allow\n  + actual:   deny\n    reason:   not in prod\n    policies: no-prod\n"), "{text}");
    // An unregistered capability runs with the default attributes, and the report says so.
    assert!(
        text.contains("FAILED unknown capability (before_capability)\n  - expected: deny\n  + actual:   allow\n"),
        "{text}"
    );
    assert!(
        text.contains("environment=\"\" (`ghost` is not registered)\n1 passed"),
        "{text}"
    );
    assert!(text.ends_with("1 passed, 2 failed\n"), "{text}");
}

#[test]
fn fixture_files_with_mistakes_are_refused_with_their_position() {
    let err = fixtures::parse_fixtures(br#"[{"name": "a", "action": {"capability": "x", "actionType": "tool_call", "agentId": "a"}, "expect": "maybe"}]"#, "f.json").unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("`f.json`: fixture 1 (`a`): unknown decision `maybe`"),
        "{msg}"
    );
    let err = fixtures::parse_fixtures(b"[{]", "f.json").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("`f.json`: invalid JSON at line 1, column 3"),
        "{err}"
    );
    let err = fixtures::parse_fixtures(br#"[{"name": "b", "action": {"capability": "x", "actionType": "tool_call", "agentId": "a", "tennant": "t"}, "expect": "allow"}]"#, "f.json").unwrap_err();
    assert!(err.to_string().contains("unknown field `tennant`"), "{err}");
}

#[test]
fn policy_files_load_from_a_directory_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("b.cedar"),
        "@id(\"b\") permit(principal, action, resource);",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("a.cedar"),
        "@id(\"a\") permit(principal, action, resource);",
    )
    .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a policy").unwrap();
    let p = CedarPolicies::from_paths(&[dir.path()]).unwrap();
    let ids: Vec<&str> = p.rules().iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    let files = vec![PolicyFile::new(
        "x.cedar",
        "permit(principal, action, resource);",
    )];
    assert_eq!(
        CedarPolicies::from_sources(&files).unwrap().rules()[0].id,
        "x.cedar:1"
    );
}
