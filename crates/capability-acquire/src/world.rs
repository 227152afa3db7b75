//! External software discovery (`cap world`): the reference's `discoverExternalSoftware`
//! over npm search and GitHub repository search, with its query planning and relevance
//! score.
//!
//! * [`plan_queries`]: a natural-language intent becomes at most 8 focused search
//!   expressions (the subject without stop-words and generic terms, its joined and hyphenated
//!   forms, windows of 3 then 2 tokens, the content tokens, the raw query).
//! * [`discover_external`]: one npm search per planned query (`<registry>-/v1/search?text=
//!   <q>&size=<n>`), and GitHub searches (`<api>/search/repositories?q=<q>&per_page=<n>`):
//!   the last three queries with a token, else only the last one. GitHub is searched only
//!   when an API base URL is configured. The searches run in parallel; a failed one goes
//!   into `errors` as `{source, message: "[<query>] <reason>"}` and never fails the rest.
//! * Candidates from several queries are merged by `source:locator` (the best relevance,
//!   plus 0.025 per extra hit up to 0.12, signals and adoption hints united) and sorted by
//!   score, then source, then name.
//!
//! Every number is computed in the reference's order of operations, so scores are the
//! same `f64`s the TypeScript runtime gives.

use serde_json::{Map, Value, json};

use capability_core::js::locale_compare;

use crate::error::{FetchError, FetchFault};
use crate::fetch::Fetcher;

/// Words dropped from an intent before searching.
const STOPWORDS: &[&str] = &[
    "a",
    "an",
    "the",
    "to",
    "of",
    "for",
    "in",
    "on",
    "at",
    "by",
    "with",
    "and",
    "or",
    "from",
    "into",
    "this",
    "that",
    "my",
    "your",
    "its",
    "please",
    "use",
    "using",
    "find",
    "need",
    "needs",
    "ability",
    "abilities",
    "tool",
    "tools",
    "something",
    "way",
    "can",
    "could",
    "would",
    "should",
];

/// Words removed from the subject unless nothing would remain.
const GENERIC_TERMS: &[&str] = &[
    "convert",
    "transform",
    "parse",
    "extract",
    "generate",
    "create",
    "make",
    "build",
    "format",
    "normalize",
    "read",
    "write",
    "load",
    "save",
    "handle",
    "process",
    "text",
    "string",
    "strings",
    "file",
    "files",
    "document",
    "documents",
    "record",
    "records",
    "value",
    "values",
    "input",
    "output",
    "content",
];

/// Package-name words that mark an add-on for another tool (penalised unless the intent
/// names one). `node-red` never matches a single token; it is kept as the reference has it.
const INDIRECT_TERMS: &[&str] = &[
    "plugin",
    "adapter",
    "middleware",
    "loader",
    "contrib",
    "eslint",
    "babel",
    "webpack",
    "gulp",
    "grunt",
    "koa",
    "express",
    "react",
    "vue",
    "angular",
    "node-red",
];

/// The most planned queries.
pub const MAX_QUERIES: usize = 8;

fn words(value: &str) -> impl Iterator<Item = String> + '_ {
    value
        .to_lowercase()
        .split(|c: char| !c.is_ascii_lowercase() && !c.is_ascii_digit())
        .filter(|t| !t.is_empty())
        .map(String::from)
        .collect::<Vec<_>>()
        .into_iter()
}

/// The content tokens of an intent: lowercase ASCII words of two or more characters, without
/// stop-words (repeats kept).
fn content_tokens(value: &str) -> Vec<String> {
    words(value)
        .filter(|t| t.len() > 1 && !STOPWORDS.contains(&t.as_str()))
        .collect()
}

/// The subject: the content tokens without generic terms, unless none would remain.
fn subject_tokens(value: &str) -> Vec<String> {
    let content = content_tokens(value);
    let focused: Vec<String> = content
        .iter()
        .filter(|t| !GENERIC_TERMS.contains(&t.as_str()))
        .cloned()
        .collect();
    if focused.is_empty() { content } else { focused }
}

fn collapse_whitespace(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The reference's `planExternalSearchQueries(query, max)`.
pub fn plan_queries(query: &str, max: usize) -> Vec<String> {
    let raw = collapse_whitespace(query);
    if raw.is_empty() {
        return Vec::new();
    }
    let content = content_tokens(&raw);
    let subject = subject_tokens(&raw);
    let mut variants = vec![subject.join(" ")];
    if subject.len() > 1 {
        variants.push(subject.join(""));
        variants.push(subject.join("-"));
    }
    for size in (2..=subject.len().min(3)).rev() {
        for window in subject.windows(size) {
            variants.push(window.join(" "));
            variants.push(window.join(""));
        }
    }
    if let [only] = subject.as_slice() {
        variants.push(only.clone());
    }
    variants.push(content.join(" "));
    variants.push(raw);
    let mut seen = std::collections::HashSet::new();
    let mut planned = Vec::new();
    for variant in variants {
        let normalized = collapse_whitespace(&variant);
        if capability_core::js::utf16_len(&normalized) < 2
            || !seen.insert(normalized.to_lowercase())
        {
            continue;
        }
        planned.push(normalized);
        if planned.len() >= max.max(1) {
            break;
        }
    }
    planned
}

fn normalized_key(value: &str) -> String {
    value
        .to_lowercase()
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        .collect()
}

/// Where a candidate came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Npm,
    Github,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Npm => "npm",
            Source::Github => "github",
        }
    }
}

/// One adoption hint: how the software could become a capability.
#[derive(Clone, Debug, PartialEq)]
pub struct Adoption {
    pub method: &'static str,
    pub confidence: &'static str,
    pub reason: &'static str,
}

/// An external candidate (`ExternalSoftwareCandidate`).
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub source: Source,
    pub locator: String,
    pub name: String,
    pub version: Option<String>,
    pub description: String,
    pub repository: Option<String>,
    pub homepage: Option<String>,
    pub language: Option<String>,
    pub license: Option<String>,
    /// Stars (GitHub).
    pub popularity: Option<f64>,
    pub source_rank: usize,
    pub score: f64,
    pub signals: Vec<String>,
    pub adoption: Vec<Adoption>,
}

impl Candidate {
    /// The reference's JSON form, its keys in the reference's order.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), json!("external"));
        m.insert("source".into(), json!(self.source.as_str()));
        m.insert("locator".into(), json!(self.locator));
        m.insert("name".into(), json!(self.name));
        let optional = [
            ("version", &self.version),
            ("description", &Some(self.description.clone())),
            ("repository", &self.repository),
            ("homepage", &self.homepage),
            ("language", &self.language),
            ("license", &self.license),
        ];
        for (key, value) in optional {
            if let Some(v) = value {
                m.insert(key.into(), json!(v));
            }
        }
        if let Some(p) = self
            .popularity
            .and_then(capability_core::json::number_from_f64)
        {
            m.insert("popularity".into(), Value::Number(p));
        }
        m.insert("sourceRank".into(), json!(self.source_rank));
        m.insert(
            "score".into(),
            capability_core::json::number_from_f64(self.score)
                .map(Value::Number)
                .unwrap_or(Value::Null),
        );
        m.insert("signals".into(), json!(self.signals));
        m.insert(
            "adoption".into(),
            Value::Array(
                self.adoption
                    .iter()
                    .map(|a| json!({"method": a.method, "confidence": a.confidence, "reason": a.reason}))
                    .collect(),
            ),
        );
        Value::Object(m)
    }
}

/// The reference's relevance of `candidate` to `intent`, found by query `query_index` of
/// `query_count`.
pub fn relevance(
    intent: &str,
    candidate: &Candidate,
    query_index: usize,
    query_count: usize,
) -> f64 {
    let subject = subject_tokens(intent);
    let all = content_tokens(intent);
    let name = candidate.name.to_lowercase();
    let description = candidate.description.to_lowercase();
    let name_key = normalized_key(&candidate.name);
    let subject_key = normalized_key(&subject.join(" "));
    let count = |tokens: &[String], text: &str| {
        tokens.iter().filter(|t| text.contains(t.as_str())).count() as f64
    };
    let fraction = |tokens: &[String], text: &str| {
        if tokens.is_empty() {
            0.0
        } else {
            count(tokens, text) / tokens.len() as f64
        }
    };
    let name_coverage = fraction(&subject, &name);
    let description_coverage = fraction(&subject, &description);
    let intent_coverage = fraction(&all, &description);
    let mut affinity = name_coverage;
    if !subject_key.is_empty() && name_key == subject_key {
        affinity = 1.0;
    } else if !subject_key.is_empty()
        && (name_key.contains(&subject_key) || subject_key.contains(&name_key))
    {
        affinity = affinity.max(0.82);
    }
    let rank = 1.0 / (candidate.source_rank.max(1) as f64);
    let popularity = match candidate.popularity {
        Some(p) if p > 0.0 => ((p + 1.0).log10() / 5.0).min(1.0),
        _ => 0.0,
    };
    let focus = if query_count > 1 {
        1.0 - (query_index as f64 / (query_count - 1) as f64) * 0.08
    } else {
        1.0
    };
    let mentions_indirect = all.iter().any(|t| INDIRECT_TERMS.contains(&t.as_str()));
    let indirect =
        !mentions_indirect && words(&candidate.name).any(|t| INDIRECT_TERMS.contains(&t.as_str()));
    let penalty = if indirect { 0.22 } else { 0.0 };
    let score = (affinity * 0.34
        + description_coverage * 0.24
        + intent_coverage * 0.14
        + rank * 0.20
        + popularity * 0.08)
        * focus
        - penalty;
    score.clamp(0.0, 1.0)
}

/// `encodeURIComponent`.
pub fn encode_uri_component(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(String::from)
        .collect()
}

/// Whether npm keywords or GitHub topics (lowercased) advertise an MCP surface.
fn mentions_mcp(words: &[String]) -> bool {
    words
        .iter()
        .any(|w| w == "mcp" || w.contains("model-context-protocol"))
}

fn text(value: Option<&Value>) -> Option<String> {
    value.and_then(Value::as_str).map(String::from)
}

fn get_json(
    fetcher: &Fetcher,
    url: &str,
    headers: Vec<(String, String)>,
) -> Result<Value, FetchError> {
    let fetched = fetcher.document_with_headers(url, headers)?;
    if !(200..300).contains(&fetched.status) {
        return Err(FetchFault::SearchStatus {
            url: url.to_string(),
            status: fetched.status,
        }
        .into());
    }
    capability_core::json::parse(&fetched.body).map_err(|error| {
        FetchFault::NotJson {
            url: url.to_string(),
            error,
        }
        .into()
    })
}

const MANUAL_ADAPTER_NPM: &str = "Any stable executable surface can be described by a Capability sidecar without rewriting the upstream project.";

/// The reference's `searchNpmSoftware`: `registry` ends with `/`.
pub fn search_npm(
    fetcher: &Fetcher,
    registry: &str,
    query: &str,
    limit: usize,
) -> Result<Vec<Candidate>, FetchError> {
    let url = format!(
        "{registry}-/v1/search?text={}&size={}",
        encode_uri_component(query),
        limit.clamp(1, 50)
    );
    let accept = vec![("accept".to_string(), "application/json".to_string())];
    let payload = get_json(fetcher, &url, accept)?;
    let objects = payload.get("objects").and_then(Value::as_array);
    let mut out = Vec::new();
    for (index, item) in objects.into_iter().flatten().enumerate() {
        let Some(package) = item.get("package").filter(|p| p.is_object()) else {
            continue;
        };
        let Some(name) = text(package.get("name")) else {
            continue;
        };
        let keywords: Vec<String> = strings(package.get("keywords"))
            .into_iter()
            .map(|k| k.to_lowercase())
            .collect();
        let mut adoption = vec![Adoption {
            method: "manual-adapter",
            confidence: "high",
            reason: MANUAL_ADAPTER_NPM,
        }];
        if mentions_mcp(&keywords) {
            adoption.insert(0, Adoption {
                method: "mcp",
                confidence: "medium",
                reason: "npm metadata advertises MCP-related functionality; inspect the server/tool surface before importing.",
            });
        }
        if keywords
            .iter()
            .any(|k| k == "cli" || k == "command-line" || k == "commandline")
        {
            adoption.insert(0, Adoption {
                method: "npm-cli",
                confidence: "low",
                reason: "npm metadata suggests a CLI; inspect exact package metadata to confirm published bin entries.",
            });
        }
        let links = package.get("links");
        let version = text(package.get("version"));
        let mut signals = vec!["npm-search".to_string()];
        signals.extend(keywords.iter().take(8).map(|k| format!("keyword:{k}")));
        out.push(Candidate {
            source: Source::Npm,
            locator: match &version {
                Some(v) => format!("npm:{name}@{v}"),
                None => format!("npm:{name}"),
            },
            name,
            version,
            description: text(package.get("description")).unwrap_or_else(|| "npm package".into()),
            repository: text(links.and_then(|l| l.get("repository")))
                .map(|r| crate::registry::normalize_repository_url(&r)),
            homepage: text(links.and_then(|l| l.get("homepage"))),
            language: None,
            license: None,
            popularity: None,
            source_rank: index + 1,
            score: 1.0 / (index + 1) as f64,
            signals,
            adoption,
        });
    }
    Ok(out)
}

/// GitHub's search API: its base URL (e.g. `https://api.github.com`) and an optional token.
#[derive(Clone, Debug, Default)]
pub struct GithubApi {
    pub base: String,
    pub token: Option<String>,
}

/// The reference's `searchGitHubSoftware`.
pub fn search_github(
    fetcher: &Fetcher,
    api: &GithubApi,
    query: &str,
    limit: usize,
) -> Result<Vec<Candidate>, FetchError> {
    let url = format!(
        "{}/search/repositories?q={}&per_page={}",
        api.base.trim_end_matches('/'),
        encode_uri_component(query),
        limit.clamp(1, 50)
    );
    let mut headers = vec![
        (
            "accept".to_string(),
            "application/vnd.github+json".to_string(),
        ),
        (
            "user-agent".to_string(),
            "capability-external-discovery".to_string(),
        ),
    ];
    if let Some(token) = &api.token {
        headers.push(("authorization".into(), format!("Bearer {token}")));
    }
    let payload = get_json(fetcher, &url, headers)?;
    let items = payload.get("items").and_then(Value::as_array);
    let mut out = Vec::new();
    for (index, item) in items.into_iter().flatten().enumerate() {
        let Some(full_name) = item.get("full_name").and_then(Value::as_str) else {
            continue;
        };
        let topics: Vec<String> = strings(item.get("topics"))
            .into_iter()
            .map(|t| t.to_lowercase())
            .collect();
        let mut adoption = vec![
            Adoption {
                method: "repository-mine",
                confidence: "high",
                reason: "Capability can inspect the exact repository commit for exported/public abilities, evidence, confidence, and inferred authority without executing repository code.",
            },
            Adoption {
                method: "manual-adapter",
                confidence: "high",
                reason: "Repository code can remain upstream; Capability only needs a sidecar around a stable operation or executable surface.",
            },
        ];
        if mentions_mcp(&topics) {
            adoption.insert(0, Adoption {
                method: "mcp",
                confidence: "medium",
                reason: "Repository topics suggest an MCP surface that can be imported as Capability tools.",
            });
        }
        if topics.iter().any(|t| t == "openapi" || t == "swagger") {
            adoption.insert(0, Adoption {
                method: "openapi",
                confidence: "medium",
                reason: "Repository topics suggest an OpenAPI surface that Capability can import without rewriting the service.",
            });
        }
        let stars = item.get("stargazers_count").and_then(Value::as_f64);
        let mut signals = vec!["github-search".to_string()];
        if let Some(n) = item.get("stargazers_count").filter(|v| v.is_number()) {
            signals.push(format!("stars:{}", capability_core::json::js_string_of(n)));
        }
        signals.extend(topics.iter().take(8).map(|t| format!("topic:{t}")));
        if item.get("archived") == Some(&Value::Bool(true)) {
            signals.push("archived".into());
        }
        out.push(Candidate {
            source: Source::Github,
            locator: format!("github:{full_name}"),
            name: full_name.to_string(),
            version: None,
            description: text(item.get("description"))
                .unwrap_or_else(|| "GitHub repository".into()),
            repository: Some(
                text(item.get("html_url"))
                    .unwrap_or_else(|| format!("https://github.com/{full_name}")),
            ),
            homepage: text(item.get("homepage")).filter(|h| !h.is_empty()),
            language: text(item.get("language")),
            license: text(item.pointer("/license/spdx_id")),
            popularity: stars,
            source_rank: index + 1,
            score: 1.0 / (index + 1) as f64,
            signals,
            adoption,
        });
    }
    Ok(out)
}

/// What to search.
#[derive(Clone, Debug)]
pub struct ExternalOptions {
    /// The npm registry (ending with `/`); `None` skips npm.
    pub npm_registry: Option<String>,
    /// GitHub; `None` skips it.
    pub github: Option<GithubApi>,
    /// Results per search (clamped to 1..50).
    pub limit_per_source: usize,
}

/// A search that failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceError {
    /// `npm`, `github` or `capability`.
    pub source: &'static str,
    pub message: String,
}

impl SourceError {
    pub fn to_json(&self) -> Value {
        json!({"source": self.source, "message": self.message})
    }
}

struct Task {
    source: Source,
    query: String,
    query_index: usize,
}

/// The reference's `discoverExternalSoftware`: merged, sorted candidates and the searches
/// that failed. The searches run in parallel, each under the fetcher's deadline.
pub fn discover_external(
    fetcher: &Fetcher,
    query: &str,
    options: &ExternalOptions,
) -> (Vec<Candidate>, Vec<SourceError>) {
    let queries = plan_queries(query, MAX_QUERIES);
    let Some(last) = queries.len().checked_sub(1) else {
        return (Vec::new(), Vec::new());
    };
    let mut tasks = Vec::new();
    if options.npm_registry.is_some() {
        tasks.extend(queries.iter().enumerate().map(|(query_index, q)| Task {
            source: Source::Npm,
            query: q.clone(),
            query_index,
        }));
    }
    if let Some(github) = &options.github {
        // Anonymous search quotas are small: without a token only the last query.
        let first = if github.token.is_some() {
            queries.len().saturating_sub(3)
        } else {
            last
        };
        tasks.extend((first..queries.len()).map(|query_index| Task {
            source: Source::Github,
            query: queries[query_index].clone(),
            query_index,
        }));
    }
    let limit = options.limit_per_source;
    // `None`: the search's thread stopped.
    let outcomes: Vec<Option<Result<Vec<Candidate>, FetchError>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = tasks
            .iter()
            .map(|task| {
                scope.spawn(
                    move || match (task.source, &options.npm_registry, &options.github) {
                        (Source::Npm, Some(registry), _) => {
                            search_npm(fetcher, registry, &task.query, limit)
                        }
                        (Source::Github, _, Some(api)) => {
                            search_github(fetcher, api, &task.query, limit)
                        }
                        _ => Ok(Vec::new()),
                    },
                )
            })
            .collect();
        handles.into_iter().map(|h| h.join().ok()).collect()
    });
    let mut merged: Vec<(Candidate, usize)> = Vec::new();
    let mut errors = Vec::new();
    for (task, outcome) in tasks.iter().zip(outcomes) {
        let found = match outcome {
            Some(Ok(found)) => found,
            failed => {
                let message = match failed {
                    Some(Err(e)) => e.to_string(),
                    _ => "the search failed".to_string(),
                };
                errors.push(SourceError {
                    source: task.source.as_str(),
                    message: format!("[{}] {message}", task.query),
                });
                continue;
            }
        };
        let query_signal = format!("query:{}", task.query);
        for candidate in found {
            let scored = relevance(query, &candidate, task.query_index, queries.len());
            let same = merged
                .iter_mut()
                .find(|(c, _)| c.source == candidate.source && c.locator == candidate.locator);
            match same {
                None => {
                    let mut first = candidate;
                    first.score = scored;
                    push_unique(&mut first.signals, query_signal.clone());
                    dedupe(&mut first.signals);
                    merged.push((first, 1));
                }
                Some((previous, hits)) => {
                    *hits += 1;
                    let bonus = ((*hits - 1) as f64 * 0.025).min(0.12);
                    previous.score = (previous.score.max(scored) + bonus).min(1.0);
                    for s in candidate.signals {
                        push_unique(&mut previous.signals, s);
                    }
                    push_unique(&mut previous.signals, query_signal.clone());
                    for a in candidate.adoption {
                        let key = (a.method, a.reason);
                        match previous
                            .adoption
                            .iter_mut()
                            .find(|p| (p.method, p.reason) == key)
                        {
                            Some(p) => *p = a,
                            None => previous.adoption.push(a),
                        }
                    }
                }
            }
        }
    }
    let mut results: Vec<Candidate> = merged.into_iter().map(|(c, _)| c).collect();
    results.sort_by(|a, b| {
        b.score
            .partial_cmp(&a.score)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| locale_compare(a.source.as_str(), b.source.as_str()))
            .then_with(|| locale_compare(&a.name, &b.name))
    });
    (results, errors)
}

fn push_unique(list: &mut Vec<String>, value: String) {
    if !list.contains(&value) {
        list.push(value);
    }
}

fn dedupe(list: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    list.retain(|s| seen.insert(s.clone()));
}
