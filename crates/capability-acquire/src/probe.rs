//! Site discovery: the reference's `probeCapabilitySite`.
//!
//! The origin of the site (scheme, host and port; credentials, path and query dropped) with
//! `/.well-known/capabilities`, then `/.well-known/capabilities.json`. A network error, a
//! non-2xx answer or unparseable JSON moves on to the next URL; the first parseable document
//! that is invalid fails (`Invalid capability discovery document at <url>: ...`); none found
//! gives `No Capability discovery document found. Tried: <u1>, <u2>`. Every advertised index
//! is then fetched (in parallel) and validated.

use serde_json::{Value, json};

use crate::AcquireError;
use crate::error::{FetchFault, IndexFault};
use crate::fetch::Fetcher;

/// The two discovery URLs of a site, and its origin.
pub fn discovery_urls(site: &str) -> Result<(String, [String; 2]), AcquireError> {
    let url = url::Url::parse(site).map_err(|error| IndexFault::SiteUrl {
        site: site.to_string(),
        error,
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(IndexFault::SiteNotHttp {
            site: site.to_string(),
        }
        .into());
    }
    let origin = url.origin().ascii_serialization();
    Ok((
        origin.clone(),
        [
            format!("{origin}/.well-known/capabilities"),
            format!("{origin}/.well-known/capabilities.json"),
        ],
    ))
}

/// Probes `site`; with `fetch_indexes`, every advertised index is fetched and validated.
pub fn probe(fetcher: &Fetcher, site: &str, fetch_indexes: bool) -> Result<Value, AcquireError> {
    let (origin, urls) = discovery_urls(site)?;
    let mut found = None;
    for url in &urls {
        let Ok(fetched) = fetcher.document(url) else {
            continue;
        };
        if !(200..300).contains(&fetched.status) {
            continue;
        }
        let Ok(doc) = capability_core::json::parse(&fetched.body) else {
            continue;
        };
        let issues = capability_core::validate::validate_site(&doc);
        if !issues.is_empty() {
            return Err(IndexFault::Discovery {
                url: url.clone(),
                issues,
            }
            .into());
        }
        found = Some((url.clone(), doc));
        break;
    }
    let Some((discovery_url, document)) = found else {
        return Err(IndexFault::NoDiscovery {
            tried: urls.to_vec(),
        }
        .into());
    };
    let mut indexes = Vec::new();
    if fetch_indexes {
        let advertised: Vec<String> = document["indexes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect();
        let results: Vec<Result<Value, AcquireError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = advertised
                .iter()
                .map(|u| scope.spawn(move || crate::federation::fetch_index(fetcher, u)))
                .collect();
            handles
                .into_iter()
                .zip(&advertised)
                .map(|(h, url)| {
                    h.join().unwrap_or_else(|_| {
                        Err(FetchFault::Stopped {
                            url: url.to_string(),
                        }
                        .into())
                    })
                })
                .collect()
        });
        for (url, doc) in advertised.into_iter().zip(results) {
            indexes.push(json!({"url": url, "document": doc?}));
        }
    }
    Ok(json!({
        "origin": origin,
        "discoveryUrl": discovery_url,
        "document": document,
        "indexes": indexes,
    }))
}
