//! Kernel constants and thin raw-syscall wrappers that libc does not (uniformly) provide.

#![allow(dead_code)]

use std::ffi::CStr;
use std::io;

use libc::{c_int, c_long, c_uint, c_void};

pub const CLONE_NEWNS: u64 = 0x0002_0000;
pub const CLONE_NEWCGROUP: u64 = 0x0200_0000;
pub const CLONE_NEWUTS: u64 = 0x0400_0000;
pub const CLONE_NEWIPC: u64 = 0x0800_0000;
pub const CLONE_NEWUSER: u64 = 0x1000_0000;
pub const CLONE_NEWPID: u64 = 0x2000_0000;
pub const CLONE_NEWNET: u64 = 0x4000_0000;
pub const CLONE_NEWTIME: u64 = 0x0000_0080;
pub const CLONE_THREAD: u64 = 0x0001_0000;
pub const CLONE_PIDFD: u64 = 0x0000_1000;
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
/// Every namespace flag (`CLONE_NEW*`).
pub const CLONE_NS_MASK: u64 = CLONE_NEWNS
    | CLONE_NEWCGROUP
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET
    | CLONE_NEWTIME;

pub const OPEN_TREE_CLONE: c_uint = 1;
pub const AT_RECURSIVE: c_uint = 0x8000;
pub const MOVE_MOUNT_F_EMPTY_PATH: c_uint = 0x4;
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;

pub const CLOSE_RANGE_CLOEXEC: c_uint = 1 << 2;

#[repr(C)]
pub struct MountAttr {
    pub attr_set: u64,
    pub attr_clr: u64,
    pub propagation: u64,
    pub userns_fd: u64,
}

#[repr(C)]
pub struct CloneArgs {
    pub flags: u64,
    pub pidfd: u64,
    pub child_tid: u64,
    pub parent_tid: u64,
    pub exit_signal: u64,
    pub stack: u64,
    pub stack_size: u64,
    pub tls: u64,
    pub set_tid: u64,
    pub set_tid_size: u64,
    pub cgroup: u64,
}

// Landlock.
pub const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
pub const LANDLOCK_RULE_PATH_BENEATH: c_int = 1;
pub const FS_EXECUTE: u64 = 1 << 0;
pub const FS_WRITE_FILE: u64 = 1 << 1;
pub const FS_READ_FILE: u64 = 1 << 2;
pub const FS_READ_DIR: u64 = 1 << 3;
pub const FS_REMOVE_DIR: u64 = 1 << 4;
pub const FS_REMOVE_FILE: u64 = 1 << 5;
pub const FS_MAKE_CHAR: u64 = 1 << 6;
pub const FS_MAKE_DIR: u64 = 1 << 7;
pub const FS_MAKE_REG: u64 = 1 << 8;
pub const FS_MAKE_SOCK: u64 = 1 << 9;
pub const FS_MAKE_FIFO: u64 = 1 << 10;
pub const FS_MAKE_BLOCK: u64 = 1 << 11;
pub const FS_MAKE_SYM: u64 = 1 << 12;
pub const FS_REFER: u64 = 1 << 13;
pub const FS_TRUNCATE: u64 = 1 << 14;
pub const FS_IOCTL_DEV: u64 = 1 << 15;
pub const NET_BIND_TCP: u64 = 1 << 0;
pub const NET_CONNECT_TCP: u64 = 1 << 1;
pub const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
pub const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
pub struct LandlockRulesetAttr {
    pub handled_access_fs: u64,
    pub handled_access_net: u64,
    pub scoped: u64,
}

#[repr(C, packed)]
pub struct LandlockPathBeneathAttr {
    pub allowed_access: u64,
    pub parent_fd: i32,
}

// Seccomp / BPF.
pub const SECCOMP_SET_MODE_FILTER: c_uint = 1;
pub const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
pub const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
pub const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
pub const SECCOMP_RET_USER_NOTIF: u32 = 0x7fc0_0000;
pub const SECCOMP_FILTER_FLAG_NEW_LISTENER: c_uint = 1 << 3;
/// `_IOWR('!', 0, struct seccomp_notif)`.
pub const SECCOMP_IOCTL_NOTIF_RECV: u64 = 0xc050_2100;
/// `_IOWR('!', 1, struct seccomp_notif_resp)`.
pub const SECCOMP_IOCTL_NOTIF_SEND: u64 = 0xc018_2101;
pub const SECCOMP_USER_NOTIF_FLAG_CONTINUE: u32 = 1;

/// `struct seccomp_data`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SeccompData {
    pub nr: i32,
    pub arch: u32,
    pub instruction_pointer: u64,
    pub args: [u64; 6],
}

/// `struct seccomp_notif` (80 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SeccompNotif {
    pub id: u64,
    pub pid: u32,
    pub flags: u32,
    pub data: SeccompData,
}

/// `struct seccomp_notif_resp` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SeccompNotifResp {
    pub id: u64,
    pub val: i64,
    pub error: i32,
    pub flags: u32,
}
pub const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
pub const BPF_JMP_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
pub const BPF_JMP_JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
pub const BPF_JMP_JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
pub const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
pub const BPF_ALU_AND_K: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K

#[cfg(target_arch = "x86_64")]
pub const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
pub const AUDIT_ARCH: u32 = 0xC000_00B7;

/// `SYS_clone3`.
///
/// # Safety
/// `args` must be a valid clone_args; the child returns into a copy of the caller's stack and
/// must only use async-signal-safe operations.
pub unsafe fn clone3(args: &mut CloneArgs) -> c_long {
    // SAFETY: the caller upholds the contract above; the pointer and size describe `args`.
    unsafe {
        libc::syscall(
            libc::SYS_clone3,
            args as *mut CloneArgs as *mut c_void,
            std::mem::size_of::<CloneArgs>(),
        )
    }
}

/// Sends `signal` through a pidfd.
pub fn pidfd_send_signal(pidfd: c_int, signal: c_int) -> io::Result<()> {
    // SAFETY: plain syscall with integer arguments and a null siginfo.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd,
            signal,
            std::ptr::null::<c_void>(),
            0,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A pidfd for the process `pid` (Linux 5.3+), close-on-exec.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<std::os::fd::OwnedFd> {
    if pid <= 0 {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: plain syscall with integer arguments.
    let r = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = c_int::try_from(r).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    // SAFETY: pidfd_open returned a fresh descriptor that we now own (pidfds are always
    // close-on-exec).
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// Sends SIGKILL to every process in the process group `pgid` (a child started with
/// `process_group(0)` and not yet reaped, so the group id cannot have been reused).
pub fn kill_process_group(pgid: u32) -> io::Result<()> {
    let pgid = i32::try_from(pgid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    if pgid <= 1 {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: kill takes integer arguments only; a negative pid names the process group, and
    // pgid > 1 so neither our own group (0) nor every process (-1) can be meant.
    let r = unsafe { libc::kill(-pgid, libc::SIGKILL) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// This process's hard RLIMIT_NPROC (`None` for unlimited or on error).
pub fn nproc_hard_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the valid, exclusively borrowed `lim`.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut lim) };
    (r == 0 && lim.rlim_max != libc::RLIM_INFINITY).then_some(lim.rlim_max)
}

/// The landlock ABI version, or the errno explaining why there is none.
pub fn landlock_abi() -> Result<u32, io::Error> {
    // SAFETY: querying the version takes a null attribute pointer and size 0.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as u32)
    }
}

/// `strerror` for an errno, without allocation-unsafe globals.
pub fn errno_name(errno: i32) -> String {
    io::Error::from_raw_os_error(errno).to_string()
}

/// Name of a signal number.
pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => "signal",
    }
}

/// A C string constant.
pub fn cstr(bytes: &'static [u8]) -> &'static CStr {
    CStr::from_bytes_with_nul(bytes).unwrap_or(c"")
}
