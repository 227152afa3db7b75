pub mod core;
pub mod runtime;
