"""PolicyRegistry decorators (reference §1.14)."""

from __future__ import annotations

import pytest
from brane_helpers import make_action

from capability.brane import Policy, PolicyEngine, PolicyRegistry, allow, deny


def test_before_capability_registers_and_returns_the_original_function():
    engine = PolicyEngine()
    registry = PolicyRegistry(engine)

    def limit(ctx):
        return deny("no")

    decorated = registry.before_capability("refund", name="limit", version="1.0",
                                           description="d", priority=7, source="src")(limit)
    assert decorated is limit  # still directly callable
    (policy,) = engine.policies
    assert (policy.target, policy.stage, policy.function, policy.name, policy.version,
            policy.description, policy.priority, policy.enabled, policy.source) == (
        "refund", "before_capability", limit, "limit", "1.0", "d", 7, True, "src")
    assert limit(None).denied


def test_after_capability_registers_an_after_policy():
    engine = PolicyEngine()
    registry = PolicyRegistry(engine)

    @registry.after_capability("*", enabled=False)
    def check(ctx):
        return allow()

    (policy,) = engine.policies
    assert policy.stage == "after_capability" and policy.target == "*" and not policy.enabled
    assert policy.name is None and policy.display_name == "check"
    assert engine.matching_policies(make_action(), "after_capability") == []


def test_register_passes_through_and_there_is_no_on_error_decorator():
    engine = PolicyEngine()
    registry = PolicyRegistry(engine)
    policy = Policy(target="*", stage="on_error", function=lambda c: allow())
    assert registry.register(policy) is policy and engine.policies == (policy,)
    assert not hasattr(registry, "on_error")
    with pytest.raises(TypeError):
        registry.before_capability()  # type: ignore[call-arg]  # target is required
