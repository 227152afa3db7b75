//! The capability registry: governed capabilities by name, in insertion order.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::model::{CapabilityKind, Environment, GovernedCapability};

/// A capability name that is not registered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("capability `{name}` is not registered")]
pub struct CapabilityNotFound {
    /// The name asked for.
    pub name: String,
}

/// Filters for [`CapabilityRegistry::list`]; `None` means "do not filter", and filters are
/// AND-ed (Brane's semantics).
#[derive(Clone, Debug, Default)]
pub struct CapabilityFilter {
    pub kind: Option<CapabilityKind>,
    pub tenant: Option<String>,
    pub environment: Option<Environment>,
}

#[derive(Default)]
struct Inner {
    order: Vec<String>,
    by_name: HashMap<String, Arc<GovernedCapability>>,
}

/// Thread-safe, insertion-ordered registry of governed capabilities. Registering a name that
/// exists replaces it in place (Brane's semantics); lookups are by name at call time.
#[derive(Default)]
pub struct CapabilityRegistry {
    inner: RwLock<Inner>,
}

impl std::fmt::Debug for CapabilityRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapabilityRegistry")
            .field("names", &self.names())
            .finish()
    }
}

impl CapabilityRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry holding the given capabilities, in order.
    pub fn with_capabilities(caps: impl IntoIterator<Item = GovernedCapability>) -> Self {
        let r = Self::new();
        for c in caps {
            r.register(c);
        }
        r
    }

    /// Registers (or replaces) a capability and returns it.
    pub fn register(&self, cap: GovernedCapability) -> Arc<GovernedCapability> {
        let cap = Arc::new(cap);
        let mut inner = match self.inner.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if inner
            .by_name
            .insert(cap.name.clone(), Arc::clone(&cap))
            .is_none()
        {
            inner.order.push(cap.name.clone());
        }
        cap
    }

    /// The capability with that name.
    pub fn get(&self, name: &str) -> Option<Arc<GovernedCapability>> {
        self.read(|i| i.by_name.get(name).cloned())
    }

    /// Whether the name is registered.
    pub fn exists(&self, name: &str) -> bool {
        self.read(|i| i.by_name.contains_key(name))
    }

    /// The capability with that name, or [`CapabilityNotFound`].
    pub fn require(&self, name: &str) -> Result<Arc<GovernedCapability>, CapabilityNotFound> {
        self.get(name).ok_or_else(|| CapabilityNotFound {
            name: name.to_string(),
        })
    }

    /// Capabilities matching every given filter, in insertion order.
    pub fn list(&self, filter: &CapabilityFilter) -> Vec<Arc<GovernedCapability>> {
        self.read(|i| {
            i.order
                .iter()
                .filter_map(|n| i.by_name.get(n))
                .filter(|c| filter.kind.is_none_or(|k| c.governance.kind == k))
                .filter(|c| {
                    filter
                        .tenant
                        .as_ref()
                        .is_none_or(|t| c.governance.tenant.as_ref() == Some(t))
                })
                .filter(|c| {
                    filter
                        .environment
                        .is_none_or(|e| c.governance.environment == Some(e))
                })
                .cloned()
                .collect()
        })
    }

    /// Every capability, in insertion order.
    pub fn all(&self) -> Vec<Arc<GovernedCapability>> {
        self.list(&CapabilityFilter::default())
    }

    /// The registered names, in insertion order.
    pub fn names(&self) -> Vec<String> {
        self.read(|i| i.order.clone())
    }

    /// Removes and returns the capability with that name.
    pub fn unregister(&self, name: &str) -> Option<Arc<GovernedCapability>> {
        let mut inner = match self.inner.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let removed = inner.by_name.remove(name)?;
        inner.order.retain(|n| n != name);
        Some(removed)
    }

    fn read<T>(&self, f: impl FnOnce(&Inner) -> T) -> T {
        match self.inner.read() {
            Ok(g) => f(&g),
            Err(p) => f(&p.into_inner()),
        }
    }
}
