//! The capability registry: register, replace, unregister, get, require, list, and lexical
//! or ranked discovery.
//!
//! ## Deferred capabilities
//!
//! A capability may be registered *deferred* ([`CapabilityRegistry::register_deferred`]):
//! by its id and a [`Resolve`] function that builds it, so that a source of thousands of
//! capabilities (an OpenAPI document of 10,000 operations) costs nothing to register. The
//! contract:
//!
//! * The id is taken when it is registered (`DUPLICATE_CAPABILITY` as for
//!   [`CapabilityRegistry::register`]), and it keeps its place in registration order;
//!   [`CapabilityRegistry::len`] and [`CapabilityRegistry::contains`] count it without
//!   building it.
//! * It is built the first time it is looked up by id ([`CapabilityRegistry::get`],
//!   [`CapabilityRegistry::require`]) or listed ([`CapabilityRegistry::list`], and the
//!   discovery that lists), at most once however many threads ask (outside the registry's
//!   lock, so that other lookups never wait for it), and the result is kept: the
//!   capability, or its error, every time after.
//! * A capability that cannot be built, or that is built under another id
//!   (`INVALID_MANIFEST`), is an error of [`CapabilityRegistry::require`] (not `NOT_FOUND`);
//!   [`CapabilityRegistry::get`] gives `None` for it and listing leaves it out.
//! * [`CapabilityRegistry::replace`] puts a built capability in its place;
//!   [`CapabilityRegistry::unregister`] removes it, building it to return it.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use capability_core::discovery::{
    DiscoveryQuery, Searchable, cosine_similarity, discover, passes_filters,
};
use capability_core::{CapabilityError, ErrorCode};

use crate::capability::Capability;

/// A discovery result.
#[derive(Clone, Debug)]
pub struct Discovered {
    pub capability: Arc<Capability>,
    pub score: f64,
    pub reasons: Vec<String>,
}

/// Scores candidates for a query (e.g. by embeddings). Must return one score per candidate.
pub trait Ranker: Send + Sync {
    fn rank(&self, query: &DiscoveryQuery, candidates: &[Arc<Capability>]) -> Vec<f64>;
}

/// Turns text into a vector (a caller-supplied embedding model).
pub trait Embedder: Send + Sync {
    fn embed(&self, text: &str) -> Vec<f64>;
}

/// The reference `EmbeddingRanker`: cosine similarity between the query's embedding and each
/// manifest's (`id name description tags…`, space-joined). Mismatched, empty or zero vectors
/// score 0.
pub struct EmbeddingRanker<E: Embedder> {
    pub embedder: E,
}

impl<E: Embedder> Ranker for EmbeddingRanker<E> {
    fn rank(&self, query: &DiscoveryQuery, candidates: &[Arc<Capability>]) -> Vec<f64> {
        let q = self.embedder.embed(&query.text);
        candidates
            .iter()
            .map(|c| {
                let m = c.manifest();
                let mut text = vec![m.id.as_str(), m.name.as_str(), m.description.as_str()];
                text.extend(m.tags().iter().map(String::as_str));
                cosine_similarity(&q, &self.embedder.embed(&text.join(" ")))
            })
            .collect()
    }
}

/// Builds a capability registered deferred (see the module docs): called at most once per
/// registration, on first lookup.
pub type Resolve = Box<dyn FnOnce() -> Result<Capability, CapabilityError> + Send>;

/// A capability registered deferred: its [`Resolve`] until it is first looked up, then what
/// it built.
struct Deferred {
    id: String,
    resolve: std::sync::Mutex<Option<Resolve>>,
    built: OnceLock<Result<Arc<Capability>, CapabilityError>>,
}

impl Deferred {
    /// The capability, built now when it was not yet (see the module docs).
    fn get(&self) -> Result<Arc<Capability>, CapabilityError> {
        self.built
            .get_or_init(|| {
                let resolve = self
                    .resolve
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                let Some(resolve) = resolve else {
                    return Err(CapabilityError::new(
                        ErrorCode::ExecutionFailed,
                        format!("Capability {} could not be built", self.id),
                    ));
                };
                let capability = resolve()?;
                if capability.id() != self.id {
                    return Err(CapabilityError::new(
                        ErrorCode::InvalidManifest,
                        format!(
                            "Capability {} was registered deferred but built as {}",
                            self.id,
                            capability.id()
                        ),
                    ));
                }
                Ok(Arc::new(capability))
            })
            .clone()
    }
}

/// A registered capability: built, or deferred until it is first looked up.
#[derive(Clone)]
enum Entry {
    Built(Arc<Capability>),
    Deferred(Arc<Deferred>),
}

impl Entry {
    fn get(self) -> Result<Arc<Capability>, CapabilityError> {
        match self {
            Entry::Built(c) => Ok(c),
            Entry::Deferred(d) => d.get(),
        }
    }
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, Entry>,
    order: Vec<String>,
}

/// An in-memory, thread-safe registry keyed by capability id, in registration order.
#[derive(Default)]
pub struct CapabilityRegistry {
    inner: RwLock<Inner>,
}

impl std::fmt::Debug for CapabilityRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapabilityRegistry")
            .field("len", &self.len())
            .finish()
    }
}

impl CapabilityRegistry {
    pub fn new() -> Self {
        CapabilityRegistry::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a capability; `DUPLICATE_CAPABILITY` when the id is taken.
    pub fn register(&self, capability: Capability) -> Result<Arc<Capability>, CapabilityError> {
        let mut inner = self.write();
        let id = capability.id().to_string();
        if inner.by_id.contains_key(&id) {
            return Err(CapabilityError::new(
                ErrorCode::DuplicateCapability,
                format!("Capability already registered: {id}"),
            ));
        }
        let cap = Arc::new(capability);
        inner.order.push(id.clone());
        inner.by_id.insert(id, Entry::Built(Arc::clone(&cap)));
        Ok(cap)
    }

    /// Registers the capability `id` without building it: `resolve` builds it when it is
    /// first looked up or listed (see the module docs); `DUPLICATE_CAPABILITY` when the id is
    /// taken.
    pub fn register_deferred(
        &self,
        id: impl Into<String>,
        resolve: Resolve,
    ) -> Result<(), CapabilityError> {
        let id = id.into();
        let mut inner = self.write();
        if inner.by_id.contains_key(&id) {
            return Err(CapabilityError::new(
                ErrorCode::DuplicateCapability,
                format!("Capability already registered: {id}"),
            ));
        }
        let deferred = Deferred {
            id: id.clone(),
            resolve: std::sync::Mutex::new(Some(resolve)),
            built: OnceLock::new(),
        };
        inner.order.push(id.clone());
        inner.by_id.insert(id, Entry::Deferred(Arc::new(deferred)));
        Ok(())
    }

    /// Registers or replaces (keeping the original position).
    pub fn replace(&self, capability: Capability) -> Arc<Capability> {
        let mut inner = self.write();
        let id = capability.id().to_string();
        let cap = Arc::new(capability);
        if inner
            .by_id
            .insert(id.clone(), Entry::Built(Arc::clone(&cap)))
            .is_none()
        {
            inner.order.push(id);
        }
        cap
    }

    /// Removes a capability; returns it when it was registered (a deferred one is built to
    /// be returned: `None` when it cannot be).
    pub fn unregister(&self, id: &str) -> Option<Arc<Capability>> {
        let removed = {
            let mut inner = self.write();
            let removed = inner.by_id.remove(id);
            if removed.is_some() {
                inner.order.retain(|x| x != id);
            }
            removed
        };
        removed?.get().ok()
    }

    /// Whether the id is registered (a deferred capability is not built).
    pub fn contains(&self, id: &str) -> bool {
        self.read().by_id.contains_key(id)
    }

    /// The capability, built now if it was registered deferred (`None` when it is not
    /// registered or cannot be built).
    pub fn get(&self, id: &str) -> Option<Arc<Capability>> {
        self.lookup(id)?.ok()
    }

    /// The capability, or `NOT_FOUND` (`Capability not found: <id>`), or the error of a
    /// deferred capability that cannot be built.
    pub fn require(&self, id: &str) -> Result<Arc<Capability>, CapabilityError> {
        self.lookup(id).unwrap_or_else(|| {
            Err(CapabilityError::new(
                ErrorCode::NotFound,
                format!("Capability not found: {id}"),
            ))
        })
    }

    /// The entry `id`, built outside the lock.
    fn lookup(&self, id: &str) -> Option<Result<Arc<Capability>, CapabilityError>> {
        let entry = self.read().by_id.get(id).cloned()?;
        Some(entry.get())
    }

    /// All capabilities in registration order (deferred ones built now; those that cannot be
    /// built are left out).
    pub fn list(&self) -> Vec<Arc<Capability>> {
        let entries: Vec<Entry> = {
            let inner = self.read();
            inner
                .order
                .iter()
                .filter_map(|id| inner.by_id.get(id).cloned())
                .collect()
        };
        entries.into_iter().filter_map(|e| e.get().ok()).collect()
    }

    /// The capabilities built so far, in registration order: a deferred one only once it
    /// was built (none is built here). For work that concerns only capabilities that are
    /// never deferred (module capabilities, say), without building every deferred one.
    pub fn built(&self) -> Vec<Arc<Capability>> {
        let inner = self.read();
        inner
            .order
            .iter()
            .filter_map(|id| match inner.by_id.get(id)? {
                Entry::Built(c) => Some(Arc::clone(c)),
                Entry::Deferred(d) => d.built.get()?.as_ref().ok().cloned(),
            })
            .collect()
    }

    /// How many capabilities are registered, deferred ones included (none is built).
    pub fn len(&self) -> usize {
        self.read().order.len()
    }

    /// How many capabilities registered deferred have not been built yet (tried, for one
    /// that cannot be).
    pub fn unbuilt(&self) -> usize {
        self.read()
            .by_id
            .values()
            .filter(|e| matches!(e, Entry::Deferred(d) if d.built.get().is_none()))
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lexical discovery (with the registry's exact-id bonus).
    pub fn discover(&self, query: &DiscoveryQuery) -> Vec<Discovered> {
        discover(self.list(), |c| Searchable::from(c.manifest()), query, true)
            .into_iter()
            .map(|h| Discovered {
                capability: h.item,
                score: f64::from(h.score),
                reasons: h.reasons,
            })
            .collect()
    }

    /// Ranked discovery: every capability passing the filters is scored by the ranker and
    /// sorted by score (stable); reasons are `["ranker"]`. Fails when the ranker returns the
    /// wrong number of scores.
    pub fn discover_with(
        &self,
        query: &DiscoveryQuery,
        ranker: &dyn Ranker,
    ) -> Result<Vec<Discovered>, CapabilityError> {
        let candidates: Vec<Arc<Capability>> = self
            .list()
            .into_iter()
            .filter(|c| passes_filters(&Searchable::from(c.manifest()), query))
            .collect();
        let scores = ranker.rank(query, &candidates);
        if scores.len() != candidates.len() {
            return Err(CapabilityError::new(
                ErrorCode::ExecutionFailed,
                "Ranker must return one score per candidate",
            ));
        }
        let mut hits: Vec<(Arc<Capability>, f64)> = candidates.into_iter().zip(scores).collect();
        capability_core::discovery::sort_by_score(&mut hits);
        Ok(hits
            .into_iter()
            .take(query.limit())
            .map(|(capability, score)| Discovered {
                capability,
                score,
                reasons: vec!["ranker".into()],
            })
            .collect())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::{Value, json};

    use super::*;
    use crate::CapabilityRuntime;

    fn manifest(id: &str) -> Value {
        json!({"specVersion": "0.1", "id": id, "version": "1.0.0", "name": id,
            "description": "A test capability.", "input": {"type": "object"},
            "output": {"type": "object"}, "effects": []})
    }

    fn capability(id: &str) -> Capability {
        Capability::builder(manifest(id))
            .execute_json(|_, _| Ok(json!({})))
            .build()
            .unwrap()
    }

    /// A resolver of `id` that counts its calls in `builds`.
    fn counted(id: &'static str, builds: &Arc<AtomicUsize>) -> Resolve {
        let builds = Arc::clone(builds);
        Box::new(move || {
            builds.fetch_add(1, Ordering::SeqCst);
            Ok(capability(id))
        })
    }

    #[test]
    fn a_deferred_capability_is_built_once_on_first_lookup() {
        let registry = CapabilityRegistry::new();
        let builds = Arc::new(AtomicUsize::new(0));
        registry.register(capability("t/first")).unwrap();
        registry
            .register_deferred("t/lazy", counted("t/lazy", &builds))
            .unwrap();
        registry.register(capability("t/last")).unwrap();
        // Counted, found and refused as a duplicate without being built.
        assert_eq!((registry.len(), registry.unbuilt()), (3, 1));
        assert!(registry.contains("t/lazy"));
        let built: Vec<String> = registry
            .built()
            .iter()
            .map(|c| c.id().to_string())
            .collect();
        assert_eq!(built, ["t/first", "t/last"]);
        assert_eq!(
            registry.unbuilt(),
            1,
            "listing what is built builds nothing"
        );
        let duplicate = registry.register(capability("t/lazy")).unwrap_err();
        assert_eq!(duplicate.code, ErrorCode::DuplicateCapability);
        let duplicate = registry
            .register_deferred("t/first", counted("t/first", &builds))
            .unwrap_err();
        assert_eq!(duplicate.code, ErrorCode::DuplicateCapability);
        assert_eq!(builds.load(Ordering::SeqCst), 0);

        // However many threads ask, it is built once.
        let got: Vec<Arc<Capability>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| registry.require("t/lazy").unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(got.iter().all(|c| Arc::ptr_eq(c, &got[0])));
        assert_eq!(builds.load(Ordering::SeqCst), 1);
        assert_eq!(registry.unbuilt(), 0);
        // In its place in registration order.
        let ids: Vec<String> = registry.list().iter().map(|c| c.id().to_string()).collect();
        assert_eq!(ids, ["t/first", "t/lazy", "t/last"]);
        let built: Vec<String> = registry
            .built()
            .iter()
            .map(|c| c.id().to_string())
            .collect();
        assert_eq!(built, ids);
        assert_eq!(builds.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_deferred_capability_that_cannot_be_built_is_an_error_of_its_lookup() {
        let registry = CapabilityRegistry::new();
        let builds = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&builds);
        registry
            .register_deferred(
                "t/broken",
                Box::new(move || {
                    counter.fetch_add(1, Ordering::SeqCst);
                    Err(CapabilityError::new(
                        ErrorCode::InvalidManifest,
                        "no schema",
                    ))
                }),
            )
            .unwrap();
        registry
            .register_deferred("t/other", counted("t/elsewhere", &builds))
            .unwrap();
        registry.register(capability("t/fine")).unwrap();
        for _ in 0..2 {
            let e = registry.require("t/broken").unwrap_err();
            assert_eq!(
                (e.code, e.message.as_str()),
                (ErrorCode::InvalidManifest, "no schema")
            );
            assert!(registry.get("t/broken").is_none());
        }
        // Built under another id: refused.
        let e = registry.require("t/other").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidManifest);
        assert!(e.message.contains("t/elsewhere"), "{}", e.message);
        assert_eq!(builds.load(Ordering::SeqCst), 2, "each tried once");
        // Listing leaves them out; NOT_FOUND stays for what was never registered.
        let ids: Vec<String> = registry.list().iter().map(|c| c.id().to_string()).collect();
        assert_eq!(ids, ["t/fine"]);
        assert_eq!(
            registry.require("t/none").unwrap_err().code,
            ErrorCode::NotFound
        );
    }

    #[test]
    fn a_deferred_capability_is_replaced_and_unregistered_like_any_other() {
        let registry = CapabilityRegistry::new();
        let builds = Arc::new(AtomicUsize::new(0));
        registry
            .register_deferred("t/a", counted("t/a", &builds))
            .unwrap();
        registry
            .register_deferred("t/b", counted("t/b", &builds))
            .unwrap();
        registry.register(capability("t/c")).unwrap();
        registry.replace(capability("t/a"));
        let ids: Vec<String> = registry.list().iter().map(|c| c.id().to_string()).collect();
        assert_eq!(ids, ["t/a", "t/b", "t/c"]);
        assert_eq!(builds.load(Ordering::SeqCst), 1, "t/a was replaced unbuilt");
        registry
            .register_deferred("t/d", counted("t/d", &builds))
            .unwrap();
        assert_eq!(registry.unregister("t/d").unwrap().id(), "t/d");
        assert!(!registry.contains("t/d") && registry.unregister("t/d").is_none());
        assert_eq!(registry.len(), 3);
    }

    #[test]
    fn a_governed_runtime_governs_a_deferred_capability_when_it_is_built() {
        let governor = Arc::new(capability_policy::Governor::new("agent"));
        let runtime = CapabilityRuntime::builder()
            .governor(Arc::clone(&governor))
            .build();
        let builds = Arc::new(AtomicUsize::new(0));
        runtime
            .register_deferred("t/lazy", counted("t/lazy", &builds))
            .unwrap();
        assert!(!governor.capabilities().exists("t/lazy"));
        runtime.inspect("t/lazy").unwrap();
        assert!(governor.capabilities().exists("t/lazy"));
        // Bad governance metadata is the lookup's INVALID_MANIFEST, as `register` gives.
        let mut bad = manifest("t/bad");
        bad["metadata"] = json!({"governance": {"kind": 7}});
        let eager = runtime
            .register(Capability::builder(bad.clone()).build().unwrap())
            .unwrap_err();
        runtime
            .register_deferred(
                "t/bad2",
                Box::new(move || {
                    bad["id"] = json!("t/bad2");
                    Capability::builder(bad).build()
                }),
            )
            .unwrap();
        let lazy = runtime.inspect("t/bad2").unwrap_err();
        assert_eq!(
            (eager.code, lazy.code),
            (ErrorCode::InvalidManifest, ErrorCode::InvalidManifest)
        );
        assert!(
            lazy.message.starts_with("metadata.governance"),
            "{}",
            lazy.message
        );
    }
}
