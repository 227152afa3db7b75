//! What a run leaves on the host, and its removal.
//!
//! A run makes two kinds of host objects: its scratch directory (the empty directory its new
//! root is mounted on, in the sandbox's own mount namespace), named
//! `.capability-sandbox-<pid>-<n>` in the scratch base, and its per-run cgroups (one
//! directory per hierarchy), named `capability-sandbox-<pid>-<n>` under the cgroup parent,
//! `<pid>` being the owning process. They are removed:
//!
//! * when the run ends, by their owners (`MountDir`, `RunCgroup`), before the run's result is
//!   returned: [`remove_cgroup`] waits for the cgroup to empty (killing what is left after a
//!   moment) and [`remove_scratch`] detaches anything mounted on the directory;
//! * at process exit, for runs still in flight (a session or child left open, a process that
//!   calls `exit` while a run goes on): every object is [`Live`] while its owner holds it, and an
//!   `atexit` handler kills what is left in live cgroups and removes them and the live scratch
//!   directories;
//! * when a sandbox starts ([`sweep`]), for runs of processes that died without either (a
//!   crash, `SIGKILL`): objects named for a pid that no process has any more. A live process's
//!   objects, this process's included, are never touched.

use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

use super::sys;

/// The name of a scratch directory (in the scratch base).
pub(crate) const SCRATCH_PREFIX: &str = ".capability-sandbox-";
/// The name of a per-run cgroup (under the cgroup parent).
pub(crate) const CGROUP_PREFIX: &str = "capability-sandbox-";

/// How long a run's end waits for its cgroup to empty before it kills what is left in it.
pub(crate) const KILL_AFTER: Duration = Duration::from_millis(500);
/// How long a run's end tries to remove its cgroup.
pub(crate) const RUN_BUDGET: Duration = Duration::from_secs(5);
/// How long the exit handler and a start's sweep spend in all.
const EXIT_BUDGET: Duration = Duration::from_secs(3);
const SWEEP_BUDGET: Duration = Duration::from_secs(3);

/// `<prefix><pid>-<n>`.
pub(crate) fn run_name(prefix: &str, pid: u32, n: u64) -> String {
    format!("{prefix}{pid}-{n}")
}

/// The owning pid of a run's name: `<prefix><pid>-<n>`, both decimal.
pub(crate) fn owner_of(name: &str, prefix: &str) -> Option<u32> {
    let (pid, n) = name.strip_prefix(prefix)?.split_once('-')?;
    let decimal = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !decimal(pid) || !decimal(n) {
        return None;
    }
    pid.parse().ok().filter(|&p| p > 0)
}

/// Whether a process with this pid exists (in this pid namespace). A pid that may not be
/// signalled (another user's) exists; a pid beyond `pid_t` does not.
fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 sends nothing; it only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

fn is_busy(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::ENOTEMPTY))
}

/// Removes a run's scratch directory: an empty directory, nothing else (never a symlink's
/// target, never a directory that holds files). Whatever is mounted on it in this mount
/// namespace (nothing, normally: the sandbox mounts in its own) is detached first.
pub(crate) fn remove_scratch(path: &Path) -> io::Result<()> {
    let mut pause = Duration::from_millis(1);
    for _ in 0..20 {
        match std::fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                // A mount point: detach (lazily: it may be in use) and try again.
                let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
                    return Err(e);
                };
                // SAFETY: a valid NUL-terminated path; UMOUNT_NOFOLLOW never follows a symlink.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) };
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    }
    std::fs::remove_dir(path)
}

/// Removes a per-run cgroup (and any cgroup below it). A cgroup cannot be removed while a
/// process is in it: this waits for the run's processes to be gone (the kernel may still be
/// tearing the sandbox down), kills what is still there after `kill_after`, and retries until
/// `budget` is spent.
pub(crate) fn remove_cgroup(dir: &Path, kill_after: Duration, budget: Duration) -> io::Result<()> {
    remove_cgroup_at(dir, kill_after, Instant::now() + budget, 0)
}

fn remove_cgroup_at(
    dir: &Path,
    kill_after: Duration,
    deadline: Instant,
    depth: u32,
) -> io::Result<()> {
    let start = Instant::now();
    let mut killed = false;
    let mut pause = Duration::from_millis(1);
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if is_busy(&e) => {
                // Child cgroups first (a cgroup's directory holds only its control files and
                // its children).
                if depth < 8 {
                    for child in subdirectories(dir) {
                        let _ = remove_cgroup_at(&child, kill_after, deadline, depth + 1);
                    }
                }
                if Instant::now() >= deadline {
                    return Err(e);
                }
                if !killed && start.elapsed() >= kill_after {
                    kill_members(dir);
                    killed = true;
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    }
}

fn subdirectories(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Kills every process in a cgroup: `cgroup.kill` (cgroup v2, Linux 5.14+), else each pid
/// of `cgroup.procs`, through a pidfd opened first and only once the process is seen to be a
/// member (so that a pid reused meanwhile is never signalled).
fn kill_members(dir: &Path) {
    // Never created: only a cgroup v2 directory has it.
    let kill = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.kill"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"1"));
    if kill.is_ok() {
        return;
    }
    let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
        return;
    };
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs
        .lines()
        .filter_map(|l| l.trim().parse::<libc::pid_t>().ok())
    {
        let Ok(pidfd) = sys::pidfd_open(pid) else {
            continue;
        };
        let member = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .is_ok_and(|c| c.lines().any(|l| l.split('/').any(|part| part == name)));
        if member {
            let _ = sys::pidfd_send_signal(std::os::fd::AsRawFd::as_raw_fd(&pidfd), libc::SIGKILL);
        }
    }
}

/// A host object of a run in flight, removed at process exit unless its owner removed it
/// first (dropping this says it has).
pub(crate) struct Live(u64);

#[derive(Clone)]
enum Object {
    Scratch(PathBuf),
    Cgroup(PathBuf),
}

struct Entry {
    id: u64,
    /// The process that made it (a forked copy of this process does not remove it at its exit).
    pid: u32,
    object: Object,
}

static LIVE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

impl Live {
    pub(crate) fn scratch(path: &Path) -> Live {
        Live::register(Object::Scratch(path.to_path_buf()))
    }

    pub(crate) fn cgroup(dir: &Path) -> Live {
        Live::register(Object::Cgroup(dir.to_path_buf()))
    }

    fn register(object: Object) -> Live {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            // SAFETY: registers a handler with C linkage that takes no argument; it never
            // unwinds (see `at_exit`).
            unsafe { libc::atexit(at_exit) };
        });
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        LIVE.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Entry {
                id,
                pid: std::process::id(),
                object,
            });
        Live(id)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|e| e.id != self.0);
    }
}

/// At process exit (`exit`, or `main` returning): the runs still in flight end now rather
/// than with the process (their cgroups' processes are killed), and their cgroups and scratch
/// directories are removed: a thread that would have done it does not get to run again.
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let me = std::process::id();
        let objects: Vec<Object> =
            std::mem::take(&mut *LIVE.lock().unwrap_or_else(PoisonError::into_inner))
                .into_iter()
                .filter(|e| e.pid == me)
                .map(|e| e.object)
                .collect();
        let deadline = Instant::now() + EXIT_BUDGET;
        for object in &objects {
            if let Object::Cgroup(dir) = object {
                kill_members(dir);
            }
        }
        for object in &objects {
            if let Object::Cgroup(dir) = object {
                let _ = remove_cgroup_at(dir, Duration::ZERO, deadline, 0);
            }
        }
        for object in &objects {
            if let Object::Scratch(path) = object {
                let _ = remove_scratch(path);
            }
        }
    });
}

/// What a sweep looks for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leftover {
    /// Scratch directories in a scratch base.
    Scratch,
    /// Per-run cgroups under a cgroup parent.
    Cgroup,
}

/// Removes, from `dir`, the objects of runs whose owning process no longer exists: scratch
/// directories that are empty directories owned by this user, and cgroups (whose remaining
/// processes, if any, are killed first). Names of this process and of any existing process
/// are kept, as is everything not named like a run's object. Returns what was removed.
pub(crate) fn sweep(dir: &Path, kind: Leftover) -> Vec<PathBuf> {
    let prefix = match kind {
        Leftover::Scratch => SCRATCH_PREFIX,
        Leftover::Cgroup => CGROUP_PREFIX,
    };
    let me = std::process::id();
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    let deadline = Instant::now() + SWEEP_BUDGET;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        if Instant::now() >= deadline {
            break;
        }
        let name = entry.file_name();
        let Some(owner) = name.to_str().and_then(|n| owner_of(n, prefix)) else {
            continue;
        };
        if owner == me || process_exists(owner) {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() {
            continue;
        }
        let gone = match kind {
            Leftover::Scratch => meta.uid() == euid && remove_scratch(&path).is_ok(),
            Leftover::Cgroup => {
                let budget = deadline.saturating_duration_since(Instant::now());
                remove_cgroup(&path, Duration::ZERO, budget).is_ok()
            }
        };
        if gone {
            removed.push(path);
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_names_and_their_owners() {
        assert_eq!(run_name(SCRATCH_PREFIX, 42, 7), ".capability-sandbox-42-7");
        assert_eq!(
            owner_of(".capability-sandbox-42-7", SCRATCH_PREFIX),
            Some(42)
        );
        assert_eq!(owner_of("capability-sandbox-42-7", CGROUP_PREFIX), Some(42));
        for bad in [
            "capability-sandbox-42",
            "capability-sandbox-42-",
            "capability-sandbox--7",
            "capability-sandbox-0-7",
            "capability-sandbox-4x-7",
            "capability-sandbox-42-7-1",
            "capability-sandbox-tests-42",
            "capability-sandbox-99999999999999999999-1",
            "other-42-7",
        ] {
            assert_eq!(owner_of(bad, CGROUP_PREFIX), None, "{bad}");
        }
        // The scratch prefix is the cgroup one with a dot: one never reads as the other.
        assert_eq!(owner_of(".capability-sandbox-42-7", CGROUP_PREFIX), None);
        assert_eq!(owner_of("capability-sandbox-42-7", SCRATCH_PREFIX), None);
    }

    #[test]
    fn this_process_exists_and_an_impossible_pid_does_not() {
        assert!(process_exists(std::process::id()));
        assert!(!process_exists(u32::MAX));
    }
}
