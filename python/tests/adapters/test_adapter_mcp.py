"""capability.adapters.mcp.GovernedSession against a real MCP server over stdio.

The server (mcp_server.py beside this file, official SDK 2.3.0) is started as a subprocess and
driven by the SDK's own stdio_client + ClientSession; it logs every tool call it receives.
"""

import asyncio
import contextlib
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult

import capability
from capability.adapters.mcp import READ_ONLY, GovernedSession

SERVER = Path(__file__).with_name("mcp_server.py")


@contextlib.asynccontextmanager
async def real_session(tmp_path):
    log = tmp_path / "calls.log"
    log.touch()
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER), str(log)], cwd=str(tmp_path))
    with open(tmp_path / "server.err", "w", encoding="utf-8") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def calls(tmp_path):
    return (tmp_path / "calls.log").read_text().split()


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_allowed_calls_return_the_servers_results_and_are_audited(host, tmp_path, events):
    seen = []

    @host.policy(target="mcp.fixture.*")
    def record(ctx):
        seen.append((ctx.capability_name, ctx.action_type, ctx.capability["type"], dict(ctx.input)))
        return capability.allow()

    async def main():
        async with real_session(tmp_path) as session:
            tools = GovernedSession(session, host, server="fixture")
            assert await tools.sync() == [
                "mcp.fixture.account", "mcp.fixture.add", "mcp.fixture.fail", "mcp.fixture.write_file"]
            result = await tools.call_tool("add", {"a": 20, "b": 22})
            assert isinstance(result, CallToolResult)
            assert not result.is_error
            assert result.structured_content == {"result": 42}
            assert result.content[0].text == "42"
            # A tool error from the server is a result like any other, not a refusal.
            failed = await tools.call_tool("fail", {})
            assert failed.is_error and "fail" in failed.content[0].text

    run(main())
    assert seen == [("mcp.fixture.add", "mcp_tool_call", "mcp_tool", {"a": 20, "b": 22}),
                    ("mcp.fixture.fail", "mcp_tool_call", "mcp_tool", {})]
    assert calls(tmp_path) == ["add", "fail"]
    assert ("before_capability", "allow", "executed", "record") in events(host, "mcp.fixture.add")
    event = host.audit(capability="mcp.fixture.add")[-1]["event"]
    assert (event["capability_type"], event["action_type"], event["capability_risk"]) == (
        "mcp_tool", "mcp_tool_call", "medium")


def test_denied_call_never_reaches_the_server(host, tmp_path, events):
    host.add_policy(
        lambda ctx: capability.deny("no writes outside out/") if not ctx.arg("path", "").startswith("out/")
        else capability.allow(),
        target="mcp.fixture.write_file", name="writes-in-out")
    (tmp_path / "out").mkdir()

    async def main():
        async with real_session(tmp_path) as session:
            tools = GovernedSession(session, host, server="fixture")  # registered lazily
            ok = await tools.call_tool("write_file", {"path": "out/a.txt", "text": "fine"})
            assert not ok.is_error
            refused = await tools.call_tool("write_file", {"path": "victim.txt", "text": "pwned"})
            return refused

    refused = run(main())
    assert refused.is_error
    text = refused.content[0].text
    assert "mcp.fixture.write_file" in text and "writes-in-out" in text and "no writes outside out/" in text
    facts = refused.meta["capability/refusal"]
    assert facts["code"] == "PERMISSION_DENIED"
    assert facts["policy"] == "writes-in-out"
    assert (tmp_path / "out" / "a.txt").read_text() == "fine"
    assert not (tmp_path / "victim.txt").exists()
    assert calls(tmp_path) == ["write_file"]  # only the allowed one reached the server
    assert ("before_capability", "deny", "denied_before_execution", "writes-in-out") in events(
        host, "mcp.fixture.write_file")


def test_approval_surfaces_as_a_tool_error_and_the_token_resumes(host, tmp_path, events):
    host.add_policy(lambda ctx: capability.approval_required("writing files needs a human"),
                    target="mcp.fixture.write_file", name="human-writes")

    async def main():
        async with real_session(tmp_path) as session:
            tools = GovernedSession(session, host, server="fixture")
            await tools.sync()
            args = {"path": "report.txt", "text": "quarterly"}
            pending = await tools.call_tool("write_file", args)
            assert pending.is_error
            approval_id = pending.meta["capability/refusal"]["approvalId"]
            assert approval_id and approval_id in pending.content[0].text
            assert pending.meta["capability/refusal"]["code"] == "APPROVAL_REQUIRED"
            assert not (tmp_path / "report.txt").exists()
            assert calls(tmp_path) == []

            token = host.approve(approval_id, by="alice")
            done = await tools.call_tool("write_file", args, approval_token=token)
            assert not done.is_error, done
            assert (tmp_path / "report.txt").read_text() == "quarterly"
            # The token is single use.
            again = await tools.call_tool("write_file", args, approval_token=token)
            assert again.is_error

    run(main())
    assert calls(tmp_path) == ["write_file"]
    assert ("before_capability", "approval_required", "approval_required", "human-writes") in events(
        host, "mcp.fixture.write_file")
    assert [a["status"] for a in host.approvals()] == ["consumed"]


def test_refusals_can_raise_instead(host, tmp_path):
    host.add_policy(lambda ctx: capability.approval_required("check first"), target="mcp.fixture.add")
    host.add_policy(lambda ctx: capability.deny("never"), target="mcp.fixture.write_file")

    async def main():
        async with real_session(tmp_path) as session:
            tools = GovernedSession(session, host, server="fixture", refusals="raise")
            with pytest.raises(capability.ApprovalRequired) as pending:
                await tools.call_tool("add", {"a": 1, "b": 2})
            assert pending.value.approval_id
            with pytest.raises(capability.Denied):
                await tools.call_tool("write_file", {"path": "x", "text": "y"})

    run(main())
    assert calls(tmp_path) == []


def test_input_transform_and_output_redaction_apply(host, tmp_path):
    host.add_policy(lambda ctx: capability.transform_input({"b": 100}), target="mcp.fixture.add")
    host.add_policy(lambda ctx: capability.redact("/structuredContent/password"),
                    stage="after_capability", target="mcp.fixture.account")

    async def main():
        async with real_session(tmp_path) as session:
            tools = GovernedSession(session, host, server="fixture")
            added = await tools.call_tool("add", {"a": 1, "b": 2})
            assert added.structured_content == {"result": 101}
            account = await tools.call_tool("account", {"user": "bob"})
            assert account.structured_content == {"user": "bob", "password": "[REDACTED]"}

    run(main())


def test_cedar_policy_governs_mcp_tool_calls(tmp_path):
    policy = tmp_path / "mcp.cedar"
    policy.write_text(
        'permit(principal, action, resource);\n'
        '@id("no-secret-files") @reason("writing .secret files is forbidden")\n'
        'forbid(principal, action == Action::"mcp_tool_call", resource == Capability::"mcp.fixture.write_file")\n'
        'when { context.input has path && context.input.path like "*.secret" };\n'
        '@id("large-sums") @decision("approval_required") @reason("large sums need a human")\n'
        'forbid(principal, action == Action::"mcp_tool_call", resource == Capability::"mcp.fixture.add")\n'
        'when { context.input has a && context.input.a > 1000 };\n'
    )
    host = capability.Host(tmp_path / "home", memory=True, policies=[policy])

    async def main():
        async with real_session(tmp_path) as session:
            tools = GovernedSession(session, host, server="fixture")
            assert (await tools.call_tool("add", {"a": 1, "b": 2})).structured_content == {"result": 3}
            big = await tools.call_tool("add", {"a": 5000, "b": 1})
            assert big.meta["capability/refusal"]["code"] == "APPROVAL_REQUIRED"
            denied = await tools.call_tool("write_file", {"path": "keys.secret", "text": "x"})
            assert denied.meta["capability/refusal"]["policy"] == "no-secret-files"
            ok = await tools.call_tool("write_file", {"path": "notes.txt", "text": "x"})
            assert not ok.is_error

    run(main())
    assert not (tmp_path / "keys.secret").exists()
    assert calls(tmp_path) == ["add", "write_file"]


def test_only_read_only_methods_pass_through(host, tmp_path):
    async def main():
        async with real_session(tmp_path) as session:
            tools = GovernedSession(session, host, server="fixture")
            listing = await tools.list_tools()  # passes through, and registers
            assert {t.name for t in listing.tools} == {"add", "write_file", "account", "fail"}
            assert tools.server_info.name == "adapter-fixture"
            for name in ("send_request", "read_resource", "get_prompt", "complete", "send_notification",
                         "_session", "_GovernedSession__missing", "call_tool_raw"):
                with pytest.raises(AttributeError):
                    getattr(tools, name)
            assert not isinstance(tools, ClientSession)
            assert "send_request" not in READ_ONLY and "call_tool" not in READ_ONLY
            with pytest.raises(AttributeError):
                tools.extra = 1  # no new attributes: __slots__
            # A tool the server does not list is no registered capability: the host refuses it.
            with pytest.raises(capability.NotFound):
                await tools.call_tool("no_such_tool", {})
        assert calls(tmp_path) == []

    run(main())


def test_refuses_to_wrap_what_it_cannot_govern(host):
    send, receive = anyio.create_memory_object_stream(1)
    session = ClientSession(receive, send)  # a real ClientSession; never connected
    with pytest.raises(TypeError, match="mcp.ClientSession"):
        GovernedSession(object(), host, server="x")
    with pytest.raises(TypeError, match="client.session"):
        GovernedSession(Client("http://127.0.0.1:9/mcp"), host, server="x")
    with pytest.raises(TypeError, match="capability.Host"):
        GovernedSession(session, object(), server="x")
    with pytest.raises(ValueError, match="server"):
        GovernedSession(session, host, server="a.b")
    with pytest.raises(ValueError, match="refusals"):
        GovernedSession(session, host, server="x", refusals="ignore")
    with pytest.raises(TypeError, match="unknown options"):
        GovernedSession(session, host, server="x", bypass=True)
    send.close()
    receive.close()
