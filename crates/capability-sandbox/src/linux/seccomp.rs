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
//!
//! Sockets, by the `socket(2)` domain argument: `AF_INET`/`AF_INET6` and `AF_UNIX` only with
//! `network.connect`; `AF_NETLINK` only with protocol `NETLINK_ROUTE` (what the C library's
//! `getaddrinfo`/`getifaddrs` use); every other family (`AF_VSOCK`, `AF_PACKET`, `AF_XDP`,
//! `AF_BLUETOOTH`, `AF_ALG`, ...) answers `EACCES`. `socketpair` works for `AF_UNIX`
//! `SOCK_STREAM`/`SOCK_SEQPACKET` (local pairs inside the sandbox; a datagram pair could be
//! re-connected or `sendto` a host socket path, so it needs `network.connect`). `listen`,
//! `accept` and `accept4` always answer `EACCES`: no effect grants listening, and `listen` on an
//! unbound socket would bind a port without any `bind` that landlock could see.
//!
//! `bind` answers `EACCES` whenever its address is as long as a `sockaddr_in` (16 bytes) or
//! longer. A filter cannot read the address, but it can read its length, and the kernel
//! refuses shorter addresses for `AF_INET` (16) and `AF_INET6` (24): so no internet socket is
//! ever bound explicitly, TCP or UDP, IPv4 or IPv6, whatever the port (landlock only sees TCP,
//! and only from ABI 4). What stays: netlink (`sockaddr_nl`, 12 bytes, which the C library
//! binds for `getaddrinfo`), unix autobind and unix paths up to 13 bytes. The kernel's own
//! ephemeral port on `connect` or `sendto` is not a `bind` and stays too; node's `dgram`,
//! which always binds (port 0) before it sends, does not work in the sandbox.
//!
//! Without `process.spawn`, `execve` and `execveat` return `SECCOMP_RET_USER_NOTIF`: the
//! sandbox init lets exactly the first one through (the runner's own exec, before any guest
//! code runs) and then closes the listener, after which every `execve`/`execveat` fails with
//! `ENOSYS`. No new program image can be started (not through the dynamic loader, not from a
//! memfd, not by re-executing the runner).
//!
//! A guest may add seccomp filters of its own, but not with a notification listener
//! (`SECCOMP_FILTER_FLAG_NEW_LISTENER` answers `EPERM`): on an `execve` for which two filters
//! return `USER_NOTIF`, the newest filter's listener gets it, so a guest listener could
//! answer `CONTINUE` for the exec that ours refuses.
//!
//! Without a memory cgroup, `memfd_create`, `memfd_secret` and SysV `shmget`/`msgget`/
//! `semget` answer `EPERM`.

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
/// Low 32 bits of args[n] (little-endian).
const fn arg_lo(n: u32) -> u32 {
    16 + 8 * n
}
const OFFSET_ARG0_LO: u32 = arg_lo(0);

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
    /// `memfd_create`, `memfd_secret`, `shmget`, `msgget` and `semget` (refused with `EPERM`
    /// unless a memory cgroup counts their pages: no rlimit bounds a memfd that is written
    /// without being mapped, nor SysV objects, which outlive every mapping or have none).
    pub memfd: bool,
    /// `network.connect`: `AF_INET`, `AF_INET6` and `AF_UNIX` sockets.
    pub network: bool,
}

impl Policy {
    /// Whether the filter sends `execve`/`execveat` to a listener (installed with
    /// `SECCOMP_FILTER_FLAG_NEW_LISTENER`) that lets only the runner's own exec through.
    pub fn exec_once(&self) -> bool {
        !self.spawn
    }
}

/// `[JEQ value → RET verdict]` pairs for the accumulator, then `RET default`.
fn verdicts(cases: &[(u32, u32)], default: u32) -> Vec<Insn> {
    let mut out = Vec::new();
    for &(value, verdict) in cases {
        out.push(jump(BPF_JMP_JEQ_K, value, 0, 1));
        out.push(stmt(BPF_RET_K, verdict));
    }
    out.push(stmt(BPF_RET_K, default));
    out
}

/// Appends `if nr == syscall { block }`; the block must end in a return.
fn on_syscall(p: &mut Vec<Insn>, nr: libc::c_long, block: Vec<Insn>) {
    p.push(jump(BPF_JMP_JEQ_K, nr as u32, 0, block.len() as u8));
    p.extend(block);
}

fn socket_rules(p: &mut Vec<Insn>, network: bool) {
    let allow = SECCOMP_RET_ALLOW;
    let eacces = errno(libc::EACCES);
    let inet = if network { allow } else { eacces };
    // socket(domain, type, protocol)
    let mut block = vec![stmt(BPF_LD_W_ABS, arg_lo(0))];
    let mut cases = verdicts(
        &[
            (libc::AF_UNIX as u32, inet),
            (libc::AF_INET as u32, inet),
            (libc::AF_INET6 as u32, inet),
        ],
        eacces,
    );
    let default = cases.pop();
    block.extend(cases);
    block.push(jump(BPF_JMP_JEQ_K, libc::AF_NETLINK as u32, 0, 4));
    block.push(stmt(BPF_LD_W_ABS, arg_lo(2)));
    block.extend(verdicts(&[(libc::NETLINK_ROUTE as u32, allow)], eacces));
    block.extend(default);
    on_syscall(p, libc::SYS_socket, block);
    // socketpair(domain, type, protocol, sv)
    let mut block = vec![
        stmt(BPF_LD_W_ABS, arg_lo(0)),
        jump(BPF_JMP_JEQ_K, libc::AF_UNIX as u32, 1, 0),
        stmt(BPF_RET_K, eacces),
    ];
    if network {
        block.push(stmt(BPF_RET_K, allow));
    } else {
        block.push(stmt(BPF_LD_W_ABS, arg_lo(1)));
        block.push(stmt(BPF_ALU_AND_K, 0xf));
        block.extend(verdicts(
            &[
                (libc::SOCK_STREAM as u32, allow),
                (libc::SOCK_SEQPACKET as u32, allow),
            ],
            eacces,
        ));
    }
    on_syscall(p, libc::SYS_socketpair, block);
    // bind(fd, addr, addrlen): nothing as long as an internet address (see the module docs).
    on_syscall(
        p,
        libc::SYS_bind,
        vec![
            stmt(BPF_LD_W_ABS, arg_lo(2)),
            jump(BPF_JMP_JGE_K, SHORTEST_INET_ADDR, 0, 1),
            stmt(BPF_RET_K, eacces),
            stmt(BPF_RET_K, allow),
        ],
    );
}

/// `sizeof(struct sockaddr_in)`: the kernel refuses shorter addresses for `AF_INET` and (at
/// 24) `AF_INET6`, so a `bind` with a shorter one cannot bind an internet socket.
const SHORTEST_INET_ADDR: u32 = 16;

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
        // Memory no rlimit sees: memfds (written without a mapping), SysV segments, message
        // queues and semaphore sets (which outlive every mapping, or have none).
        for nr in [
            libc::SYS_memfd_create,
            libc::SYS_memfd_secret,
            libc::SYS_shmget,
            libc::SYS_msgget,
            libc::SYS_semget,
        ] {
            deny.push((nr, libc::EPERM));
        }
    }
    for nr in [libc::SYS_listen, libc::SYS_accept, libc::SYS_accept4] {
        deny.push((nr, libc::EACCES));
    }
    for (nr, e) in deny {
        p.push(jump(BPF_JMP_JEQ_K, nr as u32, 0, 1));
        p.push(stmt(BPF_RET_K, errno(e)));
    }
    if policy.exec_once() {
        for nr in [libc::SYS_execve, libc::SYS_execveat] {
            p.push(jump(BPF_JMP_JEQ_K, nr as u32, 0, 1));
            p.push(stmt(BPF_RET_K, SECCOMP_RET_USER_NOTIF));
        }
    }
    socket_rules(&mut p, policy.network);
    // A filter of the guest's own that returns USER_NOTIF for execve would win the tie with
    // ours (the newest filter is the match) and could answer CONTINUE: no listeners.
    on_syscall(
        &mut p,
        libc::SYS_seccomp,
        vec![
            stmt(BPF_LD_W_ABS, arg_lo(1)),
            jump(BPF_JMP_JSET_K, SECCOMP_FILTER_FLAG_NEW_LISTENER, 0, 1),
            stmt(BPF_RET_K, errno(libc::EPERM)),
            stmt(BPF_RET_K, SECCOMP_RET_ALLOW),
        ],
    );
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
        run_args(prog, nr, arch, &[arg0])
    }

    fn run_args(prog: &[libc::sock_filter], nr: u32, arch: u32, args: &[u64]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
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
                BPF_ALU_AND_K => {
                    acc &= i.k;
                    pc += 1;
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
            network: true,
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

    #[test]
    fn sockets_listening_and_exec() {
        let strict = build_filter(&Policy::default());
        let open = build_filter(&Policy {
            spawn: true,
            memfd: true,
            network: true,
        });
        let nr = |n: libc::c_long| n as u32;
        let eacces = errno(libc::EACCES);
        let allow = SECCOMP_RET_ALLOW;
        let socket = |f: &[libc::sock_filter], d: i32, t: i32, proto: i32| {
            run_args(
                f,
                nr(libc::SYS_socket),
                AUDIT_ARCH,
                &[d as u64, t as u64, proto as u64],
            )
        };
        for d in [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6] {
            assert_eq!(socket(&strict, d, libc::SOCK_STREAM, 0), eacces, "{d}");
            assert_eq!(socket(&open, d, libc::SOCK_STREAM, 0), allow, "{d}");
        }
        for f in [&strict, &open] {
            assert_eq!(socket(f, libc::AF_NETLINK, libc::SOCK_RAW, 0), allow);
            assert_eq!(
                socket(
                    f,
                    libc::AF_NETLINK,
                    libc::SOCK_DGRAM,
                    libc::NETLINK_KOBJECT_UEVENT
                ),
                eacces
            );
            for d in [
                libc::AF_VSOCK,
                libc::AF_PACKET,
                libc::AF_XDP,
                libc::AF_BLUETOOTH,
            ] {
                assert_eq!(socket(f, d, libc::SOCK_STREAM, 0), eacces, "{d}");
            }
            for n in [libc::SYS_listen, libc::SYS_accept, libc::SYS_accept4] {
                assert_eq!(run(f, nr(n), AUDIT_ARCH, 3), eacces);
            }
            let bind = |len: u64| run_args(f, nr(libc::SYS_bind), AUDIT_ARCH, &[3, 0, len]);
            let inet = std::mem::size_of::<libc::sockaddr_in>() as u64;
            let inet6 = std::mem::size_of::<libc::sockaddr_in6>() as u64;
            let storage = std::mem::size_of::<libc::sockaddr_storage>() as u64;
            for len in [inet, 24, inet6, storage, u64::from(u32::MAX)] {
                assert_eq!(bind(len), eacces, "bind with {len} bytes");
            }
            let netlink = std::mem::size_of::<libc::sockaddr_nl>() as u64;
            for len in [2, netlink, inet - 1] {
                assert_eq!(bind(len), allow, "bind with {len} bytes");
            }
        }
        let pair = |f: &[libc::sock_filter], d: i32, t: i32| {
            run_args(
                f,
                nr(libc::SYS_socketpair),
                AUDIT_ARCH,
                &[d as u64, t as u64, 0],
            )
        };
        let cloexec = libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
        assert_eq!(
            pair(&strict, libc::AF_UNIX, libc::SOCK_STREAM | cloexec),
            allow
        );
        assert_eq!(pair(&strict, libc::AF_UNIX, libc::SOCK_SEQPACKET), allow);
        assert_eq!(pair(&strict, libc::AF_UNIX, libc::SOCK_DGRAM), eacces);
        assert_eq!(pair(&strict, libc::AF_INET, libc::SOCK_STREAM), eacces);
        assert_eq!(pair(&open, libc::AF_UNIX, libc::SOCK_DGRAM), allow);
        for n in [libc::SYS_execve, libc::SYS_execveat] {
            assert_eq!(run(&strict, nr(n), AUDIT_ARCH, 0), SECCOMP_RET_USER_NOTIF);
            assert_eq!(run(&open, nr(n), AUDIT_ARCH, 0), allow);
        }
        for f in [&strict, &open] {
            let seccomp = |flags: u32| {
                run_args(
                    f,
                    nr(libc::SYS_seccomp),
                    AUDIT_ARCH,
                    &[SECCOMP_SET_MODE_FILTER as u64, flags as u64, 0],
                )
            };
            assert_eq!(seccomp(0), allow);
            assert_eq!(
                seccomp(SECCOMP_FILTER_FLAG_NEW_LISTENER),
                errno(libc::EPERM)
            );
        }
    }
}
