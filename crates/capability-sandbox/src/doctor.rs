//! `doctor`: which boundaries work on this host, and the kernel features behind them; and the
//! auto-selection of the strongest boundary for a module.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use capability_exec::{Grants, Invocation, Limits};

use crate::error::SandboxError;
use crate::linux::host::{self, CgroupInfo};
use crate::linux::sys;
use crate::oci;
use crate::process::ProcessSandbox;
use crate::types::{ModuleKind, ModuleSpec, ProcessLimits};

/// One probe's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Probe {
    pub ok: bool,
    pub detail: String,
}

impl Probe {
    fn ok(detail: impl Into<String>) -> Probe {
        Probe {
            ok: true,
            detail: detail.into(),
        }
    }
    fn fail(detail: impl Into<String>) -> Probe {
        Probe {
            ok: false,
            detail: detail.into(),
        }
    }
}

/// What `doctor` found.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DoctorReport {
    pub kernel: String,
    pub euid: u32,
    /// Each namespace, actually created by a probe child (`user` alone; the others inside a
    /// new user namespace, as an unprivileged sandbox needs them).
    pub namespaces: BTreeMap<&'static str, Probe>,
    /// Landlock ABI version (`abi-N`) or why not.
    pub landlock: Probe,
    pub seccomp: Probe,
    pub cgroup_v2: Probe,
    /// What the process sandbox uses for per-run cgroups.
    pub cgroup_used: String,
    pub node: Probe,
    pub python: Probe,
    pub docker: Probe,
    pub podman: Probe,
    /// A complete run of a probe executable through the process sandbox.
    pub process_sandbox: Probe,
    /// Boundaries usable here, strongest first.
    pub boundaries: Vec<&'static str>,
}

impl DoctorReport {
    /// True when the process sandbox works here (namespaces, and a full probe run).
    pub fn process_sandbox_ok(&self) -> bool {
        self.process_sandbox.ok
    }

    /// True when an OCI engine answered.
    pub fn oci_ok(&self) -> bool {
        self.docker.ok || self.podman.ok
    }

    /// True when landlock and seccomp are both in force.
    pub fn process_sandbox_full(&self) -> bool {
        self.process_sandbox.ok && self.landlock.ok && self.seccomp.ok
    }
}

/// Probes the host. Takes a few hundred milliseconds (it starts interpreters and a sandbox),
/// and never much more than a second: the container CLIs are probed beside the rest, in
/// parallel, and killed after [`oci::ENGINE_PROBE_TIMEOUT`] when their engine does not answer.
pub fn doctor(sandbox: &ProcessSandbox) -> DoctorReport {
    // The engine probes may spend their whole timeout: they run beside the others.
    let engines = std::thread::spawn(|| probe_engines(None));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    let mut namespaces = BTreeMap::new();
    namespaces.insert("user", probe_clone(sys::CLONE_NEWUSER, ProbeAction::Exit));
    namespaces.insert(
        "mount",
        probe_clone(
            sys::CLONE_NEWUSER | sys::CLONE_NEWNS,
            ProbeAction::MountTmpfs,
        ),
    );
    namespaces.insert(
        "pid",
        probe_clone(
            sys::CLONE_NEWUSER | sys::CLONE_NEWPID,
            ProbeAction::IsPidOne,
        ),
    );
    for (name, flag) in [
        ("net", sys::CLONE_NEWNET),
        ("ipc", sys::CLONE_NEWIPC),
        ("uts", sys::CLONE_NEWUTS),
        ("cgroup", sys::CLONE_NEWCGROUP),
    ] {
        namespaces.insert(
            name,
            probe_clone(sys::CLONE_NEWUSER | flag, ProbeAction::Exit),
        );
    }
    let landlock = match sandbox.landlock_abi() {
        Ok(abi) => Probe::ok(format!("abi-{abi}")),
        Err(e) => Probe::fail(format!("unavailable: {e}")),
    };
    let seccomp = probe_seccomp();
    let cg = CgroupInfo::detect();
    let cgroup_v2 = match &cg.mount {
        None => Probe::fail("no cgroup2 mount"),
        Some(m) => {
            let detail = format!(
                "mounted at {}, own cgroup {}, controllers [{}], delegated to children [{}], {}",
                m.display(),
                cg.own
                    .as_ref()
                    .map_or("?".into(), |o| o.display().to_string()),
                cg.controllers.join(" "),
                cg.subtree_controllers.join(" "),
                if cg.writable {
                    "writable"
                } else {
                    "not writable"
                }
            );
            if cg
                .usable_parent(sandbox.config().cgroup_parent.as_deref())
                .is_ok()
            {
                Probe::ok(detail)
            } else {
                Probe::fail(detail)
            }
        }
    };
    let node = match sandbox
        .node()
        .and_then(|i| Ok((host::node_version(&i.path)?, i)))
    {
        Ok((version, i)) => Probe::ok(format!("{version} at {}", i.path.display())),
        Err(e) => Probe::fail(e.to_string()),
    };
    let python = match sandbox.python() {
        Ok(i) => Probe::ok(format!(
            "{} at {}",
            i.version.as_deref().unwrap_or("python"),
            i.path.display()
        )),
        Err(e) => Probe::fail(e.to_string()),
    };
    let process_sandbox = probe_full_run(sandbox);
    let EngineProbes { docker, podman } = engines.join().unwrap_or_else(|_| EngineProbes {
        docker: Probe::fail("the engine probe panicked"),
        podman: Probe::fail("the engine probe panicked"),
    });
    let mut report = DoctorReport {
        kernel,
        euid,
        namespaces,
        landlock,
        seccomp,
        cgroup_v2,
        cgroup_used: sandbox.cgroup_summary(),
        node,
        python,
        docker,
        podman,
        process_sandbox,
        boundaries: Vec::new(),
    };
    report.boundaries = ranked_boundaries(&report);
    report
}

/// What `doctor` found about the container engines.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EngineProbes {
    pub docker: Probe,
    pub podman: Probe,
}

/// The `docker` and `podman` probes of [`doctor`]: each CLI found on `search_path` (a
/// `PATH`-style list; the host's `PATH` when `None`) is asked `version`, both at once, and killed
/// with everything it started after [`oci::ENGINE_PROBE_TIMEOUT`]. A failed probe's detail is
/// the reason, worded as [`crate::OciExecutor::detect`] words it: `... not found on PATH`,
/// `<cli> version ... did not answer within 900 ms (killed)`, or `<cli> version ... failed (exit
/// status: N): <the engine's message>`.
pub fn probe_engines(search_path: Option<&OsStr>) -> EngineProbes {
    let [docker, podman] =
        oci::probe_both(search_path, oci::ENGINE_PROBE_TIMEOUT).map(|found| match found {
            Ok(e) => {
                let conf = match std::env::var_os("CONTAINERS_CONF") {
                    Some(c) if e.name == "podman" => {
                        format!(", CONTAINERS_CONF={}", c.to_string_lossy())
                    }
                    _ => String::new(),
                };
                Probe::ok(format!(
                    "{} {} answers ({}{conf})",
                    e.name,
                    e.server_version,
                    e.program.display()
                ))
            }
            Err(reason) => Probe::fail(reason.to_string()),
        });
    EngineProbes { docker, podman }
}

fn ranked_boundaries(r: &DoctorReport) -> Vec<&'static str> {
    let mut out = Vec::new();
    if r.process_sandbox_full() {
        out.push("process-sandbox");
    }
    if r.oci_ok() {
        out.push("oci");
    }
    if r.process_sandbox_ok() && !r.process_sandbox_full() {
        out.push("process-sandbox");
    }
    out.push("wasm");
    out
}

/// The boundary chosen for a module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Boundary {
    ProcessSandbox,
    Oci,
    /// The WASM executor (`capability-wasm`), for `.wasm` modules.
    Wasm,
}

/// Picks the strongest available boundary for a module kind. Package code never runs in
/// process: when nothing suitable works, this is `Unavailable`.
///
/// Order: the process sandbox with landlock and seccomp in force (the guest gets a fresh
/// user namespace, landlock path rules and a syscall filter); then an OCI engine (when
/// `oci_image_configured`); then a process sandbox without landlock. `.wasm` always goes to
/// the WASM executor. Granted effects do not change the order: every boundary opens only
/// what is granted.
pub fn select_boundary(
    kind: ModuleKind,
    _grants: &Grants,
    report: &DoctorReport,
    oci_image_configured: bool,
) -> Result<Boundary, SandboxError> {
    if kind == ModuleKind::Wasm {
        return Ok(Boundary::Wasm);
    }
    let runner_ok = match kind {
        ModuleKind::Node => report.node.ok,
        ModuleKind::Python => report.python.ok,
        _ => true,
    };
    if runner_ok && report.process_sandbox_full() {
        return Ok(Boundary::ProcessSandbox);
    }
    if oci_image_configured && report.oci_ok() {
        return Ok(Boundary::Oci);
    }
    if runner_ok && report.process_sandbox_ok() {
        return Ok(Boundary::ProcessSandbox);
    }
    Err(SandboxError::Unavailable {
        boundary: "any",
        reason: format!(
            "no isolation boundary can run a {} module here (process sandbox: {}; {}: {}; oci: {})",
            kind.as_str(),
            report.process_sandbox.detail,
            kind.as_str(),
            match kind {
                ModuleKind::Node => &report.node.detail,
                ModuleKind::Python => &report.python.detail,
                _ => "n/a",
            },
            if report.oci_ok() {
                if oci_image_configured {
                    "ok"
                } else {
                    "no image configured"
                }
            } else {
                "no engine answers"
            }
        ),
    })
}

#[derive(Clone, Copy)]
pub(crate) enum ProbeAction {
    Exit,
    MountTmpfs,
    IsPidOne,
}

/// Creates a child in new namespaces and lets it try `action`.
pub(crate) fn probe_clone(flags: u64, action: ProbeAction) -> Probe {
    let mut args = sys::CloneArgs {
        flags,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: 0,
        stack_size: 0,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: 0,
    };
    // SAFETY: the child only makes raw syscalls on static data and exits.
    let pid = unsafe { sys::clone3(&mut args) };
    if pid == 0 {
        // SAFETY: raw syscalls in the probe child, then _exit.
        unsafe {
            let code = match action {
                ProbeAction::Exit => 0,
                ProbeAction::IsPidOne => i32::from(libc::getpid() != 1),
                ProbeAction::MountTmpfs => {
                    let private = libc::mount(
                        std::ptr::null(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    );
                    let tmpfs = libc::mount(
                        c"tmpfs".as_ptr(),
                        c"/tmp".as_ptr(),
                        c"tmpfs".as_ptr(),
                        0,
                        c"size=64k".as_ptr() as *const libc::c_void,
                    );
                    i32::from(private < 0 || tmpfs < 0)
                }
            };
            libc::_exit(code)
        }
    }
    if pid < 0 {
        return Probe::fail(format!("clone3: {}", std::io::Error::last_os_error()));
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid as i32, &mut status, 0) };
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Probe::ok("works")
    } else {
        Probe::fail(format!("created, but the probe failed (status {status})"))
    }
}

fn probe_seccomp() -> Probe {
    // SAFETY: PR_GET_SECCOMP takes no pointers.
    let r = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    if r < 0 {
        return Probe::fail(format!("unavailable: {}", std::io::Error::last_os_error()));
    }
    let actions = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    Probe::ok(if actions.is_empty() {
        "filter mode available".to_string()
    } else {
        format!("filter mode available ({actions})")
    })
}

/// Runs a one-line shell-script capability through the whole sandbox.
fn probe_full_run(sandbox: &ProcessSandbox) -> Probe {
    let Some(dir) = std::env::temp_dir()
        .join(format!(".capability-sandbox-doctor-{}", std::process::id()))
        .to_str()
        .map(std::path::PathBuf::from)
    else {
        return Probe::fail("no temp dir");
    };
    let result = (|| -> Result<String, FullRunError> {
        std::fs::create_dir_all(&dir)?;
        let script = dir.join("probe");
        std::fs::write(&script, "#!/bin/sh\necho '{\"output\":\"sandboxed\"}'\n")?;
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
        let spec = ModuleSpec {
            package_root: dir.clone(),
            install_root: None,
            module: "./probe".into(),
            integrity: None,
            manifest: json!({"id": "doctor/probe"}),
        };
        let limits = Limits::<ProcessLimits> {
            timeout: Duration::from_secs(10),
            ..Limits::default()
        };
        let out = sandbox.run(
            &spec,
            &Invocation::execute(json!({})),
            &Grants::none(),
            &limits,
        )?;
        match out.result {
            Ok(v) if v == json!("sandboxed") => Ok(format!(
                "ok in {} ms ({}, landlock {}, seccomp {})",
                out.duration.as_millis(),
                out.boundary.namespaces.join("+"),
                out.boundary.landlock,
                if out.boundary.seccomp { "on" } else { "off" }
            )),
            Ok(output) => Err(FullRunError::Unexpected { output }),
            Err(e) => Err(e.into()),
        }
    })();
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(d) => Probe::ok(d),
        Err(e) => Probe::fail(e.to_string()),
    }
}

/// Why the full-run probe failed: writing its script, the run, or what the script answered.
#[derive(Debug, thiserror::Error)]
enum FullRunError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Run(#[from] SandboxError),
    #[error("unexpected output {output}")]
    Unexpected { output: serde_json::Value },
}
