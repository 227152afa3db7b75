pub mod core;
pub mod packages;
pub mod runtime;
