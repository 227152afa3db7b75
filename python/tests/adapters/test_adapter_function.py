"""capability.adapters.governed: plain Python functions behind Host.intercept."""

import asyncio
import inspect

import pytest

import capability
from capability.adapters import governed


def test_allowed_call_returns_the_result_and_is_audited(host, events):
    seen = []

    @host.policy(target="refund")
    def record(ctx):
        seen.append((ctx.capability_name, ctx.action_type, dict(ctx.input)))
        return capability.allow()

    @governed(host, risk="high")
    def refund(order: str, amount: int = 10, **extra):
        """Refund an order."""
        return {"order": order, "refunded": amount, **extra}

    assert refund("o-1", note="late") == {"order": "o-1", "refunded": 10, "note": "late"}
    # Bound by name, the default applied, **kwargs merged into the input.
    assert seen == [("refund", "tool_call", {"order": "o-1", "amount": 10, "note": "late"})]
    assert ("before_capability", "allow", "executed", "record") in events(host, "refund")
    event = host.audit(capability="refund")[-1]["event"]
    assert (event["capability_type"], event["capability_risk"], event["action_type"]) == ("tool", "high", "tool_call")


def test_denied_call_never_runs_the_function(host, events):
    calls = []
    host.add_policy(lambda ctx: capability.deny("too large") if ctx.arg("amount", 0) > 100 else capability.allow(),
                    target="pay", name="limit")

    @governed(host)
    def pay(amount: int):
        calls.append(amount)
        return "paid"

    assert pay(5) == "paid"
    with pytest.raises(capability.Denied) as refused:
        pay(amount=500)
    assert calls == [5]
    assert refused.value.code == "PERMISSION_DENIED"
    assert refused.value.policy_name == "limit"
    assert refused.value.reason == "too large"
    assert ("before_capability", "deny", "denied_before_execution", "limit") in events(host, "pay")


def test_transformed_input_is_what_the_function_gets(host):
    host.add_policy(lambda ctx: capability.transform_input({"to": "sandbox@example.com"}), target="mail")

    @governed(host, name="mail")
    def send(to: str, body: str):
        return f"{to}: {body}"

    assert send("ceo@example.com", "hi") == "sandbox@example.com: hi"


def test_approval_required_then_resume_with_the_token(host, events):
    calls = []
    host.add_policy(lambda ctx: capability.approval_required("big transfer"), target="transfer")

    @governed(host, risk="critical")
    def transfer(to: str, amount: int):
        calls.append((to, amount))
        return "sent"

    with pytest.raises(capability.ApprovalRequired) as pending:
        transfer("bob", 1000)
    assert calls == []
    approval_id = pending.value.approval_id
    assert approval_id
    token = host.approve(approval_id, by="alice")
    # The token is bound to this exact call: other arguments are not approved by it.
    with pytest.raises(capability.Denied, match="does not match"):
        transfer.with_options(approval_token=token)("mallory", 1000)
    assert transfer.with_options(approval_token=token)("bob", 1000) == "sent"
    assert calls == [("bob", 1000)]
    assert ("before_capability", "approval_required", "approval_required", None) in [
        (s, d, o, None) for s, d, o, _ in events(host, "transfer")]
    assert [a["status"] for a in host.approvals() if a["id"] == approval_id] == ["consumed"]


def test_async_function_goes_through_intercept_async(host):
    calls = []
    host.add_policy(lambda ctx: capability.deny("no") if ctx.arg("n") == 13 else capability.allow(), target="fetch")

    @governed(host)
    async def fetch(n: int, scale: int = 2):
        await asyncio.sleep(0)
        calls.append(n)
        return n * scale

    assert inspect.iscoroutinefunction(fetch)

    async def main():
        assert await fetch(4) == 8
        with pytest.raises(capability.Denied):
            await fetch(13)

    asyncio.run(main())
    assert calls == [4]
    assert host.audit(capability="fetch")


def test_wrapper_keeps_name_docstring_and_wrapped(host):
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    wrapped = governed(host, "kv.lookup")(lookup)
    assert wrapped.__wrapped__ is lookup
    assert wrapped.__name__ == "lookup"
    assert wrapped.__doc__ == "Look a key up."
    assert wrapped.capability == "kv.lookup"
    assert inspect.signature(wrapped) == inspect.signature(lookup)
    assert wrapped("k") == "k"


def test_cedar_policy_file_decides(tmp_path, events):
    policy = tmp_path / "policy.cedar"
    policy.write_text(
        'permit(principal, action, resource);\n'
        '@id("no-root-deletes") @reason("deleting under / is forbidden")\n'
        'forbid(principal, action == Action::"file_write", resource == Capability::"rm")\n'
        'when { context.input has path && context.input.path like "/*" };\n'
    )
    host = capability.Host(tmp_path / "home", memory=True, policies=[policy])
    removed = []

    @governed(host, "rm", action_type="file_write", risk="high")
    def rm(path: str):
        removed.append(path)
        return True

    assert rm("tmp/x") is True
    with pytest.raises(capability.Denied) as refused:
        rm("/etc/passwd")
    assert removed == ["tmp/x"]
    assert refused.value.policy_name == "no-root-deletes"
    assert ("before_capability", "deny", "denied_before_execution", "no-root-deletes") in events(host, "rm")


def test_refuses_what_it_cannot_govern(host):
    def positional_only(a, /, b):
        return a + b

    def var_positional(*items):
        return items

    with pytest.raises(TypeError, match="positional-only"):
        governed(host)(positional_only)
    with pytest.raises(TypeError, match=r"\*args"):
        governed(host)(var_positional)

    class NotAHost:
        def intercept(self, capability, run, input=None, **kw):
            return run(input)  # no policy at all

    with pytest.raises(TypeError, match="capability.Host"):
        governed(NotAHost())
    with pytest.raises(TypeError, match="name"):
        governed(host, "")


def test_refuses_a_host_whose_intercept_is_overridden(tmp_path):
    class Lenient(capability.Host):
        def intercept(self, capability, run, input=None, **kw):
            return run(dict(input or {}))  # skips every policy

    with pytest.raises(TypeError, match="overrides the engine's intercept"):
        governed(Lenient(tmp_path / "a", memory=True))

    patched = capability.Host(tmp_path / "b", memory=True)
    patched.intercept = lambda capability, run, input=None, **kw: run(input)
    with pytest.raises(TypeError, match="overrides the engine's intercept"):
        governed(patched)
