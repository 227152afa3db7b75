//! Failed sign-ins and bearer tokens, throttled per address and per login, in the host so
//! that every surface that authenticates (the console, the API, the MCP server and
//! gateway over HTTP) throttles alike ([`Host::authenticate_from`]).
//!
//! The rules, over a window of [`WINDOW`]:
//!
//! * **An address** may fail [`FREE_PER_ADDRESS`] times (logins and bearer tokens alike);
//!   each failure beyond locks it for twice as long as the one before (1 s, 2 s, 4 s, ...,
//!   at most [`MAX_LOCK`]) after its last failure.
//! * **A login from an address** may fail [`FREE_PER_PAIR`] times, then locks the same way.
//! * **A login from everywhere**: once it has failed [`LOGIN_ALARM`] times across addresses
//!   (a guess spread over many addresses), an address that fails for it is locked for it
//!   for [`MAX_LOCK`] after each failure.
//!
//! No rule can lock a real user out for long: a lock ends at most [`MAX_LOCK`] after the
//! attacker's last failure *from that address*, and the per-login rule only ever refuses
//! addresses that have already failed for that login, never a clean one. While locked, an
//! attempt is refused before the password or token is checked (it guesses nothing), and
//! does not extend the lock. The counts live in this process's memory.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long failures are remembered.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Failures an address may make before it is locked.
pub const FREE_PER_ADDRESS: u32 = 20;
/// Failures of one login from one address before the pair is locked.
pub const FREE_PER_PAIR: u32 = 5;
/// Failures of one login across addresses after which each address gets one.
pub const LOGIN_ALARM: u32 = 50;
/// The longest lock.
pub const MAX_LOCK: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Failures {
    count: u32,
    first: Instant,
    last: Instant,
}

impl Failures {
    fn new(now: Instant) -> Self {
        Failures {
            count: 0,
            first: now,
            last: now,
        }
    }

    /// When the lock ends, given the free failures, if locked now.
    fn locked_until(&self, free: u32) -> Option<Instant> {
        if self.count < free {
            return None;
        }
        let excess = self.count - free;
        let lock = Duration::from_secs(1u64 << excess.min(6)).min(MAX_LOCK);
        Some(self.last + lock)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Address(IpAddr),
    Pair(String, Option<IpAddr>),
    Login(String),
}

/// The failure counts of a host.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    failures: Mutex<HashMap<Key, Failures>>,
}

/// What is being authenticated, for the throttle.
pub(crate) enum Attempt<'a> {
    Login(&'a str),
    Token,
}

impl Throttle {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Failures>> {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long to wait before this attempt may be made, or `None` if it may be now.
    pub(crate) fn check(&self, attempt: &Attempt<'_>, from: Option<IpAddr>) -> Option<Duration> {
        let now = Instant::now();
        let map = self.lock();
        // Failures older than the window are gone (removed when failures are counted, so
        // that an authentication that succeeds never walks the table).
        let current = |key: &Key| {
            map.get(key)
                .filter(|f| now.duration_since(f.first) < WINDOW)
        };
        let mut until: Option<Instant> = None;
        let mut later = |t: Option<Instant>| {
            if let Some(t) = t.filter(|t| *t > now) {
                until = Some(until.map_or(t, |u| u.max(t)));
            }
        };
        if let Some(a) = from {
            later(current(&Key::Address(a)).and_then(|f| f.locked_until(FREE_PER_ADDRESS)));
        }
        if let Attempt::Login(name) = attempt {
            let alarmed =
                current(&Key::Login(name.to_string())).is_some_and(|f| f.count >= LOGIN_ALARM);
            let pair = current(&Key::Pair(name.to_string(), from));
            later(match pair {
                // Under a spread guess, an address that failed for it waits the longest.
                Some(f) if alarmed => Some(f.last + MAX_LOCK),
                Some(f) => f.locked_until(FREE_PER_PAIR),
                None => None,
            });
        }
        until.map(|t| t.duration_since(now))
    }

    /// Counts a failed attempt.
    pub(crate) fn failed(&self, attempt: &Attempt<'_>, from: Option<IpAddr>) {
        let now = Instant::now();
        let mut map = self.lock();
        map.retain(|_, f| now.duration_since(f.first) < WINDOW);
        let mut bump = |key: Key| {
            let f = map.entry(key).or_insert_with(|| Failures::new(now));
            f.count = f.count.saturating_add(1);
            f.last = now;
        };
        if let Some(a) = from {
            bump(Key::Address(a));
        }
        if let Attempt::Login(name) = attempt {
            bump(Key::Pair(name.to_string(), from));
            bump(Key::Login(name.to_string()));
        }
    }

    /// A login that succeeded clears its pair's failures (not the address's: a success
    /// between failures must not reset a guesser's count).
    pub(crate) fn succeeded(&self, attempt: &Attempt<'_>, from: Option<IpAddr>) {
        if let Attempt::Login(name) = attempt {
            self.lock().remove(&Key::Pair(name.to_string(), from));
        }
    }
}
