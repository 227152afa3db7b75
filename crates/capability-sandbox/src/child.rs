//! Long-lived programs behind the process boundary: [`ProcessSandbox::spawn_child`] (see the
//! crate docs, *Sandboxed children*).

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd as _, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, mpsc};

use capability_exec::{Grants, Limits, SandboxReport};

use crate::error::{ChildrenUnavailable, InterpreterError, SandboxError};
use crate::linux::host::{self, RunCgroup};
use crate::linux::{spawn, sys};
use crate::process::{Contents, ProcessSandbox, Target, check_limits};
use crate::types::{ModuleKind, ProcessLimits};

/// Resource limits of a child. [`ChildLimits::default`] suits an MCP server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildLimits {
    /// Memory of the whole sandbox (as [`Limits::memory_bytes`]). Default 1 GiB.
    pub memory_bytes: u64,
    /// Processes and threads in the sandbox. Default 128.
    pub max_pids: u32,
    /// Open file descriptors per process. Default 1024.
    pub max_open_files: u64,
    /// Largest file the child may write. Default 64 MiB.
    pub max_file_size: u64,
    /// Size of the private writable `/tmp`. Default 64 MiB.
    pub tmp_bytes: u64,
}

impl Default for ChildLimits {
    fn default() -> Self {
        ChildLimits {
            memory_bytes: 1 << 30,
            max_pids: 128,
            max_open_files: 1024,
            max_file_size: 64 << 20,
            tmp_bytes: 64 << 20,
        }
    }
}

/// A program to run as a sandboxed child.
#[derive(Clone, Debug)]
pub struct ChildSpec {
    /// The program, as an absolute path. It is executed at this path (a symlink to the real
    /// binary is fine: a python venv's `bin/python` finds its venv that way), which must be
    /// visible inside: under the system directories, or under [`ChildSpec::code`].
    pub program: PathBuf,
    /// Its arguments (paths in them are host paths, which are the same inside).
    pub args: Vec<String>,
    /// Host directories (or files) of the program's code, mounted read-only at their host
    /// paths. Executable mappings of their files are allowed (native addons), `execve` of them
    /// only with `process.spawn`.
    pub code: Vec<PathBuf>,
    /// The child's whole environment.
    pub env: Vec<(String, String)>,
    /// The effects (and their paths) the child is granted.
    pub grants: Grants,
    pub limits: ChildLimits,
}

impl ChildSpec {
    /// The spec of `program args` with its code found on the host:
    ///
    /// * `program` without a `/` is looked up in the `PATH` of `env` (else the host's);
    ///   with one, it is taken from the current directory. Its directory is canonicalized
    ///   (its file name kept, so a venv's `bin/python` symlink stays one).
    /// * A python venv (`<dir>/../pyvenv.cfg` next to the program) is code.
    /// * A native program outside the system directories: its directory (and the real
    ///   binary's, for a symlink) is code. Node's and python's own prefixes are found when
    ///   the child starts ([`ProcessSandbox::spawn_child`]).
    /// * The script, the first argument not starting with `-` that names an existing file, is
    ///   passed as its canonical path; its *package directory* is code: the nearest directory
    ///   at or above it holding `package.json` or `pyproject.toml` (else the script's own
    ///   directory), widened, when it lies inside a `node_modules` tree, to the outermost
    ///   `node_modules` directory, so that the package's dependencies resolve.
    ///
    /// No grants and the default limits: set [`ChildSpec::grants`] and [`ChildSpec::limits`].
    pub fn command(
        program: &str,
        args: &[String],
        env: Vec<(String, String)>,
    ) -> Result<ChildSpec, SandboxError> {
        let invalid = |detail: String| SandboxError::Invalid { detail };
        let found = if program.contains('/') {
            absolute(Path::new(program))
        } else {
            let path = env
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| std::ffi::OsString::from(v))
                .or_else(|| std::env::var_os("PATH"))
                .unwrap_or_default();
            std::env::split_paths(&path)
                .map(|d| absolute(&d.join(program)))
                .find(|p| host::is_executable(p))
                .ok_or_else(|| invalid(format!("{program} was not found on PATH")))?
        };
        let name = found
            .file_name()
            .ok_or_else(|| invalid(format!("{program}: not a file")))?;
        let dir = found
            .parent()
            .and_then(|d| d.canonicalize().ok())
            .ok_or_else(|| invalid(format!("{program}: its directory cannot be opened")))?;
        let program_path = dir.join(name);
        let real = program_path
            .canonicalize()
            .map_err(|e| invalid(format!("{}: {e}", program_path.display())))?;
        if !host::is_executable(&real) {
            return Err(invalid(format!(
                "{} is not an executable file",
                program_path.display()
            )));
        }
        let mut code = Vec::new();
        if let Some(venv) = dir.parent().filter(|v| v.join("pyvenv.cfg").is_file()) {
            code.push(venv.to_path_buf());
        }
        if runtime_of(&real) == ModuleKind::Native {
            for d in [Some(dir.as_path()), real.parent()].into_iter().flatten() {
                if !host::under_system_dirs(d) && !code.iter().any(|c| d.starts_with(c)) {
                    code.push(d.to_path_buf());
                }
            }
        }
        let mut args = args.to_vec();
        if let Some(arg) = args
            .iter_mut()
            .find(|a| !a.starts_with('-') && absolute(Path::new(a.as_str())).is_file())
        {
            let script = absolute(Path::new(arg.as_str()))
                .canonicalize()
                .map_err(|e| invalid(format!("{arg}: {e}")))?;
            code.push(package_dir(&script));
            *arg = script.to_string_lossy().into_owned();
        }
        Ok(ChildSpec {
            program: program_path,
            args,
            code,
            env,
            grants: Grants::none(),
            limits: ChildLimits::default(),
        })
    }
}

/// `p` made absolute against the current directory, with `.` and `..` folded lexically.
fn absolute(p: &Path) -> PathBuf {
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(p)
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// See [`ChildSpec::command`]: the package directory of a (canonical) script.
fn package_dir(script: &Path) -> PathBuf {
    let own = script.parent().unwrap_or(Path::new("/"));
    let package = own
        .ancestors()
        .take_while(|d| *d != Path::new("/"))
        .find(|d| d.join("package.json").is_file() || d.join("pyproject.toml").is_file())
        .unwrap_or(own);
    let mut outer = PathBuf::from("/");
    for c in package.components().skip(1) {
        outer.push(c);
        if c.as_os_str() == "node_modules" {
            return outer;
        }
    }
    package.to_path_buf()
}

/// The runtime a (canonical) program is, from its file name.
fn runtime_of(real: &Path) -> ModuleKind {
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name == "node" || name.starts_with("nodejs") {
        ModuleKind::Node
    } else if name.starts_with("python") {
        ModuleKind::Python
    } else {
        ModuleKind::Native
    }
}

/// How a child ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChildExit {
    /// The program exited with this status.
    Exited(i32),
    /// The program died of this signal.
    Signaled(i32),
    /// The sandbox was killed (by [`SandboxedChild::kill`] or on drop) before the program
    /// ended on its own.
    Killed,
    /// The cgroup's OOM killer stopped the sandbox at its memory limit.
    MemoryLimit(u64),
    /// The sandbox could not start the program: the setup stage and the error.
    SetupFailed { stage: &'static str, detail: String },
}

impl std::fmt::Display for ChildExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChildExit::Exited(code) => write!(f, "exit status {code}"),
            ChildExit::Signaled(sig) => write!(f, "signal {}", sys::signal_name(*sig)),
            ChildExit::Killed => write!(f, "the sandbox was killed"),
            ChildExit::MemoryLimit(limit) => {
                write!(f, "the memory limit ({limit} bytes) was reached")
            }
            ChildExit::SetupFailed { stage, detail } => {
                write!(f, "the sandbox could not start it ({stage}: {detail})")
            }
        }
    }
}

impl ChildExit {
    fn from_records(records: &[spawn::Record], cgroup: Option<&RunCgroup>, memory: u64) -> Self {
        if let Some(se) = records.iter().find(|r| r.tag == spawn::TAG_SETUP_ERROR) {
            return ChildExit::SetupFailed {
                stage: se.stage_name(),
                detail: sys::errno_name(se.errno),
            };
        }
        if cgroup.is_some_and(RunCgroup::oom_killed) {
            return ChildExit::MemoryLimit(memory);
        }
        match records.iter().find(|r| r.tag == spawn::TAG_EXIT) {
            Some(r) if libc::WIFSIGNALED(r.status) => ChildExit::Signaled(libc::WTERMSIG(r.status)),
            Some(r) => ChildExit::Exited(libc::WEXITSTATUS(r.status)),
            None => ChildExit::Killed,
        }
    }
}

/// The child's stdin: a socket, written with `MSG_NOSIGNAL` (a child that closed its end
/// gives `EPIPE`, never `SIGPIPE`).
#[derive(Debug)]
pub struct ChildStdin(OwnedFd);

impl Write for ChildStdin {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        loop {
            // SAFETY: sending from a valid buffer on a socket we own.
            let n = unsafe {
                libc::send(
                    self.0.as_raw_fd(),
                    buf.as_ptr() as *const libc::c_void,
                    buf.len(),
                    libc::MSG_NOSIGNAL,
                )
            };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl AsFd for ChildStdin {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

type ExitState = Arc<(Mutex<Option<ChildExit>>, Condvar)>;

/// A running sandboxed child (see the module docs). Dropping it kills the sandbox.
#[derive(Debug)]
pub struct SandboxedChild {
    /// The program's stdin (taken by the caller).
    pub stdin: Option<ChildStdin>,
    /// The program's stdout.
    pub stdout: Option<File>,
    /// The program's stderr (unbounded: the reader keeps what it wants).
    pub stderr: Option<File>,
    pidfd: OwnedFd,
    exit: ExitState,
    boundary: SandboxReport,
    /// The thread that owns the sandbox: joined on drop, so that the sandbox is gone (reaped,
    /// its scratch directory and cgroups removed) when the handle is.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SandboxedChild {
    /// The boundary the child runs behind and the limits applied.
    pub fn boundary(&self) -> &SandboxReport {
        &self.boundary
    }

    /// Kills the sandbox: its init, and with it every process of the child.
    pub fn kill(&self) {
        let _ = sys::pidfd_send_signal(self.pidfd.as_raw_fd(), libc::SIGKILL);
    }

    /// How the child ended, if it has.
    pub fn try_wait(&self) -> Option<ChildExit> {
        self.exit
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until the child has ended.
    pub fn wait(&self) -> ChildExit {
        let (lock, ended) = &*self.exit;
        let mut exit = lock.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(e) = exit.as_ref() {
                return e.clone();
            }
            exit = ended.wait(exit).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Drop for SandboxedChild {
    fn drop(&mut self) {
        self.kill();
        if let Some(thread) = self.thread.take() {
            // The init is dead: the thread reaps it and removes what the sandbox made.
            let _ = thread.join();
        }
    }
}

/// What the thread that owns a sandbox hands back once it started.
type Started = Result<((OwnedFd, OwnedFd, OwnedFd), OwnedFd, SandboxReport), SandboxError>;

impl ProcessSandbox {
    /// Whether this host can run sandboxed children (and processes: user, mount and pid
    /// namespaces can be created); probed once, in a few milliseconds.
    pub fn check_children() -> Result<(), ChildrenUnavailable> {
        static PROBE: OnceLock<Result<(), ChildrenUnavailable>> = OnceLock::new();
        PROBE
            .get_or_init(|| {
                let probe = crate::doctor::probe_clone(
                    sys::CLONE_NEWUSER | sys::CLONE_NEWNS | sys::CLONE_NEWPID,
                    crate::doctor::ProbeAction::MountTmpfs,
                );
                if probe.ok {
                    Ok(())
                } else {
                    Err(ChildrenUnavailable::new(probe.detail))
                }
            })
            .clone()
    }

    /// Starts `spec.program` in the sandbox (see the module docs) and returns once the
    /// sandbox exists; the program then starts inside. `Err` means nothing was started
    /// (invalid spec, grant or limit, boundary unavailable). A program that cannot be executed
    /// inside ends at once with [`ChildExit::SetupFailed`].
    pub fn spawn_child(&self, spec: &ChildSpec) -> Result<SandboxedChild, SandboxError> {
        ProcessSandbox::check_children().map_err(|reason| SandboxError::Unavailable {
            boundary: "process-sandbox",
            reason: reason.to_string(),
        })?;
        let defaults = Limits::<ProcessLimits>::default();
        let limits = Limits {
            memory_bytes: spec.limits.memory_bytes,
            tmp_bytes: spec.limits.tmp_bytes,
            boundary: ProcessLimits {
                max_pids: spec.limits.max_pids,
                max_open_files: spec.limits.max_open_files,
                max_file_size: spec.limits.max_file_size,
                ..defaults.boundary
            },
            ..defaults
        };
        check_limits(&limits)?;
        let target = self.child_target(spec)?;
        let mut prepared = self.prepare(
            &target,
            Contents::Code {
                roots: &spec.code,
                env: &spec.env,
            },
            &spec.grants,
            &limits,
            true,
        )?;
        self.count_start();
        let (started_tx, started_rx) = mpsc::channel::<Started>();
        let exit: ExitState = Arc::new((Mutex::new(None), Condvar::new()));
        let thread_exit = Arc::clone(&exit);
        let memory = limits.memory_bytes;
        let thread = std::thread::Builder::new()
            .name("sandbox-child".into())
            .spawn(move || {
                // This thread owns the sandbox: the init dies with it.
                let started = prepared.spawn().and_then(|mut sandboxed| {
                    let stdio = sandboxed.take_stdio().ok_or_else(|| SandboxError::Spawn {
                        detail: "the sandbox has no pipes".into(),
                    })?;
                    let pidfd = sandboxed.pidfd_clone()?;
                    Ok((sandboxed, stdio, pidfd))
                });
                let sandboxed = match started {
                    Ok((sandboxed, stdio, pidfd)) => {
                        if started_tx
                            .send(Ok((stdio, pidfd, prepared.report.clone())))
                            .is_err()
                        {
                            return; // the caller is gone: dropping the sandbox kills it
                        }
                        sandboxed
                    }
                    Err(e) => {
                        let _ = started_tx.send(Err(e));
                        return;
                    }
                };
                let records = sandboxed.wait_records();
                let ended = ChildExit::from_records(&records, prepared.cgroup.as_ref(), memory);
                drop(prepared);
                let (lock, cv) = &*thread_exit;
                *lock.lock().unwrap_or_else(PoisonError::into_inner) = Some(ended);
                cv.notify_all();
            })
            .map_err(|e| SandboxError::io("spawn the sandbox thread", e))?;
        let ((stdin, stdout, stderr), pidfd, boundary) = match started_rx.recv() {
            Ok(Ok(started)) => started,
            Ok(Err(e)) => {
                // Nothing runs: the thread removes what the sandbox made before it ends.
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(SandboxError::Spawn {
                    detail: "the sandbox thread ended without starting the sandbox".into(),
                });
            }
        };
        for fd in [&stdin, &stdout, &stderr] {
            set_blocking(fd.as_raw_fd());
        }
        Ok(SandboxedChild {
            stdin: Some(ChildStdin(stdin)),
            stdout: Some(File::from(stdout)),
            stderr: Some(File::from(stderr)),
            pidfd,
            exit,
            boundary,
            thread: Some(thread),
        })
    }

    /// What the sandbox executes for `spec`, with the interpreter's prefix when it lives
    /// outside the system directories.
    fn child_target(&self, spec: &ChildSpec) -> Result<Target, SandboxError> {
        let invalid = |detail: String| SandboxError::Invalid { detail };
        if !spec.program.is_absolute() {
            return Err(invalid(format!(
                "the program {} must be an absolute path",
                spec.program.display()
            )));
        }
        let real = spec
            .program
            .canonicalize()
            .map_err(|e| invalid(format!("{}: {e}", spec.program.display())))?;
        let kind = runtime_of(&real);
        let unavailable = |reason: InterpreterError| SandboxError::Unavailable {
            boundary: "process-sandbox",
            reason: reason.to_string(),
        };
        let head = script_head(&real);
        let mut program = spec.program.clone();
        let (label, extra_roots) = match kind {
            ModuleKind::Node => {
                let node = host::find_node(Some(&real)).map_err(unavailable)?;
                ("node".to_string(), node.extra_roots)
            }
            ModuleKind::Python => {
                let py = host::find_python(Some(&spec.program)).map_err(unavailable)?;
                if head.is_some() {
                    // A wrapper script (a pyenv shim): run the interpreter it would run.
                    program = py.path.clone();
                }
                (
                    py.version.clone().unwrap_or_else(|| "python".to_string()),
                    py.extra_roots,
                )
            }
            _ => ("native".to_string(), Vec::new()),
        };
        let real = program.canonicalize().unwrap_or(real);
        let mut exec_files = vec![real.clone()];
        if let Some(interp) = script_head(&real).as_deref().and_then(host::shebang) {
            exec_files.push(interp);
        }
        let mut argv = vec![program.as_os_str().as_bytes().to_vec()];
        argv.extend(spec.args.iter().map(|a| a.as_bytes().to_vec()));
        Ok(Target {
            kind,
            program_label: format!("{label} ({})", real.display()),
            reported_runtime: None,
            argv,
            extra_roots,
            exec_files,
        })
    }
}

/// The first bytes of `path` when it is a `#!` script.
fn script_head(path: &Path) -> Option<Vec<u8>> {
    let mut head = [0u8; 256];
    let n = File::open(path)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .ok()?;
    head.starts_with(b"#!").then(|| head[..n].to_vec())
}

fn set_blocking(fd: RawFd) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
}
