"""Brane's workloads, timed call by call, printed as JSON lines.

The same capability (`svc/c7`, adds `a` and `b`), the same input and the same policy logic as
`crates/capability-runtime/benches/peers.rs`, through brane-core's own public API: a
capability wrapped with `Runtime.wrap_capability` and policies registered with
`Runtime.before_capability`, so each call is intercepted, evaluated, executed and audited.

Workloads: `1_policy` (one policy, no audit sink), `100_policies` (4 global policies and 96
that each name one of 48 capabilities, as ours), `1_policy_jsonl` (one policy, JSONL audit).
"""

import json
import os
import sys
import tempfile
import time

from brane import Runtime, allow, deny

CAPABILITIES = 48
WARMUP = int(os.environ.get("PEERS_WARMUP", "500"))
SAMPLES = int(os.environ.get("PEERS_SAMPLES", "5000"))
INPUT = {"a": 20, "b": 22, "tenant": "acme"}


def add(a, b, tenant):
    return {"result": a + b}


def one_policy(rt):
    @rt.before_capability("svc/c7", name="limit")
    def limit(ctx):
        if ctx.args.get("a", 0) > 107:
            return deny("amount too large")
        return allow()


def hundred_policies(rt):
    # The 4 global policies of ours (allow-all, prod-high-risk, scopes, budget) ...
    @rt.before_capability("*", name="allow-all")
    def allow_all(ctx):
        return allow()

    @rt.before_capability("*", name="prod-high-risk")
    def prod_high_risk(ctx):
        a = ctx.action
        if a.environment == "prod" and a.capability.risk in ("high", "critical"):
            return deny("high risk in prod")
        return allow()

    @rt.before_capability("*", name="scopes")
    def scopes(ctx):
        granted = set(ctx.action.labels.get("scopes", "").split(",")) - {""}
        wanted = {s.name for s in ctx.action.capability.scopes}
        if not wanted <= granted:
            return deny("missing scope")
        return allow()

    @rt.before_capability("*", name="budget")
    def budget(ctx):
        a = ctx.action
        if a.action_type == "model_call" and (a.estimated_cost_usd or 0) > 5.0:
            return deny("expensive")
        return allow()

    # ... and 96 that each name one capability: 48 amount limits, 48 tenant checks.
    for i in range(96):
        cap = "svc/c%d" % (i % CAPABILITIES)
        if i < CAPABILITIES:
            limit_value = 100 + i

            def limit(ctx, limit_value=limit_value):
                if ctx.args.get("a", 0) > limit_value:
                    return deny("amount too large")
                return allow()

            rt.before_capability(cap, name="limit-%d" % i)(limit)
        else:

            def tenant(ctx):
                t = ctx.args.get("tenant")
                if t is not None and t != ctx.action.tenant_id:
                    return deny("cross-tenant")
                return allow()

            rt.before_capability(cap, name="tenant-%d" % i)(tenant)


def runtime(policies, audit_path=None):
    rt = Runtime(agent_id="bench-agent", tenant_id="acme", audit_path=audit_path)
    calls = {}
    for i in range(CAPABILITIES):
        name = "svc/c%d" % i
        calls[name] = rt.wrap_capability(add, name=name, type="tool", risk="medium", owner="payments")
    policies(rt)
    return calls["svc/c7"]


def measure(name, call):
    assert call(**INPUT) == {"result": 42}
    for _ in range(WARMUP):
        call(**INPUT)
    samples = []
    for _ in range(SAMPLES):
        t = time.perf_counter_ns()
        call(**INPUT)
        samples.append(time.perf_counter_ns() - t)
    samples.sort()
    p = lambda q: samples[min(int(len(samples) * q), len(samples) - 1)] / 1000.0
    print(json.dumps({"workload": name, "p50_us": p(0.5), "p99_us": p(0.99),
                      "mean_us": sum(samples) / len(samples) / 1000.0, "samples": SAMPLES}))
    sys.stdout.flush()


def main():
    measure("1_policy", runtime(one_policy))
    measure("100_policies", runtime(hundred_policies))
    with tempfile.TemporaryDirectory() as d:
        measure("1_policy_jsonl", runtime(one_policy, os.path.join(d, "audit.jsonl")))


if __name__ == "__main__":
    main()
