//! Native evaluation of the common subset of Cedar policies, with Cedar's semantics.
//!
//! A policy is compiled (from its JSON form) when its scope and conditions use only:
//! literals (booleans, longs, strings, entity references, sets of those, `decimal("..")`),
//! `principal` / `resource` / `action` / `context`, attribute access and `has` with one
//! attribute, `!`, `&&`, `||`, `if`-`then`-`else`, `==`, `!=`, `<`, `<=`, `>`, `>=`, `in`,
//! `is`, `like`, `contains`, `containsAll`, `containsAny`, `isEmpty` and the decimal
//! comparisons. Anything else (arithmetic, tags, record literals, other extensions, the
//! extended `has a.b`) leaves the policy to Cedar.
//!
//! Evaluation is exact or refuses: it returns [`Fallback`] whenever Cedar would report an
//! error (a type error, a missing attribute) or where this evaluator does not model a case
//! exactly (equality of sets, records and decimals, attributes of `action`); the caller then
//! runs Cedar on the whole part, which produces the decisions and the error messages.
//!
//! The data seen is the one the Cedar request is built from (see the crate docs, "The Cedar
//! contract"): the entities have no parents, so `in` is equality; the context holds every
//! attribute the contract defines, which is what Cedar sees for the attributes a policy names
//! (a compiled policy cannot look at the context as a whole).

use std::cell::OnceCell;
use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::eval::{NumberForm, decimal_literal, number_form};
use super::fix::NumKind;
use super::{ACTION_TYPE, AGENT_TYPE, CAPABILITY_TYPE};
use crate::policy::{PolicyContext, Stage};

/// A policy's scope and conditions as one boolean expression.
#[derive(Clone, Debug)]
pub(crate) struct FastPolicy {
    condition: Expr,
}

impl FastPolicy {
    /// Compiles a policy from its JSON (EST) form; `None` when it is outside the subset.
    pub(crate) fn compile(est: &Value) -> Option<FastPolicy> {
        let obj = est.as_object()?;
        let known = |k: &String| {
            matches!(
                k.as_str(),
                "effect" | "annotations" | "principal" | "action" | "resource" | "conditions"
            )
        };
        if !obj.keys().all(known) {
            return None;
        }
        let mut parts: Vec<Expr> = Vec::new();
        if let Some(e) = scope(obj.get("principal")?, Var::Principal)? {
            parts.push(e);
        }
        if let Some(e) = action_scope(obj.get("action")?)? {
            parts.push(e);
        }
        if let Some(e) = scope(obj.get("resource")?, Var::Resource)? {
            parts.push(e);
        }
        for c in obj
            .get("conditions")
            .map_or(Some(&[][..]), |c| c.as_array().map(Vec::as_slice))?
        {
            let body = expr(c.get("body")?)?;
            match c.get("kind")?.as_str()? {
                "when" => parts.push(body),
                "unless" => parts.push(Expr::Not(Box::new(body))),
                _ => return None,
            }
        }
        // `a && b && c` as Cedar builds it: right-nested, evaluated left to right.
        let condition = parts
            .into_iter()
            .rev()
            .reduce(|right, left| Expr::And(Box::new(left), Box::new(right)))
            .unwrap_or(Expr::Lit(Lit::Bool(true)));
        Some(FastPolicy { condition })
    }

    /// Whether the policy is satisfied, or [`Fallback`] (see the module docs).
    pub(crate) fn satisfied(&self, data: &Data<'_>) -> Result<bool, Fallback> {
        as_bool(eval(&self.condition, data)?)
    }
}

/// Cedar must decide: an error, or a case this evaluator does not model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fallback;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Var {
    Principal,
    Action,
    Resource,
    Context,
}

#[derive(Clone, Debug, PartialEq)]
enum Lit {
    Bool(bool),
    Long(i64),
    Str(String),
    Entity(String, String),
    Decimal(i64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    fn apply(self, a: i64, b: i64) -> bool {
        match self {
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
        }
    }
}

#[derive(Clone, Debug)]
enum Expr {
    Lit(Lit),
    Var(Var),
    Attr(Box<Expr>, String),
    Has(Box<Expr>, String),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    If(Box<Expr>, Box<Expr>, Box<Expr>),
    Eq(Box<Expr>, Box<Expr>),
    /// Long comparison (`<`, `<=`, `>`, `>=`).
    Cmp(Cmp, Box<Expr>, Box<Expr>),
    /// Decimal comparison (`lessThan`, ...).
    DecimalCmp(Cmp, Box<Expr>, Box<Expr>),
    In(Box<Expr>, Box<Expr>),
    Is(Box<Expr>, String),
    Like(Box<Expr>, Vec<Pattern>),
    Contains(Box<Expr>, Box<Expr>),
    ContainsAll(Box<Expr>, Box<Expr>),
    ContainsAny(Box<Expr>, Box<Expr>),
    IsEmpty(Box<Expr>),
    Set(Vec<Expr>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Pattern {
    Wildcard,
    Literal(String),
}

fn entity_lit(v: &Value) -> Option<Lit> {
    let o = v.as_object()?;
    if o.len() != 2 {
        return None;
    }
    Some(Lit::Entity(
        o.get("type")?.as_str()?.to_string(),
        o.get("id")?.as_str()?.to_string(),
    ))
}

/// A principal or resource scope constraint (`None` inside: no constraint).
fn scope(v: &Value, var: Var) -> Option<Option<Expr>> {
    let o = v.as_object()?;
    let this = || Box::new(Expr::Var(var));
    let entity = |o: &Map<String, Value>| -> Option<Box<Expr>> {
        Some(Box::new(Expr::Lit(entity_lit(o.get("entity")?)?)))
    };
    Some(match o.get("op")?.as_str()? {
        "All" | "all" if o.len() == 1 => None,
        "==" if o.len() == 2 => Some(Expr::Eq(this(), entity(o)?)),
        "in" if o.len() == 2 => Some(Expr::In(this(), entity(o)?)),
        "is" => {
            let is = Expr::Is(this(), o.get("entity_type")?.as_str()?.to_string());
            match o.get("in") {
                None if o.len() == 2 => Some(is),
                Some(inner) if o.len() == 3 => Some(Expr::And(
                    Box::new(is),
                    Box::new(Expr::In(this(), entity(inner.as_object()?)?)),
                )),
                _ => return None,
            }
        }
        _ => return None,
    })
}

fn action_scope(v: &Value) -> Option<Option<Expr>> {
    let o = v.as_object()?;
    let this = || Box::new(Expr::Var(Var::Action));
    Some(match o.get("op")?.as_str()? {
        "All" | "all" if o.len() == 1 => None,
        "==" if o.len() == 2 => Some(Expr::Eq(
            this(),
            Box::new(Expr::Lit(entity_lit(o.get("entity")?)?)),
        )),
        "in" if o.len() == 2 => {
            if let Some(e) = o.get("entity") {
                Some(Expr::In(this(), Box::new(Expr::Lit(entity_lit(e)?))))
            } else {
                let set = o
                    .get("entities")?
                    .as_array()?
                    .iter()
                    .map(|e| entity_lit(e).map(Expr::Lit))
                    .collect::<Option<Vec<_>>>()?;
                Some(Expr::In(this(), Box::new(Expr::Set(set))))
            }
        }
        _ => return None,
    })
}

fn literal(v: &Value) -> Option<Expr> {
    Some(match v {
        Value::Bool(b) => Expr::Lit(Lit::Bool(*b)),
        Value::Number(n) => Expr::Lit(Lit::Long(n.as_i64()?)),
        Value::String(s) => Expr::Lit(Lit::Str(s.clone())),
        Value::Array(items) => Expr::Set(items.iter().map(literal).collect::<Option<_>>()?),
        Value::Object(o) if o.len() == 1 && o.contains_key("__entity") => {
            Expr::Lit(entity_lit(o.get("__entity")?)?)
        }
        _ => return None,
    })
}

fn boxed(v: &Value) -> Option<Box<Expr>> {
    expr(v).map(Box::new)
}

/// `{"left": .., "right": ..}`.
fn binary(v: &Value) -> Option<(Box<Expr>, Box<Expr>)> {
    let o = v.as_object()?;
    if o.len() != 2 {
        return None;
    }
    Some((boxed(o.get("left")?)?, boxed(o.get("right")?)?))
}

/// `{"left": .., "attr": "name"}`.
fn left_attr(v: &Value) -> Option<(Box<Expr>, String)> {
    let o = v.as_object()?;
    if o.len() != 2 {
        return None;
    }
    Some((boxed(o.get("left")?)?, o.get("attr")?.as_str()?.to_string()))
}

/// Arguments of an extension call (`{"name": [args]}`).
fn args(v: &Value, n: usize) -> Option<Vec<Expr>> {
    let items = v.as_array()?;
    if items.len() != n {
        return None;
    }
    items.iter().map(expr).collect()
}

fn expr(v: &Value) -> Option<Expr> {
    let o = v.as_object()?;
    if o.len() != 1 {
        return None;
    }
    let (key, body) = o.iter().next()?;
    Some(match key.as_str() {
        "Value" => literal(body)?,
        "Var" => Expr::Var(match body.as_str()? {
            "principal" => Var::Principal,
            "action" => Var::Action,
            "resource" => Var::Resource,
            "context" => Var::Context,
            _ => return None,
        }),
        "!" => {
            let b = body.as_object()?;
            if b.len() != 1 {
                return None;
            }
            Expr::Not(boxed(b.get("arg")?)?)
        }
        "==" => {
            let (l, r) = binary(body)?;
            Expr::Eq(l, r)
        }
        "!=" => {
            let (l, r) = binary(body)?;
            Expr::Not(Box::new(Expr::Eq(l, r)))
        }
        "<" | "<=" | ">" | ">=" => {
            let (l, r) = binary(body)?;
            let op = match key.as_str() {
                "<" => Cmp::Lt,
                "<=" => Cmp::Le,
                ">" => Cmp::Gt,
                _ => Cmp::Ge,
            };
            Expr::Cmp(op, l, r)
        }
        "&&" => {
            let (l, r) = binary(body)?;
            Expr::And(l, r)
        }
        "||" => {
            let (l, r) = binary(body)?;
            Expr::Or(l, r)
        }
        "in" => {
            let (l, r) = binary(body)?;
            Expr::In(l, r)
        }
        "contains" => {
            let (l, r) = binary(body)?;
            Expr::Contains(l, r)
        }
        "containsAll" => {
            let (l, r) = binary(body)?;
            Expr::ContainsAll(l, r)
        }
        "containsAny" => {
            let (l, r) = binary(body)?;
            Expr::ContainsAny(l, r)
        }
        "isEmpty" => {
            let b = body.as_object()?;
            if b.len() != 1 {
                return None;
            }
            Expr::IsEmpty(boxed(b.get("arg")?)?)
        }
        "." => {
            let (l, a) = left_attr(body)?;
            Expr::Attr(l, a)
        }
        // Only the simple form; `has a.b` is left to Cedar.
        "has" => {
            let (l, a) = left_attr(body)?;
            Expr::Has(l, a)
        }
        "like" => {
            let b = body.as_object()?;
            if b.len() != 2 {
                return None;
            }
            let pattern = b
                .get("pattern")?
                .as_array()?
                .iter()
                .map(|p| match p {
                    Value::String(s) if s == "Wildcard" => Some(Pattern::Wildcard),
                    Value::Object(o) if o.len() == 1 => {
                        Some(Pattern::Literal(o.get("Literal")?.as_str()?.to_string()))
                    }
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            Expr::Like(boxed(b.get("left")?)?, pattern)
        }
        "is" => {
            let b = body.as_object()?;
            let left = boxed(b.get("left")?)?;
            let ty = b.get("entity_type")?.as_str()?.to_string();
            match b.get("in") {
                None if b.len() == 2 => Expr::Is(left, ty),
                Some(inner) if b.len() == 3 => {
                    let inner = boxed(inner)?;
                    Expr::And(
                        Box::new(Expr::Is(left.clone(), ty)),
                        Box::new(Expr::In(left, inner)),
                    )
                }
                _ => return None,
            }
        }
        "if-then-else" => {
            let b = body.as_object()?;
            if b.len() != 3 {
                return None;
            }
            Expr::If(
                boxed(b.get("if")?)?,
                boxed(b.get("then")?)?,
                boxed(b.get("else")?)?,
            )
        }
        "Set" => Expr::Set(body.as_array()?.iter().map(expr).collect::<Option<_>>()?),
        "decimal" => {
            let [arg] = <[Expr; 1]>::try_from(args(body, 1)?).ok()?;
            match arg {
                Expr::Lit(Lit::Str(s)) => Expr::Lit(Lit::Decimal(parse_decimal(&s)?)),
                _ => return None,
            }
        }
        "lessThan" | "lessThanOrEqual" | "greaterThan" | "greaterThanOrEqual" => {
            let [l, r] = <[Expr; 2]>::try_from(args(body, 2)?).ok()?;
            let op = match key.as_str() {
                "lessThan" => Cmp::Lt,
                "lessThanOrEqual" => Cmp::Le,
                "greaterThan" => Cmp::Gt,
                _ => Cmp::Ge,
            };
            Expr::DecimalCmp(op, Box::new(l), Box::new(r))
        }
        _ => return None,
    })
}

/// Cedar's decimal parsing (`-?digits.digits`, at most 4 decimals, scaled by 10^4), on
/// ASCII digits only (anything else is left to Cedar).
pub(crate) fn parse_decimal(s: &str) -> Option<i64> {
    let (int, frac) = s.split_once('.')?;
    let digits = int.strip_prefix('-').unwrap_or(int);
    if digits.is_empty()
        || frac.is_empty()
        || frac.len() > 4
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let l = int.parse::<i64>().ok()?.checked_mul(10_000)?;
    let r = frac
        .parse::<i64>()
        .ok()?
        .checked_mul(10i64.pow(4 - frac.len() as u32))?;
    if int.starts_with('-') {
        l.checked_sub(r)
    } else {
        l.checked_add(r)
    }
}

/// A Cedar decimal for a double, as the request holds it (see [`super::decimal`]).
fn decimal_of(x: f64) -> Option<i64> {
    parse_decimal(&decimal_literal(x)?)
}

/// A cost as the request holds it ([`super::eval::cost`]): rounded up, or opaque.
fn cost_of(x: f64) -> Val<'static> {
    decimal_of((x * 10_000.0).ceil() / 10_000.0).map_or(Val::Opaque, Val::Decimal)
}

/// The Cedar number type of an attribute path (`context.input.a`,
/// `context["input"]["a"]`, `resource.riskLevel`) in the request at hand; `None` when the
/// text is not such a path, or the attribute is absent or not a number.
pub(crate) fn path_kind(data: &Data<'_>, path: &str) -> Option<NumKind> {
    let expr = parse_path(path)?;
    match eval(&expr, data).ok()? {
        Val::Long(_) => Some(NumKind::Long),
        Val::Decimal(_) => Some(NumKind::Decimal),
        _ => None,
    }
}

/// `root(.name | ["name"])*` with root `principal`, `resource` or `context`.
fn parse_path(text: &str) -> Option<Expr> {
    let s = text.trim();
    let end = s.find(['.', '[']).unwrap_or(s.len());
    let mut e = Expr::Var(match s[..end].trim() {
        "principal" => Var::Principal,
        "resource" => Var::Resource,
        "context" => Var::Context,
        _ => return None,
    });
    let mut rest = s[end..].trim_start();
    while !rest.is_empty() {
        let (name, after) = if let Some(r) = rest.strip_prefix('.') {
            let r = r.trim_start();
            let n = r
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(r.len());
            (&r[..n], &r[n..])
        } else {
            let r = rest.strip_prefix('[')?.trim_start().strip_prefix('"')?;
            let close = r.find('"')?;
            let after = r[close + 1..].trim_start().strip_prefix(']')?;
            (&r[..close], after)
        };
        if name.is_empty() || name.contains('\\') {
            return None;
        }
        e = Expr::Attr(Box::new(e), name.to_string());
        rest = after.trim_start();
    }
    Some(e)
}

/// What one evaluation reads: the policy context, with the capability's effects computed
/// on first use.
pub(crate) struct Data<'a> {
    ctx: &'a PolicyContext,
    effects: OnceCell<Vec<String>>,
}

impl<'a> Data<'a> {
    pub(crate) fn new(ctx: &'a PolicyContext) -> Self {
        Data {
            ctx,
            effects: OnceCell::new(),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Record<'a> {
    Context,
    Empty,
    Labels(&'a BTreeMap<String, String>),
    Json(&'a Map<String, Value>, Option<&'a Value>),
}

#[derive(Clone, Debug)]
enum Val<'a> {
    Bool(bool),
    Long(i64),
    Str(&'a str),
    Decimal(i64),
    /// A number Cedar cannot hold, which the request gives as a string
    /// ([`super::eval::NumberForm::Opaque`]): whatever it meets, Cedar decides.
    Opaque,
    Entity(&'a str, &'a str),
    Set(Vec<Val<'a>>),
    Record(Record<'a>),
}

/// A JSON value as the request holds it (see [`super::to_cedar`]); `None` where the
/// request omits it (`null`).
fn json<'a>(v: &'a Value, schema: Option<&'a Value>) -> Option<Val<'a>> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(b) => Val::Bool(*b),
        Value::String(s) => Val::Str(s),
        Value::Number(n) => match number_form(n, schema) {
            NumberForm::Long(i) => Val::Long(i),
            NumberForm::Decimal(x) => decimal_of(x).map_or(Val::Opaque, Val::Decimal),
            NumberForm::Opaque => Val::Opaque,
        },
        Value::Array(items) => {
            let item_schema = schema.and_then(|s| s.get("items"));
            Val::Set(items.iter().filter_map(|i| json(i, item_schema)).collect())
        }
        Value::Object(m) => Val::Record(Record::Json(m, schema)),
    })
}

fn entity_attr<'a>(data: &'a Data<'a>, var: Var, attr: &str) -> Result<Option<Val<'a>>, Fallback> {
    let action = &data.ctx.action;
    let opt = |s: &'a Option<String>| Val::Str(s.as_deref().unwrap_or(""));
    Ok(match var {
        Var::Principal => match attr {
            "tenant" => Some(opt(&action.tenant_id)),
            "scopes" => Some(Val::Set(
                action.agent_scopes.iter().map(|s| Val::Str(s)).collect(),
            )),
            _ => None,
        },
        Var::Resource => {
            let cap = &action.capability;
            let g = &cap.governance;
            match attr {
                "name" => Some(Val::Str(&cap.name)),
                "kind" => Some(Val::Str(g.kind.as_str())),
                "risk" => Some(Val::Str(g.risk.as_str())),
                "riskLevel" => Some(Val::Long(g.risk as i64)),
                "effects" => Some(Val::Set(
                    data.effects
                        .get_or_init(|| cap.effect_names())
                        .iter()
                        .map(|s| Val::Str(s))
                        .collect(),
                )),
                "scopes" => Some(Val::Set(cap.required_scopes().map(Val::Str).collect())),
                "owner" => Some(opt(&g.owner)),
                "dataNamespace" => Some(opt(&g.data_namespace)),
                "tenant" => Some(opt(&g.tenant)),
                "environment" => Some(Val::Str(g.environment.map_or("", |e| e.as_str()))),
                "method" | "path" | "operationId" | "server" => Some(Val::Str(
                    g.metadata
                        .get(attr)
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or(""),
                )),
                _ => None,
            }
        }
        // The action entity is not in the request's entities: left to Cedar.
        Var::Action | Var::Context => return Err(Fallback),
    })
}

fn record_attr<'a>(data: &'a Data<'a>, rec: Record<'a>, attr: &str) -> Option<Val<'a>> {
    match rec {
        Record::Empty => None,
        Record::Labels(m) => m.get(attr).map(|s| Val::Str(s)),
        Record::Json(m, schema) => {
            let sub = schema
                .and_then(|s| s.get("properties"))
                .and_then(|p| p.get(attr));
            json(m.get(attr)?, sub)
        }
        Record::Context => {
            let ctx = data.ctx;
            let action = &ctx.action;
            let g = &action.capability.governance;
            match attr {
                "input" => Some(
                    json(&action.input, g.input_schema.as_ref())
                        .unwrap_or(Val::Record(Record::Empty)),
                ),
                "output" if ctx.stage != Stage::BeforeCapability => {
                    json(ctx.output.as_ref()?, g.output_schema.as_ref())
                }
                "environment" => Some(Val::Str(action.environment.as_str())),
                "tenant" => Some(Val::Str(action.tenant_id.as_deref().unwrap_or(""))),
                "stage" => Some(Val::Str(ctx.stage.as_str())),
                "labels" => Some(Val::Record(Record::Labels(&action.labels))),
                "costSoFarUsd" => Some(cost_of(action.cost_so_far_usd)),
                "estimatedCostUsd" => action.estimated_cost_usd.map(cost_of),
                _ => None,
            }
        }
    }
}

/// The value of an attribute, `None` when absent.
fn attr<'a>(data: &'a Data<'a>, base: &'a Expr, name: &str) -> Result<Option<Val<'a>>, Fallback> {
    match base {
        // Entity attributes are read from the variable directly.
        Expr::Var(v @ (Var::Principal | Var::Resource | Var::Action)) => {
            entity_attr(data, *v, name)
        }
        _ => match eval(base, data)? {
            Val::Record(r) => Ok(record_attr(data, r, name)),
            // Attributes of entity literals, or of anything else: Cedar decides.
            _ => Err(Fallback),
        },
    }
}

fn as_bool(v: Val<'_>) -> Result<bool, Fallback> {
    match v {
        Val::Bool(b) => Ok(b),
        _ => Err(Fallback),
    }
}

fn as_long(v: Val<'_>) -> Result<i64, Fallback> {
    match v {
        Val::Long(i) => Ok(i),
        _ => Err(Fallback),
    }
}

fn as_decimal(v: Val<'_>) -> Result<i64, Fallback> {
    match v {
        Val::Decimal(d) => Ok(d),
        _ => Err(Fallback),
    }
}

fn as_set(v: Val<'_>) -> Result<Vec<Val<'_>>, Fallback> {
    match v {
        Val::Set(s) => Ok(s),
        _ => Err(Fallback),
    }
}

/// Cedar's `==`: values of different types are unequal; sets, records and decimals are
/// left to Cedar.
fn equal(a: &Val<'_>, b: &Val<'_>) -> Result<bool, Fallback> {
    Ok(match (a, b) {
        (Val::Bool(x), Val::Bool(y)) => x == y,
        (Val::Long(x), Val::Long(y)) => x == y,
        (Val::Str(x), Val::Str(y)) => x == y,
        (Val::Entity(t1, i1), Val::Entity(t2, i2)) => t1 == t2 && i1 == i2,
        (Val::Set(_), Val::Set(_))
        | (Val::Record(_), Val::Record(_))
        | (Val::Decimal(_), Val::Decimal(_))
        | (Val::Opaque, _)
        | (_, Val::Opaque) => return Err(Fallback),
        _ => false,
    })
}

fn contains(set: &[Val<'_>], x: &Val<'_>) -> Result<bool, Fallback> {
    for item in set {
        if equal(item, x)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `a in b` for entities without parents: equality with `b` or with a member of `b`.
fn entity_in(a: Val<'_>, b: Val<'_>) -> Result<bool, Fallback> {
    let Val::Entity(..) = a else {
        return Err(Fallback);
    };
    match b {
        Val::Entity(..) => equal(&a, &b),
        Val::Set(items) => {
            let mut found = false;
            for item in &items {
                if !matches!(item, Val::Entity(..)) {
                    return Err(Fallback);
                }
                found = found || equal(&a, item)?;
            }
            Ok(found)
        }
        _ => Err(Fallback),
    }
}

/// `like`: `*` matches any run of characters (bytes suffice: a literal starts on a
/// character boundary in UTF-8).
fn like(text: &str, pattern: &[Pattern]) -> bool {
    #[derive(Clone, Copy, PartialEq)]
    enum Tok {
        Star,
        Byte(u8),
    }
    let toks: Vec<Tok> = pattern
        .iter()
        .flat_map(|p| match p {
            Pattern::Wildcard => vec![Tok::Star],
            Pattern::Literal(s) => s.bytes().map(Tok::Byte).collect(),
        })
        .collect();
    crate::policy::wildcard_match(
        &toks,
        text.as_bytes(),
        |t| *t == Tok::Star,
        |t, b| *t == Tok::Byte(b),
    )
}

fn eval<'a>(e: &'a Expr, data: &'a Data<'a>) -> Result<Val<'a>, Fallback> {
    Ok(match e {
        Expr::Lit(l) => match l {
            Lit::Bool(b) => Val::Bool(*b),
            Lit::Long(i) => Val::Long(*i),
            Lit::Str(s) => Val::Str(s),
            Lit::Entity(t, id) => Val::Entity(t, id),
            Lit::Decimal(d) => Val::Decimal(*d),
        },
        Expr::Var(v) => {
            let action = &data.ctx.action;
            match v {
                Var::Principal => Val::Entity(AGENT_TYPE, &action.agent_id),
                Var::Resource => Val::Entity(CAPABILITY_TYPE, &action.capability.name),
                Var::Action => Val::Entity(ACTION_TYPE, action.action_type.as_str()),
                Var::Context => Val::Record(Record::Context),
            }
        }
        Expr::Attr(base, name) => attr(data, base, name)?.ok_or(Fallback)?,
        Expr::Has(base, name) => Val::Bool(attr(data, base, name)?.is_some()),
        Expr::Not(a) => Val::Bool(!as_bool(eval(a, data)?)?),
        Expr::And(a, b) => Val::Bool(as_bool(eval(a, data)?)? && as_bool(eval(b, data)?)?),
        Expr::Or(a, b) => Val::Bool(as_bool(eval(a, data)?)? || as_bool(eval(b, data)?)?),
        Expr::If(c, t, f) => {
            if as_bool(eval(c, data)?)? {
                eval(t, data)?
            } else {
                eval(f, data)?
            }
        }
        Expr::Eq(a, b) => Val::Bool(equal(&eval(a, data)?, &eval(b, data)?)?),
        Expr::Cmp(op, a, b) => {
            let x = as_long(eval(a, data)?)?;
            Val::Bool(op.apply(x, as_long(eval(b, data)?)?))
        }
        Expr::DecimalCmp(op, a, b) => {
            let x = as_decimal(eval(a, data)?)?;
            Val::Bool(op.apply(x, as_decimal(eval(b, data)?)?))
        }
        Expr::In(a, b) => Val::Bool(entity_in(eval(a, data)?, eval(b, data)?)?),
        Expr::Is(a, ty) => match eval(a, data)? {
            Val::Entity(t, _) => Val::Bool(t == ty),
            _ => return Err(Fallback),
        },
        Expr::Like(a, pattern) => match eval(a, data)? {
            Val::Str(s) => Val::Bool(like(s, pattern)),
            _ => return Err(Fallback),
        },
        Expr::Contains(a, b) => {
            let set = as_set(eval(a, data)?)?;
            Val::Bool(contains(&set, &eval(b, data)?)?)
        }
        Expr::ContainsAll(a, b) => {
            let set = as_set(eval(a, data)?)?;
            let other = as_set(eval(b, data)?)?;
            let mut all = true;
            for x in &other {
                all = all && contains(&set, x)?;
            }
            Val::Bool(all)
        }
        Expr::ContainsAny(a, b) => {
            let set = as_set(eval(a, data)?)?;
            let other = as_set(eval(b, data)?)?;
            let mut any = false;
            for x in &other {
                any = any || contains(&set, x)?;
            }
            Val::Bool(any)
        }
        Expr::IsEmpty(a) => Val::Bool(as_set(eval(a, data)?)?.is_empty()),
        Expr::Set(items) => Val::Set(
            items
                .iter()
                .map(|i| eval(i, data))
                .collect::<Result<_, _>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_parse_as_cedar_does() {
        assert_eq!(parse_decimal("5.0"), Some(50_000));
        assert_eq!(parse_decimal("-0.5"), Some(-5_000));
        assert_eq!(parse_decimal("1.2345"), Some(12_345));
        assert_eq!(parse_decimal("1.23456"), None);
        assert_eq!(parse_decimal("1"), None);
        assert_eq!(parse_decimal(".5"), None);
        assert_eq!(parse_decimal("1."), None);
        assert_eq!(parse_decimal("+1.0"), None);
        assert_eq!(parse_decimal("922337203685477.5807"), Some(i64::MAX));
        assert_eq!(parse_decimal("922337203685477.5808"), None);
        assert_eq!(parse_decimal("-922337203685477.5808"), Some(i64::MIN));
        assert_eq!(decimal_of(250.0), Some(2_500_000));
    }

    #[test]
    fn like_matches_cedar_patterns() {
        let p = |parts: &[&str]| -> Vec<Pattern> {
            parts
                .iter()
                .map(|s| {
                    if *s == "*" {
                        Pattern::Wildcard
                    } else {
                        Pattern::Literal((*s).to_string())
                    }
                })
                .collect()
        };
        assert!(like("mcp.github.create", &p(&["mcp.", "*"])));
        assert!(!like("tool.mcp.x", &p(&["mcp.", "*"])));
        assert!(like("aéb", &p(&["a", "*", "b"])));
        assert!(like("", &p(&["*"])));
        assert!(!like("", &p(&["a"])));
        assert!(like("abcabc", &p(&["*", "c", "*", "c"])));
        assert!(!like("abcab", &p(&["*", "c", "*", "c"])));
    }
}
