"""``governed``: any Python function (sync or async) as a governed capability of a Host."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from . import _host

_REFUSED_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "positional-only",
    inspect.Parameter.VAR_POSITIONAL: "*args",
}


def governed(
    host: Any,
    name: str | None = None,
    *,
    type: str = "tool",
    risk: str = "low",
    action_type: str = "tool_call",
    **declaration: Any,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a function so that every call of it is decided by ``host``.

    The capability ``name`` (default: the function's ``__name__``) is registered with
    ``host.register(name, type, risk=risk, **declaration)`` when the function is decorated
    (``description`` defaults to the docstring). A call binds its arguments to the signature,
    defaults applied, into the input dict (``**kwargs`` are merged into it by name) and runs
    ``host.intercept(name, run, input, action_type=action_type)`` -- ``intercept_async`` for a
    coroutine function -- where ``run(input)`` calls the function with the input the policies
    let through as keyword arguments. A denial raises ``capability.Denied`` and the function is
    not called; an approval requirement raises ``capability.ApprovalRequired``; retry with
    ``f.with_options(approval_token=token)(...)`` once approved. ``f.with_options(**kw)`` passes
    any other ``intercept`` keyword (``agent``, ``principal``, ``scopes``, ``labels``, ...).

    Arguments must be JSON values (the host's policies see them). Refused with ``TypeError``:
    functions with positional-only parameters or ``*args`` (they cannot be called by name, so
    the input the policies saw could not be what the function gets), and anything that is not
    a native ``capability.Host``. Decorate plain functions, not methods (``self`` is no JSON).

    A sync function is also registered as the ``function`` a ``route`` decision to this
    capability calls (unless ``declaration`` gives one); a coroutine function cannot be a route
    target (the host calls a route's function synchronously).
    """
    _host.check_host(host, "governed")
    if name is not None and not (isinstance(name, str) and name):
        raise TypeError(f"governed: the capability name must be a non-empty string, got {name!r}")

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(function):
            raise TypeError(f"governed: {function!r} is not callable")
        if isinstance(function, (staticmethod, classmethod)):
            raise TypeError("governed: apply @governed to the function itself, under @staticmethod/@classmethod")
        signature = inspect.signature(function)
        for parameter in signature.parameters.values():
            if parameter.kind in _REFUSED_KINDS:
                raise TypeError(
                    f"governed: {function.__qualname__} has a {_REFUSED_KINDS[parameter.kind]} parameter "
                    f"({parameter}); the governed input is passed by name, so every parameter must be "
                    "nameable"
                )
        var_keyword = next(
            (p.name for p in signature.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD),
            None,
        )
        capability = name or function.__name__
        is_async = inspect.iscoroutinefunction(function)
        decl = dict(declaration)
        if decl.get("description") is None and function.__doc__:
            decl["description"] = inspect.cleandoc(function.__doc__)
        if not is_async:
            decl.setdefault("function", lambda input: function(**input))
        _host.register(host, capability, type, risk=risk, **decl)

        def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            input = dict(bound.arguments)
            if var_keyword is not None:
                extra = input.pop(var_keyword, {})
                clash = extra.keys() & input.keys()
                if clash:  # unreachable through bind; kept so that no key is ever lost silently
                    raise TypeError(f"{capability}: duplicate arguments {sorted(clash)}")
                input.update(extra)
            return input

        if is_async:

            async def run_async(input: dict[str, Any]) -> Any:
                return await function(**input)

            def make_async(options: dict[str, Any]) -> Callable[..., Any]:
                @functools.wraps(function)
                async def call(*args: Any, **kwargs: Any) -> Any:
                    return await _host.intercept_async(host, capability, run_async, bind(args, kwargs), **options)

                return call

            wrapper = make_async({"action_type": action_type})
            wrapper.with_options = lambda **options: make_async({"action_type": action_type, **options})  # type: ignore[attr-defined]
        else:

            def run(input: dict[str, Any]) -> Any:
                return function(**input)

            def make(options: dict[str, Any]) -> Callable[..., Any]:
                @functools.wraps(function)
                def call(*args: Any, **kwargs: Any) -> Any:
                    return _host.intercept(host, capability, run, bind(args, kwargs), **options)

                return call

            wrapper = make({"action_type": action_type})
            wrapper.with_options = lambda **options: make({"action_type": action_type, **options})  # type: ignore[attr-defined]
        wrapper.capability = capability  # type: ignore[attr-defined]
        return wrapper

    return decorate
