//! Calls in flight per principal: every surface's calls go through [`Host::invoke`] and
//! [`Host::resume`], which hold a [`CallSlot`] while the call runs
//! ([`HostConfig::max_calls_per_principal`]). A call over the limit is refused and audited
//! (code `rate_limited`).
//!
//! [`Host::invoke`]: crate::Host::invoke
//! [`Host::resume`]: crate::Host::resume
//! [`HostConfig::max_calls_per_principal`]: crate::HostConfig::max_calls_per_principal

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use capability_policy::Actor;

/// A principal already has its limit of calls in flight.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("too many calls in flight for `{principal}` (limit {limit}); retry later")]
pub struct LimitReached {
    principal: String,
    limit: usize,
}

impl LimitReached {
    /// The principal (its id, else its agent id).
    pub fn principal(&self) -> &str {
        &self.principal
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

/// Calls in flight per principal (its id, else its agent id), at most `limit` each.
#[derive(Debug)]
pub(crate) struct CallLimits {
    limit: Option<usize>,
    in_flight: Mutex<HashMap<String, usize>>,
}

impl CallLimits {
    pub(crate) fn new(limit: Option<usize>) -> Self {
        CallLimits {
            limit: limit.map(|l| l.max(1)),
            in_flight: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for one call of `actor`, or why there is none.
    pub(crate) fn acquire(&self, actor: &Actor) -> Result<CallSlot<'_>, LimitReached> {
        let key = actor
            .principal_id
            .clone()
            .or_else(|| actor.agent_id.clone())
            .unwrap_or_default();
        let mut map = self.lock();
        let n = map.entry(key.clone()).or_insert(0);
        if let Some(limit) = self.limit
            && *n >= limit
        {
            if *n == 0 {
                map.remove(&key);
            }
            return Err(LimitReached {
                principal: key,
                limit,
            });
        }
        *n += 1;
        Ok(CallSlot { limits: self, key })
    }

    /// How many calls are in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.lock().values().sum()
    }
}

/// One call in flight for a principal; released when dropped.
#[derive(Debug)]
pub struct CallSlot<'a> {
    limits: &'a CallLimits,
    key: String,
}

impl Drop for CallSlot<'_> {
    fn drop(&mut self) {
        let mut map = self.limits.lock();
        if let Some(n) = map.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}
