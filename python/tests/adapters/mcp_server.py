"""A tiny MCP server (official SDK, mcp 2.3.0) for the adapter tests, over stdio.

    python mcp_server.py <calls-log>

Every tool call appends its tool name to <calls-log> before doing anything, so a test can
prove that a refused call never reached the server.
"""

import sys
from typing import TypedDict

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

log = sys.argv[1]
server = MCPServer("adapter-fixture", version="1.0.0")


def called(name: str) -> None:
    with open(log, "a", encoding="utf-8") as f:
        f.write(name + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    called("add")
    return a + b


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def write_file(path: str, text: str) -> str:
    """Write text to a file."""
    called("write_file")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return f"wrote {len(text)} characters to {path}"


class Account(TypedDict):
    user: str
    password: str


@server.tool()
def account(user: str) -> Account:
    """An account record, with a password in it."""
    called("account")
    return {"user": user, "password": "hunter2"}


@server.tool()
def fail() -> str:
    """Always fails."""
    called("fail")
    raise ValueError("this tool always fails")


server.run()
