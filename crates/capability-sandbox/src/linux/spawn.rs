//! Process creation behind the boundary, and the host side of the conversation.
//!
//! The host calls `clone3` with new user, mount, pid, ipc, uts, cgroup (and, without
//! `network.connect`, network) namespaces. The child `C` becomes pid 1 of the new pid namespace:
//! it writes its uid/gid maps, builds the minimal root (tmpfs + read-only binds), pivots into
//! it, then forks the guest `D`. `D` applies rlimits, drops capabilities, sets no_new_privs,
//! applies landlock and seccomp and `execve`s the runner. `C` reaps orphans, optionally
//! watches the process count, reports `D`'s exit status and rusage on a pipe and exits, which
//! makes the kernel kill everything left in the namespace.
//!
//! Everything `C` and `D` need is allocated by the host *before* `clone3`: the child runs in a
//! copy of a possibly multi-threaded process, so it only makes raw syscalls on prepared data
//! (no allocation, no locks).

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use libc::{c_char, c_int, c_uint, c_ulong};

use super::landlock::LandlockPlan;
use super::sys::{self, CloneArgs, MountAttr};
use crate::error::SandboxError;

/// One step of building the new root, with absolute host-side paths under the new root.
pub(crate) enum MountOp {
    Mkdir(CString),
    Touch(CString),
    Symlink {
        target: CString,
        link: CString,
    },
    Tmpfs {
        target: CString,
        flags: c_ulong,
        data: CString,
    },
    Bind {
        source: CString,
        target: CString,
        attrs: u64,
    },
    /// A fresh procfs for the pid namespace; failure is reported, not fatal. `masks` (full
    /// paths under `target`, is_dir) are covered once it is mounted: files by `/dev/null` on a
    /// `nodev` bind (opening fails), directories by an empty read-only tmpfs.
    Proc {
        target: CString,
        masks: Vec<(CString, bool)>,
    },
    /// `source` as a read-only overlay with an empty top layer: a new superblock whose root is
    /// `/` and whose layers were given as detached mounts, so `/proc/self/mountinfo` shows no
    /// host path, and whose root directory is world-searchable whatever the mode of `source`.
    /// Falls back to a plain bind (with a note) when overlayfs is unavailable.
    Overlay {
        source: CString,
        target: CString,
        attrs: u64,
    },
    /// A small file written into the new root (before it is made read-only).
    WriteFile {
        path: CString,
        data: Vec<u8>,
    },
}

/// Everything the child needs, prepared before `clone3`.
pub(crate) struct ChildPlan {
    pub uid_map: Vec<u8>,
    pub gid_map: Vec<u8>,
    /// The host writes the maps (it may map other ids than its own: a root host maps the guest
    /// to an unprivileged uid); the init waits for them. Otherwise the init maps itself.
    pub maps_by_host: bool,
    /// Maps the host writes instead when its own are refused (a root host inside a user
    /// namespace that does not map `nobody`): the guest is then the host user.
    pub fallback_maps: Option<(Vec<u8>, Vec<u8>)>,
    /// The ids (inside the user namespace) the guest switches to before exec, dropping every
    /// supplementary group, when they differ from the init's.
    pub guest_ids: Option<(u32, u32)>,
    pub new_root: CString,
    pub mounts: Vec<MountOp>,
    /// Memory ranges (argv/environment of the host) that `C` zeroes in its own copy.
    pub scrub: Vec<(usize, usize)>,
    /// Kill the sandbox when more than this many processes exist (polling /proc).
    pub pids_watchdog: Option<u32>,
    pub workdir: CString,
    pub rlimits: Vec<(c_int, u64, u64)>,
    pub landlock: Option<LandlockPlan>,
    pub seccomp: Option<Vec<libc::sock_filter>>,
    pub exec: CString,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    /// cgroup v1 `cgroup.procs` files opened by the host: the init joins each by writing `0`
    /// first thing.
    pub cgroup_procs_fds: Vec<c_int>,
    /// Namespaced sysctls written by the init: the IPC namespace's SysV limits
    /// (`/proc/sys/kernel/shm*`, `msgmni`) and the pid namespace's `vm.memfd_noexec`: path,
    /// value, and whether failing to write it aborts the setup.
    pub sysctls: Vec<(CString, Vec<u8>, bool)>,
    /// The seccomp filter sends execve/execveat to a listener: the guest passes it to the init,
    /// which lets the runner's own exec through and then closes it (all later execs: ENOSYS).
    pub exec_once: bool,
}

/// Stages named in setup-failure records.
pub(crate) const STAGES: &[&str] = &[
    "cgroup",
    "setgroups",
    "gid_map",
    "uid_map",
    "host-maps",
    "sysctl",
    "mount-private",
    "mkdir",
    "touch",
    "symlink",
    "tmpfs",
    "bind(open_tree)",
    "bind(mount_setattr)",
    "bind(move_mount)",
    "proc",
    "proc-mask",
    "overlay",
    "pivot_root",
    "remount-root-readonly",
    "sethostname",
    "fork-guest",
    "stdio",
    "chdir",
    "setrlimit",
    "capabilities",
    "guest-ids",
    "no_new_privs",
    "landlock",
    "seccomp",
    "exec-listener",
    "execve",
];

fn stage(name: &str) -> u32 {
    STAGES.iter().position(|s| *s == name).unwrap_or(0) as u32
}

pub(crate) const TAG_SETUP_ERROR: u32 = 1;
pub(crate) const TAG_EXIT: u32 = 2;
pub(crate) const TAG_PIDS: u32 = 3;
pub(crate) const TAG_NOTE: u32 = 4;

/// A fixed-size record on the report pipe (smaller than PIPE_BUF, so writes are atomic).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Record {
    pub tag: u32,
    pub stage: u32,
    pub errno: i32,
    pub status: i32,
    pub utime_us: u64,
    pub stime_us: u64,
    pub maxrss_kb: u64,
    pub count: u64,
}

impl Record {
    pub fn stage_name(&self) -> &'static str {
        STAGES
            .get(self.stage as usize)
            .copied()
            .unwrap_or("unknown")
    }
}

/// A running sandbox: the init process `C` and the host ends of its pipes.
pub(crate) struct Sandboxed {
    pid: i32,
    pidfd: OwnedFd,
    reaped: bool,
    stdin: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    report: Option<OwnedFd>,
    pub spawned_at: Instant,
    /// Why the host's own uid/gid maps were refused and the fallback maps used, if they were.
    pub maps_fallback: Option<String>,
}

impl Drop for Sandboxed {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = sys::pidfd_send_signal(self.pidfd.as_raw_fd(), libc::SIGKILL);
            let mut status = 0;
            // SAFETY: waiting for our own child; `status` is a valid out pointer.
            unsafe { libc::waitpid(self.pid, &mut status, libc::__WALL) };
            self.reaped = true;
        }
    }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A pipe whose ends are close-on-exec and numbered 3 or above.
fn pipe() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(SandboxError::io("pipe2", std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 just returned these fresh descriptors; we own them.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((high_fd(r)?, high_fd(w)?))
}

fn high_fd(fd: OwnedFd) -> Result<OwnedFd, SandboxError> {
    if fd.as_raw_fd() >= 3 {
        return Ok(fd);
    }
    // SAFETY: duplicating a descriptor we own.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if n < 0 {
        return Err(SandboxError::io("fcntl", std::io::Error::last_os_error()));
    }
    // SAFETY: fcntl returned a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

fn set_nonblocking(fd: RawFd) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
}

/// Starts the sandbox. `cgroup_fd` places it in a cgroup (`CLONE_INTO_CGROUP`).
pub(crate) fn spawn(
    plan: &ChildPlan,
    clone_flags: u64,
    cgroup_fd: Option<RawFd>,
) -> Result<Sandboxed, SandboxError> {
    // stdin is a socket pair so the host can write with MSG_NOSIGNAL (no SIGPIPE in a library).
    let mut sp = [0 as c_int; 2];
    // SAFETY: `sp` has room for two descriptors.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            sp.as_mut_ptr(),
        )
    } < 0
    {
        return Err(SandboxError::io(
            "socketpair",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: socketpair just returned these descriptors; we own them.
    let (stdin_child, stdin_host) =
        unsafe { (OwnedFd::from_raw_fd(sp[0]), OwnedFd::from_raw_fd(sp[1])) };
    let (stdin_child, stdin_host) = (high_fd(stdin_child)?, high_fd(stdin_host)?);
    let (stdout_host, stdout_child) = pipe()?;
    let (stderr_host, stderr_child) = pipe()?;
    let (report_host, report_child) = pipe()?;
    // The init waits on this pipe until the host has written its uid/gid maps.
    let (go_child, go_host) = pipe()?;

    let mut argv: Vec<*const c_char> = plan.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const c_char> = plan.envp.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    let fds = ChildFds {
        stdin: stdin_child.as_raw_fd(),
        stdout: stdout_child.as_raw_fd(),
        stderr: stderr_child.as_raw_fd(),
        report: report_child.as_raw_fd(),
        go_read: go_child.as_raw_fd(),
        go_write: go_host.as_raw_fd(),
    };

    let mut pidfd: c_int = -1;
    let mut args = CloneArgs {
        flags: clone_flags | sys::CLONE_PIDFD,
        pidfd: &mut pidfd as *mut c_int as u64,
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
    if let Some(fd) = cgroup_fd {
        args.flags |= sys::CLONE_INTO_CGROUP;
        args.cgroup = fd as u64;
    }
    let spawned_at = Instant::now();
    // SAFETY: `args` is valid; in the child we only run `child_init`, which makes raw syscalls
    // on data prepared above and never returns.
    let pid = unsafe { sys::clone3(&mut args) };
    if pid == 0 {
        // SAFETY: we are the freshly cloned child; see `child_init`.
        unsafe { child_init(plan, &fds, argv.as_ptr(), envp.as_ptr()) }
    }
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        return Err(SandboxError::Unavailable {
            boundary: "process-sandbox",
            reason: format!("clone3 with namespaces failed: {e}"),
        });
    }
    drop((
        stdin_child,
        stdout_child,
        stderr_child,
        report_child,
        go_child,
    ));
    // SAFETY: CLONE_PIDFD stored a fresh pidfd that we now own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    for fd in [&stdin_host, &stdout_host, &stderr_host, &report_host] {
        set_nonblocking(fd.as_raw_fd());
    }
    let mut sandboxed = Sandboxed {
        pid: pid as i32,
        pidfd,
        reaped: false,
        stdin: Some(stdin_host),
        stdout: Some(stdout_host),
        stderr: Some(stderr_host),
        report: Some(report_host),
        spawned_at,
        maps_fallback: None,
    };
    if plan.maps_by_host {
        // On error the init is killed when `sandboxed` drops.
        sandboxed.maps_fallback =
            write_maps(pid as i32, plan).map_err(|e| SandboxError::Unavailable {
                boundary: "process-sandbox",
                reason: format!("writing the sandbox's uid/gid maps failed: {e}"),
            })?;
    }
    // Closing the host end without writing tells a waiting init to give up; after the maps,
    // one byte tells it to go on.
    // SAFETY: writing one byte from a static buffer to our pipe.
    let go = unsafe { libc::write(go_host.as_raw_fd(), b"1".as_ptr() as *const libc::c_void, 1) };
    if go != 1 && plan.maps_by_host {
        return Err(SandboxError::io(
            "signalling the sandbox init",
            std::io::Error::last_os_error(),
        ));
    }
    drop(go_host);
    Ok(sandboxed)
}

/// The host writes the init's uid and gid maps (it has CAP_SETUID/CAP_SETGID in the parent
/// user namespace, so it may map ids other than its own).
/// Returns why the fallback maps were used, if they were.
fn write_maps(pid: i32, plan: &ChildPlan) -> std::io::Result<Option<String>> {
    let mut fallback = None;
    for (file, map, alt) in [
        (
            "uid_map",
            &plan.uid_map,
            plan.fallback_maps.as_ref().map(|m| &m.0),
        ),
        (
            "gid_map",
            &plan.gid_map,
            plan.fallback_maps.as_ref().map(|m| &m.1),
        ),
    ] {
        let path = format!("/proc/{pid}/{file}");
        match (std::fs::write(&path, map), alt) {
            (Ok(()), _) => {}
            (Err(e), Some(alt)) => {
                std::fs::write(&path, alt)?;
                fallback.get_or_insert(format!("{file}: {e}"));
            }
            (Err(e), None) => return Err(e),
        }
    }
    Ok(fallback)
}

struct ChildFds {
    stdin: c_int,
    stdout: c_int,
    stderr: c_int,
    report: c_int,
    go_read: c_int,
    go_write: c_int,
}

fn report(fd: c_int, rec: &Record) {
    // SAFETY: writing a plain-old-data record from our own stack.
    unsafe {
        libc::write(
            fd,
            rec as *const Record as *const libc::c_void,
            std::mem::size_of::<Record>(),
        );
    }
}

fn fail(fd: c_int, name: &str, errno: i32) -> ! {
    report(
        fd,
        &Record {
            tag: TAG_SETUP_ERROR,
            stage: stage(name),
            errno,
            ..Record::default()
        },
    );
    // SAFETY: terminating the child without running host destructors or atexit handlers.
    unsafe { libc::_exit(127) }
}

fn write_file(path: &CStr, data: &[u8]) -> Result<(), i32> {
    // SAFETY: `path` is NUL-terminated; `data` is a valid buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(last_errno());
        }
        let n = libc::write(fd, data.as_ptr() as *const libc::c_void, data.len());
        let e = last_errno();
        libc::close(fd);
        if n < 0 || n as usize != data.len() {
            return Err(if n < 0 { e } else { libc::EIO });
        }
    }
    Ok(())
}

/// The sandbox init (`C`). Never returns.
///
/// # Safety
/// Only called in the child of `clone3`, with pointers into data the parent prepared.
unsafe fn child_init(
    plan: &ChildPlan,
    fds: &ChildFds,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> ! {
    let rfd = fds.report;
    // SAFETY: this whole block makes raw syscalls on prepared, NUL-terminated data; no allocation.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        for &fd in &plan.cgroup_procs_fds {
            if libc::write(fd, b"0".as_ptr() as *const libc::c_void, 1) != 1 {
                fail(rfd, "cgroup", last_errno());
            }
            libc::close(fd);
        }
        libc::close(fds.go_write);
        let mut go = 0u8;
        let got = loop {
            let n = libc::read(fds.go_read, &mut go as *mut u8 as *mut libc::c_void, 1);
            if n >= 0 || last_errno() != libc::EINTR {
                break n;
            }
        };
        libc::close(fds.go_read);
        if got != 1 {
            fail(rfd, "host-maps", libc::EPIPE);
        }
        if !plan.maps_by_host {
            if let Err(e) = write_file(c"/proc/self/setgroups", b"deny") {
                fail(rfd, "setgroups", e);
            }
            if let Err(e) = write_file(c"/proc/self/gid_map", &plan.gid_map) {
                fail(rfd, "gid_map", e);
            }
            if let Err(e) = write_file(c"/proc/self/uid_map", &plan.uid_map) {
                fail(rfd, "uid_map", e);
            }
        }
        // The IPC and pid namespaces are ours (owned by our user namespace): bound SysV IPC,
        // make memfds non-executable.
        for (path, value, required) in &plan.sysctls {
            if let Err(e) = write_file(path, value) {
                if *required {
                    fail(rfd, "sysctl", e);
                }
                report(
                    rfd,
                    &Record {
                        tag: TAG_NOTE,
                        stage: stage("sysctl"),
                        errno: e,
                        ..Record::default()
                    },
                );
            }
        }
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) < 0
        {
            fail(rfd, "mount-private", last_errno());
        }
        for op in &plan.mounts {
            do_mount(rfd, op);
        }
        if libc::chdir(plan.new_root.as_ptr()) < 0 {
            fail(rfd, "pivot_root", last_errno());
        }
        if libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) < 0 {
            fail(rfd, "pivot_root", last_errno());
        }
        if libc::umount2(c".".as_ptr(), libc::MNT_DETACH) < 0 {
            fail(rfd, "pivot_root", last_errno());
        }
        if libc::chdir(c"/".as_ptr()) < 0 {
            fail(rfd, "pivot_root", last_errno());
        }
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT
                | libc::MS_BIND
                | libc::MS_RDONLY
                | libc::MS_NOSUID
                | libc::MS_NODEV
                | libc::MS_NOEXEC,
            std::ptr::null(),
        ) < 0
        {
            fail(rfd, "remount-root-readonly", last_errno());
        }
        let host = b"capability-sandbox";
        if libc::sethostname(host.as_ptr() as *const c_char, host.len()) < 0 {
            fail(rfd, "sethostname", last_errno());
        }
        // The host's argv and environment are readable through /proc/1/cmdline: wipe our copy.
        for &(start, end) in &plan.scrub {
            if end > start {
                std::ptr::write_bytes(start as *mut u8, 0, end - start);
            }
        }
        // The channel on which the guest hands over its seccomp listener.
        let mut sv: [c_int; 2] = [-1, -1];
        if plan.exec_once
            && libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                sv.as_mut_ptr(),
            ) < 0
        {
            fail(rfd, "exec-listener", last_errno());
        }
        let guest = libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD as c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        );
        if guest < 0 {
            fail(rfd, "fork-guest", last_errno());
        }
        if guest == 0 {
            if sv[0] >= 0 {
                libc::close(sv[0]);
            }
            guest_exec(plan, fds, argv, envp, sv[1]);
        }
        let guest = guest as libc::pid_t;
        // Before the guest can run any code: not dumpable (so /proc/1 is closed to it), and
        // only the report pipe (and the listener channel) kept: the host's descriptors must
        // not be reachable through /proc/1/fd, and the guest's pipes must see EOF when the
        // guest is gone.
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        if sv[0] >= 0 {
            libc::close(sv[1]);
        }
        let mut keep = [rfd, sv[0]];
        keep.sort_unstable();
        let mut next: c_int = 0;
        for fd in keep {
            if fd < 0 {
                continue;
            }
            if fd > next {
                libc::syscall(libc::SYS_close_range, next as u32, (fd - 1) as u32, 0u32);
            }
            next = fd + 1;
        }
        libc::syscall(libc::SYS_close_range, next as u32, u32::MAX, 0u32);
        if sv[0] >= 0 {
            allow_first_exec(sv[0], guest);
            libc::close(sv[0]);
        }
        init_loop(plan, rfd, guest)
    }
}

/// Reaps children until the guest exits, then reports and exits.
unsafe fn init_loop(plan: &ChildPlan, rfd: c_int, guest: libc::pid_t) -> ! {
    // SAFETY: this whole block makes raw syscalls with stack buffers.
    unsafe {
        let proc_fd = match plan.pids_watchdog {
            Some(_) => libc::open(
                c"/proc".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            ),
            None => -1,
        };
        loop {
            let mut status: c_int = 0;
            let mut ru: libc::rusage = std::mem::zeroed();
            let flags = if proc_fd >= 0 { libc::WNOHANG } else { 0 };
            let r = libc::wait4(-1, &mut status, flags | libc::__WALL, &mut ru);
            if r == guest {
                let rec = Record {
                    tag: TAG_EXIT,
                    status,
                    utime_us: (ru.ru_utime.tv_sec as u64) * 1_000_000 + ru.ru_utime.tv_usec as u64,
                    stime_us: (ru.ru_stime.tv_sec as u64) * 1_000_000 + ru.ru_stime.tv_usec as u64,
                    maxrss_kb: ru.ru_maxrss as u64,
                    ..Record::default()
                };
                report(rfd, &rec);
                libc::_exit(0);
            }
            if r > 0 {
                continue;
            }
            if r < 0 && last_errno() == libc::EINTR {
                continue;
            }
            if r < 0 && last_errno() == libc::ECHILD {
                libc::_exit(0);
            }
            if let (Some(max), true) = (plan.pids_watchdog, proc_fd >= 0) {
                let n = count_processes(proc_fd);
                // Our own init does not count.
                if n > max as u64 + 1 {
                    report(
                        rfd,
                        &Record {
                            tag: TAG_PIDS,
                            count: n - 1,
                            ..Record::default()
                        },
                    );
                    libc::_exit(0);
                }
                let ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 1_000_000,
                };
                libc::nanosleep(&ts, std::ptr::null_mut());
            }
        }
    }
}

unsafe fn count_processes(proc_fd: c_int) -> u64 {
    let mut buf = [0u8; 16384];
    let mut n = 0u64;
    // SAFETY: this whole block makes getdents64 into a stack buffer; records are parsed in bounds.
    unsafe {
        libc::lseek(proc_fd, 0, libc::SEEK_SET);
        loop {
            let got = libc::syscall(libc::SYS_getdents64, proc_fd, buf.as_mut_ptr(), buf.len());
            if got <= 0 {
                break;
            }
            let got = got as usize;
            let mut off = 0usize;
            while off + 19 < got {
                let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
                if reclen == 0 {
                    break;
                }
                let first = buf[off + 19];
                if first.is_ascii_digit() {
                    n += 1;
                }
                off += reclen;
            }
        }
    }
    n
}

unsafe fn do_mount(rfd: c_int, op: &MountOp) {
    // SAFETY: this whole block makes raw mount syscalls on NUL-terminated prepared paths.
    unsafe {
        match op {
            MountOp::Mkdir(path) => {
                if libc::mkdir(path.as_ptr(), 0o755) < 0 && last_errno() != libc::EEXIST {
                    fail(rfd, "mkdir", last_errno());
                }
            }
            MountOp::Touch(path) => {
                let fd = libc::open(
                    path.as_ptr(),
                    libc::O_RDONLY | libc::O_CREAT | libc::O_CLOEXEC,
                    0o644,
                );
                if fd < 0 {
                    fail(rfd, "touch", last_errno());
                }
                libc::close(fd);
            }
            MountOp::Symlink { target, link } => {
                if libc::symlink(target.as_ptr(), link.as_ptr()) < 0 && last_errno() != libc::EEXIST
                {
                    fail(rfd, "symlink", last_errno());
                }
            }
            MountOp::Tmpfs {
                target,
                flags,
                data,
            } => {
                if libc::mount(
                    c"tmpfs".as_ptr(),
                    target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    *flags,
                    data.as_ptr() as *const libc::c_void,
                ) < 0
                {
                    fail(rfd, "tmpfs", last_errno());
                }
            }
            MountOp::Bind {
                source,
                target,
                attrs,
            } => {
                if let Err((name, e)) = bind_stages(source, target, *attrs) {
                    fail(rfd, name, e);
                }
            }
            MountOp::WriteFile { path, data } => {
                let fd = libc::open(
                    path.as_ptr(),
                    libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
                    0o644,
                );
                if fd < 0 {
                    fail(rfd, "touch", last_errno());
                }
                libc::write(fd, data.as_ptr() as *const libc::c_void, data.len());
                libc::close(fd);
            }
            MountOp::Proc { target, masks } => {
                if libc::mount(
                    c"proc".as_ptr(),
                    target.as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    std::ptr::null(),
                ) < 0
                {
                    report(
                        rfd,
                        &Record {
                            tag: TAG_NOTE,
                            stage: stage("proc"),
                            errno: last_errno(),
                            ..Record::default()
                        },
                    );
                    return;
                }
                for (path, is_dir) in masks {
                    let r = if *is_dir {
                        libc::mount(
                            c"tmpfs".as_ptr(),
                            path.as_ptr(),
                            c"tmpfs".as_ptr(),
                            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                            c"size=4k,nr_inodes=16,mode=0555".as_ptr() as *const libc::c_void,
                        )
                    } else {
                        bind_mount(
                            c"/dev/null",
                            path,
                            sys::MOUNT_ATTR_RDONLY
                                | sys::MOUNT_ATTR_NOSUID
                                | sys::MOUNT_ATTR_NODEV
                                | sys::MOUNT_ATTR_NOEXEC,
                        )
                        .map_or(-1, |()| 0)
                    };
                    // The entry may not exist in this pid namespace's procfs: nothing to hide.
                    if r < 0 && last_errno() != libc::ENOENT {
                        fail(rfd, "proc-mask", last_errno());
                    }
                }
            }
            MountOp::Overlay {
                source,
                target,
                attrs,
            } => {
                if let Err(e) = overlay_mount(source, target, *attrs) {
                    report(
                        rfd,
                        &Record {
                            tag: TAG_NOTE,
                            stage: stage("overlay"),
                            errno: e,
                            ..Record::default()
                        },
                    );
                    if let Err((name, e)) = bind_stages(source, target, *attrs) {
                        fail(rfd, name, e);
                    }
                }
            }
        }
    }
}

/// A bind mount of `source` on `target` with `attrs`; the errno on failure.
unsafe fn bind_mount(source: &CStr, target: &CStr, attrs: u64) -> Result<(), i32> {
    // SAFETY: raw mount syscalls on NUL-terminated paths.
    unsafe { bind_stages(source, target, attrs).map_err(|(_, e)| e) }
}

/// A bind mount of `source` on `target` with `attrs`: the failing stage and errno.
unsafe fn bind_stages(source: &CStr, target: &CStr, attrs: u64) -> Result<(), (&'static str, i32)> {
    // SAFETY: this whole block makes raw mount syscalls on NUL-terminated paths.
    unsafe {
        let fd = libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            source.as_ptr(),
            sys::OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | sys::AT_RECURSIVE,
        ) as c_int;
        if fd < 0 {
            return Err(("bind(open_tree)", last_errno()));
        }
        let attr = MountAttr {
            attr_set: attrs,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        if libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as u32 | sys::AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        ) < 0
        {
            let e = last_errno();
            libc::close(fd);
            return Err(("bind(mount_setattr)", e));
        }
        if libc::syscall(
            libc::SYS_move_mount,
            fd,
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            sys::MOVE_MOUNT_F_EMPTY_PATH,
        ) < 0
        {
            let e = last_errno();
            libc::close(fd);
            return Err(("bind(move_mount)", e));
        }
        libc::close(fd);
        Ok(())
    }
}

/// See [`MountOp::Overlay`]; the errno on failure (nothing is left mounted then).
unsafe fn overlay_mount(source: &CStr, target: &CStr, attrs: u64) -> Result<(), i32> {
    const FSOPEN_CLOEXEC: c_uint = 1;
    const FSCONFIG_SET_STRING: c_uint = 1;
    const FSCONFIG_SET_FD: c_uint = 5;
    const FSCONFIG_CMD_CREATE: c_uint = 6;
    const FSMOUNT_CLOEXEC: c_uint = 1;
    // SAFETY: this whole block makes raw mount-API syscalls on NUL-terminated strings and on
    // descriptors it opens and closes itself.
    unsafe {
        let mut fds: [c_int; 5] = [-1; 5];
        let close_all = |fds: &[c_int; 5]| {
            for &fd in fds {
                if fd >= 0 {
                    libc::close(fd);
                }
            }
        };
        let result = (|| {
            // The package, as a detached mount: its path never reaches the overlay's options.
            fds[0] = libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                source.as_ptr(),
                sys::OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | sys::AT_RECURSIVE,
            ) as c_int;
            if fds[0] < 0 {
                return Err(last_errno());
            }
            // An empty, world-searchable top layer (overlayfs wants two layers without upper).
            fds[1] = libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) as c_int;
            if fds[1] < 0 {
                return Err(last_errno());
            }
            for (key, value) in [(c"mode", c"0755"), (c"size", c"4k"), (c"nr_inodes", c"16")] {
                if libc::syscall(
                    libc::SYS_fsconfig,
                    fds[1],
                    FSCONFIG_SET_STRING,
                    key.as_ptr(),
                    value.as_ptr(),
                    0,
                ) < 0
                {
                    return Err(last_errno());
                }
            }
            if libc::syscall(
                libc::SYS_fsconfig,
                fds[1],
                FSCONFIG_CMD_CREATE,
                std::ptr::null::<c_char>(),
                std::ptr::null::<c_char>(),
                0,
            ) < 0
            {
                return Err(last_errno());
            }
            fds[2] = libc::syscall(libc::SYS_fsmount, fds[1], FSMOUNT_CLOEXEC, 0u32) as c_int;
            if fds[2] < 0 {
                return Err(last_errno());
            }
            fds[3] = libc::syscall(libc::SYS_fsopen, c"overlay".as_ptr(), FSOPEN_CLOEXEC) as c_int;
            if fds[3] < 0 {
                return Err(last_errno());
            }
            for layer in [fds[2], fds[0]] {
                if libc::syscall(
                    libc::SYS_fsconfig,
                    fds[3],
                    FSCONFIG_SET_FD,
                    c"lowerdir+".as_ptr(),
                    std::ptr::null::<c_char>(),
                    layer,
                ) < 0
                {
                    return Err(last_errno());
                }
            }
            if libc::syscall(
                libc::SYS_fsconfig,
                fds[3],
                FSCONFIG_CMD_CREATE,
                std::ptr::null::<c_char>(),
                std::ptr::null::<c_char>(),
                0,
            ) < 0
            {
                return Err(last_errno());
            }
            fds[4] =
                libc::syscall(libc::SYS_fsmount, fds[3], FSMOUNT_CLOEXEC, attrs as c_uint) as c_int;
            if fds[4] < 0 {
                return Err(last_errno());
            }
            if libc::syscall(
                libc::SYS_move_mount,
                fds[4],
                c"".as_ptr(),
                libc::AT_FDCWD,
                target.as_ptr(),
                sys::MOVE_MOUNT_F_EMPTY_PATH,
            ) < 0
            {
                return Err(last_errno());
            }
            Ok(())
        })();
        close_all(&fds);
        result
    }
}

/// Receives the guest's seccomp listener on `sock` and answers its first notification: the
/// guest's own `execve` of the runner continues; anything else is refused. Closing the
/// listener afterwards makes every later `execve`/`execveat` in the sandbox fail with ENOSYS.
/// Returns when the guest has exec'd, or died, or hung up.
unsafe fn allow_first_exec(sock: c_int, guest: libc::pid_t) {
    // SAFETY: this whole block makes raw syscalls on stack buffers.
    unsafe {
        let mut byte = 0u8;
        let mut iov = libc::iovec {
            iov_base: &mut byte as *mut u8 as *mut libc::c_void,
            iov_len: 1,
        };
        let mut cbuf = [0u64; 8];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        let n = loop {
            let n = libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC);
            if n >= 0 || last_errno() != libc::EINTR {
                break n;
            }
        };
        if n <= 0 {
            return; // the guest died before installing its filter
        }
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return;
        }
        let listener = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const c_int);
        loop {
            let mut pfd = libc::pollfd {
                fd: listener,
                events: libc::POLLIN,
                revents: 0,
            };
            let r = libc::poll(&mut pfd, 1, -1);
            if r < 0 && last_errno() == libc::EINTR {
                continue;
            }
            if r <= 0 || pfd.revents & libc::POLLIN == 0 {
                break; // every user of the filter is gone
            }
            let mut notif: sys::SeccompNotif = std::mem::zeroed();
            if libc::ioctl(listener, sys::SECCOMP_IOCTL_NOTIF_RECV as _, &mut notif) < 0 {
                if last_errno() == libc::EINTR {
                    continue;
                }
                break;
            }
            let first_exec = notif.pid as libc::pid_t == guest
                && libc::c_long::from(notif.data.nr) == libc::SYS_execve;
            let resp = sys::SeccompNotifResp {
                id: notif.id,
                val: 0,
                error: if first_exec { 0 } else { -libc::EPERM },
                flags: if first_exec {
                    sys::SECCOMP_USER_NOTIF_FLAG_CONTINUE
                } else {
                    0
                },
            };
            libc::ioctl(listener, sys::SECCOMP_IOCTL_NOTIF_SEND as _, &resp);
            break;
        }
        libc::close(listener);
    }
}

/// Hands `fd` to the init over `sock` (SCM_RIGHTS).
unsafe fn send_fd(sock: c_int, fd: c_int) -> bool {
    // SAFETY: this whole block builds a message on the stack and sends it.
    unsafe {
        let mut byte = 0u8;
        let mut iov = libc::iovec {
            iov_base: &mut byte as *mut u8 as *mut libc::c_void,
            iov_len: 1,
        };
        let mut cbuf = [0u64; 8];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<c_int>() as u32) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return false;
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut c_int, fd);
        libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) == 1
    }
}

/// The guest (`D`): limits, capabilities, landlock, seccomp, exec. Never returns.
/// `exec_sock` (when `plan.exec_once`) carries the seccomp listener to the init.
unsafe fn guest_exec(
    plan: &ChildPlan,
    fds: &ChildFds,
    argv: *const *const c_char,
    envp: *const *const c_char,
    exec_sock: c_int,
) -> ! {
    let rfd = fds.report;
    // SAFETY: this whole block makes raw syscalls on prepared data; no allocation.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        for sig in 1..65 {
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
        }
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if libc::dup2(fds.stdin, 0) < 0
            || libc::dup2(fds.stdout, 1) < 0
            || libc::dup2(fds.stderr, 2) < 0
        {
            fail(rfd, "stdio", last_errno());
        }
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            sys::CLOSE_RANGE_CLOEXEC,
        );
        if libc::chdir(plan.workdir.as_ptr()) < 0 {
            fail(rfd, "chdir", last_errno());
        }
        // When a memory cgroup runs out, its OOM killer should pick the guest, not the init.
        write_file(c"/proc/self/oom_score_adj", b"1000").ok();
        for &(resource, soft, hard) in &plan.rlimits {
            let lim = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(resource as _, &lim) < 0 {
                fail(rfd, "setrlimit", last_errno());
            }
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && last_errno() != libc::EINVAL
            {
                fail(rfd, "capabilities", last_errno());
            }
        }
        // Raw syscalls: the C library's wrappers would try to change the ids of every thread of
        // the (copied) host process and wait for threads that do not exist here.
        if let Some((uid, gid)) = plan.guest_ids
            && (libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) < 0
                || libc::syscall(libc::SYS_setresgid, gid, gid, gid) < 0
                || libc::syscall(libc::SYS_setresuid, uid, uid, uid) < 0)
        {
            fail(rfd, "guest-ids", last_errno());
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
            fail(rfd, "no_new_privs", last_errno());
        }
        if let Some(ll) = &plan.landlock
            && let Err((_, e)) = ll.apply()
        {
            fail(rfd, "landlock", e);
        }
        if let Some(filter) = &plan.seccomp {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            let flags = if plan.exec_once {
                sys::SECCOMP_FILTER_FLAG_NEW_LISTENER
            } else {
                0
            };
            let r = libc::syscall(
                libc::SYS_seccomp,
                sys::SECCOMP_SET_MODE_FILTER,
                flags,
                &prog as *const libc::sock_fprog,
            );
            if r < 0 {
                fail(rfd, "seccomp", last_errno());
            }
            if plan.exec_once {
                // The init must hold the listener before our execve, which waits for its answer.
                if !send_fd(exec_sock, r as c_int) {
                    fail(rfd, "exec-listener", last_errno());
                }
                libc::close(r as c_int);
                libc::close(exec_sock);
            }
        }
        libc::execve(plan.exec.as_ptr(), argv, envp);
        fail(rfd, "execve", last_errno())
    }
}

/// How the conversation ended.
#[derive(Debug)]
pub(crate) enum End {
    /// The guest exited; its record.
    Exited(Record),
    /// The init process died without a record (setup failure or killed).
    InitGone,
    TimedOut,
    OutputOverflow,
    PidLimit,
    Aborted(SandboxError),
}

pub(crate) struct Finished {
    pub end: End,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub setup_error: Option<Record>,
    pub notes: Vec<Record>,
    pub elapsed: Duration,
}

/// The handshake callback: given the shim's first stdout line, the bytes to send next.
pub(crate) type HelloFn<'a> = &'a mut dyn FnMut(&[u8]) -> Result<Vec<u8>, SandboxError>;

/// What a session's reply callback asks for next.
pub(crate) enum Next {
    /// Send these bytes (the next request) and answer it by this deadline.
    Send(Vec<u8>, Instant),
    /// Close stdin: the session is over (the guest gets a short grace to exit).
    Close,
}

/// A session's reply callback: given one response line after the handshake (and the stderr
/// kept so far), what to do next. While it runs the guest is idle, waiting on stdin.
pub(crate) type ReplyFn<'a> = &'a mut dyn FnMut(&[u8], &[u8]) -> Next;

/// A pre-started session's wait for its first request: given how long to wait, the request
/// (bytes and deadline), `Close` when none will come, or `None` when none came yet.
pub(crate) type FirstFn<'a> = &'a mut dyn FnMut(Duration) -> Option<Next>;

/// How often a pre-started guest is checked while it waits for its first request.
const FIRST_POLL: Duration = Duration::from_millis(200);

/// How long a guest whose session was closed may take to exit before it is killed.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// What the host says on stdin.
pub(crate) struct Exchange<'a> {
    pub initial: Vec<u8>,
    /// A pre-started session: nothing is sent until this yields the first request (which
    /// replaces `initial` and sets the deadline); meanwhile the guest starts up and waits on
    /// its stdin. A guest that exits while it waits ends the conversation.
    pub first: Option<FirstFn<'a>>,
    /// Called with the first stdout line (the shims' manifest hello); returns the bytes to send
    /// next (stdin is closed after them unless this is a session), or an error that aborts the
    /// run.
    pub hello: Option<HelloFn<'a>>,
    /// A session: after the handshake, every stdout line is one response, handed to this
    /// callback, which sends the next request or closes. Without it, stdin is closed after the
    /// handshake and the one response is whatever stdout holds at the end.
    pub reply: Option<ReplyFn<'a>>,
    pub deadline: Instant,
    pub max_output: usize,
}

const STDERR_KEEP: usize = 64 * 1024;

impl Sandboxed {
    fn kill(&self) {
        let _ = sys::pidfd_send_signal(self.pidfd.as_raw_fd(), libc::SIGKILL);
    }

    fn reap(&mut self) {
        if self.reaped {
            return;
        }
        let mut status = 0;
        loop {
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::__WALL) };
            if r >= 0 || last_errno() != libc::EINTR {
                break;
            }
        }
        self.reaped = true;
    }

    /// Runs the conversation to the end and reaps the sandbox.
    pub fn converse(mut self, mut ex: Exchange<'_>) -> Finished {
        let mut pending: Vec<u8> = std::mem::take(&mut ex.initial);
        let mut written = 0usize;
        let mut close_after_pending = ex.hello.is_none();
        let mut hello_done = ex.hello.is_none();
        let mut stdout: Vec<u8> = Vec::new();
        let mut stderr: Vec<u8> = Vec::new();
        let mut records: Vec<Record> = Vec::new();
        let mut partial: Vec<u8> = Vec::new();
        let mut end: Option<End> = None;
        let mut init_exited = false;
        let mut buf = vec![0u8; 65536];
        let mut drain_deadline: Option<Instant> = None;

        if let Some(first) = ex.first.as_mut() {
            loop {
                match first(FIRST_POLL) {
                    Some(Next::Send(bytes, deadline)) => {
                        pending = bytes;
                        ex.deadline = deadline;
                        break;
                    }
                    Some(Next::Close) => {
                        self.kill();
                        end = Some(End::Aborted(SandboxError::Invalid {
                            detail: "the pre-started sandbox was closed unused".into(),
                        }));
                        break;
                    }
                    None => {
                        let mut pfd = libc::pollfd {
                            fd: self.pidfd.as_raw_fd(),
                            events: libc::POLLIN,
                            revents: 0,
                        };
                        // SAFETY: one valid pollfd, no wait.
                        let r = unsafe { libc::poll(&mut pfd, 1, 0) };
                        if r > 0 {
                            // The guest exited before its first request: the loop below
                            // collects what it left and reports the end.
                            ex.deadline = Instant::now();
                            break;
                        }
                    }
                }
            }
        }

        loop {
            // Flush stdin.
            if let Some(fd) = &self.stdin {
                while written < pending.len() {
                    // SAFETY: sending from a valid buffer on our socket; MSG_NOSIGNAL avoids
                    // SIGPIPE when the guest closed its end.
                    let n = unsafe {
                        libc::send(
                            fd.as_raw_fd(),
                            pending[written..].as_ptr() as *const libc::c_void,
                            pending.len() - written,
                            libc::MSG_NOSIGNAL,
                        )
                    };
                    if n > 0 {
                        written += n as usize;
                    } else {
                        let e = last_errno();
                        if e == libc::EAGAIN || e == libc::EINTR {
                            break;
                        }
                        // The guest went away or shut its stdin: stop writing.
                        written = pending.len();
                        close_after_pending = true;
                    }
                }
                if written >= pending.len() && close_after_pending {
                    self.stdin = None;
                }
            }
            if end.is_some() && (init_exited || self.reaped) {
                break;
            }
            let now = Instant::now();
            if end.is_none() && now >= ex.deadline {
                self.kill();
                end = Some(End::TimedOut);
            }
            if init_exited {
                // Pipes may still be held by processes the kernel is killing: drain briefly.
                let dd = *drain_deadline.get_or_insert(now + Duration::from_millis(500));
                if (self.stdout.is_none() && self.stderr.is_none() && self.report.is_none())
                    || now >= dd
                {
                    break;
                }
            }
            let mut pfds: Vec<libc::pollfd> = Vec::with_capacity(5);
            let mut push = |fd: Option<&OwnedFd>, events: i16| {
                pfds.push(libc::pollfd {
                    fd: fd.map_or(-1, |f| f.as_raw_fd()),
                    events,
                    revents: 0,
                });
            };
            push(self.stdout.as_ref(), libc::POLLIN);
            push(self.stderr.as_ref(), libc::POLLIN);
            push(self.report.as_ref(), libc::POLLIN);
            push(
                if written < pending.len() {
                    self.stdin.as_ref()
                } else {
                    None
                },
                libc::POLLOUT,
            );
            push(
                if init_exited { None } else { Some(&self.pidfd) },
                libc::POLLIN,
            );
            let wait_until = match (end.is_some(), drain_deadline) {
                (_, Some(dd)) => dd,
                (true, None) => now + Duration::from_millis(500),
                (false, None) => ex.deadline,
            };
            let timeout_ms = wait_until
                .saturating_duration_since(now)
                .as_millis()
                .clamp(0, 60_000) as c_int;
            // SAFETY: `pfds` is a valid array of pollfd.
            let r = unsafe {
                libc::poll(
                    pfds.as_mut_ptr(),
                    pfds.len() as libc::nfds_t,
                    timeout_ms.max(1),
                )
            };
            if r < 0 {
                if last_errno() == libc::EINTR {
                    continue;
                }
                self.kill();
                end.get_or_insert(End::Aborted(SandboxError::io(
                    "poll",
                    std::io::Error::last_os_error(),
                )));
                self.reap();
                break;
            }
            let readable =
                |i: usize| pfds[i].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
            if readable(0) {
                match read_some(self.stdout.as_ref(), &mut buf) {
                    ReadResult::Data(n) => {
                        stdout.extend_from_slice(&buf[..n]);
                        if stdout.len() > ex.max_output && end.is_none() {
                            self.kill();
                            end = Some(End::OutputOverflow);
                        }
                    }
                    ReadResult::Eof => self.stdout = None,
                    ReadResult::Again => {}
                }
                if !hello_done && let Some(nl) = stdout.iter().position(|&b| b == b'\n') {
                    hello_done = true;
                    let line: Vec<u8> = stdout.drain(..=nl).collect();
                    if let Some(hello) = ex.hello.as_mut() {
                        match hello(&line) {
                            Ok(next) => {
                                // A session stays open after the handshake unless the
                                // handshake ended it (an empty answer).
                                close_after_pending = ex.reply.is_none() || next.is_empty();
                                pending.extend_from_slice(&next);
                            }
                            Err(e) => {
                                self.kill();
                                end.get_or_insert(End::Aborted(e));
                            }
                        }
                    }
                }
                // Session responses: one line each, after the handshake.
                while hello_done
                    && !close_after_pending
                    && end.is_none()
                    && let Some(reply) = ex.reply.as_mut()
                    && let Some(nl) = stdout.iter().position(|&b| b == b'\n')
                {
                    let line: Vec<u8> = stdout.drain(..=nl).collect();
                    match reply(&line, &stderr) {
                        Next::Send(bytes, deadline) => {
                            pending.extend_from_slice(&bytes);
                            ex.deadline = deadline;
                        }
                        Next::Close => {
                            close_after_pending = true;
                            ex.deadline = ex.deadline.min(Instant::now() + CLOSE_GRACE);
                        }
                    }
                }
            }
            if readable(1) {
                match read_some(self.stderr.as_ref(), &mut buf) {
                    ReadResult::Data(n) => {
                        stderr.extend_from_slice(&buf[..n]);
                        if stderr.len() > 2 * STDERR_KEEP {
                            let cut = stderr.len() - STDERR_KEEP;
                            stderr.drain(..cut);
                        }
                    }
                    ReadResult::Eof => self.stderr = None,
                    ReadResult::Again => {}
                }
            }
            if readable(2) {
                match read_some(self.report.as_ref(), &mut buf) {
                    ReadResult::Data(n) => {
                        partial.extend_from_slice(&buf[..n]);
                        take_records(&mut partial, &mut records);
                    }
                    ReadResult::Eof => self.report = None,
                    ReadResult::Again => {}
                }
            }
            if pfds[4].revents != 0 && !init_exited {
                init_exited = true;
                self.reap();
            }
        }
        self.kill();
        self.reap();
        if stderr.len() > STDERR_KEEP {
            let cut = stderr.len() - STDERR_KEEP;
            stderr.drain(..cut);
        }
        let setup_error = records.iter().find(|r| r.tag == TAG_SETUP_ERROR).copied();
        let notes = records
            .iter()
            .filter(|r| r.tag == TAG_NOTE)
            .copied()
            .collect();
        let end = match end {
            Some(e) => e,
            None => {
                if records.iter().any(|r| r.tag == TAG_PIDS) {
                    End::PidLimit
                } else if let Some(x) = records.iter().find(|r| r.tag == TAG_EXIT) {
                    End::Exited(*x)
                } else {
                    End::InitGone
                }
            }
        };
        Finished {
            end,
            stdout,
            stderr,
            setup_error,
            notes,
            elapsed: self.spawned_at.elapsed(),
        }
    }
}

enum ReadResult {
    Data(usize),
    Eof,
    Again,
}

fn read_some(fd: Option<&OwnedFd>, buf: &mut [u8]) -> ReadResult {
    let Some(fd) = fd else {
        return ReadResult::Eof;
    };
    // SAFETY: reading into a valid buffer from our descriptor.
    let n = unsafe {
        libc::read(
            fd.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
        )
    };
    if n > 0 {
        ReadResult::Data(n as usize)
    } else if n == 0 {
        ReadResult::Eof
    } else {
        let e = last_errno();
        if e == libc::EAGAIN || e == libc::EINTR {
            ReadResult::Again
        } else {
            ReadResult::Eof
        }
    }
}

/// Moves every complete record at the front of `partial` to `records`.
fn take_records(partial: &mut Vec<u8>, records: &mut Vec<Record>) {
    let size = std::mem::size_of::<Record>();
    while partial.len() >= size {
        let chunk: Vec<u8> = partial.drain(..size).collect();
        // SAFETY: `chunk` holds exactly one Record written by our child; Record is plain old
        // data, read unaligned.
        let rec = unsafe { std::ptr::read_unaligned(chunk.as_ptr() as *const Record) };
        records.push(rec);
    }
}

/// The host side of a sandbox whose guest lives on (`crate::child`): its pipes are handed
/// out instead of conversed with.
impl Sandboxed {
    /// The host ends of the guest's stdin (a socket), stdout and stderr; `None` once taken.
    pub(crate) fn take_stdio(&mut self) -> Option<(OwnedFd, OwnedFd, OwnedFd)> {
        match (self.stdin.take(), self.stdout.take(), self.stderr.take()) {
            (Some(i), Some(o), Some(e)) => Some((i, o, e)),
            _ => None,
        }
    }

    /// A second descriptor of the init's pidfd: SIGKILL sent to it, from any thread, ends the
    /// whole sandbox.
    pub(crate) fn pidfd_clone(&self) -> Result<OwnedFd, SandboxError> {
        self.pidfd
            .try_clone()
            .map_err(|e| SandboxError::io("dup the sandbox pidfd", e))
    }

    /// Blocks until the init has exited, reaps it, and returns what it reported.
    pub(crate) fn wait_records(mut self) -> Vec<Record> {
        loop {
            let mut pfd = libc::pollfd {
                fd: self.pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: polling one valid pollfd.
            let r = unsafe { libc::poll(&mut pfd, 1, -1) };
            if r >= 0 || last_errno() != libc::EINTR {
                break;
            }
        }
        self.reap();
        let mut records = Vec::new();
        let mut partial = Vec::new();
        let mut buf = [0u8; 4096];
        while let ReadResult::Data(n) = read_some(self.report.as_ref(), &mut buf) {
            partial.extend_from_slice(&buf[..n]);
        }
        take_records(&mut partial, &mut records);
        records
    }
}
