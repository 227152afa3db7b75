"""The in-memory capability registry, keyed by name, in insertion order."""

from __future__ import annotations

from collections.abc import Iterable

from .primitives import Capability, CapabilityType, Environment

__all__ = ["CapabilityNotFoundError", "CapabilityRegistry"]


class CapabilityNotFoundError(KeyError):
    """No capability of that name is registered."""


class CapabilityRegistry:
    """Capabilities by name. Registering a name again silently replaces it."""

    def __init__(self, capabilities: Iterable[Capability] | None = None) -> None:
        self._capabilities: dict[str, Capability] = {}
        if capabilities is not None:
            for capability in capabilities:
                self.register(capability)

    def register(self, capability: Capability) -> Capability:
        self._capabilities[capability.name] = capability
        return capability

    def get(self, name: str) -> Capability | None:
        return self._capabilities.get(name)

    def exists(self, name: str) -> bool:
        return name in self._capabilities

    def require(self, name: str) -> Capability:
        capability = self._capabilities.get(name)
        if capability is None:
            raise CapabilityNotFoundError(f"Capability '{name}' is not registered.")
        return capability

    def list(
        self,
        type: CapabilityType | None = None,
        tenant_id: str | None = None,
        environment: Environment | None = None,
    ) -> tuple[Capability, ...]:
        """The capabilities matching every given filter (``None``: no filter)."""
        return tuple(
            c
            for c in self._capabilities.values()
            if (type is None or c.type == type)
            and (tenant_id is None or c.tenant_id == tenant_id)
            and (environment is None or c.environment == environment)
        )

    def unregister(self, name: str) -> Capability | None:
        return self._capabilities.pop(name, None)
