"""Object model (reference §1): frozen slotted dataclasses, ids, computed properties."""

from __future__ import annotations

import dataclasses
import re
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from brane_helpers import make_action

import capability.brane as brane
from capability.brane import primitives
from capability.brane.primitives import (
    AgentAction,
    Capability,
    Decision,
    Effect,
    InterceptResult,
    Policy,
    PolicyContext,
    Scope,
    SideEffect,
)

EXPORTS = {
    "AgentAction", "AuditEvent", "AuditSink", "CallableCapabilityInterceptor", "Capability",
    "CapabilityDeniedError", "CapabilityInterceptor", "CapabilityNotFoundError",
    "CapabilityRegistry", "CompositeAuditSink", "Decision", "Effect", "InMemoryAuditSink",
    "InterceptRequest", "InterceptResult", "JsonlAuditSink", "NoopAuditSink", "Policy",
    "PolicyContext", "PolicyEngine", "PolicyRegistry", "Runtime", "Scope", "SideEffect",
    "allow", "deny",
}


def test_public_exports_are_exactly_branes_26_names():
    assert len(brane.__all__) == 26
    assert set(brane.__all__) == EXPORTS
    for name in EXPORTS:
        assert getattr(brane, name) is not None
    assert not hasattr(brane, "build_audit_event")  # submodule only


def test_classes_live_in_branes_submodules():
    from capability.brane import (
        audit, capability_registry, decisions, interception, policy_engine, policy_registry,
        runtime,
    )

    for name in ("Scope", "Effect", "SideEffect", "Capability", "AgentAction", "Policy",
                 "PolicyContext", "Decision", "InterceptRequest", "InterceptResult",
                 "CapabilityType", "RiskLevel", "EffectType", "SideEffectType", "ActionType",
                 "DecisionType", "Environment", "PolicyStage"):
        assert hasattr(primitives, name), name
    assert decisions.allow is brane.allow and decisions.deny is brane.deny
    for name in ("AuditEvent", "AuditSink", "NoopAuditSink", "InMemoryAuditSink",
                 "JsonlAuditSink", "CompositeAuditSink", "build_audit_event"):
        assert hasattr(audit, name), name
    assert capability_registry.CapabilityRegistry is brane.CapabilityRegistry
    assert capability_registry.CapabilityNotFoundError is brane.CapabilityNotFoundError
    assert policy_engine.PolicyEngine is brane.PolicyEngine
    assert policy_registry.PolicyRegistry is brane.PolicyRegistry
    assert interception.CapabilityDeniedError is brane.CapabilityDeniedError
    assert interception.CallableCapabilityInterceptor is brane.CallableCapabilityInterceptor
    assert runtime.Runtime is brane.Runtime


def test_literal_vocabularies_match_the_reference():
    from typing import get_args

    assert len(get_args(primitives.CapabilityType)) == 16
    assert get_args(primitives.RiskLevel) == ("low", "medium", "high", "critical")
    assert len(get_args(primitives.EffectType)) == 14
    assert primitives.SideEffectType == primitives.EffectType
    assert len(get_args(primitives.ActionType)) == 14
    assert len(get_args(primitives.DecisionType)) == 9
    assert get_args(primitives.Environment) == ("dev", "staging", "prod")
    assert get_args(primitives.PolicyStage) == ("before_capability", "after_capability", "on_error")
    assert "allowed" in get_args(primitives.AuditOutcome)


@pytest.mark.parametrize(
    "make, attr, prefix",
    [
        (lambda: Capability(name="x", type="tool"), "id", "cap"),
        (lambda: make_action(), "action_id", "act"),
        (lambda: make_action(), "trace_id", "tr"),
        (lambda: Decision(type="allow"), "decision_id", "dec"),
        (lambda: Policy(target="*", stage="before_capability", function=len), "id", "pol"),
    ],
)
def test_ids_are_prefix_and_32_hex_uuid4(make, attr, prefix):
    values = {getattr(make(), attr) for _ in range(50)}
    assert len(values) == 50
    for value in values:
        assert re.fullmatch(prefix + r"_[0-9a-f]{32}", value), value
        assert uuid.UUID(value.split("_", 1)[1]).version == 4


def test_models_are_frozen_slotted_and_unhashable():
    cap = Capability(name="x", type="tool")
    for obj in (cap, Scope(name="s"), Effect(type="read"), SideEffect(type="write"),
                make_action(), Decision(type="allow")):
        assert dataclasses.is_dataclass(obj)
        assert not hasattr(obj, "__dict__")
        assert type(obj).__slots__
        with pytest.raises(TypeError):
            hash(obj)  # a dict field makes it unhashable
    with pytest.raises(dataclasses.FrozenInstanceError):
        cap.name = "y"  # type: ignore[misc]
    assert Capability(name="x", type="tool", id="cap_1") == Capability(name="x", type="tool", id="cap_1")
    assert dataclasses.replace(cap, risk="high").id == cap.id


def test_defaults_and_positional_field_order():
    assert Effect(type="read").risk == "low"
    side = SideEffect(type="send_message")
    assert (side.risk, side.can_disable, side.disable_input, side.requires_approval) == (
        "medium", False, None, False)
    cap = Capability("refund", "tool", "acme")  # tenant_id is the third field
    assert cap.tenant_id == "acme" and cap.risk == "low"
    assert cap.side_effects == () and cap.scopes == () and cap.metadata == {}
    assert Scope(name="a").metadata == {} and Scope(name="a").environment is None
    # Literal values are never validated.
    assert Capability(name="x", type="not-a-type", risk="none").risk == "none"


def test_capability_computed_properties():
    quiet = SideEffect(type="send_message", can_disable=True, disable_input={"notify": False})
    loud = SideEffect(type="human_visible")
    other = SideEffect(type="write", can_disable=True)
    cap = Capability(name="x", type="tool", risk="high", side_effects=(quiet, loud, other))
    assert cap.is_high_risk and cap.has_side_effects
    assert cap.disableable_side_effects == (quiet, other)
    assert Capability(name="x", type="tool", risk="critical").is_high_risk
    assert not Capability(name="x", type="tool", risk="medium").is_high_risk
    assert not Capability(name="x", type="tool").has_side_effects


def test_agent_action_defaults_and_with_output():
    action = make_action(environment="prod")
    assert action.is_prod and not make_action().is_prod
    assert action.timestamp.tzinfo is not None
    assert action.timestamp.utcoffset() == timedelta(0)
    assert abs(datetime.now(timezone.utc) - action.timestamp) < timedelta(seconds=5)
    assert AgentAction(action_type="tool_call", capability=action.capability,
                       agent_id="a").environment == "dev"
    summarized = dataclasses.replace(action, output_summary="old")
    with_out = summarized.with_output({"rows": 3})
    assert with_out.output == {"rows": 3}
    assert with_out.output_summary is None  # overwritten, not kept
    assert (with_out.action_id, with_out.trace_id, with_out.timestamp) == (
        action.action_id, action.trace_id, action.timestamp)
    assert action.output is None  # the original is untouched
    assert summarized.with_output(1, summary="one").output_summary == "one"


@pytest.mark.parametrize(
    "kind, allowed, denied, approval",
    [
        ("allow", True, False, False),
        ("deny", False, True, False),
        ("approval_required", False, False, True),
        ("redact", True, False, False),
        ("transform_input", True, False, False),
        ("transform_output", True, False, False),
        ("route", True, False, False),
        ("sandbox", True, False, False),
        ("log_only", True, False, False),
        ("bogus", False, False, False),
    ],
)
def test_decision_flags(kind, allowed, denied, approval):
    d = Decision(type=kind)
    assert (d.allowed, d.denied, d.requires_approval) == (allowed, denied, approval)


def test_decision_defaults():
    d = Decision(type="allow")
    assert (d.reason, d.action_id, d.policy_name, d.policy_version, d.approval) == (None,) * 5
    assert d.mutations == {} and d.audit == {} and d.metadata == {}


def test_policy_display_name_and_annotate():
    def refund_policy(ctx):
        return brane.allow()

    unnamed = Policy(target="*", stage="before_capability", function=refund_policy, version="2")
    named = Policy(target="*", stage="before_capability", function=refund_policy, name="limits")
    assert unnamed.display_name == "refund_policy" and named.display_name == "limits"
    assert unnamed.priority == 0 and unnamed.enabled and unnamed.metadata == {}

    plain = brane.allow("ok")
    annotated = unnamed.annotate(plain)
    assert (annotated.policy_name, annotated.policy_version) == ("refund_policy", "2")
    assert annotated.decision_id == plain.decision_id and annotated.reason == "ok"
    assert plain.policy_name is None  # a copy

    own = Decision(type="deny", reason="r", policy_name="custom", policy_version="9")
    kept = unnamed.annotate(own)
    assert (kept.policy_name, kept.policy_version) == ("custom", "9")
    empty = Decision(type="deny", policy_name="", policy_version="")
    assert (unnamed.annotate(empty).policy_name, unnamed.annotate(empty).policy_version) == (
        "refund_policy", "2")
    with pytest.raises(AttributeError):
        unnamed.annotate(None)  # type: ignore[arg-type]


def test_policy_context_arg_is_key_presence():
    action = make_action(input={"amount": 5, "note": None, "flag": 0})
    ctx = PolicyContext(action=action, args={"tenant_id": None, "amount": 7})
    assert ctx.arg("tenant_id", "fallback") is None  # present with None: not the default
    assert ctx.arg("amount") == 7  # args win over the input
    assert ctx.arg("note", "x") is None and ctx.arg("flag", 9) == 0
    assert ctx.arg("missing", "dflt") == "dflt" and ctx.arg("missing") is None
    assert PolicyContext(action=action).args == {} and PolicyContext(action=action).output is None


def test_policy_context_delegating_properties_and_scopes():
    cap = Capability(name="refund", type="tool", risk="high", tenant_id="cap-tenant",
                     scopes=(Scope(name="customers:read"),),
                     side_effects=(SideEffect(type="send_message", can_disable=True),))
    action = AgentAction(action_type="tool_call", capability=cap, agent_id="a1",
                         tenant_id="act-tenant", principal_id="p1", environment="prod")
    ctx = PolicyContext(action=action, runtime_metadata={"k": 1})
    assert ctx.capability is cap and ctx.tool is cap
    assert (ctx.agent_id, ctx.principal_id, ctx.tenant_id) == ("a1", "p1", "act-tenant")
    assert ctx.is_prod and ctx.is_high_risk and ctx.has_side_effects
    assert ctx.disableable_side_effects == cap.side_effects
    assert ctx.agent_has_scope("customers:read")
    assert not ctx.agent_has_scope("customers:write")
    assert not ctx.agent_has_scope("Customers:read") and not ctx.agent_has_scope("customers:*")


def test_intercept_result_allowed_and_denied():
    action = make_action()
    allow, deny = brane.allow(), brane.deny("no")
    assert InterceptResult(action=action).allowed
    assert not InterceptResult(action=action).denied
    assert InterceptResult(action=action, before_decision=allow, after_decision=allow).allowed
    r = InterceptResult(action=action, before_decision=allow, after_decision=deny)
    assert r.denied and not r.allowed
    pending = InterceptResult(action=action, before_decision=Decision(type="approval_required"))
    assert not pending.allowed and not pending.denied


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_ids_differ_between_a_forked_child_and_its_parent():
    import os

    primitives.new_id("act")  # the pool now holds ids the child must not reuse
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, primitives.new_id("act").encode())
        os._exit(0)
    os.close(write)
    child_id = os.read(read, 100).decode()
    os.waitpid(pid, 0)
    os.close(read)
    assert re.fullmatch(r"act_[0-9a-f]{32}", child_id)
    assert child_id != primitives.new_id("act")
