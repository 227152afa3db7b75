//! Isolation: the tiers a boundary gives, what a governance `sandbox` decision requires of
//! the boundary, and the host's choice of boundary for package code.

use serde_json::{Map, Value};

/// A value outside a closed vocabulary (an isolation tier here; the policy crate's kinds,
/// risks, stages and decisions too).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{value}`; expected one of: {expected}")]
pub struct UnknownName {
    /// What was being parsed, e.g. `risk level`.
    pub what: &'static str,
    /// The text that was given.
    pub value: String,
    /// The accepted names, comma separated.
    pub expected: String,
}

/// Isolation tiers, from least to most strict (the guest reaches less of the host as the
/// tier grows). A `sandbox` decision sets a floor; the strictest floor wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IsolationTier {
    /// In the host process; only for code the host marks trusted.
    InProcess,
    /// A Linux process sandbox (namespaces, landlock, seccomp, limits).
    Process,
    /// An OCI container through docker or podman.
    Oci,
    /// A WebAssembly guest: no ambient authority at all.
    Wasm,
}

impl IsolationTier {
    /// Every value, from least to most strict.
    pub const ALL: &'static [IsolationTier] = &[
        IsolationTier::InProcess,
        IsolationTier::Process,
        IsolationTier::Oci,
        IsolationTier::Wasm,
    ];

    /// The wire name (`in_process`, `process`, `oci`, `wasm`).
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationTier::InProcess => "in_process",
            IsolationTier::Process => "process",
            IsolationTier::Oci => "oci",
            IsolationTier::Wasm => "wasm",
        }
    }

    /// Parses a wire name.
    pub fn parse(value: &str) -> Result<Self, UnknownName> {
        IsolationTier::ALL
            .iter()
            .copied()
            .find(|t| t.as_str() == value)
            .ok_or_else(|| UnknownName {
                what: "isolation tier",
                value: value.to_string(),
                expected: IsolationTier::ALL
                    .iter()
                    .map(|t| t.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

impl std::fmt::Display for IsolationTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for IsolationTier {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl serde::Serialize for IsolationTier {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for IsolationTier {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Which boundary runs package code: the host's choice (`--executor`). The built-ins always
/// run in process whatever the choice; package code never does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ExecutorChoice {
    /// The strongest boundary available here for the module kind: WASM for `.wasm` modules,
    /// the process sandbox for node, python and native modules, else an OCI engine.
    #[default]
    Auto,
    /// The Linux process sandbox (node, python, native).
    Process,
    /// The WASM executor (`.wasm` modules).
    Wasm,
    /// An OCI engine (docker or podman).
    Oci,
    /// In the host process: trusted host code only; package modules are refused.
    InProcess,
}

impl ExecutorChoice {
    /// Every value.
    pub const ALL: &'static [ExecutorChoice] = &[
        ExecutorChoice::Auto,
        ExecutorChoice::Process,
        ExecutorChoice::Wasm,
        ExecutorChoice::Oci,
        ExecutorChoice::InProcess,
    ];

    /// The name (`auto`, `process`, `wasm`, `oci`, `in-process`).
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutorChoice::Auto => "auto",
            ExecutorChoice::Process => "process",
            ExecutorChoice::Wasm => "wasm",
            ExecutorChoice::Oci => "oci",
            ExecutorChoice::InProcess => "in-process",
        }
    }

    /// Parses a name.
    pub fn parse(value: &str) -> Result<Self, UnknownName> {
        ExecutorChoice::ALL
            .iter()
            .copied()
            .find(|c| c.as_str() == value)
            .ok_or_else(|| UnknownName {
                what: "executor",
                value: value.to_string(),
                expected: ExecutorChoice::ALL
                    .iter()
                    .map(|c| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

impl std::fmt::Display for ExecutorChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ExecutorChoice {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// What a `sandbox` decision requires of the execution boundary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxRequirement {
    /// The least strict tier that is acceptable.
    pub min_tier: Option<IsolationTier>,
    /// Run without network access, whatever effects were granted.
    pub deny_network: bool,
    /// Wall-clock limit.
    pub timeout_ms: Option<u64>,
    /// Memory limit.
    pub memory_mb: Option<u64>,
}

impl SandboxRequirement {
    /// A requirement of at least this tier.
    pub fn tier(tier: IsolationTier) -> Self {
        SandboxRequirement {
            min_tier: Some(tier),
            ..Self::default()
        }
    }

    /// The strictest combination of two requirements: the higher tier, network denied if
    /// either denies it, the smaller limits.
    pub fn merge(&self, other: &SandboxRequirement) -> SandboxRequirement {
        fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, None) => x,
                (None, y) => y,
            }
        }
        SandboxRequirement {
            min_tier: self.min_tier.max(other.min_tier),
            deny_network: self.deny_network || other.deny_network,
            timeout_ms: min_opt(self.timeout_ms, other.timeout_ms),
            memory_mb: min_opt(self.memory_mb, other.memory_mb),
        }
    }

    /// The memory limit in bytes, when one is required.
    pub fn memory_bytes(&self) -> Option<u64> {
        self.memory_mb.map(|mb| mb.saturating_mul(1 << 20))
    }

    /// The JSON form (`{"minTier": "wasm", "denyNetwork": true, ...}`).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        if let Some(t) = self.min_tier {
            m.insert("minTier".into(), t.as_str().into());
        }
        m.insert("denyNetwork".into(), self.deny_network.into());
        if let Some(t) = self.timeout_ms {
            m.insert("timeoutMs".into(), t.into());
        }
        if let Some(mb) = self.memory_mb {
            m.insert("memoryMb".into(), mb.into());
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn tiers_parse_print_and_order() {
        for t in IsolationTier::ALL {
            assert_eq!(IsolationTier::parse(t.as_str()), Ok(*t));
            assert_eq!(t.to_string(), t.as_str());
            let json = serde_json::to_value(t).unwrap();
            assert_eq!(serde_json::from_value::<IsolationTier>(json).unwrap(), *t);
        }
        assert!(IsolationTier::InProcess < IsolationTier::Process);
        assert!(IsolationTier::Oci < IsolationTier::Wasm);
        assert_eq!(
            IsolationTier::parse("vm").unwrap_err().to_string(),
            "unknown isolation tier `vm`; expected one of: in_process, process, oci, wasm"
        );
    }

    #[test]
    fn executor_choices_parse_and_print() {
        for c in ExecutorChoice::ALL {
            assert_eq!(ExecutorChoice::parse(c.as_str()), Ok(*c));
            assert_eq!(c.to_string().parse::<ExecutorChoice>(), Ok(*c));
        }
        assert_eq!(ExecutorChoice::default(), ExecutorChoice::Auto);
        assert_eq!(
            ExecutorChoice::parse("vm").unwrap_err().to_string(),
            "unknown executor `vm`; expected one of: auto, process, wasm, oci, in-process"
        );
    }

    #[test]
    fn requirements_merge_to_the_strictest() {
        let a = SandboxRequirement {
            min_tier: Some(IsolationTier::Process),
            deny_network: false,
            timeout_ms: Some(500),
            memory_mb: None,
        };
        let b = SandboxRequirement {
            min_tier: Some(IsolationTier::Wasm),
            deny_network: true,
            timeout_ms: Some(2000),
            memory_mb: Some(64),
        };
        let m = a.merge(&b);
        assert_eq!(m.min_tier, Some(IsolationTier::Wasm));
        assert!(m.deny_network);
        assert_eq!(m.timeout_ms, Some(500));
        assert_eq!(m.memory_bytes(), Some(64 << 20));
        assert_eq!(
            m.to_json(),
            serde_json::json!({"minTier": "wasm", "denyNetwork": true, "timeoutMs": 500, "memoryMb": 64})
        );
    }
}
