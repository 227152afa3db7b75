"""The reference's scenarios S1–S16 (§4), with brane-core 0.1.0a2's exact results."""

from __future__ import annotations

import json

import pytest
from brane_helpers import make_action

import capability.brane as brane
from capability.brane import (
    Capability,
    CapabilityDeniedError,
    CapabilityNotFoundError,
    Effect,
    InMemoryAuditSink,
    InterceptRequest,
    Policy,
    PolicyEngine,
    Runtime,
    Scope,
    allow,
    deny,
)


def _denied(call, *args, **kwargs) -> CapabilityDeniedError:
    with pytest.raises(CapabilityDeniedError) as info:
        call(*args, **kwargs)
    return info.value


# --- S1 -------------------------------------------------------------------------------------


def test_s1_quickstart_refund_limit(tmp_path):
    path = tmp_path / "logs" / "nested" / "audit.jsonl"
    runtime = brane.Runtime(agent_id="support-agent", environment="prod", audit_path=path)
    executed = []

    @runtime.capability(type="tool", risk="high")
    def refund_customer(customer_id: str, amount_usd: float) -> dict:
        executed.append(amount_usd)
        return {"customer_id": customer_id, "refunded": amount_usd}

    @runtime.before_capability("refund_customer")
    def refund_policy(ctx):
        if ctx.arg("amount_usd") > 100:
            return deny("Refund above $100 requires approval")
        return allow()

    assert refund_customer("cus_123", 50) == {"customer_id": "cus_123", "refunded": 50}
    err = _denied(refund_customer, "cus_123", amount_usd=500)
    assert str(err) == "Refund above $100 requires approval"
    assert err.reason == "Refund above $100 requires approval"
    assert err.policy_name == "refund_policy" and err.action_id.startswith("act_")
    assert executed == [50]

    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    for line in lines:
        keys = list(json.loads(line))
        assert keys == sorted(keys)
    assert (first["outcome"], first["decision"], first["policy_name"], first["stage"]) == (
        "executed", "allow", "refund_policy", "before_capability")
    assert first["metadata"] == {"declaration": "decorator", "interceptor": "callable"}
    assert first["timestamp"].endswith("+00:00")
    assert (second["outcome"], second["decision"], second["reason"]) == (
        "denied_before_execution", "deny", "Refund above $100 requires approval")
    assert second["action_id"] == err.action_id and second["agent_id"] == "support-agent"
    assert second["environment"] == "prod" and second["capability_risk"] == "high"


# --- S2 -------------------------------------------------------------------------------------


def test_s2_mental_model_refund_limit_keeps_python_float_formatting():
    runtime = Runtime(agent_id="support-agent", environment="prod", tenant_id="acme")

    @runtime.capability(type="tool", risk="high")
    def refund_customer(amount: float) -> str:
        return f"refunded {amount}"

    @runtime.before_capability("refund_customer")
    def limit_refund_amount(ctx):
        amount = ctx.arg("amount")
        if amount > 100:
            return deny(f"Refund ${amount} exceeds $100 limit")
        return allow()

    assert refund_customer(50.00) == "refunded 50.0"
    err = _denied(refund_customer, 250.00)
    assert str(err) == "Refund $250.0 exceeds $100 limit"
    assert err.policy_name == "limit_refund_amount"


# --- S3 -------------------------------------------------------------------------------------

TENANT_LIMITS = {"tenant_acme": 100.0, "tenant_globex": 250.0, "tenant_initech": 50.0}
DEFAULT_LIMIT = 100.0


def _refund_recipe(environment, tenant_id):
    sink = InMemoryAuditSink()
    runtime = Runtime(agent_id="support-agent", environment=environment, tenant_id=tenant_id,
                      audit=sink)
    calls = []

    @runtime.capability(type="tool", risk="high", effect=Effect(type="financial", external=True,
                                                                  reversible=False))
    def refund_customer(customer_id: str, amount: float) -> dict:
        return {"status": "refunded", "amount": amount}

    @runtime.before_capability("refund_customer", name="refund_amount_limit", version="1.0",
                               priority=100)
    def refund_amount_limit(ctx):
        calls.append("limit")
        amount = ctx.arg("amount")
        if amount <= 0:
            return deny("Refund amount must be positive")
        limit = TENANT_LIMITS.get(ctx.tenant_id, DEFAULT_LIMIT)
        if amount > limit:
            return deny(
                f"Refund of ${amount:.2f} exceeds the ${limit:.2f} limit for tenant "
                f"{ctx.tenant_id}. Human approval is required."
            )
        return allow()

    @runtime.before_capability("refund_customer", name="refund_require_prod", version="1.0",
                               priority=200)
    def refund_require_prod(ctx):
        calls.append("prod")
        if not ctx.is_prod:
            return deny("Refunds can only be issued in the production environment")
        return allow()

    return refund_customer, sink, calls


def test_s3_refund_recipe_executed_events_name_the_last_policy():
    refund, sink, calls = _refund_recipe("prod", "tenant_acme")
    assert refund("c1", 50) == {"status": "refunded", "amount": 50}
    assert calls == ["limit", "prod"]  # both run, limit first
    event = sink.events[0]
    assert (event.outcome, event.policy_name, event.policy_version) == (
        "executed", "refund_require_prod", "1.0")


@pytest.mark.parametrize(
    "environment, tenant, amount, policy, reason",
    [
        ("prod", "tenant_acme", 250, "refund_amount_limit",
         "Refund of $250.00 exceeds the $100.00 limit for tenant tenant_acme. "
         "Human approval is required."),
        ("prod", "tenant_acme", 0, "refund_amount_limit", "Refund amount must be positive"),
        ("dev", "tenant_acme", 50, "refund_require_prod",
         "Refunds can only be issued in the production environment"),
        ("dev", "tenant_acme", 250, "refund_amount_limit",
         "Refund of $250.00 exceeds the $100.00 limit for tenant tenant_acme. "
         "Human approval is required."),
        ("prod", None, 150, "refund_amount_limit",
         "Refund of $150.00 exceeds the $100.00 limit for tenant None. "
         "Human approval is required."),
        ("prod", "tenant_initech", 60, "refund_amount_limit",
         "Refund of $60.00 exceeds the $50.00 limit for tenant tenant_initech. "
         "Human approval is required."),
    ],
)
def test_s3_refund_recipe_denials(environment, tenant, amount, policy, reason):
    refund, sink, calls = _refund_recipe(environment, tenant)
    err = _denied(refund, "c1", amount)
    assert str(err) == reason and err.policy_name == policy and err.policy_version == "1.0"
    assert calls == ["limit", "prod"]  # no short-circuit
    assert sink.events[0].outcome == "denied_before_execution"
    assert sink.events[0].policy_name == policy


def test_s3_refund_recipe_globex_higher_limit():
    refund, sink, _ = _refund_recipe("prod", "tenant_globex")
    assert refund("c1", 200)["status"] == "refunded"
    assert sink.events[0].outcome == "executed"


# --- S4 -------------------------------------------------------------------------------------


def read_only_sql(ctx):
    query = ctx.arg("query", "").strip().lower()
    if not query.startswith("select"):
        return deny("Only SELECT queries are allowed")
    return allow()


def test_s4_read_only_sql():
    runtime = Runtime(agent_id="analyst", audit=InMemoryAuditSink())

    @runtime.capability(type="database", risk="high")
    def execute_sql(query: str) -> list:
        return [{"id": 1}]

    runtime.before_capability("execute_sql")(read_only_sql)
    assert execute_sql("select * from customers limit 10") == [{"id": 1}]
    err = _denied(execute_sql, "delete from customers")
    assert err.reason == "Only SELECT queries are allowed"
    assert err.policy_name == "read_only_sql" and err.action_id.startswith("act_")


def test_s4_policy_annotate_variant():
    policy = Policy(target="execute_sql", stage="before_capability", function=read_only_sql,
                    version="1.0")
    action = make_action("execute_sql", input={"query": "drop table x"})
    decision = policy.annotate(policy.function(brane.PolicyContext(action=action)))
    assert (decision.type, decision.policy_name, decision.policy_version) == (
        "deny", "read_only_sql", "1.0")
    engine = PolicyEngine([policy])
    assert engine.evaluate(action, "before_capability").policy_version == "1.0"


# --- S5 -------------------------------------------------------------------------------------


def _sql_recipe():
    runtime = Runtime(agent_id="analyst", environment="prod")

    @runtime.capability(type="database", risk="high", effect=Effect(type="database_query"),
                        data_namespace="customer.records", owner="data-team")
    def execute_sql(query: str) -> str:
        return "rows"

    @runtime.before_capability("execute_sql", name="sql_read_only", version="1.0", priority=100)
    def sql_read_only(ctx):
        normalized = ctx.arg("query", "").strip().lower()
        if normalized.startswith(("select", "with", "explain")):
            return allow()
        return deny("Only SELECT queries are allowed. Got: " + normalized[:40])

    return execute_sql


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM customers WHERE id = 42",
        "WITH cte AS (SELECT id FROM customers) SELECT * FROM cte",
        "  explain select 1",
        "select 1; drop table users",  # the prefix check's known weakness, kept for parity
    ],
)
def test_s5_sql_recipe_allows(query):
    assert _sql_recipe()(query) == "rows"


def test_s5_sql_recipe_denies_with_truncated_query():
    execute_sql = _sql_recipe()
    assert execute_sql.__brane_capability__.effect.type == "database_query"  # not validated
    err = _denied(execute_sql, "DELETE FROM customers WHERE id = 42")
    assert err.reason == "Only SELECT queries are allowed. Got: delete from customers where id = 42"
    long_update = "UPDATE customers SET email = 'x@example.com', name = 'someone' WHERE id = 42"
    err = _denied(execute_sql, long_update)
    assert err.reason == "Only SELECT queries are allowed. Got: " + long_update.lower()[:40]
    assert err.reason.endswith("Got: update customers set email = 'x@example.")
    assert (err.policy_name, err.policy_version) == ("sql_read_only", "1.0")


# --- S6 -------------------------------------------------------------------------------------


def _high_risk_runtime(environment):
    runtime = Runtime(agent_id="ops", environment=environment)

    @runtime.before_capability("*")
    def block_high_risk_in_prod(ctx):
        if ctx.is_prod and ctx.capability.risk in ("high", "critical"):
            return deny(f"{ctx.capability.name} is high risk and blocked in prod")
        return allow()

    # Registered after the policy: matching is by name at call time.
    def declare(risk):
        return runtime.capability(f"tool_{risk}", type="tool", risk=risk)(lambda: risk)

    return {risk: declare(risk) for risk in ("medium", "high", "critical")}


def test_s6_block_high_risk_in_prod():
    prod = _high_risk_runtime("prod")
    assert _denied(prod["high"]).reason == "tool_high is high risk and blocked in prod"
    assert _denied(prod["critical"]).policy_name == "block_high_risk_in_prod"
    assert prod["medium"]() == "medium"
    assert _high_risk_runtime("dev")["critical"]() == "critical"


# --- S7 -------------------------------------------------------------------------------------


def _tenant_runtime(tenant_id, variant):
    runtime = Runtime(agent_id="support", tenant_id=tenant_id)

    @runtime.capability(type="database", risk="medium")
    def lookup_customer(customer_id: str, tenant_id: str | None = None) -> str:
        return f"{customer_id}@{tenant_id}"

    if variant == "guide":
        @runtime.before_capability("*")
        def tenant_isolation(ctx):
            requested = ctx.arg("tenant_id", ctx.tenant_id)
            if requested != ctx.tenant_id:
                return deny("Cross-tenant action blocked")
            return allow()
    else:
        @runtime.before_capability("*", priority=0)
        def tenant_isolation(ctx):
            requested = ctx.arg("tenant_id")
            if requested and ctx.tenant_id and requested != ctx.tenant_id:
                return deny("Cross-tenant action blocked")
            return allow()

    return lookup_customer


def test_s7_tenant_isolation_guide_variant():
    lookup = _tenant_runtime("tenant_acme", "guide")
    assert lookup("c1", tenant_id="tenant_acme") == "c1@tenant_acme"
    assert _denied(lookup, "c1", tenant_id="tenant_globex").reason == "Cross-tenant action blocked"
    # Parity quirk: the omitted argument is bound to None, present, and != the tenant.
    assert _denied(lookup, "c1").reason == "Cross-tenant action blocked"
    assert _denied(_tenant_runtime(None, "guide"), "c1", tenant_id="tenant_acme")


def test_s7_tenant_isolation_readme_variant():
    lookup = _tenant_runtime("tenant_acme", "readme")
    assert lookup("c1") == "c1@None"
    assert lookup("c1", tenant_id=None) == "c1@None"
    assert lookup("c1", tenant_id="tenant_acme") == "c1@tenant_acme"
    assert _denied(lookup, "c1", tenant_id="tenant_globex").reason == "Cross-tenant action blocked"
    no_tenant = _tenant_runtime(None, "readme")
    assert no_tenant("c1", tenant_id="tenant_globex") == "c1@tenant_globex"


# --- S8 -------------------------------------------------------------------------------------


def test_s8_destructive_tool_needs_an_approval_signal():
    sink = InMemoryAuditSink()
    runtime = Runtime(agent_id="ops", environment="prod", audit=sink)
    deleted = []

    @runtime.capability(type="tool", risk="critical")
    def delete_user(user_id: str) -> str:
        deleted.append(user_id)
        return f"deleted {user_id}"

    @runtime.before_capability("delete_user")
    def require_approval_signal(ctx):
        if not ctx.action.metadata.get("approved"):
            return deny("delete_user requires an approval signal")
        return allow()

    err = _denied(delete_user, "u1")
    assert err.reason == "delete_user requires an approval signal" and deleted == []
    assert err.action.metadata == {"interceptor": "callable", "declaration": "decorator"}

    result = runtime.interceptor.intercept(InterceptRequest(
        capability_name="delete_user", action_type="tool_call", input={"user_id": "u2"},
        execute=lambda: delete_user.__brane_original__("u2"), principal_id="admin-7",
        labels={"ticket": "OPS-1"}, metadata={"approved": True}))
    assert result.output == "deleted u2" and deleted == ["u2"]
    event = sink.events[-1]
    assert (event.outcome, event.metadata, event.labels, event.principal_id) == (
        "executed", {"approved": True}, {"ticket": "OPS-1"}, "admin-7")


# --- S9 -------------------------------------------------------------------------------------


def _mcp_runtime(environment):
    runtime = Runtime(agent_id="coder", environment=environment)

    @runtime.before_capability("*")
    def block_high_risk_mcp_in_prod(ctx):
        name = ctx.capability.name
        if ctx.is_prod and name.startswith("mcp.") and ctx.capability.risk in ("high", "critical"):
            return deny("High-risk MCP action blocked in prod")
        return allow()

    merge = runtime.capability("mcp.github.merge_pr", type="mcp_tool", risk="high")(
        lambda pr: f"merged {pr}")
    read = runtime.capability("mcp.filesystem.read_file", type="mcp_tool", risk="low")(
        lambda path: f"read {path}")
    other = runtime.capability("deploy_service", type="tool", risk="high")(lambda: "deployed")
    return runtime, merge, read, other


def test_s9_mcp_writes_blocked_in_prod():
    runtime, merge, read, other = _mcp_runtime("prod")
    assert _denied(merge, 7).reason == "High-risk MCP action blocked in prod"
    assert read("/etc/hosts") == "read /etc/hosts"
    assert other() == "deployed"
    assert _mcp_runtime("dev")[1](7) == "merged 7"


def test_s9_a_glob_target_matches_nothing():
    runtime, merge, read, _ = _mcp_runtime("dev")
    runtime.before_capability("mcp.*")(lambda ctx: deny("glob matched"))
    assert merge(1) == "merged 1" and read("x") == "read x"
    action = runtime.create_action(action_type="mcp_tool_call",
                                   capability_name="mcp.github.merge_pr")
    names = [p.target for p in runtime.policies.matching_policies(action, "before_capability")]
    assert names == ["*"]


# --- S10 ------------------------------------------------------------------------------------


def test_s10_mcp_postgres_read_only_without_a_python_function():
    sink = InMemoryAuditSink()
    runtime = Runtime(agent_id="analyst", environment="prod", audit=sink)
    runtime.register_capability(Capability(name="mcp.postgres.query", type="mcp_tool",
                                           risk="high"))

    @runtime.before_capability("mcp.postgres.query")
    def postgres_read_only(ctx):
        if not ctx.arg("query", "").strip().lower().startswith("select"):
            return deny("Only SELECT queries are allowed")
        return allow()

    def request(query):
        return InterceptRequest(capability_name="mcp.postgres.query", action_type="mcp_tool_call",
                                input={"query": query}, execute=lambda: [{"n": 1}])

    assert runtime.interceptor.intercept(request("  SELECT count(*) FROM t")).output == [{"n": 1}]
    err = _denied(runtime.interceptor.intercept, request("DROP TABLE t"))
    assert err.reason == "Only SELECT queries are allowed"
    assert [e.action_type for e in sink.events] == ["mcp_tool_call", "mcp_tool_call"]
    assert [e.capability_type for e in sink.events] == ["mcp_tool", "mcp_tool"]


# --- S11 ------------------------------------------------------------------------------------


def test_s11_scope_requirement():
    runtime = Runtime(agent_id="support")

    @runtime.before_capability("*")
    def require_refund_scope(ctx):
        if ctx.capability.name.startswith("refund") and not ctx.agent_has_scope("refunds:create"):
            return deny("Missing scope refunds:create")
        return allow()

    scoped = runtime.capability("refund_scoped", type="tool",
                                scopes=(Scope(name="refunds:create"),))(lambda: "ok")
    unscoped = runtime.capability("refund_unscoped", type="tool")(lambda: "ok")
    assert scoped() == "ok"
    assert _denied(unscoped).reason == "Missing scope refunds:create"
    action = make_action(scopes=(Scope(name="customers:read"),))
    ctx = brane.PolicyContext(action=action)
    assert not ctx.agent_has_scope("customers:write") and ctx.agent_has_scope("customers:read")


# --- S12 ------------------------------------------------------------------------------------


def _after_runtime():
    sink = InMemoryAuditSink()
    runtime = Runtime(agent_id="agent", audit=sink)

    @runtime.after_capability("execute_sql")
    def check_result_size(ctx):
        if isinstance(ctx.output, dict) and len(ctx.output.get("rows", [])) > 1000:
            return deny("Result set too large (>1000 rows)")
        return allow()

    @runtime.after_capability("call_model")
    def check_for_secrets(ctx):
        text = str(ctx.output).lower()
        if any(m in text for m in ("secret_key", "api_key", "password=", "token=")):
            return deny("Possible secret in model output")
        return allow()

    @runtime.after_capability("get_customer_data")
    def validate_customer_output(ctx):
        if not isinstance(ctx.output, dict) or "customer_id" not in ctx.output:
            return deny("Customer output must contain customer_id")
        return allow()

    return runtime, sink


def _after_request(name, output, ran):
    def execute():
        ran.append(name)
        return output

    return InterceptRequest(capability_name=name, action_type="tool_call", input={},
                            execute=execute, stage="after_capability")


def test_s12_after_checks_fire_only_on_after_stage_requests():
    runtime, sink = _after_runtime()
    for name in ("execute_sql", "call_model", "get_customer_data"):
        runtime.register_capability(Capability(name=name, type="tool"))
    ran = []
    big = {"rows": [{"i": i} for i in range(1001)]}
    err = _denied(runtime.interceptor.intercept, _after_request("execute_sql", big, ran))
    assert err.reason == "Result set too large (>1000 rows)" and err.action.output is big
    assert ran == ["execute_sql"]  # the function did run before the deny
    assert sink.events[-1].outcome == "denied_after_execution"
    small = runtime.interceptor.intercept(_after_request("execute_sql", {"rows": [1]}, ran))
    assert small.output == {"rows": [1]}
    err = _denied(runtime.interceptor.intercept,
                  _after_request("call_model", "here: Api_Key=abc", ran))
    assert err.reason == "Possible secret in model output"
    err = _denied(runtime.interceptor.intercept,
                  _after_request("get_customer_data", ["not", "a", "dict"], ran))
    assert err.reason == "Customer output must contain customer_id"
    ok = runtime.interceptor.intercept(_after_request("get_customer_data", {"customer_id": 1}, ran))
    assert ok.after_decision.policy_name == "validate_customer_output"


def test_s12_decorated_call_returns_the_secret_unchecked():
    runtime, sink = _after_runtime()
    call_model = runtime.capability(type="model")(lambda prompt: "SECRET_KEY=abc123")
    assert call_model("hi") == "SECRET_KEY=abc123"
    assert sink.events[-1].outcome == "executed" and sink.events[-1].policy_name is None


def test_s12_policy_control_variant_is_case_sensitive():
    runtime = Runtime(agent_id="agent")
    runtime.register_capability(Capability(name="call_model", type="model"))

    @runtime.after_capability("call_model")
    def check_for_secrets(ctx):
        if "SECRET_KEY" in str(ctx.output):
            return deny("Possible secret in output")
        return allow()

    ran = []
    assert runtime.interceptor.intercept(_after_request("call_model", "secret_key=1", ran)).output
    err = _denied(runtime.interceptor.intercept, _after_request("call_model", "SECRET_KEY=1", ran))
    assert err.reason == "Possible secret in output"


# --- S13 ------------------------------------------------------------------------------------


def test_s13_priority_and_composition():
    order = []
    engine = PolicyEngine()
    engine.register_policy("before_capability", "*", lambda c: order.append(20) or allow(),
                           name="p20", priority=20)
    engine.register_policy("before_capability", "*", lambda c: order.append(10) or allow(),
                           name="p10", priority=10)
    action = make_action("tool_a")
    assert engine.evaluate(action, "before_capability").policy_name == "p20"
    assert order == [10, 20]

    engine = PolicyEngine()
    engine.register_policy("before_capability", "*", lambda c: allow(), name="wild")
    engine.register_policy("before_capability", "tool_a", lambda c: deny("exact says no"),
                           name="exact", version="1.0")
    engine.register_policy("before_capability", "tool_b", lambda c: deny("unrelated"))
    engine.register_policy("before_capability", "tool_a", lambda c: deny("off"), enabled=False)
    assert [p.name for p in engine.matching_policies(action, "before_capability")] == [
        "wild", "exact"]
    decision = engine.evaluate(action, "before_capability")
    assert (decision.reason, decision.policy_name, decision.policy_version, decision.action_id) == (
        "exact says no", "exact", "1.0", action.action_id)

    none = PolicyEngine().evaluate(action, "before_capability")
    assert none.type == "allow" and none.policy_name is None and none.action_id == action.action_id

    engine = PolicyEngine()
    engine.register_policy("after_capability", "*", lambda c: brane.Decision(type="redact"))
    with pytest.raises(NotImplementedError):
        engine.evaluate(action, "after_capability")


# --- S14 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_policy", [True, False])
def test_s14_failure_path(with_policy):
    sink = InMemoryAuditSink()
    runtime = Runtime(agent_id="agent", audit=sink)

    @runtime.capability(type="tool")
    def flaky():
        raise RuntimeError("boom")

    if with_policy:
        runtime.before_capability("flaky")(lambda ctx: allow())
    with pytest.raises(RuntimeError, match="^boom$"):
        flaky()
    (event,) = sink.events
    assert (event.outcome, event.decision) == ("execution_failed", "allow")
    assert event.metadata["error_type"] == "RuntimeError"
    assert event.metadata["error_message"] == "boom"
    assert event.policy_name == ("<lambda>" if with_policy else None)


# --- S15 ------------------------------------------------------------------------------------


def test_s15_argument_binding():
    sink = InMemoryAuditSink()
    runtime = Runtime(agent_id="agent", audit=sink)
    inputs = []
    runtime.before_capability("*")(lambda ctx: inputs.append(ctx.action.input) or allow())

    @runtime.capability(type="tool")
    def add(x, y=1):
        return x + y

    @runtime.capability(type="tool")
    def total(*numbers, **options):
        return sum(numbers)

    assert add(1) == 2 and inputs[-1] == {"x": 1, "y": 1}
    assert total(1, 2, 3, round=True) == 6
    assert inputs[-1] == {"numbers": (1, 2, 3), "options": {"round": True}}
    count = len(sink.events)
    with pytest.raises(TypeError):
        add()
    with pytest.raises(TypeError):
        add(1, 2, 3)
    assert len(sink.events) == count


# --- S16 ------------------------------------------------------------------------------------


def test_s16_registry_semantics():
    runtime = Runtime(agent_id="agent", environment="prod", tenant_id="acme")
    runtime.before_capability("*")(lambda ctx: deny("critical") if ctx.capability.risk ==
                                   "critical" else allow())
    tool = runtime.capability("tool", type="tool")(lambda: "ran")
    assert tool() == "ran"
    runtime.register_capability(Capability(name="tool", type="tool", risk="critical"))
    assert _denied(tool).reason == "critical"  # the old wrapper sees the new capability

    runtime.register_capability(Capability(name="m", type="model", tenant_id="acme",
                                           environment="prod"))
    runtime.register_capability(Capability(name="g", type="tool", tenant_id="globex",
                                           environment="dev"))
    assert [c.name for c in runtime.capabilities.list(type="tool")] == ["tool", "g"]
    assert [c.name for c in runtime.capabilities.list(tenant_id="globex")] == ["g"]
    assert [c.name for c in runtime.capabilities.list(environment="dev")] == ["g"]
    with pytest.raises(CapabilityNotFoundError, match="Capability 'nope' is not registered."):
        runtime.capabilities.require("nope")
    removed = runtime.capabilities.unregister("m")
    assert removed.name == "m" and runtime.capabilities.unregister("m") is None
