"""Decision helpers: :func:`allow` and :func:`deny`."""

from __future__ import annotations

from .primitives import Decision, _new_decision, new_id

__all__ = ["allow", "deny"]


def allow(reason: str | None = None) -> Decision:
    """An ``allow`` decision."""
    return _new_decision("allow", reason, new_id("dec"), None, None, None, {}, None, {}, {})


def deny(reason: str, *, code: str | None = None) -> Decision:
    """A ``deny`` decision; ``code``, when given, is kept in ``metadata["code"]``."""
    return _new_decision(
        "deny",
        reason,
        new_id("dec"),
        None,
        None,
        None,
        {},
        None,
        {},
        {"code": code} if code is not None else {},
    )
