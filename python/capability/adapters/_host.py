"""The one check every adapter makes on the host it is given, and the calls it makes.

An adapter only converts arguments: the decision is always the native ``Host.intercept``. So
the host must be the native engine's ``Host`` (``capability.Host`` is one), and the adapters
call the engine's methods unbound (``_native.Host.intercept(host, ...)``), so that a subclass
cannot put a Python override between a call and the policies. ``intercept_async`` is the
package's (``capability.Host.intercept_async``: the native ``intercept`` in a worker thread),
which calls ``host.intercept``; a host whose ``intercept`` is overridden, on its class or on the
instance, is therefore refused.
"""

from __future__ import annotations

from typing import Any

from .. import Host as PackageHost
from .. import _native

_NATIVE_METHODS = ("register", "intercept")


def check_host(host: Any, adapter: str) -> Any:
    """Return ``host`` if it is the native ``capability.Host``; raise ``TypeError`` otherwise."""
    if not isinstance(host, _native.Host):
        raise TypeError(
            f"{adapter} needs a capability.Host, got {type(host).__module__}.{type(host).__qualname__}: "
            "every call must be decided by the native engine's intercept"
        )
    overridden = [m for m in _NATIVE_METHODS
                  if m in getattr(host, "__dict__", {}) or getattr(type(host), m) is not getattr(_native.Host, m)]
    if "intercept_async" in getattr(host, "__dict__", {}):
        overridden.append("intercept_async")
    if overridden:
        raise TypeError(
            f"{adapter}: {type(host).__qualname__} overrides the engine's {', '.join(overridden)}; "
            "a Python override could let a call skip the policies"
        )
    return host


def register(host: Any, name: str, type: str, **declaration: Any) -> None:
    _native.Host.register(host, name, type, **declaration)


def intercept(host: Any, capability: str, run: Any, input: Any, **kw: Any) -> Any:
    return _native.Host.intercept(host, capability, run, input, **kw)


async def intercept_async(host: Any, capability: str, run: Any, input: Any, **kw: Any) -> Any:
    return await PackageHost.intercept_async(host, capability, run, input, **kw)
