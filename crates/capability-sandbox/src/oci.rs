//! The OCI executor: docker or podman, when an engine answers, with the reference's hardening
//! and images pinned by digest.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::SandboxError;
use crate::linux::host;
use crate::package::resolve_module_limited;
use crate::protocol::{self, Response};
use crate::report::{AppliedLimit, BoundaryReport};
use crate::types::{Grants, Invocation, Limits, ModuleKind, ModuleSpec, RunOutcome, effects};

const NODE_SHIM: &str = include_str!("shims/node.mjs");
const PYTHON_SHIM: &str = include_str!("shims/python.py");

/// Where the package appears inside the container (as in the reference).
pub const OCI_WORKSPACE: &str = "/workspace";

/// A container engine that answered `info`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciEngine {
    /// The CLI (`docker` or `podman`).
    pub program: PathBuf,
    /// The engine's server version.
    pub server_version: String,
}

/// Asks `program` for its server version (`<program> info --format {{.ServerVersion}}`),
/// within `timeout`. A CLI without an engine behind it does not answer.
pub fn probe_engine(program: &Path, timeout: Duration) -> Result<OciEngine, String> {
    let out = host::run_capture(
        program,
        &["info", "--format", "{{.ServerVersion}}"],
        timeout,
    )
    .ok_or_else(|| {
        format!(
            "{} info did not answer within {timeout:?}",
            program.display()
        )
    })?;
    let version = out.trim().to_string();
    if version.is_empty() {
        return Err(format!(
            "{} info reported no server version",
            program.display()
        ));
    }
    Ok(OciEngine {
        program: program.to_path_buf(),
        server_version: version,
    })
}

/// The first of docker and podman (on PATH) whose engine answers within `timeout` each.
pub fn detect_engine(timeout: Duration) -> Result<OciEngine, String> {
    let mut reasons = Vec::new();
    for name in ["docker", "podman"] {
        match host::which(name) {
            Some(p) => match probe_engine(&p, timeout) {
                Ok(engine) => return Ok(engine),
                Err(e) => reasons.push(e),
            },
            None => reasons.push(format!("{name} not found on PATH")),
        }
    }
    Err(reasons.join("; "))
}

/// Refuses image references not pinned by digest (`name@sha256:<64 hex>`).
pub fn check_pinned_image(image: &str) -> Result<(), SandboxError> {
    let ok = image.split_once("@sha256:").is_some_and(|(name, digest)| {
        !name.is_empty()
            && digest.len() == 64
            && digest
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    });
    if ok {
        Ok(())
    } else {
        Err(SandboxError::Invalid {
            detail: format!(
                "image {image:?} is not pinned by digest (expected name@sha256:<64 hex>)"
            ),
        })
    }
}

/// Images per runner. Each must be pinned by digest and contain the runner's interpreter
/// (`node`, `python3`) or the libraries the native module needs.
#[derive(Clone, Debug, Default)]
pub struct OciImages {
    pub node: Option<String>,
    pub python: Option<String>,
    pub native: Option<String>,
}

/// The OCI executor.
#[derive(Clone, Debug)]
pub struct OciExecutor {
    pub engine: OciEngine,
    pub images: OciImages,
}

/// What `docker run` is asked to do: everything but the engine binary.
#[derive(Clone, Debug)]
pub struct OciRun {
    pub args: Vec<String>,
    pub container_name: String,
    pub uses_shim: bool,
}

/// Builds the `docker run` arguments (reference order, plus rlimits):
/// `run --rm -i --name N --network=<none|bridge> --read-only --cap-drop=ALL
/// --security-opt=no-new-privileges:true --pids-limit=P --memory=M --cpus=1
/// --user=65534:65534 --ulimit ... --tmpfs /tmp:rw,nosuid,nodev,noexec,size=S
/// -v <root>:/workspace:ro [-v path:path:ro|rw ...] [-e K=V ...] <image> <runner argv>`.
pub fn docker_args(
    spec: &ModuleSpec,
    image: &str,
    grants: &Grants,
    limits: &Limits,
    container_name: &str,
) -> Result<OciRun, SandboxError> {
    check_pinned_image(image)?;
    let kind = ModuleKind::of(&spec.module);
    if kind == ModuleKind::Wasm {
        return Err(SandboxError::UseWasmExecutor {
            module: spec.module.clone(),
        });
    }
    let module = resolve_module_limited(spec, limits.max_module_bytes)?;
    let inside = format!(
        "{OCI_WORKSPACE}/{}",
        module.relative.to_string_lossy().trim_start_matches('/')
    );
    let mut args: Vec<String> = vec![
        "run".into(),
        "--rm".into(),
        "-i".into(),
        format!("--name={container_name}"),
        format!(
            "--network={}",
            if grants.network() { "bridge" } else { "none" }
        ),
        "--read-only".into(),
        "--cap-drop=ALL".into(),
        "--security-opt=no-new-privileges:true".into(),
        format!("--pids-limit={}", limits.max_pids),
        format!("--memory={}", limits.memory_bytes),
        format!("--memory-swap={}", limits.memory_bytes),
        "--cpus=1".into(),
        "--user=65534:65534".into(),
        format!(
            "--ulimit=cpu={0}:{0}",
            limits.cpu_time.as_secs_f64().ceil().max(1.0) as u64
        ),
        format!("--ulimit=fsize={0}:{0}", limits.max_file_size),
        format!("--ulimit=nofile={0}:{0}", limits.max_open_files),
        "--tmpfs".into(),
        format!("/tmp:rw,nosuid,nodev,noexec,size={}", limits.tmp_size),
        "-v".into(),
        format!("{}:{OCI_WORKSPACE}:ro", path_arg(&module.mount_root)?),
    ];
    if grants.has(effects::FILESYSTEM_READ) {
        for p in &grants.read_paths {
            let p = canonical_grant(p)?;
            args.push("-v".into());
            args.push(format!("{p}:{p}:ro"));
        }
    }
    if grants.has(effects::FILESYSTEM_WRITE) {
        for p in &grants.write_paths {
            let p = canonical_grant(p)?;
            args.push("-v".into());
            args.push(format!("{p}:{p}:rw"));
        }
    }
    if grants.has(effects::ENVIRONMENT_READ) {
        for (k, v) in &grants.env {
            if k.is_empty() || k.contains('=') {
                return Err(SandboxError::Invalid {
                    detail: format!("invalid environment variable name {k:?}"),
                });
            }
            args.push("-e".into());
            args.push(format!("{k}={v}"));
        }
    }
    args.push(image.to_string());
    let uses_shim = match kind {
        ModuleKind::Node => {
            let heap_mb = (limits.memory_bytes / (1 << 20) / 2).max(16);
            args.extend([
                "node".to_string(),
                format!("--max-old-space-size={heap_mb}"),
                "--input-type=module".into(),
                "-e".into(),
                NODE_SHIM.into(),
                "--".into(),
                inside,
            ]);
            true
        }
        ModuleKind::Python => {
            args.extend([
                "python3".to_string(),
                "-I".into(),
                "-S".into(),
                "-B".into(),
                "-c".into(),
                PYTHON_SHIM.into(),
                inside,
            ]);
            true
        }
        ModuleKind::Native | ModuleKind::Wasm => {
            args.push(inside);
            false
        }
    };
    Ok(OciRun {
        args,
        container_name: container_name.to_string(),
        uses_shim,
    })
}

fn path_arg(p: &Path) -> Result<String, SandboxError> {
    let s = p.to_str().ok_or_else(|| SandboxError::Invalid {
        detail: format!("path {} is not UTF-8", p.display()),
    })?;
    if s.contains(':') || s.contains(',') {
        return Err(SandboxError::Invalid {
            detail: format!("path {s:?} cannot be passed to -v (contains ':' or ',')"),
        });
    }
    Ok(s.to_string())
}

fn canonical_grant(p: &Path) -> Result<String, SandboxError> {
    let real = p.canonicalize().map_err(|e| SandboxError::Invalid {
        detail: format!("granted path {} cannot be opened: {e}", p.display()),
    })?;
    path_arg(&real)
}

impl OciExecutor {
    /// Detects an engine; `Unavailable` when none answers.
    pub fn detect(images: OciImages) -> Result<OciExecutor, SandboxError> {
        let engine =
            detect_engine(Duration::from_secs(5)).map_err(|reason| SandboxError::Unavailable {
                boundary: "oci",
                reason,
            })?;
        Ok(OciExecutor { engine, images })
    }

    fn image_for(&self, kind: ModuleKind) -> Result<&str, SandboxError> {
        let image = match kind {
            ModuleKind::Node => &self.images.node,
            ModuleKind::Python => &self.images.python,
            ModuleKind::Native => &self.images.native,
            ModuleKind::Wasm => &None,
        };
        image.as_deref().ok_or_else(|| SandboxError::Unavailable {
            boundary: "oci",
            reason: format!("no image configured for {} modules", kind.as_str()),
        })
    }

    /// Runs one hook in a container (same protocol and handshake as the process sandbox).
    pub fn run(
        &self,
        spec: &ModuleSpec,
        invocation: &Invocation,
        grants: &Grants,
        limits: &Limits,
    ) -> Result<RunOutcome, SandboxError> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let kind = ModuleKind::of(&spec.module);
        let image = self.image_for(kind)?;
        let name = format!(
            "capability-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let run = docker_args(spec, image, grants, limits, &name)?;
        let envelope = protocol::envelope(invocation, &spec.manifest, grants);
        let started = Instant::now();
        let mut child = Command::new(&self.engine.program)
            .args(&run.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SandboxError::Spawn {
                detail: format!("{}: {e}", self.engine.program.display()),
            })?;
        let (Some(mut stdin), Some(stdout), Some(mut stderr_pipe)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(SandboxError::Spawn {
                detail: "engine stdio unavailable".into(),
            });
        };
        let stderr_thread = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = stderr_pipe.read_to_end(&mut s);
            s
        });
        let manifest_hash = capability_core::json::canonical_hash(&spec.manifest);
        let id = spec.id().to_string();
        let uses_shim = run.uses_shim;
        let initial = capability_core::json::to_js_string(&envelope) + "\n";
        let io_thread = std::thread::spawn(move || -> Result<Vec<u8>, SandboxError> {
            let _ = stdin.write_all(initial.as_bytes());
            let mut reader = BufReader::new(stdout);
            if uses_shim {
                let mut line = Vec::new();
                let _ = reader.read_until(b'\n', &mut line);
                let value =
                    capability_core::json::parse(protocol::trim_ascii(&line)).map_err(|e| {
                        SandboxError::ProtocolViolation {
                            detail: format!("bad handshake ({e}): {}", protocol::preview(&line)),
                        }
                    })?;
                if value.get("error").is_some() {
                    return Ok(line);
                }
                if let Some(loaded) = value.get("manifest").filter(|v| !v.is_null()) {
                    let loaded_hash = capability_core::json::canonical_hash(loaded);
                    if loaded_hash != manifest_hash {
                        return Err(SandboxError::ManifestMismatch {
                            id,
                            expected: manifest_hash,
                            loaded: loaded_hash,
                        });
                    }
                }
                let _ = stdin.write_all(b"{\"proceed\":true}\n");
            }
            drop(stdin);
            let mut rest = Vec::new();
            let _ = reader.read_to_end(&mut rest);
            Ok(rest)
        });
        let deadline = started + limits.wall_timeout;
        let mut timed_out = false;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            if Instant::now() >= deadline {
                timed_out = true;
                let _ = Command::new(&self.engine.program)
                    .args(["kill", &name])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let body = io_thread.join().unwrap_or_else(|_| {
            Err(SandboxError::ProtocolViolation {
                detail: "io thread panicked".into(),
            })
        });
        let stderr =
            String::from_utf8_lossy(&stderr_thread.join().unwrap_or_default()).into_owned();
        let mut hook_present = true;
        let result = if timed_out {
            Err(SandboxError::Timeout {
                limit: limits.wall_timeout,
            })
        } else {
            match body {
                Err(e) => Err(e),
                Ok(body) if protocol::trim_ascii(&body).is_empty() => Err(SandboxError::Crashed {
                    status: -1,
                    stderr: stderr.clone(),
                }),
                Ok(body) => match protocol::parse_response(&body) {
                    Ok(Response::Output {
                        output,
                        hook_present: h,
                    }) => {
                        hook_present = h;
                        Ok(output)
                    }
                    Ok(Response::Error(g)) => Err(SandboxError::Guest(g)),
                    Err(e) => Err(e),
                },
            }
        };
        Ok(RunOutcome {
            result,
            hook_present,
            boundary: self.report(kind, image, grants, limits),
            duration: started.elapsed(),
            stderr,
        })
    }

    fn report(
        &self,
        kind: ModuleKind,
        image: &str,
        grants: &Grants,
        limits: &Limits,
    ) -> BoundaryReport {
        let engine = self
            .engine
            .program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        BoundaryReport {
            kind: "oci",
            runner: kind.as_str(),
            program: format!("{engine} {} image {image}", self.engine.server_version),
            namespaces: if grants.network() {
                vec!["mount", "pid", "ipc", "uts"]
            } else {
                vec!["mount", "pid", "ipc", "uts", "net"]
            },
            landlock: "unavailable".into(),
            seccomp: true,
            network: if grants.network() { "bridge" } else { "none" },
            process_spawn: true,
            read_paths: grants.read_paths.iter().map(|p| p.display().to_string()).collect(),
            write_paths: grants.write_paths.iter().map(|p| p.display().to_string()).collect(),
            environment: if grants.has(effects::ENVIRONMENT_READ) {
                grants.env.keys().cloned().collect()
            } else {
                Vec::new()
            },
            secrets: if grants.has(effects::SECRETS_READ) {
                grants.secrets.keys().cloned().collect()
            } else {
                Vec::new()
            },
            cgroup: "engine".into(),
            limits: vec![
                AppliedLimit::new("wallTimeoutMs", limits.wall_timeout.as_millis() as u64, "timer"),
                AppliedLimit::new("cpuTimeMs", limits.cpu_time.as_secs_f64().ceil().max(1.0) as u64 * 1000, "docker"),
                AppliedLimit::new("memoryBytes", limits.memory_bytes, "docker"),
                AppliedLimit::new("maxPids", limits.max_pids as u64, "docker"),
                AppliedLimit::new("maxOpenFiles", limits.max_open_files, "docker"),
                AppliedLimit::new("maxFileSize", limits.max_file_size, "docker"),
                AppliedLimit::new("tmpSize", limits.tmp_size, "docker"),
                AppliedLimit::new("maxModuleBytes", limits.max_module_bytes, "host"),
            ],
            notes: vec![
                "the engine's default seccomp profile applies; the container runs as 65534:65534 with no capabilities".into(),
                "process creation is limited by --pids-limit, not refused".into(),
            ],
        }
    }
}
