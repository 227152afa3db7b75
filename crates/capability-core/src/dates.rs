//! `Date.parse` as the reference engine (V8) accepts it.
