//! The OCI executor: docker or podman, when an engine answers, with the reference's hardening
//! and images pinned by digest.
//!
//! # Engines
//!
//! [`detect_engine`] probes `docker` and `podman` on `PATH` at the same time, each with
//! `<cli> version` bounded by [`ENGINE_PROBE_TIMEOUT`] (the CLI's whole process group is killed
//! past it), and prefers docker when both answer. [`OCI_ENGINE_ENV`]
//! (`CAPABILITY_OCI_ENGINE=podman`, `docker` or a path) restricts detection to one CLI.
//!
//! The engine runs with the host's environment, so its own configuration applies: for podman
//! `CONTAINERS_CONF` (and `CONTAINERS_STORAGE_CONF`, `XDG_RUNTIME_DIR`, ...), for docker
//! `DOCKER_HOST` / `DOCKER_CONTEXT`. The repository's `.ci/containers.conf` is the podman
//! configuration for hosts like the CI VM (cgroup v1 and v2 side by side, a fixed
//! RLIMIT_NOFILE ceiling): `runc` instead of `crun`, the `cgroupfs` manager, file events and
//! low default ulimits. `.ci/run` exports `CONTAINERS_CONF` pointing at it.
//!
//! # Images
//!
//! One image per runner ([`OciImages`], or [`OciImages::from_env`]:
//! `CAPABILITY_OCI_IMAGE_NODE`, `_PYTHON`, `_NATIVE`), each pinned by digest
//! (`name@sha256:<64 hex>`, [`check_pinned_image`]). The image provides the runtime (node,
//! python3, or the libraries of a native module: a `FROM scratch` image is enough for a static
//! executable); the module itself always comes from the package, integrity-checked on the
//! host, mounted read-only at [`OCI_WORKSPACE`]. For an image built locally with podman, the
//! digest is `podman image inspect --format '{{.Digest}}' <tag>` and `<repo>@<digest>` runs it.
//!
//! # The container
//!
//! See [`docker_args`]. The guest runs as `65534:65534`, so the package must be readable (and a
//! native module executable) by others on the host; the run is refused up front otherwise.
//! Engine failures (exit status 125 to 127 with no protocol output: a missing image, an OCI
//! runtime error) are reported as [`SandboxError::Unavailable`] with the engine's message.

use std::ffi::OsStr;
use std::io::{BufRead as _, BufReader, Read, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use capability_exec::{AppliedLimit, Grants, Invocation, Limits, SandboxReport, effects};

use crate::error::{EngineError, SandboxError};
use crate::linux::sys;
use crate::package::{ResolvedModule, resolve_module_limited};
use crate::protocol::{self, Response};
use crate::types::{ModuleKind, ModuleSpec, Outcome, ProcessLimits};

const NODE_SHIM: &str = include_str!("shims/node.mjs");
const PYTHON_SHIM: &str = include_str!("shims/python.py");

/// Where the package appears inside the container (as in the reference).
pub const OCI_WORKSPACE: &str = "/workspace";

/// How long one engine probe (`<cli> version`) may take. Probes run in parallel, so detection
/// and `doctor` spend less than a second on engines that do not answer.
pub const ENGINE_PROBE_TIMEOUT: Duration = Duration::from_millis(900);

/// Restricts engine detection to one CLI: `docker`, `podman`, or a path to either.
pub const OCI_ENGINE_ENV: &str = "CAPABILITY_OCI_ENGINE";

/// The user the guest runs as inside the container.
const CONTAINER_USER: &str = "65534:65534";
/// Bound on the engine commands run after a timeout (`rm -f`).
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Kept of a probe's stdout and stderr.
const PROBE_OUTPUT_CAP: u64 = 64 << 10;
/// Kept of a run's stderr (its end).
const STDERR_CAP: usize = 64 << 10;
const POLL: Duration = Duration::from_millis(5);

/// A container engine that answered `version`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciEngine {
    /// The CLI.
    pub program: PathBuf,
    /// The engine's version (docker's server version, or podman's version).
    pub server_version: String,
    /// The dialect the CLI speaks: `"docker"` or `"podman"` (podman installed as `docker`
    /// is recognised as podman).
    pub name: &'static str,
}

impl OciEngine {
    fn is_podman(&self) -> bool {
        self.name == "podman"
    }
}

/// What a bounded command printed.
struct Captured {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

fn command_line(program: &Path, args: &[&str]) -> String {
    let mut s = program.display().to_string();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

/// Kills a child started with `process_group(0)` and its whole group, then reaps it.
fn kill_tree(child: &mut Child) {
    let _ = sys::kill_process_group(child.id());
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads a pipe to its end on a thread, keeping the first `cap` bytes.
fn drain(mut pipe: impl Read + Send + 'static, cap: u64) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let _ = (&mut pipe).take(cap).read_to_end(&mut kept);
        let _ = std::io::copy(&mut pipe, &mut std::io::sink());
        let _ = tx.send(kept);
    });
    rx
}

/// Runs `program args` with stdin closed and the host's environment, in its own process group,
/// until `deadline`: past it the whole group is killed (`budget` is what the error quotes).
fn run_bounded(
    program: &Path,
    args: &[&str],
    deadline: Instant,
    budget: Duration,
) -> Result<Captured, EngineError> {
    let mut child = match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
    {
        Ok(child) => child,
        Err(source) => {
            return Err(EngineError::Start {
                command: command_line(program, args),
                source,
            });
        }
    };
    let out = child.stdout.take().map(|p| drain(p, PROBE_OUTPUT_CAP));
    let err = child.stderr.take().map(|p| drain(p, PROBE_OUTPUT_CAP));
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
            Ok(None) => {
                kill_tree(&mut child);
                return Err(EngineError::Timeout {
                    command: command_line(program, args),
                    budget,
                });
            }
            Err(source) => {
                kill_tree(&mut child);
                return Err(EngineError::Wait {
                    command: command_line(program, args),
                    source,
                });
            }
        }
    };
    // A descendant that escaped the group may keep a pipe open: do not wait for it for long.
    let grace = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(100));
    let text = |rx: Option<mpsc::Receiver<Vec<u8>>>| {
        rx.and_then(|r| r.recv_timeout(grace).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    Ok(Captured {
        status,
        stdout: text(out),
        stderr: text(err),
    })
}

/// The last non-empty line of an engine's stderr, shortened: its error message.
pub fn last_line(stderr: &str) -> String {
    let line = stderr
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("");
    if line.chars().count() > 400 {
        line.chars().take(400).collect::<String>() + "..."
    } else {
        line.to_string()
    }
}

/// Asks `program` for its engine's version (`<program> version --format ...`) within
/// `timeout`, killing it (and anything it started) past the deadline. A CLI without an engine
/// behind it fails or does not answer; the error says which, with the engine's own message.
///
/// `version` rather than `info`: docker's needs the daemon all the same, and podman's still
/// loads its configuration and checks that the OCI runtime exists, while `podman info` also
/// inspects storage and networks and takes over a second on a loaded machine.
pub fn probe_engine(program: &Path, timeout: Duration) -> Result<OciEngine, EngineError> {
    let deadline = Instant::now() + timeout;
    let named_podman = [
        program.to_path_buf(),
        program.canonicalize().unwrap_or_default(),
    ]
    .iter()
    .any(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().contains("podman"))
    });
    let mut name = if named_podman { "podman" } else { "docker" };
    loop {
        // docker's answer has a platform; podman's has none, which tells podman-docker apart.
        let template = if name == "podman" {
            "{{.Server.Version}}"
        } else {
            "{{.Server.Platform.Name}}|{{.Server.Version}}"
        };
        let args = ["version", "--format", template];
        let out = run_bounded(program, &args, deadline, timeout)?;
        if out.status.success() {
            let answer = out.stdout.trim();
            let version = answer.rsplit('|').next().unwrap_or_default().trim();
            if version.is_empty() || version == "<no value>" {
                return Err(EngineError::NoVersion {
                    command: command_line(program, &args),
                });
            }
            return Ok(OciEngine {
                program: program.to_path_buf(),
                server_version: version.to_string(),
                name,
            });
        }
        if name == "docker" && out.stderr.contains("can't evaluate field Platform") {
            name = "podman";
            continue;
        }
        return Err(EngineError::Failed {
            command: command_line(program, &args),
            status: out.status,
            message: last_line(&out.stderr),
        });
    }
}

/// `name` on `search_path` (a `PATH`-style list), or why not.
fn find_cli(name: &str, search_path: Option<&OsStr>) -> Result<PathBuf, EngineError> {
    let path = match search_path {
        Some(p) => p.to_os_string(),
        None => std::env::var_os("PATH").unwrap_or_default(),
    };
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| crate::linux::host::is_executable(p))
        .ok_or_else(|| EngineError::NotFound {
            cli: name.to_string(),
        })
}

/// Finds the `name` CLI on `search_path` (the host's `PATH` when `None`) and probes it within
/// `timeout`. The error is the reason `doctor` shows and [`OciExecutor::detect`] returns.
pub fn probe_cli(
    name: &str,
    search_path: Option<&OsStr>,
    timeout: Duration,
) -> Result<OciEngine, EngineError> {
    probe_engine(&find_cli(name, search_path)?, timeout)
}

/// Probes `docker` and `podman` on `search_path` at the same time, each within `timeout`.
pub(crate) fn probe_both(
    search_path: Option<&OsStr>,
    timeout: Duration,
) -> [Result<OciEngine, EngineError>; 2] {
    std::thread::scope(|s| {
        let podman = s.spawn(|| probe_cli("podman", search_path, timeout));
        let docker = probe_cli("docker", search_path, timeout);
        let podman = podman
            .join()
            .unwrap_or(Err(EngineError::Panicked { cli: "podman" }));
        [docker, podman]
    })
}

/// The engine to use: the one named by [`OCI_ENGINE_ENV`] when set, else the first of docker
/// and podman (on PATH, probed in parallel) that answers within `timeout`. When none answers
/// the error is [`EngineError::Chosen`] (the chosen engine's reason) or
/// [`EngineError::NoneAnswers`] (docker's and podman's).
pub fn detect_engine(timeout: Duration) -> Result<OciEngine, EngineError> {
    if let Some(chosen) = std::env::var_os(OCI_ENGINE_ENV).filter(|v| !v.is_empty()) {
        let chosen_path = Path::new(&chosen);
        let result = if chosen_path.components().count() > 1 {
            probe_engine(chosen_path, timeout)
        } else {
            probe_cli(&chosen.to_string_lossy(), None, timeout)
        };
        return result.map_err(|e| EngineError::Chosen {
            value: chosen.to_string_lossy().into_owned(),
            error: Box::new(e),
        });
    }
    let [docker, podman] = probe_both(None, timeout);
    match (docker, podman) {
        (Ok(engine), _) | (_, Ok(engine)) => Ok(engine),
        (Err(docker), Err(podman)) => Err(EngineError::NoneAnswers {
            docker: Box::new(docker),
            podman: Box::new(podman),
        }),
    }
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

impl OciImages {
    /// The images named by `CAPABILITY_OCI_IMAGE_NODE`, `CAPABILITY_OCI_IMAGE_PYTHON` and
    /// `CAPABILITY_OCI_IMAGE_NATIVE` (unset or empty: none). Pinning is checked at run time.
    pub fn from_env() -> OciImages {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        OciImages {
            node: var("CAPABILITY_OCI_IMAGE_NODE"),
            python: var("CAPABILITY_OCI_IMAGE_PYTHON"),
            native: var("CAPABILITY_OCI_IMAGE_NATIVE"),
        }
    }

    /// True when no image is configured.
    pub fn is_empty(&self) -> bool {
        self.node.is_none() && self.python.is_none() && self.native.is_none()
    }
}

/// The OCI executor.
#[derive(Clone, Debug)]
pub struct OciExecutor {
    pub engine: OciEngine,
    pub images: OciImages,
}

/// What `<engine> run` is asked to do: everything but the engine binary.
#[derive(Clone, Debug)]
pub struct OciRun {
    pub args: Vec<String>,
    /// Values of the `-e NAME` variables: they are given to the engine process through its
    /// environment, so they never appear on a command line.
    pub env: Vec<(String, String)>,
    pub container_name: String,
    pub uses_shim: bool,
    /// Whether the shim's handshake must carry a manifest (decided from the module file the
    /// host loaded, see `protocol::manifest_required`).
    pub manifest_required: bool,
}

/// Builds the `docker run` arguments (reference order, plus rlimits and no log driver):
/// `run --rm -i --name=N --network=<none|bridge> --read-only --cap-drop=ALL
/// --security-opt=no-new-privileges:true --pids-limit=P --memory=M --memory-swap=M --cpus=1
/// --user=65534:65534 --log-driver=none --ulimit=cpu|fsize|nofile|nproc|core=... --tmpfs
/// /tmp:rw,nosuid,nodev,noexec,size=S -v <root>:/workspace:ro [-v path:path:ro|rw ...]
/// [-e NAME ...] <image> <runner argv>`.
///
/// Every ulimit is explicit because podman replaces all its defaults as soon as one is given,
/// and its defaults (nofile 1048576, nproc 4194304) exceed what a VM may allow. `nproc` is the
/// host's own ceiling (its hard limit, at most `pid_max`): it is counted per uid across all
/// containers running as 65534, so the per-container process limit is `--pids-limit`. For podman, [`OciExecutor::run`] adds
/// `--read-only-tmpfs=false` so that `/tmp` is the only writable place.
pub fn docker_args(
    spec: &ModuleSpec,
    image: &str,
    grants: &Grants,
    limits: &Limits<ProcessLimits>,
    container_name: &str,
) -> Result<OciRun, SandboxError> {
    build_args(false, spec, image, grants, limits, container_name)
}

fn build_args(
    podman: bool,
    spec: &ModuleSpec,
    image: &str,
    grants: &Grants,
    limits: &Limits<ProcessLimits>,
    container_name: &str,
) -> Result<OciRun, SandboxError> {
    check_pinned_image(image)?;
    let kind = ModuleKind::of(&spec.module);
    if kind == ModuleKind::Wasm {
        return Err(SandboxError::UseWasmExecutor {
            module: spec.module.clone(),
        });
    }
    let module = resolve_module_limited(spec, limits.boundary.max_module_bytes)?;
    let inside = format!(
        "{OCI_WORKSPACE}/{}",
        module.relative.to_string_lossy().trim_start_matches('/')
    );
    let nproc = nproc_ceiling();
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
    ];
    if podman {
        // podman's --read-only also mounts writable tmpfs on /run, /var/tmp and /tmp.
        args.push("--read-only-tmpfs=false".into());
    }
    args.extend([
        "--cap-drop=ALL".into(),
        "--security-opt=no-new-privileges:true".into(),
        format!("--pids-limit={}", limits.boundary.max_pids),
        format!("--memory={}", limits.memory_bytes),
        format!("--memory-swap={}", limits.memory_bytes),
        "--cpus=1".into(),
        format!("--user={CONTAINER_USER}"),
        "--log-driver=none".into(),
        format!("--ulimit=cpu={0}:{0}", cpu_seconds(limits)),
        format!("--ulimit=fsize={0}:{0}", limits.boundary.max_file_size),
        format!("--ulimit=nofile={0}:{0}", limits.boundary.max_open_files),
        format!("--ulimit=nproc={nproc}:{nproc}"),
        "--ulimit=core=0:0".into(),
        "--tmpfs".into(),
        format!("/tmp:rw,nosuid,nodev,noexec,size={}", limits.tmp_bytes),
        "-v".into(),
        format!("{}:{OCI_WORKSPACE}:ro", path_arg(&module.mount_root)?),
    ]);
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
    let mut env = Vec::new();
    if grants.has(effects::ENVIRONMENT_READ) {
        for (k, v) in &grants.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(SandboxError::Invalid {
                    detail: format!("invalid environment variable {k:?}"),
                });
            }
            args.push("-e".into());
            args.push(k.clone());
            env.push((k.clone(), v.clone()));
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
        env,
        container_name: container_name.to_string(),
        uses_shim,
        manifest_required: uses_shim && protocol::manifest_required(kind, &module.host_path),
    })
}

/// RLIMIT_NPROC for the container: no stricter than the host allows this user (its own hard
/// limit, and `pid_max`, which no uid can exceed anyway). It is counted per uid across every
/// container running as 65534, so it cannot be the per-container limit (`--pids-limit` is);
/// it is explicit only because podman otherwise asks for 4194304, which some hosts refuse even
/// to root.
fn nproc_ceiling() -> u64 {
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(32768);
    sys::nproc_hard_limit().map_or(pid_max, |hard| hard.min(pid_max))
}

fn cpu_seconds(limits: &Limits<ProcessLimits>) -> u64 {
    limits.boundary.cpu_time.as_secs_f64().ceil().max(1.0) as u64
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

/// The guest runs as 65534:65534, which sees the package as "other": refuse before starting a
/// container that could not even open the module.
fn check_container_access(module: &ResolvedModule, kind: ModuleKind) -> Result<(), SandboxError> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.permissions().mode())
            .map_err(|e| SandboxError::Invalid {
                detail: format!("{}: {e}", p.display()),
            })
    };
    let refuse = |p: &Path, m: u32, needs: &str| SandboxError::Invalid {
        detail: format!(
            "{} (mode {:o}) is not {needs} by the container user {CONTAINER_USER}; make the package readable by others (chmod -R o+rX {})",
            p.display(),
            m & 0o7777,
            module.mount_root.display()
        ),
    };
    let mut dir = module.mount_root.clone();
    let mut dirs = vec![dir.clone()];
    if let Some(parent) = module.relative.parent() {
        for c in parent.components() {
            dir.push(c);
            dirs.push(dir.clone());
        }
    }
    for d in &dirs {
        let m = mode(d)?;
        if m & 0o001 == 0 {
            return Err(refuse(d, m, "searchable"));
        }
    }
    let m = mode(&module.host_path)?;
    let (bits, needs) = match kind {
        ModuleKind::Native if module.head.starts_with(b"#!") => (0o005, "readable and executable"),
        ModuleKind::Native => (0o001, "executable"),
        _ => (0o004, "readable"),
    };
    if m & bits != bits {
        return Err(refuse(&module.host_path, m, needs));
    }
    Ok(())
}

/// How the guest's stdout ended.
enum Body {
    Complete(Vec<u8>),
    TooLong,
}

impl OciExecutor {
    /// Detects an engine ([`detect_engine`] within [`ENGINE_PROBE_TIMEOUT`]); `Unavailable`
    /// with every probe's reason when none answers.
    pub fn detect(images: OciImages) -> Result<OciExecutor, SandboxError> {
        let engine =
            detect_engine(ENGINE_PROBE_TIMEOUT).map_err(|e| SandboxError::Unavailable {
                boundary: "oci",
                reason: e.to_string(),
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

    /// The `run` arguments in this engine's dialect (see [`docker_args`]).
    pub fn args(
        &self,
        spec: &ModuleSpec,
        image: &str,
        grants: &Grants,
        limits: &Limits<ProcessLimits>,
        container_name: &str,
    ) -> Result<OciRun, SandboxError> {
        build_args(
            self.engine.is_podman(),
            spec,
            image,
            grants,
            limits,
            container_name,
        )
    }

    /// Runs one hook in a container (same protocol and handshake as the process sandbox).
    pub fn run(
        &self,
        spec: &ModuleSpec,
        invocation: &Invocation,
        grants: &Grants,
        limits: &Limits<ProcessLimits>,
    ) -> Result<Outcome, SandboxError> {
        use std::sync::atomic::AtomicU64;
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let kind = ModuleKind::of(&spec.module);
        let image = self.image_for(kind)?;
        let name = format!(
            "capability-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let run = self.args(spec, image, grants, limits, &name)?;
        check_container_access(
            &resolve_module_limited(spec, limits.boundary.max_module_bytes)?,
            kind,
        )?;
        let envelope = protocol::envelope(invocation, &spec.manifest, grants);
        let started = Instant::now();
        let mut child = Command::new(&self.engine.program)
            .args(&run.args)
            .envs(run.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| SandboxError::Spawn {
                detail: format!("{}: {e}", self.engine.program.display()),
            })?;
        let (Some(mut stdin), Some(stdout), Some(mut stderr_pipe)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            kill_tree(&mut child);
            return Err(SandboxError::Spawn {
                detail: "engine stdio unavailable".into(),
            });
        };
        let (stderr_tx, stderr_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut tail = Vec::new();
            let mut buf = [0u8; 8192];
            while let Ok(n) = stderr_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > 2 * STDERR_CAP {
                    tail.drain(..tail.len() - STDERR_CAP);
                }
            }
            if tail.len() > STDERR_CAP {
                tail.drain(..tail.len() - STDERR_CAP);
            }
            let _ = stderr_tx.send(tail);
        });
        let manifest_hash = capability_core::json::canonical_hash(&spec.manifest);
        let id = spec.id().to_string();
        let uses_shim = run.uses_shim;
        let manifest_required = run.manifest_required;
        let initial = capability_core::json::to_js_string(&envelope) + "\n";
        let max_output = limits.output_bytes;
        let max_output_len = usize::try_from(max_output).unwrap_or(usize::MAX);
        let overflow = Arc::new(AtomicBool::new(false));
        let overflow_io = Arc::clone(&overflow);
        let (io_tx, io_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let result =
                (|| -> Result<Body, SandboxError> {
                    let mut reader = BufReader::new(stdout);
                    if uses_shim {
                        let _ = stdin.write_all(initial.as_bytes());
                        let mut line = Vec::new();
                        let _ = (&mut reader)
                            .take(max_output.saturating_add(1))
                            .read_until(b'\n', &mut line);
                        let value = capability_core::json::parse(protocol::trim_ascii(&line))
                            .map_err(|e| SandboxError::ProtocolViolation {
                                detail: format!(
                                    "bad handshake ({e}): {}",
                                    protocol::preview(&line)
                                ),
                            })?;
                        if value.get("error").is_some() {
                            return Ok(Body::Complete(line));
                        }
                        protocol::check_handshake_manifest(
                            value.get("manifest").unwrap_or(&serde_json::Value::Null),
                            manifest_required,
                            &id,
                            &manifest_hash,
                        )?;
                        let _ = stdin.write_all(b"{\"proceed\":true}\n");
                        drop(stdin);
                    } else {
                        // The guest may write before it has read everything: feed it on its own.
                        std::thread::spawn(move || {
                            let _ = stdin.write_all(initial.as_bytes());
                        });
                    }
                    let mut rest = Vec::new();
                    let _ = (&mut reader)
                        .take(max_output.saturating_add(1))
                        .read_to_end(&mut rest);
                    if rest.len() > max_output_len {
                        overflow_io.store(true, Ordering::SeqCst);
                        return Ok(Body::TooLong);
                    }
                    Ok(Body::Complete(rest))
                })();
            let _ = io_tx.send(result);
        });
        let deadline = started + limits.timeout;
        let mut timed_out = false;
        let mut status = None;
        loop {
            if let Ok(Some(s)) = child.try_wait() {
                status = Some(s);
                break;
            }
            let over = overflow.load(Ordering::SeqCst);
            if over || Instant::now() >= deadline {
                timed_out = !over;
                self.remove_container(&name);
                kill_tree(&mut child);
                break;
            }
            std::thread::sleep(POLL);
        }
        // The engine client has exited (or was killed): its stdout ends with it.
        let body = io_rx
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_else(|_| {
                Err(SandboxError::ProtocolViolation {
                    detail: "the engine's stdout did not end after it exited".into(),
                })
            });
        let stderr = String::from_utf8_lossy(
            &stderr_rx
                .recv_timeout(Duration::from_secs(2))
                .unwrap_or_default(),
        )
        .into_owned();
        let mut hook_present = true;
        let result = if timed_out {
            Err(SandboxError::Timeout {
                limit: limits.timeout,
            })
        } else {
            match body {
                Err(e) => Err(e),
                Ok(Body::TooLong) => Err(SandboxError::OutputLimit { limit: max_output }),
                Ok(Body::Complete(body)) if protocol::trim_ascii(&body).is_empty() => {
                    Err(self.empty_reply(status, &stderr))
                }
                Ok(Body::Complete(body)) => match protocol::parse_response(&body) {
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
        Ok(Outcome {
            result,
            hook_present,
            boundary: self.report(kind, image, grants, limits),
            duration: started.elapsed(),
            stderr,
            fuel_consumed: None,
        })
    }

    /// What an exit without any reply means: the engine could not start the container (exit
    /// status 125 to 127 by docker's and podman's convention), or the guest died.
    fn empty_reply(&self, status: Option<ExitStatus>, stderr: &str) -> SandboxError {
        let code = status.and_then(|s| s.code());
        match code {
            Some(c @ 125..=127) => SandboxError::Unavailable {
                boundary: "oci",
                reason: format!(
                    "{} could not start the container (exit status {c}): {}",
                    self.engine.name,
                    last_line(stderr)
                ),
            },
            _ => SandboxError::Crashed {
                status: code.unwrap_or(-1),
                stderr: stderr.to_string(),
            },
        }
    }

    /// Kills and removes a container by name (after a timeout), bounded.
    fn remove_container(&self, name: &str) {
        let _ = run_bounded(
            &self.engine.program,
            &["rm", "-f", name],
            Instant::now() + CLEANUP_TIMEOUT,
            CLEANUP_TIMEOUT,
        );
    }

    fn report(
        &self,
        kind: ModuleKind,
        image: &str,
        grants: &Grants,
        limits: &Limits<ProcessLimits>,
    ) -> SandboxReport {
        let engine = self.engine.name;
        let mut notes = vec![
            format!(
                "engine {engine} {} ({}), image {image}",
                self.engine.server_version,
                self.engine.program.display()
            ),
            format!(
                "the engine's default seccomp profile applies; the container runs as {CONTAINER_USER} with no capabilities, no new privileges and a read-only root"
            ),
            "process creation is limited by --pids-limit, not refused".into(),
        ];
        if self.engine.is_podman()
            && let Some(conf) = std::env::var_os("CONTAINERS_CONF")
        {
            notes.push(format!("CONTAINERS_CONF={}", conf.to_string_lossy()));
        }
        SandboxReport {
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
            read_paths: grants
                .read_paths
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            write_paths: grants
                .write_paths
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
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
                AppliedLimit::new("wallTimeoutMs", limits.timeout.as_millis() as u64, "timer"),
                AppliedLimit::new("cpuTimeMs", cpu_seconds(limits) * 1000, engine),
                AppliedLimit::new("memoryBytes", limits.memory_bytes, engine),
                AppliedLimit::new("maxPids", limits.boundary.max_pids as u64, engine),
                AppliedLimit::new("maxOpenFiles", limits.boundary.max_open_files, engine),
                AppliedLimit::new("maxFileSize", limits.boundary.max_file_size, engine),
                AppliedLimit::new("tmpSize", limits.tmp_bytes, engine),
                AppliedLimit::new("maxOutputBytes", limits.output_bytes, "host"),
                AppliedLimit::new("maxModuleBytes", limits.boundary.max_module_bytes, "host"),
            ],
            notes,
        }
    }
}
