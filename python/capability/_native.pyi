"""The Rust engine (``capability._native``), re-exported by :mod:`capability`.

A thin surface over ``capability-host``: every decision, approval, receipt and audit event is
the host's. Python code only converts arguments; nothing here decides anything itself.
"""

from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from typing import Any

JSON = Any

# The exceptions are in :mod:`capability.errors` (CapabilityError with ``code``, Denied,
# ApprovalRequired, NotFound); the engine raises them.

class Decision:
    """A policy's answer. Build one with :func:`allow`, :func:`deny`, ... ."""

    type: str
    reason: str | None
    code: str | None
    policy_name: str | None
    policy_version: str | None
    allowed: bool
    denied: bool
    requires_approval: bool
    def to_dict(self) -> dict[str, JSON]: ...

def allow(reason: str | None = None) -> Decision: ...
def deny(reason: str, *, code: str | None = None) -> Decision: ...
def approval_required(reason: str) -> Decision: ...
def redact(*pointers: str, reason: str | None = None) -> Decision:
    """JSON pointers (``/card/number``, ``/rows/*/ssn``) masked with ``"[REDACTED]"``."""

def transform_input(
    set: Mapping[str, JSON] | None = None, *, patch: Sequence[Mapping[str, JSON]] | None = None,
    reason: str | None = None,
) -> Decision:
    """Change the input before the call: ``set`` replaces top-level keys, ``patch`` is RFC 6902
    (``add``/``replace``/``remove``)."""

def transform_output(
    set: Mapping[str, JSON] | None = None, *, patch: Sequence[Mapping[str, JSON]] | None = None,
    reason: str | None = None,
) -> Decision: ...
def route(capability: str, reason: str | None = None) -> Decision:
    """Use another registered capability instead (it is authorized again)."""

def sandbox(
    tier: str = "process", *, network: bool = False, timeout_ms: int | None = None,
    memory_mb: int | None = None, reason: str | None = None,
) -> Decision: ...
def log_only(reason: str) -> Decision: ...

DECISION_TYPES: list[str]

class PolicyContext:
    """What a Python policy sees (read-only)."""

    stage: str
    action_id: str
    trace_id: str
    action_type: str
    capability_name: str
    capability: dict[str, JSON]  # name, type, risk, scopes, tenant_id, environment, owner, ...
    agent_id: str
    tenant_id: str | None
    principal_id: str | None
    environment: str
    is_prod: bool
    is_high_risk: bool
    has_side_effects: bool
    input: dict[str, JSON]
    output: JSON | None  # after_capability only
    labels: dict[str, str]
    metadata: dict[str, JSON]
    cost_so_far_usd: float
    estimated_cost_usd: float | None
    granted_scopes: list[str]
    approved: bool  # an approval for this exact action was presented
    error: str | None  # on_error only
    parent_action_id: str | None
    def arg(self, name: str, default: JSON = None) -> JSON: ...
    def agent_has_scope(self, scope: str) -> bool:
        """Whether the agent was granted ``scope`` (``Host(scopes=...)`` or the call's
        ``scopes=``)."""
    def capability_requires_scope(self, scope: str) -> bool: ...
    def missing_scopes(self) -> list[str]: ...

class Completed:
    receipt_id: str
    output: JSON
    receipt: dict[str, JSON]

class NeedsApproval:
    approval_id: str
    reason: str | None
    capability: str

class Failed:
    code: str
    message: str
    receipt_id: str | None
    details: JSON | None
    def raise_(self) -> None:
        """Raise it as a :class:`CapabilityError` (or a subclass)."""

Outcome = Completed | NeedsApproval | Failed

class Host:
    """The governed runtime in this process: one capability home, its stores, its policies.

    ``home``: the capability home (default ``$CAP_HOME``, ``$XDG_DATA_HOME/capability`` or
    ``~/.local/share/capability``: the one ``cap`` uses). ``memory=True`` keeps receipts,
    approvals and audit in memory only; ``capability.Host(memory=True)`` without a home gets a
    scratch home for its signing key, removed with it. ``store``: only the embedded
    default is supported (``None`` or ``"sqlite"``); PostgreSQL is not built yet.
    ``policies``: Cedar files or directories. ``preset``: the effect policy
    (``permissive``, ``default``, ``strict``). ``shadow``: record, never enforce.
    ``agent``/``tenant``/``environment``/``principal``/``scopes``: defaults of every call.
    """

    home: str
    def __init__(
        self,
        home: str | PathLike[str] | None = None,
        *,
        store: str | None = None,
        policies: Sequence[str | PathLike[str]] = (),
        preset: str = "permissive",
        shadow: bool = False,
        agent: str = "python",
        tenant: str | None = None,
        environment: str = "dev",
        principal: str | None = None,
        scopes: Sequence[str] = (),
        memory: bool = False,
        executor: str = "auto",
    ) -> None: ...

    # --- executable capabilities (receipts) -------------------------------------------
    def invoke(
        self, capability: str, input: Mapping[str, JSON] | None = None, *,
        agent: str | None = None, tenant: str | None = None, principal: str | None = None,
        scopes: Sequence[str] = (), approval_token: str | None = None,
    ) -> Outcome:
        """Plan, authorize, run behind the boundary, verify, keep a receipt. The GIL is
        released for the whole call."""
    async def invoke_async(self, capability: str, input: Mapping[str, JSON] | None = None, **kw: Any) -> Outcome: ...
    def resume(self, capability: str, input: Mapping[str, JSON] | None, token: str, **kw: Any) -> Outcome: ...
    async def resume_async(self, capability: str, input: Mapping[str, JSON] | None, token: str, **kw: Any) -> Outcome: ...
    def plan(self, capability: str, input: Mapping[str, JSON] | None = None) -> dict[str, JSON]: ...
    def capabilities(self) -> list[str]: ...

    # --- any agent action ----------------------------------------------------------------
    def register(
        self, name: str, type: str = "tool", *, risk: str = "low",
        effect: str | Mapping[str, JSON] | None = None,
        side_effects: Sequence[str | Mapping[str, JSON]] = (),
        scopes: Sequence[str | Mapping[str, JSON]] = (),
        tenant: str | None = None, environment: str | None = None,
        data_namespace: str | None = None, owner: str | None = None,
        description: str | None = None, metadata: Mapping[str, JSON] | None = None,
        input_schema: Mapping[str, JSON] | None = None,
        output_schema: Mapping[str, JSON] | None = None,
        function: Callable[..., Any] | None = None,
    ) -> None:
        """Declare a governed capability (any of the 16 kinds). The schemas type the
        arguments for Cedar (a ``number`` property is a decimal even when an int is
        passed). ``function`` is what a ``route`` to this capability calls (with the input
        dict). A name this host executes itself is refused (``INVALID_INPUT``)."""
    def add_policy(
        self, function: Callable[[PolicyContext], Decision], *, stage: str = "before_capability",
        target: str = "*", name: str | None = None, version: str | None = None,
        priority: int = 0, enabled: bool = True,
    ) -> str:
        """A Python policy beside the Cedar files (lower priority runs first). A policy that
        raises or returns something else than a Decision denies (``policy_error``)."""
    def policy(self, stage: str = "before_capability", target: str = "*", **kw: Any) -> Callable[[Callable[[PolicyContext], Decision]], Callable[[PolicyContext], Decision]]: ...
    def remove_policy(self, policy_id: str) -> bool: ...
    def intercept(
        self, capability: str, run: Callable[[dict[str, JSON]], Any],
        input: Mapping[str, JSON] | None = None, *, action_type: str = "tool_call",
        agent: str | None = None, tenant: str | None = None, environment: str | None = None,
        principal: str | None = None, scopes: Sequence[str] = (),
        labels: Mapping[str, str] | None = None, metadata: Mapping[str, JSON] | None = None,
        trace_id: str | None = None, parent_action_id: str | None = None,
        estimated_cost_usd: float | None = None, approval_token: str | None = None,
        after_only: bool = False,
    ) -> Any:
        """before policies -> ``run(input)`` -> after policies (on_error on failure), every
        decision in the host's audit chain. ``run`` gets the (possibly transformed) input;
        a redaction or output transform returns a changed copy, otherwise ``run``'s own
        object comes back. ``run``'s exception propagates unchanged."""
    async def intercept_async(self, capability: str, run: Callable[[dict[str, JSON]], Any], input: Mapping[str, JSON] | None = None, **kw: Any) -> Any:
        """:meth:`intercept` for async (or sync) ``run``; the event loop is never blocked."""
    def evaluate(
        self, capability: str, input: Mapping[str, JSON] | None = None, *,
        stage: str = "before_capability", action_type: str = "tool_call",
        output: JSON = None, **kw: Any,
    ) -> Decision:
        """The composed decision, without audit or execution (``output``: what the after
        stage's policies see as the output)."""

    # --- approvals (as a principal: an operator or another agent) -----------------------
    def approvals(self, status: str | None = None) -> list[dict[str, JSON]]: ...
    def approve(self, approval_id: str, *, by: str, note: str | None = None) -> str:
        """Approve as operator ``by``; returns the single-use token. The requesting agent
        cannot approve its own request."""
    def reject(self, approval_id: str, *, by: str, note: str | None = None) -> None: ...

    # --- receipts and the audit log ------------------------------------------------------
    def receipts(self, limit: int = 50, *, capability: str | None = None) -> list[dict[str, JSON]]: ...
    def receipt(self, receipt_id: str) -> dict[str, JSON] | None: ...
    def audit(
        self, *, agent: str | None = None, tenant: str | None = None,
        capability: str | None = None, decision: str | None = None, limit: int = 100,
    ) -> list[dict[str, JSON]]:
        """Events oldest first, each ``{"seq", "hash", "prev_hash", "event"}``."""
    def verify_audit(self) -> dict[str, JSON]: ...
    def export_audit(self, format: str = "jsonl") -> str: ...
    def record(self, event: Mapping[str, JSON]) -> str:
        """Append an event made elsewhere (a Brane sink) to the host's hash chain."""
    def flush(self) -> None: ...
