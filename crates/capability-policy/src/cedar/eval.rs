//! Evaluating loaded Cedar policies for one action.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash, Hasher};
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use cedar_policy::entities_errors::EntitiesError;
use cedar_policy::{
    Authorizer, Context, ContextCreationError, Entities, Entity, EntityAttrEvaluationError,
    EntityId, EntityTypeName, EntityUid, ExpressionConstructionError, Policy, PolicySet, Request,
    RestrictedExpression,
};
use serde_json::Value;

use super::fast::{Data, FastPolicy, path_kind};
use super::fix::{NumKind, NumberFix, number_fixes};
use super::{
    ACTION_TYPE, AGENT_TYPE, CAPABILITY_TYPE, CedarError, CedarRule, GeneratedSchema, PolicyFile,
    RuleEffect, ValidationReport, check_sources, load, read_paths,
};
use crate::action::ActionType;
use crate::decision::{Decision, DecisionType};
use crate::engine::{PolicySource, RankedDecision, SourceDecisions};
use crate::model::GovernedCapability;
use crate::policy::{PolicyContext, PolicyFault, Stage};

/// Why the Cedar request of an action could not be built: Cedar's own error, kept as it is
/// (the policy fault it becomes carries its message).
#[derive(Debug, thiserror::Error)]
enum RequestError {
    #[error(transparent)]
    Entity(#[from] EntityAttrEvaluationError),
    #[error(transparent)]
    Entities(#[from] EntitiesError),
    #[error(transparent)]
    Expression(#[from] ExpressionConstructionError),
    #[error(transparent)]
    Context(#[from] ContextCreationError),
}

impl From<RequestError> for PolicyFault {
    fn from(e: RequestError) -> Self {
        PolicyFault::new(e.to_string())
    }
}

/// Bound on the entries of each cache (slices by capability, entity sets, fixed results),
/// after which it is cleared: room for the tools of a large gateway.
const CACHE_LIMIT: usize = 16_384;

/// Bound on the policies the cached slices hold together (a slice holds the policies that
/// apply to its capability: where thousands apply to every capability, few slices fit).
const SLICE_POLICY_LIMIT: usize = 1 << 20;

/// Slices of one capability, one slot per action type.
type SliceSlots = [Option<Arc<Slice>>; ActionType::ALL.len()];

/// The slices made so far, and how many policies they hold together.
#[derive(Default)]
struct SliceCache {
    by_capability: HashMap<String, SliceSlots>,
    policies: usize,
}

/// Rule indices, one list per action type.
type ActionLists = [Vec<usize>; ActionType::ALL.len()];

/// The rules each (action type, capability) pair can match, indexed at load by their scope,
/// so that building a slice costs the size of the slice, not the number of policies.
///
/// A rule whose scope names a resource (`resource == Capability::"x"`, `resource in
/// Capability::"x"`, `resource is Capability in Capability::"x"`: entities have no parents,
/// so `in` is equality) is listed under that resource, else under every resource; within
/// either, under each action type its scope allows (`action == ..`, `action in [..]`), or
/// under all of them. A scope that can never match (another entity type) is not listed.
/// Every list is in load order.
struct ScopeIndex {
    any_resource: ActionLists,
    by_resource: HashMap<String, ActionLists>,
}

impl ScopeIndex {
    fn new(rules: &[CedarRule]) -> Self {
        let mut index = ScopeIndex {
            any_resource: std::array::from_fn(|_| Vec::new()),
            by_resource: HashMap::new(),
        };
        for (i, rule) in rules.iter().enumerate() {
            if rule.never {
                continue;
            }
            let lists = match &rule.resource {
                None => &mut index.any_resource,
                Some(r) => index
                    .by_resource
                    .entry(r.clone())
                    .or_insert_with(|| std::array::from_fn(|_| Vec::new())),
            };
            for (slot, action) in ActionType::ALL.iter().enumerate() {
                let allowed = rule
                    .actions
                    .as_ref()
                    .is_none_or(|a| a.iter().any(|x| x == action.as_str()));
                if allowed {
                    lists[slot].push(i);
                }
            }
        }
        index
    }

    /// An index that lists every rule for every pair: evaluation without slicing, the
    /// reference slicing must agree with.
    #[cfg(test)]
    fn unsliced(rules: usize) -> Self {
        ScopeIndex {
            any_resource: std::array::from_fn(|_| (0..rules).collect()),
            by_resource: HashMap::new(),
        }
    }

    /// The rules that can match `action` on `capability`, in load order.
    fn rules(&self, action: ActionType, capability: &str) -> Vec<usize> {
        let slot = action as usize;
        let any = &self.any_resource[slot];
        let named = self
            .by_resource
            .get(capability)
            .map_or(&[][..], |lists| lists[slot].as_slice());
        // Two ascending lists of distinct rules: merge them.
        let mut out = Vec::with_capacity(any.len() + named.len());
        let (mut a, mut b) = (0, 0);
        while a < any.len() && b < named.len() {
            if any[a] < named[b] {
                out.push(any[a]);
                a += 1;
            } else {
                out.push(named[b]);
                b += 1;
            }
        }
        out.extend_from_slice(&any[a..]);
        out.extend_from_slice(&named[b..]);
        out
    }
}

/// The policies that can match one (action type, capability) pair, split into those whose
/// result depends only on the agent, the capability, the action and the environment, tenant
/// and stage ("fixed": their matches are cached), and the others, evaluated on every call:
/// natively when they are in the subset [`super::fast`] handles ("native"), else by Cedar
/// ("dynamic").
struct Slice {
    fixed: Part,
    native: NativePart,
    dynamic: Part,
}

/// Policies evaluated natively, with the same policies as a Cedar part for when the
/// native evaluation falls back.
#[derive(Default)]
struct NativePart {
    rules: Vec<(usize, Arc<FastPolicy>)>,
    cedar: Part,
}

/// One half of a slice.
#[derive(Default)]
struct Part {
    /// The context attributes its policies read.
    uses: ContextUse,
    /// Permits and forbids that take part in authorization.
    authorize: PolicySet,
    /// Annotated forbids and `log_only` policies, rewritten as permits so that Cedar reports
    /// every one that matches.
    annotated: PolicySet,
}

impl Part {
    fn is_empty(&self) -> bool {
        self.authorize.is_empty() && self.annotated.is_empty()
    }
}

/// The principal, resource and entities of a Cedar request, once built.
#[derive(Default)]
struct CedarInputs(Option<(EntityUid, EntityUid, Arc<Entities>)>);

/// What evaluating one part found: the rules that matched, the rules that errored (with
/// the message), and the error texts.
#[derive(Default)]
struct PartResult {
    matched: Vec<usize>,
    errored: Vec<(usize, String)>,
    errors: Vec<String>,
}

/// Cedar policies loaded from files, ready to evaluate (parse once, evaluate many times).
///
/// Evaluation slices the policies by action type and capability (a policy whose scope
/// names another action or resource is not evaluated; slices are found through an index
/// built at load, so a call's cost does not grow with the policies that name other
/// capabilities or actions, even the first time a capability is seen), caches the Cedar
/// entities of each (agent, capability) pair, builds requests from typed values (not JSON) holding only the
/// context attributes the slice's policies name, and caches the matches of policies that
/// read no per-call data (only principal, resource, action, environment, tenant, stage).
/// Caches are bounded (16,384 entries each, and the slices 2^20 policies in all; then
/// cleared).
pub struct CedarPolicies {
    /// The files the policies were loaded from, for [`CedarPolicies::check`].
    files: Vec<PolicyFile>,
    rules: Vec<CedarRule>,
    /// Per rule: the fixes its comparisons would need if an operand had the other number
    /// type, to explain a type error at evaluation.
    fixes: Vec<Vec<NumberFix>>,
    index: HashMap<String, usize>,
    /// Per rule: the policy as Cedar evaluates it (annotated forbids become permits).
    compiled: Vec<Policy>,
    /// Per rule: the context attributes it reads.
    uses: Vec<ContextUse>,
    /// Per rule: its native form, when it has one.
    native: Vec<Option<Arc<FastPolicy>>>,
    /// The rules by resource and action in their scope.
    scope: ScopeIndex,
    authorizer: Authorizer,
    actions: Vec<EntityUid>,
    agent_type: EntityTypeName,
    capability_type: EntityTypeName,
    slices: Mutex<SliceCache>,
    entities: Mutex<HashMap<u64, Arc<Entities>>>,
    fixed_results: Mutex<HashMap<u64, Arc<PartResult>>>,
    hasher: std::collections::hash_map::RandomState,
}

impl std::fmt::Debug for CedarPolicies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CedarPolicies")
            .field("rules", &self.rules.len())
            .finish_non_exhaustive()
    }
}

fn type_name(name: &str) -> Result<EntityTypeName, CedarError> {
    EntityTypeName::from_str(name).map_err(|e| CedarError::Schema {
        message: e.to_string(),
    })
}

impl CedarPolicies {
    /// Loads policy files and directories (their `*.cedar` files, sorted).
    pub fn from_paths<P: AsRef<Path>>(paths: &[P]) -> Result<Self, CedarError> {
        Self::from_sources(&read_paths(paths)?)
    }

    /// Loads policies from texts.
    pub fn from_sources(files: &[PolicyFile]) -> Result<Self, CedarError> {
        let loaded = load(files).map_err(|diagnostics| CedarError::Invalid { diagnostics })?;
        // From the source text (a policy rewritten as a permit below has none).
        let fixes = loaded
            .policies
            .iter()
            .map(|p| number_fixes(&p.to_string()))
            .collect();
        let mut compiled = Vec::with_capacity(loaded.policies.len());
        for (rule, policy) in loaded.rules.iter().zip(loaded.policies) {
            if !rule.authorizes && rule.effect == RuleEffect::Forbid {
                compiled.push(as_permit(&policy, rule)?);
            } else {
                compiled.push(policy);
            }
        }
        let action_type = type_name(ACTION_TYPE)?;
        let actions = ActionType::ALL
            .iter()
            .map(|a| {
                EntityUid::from_type_name_and_id(action_type.clone(), EntityId::new(a.as_str()))
            })
            .collect();
        let uses = compiled.iter().map(context_use).collect();
        let native = compiled
            .iter()
            .map(|p| {
                p.to_json()
                    .ok()
                    .and_then(|json| FastPolicy::compile(&json))
                    .map(Arc::new)
            })
            .collect();
        let index = loaded
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| (r.id.clone(), i))
            .collect();
        let scope = ScopeIndex::new(&loaded.rules);
        Ok(CedarPolicies {
            files: files.to_vec(),
            rules: loaded.rules,
            fixes,
            index,
            compiled,
            uses,
            native,
            scope,
            authorizer: Authorizer::new(),
            actions,
            agent_type: type_name(AGENT_TYPE)?,
            capability_type: type_name(CAPABILITY_TYPE)?,
            slices: Mutex::new(SliceCache::default()),
            entities: Mutex::new(HashMap::new()),
            fixed_results: Mutex::new(HashMap::new()),
            hasher: std::collections::hash_map::RandomState::new(),
        })
    }

    /// The rules, in load order.
    pub fn rules(&self) -> &[CedarRule] {
        &self.rules
    }

    /// Number of policies.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// No policy at all.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rule with that id.
    pub fn rule(&self, id: &str) -> Option<&CedarRule> {
        self.index.get(id).map(|&i| &self.rules[i])
    }

    /// Validates these policies against the types of the capabilities the schema was
    /// generated for ([`check_sources`] on the files they were loaded from): run it at
    /// startup and again when capabilities are added (MCP upstream tools listed), so that a
    /// comparison that cannot type-check is reported before the first call.
    pub fn check(&self, schema: &GeneratedSchema) -> ValidationReport {
        check_sources(&self.files, schema)
    }

    /// What to write instead, when rule `i` failed with a type error between `Long` and
    /// `decimal`: the fixes of its comparisons whose operand has the offending type in this
    /// request.
    fn number_hint(&self, i: usize, error: &str, ctx: &PolicyContext) -> Option<String> {
        if error.contains("got string") && holds_opaque_number(&ctx.action.input) {
            return Some(
                "the input holds a number Cedar cannot represent exactly (beyond its Long or \
                 decimal range, or more than 4 decimal places): it is given as a string, so a \
                 policy that compares it cannot be evaluated and does not grant (a forbid \
                 denies)"
                    .into(),
            );
        }
        if !(error.contains("expected long, got decimal")
            || error.contains("expected decimal, got long"))
        {
            return None;
        }
        let data = Data::new(ctx);
        let hints: Vec<String> = self
            .fixes
            .get(i)?
            .iter()
            .filter(|f| path_kind(&data, &f.operand) == Some(f.operand_kind))
            .map(|f| {
                let kind = match f.operand_kind {
                    NumKind::Decimal => "a decimal",
                    NumKind::Long => "a Long",
                };
                format!(
                    "`{}` is {kind}: write `{}` instead of `{}`",
                    f.operand, f.fix, f.expression
                )
            })
            .collect();
        (!hints.is_empty()).then(|| hints.join("; "))
    }

    fn slice(&self, action: ActionType, capability: &str) -> Arc<Slice> {
        let slot = action as usize;
        let mut cache = lock(&self.slices);
        if let Some(s) = cache
            .by_capability
            .get(capability)
            .and_then(|slots| slots[slot].as_ref())
        {
            return Arc::clone(s);
        }
        let mut fixed = Part::default();
        let mut native = NativePart::default();
        let mut dynamic = Part::default();
        let mut held = 0;
        for i in self.scope.rules(action, capability) {
            held += 1;
            let (rule, policy, used) = (&self.rules[i], &self.compiled[i], &self.uses[i]);
            let part = if used.is_fixed() {
                &mut fixed
            } else if let Some(fast) = &self.native[i] {
                native.rules.push((i, Arc::clone(fast)));
                &mut native.cedar
            } else {
                &mut dynamic
            };
            let target = if rule.authorizes {
                &mut part.authorize
            } else {
                &mut part.annotated
            };
            // Ids are unique by construction, so adding cannot fail.
            let _ = target.add(policy.clone());
            part.uses.add(used);
        }
        let slice = Arc::new(Slice {
            fixed,
            native,
            dynamic,
        });
        if cache.by_capability.len() >= CACHE_LIMIT
            || cache.policies.saturating_add(held) > SLICE_POLICY_LIMIT
        {
            cache.by_capability.clear();
            cache.policies = 0;
        }
        cache.policies += held;
        cache
            .by_capability
            .entry(capability.to_string())
            .or_insert_with(|| std::array::from_fn(|_| None))[slot] = Some(Arc::clone(&slice));
        slice
    }

    /// The key of the Cedar entities of the action's agent and capability.
    fn entity_key(&self, ctx: &PolicyContext) -> u64 {
        let action = &ctx.action;
        let mut h = self.hasher.build_hasher();
        action.agent_id.hash(&mut h);
        action.tenant_id.hash(&mut h);
        action.agent_scopes.hash(&mut h);
        hash_entity_fields(&action.capability, &mut h);
        h.finish()
    }

    fn entities(
        &self,
        ctx: &PolicyContext,
        key: u64,
    ) -> Result<(EntityUid, EntityUid, Arc<Entities>), RequestError> {
        let action = &ctx.action;
        let cap = &action.capability;
        let principal = EntityUid::from_type_name_and_id(
            self.agent_type.clone(),
            EntityId::new(&action.agent_id),
        );
        let resource = EntityUid::from_type_name_and_id(
            self.capability_type.clone(),
            EntityId::new(&cap.name),
        );
        if let Some(e) = lock(&self.entities).get(&key) {
            return Ok((principal, resource, Arc::clone(e)));
        }
        let tenant = action.tenant_id.clone().unwrap_or_default();
        let agent = Entity::new(
            principal.clone(),
            HashMap::from([
                (
                    "tenant".to_string(),
                    RestrictedExpression::new_string(tenant),
                ),
                (
                    "scopes".to_string(),
                    RestrictedExpression::new_set(
                        action
                            .agent_scopes
                            .iter()
                            .map(|s| RestrictedExpression::new_string(s.clone())),
                    ),
                ),
            ]),
            HashSet::new(),
        )?;
        let capability = capability_entity(cap, resource.clone())?;
        let entities = Arc::new(Entities::from_entities([agent, capability], None)?);
        let mut cache = lock(&self.entities);
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(key, Arc::clone(&entities));
        Ok((principal, resource, entities))
    }

    /// The request context, with only the attributes the slice's policies read (a policy
    /// cannot observe an attribute it does not name, so leaving the others out changes no
    /// result and saves building them, decimals especially).
    fn context(&self, ctx: &PolicyContext, uses: &ContextUse) -> Result<Context, RequestError> {
        let action = &ctx.action;
        let g = &action.capability.governance;
        let mut pairs: Vec<(String, RestrictedExpression)> = Vec::with_capacity(8);
        if uses.all || uses.input {
            let input =
                to_cedar(&action.input, g.input_schema.as_ref()).unwrap_or_else(empty_record);
            pairs.push(("input".into(), input));
        }
        if ctx.stage != Stage::BeforeCapability
            && (uses.all || uses.output)
            && let Some(out) = ctx
                .output
                .as_ref()
                .and_then(|o| to_cedar(o, g.output_schema.as_ref()))
        {
            pairs.push(("output".into(), out));
        }
        if uses.all || uses.environment {
            pairs.push((
                "environment".into(),
                RestrictedExpression::new_string(action.environment.as_str().into()),
            ));
        }
        if uses.all || uses.tenant {
            pairs.push((
                "tenant".into(),
                RestrictedExpression::new_string(action.tenant_id.clone().unwrap_or_default()),
            ));
        }
        if uses.all || uses.stage {
            pairs.push((
                "stage".into(),
                RestrictedExpression::new_string(ctx.stage.as_str().into()),
            ));
        }
        if uses.all || uses.labels {
            let labels = RestrictedExpression::new_record(
                action
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), RestrictedExpression::new_string(v.clone()))),
            )?;
            pairs.push(("labels".into(), labels));
        }
        if uses.all || uses.cost {
            pairs.push(("costSoFarUsd".into(), cost(action.cost_so_far_usd)));
        }
        if (uses.all || uses.estimated_cost)
            && let Some(x) = action.estimated_cost_usd
        {
            pairs.push(("estimatedCostUsd".into(), cost(x)));
        }
        Ok(Context::from_pairs(pairs)?)
    }

    fn decision_for(&self, rule: &CedarRule, ctx: &PolicyContext) -> Decision {
        let mut d = Decision::new(rule.decision);
        d.reason = rule.reason.clone().or_else(|| match rule.decision {
            DecisionType::Deny => Some(format!("denied by policy `{}`", rule.id)),
            _ => None,
        });
        d.policy_id = Some(rule.id.clone());
        d.policy_name = Some(rule.id.clone());
        d.policy_version.clone_from(&rule.version);
        d.code.clone_from(&rule.code);
        d.redact.clone_from(&rule.redact);
        d.mutations.clone_from(&rule.mutations);
        if let Some(types) = &rule.disable_side_effects {
            let refs: Vec<&str> = types.iter().map(String::as_str).collect();
            let input = ctx.action.capability.disable_input_for(&refs);
            d.mutations.extend(Decision::set_input(&input).mutations);
        }
        d.route_to.clone_from(&rule.route_to);
        d.sandbox.clone_from(&rule.sandbox);
        if rule.decision == DecisionType::LogOnly {
            d.would_be = Some(match rule.effect {
                RuleEffect::Permit => DecisionType::Allow,
                RuleEffect::Forbid => DecisionType::Deny,
            });
        }
        d
    }

    /// Evaluates the policies for the context: the decisions of every matching policy,
    /// ranked by priority, plus Cedar's default deny in the before stage.
    pub fn evaluate(&self, ctx: &PolicyContext) -> Result<SourceDecisions, PolicyFault> {
        let action = &ctx.action;
        let slice = self.slice(action.action_type, &action.capability.name);
        let before = ctx.stage == Stage::BeforeCapability;
        let mut out = SourceDecisions::default();
        if slice.fixed.is_empty() && slice.native.rules.is_empty() && slice.dynamic.is_empty() {
            if before {
                out.decisions.push(self.default_deny(ctx));
            }
            return Ok(out);
        }
        let entity_key = self.entity_key(ctx);
        // The Cedar entities, built when a part needs Cedar.
        let mut cedar = CedarInputs::default();
        let mut results: Vec<Arc<PartResult>> = Vec::with_capacity(3);
        if !slice.fixed.is_empty() {
            // Same agent, capability, action, environment, tenant and stage: same result.
            let mut h = self.hasher.build_hasher();
            entity_key.hash(&mut h);
            action.action_type.hash(&mut h);
            action.environment.hash(&mut h);
            action.tenant_id.hash(&mut h);
            ctx.stage.hash(&mut h);
            let key = h.finish();
            let cached = lock(&self.fixed_results).get(&key).cloned();
            let result = match cached {
                Some(r) => r,
                None => {
                    let r = Arc::new(self.run_cedar(ctx, entity_key, &mut cedar, &slice.fixed)?);
                    let mut cache = lock(&self.fixed_results);
                    if cache.len() >= CACHE_LIMIT {
                        cache.clear();
                    }
                    cache.insert(key, Arc::clone(&r));
                    r
                }
            };
            results.push(result);
        }
        if !slice.native.rules.is_empty() {
            let r = match self.run_native(ctx, &slice.native) {
                Some(r) => r,
                None => self.run_cedar(ctx, entity_key, &mut cedar, &slice.native.cedar)?,
            };
            results.push(Arc::new(r));
        }
        if !slice.dynamic.is_empty() {
            let r = self.run_cedar(ctx, entity_key, &mut cedar, &slice.dynamic)?;
            results.push(Arc::new(r));
        }

        let mut matched: Vec<usize> = Vec::new();
        let mut errored_forbid = false;
        for r in &results {
            matched.extend_from_slice(&r.matched);
            out.errors.extend(r.errors.iter().cloned());
            for (i, message) in &r.errored {
                let rule = &self.rules[*i];
                // A forbid that cannot be evaluated denies (fail closed), at the stages where
                // its decision applies.
                if rule.effect == RuleEffect::Forbid
                    && rule.decision != DecisionType::LogOnly
                    && applies_at(rule.decision, ctx.stage)
                {
                    errored_forbid = true;
                    let mut d = Decision::deny(format!(
                        "policy `{}` could not be evaluated: {message}",
                        rule.id
                    ))
                    .with_code("policy_error");
                    d.policy_id = Some(rule.id.clone());
                    d.policy_name = Some(rule.id.clone());
                    out.decisions.push(RankedDecision {
                        priority: rule.priority,
                        decision: d,
                    });
                }
            }
        }
        matched.sort_unstable();
        matched.dedup();
        // As in a single Cedar call: when a forbid matched, the permits are not reported.
        let is_forbid = |i: &usize| {
            let r = &self.rules[*i];
            r.authorizes && r.effect == RuleEffect::Forbid
        };
        if matched.iter().any(is_forbid) {
            matched.retain(|i| {
                let r = &self.rules[*i];
                !(r.authorizes && r.effect == RuleEffect::Permit)
            });
        }
        let mut granted = false;
        for i in matched {
            let rule = &self.rules[i];
            if rule.authorizes && rule.effect == RuleEffect::Permit {
                granted = true;
            }
            if !applies_at(rule.decision, ctx.stage) {
                continue;
            }
            out.decisions.push(RankedDecision {
                priority: rule.priority,
                decision: self.decision_for(rule, ctx),
            });
        }
        let denied = out.decisions.iter().any(|d| d.decision.denied()) || errored_forbid;
        if before && !granted && !denied {
            out.decisions.push(self.default_deny(ctx));
        }
        Ok(out)
    }

    /// Runs Cedar on one part, building the entities on first use.
    fn run_cedar(
        &self,
        ctx: &PolicyContext,
        entity_key: u64,
        inputs: &mut CedarInputs,
        part: &Part,
    ) -> Result<PartResult, PolicyFault> {
        if inputs.0.is_none() {
            inputs.0 = Some(self.entities(ctx, entity_key)?);
        }
        let Some((principal, resource, entities)) = inputs.0.as_ref() else {
            return Err(PolicyFault::new("cedar entities are missing"));
        };
        let context = self.context(ctx, &part.uses)?;
        let request = Request::new(
            principal.clone(),
            self.actions[ctx.action.action_type as usize].clone(),
            resource.clone(),
            context,
            None,
        )
        .map_err(|e| PolicyFault::new(e.to_string()))?;
        Ok(self.run_part(part, &request, entities, ctx))
    }

    /// Evaluates a part natively: the result Cedar would give (a forbid that matched hides
    /// the permits of its set), or `None` when Cedar must decide (see [`super::fast`]).
    fn run_native(&self, ctx: &PolicyContext, part: &NativePart) -> Option<PartResult> {
        let data = Data::new(ctx);
        let mut matched = Vec::new();
        for (i, policy) in &part.rules {
            if policy.satisfied(&data).ok()? {
                matched.push(*i);
            }
        }
        let forbids = |i: &usize| {
            let r = &self.rules[*i];
            r.authorizes && r.effect == RuleEffect::Forbid
        };
        if matched.iter().any(forbids) {
            matched.retain(|i| !self.rules[*i].authorizes || forbids(i));
        }
        Some(PartResult {
            matched,
            ..PartResult::default()
        })
    }

    /// Runs Cedar on one part. Cedar reports, for an `Allow`, every permit that matched, and
    /// for a `Deny`, every forbid that matched; since any matched forbid denies, that is all
    /// the combination needs. Annotated policies are all permits, so all their matches show.
    fn run_part(
        &self,
        part: &Part,
        request: &Request,
        entities: &Entities,
        ctx: &PolicyContext,
    ) -> PartResult {
        let mut r = PartResult::default();
        for set in [&part.authorize, &part.annotated] {
            if set.is_empty() {
                continue;
            }
            let response = self.authorizer.is_authorized(request, set, entities);
            for id in response.diagnostics().reason() {
                if let Some(&i) = self.index.get(AsRef::<str>::as_ref(id)) {
                    r.matched.push(i);
                }
            }
            for e in response.diagnostics().errors() {
                let cedar_policy::AuthorizationError::PolicyEvaluationError(pe) = e;
                let rule = self
                    .index
                    .get(AsRef::<str>::as_ref(pe.policy_id()))
                    .copied();
                let inner = pe.inner().to_string();
                let hint = rule
                    .and_then(|i| self.number_hint(i, &inner, ctx))
                    .map(|h| format!("; {h}"))
                    .unwrap_or_default();
                r.errors.push(format!("{e}{hint}"));
                if let Some(i) = rule {
                    r.errored.push((i, format!("{inner}{hint}")));
                }
            }
        }
        r
    }

    fn default_deny(&self, ctx: &PolicyContext) -> RankedDecision {
        RankedDecision {
            priority: i64::MAX,
            decision: Decision::deny(format!(
                "no policy permits `{}` on `{}`",
                ctx.action.action_type, ctx.action.capability.name
            ))
            .with_code("default_deny"),
        }
    }
}

impl PolicySource for CedarPolicies {
    fn name(&self) -> &str {
        "cedar"
    }

    fn decide(&self, ctx: &PolicyContext) -> Result<SourceDecisions, PolicyFault> {
        self.evaluate(ctx)
    }

    /// Cedar sees only the request built from the context (no clock, no outside state).
    fn deterministic(&self) -> bool {
        true
    }
}

/// The stages at which a Cedar policy's decision applies: `approval_required`,
/// `transform_input`, `route` and `sandbox` before execution; `redact` and
/// `transform_output` after it; `allow`, `deny` and `log_only` at every stage.
pub fn applies_at(decision: DecisionType, stage: Stage) -> bool {
    match decision {
        DecisionType::Allow | DecisionType::Deny | DecisionType::LogOnly => true,
        DecisionType::ApprovalRequired
        | DecisionType::TransformInput
        | DecisionType::Route
        | DecisionType::Sandbox => stage == Stage::BeforeCapability,
        DecisionType::Redact | DecisionType::TransformOutput => stage == Stage::AfterCapability,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Which context attributes a policy reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ContextUse {
    /// `context` used as a whole (e.g. compared): every attribute is needed.
    pub all: bool,
    pub input: bool,
    pub output: bool,
    environment: bool,
    tenant: bool,
    stage: bool,
    labels: bool,
    cost: bool,
    estimated_cost: bool,
}

impl ContextUse {
    /// Reads nothing that changes from call to call (only environment, tenant and stage).
    fn is_fixed(&self) -> bool {
        !(self.all || self.input || self.output || self.labels || self.cost || self.estimated_cost)
    }

    fn add(&mut self, o: &ContextUse) {
        self.all |= o.all;
        self.input |= o.input;
        self.output |= o.output;
        self.environment |= o.environment;
        self.tenant |= o.tenant;
        self.stage |= o.stage;
        self.labels |= o.labels;
        self.cost |= o.cost;
        self.estimated_cost |= o.estimated_cost;
    }

    fn mark(&mut self, attr: &str) {
        match attr {
            "input" => self.input = true,
            "output" => self.output = true,
            "environment" => self.environment = true,
            "tenant" => self.tenant = true,
            "stage" => self.stage = true,
            "labels" => self.labels = true,
            "costSoFarUsd" => self.cost = true,
            "estimatedCostUsd" => self.estimated_cost = true,
            _ => {}
        }
    }
}

/// The context attributes a policy reads, from its JSON form (`context.x`, `context["x"]`
/// and `context has x` all become `.`/`has` nodes whose left side is the `context` variable).
/// Any other use of `context` needs the whole record. A policy that cannot be converted
/// uses everything.
pub(crate) fn context_use(policy: &Policy) -> ContextUse {
    let mut uses = ContextUse::default();
    match policy.to_json() {
        Ok(json) => walk_context_use(&json, &mut uses),
        Err(_) => uses.all = true,
    }
    uses
}

fn is_context_var(v: &Value) -> bool {
    v.get("Var").and_then(Value::as_str) == Some("context")
}

fn walk_context_use(v: &Value, uses: &mut ContextUse) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                if (k == "." || k == "has") && child.get("left").is_some_and(is_context_var) {
                    match child.get("attr").and_then(Value::as_str) {
                        Some(attr) => uses.mark(attr),
                        None => uses.all = true,
                    }
                    continue;
                }
                if k == "Var" && child.as_str() == Some("context") {
                    uses.all = true;
                    continue;
                }
                walk_context_use(child, uses);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| walk_context_use(i, uses)),
        _ => {}
    }
}

/// Hashes what the Cedar entity of a capability depends on, without allocating.
fn hash_entity_fields(cap: &GovernedCapability, h: &mut impl Hasher) {
    let g = &cap.governance;
    cap.name.hash(h);
    g.kind.hash(h);
    g.risk.hash(h);
    if let Some(e) = &g.effect {
        e.kind.as_str().hash(h);
    }
    0xFFu8.hash(h);
    for s in &g.side_effects {
        s.kind.as_str().hash(h);
    }
    0xFFu8.hash(h);
    cap.declared_effects.hash(h);
    for s in &g.scopes {
        s.name.hash(h);
    }
    0xFFu8.hash(h);
    g.owner.hash(h);
    g.data_namespace.hash(h);
    g.tenant.hash(h);
    g.environment.hash(h);
}

/// Rewrites an annotated forbid as a permit (same scope and conditions), so that Cedar
/// reports it in the reasons of an `Allow` when it matches.
fn as_permit(policy: &Policy, rule: &CedarRule) -> Result<Policy, CedarError> {
    let invalid = |message: String| CedarError::Invalid {
        diagnostics: vec![super::Diagnostic {
            file: rule.file.clone(),
            line: rule.line,
            column: rule.column,
            severity: super::Severity::Error,
            message,
            policy_id: Some(rule.id.clone()),
            expression: None,
            fix: None,
            capabilities: Vec::new(),
        }],
    };
    let mut json = policy.to_json().map_err(|e| invalid(e.to_string()))?;
    if let Some(obj) = json.as_object_mut() {
        obj.insert("effect".into(), Value::String("permit".into()));
    }
    Policy::from_json(Some(policy.id().clone()), json).map_err(|e| invalid(e.to_string()))
}

fn empty_record() -> RestrictedExpression {
    // A record with no fields cannot fail to build.
    RestrictedExpression::new_record(std::iter::empty())
        .unwrap_or_else(|_| RestrictedExpression::new_bool(false))
}

/// The Cedar entity of a capability (see the crate docs, "The Cedar contract").
pub(crate) fn capability_entity(
    cap: &GovernedCapability,
    uid: EntityUid,
) -> Result<Entity, EntityAttrEvaluationError> {
    let g = &cap.governance;
    let s = |v: &Option<String>| RestrictedExpression::new_string(v.clone().unwrap_or_default());
    let set = |items: Vec<String>| {
        RestrictedExpression::new_set(items.into_iter().map(RestrictedExpression::new_string))
    };
    Entity::new(
        uid,
        HashMap::from([
            (
                "name".to_string(),
                RestrictedExpression::new_string(cap.name.clone()),
            ),
            (
                "kind".to_string(),
                RestrictedExpression::new_string(g.kind.as_str().into()),
            ),
            (
                "risk".to_string(),
                RestrictedExpression::new_string(g.risk.as_str().into()),
            ),
            (
                "riskLevel".to_string(),
                RestrictedExpression::new_long(g.risk as i64),
            ),
            ("effects".to_string(), set(cap.effect_names())),
            (
                "scopes".to_string(),
                set(cap.required_scopes().map(str::to_string).collect()),
            ),
            ("owner".to_string(), s(&g.owner)),
            ("dataNamespace".to_string(), s(&g.data_namespace)),
            ("tenant".to_string(), s(&g.tenant)),
            (
                "environment".to_string(),
                RestrictedExpression::new_string(
                    g.environment
                        .map(|e| e.as_str().to_string())
                        .unwrap_or_default(),
                ),
            ),
            ("method".to_string(), fact(g, "method")),
            ("path".to_string(), fact(g, "path")),
            ("operationId".to_string(), fact(g, "operationId")),
            ("server".to_string(), fact(g, "server")),
        ]),
        HashSet::new(),
    )
}

/// A string fact of the capability kept in its governance metadata (`""` when absent).
fn fact(g: &crate::model::Governance, key: &str) -> RestrictedExpression {
    RestrictedExpression::new_string(
        g.metadata
            .get(key)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string(),
    )
}

/// A Cedar decimal for a double (4 decimal places, Cedar's precision); `None` when out of
/// Cedar's range or not finite.
pub(crate) fn decimal(x: f64) -> Option<RestrictedExpression> {
    decimal_literal(x).map(RestrictedExpression::new_decimal)
}

/// The text of a Cedar decimal literal for a double, rounded to 4 places; `None` when not
/// finite or out of Cedar's range.
pub(crate) fn decimal_literal(x: f64) -> Option<String> {
    if !x.is_finite() || x.abs() >= 922_337_203_685_477.0 {
        return None;
    }
    let s = format!("{x:.4}");
    let s = if s.starts_with("-0.0000") {
        "0.0000".to_string()
    } else {
        s
    };
    Some(s)
}

/// Whether a JSON value holds a number that no Cedar type holds exactly (whatever its
/// schema would say).
fn holds_opaque_number(v: &Value) -> bool {
    match v {
        Value::Number(n) => number_form(n, None) == NumberForm::Opaque,
        Value::Array(items) => items.iter().any(holds_opaque_number),
        Value::Object(m) => m.values().any(holds_opaque_number),
        _ => false,
    }
}

/// The Cedar decimal literal that is this double exactly (up to the noise of binary
/// doubles, `0.1 + 0.2` is `0.3000`); `None` when it needs more than 4 places or is out of
/// range: rounding it would move it across a policy's threshold.
pub(crate) fn exact_decimal_literal(x: f64) -> Option<String> {
    let text = decimal_literal(x)?;
    let back: f64 = text.parse().ok()?;
    ((x - back).abs() <= 1e-9 * x.abs().max(1.0)).then_some(text)
}

/// A cost as Cedar sees it: rounded *up* to 4 places (a cost is never shown smaller than it
/// is, so a limit still holds); a string of its digits when out of range (see
/// [`number_form`]).
pub(crate) fn cost(x: f64) -> RestrictedExpression {
    match decimal_literal((x * 10_000.0).ceil() / 10_000.0) {
        Some(text) => RestrictedExpression::new_decimal(text),
        None => RestrictedExpression::new_string(x.to_string()),
    }
}

/// The JSON Schema type a schema gives its values, when it is one type: `"t"`, or
/// `["t", "null"]` (`null` members are omitted from Cedar values, so a nullable type is the
/// type). The generated Cedar schema reads types the same way ([`super::schema`]).
pub(crate) fn schema_type(schema: Option<&Value>) -> Option<&str> {
    match schema?.get("type")? {
        Value::String(t) => Some(t),
        Value::Array(types) => {
            let mut non_null = types
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null");
            let first = non_null.next()?;
            non_null.next().is_none().then_some(first)
        }
        _ => None,
    }
}

/// How a JSON number is given to Cedar.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum NumberForm {
    Long(i64),
    /// A decimal that is the number exactly ([`exact_decimal_literal`]).
    Decimal(f64),
    /// A number Cedar cannot hold: outside `Long` and `decimal` range, or with more than 4
    /// decimal places. It is given as the string of its JSON text: present (`has` holds),
    /// equal to no number, and a type error wherever it is compared or used as a decimal,
    /// so a `forbid` that compares it denies (fail closed) and a `permit` that compares it
    /// grants nothing. A number Cedar cannot represent never makes a policy less strict.
    Opaque,
}

/// The Cedar form of a JSON number, decided by its schema so that a field has one Cedar type
/// whatever its value, as the generated schema declares: `number` is always a `decimal`
/// (`150` too), `integer` always a `Long` (`150.0` too). Without a declared type the value
/// decides: integral values (`150`, `1e16`) are `Long`, others `decimal`. Whatever the
/// type, a value it cannot hold exactly is [`NumberForm::Opaque`].
pub(crate) fn number_form(n: &serde_json::Number, schema: Option<&Value>) -> NumberForm {
    // i64 bounds as f64: -2^63 is exact, 2^63 is the first value beyond.
    const MIN: f64 = -9_223_372_036_854_775_808.0;
    const END: f64 = 9_223_372_036_854_775_808.0;
    let decimal = |x: f64| match exact_decimal_literal(x) {
        Some(_) => NumberForm::Decimal(x),
        None => NumberForm::Opaque,
    };
    let Some(x) = n.as_f64() else {
        return NumberForm::Opaque;
    };
    if schema_type(schema) == Some("number") {
        return decimal(x);
    }
    // `integer`, or no declared type.
    match n.as_i64() {
        Some(i) => NumberForm::Long(i),
        // Integral and in range: the conversion is exact.
        None if x.fract() == 0.0 && (MIN..END).contains(&x) => NumberForm::Long(x as i64),
        None => decimal(x),
    }
}

/// JSON → Cedar value. `null` has no Cedar form and yields `None` (the member is omitted).
/// Numbers take the form [`number_form`] gives them (a number Cedar cannot hold is a
/// string, never left out); strings are kept as they are (any Unicode, also characters
/// Cedar's syntax would escape); arrays become sets; objects become records whose keys are
/// any strings (reached with `["key"]` when not identifiers).
pub(crate) fn to_cedar(v: &Value, schema: Option<&Value>) -> Option<RestrictedExpression> {
    match v {
        Value::Null => None,
        Value::Bool(b) => Some(RestrictedExpression::new_bool(*b)),
        Value::String(s) => Some(RestrictedExpression::new_string(s.clone())),
        Value::Number(n) => Some(match number_form(n, schema) {
            NumberForm::Long(i) => RestrictedExpression::new_long(i),
            NumberForm::Decimal(x) => decimal(x)?,
            NumberForm::Opaque => RestrictedExpression::new_string(n.to_string()),
        }),
        Value::Array(items) => {
            let item_schema = schema.and_then(|s| s.get("items"));
            Some(RestrictedExpression::new_set(
                items.iter().filter_map(|i| to_cedar(i, item_schema)),
            ))
        }
        Value::Object(map) => {
            let props = schema.and_then(|s| s.get("properties"));
            let fields: Vec<(String, RestrictedExpression)> = map
                .iter()
                .filter_map(|(k, v)| {
                    let sub = props.and_then(|p| p.get(k));
                    to_cedar(v, sub).map(|e| (k.clone(), e))
                })
                .collect();
            RestrictedExpression::new_record(fields).ok()
        }
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;

    fn uses(text: &str) -> ContextUse {
        let policy = match Policy::parse(None, text) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        context_use(&policy)
    }

    #[test]
    fn context_attributes_read_by_a_policy_are_found() {
        let u = uses(
            r#"permit(principal, action, resource) when {
                context.input.amount > 1 && context has labels && context["stage"] == "x" &&
                context.input has tenant && resource.owner == "costSoFarUsd"
            };"#,
        );
        assert_eq!(
            u,
            ContextUse {
                input: true,
                labels: true,
                stage: true,
                ..ContextUse::default()
            }
        );
        assert!(uses("permit(principal, action, resource) when { context == {} };").all);
        assert_eq!(
            uses("permit(principal, action, resource);"),
            ContextUse::default()
        );
        let u = uses(
            "forbid(principal, action, resource) when { context has estimatedCostUsd && context.costSoFarUsd.greaterThan(decimal(\"1.0\")) };",
        );
        assert!(u.cost && u.estimated_cost && !u.input && !u.all);
    }

    /// The native evaluator must give exactly Cedar's results: every policy below is
    /// evaluated with and without it over a grid of requests, and the decisions (ids, kinds,
    /// reasons, parameters) and errors must be equal.
    #[test]
    fn native_evaluation_agrees_with_cedar() {
        use crate::model::{BraneEffect, CapabilityKind, Effect, Environment, GovernedCapability};
        use crate::{ActionType, AgentAction, PolicyContext, RiskLevel, Stage};
        use serde_json::json;

        let conditions = [
            "context.input.amount > 100",
            "context.input.amount >= 100 && context.input.amount <= 500",
            "context.input has amount && context.input.amount < 10",
            "context.input.usd.greaterThan(decimal(\"99.5\"))",
            "context.input.usd.lessThanOrEqual(decimal(\"0.0001\"))",
            "context.input.name like \"a*b\"",
            "context.input.name like \"*\\*x\"",
            "context.input.name == \"alice\"",
            "context.input.name != \"alice\"",
            "context.input.tags.contains(\"vip\")",
            "context.input.tags.containsAll([\"a\", \"b\"])",
            "context.input.tags.containsAny([\"x\", \"vip\"])",
            "context.input.tags.isEmpty()",
            "context.input.tags == [\"vip\"]",
            "context.input.nested.deep.flag",
            "context.input has nested && context.input.nested has deep && context.input.nested.deep.flag == true",
            "if context.input has amount then context.input.amount > 5 else false",
            "!(context.input.flag)",
            "context.input.flag || context.input.amount > 1",
            "context.input.flag && context.input.amount > 1",
            "principal.scopes.contains(\"refunds:create\")",
            "principal.tenant == context.tenant",
            "principal in [Agent::\"alice\", Agent::\"bob\"]",
            "principal is Agent",
            "resource.risk == \"high\" && resource.effects.contains(\"financial\")",
            "resource.scopes.containsAll(principal.scopes)",
            "resource.owner like \"pay*\"",
            "resource.missing == 1",
            "context.labels has team && context.labels.team == \"billing\"",
            "context.labels.team == \"billing\"",
            "context.costSoFarUsd.greaterThan(decimal(\"1.5\"))",
            "context has estimatedCostUsd && context.estimatedCostUsd.lessThan(decimal(\"10.0\"))",
            "context.estimatedCostUsd.lessThan(decimal(\"10.0\"))",
            "context.environment == \"prod\" && context.stage == \"before_capability\"",
            "context has output && context.output.ok == true",
            "context.output.secret like \"*sk-*\"",
            "context.input.amount == context.input.name",
            "context.input.amount < \"x\"",
            "context.input.count + 1 > 2",
            "action == Action::\"tool_call\"",
            "action in [Action::\"tool_call\", Action::\"model_call\"]",
        ];
        // One set per policy (a policy that falls back sends its whole part to Cedar, so a
        // set of many would hide the native results), and one with them all.
        let mut texts: Vec<String> = conditions
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let (effect, extra) = match i % 4 {
                    0 => ("permit", ""),
                    1 => ("forbid", ""),
                    2 => ("permit", "@decision(\"approval_required\") "),
                    _ => ("permit", "@decision(\"redact\") @redact(\"/secret\") "),
                };
                format!(
                    "@id(\"p{i}\") @reason(\"r{i}\") {extra}{effect}(principal, action, resource) when {{ {c} }};\n"
                )
            })
            .collect();
        texts.push(texts.concat());
        let pairs: Vec<(CedarPolicies, CedarPolicies)> = texts
            .iter()
            .map(|text| {
                let files = [PolicyFile::new("diff.cedar", text.clone())];
                let load = || match CedarPolicies::from_sources(&files) {
                    Ok(p) => p,
                    Err(e) => panic!("{e}"),
                };
                let mut cedar_only = load();
                cedar_only.native.iter_mut().for_each(|n| *n = None);
                (load(), cedar_only)
            })
            .collect();
        let compiled = pairs[..conditions.len()]
            .iter()
            .filter(|(n, _)| n.native[0].is_some())
            .count();
        assert!(compiled >= 30, "only {compiled} policies compiled natively");

        let with_schema = Arc::new(
            GovernedCapability::new("refund", CapabilityKind::Tool)
                .risk(RiskLevel::High)
                .effect(Effect::new(BraneEffect::Financial))
                .scope("refunds:create")
                .owner("payments")
                .tenant("acme")
                .environment(Environment::Prod)
                .input_schema(json!({"type": "object", "properties": {
                    "usd": {"type": "number"}, "amount": {"type": "integer"}
                }})),
        );
        let plain = Arc::new(GovernedCapability::new("plain", CapabilityKind::Database));
        let inputs = [
            json!({}),
            json!({"amount": 150, "usd": 120.25, "name": "alice", "tags": ["vip", "a", "b"], "flag": true}),
            json!({"amount": 7, "usd": 0.0001, "name": "axxb", "tags": [], "flag": false}),
            json!({"amount": "150", "usd": "1", "name": 3, "tags": "vip", "flag": "yes"}),
            json!({"amount": 1e300, "usd": -5, "name": "a*x", "tags": ["a", null, "b"], "nested": {"deep": {"flag": true}}}),
            json!({"amount": 100, "usd": 99.5, "name": "ab", "tags": ["vip"], "nested": {"deep": {}}, "count": 3}),
            json!({"amount": null, "name": null, "nested": 1, "flag": null}),
            json!({"amount": -9_223_372_036_854_775_808_i64, "usd": 1.5e-7, "name": "ab\u{e9}b"}),
            json!({"amount": 10_000_000_000_000_000_000_u64, "usd": 1000.00001, "count": 1e16, "tags": [1e300]}),
        ];
        let outputs = [
            None,
            Some(json!({"ok": true, "secret": "x sk-123"})),
            Some(json!({"ok": 1})),
        ];
        let mut checked = 0usize;
        let mut answered_natively = 0usize;
        for cap in [&with_schema, &plain] {
            for (agent, scopes) in [("alice", vec!["refunds:create"]), ("carol", vec![])] {
                for action_type in [ActionType::ToolCall, ActionType::McpToolCall] {
                    for input in &inputs {
                        for (stage, output) in [
                            (Stage::BeforeCapability, &outputs[0]),
                            (Stage::AfterCapability, &outputs[1]),
                            (Stage::AfterCapability, &outputs[2]),
                            (Stage::OnError, &outputs[0]),
                        ] {
                            let mut action = AgentAction::new(action_type, Arc::clone(cap), agent)
                                .input(input.clone())
                                .tenant("acme")
                                .environment(Environment::Prod)
                                .scopes(scopes.clone())
                                .cost_so_far(if checked.is_multiple_of(2) { 2.0 } else { 0.5 });
                            if checked.is_multiple_of(3) {
                                action = action.label("team", "billing").estimated_cost(3.25);
                            }
                            let mut ctx = PolicyContext::new(action, stage);
                            ctx.output.clone_from(output);
                            let summary = |p: &CedarPolicies| match p.evaluate(&ctx) {
                                Ok(d) => {
                                    let mut v: Vec<String> = d
                                        .decisions
                                        .iter()
                                        .map(|r| {
                                            let d = &r.decision;
                                            format!(
                                                "{} {:?} {:?} {:?} {:?} {:?}",
                                                r.priority,
                                                d.kind,
                                                d.policy_id,
                                                d.reason,
                                                d.redact,
                                                d.code
                                            )
                                        })
                                        .collect();
                                    v.sort();
                                    let mut e = d.errors.clone();
                                    e.sort();
                                    format!("{v:?} {e:?}")
                                }
                                Err(e) => format!("fault {e:?}"),
                            };
                            for (native, cedar_only) in &pairs {
                                let data = super::super::fast::Data::new(&ctx);
                                if native.native.len() == 1
                                    && native.native[0]
                                        .as_ref()
                                        .is_some_and(|f| f.satisfied(&data).is_ok())
                                {
                                    answered_natively += 1;
                                }
                                assert_eq!(
                                    summary(native),
                                    summary(cedar_only),
                                    "policies {:?} input {input} stage {stage:?} agent {agent} cap {}",
                                    native.rules().iter().map(|r| &r.id).collect::<Vec<_>>(),
                                    cap.name
                                );
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 2 * 2 * 2 * inputs.len() * 4);
        assert!(
            answered_natively > checked * 10,
            "only {answered_natively} evaluations answered natively"
        );
    }

    /// Slicing by resource and action must not change any result: random sets of policies
    /// (scopes with `==`, `in`, `is`, `is .. in`, action sets, other entity types, none;
    /// native, fixed, erroring and Cedar-only conditions; annotated decisions and
    /// priorities) are evaluated with the index and with every policy in every slice, and
    /// the decisions (in order, with ids, kinds, reasons, codes, parameters) and errors
    /// must be equal.
    #[test]
    fn slicing_by_resource_and_action_changes_no_result() {
        use crate::model::{CapabilityKind, Environment, GovernedCapability};
        use crate::{ActionType, AgentAction, PolicyContext, RiskLevel, Stage};
        use serde_json::json;

        let resources = [
            "resource",
            "resource == Capability::\"c0\"",
            "resource == Capability::\"c1\"",
            "resource in Capability::\"c0\"",
            "resource in Capability::\"c2\"",
            "resource is Capability",
            "resource is Capability in Capability::\"c1\"",
            "resource is Other",
            "resource == Other::\"c0\"",
            "resource in Other::\"c1\"",
        ];
        let actions = [
            "action",
            "action == Action::\"tool_call\"",
            "action == Action::\"model_call\"",
            "action == Action::\"no_such_action\"",
            "action in [Action::\"tool_call\", Action::\"mcp_tool_call\"]",
            "action in [Action::\"mcp_tool_call\", Action::\"mcp_tool_call\"]",
            "action in Action::\"model_call\"",
        ];
        let principals = ["principal", "principal == Agent::\"alice\""];
        let effects = [
            "permit",
            "forbid",
            "@decision(\"approval_required\") forbid",
            "@decision(\"log_only\") forbid",
            "@decision(\"log_only\") permit",
            "@decision(\"redact\") @redact(\"/secret\") permit",
            "@priority(\"-1\") forbid",
            "@priority(\"2\") @code(\"c\") permit",
        ];
        let conditions = [
            "",
            " when { context.input.amount > 100 }",
            " when { context.input has amount && context.input.amount < 10 }",
            " when { context.input.amount + 1 > 100 }",
            " when { resource.riskLevel >= 3 }",
            " when { context.environment == \"prod\" && context.stage == \"before_capability\" }",
            " unless { context.input has amount }",
            " when { resource.missing == 1 }",
            " when { context.input.amount > 1 && context.labels.team == \"billing\" }",
            " when { action == Action::\"tool_call\" || resource == Capability::\"c2\" }",
        ];
        // A small deterministic generator (xorshift).
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let mut pick = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let caps: Vec<Arc<GovernedCapability>> = (0..4)
            .map(|k| {
                Arc::new(
                    GovernedCapability::new(format!("c{k}"), CapabilityKind::Tool)
                        .risk(if k % 2 == 0 {
                            RiskLevel::High
                        } else {
                            RiskLevel::Low
                        })
                        .input_schema(json!({"type": "object", "properties": {
                            "amount": {"type": "integer"}
                        }})),
                )
            })
            .collect();
        let inputs = [
            json!({}),
            json!({"amount": 150}),
            json!({"amount": 5}),
            json!({"amount": "x"}),
        ];
        let summary = |p: &CedarPolicies, ctx: &PolicyContext| match p.evaluate(ctx) {
            Ok(d) => {
                let v: Vec<String> = d
                    .decisions
                    .iter()
                    .map(|r| {
                        let d = &r.decision;
                        format!(
                            "{} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
                            r.priority,
                            d.kind,
                            d.policy_id,
                            d.reason,
                            d.code,
                            d.redact,
                            d.would_be,
                            d.mutations
                        )
                    })
                    .collect();
                format!("{v:?} {:?}", d.errors)
            }
            Err(e) => format!("fault {e:?}"),
        };
        let mut compared = 0usize;
        let mut differed_in_slice = 0usize;
        for set in 0..80 {
            let count = 1 + pick(12);
            let text: String = (0..count)
                .map(|i| {
                    format!(
                        "@id(\"s{set}p{i}\") @reason(\"r{i}\") {}({}, {}, {}){};\n",
                        effects[pick(effects.len())],
                        principals[pick(principals.len())],
                        actions[pick(actions.len())],
                        resources[pick(resources.len())],
                        conditions[pick(conditions.len())]
                    )
                })
                .collect();
            let files = [PolicyFile::new("slice.cedar", text.clone())];
            let sliced = match CedarPolicies::from_sources(&files) {
                Ok(p) => p,
                Err(e) => panic!("{e}\n{text}"),
            };
            let mut unsliced = match CedarPolicies::from_sources(&files) {
                Ok(p) => p,
                Err(e) => panic!("{e}\n{text}"),
            };
            unsliced.scope = ScopeIndex::unsliced(unsliced.rules.len());
            for cap in &caps {
                for action_type in [
                    ActionType::ToolCall,
                    ActionType::McpToolCall,
                    ActionType::ModelCall,
                    ActionType::FileRead,
                ] {
                    if sliced.scope.rules(action_type, &cap.name).len() < count {
                        differed_in_slice += 1;
                    }
                    for agent in ["alice", "bob"] {
                        for input in &inputs {
                            for stage in [Stage::BeforeCapability, Stage::AfterCapability] {
                                let mut action =
                                    AgentAction::new(action_type, Arc::clone(cap), agent)
                                        .input(input.clone())
                                        .tenant("acme")
                                        .environment(Environment::Prod);
                                if pick(2) == 0 {
                                    action = action.label("team", "billing");
                                }
                                let ctx = PolicyContext::new(action, stage);
                                assert_eq!(
                                    summary(&sliced, &ctx),
                                    summary(&unsliced, &ctx),
                                    "policies:\n{text}cap {} action {action_type} agent {agent} input {input} stage {stage:?}",
                                    cap.name
                                );
                                compared += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(compared, 80 * 4 * 4 * 2 * 4 * 2);
        assert!(
            differed_in_slice > 200,
            "slicing left out policies in only {differed_in_slice} pairs"
        );
    }

    #[test]
    fn a_number_takes_the_cedar_type_its_schema_declares() {
        use serde_json::json;
        let form = |v: Value, schema: Value| match v {
            Value::Number(n) => Some(number_form(&n, Some(&schema))),
            _ => None,
        };
        let number = json!({"type": "number"});
        let integer = json!({"type": "integer"});
        let nullable = json!({"type": ["null", "number"]});
        let untyped = json!({});
        assert_eq!(
            form(json!(150), number.clone()),
            Some(NumberForm::Decimal(150.0))
        );
        assert_eq!(form(json!(150), nullable), Some(NumberForm::Decimal(150.0)));
        assert_eq!(
            form(json!(150.0), integer.clone()),
            Some(NumberForm::Long(150))
        );
        assert_eq!(
            form(json!(-2.0), integer.clone()),
            Some(NumberForm::Long(-2))
        );
        // Not an integer after all (the input did not validate): kept as it is.
        assert_eq!(
            form(json!(1.5), integer.clone()),
            Some(NumberForm::Decimal(1.5))
        );
        assert_eq!(form(json!(1e19), integer.clone()), Some(NumberForm::Opaque));
        assert_eq!(
            form(json!(1e16), integer.clone()),
            Some(NumberForm::Long(10_000_000_000_000_000))
        );
        assert_eq!(
            form(json!(150), untyped.clone()),
            Some(NumberForm::Long(150))
        );
        assert_eq!(
            form(json!(150.5), untyped.clone()),
            Some(NumberForm::Decimal(150.5))
        );
        // What Cedar cannot hold exactly is opaque, whatever the schema says.
        for (v, schema) in [
            (json!(1e300), &untyped),
            (json!(10_000_000_000_000_000_000_u64), &untyped),
            (json!(1000.00001), &untyped),
            (json!(1e16), &number),
            (json!(-1e300), &integer),
            (json!(0.123456), &number),
        ] {
            assert_eq!(
                form(v.clone(), schema.clone()),
                Some(NumberForm::Opaque),
                "{v}"
            );
        }
        // Integral values without a schema are Longs, also beyond the decimal range.
        assert_eq!(
            form(json!(1e16), untyped.clone()),
            Some(NumberForm::Long(10_000_000_000_000_000))
        );
        assert_eq!(
            form(json!(150.0), untyped.clone()),
            Some(NumberForm::Long(150))
        );
        // The noise of binary doubles is not precision.
        assert_eq!(
            form(json!(0.1 + 0.2), untyped),
            Some(NumberForm::Decimal(0.1 + 0.2))
        );
        let union = json!({"type": ["integer", "number"]});
        assert_eq!(form(json!(150), union), Some(NumberForm::Long(150)));
    }

    #[test]
    fn decimals_have_four_places() {
        assert_eq!(decimal_literal(250.0).as_deref(), Some("250.0000"));
        assert_eq!(decimal_literal(0.123456).as_deref(), Some("0.1235"));
        assert_eq!(decimal_literal(-0.00001).as_deref(), Some("0.0000"));
        assert_eq!(decimal_literal(f64::NAN), None);
        assert_eq!(decimal_literal(1e300), None);
        assert_eq!(exact_decimal_literal(0.1 + 0.2).as_deref(), Some("0.3000"));
        assert_eq!(exact_decimal_literal(0.123456), None);
        assert_eq!(exact_decimal_literal(1000.00001), None);
        assert_eq!(exact_decimal_literal(1e16), None);
    }
}
