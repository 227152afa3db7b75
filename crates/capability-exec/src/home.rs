//! Where the capability home is: the host keeps its database, journals and key there, and
//! executors must never open it to a guest, so both sides resolve it the same way.
//!
//! Resolution order: an explicit path (`--home`), then `$CAP_HOME`, then
//! `$XDG_DATA_HOME/capability`, then `$HOME/.local/share/capability`, then `./.capability`.

use std::path::{Path, PathBuf};

/// The capability home directory (not created).
pub fn capability_home(explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(p) = env("CAP_HOME") {
        return p;
    }
    if let Some(p) = env("XDG_DATA_HOME") {
        return p.join("capability");
    }
    if let Some(p) = env("HOME") {
        return p.join(".local").join("share").join("capability");
    }
    PathBuf::from(".capability")
}
