"""Helpers of the capability.brane tests."""

from __future__ import annotations

import capability.brane as brane


def make_action(
    name: str = "tool_a",
    *,
    risk: str = "low",
    input: dict | None = None,
    environment: str = "dev",
    tenant_id: str | None = None,
    scopes: tuple = (),
) -> brane.AgentAction:
    capability = brane.Capability(name=name, type="tool", risk=risk, scopes=scopes)
    return brane.AgentAction(
        action_type="tool_call",
        capability=capability,
        agent_id="agent-1",
        tenant_id=tenant_id,
        input=input or {},
        environment=environment,
    )
