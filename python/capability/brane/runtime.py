"""The runtime: capabilities, policies, audit, and the decorator that governs functions.

Beside brane-core's behaviour, two keyword-only arguments connect the Rust engine
(``capability._native``, imported only when one of them is given):

* ``host``: a native ``Host``; every audit event is also appended to its hash-chained log
  (``host.record(event.to_dict())``, after the Brane sink).
* ``cedar``: Cedar policy file(s) (or directories). An in-memory native host loaded with them
  is asked at every before/after evaluation; its decision is appended after the Python
  policies' decisions, then Brane composes them (first deny wins, else the last). When
  ``host`` is not given, that in-memory host is also the one that records the audit events.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .audit import AuditEvent, AuditSink, JsonlAuditSink, NoopAuditSink, build_audit_event
from .capability_registry import CapabilityRegistry
from .interception import CallableCapabilityInterceptor, CapabilityInterceptor
from .policy_engine import PolicyEngine
from .policy_registry import PolicyRegistry
from .primitives import (
    ActionType,
    AgentAction,
    AuditOutcome,
    Capability,
    CapabilityType,
    Decision,
    Effect,
    Environment,
    InterceptRequest,
    PolicyStage,
    RiskLevel,
    Scope,
    SideEffect,
    _new_action,
    new_id,
    utc_now,
)

__all__ = ["Runtime"]

F = TypeVar("F", bound=Callable[..., Any])


class Runtime:
    """One agent's governed runtime. ``agent_id`` is required; everything is keyword-only."""

    def __init__(
        self,
        *,
        agent_id: str,
        environment: Environment = "dev",
        tenant_id: str | None = None,
        principal_id: str | None = None,
        capabilities: CapabilityRegistry | None = None,
        policies: PolicyEngine | None = None,
        audit: AuditSink | None = None,
        audit_path: str | os.PathLike[str] | None = None,
        host: Any = None,
        cedar: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.environment = environment
        self.tenant_id = tenant_id
        self.principal_id = principal_id
        self.capabilities = capabilities if capabilities is not None else CapabilityRegistry()
        self.policies = policies if policies is not None else PolicyEngine()
        if audit is not None:
            self.audit: AuditSink = audit
        elif audit_path is not None:
            self.audit = JsonlAuditSink(audit_path)
        else:
            self.audit = NoopAuditSink()
        self.policy = PolicyRegistry(self.policies)
        self.interceptor = CapabilityInterceptor(self)
        self.callables = CallableCapabilityInterceptor(self.interceptor)
        self.host = host
        self.cedar: tuple[str, ...] | None = None
        self._cedar_host: Any = None
        self._cedar_registered: dict[str, Capability] = {}
        if cedar is not None:
            self.cedar = tuple(
                os.fspath(p)
                for p in ([cedar] if isinstance(cedar, (str, os.PathLike)) else cedar)
            )
            from capability import Host  # a memory host with a scratch home of its own

            self._cedar_host = Host(
                memory=True,
                policies=list(self.cedar),
                agent=agent_id,
                tenant=tenant_id,
                environment=environment,
            )
            if self.host is None:
                self.host = self._cedar_host
            for capability in self.capabilities.list():
                self._cedar_register(capability)
        # Audit events are only built when someone can see them.
        self._plain_emit = type(self).emit_audit is Runtime.emit_audit

    # --- capabilities ---------------------------------------------------------------------

    def register_capability(self, capability: Capability) -> Capability:
        registered = self.capabilities.register(capability)
        if self._cedar_host is not None:
            self._cedar_register(capability)
        return registered

    def capability(
        self,
        name: str | None = None,
        *,
        type: CapabilityType,
        tenant_id: str | None = None,
        risk: RiskLevel = "low",
        effect: Effect | None = None,
        side_effects: Sequence[SideEffect] = (),
        scopes: Sequence[Scope] = (),
        owner: str | None = None,
        environment: Environment | None = None,
        description: str | None = None,
        input_schema: dict[str, Any] | None = None,
        output_schema: dict[str, Any] | None = None,
        data_namespace: str | None = None,
        metadata: dict[str, Any] | None = None,
        action_type: ActionType = "tool_call",
    ) -> Callable[[F], F]:
        """Decorator: declares the function as a capability and governs every call."""

        def decorator(function: F) -> F:
            return self._declare(
                function,
                "decorator",
                name,
                type,
                tenant_id,
                risk,
                effect,
                side_effects,
                scopes,
                owner,
                environment,
                description,
                input_schema,
                output_schema,
                data_namespace,
                metadata,
                action_type,
            )

        return decorator

    def wrap_capability(
        self,
        function: F,
        name: str | None = None,
        *,
        type: CapabilityType,
        tenant_id: str | None = None,
        risk: RiskLevel = "low",
        effect: Effect | None = None,
        side_effects: Sequence[SideEffect] = (),
        scopes: Sequence[Scope] = (),
        owner: str | None = None,
        environment: Environment | None = None,
        description: str | None = None,
        input_schema: dict[str, Any] | None = None,
        output_schema: dict[str, Any] | None = None,
        data_namespace: str | None = None,
        metadata: dict[str, Any] | None = None,
        action_type: ActionType = "tool_call",
    ) -> F:
        """Like :meth:`capability`, for an existing function (tagged ``wrapper``)."""
        return self._declare(
            function,
            "wrapper",
            name,
            type,
            tenant_id,
            risk,
            effect,
            side_effects,
            scopes,
            owner,
            environment,
            description,
            input_schema,
            output_schema,
            data_namespace,
            metadata,
            action_type,
        )

    def _declare(
        self,
        function: Any,
        declaration: str,
        name: str | None,
        type: CapabilityType,
        tenant_id: str | None,
        risk: RiskLevel,
        effect: Effect | None,
        side_effects: Sequence[SideEffect],
        scopes: Sequence[Scope],
        owner: str | None,
        environment: Environment | None,
        description: str | None,
        input_schema: dict[str, Any] | None,
        output_schema: dict[str, Any] | None,
        data_namespace: str | None,
        metadata: dict[str, Any] | None,
        action_type: ActionType,
    ) -> Any:
        capability = Capability(
            name=name or function.__name__,
            type=type,
            tenant_id=tenant_id if tenant_id is not None else self.tenant_id,
            risk=risk,
            effect=effect,
            side_effects=side_effects,
            scopes=scopes,
            owner=owner,
            environment=environment or self.environment,
            description=description,
            input_schema=input_schema,
            output_schema=output_schema,
            data_namespace=data_namespace,
            metadata=metadata or {},
        )
        self.register_capability(capability)
        wrapper = self.callables.wrap(
            function,
            capability_name=capability.name,
            action_type=action_type,
            metadata={"interceptor": "callable", "declaration": declaration},
        )
        wrapper.__brane_capability__ = capability
        wrapper.__brane_original__ = function
        return wrapper

    # --- policies -------------------------------------------------------------------------

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
        return self.policy.before_capability(
            target,
            name=name,
            version=version,
            description=description,
            priority=priority,
            enabled=enabled,
            source=source,
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
        return self.policy.after_capability(
            target,
            name=name,
            version=version,
            description=description,
            priority=priority,
            enabled=enabled,
            source=source,
        )

    # --- actions and evaluation -------------------------------------------------------------

    def create_action(
        self,
        *,
        action_type: ActionType,
        capability_name: str,
        input: dict[str, Any] | None = None,
        agent_id: str | None = None,
        tenant_id: str | None = None,
        environment: Environment | None = None,
        principal_id: str | None = None,
        parent_action_id: str | None = None,
        input_summary: str | None = None,
        cost_so_far_usd: float = 0.0,
        estimated_cost_usd: float | None = None,
        latency_so_far_ms: int | None = None,
        labels: dict[str, str] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> AgentAction:
        """A fresh action (new ids and timestamp) for a registered capability; unknown
        names raise CapabilityNotFoundError."""
        return AgentAction(
            action_type=action_type,
            capability=self.capabilities.require(capability_name),
            agent_id=agent_id or self.agent_id,
            tenant_id=tenant_id if tenant_id is not None else self.tenant_id,
            input=input or {},
            parent_action_id=parent_action_id,
            environment=environment or self.environment,
            principal_id=principal_id if principal_id is not None else self.principal_id,
            input_summary=input_summary,
            cost_so_far_usd=cost_so_far_usd,
            estimated_cost_usd=estimated_cost_usd,
            latency_so_far_ms=latency_so_far_ms,
            labels=labels or {},
            metadata=metadata or {},
        )

    def _action_for(self, request: InterceptRequest) -> AgentAction:
        """:meth:`create_action` for an intercept request."""
        tenant_id = request.tenant_id
        principal_id = request.principal_id
        return _new_action(
            request.action_type,
            self.capabilities.require(request.capability_name),
            request.agent_id or self.agent_id,
            tenant_id if tenant_id is not None else self.tenant_id,
            request.input or {},
            new_id("act"),
            new_id("tr"),
            request.parent_action_id,
            utc_now(),
            request.environment or self.environment,
            principal_id if principal_id is not None else self.principal_id,
            None,
            request.input_summary,
            None,
            request.cost_so_far_usd,
            request.estimated_cost_usd,
            request.latency_so_far_ms,
            request.labels or {},
            request.metadata or {},
        )

    def _decorated_action(
        self,
        capability_name: str,
        action_type: ActionType,
        data: dict[str, Any],
        metadata: dict[str, Any],
    ) -> AgentAction:
        """:meth:`_action_for` of the request a decorated call makes (every other field at
        its default)."""
        return _new_action(
            action_type,
            self.capabilities.require(capability_name),
            self.agent_id,
            self.tenant_id,
            data or {},
            new_id("act"),
            new_id("tr"),
            None,
            utc_now(),
            self.environment,
            self.principal_id,
            None,
            None,
            None,
            0.0,
            None,
            None,
            {},
            metadata or {},
        )

    def evaluate_action(
        self,
        action: AgentAction,
        *,
        stage: PolicyStage,
        args: dict[str, Any] | None = None,
        output: Any = None,
        runtime_metadata: dict[str, Any] | None = None,
    ) -> Decision:
        """The composed decision of the policies matching ``action`` at ``stage`` (no audit,
        no execution)."""
        if self._cedar_host is None:
            return self.policies.evaluate(action, stage, args, output, runtime_metadata)
        decisions = self.policies._decisions(action, stage, args, output, runtime_metadata)
        decisions.append(self._cedar_decision(action, stage, args or action.input, output))
        return self.policies.compose(decisions, action)

    def evaluate(
        self,
        *,
        action_type: ActionType,
        capability_name: str,
        stage: PolicyStage,
        input: dict[str, Any] | None = None,
        **create_action_kwargs: Any,
    ) -> Decision:
        """Creates an action and evaluates it (no audit, no execution)."""
        action = self.create_action(
            action_type=action_type,
            capability_name=capability_name,
            input=input,
            **create_action_kwargs,
        )
        return self.evaluate_action(action, stage=stage)

    # --- audit ----------------------------------------------------------------------------

    def emit_audit(self, event: AuditEvent) -> None:
        """Emits to the audit sink, then appends to the native host's log when there is
        one."""
        self.audit.emit(event)
        host = self.host
        if host is not None:
            _call_json(host.record, event.to_dict())

    def _emit(
        self,
        action: AgentAction,
        decision: Decision,
        stage: PolicyStage,
        outcome: AuditOutcome,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if self.host is None and type(self.audit) is NoopAuditSink and self._plain_emit:
            return  # nobody would see the event
        self.emit_audit(build_audit_event(action, decision, stage, outcome, metadata=metadata))

    # --- the Cedar engine -------------------------------------------------------------------

    def _cedar_register(self, capability: Capability) -> None:
        effect = capability.effect
        self._cedar_host.register(
            capability.name,
            capability.type,
            risk=capability.risk,
            tenant=capability.tenant_id,
            environment=capability.environment,
            owner=capability.owner,
            data_namespace=capability.data_namespace,
            description=capability.description,
            scopes=[scope.name for scope in capability.scopes],
            effect=effect.type if effect is not None else None,
            side_effects=[side_effect.type for side_effect in capability.side_effects],
            input_schema=capability.input_schema,
            output_schema=capability.output_schema,
        )
        self._cedar_registered[capability.name] = capability

    def _cedar_decision(
        self, action: AgentAction, stage: PolicyStage, data: dict[str, Any], output: Any = None
    ) -> Decision:
        """The Cedar host's decision as a Brane decision (after execution, Cedar policies
        read the output as ``context.output``)."""
        capability = action.capability
        if self._cedar_registered.get(capability.name) is not capability:
            self._cedar_register(capability)
        kwargs: dict[str, Any] = {
            "stage": stage,
            "action_type": action.action_type,
            "agent": action.agent_id,
            "tenant": action.tenant_id,
            "environment": action.environment,
            "principal": action.principal_id,
        }
        if action.labels:
            kwargs["labels"] = action.labels
        if action.metadata:
            kwargs["metadata"] = action.metadata
        if output is not None:
            kwargs["output"] = output
        native = _call_json(self._cedar_host.evaluate, capability.name, data, **kwargs)
        code = native.code
        return Decision(
            native.type,
            native.reason,
            policy_name=native.policy_name,
            policy_version=native.policy_version,
            metadata={"code": code} if code is not None else {},
        )


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON (``str()`` for anything JSON cannot encode, like the audit's
    JSON lines)."""
    return json.loads(json.dumps(value, default=str))


def _call_json(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Calls a native method; when it refuses a value that is not plain JSON (an object in
    a capability's input, say), calls it again with the values made JSON-able."""
    try:
        return function(*args, **kwargs)
    except TypeError:  # the native conversion's "object is not JSON"
        converted_args = [_jsonable(a) for a in args]
        converted_kwargs = {k: _jsonable(v) for k, v in kwargs.items()}
        return function(*converted_args, **converted_kwargs)
