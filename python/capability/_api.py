"""The package's API over the engine: the native names and :class:`Host` with its async
variants. Loaded on first use by ``capability/__init__.py``."""

from __future__ import annotations

import asyncio
import functools
import inspect
import tempfile
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

Outcome = Completed | NeedsApproval | Failed


class Host(_native.Host):
    """The governed runtime in this process (see ``_native.pyi`` for every method)."""

    __module__ = "capability"

    def __new__(cls, home=None, *args: Any, memory: bool = False, **kw: Any):
        # A memory-only host without a home gets a private one for its signing key, removed
        # with the host: it writes nothing to the user's capability home.
        scratch = None
        if memory and home is None:
            scratch = tempfile.TemporaryDirectory(prefix="capability-memory-")
            home = scratch.name
        host = super().__new__(cls, home, *args, memory=memory, **kw)
        if scratch is not None:
            host._scratch = scratch
        return host

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
