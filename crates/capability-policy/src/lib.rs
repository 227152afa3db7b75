//! # capability-policy
//!
//! Governance for agents using capabilities: Brane's model (a capability is anything an
//! agent can use, with kind, risk, effects, scopes, tenant, environment, data namespace and
//! owner), a policy engine with all nine Brane decisions, interception of any agent action
//! (executed by the runtime or not), Cedar policy files as the declarative source, approvals
//! bound to the exact plan, and a hash-chained audit log in SQLite.
//!
//! Every piece works on its own:
//!
//! | Module | What it holds |
//! | --- | --- |
//! | [`model`] | [`GovernedCapability`], [`Governance`] (`metadata.governance` JSON), kinds, risk, effects, side effects, scopes |
//! | [`registry`] | [`CapabilityRegistry`]: capabilities by name, insertion-ordered |
//! | [`action`] | [`AgentAction`] (every Brane field, plus granted scopes and plan fingerprint), [`ActionType`] |
//! | [`decision`] | [`Decision`], [`DecisionType`] (the nine), [`SandboxRequirement`] and [`IsolationTier`] (defined in `capability-exec`) |
//! | [`policy`] | closure [`Policy`], [`Target`] (exact, `*`, glob), [`Stage`], [`PolicyContext`] |
//! | [`engine`] | [`PolicyEngine`]: evaluate, combine into a [`Verdict`], shadow mode |
//! | [`cedar`] | [`CedarPolicies`] (load, evaluate), validation with file:line, schema generation |
//! | [`fixtures`] | the `cap policy test` runner and its readable report |
//! | [`intercept`] | [`Governor`]: before → execute → after → on_error, with audit |
//! | [`approvals`] | [`ApprovalManager`], [`HostKey`] (ed25519), single-use plan-bound tokens |
//! | [`audit`] | [`AuditEvent`], sinks, hash chain, [`verify_store`], JSONL and OTLP export |
//! | [`store`] | [`SqliteStore`] (group commit) and [`MemoryStore`] |
//! | [`pointer`](mod@pointer) | JSON pointers for `redact`, RFC 6902 mutations for transforms |
//!
//! ## How the runtime uses it
//!
//! After its own effect authorization, the runtime builds an [`AgentAction`] from the
//! manifest ([`GovernedCapability::from_manifest`] reads `metadata.governance`) and the plan
//! (`plan_fingerprint`, `input`), calls [`PolicyEngine::evaluate`] at
//! [`Stage::BeforeCapability`] and applies the [`Verdict`]: `deny` refuses;
//! `approval_required` goes to [`ApprovalManager::request`]; otherwise
//! [`Verdict::obligations`] says what to do — input mutations (apply with
//! [`pointer::apply_all`], re-validate, re-plan), `route_to` (resolve, authorize again),
//! `sandbox` (the strictest tier). After execution it evaluates [`Stage::AfterCapability`]
//! with the output and applies output mutations then redactions. Every step is recorded with
//! [`AuditEvent::from_verdict`] through [`AuditStore::append`]. [`Governor::intercept`] is the
//! same flow for actions the runtime does not execute (a model call, a memory write).
//!
//! CLI entry points: `cap policy schema` → [`cedar::generate_schema`]; `cap policy validate`
//! → [`cedar::check_paths`] (each policy against the types of the capabilities it applies
//! to; [`cedar::validate_paths`] checks against one schema); `cap policy test` → [`fixtures::test_policy_files`] and
//! [`fixtures::FixtureReport::render`]; `cap approvals list|show|approve|deny` →
//! [`ApprovalManager::list`], [`ApprovalManager::get`], [`ApprovalManager::approve`],
//! [`ApprovalManager::deny`]; `cap audit tail|show|verify|export` → [`AuditStore::tail`],
//! [`AuditStore::get`], [`verify_store`], [`audit::export_jsonl`] / [`audit::export_otel`].
//!
//! ## The nine decisions
//!
//! | Decision | Effect |
//! | --- | --- |
//! | `allow` | Execution may proceed. |
//! | `deny` | Refused. Deny wins over everything; the **first deny in priority order** is reported. |
//! | `approval_required` | Refused until a human approves: a pending approval is created, bound to the plan fingerprint and action digest. Presenting the approval's token satisfies it. |
//! | `redact` | JSON pointers (`*` segments match every element) masked with `"[REDACTED]"` in the output and in the audit record. |
//! | `transform_input` | RFC 6902 `add`/`replace`/`remove` mutations applied to the input before execution; the runtime re-validates and re-fingerprints the plan. A mutation that cannot apply refuses the action. |
//! | `transform_output` | Mutations applied to the output (before redaction). A mutation that cannot apply withholds the output. |
//! | `route` | Use another capability instead; the target is authorized again (at most [`intercept::MAX_ROUTE_DEPTH`] hops). |
//! | `sandbox` | A floor on isolation ([`IsolationTier`]: `in_process` < `process` < `oci` < `wasm`), no network, time and memory limits. |
//! | `log_only` | Recorded (with the decision it would have been), never enforced. |
//!
//! Valid per stage: everything before execution; `allow`, `deny`, `redact`,
//! `transform_output`, `log_only` after; `allow`, `deny`, `log_only` on error (observers: the
//! error is returned unchanged). A decision that is not valid at its stage, or a policy that
//! fails, becomes a `deny` with code `invalid_decision` / `policy_error` (fail closed).
//!
//! ## How decisions combine
//!
//! 1. Every enabled policy whose target matches and whose stage is the current one runs, in
//!    ascending priority (ties keep registration order; closure policies before Cedar
//!    policies of the same priority). There is no short-circuit (Brane).
//! 2. `log_only` decisions are recorded only. With a granted approval, `approval_required`
//!    decisions are satisfied (recorded only).
//! 3. Any `deny` → the verdict is `deny`, reporting the first deny.
//! 4. Else any `approval_required` → `approval_required`, reporting the first one.
//! 5. Else the action is allowed with the union of obligations: input mutations and output
//!    mutations concatenated in order, redaction pointers united, the first `route` wins, the
//!    strictest sandbox. The reported decision is the first of the most significant kind
//!    present (`route` > `sandbox` > `transform_input` > `transform_output` > `redact`), else
//!    the **last** `allow` (Brane: the executed event names the last policy), else a synthetic
//!    `allow` with no policy.
//!
//! **Shadow mode** ([`PolicyEngine::set_shadow_mode`]): evaluation is unchanged, but the
//! verdict enforces nothing (`allow`, no obligations, code `shadow`) and
//! [`Verdict::shadow`] records what enforcement would have done; audit events carry it in
//! `shadow`.
//!
//! ## The Cedar contract
//!
//! * Principal `Agent::"<agent id>"` with `tenant` (string, `""` when none) and `scopes`
//!   (set of strings granted to the agent).
//! * Action `Action::"<action type>"`, one of Brane's 14 ([`ActionType`]).
//! * Resource `Capability::"<capability id or name>"` with `name`, `kind`, `risk`,
//!   `riskLevel` (0 = none … 4 = critical), `effects` (set: primary effect, side effects,
//!   declared Capability 1.x effects), `scopes` (required), `owner`, `dataNamespace`,
//!   `tenant`, `environment` (strings, `""` when unset).
//! * `context`: `input` (the input as a record; `null` members are omitted; a number is a
//!   `Long` where the capability's input schema says `integer` (`150.0` too), a `decimal`
//!   with 4 places where it says `number` (`150` too, also when the type is `["number",
//!   "null"]`), and by its value where it says neither: see [`cedar`], "Numbers"),
//!   `environment`, `tenant`, `stage`, `labels` (record of strings),
//!   `costSoFarUsd` (decimal), `estimatedCostUsd` (decimal, absent when unknown), and `output`
//!   in the after stage.
//! * `permit` grants, `forbid` denies. `@decision("approval_required" | "redact" |
//!   "transform_input" | "transform_output" | "route" | "sandbox" | "log_only")` makes a
//!   policy yield that decision when it matches. Parameters: `@reason("...")`, `@code`,
//!   `@id`, `@version`, `@priority("n")`, `@redact("/a, /b/*/c")`, `@mutations("[{\"op\":
//!   \"add\", \"path\": \"/notify\", \"value\": false}]")`, `@disableSideEffects("send_message")`
//!   (or `"*"`), `@route("capability")`, `@sandbox("wasm")`, `@network("off")`,
//!   `@timeoutMs("n")`, `@memoryMb("n")`.
//! * An annotated `permit` also grants; an annotated `forbid` only yields its decision;
//!   `log_only` policies never grant or deny.
//! * A Cedar decision applies at its natural stage ([`cedar::applies_at`]):
//!   `approval_required`, `transform_input`, `route`, `sandbox` before execution; `redact`,
//!   `transform_output` after; `allow`, `deny`, `log_only` at every stage (test
//!   `context.stage` to narrow them).
//! * With no policy file the governance layer allows. With policy files Cedar's default
//!   deny applies before execution: an action no `permit` matches is denied (code
//!   `default_deny`). After execution and on error only matching policies contribute.
//! * A `forbid` whose condition fails to evaluate denies (code `policy_error`), unlike
//!   plain Cedar, which skips it; a failing `permit` grants nothing.
//!
//! ```cedar
//! permit(principal, action, resource);
//!
//! @id("refund-limit") @reason("Refund above $100 requires approval")
//! @decision("approval_required")
//! forbid(principal, action == Action::"tool_call", resource == Capability::"refund_customer")
//! when { context.input has amount_usd && context.input.amount_usd.greaterThan(decimal("100.0")) };
//!
//! @id("no-high-risk-mcp-in-prod") @reason("High-risk MCP action blocked in prod")
//! forbid(principal, action, resource)
//! when { context.environment == "prod" && resource.name like "mcp.*" && resource.riskLevel >= 3 };
//!
//! @id("mask-ssn") @decision("redact") @redact("/rows/*/ssn")
//! permit(principal, action, resource == Capability::"execute_sql");
//! ```
//!
//! ## Changes from Brane 0.1.0a2, on purpose
//!
//! * One call runs before → execute → after (after-policies run on decorated calls);
//!   after-only remains as [`InterceptMode::AfterOnly`]. `on_error` policies run on failure.
//! * All nine decisions are implemented (Brane raised `NotImplementedError`).
//! * Targets accept globs (`mcp.*`); Brane matched exactly.
//! * [`PolicyContext::agent_has_scope`] checks scopes **granted to the agent**;
//!   [`PolicyContext::capability_requires_scope`] is Brane's old check.
//! * Risk `none` exists. Effect types are Brane's 14 or a Capability 1.x effect, and anything
//!   else (`database_query`) is refused with a clear error.
//! * Audit: an `allowed` event when before-policies allow, then `executed` /
//!   `denied_after_execution` / `execution_failed`; `approval_required` is a new outcome.
//!   Events add decision id, policy ids, deny code, parent action id, plan fingerprint,
//!   action digest, receipt id, approval id. Timestamps are ISO-8601 with `Z` (Brane wrote
//!   `+00:00`).
//! * A failing policy denies and is audited (Brane propagated the exception, unaudited).
//! * Errors are lowercase (`capability `x` is not registered`).

pub mod action;
pub mod approvals;
pub mod audit;
pub mod cedar;
pub mod checkpoint;
pub mod clock;
pub mod decision;
pub mod engine;
pub mod fixtures;
pub mod intercept;
pub mod model;
pub(crate) mod names;
pub mod pointer;
pub mod policy;
pub mod registry;
pub mod store;

pub use action::{ActionType, Actor, AgentAction};
pub use approvals::{
    ApprovalDecision, ApprovalError, ApprovalManager, ApprovalRecord, ApprovalStatus, Decided,
    Decider, HostKey, VerifiedApproval, VerifiedToken,
};
pub use audit::{
    AuditEvent, AuditOutcome, AuditQuery, AuditRecord, AuditSink, AuditStore, TenantLink,
    VerifyReport, verify_chain, verify_store, verify_tenant,
};
pub use cedar::CedarPolicies;
pub use decision::{Decision, DecisionType, IsolationTier, SandboxRequirement};
pub use engine::{ForTenant, Obligations, PolicyEngine, PolicySource, Verdict};
pub use intercept::{
    Execution, GovernanceFailure, Governor, InterceptError, InterceptMode, InterceptRequest,
    Intercepted, Interrupted, OpenAction, OutputWithheld,
};
pub use model::{
    CapabilityKind, Effect, EffectType, Environment, Governance, GovernedCapability, RiskLevel,
    Scope, SideEffect,
};
pub use names::UnknownName;
pub use policy::{Policy, PolicyContext, Stage, Target};
pub use registry::CapabilityRegistry;
pub use store::{MemoryStore, SqliteStore};
