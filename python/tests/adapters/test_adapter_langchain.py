"""capability.adapters.langchain.governed_tool with real langchain_core tools."""

import asyncio
from typing import Annotated

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool, Tool, tool
from pydantic import BaseModel

import capability
from capability.adapters.langchain import TOKENS_KEY, GovernedTool, governed_tool


def make_writer(written):
    @tool
    def write_note(title: str, body: str, urgent: bool = False) -> str:
        """Write a note."""
        written.append((title, body, urgent))
        return f"saved {title}"

    return write_note


def test_allowed_invoke_returns_the_tools_result_and_is_audited(host, events):
    written, seen = [], []

    @host.policy(target="write_note")
    def record(ctx):
        seen.append(dict(ctx.input))
        return capability.allow()

    original = make_writer(written)
    governed = governed_tool(original, host, risk="medium")
    assert isinstance(governed, BaseTool) and isinstance(governed, GovernedTool)
    assert governed.capability == "write_note"
    assert governed.invoke({"title": "t", "body": "b"}) == "saved t"
    assert written == [("t", "b", False)]
    assert seen == [{"title": "t", "body": "b", "urgent": False}]
    assert ("before_capability", "allow", "executed", "record") in events(host, "write_note")


def test_schema_and_metadata_are_the_wrapped_tools(host):
    original = make_writer([])
    governed = governed_tool(original, host)
    assert governed.name == original.name
    assert governed.description == original.description
    assert governed.args == original.args
    assert governed.tool_call_schema.model_json_schema() == original.tool_call_schema.model_json_schema()


def test_denied_run_never_reaches_the_tool(host, events):
    written = []
    host.add_policy(lambda ctx: capability.deny("no urgent notes") if ctx.arg("urgent") else capability.allow(),
                    target="write_note", name="calm")
    governed = governed_tool(make_writer(written), host)
    with pytest.raises(capability.Denied) as refused:
        governed.invoke({"title": "t", "body": "b", "urgent": True})
    assert refused.value.policy_name == "calm"
    assert written == []
    # A model's tool call goes the same way.
    with pytest.raises(capability.Denied):
        governed.invoke({"type": "tool_call", "id": "call-1", "name": "write_note",
                         "args": {"title": "t", "body": "b", "urgent": True}})
    assert written == []
    assert events(host, "write_note").count(("before_capability", "deny", "denied_before_execution", "calm")) == 2


def test_approval_then_resume_with_the_token_in_the_config(host):
    written = []
    host.add_policy(lambda ctx: capability.approval_required("notes need review"), target="write_note")
    governed = governed_tool(make_writer(written), host)
    args = {"title": "t", "body": "b"}
    with pytest.raises(capability.ApprovalRequired) as pending:
        governed.invoke(args)
    assert written == []
    token = host.approve(pending.value.approval_id, by="alice")
    # A token for another capability is not used.
    with pytest.raises(capability.ApprovalRequired):
        governed.invoke(args, config={"configurable": {TOKENS_KEY: {"other": token}}})
    assert governed.invoke(args, config={"configurable": {TOKENS_KEY: {"write_note": token}}}) == "saved t"
    assert written == [("t", "b", False)]


def test_transformed_input_is_validated_and_used(host):
    written = []
    host.add_policy(lambda ctx: capability.transform_input({"body": "[censored]"}), target="write_note")
    governed = governed_tool(make_writer(written), host)
    governed.invoke({"title": "t", "body": "secret"})
    assert written == [("t", "[censored]", False)]


def test_output_redaction_reaches_the_message(host):
    @tool(response_format="content_and_artifact")
    def search(query: str):
        """Search the customer base."""
        return f"1 hit for {query}", {"hits": [{"name": "Bob", "ssn": "078-05-1120"}]}

    seen = []
    host.add_policy(lambda ctx: seen.append(ctx.output) or capability.redact("/1/hits/*/ssn"),
                    stage="after_capability", target="search")
    message = governed_tool(search, host).invoke(
        {"type": "tool_call", "id": "call-1", "name": "search", "args": {"query": "bob"}})
    assert seen == [["1 hit for bob", {"hits": [{"name": "Bob", "ssn": "078-05-1120"}]}]]
    assert message.content == "1 hit for bob"
    assert message.artifact == {"hits": [{"name": "Bob", "ssn": "[REDACTED]"}]}


def test_async_tool_goes_through_intercept_async(host):
    calls = []

    async def lookup(city: str) -> str:
        await asyncio.sleep(0)
        calls.append(city)
        return f"sunny in {city}"

    weather = StructuredTool.from_function(coroutine=lookup, name="weather", description="The weather.")
    host.add_policy(lambda ctx: capability.deny("not there") if ctx.arg("city") == "Mordor" else capability.allow(),
                    target="weather")
    governed = governed_tool(weather, host)

    async def main():
        assert await governed.ainvoke({"city": "Paris"}) == "sunny in Paris"
        with pytest.raises(capability.Denied):
            await governed.ainvoke({"city": "Mordor"})

    asyncio.run(main())
    assert calls == ["Paris"]


def test_sync_tool_through_ainvoke_is_governed_too(host):
    written = []
    host.add_policy(lambda ctx: capability.deny("no"), target="write_note")
    governed = governed_tool(make_writer(written), host)
    with pytest.raises(capability.Denied):
        asyncio.run(governed.ainvoke({"title": "t", "body": "b"}))
    assert written == []


def test_injected_tool_call_id_is_passed_but_not_governed(host):
    seen = []
    host.add_policy(lambda ctx: seen.append(dict(ctx.input)) or capability.allow(), target="echo")

    @tool
    def echo(text: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Echo the text."""
        return f"{text} ({tool_call_id})"

    governed = governed_tool(echo, host)
    message = governed.invoke({"type": "tool_call", "id": "call-7", "name": "echo", "args": {"text": "hi"}})
    assert isinstance(message, ToolMessage)
    assert message.content == "hi (call-7)" and message.tool_call_id == "call-7"
    assert seen == [{"text": "hi"}]


def test_single_string_tool_and_custom_base_tool(host):
    seen = []
    host.add_policy(lambda ctx: seen.append((ctx.capability_name, dict(ctx.input))) or capability.allow())

    shout = Tool(name="shout", func=lambda text: text.upper(), description="Shout.")
    assert governed_tool(shout, host).invoke("hey") == "HEY"

    class Query(BaseModel):
        sql: str

    class Database(BaseTool):
        name: str = "db"
        description: str = "Run a query."
        args_schema: type[BaseModel] = Query

        def _run(self, sql: str) -> str:
            return f"ran {sql}"

    assert governed_tool(Database(), host, type="database", action_type="database_query").invoke(
        {"sql": "select 1"}) == "ran select 1"
    assert seen == [("shout", {"tool_input": "hey"}), ("db", {"sql": "select 1"})]


def test_refuses_tools_whose_calls_could_skip_run(host):
    class Sneaky(BaseTool):
        name: str = "sneaky"
        description: str = "Does its work in invoke."

        def _run(self, x: str) -> str:
            return "harmless"

        def invoke(self, input, config=None, **kwargs):
            return "the real, ungoverned work"

    class SneakyAsync(Sneaky):
        invoke = BaseTool.invoke

        async def arun(self, *args, **kwargs):
            return "ungoverned"

    with pytest.raises(TypeError, match="overrides invoke"):
        governed_tool(Sneaky(), host)
    with pytest.raises(TypeError, match="overrides arun"):
        governed_tool(SneakyAsync(), host)

    patched = make_writer([])
    object.__setattr__(patched, "run", lambda *a, **k: "ungoverned")
    with pytest.raises(TypeError, match="on the instance"):
        governed_tool(patched, host)

    with pytest.raises(TypeError, match="BaseTool"):
        governed_tool(lambda x: x, host)
    with pytest.raises(TypeError, match="capability.Host"):
        governed_tool(make_writer([]), object())
