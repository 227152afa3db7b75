//! Facts about the host gathered once: ids, landlock, interpreters, argv/env ranges, cgroups.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::cleanup;
use crate::error::{InterpreterError, InterpreterFault};

/// An interpreter found on the host.
#[derive(Clone, Debug)]
pub struct Interpreter {
    /// Canonical path of the real binary (not a wrapper script).
    pub path: PathBuf,
    /// The version, when it was learnt without running the interpreter outside a sandbox
    /// (python's probe reports it). Node's is not probed: its shim reports `process.version`
    /// in the handshake of every run, and [`node_version`] asks for it explicitly (`doctor`).
    pub version: Option<String>,
    /// Directories to mount read-only (at the same path) besides the system directories.
    pub extra_roots: Vec<PathBuf>,
}

/// System directories mounted read-only (or recreated as symlinks) in every sandbox.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32",
];

/// Files and directories of `/etc` that dynamic linking, name resolution and TLS need.
pub const ETC_ENTRIES: &[&str] = &[
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "host.conf",
    "hosts",
    "resolv.conf",
    "gai.conf",
    "services",
    "protocols",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "alternatives",
];

/// True when `path` lies under one of the system directories (after resolving their symlinks).
pub fn under_system_dirs(path: &Path) -> bool {
    SYSTEM_DIRS.iter().any(|d| {
        let real = Path::new(d)
            .canonicalize()
            .unwrap_or_else(|_| PathBuf::from(d));
        path.starts_with(&real) || path.starts_with(d)
    })
}

/// Runs a short host command and returns its stdout, with a timeout.
pub fn run_capture(program: &Path, args: &[&str], timeout: Duration) -> Option<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", std::env::var_os("HOME").unwrap_or_default())
        .spawn()
        .ok()?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut out = String::new();
                child.stdout.take()?.read_to_string(&mut out).ok()?;
                return status.success().then_some(out);
            }
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Finds `name` on the host's PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

pub fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Locates node: `configured`, else `node` on PATH. Nothing is run: the run path starts node
/// only inside the sandbox (its version comes from the shim's handshake).
pub fn find_node(configured: Option<&Path>) -> Result<Interpreter, InterpreterError> {
    let found = match configured {
        Some(p) => p.to_path_buf(),
        None => which("node").ok_or(InterpreterFault::NotOnPath { program: "node" })?,
    };
    let path = found
        .canonicalize()
        .map_err(|e| InterpreterFault::Unresolved {
            runtime: "node",
            path: found,
            source: Arc::new(e),
        })?;
    if !is_executable(&path) {
        return Err(InterpreterFault::NotExecutable {
            runtime: "node",
            path,
        }
        .into());
    }
    let mut extra_roots = Vec::new();
    if !under_system_dirs(&path)
        && let Some(prefix) = path.parent().and_then(Path::parent)
    {
        extra_roots.push(prefix.to_path_buf());
    }
    Ok(Interpreter {
        path,
        version: None,
        extra_roots,
    })
}

/// Runs `node --version` on the host, unsandboxed (for `doctor`; the run path never does).
pub fn node_version(path: &Path) -> Result<String, InterpreterError> {
    run_capture(path, &["--version"], Duration::from_secs(10))
        .map(|v| v.trim().to_string())
        .ok_or_else(|| {
            InterpreterFault::NoVersion {
                path: path.to_path_buf(),
            }
            .into()
        })
}

/// Locates python3: `configured`, else `python3` on PATH. Wrapper scripts (pyenv shims) are
/// resolved by asking the interpreter for `sys.executable`.
pub fn find_python(configured: Option<&Path>) -> Result<Interpreter, InterpreterError> {
    let found = match configured {
        Some(p) => p.to_path_buf(),
        None => which("python3").ok_or(InterpreterFault::NotOnPath { program: "python3" })?,
    };
    let script = "import sys;print(sys.executable);print(sys.base_prefix);print('%d.%d.%d' % sys.version_info[:3])";
    let Some(out) = run_capture(&found, &["-I", "-S", "-c", script], Duration::from_secs(20))
    else {
        return Err(InterpreterFault::NoAnswer { path: found }.into());
    };
    let mut lines = out.lines();
    let exe = lines.next().unwrap_or("").trim();
    let prefix = lines.next().unwrap_or("").trim();
    let version = lines.next().unwrap_or("").trim().to_string();
    if exe.is_empty() {
        return Err(InterpreterFault::NoExecutable { path: found }.into());
    }
    let path = Path::new(exe)
        .canonicalize()
        .map_err(|e| InterpreterFault::Unresolved {
            runtime: "python",
            path: PathBuf::from(exe),
            source: Arc::new(e),
        })?;
    let mut extra_roots = Vec::new();
    if !prefix.is_empty() {
        let prefix = Path::new(prefix);
        let prefix = prefix
            .canonicalize()
            .unwrap_or_else(|_| prefix.to_path_buf());
        if !under_system_dirs(&prefix) && prefix != Path::new("/") {
            extra_roots.push(prefix);
        }
    }
    if !under_system_dirs(&path)
        && !extra_roots.iter().any(|r| path.starts_with(r))
        && let Some(dir) = path.parent()
    {
        extra_roots.push(dir.to_path_buf());
    }
    Ok(Interpreter {
        path,
        version: Some(format!("Python {version}")),
        extra_roots,
    })
}

/// The ELF program interpreter (`PT_INTERP`) of an executable, if it has one.
pub fn elf_interpreter(path: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::FileExt as _;
    let file = std::fs::File::open(path).ok()?;
    let mut hdr = [0u8; 64];
    file.read_exact_at(&mut hdr, 0).ok()?;
    if &hdr[..4] != b"\x7fELF" || hdr[4] != 2 || hdr[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u64_at = |b: &[u8], o: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[o..o + 8]);
        u64::from_le_bytes(a)
    };
    let phoff = u64_at(&hdr, 0x20);
    let phentsize = u16_at(&hdr, 0x36) as u64;
    let phnum = u16_at(&hdr, 0x38) as u64;
    if phentsize < 56 || phnum > 256 {
        return None;
    }
    for i in 0..phnum {
        let mut ph = [0u8; 56];
        file.read_exact_at(&mut ph, phoff + i * phentsize).ok()?;
        if u32::from_le_bytes([ph[0], ph[1], ph[2], ph[3]]) == 3 {
            let off = u64_at(&ph, 8);
            let size = u64_at(&ph, 32).min(4096) as usize;
            let mut name = vec![0u8; size];
            file.read_exact_at(&mut name, off).ok()?;
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            let s = std::str::from_utf8(&name[..end]).ok()?;
            return Some(PathBuf::from(s));
        }
    }
    None
}

/// The `#!` interpreter of a script, if any.
pub fn shebang(head: &[u8]) -> Option<PathBuf> {
    let rest = head.strip_prefix(b"#!")?;
    let line_end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
    let line = std::str::from_utf8(&rest[..line_end]).ok()?.trim();
    let prog = line.split_whitespace().next()?;
    prog.starts_with('/').then(|| PathBuf::from(prog))
}

/// The host's argv and environment address ranges (fields 48-51 of /proc/self/stat), which
/// the sandbox init wipes in its copy of the host's memory.
pub fn scrub_ranges() -> &'static [(usize, usize)] {
    static RANGES: OnceLock<Vec<(usize, usize)>> = OnceLock::new();
    RANGES.get_or_init(|| {
        let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
            return Vec::new();
        };
        let Some(close) = stat.rfind(')') else {
            return Vec::new();
        };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // fields[0] is field 3 (state); field N is fields[N - 3].
        let get = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<usize>().ok());
        match (get(48), get(49), get(50), get(51)) {
            (Some(a), Some(b), Some(c), Some(d)) if b > a && d > c => vec![(a, b), (c, d)],
            _ => Vec::new(),
        }
    })
}

/// The cgroup v2 situation of this process.
#[derive(Clone, Debug)]
pub struct CgroupInfo {
    /// Where cgroup2 is mounted, if anywhere.
    pub mount: Option<PathBuf>,
    /// This process's cgroup directory.
    pub own: Option<PathBuf>,
    /// Controllers available to children of `own` (its cgroup.subtree_control).
    pub subtree_controllers: Vec<String>,
    /// Controllers present in `own` (cgroup.controllers).
    pub controllers: Vec<String>,
    pub writable: bool,
}

impl CgroupInfo {
    pub fn detect() -> CgroupInfo {
        let mount = std::fs::read_to_string("/proc/self/mountinfo")
            .ok()
            .and_then(|mi| {
                mi.lines().find_map(|line| {
                    let (left, right) = line.split_once(" - ")?;
                    let fstype = right.split_whitespace().next()?;
                    let mount = left.split_whitespace().nth(4)?;
                    (fstype == "cgroup2").then(|| PathBuf::from(mount))
                })
            });
        let rel = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_string()))
            });
        let own = match (&mount, rel) {
            (Some(m), Some(r)) => Some(m.join(r.trim_start_matches('/'))),
            _ => None,
        };
        let read_list = |name: &str| -> Vec<String> {
            own.as_ref()
                .and_then(|o| std::fs::read_to_string(o.join(name)).ok())
                .map(|s| s.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default()
        };
        let writable = own.as_ref().is_some_and(|o| {
            let c = std::ffi::CString::new(o.as_os_str().as_encoded_bytes()).unwrap_or_default();
            // SAFETY: access(2) on a NUL-terminated path.
            unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
        });
        CgroupInfo {
            subtree_controllers: read_list("cgroup.subtree_control"),
            controllers: read_list("cgroup.controllers"),
            mount,
            own,
            writable,
        }
    }

    /// The directory under which per-run cgroups can be made, or why not.
    pub fn usable_parent(&self, configured: Option<&Path>) -> Result<PathBuf, CgroupError> {
        let Some(mount) = &self.mount else {
            return Err(CgroupError::NoV2Mount);
        };
        let parent = match configured {
            Some(p) => p.to_path_buf(),
            None => self.own.clone().ok_or(CgroupError::NoV2Membership)?,
        };
        let subtree: Vec<String> = std::fs::read_to_string(parent.join("cgroup.subtree_control"))
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        let missing: Vec<&'static str> = ["pids", "memory"]
            .into_iter()
            .filter(|c| !subtree.iter().any(|s| s == c))
            .collect();
        if !missing.is_empty() {
            return Err(CgroupError::NotDelegated {
                mount: mount.clone(),
                missing,
                parent,
                available: if self.controllers.is_empty() {
                    "none".to_string()
                } else {
                    self.controllers.join(" ")
                },
            });
        }
        let c = std::ffi::CString::new(parent.as_os_str().as_encoded_bytes())
            .map_err(|_| CgroupError::BadPath)?;
        // SAFETY: access(2) on a NUL-terminated path.
        if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
            return Err(CgroupError::NotWritable { dir: parent });
        }
        Ok(parent)
    }
}

/// The cgroup v1 hierarchy directory of this process for `controller` (`pids`, `memory`), when
/// that controller is mounted as v1 and the directory is writable (typically only for root).
pub fn v1_controller_dir(controller: &'static str) -> Result<PathBuf, CgroupError> {
    let proc_file = |file: &'static str| {
        std::fs::read_to_string(file).map_err(|e| CgroupError::Proc {
            file,
            source: Arc::new(e),
        })
    };
    let mi = proc_file("/proc/self/mountinfo")?;
    let mount = mi
        .lines()
        .find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut r = right.split_whitespace();
            let fstype = r.next()?;
            let opts = r.nth(1)?;
            (fstype == "cgroup" && opts.split(',').any(|o| o == controller))
                .then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
        })
        .ok_or(CgroupError::NoV1Hierarchy { controller })?;
    let cg = proc_file("/proc/self/cgroup")?;
    let rel = cg
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _ = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            controllers
                .split(',')
                .any(|c| c == controller)
                .then(|| path.to_string())
        })
        .ok_or(CgroupError::NoV1Group { controller })?;
    let dir = mount.join(rel.trim_start_matches('/'));
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| CgroupError::BadPath)?;
    // SAFETY: access(2) on a NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return Err(CgroupError::V1NotWritable { controller, dir });
    }
    Ok(dir)
}

/// Why no per-run cgroup is used (the run then relies on rlimits), in one line for the
/// boundary report's notes and `doctor`: cgroups are disabled, neither v2 nor v1 offers a
/// writable group, or making the run's group failed. `Clone` because the parent's verdict is
/// kept; an io error is shared behind an `Arc`.
#[derive(Clone, Debug, thiserror::Error)]
pub(crate) enum CgroupError {
    #[error("cgroups disabled by configuration")]
    Disabled,
    #[error("no cgroup v2 mount")]
    NoV2Mount,
    #[error("this process has no cgroup v2 membership")]
    NoV2Membership,
    #[error(
        "cgroup v2 at {} does not delegate the {} controller(s) to {} (available: {available})",
        mount.display(),
        missing.join(" and "),
        parent.display()
    )]
    NotDelegated {
        mount: PathBuf,
        missing: Vec<&'static str>,
        parent: PathBuf,
        /// The controllers of this process's cgroup, or `none`.
        available: String,
    },
    /// A cgroup path with a NUL byte (the kernel's paths have none).
    #[error("bad cgroup path")]
    BadPath,
    #[error("cgroup {} is not writable", dir.display())]
    NotWritable { dir: PathBuf },
    /// Reading `/proc/self/mountinfo` or `/proc/self/cgroup` failed (the message is the io
    /// error's alone).
    #[error("{source}")]
    Proc {
        file: &'static str,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("no cgroup v1 {controller} hierarchy")]
    NoV1Hierarchy { controller: &'static str },
    #[error("this process is in no cgroup v1 {controller} group")]
    NoV1Group { controller: &'static str },
    #[error("cgroup v1 {controller} group {} is not writable", dir.display())]
    V1NotWritable {
        controller: &'static str,
        dir: PathBuf,
    },
    /// Neither a v2 directory nor a v1 group: each reason.
    #[error("{v2}; {pids}; {memory}")]
    Unavailable {
        v2: Box<CgroupError>,
        pids: Box<CgroupError>,
        memory: Box<CgroupError>,
    },
    #[error("{file}: {source}")]
    Write {
        file: &'static str,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("mkdir {}: {source}", dir.display())]
    Mkdir {
        dir: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("open {}: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
}

/// Where per-run cgroups are made.
#[derive(Clone, Debug)]
pub enum CgroupParent {
    /// A cgroup v2 directory delegating `pids` and `memory`.
    V2(PathBuf),
    /// Writable cgroup v1 groups: `pids` and/or `memory` (at least one).
    V1 {
        pids: Option<PathBuf>,
        memory: Option<PathBuf>,
    },
}

/// How the run's memory is limited by its cgroup, if at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupMemory {
    /// No memory controller: rlimits only.
    None,
    /// cgroup v2 `memory.max` (and `memory.swap.max` = 0 when swap is accounted).
    V2,
    /// cgroup v1 `memory.limit_in_bytes`; `memsw` when `memory.memsw.limit_in_bytes` was set too.
    V1 { memsw: bool },
}

/// A per-run cgroup (one directory per controller for v1), removed on drop.
pub struct RunCgroup {
    pub version: u8,
    /// The directories made for this run.
    pub dirs: Vec<PathBuf>,
    pub pids_dir: Option<PathBuf>,
    pub memory_dir: Option<PathBuf>,
    pub memory: CgroupMemory,
    /// v2: the directory, for `CLONE_INTO_CGROUP`.
    pub dir_fd: Option<std::os::fd::OwnedFd>,
    /// v1: each group's `cgroup.procs`, opened by the host; the sandbox init writes `0` to join.
    pub procs_fds: Vec<std::os::fd::OwnedFd>,
    /// `dirs` are removed at process exit if the run is still in flight then.
    live: Vec<cleanup::Live>,
}

impl RunCgroup {
    /// The run's cgroup (one per v1 hierarchy), named for this process
    /// (`capability-sandbox-<pid>-<n>`, see `cleanup`); a name that exists already (left by
    /// an earlier process with the same pid) is skipped.
    pub fn create(parent: &CgroupParent, memory: u64, pids: u32) -> Result<RunCgroup, CgroupError> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let mut tries = 0;
        loop {
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let name = cleanup::run_name(cleanup::CGROUP_PREFIX, std::process::id(), n);
            match RunCgroup::create_named(parent, &name, memory, pids) {
                Err(CgroupError::Mkdir { source, .. })
                    if source.kind() == std::io::ErrorKind::AlreadyExists && tries < 100 =>
                {
                    tries += 1;
                }
                created => return created,
            }
        }
    }

    fn create_named(
        parent: &CgroupParent,
        name: &str,
        memory: u64,
        pids: u32,
    ) -> Result<RunCgroup, CgroupError> {
        let write = |dir: &Path, file: &'static str, value: String| -> Result<(), CgroupError> {
            std::fs::write(dir.join(file), value).map_err(|e| CgroupError::Write {
                file,
                source: Arc::new(e),
            })
        };
        let mut cg = RunCgroup {
            version: 0,
            dirs: Vec::new(),
            pids_dir: None,
            memory_dir: None,
            memory: CgroupMemory::None,
            dir_fd: None,
            procs_fds: Vec::new(),
            live: Vec::new(),
        };
        let mkdir = |cg: &mut RunCgroup, base: &Path| -> Result<PathBuf, CgroupError> {
            let dir = base.join(name);
            std::fs::create_dir(&dir).map_err(|e| CgroupError::Mkdir {
                dir: dir.clone(),
                source: Arc::new(e),
            })?;
            cg.live.push(cleanup::Live::cgroup(&dir));
            cg.dirs.push(dir.clone());
            Ok(dir)
        };
        match parent {
            CgroupParent::V2(base) => {
                cg.version = 2;
                let dir = mkdir(&mut cg, base)?;
                write(&dir, "pids.max", pids.to_string())?;
                write(&dir, "memory.max", memory.to_string())?;
                // Swap may not be configured; that is fine.
                let _ = write(&dir, "memory.swap.max", "0".into());
                let f = std::fs::File::open(&dir).map_err(|e| CgroupError::Open {
                    path: dir.clone(),
                    source: Arc::new(e),
                })?;
                cg.dir_fd = Some(f.into());
                cg.pids_dir = Some(dir.clone());
                cg.memory_dir = Some(dir);
                cg.memory = CgroupMemory::V2;
            }
            CgroupParent::V1 {
                pids: pids_base,
                memory: memory_base,
            } => {
                cg.version = 1;
                if let Some(base) = pids_base {
                    let dir = mkdir(&mut cg, base)?;
                    write(&dir, "pids.max", pids.to_string())?;
                    cg.pids_dir = Some(dir);
                }
                if let Some(base) = memory_base {
                    let dir = mkdir(&mut cg, base)?;
                    // The memory+swap limit must not be below the memory limit: set this first.
                    write(&dir, "memory.limit_in_bytes", memory.to_string())?;
                    let memsw = if dir.join("memory.memsw.limit_in_bytes").exists() {
                        write(&dir, "memory.memsw.limit_in_bytes", memory.to_string())?;
                        true
                    } else {
                        false
                    };
                    cg.memory_dir = Some(dir);
                    cg.memory = CgroupMemory::V1 { memsw };
                }
                for dir in &cg.dirs {
                    let procs = dir.join("cgroup.procs");
                    let f = std::fs::OpenOptions::new()
                        .write(true)
                        .open(&procs)
                        .map_err(|e| CgroupError::Open {
                            path: procs,
                            source: Arc::new(e),
                        })?;
                    cg.procs_fds.push(f.into());
                }
            }
        }
        Ok(cg)
    }

    fn event(dir: Option<&PathBuf>, file: &str, key: &str) -> u64 {
        dir.and_then(|d| std::fs::read_to_string(d.join(file)).ok())
            .and_then(|s| {
                s.lines().find_map(|l| {
                    let (k, v) = l.split_once(' ')?;
                    (k == key).then(|| v.trim().parse().ok())?
                })
            })
            .unwrap_or(0)
    }

    /// Whether the cgroup's OOM killer killed something in the sandbox.
    pub fn oom_killed(&self) -> bool {
        match self.memory {
            CgroupMemory::None => false,
            CgroupMemory::V2 => {
                Self::event(self.memory_dir.as_ref(), "memory.events", "oom_kill") > 0
            }
            CgroupMemory::V1 { .. } => {
                Self::event(self.memory_dir.as_ref(), "memory.oom_control", "oom_kill") > 0
            }
        }
    }

    /// Whether a charge ever failed at the memory limit (v1 `memory.failcnt`, v2 `max` events).
    pub fn memory_limit_hit(&self) -> bool {
        match self.memory {
            CgroupMemory::None => false,
            CgroupMemory::V2 => Self::event(self.memory_dir.as_ref(), "memory.events", "max") > 0,
            CgroupMemory::V1 { .. } => self
                .memory_dir
                .as_ref()
                .and_then(|d| std::fs::read_to_string(d.join("memory.failcnt")).ok())
                .and_then(|s| s.trim().parse::<u64>().ok())
                .is_some_and(|n| n > 0),
        }
    }

    pub fn pids_max_hit(&self) -> bool {
        Self::event(self.pids_dir.as_ref(), "pids.events", "max") > 0
    }
}

impl Drop for RunCgroup {
    /// Removes the run's cgroups before the run's result is returned: the sandbox is reaped
    /// before this runs, and this waits while the kernel finishes tearing it down (killing
    /// whatever is still in the cgroup after a moment).
    fn drop(&mut self) {
        self.procs_fds.clear();
        self.dir_fd = None;
        let deadline = std::time::Instant::now() + cleanup::RUN_BUDGET;
        for dir in &self.dirs {
            let budget = deadline.saturating_duration_since(std::time::Instant::now());
            let _ = cleanup::remove_cgroup(dir, cleanup::KILL_AFTER, budget);
        }
    }
}
