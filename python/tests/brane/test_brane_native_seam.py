"""The Rust engine seam: ``Runtime(host=..., cedar=...)`` (native ``capability._native``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import capability.brane as brane
from capability.brane import (
    Capability,
    CapabilityDeniedError,
    Effect,
    InMemoryAuditSink,
    InterceptRequest,
    Runtime,
    allow,
    deny,
)

NO_DELETE = """
permit(principal, action, resource);
@id("no-delete") @reason("deleting is not allowed")
forbid(principal, action, resource) when { resource.name == "delete_user" };
"""


def _cedar(tmp_path, text, name="policy.cedar"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _native_host(**kw):
    from capability._native import Host

    return Host(memory=True, **kw)


def _denied(call, *args, **kwargs) -> CapabilityDeniedError:
    with pytest.raises(CapabilityDeniedError) as info:
        call(*args, **kwargs)
    return info.value


def test_cedar_forbid_denies_through_brane_with_the_cedar_reason(tmp_path):
    sink = InMemoryAuditSink()
    runtime = Runtime(agent_id="ops", environment="prod", audit=sink,
                      cedar=_cedar(tmp_path, NO_DELETE))
    deleted = []

    @runtime.capability(type="tool", risk="critical")
    def delete_user(user_id: str) -> str:
        deleted.append(user_id)
        return "deleted"

    @runtime.capability(type="tool")
    def get_user(user_id: str) -> str:
        return f"user {user_id}"

    err = _denied(delete_user, "u1")
    assert str(err) == "deleting is not allowed" and err.reason == "deleting is not allowed"
    assert err.policy_name == "no-delete" and deleted == []
    assert err.decision.action_id == err.action_id
    assert get_user("u2") == "user u2"
    assert [(e.outcome, e.capability_name) for e in sink.events] == [
        ("denied_before_execution", "delete_user"), ("executed", "get_user")]
    assert sink.events[0].policy_name == "no-delete"
    assert sink.events[0].reason == "deleting is not allowed"


def test_cedar_decision_is_composed_after_the_python_decisions(tmp_path):
    runtime = Runtime(agent_id="ops", cedar=str(_cedar(tmp_path, NO_DELETE)))
    runtime.register_capability(Capability(name="delete_user", type="tool"))
    calls = []

    @runtime.before_capability("delete_user", name="python_first")
    def python_first(ctx):
        calls.append("python")
        return deny("python says no") if ctx.arg("block") else allow()

    decision = runtime.evaluate(action_type="tool_call", capability_name="delete_user",
                                stage="before_capability", input={"block": True})
    assert (decision.reason, decision.policy_name) == ("python says no", "python_first")
    decision = runtime.evaluate(action_type="tool_call", capability_name="delete_user",
                                stage="before_capability", input={"block": False})
    assert (decision.reason, decision.policy_name) == ("deleting is not allowed", "no-delete")
    assert calls == ["python", "python"]
    # No deny: Brane reports the last decision, which is now Cedar's (its `permit`), not the
    # Python policy's.
    runtime.register_capability(Capability(name="get_user", type="tool"))
    runtime.before_capability("get_user", name="python_allow")(lambda ctx: allow("py"))
    decision = runtime.evaluate(action_type="tool_call", capability_name="get_user",
                                stage="before_capability")
    assert decision.type == "allow" and decision.policy_name != "python_allow"
    assert decision.reason is None and decision.action_id.startswith("act_")


def test_cedar_code_becomes_decision_metadata(tmp_path):
    path = _cedar(tmp_path, """
        permit(principal, action, resource);
        @id("limit") @reason("too much") @code("LIMIT_EXCEEDED")
        forbid(principal, action, resource)
        when { context.input has amount_usd && context.input.amount_usd > 100 };
    """)
    runtime = Runtime(agent_id="support", environment="prod", cedar=[path])

    @runtime.capability(type="tool", risk="high")
    def refund_customer(amount_usd: int) -> int:
        return amount_usd

    assert refund_customer(50) == 50
    err = _denied(refund_customer, 500)
    assert err.reason == "too much" and err.decision.metadata == {"code": "LIMIT_EXCEEDED"}
    allowed = runtime.evaluate(action_type="tool_call", capability_name="refund_customer",
                               stage="before_capability", input={"amount_usd": 1})
    assert allowed.type == "allow" and allowed.metadata == {}


def test_cedar_default_deny_without_a_permit(tmp_path):
    path = _cedar(tmp_path, """
        @id("only-reads")
        permit(principal, action == Action::"file_read", resource);
    """)
    runtime = Runtime(agent_id="a", cedar=path)
    runtime.register_capability(Capability(name="fs.read", type="filesystem"))
    denied = runtime.evaluate(action_type="tool_call", capability_name="fs.read",
                              stage="before_capability")
    assert denied.denied and denied.metadata == {"code": "default_deny"}
    assert runtime.evaluate(action_type="file_read", capability_name="fs.read",
                            stage="before_capability").type == "allow"


def test_cedar_non_allow_deny_decision_raises_like_a_python_policy(tmp_path):
    path = _cedar(tmp_path, """
        permit(principal, action, resource);
        @id("needs-approval") @decision("approval_required") @reason("ask a human")
        forbid(principal, action, resource == Capability::"delete_user");
    """)
    sink = InMemoryAuditSink()
    runtime = Runtime(agent_id="a", cedar=path, audit=sink)
    ran = []
    delete_user = runtime.capability("delete_user", type="tool")(lambda uid: ran.append(uid))
    with pytest.raises(NotImplementedError) as info:
        delete_user("u1")
    assert str(info.value) == (
        "Decision type 'approval_required' is not supported by the MVP policy engine.")
    assert ran == [] and sink.events == []
    # A Python deny before it still wins (the check stops at the first deny).
    runtime.before_capability("delete_user")(lambda ctx: deny("python deny"))
    assert _denied(delete_user, "u1").reason == "python deny"


def test_cedar_sees_brane_capability_attributes_and_re_registration(tmp_path):
    path = _cedar(tmp_path, """
        permit(principal, action, resource);
        @id("mcp_high_risk_prod") @reason("High-risk MCP action blocked in prod")
        forbid(principal, action, resource)
        when { context.environment == "prod" && resource.name like "mcp.*" && resource.riskLevel >= 3 };
        @id("needs-scope") @reason("scope refunds:create required")
        forbid(principal, action, resource)
        when { resource.name == "refund" && !(resource.scopes.contains("refunds:create")) };
    """)
    runtime = Runtime(agent_id="coder", environment="prod", cedar=path)
    merge = runtime.capability("mcp.github.merge_pr", type="mcp_tool", risk="high")(lambda: "m")
    read = runtime.capability("mcp.fs.read", type="mcp_tool", risk="low")(lambda: "r")
    assert _denied(merge).reason == "High-risk MCP action blocked in prod"
    assert read() == "r"
    # Registered behind the runtime's back: registered in the host before evaluation.
    runtime.capabilities.register(Capability(name="mcp.fs.read", type="mcp_tool", risk="critical"))
    assert _denied(read).policy_name == "mcp_high_risk_prod"
    runtime.capabilities.register(Capability(name="mcp.github.merge_pr", type="mcp_tool"))
    assert merge() == "m"
    refund = runtime.capability("refund", type="tool", effect=Effect(type="financial"))(lambda: 1)
    assert _denied(refund).reason == "scope refunds:create required"
    runtime.register_capability(Capability(name="refund", type="tool",
                                           scopes=(brane.Scope(name="refunds:create"),)))
    assert refund() == 1


def test_after_stage_requests_ask_cedar_at_the_after_stage(tmp_path):
    path = _cedar(tmp_path, """
        permit(principal, action, resource);
        @id("after-only") @reason("blocked after execution")
        forbid(principal, action, resource)
        when { context.stage == "after_capability" && resource.name == "report" };
    """)
    sink = InMemoryAuditSink()
    runtime = Runtime(agent_id="a", cedar=path, audit=sink)
    ran = []
    report = runtime.capability("report", type="tool")(lambda: ran.append(1) or "r")
    assert report() == "r"  # decorated calls are before-stage only
    request = InterceptRequest(capability_name="report", action_type="tool_call", input={},
                               execute=lambda: ran.append(2) or "secret",
                               stage="after_capability")
    err = _denied(runtime.interceptor.intercept, request)
    assert err.reason == "blocked after execution" and err.action.output == "secret"
    assert ran == [1, 2] and sink.events[-1].outcome == "denied_after_execution"


def test_cedar_reads_the_output_after_execution(tmp_path):
    path = _cedar(tmp_path, """
        permit(principal, action, resource);
        @id("no-secrets") @reason("Possible secret in model output")
        forbid(principal, action, resource)
        when { context.stage == "after_capability" && context has output &&
               context.output has text && context.output.text like "*API_KEY*" };
    """)
    runtime = Runtime(agent_id="a", cedar=path)
    runtime.register_capability(Capability(name="call_model", type="model"))

    def request(text):
        return InterceptRequest(capability_name="call_model", action_type="model_call",
                                input={}, execute=lambda: {"text": text},
                                stage="after_capability")

    assert runtime.interceptor.intercept(request("hello")).output == {"text": "hello"}
    err = _denied(runtime.interceptor.intercept, request("my API_KEY=abc"))
    assert err.reason == "Possible secret in model output"


def test_input_schema_types_numbers_for_cedar(tmp_path):
    path = _cedar(tmp_path, """
        permit(principal, action, resource);
        @id("limit") @reason("over the limit")
        forbid(principal, action, resource)
        when { context.input.amount.greaterThan(decimal("100.0")) };
    """)
    runtime = Runtime(agent_id="a", cedar=path)
    schema = {"type": "object", "properties": {"amount": {"type": "number"}}}
    refund = runtime.capability("refund", type="tool", input_schema=schema)(lambda amount: amount)
    assert refund(50) == 50  # an int, typed as a decimal by the schema
    assert _denied(refund, 500).reason == "over the limit"


def test_non_json_arguments_still_reach_cedar(tmp_path):
    runtime = Runtime(agent_id="a", cedar=_cedar(tmp_path, NO_DELETE))

    class Connection:
        pass

    query = runtime.capability(type="database")(lambda conn, sql=("a", 1): sql)
    assert query(Connection()) == ("a", 1)


def test_events_reach_the_native_hash_chained_audit(tmp_path):
    host = _native_host()
    sink = InMemoryAuditSink()
    runtime = Runtime(agent_id="support", environment="prod", tenant_id="acme", audit=sink,
                      host=host)
    assert runtime.host is host

    @runtime.capability(type="tool", risk="high")
    def refund_customer(amount_usd: float) -> dict:
        if amount_usd < 0:
            raise ValueError("negative")
        return {"ok": True}

    runtime.before_capability("refund_customer", name="limit", version="1")(
        lambda ctx: deny("over limit") if ctx.arg("amount_usd") > 100 else allow())
    refund_customer(10.0)
    _denied(refund_customer, 500.0)
    with pytest.raises(ValueError):
        refund_customer(-1.0)

    records = host.audit()
    assert len(records) == 3 and len(sink.events) == 3
    by_id = {r["event"]["event_id"]: r["event"] for r in records}
    for event in sink.events:
        native = by_id[event.event_id]
        assert native["action_id"] == event.action_id and native["outcome"] == event.outcome
        assert native["decision"] == event.decision and native["policy_name"] == event.policy_name
        assert native["tenant_id"] == "acme" and native["capability_name"] == "refund_customer"
    assert [by_id[e.event_id]["outcome"] for e in sink.events] == [
        "executed", "denied_before_execution", "execution_failed"]
    assert by_id[sink.events[2].event_id]["metadata"]["error_message"] == "negative"
    verdict = host.verify_audit()
    assert verdict["ok"] is True and verdict["records"] == 3


def test_host_only_records_and_never_evaluates(tmp_path):
    host = _native_host(policies=[str(_cedar(tmp_path, NO_DELETE))])
    runtime = Runtime(agent_id="a", host=host)
    assert runtime.cedar is None
    delete_user = runtime.capability("delete_user", type="tool")(lambda: "deleted")
    assert delete_user() == "deleted"  # host= audits only; cedar= evaluates
    assert len(host.audit()) == 1


def test_cedar_runtime_records_in_its_own_in_memory_host(tmp_path):
    runtime = Runtime(agent_id="a", environment="prod", cedar=_cedar(tmp_path, NO_DELETE))
    assert runtime.host is not None and runtime.cedar == (str(tmp_path / "policy.cedar"),)
    delete_user = runtime.capability("delete_user", type="tool")(lambda: 1)
    _denied(delete_user)
    (record,) = runtime.host.audit()
    assert record["event"]["outcome"] == "denied_before_execution"
    assert record["event"]["policy_name"] == "no-delete"
    assert runtime.host.verify_audit()["ok"] is True


def test_host_and_cedar_together_audit_in_the_given_host(tmp_path):
    host = _native_host()
    runtime = Runtime(agent_id="a", host=host, cedar=_cedar(tmp_path, NO_DELETE))
    assert runtime.host is host
    delete_user = runtime.capability("delete_user", type="tool")(lambda: 1)
    _denied(delete_user)
    assert [r["event"]["outcome"] for r in host.audit()] == ["denied_before_execution"]
    assert host.verify_audit()["ok"] is True


def test_host_records_after_the_brane_sink_and_not_when_it_fails():
    host = _native_host()

    class Failing:
        def emit(self, event):
            raise OSError("sink down")

    runtime = Runtime(agent_id="a", host=host, audit=Failing())
    f = runtime.capability(type="tool")(lambda: 1)
    with pytest.raises(OSError):
        f()
    assert host.audit() == []


def test_several_cedar_files(tmp_path):
    first = _cedar(tmp_path, NO_DELETE, "a.cedar")
    second = _cedar(tmp_path, """
        @id("no-drop") @reason("dropping is not allowed")
        forbid(principal, action, resource) when { resource.name == "drop_table" };
    """, "b.cedar")
    runtime = Runtime(agent_id="a", cedar=[first, second])
    assert _denied(runtime.capability("drop_table", type="database")(lambda: 1)).reason == (
        "dropping is not allowed")
    assert _denied(runtime.capability("delete_user", type="tool")(lambda: 1)).reason == (
        "deleting is not allowed")
    assert runtime.capability("select", type="database")(lambda: 2)() == 2


def test_cedar_refuses_values_outside_the_rust_vocabulary(tmp_path):
    runtime = Runtime(agent_id="a", cedar=_cedar(tmp_path, NO_DELETE))
    with pytest.raises(ValueError, match="database_query"):
        runtime.capability(type="database", effect=Effect(type="database_query"))(lambda: 1)
    # Without cedar= the Brane behaviour is unchanged: any string is accepted.
    plain = Runtime(agent_id="a")
    assert plain.capability(type="database", effect=Effect(type="database_query"))(lambda: 1)() == 1


_NO_NATIVE_SCRIPT = """
import sys, types
{prelude}
import capability.brane as brane
rt = brane.Runtime(agent_id="a", audit=brane.InMemoryAuditSink())
rt.before_capability("*")(lambda ctx: brane.allow())
assert rt.capability(type="tool")(lambda x: x)(3) == 3
rt.evaluate(action_type="tool_call", capability_name="<lambda>", stage="before_capability")
print(json.dumps(sorted(m for m in sys.modules if m.startswith("capability"))))
"""

def _modules_loaded() -> list[str]:
    python_dir = os.path.dirname(os.path.dirname(os.path.dirname(brane.__file__)))
    script = "import json\n" + _NO_NATIVE_SCRIPT.format(prelude="")
    env = dict(os.environ, PYTHONPATH=python_dir + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, check=True)
    return json.loads(out.stdout)


def test_plain_brane_code_never_loads_the_native_module():
    modules = _modules_loaded()
    assert "capability.brane.runtime" in modules
    assert "capability._native" not in modules


def test_non_json_audit_metadata_is_recorded_as_text():
    host = _native_host()
    runtime = Runtime(agent_id="a", host=host)
    runtime.register_capability(Capability(name="x", type="tool"))

    class Ticket:
        def __str__(self):
            return "ticket-42"

    runtime.interceptor.intercept(InterceptRequest(
        capability_name="x", action_type="tool_call", input={}, execute=lambda: 1,
        metadata={"ticket": Ticket()}))
    (record,) = host.audit()
    assert record["event"]["metadata"] == {"ticket": "ticket-42"}
    assert host.verify_audit()["ok"] is True
