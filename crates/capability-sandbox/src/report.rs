//! What a run's boundary was, for receipts.

use capability_exec::IsolationTier;
use serde::Serialize;

/// The isolation boundary of one run and the limits that were actually applied. Serializable
/// so the runtime can put it in the receipt (`provenance` / metadata).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BoundaryReport {
    /// `"process-sandbox"` or `"oci"`.
    pub kind: &'static str,
    /// `"node"`, `"python"` or `"native"`.
    pub runner: &'static str,
    /// The interpreter or executable that ran (host path), and its version when known.
    pub program: String,
    /// Namespaces the guest lives in (`user`, `mount`, `pid`, `ipc`, `uts`, `cgroup`, `net`).
    pub namespaces: Vec<&'static str>,
    /// `"abi-N"` or `"unavailable"`.
    pub landlock: String,
    /// Whether the seccomp filter was installed.
    pub seccomp: bool,
    /// `"none"` (own empty network namespace) or `"host"` (network.connect granted).
    pub network: &'static str,
    /// Whether child processes may be created (process.spawn granted).
    pub process_spawn: bool,
    /// Host paths opened read-only, besides the package and the system directories.
    pub read_paths: Vec<String>,
    /// Host paths opened read-write.
    pub write_paths: Vec<String>,
    /// Names of the environment variables passed (values are not recorded).
    pub environment: Vec<String>,
    /// Names of the secrets injected (values are not recorded).
    pub secrets: Vec<String>,
    /// The run's own cgroup: `"v2"`, `"v1-pids+memory"`, `"v1-pids"`, `"v1-memory"`, or
    /// `"unavailable"` (the notes say why).
    pub cgroup: String,
    /// Every limit and how it was (or was not) enforced.
    pub limits: Vec<AppliedLimit>,
    /// Degradations and other facts a reviewer should know.
    pub notes: Vec<String>,
}

impl BoundaryReport {
    /// The applied limit named `name`.
    pub fn limit(&self, name: &str) -> Option<&AppliedLimit> {
        self.limits.iter().find(|l| l.name == name)
    }
}

impl capability_exec::BoundaryReport for BoundaryReport {
    fn boundary(&self) -> &str {
        self.kind
    }

    fn tier(&self) -> IsolationTier {
        if self.kind == "oci" {
            IsolationTier::Oci
        } else {
            IsolationTier::Process
        }
    }

    fn to_isolation(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// One limit: its value, the mechanism that enforces it, and whether it is enforced at all.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedLimit {
    /// `wallTimeoutMs`, `cpuTimeMs`, `memoryBytes`, `maxPids`, `maxOpenFiles`, `maxFileSize`,
    /// `tmpSize`, `maxOutputBytes`.
    pub name: &'static str,
    pub value: u64,
    /// `rlimit`, `cgroup`, `tmpfs`, `timer`, `watchdog`, `host`, `docker`, or several joined
    /// with `+`. Memory names the exact mechanism: `cgroup-v2-memory.max`,
    /// `cgroup-v1-memory`, `rlimit-as`, each with `+rlimit-data`.
    pub mechanism: String,
    /// Whether the mechanism holds the limit for the whole sandbox. `false` means the limit is
    /// only partly enforced (the note says how), e.g. memory without a cgroup when child
    /// processes are allowed.
    pub enforced: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl AppliedLimit {
    pub(crate) fn new(name: &'static str, value: u64, mechanism: &str) -> Self {
        AppliedLimit {
            name,
            value,
            mechanism: mechanism.to_string(),
            enforced: true,
            note: None,
        }
    }
}
