"""Runtime: construction, declaration, argument binding, action creation (§1.14, §2.1, §2.2)."""

from __future__ import annotations

import inspect

import pytest

from capability.brane import (
    CallableCapabilityInterceptor,
    Capability,
    CapabilityDeniedError,
    CapabilityInterceptor,
    CapabilityNotFoundError,
    CapabilityRegistry,
    Effect,
    InMemoryAuditSink,
    JsonlAuditSink,
    NoopAuditSink,
    PolicyEngine,
    PolicyRegistry,
    Runtime,
    Scope,
    SideEffect,
    allow,
    deny,
)


def test_agent_id_is_required_and_arguments_keyword_only():
    with pytest.raises(TypeError):
        Runtime()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Runtime("agent")  # type: ignore[misc]
    rt = Runtime(agent_id="a")
    assert (rt.agent_id, rt.environment, rt.tenant_id, rt.principal_id) == ("a", "dev", None, None)
    assert isinstance(rt.audit, NoopAuditSink)
    assert isinstance(rt.capabilities, CapabilityRegistry) and isinstance(rt.policies, PolicyEngine)
    assert isinstance(rt.policy, PolicyRegistry) and rt.policy.engine is rt.policies
    assert isinstance(rt.interceptor, CapabilityInterceptor) and rt.interceptor.runtime is rt
    assert isinstance(rt.callables, CallableCapabilityInterceptor)
    assert rt.callables.interceptor is rt.interceptor
    assert rt.host is None and rt.cedar is None


def test_audit_sink_choice(tmp_path):
    path = tmp_path / "audit.jsonl"
    rt = Runtime(agent_id="a", audit_path=path)
    assert isinstance(rt.audit, JsonlAuditSink) and rt.audit.path == path
    mem = InMemoryAuditSink()
    assert Runtime(agent_id="a", audit=mem, audit_path=path).audit is mem
    registry, engine = CapabilityRegistry(), PolicyEngine()
    rt = Runtime(agent_id="a", capabilities=registry, policies=engine)
    assert rt.capabilities is registry and rt.policies is engine


def test_decorator_builds_and_registers_the_capability():
    rt = Runtime(agent_id="a", environment="prod", tenant_id="acme")
    effect = Effect(type="financial", external=True)
    side = [SideEffect(type="send_message", can_disable=True)]
    scopes = (Scope(name="refunds:create"),)

    @rt.capability(type="tool", risk="high", effect=effect, side_effects=side, scopes=scopes,
                   owner="payments", description="Refund", input_schema={"type": "object"},
                   data_namespace="billing")
    def refund_customer(amount_usd: float) -> dict:
        """Refund a customer."""
        return {"refunded": amount_usd}

    cap = rt.capabilities.require("refund_customer")
    assert refund_customer.__brane_capability__ is cap
    assert (cap.name, cap.type, cap.risk, cap.tenant_id, cap.environment, cap.owner) == (
        "refund_customer", "tool", "high", "acme", "prod", "payments")
    assert cap.effect is effect and cap.side_effects == side and cap.scopes == scopes
    assert cap.metadata == {} and cap.description == "Refund" and cap.data_namespace == "billing"
    assert cap.input_schema == {"type": "object"} and cap.output_schema is None

    @rt.capability("custom.name", type="model", tenant_id="globex", environment="staging",
                   metadata={"m": 1})
    def other():
        return 1

    cap = rt.capabilities.require("custom.name")
    assert (cap.tenant_id, cap.environment, cap.metadata) == ("globex", "staging", {"m": 1})
    assert not rt.capabilities.exists("other")
    # A falsy environment falls back to the runtime's; a tenant only when None.
    rt.capability("empty_env", type="tool", environment="", tenant_id="")(lambda: 0)
    cap = rt.capabilities.require("empty_env")
    assert cap.environment == "prod" and cap.tenant_id == ""


def test_wrapper_attributes_and_preserved_metadata():
    rt = Runtime(agent_id="a")

    def lookup(customer_id: int, verbose: bool = False) -> str:
        """Look a customer up."""
        return f"c{customer_id}"

    wrapped = rt.wrap_capability(lookup, type="database", risk="medium")
    assert wrapped is not lookup and wrapped.__brane_original__ is lookup
    assert wrapped.__brane_capability__.name == "lookup"
    assert wrapped.__name__ == "lookup" and wrapped.__doc__ == "Look a customer up."
    assert wrapped.__annotations__ == lookup.__annotations__
    assert inspect.signature(wrapped) == inspect.signature(lookup)
    assert wrapped(7) == "c7"
    named = rt.wrap_capability(lookup, "lookup_v2", type="database")
    assert named.__brane_capability__.name == "lookup_v2"


def test_declaration_tags_in_audit_metadata():
    sink = InMemoryAuditSink()
    rt = Runtime(agent_id="a", audit=sink)
    rt.capability(type="tool")(lambda: 1)
    decorated = rt.capability("d", type="tool")(lambda: 1)
    wrapped = rt.wrap_capability(lambda: 2, "w", type="tool")
    decorated()
    wrapped()
    assert sink.events[0].metadata == {"interceptor": "callable", "declaration": "decorator"}
    assert sink.events[1].metadata == {"interceptor": "callable", "declaration": "wrapper"}


def test_argument_binding_with_defaults_varargs_and_kwargs():
    rt = Runtime(agent_id="a")
    inputs = []
    rt.before_capability("*")(lambda ctx: inputs.append(dict(ctx.action.input)) or allow())

    @rt.capability(type="tool")
    def f(a, b=2, *rest, c, d=4, **extra):
        return (a, b, rest, c, d, extra)

    assert f(1, c=3) == (1, 2, (), 3, 4, {})
    assert f(1, 5, 6, 7, c=3, z=9) == (1, 5, (6, 7), 3, 4, {"z": 9})
    assert inputs == [
        {"a": 1, "b": 2, "rest": (), "c": 3, "d": 4, "extra": {}},
        {"a": 1, "b": 5, "rest": (6, 7), "c": 3, "d": 4, "extra": {"z": 9}},
    ]
    assert list(inputs[1]) == ["a", "b", "rest", "c", "d", "extra"]

    @rt.capability(type="tool")
    def g(x, y=1, *, z=None):
        return x

    g(y=5, x=3)
    g(1, z=0)
    assert inputs[-2:] == [{"x": 3, "y": 5, "z": None}, {"x": 1, "y": 1, "z": 0}]
    assert list(inputs[-2]) == ["x", "y", "z"]  # parameter order, not call order

    @rt.capability(type="tool")
    def h(p, /, q=0):
        return p

    h(4)
    assert inputs[-1] == {"p": 4, "q": 0}


@pytest.mark.parametrize(
    "args, kwargs",
    [((), {}), ((1, 2, 3), {}), ((1,), {"x": 1}), ((1,), {"nope": 1}), ((), {"y": 1})],
)
def test_binding_errors_match_inspect_and_are_not_audited(args, kwargs):
    sink = InMemoryAuditSink()
    rt = Runtime(agent_id="a", audit=sink)
    called = []

    def add(x, y=1):
        called.append(1)
        return x + y

    wrapped = rt.capability(type="tool")(add)
    with pytest.raises(TypeError) as info:
        wrapped(*args, **kwargs)
    with pytest.raises(TypeError) as expected:
        inspect.signature(add).bind(*args, **kwargs)
    assert str(info.value) == str(expected.value)
    assert called == [] and sink.events == []


def test_decorated_calls_never_run_after_policies():
    sink = InMemoryAuditSink()
    rt = Runtime(agent_id="a", audit=sink)
    rt.after_capability("*")(lambda ctx: deny("after"))
    assert rt.capability(type="model")(lambda: "SECRET_KEY=1")() == "SECRET_KEY=1"
    assert sink.events[0].outcome == "executed" and sink.events[0].stage == "before_capability"


def test_create_action_resolution_rules():
    rt = Runtime(agent_id="rt-agent", environment="prod", tenant_id="acme", principal_id="p0")
    rt.register_capability(Capability(name="x", type="tool", tenant_id="cap-tenant"))
    a = rt.create_action(action_type="tool_call", capability_name="x")
    assert (a.agent_id, a.tenant_id, a.environment, a.principal_id, a.input, a.labels,
            a.metadata) == ("rt-agent", "acme", "prod", "p0", {}, {}, {})
    b = rt.create_action(action_type="tool_call", capability_name="x", agent_id="",
                         tenant_id="", environment="", principal_id="", input={"k": 1},
                         labels={"l": "v"}, metadata={"m": 1}, parent_action_id="act_p",
                         cost_so_far_usd=2.0)
    assert (b.agent_id, b.tenant_id, b.environment, b.principal_id) == ("rt-agent", "", "prod", "")
    assert (b.input, b.labels, b.metadata, b.parent_action_id, b.cost_so_far_usd) == (
        {"k": 1}, {"l": "v"}, {"m": 1}, "act_p", 2.0)
    assert a.action_id != b.action_id and a.trace_id != b.trace_id
    with pytest.raises(CapabilityNotFoundError):
        rt.create_action(action_type="tool_call", capability_name="ghost")


def test_evaluate_and_evaluate_action_never_audit_or_execute():
    sink = InMemoryAuditSink()
    rt = Runtime(agent_id="a", audit=sink)
    ran = []
    rt.capability("x", type="tool")(lambda amount: ran.append(amount))
    rt.before_capability("x")(lambda ctx: deny("big") if ctx.arg("amount") > 10 else allow())
    d = rt.evaluate(action_type="tool_call", capability_name="x", stage="before_capability",
                    input={"amount": 50}, tenant_id="t1")
    assert d.denied and d.reason == "big" and d.action_id.startswith("act_")
    action = rt.create_action(action_type="tool_call", capability_name="x", input={"amount": 1})
    assert rt.evaluate_action(action, stage="before_capability").type == "allow"
    with pytest.raises(TypeError):
        rt.evaluate_action(action)  # type: ignore[call-arg]  # stage is required
    assert ran == [] and sink.events == []


def test_capability_is_looked_up_by_name_at_call_time():
    rt = Runtime(agent_id="a", environment="prod")
    rt.before_capability("*")(lambda ctx: deny("risky") if ctx.is_high_risk else allow())
    tool = rt.capability("tool", type="tool", risk="low")(lambda: "ran")
    assert tool() == "ran"
    rt.register_capability(Capability(name="tool", type="tool", risk="high"))
    with pytest.raises(CapabilityDeniedError, match="risky"):
        tool()
    rt.capabilities.unregister("tool")
    with pytest.raises(CapabilityNotFoundError):
        tool()


def test_audit_reassignment_and_emit_audit_override_receive_events():
    rt = Runtime(agent_id="a")
    f = rt.capability(type="tool")(lambda: 1)
    f()  # nobody listening
    rt.audit = InMemoryAuditSink()
    f()
    assert len(rt.audit.events) == 1

    seen = []

    class Recording(Runtime):
        def emit_audit(self, event):
            seen.append(event)

    rec = Recording(agent_id="a")
    rec.capability(type="tool")(lambda: 1)()
    assert len(seen) == 1 and seen[0].outcome == "executed"


def test_emit_audit_goes_to_the_sink():
    from capability.brane.audit import build_audit_event

    sink = InMemoryAuditSink()
    rt = Runtime(agent_id="a", audit=sink)
    rt.register_capability(Capability(name="x", type="tool"))
    action = rt.create_action(action_type="tool_call", capability_name="x")
    event = build_audit_event(action, allow(), "before_capability", "executed")
    rt.emit_audit(event)
    assert sink.events == [event]


def test_register_capability_returns_it_and_replaces():
    rt = Runtime(agent_id="a")
    cap = Capability(name="x", type="tool")
    assert rt.register_capability(cap) is cap
    newer = Capability(name="x", type="model")
    rt.register_capability(newer)
    assert rt.capabilities.require("x") is newer


def test_wrapped_methods_bind_self():
    sink = InMemoryAuditSink()
    rt = Runtime(agent_id="a", audit=sink)
    inputs = []
    rt.before_capability("*")(lambda ctx: inputs.append(ctx.action.input) or allow())

    class Service:
        @rt.capability("svc.do", type="tool")
        def do(self, n=1):
            return n * 2

    service = Service()
    assert service.do(3) == 6
    assert inputs[0]["self"] is service and inputs[0]["n"] == 3
