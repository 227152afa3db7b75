// The client against a fake fetch: the requests it sends and how it reads answers. These run
// without a server.

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  ActionDenied,
  ApprovalRequired,
  CapabilityApiError,
  CapabilityClient,
  OutputWithheld,
  type ActionDecision,
} from "../src/index.js";

interface Sent { url: string; method: string; headers: Record<string, string>; body: any }

/** A client whose fetch records each request and answers from `answers` in turn. */
function fake(...answers: Array<[number, unknown]>) {
  const sent: Sent[] = [];
  const fetch = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    sent.push({
      url: String(input),
      method: init?.method ?? "GET",
      headers: init?.headers as Record<string, string>,
      body: JSON.parse(String(init?.body)),
    });
    const [status, body] = answers.shift() ?? [500, { error: { code: "NO_ANSWER", message: "no answer left" } }];
    const text = typeof body === "string" ? body : JSON.stringify(body);
    return new Response(text, { status, headers: { "content-type": "application/json" } });
  };
  return { sent, client: new CapabilityClient({ baseUrl: "http://127.0.0.1:9/", token: "tok", fetch }) };
}

const decision = (d: Partial<ActionDecision>): ActionDecision => ({
  actionId: "act_1", decision: "allow", capability: "c", input: { a: 1 }, reason: null, policyIds: [], ...d,
});
const output = (o: object) => ({
  actionId: "act_1", decision: "allow", withheld: false, reason: null, policyIds: [], receiptId: "r", eventId: "e", ...o,
});

describe("CapabilityClient (fake fetch)", () => {
  it("posts an action with the bearer token, JSON and a default input", async () => {
    const { sent, client } = fake([200, decision({})]);
    const d = await client.decide({ actionType: "tool_call", capability: "c" });
    assert.equal(d.actionId, "act_1");
    assert.equal(sent[0]!.url, "http://127.0.0.1:9/api/v1/actions");
    assert.equal(sent[0]!.method, "POST");
    assert.equal(sent[0]!.headers.authorization, "Bearer tok");
    assert.equal(sent[0]!.headers["content-type"], "application/json");
    assert.deepEqual(sent[0]!.body, { actionType: "tool_call", capability: "c", input: {} });
  });

  it("posts results under the escaped action id, an undefined output as null", async () => {
    const { sent, client } = fake([200, output({ output: null })]);
    await client.result("act/1", { output: undefined, costUsd: 0.5 });
    assert.equal(sent[0]!.url, "http://127.0.0.1:9/api/v1/actions/act%2F1/result");
    assert.deepEqual(sent[0]!.body, { output: null, costUsd: 0.5 });
  });

  it("reads an error answer into a CapabilityApiError", async () => {
    const { client } = fake([409, { error: { code: "CONFLICT", message: "spent", details: { x: 1 } } }], [502, "Bad Gateway"]);
    await assert.rejects(client.decide({ actionType: "tool_call", capability: "c" }), (err: unknown) => {
      assert.ok(err instanceof CapabilityApiError);
      assert.equal(err.status, 409);
      assert.equal(err.code, "CONFLICT");
      assert.equal(err.message, "spent");
      assert.deepEqual(err.details, { x: 1 });
      return true;
    });
    await assert.rejects(client.decide({ actionType: "tool_call", capability: "c" }), (err: unknown) =>
      err instanceof CapabilityApiError && err.status === 502 && err.code === "HTTP_ERROR" && err.message === "Bad Gateway");
  });

  it("batches and unwraps the results", async () => {
    const { sent, client } = fake([200, { results: [decision({}), { error: { code: "INVALID_INPUT", message: "m" } }] }]);
    const results = await client.decideBatch([
      { actionType: "tool_call", capability: "c" },
      { actionType: "retrieval", capability: "d", input: { q: 1 } },
    ]);
    assert.equal(results.length, 2);
    assert.equal(sent[0]!.url, "http://127.0.0.1:9/api/v1/actions/batch");
    assert.deepEqual(sent[0]!.body.actions[1], { actionType: "retrieval", capability: "d", input: { q: 1 } });
  });

  it("govern runs the function on the decided input and returns the delivered output", async () => {
    const { sent, client } = fake([200, decision({ decision: "route", capability: "mini", input: { a: 2 } })], [200, output({ output: { masked: true } })]);
    const out = await client.govern({ actionType: "model_call", capability: "big", input: { a: 1 } }, (input, d) => {
      assert.deepEqual(input, { a: 2 });
      assert.equal(d.capability, "mini");
      return { raw: true };
    }, () => ({ costUsd: 0.1 }));
    assert.deepEqual(out, { masked: true });
    assert.deepEqual(sent[1]!.body, { output: { raw: true }, costUsd: 0.1 });
  });

  it("govern throws ActionDenied and ApprovalRequired without calling the function", async () => {
    const approval = { id: "apr_1", reason: "needs a human" };
    const { sent, client } = fake([200, decision({ decision: "deny", reason: "no" })], [200, decision({ decision: "approval_required", approval })]);
    const never = () => assert.fail("the function ran");
    await assert.rejects(client.govern({ actionType: "tool_call", capability: "c" }, never), ActionDenied);
    await assert.rejects(client.govern({ actionType: "tool_call", capability: "c" }, never), (err: unknown) =>
      err instanceof ApprovalRequired && err.approval?.id === "apr_1");
    assert.equal(sent.length, 2);
  });

  it("govern posts a failure and rethrows it; throws OutputWithheld when withheld", async () => {
    const { sent, client } = fake(
      [200, decision({})], [200, { actionId: "act_1", outcome: "execution_failed", receiptId: "r", eventId: "e" }],
      [200, decision({})], [200, output({ decision: "deny", output: null, withheld: true, reason: "leak" })],
    );
    const boom = new TypeError("boom");
    await assert.rejects(client.govern({ actionType: "tool_call", capability: "c" }, () => { throw boom; }), (err: unknown) => err === boom);
    assert.deepEqual(sent[1]!.body, { error: { message: "boom", type: "TypeError" } });
    await assert.rejects(client.govern({ actionType: "tool_call", capability: "c" }, () => "secret"), (err: unknown) =>
      err instanceof OutputWithheld && err.result.reason === "leak");
  });
});
