//! The seccomp filter, hand-assembled classic BPF.
//!
//! Policy: a deny list on top of the other layers (namespaces, landlock, rlimits). Always
//! refused with `EPERM`: ptrace and cross-process memory access, every mount API, namespace
//! creation and entry (`unshare`, `setns`, `clone` with any `CLONE_NEW*` flag), keyrings, bpf,
//! perf events, userfaultfd, kernel modules, kexec, reboot, swap, syslog, accounting, clock
//! setting, port I/O, file handles, quotas. `clone3` and io_uring answer `ENOSYS` (clone3's flags
//! live in memory a filter cannot read; the C library then falls back to `clone`, whose flags
//! are checked). Without `process.spawn`, `fork`, `vfork` and `clone` without `CLONE_THREAD`
//! answer `EPERM`, so threads still work but no new process can be created. Any other
//! architecture than the native one is killed.

use super::sys::*;

#[derive(Clone, Copy)]
struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;
/// Low 32 bits of args[0] (little-endian).
const OFFSET_ARG0_LO: u32 = 16;

fn errno(e: i32) -> u32 {
    SECCOMP_RET_ERRNO | (e as u32 & 0xffff)
}

/// Syscalls always refused, with their errno.
fn always_denied() -> Vec<(libc::c_long, i32)> {
    let eperm = libc::EPERM;
    let enosys = libc::ENOSYS;
    #[allow(unused_mut)]
    let mut list = vec![
        (libc::SYS_ptrace, eperm),
        (libc::SYS_process_vm_readv, eperm),
        (libc::SYS_process_vm_writev, eperm),
        (libc::SYS_pidfd_getfd, eperm),
        (libc::SYS_mount, eperm),
        (libc::SYS_umount2, eperm),
        (libc::SYS_pivot_root, eperm),
        (libc::SYS_chroot, eperm),
        (libc::SYS_open_tree, eperm),
        (libc::SYS_move_mount, eperm),
        (libc::SYS_fsopen, eperm),
        (libc::SYS_fsconfig, eperm),
        (libc::SYS_fsmount, eperm),
        (libc::SYS_fspick, eperm),
        (libc::SYS_mount_setattr, eperm),
        (libc::SYS_unshare, eperm),
        (libc::SYS_setns, eperm),
        (libc::SYS_keyctl, eperm),
        (libc::SYS_add_key, eperm),
        (libc::SYS_request_key, eperm),
        (libc::SYS_bpf, eperm),
        (libc::SYS_perf_event_open, eperm),
        (libc::SYS_userfaultfd, eperm),
        (libc::SYS_kexec_load, eperm),
        (libc::SYS_kexec_file_load, eperm),
        (libc::SYS_init_module, eperm),
        (libc::SYS_finit_module, eperm),
        (libc::SYS_delete_module, eperm),
        (libc::SYS_reboot, eperm),
        (libc::SYS_swapon, eperm),
        (libc::SYS_swapoff, eperm),
        (libc::SYS_syslog, eperm),
        (libc::SYS_acct, eperm),
        (libc::SYS_settimeofday, eperm),
        (libc::SYS_clock_settime, eperm),
        (libc::SYS_clock_adjtime, eperm),
        (libc::SYS_adjtimex, eperm),
        (libc::SYS_open_by_handle_at, eperm),
        (libc::SYS_name_to_handle_at, eperm),
        (libc::SYS_quotactl, eperm),
        (libc::SYS_vhangup, eperm),
        (libc::SYS_fanotify_init, eperm),
        (libc::SYS_clone3, enosys),
        (libc::SYS_io_uring_setup, enosys),
        (libc::SYS_io_uring_enter, enosys),
        (libc::SYS_io_uring_register, enosys),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        list.push((libc::SYS_iopl, eperm));
        list.push((libc::SYS_ioperm, eperm));
        list.push((libc::SYS_uselib, eperm));
    }
    list
}

/// What the filter allows beyond its fixed deny list.
#[derive(Clone, Copy, Debug, Default)]
pub struct Policy {
    /// `process.spawn`: lifts the process-creation denial.
    pub spawn: bool,
    /// `memfd_create` and `memfd_secret` (refused with `EPERM` unless a memory cgroup counts
    /// their pages: no rlimit bounds a memfd that is written without being mapped).
    pub memfd: bool,
}

/// Builds the filter for `policy`.
pub fn build_filter(policy: &Policy) -> Vec<libc::sock_filter> {
    let spawn = policy.spawn;
    let mut p: Vec<Insn> = vec![
        stmt(BPF_LD_W_ABS, OFFSET_ARCH),
        jump(BPF_JMP_JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, OFFSET_NR),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        // x32 syscalls (bit 30) would bypass the numbers below.
        p.push(jump(BPF_JMP_JGE_K, 0x4000_0000, 0, 1));
        p.push(stmt(BPF_RET_K, errno(libc::ENOSYS)));
    }
    let mut deny = always_denied();
    if !spawn {
        #[cfg(target_arch = "x86_64")]
        {
            deny.push((libc::SYS_fork, libc::EPERM));
            deny.push((libc::SYS_vfork, libc::EPERM));
        }
    }
    if !policy.memfd {
        deny.push((libc::SYS_memfd_create, libc::EPERM));
        deny.push((libc::SYS_memfd_secret, libc::EPERM));
    }
    for (nr, e) in deny {
        p.push(jump(BPF_JMP_JEQ_K, nr as u32, 0, 1));
        p.push(stmt(BPF_RET_K, errno(e)));
    }
    // clone: inspect the flags in args[0].
    let mut clone_block = vec![
        stmt(BPF_LD_W_ABS, OFFSET_ARG0_LO),
        jump(BPF_JMP_JSET_K, CLONE_NS_MASK as u32, 0, 1),
        stmt(BPF_RET_K, errno(libc::EPERM)),
    ];
    if spawn {
        clone_block.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    } else {
        clone_block.push(jump(BPF_JMP_JSET_K, CLONE_THREAD as u32, 0, 1));
        clone_block.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
        clone_block.push(stmt(BPF_RET_K, errno(libc::EPERM)));
    }
    p.push(jump(
        BPF_JMP_JEQ_K,
        libc::SYS_clone as u32,
        0,
        clone_block.len() as u8,
    ));
    p.extend(clone_block);
    p.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
    p.into_iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// A tiny classic-BPF interpreter, enough to check the filter's decisions.
    fn run(prog: &[libc::sock_filter], nr: u32, arch: u32, arg0: u64) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        data[16..24].copy_from_slice(&arg0.to_le_bytes());
        let mut acc: u32 = 0;
        let mut pc = 0usize;
        loop {
            let i = &prog[pc];
            match i.code {
                BPF_LD_W_ABS => {
                    let o = i.k as usize;
                    acc = u32::from_le_bytes(data[o..o + 4].try_into().unwrap());
                    pc += 1;
                }
                BPF_JMP_JEQ_K | BPF_JMP_JGE_K | BPF_JMP_JSET_K => {
                    let hit = match i.code {
                        BPF_JMP_JEQ_K => acc == i.k,
                        BPF_JMP_JGE_K => acc >= i.k,
                        _ => acc & i.k != 0,
                    };
                    pc += 1 + if hit { i.jt as usize } else { i.jf as usize };
                }
                BPF_RET_K => return i.k,
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    #[test]
    fn decisions() {
        let strict = build_filter(&Policy::default());
        let open = build_filter(&Policy {
            spawn: true,
            memfd: true,
        });
        let nr = |n: libc::c_long| n as u32;
        let eperm = errno(libc::EPERM);
        assert_eq!(
            run(&strict, nr(libc::SYS_read), AUDIT_ARCH, 0),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(run(&strict, nr(libc::SYS_ptrace), AUDIT_ARCH, 0), eperm);
        assert_eq!(run(&open, nr(libc::SYS_mount), AUDIT_ARCH, 0), eperm);
        assert_eq!(
            run(&strict, nr(libc::SYS_memfd_create), AUDIT_ARCH, 0),
            eperm
        );
        assert_eq!(
            run(&open, nr(libc::SYS_memfd_create), AUDIT_ARCH, 0),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(
            run(&strict, nr(libc::SYS_clone3), AUDIT_ARCH, 0),
            errno(libc::ENOSYS)
        );
        // Threads pass, processes do not (unless spawn is granted), namespaces never.
        let thread = 0x3d0f00u64; // glibc pthread_create flags, CLONE_THREAD included
        assert_eq!(
            run(&strict, nr(libc::SYS_clone), AUDIT_ARCH, thread),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(
            run(
                &strict,
                nr(libc::SYS_clone),
                AUDIT_ARCH,
                libc::SIGCHLD as u64
            ),
            eperm
        );
        assert_eq!(
            run(&open, nr(libc::SYS_clone), AUDIT_ARCH, libc::SIGCHLD as u64),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(
            run(&open, nr(libc::SYS_clone), AUDIT_ARCH, CLONE_NEWUSER),
            eperm
        );
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(run(&strict, nr(libc::SYS_fork), AUDIT_ARCH, 0), eperm);
            assert_eq!(
                run(&open, nr(libc::SYS_fork), AUDIT_ARCH, 0),
                SECCOMP_RET_ALLOW
            );
            assert_eq!(
                run(&strict, 0x4000_0000 | nr(libc::SYS_read), AUDIT_ARCH, 0),
                errno(libc::ENOSYS)
            );
        }
        assert_eq!(
            run(&strict, nr(libc::SYS_read), 0x4000_0003, 0),
            SECCOMP_RET_KILL_PROCESS
        );
    }
}
