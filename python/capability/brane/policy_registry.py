"""Policy decorators: ``before_capability`` and ``after_capability``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .policy_engine import PolicyEngine
from .primitives import Policy, PolicyStage

__all__ = ["PolicyRegistry"]

F = TypeVar("F", bound=Callable[..., Any])


class PolicyRegistry:
    """Registers decorated policy functions in an engine; the decorators return the original
    function unchanged (so a policy stays directly callable)."""

    def __init__(self, engine: PolicyEngine) -> None:
        self.engine = engine

    def register(self, policy: Policy) -> Policy:
        return self.engine.register(policy)

    def _decorator(
        self,
        stage: PolicyStage,
        target: str,
        name: str | None,
        version: str | None,
        description: str | None,
        priority: int,
        enabled: bool,
        source: str | None,
    ) -> Callable[[F], F]:
        def decorator(function: F) -> F:
            self.engine.register(
                Policy(
                    target=target,
                    stage=stage,
                    function=function,
                    name=name,
                    version=version,
                    description=description,
                    priority=priority,
                    enabled=enabled,
                    source=source,
                )
            )
            return function

        return decorator

    def before_capability(
        self,
        target: str,
        *,
        name: str | None = None,
        version: str | None = None,
        description: str | None = None,
        priority: int = 0,
        enabled: bool = True,
        source: str | None = None,
    ) -> Callable[[F], F]:
        return self._decorator(
            "before_capability", target, name, version, description, priority, enabled, source
        )

    def after_capability(
        self,
        target: str,
        *,
        name: str | None = None,
        version: str | None = None,
        description: str | None = None,
        priority: int = 0,
        enabled: bool = True,
        source: str | None = None,
    ) -> Callable[[F], F]:
        return self._decorator(
            "after_capability", target, name, version, description, priority, enabled, source
        )
