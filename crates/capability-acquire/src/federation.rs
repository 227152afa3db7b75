//! Federation: the reference's `fetchCapabilityNetwork`, breadth-first over `federates` links
//! with a depth bound (default 4) and a count bound (default 64), a URL fetched once, each
//! level fetched in parallel and processed in queue order (so the result is deterministic).
//!
//! Errors are the reference's: `Failed to fetch capability index: HTTP <status>`,
//! `Invalid capability index: ...`, `Capability federation exceeded N indexes`,
//! `No capability indexes were loaded`, each naming the URL.

use serde_json::Value;

use crate::AcquireError;
use crate::fetch::Fetcher;

/// The reference's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub max_depth: usize,
    pub max_indexes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            max_depth: 4,
            max_indexes: 64,
        }
    }
}

/// The loaded network: every document as fetched (in fetch order) and their merge.
#[derive(Clone, Debug)]
pub struct Network {
    /// `(url, document)` in fetch order.
    pub documents: Vec<(String, Value)>,
    /// The merged index (the reference's `mergeCapabilityIndexes`).
    pub index: Value,
}

impl Network {
    /// The URLs fetched, in order.
    pub fn sources(&self) -> Vec<String> {
        self.documents.iter().map(|(u, _)| u.clone()).collect()
    }

    /// The canonical digest of the document fetched from `url` (what a lock pins; the merged
    /// index gets a fresh `generatedAt` on every load, so it is not digested).
    pub fn digest_of(&self, url: &str) -> Option<String> {
        self.documents
            .iter()
            .find(|(u, _)| u == url)
            .map(|(_, d)| capability_core::json::canonical_hash(d))
    }
}

/// Fetches and validates one index document.
pub fn fetch_index(fetcher: &Fetcher, url: &str) -> Result<Value, AcquireError> {
    let fetched = fetcher
        .document(url)
        .map_err(|e| AcquireError::Fetch(format!("Failed to fetch capability index: {e}")))?;
    if !(200..300).contains(&fetched.status) {
        return Err(AcquireError::Fetch(format!(
            "Failed to fetch capability index: HTTP {} ({url})",
            fetched.status
        )));
    }
    let doc = capability_core::json::parse(&fetched.body).map_err(|e| {
        AcquireError::Index(format!("Invalid capability index: {url}: not JSON: {e}"))
    })?;
    capability_core::index::assert_valid_index(&doc)
        .map_err(|e| AcquireError::Index(format!("{e} ({url})")))?;
    Ok(doc)
}

/// Loads the network rooted at `roots` (plus `embedded`, documents already in hand such as
/// the built-in index, merged first).
pub fn federate(
    fetcher: &Fetcher,
    roots: &[String],
    embedded: &[Value],
    bounds: Bounds,
) -> Result<Network, AcquireError> {
    let mut seen: Vec<String> = Vec::new();
    let mut documents: Vec<(String, Value)> = Vec::new();
    let mut level: Vec<String> = roots.to_vec();
    let mut depth = 0usize;
    while !level.is_empty() {
        // The URLs of this level, in queue order, once each.
        let mut batch: Vec<String> = Vec::new();
        for url in level.drain(..) {
            if seen.contains(&url) {
                continue;
            }
            if seen.len() >= bounds.max_indexes {
                return Err(AcquireError::Index(format!(
                    "Capability federation exceeded {} indexes",
                    bounds.max_indexes
                )));
            }
            seen.push(url.clone());
            batch.push(url);
        }
        let results: Vec<Result<Value, AcquireError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = batch
                .iter()
                .map(|url| scope.spawn(move || fetch_index(fetcher, url)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(AcquireError::Fetch("an index fetch stopped".into()))
                    })
                })
                .collect()
        });
        let mut next = Vec::new();
        for (url, result) in batch.into_iter().zip(results) {
            let doc = result?;
            if depth < bounds.max_depth {
                let base = url::Url::parse(&url).ok();
                for link in doc["federates"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    let resolved = match &base {
                        Some(b) => b.join(link).map(|u| u.to_string()),
                        None => url::Url::parse(link).map(|u| u.to_string()),
                    };
                    if let Ok(u) = resolved {
                        next.push(u);
                    }
                }
            }
            documents.push((url, doc));
        }
        level = next;
        depth += 1;
    }
    if documents.is_empty() && embedded.is_empty() {
        return Err(AcquireError::Index(
            "No capability indexes were loaded".into(),
        ));
    }
    let all: Vec<Value> = embedded
        .iter()
        .cloned()
        .chain(documents.iter().map(|(_, d)| d.clone()))
        .collect();
    let index = capability_core::index::merge_indexes(&all, &capability_core::js::now_iso())
        .map_err(|e| AcquireError::Index(e.to_string()))?;
    Ok(Network { documents, index })
}

/// The index URLs to load: the `--index` flags, else `CAPABILITY_INDEX` (comma or space
/// separated), else none (the embedded index alone).
pub fn configured_indexes(flags: &[String]) -> Vec<String> {
    if !flags.is_empty() {
        return flags.to_vec();
    }
    std::env::var("CAPABILITY_INDEX")
        .unwrap_or_default()
        .split([',', ' ', '\n'])
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}
