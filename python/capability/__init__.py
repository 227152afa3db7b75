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

import asyncio
import functools
import inspect
from typing import Any

from . import _native
from ._native import (
    DECISION_TYPES,
    Completed,
    Decision,
    Failed,
    NeedsApproval,
    PolicyContext,
    allow,
    approval_required,
    deny,
    log_only,
    redact,
    route,
    sandbox,
    transform_input,
    transform_output,
)
from .errors import ApprovalRequired, CapabilityError, Denied, NotFound

__all__ = [
    "Host", "Completed", "NeedsApproval", "Failed", "Decision", "PolicyContext",
    "allow", "deny", "approval_required", "redact", "transform_input", "transform_output",
    "route", "sandbox", "log_only", "DECISION_TYPES",
    "CapabilityError", "Denied", "ApprovalRequired", "NotFound",
]

Outcome = Completed | NeedsApproval | Failed


class Host(_native.Host):
    """The governed runtime in this process (see ``_native.pyi`` for every method)."""

    def policy(self, stage: str = "before_capability", target: str = "*", **kw: Any):
        """Decorator form of :meth:`add_policy`; returns the function unchanged."""

        def register(function):
            self.add_policy(function, stage=stage, target=target, **kw)
            return function

        return register

    async def invoke_async(self, capability: str, input: dict | None = None, **kw: Any) -> Outcome:
        """:meth:`invoke` in a worker thread (the GIL is released while it runs)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            None, functools.partial(self.invoke, capability, input, **kw))

    async def resume_async(self, capability: str, input: dict | None, token: str,
                           **kw: Any) -> Outcome:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            None, functools.partial(self.resume, capability, input, token, **kw))

    async def intercept_async(self, capability: str, run, input: dict | None = None,
                              **kw: Any) -> Any:
        """:meth:`intercept` for an async (or sync) ``run``: the policies run in a worker
        thread, ``run`` on this event loop, which is never blocked."""
        loop = asyncio.get_running_loop()
        if not (inspect.iscoroutinefunction(run) or _returns_awaitable(run)):
            return await loop.run_in_executor(
                None, functools.partial(self.intercept, capability, run, input, **kw))

        def execute(args):
            return asyncio.run_coroutine_threadsafe(_awaited(run, args), loop).result()

        return await loop.run_in_executor(
            None, functools.partial(self.intercept, capability, execute, input, **kw))


def _returns_awaitable(run) -> bool:
    call = getattr(run, "__call__", None)
    return call is not None and inspect.iscoroutinefunction(call)


async def _awaited(run, args):
    value = run(args)
    if inspect.isawaitable(value):
        value = await value
    return value
