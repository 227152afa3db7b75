//! capability-policy
