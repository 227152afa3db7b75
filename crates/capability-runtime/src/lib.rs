//! capability-runtime
