"""capability: the governed runtime in-process.

    from capability import Host, deny, allow
    host = Host(memory=True)
    host.register("refund", "tool", risk="high")
    host.add_policy(lambda ctx: deny("too much") if ctx.arg("amount", 0) > 100 else allow())
    host.intercept("refund", lambda args: f"refunded {args['amount']}", {"amount": 50})

Every decision, approval, receipt and audit event is the Rust host's (``capability._native``);
this package converts arguments and adds the async variants. ``capability.brane`` is a
drop-in for brane-core's API; ``capability.adapters`` governs functions, MCP sessions and
LangChain tools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import ApprovalRequired, CapabilityError, Denied, NotFound

__all__ = [
    "Host", "Completed", "NeedsApproval", "Failed", "Decision", "PolicyContext",
    "allow", "deny", "approval_required", "redact", "transform_input", "transform_output",
    "route", "sandbox", "log_only", "DECISION_TYPES",
    "CapabilityError", "Denied", "ApprovalRequired", "NotFound",
]

if TYPE_CHECKING:
    from ._api import (  # noqa: F401
        DECISION_TYPES, Completed, Decision, Failed, Host, NeedsApproval, Outcome,
        PolicyContext, allow, approval_required, deny, log_only, redact, route, sandbox,
        transform_input, transform_output,
    )


def __getattr__(name: str) -> Any:
    # The engine is loaded on first use, so that `import capability.brane` (plain Brane code)
    # does not load it.
    if name in __all__ or name in ("Outcome", "_native"):
        from . import _api

        value = _api._native if name == "_native" else getattr(_api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'capability' has no attribute {name!r}")
