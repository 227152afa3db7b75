pub mod core;
pub mod governance;
pub mod host;
pub mod mcp;
pub mod openapi;
pub mod packages;
pub mod runtime;
pub mod serve;
