"""The policy engine: matching, evaluation and decision composition."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .primitives import (
    AgentAction,
    Decision,
    Policy,
    PolicyContext,
    PolicyStage,
    _new_context,
    _new_decision,
    _stamp,
    new_id,
)

__all__ = ["PolicyEngine"]

_CACHE_LIMIT = 4096


class PolicyEngine:
    """Policies in registration order.

    A policy matches an action at a stage when it is enabled, its stage is that stage and
    its target is ``"*"`` or exactly the capability's name (no globbing). Matches run in
    ascending priority (stable: ties keep registration order), all of them, before
    composing: the first deny wins, else the last decision.
    """

    def __init__(self, policies: Iterable[Policy] | None = None) -> None:
        self._policies: list[Policy] = list(policies) if policies is not None else []
        # (capability name, stage) -> the sorted matching policies; cleared on register.
        self._matching: dict[tuple[str, str], tuple[Policy, ...]] = {}

    @property
    def policies(self) -> tuple[Policy, ...]:
        return tuple(self._policies)

    def register(self, policy: Policy) -> Policy:
        self._policies.append(policy)
        self._matching.clear()
        return policy

    def register_policy(
        self,
        stage: PolicyStage,
        target: str,
        function: Callable[[PolicyContext], Decision],
        name: str | None = None,
        version: str | None = None,
        description: str | None = None,
        priority: int = 0,
        enabled: bool = True,
        source: str | None = None,
    ) -> Policy:
        return self.register(
            Policy(
                target=target,
                stage=stage,
                function=function,
                name=name,
                version=version,
                description=description,
                priority=priority,
                enabled=enabled,
                source=source,
            )
        )

    def _matches(self, capability_name: str, stage: str) -> tuple[Policy, ...]:
        key = (capability_name, stage)
        cached = self._matching.get(key)
        if cached is None:
            cached = tuple(
                sorted(
                    (
                        p
                        for p in self._policies
                        if p.enabled
                        and p.stage == stage
                        and (p.target == "*" or p.target == capability_name)
                    ),
                    key=_priority,
                )
            )
            if len(self._matching) >= _CACHE_LIMIT:
                self._matching.clear()
            self._matching[key] = cached
        return cached

    def matching_policies(self, action: AgentAction, stage: PolicyStage) -> list[Policy]:
        """The policies that apply to ``action`` at ``stage``, in the order they run."""
        return list(self._matches(action.capability.name, stage))

    def _decisions(
        self,
        action: AgentAction,
        stage: PolicyStage,
        args: dict[str, Any] | None = None,
        output: Any = None,
        runtime_metadata: dict[str, Any] | None = None,
    ) -> list[Decision]:
        """Every matching policy's decision, annotated (:meth:`Policy.annotate`) and stamped
        with the action id when it has none, in order (no short-circuit). Stamping here
        instead of in :meth:`compose` saves a copy; the composed result is the same."""
        policies = self._matches(action.capability.name, stage)
        if not policies:
            return []
        context = _new_context(action, args or action.input, output, runtime_metadata or {})
        action_id = action.action_id
        decisions = []
        for policy in policies:
            decision = policy.function(context)
            if type(policy) is not Policy:  # a subclass may annotate differently
                decisions.append(policy.annotate(decision))
                continue
            decisions.append(
                _stamp(
                    decision,
                    decision.policy_name or policy.name or policy.function.__name__,
                    decision.policy_version or policy.version,
                    decision.action_id if decision.action_id is not None else action_id,
                )
            )
        return decisions

    def evaluate(
        self,
        action: AgentAction,
        stage: PolicyStage,
        args: dict[str, Any] | None = None,
        output: Any = None,
        runtime_metadata: dict[str, Any] | None = None,
    ) -> Decision:
        """Runs every matching policy, then composes their decisions."""
        return self.compose(self._decisions(action, stage, args, output, runtime_metadata), action)

    def compose(self, decisions: Iterable[Decision], action: AgentAction) -> Decision:
        """No decisions: allow. Else the first deny, or the last decision; a type other than
        allow/deny met before the first deny raises NotImplementedError."""
        decisions = list(decisions) if not isinstance(decisions, list) else decisions
        if not decisions:
            return _new_decision(
                "allow", None, new_id("dec"), action.action_id, None, None, {}, None, {}, {}
            )
        for decision in decisions:
            kind = decision.type
            if kind == "deny":
                return _with_action(decision, action)
            if kind != "allow":
                raise NotImplementedError(
                    f"Decision type '{kind}' is not supported by the MVP policy engine."
                )
        return _with_action(decisions[-1], action)


def _priority(policy: Policy) -> int:
    return policy.priority


def _with_action(decision: Decision, action: AgentAction) -> Decision:
    if decision.action_id is not None:
        return decision
    return _stamp(decision, decision.policy_name, decision.policy_version, action.action_id)
