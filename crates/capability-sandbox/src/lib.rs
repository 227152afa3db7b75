//! Executors that keep package code out of the host process.
//!
//! A module-backed capability (a `package.json` `capability` export descriptor
//! `{module, manifest, integrity?}`) runs behind an explicit isolation boundary, and every run
//! says which boundary it used and which limits were applied ([`SandboxReport`]), so the
//! runtime can put it in the receipt. Package code is never imported into the host.
//!
//! # Entry points
//!
//! * [`run_module`] / [`ProcessSandbox::run`]: one hook (plan, execute, verify, rollback) of a
//!   module in the Linux process sandbox. `Err` means the run was refused before any code ran
//!   (integrity mismatch, path escape, boundary unavailable, invalid grant); once the boundary
//!   was entered, the outcome — output, guest error, limit, protocol violation, manifest
//!   mismatch — is in [`RunOutcome::result`], next to the [`SandboxReport`].
//! * [`ProcessSandbox::spawn_child`]: any long-lived program (an MCP server over stdio, say)
//!   behind the same boundary, talking to the host over its stdin and stdout in its own
//!   protocol ([`SandboxedChild`]): its code read-only at its host paths ([`ChildSpec::command`]
//!   finds it), the granted effects only, [`ChildLimits`] without a wall clock, killed with
//!   its handle or with the host process (see *Sandboxed children* below).
//! * [`SandboxPool`] ([`ModuleExecutor::with_pool`]): pre-started, single-use sandboxes for
//!   the grant-less runs of long-running hosts; a spare's interpreter is up and waiting before
//!   the run's request comes, and it serves that one run only.
//! * [`OciExecutor`]: the same protocol through docker or podman, when an engine answers.
//! * [`doctor`] and [`select_boundary`]: what works on this host; the strongest boundary for a
//!   module kind. In-process execution is never selected for package code.
//!
//! # Module kinds
//!
//! The module path implies the runner ([`ModuleKind::of`]):
//!
//! | extension | runner |
//! |---|---|
//! | `.js`, `.mjs`, `.cjs` | node, through an embedded ESM shim (`node --input-type=module -e`) |
//! | `.py` | python3, through an embedded shim (`python3 -I -S -B -c`) |
//! | `.wasm` | refused with [`SandboxError::UseWasmExecutor`]: the `capability-wasm` crate runs it |
//! | anything else | an executable speaking the native protocol |
//!
//! Before anything runs, on the host: the module path must start with `./`, contain no `..`,
//! not be absolute, and resolve (symlinks included) inside the package root
//! ([`SandboxError::PathEscape`]); its exact bytes are checked against `integrity` when present
//! (sha256 as hex or base64 with an optional `sha256-` prefix, or `sha512-<base64>` SRI) by
//! `capability-exec`'s integrity checker — the one the WASM engine uses too — streaming the
//! file rather than reading it whole. A module file above [`ProcessLimits::max_module_bytes`]
//! (256 MiB by default) is refused from its size before it is read
//! ([`SandboxError::ModuleTooLarge`]).
//!
//! # Protocols
//!
//! **Native protocol.** The executable reads one JSON object on stdin (then EOF):
//!
//! ```json
//! {"op": "plan"|"execute"|"verify"|"rollback", "input": ..., "plan": ...|null,
//!  "output"?: ..., "receipt"?: ..., "manifest": {...}, "effects": [...], "secrets"?: {...}}
//! ```
//!
//! `output` is present for verify, `receipt` for rollback; `effects` lists the granted effects;
//! `secrets` appears only when `secrets.read` is granted. It writes exactly one JSON object on
//! stdout: `{"output": ...}` or `{"error": {"message": ..., "code"?: ...}}`. Anything else
//! (nothing, two objects, text) is a [`SandboxError::ProtocolViolation`]. stderr is free-form and
//! kept (its last 64 KiB) for diagnostics.
//!
//! **Node protocol.** The module's default export (or its `capability` export) is
//! `{manifest, execute, plan?, verify?, rollback?}` as in the reference: `plan(input, ctx)`,
//! `execute(input, ctx)`, `verify(input, output, ctx)`, `rollback(receipt, ctx)`, each may be
//! async; `ctx = {manifest, plan, effects, secrets}`. The shim speaks the native protocol with
//! one extra step before the hook runs: after importing the module it writes
//! `{"manifest": <loaded manifest>}` as its first stdout line and waits; the host compares
//! `canonical_hash(loaded)` with `canonical_hash(inert)` and answers `{"proceed": true}` only
//! when they are equal — otherwise it kills the sandbox and the run fails with
//! [`SandboxError::ManifestMismatch`] before `execute` (or any hook) is called. `console.*` and
//! `process.stdout` are redirected to stderr so guest logging cannot corrupt the channel.
//!
//! **Python protocol.** The module defines `execute(input, context)` and optionally `plan`,
//! `verify`, `rollback` (same signatures; coroutines are awaited) and `MANIFEST`. The shim does
//! the same handshake; a `MANIFEST` must equal the inert manifest (host-side canonical hash),
//! a module without one is not checked. `OSError`s report their errno name as `code`
//! (`EACCES`, `ENOSPC`, ...), `MemoryError` reports `ENOMEM`.
//!
//! A missing `plan` hook yields `{}` and a missing `verify` yields `null`, both with
//! [`RunOutcome::hook_present`] false; a missing `rollback` is a guest error with code
//! `ROLLBACK_UNSUPPORTED`. A guest error with code `ENOMEM` is reported as
//! [`SandboxError::MemoryLimit`].
//!
//! # The Linux process sandbox
//!
//! No daemon, no root: everything works for an unprivileged user with user namespaces.
//! What a sandbox opens is decided first, as data, before anything is created: the new root
//! (every tmpfs, bind, overlay, device and mask, in order), the landlock rules, the network
//! namespace, the environment and the limits (`src/plan.rs`, tested without spawning
//! anything); the sandbox then applies that plan.
//!
//! * **Namespaces**: user, mount, pid (a small init is pid 1; when it exits the kernel kills
//!   the whole tree), ipc, uts, cgroup, and network — an empty network namespace unless
//!   `network.connect` is granted, in which case the host network is shared.
//! * **Guest identity**: the guest is uid/gid [`SANDBOX_UID`] (1000) inside. When the host runs
//!   as root, the host itself writes the maps and 1000 is mapped to host `nobody` (65534); the
//!   guest switches to it (dropping every supplementary group) before exec, so host
//!   permissions apply to everything it touches as they would to an unprivileged user:
//!   `--allow-read /etc` does not read `/etc/shadow`, a granted path that `nobody` may not
//!   read fails with `EACCES`, a write grant must be writable by others, and files the guest
//!   creates belong to 65534 on the host. (Only the init is inside-root, mapped to the host's
//!   root, to build the mounts.) An unprivileged host can map only itself: the guest is then
//!   the host user.
//! * **Filesystem**: a fresh tmpfs root (read-only and noexec after setup) with read-only,
//!   nosuid, nodev binds of `/usr` (and the `/bin`, `/lib*` symlinks or dirs), a minimal `/etc`
//!   (dynamic linker cache, name resolution, TLS roots, a synthetic `passwd`; noexec),
//!   `/dev/{null,zero,full,random,urandom}`, a fresh `/proc`, the interpreter's prefix when it
//!   lives elsewhere, the package at [`PACKAGE_MOUNT`] (read-only), and a private size-limited
//!   `/tmp` (tmpfs, noexec). Granted paths appear at their host path: `filesystem.read` paths
//!   read-only, `filesystem.write` paths read-write, both noexec: they hold data, not code.
//! * **What the guest does not see**: the package is mounted as a read-only overlay whose
//!   layers are detached mounts (the package, and an empty world-searchable top layer), so
//!   `/proc/self/mountinfo`, `mounts` and `mountstats` show `/package` on a fresh superblock
//!   (`lowerdir+=/`) and never the package's host path (a plain bind would show it as the
//!   mount's root); without overlayfs the package is bind-mounted and a note says so (the
//!   package root must then be searchable by others when the host runs as root). Grants
//!   appear at their host path, which the guest already knows. Kernel internals in `/proc` are
//!   covered (`/dev/null` on a `nodev` bind, or an empty read-only tmpfs): `kallsyms`, `kcore`,
//!   `kmsg`, `slabinfo`, `vmallocinfo`, `pagetypeinfo`, `zoneinfo`, `buddyinfo`, `iomem`,
//!   `ioports`, `modules`, `timer_list`, `sched_debug`, `keys`, `key-users`, `kpage*`,
//!   `sysrq-trigger`, `config.gz`, `acpi`, `bus`, `irq`, `driver`, `fs`, `sysvipc`, `tty`, ...
//! * **Protected host paths**: the capability home (resolved like `capability-runtime`'s
//!   `home.rs`: `$CAP_HOME`, `$XDG_DATA_HOME/capability`, `$HOME/.local/share/capability`,
//!   `./.capability`), [`SandboxConfig::protected`] and [`protect_host_path`] are never visible:
//!   every mounted host tree (system dirs, `/etc` entries, interpreter prefixes, the package,
//!   grants) is checked; an existing protected path inside a read-only mount is masked by an
//!   empty read-only mount (noted in [`SandboxReport::notes`]); a writable mount containing
//!   one, a mount inside one, or a read-only mount containing one that does not exist yet is
//!   refused with [`SandboxError::Invalid`] naming the path. A package root or grant that is
//!   (or contains) `/`, `/root`, `/home`, `/home/<user>`, `$HOME` or the user's passwd home is
//!   refused.
//! * **Landlock** (ABI up to 7): every access right the kernel knows is handled; rules allow
//!   reading the system dirs, `/etc`, the package and read grants; writing only `/tmp` and
//!   write grants (no socket files in write grants); executing only the runner (and its ELF
//!   interpreter), unless `process.spawn` is granted. TCP bind is always denied and TCP
//!   connect without `network.connect` (ABI 4+); abstract unix sockets and signals are scoped
//!   to the sandbox (ABI 6+).
//! * **Seccomp**: a deny list (ptrace, mount APIs, namespaces, keyrings, bpf, perf, userfaultfd,
//!   modules, kexec, reboot, clock setting, io_uring, ...); `clone3` answers `ENOSYS` so the
//!   C library falls back to `clone`, whose flags are checked: threads are allowed, new
//!   processes are refused with `EPERM` unless `process.spawn` is granted, namespace flags
//!   always. Socket families by the `socket(2)` domain argument (`EACCES` otherwise): `AF_INET`,
//!   `AF_INET6` and `AF_UNIX` only with `network.connect`, `AF_NETLINK` only as
//!   `NETLINK_ROUTE`; `socketpair` for `AF_UNIX` stream/seqpacket pairs; `listen`, `accept`,
//!   `accept4` never; no seccomp notification listeners of the guest's own (one could approve
//!   an exec that ours refuses). Without a memory cgroup, `memfd_create` and SysV IPC are
//!   refused.
//! * **Environment**: empty unless `environment.read` is granted (then exactly the host-chosen
//!   map); secrets only with `secrets.read`, in the request envelope. The init wipes its copy of
//!   the host's argv and environment and is not dumpable, so `/proc/1` shows nothing.
//! * **Limits** ([`Limits`] with [`ProcessLimits`]): RLIMIT_CPU, RLIMIT_NPROC, RLIMIT_NOFILE, RLIMIT_FSIZE, no core
//!   dumps, no POSIX message queues; the tmpfs size; a wall-clock timer that kills the pid
//!   namespace's init (and so the tree). A cgroup v2 with delegated `pids` and `memory` is used
//!   when available (`CLONE_INTO_CGROUP`), else writable cgroup v1 `pids` and `memory` groups
//!   (the init joins them before anything else runs). With a pids cgroup, RLIMIT_NPROC is only
//!   a high backstop: it counts every process of the guest's host uid, which all guests of a
//!   root host share (`nobody`). Without one it is the limit, shared that way (a guest's fork
//!   bomb can make forks in a concurrent sandbox fail early, never exceed the limit). A guest
//!   running as host uid 0 would be exempt from it; that no longer happens, but the
//!   best-effort watchdog stays for that case.
//! * **Memory** holds for the whole sandbox, not per process: a memory cgroup counts every page
//!   (private, shared anonymous, SysV, memfd, /tmp, kernel memory); v1 sets
//!   `memory.limit_in_bytes` and `memory.memsw.limit_in_bytes`. Without one, RLIMIT_AS counts
//!   every mapping of the guest (shared ones too), and seccomp refuses what holds memory
//!   without a mapping: `memfd_create` and SysV `shmget`/`msgget`/`semget` (on a root host
//!   the IPC namespace's own `kernel.shm*`/`msgmni` are zeroed too).
//!   RLIMIT_DATA is always set so that plain allocations fail cleanly. When no mechanism can
//!   hold the whole sandbox (node, or `process.spawn`, without a memory cgroup) the report
//!   says `enforced: false`. `ISOLATION.md` lists every limit and its mechanism per host kind.
//!   Every run's [`SandboxReport::limits`] says which mechanism enforced each limit.
//! * **Nothing of a run outlives it.** On the host a run makes one empty directory (its new
//!   root's mount point, `.capability-sandbox-<pid>-<n>` in [`SandboxConfig::scratch_dir`] or
//!   the temp dir) and its per-run cgroups (`capability-sandbox-<pid>-<n>`), `<pid>` being the
//!   host process. They are removed before the run's result is returned — a
//!   [`crate::Session`] when it closes, a [`SandboxedChild`] when its handle is dropped, both
//!   waiting for the thread that owns the sandbox — once the sandbox's processes are gone
//!   (what is still in the cgroup after a moment is killed). Runs still in flight when the
//!   process exits (`exit`, or `main` returning) are ended and cleaned up by an `atexit`
//!   handler. A sandbox's first start removes what runs of dead processes left in its scratch
//!   directory and cgroup parents (a crash, `SIGKILL`); a live process's runs are never
//!   touched.
//!
//! **What a grant opens, and what it does not.**
//!
//! * *Reading is not connecting.* Connecting to a pathname unix socket needs only search
//!   access to its directory and write permission on the socket inode: a read-only mount does
//!   not stop it and landlock has no right for it (its ABI 6 scoping covers abstract sockets
//!   only). So the filter refuses `socket(AF_UNIX, ...)` unless `network.connect` is granted:
//!   without it the guest has no unconnected unix socket to `connect`, `bind` or `sendto` with,
//!   and a datagram `socketpair` (which could be re-connected to a path) is refused too. With
//!   `network.connect` the guest may connect to a unix socket it can see, i.e. one inside a
//!   granted path, subject to host permissions (see the guest identity above).
//! * *Connecting is not listening.* No Capability 1.x effect grants listening (the standard
//!   has no `network.listen`): `listen`/`accept`/`accept4` are refused by seccomp (`listen` on an
//!   unbound socket would pick a port without any `bind` landlock could see) and landlock
//!   denies every TCP `bind`. Not closed: a UDP socket may still be bound to a port of the
//!   guest's choosing with `network.connect` and receive datagrams there (seccomp cannot read
//!   `bind`'s address, landlock's network rules cover TCP only); it cannot accept connections.
//! * *No new program image without `process.spawn`.* `execve`/`execveat` are sent to a seccomp
//!   user-notification listener that the sandbox init holds: it lets exactly the first one
//!   through — the runner's own exec, before any guest code runs — and closes the listener, so
//!   every later exec fails with `ENOSYS`: the dynamic loader cannot be started as a program
//!   (`ld.so /usr/bin/echo`), a memfd cannot be `fexecve`d, the runner cannot re-exec itself.
//!   Executable *mappings* (`mmap(PROT_EXEC)` of a file) are what the loader needs for the
//!   runner's own libraries, so they are not refused; they are limited by mount flags instead:
//!   only the system dirs, the interpreter prefix and the package are exec-mountable, while
//!   `/tmp`, grants, `/etc`, `/dev`, `/proc` and the root are `noexec` (the kernel refuses
//!   `PROT_EXEC` mappings, and later `mprotect`s, of their files). So nothing the guest can
//!   write, and nothing a grant exposes, can become code. In-process code that the guest brings
//!   itself (its own native code, a JIT, ctypes) runs inside the same process under the same
//!   filters and gains nothing. With `process.spawn`, `execve` is allowed for files landlock
//!   marks executable (system dirs and the interpreter prefix), and `vm.memfd_noexec` = 2 in
//!   the sandbox's pid namespace makes every memfd non-executable (when the host runs as root,
//!   the only case where the init may write it; kernel 6.3+).
//!
//! # Sandboxed children
//!
//! A hook run ([`ProcessSandbox::run`]) and a [`crate::Session`] speak this crate's protocol
//! with a module. A *child* is any program (node or python with a script, a native server)
//! that the host talks to over its stdin and stdout in a protocol of its own, an MCP server
//! over stdio say, for as long as the host likes. It runs behind the same boundary as a module
//! (namespaces, the tmpfs root, landlock, seccomp, rlimits, a cgroup when there is one):
//!
//! * **Filesystem**: the system directories, the minimal `/etc`, `/dev`, a fresh `/proc` and a
//!   private size-limited `/tmp` as in every sandbox; the program's code read-only at its host
//!   paths ([`ChildSpec::code`]; [`ChildSpec::command`] finds it); the interpreter's prefix when
//!   it lives outside the system directories; the granted paths (`filesystem.read` with
//!   [`Grants::read_paths`] read-only, `filesystem.write` with [`Grants::write_paths`]
//!   read-write, both noexec). Nothing else of the host, and never a protected path such as
//!   the capability home (masked or refused as for a package).
//! * **Effects** as for a module: the host's network only with `network.connect` (otherwise an
//!   empty network namespace, and no `AF_INET`/`AF_INET6`/`AF_UNIX` sockets), new processes
//!   only with `process.spawn` (otherwise the program's own `execve` is the only one), no
//!   writes outside `/tmp` and the write grants. The environment is exactly
//!   [`ChildSpec::env`]: it is the program's configuration, chosen by the host, so it needs no
//!   `environment.read`.
//! * **Limits** ([`ChildLimits`]): memory, processes (threads included), open files, file size
//!   and `/tmp` size, held as for a run (see `ISOLATION.md`). No wall clock and no CPU limit:
//!   the host decides when the child ends.
//! * **Lifetime**: a thread of its own starts the sandbox and waits for it. The child ends when
//!   its [`SandboxedChild`] is killed or dropped, and when the host process dies (the sandbox
//!   init has `PR_SET_PDEATHSIG`, and the kernel kills the whole pid namespace with the init):
//!   no process outlives the host.
//!
//! # The OCI executor
//!
//! [`OciExecutor`] runs the same protocols through `docker run` or `podman run` (see
//! [`docker_args`] for the exact hardening: no network unless `network.connect`, read-only
//! root, no capabilities, no new privileges, user 65534, pids/memory/cpu limits, explicit
//! ulimits, a size-limited `/tmp`). Images are pinned by digest ([`check_pinned_image`]) and
//! chosen per runner ([`OciImages`], or `CAPABILITY_OCI_IMAGE_{NODE,PYTHON,NATIVE}`). The engine
//! is detected with bounded probes ([`detect_engine`], [`ENGINE_PROBE_TIMEOUT`];
//! `CAPABILITY_OCI_ENGINE` picks one) and runs with the host's environment, so podman reads
//! `CONTAINERS_CONF` (the repository's `.ci/containers.conf` suits hosts with hybrid cgroups).
//! A container the engine cannot start is [`SandboxError::Unavailable`] with its message.
//!
//! # Errors
//!
//! [`SandboxError`] is the one error type; [`SandboxError::kind`] gives a stable tag for
//! receipts (`timeout`, `memory_limit`, `cpu_limit`, `pid_limit`, `guest_error`,
//! `manifest_mismatch`, `path_escape`, `integrity_mismatch`, `module_too_large`,
//! `protocol_violation`, ...).
//!
//! # Dependencies
//!
//! The executors here implement `capability-exec`'s [`Executor`](capability_exec::Executor)
//! trait and depend only on `capability-exec`, `capability-core` and `capability-wasm`; the
//! runtime and the policy crate are not dependencies (the runtime is used by the integration
//! tests only). The run vocabulary — [`Grants`], [`HostGrants`], [`effects`], [`Limits`],
//! [`Invocation`], [`Op`], [`RunOutcome`], [`GuestError`] — is `capability-exec`'s,
//! re-exported; [`ProcessLimits`] is what only this boundary limits.

mod child;
mod doctor;
mod error;
mod executor;
mod linux;
mod oci;
mod package;
mod plan;
mod pool;
mod process;
mod protect;
mod protocol;
mod session;
pub mod stamp;
mod types;

/// The run vocabulary every executor shares, from `capability-exec`.
pub use capability_exec::{
    AppliedLimit, ExecutorChoice, Grants, GuestError, HostGrants, Invocation, Limits, Op,
    RunOutcome, SandboxReport, effects,
};
pub use capability_wasm::{WasmExecutor, WasmLimits};
pub use child::{ChildExit, ChildLimits, ChildSpec, ChildStdin, SandboxedChild};
pub use doctor::{
    Boundary, DoctorReport, EngineProbes, Probe, doctor, probe_engines, select_boundary,
};
pub use error::{
    ChildrenUnavailable, EngineError, InterpreterError, LandlockUnavailable, SandboxError,
};
pub use executor::{ModuleExecutor, hook_error};
pub use oci::{
    ENGINE_PROBE_TIMEOUT, OCI_ENGINE_ENV, OCI_WORKSPACE, OciEngine, OciExecutor, OciImages, OciRun,
    check_pinned_image, detect_engine, docker_args, last_line as engine_message, probe_cli,
    probe_engine,
};
pub use package::{ResolvedModule, resolve_module, resolve_module_limited, verify_integrity};
pub use pool::SandboxPool;
pub use process::{PACKAGE_MOUNT, ProcessSandbox, SANDBOX_UID, SandboxConfig};
pub use protect::{default_capability_home, expose_read_only, protect_host_path};
pub use protocol::{Response, envelope, parse_response};
pub use session::{PRE_STARTED_NOTE, Session};
pub use types::{ModuleKind, ModuleSpec, ProcessLimits};

/// Runs one hook of a module-backed capability behind the process sandbox, with the default
/// [`SandboxConfig`]. See the crate docs for the protocol and the boundary.
pub fn run_module(
    spec: &ModuleSpec,
    invocation: &Invocation,
    grants: &Grants,
    limits: &Limits<ProcessLimits>,
) -> Result<RunOutcome<SandboxError, SandboxReport>, SandboxError> {
    ProcessSandbox::global().run(spec, invocation, grants, limits)
}
