"""``governed_tool``: a LangChain tool whose every run is decided by a ``capability.Host``.

    from langchain_core.tools import tool

    @tool
    def send_email(to: str, body: str) -> str:
        "Send an email."
        ...

    send_email = governed_tool(send_email, host, risk="high", side_effects=["email.send"])
    send_email.invoke({"to": "a@example.com", "body": "hi"})

The result is a new ``BaseTool`` with the wrapped tool's name, description, argument schema,
callbacks and error handling. LangChain runs it as usual (``invoke``/``ainvoke``/``run``/
``arun``, callbacks, validation of the arguments against the schema), and its ``_run``/``_arun``
are ``host.intercept``/``host.intercept_async`` around the wrapped tool's own ``_run``/``_arun``:
the before-policies see the arguments as JSON, the wrapped tool gets the arguments they let
through (validated again against its schema), the after-policies see its output.

A denial raises ``capability.Denied`` and an approval requirement ``capability.ApprovalRequired``
(``approval_id``); LangGraph's ``ToolNode`` shows such errors to the model like any tool error.
After ``host.approve(id, by=...)``, run the same call again with the token in the config:
``tool.invoke(args, config={"configurable": {"capability_approval_tokens": {name: token}}})``,
keyed by capability name so that the token reaches only that tool.

Arguments LangChain injects at run time (``InjectedToolArg``, ``InjectedToolCallId``,
``ToolRuntime``) are not the model's: they are handed to the wrapped tool unchanged and are not
part of the governed input.

Refused with ``TypeError``: anything but a ``BaseTool``, and a tool whose ``invoke``, ``ainvoke``,
``run`` or ``arun`` is overridden by a class other than LangChain's own ``BaseTool``, ``Tool`` and
``StructuredTool`` (or on the instance): such a tool's behaviour may not be its ``_run``, so
governing ``_run`` would not govern what it does.
"""

import builtins
import inspect
from collections.abc import Mapping
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool, Tool
from langchain_core.tools.base import _get_runnable_config_param, _is_injected_arg_type, get_all_basemodel_annotations
from pydantic import PrivateAttr
from pydantic_core import to_jsonable_python

from . import _host

INVOCATION_METHODS = ("invoke", "ainvoke", "run", "arun")
"""The entry points that must be LangChain's own for ``_run``/``_arun`` to be the whole tool."""

_TRUSTED = (BaseTool, Tool, StructuredTool)
_COPIED = ("name", "description", "args_schema", "return_direct", "verbose", "callbacks", "tags",
           "metadata", "handle_tool_error", "handle_validation_error", "response_format", "extras")
TOKENS_KEY = "capability_approval_tokens"


def governed_tool(
    tool: BaseTool,
    host: Any,
    *,
    name: str | None = None,
    type: str = "tool",
    risk: str = "low",
    action_type: str = "tool_call",
    options: Mapping[str, Any] | None = None,
    **declaration: Any,
) -> BaseTool:
    """A governed copy of ``tool``; the capability ``name`` (default ``tool.name``) is
    registered with ``host.register(name, type, risk=risk, **declaration)`` (``description``
    defaults to the tool's). ``options`` are ``intercept`` keywords for every run (``agent``,
    ``principal``, ``scopes``, ``labels``, ...)."""
    if not isinstance(tool, BaseTool):
        raise TypeError(f"governed_tool wraps a langchain_core BaseTool, got {_type_name(tool)}")
    _host.check_host(host, "governed_tool")
    for method in INVOCATION_METHODS:
        if method in vars(tool):
            raise TypeError(f"governed_tool: {tool.name!r} overrides {method} on the instance; only _run/_arun can be governed")
        implementation = getattr(builtins.type(tool), method)
        if not any(implementation is getattr(trusted, method) for trusted in _TRUSTED):
            definer = next(k for k in builtins.type(tool).__mro__ if method in vars(k))
            raise TypeError(
                f"governed_tool: {_type_name(tool)} ({tool.name!r}) overrides {method} in "
                f"{definer.__module__}.{definer.__qualname__}; its calls might not go through _run/_arun, "
                "so they could not all be governed"
            )
    capability = name or tool.name
    decl = dict(declaration)
    if decl.get("description") is None and tool.description:
        decl["description"] = tool.description
    _host.register(host, capability, type, risk=risk, **decl)
    governed = GovernedTool(**{field: getattr(tool, field) for field in _COPIED})
    governed._inner = tool
    governed._host = host
    governed._capability = capability
    governed._options = {"action_type": action_type, **(options or {})}
    return governed


def _type_name(value: Any) -> str:
    return f"{builtins.type(value).__module__}.{builtins.type(value).__qualname__}"


class GovernedTool(BaseTool):
    """A LangChain tool made by :func:`governed_tool`; its schema is the wrapped tool's."""

    _inner: BaseTool = PrivateAttr()
    _host: Any = PrivateAttr()
    _capability: str = PrivateAttr()
    _options: dict = PrivateAttr()

    @property
    def capability(self) -> str:
        return self._capability

    # The schema the model sees and the arguments LangChain injects are the wrapped tool's.
    @property
    def args(self) -> dict:
        return self._inner.args

    @property
    def tool_call_schema(self) -> Any:
        return self._inner.tool_call_schema

    def get_input_schema(self, config: RunnableConfig | None = None) -> Any:
        return self._inner.get_input_schema(config)

    @property
    def _injected_args_keys(self) -> frozenset:
        return self._inner._injected_args_keys

    # --- the governed run -----------------------------------------------------------------

    def _split(self, args: tuple, kwargs: dict) -> tuple:
        """The governed input (JSON) and the injected arguments, from what LangChain parsed."""
        if args:
            # A single string input (LangChain's backwards-compatible form): name it.
            if len(args) != 1 or kwargs:
                raise TypeError(f"{self.name}: unexpected positional arguments {args!r}")
            kwargs = {next(iter(self._inner.args), "tool_input"): args[0]}
        model_args = self._inner._filter_injected_args(kwargs)
        injected = {k: v for k, v in kwargs.items() if k not in model_args}
        return to_jsonable_python(model_args), injected

    def _intercept_options(self, config: RunnableConfig | None) -> dict:
        options = dict(self._options)
        tokens = ((config or {}).get("configurable") or {}).get(TOKENS_KEY) or {}
        token = tokens.get(self._capability)
        if token is not None:
            options["approval_token"] = token
        return options

    def _inner_call(self, method: Any, signature_of: Any, input: dict, injected: dict,
                    config: RunnableConfig | None, run_manager: Any) -> Any:
        args, kwargs = self._inner._to_args_and_kwargs({**input, **injected}, _tool_call_id(self._inner, injected))
        if "run_manager" in inspect.signature(signature_of).parameters:
            kwargs["run_manager"] = run_manager
        if config_param := _get_runnable_config_param(signature_of):
            kwargs[config_param] = config
        return method(*args, **kwargs)

    def _run(self, *args: Any, config: RunnableConfig = None, run_manager: CallbackManagerForToolRun | None = None,
             **kwargs: Any) -> Any:
        input, injected = self._split(args, kwargs)
        inner = self._inner

        def run(governed_input: dict) -> Any:
            return self._inner_call(inner._run, inner._run, governed_input, injected, config, run_manager)

        return self._output(_host.intercept(self._host, self._capability, run, input,
                                            **self._intercept_options(config)))

    async def _arun(self, *args: Any, config: RunnableConfig = None,
                    run_manager: AsyncCallbackManagerForToolRun | None = None, **kwargs: Any) -> Any:
        input, injected = self._split(args, kwargs)
        inner = self._inner
        # LangChain's own rule (BaseTool.arun): the default _arun runs _run, so _run's signature counts.
        signature_of = inner._run if type(inner)._arun is BaseTool._arun else inner._arun

        async def run(governed_input: dict) -> Any:
            return await self._inner_call(inner._arun, signature_of, governed_input, injected, config, run_manager)

        return self._output(await _host.intercept_async(self._host, self._capability, run, input,
                                                        **self._intercept_options(config)))

    def _output(self, output: Any) -> Any:
        # An after-policy's redaction or transform returns JSON: a (content, artifact) pair
        # comes back as a list, which LangChain would refuse.
        if self.response_format == "content_and_artifact" and isinstance(output, list) and len(output) == 2:
            return tuple(output)
        return output


def _tool_call_id(tool: BaseTool, injected: dict) -> Any:
    """The tool call id LangChain injected (an ``InjectedToolCallId`` argument), if any."""
    schema = tool.args_schema
    if schema is not None and not isinstance(schema, dict):
        for field, annotation in get_all_basemodel_annotations(schema).items():
            if field in injected and _is_injected_arg_type(annotation, injected_type=InjectedToolCallId):
                return injected[field]
    return injected.get("tool_call_id")
