//! Federation: the reference's `fetchCapabilityNetwork`, breadth-first over `federates` links
//! with a depth bound (default 4) and a count bound (default 64), a URL fetched once, each
//! level fetched in parallel (at most [`PARALLEL_FETCHES`] at a time) and processed in queue order (so the result is deterministic).
//!
//! Errors are the reference's: `Failed to fetch capability index: HTTP <status>`,
//! `Invalid capability index: ...`, `Capability federation exceeded N indexes`,
//! `No capability indexes were loaded`, each naming the URL.
//!
//! Every index document fetched is kept in the home's index cache
//! (`<home>/index-cache/<sha256 of the URL>.json`) with the server's `ETag`; the next fetch
//! of that URL asks with `If-None-Match`, and a `304 Not Modified` answer reuses the cached
//! document (checked again) without transferring it. In offline mode only the cache is read
//! and nothing is fetched. The index URLs come from the `--index` flags, else
//! `CAPABILITY_INDEX`, else the home's `indexes.json` (`{"indexes": ["<url>", ...]}`), else
//! none (the embedded index alone).
//!
//! The crawl reports each level and each index loaded to the fetcher's
//! [`Reporter`](crate::progress::Reporter) (see [`crate::progress`]).

use std::path::PathBuf;

use capability_exec::home::Home;

use serde_json::{Value, json};
use sha2::Digest as _;

use crate::AcquireError;
use crate::error::{FetchFault, IndexFault, IoError};
use crate::fetch::{Fetched, Fetcher};
use crate::progress::Event;

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

/// How many index documents of one level are fetched at once.
pub const PARALLEL_FETCHES: usize = 16;

/// The cache of fetched index documents, and whether only it is read (`--offline`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexCache {
    pub dir: PathBuf,
    pub offline: bool,
}

impl IndexCache {
    /// The cache of the home at `root`.
    pub fn in_home(home: &Home, offline: bool) -> IndexCache {
        IndexCache {
            dir: home.index_cache(),
            offline,
        }
    }

    fn path(&self, url: &str) -> PathBuf {
        self.dir
            .join(format!("{}.json", hex::encode(sha2::Sha256::digest(url))))
    }

    /// The cached document of `url` and its entity tag (`None` when nothing usable is
    /// cached).
    pub fn read(&self, url: &str) -> Option<(Value, Option<String>)> {
        let entry = capability_core::json::parse(&std::fs::read(self.path(url)).ok()?).ok()?;
        if entry.get("url").and_then(Value::as_str) != Some(url) {
            return None;
        }
        let etag = entry.get("etag").and_then(Value::as_str).map(String::from);
        Some((entry.get("document")?.clone(), etag))
    }

    /// Keeps the document of `url` with its entity tag (written whole, then renamed into
    /// place).
    pub fn write(
        &self,
        url: &str,
        document: &Value,
        etag: Option<&str>,
    ) -> Result<(), AcquireError> {
        let path = self.path(url);
        let failed = |e: std::io::Error| IoError::file(&path, &e);
        std::fs::create_dir_all(&self.dir).map_err(failed)?;
        let entry = json!({
            "url": url,
            "fetchedAt": capability_core::js::now_iso(),
            "etag": etag,
            "document": document,
        });
        let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4()));
        std::fs::write(&tmp, entry.to_string()).map_err(failed)?;
        std::fs::rename(&tmp, &path).map_err(failed)
    }
}

/// What a failed index fetch says it was fetching (`Failed to fetch capability index: ...`).
const INDEX: &str = "capability index";

/// Fetches (or, offline, reads from the cache) and validates one index document.
pub fn load_index(
    fetcher: &Fetcher,
    url: &str,
    cache: Option<&IndexCache>,
) -> Result<Value, AcquireError> {
    let Some(cache) = cache else {
        return fetch_index(fetcher, url);
    };
    let cached = cache.read(url);
    if cache.offline {
        let (doc, _) = cached.ok_or_else(|| IndexFault::NotCached {
            url: url.to_string(),
            cache: cache.dir.clone(),
        })?;
        return valid_cached(doc, url);
    }
    // Revalidate a cached document that has an entity tag; fetch anything else whole.
    let (cached_doc, etag) = match cached {
        Some((doc, Some(etag))) => (Some(doc), Some(etag)),
        _ => (None, None),
    };
    let fetched = match &etag {
        Some(etag) => fetcher.document_if_none_match(url, etag),
        None => fetcher.document(url),
    }
    .map_err(|e| e.of(INDEX))?;
    if let (304, Some(doc)) = (fetched.status, cached_doc) {
        return valid_cached(doc, url);
    }
    let (doc, etag) = index_from(fetched, url)?;
    // The cache is an optimisation for later offline use: a home that cannot be written
    // (a read-only mount) still gets the fresh document.
    let _ = cache.write(url, &doc, etag.as_deref());
    Ok(doc)
}

/// A cached index document, checked again before it is used.
fn valid_cached(doc: Value, url: &str) -> Result<Value, AcquireError> {
    capability_core::index::assert_valid_index(&doc).map_err(|error| IndexFault::Invalid {
        url: url.to_string(),
        error,
        cached: true,
    })?;
    Ok(doc)
}

/// Fetches and validates one index document.
pub fn fetch_index(fetcher: &Fetcher, url: &str) -> Result<Value, AcquireError> {
    let fetched = fetcher.document(url).map_err(|e| e.of(INDEX))?;
    Ok(index_from(fetched, url)?.0)
}

/// The validated index document of a response, with its entity tag.
fn index_from(fetched: Fetched, url: &str) -> Result<(Value, Option<String>), AcquireError> {
    if !(200..300).contains(&fetched.status) {
        let fault = FetchFault::Status {
            url: url.to_string(),
            status: fetched.status,
        };
        return Err(crate::FetchError::from(fault).of(INDEX).into());
    }
    let doc = capability_core::json::parse(&fetched.body).map_err(|error| IndexFault::NotJson {
        url: url.to_string(),
        error,
    })?;
    capability_core::index::assert_valid_index(&doc).map_err(|error| IndexFault::Invalid {
        url: url.to_string(),
        error,
        cached: false,
    })?;
    Ok((doc, fetched.etag))
}

/// [`load_index`] in a crawl at `depth` where `known` URLs are known, reporting the index
/// loaded to the fetcher's progress (`loaded` counts the indexes of the crawl loaded).
fn load_reported(
    fetcher: &Fetcher,
    url: &str,
    cache: Option<&IndexCache>,
    (depth, known): (usize, usize),
    loaded: &std::sync::atomic::AtomicUsize,
) -> Result<Value, AcquireError> {
    let result = load_index(fetcher, url, cache);
    if result.is_ok() {
        let loaded = loaded.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        fetcher.progress().report(&Event::Index {
            url,
            depth,
            loaded,
            known,
        });
    }
    result
}

/// Loads the network rooted at `roots` (plus `embedded`, documents already in hand such as
/// the built-in index, merged first), through `cache` when there is one.
pub fn federate(
    fetcher: &Fetcher,
    roots: &[String],
    embedded: &[Value],
    bounds: Bounds,
    cache: Option<&IndexCache>,
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
                return Err(IndexFault::TooMany {
                    max: bounds.max_indexes,
                }
                .into());
            }
            seen.push(url.clone());
            batch.push(url);
        }
        let known = seen.len();
        if !batch.is_empty() {
            fetcher.progress().report(&Event::Level {
                depth,
                urls: batch.len(),
                loaded: documents.len(),
                known,
            });
        }
        let loaded = &std::sync::atomic::AtomicUsize::new(documents.len());
        // At most PARALLEL_FETCHES requests at a time.
        let mut results: Vec<Result<Value, AcquireError>> = Vec::with_capacity(batch.len());
        for chunk in batch.chunks(PARALLEL_FETCHES) {
            std::thread::scope(|scope| {
                let handles: Vec<_> = chunk
                    .iter()
                    .map(|url| {
                        scope.spawn(move || {
                            load_reported(fetcher, url, cache, (depth, known), loaded)
                        })
                    })
                    .collect();
                results.extend(handles.into_iter().zip(chunk).map(|(h, url)| {
                    h.join().unwrap_or_else(|_| {
                        Err(FetchFault::Stopped {
                            url: url.to_string(),
                        }
                        .into())
                    })
                }));
            });
        }
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
        return Err(IndexFault::NoneLoaded.into());
    }
    let all: Vec<Value> = embedded
        .iter()
        .cloned()
        .chain(documents.iter().map(|(_, d)| d.clone()))
        .collect();
    let index = capability_core::index::merge_indexes(&all, &capability_core::js::now_iso())
        .map_err(IndexFault::Merge)?;
    Ok(Network { documents, index })
}

/// The index URLs to load: the `--index` flags, else `CAPABILITY_INDEX` (comma or space
/// separated), else the `indexes` of `<home>/indexes.json`, else none (the embedded index
/// alone). A home file that cannot be read as `{"indexes": ["<url>", ...]}` is an error.
pub fn configured_indexes(
    flags: &[String],
    home: Option<&Home>,
) -> Result<Vec<String>, AcquireError> {
    if !flags.is_empty() {
        return Ok(flags.to_vec());
    }
    let from_env: Vec<String> = std::env::var("CAPABILITY_INDEX")
        .unwrap_or_default()
        .split([',', ' ', '\n'])
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    if !from_env.is_empty() {
        return Ok(from_env);
    }
    let Some(path) = home.map(Home::indexes) else {
        return Ok(Vec::new());
    };
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(IoError::file(&path, &e)),
    };
    let bad = || AcquireError::from(IndexFault::List { path: path.clone() });
    let doc = capability_core::json::parse(&bytes).map_err(|_| bad())?;
    doc.get("indexes")
        .and_then(Value::as_array)
        .ok_or_else(bad)?
        .iter()
        .map(|u| {
            u.as_str()
                .filter(|s| !s.is_empty())
                .map(String::from)
                .ok_or_else(bad)
        })
        .collect()
}
