//! The 12 built-in capabilities.
