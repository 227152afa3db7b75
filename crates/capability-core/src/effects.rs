//! The effect grammar: the 11 built-in effects and `custom:` extensions.

/// The 11 built-in effects, in the reference's order.
pub const BUILTIN_EFFECTS: [&str; 11] = [
    "filesystem.read",
    "filesystem.write",
    "network.connect",
    "process.spawn",
    "environment.read",
    "secrets.read",
    "database.read",
    "database.write",
    "email.send",
    "git.commit",
    "git.push",
];

/// Marks external software whose full effect surface is not known.
pub const EXTERNAL_OPAQUE_EFFECTS: &str = "custom:external.opaque-effects";
/// Marks a prepared provider's candidate whose authority is incomplete.
pub const PROVIDER_OPAQUE_EFFECTS: &str = "custom:provider.opaque-effects";
/// Marks an imported MCP tool whose authority is incomplete.
pub const MCP_OPAQUE_EFFECTS: &str = "custom:mcp.opaque-effects";
/// Marks an imported MCP tool annotated as destructive.
pub const MCP_DESTRUCTIVE: &str = "custom:mcp.destructive";

/// The 8 "mutating or open-world" effects (the permissive preset asks approval for these).
pub const MUTATING_OR_OPEN_WORLD_EFFECTS: [&str; 8] = [
    "filesystem.write",
    "network.connect",
    "process.spawn",
    "secrets.read",
    "database.write",
    "email.send",
    "git.commit",
    "git.push",
];

/// `true` for a built-in effect or `custom:` followed by `[a-z0-9][a-z0-9._/-]*`.
pub fn is_capability_effect(effect: &str) -> bool {
    if BUILTIN_EFFECTS.contains(&effect) {
        return true;
    }
    let Some(rest) = effect.strip_prefix("custom:") else {
        return false;
    };
    let mut bytes = rest.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'0'..=b'9'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'/' | b'-'))
}

/// `true` for effects that change the world (MCP `destructiveHint`): `*.write`,
/// `email.send`, `git.commit`, `git.push` and `process.spawn`.
pub fn is_mutating_effect(effect: &str) -> bool {
    effect.ends_with(".write")
        || matches!(
            effect,
            "email.send" | "git.commit" | "git.push" | "process.spawn"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effect_grammar_matches_the_reference() {
        for ok in [
            "filesystem.read",
            "git.push",
            "custom:a",
            "custom:a/b.c_d-e",
            EXTERNAL_OPAQUE_EFFECTS,
        ] {
            assert!(is_capability_effect(ok), "{ok}");
        }
        for bad in [
            "custom:A",
            "custom:",
            "custom:-a",
            "network",
            "shell",
            "custom:a b",
        ] {
            assert!(!is_capability_effect(bad), "{bad}");
        }
    }
}
