//! `cap world <query>`: the reference's `discoverSoftwareWorld`: capabilities of the
//! configured indexes (else the embedded index), and external software from npm search and,
//! when an API base URL is configured, GitHub repository search.

use std::time::Duration;

use capability_core::discovery::DiscoveryQuery;
use capability_host::acquire::world::{ExternalOptions, GithubApi, SourceError, discover_external};
use capability_host::acquire::{FetchConfig, Fetcher};
use clap::Args;
use serde_json::{Value, json};

use crate::commands::acquire::IndexOptions;
use crate::commands::host::HomeArg;
use crate::output::print_json;

#[derive(Args, Debug)]
pub struct WorldArgs {
    /// What to look for, in words.
    pub query: String,
    /// The most results of each part (capabilities, external software).
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    /// Skip npm search.
    #[arg(long)]
    pub no_npm: bool,
    /// Skip GitHub search.
    #[arg(long)]
    pub no_github: bool,
    /// The npm registry searched (default $CAP_NPM_REGISTRY, the npmrc `registry=` line, npm's).
    #[arg(long)]
    pub registry: Option<String>,
    /// GitHub's API base URL (default $CAP_GITHUB_API); GitHub is not searched without one.
    /// A token in $GITHUB_TOKEN is sent as a bearer token and widens the search to three
    /// queries.
    #[arg(long)]
    pub github_api: Option<String>,
    /// The deadline of each npm or GitHub search, in milliseconds (they run in parallel).
    #[arg(long, default_value_t = 10_000)]
    pub search_timeout_ms: u64,
    /// Index sources and bounds of the capability part.
    #[command(flatten)]
    pub index: IndexOptions,
    #[command(flatten)]
    pub home: HomeArg,
}

/// The capability part: discovery over the configured network, else the embedded index.
fn native(args: &WorldArgs) -> Result<Vec<Value>, String> {
    let embedded = capability_host::defaults::default_index();
    let network = if capability_host::acquire::federation::configured_indexes(
        &args.index.indexes,
        Some(&capability_host::Home::at(&capability_host::home::resolve(
            args.home.home.as_deref(),
        ))),
    )
    .map_err(|e| e.to_string())?
    .is_empty()
    {
        args.index
            .network(&args.home, std::slice::from_ref(&embedded))?
    } else {
        args.index.network(&args.home, &[])?
    };
    let entries = network
        .map(|n| capability_core::index::index_entries(&n.index))
        .unwrap_or_default();
    let query = DiscoveryQuery {
        text: args.query.clone(),
        limit: Some(args.limit),
        ..Default::default()
    };
    Ok(capability_core::index::discover_index(&entries, &query)
        .into_iter()
        .map(|h| {
            let m = &h.item.manifest;
            json!({
                "kind": "capability", "id": m.id, "version": m.version, "name": m.name,
                "description": m.description, "effects": m.effects(),
                "package": h.item.package_ref(), "score": h.score, "reasons": h.reasons,
            })
        })
        .collect())
}

/// Prints `{query, native, external, errors}`; a part that fails is an entry of `errors`,
/// and the exit status is 0 even when every part failed (as the reference).
pub fn world(args: WorldArgs) -> Result<i32, String> {
    let mut errors = Vec::new();
    let native = native(&args).unwrap_or_else(|message| {
        errors.push(SourceError {
            source: "capability",
            message,
        });
        Vec::new()
    });
    let (progress, shown) = crate::progress::terminal();
    let fetcher = Fetcher::new(FetchConfig {
        timeout: Duration::from_millis(args.search_timeout_ms),
        ..FetchConfig::default()
    })
    .map_err(|e| e.to_string())?
    .with_progress(progress);
    let github_base = args
        .github_api
        .clone()
        .or_else(|| std::env::var("CAP_GITHUB_API").ok())
        .filter(|s| !s.is_empty());
    let options = ExternalOptions {
        npm_registry: (!args.no_npm)
            .then(|| capability_host::acquire::registry::registry_url(args.registry.as_deref())),
        github: github_base
            .filter(|_| !args.no_github)
            .map(|base| GithubApi {
                base,
                token: std::env::var("GITHUB_TOKEN").ok().filter(|t| !t.is_empty()),
            }),
        limit_per_source: 10,
    };
    let (external, external_errors) = discover_external(&fetcher, &args.query, &options);
    drop(shown);
    errors.extend(external_errors);
    let external: Vec<Value> = external
        .iter()
        .take(args.limit)
        .map(|c| c.to_json())
        .collect();
    print_json(&json!({
        "query": args.query,
        "native": native,
        "external": external,
        "errors": errors.iter().map(SourceError::to_json).collect::<Vec<_>>(),
    }))?;
    Ok(0)
}
