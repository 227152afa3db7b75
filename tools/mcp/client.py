"""Drive an MCP server with the official Python client (mcp 2.3.0) and print what it saw.

    python client.py [--mode auto|legacy] --stdio -- <command> <args...>
    python client.py [--mode auto|legacy] --http <url> [--token <bearer>]

Reads a JSON array of operations on stdin:
    {"op": "list"}                                  -> {"tools": [...]}
    {"op": "call", "name": n, "arguments": {...}, "meta": {...}?}  -> the CallToolResult
    {"op": "wait_list_changed", "touch": path?, "timeout": s}  -> {"changed": bool, "tools": [...]}
    {"op": "sleep", "seconds": s}                   -> (no result)
    {"op": "timed_call", "name": n, "arguments": {...}}  -> {"seconds": s, "result": CallToolResult}
and prints one JSON document: {"protocolVersion", "serverInfo", "listChanged", "results": [...]}.
"""

import argparse
import asyncio
import json
import os
import sys
import time

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="auto")
    parser.add_argument("--http")
    parser.add_argument("--token")
    parser.add_argument("--stdio", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    ops = json.load(sys.stdin)

    changed = asyncio.Event()

    async def on_message(message):
        root = getattr(message, "root", message)
        method = getattr(root, "method", None)
        if method == "notifications/tools/list_changed":
            changed.set()

    if args.stdio:
        command = [c for c in args.command if c != "--"]
        server = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    else:
        headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
        server = streamable_http_client(args.http, http_client=create_mcp_http_client(headers=headers))

    results = []
    async with Client(server, mode=args.mode, message_handler=on_message) as client:
        caps = client.server_capabilities
        for op in ops:
            kind = op["op"]
            if kind == "list":
                tools = await client.list_tools()
                results.append(dump(tools))
            elif kind == "call":
                result = await client.call_tool(op["name"], op.get("arguments"), meta=op.get("meta"))
                results.append(dump(result))
            elif kind == "wait_list_changed":
                def touch():
                    if op.get("touch"):
                        with open(op["touch"], "w") as f:
                            f.write(op["content"])
                if str(client.protocol_version) >= "2026-07-28":
                    # The 2026-07-28 way: a subscriptions/listen stream.
                    async with client.listen(tools_list_changed=True) as sub:
                        touch()

                        async def first():
                            async for _event in sub:
                                return True
                            return False
                        try:
                            ok = await asyncio.wait_for(first(), op.get("timeout", 10))
                        except asyncio.TimeoutError:
                            ok = False
                else:
                    touch()
                    try:
                        await asyncio.wait_for(changed.wait(), op.get("timeout", 10))
                        ok = True
                    except asyncio.TimeoutError:
                        ok = False
                tools = await client.list_tools()
                results.append({"changed": ok, "tools": dump(tools)["tools"]})
            elif kind == "timed_call":
                started = time.monotonic()
                result = await client.call_tool(op["name"], op.get("arguments"))
                results.append({"seconds": time.monotonic() - started, "result": dump(result)})
            elif kind == "sleep":
                await asyncio.sleep(op["seconds"])
            else:
                raise SystemExit(f"unknown op {kind}")
        doc = {
            "protocolVersion": str(client.protocol_version),
            "serverInfo": dump(client.server_info) if client.server_info else None,
            "listChanged": bool(caps and caps.tools and caps.tools.list_changed),
            "results": results,
        }
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    started = time.monotonic()
    code = asyncio.run(main())
    sys.exit(code)
