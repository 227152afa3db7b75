"""``GovernedSession``: an official MCP SDK ``ClientSession`` whose every tool call is governed.

    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = GovernedSession(session, host, server="files")
        await tools.sync()                       # registers mcp.files.<tool> for every tool
        result = await tools.call_tool("write", {"path": "x", "text": "y"})

Every ``call_tool(name, arguments)`` is ``host.intercept_async("mcp.<server>.<name>", run,
arguments, action_type="mcp_tool_call")``: the before-policies see the arguments, ``run`` sends
the (possibly transformed) arguments to the server, and the after-policies see the result as
MCP JSON (``{"content": [...], "structuredContent": ..., "isError": ...}``) so that a redaction
(``/content/0/text``) or output transform changes what the agent gets. A tool error from the
server (``isError: true``) passes through the after-policies like any result.

Refusals are tool errors the agent can show (``refusals="result"``, the default): a denial or an
approval requirement returns a ``CallToolResult`` with ``isError=True``, a text naming the
policy, the reason and -- for an approval -- the approval id, and the same facts under
``_meta["capability/refusal"]`` (``code``, ``capability``, ``reason``, ``policy``, ``approvalId``,
``stage``, ``actionId``). Once an operator approved (``host.approve(id, by=...)``), call again
with ``approval_token=``. With ``refusals="raise"`` they raise ``capability.Denied`` /
``capability.ApprovalRequired`` instead. Every other failure of governance raises.

Tools are registered as capabilities of type ``mcp_tool`` from the server's ``tools/list``:
``await governed.sync()``, or lazily on the first ``list_tools()`` or ``call_tool()``.

The wrapper is not a ``ClientSession`` and exposes none of its writing methods: only the
read-only ones in ``READ_ONLY`` pass through (``list_tools`` registers what it lists); anything
else (``send_request``, ``read_resource``, ``get_prompt``, ...) raises ``AttributeError``. It
guards against bypass by API, not against code in the same process that digs out the session.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mcp import ClientSession
from mcp.types import CallToolResult, ListToolsResult, PaginatedRequestParams, TextContent

from ..errors import ApprovalRequired, CapabilityError, Denied
from . import _host

READ_ONLY = frozenset({
    "list_tools",
    "list_resources",
    "list_resource_templates",
    "list_prompts",
    "send_ping",
    "initialize_result",
    "discover_result",
    "protocol_version",
    "server_info",
    "server_capabilities",
    "instructions",
})
"""The attributes of the wrapped session that pass through (methods that only read)."""

_SERVER = re.compile(r"^[A-Za-z0-9_-]+$")
_INTERCEPT_OPTIONS = frozenset({
    "agent", "tenant", "environment", "principal", "scopes", "labels", "metadata", "trace_id",
    "parent_action_id", "estimated_cost_usd",
})
_REFUSAL_META = "capability/refusal"


class GovernedSession:
    """An MCP ``ClientSession`` whose tool calls are decided by a ``capability.Host``.

    ``server`` names the server in capability names (``mcp.<server>.<tool>``; letters, digits,
    ``-`` and ``_``). ``risk`` is the default risk of its tools and ``tools`` maps a tool name
    to its own declaration (``{"write": {"risk": "high", "side_effects": ["fs.write"]}}``),
    passed to ``host.register``; ``declaration`` is common to all tools. ``refusals`` is
    ``"result"`` or ``"raise"`` (see the module). ``options`` are ``intercept`` defaults for
    every call (``agent``, ``principal``, ``scopes``, ``labels``, ...).

    Raises ``TypeError`` unless ``session`` is an ``mcp.ClientSession`` (for an ``mcp.Client``
    pass ``client.session``) and ``host`` a ``capability.Host``.
    """

    __slots__ = ("__session", "__host", "__server", "__risk", "__tools", "__declaration",
                 "__refusals", "__options", "__registered")

    def __init__(
        self,
        session: ClientSession,
        host: Any,
        *,
        server: str,
        risk: str = "medium",
        tools: Mapping[str, Mapping[str, Any]] | None = None,
        refusals: str = "result",
        declaration: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(session, ClientSession):
            hint = " (for an mcp.Client, pass client.session)" if type(session).__name__ == "Client" else ""
            raise TypeError(
                f"GovernedSession wraps an mcp.ClientSession, got {type(session).__module__}."
                f"{type(session).__qualname__}{hint}"
            )
        _host.check_host(host, "GovernedSession")
        if not isinstance(server, str) or not _SERVER.match(server):
            raise ValueError(f"GovernedSession: server must be letters, digits, '-' or '_', got {server!r}")
        if refusals not in ("result", "raise"):
            raise ValueError(f"GovernedSession: refusals must be 'result' or 'raise', got {refusals!r}")
        unknown = options.keys() - _INTERCEPT_OPTIONS
        if unknown:
            raise TypeError(f"GovernedSession: unknown options {sorted(unknown)}")
        self.__session = session
        self.__host = host
        self.__server = server
        self.__risk = risk
        self.__tools = {k: dict(v) for k, v in (tools or {}).items()}
        self.__declaration = dict(declaration or {})
        self.__refusals = refusals
        self.__options = options
        self.__registered: set[str] = set()

    @property
    def server(self) -> str:
        return self.__server

    def capability(self, tool: str) -> str:
        """The capability name of ``tool``: ``mcp.<server>.<tool>``."""
        return f"mcp.{self.__server}.{tool}"

    def __getattr__(self, name: str) -> Any:
        if name in READ_ONLY:
            return getattr(self.__session, name)
        raise AttributeError(
            f"GovernedSession does not expose {name!r}: only the read-only {sorted(READ_ONLY)} "
            "pass through, and tool calls go through call_tool"
        )

    def __repr__(self) -> str:
        return f"<GovernedSession server={self.__server!r} tools={sorted(self.__registered)}>"

    # --- registration ---------------------------------------------------------------------

    def _register(self, listing: ListToolsResult) -> None:
        for tool in listing.tools:
            if tool.name in self.__registered:
                continue
            decl: dict[str, Any] = {"risk": self.__risk, **self.__declaration, **self.__tools.get(tool.name, {})}
            if decl.get("description") is None and tool.description:
                decl["description"] = tool.description
            metadata = dict(decl.get("metadata") or {})
            metadata.setdefault("mcp", {
                "server": self.__server,
                "tool": tool.name,
                "annotations": tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
                if tool.annotations else None,
            })
            decl["metadata"] = metadata
            _host.register(self.__host, self.capability(tool.name), decl.pop("type", "mcp_tool"), **decl)
            self.__registered.add(tool.name)

    async def list_tools(self, *, params: PaginatedRequestParams | None = None) -> ListToolsResult:
        """The server's ``tools/list`` (one page); registers the tools it lists."""
        listing = await self.__session.list_tools(params=params)
        self._register(listing)
        return listing

    async def sync(self) -> list[str]:
        """List every tool of the server (all pages), register the new ones, and return the
        capability names of all registered tools."""
        cursor = None
        while True:
            listing = await self.__session.list_tools(
                params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            self._register(listing)
            cursor = listing.next_cursor
            if not cursor:
                break
        return sorted(self.capability(t) for t in self.__registered)

    # --- the governed call ----------------------------------------------------------------

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        progress_callback: Any = None,
        *,
        meta: Mapping[str, Any] | None = None,
        approval_token: str | None = None,
    ) -> CallToolResult:
        """``tools/call`` through ``host.intercept_async`` (see the module for refusals)."""
        if name not in self.__registered:
            await self.sync()
        session = self.__session

        async def run(input: dict[str, Any]) -> dict[str, Any]:
            result = await session.call_tool(
                name, dict(input), read_timeout_seconds, progress_callback,
                meta=dict(meta) if meta is not None else None,
            )
            return result.model_dump(mode="json", by_alias=True, exclude_none=True)

        capability = self.capability(name)
        try:
            output = await _host.intercept_async(
                self.__host, capability, run, dict(arguments or {}), action_type="mcp_tool_call",
                approval_token=approval_token, **self.__options,
            )
        except (Denied, ApprovalRequired) as refusal:
            if self.__refusals == "raise":
                raise
            return _refusal_result(capability, refusal)
        return CallToolResult.model_validate(output)


def _refusal_result(capability: str, refusal: CapabilityError) -> CallToolResult:
    reason = getattr(refusal, "reason", None) or refusal.message
    policy = getattr(refusal, "policy_name", None)
    facts: dict[str, Any] = {"code": refusal.code, "capability": capability, "reason": reason}
    if policy:
        facts["policy"] = policy
    if isinstance(refusal, ApprovalRequired):
        facts["approvalId"] = refusal.approval_id
        text = (f"{capability} needs a human's approval ({reason}); approval id {refusal.approval_id}. "
                "Once it is approved, retry the call with the approval token.")
    else:
        facts["stage"] = refusal.stage
        facts["actionId"] = refusal.action_id
        by = f" by policy {policy}" if policy else ""
        after = " after the call ran; its result is withheld" if refusal.stage == "after_capability" else ""
        text = f"{capability} was denied{by}{after}: {reason}"
    return CallToolResult(content=[TextContent(text=text)], is_error=True,
                          meta={_REFUSAL_META: {k: v for k, v in facts.items() if v is not None}})
