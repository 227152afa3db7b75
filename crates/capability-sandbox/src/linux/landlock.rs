//! Landlock rules, prepared on the host side and applied in the child with raw syscalls.

use std::ffi::CString;

use super::sys::*;

/// Access rights known to each ABI version.
pub fn fs_rights_for_abi(abi: u32) -> u64 {
    let mut rights = (1u64 << 13) - 1; // ABI 1: EXECUTE..MAKE_SYM
    if abi >= 2 {
        rights |= FS_REFER;
    }
    if abi >= 3 {
        rights |= FS_TRUNCATE;
    }
    if abi >= 5 {
        rights |= FS_IOCTL_DEV;
    }
    rights
}

/// Rights that make sense on a non-directory.
pub const FILE_RIGHTS: u64 = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV;
pub const READ: u64 = FS_READ_FILE | FS_READ_DIR;
pub const WRITE: u64 = READ
    | FS_WRITE_FILE
    | FS_REMOVE_DIR
    | FS_REMOVE_FILE
    | FS_MAKE_DIR
    | FS_MAKE_REG
    | FS_MAKE_SOCK
    | FS_MAKE_FIFO
    | FS_MAKE_SYM
    | FS_REFER
    | FS_TRUNCATE;
/// Writing a granted (host-shared) directory: no socket files, so a guest cannot bind a unix
/// socket where host processes would reach it.
pub const WRITE_GRANT: u64 = WRITE & !FS_MAKE_SOCK;

/// One rule: a path inside the sandbox and the rights beneath it.
pub struct Rule {
    pub path: CString,
    pub access: u64,
}

/// A complete ruleset for one run.
pub struct LandlockPlan {
    pub abi: u32,
    pub handled_fs: u64,
    pub handled_net: u64,
    pub scoped: u64,
    pub rules: Vec<Rule>,
}

impl LandlockPlan {
    /// A plan handling every right of `abi`. TCP bind is always handled (and so denied: no
    /// effect grants listening), TCP connect unless `network` (ABI 4+). Abstract unix sockets
    /// and signals are scoped to the sandbox (ABI 6+).
    pub fn new(abi: u32, network: bool) -> Self {
        LandlockPlan {
            abi,
            handled_fs: fs_rights_for_abi(abi),
            handled_net: match (abi >= 4, network) {
                (false, _) => 0,
                (true, true) => NET_BIND_TCP,
                (true, false) => NET_BIND_TCP | NET_CONNECT_TCP,
            },
            scoped: if abi >= 6 {
                SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
            } else {
                0
            },
            rules: Vec::new(),
        }
    }

    /// Adds a rule; `is_dir` says whether the path is a directory (files take only file rights).
    pub fn allow(&mut self, path: &str, access: u64, is_dir: bool) {
        let mut access = access & self.handled_fs;
        if !is_dir {
            access &= FILE_RIGHTS;
        }
        if access == 0 {
            return;
        }
        if let Ok(path) = CString::new(path) {
            self.rules.push(Rule { path, access });
        }
    }

    fn attr_size(&self) -> usize {
        if self.abi >= 6 {
            24
        } else if self.abi >= 4 {
            16
        } else {
            8
        }
    }

    /// Applies the ruleset to the calling thread. Async-signal-safe: only raw syscalls.
    /// Returns a stage name and errno on failure. Missing rule paths are skipped.
    ///
    /// # Safety
    /// Must run in the sandbox child after fork; it restricts the calling process for good.
    pub unsafe fn apply(&self) -> Result<(), (&'static str, i32)> {
        let attr = LandlockRulesetAttr {
            handled_access_fs: self.handled_fs,
            handled_access_net: self.handled_net,
            scoped: self.scoped,
        };
        // SAFETY: `attr` is a valid ruleset attribute; `attr_size` never exceeds its size.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const LandlockRulesetAttr,
                self.attr_size(),
                0u32,
            )
        } as libc::c_int;
        if fd < 0 {
            return Err(("landlock_create_ruleset", errno()));
        }
        for rule in &self.rules {
            // SAFETY: `rule.path` is a NUL-terminated string owned by the plan.
            let pfd = unsafe { libc::open(rule.path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
            if pfd < 0 {
                continue;
            }
            let beneath = LandlockPathBeneathAttr {
                allowed_access: rule.access,
                parent_fd: pfd,
            };
            // SAFETY: `beneath` is a valid packed path-beneath attribute; fds are ours.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_landlock_add_rule,
                    fd,
                    LANDLOCK_RULE_PATH_BENEATH,
                    &beneath as *const LandlockPathBeneathAttr,
                    0u32,
                )
            };
            let e = errno();
            // SAFETY: closing the O_PATH fd opened above.
            unsafe { libc::close(pfd) };
            if r < 0 {
                // SAFETY: closing the ruleset fd.
                unsafe { libc::close(fd) };
                return Err(("landlock_add_rule", e));
            }
        }
        // SAFETY: restricting the calling thread with a valid ruleset fd.
        let r = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) };
        let e = errno();
        // SAFETY: closing the ruleset fd.
        unsafe { libc::close(fd) };
        if r < 0 {
            return Err(("landlock_restrict_self", e));
        }
        Ok(())
    }
}

fn errno() -> i32 {
    // SAFETY: errno location is thread-local and always valid.
    unsafe { *libc::__errno_location() }
}
