//! The scenarios of brane-reference.md §4, written as Rust closure policies and run through
//! the [`Governor`]. The Cedar versions are in `scenarios_cedar.rs`.
//!
//! Number formatting in reasons (S2, S3): Rust prints `250.0_f64` as JavaScript does
//! (`250`), not as Python (`250.0`); `{:.2}` matches Python's `:.2f`. A missing tenant is
//! rendered `(none)` where Python printed `None`.
//!
//! S15 (binding a Python signature's defaults into the input) has no Rust counterpart: a
//! governed closure receives the JSON input as given.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::{governor, returns};
use capability_policy::audit::JsonlSink;
use capability_policy::intercept::{InterceptError, InterceptMode};
use capability_policy::model::BraneEffect;
use capability_policy::*;
use serde_json::{Value, json};

fn js_number(x: f64) -> String {
    let mut s = String::new();
    capability_core::json::format_number(x, &mut s);
    s
}

fn refund_cap() -> GovernedCapability {
    GovernedCapability::new("refund_customer", CapabilityKind::Tool)
        .risk(RiskLevel::High)
        .effect(Effect {
            external: true,
            reversible: false,
            ..Effect::new(BraneEffect::Financial)
        })
        .data_namespace("billing.refunds")
        .owner("payments-team")
}

fn refund_req(amount: Value) -> InterceptRequest {
    InterceptRequest::new(
        "refund_customer",
        ActionType::ToolCall,
        json!({"amount_usd": amount}),
    )
}

#[test]
fn s1_quickstart_refund_limit_with_jsonl_audit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/audit.jsonl");
    let g = Governor::new("support-agent")
        .environment(Environment::Prod)
        .audit(Arc::new(JsonlSink::new(&path)));
    g.register_capability(refund_cap());
    g.policies().register(
        Policy::before("refund_customer", |ctx| {
            if ctx.arg_f64("amount_usd").unwrap_or(0.0) > 100.0 {
                Decision::deny("Refund above $100 requires approval")
            } else {
                Decision::allow()
            }
        })
        .named("refund_policy"),
    );
    let g = Arc::new(g);
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let refund = g.wrap(
        "refund_customer",
        ActionType::ToolCall,
        move |input: &Value| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(json!({"refunded": input["amount_usd"]}))
        },
    );
    assert_eq!(
        refund(json!({"amount_usd": 50})).unwrap(),
        json!({"refunded": 50})
    );
    let err = refund(json!({"amount_usd": 500})).unwrap_err();
    assert_eq!(err.to_string(), "Refund above $100 requires approval");
    let d = err.denial().unwrap();
    assert_eq!(d.policy_name(), Some("refund_policy"));
    assert!(d.action_id().starts_with("act_"));
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Changed: the allowed call leaves `allowed` then `executed`.
    let outcomes: Vec<&str> = lines
        .iter()
        .map(|l| l["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["allowed", "executed", "denied_before_execution"]);
    assert_eq!(lines[1]["decision"], json!("allow"));
    assert_eq!(lines[1]["policy_name"], json!("refund_policy"));
    assert_eq!(lines[1]["stage"], json!("before_capability"));
    assert_eq!(
        lines[1]["metadata"],
        json!({"declaration": "wrapper", "interceptor": "callable"})
    );
    assert_eq!(lines[2]["decision"], json!("deny"));
    assert_eq!(
        lines[2]["reason"],
        json!("Refund above $100 requires approval")
    );
    for (line, text) in lines.iter().zip(text.lines()) {
        assert!(line["timestamp"].as_str().unwrap().ends_with('Z'));
        let keys: Vec<&String> = line.as_object().unwrap().keys().collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted, "{text}");
    }
}

#[test]
fn s2_mental_model_refund_limit() {
    let (g, _) = governor("agent", Environment::Prod);
    let g = g.tenant("acme");
    g.register_capability(refund_cap());
    g.policies().register(
        Policy::before("refund_customer", |ctx| {
            let amount = ctx.arg_f64("amount_usd").unwrap_or(0.0);
            if amount > 100.0 {
                Decision::deny(format!("Refund ${} exceeds $100 limit", js_number(amount)))
            } else {
                Decision::allow()
            }
        })
        .named("limit_refund_amount"),
    );
    assert!(
        g.intercept(refund_req(json!(50.0)), returns(json!("ok")))
            .is_ok()
    );
    let err = g
        .intercept(refund_req(json!(250.0)), returns(json!("ok")))
        .unwrap_err();
    // Python wrote "$250.0"; JavaScript/Rust number formatting gives "$250".
    assert_eq!(err.to_string(), "Refund $250 exceeds $100 limit");
}

fn refund_recipe() -> (
    Governor,
    Arc<capability_policy::audit::MemorySink>,
    Arc<AtomicUsize>,
) {
    let (g, sink) = governor("agent", Environment::Prod);
    g.register_capability(refund_cap());
    let calls = Arc::new(AtomicUsize::new(0));
    let c1 = calls.clone();
    g.policies().register(
        Policy::before("refund_customer", move |ctx| {
            c1.fetch_add(1, Ordering::SeqCst);
            let amount = ctx.arg_f64("amount_usd").unwrap_or(0.0);
            let tenant = ctx.tenant_id();
            let limit = match tenant {
                Some("tenant_acme") => 100.0,
                Some("tenant_globex") => 250.0,
                Some("tenant_initech") => 50.0,
                _ => 100.0,
            };
            if amount <= 0.0 {
                Decision::deny("Refund amount must be positive")
            } else if amount > limit {
                Decision::deny(format!(
                    "Refund of ${amount:.2} exceeds the ${limit:.2} limit for tenant {}. Human approval is required.",
                    tenant.unwrap_or("(none)")
                ))
            } else {
                Decision::allow()
            }
        })
        .named("refund_amount_limit")
        .version("1.0")
        .priority(100),
    );
    let c2 = calls.clone();
    g.policies().register(
        Policy::before("refund_customer", move |ctx| {
            c2.fetch_add(1, Ordering::SeqCst);
            if ctx.is_prod() {
                Decision::allow()
            } else {
                Decision::deny("Refunds can only be issued in the production environment")
            }
        })
        .named("refund_require_prod")
        .version("1.0")
        .priority(200),
    );
    (g, sink, calls)
}

#[test]
fn s3_refund_recipe_tenant_limits_and_prod_only() {
    let (g, sink, calls) = refund_recipe();
    let run = |env: Environment, tenant: Option<&str>, amount: f64| {
        let mut req = refund_req(json!(amount)).environment(env);
        if let Some(t) = tenant {
            req = req.tenant(t);
        }
        g.intercept(req, returns(json!("refunded")))
    };
    // prod/acme/50 → executed; the executed event names the last policy.
    run(Environment::Prod, Some("tenant_acme"), 50.0).unwrap();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "both policies run on every call"
    );
    let executed = sink.events().pop().unwrap();
    assert_eq!(executed.outcome, AuditOutcome::Executed);
    assert_eq!(executed.policy_name.as_deref(), Some("refund_require_prod"));
    assert_eq!(executed.policy_version.as_deref(), Some("1.0"));

    let denied = |env, tenant, amount: f64| {
        let e = run(env, tenant, amount).unwrap_err();
        let d = e.denial().unwrap();
        (d.policy_name().unwrap().to_string(), e.to_string())
    };
    assert_eq!(
        denied(Environment::Prod, Some("tenant_acme"), 250.0),
        (
            "refund_amount_limit".into(),
            "Refund of $250.00 exceeds the $100.00 limit for tenant tenant_acme. Human approval is required.".into()
        )
    );
    run(Environment::Prod, Some("tenant_globex"), 200.0).unwrap();
    assert_eq!(
        denied(Environment::Prod, Some("tenant_acme"), 0.0),
        (
            "refund_amount_limit".into(),
            "Refund amount must be positive".into()
        )
    );
    assert_eq!(
        denied(Environment::Dev, Some("tenant_acme"), 50.0),
        (
            "refund_require_prod".into(),
            "Refunds can only be issued in the production environment".into()
        )
    );
    // First deny in priority order wins even though the prod check also denies.
    assert_eq!(
        denied(Environment::Dev, Some("tenant_acme"), 250.0).0,
        "refund_amount_limit"
    );
    assert_eq!(
        denied(Environment::Prod, None, 150.0).1,
        "Refund of $150.00 exceeds the $100.00 limit for tenant (none). Human approval is required."
    );
}

fn sql_governor(policy: Policy) -> Governor {
    let (g, _) = governor("agent", Environment::Prod);
    g.register_capability(
        GovernedCapability::new("execute_sql", CapabilityKind::Database)
            .risk(RiskLevel::High)
            .data_namespace("customer.records")
            .owner("data-team")
            .declared_effect("database.read"),
    );
    g.policies().register(policy);
    g
}

fn sql(query: &str) -> InterceptRequest {
    InterceptRequest::new(
        "execute_sql",
        ActionType::DatabaseQuery,
        json!({"query": query}),
    )
}

#[test]
fn s4_read_only_sql() {
    let policy = Policy::before("execute_sql", |ctx| {
        let q = ctx.arg_str("query").unwrap_or("").trim().to_lowercase();
        if q.starts_with("select") {
            Decision::allow()
        } else {
            Decision::deny("Only SELECT queries are allowed")
        }
    })
    .named("read_only_sql")
    .version("1.0");
    let g = sql_governor(policy);
    let ok = g
        .intercept(
            sql("select * from customers limit 10"),
            returns(json!({"rows": []})),
        )
        .unwrap();
    assert_eq!(
        ok.before.unwrap().decision.policy_version.as_deref(),
        Some("1.0")
    );
    let err = g
        .intercept(sql("delete from customers"), returns(json!({})))
        .unwrap_err();
    let d = err.denial().unwrap();
    assert_eq!(d.reason(), Some("Only SELECT queries are allowed"));
    assert_eq!(d.policy_name(), Some("read_only_sql"));
    assert!(d.action_id().starts_with("act_"));
}

fn sql_read_only_recipe(ctx: &PolicyContext) -> Decision {
    let q = ctx.arg_str("query").unwrap_or("").trim().to_lowercase();
    if ["select", "with", "explain"]
        .iter()
        .any(|p| q.starts_with(p))
    {
        Decision::allow()
    } else {
        let head: String = q.chars().take(40).collect();
        Decision::deny(format!("Only SELECT queries are allowed. Got: {head}"))
    }
}

#[test]
fn s5_sql_read_only_recipe() {
    // The recipe's effect type `database_query` is an action type, not an effect: refused.
    let bad = json!({"kind": "database", "risk": "high", "effect": {"type": "database_query"}});
    let err = Governance::from_json(&bad, "metadata.governance").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("metadata.governance.effect.type: unknown effect type `database_query`"),
        "{err}"
    );

    let g = sql_governor(
        Policy::before("execute_sql", sql_read_only_recipe)
            .named("sql_read_only")
            .version("1.0")
            .priority(100),
    );
    for q in [
        "SELECT * FROM customers WHERE id = 42",
        "WITH cte AS (SELECT 1) SELECT * FROM cte",
        "  explain select 1",
        // Known weakness kept for parity: piggy-backed statements pass a prefix check.
        "select 1; drop table users",
    ] {
        assert!(g.intercept(sql(q), returns(json!({}))).is_ok(), "{q}");
    }
    let e = g
        .intercept(
            sql("DELETE FROM customers WHERE id = 42"),
            returns(json!({})),
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .ends_with("Got: delete from customers where id = 42"),
        "{e}"
    );
    let long = "UPDATE customers SET name = 'x' WHERE id IN (1, 2, 3, 4, 5, 6)";
    let e = g.intercept(sql(long), returns(json!({}))).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "Only SELECT queries are allowed. Got: {}",
            &long.to_lowercase()[..40]
        )
    );

    // A stricter policy, added separately, refuses piggy-backed statements.
    g.policies().register(
        Policy::before("execute_sql", |ctx| {
            if ctx
                .arg_str("query")
                .unwrap_or("")
                .trim_end()
                .trim_end_matches(';')
                .contains(';')
            {
                Decision::deny("Multiple statements are not allowed")
            } else {
                Decision::allow()
            }
        })
        .named("single_statement")
        .priority(50),
    );
    let e = g
        .intercept(sql("select 1; drop table users"), returns(json!({})))
        .unwrap_err();
    assert_eq!(e.to_string(), "Multiple statements are not allowed");
}

#[test]
fn s6_block_high_risk_in_prod() {
    let (g, _) = governor("agent", Environment::Prod);
    g.policies().register(
        Policy::before("*", |ctx| {
            if ctx.is_prod() && ctx.is_high_risk() {
                Decision::deny("High-risk capability blocked in prod")
            } else {
                Decision::allow()
            }
        })
        .named("block_high_risk_in_prod"),
    );
    // Registered after the policy: matching is by name at call time.
    for (name, risk) in [
        ("h", RiskLevel::High),
        ("c", RiskLevel::Critical),
        ("m", RiskLevel::Medium),
    ] {
        g.register_capability(GovernedCapability::new(name, CapabilityKind::Tool).risk(risk));
    }
    let call = |name: &str, env| {
        g.intercept(
            InterceptRequest::new(name, ActionType::ToolCall, json!({})).environment(env),
            returns(json!(1)),
        )
        .is_ok()
    };
    assert!(!call("h", Environment::Prod));
    assert!(!call("c", Environment::Prod));
    assert!(call("m", Environment::Prod));
    assert!(call("c", Environment::Dev));
}

fn tenant_tool(g: &Governor) {
    g.register_capability(GovernedCapability::new(
        "lookup_customer",
        CapabilityKind::Tool,
    ));
}

fn lookup(input: Value) -> InterceptRequest {
    InterceptRequest::new("lookup_customer", ActionType::ToolCall, input)
}

#[test]
fn s7_tenant_isolation_guide_variant() {
    let build = |tenant: Option<&str>| {
        let (mut g, _) = governor("agent", Environment::Prod);
        if let Some(t) = tenant {
            g = g.tenant(t);
        }
        tenant_tool(&g);
        g.policies().register(
            Policy::before("*", |ctx| {
                let action_tenant = ctx.tenant_id().map(|t| json!(t)).unwrap_or(Value::Null);
                // Key presence: a present null is the requested tenant.
                let requested = ctx.arg_or("tenant_id", &action_tenant).clone();
                if requested != action_tenant {
                    Decision::deny("Cross-tenant action blocked")
                } else {
                    Decision::allow()
                }
            })
            .named("tenant_isolation"),
        );
        g
    };
    let g = build(Some("tenant_acme"));
    let ok = |input| g.intercept(lookup(input), returns(json!(1))).is_ok();
    assert!(ok(json!({"tenant_id": "tenant_acme"})));
    assert!(!ok(json!({"tenant_id": "tenant_globex"})));
    // Brane bound the parameter's None default, so "omitted" meant a present null: denied.
    assert!(!ok(json!({"tenant_id": null})));
    // Rust has no signature binding: a truly omitted key falls back to the action tenant.
    assert!(ok(json!({})));
    let no_tenant = build(None);
    assert!(
        no_tenant
            .intercept(
                lookup(json!({"tenant_id": "tenant_acme"})),
                returns(json!(1))
            )
            .is_err()
    );
}

#[test]
fn s7_tenant_isolation_readme_variant() {
    let build = |tenant: Option<&str>| {
        let (mut g, _) = governor("agent", Environment::Prod);
        if let Some(t) = tenant {
            g = g.tenant(t);
        }
        tenant_tool(&g);
        g.policies().register(
            Policy::before("*", |ctx| {
                match (ctx.arg_str("tenant_id"), ctx.tenant_id()) {
                    (Some(req), Some(own)) if req != own => {
                        Decision::deny("Cross-tenant action blocked")
                    }
                    _ => Decision::allow(),
                }
            })
            .priority(0),
        );
        g
    };
    let g = build(Some("tenant_acme"));
    let ok = |g: &Governor, input| g.intercept(lookup(input), returns(json!(1))).is_ok();
    assert!(ok(&g, json!({})));
    assert!(ok(&g, json!({"tenant_id": null})));
    assert!(ok(&g, json!({"tenant_id": "tenant_acme"})));
    assert!(!ok(&g, json!({"tenant_id": "tenant_globex"})));
    let open = build(None);
    assert!(ok(&open, json!({"tenant_id": "tenant_globex"})));
}

#[test]
fn s8_destructive_tool_needs_an_approval_signal() {
    let (g, sink) = governor("agent", Environment::Prod);
    g.register_capability(
        GovernedCapability::new("delete_user", CapabilityKind::Tool).risk(RiskLevel::Critical),
    );
    g.policies().register(
        Policy::before("delete_user", |ctx| {
            let approved = ctx.runtime_metadata.get("approved").is_some_and(|v| {
                !matches!(v, Value::Null | Value::Bool(false)) && v != &json!(0) && v != &json!("")
            });
            if approved {
                Decision::allow()
            } else {
                Decision::deny("delete_user requires an approval signal")
            }
        })
        .named("require_approval_signal"),
    );
    let g = Arc::new(g);
    let wrapped = g.wrap("delete_user", ActionType::ToolCall, |_: &Value| {
        Ok::<_, String>(json!("deleted"))
    });
    assert_eq!(
        wrapped(json!({"user_id": "u1"})).unwrap_err().to_string(),
        "delete_user requires an approval signal"
    );
    let r = g
        .intercept(
            InterceptRequest::new(
                "delete_user",
                ActionType::ToolCall,
                json!({"user_id": "u1"}),
            )
            .meta("approved", json!(true))
            .label("ticket", "OPS-1")
            .principal("admin-1"),
            returns(json!("deleted")),
        )
        .unwrap();
    assert_eq!(r.output, json!("deleted"));
    let e = sink.events().pop().unwrap();
    assert_eq!(e.outcome, AuditOutcome::Executed);
    assert_eq!(
        e.metadata,
        json!({"approved": true}).as_object().unwrap().clone()
    );
    assert_eq!(e.labels.get("ticket").map(String::as_str), Some("OPS-1"));
    assert_eq!(e.principal_id.as_deref(), Some("admin-1"));
}

fn mcp_governor() -> Governor {
    let (g, _) = governor("agent", Environment::Prod);
    g.register_capability(
        GovernedCapability::new("mcp.github.merge_pr", CapabilityKind::McpTool)
            .risk(RiskLevel::High),
    );
    g.register_capability(
        GovernedCapability::new("mcp.filesystem.read_file", CapabilityKind::McpTool)
            .risk(RiskLevel::Low),
    );
    g.register_capability(
        GovernedCapability::new("tool.wire_money", CapabilityKind::Tool).risk(RiskLevel::High),
    );
    g
}

fn mcp_call(g: &Governor, name: &str, env: Environment) -> Result<(), String> {
    g.intercept(
        InterceptRequest::new(name, ActionType::McpToolCall, json!({})).environment(env),
        returns(json!(1)),
    )
    .map(|_| ())
    .map_err(|e| e.to_string())
}

#[test]
fn s9_mcp_writes_blocked_in_prod() {
    let g = mcp_governor();
    g.policies().register(Policy::before("*", |ctx| {
        if ctx.is_prod() && ctx.capability().name.starts_with("mcp.") && ctx.is_high_risk() {
            Decision::deny("High-risk MCP action blocked in prod")
        } else {
            Decision::allow()
        }
    }));
    assert_eq!(
        mcp_call(&g, "mcp.github.merge_pr", Environment::Prod),
        Err("High-risk MCP action blocked in prod".into())
    );
    assert!(mcp_call(&g, "mcp.github.merge_pr", Environment::Dev).is_ok());
    assert!(mcp_call(&g, "mcp.filesystem.read_file", Environment::Prod).is_ok());
    assert!(mcp_call(&g, "tool.wire_money", Environment::Prod).is_ok());
}

#[test]
fn s9_glob_targets_match_changed() {
    // Brane's target `mcp.*` matched nothing; here it is a glob.
    let g = mcp_governor();
    g.policies().register(Policy::before("mcp.*", |ctx| {
        if ctx.is_prod() && ctx.is_high_risk() {
            Decision::deny("High-risk MCP action blocked in prod")
        } else {
            Decision::allow()
        }
    }));
    assert!(mcp_call(&g, "mcp.github.merge_pr", Environment::Prod).is_err());
    assert!(mcp_call(&g, "mcp.filesystem.read_file", Environment::Prod).is_ok());
    assert!(mcp_call(&g, "tool.wire_money", Environment::Prod).is_ok());
    assert!(Target::parse("mcp.*").matches("mcp.github.merge_pr"));
    assert!(!Target::parse("mcp.*").matches("tool.mcp"));
}

#[test]
fn s10_mcp_postgres_read_only() {
    let (g, sink) = governor("agent", Environment::Prod);
    // Registered by plain name: the runtime does not execute it.
    g.register_capability(
        GovernedCapability::new("mcp.postgres.query", CapabilityKind::McpTool)
            .risk(RiskLevel::Medium),
    );
    g.policies()
        .register(Policy::before("mcp.postgres.query", |ctx| {
            if ctx
                .arg_str("query")
                .unwrap_or("")
                .trim()
                .to_lowercase()
                .starts_with("select")
            {
                Decision::allow()
            } else {
                Decision::deny("Only SELECT queries are allowed")
            }
        }));
    let q = |query: &str| {
        g.intercept(
            InterceptRequest::new(
                "mcp.postgres.query",
                ActionType::McpToolCall,
                json!({"query": query}),
            ),
            returns(json!({"rows": []})),
        )
    };
    assert!(q("  SELECT 1").is_ok());
    assert_eq!(
        q("drop table users").unwrap_err().to_string(),
        "Only SELECT queries are allowed"
    );
    assert_eq!(
        sink.events().last().unwrap().action_type,
        ActionType::McpToolCall
    );
}

#[test]
fn s11_scope_requirement_changed() {
    let (g, _) = governor("agent", Environment::Prod);
    g.register_capability(refund_cap().scope("refunds:create"));
    g.register_capability(
        GovernedCapability::new("update_customer", CapabilityKind::Tool).scope("customers:read"),
    );
    g.policies().register(
        Policy::before("refund_customer", |ctx| {
            if ctx.agent_has_scope("refunds:create") {
                Decision::allow()
            } else {
                Decision::deny("Missing scope refunds:create")
            }
        })
        .named("require_refund_scope"),
    );
    g.policies()
        .register(Policy::before("update_customer", |ctx| {
            if ctx.agent_has_scope("customers:write") {
                Decision::allow()
            } else {
                Decision::deny(format!("Missing scopes: {:?}", ctx.missing_scopes()))
            }
        }));
    // Changed: the scope must be granted to the agent, not merely declared by the capability.
    assert!(
        g.intercept(refund_req(json!(10)), returns(json!(1)))
            .is_err()
    );
    assert!(
        g.intercept(
            refund_req(json!(10)).scope("refunds:create"),
            returns(json!(1))
        )
        .is_ok()
    );
    let e = g
        .intercept(
            InterceptRequest::new("update_customer", ActionType::ToolCall, json!({}))
                .scope("customers:read"),
            returns(json!(1)),
        )
        .unwrap_err();
    assert_eq!(e.to_string(), "Missing scopes: []");
    let granted = g.clone_with_scope("refunds:create");
    assert!(
        granted
            .intercept(refund_req(json!(10)), returns(json!(1)))
            .is_ok()
    );
}

trait CloneWithScope {
    fn clone_with_scope(&self, scope: &str) -> Governor;
}

impl CloneWithScope for Governor {
    fn clone_with_scope(&self, scope: &str) -> Governor {
        Governor::new(self.agent_id.clone())
            .environment(self.environment)
            .registry(self.capabilities().clone())
            .engine(self.policies().clone())
            .scope(scope)
    }
}

#[test]
fn s12_after_capability_output_checks_run_on_every_call() {
    let (g, sink) = governor("agent", Environment::Prod);
    g.register_capability(GovernedCapability::new(
        "execute_sql",
        CapabilityKind::Database,
    ));
    g.register_capability(GovernedCapability::new("call_model", CapabilityKind::Model));
    g.register_capability(GovernedCapability::new(
        "get_customer_data",
        CapabilityKind::Database,
    ));
    g.policies().register(
        Policy::after("execute_sql", |ctx| {
            let rows = ctx
                .output
                .as_ref()
                .and_then(|o| o.get("rows"))
                .and_then(Value::as_array);
            if rows.is_some_and(|r| r.len() > 1000) {
                Decision::deny("Result set too large (>1000 rows)")
            } else {
                Decision::allow()
            }
        })
        .named("check_result_size"),
    );
    g.policies().register(
        Policy::after("call_model", |ctx| {
            let text = ctx
                .output
                .as_ref()
                .map(|o| o.to_string().to_uppercase())
                .unwrap_or_default();
            if ["SECRET_KEY", "API_KEY", "PASSWORD=", "TOKEN="]
                .iter()
                .any(|m| text.contains(m))
            {
                Decision::deny("Possible secret in model output")
            } else {
                Decision::allow()
            }
        })
        .named("check_for_secrets"),
    );
    g.policies().register(
        Policy::after("get_customer_data", |ctx| match &ctx.output {
            Some(Value::Object(m)) if m.contains_key("customer_id") => Decision::allow(),
            _ => Decision::deny("Invalid customer output"),
        })
        .named("validate_customer_output"),
    );
    let runs = AtomicUsize::new(0);
    let call = |name: &str, out: Value| {
        g.intercept(
            InterceptRequest::new(name, ActionType::ToolCall, json!({})),
            |_| {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(out)
            },
        )
    };
    let many: Vec<Value> = (0..1001).map(|i| json!({"id": i})).collect();
    assert_eq!(
        call("execute_sql", json!({"rows": many}))
            .unwrap_err()
            .to_string(),
        "Result set too large (>1000 rows)"
    );
    assert!(call("execute_sql", json!({"rows": [1, 2]})).is_ok());
    let e = call("call_model", json!({"text": "here: api_key=abc"})).unwrap_err();
    assert_eq!(e.to_string(), "Possible secret in model output");
    // The function ran before the deny, and the output is withheld from the caller.
    assert_eq!(
        e.denial().unwrap().action.output,
        Some(json!({"text": "here: api_key=abc"}))
    );
    assert!(call("call_model", json!({"text": "hello"})).is_ok());
    assert!(call("get_customer_data", json!({"customer_id": 1})).is_ok());
    assert!(call("get_customer_data", json!("just text")).is_err());
    assert_eq!(runs.load(Ordering::SeqCst), 6);
    let denied_after = sink
        .events()
        .iter()
        .filter(|e| e.outcome == AuditOutcome::DeniedAfterExecution)
        .count();
    assert_eq!(denied_after, 3);
}

#[test]
fn s13_priority_and_composition() {
    let engine = PolicyEngine::new();
    let a = AgentAction::new(
        ActionType::ToolCall,
        Arc::new(GovernedCapability::new("t", CapabilityKind::Tool)),
        "agent",
    );
    let ctx = PolicyContext::new(a.clone(), Stage::BeforeCapability);
    // [redact, deny] → deny (Brane raised NotImplementedError here).
    engine.register(Policy::before("*", |_| Decision::redact(["/x"])).priority(1));
    engine.register(
        Policy::before("t", |_| Decision::deny("no"))
            .named("d")
            .priority(2),
    );
    assert_eq!(engine.evaluate(&ctx).unwrap().kind, DecisionType::Deny);
    // [deny, approval_required] → deny.
    let engine = PolicyEngine::new();
    engine.register(
        Policy::before("*", |_| Decision::deny("first"))
            .named("d1")
            .priority(1),
    );
    engine.register(Policy::before("*", |_| Decision::approval_required("ask")).priority(2));
    let v = engine.evaluate(&ctx).unwrap();
    assert_eq!(
        (v.kind, v.decision.reason.as_deref()),
        (DecisionType::Deny, Some("first"))
    );
    // Two denies: the first by priority is reported, whatever the registration order.
    let engine = PolicyEngine::new();
    engine.register(
        Policy::before("*", |_| Decision::deny("late"))
            .named("late")
            .priority(20),
    );
    engine.register(
        Policy::before("*", |_| Decision::deny("early"))
            .named("early")
            .priority(10),
    );
    assert_eq!(
        engine
            .evaluate(&ctx)
            .unwrap()
            .decision
            .policy_name
            .as_deref(),
        Some("early")
    );
}

#[test]
fn s14_failure_path() {
    let (g, sink) = governor("agent", Environment::Dev);
    g.register_capability(GovernedCapability::new("flaky", CapabilityKind::Tool));
    g.policies()
        .register(Policy::before("flaky", |_| Decision::allow()).named("allow_flaky"));
    let seen = Arc::new(std::sync::Mutex::new(None));
    let s = seen.clone();
    g.policies().register(Policy::on_error("flaky", move |ctx| {
        *s.lock().unwrap() = ctx.error.clone();
        Decision::log_only("alert on-call")
    }));
    let err = g
        .intercept(
            InterceptRequest::new("flaky", ActionType::ToolCall, json!({})),
            |_| Err::<Value, _>("boom".to_string()),
        )
        .unwrap_err();
    assert!(matches!(err, InterceptError::Execution { ref error, .. } if error == "boom"));
    assert_eq!(seen.lock().unwrap().as_deref(), Some("boom"));
    let events = sink.events();
    let last = events.last().unwrap();
    assert_eq!(last.outcome, AuditOutcome::ExecutionFailed);
    assert_eq!(last.stage, Stage::OnError);
    assert_eq!(last.metadata["error_type"], json!("String"));
    assert_eq!(last.metadata["error_message"], json!("boom"));
}

#[test]
fn s16_registry_semantics() {
    let (g, _) = governor("agent", Environment::Dev);
    g.register_capability(GovernedCapability::new("a", CapabilityKind::Tool));
    g.register_capability(GovernedCapability::new("b", CapabilityKind::Model));
    g.register_capability(GovernedCapability::new("a", CapabilityKind::Memory));
    assert_eq!(g.capabilities().names(), ["a", "b"]);
    assert_eq!(
        g.capabilities().get("a").unwrap().kind(),
        CapabilityKind::Memory
    );
    assert!(g.capabilities().require("zzz").is_err());
    assert!(g.capabilities().unregister("b").is_some());
    assert!(g.capabilities().unregister("b").is_none());
    // After-only mode still applies after policies to the re-registered capability.
    g.policies().register(Policy::after("a", |_| {
        Decision::deny("memory writes are reviewed")
    }));
    assert!(
        g.intercept(
            InterceptRequest::new("a", ActionType::MemoryWrite, json!({}))
                .mode(InterceptMode::AfterOnly),
            returns(json!(1))
        )
        .is_err()
    );
}
