// The fixture of the end-to-end tests: a real `cap serve` on a free loopback port, in a
// temporary home, with tokens, a Cedar policy file, capabilities and a budget.

import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const CAP_BIN = process.env.CAP_BIN;

/** `false` when the end-to-end tests run, else why they are skipped. */
export const skipReason: string | false =
  CAP_BIN || process.env.CAPABILITY_TEST_REQUIRE_TS === "1"
    ? false
    : "CAP_BIN is not set: set it to the path of the `cap` binary to run these tests against a " +
      "real server (CAPABILITY_TEST_REQUIRE_TS=1 makes its absence a failure)";

export const POLICY = `permit(principal, action, resource);

@id("no-handoff-to-untrusted")
forbid(principal, action == Action::"agent_handoff", resource)
when { context.input has target && context.input.target == "untrusted-agent" };

@id("memory-needs-approval") @decision("approval_required")
forbid(principal, action == Action::"memory_write", resource);

@id("redact-ssn") @decision("redact") @redact("/ssn")
permit(principal, action == Action::"retrieval", resource);
`;

export const CAPABILITIES = {
  capabilities: [
    { name: "openai.gpt-4o", type: "model", risk: "medium" },
    { name: "openai.gpt-4o-mini", type: "model", risk: "low" },
    { name: "memory.store", type: "memory", risk: "medium" },
    { name: "docs.search", type: "retrieval" },
    { name: "agents.handoff", type: "agent" },
  ],
};

export const BUDGETS = {
  budgets: [
    {
      id: "agent-model-budget",
      per: "agent",
      windowSeconds: 3600,
      limitUsd: 1.0,
      actionTypes: ["model_call"],
      capabilities: ["openai.gpt-4o"],
      onExceed: { route: "openai.gpt-4o-mini" },
    },
  ],
};

export interface TestServer {
  /** `http://127.0.0.1:PORT`. */
  baseUrl: string;
  home: string;
  tokens: {
    /** agent-ts in acme. */
    agent: string;
    /** agent-budget in acme: its own budget, untouched by the other tests. */
    budgetAgent: string;
    /** An approver for acme. */
    approver: string;
    admin: string;
  };
  /** Everything the server wrote on stderr so far. */
  log(): string;
  stop(): Promise<void>;
}

/** Starts the server (the tokens are made first, in its home). */
export async function startServer(): Promise<TestServer> {
  if (!CAP_BIN) throw new Error("CAP_BIN is not set, and CAPABILITY_TEST_REQUIRE_TS=1 requires these tests");
  const bin = CAP_BIN;
  const dir = mkdtempSync(join(tmpdir(), "cap-ts-client-"));
  const home = join(dir, "home");
  const env = { ...process.env, CAP_HOME: home };
  // `tokens add` prints the token's record as JSON, the secret in `token` (shown only once).
  const tokenOf = (...args: string[]): string => {
    const out = execFileSync(bin, ["tokens", "add", "--home", home, ...args], { encoding: "utf8", env });
    const token = JSON.parse(out).token;
    if (typeof token !== "string" || token === "") throw new Error(`no token in: ${out}`);
    return token;
  };
  const tokens = {
    agent: tokenOf("--role", "agent", "--agent", "agent-ts", "--tenant", "acme"),
    budgetAgent: tokenOf("--role", "agent", "--agent", "agent-budget", "--tenant", "acme"),
    approver: tokenOf("--role", "approver", "--agent", "human", "--tenant", "acme"),
    admin: tokenOf("--role", "admin", "--agent", "root"),
  };
  const file = (name: string, text: string) => {
    const path = join(dir, name);
    writeFileSync(path, text);
    return path;
  };
  const args = [
    "serve", "--home", home, "--listen", "127.0.0.1:0",
    "--policy", file("policies.cedar", POLICY),
    "--capabilities", file("capabilities.json", JSON.stringify(CAPABILITIES)),
    "--budgets", file("budgets.json", JSON.stringify(BUDGETS)),
  ];
  const child = spawn(bin, args, { env, stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
      child.kill("SIGTERM");
      const killer = setTimeout(() => child.kill("SIGKILL"), 5_000);
      await exited;
      clearTimeout(killer);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  // It announces `serve: listening on http://127.0.0.1:PORT (console at ...)` on stderr.
  const announced = new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`cap serve did not listen within 30 s:\n${log}`)), 30_000);
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (chunk) => {
      log += chunk;
      const url = /listening on (http:\/\/[^\s/)]+)/.exec(log);
      if (url) {
        clearTimeout(timer);
        resolve(url[1]!);
      }
    });
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`cap serve exited (${code ?? signal}) before it listened:\n${log}`));
    });
    child.once("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
  let baseUrl: string;
  try {
    baseUrl = await announced;
  } catch (err) {
    await stop();
    throw err;
  }
  return { baseUrl, home, tokens, log: () => log, stop };
}

/** Approves a pending approval as the approver; returns its `capapr1...` token. */
export async function approve(server: TestServer, approvalId: string): Promise<string> {
  const res = await fetch(`${server.baseUrl}/api/v1/approvals/${encodeURIComponent(approvalId)}/approve`, {
    method: "POST",
    headers: { authorization: `Bearer ${server.tokens.approver}`, "content-type": "application/json" },
    body: JSON.stringify({ comment: "approved by the TypeScript client tests" }),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`approve ${approvalId}: ${res.status} ${text}`);
  const token = JSON.parse(text).token;
  if (typeof token !== "string") throw new Error(`approve ${approvalId}: no token in ${text}`);
  return token;
}
