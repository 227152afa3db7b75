"""Audit events and sinks (reference §1.12, §1.13)."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
from datetime import datetime, timedelta, timezone

import pytest
from brane_helpers import make_action

from capability.brane import (
    AuditEvent,
    AuditSink,
    CompositeAuditSink,
    InMemoryAuditSink,
    JsonlAuditSink,
    NoopAuditSink,
    allow,
    deny,
)
from capability.brane.audit import build_audit_event

EVENT_KEYS = {
    "event_id", "timestamp", "action_id", "trace_id", "agent_id", "tenant_id", "principal_id",
    "environment", "capability_name", "capability_type", "capability_risk", "action_type",
    "stage", "decision", "outcome", "reason", "policy_name", "policy_version", "input_summary",
    "output_summary", "labels", "metadata",
}


def _action(**kw):
    action = make_action("refund_customer", risk="high", environment="prod", tenant_id="acme",
                         input={"amount": 5})
    return dataclasses.replace(action, principal_id="user-1", labels={"team": "support"},
                               metadata={"source": "test", "k": 1}, input_summary="refund 5",
                               parent_action_id="act_parent", **kw)


def test_build_audit_event_copies_action_and_decision_fields():
    action = _action()
    decision = dataclasses.replace(deny("no", code="limit_code_zz"), policy_name="p", policy_version="1",
                                   action_id=action.action_id)
    event = build_audit_event(action, decision, "before_capability", "denied_before_execution")
    assert re.fullmatch(r"evt_[0-9a-f]{32}", event.event_id)
    assert event.timestamp >= action.timestamp and event.timestamp.utcoffset() == timedelta(0)
    assert (event.action_id, event.trace_id, event.agent_id, event.tenant_id,
            event.principal_id, event.environment) == (
        action.action_id, action.trace_id, "agent-1", "acme", "user-1", "prod")
    assert (event.capability_name, event.capability_type, event.capability_risk,
            event.action_type) == ("refund_customer", "tool", "high", "tool_call")
    assert (event.stage, event.decision, event.outcome, event.reason, event.policy_name,
            event.policy_version) == (
        "before_capability", "deny", "denied_before_execution", "no", "p", "1")
    assert event.input_summary == "refund 5" and event.output_summary is None
    # Not in the event: decision id, the deny code, the parent action, costs.
    assert {f.name for f in dataclasses.fields(AuditEvent)} == EVENT_KEYS
    assert "limit_code_zz" not in event.to_json() and "act_parent" not in event.to_json()


def test_metadata_merge_and_label_copy():
    action = _action()
    event = build_audit_event(action, allow(), "before_capability", "execution_failed",
                              metadata={"k": 2, "error_type": "RuntimeError"})
    assert event.metadata == {"source": "test", "k": 2, "error_type": "RuntimeError"}
    assert action.metadata == {"source": "test", "k": 1}  # not mutated
    assert event.labels == {"team": "support"} and event.labels is not action.labels


def test_output_summary_explicit_or_from_action():
    action = _action().with_output("x", summary="from action")
    assert build_audit_event(action, allow(), "before_capability", "executed").output_summary == "from action"
    explicit = build_audit_event(action, allow(), "before_capability", "executed",
                                 output_summary="explicit")
    assert explicit.output_summary == "explicit"


def test_to_dict_and_sorted_json_with_str_fallback():
    class Opaque:
        def __str__(self):
            return "opaque!"

    event = build_audit_event(_action(), allow(), "before_capability", "executed",
                              metadata={"obj": Opaque(), "nested": {"b": 1, "a": [1, 2]}})
    data = event.to_dict()
    assert list(data) == [f.name for f in dataclasses.fields(AuditEvent)]  # asdict order
    expected = {**dataclasses.asdict(event), "timestamp": event.timestamp.isoformat()}
    assert json.dumps(data, default=str) == json.dumps(expected, default=str)
    assert data["metadata"]["obj"] is not event.metadata["obj"]  # deep-copied, like asdict
    assert isinstance(data["timestamp"], str) and data["timestamp"].endswith("+00:00")
    assert datetime.fromisoformat(data["timestamp"]) == event.timestamp
    assert data["metadata"]["nested"] == {"b": 1, "a": [1, 2]}
    assert data["metadata"]["nested"] is not event.metadata["nested"]  # deep copy
    text = event.to_json()
    keys = list(json.loads(text))
    assert keys == sorted(keys)
    assert text.index('"action_id"') < text.index('"trace_id"')
    assert json.loads(text)["metadata"]["obj"] == "opaque!"
    assert '"nested": {"a": [1, 2], "b": 1}' in text


def test_base_sink_raises_and_noop_drops():
    event = build_audit_event(_action(), allow(), "before_capability", "executed")
    with pytest.raises(NotImplementedError):
        AuditSink().emit(event)
    assert NoopAuditSink().emit(event) is None
    assert isinstance(NoopAuditSink(), AuditSink)


def test_in_memory_sink_keeps_events_in_order():
    sink = InMemoryAuditSink()
    assert sink.events == []
    events = [build_audit_event(_action(), allow(), "before_capability", "executed")
              for _ in range(3)]
    for e in events:
        sink.emit(e)
    assert sink.events == events


def test_jsonl_sink_creates_directories_and_appends(tmp_path):
    path = tmp_path / "a" / "b" / "audit.jsonl"
    sink = JsonlAuditSink(str(path))
    assert isinstance(sink.path, pathlib.Path) and sink.path == path
    first = build_audit_event(_action(), allow(), "before_capability", "executed")
    sink.emit(first)
    sink.emit(build_audit_event(_action(), deny("x"), "before_capability",
                                "denied_before_execution"))
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    assert lines[0] == first.to_json()
    assert json.loads(lines[1])["outcome"] == "denied_before_execution"
    JsonlAuditSink(path).emit(first)  # appends, never truncates
    assert len(path.read_text(encoding="utf-8").splitlines()) == 3


def test_composite_sink_order_and_failure_stops_the_rest():
    order = []

    class Recording(AuditSink):
        def __init__(self, name):
            self.name = name

        def emit(self, event):
            order.append(self.name)

    class Failing(AuditSink):
        def emit(self, event):
            order.append("failing")
            raise OSError("disk full")

    event = build_audit_event(_action(), allow(), "before_capability", "executed")
    CompositeAuditSink([Recording("a"), Recording("b")]).emit(event)
    assert order == ["a", "b"]
    order.clear()
    with pytest.raises(OSError, match="disk full"):
        CompositeAuditSink([Recording("a"), Failing(), Recording("c")]).emit(event)
    assert order == ["a", "failing"]


def test_event_timestamp_is_build_time_not_action_time():
    action = dataclasses.replace(_action(), timestamp=datetime(2020, 1, 1, tzinfo=timezone.utc))
    event = build_audit_event(action, allow(), "before_capability", "executed")
    assert event.timestamp.year >= 2025
