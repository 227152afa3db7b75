pub mod core;
pub mod governance;
pub mod packages;
pub mod runtime;
