"""Brane's object model: frozen, slotted dataclasses and the ``Literal`` vocabularies.

Every model class is ``@dataclass(frozen=True, slots=True)``: immutable, compared field by
field, unhashable when it holds a dict. Ids are ``"<prefix>_" + 32 lowercase hex`` (uuid4
layout); timestamps are timezone-aware UTC datetimes. The ``Literal`` aliases are
documentation only: like brane-core, nothing validates them at runtime.
"""

from __future__ import annotations

import os
from collections.abc import Callable
import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

__all__ = [
    "CapabilityType",
    "RiskLevel",
    "EffectType",
    "SideEffectType",
    "ActionType",
    "DecisionType",
    "Environment",
    "PolicyStage",
    "AuditOutcome",
    "Scope",
    "Effect",
    "SideEffect",
    "Capability",
    "AgentAction",
    "Decision",
    "Policy",
    "PolicyContext",
    "InterceptRequest",
    "InterceptResult",
    "new_id",
    "utc_now",
]

CapabilityType = Literal[
    "tool",
    "model",
    "memory",
    "retrieval",
    "database",
    "external_api",
    "mcp_server",
    "mcp_tool",
    "mcp_resource",
    "mcp_prompt",
    "sandbox",
    "filesystem",
    "secret",
    "approval_group",
    "agent",
    "workflow",
]
RiskLevel = Literal["low", "medium", "high", "critical"]
EffectType = Literal[
    "none",
    "read",
    "write",
    "delete",
    "send_message",
    "external_api_call",
    "financial",
    "credential_access",
    "code_execution",
    "network_access",
    "data_export",
    "state_change",
    "human_visible",
    "irreversible",
]
SideEffectType = EffectType
ActionType = Literal[
    "tool_call",
    "model_call",
    "memory_read",
    "memory_write",
    "retrieval",
    "database_query",
    "external_api_call",
    "mcp_tool_call",
    "sandbox_execution",
    "file_read",
    "file_write",
    "secret_access",
    "agent_handoff",
    "human_approval",
]
DecisionType = Literal[
    "allow",
    "deny",
    "approval_required",
    "redact",
    "transform_input",
    "transform_output",
    "route",
    "sandbox",
    "log_only",
]
Environment = Literal["dev", "staging", "prod"]
PolicyStage = Literal["before_capability", "after_capability", "on_error"]
AuditOutcome = Literal[
    "allowed",
    "denied_before_execution",
    "executed",
    "denied_after_execution",
    "execution_failed",
]

# --- ids and time -------------------------------------------------------------------------

# uuid4 layout (version nibble 4, RFC 4122 variant) from os.urandom, 256 ids per refill:
# uuid.uuid4().hex costs ~8x more per id, and the runtime makes ~5 ids per call.
_UUID4_VERSION = bytes((b & 0x0F) | 0x40 for b in range(256))
_UUID4_VARIANT = bytes((b & 0x3F) | 0x80 for b in range(256))
_id_pool: list[str] = []
_id_pop = _id_pool.pop


def _refill_ids() -> None:
    data = bytearray(os.urandom(4096))
    data[6::16] = data[6::16].translate(_UUID4_VERSION)
    data[8::16] = data[8::16].translate(_UUID4_VARIANT)
    text = data.hex()
    _id_pool.extend([text[i : i + 32] for i in range(0, 8192, 32)])


if hasattr(os, "register_at_fork"):  # a forked child must never reuse its parent's ids
    os.register_at_fork(after_in_child=_id_pool.clear)


def new_id(prefix: str) -> str:
    """``"<prefix>_" + 32 lowercase hex chars`` (a random uuid4)."""
    try:
        return f"{prefix}_{_id_pop()}"
    except IndexError:
        _refill_ids()
        return f"{prefix}_{_id_pop()}"


_UTC = timezone.utc


def utc_now() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(_UTC)


def _capability_id() -> str:
    return new_id("cap")


def _action_id() -> str:
    return new_id("act")


def _trace_id() -> str:
    return new_id("tr")


def _decision_id() -> str:
    return new_id("dec")


def _policy_id() -> str:
    return new_id("pol")


# --- capabilities ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scope:
    """A named permission required by or granted for a capability."""

    name: str
    description: str | None = None
    data_namespace: str | None = None
    environment: Environment | None = None
    owner: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Effect:
    """The primary expected outcome of using a capability."""

    type: EffectType
    description: str | None = None
    risk: RiskLevel = "low"
    external: bool = False
    reversible: bool = True
    data_namespace: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SideEffect:
    """A secondary consequence of using a capability, possibly disableable."""

    type: SideEffectType
    description: str | None = None
    risk: RiskLevel = "medium"
    external: bool = False
    reversible: bool = True
    can_disable: bool = False
    disable_input: dict[str, Any] | None = None
    disable_description: str | None = None
    requires_approval: bool = False
    data_namespace: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Capability:
    """A governed thing an agent can use."""

    name: str
    type: CapabilityType
    tenant_id: str | None = None
    id: str = field(default_factory=_capability_id)
    risk: RiskLevel = "low"
    effect: Effect | None = None
    side_effects: tuple[SideEffect, ...] = ()
    scopes: tuple[Scope, ...] = ()
    owner: str | None = None
    environment: Environment | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    data_namespace: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def is_high_risk(self) -> bool:
        return self.risk == "high" or self.risk == "critical"

    @property
    def has_side_effects(self) -> bool:
        return len(self.side_effects) > 0

    @property
    def disableable_side_effects(self) -> tuple[SideEffect, ...]:
        return tuple(s for s in self.side_effects if s.can_disable)


# --- actions --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AgentAction:
    """One attempted use of a capability."""

    action_type: ActionType
    capability: Capability
    agent_id: str
    tenant_id: str | None = None
    input: dict[str, Any] = field(default_factory=dict)
    action_id: str = field(default_factory=_action_id)
    trace_id: str = field(default_factory=_trace_id)
    parent_action_id: str | None = None
    timestamp: datetime = field(default_factory=utc_now)
    environment: Environment = "dev"
    principal_id: str | None = None
    output: Any | None = None
    input_summary: str | None = None
    output_summary: str | None = None
    cost_so_far_usd: float = 0.0
    estimated_cost_usd: float | None = None
    latency_so_far_ms: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def is_prod(self) -> bool:
        return self.environment == "prod"

    def with_output(self, output: Any, summary: str | None = None) -> AgentAction:
        """A copy with ``output`` set and ``output_summary`` set to ``summary`` (same ids and
        timestamp)."""
        return _new_action(
            self.action_type,
            self.capability,
            self.agent_id,
            self.tenant_id,
            self.input,
            self.action_id,
            self.trace_id,
            self.parent_action_id,
            self.timestamp,
            self.environment,
            self.principal_id,
            output,
            self.input_summary,
            summary,
            self.cost_so_far_usd,
            self.estimated_cost_usd,
            self.latency_so_far_ms,
            self.labels,
            self.metadata,
        )


# --- decisions and policies -------------------------------------------------------------------

_ALLOWED_TYPES = frozenset(
    {"allow", "log_only", "redact", "transform_input", "transform_output", "route", "sandbox"}
)


@dataclass(frozen=True, slots=True)
class Decision:
    """The normalized result of policy evaluation."""

    type: DecisionType
    reason: str | None = None
    decision_id: str = field(default_factory=_decision_id)
    action_id: str | None = None
    policy_name: str | None = None
    policy_version: str | None = None
    mutations: dict[str, Any] = field(default_factory=dict)
    approval: dict[str, Any] | None = None
    audit: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def allowed(self) -> bool:
        return self.type in _ALLOWED_TYPES

    @property
    def denied(self) -> bool:
        return self.type == "deny"

    @property
    def requires_approval(self) -> bool:
        return self.type == "approval_required"


def _stamp(decision: Decision, policy_name: Any, policy_version: Any, action_id: Any) -> Decision:
    """A copy of ``decision`` (same decision id) with the three fields replaced."""
    if type(decision) is not Decision:  # a subclass: keep its type, like dataclasses.replace
        return dataclasses.replace(
            decision, policy_name=policy_name, policy_version=policy_version, action_id=action_id
        )
    return _new_decision(
        decision.type,
        decision.reason,
        decision.decision_id,
        action_id,
        policy_name,
        policy_version,
        decision.mutations,
        decision.approval,
        decision.audit,
        decision.metadata,
    )


@dataclass(frozen=True, slots=True)
class Policy:
    """A policy function plus its decorator metadata."""

    target: str
    stage: PolicyStage
    function: Callable[[PolicyContext], Decision]
    name: str | None = None
    version: str | None = None
    id: str = field(default_factory=_policy_id)
    description: str | None = None
    priority: int = 0
    enabled: bool = True
    source: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def display_name(self) -> str:
        return self.name or self.function.__name__

    def annotate(self, decision: Decision) -> Decision:
        """A copy of ``decision`` naming this policy, unless the decision names its own
        policy/version (a truthy value wins)."""
        return _stamp(
            decision,
            decision.policy_name or self.display_name,
            decision.policy_version or self.version,
            decision.action_id,
        )


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """What a policy function sees."""

    action: AgentAction
    args: dict[str, Any] = field(default_factory=dict)
    output: Any | None = None
    runtime_metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def capability(self) -> Capability:
        return self.action.capability

    @property
    def tool(self) -> Capability:
        return self.action.capability

    @property
    def agent_id(self) -> str:
        return self.action.agent_id

    @property
    def principal_id(self) -> str | None:
        return self.action.principal_id

    @property
    def tenant_id(self) -> str | None:
        return self.action.tenant_id

    @property
    def is_prod(self) -> bool:
        return self.action.environment == "prod"

    @property
    def is_high_risk(self) -> bool:
        return self.action.capability.is_high_risk

    @property
    def has_side_effects(self) -> bool:
        return self.action.capability.has_side_effects

    @property
    def disableable_side_effects(self) -> tuple[SideEffect, ...]:
        return self.action.capability.disableable_side_effects

    def arg(self, name: str, default: Any = None) -> Any:
        """The argument ``name`` (key presence, not truthiness): from ``args``, else from the
        action's input, else ``default``."""
        args = self.args
        if name in args:
            return args[name]
        data = self.action.input
        if name in data:
            return data[name]
        return default

    def agent_has_scope(self, scope: str) -> bool:
        """Whether the capability declares a scope named exactly ``scope``."""
        return any(s.name == scope for s in self.action.capability.scopes)


# --- interception ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InterceptRequest:
    """A framework-independent request to invoke a capability."""

    capability_name: str
    action_type: ActionType
    input: dict[str, Any]
    execute: Callable[[], Any]
    stage: PolicyStage = "before_capability"
    agent_id: str | None = None
    tenant_id: str | None = None
    environment: Environment | None = None
    principal_id: str | None = None
    parent_action_id: str | None = None
    input_summary: str | None = None
    cost_so_far_usd: float = 0.0
    estimated_cost_usd: float | None = None
    latency_so_far_ms: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InterceptResult:
    """What an intercepted invocation produced."""

    action: AgentAction
    before_decision: Decision | None = None
    output: Any | None = None
    after_action: AgentAction | None = None
    after_decision: Decision | None = None

    @property
    def allowed(self) -> bool:
        before, after = self.before_decision, self.after_decision
        return (before is None or before.allowed) and (after is None or after.allowed)

    @property
    def denied(self) -> bool:
        before, after = self.before_decision, self.after_decision
        return (before is not None and before.denied) or (after is not None and after.denied)


# --- fast internal constructors -------------------------------------------------------------


def _fast_constructor(cls: type) -> Callable[..., Any]:
    """``make(field1, ..., fieldN)`` -> an instance of the frozen slotted dataclass ``cls``,
    every field given positionally: the same object ``cls(...)`` builds, without the
    generated ``__init__``'s ``object.__setattr__`` per field (the runtime's hot path builds
    several of these per call)."""
    names = [f.name for f in dataclasses.fields(cls)]
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    lines = [f"def make({', '.join(names)}):", "    self = _new(_cls)"]
    for i, name in enumerate(names):
        namespace[f"_set{i}"] = cls.__dict__[name].__set__
        lines.append(f"    _set{i}(self, {name})")
    lines.append("    return self")
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from the dataclass's fields
    make = namespace["make"]
    make.__qualname__ = make.__name__ = f"_new_{cls.__name__}"
    return make


_new_action = _fast_constructor(AgentAction)
_new_decision = _fast_constructor(Decision)
_new_context = _fast_constructor(PolicyContext)
_new_result = _fast_constructor(InterceptResult)
