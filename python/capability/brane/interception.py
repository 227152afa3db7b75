"""Interception: the before/execute/after flow, and the wrapper of plain callables."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .primitives import (
    ActionType,
    AgentAction,
    Decision,
    InterceptRequest,
    InterceptResult,
    _new_decision,
    _new_result,
    new_id,
)

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = ["CapabilityDeniedError", "CapabilityInterceptor", "CallableCapabilityInterceptor"]


class CapabilityDeniedError(Exception):
    """A policy denied the invocation. The message is the decision's reason (or a generic
    sentence when it has none); for an after-stage denial ``action`` carries the output."""

    def __init__(self, action: AgentAction, decision: Decision) -> None:
        self.action = action
        self.decision = decision
        super().__init__(decision.reason or "Capability invocation denied.")

    @property
    def reason(self) -> str | None:
        return self.decision.reason

    @property
    def action_id(self) -> str:
        return self.action.action_id

    @property
    def policy_name(self) -> str | None:
        return self.decision.policy_name

    @property
    def policy_version(self) -> str | None:
        return self.decision.policy_version


class CapabilityInterceptor:
    """Runs one :class:`InterceptRequest`. The request's stage selects one policy stage:
    ``before_capability`` evaluates before policies then executes; ``after_capability``
    executes then evaluates after policies; any other stage executes with no policy. One
    audit event per call."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def intercept(self, request: InterceptRequest) -> InterceptResult:
        action = self.runtime._action_for(request)
        return self._run(
            action, request.stage, request.input, request.metadata, request.execute, True
        )

    def _run(
        self,
        action: AgentAction,
        stage: str,
        data: dict[str, Any],
        metadata: dict[str, Any],
        execute: Callable[[], Any],
        want_result: bool,
    ) -> Any:
        """The flow of one request. ``want_result=False`` (decorated calls, which only keep
        the output, at ``before_capability``) returns the output and skips building the
        result and the action-with-output (the audit event is the same: the output is not
        in it and the output summary is None either way)."""
        runtime = self.runtime
        before_decision = None
        if stage == "before_capability":
            before_decision = runtime.evaluate_action(
                action, stage=stage, args=data, runtime_metadata=metadata
            )
            if before_decision.type == "deny":
                runtime._emit(action, before_decision, stage, "denied_before_execution")
                raise CapabilityDeniedError(action, before_decision)
        try:
            output = execute()
        except Exception as exc:
            runtime._emit(
                action,
                before_decision if before_decision is not None else _synthetic_allow(action),
                stage,
                "execution_failed",
                {"error_type": type(exc).__name__, "error_message": str(exc)},
            )
            raise
        if not want_result and stage == "before_capability":
            runtime._emit(action, before_decision, stage, "executed")
            return output
        after_action = action.with_output(output)
        after_decision = None
        if stage == "after_capability":
            after_decision = runtime.evaluate_action(
                after_action, stage=stage, args=data, output=output, runtime_metadata=metadata
            )
            if after_decision.type == "deny":
                runtime._emit(after_action, after_decision, stage, "denied_after_execution")
                raise CapabilityDeniedError(after_action, after_decision)
        runtime._emit(
            after_action,
            after_decision
            if after_decision is not None
            else before_decision
            if before_decision is not None
            else _synthetic_allow(action),
            stage,
            "executed",
        )
        result = _new_result(action, before_decision, output, after_action, after_decision)
        return result if want_result else output


def _synthetic_allow(action: AgentAction) -> Decision:
    return _new_decision("allow", None, new_id("dec"), action.action_id, None, None, {}, None, {}, {})


_EMPTY = inspect.Parameter.empty
_POSITIONAL_OR_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD
_KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY


def _binder(function: Callable[..., Any]) -> Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]]:
    """``bind(args, kwargs)`` -> the input dict: the arguments bound to ``function``'s
    signature with defaults applied, in parameter order (``*args`` a tuple and ``**kwargs``
    a dict under their names). A call the signature refuses raises its TypeError.

    Signatures without ``/``, ``*args`` or ``**kwargs`` bind without ``inspect`` (the slow
    ``Signature.bind`` only runs to produce the exact error, or for the other signatures)."""
    signature = inspect.signature(function)

    def slow(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.arguments

    params = list(signature.parameters.values())
    if any(p.kind not in (_POSITIONAL_OR_KEYWORD, _KEYWORD_ONLY) for p in params):
        return slow
    names = tuple(p.name for p in params)
    defaults = tuple(p.default for p in params)
    positional = sum(1 for p in params if p.kind is _POSITIONAL_OR_KEYWORD)
    count = len(names)

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        given = len(args)
        if given > positional:
            return slow(args, kwargs)
        if not kwargs:
            if given == count:
                return dict(zip(names, args))
            bound = dict(zip(names, args))
            for i in range(given, count):
                default = defaults[i]
                if default is _EMPTY:
                    return slow(args, kwargs)
                bound[names[i]] = default
            return bound
        bound = dict(zip(names, args))
        used = 0
        for i in range(given, count):
            name = names[i]
            if name in kwargs:
                bound[name] = kwargs[name]
                used += 1
            else:
                default = defaults[i]
                if default is _EMPTY:
                    return slow(args, kwargs)
                bound[name] = default
        if used != len(kwargs):  # an unknown name, or one already given positionally
            return slow(args, kwargs)
        return bound

    return bind


class CallableCapabilityInterceptor:
    """Wraps plain callables so that every call goes through a :class:`CapabilityInterceptor`."""

    def __init__(self, interceptor: CapabilityInterceptor) -> None:
        self.interceptor = interceptor

    def wrap(
        self,
        function: Callable[..., Any],
        *,
        capability_name: str,
        action_type: ActionType = "tool_call",
        metadata: dict[str, Any] | None = None,
    ) -> Callable[..., Any]:
        """An enforcing wrapper: binds the call's arguments (defaults applied) into the
        action input, intercepts at ``before_capability`` and returns the output. Name,
        docstring, annotations and signature are preserved."""
        bind = _binder(function)
        tags = {"interceptor": "callable", **(metadata or {})}
        interceptor = self.interceptor

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            data = bind(args, kwargs)
            if type(interceptor) is CapabilityInterceptor:
                # The same flow as intercept(InterceptRequest(...)).output, without the
                # request and result objects nobody sees.
                request_metadata = dict(tags)
                action = interceptor.runtime._decorated_action(
                    capability_name, action_type, data, request_metadata
                )
                return interceptor._run(
                    action,
                    "before_capability",
                    data,
                    request_metadata,
                    lambda: function(*args, **kwargs),
                    False,
                )
            request = InterceptRequest(
                capability_name,
                action_type,
                data,
                lambda: function(*args, **kwargs),
                metadata=dict(tags),
            )
            return interceptor.intercept(request).output

        return wrapper
