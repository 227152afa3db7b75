//! Linux mechanics: raw syscalls, landlock, seccomp, process creation, host facts.

pub(crate) mod cleanup;
pub(crate) mod host;
pub(crate) mod landlock;
pub(crate) mod seccomp;
pub(crate) mod spawn;
pub(crate) mod sys;
