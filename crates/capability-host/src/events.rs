//! Approval changes as a stream ([`Host::approval_events`](crate::Host::approval_events)):
//! every approval created or updated — by this process or by another one on the same home
//! (`cap exec` in a terminal, the MCP server) — is sent once to every subscriber, in the
//! order the store recorded it. The console's live page and the webhook consume it.
//!
//! Nothing polls. The stores keep a log of changes ([`ApprovalStore::approval_changes`]);
//! a watcher thread, started at the first subscription, reads it when woken: by this
//! process's own writes (the host's approval store tells it) and, for a home on disk, by
//! inotify when another process writes the database. Wake-ups that come in a burst are read
//! together (a pause of [`COALESCE`]).

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use capability_policy::ApprovalStatus;
use capability_policy::approvals::{ApprovalFilter, ApprovalRecord, ApprovalStore};
use capability_policy::store::StoreError;
use tokio::sync::broadcast;

/// How long the watcher waits after a wake-up for more, before reading the changes.
pub const COALESCE: Duration = Duration::from_millis(10);

/// One approval created or updated.
#[derive(Clone, Debug, PartialEq)]
pub struct ApprovalChange {
    /// Its position in the store's change log.
    pub position: u64,
    /// The approval as it is now.
    pub record: ApprovalRecord,
}

/// A subscription to approval changes (a Tokio broadcast receiver: `recv().await`, or
/// `blocking_recv()` off a runtime). A subscriber that falls more than 1024 changes behind
/// is told how many it missed (`RecvError::Lagged`).
pub type ApprovalEvents = broadcast::Receiver<ApprovalChange>;

/// An eventfd that wakes the watcher.
#[derive(Debug)]
struct Wake(OwnedFd);

impl Wake {
    fn new() -> std::io::Result<Wake> {
        use rustix::event::{EventfdFlags, eventfd};
        Ok(Wake(eventfd(
            0,
            EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
        )?))
    }

    fn notify(&self) {
        let _ = rustix::io::write(&self.0, &1u64.to_ne_bytes());
    }

    /// Whether it was notified (and clears it).
    fn drain(&self) -> bool {
        let mut buf = [0u8; 8];
        rustix::io::read(&self.0, &mut buf).is_ok_and(|n| n == 8)
    }
}

/// The approval store of a host, telling the watcher of every change it makes.
pub(crate) struct Observed {
    inner: Arc<dyn ApprovalStore>,
    feed: Arc<Feed>,
}

impl Observed {
    pub(crate) fn new(inner: Arc<dyn ApprovalStore>, feed: Arc<Feed>) -> Self {
        Observed { inner, feed }
    }
}

impl ApprovalStore for Observed {
    fn insert_approval(&self, record: &ApprovalRecord) -> Result<(), StoreError> {
        self.inner.insert_approval(record)?;
        self.feed.poke();
        Ok(())
    }
    fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        self.inner.get_approval(id)
    }
    fn list_approvals(&self, filter: &ApprovalFilter) -> Result<Vec<ApprovalRecord>, StoreError> {
        self.inner.list_approvals(filter)
    }
    fn list_approvals_checked(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<(Vec<ApprovalRecord>, Vec<String>), StoreError> {
        self.inner.list_approvals_checked(filter)
    }
    fn update_approval(
        &self,
        record: &ApprovalRecord,
        expected: ApprovalStatus,
    ) -> Result<bool, StoreError> {
        let changed = self.inner.update_approval(record, expected)?;
        if changed {
            self.feed.poke();
        }
        Ok(changed)
    }
    fn approval_changes(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, ApprovalRecord)>, StoreError> {
        self.inner.approval_changes(after, limit)
    }
    fn approval_change_head(&self) -> Result<u64, StoreError> {
        self.inner.approval_change_head()
    }
}

/// The feed of a host's approval changes (see the module docs).
pub(crate) struct Feed {
    tx: broadcast::Sender<ApprovalChange>,
    /// The watcher's wake-up, once it runs.
    wake: OnceLock<Option<Arc<Wake>>>,
    stop: Arc<AtomicBool>,
    /// The home directory to watch (a home on disk).
    dir: Option<PathBuf>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed").field("dir", &self.dir).finish()
    }
}

impl Feed {
    pub(crate) fn new(dir: Option<PathBuf>) -> Arc<Feed> {
        let (tx, _) = broadcast::channel(1024);
        Arc::new(Feed {
            tx,
            wake: OnceLock::new(),
            stop: Arc::new(AtomicBool::new(false)),
            dir,
        })
    }

    fn poke(&self) {
        if let Some(Some(wake)) = self.wake.get() {
            wake.notify();
        }
    }

    /// Subscribes, starting the watcher over `store` on the first subscription.
    pub(crate) fn subscribe(&self, store: &Arc<dyn ApprovalStore>) -> ApprovalEvents {
        let rx = self.tx.subscribe();
        self.wake.get_or_init(|| self.start(Arc::clone(store)));
        rx
    }

    fn start(&self, store: Arc<dyn ApprovalStore>) -> Option<Arc<Wake>> {
        let wake = Arc::new(Wake::new().ok()?);
        let watch = self.dir.as_deref().and_then(|d| watch_database(d).ok());
        let position = store.approval_change_head().unwrap_or(0);
        let watcher = Watcher {
            store,
            tx: self.tx.clone(),
            wake: Arc::clone(&wake),
            inotify: watch,
            stop: Arc::clone(&self.stop),
            position,
        };
        std::thread::Builder::new()
            .name("capability-approval-feed".into())
            .spawn(move || watcher.run())
            .ok()?;
        Some(wake)
    }

    /// Stops the watcher (the host is dropped).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.poke();
    }
}

/// An inotify descriptor watching the home directory for writes to the database.
fn watch_database(dir: &Path) -> std::io::Result<OwnedFd> {
    use rustix::fs::inotify::{CreateFlags, WatchFlags, add_watch, init};
    let fd = init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
    add_watch(
        &fd,
        dir,
        WatchFlags::MODIFY | WatchFlags::CLOSE_WRITE | WatchFlags::MOVED_TO | WatchFlags::CREATE,
    )?;
    Ok(fd)
}

/// Whether the inotify descriptor has an event for the database (reads them all).
fn database_written(fd: &impl AsFd) -> bool {
    use std::mem::MaybeUninit;
    let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
    let mut written = false;
    let mut reader = rustix::fs::inotify::Reader::new(fd, &mut buf);
    while let Ok(event) = reader.next() {
        let name = event.file_name().map(|n| n.to_bytes());
        if name.is_some_and(|n| n.starts_with(capability_exec::home::Home::DATABASE.as_bytes())) {
            written = true;
        }
    }
    written
}

struct Watcher {
    store: Arc<dyn ApprovalStore>,
    tx: broadcast::Sender<ApprovalChange>,
    wake: Arc<Wake>,
    inotify: Option<OwnedFd>,
    stop: Arc<AtomicBool>,
    position: u64,
}

impl Watcher {
    fn run(mut self) {
        use rustix::event::{PollFd, PollFlags, poll};
        loop {
            {
                let mut fds = vec![PollFd::new(&self.wake.0, PollFlags::IN)];
                if let Some(i) = &self.inotify {
                    fds.push(PollFd::new(i, PollFlags::IN));
                }
                if poll(&mut fds, None).is_err() {
                    // Interrupted: look again.
                    continue;
                }
            }
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            std::thread::sleep(COALESCE);
            let poked = self.wake.drain();
            let written = self.inotify.as_ref().is_some_and(database_written);
            if poked || written {
                self.publish();
            }
        }
    }

    /// Sends every change after the last one sent.
    fn publish(&mut self) {
        loop {
            let Ok(changes) = self.store.approval_changes(self.position, 256) else {
                return;
            };
            let n = changes.len();
            for (position, record) in changes {
                self.position = position;
                // Nobody listening now is not an error: later subscribers start after it.
                let _ = self.tx.send(ApprovalChange { position, record });
            }
            if n < 256 {
                return;
            }
        }
    }
}
