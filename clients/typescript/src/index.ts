/**
 * A client for the action decision API of `cap serve` (`/api/v1/actions`).
 *
 * An agent asks before it acts ({@link CapabilityClient.decide}), does what the decision
 * allows with the input it gives, then posts what came out ({@link CapabilityClient.result})
 * and uses the output the server hands back (redacted, transformed or withheld).
 * {@link CapabilityClient.govern} does the three steps around one function.
 *
 * No runtime dependencies: it uses the global `fetch` of Node 20 (or the one given).
 */

/** Brane's 14 action types. */
export type ActionType =
  | "tool_call" | "model_call" | "memory_read" | "memory_write" | "retrieval"
  | "database_query" | "external_api_call" | "mcp_tool_call" | "sandbox_execution"
  | "file_read" | "file_write" | "secret_access" | "agent_handoff" | "human_approval";

/** Brane's 9 decision types. */
export type DecisionType =
  | "allow" | "deny" | "approval_required" | "transform_input" | "transform_output"
  | "route" | "sandbox" | "redact" | "log_only";

/** The decisions of the before stage (`POST /actions`). */
export type BeforeDecisionType = Exclude<DecisionType, "transform_output">;

/** The decisions of the after stage (`POST /actions/{id}/result`). */
export type AfterDecisionType = "allow" | "redact" | "transform_output" | "deny";

/** Brane's capability types. */
export type CapabilityType =
  | "tool" | "model" | "memory" | "retrieval" | "database" | "external_api" | "mcp_server"
  | "mcp_tool" | "mcp_resource" | "mcp_prompt" | "sandbox" | "filesystem" | "secret"
  | "approval_group" | "agent" | "workflow";

export type RiskLevel = "low" | "medium" | "high" | "critical";
export type Environment = "dev" | "staging" | "prod";
export type JsonObject = Record<string, unknown>;

/** Token counts of a model call. */
export interface Tokens { input?: number; output?: number }

/** A named permission (Brane's `Scope`, snake_case). */
export interface Scope {
  name: string;
  description?: string;
  data_namespace?: string;
  environment?: Environment;
  owner?: string;
  metadata?: JsonObject;
}

/** The primary outcome of using a capability (Brane's `Effect`); `type` is an effect type. */
export interface Effect {
  type: string;
  description?: string;
  risk?: RiskLevel;
  external?: boolean;
  reversible?: boolean;
  data_namespace?: string;
  metadata?: JsonObject;
}

/** A secondary consequence, possibly switched off through the input (Brane's `SideEffect`). */
export interface SideEffect extends Effect {
  can_disable?: boolean;
  disable_input?: JsonObject;
  disable_description?: string;
  requires_approval?: boolean;
}

/** A governed capability in Brane's shape (snake_case), registered or given inline. */
export interface GovernedCapability {
  name: string;
  type: CapabilityType;
  id?: string;
  tenant_id?: string;
  risk?: RiskLevel;
  effect?: Effect;
  side_effects?: SideEffect[];
  scopes?: Scope[];
  owner?: string;
  environment?: Environment;
  description?: string;
  input_schema?: JsonObject;
  output_schema?: JsonObject;
  data_namespace?: string;
  metadata?: JsonObject;
}

/** What an agent is about to do: the body of `POST /api/v1/actions`. */
export interface ActionRequest {
  actionType: ActionType;
  /** A registered capability's name, or a capability given inline. */
  capability: string | GovernedCapability;
  /** The capability's input (`{}` when omitted). */
  input?: JsonObject;
  estimatedCostUsd?: number;
  costSoFarUsd?: number;
  tokens?: Tokens;
  traceId?: string;
  /** A W3C `traceparent`: its trace id becomes the action's. */
  traceparent?: string;
  parentActionId?: string;
  labels?: Record<string, string>;
  metadata?: JsonObject;
  /** The `capapr1...` token of an approval, when retrying an action that needed one. */
  approvalToken?: string;
}

/** A pending approval, as an `approval_required` decision gives it. */
export interface Approval { id: string; reason?: string | null; expiresAt?: string; [key: string]: unknown }

/** In shadow mode: what would have been decided. */
export interface ShadowDecision { decision: DecisionType; reason: string | null; policyIds: string[] }

/** The before-stage answer. `deny` and `approval_required` close the action. */
export interface ActionDecision {
  actionId: string;
  decision: BeforeDecisionType;
  /** The capability to use (the target after a `route`). */
  capability: string;
  /** The input to use (after `transform_input`); present when allowed. */
  input?: JsonObject;
  reason: string | null;
  policyIds: string[];
  /** The capabilities routed away from, after a `route`. */
  routedFrom?: string[];
  /** The isolation the action must run in, if any. */
  sandbox?: JsonObject | null;
  /** JSON pointers of the output the server masks at the after stage. */
  redact?: string[];
  /** Only for `approval_required`. */
  approval?: Approval;
  shadow?: ShadowDecision | null;
  /** For `log_only`: what the observing policy would have decided. */
  wouldBe?: DecisionType | null;
  /** When allowed: the time by which the result must be posted (ISO 8601). */
  expiresAt?: string;
}

/** An action's output, reported at the after stage. */
export interface OutputReport { output: unknown; costUsd?: number; tokens?: Tokens }
/** An action's failure, reported at the after stage. */
export interface ErrorReport { error: { message: string; type?: string } }

/** A declared capability as the host keeps it: its governance in camelCase. */
export interface RegisteredCapability {
  name: string;
  /** `cap_...` */
  id: string;
  governance: { kind: string; risk: string; [member: string]: unknown };
}

/** The after-stage answer to an output: what the agent may use. */
export interface OutputResult {
  actionId: string;
  /** `executed`, or `denied_after_execution` when the output is withheld. */
  outcome: "executed" | "denied_after_execution";
  decision: AfterDecisionType;
  /** The output pointers that were masked. */
  redacted: string[];
  /** The output the agent may use; `null` when withheld. */
  output: unknown;
  withheld: boolean;
  reason: string | null;
  policyIds: string[];
  receiptId: string;
  eventId: string;
}

/** The after-stage answer to a failure. */
export interface FailureResult { actionId: string; outcome: "execution_failed"; receiptId: string; eventId: string }

export type ActionResult = OutputResult | FailureResult;

/** The `error` member of an error answer (or of a batch item). */
export interface ApiErrorBody { code: string; message: string; details?: unknown }

/** One item of a batch answer: a decision or that action's error. */
export type BatchItem = ActionDecision | { error: ApiErrorBody };

/** Whether a batch item is an error rather than a decision. */
export function isBatchError(item: BatchItem): item is { error: ApiErrorBody } {
  return "error" in item && !("decision" in item);
}

/** A non-2xx answer (or an answer that is not JSON). */
export class CapabilityApiError extends Error {
  /** @param code the server's code (`UNAUTHORIZED`, ...), or `HTTP_ERROR` / `BAD_RESPONSE`. */
  constructor(readonly status: number, readonly code: string, message: string, readonly details?: unknown) {
    super(message);
    this.name = "CapabilityApiError";
  }
}

/** The before stage denied the action (thrown by `govern`). */
export class ActionDenied extends Error {
  constructor(readonly decision: ActionDecision) {
    super(`action denied: ${decision.reason ?? (decision.policyIds.join(", ") || "no reason given")}`);
    this.name = "ActionDenied";
  }
}

/** The action waits for a human (thrown by `govern`); retry with the approval's token. */
export class ApprovalRequired extends Error {
  readonly approval: Approval | undefined;
  constructor(readonly decision: ActionDecision) {
    super(`approval required${decision.approval ? ` (${decision.approval.id})` : ""}: ${decision.reason ?? ""}`.trimEnd());
    this.name = "ApprovalRequired";
    this.approval = decision.approval;
  }
}

/** The after stage withheld the output (thrown by `govern`). */
export class OutputWithheld extends Error {
  constructor(readonly result: OutputResult) {
    super(`output withheld: ${result.reason ?? (result.policyIds.join(", ") || "no reason given")}`);
    this.name = "OutputWithheld";
  }
}

export interface ClientOptions {
  /** The server's root, e.g. `http://127.0.0.1:8470` (the client adds `/api/v1/...`). */
  baseUrl: string;
  /** A bearer token made by `cap tokens add`. */
  token: string;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
  /** Per-request timeout in milliseconds; 0 for none (default 30000). */
  timeoutMs?: number;
}

/** A client of one server, acting as the holder of one token. */
export class CapabilityClient {
  readonly #base: string;
  readonly #token: string;
  readonly #fetch: typeof fetch;
  readonly #timeoutMs: number;

  constructor(opts: ClientOptions) {
    this.#base = new URL(opts.baseUrl).href.replace(/\/+$/, "");
    this.#token = opts.token;
    this.#fetch = opts.fetch ?? ((input, init) => fetch(input, init));
    this.#timeoutMs = opts.timeoutMs ?? 30_000;
  }

  /** The before stage: asks whether (and how) the action may run. Any decision is a 200. */
  decide(action: ActionRequest): Promise<ActionDecision> {
    return this.#post("/actions", actionBody(action));
  }

  /** The after stage: reports the action's output (or its failure) and gets what to use. */
  result(actionId: string, report: OutputReport): Promise<OutputResult>;
  result(actionId: string, report: ErrorReport): Promise<FailureResult>;
  result(actionId: string, report: OutputReport | ErrorReport): Promise<ActionResult>;
  result(actionId: string, report: OutputReport | ErrorReport): Promise<ActionResult> {
    // `undefined` would drop the member from the JSON: report it as null.
    const body = "error" in report ? report : { ...report, output: report.output ?? null };
    return this.#post(`/actions/${encodeURIComponent(actionId)}/result`, body);
  }

  /** Decides up to 100 actions at once; the answers are in order, each a decision or an error. */
  async decideBatch(actions: ActionRequest[]): Promise<BatchItem[]> {
    const doc = await this.#post<{ results: BatchItem[] }>("/actions/batch", { actions: actions.map(actionBody) });
    return doc.results;
  }

  /** Registers a governed capability (admin tokens only); returns it as the server keeps it. */
  async registerCapability(capability: GovernedCapability): Promise<RegisteredCapability> {
    const doc = await this.#post<{ capability: RegisteredCapability }>("/capabilities", capability);
    return doc.capability;
  }

  /**
   * Runs `fn` under governance: decides; throws {@link ActionDenied} on `deny` and
   * {@link ApprovalRequired} on `approval_required` (without calling `fn`); otherwise calls
   * `fn(decision.input, decision)` (`decision.capability` is the one to use after a route,
   * `decision.sandbox` the isolation required), posts its output and returns the output the
   * server delivers, throwing {@link OutputWithheld} when it withholds it. When `fn` throws,
   * its error is posted (a failure to post it is ignored) and rethrown as it is.
   *
   * @param report gives the cost and tokens of an output, posted with it.
   */
  async govern<T>(
    action: ActionRequest,
    fn: (input: any, decision: ActionDecision) => Promise<T> | T,
    report?: (output: T) => { costUsd?: number; tokens?: Tokens },
  ): Promise<unknown> {
    const decision = await this.decide(action);
    if (decision.decision === "deny") throw new ActionDenied(decision);
    if (decision.decision === "approval_required") throw new ApprovalRequired(decision);
    let output: T;
    try {
      output = await fn(decision.input ?? action.input ?? {}, decision);
    } catch (err) {
      const e = err instanceof Error ? { message: err.message, type: err.name } : { message: String(err) };
      await this.result(decision.actionId, { error: e }).catch(() => undefined);
      throw err;
    }
    const result = await this.result(decision.actionId, { ...report?.(output), output });
    if (result.withheld) throw new OutputWithheld(result);
    return result.output;
  }

  async #post<T>(path: string, body: unknown): Promise<T> {
    const res = await this.#fetch(`${this.#base}/api/v1${path}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${this.#token}`,
        "content-type": "application/json",
        accept: "application/json",
      },
      body: JSON.stringify(body),
      signal: this.#timeoutMs > 0 ? AbortSignal.timeout(this.#timeoutMs) : null,
    });
    const text = await res.text();
    let doc: any;
    try {
      doc = text === "" ? undefined : JSON.parse(text);
    } catch {
      doc = undefined;
    }
    if (!res.ok) {
      const e = doc?.error;
      throw new CapabilityApiError(
        res.status,
        typeof e?.code === "string" ? e.code : "HTTP_ERROR",
        typeof e?.message === "string" ? e.message : text || res.statusText,
        e?.details,
      );
    }
    if (doc === undefined || doc === null || typeof doc !== "object") {
      throw new CapabilityApiError(res.status, "BAD_RESPONSE", `expected a JSON object, got ${JSON.stringify(text.slice(0, 200))}`);
    }
    return doc as T;
  }
}

/** The JSON body of one action: `input` defaults to `{}`. */
function actionBody(action: ActionRequest): ActionRequest {
  return { ...action, input: action.input ?? {} };
}
