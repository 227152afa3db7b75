//! The Linux process sandbox: policy (what the boundary opens) on top of `linux::spawn`.

use std::ffi::CString;
use std::os::fd::AsRawFd as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use capability_exec::{Grants, GuestError, Invocation, Limits, SandboxReport, effects};

use crate::error::{InterpreterError, LandlockUnavailable, SandboxError};
use crate::linux::cleanup::{self, Leftover};
use crate::linux::host::{self, CgroupError, CgroupInfo, CgroupParent, Interpreter, RunCgroup};
use crate::linux::landlock::LandlockPlan;
use crate::linux::seccomp;
use crate::linux::spawn::{self, ChildPlan, End, Exchange};
use crate::linux::sys;
use crate::package::{ResolvedModule, resolve_module_limited};
use crate::plan::{CgroupFacts, LimitPlan, SandboxPlan, cstring, path_cstring};
use crate::protect;
use crate::protocol::{self, Response};
use crate::types::{ModuleKind, ModuleSpec, Outcome, ProcessLimits};

const NODE_SHIM: &str = include_str!("shims/node.mjs");
const PYTHON_SHIM: &str = include_str!("shims/python.py");

/// Where the package (or install root) appears inside the sandbox.
pub const PACKAGE_MOUNT: &str = "/package";
/// The uid and gid the guest has inside its user namespace: mapped to host `nobody` (65534)
/// when the host runs as root, else to the host user.
pub const SANDBOX_UID: u32 = 1000;

/// Host-side configuration of the process sandbox.
#[derive(Clone, Debug, Default)]
pub struct SandboxConfig {
    /// The node binary; default: `node` on PATH.
    pub node: Option<PathBuf>,
    /// The python3 binary; default: `python3` on PATH (wrappers such as pyenv shims are
    /// resolved to the real interpreter).
    pub python: Option<PathBuf>,
    /// A delegated cgroup v2 directory (with `pids` and `memory` in its subtree_control) under
    /// which each run gets its own cgroup; default: this process's own cgroup when it
    /// qualifies.
    pub cgroup_parent: Option<PathBuf>,
    /// Do not use cgroups even when available.
    pub disable_cgroup: bool,
    /// Directory for the per-run mount points (default: the system temp dir). Nothing is
    /// written there except one empty directory per run (`.capability-sandbox-<pid>-<n>`),
    /// removed before the run's result is returned; a sandbox's first start removes those
    /// that dead processes left.
    pub scratch_dir: Option<PathBuf>,
    /// Host paths the guest must never see, in addition to the capability home (always
    /// protected, resolved like `capability-runtime`'s `home.rs`: `$CAP_HOME`, else
    /// `$XDG_DATA_HOME/capability`, else `$HOME/.local/share/capability`, else
    /// `./.capability`) and the paths given to [`crate::protect_host_path`]. A mount that
    /// would expose one is masked (read-only mounts of an existing path) or refused.
    pub protected: Vec<PathBuf>,
}

/// The process sandbox executor. Cheap to share; host facts are probed once.
#[derive(Debug, Default)]
pub struct ProcessSandbox {
    config: SandboxConfig,
    node: OnceLock<Result<Interpreter, InterpreterError>>,
    python: OnceLock<Result<Interpreter, InterpreterError>>,
    landlock: OnceLock<Result<u32, LandlockUnavailable>>,
    cgroup: OnceLock<Result<CgroupParent, CgroupError>>,
    /// Set once the leftovers of dead processes were removed (before the first sandbox).
    swept: OnceLock<()>,
    /// Sandboxes started by this instance.
    starts: std::sync::atomic::AtomicU64,
}

/// What the host sends first, and for a session, who answers its responses.
struct Opening<'a> {
    initial: Vec<u8>,
    /// A pre-started session's wait for its first request (`initial` is then empty).
    first: Option<spawn::FirstFn<'a>>,
    on_reply: Option<&'a mut dyn FnMut(SessionReply) -> spawn::Next>,
}

/// One response of a session, handed to the session's callback.
pub(crate) struct SessionReply {
    /// The op's result, as a one-shot run would report it.
    pub outcome: Outcome,
    /// The hooks the module exports, as the shim's handshake listed them.
    pub hooks: Option<Vec<String>>,
}

/// The label of a node run: the version the shim reported in its handshake (`process.version`,
/// read before the module loads), when it reported a plausible one.
fn node_label(version: Option<&str>, path: &Path) -> String {
    let plausible = |v: &str| {
        v.len() <= 40
            && v.starts_with('v')
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+'))
    };
    match version.filter(|v| plausible(v)) {
        Some(v) => format!("node {v} ({})", path.display()),
        None => format!("node, version not reported ({})", path.display()),
    }
}

/// What a run executes, once resolved.
pub(crate) struct Target {
    pub kind: ModuleKind,
    pub program_label: String,
    /// Node: the interpreter's path, for the label once the shim's handshake has reported the
    /// version (the host never runs node outside the sandbox to ask).
    pub reported_runtime: Option<PathBuf>,
    pub argv: Vec<Vec<u8>>,
    pub extra_roots: Vec<PathBuf>,
    /// Files the guest must be able to `execve` (inside paths == host paths, or /package/...).
    pub exec_files: Vec<PathBuf>,
}

impl ProcessSandbox {
    pub fn new(config: SandboxConfig) -> Self {
        ProcessSandbox {
            config,
            ..ProcessSandbox::default()
        }
    }

    /// A process-wide instance with the default configuration.
    pub fn global() -> &'static ProcessSandbox {
        static GLOBAL: OnceLock<ProcessSandbox> = OnceLock::new();
        GLOBAL.get_or_init(|| ProcessSandbox::new(SandboxConfig::default()))
    }

    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// The node interpreter, or why there is none.
    pub fn node(&self) -> Result<&Interpreter, InterpreterError> {
        self.node
            .get_or_init(|| host::find_node(self.config.node.as_deref()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The python interpreter, or why there is none.
    pub fn python(&self) -> Result<&Interpreter, InterpreterError> {
        self.python
            .get_or_init(|| host::find_python(self.config.python.as_deref()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The landlock ABI, or why landlock is unavailable.
    pub fn landlock_abi(&self) -> Result<u32, LandlockUnavailable> {
        self.landlock
            .get_or_init(|| sys::landlock_abi().map_err(LandlockUnavailable::new))
            .clone()
    }

    /// Where per-run cgroups are made, or why none is used: a delegated cgroup v2 directory
    /// (pids + memory), else writable cgroup v1 `pids` and/or `memory` groups.
    pub(crate) fn cgroup_parent(&self) -> Result<CgroupParent, CgroupError> {
        if self.config.disable_cgroup {
            return Err(CgroupError::Disabled);
        }
        self.cgroup
            .get_or_init(|| {
                match CgroupInfo::detect().usable_parent(self.config.cgroup_parent.as_deref()) {
                    Ok(p) => Ok(CgroupParent::V2(p)),
                    Err(v2) => {
                        match (
                            host::v1_controller_dir("pids"),
                            host::v1_controller_dir("memory"),
                        ) {
                            (Err(pids), Err(memory)) => Err(CgroupError::Unavailable {
                                v2: Box::new(v2),
                                pids: Box::new(pids),
                                memory: Box::new(memory),
                            }),
                            (pids, memory) => Ok(CgroupParent::V1 {
                                pids: pids.ok(),
                                memory: memory.ok(),
                            }),
                        }
                    }
                }
            })
            .clone()
    }

    /// A one-line description of the cgroup situation (for `doctor`).
    pub fn cgroup_summary(&self) -> String {
        match self.cgroup_parent() {
            Ok(CgroupParent::V2(p)) => format!("v2 pids+memory under {}", p.display()),
            Ok(CgroupParent::V1 { pids, memory }) => {
                let show = |p: &Option<PathBuf>| {
                    p.as_ref()
                        .map_or("unavailable".to_string(), |p| p.display().to_string())
                };
                format!(
                    "v1 pids under {}, memory under {}{}",
                    show(&pids),
                    show(&memory),
                    if memory.is_none() {
                        " (memory by rlimit)"
                    } else {
                        ""
                    }
                )
            }
            Err(e) => format!("unavailable: {e}"),
        }
    }

    /// Runs one hook of a module-backed capability behind the process boundary.
    pub fn run(
        &self,
        spec: &ModuleSpec,
        invocation: &Invocation,
        grants: &Grants,
        limits: &Limits<ProcessLimits>,
    ) -> Result<Outcome, SandboxError> {
        let kind = ModuleKind::of(&spec.module);
        if kind == ModuleKind::Wasm {
            return Err(SandboxError::UseWasmExecutor {
                module: spec.module.clone(),
            });
        }
        check_limits(limits)?;
        let module = resolve_module_limited(spec, limits.boundary.max_module_bytes)?;
        let inside_module = Path::new(PACKAGE_MOUNT).join(&module.relative);
        let target = self.target(kind, spec, &module, &inside_module, limits)?;
        let envelope = protocol::envelope(invocation, &spec.manifest, grants);
        let mut initial = capability_core::json::to_js_string(&envelope).into_bytes();
        initial.push(b'\n');
        self.execute(
            target,
            &module,
            Opening {
                initial,
                first: None,
                on_reply: None,
            },
            spec,
            grants,
            limits,
        )
    }

    /// How many sandboxes this instance has started (each run, and each session, is one).
    pub fn starts(&self) -> u64 {
        self.starts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Starts one sandbox for a session of several hooks (see [`crate::Session`]): the guest
    /// starts and waits; `first` yields the first request (its envelope from
    /// [`ProcessSandbox::session_opening`]) whenever it comes, and every later one is
    /// answered in the same process, with the same grants and limits. Only the node and
    /// python shims speak sessions; a native module is started the same way but answers its
    /// one request and exits (its program starts up and waits on stdin).
    pub(crate) fn run_session(
        &self,
        spec: &ModuleSpec,
        grants: &Grants,
        limits: &Limits<ProcessLimits>,
        first: spawn::FirstFn<'_>,
        on_reply: &mut dyn FnMut(SessionReply) -> spawn::Next,
    ) -> Result<Outcome, SandboxError> {
        let kind = ModuleKind::of(&spec.module);
        if !matches!(
            kind,
            ModuleKind::Node | ModuleKind::Python | ModuleKind::Native
        ) {
            return Err(SandboxError::Invalid {
                detail: format!(
                    "{}: only node, python and native modules are pre-started",
                    spec.module
                ),
            });
        }
        check_limits(limits)?;
        let module = resolve_module_limited(spec, limits.boundary.max_module_bytes)?;
        let inside_module = Path::new(PACKAGE_MOUNT).join(&module.relative);
        let target = self.target(kind, spec, &module, &inside_module, limits)?;
        let opening = Opening {
            initial: Vec::new(),
            first: Some(first),
            on_reply: Some(on_reply),
        };
        self.execute(target, &module, opening, spec, grants, limits)
    }

    /// The envelope of a session's first request (it says `"session": true`).
    pub(crate) fn session_opening(
        spec: &ModuleSpec,
        invocation: &Invocation,
        grants: &Grants,
    ) -> Vec<u8> {
        let mut envelope = protocol::envelope(invocation, &spec.manifest, grants);
        if let Value::Object(m) = &mut envelope {
            m.insert("session".into(), Value::Bool(true));
        }
        let mut bytes = capability_core::json::to_js_string(&envelope).into_bytes();
        bytes.push(b'\n');
        bytes
    }

    /// The envelope of a later request in a session.
    pub(crate) fn session_request(
        spec: &ModuleSpec,
        invocation: &Invocation,
        grants: &Grants,
    ) -> Vec<u8> {
        let envelope = protocol::envelope(invocation, &spec.manifest, grants);
        let mut bytes = capability_core::json::to_js_string(&envelope).into_bytes();
        bytes.push(b'\n');
        bytes
    }

    fn target(
        &self,
        kind: ModuleKind,
        spec: &ModuleSpec,
        module: &ResolvedModule,
        inside_module: &Path,
        limits: &Limits<ProcessLimits>,
    ) -> Result<Target, SandboxError> {
        let unavailable = |reason: InterpreterError| SandboxError::Unavailable {
            boundary: "process-sandbox",
            reason: reason.to_string(),
        };
        let module_arg = inside_module.as_os_str().as_bytes().to_vec();
        match kind {
            ModuleKind::Node => {
                let node = self.node().map_err(unavailable)?;
                let heap_mb = (limits.memory_bytes / (1 << 20) / 2).max(16);
                Ok(Target {
                    kind,
                    program_label: node_label(None, &node.path),
                    reported_runtime: Some(node.path.clone()),
                    argv: vec![
                        node.path.as_os_str().as_bytes().to_vec(),
                        format!("--max-old-space-size={heap_mb}").into_bytes(),
                        b"--input-type=module".to_vec(),
                        b"-e".to_vec(),
                        NODE_SHIM.as_bytes().to_vec(),
                        b"--".to_vec(),
                        module_arg,
                    ],
                    extra_roots: node.extra_roots.clone(),
                    exec_files: vec![node.path.clone()],
                })
            }
            ModuleKind::Python => {
                let py = self.python().map_err(unavailable)?;
                Ok(Target {
                    kind,
                    program_label: format!(
                        "{} ({})",
                        py.version.as_deref().unwrap_or("python"),
                        py.path.display()
                    ),
                    reported_runtime: None,
                    argv: vec![
                        py.path.as_os_str().as_bytes().to_vec(),
                        b"-I".to_vec(),
                        b"-S".to_vec(),
                        b"-B".to_vec(),
                        b"-c".to_vec(),
                        PYTHON_SHIM.as_bytes().to_vec(),
                        module_arg,
                    ],
                    extra_roots: py.extra_roots.clone(),
                    exec_files: vec![py.path.clone()],
                })
            }
            ModuleKind::Native | ModuleKind::Wasm => {
                if !module.executable {
                    return Err(SandboxError::NotACapability {
                        module: spec.module.clone(),
                        detail: "a native module must be an executable file".into(),
                    });
                }
                let mut exec_files = vec![inside_module.to_path_buf()];
                if let Some(interp) = host::shebang(&module.head) {
                    exec_files.push(interp);
                }
                Ok(Target {
                    kind: ModuleKind::Native,
                    program_label: format!("native {} (sha256 {})", spec.module, module.sha256),
                    reported_runtime: None,
                    argv: vec![module_arg],
                    extra_roots: Vec::new(),
                    exec_files,
                })
            }
        }
    }

    /// Everything a sandbox needs before it starts, in stages: what it opens
    /// ([`SandboxPlan`]: the new root, landlock, namespaces, environment — decided without
    /// creating anything), the run's cgroup and its limits ([`LimitPlan`]), then the plans
    /// applied: the mount point, the child's plan (maps, mounts, rlimits, landlock, seccomp)
    /// and the report. `long_lived` (a child program rather than one hook run) drops
    /// RLIMIT_CPU and the run-only limits (wall clock, output, module size) from the plan and
    /// the report.
    pub(crate) fn prepare(
        &self,
        target: &Target,
        contents: Contents<'_>,
        grants: &Grants,
        limits: &Limits<ProcessLimits>,
        long_lived: bool,
    ) -> Result<Prepared, SandboxError> {
        let plan = SandboxPlan::new(
            target,
            contents,
            grants,
            limits,
            protect::protected_paths(&self.config.protected),
        )?;
        // SAFETY: geteuid/getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let identity = GuestIdentity::for_host(uid);
        let landlock_abi = self.landlock_abi();
        let mut notes: Vec<String> = Vec::new();
        if identity.maps_by_host {
            notes.push(format!(
                "the guest runs as host uid {HOST_NOBODY} (nobody), not as the host's root: host \
                 permissions apply to granted paths, and what nobody cannot read fails with EACCES"
            ));
        }
        if let Err(e) = &landlock_abi {
            notes.push(format!("landlock unavailable: {e}"));
        }
        notes.extend(plan.notes.iter().cloned());
        self.sweep_leftovers();
        let cgroup = self.run_cgroup(limits, &mut notes);
        let facts = cgroup.as_ref().map(|cg| CgroupFacts {
            version: cg.version,
            pids: cg.pids_dir.is_some(),
            memory: cg.memory,
        });
        let limit_plan = LimitPlan::new(
            limits,
            facts,
            target.kind,
            plan.spawn,
            identity.host_uid(uid),
            long_lived,
        );
        if let Some(w) = limit_plan.pids_watchdog {
            notes.push(format!("pid watchdog active (limit {w})"));
        }
        notes.extend(plan.root.mask_notes.iter().cloned());

        let scratch = MountDir::create(self.config.scratch_dir.as_deref())?;
        let (namespaces, flags) = plan.namespaces();
        let seccomp_policy = seccomp::Policy {
            spawn: plan.spawn,
            memfd: limit_plan.memory_cgroup,
            network: plan.network,
        };
        let child = ChildPlan {
            uid_map: identity.uid_map(uid),
            gid_map: identity.gid_map(gid),
            maps_by_host: identity.maps_by_host,
            fallback_maps: identity.maps_by_host.then(|| {
                (
                    format!("{SANDBOX_UID} {uid} 1\n").into_bytes(),
                    format!("{SANDBOX_UID} {gid} 1\n").into_bytes(),
                )
            }),
            guest_ids: identity.guest_ids,
            new_root: path_cstring(&scratch.path)?,
            mounts: plan.root.mount_ops(&scratch.path)?,
            scrub: host::scrub_ranges().to_vec(),
            pids_watchdog: limit_plan.pids_watchdog,
            workdir: c"/tmp".to_owned(),
            rlimits: limit_plan.rlimits,
            landlock: landlock_abi.as_ref().ok().map(|&abi| {
                let mut ll = LandlockPlan::new(abi, plan.network);
                for rule in &plan.access {
                    ll.allow(&rule.path, rule.rights, rule.is_dir);
                }
                ll
            }),
            seccomp: Some(seccomp::build_filter(&seccomp_policy)),
            exec_once: seccomp_policy.exec_once(),
            exec: cstring(target.argv[0].clone())?,
            argv: target
                .argv
                .iter()
                .map(|a| cstring(a.clone()))
                .collect::<Result<_, _>>()?,
            envp: plan
                .env
                .iter()
                .map(|(k, v)| cstring(format!("{k}={v}").into_bytes()))
                .collect::<Result<_, _>>()?,
            cgroup_procs_fds: cgroup
                .as_ref()
                .map(|c| c.procs_fds.iter().map(|f| f.as_raw_fd()).collect())
                .unwrap_or_default(),
            sysctls: sysctls(limit_plan.memory_cgroup, limits)?,
        };

        let report = SandboxReport {
            kind: "process-sandbox",
            runner: target.kind.as_str(),
            program: target.program_label.clone(),
            namespaces,
            landlock: match &landlock_abi {
                Ok(abi) => format!("abi-{abi}"),
                Err(_) => "unavailable".into(),
            },
            seccomp: true,
            network: if plan.network { "host" } else { "none" },
            process_spawn: plan.spawn,
            read_paths: plan.read_paths,
            write_paths: plan.write_paths,
            environment: plan.env.into_iter().map(|(k, _)| k).collect(),
            secrets: if grants.has(effects::SECRETS_READ) {
                grants.secrets.keys().cloned().collect()
            } else {
                Vec::new()
            },
            cgroup: limit_plan.cgroup_label,
            limits: limit_plan.applied,
            notes,
        };

        Ok(Prepared {
            plan: child,
            flags,
            cgroup,
            scratch,
            report,
            uid,
        })
    }

    /// Once, before this instance's first sandbox: removes the scratch directories and
    /// per-run cgroups that runs of dead processes left where this instance makes its own (a
    /// host that crashed or was killed had no chance to). Objects of live processes, this
    /// one's included, are kept.
    fn sweep_leftovers(&self) {
        self.swept.get_or_init(|| {
            cleanup::sweep(
                &scratch_base(self.config.scratch_dir.as_deref()),
                Leftover::Scratch,
            );
            let parents = match self.cgroup_parent() {
                Ok(CgroupParent::V2(p)) => vec![p],
                Ok(CgroupParent::V1 { pids, memory }) => pids.into_iter().chain(memory).collect(),
                Err(_) => Vec::new(),
            };
            for parent in parents {
                cleanup::sweep(&parent, Leftover::Cgroup);
            }
        });
    }

    /// The run's own cgroup, created under the parent with the memory and pids limits, or
    /// none (with a note saying why).
    fn run_cgroup(
        &self,
        limits: &Limits<ProcessLimits>,
        notes: &mut Vec<String>,
    ) -> Option<RunCgroup> {
        let created = self.cgroup_parent().and_then(|parent| {
            RunCgroup::create(&parent, limits.memory_bytes, limits.boundary.max_pids)
        });
        match created {
            Ok(cg) => Some(cg),
            Err(e) => {
                notes.push(format!("cgroup not used: {e}"));
                None
            }
        }
    }

    fn execute(
        &self,
        target: Target,
        module: &ResolvedModule,
        opening: Opening<'_>,
        spec: &ModuleSpec,
        grants: &Grants,
        limits: &Limits<ProcessLimits>,
    ) -> Result<Outcome, SandboxError> {
        let Opening {
            initial,
            mut first,
            mut on_reply,
        } = opening;
        let pre_started = first.is_some();
        protect::refuse_whole_home(&module.mount_root, "the package root")?;
        let mut prepared =
            self.prepare(&target, Contents::Package(module), grants, limits, false)?;
        let start = Instant::now();
        let child = self.start(&mut prepared)?;
        let Prepared {
            scratch,
            mut report,
            cgroup,
            ..
        } = prepared;
        let mut hello_error: Option<SandboxError> = None;
        let manifest_hash = capability_core::json::canonical_hash(&spec.manifest);
        let manifest_required = protocol::manifest_required(target.kind, &module.host_path);
        let id = spec.id().to_string();
        let module_name = spec.module.clone();
        let hooks: std::cell::RefCell<Option<Vec<String>>> = std::cell::RefCell::new(None);
        // The program label with the version the shim reported (node), once it has.
        let program: std::cell::RefCell<String> = std::cell::RefCell::new(report.program.clone());
        let mut hello = |line: &[u8]| -> Result<Vec<u8>, SandboxError> {
            let value = capability_core::json::parse(protocol::trim_ascii(line)).map_err(|e| {
                SandboxError::ProtocolViolation {
                    detail: format!(
                        "bad handshake from the shim ({e}): {}",
                        protocol::preview(line)
                    ),
                }
            })?;
            if let Some(path) = &target.reported_runtime {
                let version = value.get("runtime").and_then(Value::as_str);
                *program.borrow_mut() = node_label(version, path);
            }
            if value.get("error").is_some() {
                match protocol::response_from_value(value)? {
                    Response::Error(g) => {
                        hello_error = Some(guest_failure(g, &module_name, limits))
                    }
                    Response::Output { .. } => {}
                }
                return Ok(Vec::new());
            }
            match value.get("manifest") {
                Some(loaded) => protocol::check_handshake_manifest(
                    loaded,
                    manifest_required,
                    &id,
                    &manifest_hash,
                )?,
                None => {
                    return Err(SandboxError::ProtocolViolation {
                        detail: format!(
                            "the shim's handshake has no manifest: {}",
                            protocol::preview(line)
                        ),
                    });
                }
            }
            // The hooks the module exports: a hint for skipping ops it has no hook for.
            if let Some(Value::Array(names)) = value.get("hooks") {
                *hooks.borrow_mut() = Some(
                    names
                        .iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect(),
                );
            }
            Ok(b"{\"proceed\":true}\n".to_vec())
        };
        let uses_shim = matches!(target.kind, ModuleKind::Node | ModuleKind::Python);
        let session = uses_shim && on_reply.is_some();
        let session_report = report.clone();
        let module_for_reply = spec.module.clone();
        // An op's time runs from its request (a pre-started session's first request may come
        // long after the start).
        let op_started = std::cell::Cell::new(Instant::now());
        let mut first_request = |wait: Duration| -> Option<spawn::Next> {
            let next = first.as_mut()?(wait);
            op_started.set(Instant::now());
            next
        };
        let mut reply = |line: &[u8], stderr: &[u8]| -> spawn::Next {
            let Some(on_reply) = on_reply.as_mut() else {
                return spawn::Next::Close;
            };
            let mut hook_present = true;
            let result = match protocol::parse_response(line) {
                Ok(Response::Output {
                    output,
                    hook_present: present,
                }) => {
                    hook_present = present;
                    Ok(output)
                }
                Ok(Response::Error(g)) => Err(guest_failure(g, &module_for_reply, limits)),
                Err(e) => Err(e),
            };
            let mut boundary = session_report.clone();
            boundary.program.clone_from(&program.borrow());
            let outcome = Outcome {
                result,
                hook_present,
                boundary,
                duration: op_started.get().elapsed(),
                stderr: String::from_utf8_lossy(stderr).into_owned(),
                fuel_consumed: None,
            };
            let next = on_reply(SessionReply {
                outcome,
                hooks: hooks.borrow().clone(),
            });
            op_started.set(Instant::now());
            next
        };
        let finished = child.converse(Exchange {
            initial,
            first: if pre_started {
                Some(&mut first_request)
            } else {
                None
            },
            hello: if uses_shim { Some(&mut hello) } else { None },
            reply: if session { Some(&mut reply) } else { None },
            deadline: start + limits.timeout,
            max_output: usize::try_from(limits.output_bytes).unwrap_or(usize::MAX),
        });
        drop(scratch);
        report.program = program.into_inner();
        for note in &finished.notes {
            report.notes.push(format!(
                "{} not available: {}",
                note.stage_name(),
                sys::errno_name(note.errno)
            ));
        }
        let stderr = String::from_utf8_lossy(&finished.stderr).into_owned();
        let mut hook_present = true;
        let mut result = classify(
            &finished,
            hello_error,
            cgroup.as_ref(),
            limits,
            &spec.module,
            &stderr,
            &mut hook_present,
        );
        // A failure after the cgroup refused a fork is the pid limit's doing.
        if let Err(e) = &result {
            let fork_refused = match e {
                SandboxError::Guest(g) => g.code.as_deref() == Some("EAGAIN"),
                SandboxError::Killed { .. }
                | SandboxError::Crashed { .. }
                | SandboxError::ProtocolViolation { .. } => true,
                _ => false,
            };
            if fork_refused && cgroup.as_ref().is_some_and(RunCgroup::pids_max_hit) {
                result = Err(SandboxError::PidLimit {
                    limit: limits.boundary.max_pids,
                });
            }
        }
        drop(cgroup);
        Ok(Outcome {
            result,
            hook_present,
            boundary: report,
            // A pre-started guest's time runs from its request.
            duration: if pre_started {
                op_started.get().elapsed()
            } else {
                finished.elapsed
            },
            stderr,
            fuel_consumed: None,
        })
    }

    /// Starts a prepared sandbox (counted in [`ProcessSandbox::starts`]).
    pub(crate) fn start(&self, prepared: &mut Prepared) -> Result<spawn::Sandboxed, SandboxError> {
        self.count_start();
        prepared.spawn()
    }

    /// Counts one more sandbox started by this instance.
    pub(crate) fn count_start(&self) {
        self.starts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Prepared {
    /// Starts the sandbox. The init dies with the thread that calls this
    /// (`PR_SET_PDEATHSIG`), and the whole sandbox with it.
    pub(crate) fn spawn(&mut self) -> Result<spawn::Sandboxed, SandboxError> {
        let child = spawn::spawn(
            &self.plan,
            self.flags,
            self.cgroup
                .as_ref()
                .and_then(|c| c.dir_fd.as_ref())
                .map(|f| f.as_raw_fd()),
        )?;
        let uid = self.uid;
        if let Some(why) = &child.maps_fallback {
            self.report
                .notes
                .retain(|n| !n.starts_with("the guest runs as host uid"));
            self.report.notes.push(format!(
                "the host could not map the guest to nobody ({why}): the guest has the host \
                 user's permissions (uid {uid}) on granted paths"
            ));
        }
        Ok(child)
    }
}

/// What a sandbox holds besides the system directories: a module's package, or a child
/// program's code and environment.
#[derive(Clone, Copy)]
pub(crate) enum Contents<'a> {
    /// The package, read-only at [`PACKAGE_MOUNT`].
    Package(&'a ResolvedModule),
    /// Code directories (or files), read-only at their host paths; the exact environment.
    Code {
        roots: &'a [PathBuf],
        env: &'a [(String, String)],
    },
}

/// A sandbox ready to start (see `ProcessSandbox::prepare`).
pub(crate) struct Prepared {
    pub plan: ChildPlan,
    pub flags: u64,
    pub cgroup: Option<RunCgroup>,
    /// The mount point of the new root; removed when dropped, after the sandbox ended.
    pub scratch: MountDir,
    pub report: SandboxReport,
    /// The host's effective uid.
    pub uid: u32,
}

/// Who the guest is on the host.
struct GuestIdentity {
    /// A root host writes the maps itself, mapping the guest to [`HOST_NOBODY`].
    maps_by_host: bool,
    /// The inside ids the guest switches to (the init stays inside-root).
    guest_ids: Option<(u32, u32)>,
}

impl GuestIdentity {
    fn for_host(uid: u32) -> GuestIdentity {
        if uid == 0 {
            GuestIdentity {
                maps_by_host: true,
                guest_ids: Some((SANDBOX_UID, SANDBOX_UID)),
            }
        } else {
            GuestIdentity {
                maps_by_host: false,
                guest_ids: None,
            }
        }
    }

    /// The host uid the guest's files and processes belong to.
    fn host_uid(&self, uid: u32) -> u32 {
        if self.maps_by_host { HOST_NOBODY } else { uid }
    }

    /// Inside root is the host's root (the init only, which builds the mounts with the host's
    /// permissions); the guest's uid is nobody. Unprivileged: the guest is the host user.
    fn uid_map(&self, uid: u32) -> Vec<u8> {
        if self.maps_by_host {
            format!("0 {uid} 1\n{SANDBOX_UID} {HOST_NOBODY} 1\n").into_bytes()
        } else {
            format!("{SANDBOX_UID} {uid} 1\n").into_bytes()
        }
    }

    fn gid_map(&self, gid: u32) -> Vec<u8> {
        if self.maps_by_host {
            format!("0 {gid} 1\n{SANDBOX_UID} {HOST_NOBODY} 1\n").into_bytes()
        } else {
            format!("{SANDBOX_UID} {gid} 1\n").into_bytes()
        }
    }
}

/// Sysctls of the sandbox's own namespaces, all best effort (the init may write them only when
/// it is root inside, i.e. on a root host). IPC: SysV limits (with a memory cgroup, segments
/// capped at the limit, which the cgroup counts anyway; without one, zero, on top of the
/// seccomp filter that refuses `shmget`/`msgget`/`semget` then). Pid: `vm.memfd_noexec` = 2,
/// so that no memfd can be executed (kernel 6.3+; without `process.spawn` no exec is possible
/// anyway).
fn sysctls(
    memory_cgroup: bool,
    limits: &Limits<ProcessLimits>,
) -> Result<Vec<(CString, Vec<u8>, bool)>, SandboxError> {
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|&p| p > 0)
        .unwrap_or(4096);
    let values: Vec<(&str, u64)> = if memory_cgroup {
        vec![
            ("shmmax", limits.memory_bytes),
            ("shmall", limits.memory_bytes.div_ceil(page)),
        ]
    } else {
        vec![("shmmni", 0), ("shmall", 0), ("shmmax", 0), ("msgmni", 0)]
    };
    let mut out = values
        .into_iter()
        .map(|(name, v)| {
            Ok((
                cstring(format!("/proc/sys/kernel/{name}").into_bytes())?,
                v.to_string().into_bytes(),
                false,
            ))
        })
        .collect::<Result<Vec<_>, SandboxError>>()?;
    out.push((
        c"/proc/sys/vm/memfd_noexec".to_owned(),
        b"2".to_vec(),
        false,
    ));
    Ok(out)
}

pub(crate) fn check_limits(limits: &Limits<ProcessLimits>) -> Result<(), SandboxError> {
    let bad = |what: &str| {
        Err(SandboxError::Invalid {
            detail: format!("limit {what} must be positive"),
        })
    };
    if limits.timeout.is_zero() {
        return bad("timeout");
    }
    if limits.boundary.cpu_time.is_zero() {
        return bad("cpu_time");
    }
    if limits.memory_bytes == 0 {
        return bad("memory_bytes");
    }
    if limits.boundary.max_pids == 0 {
        return bad("max_pids");
    }
    if limits.boundary.max_open_files < 16 {
        return Err(SandboxError::Invalid {
            detail: "limit max_open_files must be at least 16".into(),
        });
    }
    if limits.tmp_bytes == 0 {
        return bad("tmp_bytes");
    }
    if limits.boundary.max_module_bytes == 0 {
        return bad("max_module_bytes");
    }
    Ok(())
}

/// The empty host directory the new root is mounted on (in the child's namespace only),
/// named for this process (`.capability-sandbox-<pid>-<n>`, see `linux::cleanup`).
pub(crate) struct MountDir {
    path: PathBuf,
    /// Removed at process exit if the run is still in flight then.
    _live: cleanup::Live,
}

impl MountDir {
    fn create(base: Option<&Path>) -> Result<MountDir, SandboxError> {
        use std::os::unix::fs::DirBuilderExt as _;
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let base = scratch_base(base);
        for _ in 0..100 {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = base.join(cleanup::run_name(
                cleanup::SCRATCH_PREFIX,
                std::process::id(),
                n,
            ));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    let live = cleanup::Live::scratch(&path);
                    return Ok(MountDir { path, _live: live });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(SandboxError::io(
                        format!("mount point in {}", base.display()),
                        e,
                    ));
                }
            }
        }
        Err(SandboxError::Spawn {
            detail: "could not create a mount point directory".into(),
        })
    }
}

impl Drop for MountDir {
    /// Removes the directory before the run's result is returned (detaching whatever is
    /// mounted on it in this namespace, which should be nothing).
    fn drop(&mut self) {
        let _ = cleanup::remove_scratch(&self.path);
    }
}

/// Where the per-run mount points are made: the configured directory, else the temp dir.
fn scratch_base(configured: Option<&Path>) -> PathBuf {
    configured
        .map(Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir)
}

/// The host uid (and gid) a root host's guest runs as: `nobody`. Host permissions then apply
/// to everything the guest touches, as they would for an unprivileged user.
const HOST_NOBODY: u32 = 65534;

/// Markers that the guest died of memory exhaustion.
const OOM_MARKERS: &[&str] = &[
    "out of memory",
    "allocation failed",
    "cannot allocate memory",
    "memoryerror",
    "bad_alloc",
    "heap limit",
];

fn looks_like_oom(stderr: &str) -> bool {
    let lower = stderr.to_ascii_lowercase();
    OOM_MARKERS.iter().any(|m| lower.contains(m))
}

fn guest_failure(g: GuestError, module: &str, limits: &Limits<ProcessLimits>) -> SandboxError {
    match g.code.as_deref() {
        Some("ENOMEM") => SandboxError::MemoryLimit {
            limit: limits.memory_bytes,
            detail: format!("the guest reported an allocation failure: {}", g.message),
        },
        Some("NOT_A_CAPABILITY") => SandboxError::NotACapability {
            module: module.to_string(),
            detail: g.message,
        },
        Some("PROTOCOL") => SandboxError::ProtocolViolation { detail: g.message },
        _ => SandboxError::Guest(g),
    }
}

fn classify(
    finished: &spawn::Finished,
    hello_error: Option<SandboxError>,
    cgroup: Option<&RunCgroup>,
    limits: &Limits<ProcessLimits>,
    module: &str,
    stderr: &str,
    hook_present: &mut bool,
) -> Result<Value, SandboxError> {
    let oom_cgroup = cgroup.is_some_and(RunCgroup::oom_killed);
    let memory_hit = cgroup.is_some_and(RunCgroup::memory_limit_hit);
    let pids_cgroup = cgroup.is_some_and(RunCgroup::pids_max_hit);
    let rec = match &finished.end {
        End::TimedOut => {
            return Err(SandboxError::Timeout {
                limit: limits.timeout,
            });
        }
        End::OutputOverflow => {
            return Err(SandboxError::OutputLimit {
                limit: limits.output_bytes,
            });
        }
        End::PidLimit => {
            return Err(SandboxError::PidLimit {
                limit: limits.boundary.max_pids,
            });
        }
        End::Aborted(e) => {
            return Err(match e {
                SandboxError::ManifestMismatch {
                    id,
                    expected,
                    loaded,
                } => SandboxError::ManifestMismatch {
                    id: id.clone(),
                    expected: expected.clone(),
                    loaded: loaded.clone(),
                },
                SandboxError::ProtocolViolation { detail } => SandboxError::ProtocolViolation {
                    detail: detail.clone(),
                },
                other => SandboxError::Spawn {
                    detail: other.to_string(),
                },
            });
        }
        End::InitGone if oom_cgroup => {
            return Err(SandboxError::MemoryLimit {
                limit: limits.memory_bytes,
                detail: "the cgroup's OOM killer stopped the sandbox".into(),
            });
        }
        End::InitGone => {
            if let Some(se) = finished.setup_error {
                return Err(setup_error(&se));
            }
            return Err(SandboxError::Spawn {
                detail: "the sandbox init exited without reporting".into(),
            });
        }
        End::Exited(rec) => *rec,
    };
    if let Some(se) = finished.setup_error {
        return Err(setup_error(&se));
    }
    if oom_cgroup {
        return Err(SandboxError::MemoryLimit {
            limit: limits.memory_bytes,
            detail: "the cgroup's OOM killer stopped the guest".into(),
        });
    }
    let status = rec.status;
    let cpu_used = Duration::from_micros(rec.utime_us + rec.stime_us);
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        let cpu_limit =
            Duration::from_secs(limits.boundary.cpu_time.as_secs_f64().ceil().max(1.0) as u64);
        if sig == libc::SIGXCPU
            || (sig == libc::SIGKILL && cpu_used + Duration::from_millis(50) >= cpu_limit)
        {
            return Err(SandboxError::CpuLimit { limit: cpu_limit });
        }
        // Runtimes abort (or fault) when an allocation fails at the cgroup limit.
        if memory_hit
            && matches!(
                sig,
                libc::SIGKILL | libc::SIGABRT | libc::SIGSEGV | libc::SIGBUS
            )
        {
            return Err(SandboxError::MemoryLimit {
                limit: limits.memory_bytes,
                detail: format!(
                    "the guest died of {} after its cgroup reached the memory limit",
                    sys::signal_name(sig)
                ),
            });
        }
        if sig == libc::SIGXFSZ {
            return Err(SandboxError::FileSizeLimit {
                limit: limits.boundary.max_file_size,
            });
        }
        if looks_like_oom(stderr) {
            return Err(SandboxError::MemoryLimit {
                limit: limits.memory_bytes,
                detail: format!(
                    "the guest died of {} after an allocation failure",
                    sys::signal_name(sig)
                ),
            });
        }
        if pids_cgroup {
            return Err(SandboxError::PidLimit {
                limit: limits.boundary.max_pids,
            });
        }
        return Err(SandboxError::Killed {
            signal: sig,
            name: sys::signal_name(sig),
            stderr: stderr.to_string(),
        });
    }
    let code = libc::WEXITSTATUS(status);
    if let Some(e) = hello_error {
        return Err(e);
    }
    let body = protocol::trim_ascii(&finished.stdout);
    if body.is_empty() {
        if looks_like_oom(stderr) {
            return Err(SandboxError::MemoryLimit {
                limit: limits.memory_bytes,
                detail: format!("the guest exited with status {code} after an allocation failure"),
            });
        }
        return Err(SandboxError::Crashed {
            status: code,
            stderr: stderr.to_string(),
        });
    }
    match protocol::parse_response(body)? {
        Response::Output {
            output,
            hook_present: present,
        } => {
            *hook_present = present;
            Ok(output)
        }
        Response::Error(g) => Err(guest_failure(g, module, limits)),
    }
}

fn setup_error(rec: &spawn::Record) -> SandboxError {
    let stage = rec.stage_name();
    let detail = sys::errno_name(rec.errno);
    if stage == "execve" {
        return SandboxError::Spawn {
            detail: format!("execve failed: {detail}"),
        };
    }
    SandboxError::Setup { stage, detail }
}
