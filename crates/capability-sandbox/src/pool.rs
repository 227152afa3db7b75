//! Pre-started, single-use sandboxes (see [`SandboxPool`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capability_exec::{Grants, Limits};

use crate::process::ProcessSandbox;
use crate::session::Session;
use crate::stamp::FileStamp;
use crate::types::{ModuleKind, ModuleSpec, ProcessLimits};

/// What a spare was started for.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Key {
    module: String,
    grants: Grants,
    limits: Limits<ProcessLimits>,
}

impl Key {
    fn of(spec: &ModuleSpec, grants: &Grants, limits: &Limits<ProcessLimits>) -> Key {
        Key {
            module: format!(
                "{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}",
                spec.package_root.display(),
                spec.install_root
                    .as_deref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                spec.module,
                spec.integrity.as_deref().unwrap_or_default(),
                capability_core::json::canonical_hash(&spec.manifest)
            ),
            grants: grants.clone(),
            limits: limits.clone(),
        }
    }
}

/// The module file as it was on disk.
fn stamp(spec: &ModuleSpec) -> Option<FileStamp> {
    FileStamp::of(&spec.package_root.join(&spec.module))
}

struct Spare {
    key: Key,
    stamp: Option<FileStamp>,
    session: Session,
}

/// A pool of pre-started, single-use sandboxes for long-running hosts (the MCP server, the
/// gateway, the HTTP server).
///
/// Starting a sandbox and an interpreter in it (namespaces, mounts, landlock, seccomp, then
/// node or python) is most of a module run. A spare is a session started ahead
/// ([`Session::prestart`]): its interpreter is up behind the boundary and waits on stdin, before
/// it has read a request or imported the module. A native module's spare is its program
/// started behind the boundary (its own start-up runs, with no grants and no input, under
/// the spare's limits: CPU time, memory and processes count from the start, the wall clock
/// from the request) and waiting on stdin for its one request; it exits with its answer, so
/// it serves that one op, and a native module keeps a spare per op of a run (`plan`,
/// `execute`, `verify`) waiting. A run that needs **no grants** claims the
/// spare started for the same module with the same limits; the next spare is started when
/// that run ends and no spare has been claimed for [`QUIET`] (so that its start does not
/// compete with runs under way for the CPU). The rules:
///
/// * **Single use.** A claimed spare serves one run (its plan, execute and verify, as any
///   session) and is then closed and destroyed; nothing crosses from one run to the next.
/// * **No grants.** Only grant-less runs are pooled: a spare is started with no effect
///   granted, and a run whose `execute` needs grants starts a fresh sandbox with them (as it
///   does without the pool).
/// * **Same limits.** A spare is claimed only by a run with exactly the limits it was started
///   with; the run's wall clock starts when its request is sent.
/// * **Same module.** A spare is keyed by package root, module, integrity and manifest, and
///   claimed only while the module file is the one it was started for (device, inode, size,
///   modification and change times); the module's integrity was checked when it started.
/// * A spare whose process ended (killed from outside, say) is dropped, not claimed. At most
///   [`SandboxPool::capacity`] spares wait; the oldest is closed first.
pub struct SandboxPool {
    capacity: usize,
    spares: Arc<Mutex<Vec<Spare>>>,
    /// When a spare was last claimed: replacements wait for a quiet moment.
    last_claim: Arc<Mutex<Instant>>,
}

/// How long no spare must have been claimed before a replacement starts: a native module's
/// run takes a spare per op, and replacements started in between would compete with the
/// run's next ops (or, for any module, other runs under way) for the CPU.
const QUIET: Duration = Duration::from_millis(50);

impl std::fmt::Debug for SandboxPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxPool")
            .field("capacity", &self.capacity)
            .field("waiting", &self.waiting())
            .finish()
    }
}

impl SandboxPool {
    /// A pool of at most `capacity` waiting spares.
    pub fn new(capacity: usize) -> SandboxPool {
        SandboxPool {
            capacity: capacity.max(1),
            spares: Arc::new(Mutex::new(Vec::new())),
            last_claim: Arc::new(Mutex::new(Instant::now())),
        }
    }

    /// The most spares that wait at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many spares wait now.
    pub fn waiting(&self) -> usize {
        self.spares.lock().map_or(0, |s| s.len())
    }

    /// A session for a grant-less run: the spare started for this module and these limits
    /// (the next spare is started when the run's session closes), or `None` when there is
    /// none yet (then one is started now, and the caller starts its own session).
    pub(crate) fn claim(
        &self,
        sandbox: &'static ProcessSandbox,
        spec: &ModuleSpec,
        grants: &Grants,
        limits: &Limits<ProcessLimits>,
    ) -> Option<Session> {
        // An installed package that is no longer what was installed is not run from a spare
        // either: without one, the run starts its own sandbox, which refuses it by name.
        if capability_exec::installed::check_installed(&spec.package_root).is_err() {
            return None;
        }
        let key = Key::of(spec, grants, limits);
        let now = stamp(spec);
        let (claimed, stale) = {
            let mut spares = self.spares.lock().ok()?;
            // Spares whose process ended, or whose module file changed, are dropped (closing
            // one waits for its sandbox to be gone: not while the pool is locked).
            let mut stale = Vec::new();
            for mut s in std::mem::take(&mut *spares) {
                if s.session.is_waiting() && (s.key != key || (now.is_some() && s.stamp == now)) {
                    spares.push(s);
                } else {
                    stale.push(s);
                }
            }
            let claimed = spares
                .iter()
                .position(|s| s.key == key)
                .map(|i| spares.remove(i).session);
            (claimed, stale)
        };
        drop(stale);
        if let Ok(mut last) = self.last_claim.lock() {
            *last = Instant::now();
        }
        let refill = self.refill(sandbox, spec, key, now);
        match claimed {
            Some(mut session) => {
                let last_claim = Arc::clone(&self.last_claim);
                session.set_pooled(Box::new(move || refill.start_when_quiet(last_claim)));
                Some(session)
            }
            None => {
                refill.start_wanted();
                None
            }
        }
    }

    /// How many spares a module keeps waiting: one for node and python (a run's ops share
    /// one session), one per op of a run for a native module (its program answers one op:
    /// `plan`, `execute` and `verify` each take a spare); never more than the capacity.
    fn wanted(capacity: usize, spec: &ModuleSpec) -> usize {
        let per_run = if ModuleKind::of(&spec.module) == ModuleKind::Native {
            3
        } else {
            1
        };
        per_run.min(capacity)
    }

    /// Starts a spare for `spec` with these grants and limits now, ahead of its first run
    /// (a long-running surface warming the modules it serves).
    pub(crate) fn prestart(
        &self,
        sandbox: &'static ProcessSandbox,
        spec: &ModuleSpec,
        grants: &Grants,
        limits: &Limits<ProcessLimits>,
    ) {
        self.refill(sandbox, spec, Key::of(spec, grants, limits), stamp(spec))
            .start_wanted();
    }

    fn refill(
        &self,
        sandbox: &'static ProcessSandbox,
        spec: &ModuleSpec,
        key: Key,
        stamp: Option<FileStamp>,
    ) -> Refill {
        Refill {
            spares: Arc::clone(&self.spares),
            capacity: self.capacity,
            sandbox,
            spec: spec.clone(),
            key,
            stamp,
        }
    }
}

/// Starting the next spare of a module.
#[derive(Clone)]
struct Refill {
    spares: Arc<Mutex<Vec<Spare>>>,
    capacity: usize,
    sandbox: &'static ProcessSandbox,
    spec: ModuleSpec,
    key: Key,
    stamp: Option<FileStamp>,
}

impl Refill {
    /// Starts as many spares as the module keeps waiting, less those that wait already.
    fn start_wanted(self) {
        let wanted = SandboxPool::wanted(self.capacity, &self.spec);
        let waiting = self
            .spares
            .lock()
            .map_or(0, |s| s.iter().filter(|s| s.key == self.key).count());
        for _ in waiting..wanted {
            self.clone().start();
        }
    }

    /// Starts the spare from a thread of its own once no spare was claimed for [`QUIET`].
    fn start_when_quiet(self, last_claim: Arc<Mutex<Instant>>) {
        let waiting = std::thread::Builder::new()
            .name("sandbox-refill".into())
            .spawn(move || {
                loop {
                    let since = last_claim.lock().map_or(QUIET, |t| t.elapsed());
                    if since >= QUIET {
                        break;
                    }
                    std::thread::sleep(QUIET - since);
                }
                self.start();
            });
        // Without a thread, the next run starts its own sandbox, as without a pool.
        drop(waiting);
    }

    fn start(self) {
        if self.stamp.is_none() {
            return;
        }
        let Ok(session) =
            Session::prestart(self.sandbox, &self.spec, &self.key.grants, &self.key.limits)
        else {
            return;
        };
        let oldest = {
            let Ok(mut spares) = self.spares.lock() else {
                return;
            };
            let oldest = (spares.len() >= self.capacity).then(|| spares.remove(0));
            spares.push(Spare {
                key: self.key,
                stamp: self.stamp,
                session,
            });
            oldest
        };
        // Closed once the pool is unlocked (closing waits for the sandbox to be gone).
        drop(oldest);
    }
}
