"""The native API: decisions, approvals, audit, receipts, errors, async."""

import asyncio
import json
import os
import subprocess
import sys
import threading
import time

import pytest

import capability
from capability import (
    ApprovalRequired, CapabilityError, Completed, Denied, Failed, Host, NeedsApproval, NotFound,
    allow, approval_required, deny, log_only, redact, route, transform_input, transform_output,
)


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path / "home", agent="bot")


def test_intercept_allows_and_returns_the_callables_own_object(host):
    host.register("lookup", "retrieval", risk="low")
    marker = object()
    calls = []

    def run(args):
        calls.append(args)
        return marker

    assert host.intercept("lookup", run, {"q": "x"}, action_type="retrieval") is marker
    assert calls == [{"q": "x"}]


def test_deny_before_execution_never_runs_and_is_audited(host):
    host.register("refund", "tool", risk="high")

    @host.policy(target="refund", name="limit", version="2")
    def limit(ctx):
        if ctx.arg("amount", 0) > 100:
            return deny("Refund above $100 requires approval", code="over_limit")
        return allow("small")

    ran = []
    with pytest.raises(Denied) as e:
        host.intercept("refund", lambda a: ran.append(a), {"amount": 500})
    assert ran == []
    err = e.value
    assert err.code == "PERMISSION_DENIED" and err.decision_code == "over_limit"
    assert (err.policy_name, err.policy_version, err.stage) == ("limit", "2", "before_capability")
    assert err.action_id.startswith("act_")
    assert str(err) == "Refund above $100 requires approval"
    events = [r["event"] for r in host.audit(capability="refund")]
    assert [e["outcome"] for e in events] == ["denied_before_execution"]
    assert events[0]["reason"] == "Refund above $100 requires approval"
    assert events[0]["agent_id"] == "bot"
    assert host.verify_audit()["ok"]


def test_a_python_policy_that_raises_denies_fail_closed(host):
    host.register("t", "tool")
    broken = host.add_policy(lambda ctx: 1 / 0, name="broken")
    with pytest.raises(Denied) as e:
        host.intercept("t", lambda a: "ran", {})
    assert "ZeroDivisionError" in e.value.reason and e.value.decision_code == "policy_error"
    assert host.remove_policy(broken) and not host.remove_policy(broken)
    assert host.intercept("t", lambda a: "ran", {}) == "ran"
    host.add_policy(lambda ctx: "yes", name="wrong-type", target="u")
    host.register("u", "tool")
    with pytest.raises(Denied) as e:
        host.intercept("u", lambda a: "ran", {})
    assert "not a Decision" in e.value.reason


def test_the_callables_exception_propagates_unchanged_and_is_audited(host):
    host.register("boom", "tool")
    seen = []
    host.add_policy(lambda ctx: seen.append(ctx.error) or allow(), stage="on_error")

    class Boom(RuntimeError):
        pass

    with pytest.raises(Boom, match="kaput"):
        host.intercept("boom", lambda a: (_ for _ in ()).throw(Boom("kaput")), {})
    assert seen and "kaput" in seen[0]
    event = host.audit(capability="boom")[-1]["event"]
    assert event["outcome"] == "execution_failed"
    assert event["metadata"]["error_message"].endswith("kaput")


def test_redact_and_transform_act_on_python_values(host):
    host.register("card", "tool")
    host.add_policy(lambda ctx: transform_input({"currency": "EUR"}), target="card")
    host.add_policy(lambda ctx: redact("/number", "/holders/*/ssn"), target="card",
                    stage="after_capability")
    host.add_policy(lambda ctx: transform_output({"checked": True}), target="card",
                    stage="after_capability")
    out = host.intercept("card", lambda a: {
        "number": "4111", "currency": a["currency"],
        "holders": [{"ssn": "1"}, {"ssn": "2", "name": "b"}]}, {"currency": "USD"})
    assert out == {"number": "[REDACTED]", "currency": "EUR", "checked": True,
                   "holders": [{"ssn": "[REDACTED]"}, {"ssn": "[REDACTED]", "name": "b"}]}


def test_route_calls_the_routed_callable(host):
    calls = []
    host.register("model.big", "model", risk="high", function=lambda a: calls.append("big") or "B")
    host.register("model.small", "model", function=lambda a: calls.append("small") or "S")
    host.add_policy(lambda ctx: route("model.small", reason="cheaper"), target="model.big")
    assert host.intercept("model.big", lambda a: calls.append("direct") or "D", {},
                          action_type="model_call") == "S"
    assert calls == ["small"]


def test_cedar_and_python_policies_side_by_side_with_priority_and_log_only(tmp_path):
    cedar = tmp_path / "p.cedar"
    cedar.write_text('''permit(principal, action, resource);
@id("no-prod-delete") @reason("no deletes in prod")
forbid(principal, action, resource) when { resource.name == "db.delete" && context.environment == "prod" };
''')
    host = Host(tmp_path / "home", policies=[cedar], environment="prod")
    host.register("db.delete", "database", risk="critical")
    host.register("db.read", "database")
    order = []
    host.add_policy(lambda ctx: order.append("late") or allow(), priority=50)
    host.add_policy(lambda ctx: order.append("early") or log_only("watching"), priority=-5)
    with pytest.raises(Denied) as e:
        host.intercept("db.delete", lambda a: "gone", {}, action_type="database_query")
    assert e.value.reason == "no deletes in prod"
    assert order == ["early", "late"]
    assert host.intercept("db.read", lambda a: "rows", {}, action_type="database_query") == "rows"
    assert host.intercept("db.delete", lambda a: "gone", {}, action_type="database_query",
                          environment="dev") == "gone"


def test_shadow_mode_records_without_enforcing(tmp_path):
    host = Host(tmp_path / "home", shadow=True)
    host.register("t", "tool")
    host.add_policy(lambda ctx: deny("would deny"))
    assert host.intercept("t", lambda a: "ran", {}) == "ran"
    event = host.audit(capability="t")[-1]["event"]
    assert event["shadow"] == "deny"


def test_approval_required_then_approved_by_a_human_then_resumed_once(host):
    host.register("wire", "tool", risk="critical", effect="financial")
    host.add_policy(lambda ctx: approval_required("wires need a human"), target="wire")
    ran = []
    with pytest.raises(ApprovalRequired) as e:
        host.intercept("wire", lambda a: ran.append(a) or "sent", {"usd": 900})
    approval_id = e.value.approval_id
    assert approval_id and ran == []
    pending = host.approvals(status="pending")
    assert [a["id"] for a in pending] == [approval_id]
    # The agent that asked cannot approve its own request.
    with pytest.raises(CapabilityError) as self_approval:
        host.approve(approval_id, by="bot")
    assert self_approval.value.code == "SELF_APPROVAL"
    token = host.approve(approval_id, by="alice", note="ok")
    assert host.intercept("wire", lambda a: ran.append(a) or "sent", {"usd": 900},
                          approval_token=token) == "sent"
    assert ran == [{"usd": 900}]
    # Single use, and bound to the input.
    with pytest.raises(Denied):
        host.intercept("wire", lambda a: "again", {"usd": 900}, approval_token=token)
    assert host.approvals(status="consumed")[0]["id"] == approval_id


def test_reject(host):
    host.register("wire", "tool")
    host.add_policy(lambda ctx: approval_required("human"), target="wire")
    with pytest.raises(ApprovalRequired) as e:
        host.intercept("wire", lambda a: "sent", {})
    host.reject(e.value.approval_id, by="alice", note="no")
    assert host.approvals(status="denied")[0]["id"] == e.value.approval_id


def test_unknown_capability_is_not_found(host):
    with pytest.raises(NotFound) as e:
        host.intercept("nope", lambda a: 1, {})
    assert isinstance(e.value, KeyError) and e.value.code == "NOT_FOUND"


def test_bad_arguments_are_clear_errors(host):
    host.register("t", "tool")
    with pytest.raises(TypeError, match="not JSON"):
        host.intercept("t", lambda a: 1, {"x": object()})
    with pytest.raises(ValueError, match="action_type"):
        host.intercept("t", lambda a: 1, {}, action_type="teleport")
    with pytest.raises(ValueError):
        host.register("x", "spaceship")
    with pytest.raises(ValueError, match="PostgreSQL"):
        Host(store="postgres://localhost/db")
    with pytest.raises(CapabilityError) as e:
        host.register("text/slugify", "tool")
    assert e.value.code == "INVALID_INPUT"


def test_scopes_granted_to_the_agent(tmp_path):
    host = Host(tmp_path / "home", scopes=["refunds:read"])
    host.register("refund", "tool", scopes=["refunds:create"])
    host.add_policy(lambda ctx: allow() if not ctx.missing_scopes() else deny("missing scope"))
    with pytest.raises(Denied):
        host.intercept("refund", lambda a: "x", {})
    assert host.intercept("refund", lambda a: "x", {}, scopes=["refunds:create"]) == "x"


def test_policy_context_fields(tmp_path):
    host = Host(tmp_path / "home", agent="a1", tenant="acme", principal="u1", environment="staging")
    host.register("m", "model", risk="high", owner="ml", data_namespace="chat")
    seen = {}

    def look(ctx):
        seen.update(stage=ctx.stage, agent=ctx.agent_id, tenant=ctx.tenant_id,
                    principal=ctx.principal_id, env=ctx.environment, risk=ctx.capability["risk"],
                    owner=ctx.capability["owner"], high=ctx.is_high_risk, labels=ctx.labels,
                    meta=ctx.metadata, cost=ctx.estimated_cost_usd, kind=ctx.action_type,
                    absent=ctx.arg("missing", "dflt"), none=ctx.arg("n", "dflt"))
        return allow()

    host.add_policy(look)
    host.intercept("m", lambda a: "ok", {"n": None}, action_type="model_call",
                   labels={"team": "x"}, metadata={"k": 1}, estimated_cost_usd=0.5)
    assert seen == {"stage": "before_capability", "agent": "a1", "tenant": "acme",
                    "principal": "u1", "env": "staging", "risk": "high", "owner": "ml",
                    "high": True, "labels": {"team": "x"}, "meta": {"k": 1}, "cost": 0.5,
                    "kind": "model_call", "absent": "dflt", "none": None}


def test_evaluate_has_no_audit(host):
    host.register("t", "tool")
    host.add_policy(lambda ctx: deny("no"))
    d = host.evaluate("t", {})
    assert d.type == "deny" and d.denied and not d.allowed and d.reason == "no"
    assert host.audit(capability="t") == []


def test_invoke_outcomes_receipts_and_the_cap_cli_reads_the_same_home(tmp_path, cap_bin):
    home = tmp_path / "home"
    host = Host(home, agent="py")
    done = host.invoke("text/slugify", {"text": "Hello Python World"})
    assert isinstance(done, Completed) and done.output == {"slug": "hello-python-world"}
    assert done.receipt["receiptId"] == done.receipt_id
    failed = host.invoke("text/slugify", {"wrong": 1})
    assert isinstance(failed, Failed) and failed.code == "INVALID_INPUT"
    with pytest.raises(CapabilityError) as e:
        failed.raise_()
    assert e.value.code == "INVALID_INPUT"
    host.register("refund", "tool")
    host.add_policy(lambda ctx: deny("no refunds"), target="refund")
    with pytest.raises(Denied):
        host.intercept("refund", lambda a: 1, {})
    assert host.receipt(done.receipt_id)["receiptId"] == done.receipt_id
    assert host.receipt("receipt_missing") is None
    host.flush()
    tail = subprocess.run([cap_bin, "audit", "tail", "--home", str(home), "--json"],
                          capture_output=True, text=True)
    if tail.returncode != 0:  # older flags: plain output
        tail = subprocess.run([cap_bin, "audit", "tail", "--home", str(home)],
                              capture_output=True, text=True)
    assert tail.returncode == 0, tail.stderr
    assert "refund" in tail.stdout and "text/slugify" in tail.stdout
    verify = subprocess.run([cap_bin, "audit", "verify", "--home", str(home)],
                            capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    receipts = subprocess.run([cap_bin, "receipts", "list", "--home", str(home)],
                              capture_output=True, text=True)
    assert done.receipt_id in receipts.stdout


def test_invoke_needs_approval_then_resume(tmp_path):
    cedar = tmp_path / "p.cedar"
    cedar.write_text('''permit(principal, action, resource);
@decision("approval_required") @reason("secrets need a human")
forbid(principal, action, resource) when { context.input.text like "*secret*" };
''')
    host = Host(tmp_path / "home", policies=[cedar], agent="bot")
    pending = host.invoke("text/slugify", {"text": "a secret plan"})
    assert isinstance(pending, NeedsApproval) and pending.reason == "secrets need a human"
    token = host.approve(pending.approval_id, by="alice")
    done = host.resume("text/slugify", {"text": "a secret plan"}, token)
    assert isinstance(done, Completed) and done.output == {"slug": "a-secret-plan"}
    again = host.resume("text/slugify", {"text": "a secret plan"}, token)
    assert isinstance(again, Failed) and again.code == "PERMISSION_DENIED"


def test_record_appends_foreign_events_to_the_chain(host):
    event = {
        "event_id": "evt_" + "a" * 32, "timestamp": "2026-12-03T10:00:00.123456+00:00",
        "action_id": "act_" + "b" * 32, "trace_id": "tr_" + "c" * 32, "agent_id": "brane-agent",
        "tenant_id": None, "principal_id": None, "environment": "dev",
        "capability_name": "send_email", "capability_type": "tool", "capability_risk": "medium",
        "action_type": "tool_call", "stage": "before_capability", "decision": "allow",
        "outcome": "executed", "reason": None, "policy_name": "p", "policy_version": None,
        "input_summary": None, "output_summary": None, "labels": {}, "metadata": {"x": 1},
    }
    assert host.record(event) == event["event_id"]
    got = host.audit(agent="brane-agent")
    assert got[0]["event"]["timestamp"] == "2026-12-03T10:00:00.123Z"
    assert host.verify_audit()["ok"]
    with pytest.raises(ValueError):
        host.record({**event, "capability_risk": "extreme"})
    lines = host.export_audit().splitlines()
    assert any(json.loads(line)["event_id"] == event["event_id"] for line in lines)


def test_async_intercept_runs_async_callables_without_blocking_the_loop(host):
    host.register("fetch", "external_api")
    host.add_policy(lambda ctx: deny("blocked") if ctx.arg("url") == "bad" else allow())

    async def fetch(args):
        await asyncio.sleep(0.05)
        return {"url": args["url"], "thread": threading.current_thread().name}

    async def main():
        ticks = []

        async def ticker():
            for _ in range(5):
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        loop_thread = threading.current_thread().name
        t = asyncio.create_task(ticker())
        out = await asyncio.gather(*(host.intercept_async("fetch", fetch, {"url": f"u{i}"})
                                     for i in range(4)))
        await t
        with pytest.raises(Denied):
            await host.intercept_async("fetch", fetch, {"url": "bad"})
        done = await host.invoke_async("text/slugify", {"text": "Async Call"})
        return out, ticks, loop_thread, done

    out, ticks, loop_thread, done = asyncio.run(main())
    assert [o["url"] for o in out] == ["u0", "u1", "u2", "u3"]
    assert all(o["thread"] == loop_thread for o in out)  # the coroutine ran on the loop
    assert len(ticks) == 5  # the loop kept ticking while policies ran
    assert isinstance(done, Completed) and done.output == {"slug": "async-call"}


def test_the_gil_is_released_while_an_invoke_runs(tmp_path):
    # With a switch interval of minutes, this thread never hands the GIL over by itself:
    # the other thread can only run while the engine has released it.
    host = Host(tmp_path / "home")
    gate = threading.Lock()
    gate.acquire()
    ran = threading.Event()

    def waiter():
        with gate:  # blocks (without the GIL) until the main thread opens the gate
            ran.set()

    interval = sys.getswitchinterval()
    t = threading.Thread(target=waiter)
    t.start()
    sys.setswitchinterval(300)
    try:
        gate.release()  # the waiter may go on, but it needs the GIL, which this thread holds
        calls = 0
        while not ran.is_set() and calls < 5000:
            host.invoke("text/slugify", {"text": "x y"})
            calls += 1
    finally:
        sys.setswitchinterval(interval)
        t.join()
    assert ran.is_set(), "no other thread ran during 5000 invokes: the GIL was held"


def test_a_sandbox_decision_is_never_claimed_for_an_in_process_callable(host):
    host.register("run_code", "sandbox", risk="high")
    host.add_policy(lambda ctx: capability.sandbox("wasm", network=False), target="run_code")
    ran = []
    with pytest.raises(CapabilityError) as e:
        host.intercept("run_code", lambda a: ran.append(a) or "ran", {"src": "1+1"},
                       action_type="sandbox_execution")
    assert e.value.code == "ISOLATION_UNAVAILABLE" and ran == []
    assert host.audit(capability="run_code")[-1]["event"]["outcome"] == "execution_failed"
    # A requirement of in-process execution is met.
    host.register("calc", "tool")
    host.add_policy(lambda ctx: capability.sandbox("in_process", network=True), target="calc")
    assert host.intercept("calc", lambda a: 2, {}) == 2


def test_the_callable_gets_the_callers_dict_unless_a_policy_transformed_it(host):
    host.register("same", "tool")
    given = {"x": 1}
    assert host.intercept("same", lambda a: a is given, given) is True
    host.register("changed", "tool")
    host.add_policy(lambda ctx: transform_input({"x": 2}), target="changed")
    seen = []
    host.intercept("changed", lambda a: seen.append(a), given)
    assert seen == [{"x": 2}] and seen[0] is not given and given == {"x": 1}


def test_a_memory_host_without_a_home_writes_nothing_to_the_users_home(tmp_path):
    script = """
import gc, os, sys
from pathlib import Path
import capability
host = capability.Host(memory=True)
home = Path(host.home)
host.register("t", "tool")
assert host.intercept("t", lambda a: 1, {}) == 1
assert home.exists() and home.name.startswith("capability-memory-")
del host
gc.collect()
print(home.exists())
"""
    env = dict(os.environ, CAP_HOME=str(tmp_path / "cap-home"),
               XDG_DATA_HOME=str(tmp_path / "xdg"), HOME=str(tmp_path / "user"))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"  # the scratch home went with the host
    assert not (tmp_path / "cap-home").exists() and not (tmp_path / "xdg").exists()
    assert not (tmp_path / "user").exists()


@pytest.mark.parametrize("memory", [False, True])
def test_threads_share_one_host_without_deadlock(tmp_path, memory):
    host = Host(tmp_path / "home", agent="bot", memory=memory)
    host.register("t", "tool")
    host.add_policy(lambda ctx: allow() if ctx.arg("n", 0) >= 0 else deny("negative"))
    errors = []

    def intercepts(k):
        try:
            for i in range(100):
                assert host.intercept("t", lambda a: a["n"] * 2, {"n": i}) == i * 2
                # A callable that itself goes through the host (a handoff).
                assert host.intercept("t", lambda a: host.intercept("t", lambda b: 1, {"n": 0}),
                                      {"n": k}) == 1
        except Exception as e:  # reported below
            errors.append(e)

    def invokes():
        try:
            for _ in range(20):
                assert isinstance(host.invoke("text/slugify", {"text": "a b"}), Completed)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=intercepts, args=(k,)) for k in range(4)]
    threads.append(threading.Thread(target=invokes))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread is stuck"
    assert errors == []
    host.flush()
    assert len(host.audit(capability="t", limit=2000)) == 4 * 300
    assert host.verify_audit()["ok"]
