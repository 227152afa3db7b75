//! Lexical discovery over inert manifests, as the reference registry, catalog and public
//! index rank them.
//!
//! Query and manifest tokens are the lowercased text split on runs outside `[a-z0-9]`. Each
//! query token scores +6 when it is an id token, +5 a name token, +4 a tag token and +2 a
//! description token (reasons `id:t`, `name:t`, `tag:t`, `description:t`, de-duplicated in
//! first-seen order). The registry (not the index) adds +20 and the reason `exact id` once
//! per query token when the whole lowercased query equals the lowercased id. Tag and effect
//! filters require every listed item. Entries are kept when the query has no tokens or the
//! score is positive, sorted by score (descending) then id (ICU root collation), and cut to
//! `limit` (default 10).

use std::cmp::Ordering;

use serde_json::Value;

use crate::manifest::Manifest;

/// A discovery query (`"text"` or `{text, tags?, effects?, limit?}`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiscoveryQuery {
    pub text: String,
    pub tags: Vec<String>,
    pub effects: Vec<String>,
    pub limit: Option<usize>,
}

impl DiscoveryQuery {
    pub fn text(text: impl Into<String>) -> Self {
        DiscoveryQuery {
            text: text.into(),
            ..Default::default()
        }
    }

    /// Reads a query string or `{text, tags, effects, limit}` object.
    pub fn from_value(v: &Value) -> DiscoveryQuery {
        match v {
            Value::String(s) => DiscoveryQuery::text(s.clone()),
            Value::Object(o) => {
                let strings = |k: &str| {
                    o.get(k)
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(Value::as_str)
                                .map(String::from)
                                .collect()
                        })
                        .unwrap_or_default()
                };
                DiscoveryQuery {
                    text: o
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    tags: strings("tags"),
                    effects: strings("effects"),
                    limit: o.get("limit").and_then(Value::as_u64).map(|n| n as usize),
                }
            }
            _ => DiscoveryQuery::default(),
        }
    }

    /// The result limit (default 10).
    pub fn limit(&self) -> usize {
        self.limit.unwrap_or(10)
    }
}

/// Lowercase and split on runs of characters outside `[a-z0-9]`.
pub fn tokenize(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
        .filter(|t| !t.is_empty())
        .map(String::from)
        .collect()
}

/// The text fields discovery looks at.
#[derive(Clone, Debug, PartialEq)]
pub struct Searchable<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub description: &'a str,
    pub tags: &'a [String],
    pub effects: &'a [String],
}

impl<'a> From<&'a Manifest> for Searchable<'a> {
    fn from(m: &'a Manifest) -> Self {
        Searchable {
            id: &m.id,
            name: &m.name,
            description: &m.description,
            tags: m.tags(),
            effects: m.effects(),
        }
    }
}

/// Whether the entry carries every tag and effect the query lists.
pub fn passes_filters(entry: &Searchable<'_>, query: &DiscoveryQuery) -> bool {
    query.tags.iter().all(|t| entry.tags.contains(t))
        && query.effects.iter().all(|e| entry.effects.contains(e))
}

/// Scores an entry; `exact_id_bonus` is the registry's +20 rule.
pub fn lexical_score(
    entry: &Searchable<'_>,
    query: &DiscoveryQuery,
    exact_id_bonus: bool,
) -> (u32, Vec<String>) {
    let tokens = tokenize(&query.text);
    let id_tokens = tokenize(entry.id);
    let name_tokens = tokenize(entry.name);
    let tag_tokens: Vec<String> = entry.tags.iter().flat_map(|t| tokenize(t)).collect();
    let description_tokens = tokenize(entry.description);
    let exact = exact_id_bonus && entry.id.to_lowercase() == query.text.to_lowercase();
    let mut score = 0;
    let mut reasons: Vec<String> = Vec::new();
    let reason = |r: String, reasons: &mut Vec<String>| {
        if !reasons.contains(&r) {
            reasons.push(r);
        }
    };
    for token in &tokens {
        if exact {
            score += 20;
            reason("exact id".into(), &mut reasons);
        }
        if id_tokens.contains(token) {
            score += 6;
            reason(format!("id:{token}"), &mut reasons);
        }
        if name_tokens.contains(token) {
            score += 5;
            reason(format!("name:{token}"), &mut reasons);
        }
        if tag_tokens.contains(token) {
            score += 4;
            reason(format!("tag:{token}"), &mut reasons);
        }
        if description_tokens.contains(token) {
            score += 2;
            reason(format!("description:{token}"), &mut reasons);
        }
    }
    (score, reasons)
}

/// A scored discovery hit.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit<T> {
    pub item: T,
    pub score: u32,
    pub reasons: Vec<String>,
}

/// Filters, scores, sorts (score descending, then id by ICU root collation, stable) and cuts
/// a set of entries.
pub fn discover<T, F>(
    items: impl IntoIterator<Item = T>,
    searchable: F,
    query: &DiscoveryQuery,
    exact_id_bonus: bool,
) -> Vec<Hit<T>>
where
    F: Fn(&T) -> Searchable<'_>,
{
    let has_tokens = !tokenize(&query.text).is_empty();
    let mut hits: Vec<(Hit<T>, String)> = Vec::new();
    for item in items {
        let entry = searchable(&item);
        if !passes_filters(&entry, query) {
            continue;
        }
        let (score, reasons) = lexical_score(&entry, query, exact_id_bonus);
        if has_tokens && score == 0 {
            continue;
        }
        let id = entry.id.to_string();
        hits.push((
            Hit {
                item,
                score,
                reasons,
            },
            id,
        ));
    }
    hits.sort_by(|(a, aid), (b, bid)| {
        b.score
            .cmp(&a.score)
            .then_with(|| crate::js::locale_compare(aid, bid))
    });
    hits.into_iter()
        .take(query.limit())
        .map(|(h, _)| h)
        .collect()
}

/// Cosine similarity; 0 for mismatched lengths, empty or zero vectors (the reference
/// `EmbeddingRanker`).
pub fn cosine_similarity(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() || a.is_empty() {
        return 0.0;
    }
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

/// Sorts hits by score only, stably (the reference `discoverWith(ranker)`).
pub fn sort_by_score<T>(hits: &mut [(T, f64)]) {
    hits.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap_or(Ordering::Equal));
}
