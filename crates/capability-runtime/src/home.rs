//! The capability home: where the receipt database, journals, approvals, audit log and host
//! key live (resolved by [`capability_exec::home`], which the sandbox shares so that it never
//! mounts the home into a guest).

pub use capability_exec::home::capability_home;
