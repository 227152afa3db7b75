//! capability-sandbox
