//! The capability registry: register, replace, unregister, get, require, list, and lexical
//! or ranked discovery.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

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

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, Arc<Capability>>,
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
        inner.by_id.insert(id, Arc::clone(&cap));
        Ok(cap)
    }

    /// Registers or replaces (keeping the original position).
    pub fn replace(&self, capability: Capability) -> Arc<Capability> {
        let mut inner = self.write();
        let id = capability.id().to_string();
        let cap = Arc::new(capability);
        if inner.by_id.insert(id.clone(), Arc::clone(&cap)).is_none() {
            inner.order.push(id);
        }
        cap
    }

    /// Removes a capability; returns it when it was registered.
    pub fn unregister(&self, id: &str) -> Option<Arc<Capability>> {
        let mut inner = self.write();
        let removed = inner.by_id.remove(id);
        if removed.is_some() {
            inner.order.retain(|x| x != id);
        }
        removed
    }

    pub fn get(&self, id: &str) -> Option<Arc<Capability>> {
        self.read().by_id.get(id).cloned()
    }

    /// The capability, or `NOT_FOUND` (`Capability not found: <id>`).
    pub fn require(&self, id: &str) -> Result<Arc<Capability>, CapabilityError> {
        self.get(id).ok_or_else(|| {
            CapabilityError::new(ErrorCode::NotFound, format!("Capability not found: {id}"))
        })
    }

    /// All capabilities in registration order.
    pub fn list(&self) -> Vec<Arc<Capability>> {
        let inner = self.read();
        inner
            .order
            .iter()
            .filter_map(|id| inner.by_id.get(id).cloned())
            .collect()
    }

    pub fn len(&self) -> usize {
        self.read().order.len()
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
