"""Audit events (one per intercepted invocation) and the sinks that receive them."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .primitives import (
    ActionType,
    AgentAction,
    AuditOutcome,
    CapabilityType,
    Decision,
    DecisionType,
    Environment,
    PolicyStage,
    RiskLevel,
    _fast_constructor,
    new_id,
    utc_now,
)

__all__ = [
    "AuditOutcome",
    "AuditEvent",
    "AuditSink",
    "NoopAuditSink",
    "InMemoryAuditSink",
    "JsonlAuditSink",
    "CompositeAuditSink",
    "build_audit_event",
]


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One record per intercepted invocation."""

    event_id: str
    timestamp: datetime
    action_id: str
    trace_id: str
    agent_id: str
    tenant_id: str | None
    principal_id: str | None
    environment: Environment
    capability_name: str
    capability_type: CapabilityType
    capability_risk: RiskLevel
    action_type: ActionType
    stage: PolicyStage
    decision: DecisionType
    outcome: AuditOutcome
    reason: str | None = None
    policy_name: str | None = None
    policy_version: str | None = None
    input_summary: str | None = None
    output_summary: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict (deep copies, like ``dataclasses.asdict``), the timestamp as
        an ISO-8601 string (``+00:00``)."""
        data = {}
        for name in _EVENT_FIELDS:
            if name == "timestamp":
                data[name] = self.timestamp.isoformat()
                continue
            value = getattr(self, name)
            data[name] = value if type(value) in _ATOMIC else _asdict_value(value)
        return data

    def to_json(self) -> str:
        """One JSON object, keys sorted, ``str()`` for anything JSON cannot encode."""
        return json.dumps(self.to_dict(), sort_keys=True, default=str)


_new_event = _fast_constructor(AuditEvent)
_EVENT_FIELDS = tuple(f.name for f in dataclasses.fields(AuditEvent))
_ATOMIC = frozenset({str, int, float, bool, type(None)})


def _asdict_value(obj: Any) -> Any:
    """What ``dataclasses.asdict`` makes of a field value (with a fast path for plain JSON
    scalars, which it would return unchanged)."""
    if type(obj) in _ATOMIC:
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _asdict_value(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*[_asdict_value(v) for v in obj])
    if isinstance(obj, (list, tuple)):
        return type(obj)(_asdict_value(v) for v in obj)
    if isinstance(obj, dict):
        return type(obj)((_asdict_value(k), _asdict_value(v)) for k, v in obj.items())
    return copy.deepcopy(obj)


def build_audit_event(
    action: AgentAction,
    decision: Decision,
    stage: PolicyStage,
    outcome: AuditOutcome,
    output_summary: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> AuditEvent:
    """The audit event of ``action`` decided by ``decision``: labels copied, metadata = the
    action's merged with ``metadata`` (which wins)."""
    capability = action.capability
    merged = dict(action.metadata)
    if metadata:
        merged.update(metadata)
    return _new_event(
        new_id("evt"),
        utc_now(),
        action.action_id,
        action.trace_id,
        action.agent_id,
        action.tenant_id,
        action.principal_id,
        action.environment,
        capability.name,
        capability.type,
        capability.risk,
        action.action_type,
        stage,
        decision.type,
        outcome,
        decision.reason,
        decision.policy_name,
        decision.policy_version,
        action.input_summary,
        output_summary if output_summary is not None else action.output_summary,
        dict(action.labels),
        merged,
    )


class AuditSink:
    """Where audit events go. Subclasses implement :meth:`emit`."""

    def emit(self, event: AuditEvent) -> None:
        raise NotImplementedError


class NoopAuditSink(AuditSink):
    """Drops every event (the runtime's default)."""

    def emit(self, event: AuditEvent) -> None:
        return None


class InMemoryAuditSink(AuditSink):
    """Keeps every event in the public ``events`` list."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    def emit(self, event: AuditEvent) -> None:
        self.events.append(event)


class JsonlAuditSink(AuditSink):
    """Appends one JSON line per event to ``path`` (parent directories created on each emit;
    no buffering, locking or rotation)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def emit(self, event: AuditEvent) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(event.to_json() + "\n")


class CompositeAuditSink(AuditSink):
    """Emits to each sink in order; a failing sink's exception propagates and stops the
    rest."""

    def __init__(self, sinks: Iterable[AuditSink]) -> None:
        self.sinks = tuple(sinks)

    def emit(self, event: AuditEvent) -> None:
        for sink in self.sinks:
            sink.emit(event)
