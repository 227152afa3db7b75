//! One governed decision as the number of Cedar policies grows: 10, 100, 1,000, 10,000.
//!
//! `cargo bench -p capability-policy --bench policy_scale`
//!
//! Shapes (one line per size, `policies/<shape>/<N>: p50 .. µs, p99 .. µs`):
//!
//! * `named-other`: a catch-all permit, a catch-all forbid, and `N - 2` policies that each
//!   name one capability (`resource == Capability::"svc/cK"`) and an action; the call is to
//!   one of them, the same capability every time. Slicing by resource and action must keep
//!   this flat.
//! * `named-other-spread`: the same policies, each call to the next of the `N` capabilities
//!   (a gateway whose calls spread over all its tools): at 10,000 each timed call sees its
//!   capability for the first time (300 calls), at 1,000 about half do.
//! * `all-apply`: every policy's scope matches the call and its condition reads
//!   `context.input` (nothing can be cached between calls); permits and forbids are mixed,
//!   the forbids do not match, so every policy has to be evaluated. The engine evaluates
//!   these natively.
//! * `all-apply-cedar`: the same with arithmetic in every condition, which the native
//!   evaluator leaves to Cedar.
//!
//! `policies/cedar/<shape>/<N>` is Cedar itself (`Authorizer::is_authorized` on one
//! `PolicySet` of the same policies, with a request built once) in the same run: the engine
//! must grow no worse than it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::str::FromStr;
use std::sync::Arc;

use capability_policy::cedar::{CedarPolicies, PolicyFile};
use capability_policy::*;
use capability_test_support::measure::measure;
use cedar_policy::{Authorizer, Context, Entities, EntityUid, PolicySet, Request};
use serde_json::json;

const SIZES: [usize; 4] = [10, 100, 1_000, 10_000];

/// Timed calls at size `n` (fewer at the large sizes, where one call can take milliseconds).
fn runs(n: usize) -> (usize, usize) {
    let runs = (2_000_000 / n).clamp(300, 10_000);
    (runs / 10, runs)
}

fn capability(k: usize) -> Arc<GovernedCapability> {
    Arc::new(
        GovernedCapability::new(format!("svc/c{k}"), CapabilityKind::Tool)
            .risk(RiskLevel::High)
            .scope("refunds:create")
            .owner("payments")
            .input_schema(json!({"type": "object", "properties": {
                "a": {"type": "integer"}, "tenant": {"type": "string"}, "note": {"type": "string"}
            }})),
    )
}

fn context(cap: Arc<GovernedCapability>) -> PolicyContext {
    let action = AgentAction::new(ActionType::ToolCall, cap, "support-agent")
        .input(json!({"a": 50, "tenant": "acme", "note": "refund for order 1234"}))
        .tenant("acme")
        .environment(Environment::Prod)
        .scope("refunds:create")
        .label("team", "billing")
        .cost_so_far(0.25);
    PolicyContext::new(action, Stage::BeforeCapability)
}

/// `n` policies, most of them naming another capability (`svc/cK` for K in `0..n`).
fn named_other(n: usize) -> String {
    let mut text = String::from(
        "@id(\"allow-all\") permit(principal, action, resource);\n\
         @id(\"prod-critical\") forbid(principal, action, resource) when { context.environment == \"prod\" && resource.riskLevel >= 4 };\n",
    );
    for i in 0..n - 2 {
        let action = ["tool_call", "mcp_tool_call", "model_call"][i % 3];
        let (effect, cond) = if i % 2 == 0 {
            (
                "forbid",
                format!("context.input has a && context.input.a > {}", 100 + i),
            )
        } else {
            (
                "permit",
                format!(
                    "context.input.tenant == context.tenant && context.input.a < {}",
                    1000 + i
                ),
            )
        };
        text.push_str(&format!(
            "@id(\"p{i}\") @reason(\"r{i}\") {effect}(principal, action == Action::\"{action}\", resource == Capability::\"svc/c{i}\") when {{ {cond} }};\n"
        ));
    }
    text
}

/// `n` policies that all apply to the call; none of the forbids matches.
fn all_apply(n: usize, arithmetic: bool) -> String {
    let a = if arithmetic {
        "(context.input.a + 0)"
    } else {
        "context.input.a"
    };
    let mut text = String::new();
    for i in 0..n {
        let policy = match i % 4 {
            0 => format!(
                "permit(principal, action, resource) when {{ {a} > {} }}",
                i % 100
            ),
            1 => format!(
                "forbid(principal, action, resource) when {{ {a} > {} && resource.riskLevel >= 3 }}",
                1000 + i
            ),
            2 => format!(
                "permit(principal, action == Action::\"tool_call\", resource) when {{ context.input has a && principal.scopes.contains(\"refunds:create\") && {a} < {} }}",
                1000 + i
            ),
            _ => format!(
                "forbid(principal, action, resource is Capability) unless {{ context.input.tenant == context.tenant && {a} >= 0 }}"
            ),
        };
        text.push_str(&format!("@id(\"p{i}\") @reason(\"r{i}\") {policy};\n"));
    }
    text
}

fn engine(text: &str, n: usize) -> PolicyEngine {
    let cedar = CedarPolicies::from_sources(&[PolicyFile::new("scale.cedar", text)]).unwrap();
    assert_eq!(cedar.len(), n);
    let engine = PolicyEngine::new();
    engine.add_source(Arc::new(cedar));
    engine
}

/// Cedar alone on the same policies, for the call [`context`] describes.
struct Plain {
    set: PolicySet,
    request: Request,
    entities: Entities,
    authorizer: Authorizer,
}

impl Plain {
    fn new(text: &str, capability: &str) -> Plain {
        let set = PolicySet::from_str(text).unwrap();
        let entities = Entities::from_json_value(
            json!([
                {"uid": {"type": "Agent", "id": "support-agent"}, "parents": [],
                 "attrs": {"tenant": "acme", "scopes": ["refunds:create"]}},
                {"uid": {"type": "Capability", "id": capability}, "parents": [],
                 "attrs": {"name": capability, "kind": "tool", "risk": "high", "riskLevel": 3,
                           "scopes": ["refunds:create"], "owner": "payments"}}
            ]),
            None,
        )
        .unwrap();
        let context = Context::from_json_value(
            json!({"input": {"a": 50, "tenant": "acme", "note": "refund for order 1234"},
                   "tenant": "acme", "environment": "prod", "stage": "before_capability"}),
            None,
        )
        .unwrap();
        let uid = |t: &str, id: &str| EntityUid::from_str(&format!("{t}::{id:?}")).unwrap();
        let request = Request::new(
            uid("Agent", "support-agent"),
            uid("Action", "tool_call"),
            uid("Capability", capability),
            context,
            None,
        )
        .unwrap();
        Plain {
            set,
            request,
            entities,
            authorizer: Authorizer::new(),
        }
    }

    fn decide(&self) -> cedar_policy::Decision {
        self.authorizer
            .is_authorized(&self.request, &self.set, &self.entities)
            .decision()
    }
}

fn main() {
    for n in SIZES {
        let (warmup, count) = runs(n);
        let text = named_other(n);
        let engine = engine(&text, n);
        let called = capability((n - 2) / 2);
        let ctx = context(Arc::clone(&called));
        let v = engine.evaluate(&ctx).unwrap();
        assert_eq!(v.kind, DecisionType::Allow, "{:?}", v.decision.reason);
        measure(&format!("policies/named-other/{n}"), warmup, count, || {
            black_box(engine.evaluate(black_box(&ctx)).unwrap());
        });
        let plain = Plain::new(&text, &called.name);
        assert_eq!(plain.decide(), cedar_policy::Decision::Allow);
        measure(
            &format!("policies/cedar/named-other/{n}"),
            warmup,
            count,
            || {
                black_box(plain.decide());
            },
        );
        let contexts: Vec<PolicyContext> = (0..n).map(|k| context(capability(k))).collect();
        let mut next = 0usize;
        measure(
            &format!("policies/named-other-spread/{n}"),
            warmup,
            count,
            || {
                black_box(engine.evaluate(black_box(&contexts[next % n])).unwrap());
                next += 1;
            },
        );
    }
    for (shape, arithmetic) in [("all-apply", false), ("all-apply-cedar", true)] {
        for n in SIZES {
            let (warmup, count) = runs(n);
            let text = all_apply(n, arithmetic);
            let engine = engine(&text, n);
            let called = capability(7);
            let ctx = context(Arc::clone(&called));
            let v = engine.evaluate(&ctx).unwrap();
            assert_eq!(v.kind, DecisionType::Allow, "{:?}", v.decision.reason);
            assert!(v.errors.is_empty(), "{:?}", v.errors);
            measure(&format!("policies/{shape}/{n}"), warmup, count, || {
                black_box(engine.evaluate(black_box(&ctx)).unwrap());
            });
            let plain = Plain::new(&text, &called.name);
            assert_eq!(plain.decide(), cedar_policy::Decision::Allow);
            measure(
                &format!("policies/cedar/{shape}/{n}"),
                warmup,
                count,
                || {
                    black_box(plain.decide());
                },
            );
        }
    }
}
