"""Brane's public API on the capability engine: a drop-in for brane-core 0.1.0a2.

Change ``import brane`` to ``import capability.brane as brane`` (and ``from brane.x import y``
to ``from capability.brane.x import y``). The native engine is only imported by a
:class:`Runtime` given ``host=`` or ``cedar=``.
"""

from .audit import (
    AuditEvent,
    AuditSink,
    CompositeAuditSink,
    InMemoryAuditSink,
    JsonlAuditSink,
    NoopAuditSink,
)
from .capability_registry import CapabilityNotFoundError, CapabilityRegistry
from .decisions import allow, deny
from .interception import (
    CallableCapabilityInterceptor,
    CapabilityDeniedError,
    CapabilityInterceptor,
)
from .policy_engine import PolicyEngine
from .policy_registry import PolicyRegistry
from .primitives import (
    AgentAction,
    Capability,
    Decision,
    Effect,
    InterceptRequest,
    InterceptResult,
    Policy,
    PolicyContext,
    Scope,
    SideEffect,
)
from .runtime import Runtime

__all__ = [
    "AgentAction",
    "AuditEvent",
    "AuditSink",
    "CallableCapabilityInterceptor",
    "Capability",
    "CapabilityDeniedError",
    "CapabilityInterceptor",
    "CapabilityNotFoundError",
    "CapabilityRegistry",
    "CompositeAuditSink",
    "Decision",
    "Effect",
    "InMemoryAuditSink",
    "InterceptRequest",
    "InterceptResult",
    "JsonlAuditSink",
    "NoopAuditSink",
    "Policy",
    "PolicyContext",
    "PolicyEngine",
    "PolicyRegistry",
    "Runtime",
    "Scope",
    "SideEffect",
    "allow",
    "deny",
]
