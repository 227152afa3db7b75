"""PolicyEngine matching, ordering and composition (reference §2.3, §2.4, S13)."""

from __future__ import annotations

import dataclasses

import pytest
from brane_helpers import make_action

from capability.brane import Decision, Policy, PolicyEngine, allow, deny

BEFORE = "before_capability"
AFTER = "after_capability"


def _policy(function, target="*", stage=BEFORE, **kw):
    return Policy(target=target, stage=stage, function=function, **kw)


def test_priority_ascending_runs_every_policy_and_last_allow_is_reported():
    calls = []

    def p20(ctx):
        calls.append(20)
        return allow("twenty")

    def p10(ctx):
        calls.append(10)
        return allow("ten")

    engine = PolicyEngine()
    engine.register(_policy(p20, priority=20))
    engine.register(_policy(p10, priority=10))
    action = make_action()
    decision = engine.evaluate(action, BEFORE)
    assert calls == [10, 20]
    assert (decision.type, decision.reason, decision.policy_name) == ("allow", "twenty", "p20")
    assert decision.action_id == action.action_id


def test_matching_exact_and_wildcard_only_enabled_and_same_stage():
    engine = PolicyEngine()
    wildcard = engine.register(_policy(lambda c: allow(), name="wild"))
    exact = engine.register(_policy(lambda c: allow(), target="tool_a", name="exact"))
    engine.register(_policy(lambda c: allow(), target="tool_b", name="unrelated"))
    engine.register(_policy(lambda c: deny("x"), target="tool_a", enabled=False))
    engine.register(_policy(lambda c: deny("x"), target="tool_a", stage=AFTER))
    engine.register(_policy(lambda c: deny("x"), target="tool_*"))  # no globbing
    engine.register(_policy(lambda c: deny("x"), target="TOOL_A"))  # case-sensitive
    matches = engine.matching_policies(make_action("tool_a"), BEFORE)
    assert matches == [wildcard, exact]
    assert engine.evaluate(make_action("tool_a"), BEFORE).type == "allow"


def test_allow_wildcard_plus_deny_exact_gives_the_deny():
    engine = PolicyEngine()
    engine.register(_policy(lambda c: allow(), name="allow_all"))
    engine.register(_policy(lambda c: deny("blocked"), target="tool_a", name="deny_exact",
                            version="1.0"))
    action = make_action("tool_a")
    decision = engine.evaluate(action, BEFORE)
    assert decision.denied and decision.reason == "blocked"
    assert (decision.policy_name, decision.policy_version) == ("deny_exact", "1.0")
    assert decision.action_id == action.action_id


def test_no_policies_gives_a_fresh_allow_with_action_id():
    action = make_action()
    decision = PolicyEngine().evaluate(action, BEFORE)
    assert decision.type == "allow" and decision.action_id == action.action_id
    assert decision.policy_name is None and decision.reason is None
    assert PolicyEngine().compose([], action).action_id == action.action_id


def test_unsupported_decision_types_raise_not_implemented():
    engine = PolicyEngine()
    engine.register(_policy(lambda c: Decision(type="redact"), stage=AFTER))
    with pytest.raises(NotImplementedError) as info:
        engine.evaluate(make_action(), AFTER)
    assert str(info.value) == "Decision type 'redact' is not supported by the MVP policy engine."
    action = make_action()
    with pytest.raises(NotImplementedError, match="'redact'"):
        engine.compose([Decision(type="redact"), deny("x")], action)
    # Only checked before the first deny.
    composed = engine.compose([deny("x"), Decision(type="approval_required")], action)
    assert composed.denied and composed.reason == "x"
    with pytest.raises(NotImplementedError, match="'bogus'"):
        engine.compose([allow(), Decision(type="bogus")], action)


def test_disabled_policy_is_skipped():
    engine = PolicyEngine()
    engine.register(_policy(lambda c: deny("off"), enabled=False))
    assert engine.evaluate(make_action(), BEFORE).type == "allow"
    assert engine.matching_policies(make_action(), BEFORE) == []


def test_no_short_circuit_first_deny_wins_and_ties_keep_registration_order():
    calls = []

    def make(name, decision, priority=0):
        def fn(ctx):
            calls.append(name)
            return decision

        fn.__name__ = name
        return _policy(fn, priority=priority)

    engine = PolicyEngine([make("a", deny("first")), make("b", deny("second")),
                           make("c", allow()), make("early", allow(), priority=-1)])
    decision = engine.evaluate(make_action(), BEFORE)
    assert calls == ["early", "a", "b", "c"]
    assert decision.reason == "first" and decision.policy_name == "a"


def test_policy_errors_propagate():
    engine = PolicyEngine([_policy(lambda c: None)])
    with pytest.raises(AttributeError):
        engine.evaluate(make_action(), BEFORE)

    def boom(ctx):
        raise ValueError("policy bug")

    with pytest.raises(ValueError, match="policy bug"):
        PolicyEngine([_policy(boom)]).evaluate(make_action(), BEFORE)


def test_context_args_fallback_output_and_runtime_metadata():
    seen = []

    def spy(ctx):
        seen.append(ctx)
        return allow()

    engine = PolicyEngine([_policy(spy), _policy(spy, stage=AFTER)])
    action = make_action(input={"amount": 3})
    engine.evaluate(action, BEFORE, args={})
    assert seen[-1].args == {"amount": 3} and seen[-1].runtime_metadata == {}
    engine.evaluate(action, BEFORE, args={"amount": 4}, runtime_metadata={"m": 1})
    assert seen[-1].arg("amount") == 4 and seen[-1].runtime_metadata == {"m": 1}
    engine.evaluate(action.with_output("out"), AFTER, output="out")
    assert seen[-1].output == "out" and seen[-1].action.output == "out"
    assert len(seen) == 3 and len({id(c) for c in seen}) == 3


def test_registration_after_evaluation_is_seen_and_policies_is_a_tuple():
    engine = PolicyEngine()
    action = make_action("tool_a")
    assert engine.evaluate(action, BEFORE).type == "allow"
    policy = engine.register_policy(BEFORE, "tool_a", lambda c: deny("now denied"), name="late",
                                    version="3", priority=5, description="d", source="s")
    assert isinstance(policy, Policy)
    assert (policy.stage, policy.target, policy.name, policy.priority) == (BEFORE, "tool_a", "late", 5)
    assert engine.evaluate(action, BEFORE).reason == "now denied"
    assert engine.policies == (policy,) and isinstance(engine.policies, tuple)
    # A policy's stamped name/version wins over the policy's own.
    engine.register(_policy(lambda c: dataclasses.replace(deny("own"), policy_name="mine"),
                            priority=-5, name="ignored"))
    assert engine.evaluate(action, BEFORE).policy_name == "mine"


def test_policy_and_decision_subclasses_are_respected():
    class Verdict(Decision):
        pass

    class Renaming(Policy):
        def annotate(self, decision):
            return dataclasses.replace(decision, policy_name="renamed")

    engine = PolicyEngine([Renaming(target="*", stage=BEFORE, function=lambda c: allow())])
    assert engine.evaluate(make_action(), BEFORE).policy_name == "renamed"
    engine = PolicyEngine([_policy(lambda c: Verdict(type="deny", reason="v"), name="p")])
    decision = engine.evaluate(make_action(), BEFORE)
    assert type(decision) is Verdict and decision.policy_name == "p"
