//! The boundary report: the record of the boundary one run crossed and the limits it applied,
//! kept by the receipt as `isolation`.
//!
//! [`BoundaryReport`] has one variant per kind of boundary. Each serializes to exactly the
//! JSON receipts have always held for it, so receipts stay byte-compatible:
//!
//! | variant | `isolation` |
//! |---|---|
//! | [`InProcessReport`] | `{"boundary": "in-process", "trusted": true, "limits"?: {"timeoutMs"}}` |
//! | [`SandboxReport`] | `{"kind": "process-sandbox" \| "oci", "runner", "program", "namespaces", ...}` |
//! | [`WasmReport`] | `{"kind": "wasm", "engine", "abi", "wasi", "moduleSha256", ...}` |
//! | [`HttpReport`] | `{"boundary": "http", "tier", "request", "limits", "response"?, ...}` |
//! | [`McpUpstreamReport`] | `{"boundary": "mcp-upstream", "server", "tool", "transport", "sandboxed"}` |

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::isolation::IsolationTier;

/// The record of the boundary one run crossed, as the receipt keeps it (`isolation`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum BoundaryReport {
    /// Trusted host code in the host process.
    InProcess(InProcessReport),
    /// The Linux process sandbox, or an OCI container.
    Sandbox(SandboxReport),
    /// A WebAssembly guest.
    Wasm(WasmReport),
    /// An HTTP operation the host sends (an OpenAPI operation).
    Http(HttpReport),
    /// A tool of an upstream MCP server, called through the gateway.
    McpUpstream(McpUpstreamReport),
}

impl BoundaryReport {
    /// The boundary's name as its record says it: `in-process`, `process-sandbox`, `oci`,
    /// `wasm` or `http`.
    pub fn name(&self) -> &str {
        match self {
            BoundaryReport::InProcess(_) => "in-process",
            BoundaryReport::Sandbox(r) => r.kind,
            BoundaryReport::Wasm(_) => "wasm",
            BoundaryReport::Http(_) => "http",
            BoundaryReport::McpUpstream(_) => "mcp-upstream",
        }
    }

    /// The isolation tier the boundary gives.
    pub fn tier(&self) -> IsolationTier {
        match self {
            BoundaryReport::InProcess(_) => IsolationTier::InProcess,
            BoundaryReport::Sandbox(r) if r.kind == "oci" => IsolationTier::Oci,
            BoundaryReport::Sandbox(_) => IsolationTier::Process,
            BoundaryReport::Wasm(_) => IsolationTier::Wasm,
            BoundaryReport::Http(r) => r.tier,
            BoundaryReport::McpUpstream(r) if r.sandboxed => IsolationTier::Process,
            BoundaryReport::McpUpstream(_) => IsolationTier::InProcess,
        }
    }

    /// The JSON the receipt records as `isolation`.
    pub fn to_value(&self) -> Value {
        // Plain structs of strings, numbers and lists: serializing them cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

impl From<InProcessReport> for BoundaryReport {
    fn from(r: InProcessReport) -> Self {
        BoundaryReport::InProcess(r)
    }
}

impl From<SandboxReport> for BoundaryReport {
    fn from(r: SandboxReport) -> Self {
        BoundaryReport::Sandbox(r)
    }
}

impl From<WasmReport> for BoundaryReport {
    fn from(r: WasmReport) -> Self {
        BoundaryReport::Wasm(r)
    }
}

impl From<McpUpstreamReport> for BoundaryReport {
    fn from(r: McpUpstreamReport) -> Self {
        BoundaryReport::McpUpstream(r)
    }
}

impl From<HttpReport> for BoundaryReport {
    fn from(r: HttpReport) -> Self {
        BoundaryReport::Http(r)
    }
}

/// Trusted host code run in the host process: `{"boundary": "in-process", "trusted": true}`,
/// with `"limits": {"timeoutMs": ...}` when the call had a wall clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "boundary", rename = "in-process")]
pub struct InProcessReport {
    /// Only code the host marks trusted runs in process.
    pub trusted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<InProcessLimits>,
}

/// The limits of an in-process run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InProcessLimits {
    pub timeout_ms: u64,
}

impl InProcessReport {
    /// The report of trusted code run with this wall clock.
    pub fn new(timeout: Option<Duration>) -> Self {
        InProcessReport {
            trusted: true,
            limits: timeout.map(|t| InProcessLimits {
                timeout_ms: u64::try_from(t.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }
}

/// A process tree behind the Linux process sandbox (`kind: "process-sandbox"`) or in an OCI
/// container (`kind: "oci"`), and the limits that were actually applied. Serializes as
/// camelCase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxReport {
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
    /// `"none"` (own empty network namespace), `"host"` (network.connect granted) or, in a
    /// container, `"bridge"`.
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
    /// The run's own cgroup: `"v2"`, `"v1-pids+memory"`, `"v1-pids"`, `"v1-memory"`,
    /// `"engine"` (a container's), or `"unavailable"` (the notes say why).
    pub cgroup: String,
    /// Every limit and how it was (or was not) enforced.
    pub limits: Vec<AppliedLimit>,
    /// Degradations and other facts a reviewer should know.
    pub notes: Vec<String>,
}

impl SandboxReport {
    /// The applied limit named `name`.
    pub fn limit(&self, name: &str) -> Option<&AppliedLimit> {
        self.limits.iter().find(|l| l.name == name)
    }
}

/// One limit of a sandbox: its value, the mechanism that enforces it, and whether it is
/// enforced at all.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedLimit {
    /// `wallTimeoutMs`, `cpuTimeMs`, `memoryBytes`, `maxPids`, `maxOpenFiles`, `maxFileSize`,
    /// `tmpSize`, `maxOutputBytes`, `maxModuleBytes`.
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
    /// An enforced limit without a note.
    pub fn new(name: &'static str, value: u64, mechanism: &str) -> Self {
        AppliedLimit {
            name,
            value,
            mechanism: mechanism.to_string(),
            enforced: true,
            note: None,
        }
    }
}

/// A WebAssembly guest (`kind: "wasm"`) and the limits it ran under. Serializes as
/// camelCase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename = "wasm", rename_all = "camelCase")]
pub struct WasmReport {
    /// The engine, e.g. `"wasmtime 48"`.
    pub engine: String,
    /// The ABI spoken, e.g. `capability-wasi-p1/1`.
    pub abi: String,
    /// WASI level offered: `"preview1"`.
    pub wasi: String,
    /// Lowercase hex SHA-256 of the module bytes.
    pub module_sha256: String,
    /// Instances come from a pooling allocator: `"pooling"`.
    pub instance_allocator: String,
    pub fuel: u64,
    pub memory_limit: u64,
    pub timeout_ms: u64,
    /// Epoch tick: the timeout's resolution.
    pub epoch_tick_ms: u64,
    pub max_wasm_stack: u64,
    pub stdin_limit: u64,
    pub stdout_limit: u64,
    pub tmp_quota: u64,
    /// Every directory the guest could open, and how.
    pub preopens: Vec<PreopenReport>,
    /// Names (never values) of the environment variables passed in.
    pub env: Vec<String>,
    /// `"none"`, and why.
    pub network: String,
    /// `"none"`, and why.
    pub process_spawn: String,
    /// Effects granted for the run.
    pub effects: Vec<String>,
}

/// One directory a WASM guest could see.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PreopenReport {
    /// Path inside the guest.
    pub guest: String,
    /// Host path (for `/tmp`, the per-run scratch directory, removed after the run).
    pub host: String,
    /// `read`, `write`, or `scratch`.
    pub access: String,
    /// The quota, for the scratch directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_bytes: Option<u64>,
}

/// An HTTP operation sent by the host (`boundary: "http"`): the request without credential
/// values, the limits, and the response when one came.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "boundary", rename = "http")]
pub struct HttpReport {
    /// The host sends the request: `in_process`.
    pub tier: IsolationTier,
    pub request: HttpRequestReport,
    pub limits: HttpLimits,
    /// The response, when one came.
    #[serde(flatten)]
    pub exchange: Option<HttpExchange>,
}

/// The request as sent, without credential values.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRequestReport {
    /// Upper case.
    pub method: String,
    pub url: String,
    /// Header names (credential headers included, their values never).
    pub headers: Vec<String>,
    pub body_bytes: u64,
    /// The credential schemes sent.
    pub credentials: Vec<String>,
}

/// A tool of an upstream MCP server (`boundary: "mcp-upstream"`): which server and tool,
/// how the gateway reaches it, and whether the server's process runs in the process
/// sandbox (tier `process`; otherwise the operator trusts the server, tier `in_process`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "boundary", rename = "mcp-upstream")]
pub struct McpUpstreamReport {
    pub server: String,
    pub tool: String,
    /// `"stdio"` (a child process) or `"http"` (streamable HTTP).
    pub transport: &'static str,
    pub sandboxed: bool,
}

/// The limits of an HTTP operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpLimits {
    pub timeout_ms: u64,
    pub max_response_bytes: u64,
    pub max_redirects: u32,
    pub retries: u32,
}

/// What came back: `response`, `destination`, `attempts` and `redirects` of the record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HttpExchange {
    pub response: HttpResponseReport,
    pub destination: HttpDestination,
    /// Attempts made (1 without retries).
    pub attempts: u32,
    pub redirects: u32,
}

/// The response's status, size and content type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpResponseReport {
    pub status: u16,
    pub bytes: u64,
    pub content_type: Option<String>,
}

/// Where the final response came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HttpDestination {
    /// `ip:port`.
    pub address: String,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    /// Serialized text, keys in the order written (what a receipt prints).
    fn text(r: impl Into<BoundaryReport>) -> String {
        serde_json::to_string(&r.into()).unwrap()
    }

    #[test]
    fn in_process_records_keep_their_shape() {
        assert_eq!(
            text(InProcessReport::new(None)),
            r#"{"boundary":"in-process","trusted":true}"#
        );
        let r = BoundaryReport::from(InProcessReport::new(Some(Duration::from_millis(100))));
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"boundary":"in-process","trusted":true,"limits":{"timeoutMs":100}}"#
        );
        assert_eq!(
            (r.name(), r.tier()),
            ("in-process", IsolationTier::InProcess)
        );
    }

    #[test]
    fn sandbox_records_keep_their_shape() {
        let mut limit = AppliedLimit::new("memoryBytes", 1 << 20, "rlimit-as+rlimit-data");
        limit.note = Some("n".into());
        let report = SandboxReport {
            kind: "process-sandbox",
            runner: "node",
            program: "node v22 (/usr/bin/node)".into(),
            namespaces: vec!["user", "net"],
            landlock: "abi-7".into(),
            seccomp: true,
            network: "none",
            process_spawn: false,
            read_paths: vec!["/data".into()],
            write_paths: vec![],
            environment: vec!["LANG".into()],
            secrets: vec![],
            cgroup: "v2".into(),
            limits: vec![limit, AppliedLimit::new("maxPids", 64, "rlimit")],
            notes: vec!["a note".into()],
        };
        assert_eq!(
            text(report.clone()),
            concat!(
                r#"{"kind":"process-sandbox","runner":"node","program":"node v22 (/usr/bin/node)","#,
                r#""namespaces":["user","net"],"landlock":"abi-7","seccomp":true,"network":"none","#,
                r#""processSpawn":false,"readPaths":["/data"],"writePaths":[],"environment":["LANG"],"#,
                r#""secrets":[],"cgroup":"v2","limits":[{"name":"memoryBytes","value":1048576,"#,
                r#""mechanism":"rlimit-as+rlimit-data","enforced":true,"note":"n"},"#,
                r#"{"name":"maxPids","value":64,"mechanism":"rlimit","enforced":true}],"#,
                r#""notes":["a note"]}"#
            )
        );
        assert_eq!(report.limit("maxPids").map(|l| l.value), Some(64));
        let oci = BoundaryReport::from(SandboxReport {
            kind: "oci",
            ..report
        });
        assert_eq!((oci.name(), oci.tier()), ("oci", IsolationTier::Oci));
    }

    #[test]
    fn wasm_records_keep_their_shape() {
        let report = WasmReport {
            engine: "wasmtime 48".into(),
            abi: "capability-wasi-p1/1".into(),
            wasi: "preview1".into(),
            module_sha256: "ab".into(),
            instance_allocator: "pooling".into(),
            fuel: 1,
            memory_limit: 2,
            timeout_ms: 3,
            epoch_tick_ms: 4,
            max_wasm_stack: 5,
            stdin_limit: 6,
            stdout_limit: 7,
            tmp_quota: 8,
            preopens: vec![PreopenReport {
                guest: "/tmp".into(),
                host: "/s".into(),
                access: "scratch".into(),
                quota_bytes: Some(8),
            }],
            env: vec![],
            network: "none".into(),
            process_spawn: "none".into(),
            effects: vec!["filesystem.read".into()],
        };
        assert_eq!(
            text(report),
            concat!(
                r#"{"kind":"wasm","engine":"wasmtime 48","abi":"capability-wasi-p1/1","#,
                r#""wasi":"preview1","moduleSha256":"ab","instanceAllocator":"pooling","fuel":1,"#,
                r#""memoryLimit":2,"timeoutMs":3,"epochTickMs":4,"maxWasmStack":5,"stdinLimit":6,"#,
                r#""stdoutLimit":7,"tmpQuota":8,"preopens":[{"guest":"/tmp","host":"/s","#,
                r#""access":"scratch","quotaBytes":8}],"env":[],"network":"none","#,
                r#""processSpawn":"none","effects":["filesystem.read"]}"#
            )
        );
    }

    #[test]
    fn mcp_upstream_records_name_the_server_and_tool() {
        let report = McpUpstreamReport {
            server: "files".into(),
            tool: "read".into(),
            transport: "stdio",
            sandboxed: true,
        };
        assert_eq!(
            text(report.clone()),
            r#"{"boundary":"mcp-upstream","server":"files","tool":"read","transport":"stdio","sandboxed":true}"#
        );
        let trusted = BoundaryReport::from(McpUpstreamReport {
            sandboxed: false,
            ..report
        });
        assert_eq!(
            (trusted.name(), trusted.tier()),
            ("mcp-upstream", IsolationTier::InProcess)
        );
    }

    #[test]
    fn http_records_keep_their_shape() {
        let mut report = HttpReport {
            tier: IsolationTier::InProcess,
            request: HttpRequestReport {
                method: "GET".into(),
                url: "http://127.0.0.1:1/pets?x=1".into(),
                headers: vec!["Authorization".into()],
                body_bytes: 0,
                credentials: vec!["bearer".into()],
            },
            limits: HttpLimits {
                timeout_ms: 30000,
                max_response_bytes: 8 << 20,
                max_redirects: 5,
                retries: 2,
            },
            exchange: None,
        };
        let request = concat!(
            r#"{"boundary":"http","tier":"in_process","request":{"method":"GET","#,
            r#""url":"http://127.0.0.1:1/pets?x=1","headers":["Authorization"],"bodyBytes":0,"#,
            r#""credentials":["bearer"]},"limits":{"timeoutMs":30000,"maxResponseBytes":8388608,"#,
            r#""maxRedirects":5,"retries":2}"#
        );
        assert_eq!(text(report.clone()), format!("{request}}}"));
        report.exchange = Some(HttpExchange {
            response: HttpResponseReport {
                status: 200,
                bytes: 12,
                content_type: None,
            },
            destination: HttpDestination {
                address: "127.0.0.1:1".into(),
            },
            attempts: 1,
            redirects: 0,
        });
        assert_eq!(
            text(report.clone()),
            format!(
                "{request},{}}}",
                concat!(
                    r#""response":{"status":200,"bytes":12,"contentType":null},"#,
                    r#""destination":{"address":"127.0.0.1:1"},"attempts":1,"redirects":0"#
                )
            )
        );
        let r = BoundaryReport::from(report);
        assert_eq!((r.name(), r.tier()), ("http", IsolationTier::InProcess));
        assert_eq!(r.to_value()["response"]["status"], json!(200));
    }
}
