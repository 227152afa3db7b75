"""Brane's three workloads from Python, in one process: brane-core against the capability package.

    python bench.py [--jsonl results.jsonl]

Implementations, each timed call by call on the same capability (`svc/c7`, adds `a` and `b`,
one of 48 registered), the same input and the same policy logic:

* `brane-core`: brane-core 0.1.0a2 (PyPI), the workloads of `benches/peers/brane_bench.py`.
* `capability.brane`: the same workload code, unchanged, with `brane` resolved to
  `capability.brane` (the drop-in).
* `native, python policies`: `capability.Host(memory=True)`, the capabilities declared with
  `register`, the policies added with `add_policy` (the same logic, on the native
  PolicyContext), each call `host.intercept("svc/c7", run, input)`.
* `native, cedar`: the same host with the policies as a Cedar file instead (the text of
  `crates/capability-runtime/benches/peers.rs` and of the `governed` bench's 100 policies).

Workloads: `1_policy` (one policy, no audit kept beyond memory), `100_policies` (4 global
policies and 96 that each name one of the 48 capabilities), `1_policy_jsonl` (one policy, the
audit persisted: brane-core's `JsonlAuditSink` for the two Brane APIs, the host's own audit log
in a capability home, `Host(home=tmpdir)`, for the native API).

Prints a table with p50/p99 and ratios (brane-core's time / this time: higher is faster than
brane-core). PEERS_WARMUP and PEERS_SAMPLES (default 500 and 5000, as brane_bench.py) change the
number of calls. Run it through run.sh, which makes the venv; a debug build of the native
module gives meaningless figures.
"""

import argparse
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = HERE.parent / "peers" / "brane_bench.py"

WARMUP = int(os.environ.get("PEERS_WARMUP", "500"))
SAMPLES = int(os.environ.get("PEERS_SAMPLES", "5000"))
CAPABILITIES = 48
INPUT = {"a": 20, "b": 22, "tenant": "acme"}
WORKLOADS = ("1_policy", "100_policies", "1_policy_jsonl")
LABELS = {
    "1_policy": "1 policy",
    "100_policies": "100 policies",
    "1_policy_jsonl": "1 policy, audit persisted",
}


def add(a, b, tenant):
    return {"result": a + b}


# --- brane-core and capability.brane: brane_bench.py's own code ---------------------------------

def brane_workloads(brane_module, alias):
    """Load benches/peers/brane_bench.py with ``import brane`` resolving to ``brane_module``."""
    saved = sys.modules.get("brane")
    sys.modules["brane"] = brane_module
    try:
        spec = importlib.util.spec_from_file_location(alias, PEERS)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            sys.modules.pop("brane", None)
        else:
            sys.modules["brane"] = saved
    return module


def brane_calls(module, tmp):
    yield "1_policy", module.runtime(module.one_policy)
    yield "100_policies", module.runtime(module.hundred_policies)
    yield "1_policy_jsonl", module.runtime(module.one_policy, os.path.join(tmp, "audit.jsonl"))


# --- the native API -----------------------------------------------------------------------------

def native_one_policy(host):
    from capability import allow, deny

    def limit(ctx):
        if ctx.arg("a", 0) > 107:
            return deny("amount too large")
        return allow()

    host.add_policy(limit, target="svc/c7", name="limit")


def native_hundred_policies(host):
    from capability import allow, deny

    # The 4 global policies (allow-all, prod-high-risk, scopes, budget) ...
    host.add_policy(lambda ctx: allow(), name="allow-all")

    def prod_high_risk(ctx):
        if ctx.environment == "prod" and ctx.capability["risk"] in ("high", "critical"):
            return deny("high risk in prod")
        return allow()

    def scopes(ctx):
        if ctx.missing_scopes():
            return deny("missing scope")
        return allow()

    def budget(ctx):
        if ctx.action_type == "model_call" and (ctx.estimated_cost_usd or 0) > 5.0:
            return deny("expensive")
        return allow()

    host.add_policy(prod_high_risk, name="prod-high-risk")
    host.add_policy(scopes, name="scopes")
    host.add_policy(budget, name="budget")

    # ... and 96 that each name one capability: 48 amount limits, 48 tenant checks.
    for i in range(96):
        cap = "svc/c%d" % (i % CAPABILITIES)
        if i < CAPABILITIES:

            def limit(ctx, limit_value=100 + i):
                if ctx.arg("a", 0) > limit_value:
                    return deny("amount too large")
                return allow()

            host.add_policy(limit, target=cap, name="limit-%d" % i)
        else:

            def tenant(ctx):
                t = ctx.arg("tenant")
                if t is not None and t != ctx.tenant_id:
                    return deny("cross-tenant")
                return allow()

            host.add_policy(tenant, target=cap, name="tenant-%d" % i)


# The Cedar text of crates/capability-runtime/benches/peers.rs (one policy) and of
# crates/capability-test-support/src/governed.rs (the 100 policies).
CEDAR_ONE_POLICY = """@id("limit") @reason("amount too large")
permit(principal, action, resource) unless { context.input has a && context.input.a > 107 };
"""


def cedar_hundred_policies():
    text = """@id("allow-all") permit(principal, action, resource);
@id("prod-high-risk") @reason("high risk in prod")
forbid(principal, action, resource) when { context.environment == "prod" && resource.riskLevel >= 4 };
@id("scopes") @reason("missing scope")
forbid(principal, action, resource) unless { principal.scopes.containsAll(resource.scopes) };
@id("budget") @decision("approval_required") @reason("expensive")
forbid(principal, action == Action::"model_call", resource)
when { context has estimatedCostUsd && context.estimatedCostUsd.greaterThan(decimal("5.0")) };
"""
    for i in range(96):
        cap = i % CAPABILITIES
        if i < CAPABILITIES:
            text += ('@id("limit-%d") @reason("amount too large")\nforbid(principal, action == Action::"tool_call", '
                     'resource == Capability::"svc/c%d") when { context.input has a && context.input.a > %d };\n'
                     % (i, cap, 100 + i))
        else:
            text += ('@id("tenant-%d") @reason("cross-tenant")\nforbid(principal, action, resource == '
                     'Capability::"svc/c%d") when { context.input has tenant && context.input.tenant != context.tenant };\n'
                     % (i, cap))
    return text


def native_call(host):
    for i in range(CAPABILITIES):
        host.register("svc/c%d" % i, "tool", risk="medium", owner="payments")

    def run(input):
        return add(**input)

    intercept = host.intercept

    def call(**kw):
        return intercept("svc/c7", run, kw)

    return call


def native_calls(tmp):
    from capability import Host

    def host(**kw):
        return Host(**{"agent": "bench-agent", "tenant": "acme", **kw})

    # Python policies.
    h = host(home=os.path.join(tmp, "py-mem"), memory=True)
    native_one_policy(h)
    yield "native, python policies", "1_policy", native_call(h)
    h = host(home=os.path.join(tmp, "py-mem-100"), memory=True)
    native_hundred_policies(h)
    yield "native, python policies", "100_policies", native_call(h)
    h = host(home=os.path.join(tmp, "py-home"))
    native_one_policy(h)
    yield "native, python policies", "1_policy_jsonl", native_call(h)

    # Cedar.
    one = os.path.join(tmp, "one.cedar")
    hundred = os.path.join(tmp, "hundred.cedar")
    Path(one).write_text(CEDAR_ONE_POLICY)
    Path(hundred).write_text(cedar_hundred_policies())
    yield "native, cedar", "1_policy", native_call(host(home=os.path.join(tmp, "cedar-mem"), memory=True,
                                                         policies=[one]))
    yield "native, cedar", "100_policies", native_call(host(home=os.path.join(tmp, "cedar-mem-100"), memory=True,
                                                             policies=[hundred]))
    yield "native, cedar", "1_policy_jsonl", native_call(host(home=os.path.join(tmp, "cedar-home"), policies=[one]))


# --- timing ---------------------------------------------------------------------------------------

def measure(implementation, workload, call):
    """brane_bench.py's measure: one checked call, WARMUP calls, SAMPLES timed calls."""
    result = call(**INPUT)
    assert result == {"result": 42}, (implementation, workload, result)
    for _ in range(WARMUP):
        call(**INPUT)
    samples = []
    for _ in range(SAMPLES):
        t = time.perf_counter_ns()
        call(**INPUT)
        samples.append(time.perf_counter_ns() - t)
    samples.sort()
    p = lambda q: samples[min(int(len(samples) * q), len(samples) - 1)] / 1000.0  # noqa: E731
    row = {"implementation": implementation, "workload": workload, "p50_us": p(0.5), "p99_us": p(0.99),
           "mean_us": sum(samples) / len(samples) / 1000.0, "samples": SAMPLES}
    print("  %-26s %-16s p50 %8.1f µs  p99 %8.1f µs" % (implementation, workload, row["p50_us"], row["p99_us"]),
          file=sys.stderr, flush=True)
    return row


def table(rows):
    base = {r["workload"]: r for r in rows if r["implementation"] == "brane-core"}
    out = ["| workload | implementation | p50 | p99 | ratio p50 | ratio p99 |",
           "| --- | --- | --- | --- | --- | --- |"]
    for workload in WORKLOADS:
        b = base.get(workload)
        for r in (r for r in rows if r["workload"] == workload):
            ratio = ("%.1f× | %.1f×" % (b["p50_us"] / r["p50_us"], b["p99_us"] / r["p99_us"])) if b else "— | —"
            out.append("| %s | %s | %.1f µs | %.1f µs | %s |" % (
                LABELS[workload], r["implementation"], r["p50_us"], r["p99_us"], ratio))
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jsonl", help="also write every row as a JSON line to this file")
    args = parser.parse_args()

    import brane as brane_core  # brane-core 0.1.0a2
    import capability
    import capability.brane

    versions = {}
    try:
        import importlib.metadata as metadata
        versions["brane-core"] = metadata.version("brane-core")
        versions["capability"] = metadata.version("capability")
    except Exception:  # the dev tree, not installed
        versions.setdefault("capability", "source tree")
    print("brane-core %s (%s); capability %s (%s); warmup %d, samples %d" % (
        versions.get("brane-core", "?"), os.path.dirname(brane_core.__file__), versions["capability"],
        os.path.dirname(capability.__file__), WARMUP, SAMPLES), file=sys.stderr, flush=True)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for implementation, module in (("brane-core", brane_core), ("capability.brane", capability.brane)):
            workloads = brane_workloads(module, "brane_bench_" + implementation.replace("-", "_").replace(".", "_"))
            d = os.path.join(tmp, implementation)
            os.makedirs(d)
            for workload, call in brane_calls(workloads, d):
                rows.append(measure(implementation, workload, call))
        for implementation, workload, call in native_calls(tmp):
            rows.append(measure(implementation, workload, call))

    if args.jsonl:
        with open(args.jsonl, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    print(table(rows))
    print()
    print("ratio = brane-core's time / this time (higher is faster than brane-core); %s, Python %s; "
          "absolute times vary from machine to machine." % (platform.machine(), platform.python_version()))


if __name__ == "__main__":
    main()
