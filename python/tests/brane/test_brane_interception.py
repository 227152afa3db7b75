"""CapabilityInterceptor: exclusive request stages and one audit event per call (§2.5–2.7)."""

from __future__ import annotations

import pytest

from capability.brane import (
    CallableCapabilityInterceptor,
    Capability,
    CapabilityDeniedError,
    CapabilityInterceptor,
    CapabilityNotFoundError,
    Decision,
    InterceptRequest,
    InterceptResult,
    allow,
    deny,
)


@pytest.fixture
def rt(runtime):
    runtime.register_capability(Capability(name="tool_a", type="tool", risk="medium"))
    return runtime


def _request(execute, stage="before_capability", name="tool_a", **kw):
    return InterceptRequest(capability_name=name, action_type="tool_call",
                            input=kw.pop("input", {"x": 1}), execute=execute, stage=stage, **kw)


def test_before_stage_allow_executes_and_audits_executed(rt, sink):
    @rt.before_capability("tool_a", name="ok_policy", version="2")
    def ok(ctx):
        return allow("fine")

    result = rt.interceptor.intercept(_request(lambda: "out"))
    assert isinstance(result, InterceptResult) and isinstance(rt.interceptor, CapabilityInterceptor)
    assert result.output == "out" and result.action.output is None
    assert result.after_action.output == "out"
    assert result.after_action.action_id == result.action.action_id
    assert result.before_decision.reason == "fine" and result.after_decision is None
    assert result.allowed and not result.denied
    (event,) = sink.events
    assert (event.outcome, event.decision, event.stage, event.policy_name, event.policy_version,
            event.reason) == ("executed", "allow", "before_capability", "ok_policy", "2", "fine")
    assert event.action_id == result.action.action_id


def test_before_stage_deny_never_executes(rt, sink):
    ran = []
    rt.before_capability("tool_a", name="blocker", version="1")(lambda ctx: deny("nope"))
    with pytest.raises(CapabilityDeniedError) as info:
        rt.interceptor.intercept(_request(lambda: ran.append(1)))
    err = info.value
    assert ran == [] and str(err) == "nope" and err.reason == "nope"
    assert (err.policy_name, err.policy_version) == ("blocker", "1")
    assert err.action_id == err.action.action_id and err.action_id.startswith("act_")
    assert err.decision.action_id == err.action_id and err.action.output is None
    assert type(err).__mro__[1] is Exception
    (event,) = sink.events
    assert (event.outcome, event.decision, event.reason) == ("denied_before_execution", "deny", "nope")


def test_after_stage_skips_before_policies_and_sees_the_output(rt, sink):
    before_calls, seen = [], []
    rt.before_capability("tool_a")(lambda ctx: before_calls.append(1) or deny("before"))

    @rt.after_capability("tool_a", name="check")
    def check(ctx):
        seen.append((ctx.output, ctx.action.output, ctx.arg("x")))
        return deny("leak") if ctx.output == "secret" else allow("clean")

    ran = []
    result = rt.interceptor.intercept(_request(lambda: ran.append(1) or "ok",
                                               stage="after_capability"))
    assert result.after_decision.reason == "clean" and result.before_decision is None
    assert sink.events[-1].outcome == "executed" and sink.events[-1].policy_name == "check"
    with pytest.raises(CapabilityDeniedError) as info:
        rt.interceptor.intercept(_request(lambda: ran.append(1) or "secret",
                                          stage="after_capability"))
    assert before_calls == [] and ran == [1, 1]  # the side effect happened
    assert seen == [("ok", "ok", 1), ("secret", "secret", 1)]
    assert info.value.action.output == "secret"
    assert sink.events[-1].outcome == "denied_after_execution"
    assert sink.events[-1].stage == "after_capability" and len(sink.events) == 2


def test_execution_failure_reraises_the_original_and_audits(rt, sink):
    rt.before_capability("tool_a", name="p")(lambda ctx: allow())
    error = RuntimeError("boom")

    def fail():
        raise error

    with pytest.raises(RuntimeError) as info:
        rt.interceptor.intercept(_request(fail))
    assert info.value is error
    (event,) = sink.events
    assert (event.outcome, event.decision, event.policy_name) == ("execution_failed", "allow", "p")
    assert event.metadata == {"error_type": "RuntimeError", "error_message": "boom"}


def test_after_stage_failure_uses_a_synthetic_allow(rt, sink):
    rt.after_capability("tool_a")(lambda ctx: deny("never"))

    def fail():
        raise KeyError("k")

    with pytest.raises(KeyError):
        rt.interceptor.intercept(_request(fail, stage="after_capability",
                                          metadata={"m": True}))
    (event,) = sink.events
    assert (event.outcome, event.decision, event.policy_name) == ("execution_failed", "allow", None)
    assert event.metadata == {"m": True, "error_type": "KeyError", "error_message": "'k'"}


def test_on_error_stage_runs_no_policy(rt, sink):
    rt.before_capability("*")(lambda ctx: deny("b"))
    rt.after_capability("*")(lambda ctx: deny("a"))
    rt.policies.register_policy("on_error", "*", lambda ctx: deny("e"))
    result = rt.interceptor.intercept(_request(lambda: 5, stage="on_error"))
    assert result.output == 5 and result.before_decision is None and result.after_decision is None
    (event,) = sink.events
    assert (event.outcome, event.stage, event.decision, event.policy_name) == (
        "executed", "on_error", "allow", None)


def test_request_fields_reach_action_policies_and_audit(rt, sink):
    seen = []

    @rt.before_capability("tool_a")
    def spy(ctx):
        seen.append(ctx)
        return allow()

    rt.interceptor.intercept(_request(
        lambda: 1, agent_id="other-agent", tenant_id="globex", environment="staging",
        principal_id="user-9", parent_action_id="act_parent", input_summary="in",
        cost_so_far_usd=1.5, estimated_cost_usd=0.25, latency_so_far_ms=30,
        labels={"team": "ops"}, metadata={"approved": True}, input={"q": "x"}))
    ctx = seen[0]
    action = ctx.action
    assert (action.agent_id, action.tenant_id, action.environment, action.principal_id) == (
        "other-agent", "globex", "staging", "user-9")
    assert (action.parent_action_id, action.input_summary, action.cost_so_far_usd,
            action.estimated_cost_usd, action.latency_so_far_ms) == ("act_parent", "in", 1.5, 0.25, 30)
    assert ctx.runtime_metadata == {"approved": True} and action.metadata == {"approved": True}
    assert ctx.args == {"q": "x"} and action.input == {"q": "x"}
    event = sink.events[0]
    assert (event.agent_id, event.tenant_id, event.environment, event.principal_id) == (
        "other-agent", "globex", "staging", "user-9")
    assert event.labels == {"team": "ops"} and event.metadata == {"approved": True}
    assert event.input_summary == "in" and "act_parent" not in event.to_json()


def test_unknown_capability_and_policy_failures_are_not_audited(rt, sink):
    ran = []
    with pytest.raises(CapabilityNotFoundError):
        rt.interceptor.intercept(_request(lambda: ran.append(1), name="ghost"))
    rt.before_capability("tool_a", priority=1)(lambda ctx: Decision(type="route"))
    with pytest.raises(NotImplementedError):
        rt.interceptor.intercept(_request(lambda: ran.append(1)))

    def broken(ctx):
        raise LookupError("bad policy")

    rt.before_capability("tool_a", priority=0)(broken)
    with pytest.raises(LookupError):
        rt.interceptor.intercept(_request(lambda: ran.append(1)))
    assert ran == [] and sink.events == []


def test_base_exception_from_execute_is_not_audited(rt, sink):
    def interrupt():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        rt.interceptor.intercept(_request(interrupt))
    assert sink.events == []


def test_denied_error_default_message_and_sink_failure_replaces_it(rt):
    rt.before_capability("tool_a")(lambda ctx: deny(""))
    with pytest.raises(CapabilityDeniedError) as info:
        rt.interceptor.intercept(_request(lambda: 1))
    assert str(info.value) == "Capability invocation denied." and info.value.reason == ""

    class Broken:
        def emit(self, event):
            raise OSError("sink down")

    rt.audit = Broken()
    with pytest.raises(OSError, match="sink down"):
        rt.interceptor.intercept(_request(lambda: 1))


def test_callable_interceptor_wrap_tags_and_binds(rt, sink):
    wrapper = CallableCapabilityInterceptor(rt.interceptor).wrap(
        lambda x, y=2: x + y, capability_name="tool_a", action_type="model_call")
    assert wrapper(1) == 3
    event = sink.events[0]
    assert event.metadata == {"interceptor": "callable"} and event.action_type == "model_call"
    tagged = rt.callables.wrap(lambda: 0, capability_name="tool_a", metadata={"extra": "x"})
    tagged()
    assert sink.events[1].metadata == {"interceptor": "callable", "extra": "x"}


def test_a_custom_interceptor_receives_the_request_of_a_wrapped_call(rt, sink):
    requests = []

    class Recording(CapabilityInterceptor):
        def intercept(self, request):
            requests.append(request)
            return super().intercept(request)

    wrapper = CallableCapabilityInterceptor(Recording(rt)).wrap(
        lambda q, limit=10: [q, limit], capability_name="tool_a", metadata={"declaration": "x"})
    assert wrapper("a") == ["a", 10]
    (request,) = requests
    assert isinstance(request, InterceptRequest)
    assert (request.capability_name, request.action_type, request.input, request.stage) == (
        "tool_a", "tool_call", {"q": "a", "limit": 10}, "before_capability")
    assert request.metadata == {"interceptor": "callable", "declaration": "x"}
    assert request.agent_id is None and request.labels == {}
    assert request.execute() == ["a", 10]
    assert sink.events[0].outcome == "executed"
