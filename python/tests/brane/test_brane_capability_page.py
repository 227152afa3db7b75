"""The examples of Brane's Capability page (../shared/spec/004_*.txt, "Capability"), run as
written with only the import changed, with their documented results."""

import capability.brane as brane
from capability.brane import Capability, Effect, Runtime


def test_declaring_a_capability_object():
    refund_cap = Capability(
        name="refund_customer",
        type="tool",
        risk="high",
        effect=Effect(type="financial", reversible=False, external=True),
        data_namespace="billing.refunds",
        owner="payments-team",
    )
    # Computed properties, as the page documents them.
    assert refund_cap.is_high_risk is True
    assert refund_cap.has_side_effects is False
    assert refund_cap.disableable_side_effects == ()
    assert refund_cap.effect.reversible is False and refund_cap.effect.external is True
    assert refund_cap.id.startswith("cap_")


def test_registering_with_the_decorator_and_directly():
    runtime = Runtime(agent_id="docs-agent", audit=brane.InMemoryAuditSink())

    @runtime.capability(
        name="execute_sql",
        type="database",
        risk="high",
        data_namespace="customer.records",
    )
    def execute_sql(query: str):
        return {"rows": []}

    runtime.register_capability(Capability(
        name="mcp.github.create_pr",
        type="mcp_tool",
        risk="medium",
        owner="platform-team",
    ))

    assert execute_sql("select 1") == {"rows": []}
    sql = runtime.capabilities.require("execute_sql")
    assert (sql.type, sql.risk, sql.data_namespace, sql.is_high_risk) == (
        "database", "high", "customer.records", True)
    pr = runtime.capabilities.require("mcp.github.create_pr")
    assert (pr.type, pr.owner, pr.is_high_risk) == ("mcp_tool", "platform-team", False)
    # "The wildcard policy target "*" matches all capabilities regardless of naming."
    seen = []
    runtime.before_capability("*")(lambda ctx: seen.append(ctx.capability.name) or brane.allow())
    execute_sql("select 2")
    runtime.evaluate(action_type="mcp_tool_call", capability_name="mcp.github.create_pr",
                     stage="before_capability")
    assert seen == ["execute_sql", "mcp.github.create_pr"]
    # One audit event for the decorated call of the first part, one for the second.
    assert [e.outcome for e in runtime.audit.events] == ["executed", "executed"]
