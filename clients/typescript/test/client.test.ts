// End-to-end: the client against a real `cap serve` (CAP_BIN); see server.ts for the policy,
// the capabilities and the budget. Skipped without CAP_BIN unless CAPABILITY_TEST_REQUIRE_TS=1.

import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  ActionDenied,
  ApprovalRequired,
  CapabilityApiError,
  CapabilityClient,
  isBatchError,
  type ActionRequest,
  type ActionType,
  type Approval,
} from "../src/index.js";
import { approve, skipReason, startServer, type TestServer } from "./server.js";

/** A checker for `assert.rejects`: a CapabilityApiError with this status. */
const apiError = (status: number) => (err: unknown) => {
  assert.ok(err instanceof CapabilityApiError, `expected a CapabilityApiError, got ${err}`);
  assert.equal(err.status, status, `${err.code}: ${err.message}`);
  assert.equal(typeof err.code, "string");
  assert.ok(err.code.length > 0);
  return true;
};

describe("CapabilityClient against cap serve", { skip: skipReason, timeout: 180_000 }, () => {
  let server: TestServer;
  let agent: CapabilityClient;
  const client = (token: string) => new CapabilityClient({ baseUrl: server.baseUrl, token, timeoutMs: 20_000 });

  before(async () => {
    server = await startServer();
    agent = client(server.tokens.agent);
  }, { timeout: 60_000 });

  after(async () => {
    await server?.stop();
  });

  it("allows a model call and delivers its output with a receipt", async () => {
    const d = await agent.decide({
      actionType: "model_call",
      capability: "openai.gpt-4o",
      input: { prompt: "hi" },
      estimatedCostUsd: 0.01,
      tokens: { input: 100, output: 50 },
      labels: { suite: "typescript" },
    });
    assert.equal(d.decision, "allow");
    assert.match(d.actionId, /^act_/);
    assert.equal(d.capability, "openai.gpt-4o");
    assert.deepEqual(d.input, { prompt: "hi" });
    assert.ok(d.expiresAt && !Number.isNaN(Date.parse(d.expiresAt)), `expiresAt: ${d.expiresAt}`);

    const output = { text: "hello", choices: [1, 2] };
    const r = await agent.result(d.actionId, { output, costUsd: 0.01, tokens: { input: 100, output: 50 } });
    assert.equal(r.actionId, d.actionId);
    assert.equal(r.decision, "allow");
    assert.equal(r.withheld, false);
    assert.deepEqual(r.output, output);
    assert.ok(typeof r.receiptId === "string" && r.receiptId.length > 0);
    assert.ok(typeof r.eventId === "string" && r.eventId.length > 0);

    // The action is closed: a second result is refused.
    await assert.rejects(agent.result(d.actionId, { output }), apiError(404));
  });

  it("refuses a result for an unknown action with a 404", async () => {
    await assert.rejects(agent.result("act_does_not_exist", { output: 1 }), apiError(404));
  });

  it("masks the pointer a redact policy names, in the after stage", async () => {
    // A redact policy decides on the output: the before stage allows.
    const d = await agent.decide({ actionType: "retrieval", capability: "docs.search", input: { query: "x" } });
    assert.equal(d.decision, "allow");

    const r = await agent.result(d.actionId, { output: { ssn: "123-45-6789", title: "x" } });
    assert.equal(r.withheld, false);
    assert.equal(r.decision, "redact");
    assert.ok(r.policyIds.includes("redact-ssn"), `policyIds: ${r.policyIds}`);
    const out = r.output as { ssn: unknown; title: unknown };
    assert.notEqual(out.ssn, "123-45-6789");
    assert.equal(out.ssn, "[REDACTED]"); // capability_policy::pointer::REDACTED
    assert.equal(out.title, "x");
  });

  it("govern: a denied handoff throws ActionDenied without running the function", async () => {
    let called = false;
    await assert.rejects(
      agent.govern({ actionType: "agent_handoff", capability: "agents.handoff", input: { target: "untrusted-agent" } }, () => {
        called = true;
        return "handed off";
      }),
      (err: unknown) => {
        assert.ok(err instanceof ActionDenied, `expected ActionDenied, got ${err}`);
        assert.equal(err.decision.decision, "deny");
        assert.ok(err.decision.policyIds.includes("no-handoff-to-untrusted"), `policyIds: ${err.decision.policyIds}`);
        return true;
      },
    );
    assert.equal(called, false);
  });

  it("govern: an allowed handoff runs the function on the decided input and returns its output", async () => {
    let seen: unknown;
    const out = await agent.govern(
      { actionType: "agent_handoff", capability: "agents.handoff", input: { target: "trusted-agent" } },
      (input, decision) => {
        seen = input;
        assert.equal(decision.decision, "allow");
        return { accepted: true, by: input.target };
      },
    );
    assert.deepEqual(seen, { target: "trusted-agent" });
    assert.deepEqual(out, { accepted: true, by: "trusted-agent" });
  });

  it("reports failures: result() gives execution_failed, govern() posts and rethrows", async () => {
    const d = await agent.decide({ actionType: "model_call", capability: "openai.gpt-4o-mini", input: { prompt: "x" } });
    assert.equal(d.decision, "allow");
    const f = await agent.result(d.actionId, { error: { message: "upstream timed out", type: "Timeout" } });
    assert.equal(f.actionId, d.actionId);
    assert.equal(f.outcome, "execution_failed");
    assert.ok(typeof f.receiptId === "string" && f.receiptId.length > 0);

    const boom = new Error("the model is down");
    let actionId = "";
    await assert.rejects(
      agent.govern({ actionType: "model_call", capability: "openai.gpt-4o-mini", input: { prompt: "y" } }, (_input, decision) => {
        actionId = decision.actionId;
        throw boom;
      }),
      (err: unknown) => err === boom,
    );
    assert.ok(actionId);
    // govern posted the failure, which closed the action.
    await assert.rejects(agent.result(actionId, { output: "late" }), apiError(404));
  });

  it("memory_write waits for approval; its token allows exactly one retry", async () => {
    const action: ActionRequest = { actionType: "memory_write", capability: "memory.store", input: { key: "k", value: "v" } };
    let approval: Approval | undefined;
    await assert.rejects(
      agent.govern(action, () => {
        throw new Error("must not run before the approval");
      }),
      (err: unknown) => {
        assert.ok(err instanceof ApprovalRequired, `expected ApprovalRequired, got ${err}`);
        assert.equal(err.decision.decision, "approval_required");
        assert.ok(err.decision.policyIds.includes("memory-needs-approval"), `policyIds: ${err.decision.policyIds}`);
        approval = err.approval;
        return true;
      },
    );
    assert.ok(approval && typeof approval.id === "string" && approval.id.length > 0, "the decision names its approval");

    const token = await approve(server, approval.id);
    assert.match(token, /^capapr1\./);

    const retry = await agent.decide({ ...action, approvalToken: token });
    assert.equal(retry.decision, "allow");
    const r = await agent.result(retry.actionId, { output: { stored: true } });
    assert.deepEqual(r.output, { stored: true });

    // The token is spent: the same retry again is not allowed.
    const again = await agent.decide({ ...action, approvalToken: token }).catch((err: unknown) => err);
    if (again instanceof CapabilityApiError) {
      assert.ok(again.status >= 400 && again.status < 500, `status ${again.status}`);
    } else {
      assert.ok(!(again instanceof Error), `unexpected ${again}`);
      const d = again as { decision: string };
      assert.ok(d.decision === "deny" || d.decision === "approval_required", `a spent token gave ${d.decision}`);
    }
  });

  it("routes a model call over budget to the cheaper model", async () => {
    const budget = client(server.tokens.budgetAgent);
    const ask: ActionRequest = {
      actionType: "model_call",
      capability: "openai.gpt-4o",
      input: { prompt: "a long essay" },
      estimatedCostUsd: 0.6,
    };
    const first = await budget.decide(ask);
    assert.equal(first.decision, "allow");
    assert.equal(first.capability, "openai.gpt-4o");
    await budget.result(first.actionId, { output: { text: "essay" }, costUsd: 0.6 });

    const second = await budget.decide(ask);
    assert.equal(second.decision, "route");
    assert.equal(second.capability, "openai.gpt-4o-mini");
    assert.ok(second.routedFrom?.includes("openai.gpt-4o"), `routedFrom: ${JSON.stringify(second.routedFrom)}`);
    await budget.result(second.actionId, { output: { text: "short essay" }, costUsd: 0.05 });
  });

  it("decides a batch in order", async () => {
    const results = await agent.decideBatch([
      { actionType: "model_call", capability: "openai.gpt-4o-mini", input: { prompt: "one" } },
      { actionType: "agent_handoff", capability: "agents.handoff", input: { target: "untrusted-agent" } },
      { actionType: "retrieval", capability: "docs.search", input: { query: "three" } },
    ]);
    assert.equal(results.length, 3);
    const decisions = results.map((r) => (isBatchError(r) ? `error ${r.error.code}: ${r.error.message}` : r.decision));
    assert.deepEqual(decisions, ["allow", "deny", "allow"]);
    const ids = results.map((r) => (isBatchError(r) ? "" : r.actionId));
    assert.equal(new Set(ids).size, 3);
    for (const i of [0, 2]) await agent.result(ids[i]!, { output: { n: i } });
  });

  it("accepts an inline capability", async () => {
    const d = await agent.decide({
      actionType: "tool_call",
      capability: { name: "inline.echo", type: "tool", risk: "low" },
      input: { text: "hi" },
    });
    assert.equal(d.decision, "allow");
    assert.equal(d.capability, "inline.echo");
    const r = await agent.result(d.actionId, { output: { text: "hi" } });
    assert.deepEqual(r.output, { text: "hi" });
  });

  it("registers a capability with an admin token only", async () => {
    const capability = { name: "tools.echo", type: "tool", risk: "low", owner: "ts-client" } as const;
    await assert.rejects(agent.registerCapability(capability), apiError(403));
    const registered = await client(server.tokens.admin).registerCapability(capability);
    assert.equal(registered.name, "tools.echo");
    assert.equal(registered.governance.kind, "tool");
    assert.equal(registered.governance.owner, "ts-client");

    const d = await agent.decide({ actionType: "tool_call", capability: "tools.echo", input: { text: "hi" } });
    assert.equal(d.decision, "allow");
    assert.equal(d.capability, "tools.echo");
    await agent.result(d.actionId, { output: { text: "hi" } });
  });

  it("refuses an unknown action type with a 400", async () => {
    await assert.rejects(
      agent.decide({ actionType: "teleport" as ActionType, capability: "openai.gpt-4o", input: {} }),
      apiError(400),
    );
  });

  it("refuses a wrong token with a 401", async () => {
    const stranger = client("not-a-real-token");
    await assert.rejects(
      stranger.decide({ actionType: "model_call", capability: "openai.gpt-4o", input: { prompt: "hi" } }),
      apiError(401),
    );
  });
});
