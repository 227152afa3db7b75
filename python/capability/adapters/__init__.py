"""Thin adapters that put other frameworks' calls behind ``Host.intercept``.

* :func:`governed` -- any Python function (sync or async) as a governed capability.
* :mod:`capability.adapters.mcp` -- ``GovernedSession``, an MCP ``ClientSession`` (official SDK)
  whose tool calls are governed (needs the ``mcp`` package).
* :mod:`capability.adapters.langchain` -- ``governed_tool``, a governed LangChain ``BaseTool``
  (needs ``langchain-core``).

None of them decides anything: every decision, approval and audit event is the native host's.
Each refuses to construct (``TypeError``/``ValueError``) when it cannot guarantee that every call
goes through the host.
"""

from ._function import governed

__all__ = ["governed"]
