//! Per-run host state and the WASI preview 1 interposition that enforces the scratch quota
//! and the wall-clock deadline inside host calls.
//!
//! wasmtime-wasi's preview 1 has no virtual filesystem hook, so the `/tmp` quota is enforced
//! by wrapping the calls that can grow a directory tree. The wrappers shadow the stock
//! `wasi_snapshot_preview1` functions in the [`Linker`] and delegate to wasmtime-wasi's own
//! implementation after their checks:
//!
//! * a shadow table tracks which descriptors live under the scratch `/tmp` (its preopen, and
//!   everything `path_open`ed from such a descriptor; `fd_renumber` and `fd_close` update it);
//! * `fd_write`, `fd_pwrite`, `fd_allocate`, `fd_filestat_set_size` on such a descriptor, and
//!   `path_open(O_CREAT)`, `path_create_directory`, `path_symlink`, `path_link` into `/tmp`
//!   are pre-checked against the remaining quota and refused with `EDQUOT` (disk quota
//!   exceeded) before anything is written; usage is re-measured (a walk of the directory:
//!   file sizes plus [`ENTRY_COST`] per entry) whenever the cheap running estimate says the
//!   quota would be exceeded, so deletes free space;
//! * `path_link` and `path_rename` across the `/tmp` boundary fail with `EXDEV`, as across a
//!   mount point, so nothing can be moved in or out behind the accounting;
//! * after a link, rename or truncate inside `/tmp` usage is measured exactly, and a tree
//!   over quota traps the guest (a backstop: the pre-checks should make it unreachable).
//!
//! `poll_oneoff` is wrapped because a host call is not interrupted by epochs: a guest that
//! asks to sleep past its deadline is stopped at once with a timeout.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use wasmtime::{AsContextMut, Caller, Extern, Linker, Memory, ResourceLimiter};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p1::wasi_snapshot_preview1 as p1;
use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1 as _;
use wasmtime_wasi::runtime::in_tokio;
use wiggle::GuestMemory;

use crate::error::WasmErrorKind;

/// Bytes charged for every file, directory or link in the scratch directory, so that a guest
/// cannot exhaust inodes with empty files.
pub const ENTRY_COST: u64 = 512;

const MODULE: &str = "wasi_snapshot_preview1";
const ERRNO_DQUOT: i32 = 19;
const ERRNO_XDEV: i32 = 75;
const OFLAGS_CREAT: i32 = 1;

/// A host-side decision to stop the guest, carried through wasmtime as the trap's error.
#[derive(Debug)]
pub(crate) struct Stop {
    pub kind: WasmErrorKind,
    pub message: String,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Stop {}

fn stop(kind: WasmErrorKind, message: String) -> wasmtime::Error {
    wasmtime::Error::new(Stop { kind, message })
}

/// The private scratch `/tmp` of one run and its accounting.
pub(crate) struct Scratch {
    pub root: PathBuf,
    pub quota: u64,
    /// An upper bound of the bytes in use (exact after each measurement).
    pub usage: u64,
    /// Descriptors that refer to something under `/tmp`.
    pub fds: HashSet<u32>,
    /// Set once the quota refused something.
    pub hit: bool,
    /// Set before any call that can create an entry under `/tmp` (open with `O_CREAT`,
    /// mkdir, symlink, link, rename): while false the directory is still empty.
    pub touched: bool,
}

impl Scratch {
    pub fn new(root: PathBuf, quota: u64, preopen_fd: u32) -> Self {
        Scratch {
            root,
            quota,
            usage: 0,
            fds: HashSet::from([preopen_fd]),
            hit: false,
            touched: false,
        }
    }

    fn contains(&self, fd: i32) -> bool {
        u32::try_from(fd).is_ok_and(|fd| self.fds.contains(&fd))
    }

    /// Exact usage: file sizes plus [`ENTRY_COST`] per entry, walked without recursion.
    fn measure(&self) -> std::io::Result<u64> {
        let mut total: u64 = 0;
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir)? {
                let entry = entry?;
                let meta = entry.metadata()?;
                total = total.saturating_add(ENTRY_COST);
                if meta.is_dir() {
                    stack.push(entry.path());
                } else {
                    total = total.saturating_add(meta.len());
                }
            }
        }
        Ok(total)
    }

    /// Whether `need` more bytes fit; re-measures before saying no.
    fn room_for(&mut self, need: u64) -> wasmtime::Result<bool> {
        if self.usage.saturating_add(need) <= self.quota {
            return Ok(true);
        }
        self.usage = self.measure_or_stop()?;
        let fits = self.usage.saturating_add(need) <= self.quota;
        if !fits {
            self.hit = true;
        }
        Ok(fits)
    }

    fn measure_or_stop(&mut self) -> wasmtime::Result<u64> {
        self.measure().map_err(|e| {
            self.hit = true;
            stop(
                WasmErrorKind::TmpQuota,
                format!("scratch /tmp could not be measured: {e}"),
            )
        })
    }

    /// Exact re-measure after a structural change; traps when over quota.
    fn settle(&mut self) -> wasmtime::Result<()> {
        self.usage = self.measure_or_stop()?;
        if self.usage > self.quota {
            self.hit = true;
            return Err(stop(
                WasmErrorKind::TmpQuota,
                format!(
                    "scratch /tmp quota of {} bytes exceeded ({} bytes in use)",
                    self.quota, self.usage
                ),
            ));
        }
        Ok(())
    }
}

/// Store data of one run.
pub(crate) struct RunState {
    pub wasi: WasiP1Ctx,
    pub memory_limit: usize,
    pub table_limit: usize,
    /// Set once a memory or table growth was refused.
    pub memory_hit: bool,
    pub scratch: Option<Scratch>,
    pub deadline: Instant,
}

impl ResourceLimiter for RunState {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let ok = desired <= self.memory_limit;
        if !ok {
            self.memory_hit = true;
        }
        Ok(ok)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let ok = desired <= self.table_limit;
        if !ok {
            self.memory_hit = true;
        }
        Ok(ok)
    }

    fn instances(&self) -> usize {
        1
    }

    fn tables(&self) -> usize {
        4
    }

    fn memories(&self) -> usize {
        1
    }
}

fn memory(caller: &mut Caller<'_, RunState>) -> wasmtime::Result<Memory> {
    match caller.get_export("memory") {
        Some(Extern::Memory(m)) => Ok(m),
        _ => wasmtime::bail!("missing required memory export"),
    }
}

/// Calls wasmtime-wasi's own implementation of a preview 1 function, exactly as its
/// generated linker glue does.
fn delegate<R>(
    caller: &mut Caller<'_, RunState>,
    f: impl FnOnce(&mut WasiP1Ctx, &mut GuestMemory<'_>) -> wasmtime::Result<R>,
) -> wasmtime::Result<R> {
    let fuel = caller.as_context_mut().hostcall_fuel();
    let mem = memory(caller)?;
    let (data, state) = mem.data_and_store_mut(caller);
    state.wasi.set_hostcall_fuel(fuel);
    f(&mut state.wasi, &mut GuestMemory::Unshared(data))
}

fn read_bytes<const N: usize>(data: &[u8], ptr: u64) -> Option<[u8; N]> {
    let start = usize::try_from(ptr).ok()?;
    data.get(start..start.checked_add(N)?)?.try_into().ok()
}

fn read_u32(data: &[u8], ptr: u64) -> Option<u32> {
    read_bytes::<4>(data, ptr).map(u32::from_le_bytes)
}

fn read_u64(data: &[u8], ptr: u64) -> Option<u64> {
    read_bytes::<8>(data, ptr).map(u64::from_le_bytes)
}

fn addr(ptr: i32) -> u64 {
    u64::from(ptr as u32)
}

/// Bytes preview 1's `fd_write` would write: its first non-empty iovec.
fn first_iov_len(caller: &mut Caller<'_, RunState>, iovs: i32, len: i32) -> wasmtime::Result<u64> {
    let mem = memory(caller)?;
    let data = mem.data(&*caller);
    for i in 0..u64::from(len as u32) {
        match read_u32(data, addr(iovs) + i * 8 + 4) {
            Some(0) => continue,
            Some(n) => return Ok(u64::from(n)),
            // Let wasmtime-wasi report the bad pointer.
            None => return Ok(0),
        }
    }
    Ok(0)
}

fn in_tmp(caller: &Caller<'_, RunState>, fd: i32) -> bool {
    caller
        .data()
        .scratch
        .as_ref()
        .is_some_and(|s| s.contains(fd))
}

fn touch(caller: &mut Caller<'_, RunState>, fd: i32) {
    if let Some(s) = caller.data_mut().scratch.as_mut()
        && s.contains(fd)
    {
        s.touched = true;
    }
}

/// Whether `need` bytes fit in the scratch quota (true when `fd` is not under `/tmp`).
fn room(caller: &mut Caller<'_, RunState>, fd: i32, need: u64) -> wasmtime::Result<bool> {
    match caller.data_mut().scratch.as_mut() {
        Some(s) if s.contains(fd) => s.room_for(need),
        _ => Ok(true),
    }
}

fn settle(caller: &mut Caller<'_, RunState>) -> wasmtime::Result<()> {
    match caller.data_mut().scratch.as_mut() {
        Some(s) => s.settle(),
        None => Ok(()),
    }
}

fn added(caller: &mut Caller<'_, RunState>, fd: i32, bytes: u64) {
    if let Some(s) = caller.data_mut().scratch.as_mut()
        && s.contains(fd)
    {
        s.usage = s.usage.saturating_add(bytes);
    }
}

/// Defines the interposed preview 1 functions over the stock ones already in `linker`.
pub(crate) fn add_interposition(linker: &mut Linker<RunState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);

    linker.func_wrap(
        MODULE,
        "fd_write",
        |mut c: Caller<'_, RunState>, fd: i32, iovs: i32, len: i32, nwritten: i32| {
            if in_tmp(&c, fd) {
                let need = first_iov_len(&mut c, iovs, len)?;
                if !room(&mut c, fd, need)? {
                    return Ok(ERRNO_DQUOT);
                }
            }
            let errno = delegate(&mut c, |ctx, m| {
                in_tokio(p1::fd_write(ctx, m, fd, iovs, len, nwritten))
            })?;
            if errno == 0 && in_tmp(&c, fd) {
                let need = first_iov_len(&mut c, iovs, len)?;
                added(&mut c, fd, need);
            }
            Ok(errno)
        },
    )?;

    linker.func_wrap(
        MODULE,
        "fd_pwrite",
        |mut c: Caller<'_, RunState>, fd: i32, iovs: i32, len: i32, off: i64, nwritten: i32| {
            let need = if in_tmp(&c, fd) {
                first_iov_len(&mut c, iovs, len)?
            } else {
                0
            };
            if !room(&mut c, fd, need)? {
                return Ok(ERRNO_DQUOT);
            }
            let errno = delegate(&mut c, |ctx, m| {
                in_tokio(p1::fd_pwrite(ctx, m, fd, iovs, len, off, nwritten))
            })?;
            if errno == 0 {
                added(&mut c, fd, need);
            }
            Ok(errno)
        },
    )?;

    linker.func_wrap(
        MODULE,
        "fd_allocate",
        |mut c: Caller<'_, RunState>, fd: i32, off: i64, len: i64| {
            let need = (off as u64).saturating_add(len as u64);
            if !room(&mut c, fd, need)? {
                return Ok(ERRNO_DQUOT);
            }
            delegate(&mut c, |ctx, m| p1::fd_allocate(ctx, m, fd, off, len))
        },
    )?;

    linker.func_wrap(
        MODULE,
        "fd_filestat_set_size",
        |mut c: Caller<'_, RunState>, fd: i32, size: i64| {
            if !room(&mut c, fd, size as u64)? {
                return Ok(ERRNO_DQUOT);
            }
            let errno = delegate(&mut c, |ctx, m| {
                in_tokio(p1::fd_filestat_set_size(ctx, m, fd, size))
            })?;
            if errno == 0 && in_tmp(&c, fd) {
                settle(&mut c)?;
            }
            Ok(errno)
        },
    )?;

    linker.func_wrap(
        MODULE,
        "path_open",
        |mut c: Caller<'_, RunState>,
         dirfd: i32,
         dirflags: i32,
         path: i32,
         path_len: i32,
         oflags: i32,
         base: i64,
         inheriting: i64,
         fdflags: i32,
         opened: i32| {
            let tmp = in_tmp(&c, dirfd);
            if tmp && oflags & OFLAGS_CREAT != 0 {
                if !room(&mut c, dirfd, ENTRY_COST)? {
                    return Ok(ERRNO_DQUOT);
                }
                touch(&mut c, dirfd);
            }
            let errno = delegate(&mut c, |ctx, m| {
                in_tokio(p1::path_open(
                    ctx, m, dirfd, dirflags, path, path_len, oflags, base, inheriting, fdflags,
                    opened,
                ))
            })?;
            if errno == 0 {
                let mem = memory(&mut c)?;
                let new_fd = read_u32(mem.data(&c), addr(opened));
                if let (Some(s), Some(fd)) = (c.data_mut().scratch.as_mut(), new_fd) {
                    if tmp {
                        s.fds.insert(fd);
                        if oflags & OFLAGS_CREAT != 0 {
                            s.usage = s.usage.saturating_add(ENTRY_COST);
                        }
                    } else {
                        s.fds.remove(&fd);
                    }
                }
            }
            Ok(errno)
        },
    )?;

    linker.func_wrap(
        MODULE,
        "fd_close",
        |mut c: Caller<'_, RunState>, fd: i32| {
            let errno = delegate(&mut c, |ctx, m| in_tokio(p1::fd_close(ctx, m, fd)))?;
            if errno == 0
                && let Some(s) = c.data_mut().scratch.as_mut()
            {
                s.fds.remove(&(fd as u32));
            }
            Ok(errno)
        },
    )?;

    linker.func_wrap(
        MODULE,
        "fd_renumber",
        |mut c: Caller<'_, RunState>, from: i32, to: i32| {
            let errno = delegate(&mut c, |ctx, m| in_tokio(p1::fd_renumber(ctx, m, from, to)))?;
            if errno == 0
                && let Some(s) = c.data_mut().scratch.as_mut()
            {
                let was_tmp = s.fds.remove(&(from as u32));
                if was_tmp {
                    s.fds.insert(to as u32);
                } else {
                    s.fds.remove(&(to as u32));
                }
            }
            Ok(errno)
        },
    )?;

    linker.func_wrap(
        MODULE,
        "path_create_directory",
        |mut c: Caller<'_, RunState>, fd: i32, path: i32, len: i32| {
            if !room(&mut c, fd, ENTRY_COST)? {
                return Ok(ERRNO_DQUOT);
            }
            touch(&mut c, fd);
            let errno = delegate(&mut c, |ctx, m| {
                in_tokio(p1::path_create_directory(ctx, m, fd, path, len))
            })?;
            if errno == 0 {
                added(&mut c, fd, ENTRY_COST);
            }
            Ok(errno)
        },
    )?;

    linker.func_wrap(
        MODULE,
        "path_symlink",
        |mut c: Caller<'_, RunState>, old: i32, old_len: i32, fd: i32, new: i32, new_len: i32| {
            if !room(&mut c, fd, ENTRY_COST)? {
                return Ok(ERRNO_DQUOT);
            }
            touch(&mut c, fd);
            let errno = delegate(&mut c, |ctx, m| {
                in_tokio(p1::path_symlink(ctx, m, old, old_len, fd, new, new_len))
            })?;
            if errno == 0 {
                added(&mut c, fd, ENTRY_COST);
            }
            Ok(errno)
        },
    )?;

    linker.func_wrap(
        MODULE,
        "path_link",
        |mut c: Caller<'_, RunState>,
         old_fd: i32,
         flags: i32,
         old: i32,
         old_len: i32,
         new_fd: i32,
         new: i32,
         new_len: i32| {
            if in_tmp(&c, old_fd) != in_tmp(&c, new_fd) {
                return Ok(ERRNO_XDEV);
            }
            if !room(&mut c, new_fd, ENTRY_COST)? {
                return Ok(ERRNO_DQUOT);
            }
            touch(&mut c, new_fd);
            let errno = delegate(&mut c, |ctx, m| {
                in_tokio(p1::path_link(
                    ctx, m, old_fd, flags, old, old_len, new_fd, new, new_len,
                ))
            })?;
            if errno == 0 && in_tmp(&c, new_fd) {
                settle(&mut c)?;
            }
            Ok(errno)
        },
    )?;

    linker.func_wrap(
        MODULE,
        "path_rename",
        |mut c: Caller<'_, RunState>,
         fd: i32,
         old: i32,
         old_len: i32,
         new_fd: i32,
         new: i32,
         new_len: i32| {
            if in_tmp(&c, fd) != in_tmp(&c, new_fd) {
                return Ok(ERRNO_XDEV);
            }
            touch(&mut c, new_fd);
            let errno = delegate(&mut c, |ctx, m| {
                in_tokio(p1::path_rename(
                    ctx, m, fd, old, old_len, new_fd, new, new_len,
                ))
            })?;
            if errno == 0 && in_tmp(&c, new_fd) {
                settle(&mut c)?;
            }
            Ok(errno)
        },
    )?;

    linker.func_wrap(
        MODULE,
        "poll_oneoff",
        |mut c: Caller<'_, RunState>, subs: i32, events: i32, n: i32, nevents: i32| {
            check_sleep(&mut c, subs, n)?;
            delegate(&mut c, |ctx, m| {
                in_tokio(p1::poll_oneoff(ctx, m, subs, events, n, nevents))
            })
        },
    )?;

    Ok(())
}

/// Refuses a `poll_oneoff` that can only return after the run's deadline: one made of clock
/// subscriptions only, the earliest of which is past the deadline.
fn check_sleep(caller: &mut Caller<'_, RunState>, subs: i32, n: i32) -> wasmtime::Result<()> {
    const SIZE: u64 = 48;
    let mem = memory(caller)?;
    let mut earliest: Option<u64> = None;
    for i in 0..u64::from(n as u32).min(4096) {
        let base = addr(subs) + i * SIZE;
        let data = mem.data(&*caller);
        let (Some(tag), Some(id), Some(timeout), Some(flags)) = (
            read_bytes::<1>(data, base + 8),
            read_u32(data, base + 16),
            read_u64(data, base + 24),
            read_bytes::<2>(data, base + 40).map(u16::from_le_bytes),
        ) else {
            return Ok(()); // wasmtime-wasi reports the bad pointer
        };
        if tag[0] != 0 {
            return Ok(()); // an fd subscription: files and memory pipes are always ready
        }
        let relative = if flags & 1 == 0 {
            timeout
        } else {
            let clock = match id {
                0 => wasmtime_wasi::p1::types::Clockid::Realtime,
                _ => wasmtime_wasi::p1::types::Clockid::Monotonic,
            };
            let now = delegate(caller, |ctx, m| {
                ctx.clock_time_get(m, clock, 0)
                    .map_err(|_| wasmtime::format_err!("clock unavailable"))
            })
            .unwrap_or(timeout);
            timeout.saturating_sub(now)
        };
        earliest = Some(earliest.map_or(relative, |e| e.min(relative)));
    }
    if let Some(ns) = earliest {
        let wait = Duration::from_nanos(ns);
        let left = caller
            .data()
            .deadline
            .saturating_duration_since(Instant::now());
        if wait > left {
            return Err(stop(
                WasmErrorKind::Timeout,
                format!(
                    "guest asked to sleep {:.3}s, past its deadline ({:.3}s left)",
                    wait.as_secs_f64(),
                    left.as_secs_f64()
                ),
            ));
        }
    }
    Ok(())
}
